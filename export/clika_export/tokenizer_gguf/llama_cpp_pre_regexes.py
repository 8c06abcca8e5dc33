"""llama.cpp's word-splitting regexes per pre-tokenizer type, and the ``tokenizer.ggml.pre`` names that pick them.

Copied as data from llama.cpp's vocabulary loader (types whose splitting is a plain regex list).
Two adjustments keep llama.cpp's behaviour under Oniguruma: ``\\p{Lu}``, ``\\p{Ll}`` and the other
letter subclasses are ``\\p{L}`` (llama.cpp folds them into one letter class), and a final ``$``
is ``\\z`` (llama.cpp's engine ends a match only at the end of the piece, never before a newline).
Characters outside ASCII are spelled as escapes: Unicode normalization would rewrite some of them.
"""

from __future__ import annotations

# type -> regexes, applied in turn
REGEXES: dict[str, tuple[str, ...]] = {
    "minicpm5": (
        "\\p{N}{1,3}",
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    "llama3": (
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    "deepseek_llm": (
        "[\r\n]",
        "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+",
        "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
        "\\s+\\z",
        "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+",
        "\\p{N}+",
    ),
    "deepseek_coder": (
        "[\r\n]",
        "\\s?\\p{L}+",
        "\\s?\\p{P}+",
        "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+",
        "\\p{N}",
    ),
    "deepseek3_llm": (
        "\\p{N}{1,3}",
        "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
        "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
    ),
    "spark2_5": (
        "\\p{N}{1,3}",
        "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
        "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+",
        "\\p{N}",
    ),
    "youtu": (
        "[\uac00-\ud7a3\u3131-\u318e]+|[\uff01\u2026\u201c\u201d\u2018\u2019\u2014\uff1a\uff1b\uff0c\u3001-\u303f\ufe30-\ufe4f]+|[\u3105-\u312f]+|[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
        "[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{L}\\p{L}\\p{L}\\p{M}]*[\\p{L}\\p{L}\\p{L}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{L}\\p{L}\\p{L}\\p{M}]+[\\p{L}\\p{L}\\p{L}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    "falcon": (
        "[\\p{P}\\$\\+<=>\\^~\\|`]+",
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
        "[0-9][0-9][0-9]",
    ),
    "gpt2": ("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",),
    "starcoder": (
        "\\p{N}",
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    ),
    "jais2": (
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}",
    ),
    "qwen2": (
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    "qwen35": (
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    "poro": (" ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+",),
    "viking": (
        " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+",
        "\\p{N}",
    ),
    "tekken": (
        "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    "exaone_moe": (
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
    ),
    "chameleon": (
        "<sentinel:[0-9]+>",
        "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
        "([\\t\\n]|    |  )",
        "\\p{N}",
        "[\\p{P}!-/:-@\\[-`{-~]",
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    ),
    "gpt4o": (
        "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    "granite_emb_multi": (
        "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))+((?=[\\p{L}\\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    "bailingmoe": (
        "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
    ),
    "seed_coder": (
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    "ufakzeka": (
        "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
    "laguna": (
        "[^\\n]+|[\\n]+",
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ),
}

# tokenizer.ggml.pre -> (type, ignore_merges: a word that is a whole token is taken as is, add_bos default)
NAMES: dict[str, tuple[str, bool, bool]] = {
    "minicpm5": ("minicpm5", True, False),
    "llama3": ("llama3", True, True),
    "llama-v3": ("llama3", True, True),
    "llama-bpe": ("llama3", True, True),
    "falcon3": ("llama3", True, True),
    "falcon-h1": ("llama3", True, True),
    "pixtral": ("llama3", True, True),
    "midm-2.0": ("llama3", True, True),
    "lfm2": ("llama3", True, True),
    "jina-v5-nano": ("llama3", True, True),
    "deepseek-llm": ("deepseek_llm", False, False),
    "deepseek-coder": ("deepseek_coder", False, False),
    "deepseek-v3": ("deepseek3_llm", False, False),
    "spark2_5": ("spark2_5", False, False),
    "youtu": ("youtu", True, False),
    "falcon": ("falcon", False, False),
    "mpt": ("gpt2", False, False),
    "starcoder": ("starcoder", False, False),
    "gpt-2": ("gpt2", False, False),
    "phi-2": ("gpt2", False, False),
    "jina-es": ("gpt2", False, False),
    "jina-de": ("gpt2", False, False),
    "gigachat": ("gpt2", False, False),
    "jina-v2-es": ("gpt2", False, False),
    "jina-v2-de": ("gpt2", False, False),
    "a.x-4.0": ("gpt2", False, False),
    "mellum": ("gpt2", False, False),
    "modern-bert": ("gpt2", False, False),
    "jais-2": ("jais2", False, False),
    "refact": ("starcoder", False, False),
    "command-r": ("starcoder", False, False),
    "qwen2": ("qwen2", False, False),
    "deepseek-r1-qwen": ("qwen2", False, False),
    "kormo": ("qwen2", False, False),
    "f2llmv2": ("qwen2", False, False),
    "qwen35": ("qwen35", False, False),
    "stablelm2": ("qwen2", False, False),
    "olmo": ("gpt2", False, False),
    "dbrx": ("llama3", False, False),
    "chatglm-bpe": ("llama3", False, False),
    "glm4": ("llama3", True, False),
    "glm5": ("llama3", True, False),
    "smaug-bpe": ("llama3", False, False),
    "poro-chat": ("poro", False, False),
    "viking": ("viking", False, False),
    "jais": ("gpt2", False, False),
    "tekken": ("tekken", True, True),
    "smollm": ("starcoder", False, False),
    "codeshell": ("starcoder", False, False),
    "bloom": ("poro", False, False),
    "gpt3-finnish": ("poro", False, False),
    "exaone": ("starcoder", False, False),
    "exaone4": ("gpt2", False, False),
    "exaone-moe": ("exaone_moe", False, False),
    "chameleon": ("chameleon", False, True),
    "minerva-7b": ("starcoder", False, False),
    "megrez": ("qwen2", False, False),
    "gpt-4o": ("gpt4o", False, False),
    "llama4": ("gpt4o", False, False),
    "kanana2": ("gpt4o", False, False),
    "talkie": ("gpt4o", False, False),
    "granite-embed-multi-97m": ("granite_emb_multi", True, False),
    "trillion": ("gpt2", False, False),
    "granite-docling": ("gpt2", False, False),
    "bailingmoe": ("bailingmoe", False, False),
    "bailingmoe2": ("bailingmoe", False, False),
    "llada-moe": ("bailingmoe", False, False),
    "seed-coder": ("seed_coder", False, False),
    "hunyuan": ("qwen2", False, False),
    "hunyuan-dense": ("deepseek3_llm", False, False),
    "hy_v4": ("deepseek3_llm", False, False),
    "joyai-llm": ("deepseek3_llm", False, False),
    "ufakzeka": ("ufakzeka", False, False),
    "grok-2": ("qwen2", False, False),
    "laguna": ("laguna", False, False),
    "minimax-m2": ("gpt4o", False, False),
    "solar-open": ("qwen2", False, False),
    "mellum2": ("starcoder", False, False),
}
