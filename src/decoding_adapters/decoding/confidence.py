"""The confidence summary of a decoded trace, read from the logits each token was sampled from
(the LM head applied to the hidden states the decode recorded), and answer ids in order of first
appearance: what the stored sample tables (``evaluation.sample_table``, whose docstring defines each
column), the fixed rules and the attempt policy read, whether over a stored table or live, round by
round (``decoding.attempts``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from .loop import DecodeResult

__all__ = ["CONFIDENCE_FEATURES", "ConfidenceConfig", "answer_ids", "confidence_summary", "trace_readings"]

CONFIDENCE_FEATURES = (
    "max_prob_mean",
    "max_prob_min",
    "entropy_mean",
    "logprob_mean",
    "token_conf_mean",
    "group_conf_min",
    "group_conf_bottom10",
    "tail_conf",
    "answer_logprob",
    "answer_prob_min",
)
"""Names of the ``confidence`` columns, in order (module docstring)."""

_ANSWER_TOKENS_MAX = 32


@dataclass(frozen=True)
class ConfidenceConfig:
    """How the confidence summary reads a trace's token distributions."""

    conf_top_k: int = 20
    """DeepConf's token confidence averages the log-probabilities of this many most likely tokens."""
    group_window: int = 16
    """Tokens per sliding window of the group and tail confidences (DeepConf uses 2048 on traces of
    thousands of tokens; a stopped arithmetic answer is tens of tokens)."""

    def __post_init__(self) -> None:
        if self.conf_top_k < 1 or self.group_window < 1:
            raise ValueError("conf_top_k and group_window must be >= 1")



def answer_ids(answers: Sequence[str]) -> tuple[list[int], list[str]]:
    """Ids of answer strings in order of first appearance ("" -> -1) and the strings of the ids."""
    strings: list[str] = []
    index: dict[str, int] = {}
    ids = []
    for s in answers:
        if not s:
            ids.append(-1)
            continue
        if s not in index:
            index[s] = len(strings)
            strings.append(s)
        ids.append(index[s])
    return ids, strings


