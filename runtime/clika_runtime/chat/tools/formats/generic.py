"""The fallback format for templates whose call syntax no other format reads.

The tools block asks for hermes-style tags; replies are read in every
unambiguous way a small model tends to answer: ``<tool_call>`` tags, a
```json fence, or a bare call object at the start of the reply (the last two
only when the name is an offered tool). A required call is decoded in hermes's
tagged form, the one the tools block asks for.
"""

from __future__ import annotations

from dataclasses import replace

from clika_runtime.chat.tools.formats.hermes import FORMAT as HERMES

# Hermes's readings, tools block and call grammar under the fallback's name (see above).
FORMAT = replace(HERMES, name="generic", description="hermes tags, a ```json fence or a bare call object")


def detect(template_source: str) -> bool:
    """Always true: the format of last resort."""
    return True
