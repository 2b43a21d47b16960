"""Fitting an abandon rule (``policies.abandon``) on stored sample tables with checkpoints.

- **The prefix verifier** (``train_prefix_verifier``): the verifier's network and trainer
  (``training.verifier.train_verifier``, deterministic whatever the thread count) fitted on every
  (distinct sample, checkpoint it reached) of the training table, the target whether that sample's
  whole attempt ends right; its length feature is the checkpoint's token count, so one network
  serves every checkpoint.
- **The thresholds** (``tune_thresholds``): one per checkpoint, chosen on the validation table for
  the fewest tokens per problem at an accuracy no more than ``tolerance`` below the same decider's
  without cutting. ``evaluate(cut_table) -> (accuracy, tokens per problem)`` is the decider the
  rule serves (e.g. an attempt policy's ``walk``), so what is tuned is the whole procedure's
  compute at equal accuracy. Coordinate descent: each checkpoint in turn takes the candidate
  (0: never cut, or a quantile of the validation prefixes' scores there) that spends fewest tokens
  within the accuracy bound, the others held; ``rounds`` passes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from ..policies.abandon import AbandonRule, prefix_inputs
from ..policies.verifier import Verifier
from .verifier import VerifierTrainConfig, train_verifier, verifier_config_from_table

__all__ = ["prefix_training_inputs", "train_prefix_verifier", "tune_thresholds", "Tuned", "TOLERANCE"]

TOLERANCE = 0.005
"""Accuracy (a share) the tuned cuts may lose against the decider without cutting (``tune_thresholds``)."""


def prefix_training_inputs(table):
    """Every distinct sample's prefix at every checkpoint it reached, as ``prefix_inputs`` with each
    attempt's correctness (``[M]`` prefixes, problem-major)."""
    if table.prefix_confidence is None:
        raise ValueError("the table stores no checkpoints (build it with checkpoints=m)")
    distinct = np.asarray(table.distinct)
    p, a, n, k = table.prefix_confidence.shape[:4]
    slot = (np.arange(n)[None, :] < distinct[:, None])[None, :, :, None]  # [1, A, N, 1] distinct samples
    reached = np.isfinite(table.prefix_confidence[..., 0]) & slot  # [P, A, N, K]
    idx = np.nonzero(reached)
    conf = torch.as_tensor(table.prefix_confidence[idx].astype(np.float32))
    hidden = None if table.prefix_hidden is None else torch.as_tensor(table.prefix_hidden[idx].astype(np.float32))
    tokens = torch.as_tensor(np.asarray(table.checkpoint_tokens, np.float32)[idx[3]])
    correct = torch.as_tensor(table.correct[idx[0], idx[1], idx[2]])
    return prefix_inputs(conf, hidden, tokens, correct)


def train_prefix_verifier(table, config: VerifierTrainConfig | None = None) -> AbandonRule:
    """The prefix verifier fitted on ``table`` (module docstring), as a rule that never cuts yet
    (thresholds 0; ``tune_thresholds`` sets them)."""
    config = config or VerifierTrainConfig()
    inputs = prefix_training_inputs(table)
    verifier_config = verifier_config_from_table(table, config)
    verifier: Verifier = train_verifier(inputs, [1], verifier_config, config, init_key="prefix")
    k = len(table.checkpoint_tokens)
    return AbandonRule(verifier, table.checkpoint_every, (0.0,) * k, tuple(table.confidence_names))


@dataclass
class Tuned:
    """``tune_thresholds``' choice and what it did on the validation table."""

    rule: AbandonRule
    accuracy: float
    tokens: float
    reference_accuracy: float
    """The decider's accuracy without cutting."""
    reference_tokens: float


def tune_thresholds(rule: AbandonRule, validation, evaluate: Callable[[object], tuple[float, float]],
                    tolerance: float = TOLERANCE, quantiles: Sequence[float] = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5),
                    rounds: int = 2) -> Tuned:
    """Thresholds per checkpoint for the fewest tokens at accuracy >= the decider's own without
    cutting minus ``tolerance`` (module docstring), chosen on ``validation``."""
    scores = rule.table_scores(validation)  # [P, A, N, K], computed once
    base_acc, base_tokens = evaluate(validation)
    k = scores.shape[-1]
    candidates = []
    for c in range(k):
        seen = scores[..., c][np.isfinite(scores[..., c])]
        values = [0.0] + ([float(np.quantile(seen, q)) for q in quantiles] if seen.size else [])
        candidates.append(sorted(set(values)))
    chosen = [0.0] * k
    best = (base_acc, base_tokens)
    for _ in range(rounds):
        for c in range(k):
            for value in candidates[c]:
                trial = list(chosen)
                trial[c] = value
                acc, tokens = evaluate(rule.with_thresholds(trial).apply(validation, scores))
                if acc >= base_acc - tolerance - 1e-12 and tokens < best[1] - 1e-9:
                    chosen, best = trial, (acc, tokens)
    return Tuned(rule.with_thresholds(chosen), best[0], best[1], base_acc, base_tokens)
