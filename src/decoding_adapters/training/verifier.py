"""Training the verifier (``policies.verifier``) on a stored sample table, and scoring a table's own
problems out of fold.

The target of attempt i is whether its answer is right (the table's reward); the loss is the binary
cross-entropy of ``v(f_i)`` over the distinct attempts that state an answer (a greedy arm's repeated
slots counted once, answer-less attempts skipped: they score 0 by construction), every attempt of
every training problem in each step (full batch: no minibatch to draw), AdamW with weight decay
for a fixed number of steps. No validation table is read: the rules that read the verifier are tuned
on validation, which so stays out of the verifier's fit.

**Deterministic whatever the thread count.** The initial weights come from a seeded generator and
every step sees the same batch; a float reduction's order, though, can follow the number of
threads torch splits it over. ``train_verifier`` therefore runs with one torch thread
(``policies.verifier.single_thread``; the network is small: seconds on 400 problems) and puts the
caller's count back after, so the saved weights are
byte-identical whether the caller runs with 1 thread or 16 (``tests/training/test_verifier.py``).

**Cross-fitted scores** (``crossfit_scores``): a verifier must not score the problems it was fitted
on when those scores are judged or fed to a learner trained on the same problems. The table's
problems are cut into ``folds`` contiguous folds (the tables list problems in their family
round-robin order, so every fold keeps the family mix); each fold is scored by a verifier trained
on the other folds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from ..decoding.loop import row_seed
from ..policies.attempt import AttemptInputs
from ..policies.verifier import (
    VERIFIER_FEATURE_SETS,
    Verifier,
    VerifierConfig,
    attempt_mask,
    save_verifier,
    single_thread,
)

__all__ = ["VerifierTrainConfig", "verifier_config_from_table", "attempt_labels", "train_verifier",
           "crossfit_scores", "fold_edges"]


@dataclass(frozen=True)
class VerifierTrainConfig:
    """Training a verifier on a sample table."""

    features: tuple[str, ...] = ("confidence", "hidden")
    """what the verifier reads of each attempt: any of confidence, answer_probs, hidden (hidden is dropped
    for a table without hidden states)"""
    hidden_proj: int = 8
    """width of the learned projection of each attempt's mean hidden state"""
    width: int = 64
    """hidden width of the scoring network"""
    steps: int = 150
    """optimiser steps (each over every training attempt)"""
    lr: float = 1e-2
    """AdamW learning rate"""
    weight_decay: float = 0.1
    """AdamW weight decay (the fit reaches a training AUC near 1 on 400 problems: the decay keeps it from
    sharpening further; validation AUC 0.95 on docs/reproduce-sealed's tables)"""
    folds: int = 4
    """folds over problems where the verifier scores its own training problems (cross-fitting)"""
    seed: int = 0
    """seed of the initial weights"""

    def __post_init__(self) -> None:
        object.__setattr__(self, "features", tuple(self.features))
        unknown = [f for f in self.features if f not in VERIFIER_FEATURE_SETS]
        if unknown or not self.features:
            raise ValueError(f"unknown or no features {unknown}; choose from {list(VERIFIER_FEATURE_SETS)}")
        if self.steps < 0 or self.lr <= 0 or self.weight_decay < 0:
            raise ValueError("steps must be >= 0, lr > 0 and weight_decay >= 0")
        if self.folds < 2:
            raise ValueError(f"folds must be >= 2, got {self.folds}")
        if self.width < 1 or self.hidden_proj < 1:
            raise ValueError("width and hidden_proj must be >= 1")


def verifier_config_from_table(table, config: VerifierTrainConfig) -> VerifierConfig:
    """The verifier's shape for a ``SampleTable`` (read through its attributes): its confidence
    columns, its hidden width (``hidden`` dropped without one), its token budget."""
    hidden = 0 if table.hidden is None else int(table.hidden.shape[-1])
    features = tuple(f for f in config.features if f != "hidden" or hidden)
    if not features:
        raise ValueError("the verifier would read nothing: the table has no hidden states")
    return VerifierConfig(tuple(table.confidence_names), features, hidden if "hidden" in features else 0,
                          config.hidden_proj, config.width, int(table.header["token_budget"]))


def attempt_labels(inputs: AttemptInputs) -> torch.Tensor:
    """``[P, A, N]`` bool: the attempt's answer is right (False without an answer)."""
    if inputs.answer_correct is None:
        raise ValueError("training a verifier needs each answer's correctness")
    p, a, n = inputs.answers.shape
    padded = torch.cat([inputs.answer_correct, torch.zeros(p, 1, dtype=torch.bool)], dim=1)  # column K: none
    ids = torch.where(inputs.answers >= 0, inputs.answers, inputs.answer_correct.shape[1]).reshape(p, a * n)
    return padded.gather(1, ids).reshape(p, a, n)


def train_verifier(inputs: AttemptInputs, distinct, verifier_config: VerifierConfig, config: VerifierTrainConfig,
                   out_dir: str | Path | None = None, *, init_key: str = "") -> Verifier:
    """A verifier fitted on every distinct answered attempt of ``inputs`` (module docstring), saved to
    ``out_dir`` when given (``verifier.json``'s ``training`` records the config and the fit's
    size). ``init_key`` separates the initial weights of the folds of one cross-fit."""
    labels = attempt_labels(inputs)
    mask = attempt_mask(inputs.answers, distinct)  # [P, A, N]
    with single_thread(), torch.random.fork_rng():
        torch.manual_seed(row_seed(config.seed, "verifier-init", init_key))
        verifier = Verifier(verifier_config)
        verifier.set_standardisation(inputs, distinct)
        target = labels[mask].float()  # [M]
        optimizer = torch.optim.AdamW(verifier.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        verifier.train()
        for _ in range(config.steps if mask.any() else 0):  # no answered attempt: nothing to fit, the start kept
            logits = verifier.logits(inputs)[mask]  # [M]
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    verifier.eval()
    if out_dir is not None:
        save_verifier(out_dir, verifier, {**asdict(config), "features": list(verifier_config.features),
                                          "problems": int(inputs.problems), "attempts": int(mask.sum()),
                                          "right": int(target.sum())})
    return verifier


def fold_edges(problems: int, folds: int) -> np.ndarray:
    """``[folds + 1]`` the contiguous folds' boundaries over ``problems`` rows."""
    if not 2 <= folds <= problems:
        raise ValueError(f"cross-fitting needs 2 <= folds <= problems, got {folds} folds over {problems}")
    return np.linspace(0, problems, folds + 1).round().astype(int)


def crossfit_scores(inputs: AttemptInputs, distinct, verifier_config: VerifierConfig,
                    config: VerifierTrainConfig) -> torch.Tensor:
    """``[P, A, N]`` each attempt's verifier score from a verifier that never saw its problem:
    ``config.folds`` contiguous folds, each scored by one trained on the others."""
    edges = fold_edges(inputs.problems, config.folds)
    scores = torch.zeros(inputs.answers.shape)
    for f in range(config.folds):
        held = torch.arange(int(edges[f]), int(edges[f + 1]))
        rest = torch.cat([torch.arange(0, int(edges[f])), torch.arange(int(edges[f + 1]), inputs.problems)])
        verifier = train_verifier(inputs.rows(rest), distinct, verifier_config, config, init_key=f"fold-{f}")
        scores[held] = verifier.score(inputs.rows(held))
    return scores
