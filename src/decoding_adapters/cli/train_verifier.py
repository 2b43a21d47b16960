"""``train-verifier``: train the learned verifier (``policies.verifier``) on a stored sample table and
report its ranking quality (AUC, ECE, Brier score): cross-fitted on the training table, and on
``--val-table`` when given (per family: the study's verifier stage and ``benchmarks/verifier_rules.py``).

    decoding-adapters train-verifier --table runs/rules/tables/train --val-table runs/rules/tables/validation \\
        --out runs/verifier
    decoding-adapters rules ... --verifier-dir runs/verifier  # every rule's variant that reads it, beside the others

Writes ``verifier.safetensors`` + ``verifier.json`` (loadable on its own: ``policies.verifier.load_verifier``)
and ``quality.json`` into ``--out``. The tables are built with ``rules`` or ``train-attempt`` (``--hidden`` keeps
the mean hidden states the verifier reads by default).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from ..core.files import write_json
from ..evaluation.sample_table import SampleTable
from ..evaluation.verifier import crossfit_table_scores, fit_on_table, ranking_quality, table_scores
from ..training.verifier import VerifierTrainConfig
from .config_args import add_config_arguments, build_config


@dataclass(frozen=True)
class TrainVerifierOptions:
    """the verifier's tables and output"""

    table: str
    """sample table directory of training problems the verifier is fitted on"""
    out: str
    """output directory (verifier.safetensors, verifier.json, quality.json)"""
    val_table: str | None = None
    """sample table directory its quality is also measured on (problems it never saw)"""


def configure_parser(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, TrainVerifierOptions)
    add_config_arguments(p, VerifierTrainConfig)


def _line(name: str, quality: dict) -> str:
    return ", ".join(f"{name} {group}: AUC {q['auc']:.3f} ECE {q['ece']:.3f} ({q['attempts']} attempts)"
                     for group, q in quality.items())


def run_cli(args) -> int:
    options = build_config(TrainVerifierOptions, args)
    config = build_config(VerifierTrainConfig, args)
    train = SampleTable.load(options.table)
    verifier = fit_on_table(train, config, options.out)
    quality = {"train (cross-fitted)": ranking_quality(crossfit_table_scores(train, config), train)}
    if options.val_table:
        validation = SampleTable.load(options.val_table)
        quality["validation"] = ranking_quality(table_scores(verifier, validation), validation)
    write_json(Path(options.out) / "quality.json", {"config": asdict(config), "tables": {
        "train": options.table, "validation": options.val_table}, "quality": quality})
    for name, q in quality.items():
        print(_line(name, q))
    print(json.dumps({"out": options.out, "features": list(verifier.config.features),
                      **{f"auc_{k.split()[0]}": q["all"]["auc"] for k, q in quality.items()}}))
    return 0
