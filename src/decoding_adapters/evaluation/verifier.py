"""The learned verifier on stored sample tables: its scores, its ranking quality, and the fixed rules
that read it.

- ``table_scores``: ``[P, A, N]`` a trained verifier's score of every sample of a table (the
  validation and evaluated tables: problems it never saw);
- ``crossfit_table_scores``: the same for the verifier's own training table, each fold scored by a
  verifier trained on the other folds (``training.verifier.crossfit_scores``);
- ``ranking_quality``: per family and over all, how well the scores rank a right attempt above a
  wrong one (AUC, Mann-Whitney) and how well they are calibrated (ECE over equal-width bins, Brier
  score), over the distinct attempts that state an answer;
- ``fit_on_table``: train and save one verifier on a training table (``training.verifier``).

The fixed rules read the scores as the draws' ``VERIFIER`` column (``evaluation.rules.greedy_then``
with ``verifier=``), tuned on validation like the plain rules (``tune_rules`` with
``policies.fixed_rules.VERIFIER_RULES``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from ..policies.attempt import AttemptInputs
from ..policies.verifier import Verifier, attempt_mask
from ..training.verifier import (
    VerifierTrainConfig,
    attempt_labels,
    crossfit_scores,
    train_verifier,
    verifier_config_from_table,
)
from .predictability import auc

__all__ = ["table_scores", "crossfit_table_scores", "fit_on_table", "ranking_quality", "expected_calibration_error",
           "ECE_BINS"]

ECE_BINS = 10
"""Equal-width probability bins of the expected calibration error."""


def table_scores(verifier: Verifier, table) -> np.ndarray:
    """``[P, A, N]`` float64 the verifier's probability that each sample of ``table`` is right."""
    return verifier.score_table(table).double().numpy()


def fit_on_table(table, config: VerifierTrainConfig, out_dir: str | Path | None = None) -> Verifier:
    """One verifier trained on every problem of a training ``table`` (saved to ``out_dir`` when given)."""
    verifier_config = verifier_config_from_table(table, config)
    inputs = AttemptInputs.from_table(table)
    if "hidden" not in verifier_config.features:
        inputs.hidden = None
    return train_verifier(inputs, table.distinct, verifier_config, config, out_dir)


def crossfit_table_scores(table, config: VerifierTrainConfig) -> np.ndarray:
    """``[P, A, N]`` each training problem's scores from a verifier trained on the other folds."""
    verifier_config = verifier_config_from_table(table, config)
    inputs = AttemptInputs.from_table(table)
    if "hidden" not in verifier_config.features:
        inputs.hidden = None
    return crossfit_scores(inputs, table.distinct, verifier_config, config).double().numpy()


def expected_calibration_error(scores: np.ndarray, labels: np.ndarray, bins: int = ECE_BINS) -> float:
    """Sum over equal-width bins of (share of attempts in the bin) x |mean score - share right|."""
    scores, labels = np.asarray(scores, dtype=np.float64), np.asarray(labels, dtype=np.float64)
    if scores.size == 0:
        return float("nan")
    which = np.minimum((scores * bins).astype(np.int64), bins - 1)
    error = 0.0
    for b in range(bins):
        inside = which == b
        if inside.any():
            error += inside.mean() * abs(scores[inside].mean() - labels[inside].mean())
    return float(error)


def _quality(scores: np.ndarray, labels: np.ndarray) -> dict:
    return {"attempts": int(len(scores)), "right": float(labels.mean()) if len(labels) else float("nan"),
            "auc": auc(scores, labels.astype(np.int64)), "ece": expected_calibration_error(scores, labels),
            "brier": float(np.mean((scores - labels) ** 2)) if len(scores) else float("nan")}


def ranking_quality(scores: np.ndarray, table, families: Sequence[str] | None = None) -> dict:
    """``{"all": {...}, "<family>": {...}}``: over the distinct attempts of ``table`` that state an
    answer, the attempts counted, the share right, the AUC (a right attempt scored above a wrong one;
    ties half), the ECE and the Brier score of ``scores [P, A, N]``; one entry per family when
    ``families`` (one per problem) is given."""
    inputs = AttemptInputs.from_table(table)
    mask = attempt_mask(inputs.answers, table.distinct).numpy()  # [P, A, N]
    labels = attempt_labels(inputs).numpy().astype(np.float64)
    scores = np.asarray(scores, dtype=np.float64)
    out = {"all": _quality(scores[mask], labels[mask])}
    if families is not None:
        if len(families) != table.shape[0]:
            raise ValueError(f"one family per problem: {len(families)} for {table.shape[0]} problems")
        fam = np.asarray(families)
        for name in sorted(set(families)):
            rows = (fam == name)[:, None, None] & mask
            out[name] = _quality(scores[rows], labels[rows])
    return out