def _sliding_means(values: torch.Tensor, lengths: torch.Tensor, window: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Means of ``values [R, T]`` over windows of ``min(window, length)`` tokens ending at each step:
    ``[R, T]`` and a mask of the windows that lie inside the trace."""
    w = lengths.clamp(min=1, max=window).unsqueeze(1)  # [R, 1] each row's window
    csum = torch.cat([torch.zeros_like(values[:, :1]), values.cumsum(1)], dim=1)  # [R, T + 1]
    end = torch.arange(1, values.shape[1] + 1).unsqueeze(0)  # [1, T] window ends after step t
    start = (end - w).clamp(min=0)
    means = (csum.gather(1, end.expand_as(values)) - csum.gather(1, start)) / w
    valid = (end >= w) & (end <= lengths.unsqueeze(1))
    return means, valid


def confidence_summary(step_logprobs: torch.Tensor, token_logprob: torch.Tensor, lengths: torch.Tensor,
                       answer_mask: torch.Tensor, config: ConfidenceConfig) -> torch.Tensor:
    """The ``[R, C]`` summary (``CONFIDENCE_FEATURES``) of ``R`` traces from each step's
    log-probabilities ``[R, T, V]`` (rows past their length ignored), the generated tokens'
    log-probabilities ``[R, T]``, the lengths ``[R]`` and a mask of the answer's own tokens ``[R, T]``."""
    r, t = token_logprob.shape
    valid = torch.arange(t).unsqueeze(0) < lengths.unsqueeze(1)  # [R, T]
    count = lengths.clamp(min=1).float()
    probs = step_logprobs.exp()
    max_prob = probs.amax(-1)  # [R, T]
    entropy = -(probs * step_logprobs).nan_to_num().sum(-1)
    k = min(config.conf_top_k, step_logprobs.shape[-1])
    token_conf = -step_logprobs.topk(k, dim=-1).values.mean(-1)  # [R, T] DeepConf's C_i
    token_conf = token_conf.masked_fill(~valid, 0.0)

    def mean(x):
        return (x.masked_fill(~valid, 0.0)).sum(1) / count

    groups, inside = _sliding_means(token_conf, lengths, config.group_window)
    big = torch.finfo(groups.dtype).max
    group_min = groups.masked_fill(~inside, big).amin(1)
    # bottom 10% of the windows: sort ascending, average the first ceil(0.1 * windows)
    n_groups = inside.sum(1).clamp(min=1)
    ordered = groups.masked_fill(~inside, big).sort(1).values
    take = torch.ceil(0.1 * n_groups.float()).long().clamp(min=1)
    keep = torch.arange(t).unsqueeze(0) < take.unsqueeze(1)
    bottom = (ordered.masked_fill(~keep, 0.0)).sum(1) / take.float()
    last = (lengths - 1).clamp(min=0)
    tail = groups.gather(1, last.unsqueeze(1)).squeeze(1)  # the window ending at the last token
    answer = answer_mask & valid
    has_answer = answer.any(1)
    answer_logprob = token_logprob.masked_fill(~answer, 0.0).sum(1)
    answer_prob_min = token_logprob.exp().masked_fill(~answer, 1.0).amin(1)
    nan = torch.tensor(float("nan"))
    out = torch.stack([
        mean(max_prob), max_prob.masked_fill(~valid, 1.0).amin(1), mean(entropy), mean(token_logprob),
        mean(token_conf), group_min, bottom, tail,
        torch.where(has_answer, answer_logprob, nan), torch.where(has_answer, answer_prob_min, nan),
    ], dim=1)
    empty = lengths == 0
    return out.masked_fill(empty.unsqueeze(1), float("nan")) if empty.any() else out


def _answer_token_mask(tokenizer, tokens: torch.Tensor, lengths: torch.Tensor, answers: Sequence[str]) -> torch.Tensor:
    """``[R, T]`` the shortest run of final tokens whose text holds the row's answer (<= 32 tokens;
    none when the answer is "" or not found in that run)."""
    mask = torch.zeros(tokens.shape, dtype=torch.bool)
    for r, answer in enumerate(answers):
        n = int(lengths[r])
        if not answer or n == 0:
            continue
        row = tokens[r, :n].tolist()
        for k in range(1, min(n, _ANSWER_TOKENS_MAX) + 1):
            if answer in tokenizer.decode(row[n - k:], skip_special_tokens=True):
                mask[r, n - k:n] = True
                break
    return mask


def trace_readings(lm, result: DecodeResult, answers: Sequence[str], config: ConfidenceConfig,
                    with_hidden: bool, rows_per_pass: int = 16) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``[R, C]`` confidence summaries (and ``[R, H]`` mean hidden states) of a decode made with
    ``record_features=True``: the LM head on each recorded hidden state gives the logits the token was
    sampled from, in rows of ``rows_per_pass`` at a time (the ``[rows, T, V]`` log-probabilities)."""
    features = result.features
    if features is None:
        raise ValueError("the confidence summary needs the decode's hidden states (record_features=True)")
    lengths = result.lengths
    answer_mask = _answer_token_mask(lm.tokenizer, result.tokens, lengths, answers)
    summaries = []
    head = lm.lm_head
    for start in range(0, len(lengths), rows_per_pass):
        rows = slice(start, start + rows_per_pass)
        width = max(1, int(lengths[rows].max()))
        h = features[rows, :width].to(device=lm.device, dtype=lm.dtype)
        with torch.no_grad(), lm.linear_kernel():
            logprobs = torch.log_softmax(head(h).float(), dim=-1).cpu()  # [rows, T, V]
        tok = result.tokens[rows, :width].clamp(min=0)
        token_logprob = logprobs.gather(-1, tok.unsqueeze(-1)).squeeze(-1)
        summaries.append(confidence_summary(logprobs, token_logprob, lengths[rows], answer_mask[rows, :width], config))
    hidden = None
    if with_hidden:
        valid = result.valid_mask().float().unsqueeze(-1)
        hidden = (features.float() * valid).sum(1) / lengths.clamp(min=1).float().unsqueeze(-1)
    return torch.cat(summaries), hidden
