"""``report``: write report.md, results.json and figures from an evaluation directory (``reporting.report``)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..core.files import check_output_dir
from ..reporting.report import load_evaluation, verdicts, write_report
from .config_args import add_config_arguments


@dataclass(frozen=True)
class ReportOptions:
    """report"""

    eval: str
    """directory written by `evaluate` (results.json, eval_details.json)"""
    train_log: list[str] = field(default_factory=list)
    """a training log (JSONL) to plot, NAME=PATH, e.g. seq=runs/seq/train_log.jsonl (repeatable)"""
    action_names: str | None = None
    """comma-separated action names for the training logs (default: from adapter.json next to each log)"""
    title: str = "Decoding adapters: evaluation report"
    """the report's title"""
    out: str | None = None
    """report directory (default: the --eval directory)"""


def configure_parser(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, ReportOptions)


def _parse_logs(values: Sequence[str]) -> dict[str, str]:
    logs = {}
    for v in values:
        name, sep, path = v.partition("=")
        if not sep:
            name, path = Path(v).parent.name or Path(v).stem, v
        if not Path(path).is_file():
            raise FileNotFoundError(f"training log not found: {path}")
        logs[name] = path
    return logs


def run_cli(args) -> int:
    check_output_dir(args.out or args.eval)  # pre-flight (a report is regenerated from the evaluation: no --force)
    results, details = load_evaluation(args.eval)
    names = [n.strip() for n in args.action_names.split(",")] if args.action_names else None
    path = write_report(args.out or args.eval, results, details, _parse_logs(args.train_log), names, title=args.title)
    print(f"wrote {path}")
    for line in verdicts(results, details):
        print(line.splitlines()[0].removeprefix("- ").replace("**", ""))
    return 0
