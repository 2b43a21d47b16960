"""The one place that reads a published run's ``eval_details.json``: :class:`RunFiles` (methods,
problems, seeds, each method's family, per-problem rows, compute per problem, draft choices and the
committed confidence). It uses the newer fields where a run has them (a method's ``family``,
``per_problem[name]["answer_accuracy"]``, the ``"answer"`` entry of ``decodes_per_problem`` /
``tokens_per_problem``) and derives them otherwise; ``rederive`` checks the published numbers
against what it reads."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..core.stats import problem_means
from ..evaluation.methods import ANSWER_ACCURACY
from .cells import is_rate, is_static

__all__ = ["RunFiles", "FAMILIES"]

FAMILIES = ("static", "fixed rule", "learned")
_FIXED_RULE_ROLES = ("confidence threshold",)
_CONTROL_ROLES = ("random gate",)


@dataclass
class RunFiles:
    """A published run's committed files: ``details`` is ``eval_details.json``."""

    details: dict
    """The parsed ``eval_details.json``."""

    @classmethod
    def load(cls, folder: Path | str) -> "RunFiles":
        return cls(json.loads((Path(folder) / "eval_details.json").read_text()))

    @property
    def methods(self) -> list[str]:
        return list(self.details["methods"])

    @property
    def problems(self) -> int:
        return len(self.details["problems"])

    @property
    def problem_ids(self) -> list[str]:
        return [p["id"] for p in self.details["problems"]]

    @property
    def seeds(self) -> int:
        return int(self.details["config"]["seeds"])

    @property
    def confidence(self) -> float:
        return float(self.details["config"].get("confidence", 0.95))

    @property
    def k_values(self) -> list[int]:
        return [int(k) for k in self.details["config"]["k_values"]]

    def method(self, name: str) -> dict:
        return self.details["methods"][name]

    def family(self, name: str) -> str:
        """``static`` / ``fixed rule`` / ``learned`` (``control`` for the random gate): the method's
        ``family`` field where the run records it, else from its kind and role."""
        m = self.method(name)
        if m.get("family"):
            return m["family"]
        if is_static(m):
            return "static"
        if m.get("role") in _FIXED_RULE_ROLES:
            return "fixed rule"
        return "control" if m.get("role") in _CONTROL_ROLES else "learned"

    @property
    def matched_compute(self) -> bool:
        """Whether the run was written under the matched-compute verdict rules: some method records
        its ``family`` or some per-problem answer accuracy is committed (module docstring)."""
        methods = self.details["methods"].values()
        return any(m.get("family") for m in methods) or any(
            metric.startswith(ANSWER_ACCURACY) for per in self.details.get("per_problem", {}).values()
            for metric in per)

    def rate_results(self) -> dict[str, dict[str, dict]]:
        """``{method: {metric: {"mean": ...}}}`` for every pass@k and answer accuracy with per-problem
        values: the mean over problems of each problem's mean, computed from the committed rows (the
        shape :mod:`.verdicts` reads; no interval, so nothing falls back to a published one)."""
        out = {}
        for name in self.methods:
            per = self.details.get("per_problem", {}).get(name, {})
            out[name] = {m: {"mean": sum(means) / len(means)} for m, rows in per.items()
                         if is_rate(m) and rows and (means := problem_means(rows))}
        return out

    def has_metric(self, name: str, metric: str) -> bool:
        return bool(self.details.get("per_problem", {}).get(name, {}).get(metric))

    def rows(self, name: str, metric: str) -> list:
        """``[problem][seed]`` values of ``metric`` (``pass@k``, ``answer_accuracy``, ``mean_length``)."""
        rows = self.details.get("per_problem", {}).get(name, {}).get(metric)
        if not rows:
            raise KeyError(f"no per-problem {metric} for {name}")
        return rows

    def compute(self, name: str, unit: str, k: int | str) -> float | None:
        """Mean decodes (``unit`` 'decodes') or tokens ('tokens') per problem of ``name`` at pass@k
        (``k`` an int) or for its one answer (``k`` 'answer'); None where not recorded."""
        per = self.method(name).get(f"{unit}_per_problem") or {}
        value = per.get(str(k))
        return None if value is None else float(value)

    def draft_choices(self, name: str) -> tuple[list[int], list] | None:
        """(k values, ``[seed][problem][k index]`` policy outputs, 0 keeps the draft) of a draft-gated
        method; None for other methods."""
        d = self.details.get("draft", {}).get(name)
        return (d["k_values"], d["choices_by_seed"]) if d else None

    @property
    def draft_methods(self) -> list[str]:
        return list(self.details.get("draft", {}))

    def confidence_problems(self, name: str) -> set[str]:
        """Problems whose draft confidence (per-token max-prob, the summaries a gate reads) is committed
        for ``name``: the draft summaries where recorded, else its kept trajectories."""
        d = self.details.get("draft", {}).get(name, {})
        if d.get("confidence"):
            return set(d["confidence"])
        return {t["problem_id"] for t in self.details.get("trajectories", {}).get(name, [])
                if t.get("max_prob") and t.get("sample", 0) == 0}
