"""Re-score a published run's trained parts on its committed tables, without retraining.

A published study (``reproduce --publish``) commits the sample tables its rules and policies read
(``tables/``), the weights of its verifier (``verifier/``) and of every attempt policy
(``policies/``, the single-arm ones under ``policies/single-arm/``), and ``eval_details.json``.
:func:`rescore` loads each policy, uses it on the evaluated table exactly as the study scored it
(``evaluation.abandon.replay`` without a rule, on the table restricted to the policy's arms) and
checks, per problem, its answer's correctness and its decodes against the published per-problem columns of its
method; and the verifier's ranking quality (AUC, ECE, Brier, attempts, share right; overall and per
family) on the evaluated table against ``verifier_rules.json``. One torch thread, as training and
scoring ran. A policy whose weights are not published is named as a gap, never skipped.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

from ..policies.attempt import load_attempt_adapter
from ..policies.kinds import SEQUENTIAL_ATTEMPTS
from ..policies.verifier import load_verifier, single_thread
from .abandon import replay
from .decoder_choice import restrict_arms
from .methods import method_kind
from .sample_table import SampleTable
from .verifier import ranking_quality, table_scores

__all__ = ["Rescored", "rescore", "published_policy_dir"]


@dataclass(frozen=True)
class Rescored:
    """One published figure (or column) and what re-scoring the committed weights gives."""

    where: str
    published: str
    derived: str

    @property
    def ok(self) -> bool:
        return self.published == self.derived


def published_policy_dir(folder: Path, source: str) -> Path:
    """Where a published run keeps the policy the study trained in ``source`` (its run directory)."""
    source_path = Path(source)
    sub = "single-arm" if source_path.parent.name == "single-arm" else ""
    return Path(folder) / "policies" / sub / source_path.name


def _column(rows: list, seed: int) -> list[float]:
    return [float(row[seed]) for row in rows]


def _summary(values: list[float]) -> str:
    """A per-problem column in one comparable line: its length, sum and a digest of its values."""
    digest = hashlib.sha256(json.dumps(values).encode()).hexdigest()[:12]
    return f"{len(values)} problems, sum {sum(values):g}, sha256 {digest}"


def _rescore_policy(folder: Path, test: SampleTable, name: str, seed: int, run: dict, details: dict) -> list:
    where = f"{name}, seed {seed}"
    directory = published_policy_dir(folder, run.get("source") or "")
    if not run.get("source") or not (directory / "adapter.json").is_file():
        return [Rescored(where, "weights published", "(no weights in the folder: a gap)")]
    policy, _ = load_attempt_adapter(directory)
    arms = list(policy.config.arms)
    outcome, _ = replay(policy, restrict_arms(test, arms) if arms != test.arm_names else test)
    correct = outcome.correct.astype(float).tolist()
    decodes = outcome.attempts.astype(float).tolist()
    published_correct = _column(details["per_problem"][name]["answer_accuracy"], seed)
    published_decodes = _column(details["compute"][name]["decodes"]["by_seed"], seed)
    return [Rescored(f"{where}: answer right per problem", _summary(published_correct), _summary(correct)),
            Rescored(f"{where}: decodes per problem", _summary(published_decodes), _summary(decodes))]


def _sequential_attempts(kind: str) -> bool:
    """The method kind ``kind`` decodes sequential attempts (its weights re-score on a table)."""
    try:
        return method_kind(kind).decoding == SEQUENTIAL_ATTEMPTS
    except ValueError:
        return False


def _rescore_policies(folder: Path, test: SampleTable, details: dict) -> list[Rescored]:
    out = []
    for name, method in details.get("methods", {}).items():
        if "per_seed" not in method or not _sequential_attempts(method.get("kind", "")):
            continue
        for seed, run in enumerate(method["per_seed"]):
            out += _rescore_policy(folder, test, name, seed, run, details)
    return out


def _number(x) -> str:
    return "nan" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{float(x):.12g}"


def _rescore_verifier(folder: Path, test: SampleTable, details: dict) -> list[Rescored]:
    rules_file = folder / "verifier_rules.json"
    if not rules_file.is_file():
        return []
    published = json.loads(rules_file.read_text())["quality"]["evaluated"]
    if not (folder / "verifier" / "verifier.json").is_file():
        return [Rescored("verifier", "weights published", "(no weights in the folder: a gap)")]
    verifier, _ = load_verifier(folder / "verifier")
    families = [p.get("family", "") for p in details.get("problems", [])]
    derived = ranking_quality(table_scores(verifier, test), test, families if len(families) == test.shape[0] else None)
    return [Rescored(f"verifier on the evaluated table, {group}: {key}", _number(published[group].get(key)),
                     _number(derived.get(group, {}).get(key)))
            for group in published for key in ("attempts", "right", "auc", "ece", "brier")]


def rescore(folder: str | Path) -> list[Rescored]:
    """Every check of the published run in ``folder`` (module docstring)."""
    folder = Path(folder)
    details = json.loads((folder / "eval_details.json").read_text())
    test = SampleTable.load(folder / "tables" / "evaluated")
    with single_thread():
        return _rescore_verifier(folder, test, details) + _rescore_policies(folder, test, details)
