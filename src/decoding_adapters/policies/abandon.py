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

Saved beside an attempt adapter (``save_abandon_rule``: ``abandon.safetensors``, the prefix verifier's
weights and standardisation, and ``abandon.json``, ``every``, the thresholds and the verifier's shape),
``generate``, ``serve`` and ``Adapter.generator()`` cut that adapter's attempts with it;
``load_abandon_rule`` refuses a damaged or inconsistent pair in one line naming the file.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from ..core.files import atomic_write, write_json
from ..decoding.checkpoints import checkpoint_tokens
from .attempt import AttemptInputs
from .bounds import ABANDON_JSON, ABANDON_WEIGHTS, check_abandon_fields, parse_json
from .verifier import Verifier, VerifierConfig, single_thread

__all__ = ["AbandonRule", "prefix_inputs", "ABANDON_FORMAT", "ABANDON_JSON", "ABANDON_WEIGHTS", "save_abandon_rule",
           "load_abandon_rule", "remove_abandon_rule"]

ABANDON_FORMAT = "decoding-adapters/abandon"
"""The ``format`` in ``abandon.json``."""


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

    def reading(self, names: Sequence[str]) -> "AbandonRule":
        """The rule given readings with the columns ``names`` (a live decode's: ``decoding.confidence.
        CONFIDENCE_FEATURES``); refused when they lack a column its verifier reads."""
        missing = [n for n in self.verifier.config.confidence_names if n not in names]
        if missing:
            raise ValueError(f"the abandon rule's verifier reads the confidence columns {missing}, which the readings "
                             f"lack (they have {list(names)})")
        return dataclasses.replace(self, confidence_names=tuple(names))

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


def save_abandon_rule(directory: str | Path, rule: AbandonRule, training: dict | None = None) -> Path:
    """Write ``abandon.safetensors`` and ``abandon.json`` atomically into ``directory`` (an adapter's:
    its attempts are then cut by ``rule`` wherever it decodes; module docstring)."""
    _check_rule(rule)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous().clone() for k, v in rule.verifier.state_dict().items()}
    atomic_write(directory / ABANDON_WEIGHTS, lambda tmp: save_file(state, str(tmp)))
    write_json(directory / ABANDON_JSON, {
        "format": ABANDON_FORMAT, "every": rule.every, "thresholds": list(rule.thresholds),
        "confidence_names": list(rule.confidence_names), "verifier": asdict(rule.verifier.config),
        "training": json.loads(json.dumps(training or {}))})
    return directory


def remove_abandon_rule(directory: str | Path) -> None:
    """Remove the abandon rule's files from ``directory`` (an adapter saved without one)."""
    for name in (ABANDON_JSON, ABANDON_WEIGHTS):  # the JSON first: a half-removed rule reads as incomplete, not valid
        (Path(directory) / name).unlink(missing_ok=True)


def load_abandon_rule(directory: str | Path) -> AbandonRule | None:
    """The abandon rule saved in ``directory`` (None where it holds none); a damaged or inconsistent
    ``abandon.json`` / ``abandon.safetensors`` is a one-line ValueError naming the file."""
    directory = Path(directory)
    meta_path, weights = directory / ABANDON_JSON, directory / ABANDON_WEIGHTS
    if not meta_path.is_file():
        if weights.exists():
            raise ValueError(f"{weights} has no {ABANDON_JSON} beside it: the abandon rule is incomplete")
        return None
    try:
        meta = parse_json(meta_path.read_text(encoding="utf-8"), ABANDON_JSON)
        if not isinstance(meta, dict) or meta.get("format") != ABANDON_FORMAT:
            raise ValueError(f"not an abandon rule (format {meta.get('format') if isinstance(meta, dict) else None!r})")
        check_abandon_fields(meta)
        config = VerifierConfig.from_dict(meta["verifier"])
        rule = AbandonRule(Verifier(config), meta["every"], tuple(float(t) for t in meta["thresholds"]),
                           tuple(meta["confidence_names"]))
        _check_rule(rule)
    except (ValueError, TypeError, UnicodeDecodeError) as err:  # JSONDecodeError is a ValueError
        raise ValueError(f"{meta_path}: {str(err).splitlines()[0] if str(err) else type(err).__name__}") from None
    try:
        rule.verifier.load_state_dict(_weights(weights))
    except RuntimeError as err:  # missing, unexpected or mis-shaped tensors
        raise ValueError(f"{weights} does not fit the prefix verifier {meta_path} describes: "
                         f"{str(err).strip().splitlines()[0]}") from None
    rule.verifier.eval()
    return rule


def _check_rule(rule: AbandonRule) -> None:
    """``every``, the thresholds and the verifier fit together: one threshold per checkpoint below the
    verifier's token budget, each in [0, 1]; the columns the verifier reads among the rule's."""
    budget = rule.verifier.config.token_budget
    if isinstance(rule.every, bool) or not isinstance(rule.every, int) or not 1 <= rule.every < budget:
        raise ValueError(f"every must be an integer from 1 to below the token budget {budget}, got {rule.every!r}")
    marks = checkpoint_tokens(rule.every, budget)
    if len(rule.thresholds) != len(marks):
        raise ValueError(f"{len(rule.thresholds)} thresholds for {len(marks)} checkpoints (every {rule.every} tokens "
                         f"below {budget}): one per checkpoint")
    if not all(np.isfinite(t) and 0.0 <= t <= 1.0 for t in rule.thresholds):
        raise ValueError(f"thresholds must be in [0, 1], got {list(rule.thresholds)}")
    rule.reading(rule.confidence_names)  # the verifier's columns are the rule's


def _weights(path: Path) -> dict:
    """``abandon.safetensors`` as a state dict, refused in one line when missing, unreadable or of
    another shape than its ``abandon.json`` describes."""
    try:
        state = load_file(str(path))
    except FileNotFoundError:
        raise ValueError(f"{path} not found: the abandon rule is incomplete") from None
    except Exception as err:  # safetensors raises its own error type on a truncated or corrupt file
        raise ValueError(f"{path}: unreadable weights ({str(err).splitlines()[0]}); the file is truncated or "
                         "corrupt") from None
    bad = [k for k, v in state.items() if v.is_floating_point() and not torch.isfinite(v).all()]
    if bad:
        raise ValueError(f"{path}: {bad[0]} holds NaN or infinite values")
    return state
