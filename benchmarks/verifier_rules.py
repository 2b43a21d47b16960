"""The learned verifier on committed sample tables: its ranking quality per family, and the strongest
rule that reads it against the strongest plain rule at 1.5 and 4 decodes per problem.

A verifier (``evaluation.verifier.fit_on_table``, the trainer's defaults) is fitted on the training
table; its quality (AUC, ECE, Brier) is measured cross-fitted on the training table and on the
validation and evaluated tables, over all attempts and per family. Every plain rule and every
verifier rule is tuned on the validation table and scored on the evaluated one
(``experiments.stages_rules.rule_entries``); at each compute level the strongest rule of each group is
chosen on validation (``reporting.rules.strongest_rules_at``: its validation curve highest there)
and the two are compared on the evaluated problems with a paired 95% interval, overall and per
family. The plain rules' points are also checked against the run's ``eval_details.json`` when given.

    PYTHONPATH=src .venv/bin/python benchmarks/verifier_rules.py                 # docs/reproduce-sealed
    PYTHONPATH=src .venv/bin/python benchmarks/verifier_rules.py --out runs/verifier-sealed
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from decoding_adapters.core.stats import paired_ci
from decoding_adapters.evaluation.sample_table import SampleTable
from decoding_adapters.evaluation.verifier import crossfit_table_scores, fit_on_table, ranking_quality, table_scores
from decoding_adapters.experiments.stages_rules import RULE_TABLE_KEY, problem_families, rule_entries
from decoding_adapters.policies.fixed_rules import RULES, VERIFIER_RULES
from decoding_adapters.reporting.rules import strongest_rules_at
from decoding_adapters.tasks import get_task
from decoding_adapters.training.verifier import VerifierTrainConfig

ROOT = Path(__file__).resolve().parent.parent
LEVELS = (1.5, 4.0)


def families_of(table: SampleTable, task) -> list[str]:
    """Each table problem's family, from the task's split the table was built from (by problem id)."""
    by_id = {p.id: p for p in task.load(table.header["split"])}
    return problem_families([by_id[i] for i in table.problem_ids])


def details_of(entries: dict) -> dict:
    """An eval_details of the entries alone (what ``strongest_rules_at`` reads)."""
    return {"methods": {n: e["method"] for n, e in entries.items()},
            "per_problem": {n: e["per_problem"] for n, e in entries.items()},
            "compute": {n: e["compute"] for n, e in entries.items()}}


def compare(plain: dict, reading: dict, at: float, families: list[str]) -> dict:
    """The strongest verifier rule against the strongest plain rule at ``at`` decodes (both chosen on
    validation), paired over the evaluated problems, overall and per family."""
    p, v = strongest_rules_at(plain, at)[0], strongest_rules_at(reading, at)[0]
    out = {"at": at, "plain": {k: p[k] for k in ("rule", "accuracy", "decodes", "validation")},
           "verifier": {k: v[k] for k in ("rule", "accuracy", "decodes", "validation")},
           "difference": paired_ci(v["values"], p["values"]), "per_family": {}}
    for family in sorted(set(families)):
        rows = [i for i, f in enumerate(families) if f == family]
        a, b = [v["values"][i] for i in rows], [p["values"][i] for i in rows]
        out["per_family"][family] = {"problems": len(rows), "verifier": statistics.fmean(a),
                                     "plain": statistics.fmean(b), "difference": paired_ci(a, b)}
    return out


def check_plain(entries: dict, details_path: Path) -> dict:
    """The recomputed plain rules' points against the committed run's (those it scored from its sample
    tables; the draft stage's controls are decoded): names and per-problem values."""
    committed = json.loads(details_path.read_text())
    names = [n for n, m in committed["methods"].items() if m.get("family") == "fixed rule" and RULE_TABLE_KEY in m]
    same = [n for n in names if n in entries
            and committed["per_problem"][n]["answer_accuracy"] == entries[n]["per_problem"]["answer_accuracy"]]
    return {"committed_points": len(names), "recomputed_points": len(entries), "identical": len(same)}


def _pct(c) -> str:
    return f"{100 * c[0]:+.1f} [{100 * c[1]:+.1f}, {100 * c[2]:+.1f}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    run = ROOT / "docs" / "reproduce-sealed"
    parser.add_argument("--train", type=Path, default=run / "tables" / "train")
    parser.add_argument("--validation", type=Path, default=run / "tables" / "validation")
    parser.add_argument("--evaluated", type=Path, default=run / "tables" / "evaluated")
    parser.add_argument("--details", type=Path, default=run / "eval_details.json",
                        help="the run's eval_details.json the plain rules' points are checked against ('' to skip)")
    parser.add_argument("--task-options", default='{"train_size": 1500, "validation_size": 400}',
                        help="get_task options of the task the tables were built from (JSON)")
    parser.add_argument("--out", type=Path, default=None, help="write the verifier and the figures here")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    train, validation, evaluated = (SampleTable.load(p) for p in (args.train, args.validation, args.evaluated))
    task = get_task(train.header["task"], **json.loads(args.task_options))
    families = {name: families_of(t, task) for name, t in
                (("train", train), ("validation", validation), ("evaluated", evaluated))}
    config = VerifierTrainConfig()
    verifier = fit_on_table(train, config, None if args.out is None else args.out / "verifier")
    scores = (table_scores(verifier, validation), table_scores(verifier, evaluated))
    quality = {"train (cross-fitted)": ranking_quality(crossfit_table_scores(train, config), train, families["train"]),
               "validation": ranking_quality(scores[0], validation, families["validation"]),
               "evaluated": ranking_quality(scores[1], evaluated, families["evaluated"])}
    for table, groups in quality.items():
        for group, q in groups.items():
            print(f"verifier on {table:21s} {group:11s}: AUC {q['auc']:.3f}  ECE {q['ece']:.3f}  Brier "
                  f"{q['brier']:.3f}  ({q['attempts']} attempts, {100 * q['right']:.1f}% right)")
    entries, _ = rule_entries(validation, evaluated, RULES + VERIFIER_RULES, verifier=scores)
    plain = {n: e for n, e in entries.items() if not e["method"].get("reads_verifier")}
    reading = {n: e for n, e in entries.items() if e["method"].get("reads_verifier")}
    check = check_plain(plain, args.details) if str(args.details) and args.details.is_file() else None
    if check is not None:
        print(f"plain rules' points: {check['identical']} of {check['committed_points']} committed points identical")
    comparisons = [compare(details_of(plain), details_of(reading), at, families["evaluated"]) for at in LEVELS]
    for c in comparisons:
        print(f"at {c['at']:g} decodes: strongest verifier rule {c['verifier']['rule']} "
              f"{100 * c['verifier']['accuracy']:.1f} vs strongest plain rule {c['plain']['rule']} "
              f"{100 * c['plain']['accuracy']:.1f}: {_pct(c['difference'])} (paired 95% CI, "
              f"{len(families['evaluated'])} problems)")
        for family, f in c["per_family"].items():
            print(f"    {family:11s} ({f['problems']} problems): {100 * f['verifier']:.1f} vs {100 * f['plain']:.1f}: "
                  f"{_pct(f['difference'])}")
    result = {"quality": quality, "comparisons": comparisons, "plain_check": check,
              "seconds": round(time.perf_counter() - started, 1)}
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "verifier_rules.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({"auc_validation": quality["validation"]["all"]["auc"],
                      **{f"gain_at_{c['at']:g}": c["difference"] for c in comparisons},
                      "plain_identical": check and check["identical"], "seconds": result["seconds"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
