"""The per-token hidden states of completions decoded elsewhere, from one teacher-forced pass of the
project's own LM over prompt + completion.

An engine that returns tokens but no hidden states (vLLM's ``generate``) still gives every feature a
sample table holds: the hidden state a token was sampled from is the last layer's (normed) state at
the position before it, which a causal LM computes the same way whether the token was generated
step by step or read in one pass. :func:`teacher_forced_features` returns it in the shape the decode
loop records (``DecodeResult.features``, ``[R, T, H]``), and :func:`with_teacher_forced_features`
puts it into a ``DecodeResult`` so that ``decoding.confidence.trace_readings`` reads the confidence
summary and the mean hidden state from it exactly as from a decode of its own.

:func:`decode_rows_elsewhere` decodes a table's rows (``decoding.grid.decode_rows``) through such an
engine: the rows to the end, cut at their first complete answer afterwards (:func:`cut_at_checks`;
vLLM cannot stop on a text condition), then the teacher-forced features.

The features agree with the loop's to the rounding of the two computations (a prefill of the whole sequence
against a prefill plus one-token steps; ``TEACHER_FORCED_ATOL`` in float32, tested), not bit for bit.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import torch

from .grid import Grid, GridRow
from .loop import DecodeResult, StopCheck
from .rollouts import RolloutRequest, answer_stops

__all__ = ["TEACHER_FORCED_ATOL", "teacher_forced_features", "with_teacher_forced_features", "cut_at_checks",
           "decode_rows_elsewhere"]

TEACHER_FORCED_ATOL = 1e-4
"""The largest difference, in float32, between a teacher-forced hidden state and the decode loop's
(and between the confidence summaries read from them) that the tests accept."""


def teacher_forced_features(lm, prompts: Sequence[Sequence[int]], prompt_of_row: Sequence[int],
                            tokens: torch.Tensor, lengths: torch.Tensor, rows_per_pass: int = 16) -> torch.Tensor:
    """``[R, T, H]`` float32: for row ``r``, completion ``tokens[r, :lengths[r]]`` of prompt
    ``prompts[prompt_of_row[r]]``, the last hidden state at the position before each of its tokens
    (zero past its length). ``rows_per_pass`` rows share one forward pass, right-padded (a causal LM
    does not look ahead, so the padding changes no real position)."""
    rows, steps = tokens.shape
    out = torch.zeros(rows, steps, lm.hidden_size)
    for start in range(0, rows, rows_per_pass):
        chunk = range(start, min(rows, start + rows_per_pass))
        seqs = [list(prompts[prompt_of_row[r]]) + tokens[r, :int(lengths[r])].tolist() for r in chunk]
        width = max(len(s) for s in seqs)
        pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0
        ids = torch.full((len(seqs), width), pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, :len(s)] = torch.tensor(s)
            mask[i, :len(s)] = 1
        positions = torch.arange(width).unsqueeze(0).expand(len(seqs), -1)
        with torch.no_grad(), lm.linear_kernel():
            hidden = lm.decoder(input_ids=ids.to(lm.device), attention_mask=mask.to(lm.device),
                                position_ids=positions.to(lm.device), use_cache=False).last_hidden_state
        hidden = hidden.float().cpu()  # [rows, width, H]
        for i, r in enumerate(chunk):
            first, n = len(prompts[prompt_of_row[r]]) - 1, int(lengths[r])
            out[r, :n] = hidden[i, first:first + n]  # the state before token t sits at prompt length - 1 + t
    return out


def with_teacher_forced_features(lm, result: DecodeResult, rows_per_pass: int = 16) -> DecodeResult:
    """``result`` (its ``prompts``, ``prompt_of_row``, ``tokens`` and ``lengths``) with
    ``features`` from :func:`teacher_forced_features`."""
    features = teacher_forced_features(lm, result.prompts, result.prompt_of_row.tolist(), result.tokens.clamp(min=0),
                                       result.lengths, rows_per_pass)
    return replace(result, features=features)


def cut_at_checks(result: DecodeResult, checks: Sequence[StopCheck | None] | None, tokenizer) -> DecodeResult:
    """``result`` with each row ended where the decode loop's stop check would have ended it: at
    the first step whose text (decoded as the loop decodes it) the row's check accepts, unless the
    row ended there anyway (EOS or its budget). For an engine that cannot stop on a text condition
    (vLLM): decoded to the end, then cut. A greedy row is cut to the loop's own tokens."""
    if checks is None or all(c is None for c in checks):
        return result
    tokens, lengths = result.tokens.clone(), result.lengths.clone()
    by_check = torch.zeros(len(lengths), dtype=torch.bool)
    for r, check in enumerate(checks):
        n = int(lengths[r])
        if check is None:
            continue
        prefixes = tokenizer.batch_decode([tokens[r, :k].tolist() for k in range(1, n)], skip_special_tokens=True)
        cut = next((k for k, text in enumerate(prefixes, start=1) if check(text)), None)
        if cut is not None:  # steps 1..n-1 only: at step n the row ended whatever its text
            tokens[r, cut:] = -1
            lengths[r], by_check[r] = cut, True
    steps = torch.arange(tokens.shape[1]).unsqueeze(0)
    kept = steps < lengths.unsqueeze(1)
    texts = [text if not by_check[r] else tokenizer.decode(tokens[r, :int(lengths[r])].tolist(),
                                                            skip_special_tokens=True)
             for r, text in enumerate(result.texts)]
    return replace(result, tokens=tokens, lengths=lengths, texts=texts, actions=result.actions.masked_fill(~kept, -1),
                   stopped_at_eos=result.stopped_at_eos & ~by_check, stopped_by_check=by_check,
                   features=None if result.features is None else result.features * kept.unsqueeze(-1))


def decode_rows_elsewhere(rollouts, lm, task, problems, prompts, grid: Grid, rows: Sequence[GridRow], *,
                          token_budget: int, stop_at_answer: bool,
                          record_features: bool = False) -> tuple[DecodeResult, list[float]]:
    """``decoding.grid.decode_rows`` through ``rollouts`` (an engine that returns tokens only, such
    as ``VLLMRollouts``): the same rows and seeds, decoded to EOS or the budget, cut at the first
    complete answer (:func:`cut_at_checks`) when ``stop_at_answer``, and with ``record_features`` the
    hidden states from a teacher-forced pass of ``lm`` (:func:`with_teacher_forced_features`)."""
    prompt_of_row = [r.problem for r in rows]
    request = RolloutRequest(prompts=list(prompts), prompt_of_row=prompt_of_row,
                             row_seeds=grid.seeds([p.id for p in problems], rows), token_budget=token_budget,
                             row_actions=[r.action for r in rows])
    result = rollouts.run(request)
    result = cut_at_checks(result, answer_stops(task, problems, prompt_of_row, stop_at_answer), lm.tokenizer)
    if record_features:
        result = with_teacher_forced_features(lm, result)
    return result, task.reward_batch([problems[r.problem] for r in rows], result.texts)
