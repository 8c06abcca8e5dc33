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
_DEEPSEEK_LETTERS = (
    "A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼ"
    "ℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ"
    "𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃"
)
_CJK_RUNS = "[一-龥ࠀ-一가-퟿]+"
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
            "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
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
