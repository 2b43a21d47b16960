"""The files a report reads: ``evaluate``'s output directory and the trainers' JSONL training logs."""

from __future__ import annotations

import json
from pathlib import Path

from ..decoding.actions import DecodingAction

__all__ = ["load_evaluation", "load_training_log", "log_records", "log_action_names"]


def load_evaluation(eval_dir: str | Path) -> tuple[dict, dict | None]:
    """``(results, details)`` from an ``evaluate`` output directory (details None if absent)."""
    eval_dir = Path(eval_dir)
    path = eval_dir / "results.json"
    if not path.is_file():
        raise FileNotFoundError(f"{eval_dir} holds no results.json: point --eval at a directory written by `evaluate`")
    details_path = eval_dir / "eval_details.json"
    details = json.loads(details_path.read_text()) if details_path.is_file() else None
    return json.loads(path.read_text()), details


def load_training_log(path: str | Path) -> list[dict]:
    """Records of a training log that carry ``action_probs``, in file order (torn lines skipped)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"training log not found: {path}")
    return [rec for rec in log_records(path) if isinstance(rec.get("action_probs"), list) and "step" in rec]


def log_records(path: Path) -> list[dict]:
    """The JSON objects of a JSONL log, in file order (torn or non-object lines skipped)."""
    out = []
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def log_action_names(path: Path, records: list[dict], given) -> list[str]:
    """Action names for a log: given explicitly, else from adapter.json next to the log."""
    if given:
        return list(given)
    adapter = path.parent / "adapter.json"
    if adapter.is_file():
        try:
            return [DecodingAction.from_dict(a).name for a in json.loads(adapter.read_text())["actions"]]
        except (KeyError, ValueError, TypeError):
            pass
    k = max((len(r["action_probs"]) for r in records), default=0)
    return [f"action {i}" for i in range(k)]
