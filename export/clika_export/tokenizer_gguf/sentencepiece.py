"""SentencePiece (``tokenizer.ggml.model == "llama"``: Llama 1/2, Mistral, Phi-3, Gemma) as a BPE model.

llama.cpp tokenizes these by repeatedly merging the adjacent pair whose
concatenation is a token with the highest score, starting from characters;
characters that end up alone and are not tokens become ``<0xXX>`` byte tokens.
That is BPE whose merges are every split of every token into two tokens, ranked
by the whole token's score. Spaces are written ``▁`` and, unless
``tokenizer.ggml.add_space_prefix`` is false, every piece of text that starts
the input or follows a special token gets one in front; decoding drops that
leading space again.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, normalizers

from clika_export.readers.gguf_file import GGUFMetadata
from clika_export.tokenizer_gguf.kind import KindTokenizer
from clika_export.tokenizer_gguf.vocabulary import UNKNOWN, Vocabulary, read_scores, unique_token_ids

SPACE = "\u2581"


def build_sentencepiece(meta: GGUFMetadata, vocab: Vocabulary) -> KindTokenizer:
    ids = unique_token_ids(vocab)
    scores = read_scores(meta, len(vocab))
    unknown = next(iter(vocab.ids_of_type(UNKNOWN)), None)
    bpe = models.BPE(
        vocab=ids,
        merges=score_ranked_merges(vocab.tokens, ids, scores),
        dropout=None,
        unk_token=vocab.tokens[unknown] if unknown is not None else None,
        fuse_unk=False,
        byte_fallback=True,
        ignore_merges=False,
    )
    tokenizer = Tokenizer(bpe)
    space_prefix = meta.boolean("tokenizer.ggml.add_space_prefix", True)
    tokenizer.normalizer = spaces_as_marks(space_prefix)
    tokenizer.decoder = marks_as_spaces(space_prefix)
    return KindTokenizer(tokenizer, add_bos=True)


def score_ranked_merges(tokens: list[str], ids: dict[str, int], scores: list[float]) -> list[tuple[str, str]]:
    """Every (left, right) with left, right and left+right all tokens, best-scored result first.

    Equal scores keep the lower id first (llama.cpp breaks such ties by position,
    which no merge list can express; scores rarely tie).
    """
    ranked = []
    for merged_id, token in enumerate(tokens):
        for cut in range(1, len(token)):
            if token[:cut] in ids and token[cut:] in ids:
                ranked.append((-scores[merged_id], merged_id, cut))
    ranked.sort()
    return [(tokens[merged_id][:cut], tokens[merged_id][cut:]) for _, merged_id, cut in ranked]


def spaces_as_marks(space_prefix: bool) -> normalizers.Normalizer:
    steps = [normalizers.Replace(" ", SPACE)]
    if space_prefix:
        steps.insert(0, normalizers.Prepend(SPACE))
    return normalizers.Sequence(steps)


def marks_as_spaces(space_prefix: bool) -> decoders.Decoder:
    steps = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    if space_prefix:
        steps.append(decoders.Strip(content=" ", left=1, right=0))
    return decoders.Sequence(steps)
