"""How llama.cpp splits text into words before BPE, per ``tokenizer.ggml.pre`` name.

llama.cpp applies a list of regexes in turn: each one cuts every piece the
previous left into its matches and the text between them. A ``Sequence`` of
``Split(..., "isolated")`` pre-tokenizers does the same. The regex lists are
llama.cpp's own (``llama_cpp_pre_regexes``); names whose splitting llama.cpp
hand-codes (kimi-k2, afmoe, tiny_aya, superbpe, whitespace) or that change
more than the splitting (gemma4 and sarvam-moe on a byte-level file, the
add_sep ones) are refused by name.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenizers import Regex, pre_tokenizers

from clika_export.checkpoint import CheckpointError
from clika_export.readers.gguf_file import GGUFMetadata
from clika_export.tokenizer_gguf.llama_cpp_pre_regexes import NAMES, REGEXES

# llama.cpp's split when the file names none (or "default").
DEFAULT_REGEXES = (
    r"[\p{P}\$\+<=>\^~\|]+",
    REGEXES["gpt2"][0],
    r"\p{N}+",
    "[0-9][0-9][0-9]",
)


@dataclass(frozen=True)
class PreSplit:
    """llama.cpp's splitting for one pre-tokenizer name, and the BPE options that go with it."""

    regexes: tuple[str, ...]
    ignore_merges: bool = False  # a word that is a whole token is taken as is
    add_bos: bool = False  # llama.cpp's default when the file does not say


def _pre_splits() -> dict[str, PreSplit]:
    table = {name: PreSplit(REGEXES[kind], ignore, bos) for name, (kind, ignore, bos) in NAMES.items()}
    table["default"] = PreSplit(DEFAULT_REGEXES)
    table["gpt2"] = table["gpt-2"]  # the spelling some converters wrote
    return table


PRE_SPLITS: dict[str, PreSplit] = _pre_splits()


def pre_split_for(meta: GGUFMetadata) -> PreSplit:
    """The splitting a byte-level BPE file names; a name not covered is refused with the list of those that are."""
    name = meta.string("tokenizer.ggml.pre", "default") or "default"
    if name not in PRE_SPLITS:
        raise CheckpointError(
            f"{meta.source}: pre-tokenizer {name!r} (tokenizer.ggml.pre) is not supported; "
            f"supported: {', '.join(sorted(PRE_SPLITS))}"
        )
    return PRE_SPLITS[name]


def split_pre_tokenizer(regexes: tuple[str, ...]) -> list[pre_tokenizers.PreTokenizer]:
    return [pre_tokenizers.Split(Regex(pattern), behavior="isolated") for pattern in regexes]
