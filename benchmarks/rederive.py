"""Re-derive a published run's numbers from its committed files alone.

Reads ``<run>/eval_details.json`` and recomputes the README's results table and every verdict of
``<run>/report.md`` (paired differences and intervals, per-seed directions and the interval over
seeds, compute-level leaders, targets, the draft-gated table), printing each number beside the
published one; names each number the committed files cannot give (a gap). Exits 1 on any mismatch.
The logic is ``decoding_adapters.reporting.rederive``.

    PYTHONPATH=src .venv/bin/python benchmarks/rederive.py                       # the committed run
    PYTHONPATH=src .venv/bin/python benchmarks/rederive.py --run docs/reproduce --readme README.md --quiet
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

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
    print(json.dumps({"checked": len(result.checks), "mismatches": len(result.mismatches),
                      "gaps": [g.where for g in result.gaps]}))
    return 1 if result.mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
