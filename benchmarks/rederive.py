"""Re-derive a published run's numbers from its committed files alone.

Reads ``<run>/eval_details.json`` and recomputes the README's results table and every verdict of
``<run>/report.md`` (paired differences and intervals, per-seed directions and the interval over
seeds, compute-level leaders, targets, the draft-gated table), printing each number beside the
published one; names each number the committed files cannot give (a gap). Where the run publishes
its trained verifier and attempt policies with their tables, each is re-scored on the committed
tables without retraining (``decoding_adapters.evaluation.rescore``). Exits 1 on any mismatch.
The logic is ``decoding_adapters.reporting.rederive``.

    PYTHONPATH=src .venv/bin/python benchmarks/rederive.py                       # the committed run
    PYTHONPATH=src .venv/bin/python benchmarks/rederive.py --run docs/reproduce --readme README.md --quiet
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from decoding_adapters.evaluation.rescore import rescore
from decoding_adapters.reporting.rederive import rederive

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, default=ROOT / "docs" / "reproduce", help="the committed run's folder")
    parser.add_argument("--readme", default=str(ROOT / "README.md"),
                        help="the README whose results table is checked ('' to skip it)")
    parser.add_argument("--quiet", action="store_true", help="print only mismatches, gaps and the totals")
    args = parser.parse_args(argv)
    readme = Path(args.readme) if args.readme else None  # '' skips the README's table
    result = rederive(args.run, readme)
    print("\n".join(result.lines(verbose=not args.quiet)))
    # a run that publishes its trained verifier and policies: each re-scored on the committed tables
    rescored = rescore(args.run) if (args.run / "tables" / "evaluated").is_dir() and (
        (args.run / "policies").is_dir() or (args.run / "verifier").is_dir()) else []
    for check in rescored:
        if not (args.quiet and check.ok):
            print(f"{'ok  ' if check.ok else 'MISMATCH'} re-scored {check.where}: published {check.published}; "
                  f"from the weights {check.derived}")
    bad = [c for c in rescored if not c.ok]
    print(json.dumps({"checked": len(result.checks), "mismatches": len(result.mismatches),
                      "gaps": [g.where for g in result.gaps], "rescored": len(rescored),
                      "rescore_mismatches": len(bad)}))
    return 1 if result.mismatches or bad else 0


if __name__ == "__main__":
    sys.exit(main())
