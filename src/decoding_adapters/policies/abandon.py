"""Cutting an attempt short: a prefix verifier and a threshold per checkpoint.

At checkpoint ``c`` (``t_c = (c + 1) * every`` tokens, ``decoding.checkpoints``) a running attempt's
readings so far (the confidence summary of its first ``t_c`` tokens, their mean hidden state, and
``t_c`` itself as the length feature) go through a verifier's network (``policies.verifier``, trained
on prefixes: ``training.abandon``): ``v_c`` = the probability the whole attempt ends right. The
attempt is abandoned at the first checkpoint where ``v_c < threshold[c]`` (a threshold of 0 never
cuts): its tokens so far are spent, it gives no answer, and the next attempt starts.

The decision reads only the attempt's own prefix, so on a stored table with checkpoints it is a
transformation of the table (``AbandonRule.apply``): every sample is cut or not on its own, and any
decider (the attempt policy, a fixed rule) then reads the cut table as it reads any table. Live, the
same rule is ``decoding.attempts``' ``Abandoner`` (``AbandonRule.cut``), and the numbers it reads are
the table's (the hidden state rounded to the table's float16 first), so it cuts the same attempts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from .attempt import AttemptInputs
from .verifier import Verifier, single_thread

__all__ = ["AbandonRule", "prefix_inputs"]


def prefix_inputs(confidence: torch.Tensor, hidden: torch.Tensor | None, tokens: torch.Tensor,
                  correct: torch.Tensor | None = None) -> AttemptInputs:
    """``M`` prefixes as a verifier's ``AttemptInputs`` of ``M`` problems with one attempt each
    (``[M, 1, 1]``): confidence ``[M, C]``, hidden ``[M, H]`` or None, tokens so far ``[M]``; each
    "holds an answer" (id 0; a prefix is judged by whether its attempt ends right: ``correct [M]``)."""
    m = confidence.shape[0]
    hidden = None if hidden is None else hidden.float().reshape(m, 1, 1, -1)
    return AttemptInputs(torch.zeros(m, 1, 1, dtype=torch.long), confidence.float().reshape(m, 1, 1, -1),
                         tokens.float().reshape(m, 1, 1), hidden,
                         None if correct is None else correct.bool().reshape(m, 1))


@dataclass
class AbandonRule:
    """The prefix verifier and its thresholds (module docstring); an ``Abandoner``."""

    verifier: Verifier
    every: int
    """Tokens between checkpoints."""
    thresholds: tuple[float, ...]
    """Per checkpoint: cut when the prefix score is below it (0: never)."""
    confidence_names: tuple[str, ...]
    """The columns of the readings it is given, in order (the verifier picks its own by name)."""

    @property
    def reads_hidden(self) -> bool:
        return "hidden" in self.verifier.config.features

    def with_thresholds(self, thresholds) -> "AbandonRule":
        return dataclasses.replace(self, thresholds=tuple(float(x) for x in thresholds))

    def scores(self, checkpoint: int, confidence: torch.Tensor, hidden: torch.Tensor | None) -> torch.Tensor:
        """``[R]`` the prefix verifier's scores of ``R`` prefixes at ``checkpoint``."""
        columns = [self.confidence_names.index(n) for n in self.verifier.config.confidence_names]
        if self.reads_hidden:
            if hidden is None:
                raise ValueError("this abandon rule reads hidden states: none given")
            hidden = hidden.to(torch.float16).float()  # what a table stores: live and replay read the same bits
        tokens = torch.full((confidence.shape[0],), float((checkpoint + 1) * self.every))
        inputs = prefix_inputs(confidence[..., columns], hidden if self.reads_hidden else None, tokens)
        with torch.no_grad(), single_thread():
            return torch.sigmoid(self.verifier.logits(inputs)).reshape(-1)

    def cut(self, checkpoint: int, confidence: torch.Tensor, hidden: torch.Tensor | None) -> list[bool]:
        """Live (``decoding.attempts.Abandoner``): cut each of these prefixes at ``checkpoint``?"""
        if checkpoint >= len(self.thresholds) or confidence.shape[0] == 0:
            return [False] * confidence.shape[0]
        return (self.scores(checkpoint, confidence, hidden) < self.thresholds[checkpoint]).tolist()

    def table_scores(self, table) -> np.ndarray:
        """``[P, A, N, K]`` the prefix score of every sample of a ``SampleTable`` at each checkpoint
        (NaN where it ended before)."""
        if table.prefix_confidence is None or table.checkpoint_every != self.every:
            raise ValueError(f"the table stores no checkpoints every {self.every} tokens "
                             f"(it has {table.checkpoint_every or 'none'})")
        conf = torch.as_tensor(np.asarray(table.prefix_confidence, dtype=np.float32))
        hid = None if table.prefix_hidden is None else torch.as_tensor(np.asarray(table.prefix_hidden, np.float32))
        p, a, n, k = conf.shape[:4]
        out = np.full((p, a, n, k), np.nan, np.float32)
        for c in range(k):
            reached = torch.isfinite(conf[:, :, :, c, 0])  # max_prob_mean is finite on every reached prefix
            if reached.any():
                out[:, :, :, c][reached.numpy()] = self.scores(
                    c, conf[:, :, :, c][reached], None if hid is None else hid[:, :, :, c][reached]).numpy()
        return out

    def cuts(self, table, scores: np.ndarray | None = None) -> np.ndarray:
        """``[P, A, N]`` the checkpoint at which each sample is cut (-1: not cut)."""
        scores = self.table_scores(table) if scores is None else scores
        k = scores.shape[-1]
        limits = np.array(list(self.thresholds[:k]) + [0.0] * max(0, k - len(self.thresholds)), np.float32)
        below = np.nan_to_num(scores, nan=np.inf) < limits  # [P, A, N, K]
        return np.where(below.any(-1), below.argmax(-1), -1)

    def apply(self, table, scores: np.ndarray | None = None):
        """The table as an attempt sees it with this rule: each cut sample gives no answer (id -1,
        reward 0), spends ``t_c`` tokens and reads as its checkpoint's readings. Same class as ``table``."""
        return cut_table(table, self.cuts(table, scores))


def cut_table(table, cut: np.ndarray):
    """``table`` with the samples ``cut [P, A, N]`` (checkpoint index, -1: kept) cut there."""
    marks = np.asarray(table.checkpoint_tokens)
    where = cut >= 0
    c = np.where(where, cut, 0)

    def pick(x: np.ndarray) -> np.ndarray:  # [P, A, N, K, D] -> [P, A, N, D] at each sample's checkpoint
        return np.take_along_axis(x, c[..., None, None], axis=3)[:, :, :, 0]

    answers = np.where(where, -1, table.answers).astype(table.answers.dtype)
    rewards = np.where(where, 0.0, table.rewards).astype(table.rewards.dtype)
    tokens = np.where(where, marks[c] if len(marks) else 0, table.tokens).astype(table.tokens.dtype)
    confidence = np.where(where[..., None], pick(table.prefix_confidence), table.confidence).astype(np.float32)
    hidden = table.hidden
    if hidden is not None and table.prefix_hidden is not None:
        hidden = np.where(where[..., None], pick(table.prefix_hidden), hidden).astype(hidden.dtype)
    return dataclasses.replace(table, answers=answers, rewards=rewards, tokens=tokens, confidence=confidence,
                               hidden=hidden)
