"""A teacher-forced pass over prompt + completion gives the hidden states the decode loop recorded,
and the confidence summary and mean hidden state read from them, within ``TEACHER_FORCED_ATOL`` in
float32: what a table built from another engine's tokens (vLLM's) holds; rows decoded to the end
and cut afterwards equal the rows the loop's stop checks ended."""

from __future__ import annotations

import torch

from decoding_adapters.decoding.actions import GREEDY, ActionSet, DecodingAction
from decoding_adapters.decoding.confidence import ConfidenceConfig, trace_readings
from decoding_adapters.decoding.loop import decode
from decoding_adapters.decoding.teacher_forced import (
    TEACHER_FORCED_ATOL,
    cut_at_checks,
    teacher_forced_features,
    with_teacher_forced_features,
)


def _decode(lm, prompts):
    actions = ActionSet([GREEDY, DecodingAction(temperature=1.0)])
    rows = [(p, a) for p in range(len(prompts)) for a in (0, 0, 1, 1)]
    return decode(lm, prompts, actions, prompt_of_row=[p for p, _ in rows], row_actions=[a for _, a in rows],
                  token_budget=[3 + (i % 6) for i in range(len(rows))], record_features=True, seed=4)


def test_teacher_forced_features_equal_the_loops(tiny_lm, tiny_prompts):
    result = _decode(tiny_lm, tiny_prompts)
    assert (result.lengths > 1).any() and len(set(result.lengths.tolist())) > 1  # rows of several lengths
    # rows_per_pass 3: rows of different prompts and lengths share a right-padded pass
    forced = teacher_forced_features(tiny_lm, result.prompts, result.prompt_of_row.tolist(),
                                     result.tokens.clamp(min=0), result.lengths, rows_per_pass=3)
    valid = result.valid_mask()
    torch.testing.assert_close(forced[valid], result.features[valid], atol=TEACHER_FORCED_ATOL, rtol=0)
    assert (forced[~valid] == 0).all()


def test_the_readings_of_a_teacher_forced_pass_equal_the_loops(tiny_lm, tiny_prompts):
    result = _decode(tiny_lm, tiny_prompts)
    answers = [text[-1:] for text in result.texts]  # any answer string the rows hold
    config = ConfidenceConfig(conf_top_k=5, group_window=3)
    summary, hidden = trace_readings(tiny_lm, result, answers, config, with_hidden=True)
    forced_summary, forced_hidden = trace_readings(tiny_lm, with_teacher_forced_features(tiny_lm, result), answers,
                                                   config, with_hidden=True)
    # log-probabilities over the tiny LM's large logits: the same tolerance, relative where they are large
    torch.testing.assert_close(forced_summary, summary, atol=TEACHER_FORCED_ATOL, rtol=1e-4, equal_nan=True)
    torch.testing.assert_close(forced_hidden, hidden, atol=TEACHER_FORCED_ATOL, rtol=0)


def test_rows_cut_after_the_decode_equal_rows_the_loop_stopped(tiny_lm, tiny_prompts):
    actions = ActionSet([GREEDY, DecodingAction(temperature=1.0)])
    rows = [(p, a) for p in range(len(tiny_prompts)) for a in (0, 1, 1)]
    checks = [(lambda text, k=2 + i % 3: len(text) >= k) if i % 4 else None for i in range(len(rows))]
    kwargs = dict(prompt_of_row=[p for p, _ in rows], row_actions=[a for _, a in rows], token_budget=8, seed=2)
    stopped = decode(tiny_lm, tiny_prompts, actions, stop_checks=checks, **kwargs)
    cut = cut_at_checks(decode(tiny_lm, tiny_prompts, actions, **kwargs), checks, tiny_lm.tokenizer)
    assert stopped.stopped_by_check.any() and not stopped.stopped_by_check.all()  # some rows cut, some not
    assert torch.equal(cut.lengths, stopped.lengths) and torch.equal(cut.tokens, stopped.tokens)
    assert cut.texts == stopped.texts and torch.equal(cut.stopped_by_check, stopped.stopped_by_check)
    assert torch.equal(cut.stopped_at_eos, stopped.stopped_at_eos) and torch.equal(cut.actions, stopped.actions)
