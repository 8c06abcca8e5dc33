"""How llama.cpp splits text into words before BPE, per ``tokenizer.ggml.pre`` name.

llama.cpp applies a list of regexes in turn: each one cuts every piece the
previous left into its matches and the text between them. A ``Sequence`` of
``Split(..., "isolated")`` pre-tokenizers does the same. The regexes are
llama.cpp's own (its hand-written splitters for the GPT-2, Llama 3 and Qwen2
patterns match these spellings); ``$`` is spelled ``\\z`` because llama.cpp's
regex engine ends a match only at the end of the piece, never before a newline.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenizers import Regex, pre_tokenizers

from clika_export.checkpoint import CheckpointError
from clika_export.readers.gguf_file import GGUFMetadata

_CONTRACTIONS = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMA3 = (
    _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN35 = (
    _CONTRACTIONS
    + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Spelled as escapes: these ranges include characters that Unicode normalization would rewrite.
_DEEPSEEK_LETTERS = (
    "A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af"
    "\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5"
    "\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba"
    "\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45"
    "\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe"
    "\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc"
    "\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134"
    "\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee"
    "\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf"
    "\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"
    "\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df"
    "\U0001e900-\U0001e943"
)
_DEEPSEEK_PUNCTUATION = "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+"
_CJK_RUNS = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
_DIGITS_ALONE = r"\p{N}"


@dataclass(frozen=True)
class PreSplit:
    """llama.cpp's splitting for one pre-tokenizer type, and the BPE options that go with it."""

    regexes: tuple[str, ...]
    ignore_merges: bool = False  # a word that is a whole token is taken as is
    add_bos: bool = False  # llama.cpp's default when the file does not say


_DEFAULT = PreSplit((r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"))
_GPT2 = PreSplit((GPT2,))
_DIGITS_THEN_GPT2 = PreSplit((_DIGITS_ALONE, GPT2))
_LLAMA3 = PreSplit((LLAMA3,), ignore_merges=True, add_bos=True)
_QWEN2 = PreSplit((QWEN2,))

# tokenizer.ggml.pre -> splitting, grouped as llama.cpp groups the names.
PRE_SPLITS: dict[str, PreSplit] = {
    "default": _DEFAULT,
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"), _LLAMA3),
    "dbrx": PreSplit((LLAMA3,)),
    "smaug-bpe": PreSplit((LLAMA3,)),
    "deepseek-llm": PreSplit(
        (
            "[\r\n]",
            f"\\s?[{_DEEPSEEK_LETTERS}]+",
            _DEEPSEEK_PUNCTUATION,
            r"\s+\z",
            _CJK_RUNS,
            r"\p{N}+",
        )
    ),
    "deepseek-coder": PreSplit(("[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK_RUNS, _DIGITS_ALONE)),
    "falcon": PreSplit((r"[\p{P}\$\+<=>\^~\|`]+", GPT2, "[0-9][0-9][0-9]")),
    **dict.fromkeys(("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone"), _DIGITS_THEN_GPT2),
    **dict.fromkeys(("gpt-2", "gpt2", "phi-2", "mpt", "olmo", "jais", "trillion", "exaone4"), _GPT2),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "stablelm2", "megrez", "hunyuan"), _QWEN2),
    "qwen35": PreSplit((QWEN35,)),
    "chatglm-bpe": PreSplit((LLAMA3,)),
    "glm4": PreSplit((LLAMA3,), ignore_merges=True),
    "seed-coder": PreSplit(
        (
            _CONTRACTIONS
            + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+",
        )
    ),
}


def pre_split_for(meta: GGUFMetadata) -> PreSplit:
    """The splitting a byte-level BPE file names; a name llama.cpp's list has but we lack is refused by name."""
    name = meta.string("tokenizer.ggml.pre", "default") or "default"
    if name not in PRE_SPLITS:
        raise CheckpointError(
            f"{meta.source}: pre-tokenizer {name!r} (tokenizer.ggml.pre) is not supported; "
            f"supported: {', '.join(sorted(PRE_SPLITS))}"
        )
    return PRE_SPLITS[name]


def split_pre_tokenizer(regexes: tuple[str, ...]) -> list[pre_tokenizers.PreTokenizer]:
    return [pre_tokenizers.Split(Regex(pattern), behavior="isolated") for pattern in regexes]
