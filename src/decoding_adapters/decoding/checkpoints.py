"""An attempt's readings at checkpoints: what its first ``t`` tokens show, every ``m`` tokens.

A running attempt reaches checkpoint ``c`` (``t_c = (c + 1) * m`` tokens, ``c = 0 .. K - 1`` with
``t_c < budget``) when it goes on past its ``t_c``-th token (its final length is above ``t_c``): an
attempt that ends at or before ``t_c`` is already done there, and cutting it would save nothing.
Its readings there ("state m"): the confidence summary of the first ``t_c`` tokens
(``decoding.confidence``; the answer columns NaN: a prefix states no answer), the mean hidden state
over them, and ``t_c`` itself (tokens used).

One function, ``prefix_readings``, computes them both where a stored table reads them off a whole
decoded trace and where a live decode reads them at step ``t_c``: it takes one row at a time, so
the LM head sees the same ``[1, t_c, H]`` input in both places and the numbers are the same bits
(what lets a cut decided on a table be the cut made live).
"""

from __future__ import annotations

import torch

from .confidence import CONFIDENCE_FEATURES, ConfidenceConfig, confidence_summary

__all__ = ["checkpoint_tokens", "prefix_readings"]


def checkpoint_tokens(every: int, token_budget: int) -> list[int]:
    """The checkpoints' token counts ``[m, 2m, ...]`` below ``token_budget`` (``every`` = m >= 1)."""
    if every < 1:
        raise ValueError(f"checkpoints need every >= 1 token, got {every}")
    return list(range(every, int(token_budget), every))


def prefix_readings(lm, tokens: torch.Tensor, features: torch.Tensor, config: ConfidenceConfig,
                    with_hidden: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``[R, C]`` confidence summaries (and ``[R, H]`` mean hidden states) of ``R`` prefixes of one
    length ``t``: their token ids ``[R, t]`` and the hidden states the decode recorded ``[R, t, H]``
    (module docstring: one row at a time, so a row's numbers do not depend on the others)."""
    r, t = tokens.shape
    lengths = torch.full((1,), t, dtype=torch.long)
    no_answer = torch.zeros(1, t, dtype=torch.bool)
    summaries, means = [], []
    for i in range(r):
        h = features[i : i + 1, :t].to(device=lm.device, dtype=lm.dtype)  # [1, t, H]
        with torch.no_grad(), lm.linear_kernel():
            logprobs = torch.log_softmax(lm.lm_head(h).float(), dim=-1).cpu()  # [1, t, V]
        token_logprob = logprobs.gather(-1, tokens[i : i + 1, :t].clamp(min=0).unsqueeze(-1)).squeeze(-1)
        summaries.append(confidence_summary(logprobs, token_logprob, lengths, no_answer, config)[0])
        if with_hidden:
            means.append(features[i, :t].float().sum(0) / t)
    if not r:
        return torch.zeros(0, len(CONFIDENCE_FEATURES)), (torch.zeros(0, features.shape[-1]) if with_hidden else None)
    return torch.stack(summaries), (torch.stack(means) if with_hidden else None)
