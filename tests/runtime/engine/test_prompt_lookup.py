"""Speculative decoding by prompt lookup: the same greedy reply, in fewer steps when text repeats.

The drafting itself is checked on plain token lists; the engine on a tiny
random llama through the real graph (its greedy replies loop, so drafts are
found and both confirmed and refused), alone, batched with sampled requests,
with stop strings and in the paged mode (its fp32 kernels give the same
logits for a row of several tokens as for one, so the replies must be equal
token for token); SmolLM2 int4 on a prompt whose reply
quotes it.
"""

from __future__ import annotations

import pytest
from engine_hold import engine_held

from clika_runtime import modelverse
from clika_runtime.engine.config import GenerationConfig
from clika_runtime.engine.spec_decode.drafting import next_draft_limit
from clika_runtime.engine.spec_decode.prompt_lookup import propose_draft

GREEDY = {"temperature": 0.0, "ignore_eos": True, "max_new_tokens": 40}
PROMPTS = [
    "one two three one two three one two three",
    "abc abc abc abc abc",
    "the cat sat on the mat and the cat sat",
    "x = x + 1\nx = x + 1\nx = x + 1\n",
    "hello hello world hello hello",
    "12 13 14 12 13 14 12",
]


# -- drafting -----------------------------------------------------------------------------


def test_the_draft_follows_the_latest_earlier_occurrence_of_the_tail():
    history = [1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 1, 2, 3]
    assert propose_draft(history, 2) == [7, 8]  # the latest match, not the first
    assert propose_draft(history, 10) == [7, 8, 1, 2, 3]  # up to the end of the history
    assert propose_draft([4, 5, 6, 4, 5], 3) == [6, 4, 5]  # a shorter tail when the longer one is new
    assert propose_draft([1, 2, 3, 4, 5], 3) == []  # nothing repeats
    assert propose_draft([1, 1], 3) == [] and propose_draft([1, 2, 1, 2], 0) == []


def test_drafts_grow_while_they_hold_and_shrink_when_refused():
    assert next_draft_limit(8, 2, 2) == 4 and next_draft_limit(8, 6, 6) == 8
    assert next_draft_limit(8, 8, 3) == 4 and next_draft_limit(8, 5, 0) == 1


def test_bad_lookup_lengths_are_refused_by_name():
    for bad in (-1, 65, 2.0, True, "4"):
        with pytest.raises(ValueError, match="prompt_lookup_num_tokens must be an integer in 0..64"):
            GenerationConfig(prompt_lookup_num_tokens=bad)


# -- the engine ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def drafting(tiny_llama_model):
    model = modelverse.load(tiny_llama_model, threads=1)
    yield model
    model.close()


def replies(model, prompts, **config):
    texts, reports = [], []
    for prompt in prompts:
        texts.append(model.generate(prompt, **config))
        reports.append(model.report)
    return texts, reports


def test_drafted_greedy_replies_equal_plain_ones_and_count_the_drafts(drafting):
    assert drafting.supports_speculative_decoding
    plain, plain_reports = replies(drafting, PROMPTS, **GREEDY)
    drafted, reports = replies(drafting, PROMPTS, **GREEDY, prompt_lookup_num_tokens=6)
    assert drafted == plain
    assert [r.completion_tokens for r in reports] == [40] * len(PROMPTS)
    assert all(r.draft_tokens == 0 for r in plain_reports)
    drafts = sum(r.draft_tokens for r in reports)
    accepted = sum(r.accepted_draft_tokens for r in reports)
    assert 0 < accepted < drafts  # guesses were made, some held, some did not


def test_a_batch_mixing_drafts_and_sampling_equals_each_alone(drafting):
    configs = [
        {**GREEDY, "prompt_lookup_num_tokens": 4},
        {**GREEDY, "temperature": 0.9, "seed": 3, "prompt_lookup_num_tokens": 4},  # samples: no drafts
        {**GREEDY, "repetition_penalty": 1.3, "prompt_lookup_num_tokens": 4},  # penalties: no drafts
        {**GREEDY, "prompt_lookup_num_tokens": 8, "max_new_tokens": 17},
        dict(GREEDY),
    ]
    prompts = PROMPTS[: len(configs)]
    alone = [drafting.generate(p, **c) for p, c in zip(prompts, configs, strict=True)]
    engine = drafting.engine
    engine.set_max_active(len(configs))  # all of them in the same steps
    steps = engine.stats.steps
    with engine_held(engine):  # all five start in the same step, however busy the machine
        streams = [
            engine.submit(
                drafting.tokenizer.encode(drafting.render([{"role": "user", "content": p}])),
                GenerationConfig(**c),
            )
            for p, c in zip(prompts, configs, strict=True)
        ]
    assert [s.result() for s in streams] == alone
    assert [s.report.completion_tokens for s in streams] == [40, 40, 40, 17, 40]
    assert engine.stats.steps - steps < 2 * 40  # together: one after another would take over 150
    assert streams[0].report.draft_tokens > 0
    assert streams[1].report.draft_tokens == streams[2].report.draft_tokens == 0
    engine.check_integrity()


