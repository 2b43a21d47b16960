"""Calibrate the embedded code task (pyfunc) against the default model (SmolLM2-135M-Instruct).

Prints, per family and overall, greedy accuracy and, for each sampling temperature, pass@1 (mean
over the k samples) and pass@k (any of the k samples correct) on the chosen split, at every token
budget in ``--budgets`` (decoded once at the largest budget; a smaller budget's completion is the
first tokens of the same row, which is what decoding with that budget produces, since every row
has its own seeded generator). Then measures the sandbox's verification throughput on the
completions of the run, next to the decode time, and prints one JSON line.

Uses the project's loader and decoder (``load_frozen_lm``, ``HFRollouts``): rows of one prompt
(1 greedy + k per temperature) share a prefill, ``--batch-rows`` rows decode together.

    PYTHONPATH=src .venv/bin/python benchmarks/calibrate_pyfunc.py --dump runs/pyfunc.jsonl      # default mixture
    PYTHONPATH=src .venv/bin/python benchmarks/calibrate_pyfunc.py --families affine,cond --per-family 16
    PYTHONPATH=src .venv/bin/python benchmarks/calibrate_pyfunc.py --split ood --limit 100
    PYTHONPATH=src .venv/bin/python benchmarks/calibrate_pyfunc.py --rescore runs/pyfunc.jsonl     # verifier changed
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter, defaultdict

from decoding_adapters.tasks.pyfunc import ALL_FAMILIES, PyFuncConfig, PyFuncTask


def run_model(task: PyFuncTask, problems, args) -> tuple[list[dict], float]:
    """One record per (temperature, problem): completions at every budget. Returns the decode seconds too."""
    import torch

    from decoding_adapters.decoding.actions import GREEDY, ActionSet, DecodingAction
    from decoding_adapters.decoding.loop import row_seed
    from decoding_adapters.decoding.rollouts import HFRollouts, RolloutRequest, encode_problems
    from decoding_adapters.lm.models import load_frozen_lm

    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    lm = load_frozen_lm()
    print(f"model loaded in {time.perf_counter() - t0:.0f}s; {len(problems)} problems", flush=True)
    actions = [GREEDY] + [DecodingAction(True, t) for t in args.temperatures]  # pure temperature sampling
    counts = [1] + [args.samples] * len(args.temperatures)
    prompts, _ = encode_problems(lm, task, problems)
    prompt_of_row, row_actions, row_seeds, sample_of_row = [], [], [], []
    for p in range(len(problems)):
        for a, n in enumerate(counts):
            for s in range(n):
                prompt_of_row.append(p), row_actions.append(a), sample_of_row.append(s)
                row_seeds.append(row_seed(args.seed, problems[p].id, a, s))
    request = RolloutRequest(prompts, prompt_of_row, row_seeds, max(args.budgets), row_actions)
    t0 = time.perf_counter()
    result = HFRollouts(lm, ActionSet(actions), batch_rows=args.batch_rows).run(request, progress=True)
    decode_s = time.perf_counter() - t0
    print(f"decoded {request.num_rows} rows x {max(args.budgets)} tokens in {decode_s:.0f}s", flush=True)
    temps = [0.0] + list(args.temperatures)
    by_key: dict[tuple[int, int], dict] = {}
    for row in range(request.num_rows):
        p, a = prompt_of_row[row], row_actions[row]
        rec = by_key.setdefault(
            (p, a),
            {
                "temperature": temps[a],
                "index": problems[p].id,
                "id": problems[p].id,
                "family": problems[p].meta["family"],
                "completions": {str(b): [] for b in args.budgets},
            },
        )
        tokens = result.tokens[row, : int(result.lengths[row])].tolist()
        for b in args.budgets:
            rec["completions"][str(b)].append(lm.tokenizer.decode(tokens[:b], skip_special_tokens=True))
    return list(by_key.values()), decode_s


def score(task: PyFuncTask, problems, records: list[dict]) -> None:
    """Add ``rewards`` (per budget, per completion) to every record, verifying in parallel."""
    by_id = {p.id: p for p in problems}
    pairs = [(by_id[r["id"]], c) for r in records for cs in r["completions"].values() for c in cs]
    rewards = iter(task.reward_batch([p for p, _ in pairs], [c for _, c in pairs]))
    for r in records:
        r["rewards"] = {b: [next(rewards) for _ in cs] for b, cs in r["completions"].items()}
    statuses = Counter(task.outputs(p, c).status for p, c in pairs)  # cached: no new sandbox runs
    print(f"sandbox statuses: {dict(statuses)}", flush=True)


def summarise(records: list[dict], budget: str, samples: int) -> dict[str, dict]:
    """Per family and overall: greedy accuracy, and pass@1 / pass@k per sampling temperature."""
    rewards = defaultdict(dict)  # (family, index) -> temperature -> [0/1 per completion]
    for r in records:
        rewards[r["family"], r["index"]][r["temperature"]] = r["rewards"][budget]
    temps = sorted({r["temperature"] for r in records} - {0.0})

    def row(keys):
        out = {"n": len(keys), "greedy": sum(rewards[k][0.0][0] for k in keys) / len(keys)}
        for t in temps:
            out[f"T{t}_pass@1"] = sum(sum(rewards[k][t]) / len(rewards[k][t]) for k in keys) / len(keys)
            out[f"T{t}_pass@{samples}"] = sum(max(rewards[k][t]) for k in keys) / len(keys)
        return out

    families = defaultdict(list)
    for key in rewards:
        families[key[0]].append(key)
    table = {fam: row(keys) for fam, keys in sorted(families.items(), key=lambda kv: ALL_FAMILIES.index(kv[0]))}
    table["overall"] = row(list(rewards))
    return table


def print_table(table: dict[str, dict], budget: str) -> None:
    header = list(table["overall"])
    print(f"\nbudget {budget} tokens")
    print("| family | " + " | ".join(header) + " |")
    print("|---" * (len(header) + 1) + "|")
    for fam, row in table.items():
        cells = [f"{v:.3f}" if isinstance(v, float) else str(v) for v in row.values()]
        print(f"| {fam} | " + " | ".join(cells) + " |")


def sandbox_throughput(problems, records: list[dict], workers: list[int], limit: int) -> dict[str, float]:
    """Programs verified per second (fresh task each time, so nothing is cached), by thread count."""
    by_id = {p.id: p for p in problems}
    budget = max(records[0]["completions"], key=int)
    pairs = [(by_id[r["id"]], c) for r in records for c in r["completions"][budget]][:limit]
    out = {}
    for w in workers:
        task = PyFuncTask(workers=w)
        t0 = time.perf_counter()
        task.reward_batch([p for p, _ in pairs], [c for _, c in pairs])
        out[f"workers={w}"] = len(pairs) / (time.perf_counter() - t0)
        print(f"sandbox: {len(pairs)} programs with {w} worker(s): {out[f'workers={w}']:.1f} programs/s", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--families", help="comma-separated families, equal weights, test split (default: the default mixture)"
    )
    parser.add_argument("--per-family", type=int, default=16, help="problems per family with --families")
    parser.add_argument("--split", default="test", help="split of the default config to calibrate on (test or ood)")
    parser.add_argument("--limit", type=int, default=None, help="N problems of the split (from --offset)")
    parser.add_argument(
        "--offset",
        type=int,
        default=0,
        help="skip the first problems (to extend a run; "
        "concatenate the dumps and --rescore them with --limit covering both)",
    )
    parser.add_argument("--temperatures", type=float, nargs="*", default=[0.5, 1.0])
    parser.add_argument("--samples", type=int, default=4, help="k of pass@k")
    parser.add_argument("--budgets", type=int, nargs="+", default=[32, 48], help="token budgets (max new tokens)")
    parser.add_argument("--batch-rows", type=int, default=108)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a shared 2-core box)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=4, help="sandbox runs in parallel when scoring")
    parser.add_argument(
        "--throughput", type=int, nargs="*", default=[1, 2, 4], help="worker counts to time the sandbox with"
    )
    parser.add_argument("--throughput-programs", type=int, default=200)
    parser.add_argument("--dump", help="write every completion and reward to this JSONL file")
    parser.add_argument("--rescore", help="summarise a --dump file with the current verifier (no model)")
    args = parser.parse_args()

    if args.families:
        names = args.families.split(",")
        # No train/validation: the whole pool of each family is available to the test split.
        cfg = PyFuncConfig(
            families=names, ood_families={}, test_size=args.per_family * len(names), train_size=0, validation_size=0
        )
        split = "test"
    else:
        cfg, split = PyFuncConfig(), args.split
    task = PyFuncTask(cfg, workers=args.workers)
    end = None if args.limit is None else args.offset + args.limit
    problems = task.load(split)[args.offset : end]
    decode_s = None
    if args.rescore:
        with open(args.rescore, encoding="utf-8") as handle:
            records = [json.loads(line) for line in handle]
    else:
        records, decode_s = run_model(task, problems, args)
    t0 = time.perf_counter()
    score(task, problems, records)
    verify_s = time.perf_counter() - t0
    n_programs = sum(len(cs) for r in records for cs in r["completions"].values())
    print(
        f"verified {n_programs} completions ({args.workers} workers, cached duplicates) in {verify_s:.0f}s", flush=True
    )
    if args.dump and not args.rescore:
        with open(args.dump, "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(r) + "\n" for r in records)
    budgets = sorted(records[0]["completions"], key=int)
    tables = {b: summarise(records, b, args.samples) for b in budgets}
    for b in budgets:
        print_table(tables[b], b)
    throughput = (
        sandbox_throughput(problems, records, args.throughput, args.throughput_programs) if args.throughput else {}
    )
    rows = sum(len(r["completions"][budgets[-1]]) for r in records)
    timing = {
        "decode_s": decode_s,
        "rows": rows,
        "max_budget": int(budgets[-1]),
        "verify_s": verify_s,
        "sandbox_programs_per_s": throughput,
    }
    if decode_s:
        timing["decode_rows_per_s"] = rows / decode_s
        print(
            f"decode: {rows / decode_s:.2f} rows/s at {budgets[-1]} tokens; "
            f"sandbox: {max(throughput.values(), default=0):.1f} programs/s",
            flush=True,
        )
    source = {"rescored": args.rescore} if args.rescore else {"config": cfg.to_dict(), "split": split}
    print(json.dumps({**source, "offset": args.offset, "limit": args.limit, "tables": tables, "timing": timing}))


if __name__ == "__main__":
    main()
