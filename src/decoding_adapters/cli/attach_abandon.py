"""``attach-abandon``: fit an abandon rule (``policies.abandon``) for an attempt adapter and write it
into the adapter's directory, so that ``generate``, ``serve`` and ``Adapter.generator()`` cut its
attempts short at the rule's checkpoints.

    decoding-adapters train-attempt --checkpoints 16 --no-stop-at-answer --out runs/attempt
    decoding-adapters attach-abandon --adapter runs/attempt/policies/price-0.01-seed-0 \\
        --table runs/attempt/tables/train --val-table runs/attempt/tables/validation

The prefix verifier is fitted on ``--table``'s checkpoints; the thresholds are tuned on
``--val-table`` for the fewest tokens per problem at the policy's own accuracy there, less
``--tolerance`` (``evaluation.abandon.fit_for_policy``). Both tables must hold checkpoints (built
with ``--checkpoints M``) and the attempts the adapter makes live: its arms, its token budget and
its stop at the first answer. Writes ``abandon.json`` + ``abandon.safetensors`` beside
``adapter.json``; an adapter that already carries a rule keeps it unless ``--force``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from ..core.files import lock_output_dir
from ..evaluation.abandon import fit_for_policy
from ..evaluation.sample_table import SampleTable
from ..policies.abandon import ABANDON_JSON, save_abandon_rule
from ..policies.adapter_files import read_adapter_config
from ..policies.attempt import load_attempt_adapter
from ..policies.model_card import write_model_card
from ..training.abandon import TOLERANCE
from ..training.verifier import VerifierTrainConfig
from .config_args import add_config_arguments, build_config


@dataclass(frozen=True)
class AttachAbandonOptions:
    """the adapter and the tables the rule is fitted on"""

    adapter: str
    """attempt adapter directory the rule is written into (train-attempt's OUT/policies/price-P-seed-S)"""
    table: str
    """training sample table with checkpoints: the prefix verifier is fitted on it"""
    val_table: str
    """validation sample table with checkpoints: the thresholds are tuned on it"""
    tolerance: float = TOLERANCE
    """accuracy (a share) the cuts may lose against the policy without cutting, on the validation table"""
    force: bool = False
    """replace the abandon rule the adapter already carries"""

    def __post_init__(self) -> None:
        if not 0 <= self.tolerance < 1:
            raise ValueError(f"--tolerance must be in [0, 1), got {self.tolerance}")


def configure_parser(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, AttachAbandonOptions)
    add_config_arguments(p, VerifierTrainConfig, title="prefix verifier", exclude=("folds",))


def run_cli(args) -> int:
    options = build_config(AttachAbandonOptions, args)
    config = build_config(VerifierTrainConfig, args)
    adapter = Path(options.adapter)
    policy, fields = load_attempt_adapter(adapter)
    if (adapter / ABANDON_JSON).exists() and not options.force:
        raise ValueError(f"{adapter} already carries an abandon rule ({ABANDON_JSON}): give --force to replace it")
    lock_output_dir(adapter, "--adapter")
    train, validation = SampleTable.load(options.table), SampleTable.load(options.val_table)
    tuned = fit_for_policy(policy, train, validation, stop_at_answer=fields["stop_at_answer"], config=config,
                           tolerance=options.tolerance)
    on_validation = {"accuracy": tuned.accuracy, "tokens": tuned.tokens, "accuracy_without": tuned.reference_accuracy,
                     "tokens_without": tuned.reference_tokens}
    save_abandon_rule(adapter, tuned.rule, training={
        "tables": {"train": options.table, "validation": options.val_table}, "tolerance": options.tolerance,
        "verifier": asdict(config), "validation": on_validation})
    write_model_card(adapter, read_adapter_config(adapter))  # the card names the rule it now carries
    rule = tuned.rule
    print(f"abandon rule: checkpoints every {rule.every} tokens, thresholds "
          f"{', '.join(f'{t:.3f}' for t in rule.thresholds)} (0: never cut)")
    print(f"on the validation table: accuracy {100 * tuned.reference_accuracy:.1f}% -> {100 * tuned.accuracy:.1f}%, "
          f"tokens per problem {tuned.reference_tokens:.1f} -> {tuned.tokens:.1f}")
    print(json.dumps({"adapter": str(adapter), "every": rule.every, "thresholds": list(rule.thresholds),
                      **on_validation}))
    return 0