def test_a_stop_string_inside_a_confirmed_draft_ends_the_reply_there(drafting):
    checked = drafted = 0
    for prompt in PROMPTS:
        plain = drafting.generate(prompt, **GREEDY)
        stop = plain[len(plain) // 2 : len(plain) // 2 + 3]
        if not stop.strip() or plain.index(stop) == 0:
            continue
        want = drafting.generate(prompt, **GREEDY, stop=[stop])
        want_tokens = drafting.report.completion_tokens
        got = drafting.generate(prompt, **GREEDY, stop=[stop], prompt_lookup_num_tokens=8)
        assert got == want and drafting.report.completion_tokens == want_tokens
        assert drafting.report.finish_reason == "stop"
        checked += 1
        drafted += drafting.report.accepted_draft_tokens > 0
    assert checked >= 3 and drafted >= 1


def test_drafts_stop_at_the_end_of_the_context(drafting):
    engine = drafting.engine
    prompt = [40, 41, 42, 43] * 28  # 112 of the tiny model's 128 positions
    for lookup in (0, 8):
        config = GenerationConfig(max_new_tokens=64, ignore_eos=True, prompt_lookup_num_tokens=lookup)
        stream = engine.submit(prompt, config)
        reply = [t for delta in stream for t in delta.token_ids]
        if lookup == 0:
            plain = reply
    assert reply == plain and stream.report.finish_reason == "length"
    assert len(prompt) + len(reply) == drafting.max_seq and stream.report.accepted_draft_tokens > 0
    engine.check_integrity()


def test_the_paged_cache_drafts_alike(tiny_llama_model, drafting):
    paged = modelverse.load(tiny_llama_model, threads=1, kv_cache_mode="paged")
    assert paged.supports_speculative_decoding
    got, reports = replies(paged, PROMPTS, **GREEDY, prompt_lookup_num_tokens=6)
    paged.engine.check_integrity()
    paged.close()
    assert got == replies(drafting, PROMPTS, **GREEDY)[0]
    assert sum(r.accepted_draft_tokens for r in reports) > 0


def test_blocks_a_drafted_reply_filled_serve_the_next_prompt_as_a_cached_prefix(tiny_llama_model):
    first = [5, 6, 7, 8] * 6
    config = GenerationConfig(**GREEDY, prompt_lookup_num_tokens=6)
    reusing = modelverse.load(tiny_llama_model, threads=1, kv_cache_mode="paged")
    stream = reusing.engine.submit(first, config)
    reply = [t for delta in stream for t in delta.token_ids]
    assert stream.report.accepted_draft_tokens > 0
    follow_up = first + reply + [9, 10, 11]
    again = reusing.engine.submit(follow_up, config)
    got = [t for delta in again for t in delta.token_ids]
    # All the first request computed (its last token never ran) is reused.
    assert again.report.cached_tokens == len(first) + len(reply) - 1
    reusing.engine.check_integrity()
    reusing.close()
    fresh = modelverse.load(tiny_llama_model, threads=1, kv_cache_mode="paged", prefix_reuse=False)
    want = [t for delta in fresh.engine.submit(follow_up, config) for t in delta.token_ids]
    fresh.close()
    assert got == want


@pytest.mark.slow
def test_smollm2_quoting_its_prompt_takes_fewer_steps_for_the_same_reply(smollm2_gguf):
    from clika_export.api import cached_export

    model = modelverse.load(cached_export(smollm2_gguf, "int4", progress=False))
    code = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
    prompt = f"Repeat this Python code exactly:\n\n{code}"
    plain = model.generate(prompt, max_new_tokens=64, temperature=0.0)
    steps = model.engine.stats.steps
    drafted = model.generate(prompt, max_new_tokens=64, temperature=0.0, prompt_lookup_num_tokens=8)
    drafted_steps = model.engine.stats.steps - steps
    report = model.report
    model.close()
    # Several tokens a step run ORT's batched int4 kernels, whose rounding differs from the
    # one-token path (top logits within ~1% of their range): near-ties may flip later on.
    assert drafted[:60] == plain[:60] and "return a - b" in drafted
    # At least a third of the reply came from drafts (21 of 64 here; the count moves by one or two
    # with the rounding of how the prompt's last tokens were computed).
    assert report.accepted_draft_tokens >= report.completion_tokens // 3
    assert drafted_steps < report.completion_tokens


def test_the_cli_drafts_on_request(tiny_gguf, tmp_cache):
    from click.testing import CliRunner

    from clika_cli.main import clika

    args = [
        "generate",
        str(tiny_gguf("tiny.gguf").path),
        "hello hello hello",  # this model's reply to it repeats itself early enough to draft
        "--max-tokens",
        "24",
        "--temperature",
        "0",
    ]
    plain = CliRunner().invoke(clika, args, catch_exceptions=False)
    drafted = CliRunner().invoke(clika, [*args, "--prompt-lookup", "6"], catch_exceptions=False)
    assert plain.exit_code == drafted.exit_code == 0 and drafted.stdout == plain.stdout
    # The statistics line on stderr says the request drafted; the plain one never does.
    assert "drafts kept" in drafted.stderr and "drafts kept" not in plain.stderr
    wrong = CliRunner().invoke(clika, [*args, "--prompt-lookup", "65"])
    assert wrong.exit_code == 2 and "--prompt-lookup" in wrong.output
