"""The head-room of decoding adapters on a task, measured on validation problems before anything is tuned.

Three parts, each cached under ``--out`` (re-running the same command continues where it stopped):

1. **Sequence level** (``pool.jsonl``): ``--samples`` samples of every action of an evenly spread
   ``--pool-subsample`` of the 180-config pool plus greedy, at ``--seq-budget`` tokens; per k, the
   best single static action vs the per-problem oracle (in-sample and cross-fitted, see
   ``evaluation.headroom``).
2. **Token level** (``deviations.jsonl``): along each greedy trajectory (``--dev-budget`` tokens), at
   up to ``--dev-steps`` evenly spread unmasked steps (base max-prob <= ``--mask-threshold``), the
   greedy token is replaced by ``--dev-draws`` draws under each sampling action of the
   ``math-token`` preset and the row continues greedily; the reward change against greedy,
   bucketed by entropy, max-prob, position and remaining budget (t intervals over problems).
3. **Greedy's failures** (``greedy_plain.json``, ``greedy_cot.json``): greedy at
   ``--fail-budgets`` without and with the CoT instruction (one decode at the largest budget,
   cut), each wrong row classified (``evaluation.headroom.classify_failure``; a loop is a row cut
   by the budget whose last tokens repeat with a period, numbers aside).

Prints progress, writes ``summary.json`` and ends with one JSON line of the headline figures.

    PYTHONPATH=src .venv/bin/python benchmarks/headroom.py --out runs/headroom              # full
    PYTHONPATH=src .venv/bin/python benchmarks/headroom.py --out runs/headroom-tiny --size tiny
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from decoding_adapters.core.stats import mean_ci
from decoding_adapters.decoding.actions import GREEDY, PRESETS, ActionSet
from decoding_adapters.decoding.loop import StepFeatures, decode, row_seed
from decoding_adapters.decoding.rollouts import encode_problems
from decoding_adapters.evaluation.headroom import (
    FAILURE_CLASSES,
    bucket_summary,
    classify_failure,
    oracle_table,
    repetition_period,
)
from decoding_adapters.selection.coverage import build_pool
from decoding_adapters.selection.outcomes import OutcomeTable, evaluate_pool
from decoding_adapters.tasks import get_task
from decoding_adapters.tasks.base import problems_digest

SIZES = {
    "tiny": dict(problems=4, pool_subsample=2, samples=2, ks="1", dev_steps=1, dev_draws=1, fail_budgets="8,16",
                 seq_budget=12, dev_budget=12),
    "small": dict(problems=20, pool_subsample=4, samples=4, ks="1,2,4", dev_steps=2, dev_draws=1,
                  fail_budgets="48,96", seq_budget=48, dev_budget=48),
    "full": dict(problems=100, pool_subsample=12, samples=8, ks="1,2,4,8", dev_steps=3, dev_draws=2,
                 fail_budgets="48,96,128,256", seq_budget=48, dev_budget=48),
}

ENTROPY_EDGES = (0.0, 0.5, 1.0, 2.0, 1e9)
MAX_PROB_EDGES = (0.0, 0.5, 0.7, 0.85, 1.0)
POSITION_EDGES = (0, 4, 12, 24, 10_000)
REMAINING_EDGES = (1, 12, 24, 37, 10_000)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", required=True, help="folder for the caches, summary.json and the raw outputs")
    p.add_argument("--size", choices=sorted(SIZES), default="full", help="defaults for the options below")
    p.add_argument("--model", default=None, help="model name or path (default: the project's default model)")
    p.add_argument("--task", default="arithmetic")
    p.add_argument("--split", default="validation")
    p.add_argument("--problems", type=int, help="first N problems of the split")
    p.add_argument("--seq-problems", type=int,
                   help="problems of the sequence part to decode (default: --problems; 0: only summarise the tables)")
    p.add_argument("--seq-offset", type=int, default=0,
                   help="decode the sequence part from this problem of the split on (another process may do the rest)")
    p.add_argument("--pool-subsample", type=int, help="evenly spread actions of the 180-config pool (+ greedy)")
    p.add_argument("--samples", type=int, help="samples per (problem, action)")
    p.add_argument("--ks", help="comma-separated k of pass@k")
    p.add_argument("--seq-budget", type=int, help="token budget of the sequence-level part")
    p.add_argument("--dev-budget", type=int, help="token budget of the greedy trajectories deviated from")
    p.add_argument("--dev-steps", type=int, help="deviation steps per trajectory (evenly spread unmasked steps)")
    p.add_argument("--dev-draws", type=int, help="draws per sampling action at each deviation step")
    p.add_argument("--mask-threshold", type=float, default=0.95, help="steps with base max-prob above it are masked")
    p.add_argument("--fail-budgets", help="comma-separated budgets of the greedy-failure part")
    p.add_argument("--parts", default="failures,deviation,sequence", help="parts to run, in this order")
    p.add_argument("--batch-rows", type=int, default=128, help="rows decoded together")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (default: torch's); 1 is far faster on a CPU shared with other jobs")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    for key, value in SIZES[args.size].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.seq_problems = args.problems if args.seq_problems is None else args.seq_problems
    args.ks = [int(k) for k in str(args.ks).split(",")]
    args.fail_budgets = sorted({int(b) for b in str(args.fail_budgets).split(",")})
    args.parts = [s.strip() for s in args.parts.split(",") if s.strip()]
    return args


PART_KEYS = {
    "failures": ("problems", "fail_budgets"),
    "deviation": ("problems", "dev_budget", "dev_steps", "dev_draws", "mask_threshold"),
    # The outcome table is kept per (problem, action, sample): more problems or actions extend it.
    "sequence": ("samples", "seq_budget"),
}


def config_of(args, part: str | None = None) -> dict:
    """The settings a part's cache depends on (all settings when ``part`` is None)."""
    keys = PART_KEYS[part] if part else tuple(dict.fromkeys(k for ks in PART_KEYS.values() for k in ks))
    extra = () if part else ("seq_problems", "seq_offset", "pool_subsample")
    return {k: getattr(args, k) for k in ("task", "split", "seed", *keys, *extra)} | {"model": args.model or "default"}


def check_config(out: Path, part: str, config: dict) -> None:
    """Refuse to mix a part's cache with results made with other settings (each part is checked on
    its own, so a part not yet started may still be given other settings)."""
    path = out / f"config_{part}.json"
    if path.exists():
        stored = json.loads(path.read_text())
        if stored != config:
            diff = {k: (stored.get(k), config.get(k)) for k in sorted(set(stored) | set(config))
                    if stored.get(k) != config.get(k)}
            raise SystemExit(f"{out} holds {part} results made with other settings {diff}; use another --out")
    else:
        path.write_text(json.dumps(config, indent=1))


def atomic_write(path: Path, data) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


# ------------------------------------------------------------------ greedy trajectories (parts 2 and 3)


def greedy_decode(lm, task, problems, budget: int, cot: bool, seed: int, batch_rows: int, path: Path) -> dict:
    """Greedy rows of every problem at ``budget`` (cached): tokens, base entropy / max-prob per step, EOS flag."""
    if path.exists():
        return json.loads(path.read_text())
    t0 = time.perf_counter()
    prompts, _ = encode_problems(lm, task, problems, cot_ratio=1.0 if cot else 0.0, seed=seed)
    rows = {}
    for s in range(0, len(problems), batch_rows):
        chunk = list(range(s, min(s + batch_rows, len(problems))))
        res = decode(lm, [prompts[i] for i in chunk], ActionSet([GREEDY]), row_actions=0, token_budget=budget,
                     row_seeds=[row_seed("greedy", problems[i].id) for i in chunk])
        for j, i in enumerate(chunk):
            n = int(res.lengths[j])
            rows[problems[i].id] = dict(
                tokens=res.tokens[j, :n].tolist(), eos=bool(res.stopped_at_eos[j]),
                entropy=[round(float(x), 5) for x in res.entropy[j, :n]],
                max_prob=[round(float(x), 5) for x in res.max_prob[j, :n]],
            )
        log(f"  greedy {'cot' if cot else 'plain'} @ {budget}: {len(rows)}/{len(problems)} problems")
    seconds = time.perf_counter() - t0
    tokens = sum(len(r["tokens"]) for r in rows.values())
    data = dict(budget=budget, cot=cot, rows=rows, seconds=seconds, tokens=tokens)
    atomic_write(path, data)
    log(f"  greedy {'cot' if cot else 'plain'}: {tokens} tokens in {seconds:.0f}s ({tokens / seconds:.0f} tok/s)")
    return data


def cut_row(row: dict, budget: int) -> tuple[list[int], bool]:
    """The row's first ``budget`` tokens and whether it ended at EOS within them."""
    tokens = row["tokens"][:budget]
    return tokens, bool(row["eos"] and len(row["tokens"]) <= budget)


# ------------------------------------------------------------------ part 3: greedy's failures


def numbers_aside(lm, tokens: list[int], cache: dict[int, int]) -> list[int]:
    """``tokens`` with every all-digit token replaced by -1, so that a loop that counts ("24 + 1 = 25.
    25 + 1 = 26. ...") repeats exactly."""
    for t in tokens:
        if t not in cache:
            cache[t] = -1 if lm.tokenizer.decode([t]).strip().isdigit() else t
    return [cache[t] for t in tokens]


def failures_part(lm, task, problems, args, out: Path) -> dict:
    by_id = {p.id: p for p in problems}
    digit_cache: dict[int, int] = {}
    result = {}
    for cot in (False, True):
        name = "cot" if cot else "plain"
        data = greedy_decode(lm, task, problems, max(args.fail_budgets), cot, args.seed, args.batch_rows,
                             out / f"greedy_{name}.json")
        per_budget = {}
        examples = []
        for b in args.fail_budgets:
            counts = dict.fromkeys(FAILURE_CLASSES, 0)
            right = cut = exact_loops = looping = looping_failures = 0
            for pid, row in data["rows"].items():
                problem = by_id[pid]
                tokens, ended = cut_row(row, b)
                masked = numbers_aside(lm, tokens, digit_cache)
                cut += not ended
                exact_loops += not ended and repetition_period(tokens) is not None
                loops = not ended and repetition_period(masked) is not None  # whatever else the row did
                looping += loops
                text = lm.tokenizer.decode(tokens, skip_special_tokens=True)
                if task.reward(problem, text) >= 0.5:
                    right += 1
                    continue
                looping_failures += loops
                cls = classify_failure(masked, ended, text, lambda t, p=problem: task.reward(p, t) >= 0.5)
                counts[cls] += 1
                if b == max(args.fail_budgets) and len(examples) < 12:
                    examples.append(dict(problem=pid, answer=problem.answer, cls=cls, text=text))
            n = len(data["rows"])
            per_budget[str(b)] = dict(accuracy=right / n, failures=n - right, cut_fraction=cut / n, classes=counts,
                                      looping_rows=looping, looping_failures=looping_failures,
                                      exact_looping_rows=exact_loops)
            log(f"  {name} @ {b}: greedy {100 * right / n:.1f}%, {n - right} failures {counts}, "
                f"{100 * cut / n:.0f}% of rows cut, {looping} rows loop ({exact_loops} exactly, "
                f"{looping_failures} of the {looping} wrong)")
        result[name] = dict(budgets=per_budget, examples=examples, tok_per_s=data["tokens"] / data["seconds"])
    return result


# ------------------------------------------------------------------ part 2: one-step deviations


def deviation_part(lm, task, problems, args, out: Path) -> dict:
    data = greedy_decode(lm, task, problems, args.dev_budget, False, args.seed, args.batch_rows,
                         out / f"greedy_dev_{args.dev_budget}.json")
    actions = list(PRESETS["math-token"])
    sampling = [i for i, a in enumerate(actions) if not a.is_greedy]  # greedy's deviation is 0 by construction
    action_set = ActionSet(actions)
    prompts, _ = encode_problems(lm, task, problems, seed=args.seed)
    path = out / "deviations.jsonl"
    done, records = set(), []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue  # a torn last line: its problem is not marked done and is decoded again
            if "done" in r:
                done.add(r["done"])
            else:
                records.append(r)
        records = [r for r in records if r["problem"] in done]
    B = args.dev_budget
    todo = [i for i, p in enumerate(problems) if p.id not in done]
    log(f"  deviations: {len(done)} problems cached, {len(todo)} to run "
        f"({args.dev_steps} steps x {len(sampling)} actions x {args.dev_draws} draws each)")
    t0, tokens_done = time.perf_counter(), 0
    per_chunk = max(1, args.batch_rows // max(1, args.dev_steps * len(sampling) * args.dev_draws))
    with path.open("a") as fh:
        for s in range(0, len(todo), per_chunk):
            chunk = todo[s : s + per_chunk]
            dev_prompts, prompt_of_row, row_action, budgets, seeds, meta = [], [], [], [], [], []
            for i in chunk:
                p, row = problems[i], data["rows"][problems[i].id]
                steps = [t for t, m in enumerate(row["max_prob"]) if m <= args.mask_threshold]
                if len(steps) > args.dev_steps:
                    steps = [steps[j] for j in np.unique(np.round(np.linspace(0, len(steps) - 1, args.dev_steps)))
                             .astype(int)]
                for t in steps:
                    dev_prompts.append(prompts[i] + row["tokens"][:t])
                    for a in sampling:
                        for d in range(args.dev_draws):
                            prompt_of_row.append(len(dev_prompts) - 1)
                            row_action.append(a)
                            budgets.append(B - t)
                            seeds.append(row_seed("deviation", args.seed, p.id, t, a, d))
                            meta.append((i, t, a, d))
            if prompt_of_row:
                actions_of_row = torch.tensor(row_action)

                def chooser(f: StepFeatures, actions_of_row=actions_of_row) -> torch.Tensor:
                    # The deviation is the first token only; every later token is greedy (action 0).
                    return actions_of_row[f.rows] if f.step == 0 else torch.zeros(len(f.rows), dtype=torch.long)

                res = decode(lm, dev_prompts, action_set, prompt_of_row=prompt_of_row, chooser=chooser,
                             token_budget=budgets, row_seeds=seeds)
                tokens_done += int(res.lengths.sum())
                lines = []
                for r, (i, t, a, d) in enumerate(meta):
                    p, row = problems[i], data["rows"][problems[i].id]
                    new = res.tokens[r, : int(res.lengths[r])].tolist()
                    text = lm.tokenizer.decode(row["tokens"][:t] + new, skip_special_tokens=True)
                    greedy_text = lm.tokenizer.decode(row["tokens"][:B], skip_special_tokens=True)
                    g = task.reward(p, greedy_text)
                    lines.append(dict(problem=p.id, step=t, action=actions[a].name, draw=d,
                                      entropy=row["entropy"][t], max_prob=row["max_prob"][t], remaining=B - t,
                                      changed=new[0] != row["tokens"][t], greedy_reward=g,
                                      reward=task.reward(p, text), delta=task.reward(p, text) - g))
                records += lines
                fh.writelines(json.dumps(x) + "\n" for x in lines)
            fh.writelines(json.dumps({"done": problems[i].id}) + "\n" for i in chunk)
            fh.flush()
            os.fsync(fh.fileno())
            seconds = time.perf_counter() - t0
            log(f"  deviations: {len(done) + s + len(chunk)}/{len(problems)} problems, {len(records)} draws, "
                f"{tokens_done / max(seconds, 1e-9):.0f} tok/s")
    return summarise_deviations(records, actions, sampling)


def summarise_deviations(records, actions, sampling) -> dict:
    out = dict(draws=len(records), steps=len({(r["problem"], r["step"]) for r in records}),
               problems=len({r["problem"] for r in records}))
    if not records:
        return out
    out["changed"] = sum(r["changed"] for r in records) / len(records)
    features = dict(entropy=ENTROPY_EDGES, max_prob=MAX_PROB_EDGES, step=POSITION_EDGES, remaining=REMAINING_EDGES)
    tables = {}
    for name in ["all"] + [actions[a].name for a in sampling]:
        subset = records if name == "all" else [r for r in records if r["action"] == name]
        tables[name] = {"overall": [b.to_dict() for b in bucket_summary(subset, "step", (0, 10_000))]} | {
            f: [b.to_dict() for b in bucket_summary(subset, f, edges)] for f, edges in features.items()
        }
    out["buckets"] = tables
    positive = []
    for action, per_feature in tables.items():
        for feature, rows in per_feature.items():
            for b in rows:
                if b["mean"] > 0:
                    positive.append(dict(action=action, feature=feature, **b,
                                         significant=b["low"] is not None and b["low"] > 0))
    out["positive_buckets"] = positive
    # Upper bound of per-step choice: at each step the best action's mean change (over its draws).
    best_per_step: dict[tuple, dict[str, list[float]]] = {}
    for r in records:
        best_per_step.setdefault((r["problem"], r["step"]), {}).setdefault(r["action"], []).append(r["delta"])
    best = [max(0.0, max(sum(v) / len(v) for v in acts.values())) for acts in best_per_step.values()]
    out["steps_with_a_helping_action"] = sum(b > 0 for b in best) / len(best)
    fixed = {r["problem"] for r in records if r["greedy_reward"] < 0.5 and r["reward"] >= 0.5}
    wrong = {r["problem"] for r in records if r["greedy_reward"] < 0.5}
    out["greedy_failures_fixed_by_some_deviation"] = [len(fixed), len(wrong)]
    # Control: a draw that keeps greedy's token re-decodes greedy from a re-prefilled prefix, whose
    # rounding differs from the incremental decode; its change is the test's noise floor.
    for group, changed in (("unchanged", False), ("changed", True)):
        deltas = [r["delta"] for r in records if bool(r["changed"]) == changed]
        if deltas:
            out[f"draws_{group}"] = dict(draws=len(deltas), mean=sum(deltas) / len(deltas),
                                         up=sum(d > 0 for d in deltas), down=sum(d < 0 for d in deltas))
    # Not observable by a policy, but it says where the change comes from.
    for group, greedy_right in (("greedy_right", True), ("greedy_wrong", False)):
        subset = [r["delta"] for r in records if (r["greedy_reward"] >= 0.5) == greedy_right]
        if subset:
            m, lo, hi = mean_ci(subset)
            out[f"mean_delta_{group}"] = dict(mean=m, low=None if math.isnan(lo) else lo,
                                             high=None if math.isnan(hi) else hi, draws=len(subset))
    return out


# ------------------------------------------------------------------ part 1: sequence-level oracle


def sequence_part(lm, task, problems, args, out: Path) -> dict:
    """Decode ``--seq-problems`` problems from ``--seq-offset`` on into an outcome table of their own
    (``pool.jsonl``, or ``pool_from<offset>.jsonl``, so that two processes can share the work), then
    summarise every problem of the split that some table in ``--out`` holds completely."""
    pool = build_pool("pool", subsample=args.pool_subsample, add_greedy=True)
    names = [a.name for a in pool]
    split = task.load(args.split)
    todo = split[args.seq_offset : args.seq_offset + args.seq_problems]
    data = {"split": args.split, "count": len(split), "digest": problems_digest(split)}  # any part of the split
    log(f"  {len(todo)} problems from #{args.seq_offset} x {len(pool)} actions ({', '.join(names)}) x "
        f"{args.samples} samples")
    t0 = time.perf_counter()

    def on_chunk(done, total):
        log(f"  pool: chunk {done}/{total} ({time.perf_counter() - t0:.0f}s)")

    if todo:
        path = out / ("pool.jsonl" if args.seq_offset == 0 else f"pool_from{args.seq_offset}.jsonl")
        evaluate_pool(lm, task, todo, pool, samples=args.samples, token_budget=args.seq_budget, seed=args.seed,
                      table_path=path, batch_rows=args.batch_rows, progress=False, on_chunk=on_chunk, data=data,
                      stop_at_answer=False)
    tables = [OutcomeTable.load(p) for p in sorted(out.glob("pool*.jsonl"))]

    def cell(pid: str, name: str) -> list[float] | None:
        for t in tables:
            got = t.outcomes(pid, name)
            if len(got) >= args.samples:
                return [o.reward for o in got[: args.samples]]
        return None

    problems = [p for p in split if all(cell(p.id, n) is not None for n in names)]
    if not problems:
        raise SystemExit("no problem has every action's samples yet")
    log(f"  summarising {len(problems)} problems held completely")
    rewards = np.array([[cell(p.id, n) for n in names] for p in problems])
    rows = oracle_table(rewards, names, [k for k in args.ks if k <= args.samples])
    per_action = {n: float(rewards[:, j].mean()) for j, n in enumerate(names)}
    greedy = names.index(GREEDY.name)
    best_sampled = max((j for j in range(len(names)) if j != greedy), key=lambda j: rewards[:, j].mean())
    pair = oracle_table(rewards[:, [greedy, best_sampled]], [names[greedy], names[best_sampled]],
                        [k for k in args.ks if k <= args.samples])
    for r in rows:
        crossfit = "-" if r.crossfit_oracle is None else (
            f"{100 * r.crossfit_best_static:.1f}% vs {100 * r.crossfit_oracle:.1f}% (+{100 * r.crossfit_headroom:.1f})"
        )
        log(f"  pass@{r.k}: best static {r.best_action} {100 * r.best_static:.1f}%, oracle "
            f"{100 * r.oracle:.1f}% (+{100 * r.headroom:.1f}); cross-fit {crossfit}")
    return dict(actions=names, problems=len(problems), problem_ids=[p.id for p in problems],
                pass1_per_action=per_action, oracle=[r.to_dict() for r in rows],
                oracle_greedy_vs_best_sampled=[r.to_dict() for r in pair])


# ------------------------------------------------------------------ report


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _pct_ci(value, ci) -> str:
    if value is None:
        return "-"
    if ci is None or any(x is None or math.isnan(x) for x in ci):
        return _pct(value)
    return f"{_pct(value)} [{_pct(ci[0])}, {_pct(ci[1])}]"


def _ci(b: dict) -> str:
    if b["low"] is None:
        return f"{b['mean']:+.3f}"
    return f"{b['mean']:+.3f} [{b['low']:+.3f}, {b['high']:+.3f}]"


def render_markdown(summary: dict) -> str:
    """The tables of ``summary.json`` as Markdown (``report.md`` next to it)."""
    lines = []
    seq = summary.get("sequence")
    if seq:
        lines += ["## Sequence level", "", f"Actions: {', '.join(seq['actions'])}; {seq['problems']} problems.",
                  "", "| k | best static action | best static pass@k | oracle pass@k | head-room | cross-fitted best "
                  "static | cross-fitted oracle | cross-fitted head-room |",
                  "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for r in seq["oracle"]:
            lines.append(f"| {r['k']} | {r['best_action']} | {_pct(r['best_static'])} | {_pct(r['oracle'])} | "
                         f"{_pct_ci(r['headroom'], r['headroom_ci'])} | {_pct(r['crossfit_best_static'])} | "
                         f"{_pct(r['crossfit_oracle'])} | "
                         f"{_pct_ci(r['crossfit_headroom'], r['crossfit_headroom_ci'])} |")
        lines += ["", "Oracle over greedy and the best sampled action only:", "",
                  "| k | best static | oracle | head-room | cross-fitted head-room |",
                  "| ---: | ---: | ---: | ---: | ---: |"]
        for r in seq["oracle_greedy_vs_best_sampled"]:
            lines.append(f"| {r['k']} | {_pct(r['best_static'])} ({r['best_action']}) | {_pct(r['oracle'])} | "
                         f"{_pct_ci(r['headroom'], r['headroom_ci'])} | "
                         f"{_pct_ci(r['crossfit_headroom'], r['crossfit_headroom_ci'])} |")
        per_action = "; ".join(f"{n} {_pct(v)}" for n, v in seq["pass1_per_action"].items())
        lines += ["", f"pass@1 per action: {per_action}", ""]
    dev = summary.get("deviation")
    if dev and "buckets" in dev:
        lines += ["## Token level: one-step deviations from greedy", "",
                  f"{dev['draws']} deviation draws at {dev['steps']} steps of {dev['problems']} greedy trajectories; "
                  f"{_pct(dev['changed'])}% of draws changed the token. Mean reward change (95% t interval over "
                  "problems):", ""]
        for action, per_feature in dev["buckets"].items():
            lines += [f"### {action}", "", "| feature | bucket | draws | problems | token changed | mean change |",
                      "| --- | --- | ---: | ---: | ---: | --- |"]
            for feature, rows in per_feature.items():
                for b in rows:
                    lines.append(f"| {feature} | {b['bucket']} | {b['deviations']} | {b['problems']} | "
                                 f"{_pct(b['changed'])}% | {_ci(b)} |")
            lines.append("")
        sig = [b for b in dev["positive_buckets"] if b["significant"]]
        lines += [f"Buckets with a positive mean change: {len(dev['positive_buckets'])}; with the whole interval above "
                  f"0: {len(sig)}.", ""]
        for g in ("unchanged", "changed"):
            if f"draws_{g}" in dev:
                d = dev[f"draws_{g}"]
                lines.append(f"- draws whose token is {g}: {d['draws']}, mean change {d['mean']:+.3f} "
                             f"({d['up']} up, {d['down']} down)")
        lines.append("")
        fixed, wrong = dev["greedy_failures_fixed_by_some_deviation"]
        lines += [f"Greedy failures that some single deviation fixes: {fixed} of {wrong}. Steps where some action's "
                  f"mean change is positive: {_pct(dev['steps_with_a_helping_action'])}%.", ""]
        for g in ("greedy_right", "greedy_wrong"):
            if f"mean_delta_{g}" in dev:
                d = dev[f"mean_delta_{g}"]
                where = g.replace("_", " is ")
                lines.append(f"- mean change on problems where {where}: {_ci(d)} ({d['draws']} draws)")
        lines.append("")
    fail = summary.get("failures")
    if fail:
        lines += ["## Greedy's failures", "", "| prompt | budget | greedy % | rows cut % | failures | right then "
                  "overwritten | loop | cut by budget | wrong computation | rows looping (exact) |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for name, part in fail.items():
            for budget, f in part["budgets"].items():
                c = f["classes"]
                lines.append(f"| {name} | {budget} | {_pct(f['accuracy'])} | {_pct(f['cut_fraction'])} | "
                             f"{f['failures']} | {c['right_then_overwritten']} | {c['repetition_loop']} | "
                             f"{c['cut_by_budget']} | {c['wrong_computation']} | "
                             f"{f['looping_rows']} ({f['exact_looping_rows']}) |")
        lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------ main


def headline(summary: dict) -> dict:
    line = {"benchmark": "headroom"}
    seq = summary.get("sequence")
    if seq:
        for r in seq["oracle"]:
            line[f"best_static_pass{r['k']}"] = round(100 * r["best_static"], 2)
            line[f"oracle_pass{r['k']}"] = round(100 * r["oracle"], 2)
            line[f"headroom_pass{r['k']}"] = round(100 * r["headroom"], 2)
            if r["crossfit_headroom"] is not None:
                line[f"crossfit_headroom_pass{r['k']}"] = round(100 * r["crossfit_headroom"], 2)
    dev = summary.get("deviation")
    if dev and "buckets" in dev:
        overall = dev["buckets"]["all"]["overall"][0]
        line["deviation_mean_delta"] = round(overall["mean"], 4)
        line["deviation_positive_significant_buckets"] = sum(b["significant"] for b in dev["positive_buckets"])
    fail = summary.get("failures")
    if fail:
        for name, part in fail.items():
            for b, fig in part["budgets"].items():
                line[f"greedy_{name}_{b}"] = round(100 * fig["accuracy"], 2)
                line[f"loops_{name}_{b}"] = fig["looping_rows"]
    line["seconds"] = round(summary.get("seconds", 0.0), 1)
    return line


def run(args, lm=None, task=None) -> dict:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if args.threads:
        torch.set_num_threads(args.threads)
    if lm is None:
        from decoding_adapters.lm.models import ModelSpec, load_frozen_lm

        lm = load_frozen_lm(ModelSpec(name_or_path=args.model) if args.model else None)
    task = task or get_task(args.task)
    problems = task.load(args.split)[: args.problems]
    log(f"{len(problems)} {args.split} problems of {args.task}; parts {args.parts}; "
        f"torch threads {torch.get_num_threads()}")
    summary = {"config": config_of(args)}
    parts = {"failures": failures_part, "deviation": deviation_part, "sequence": sequence_part}
    for name in args.parts:
        log(f"part {name}")
        check_config(out, name, config_of(args, name))
        t = time.perf_counter()
        summary[name] = parts[name](lm, task, problems, args, out)
        summary[f"{name}_seconds"] = time.perf_counter() - t
        log(f"part {name} done in {summary[f'{name}_seconds']:.0f}s")
    summary["seconds"] = time.perf_counter() - t0
    atomic_write(out / "summary.json", summary)
    (out / "report.md").write_text(render_markdown(summary))
    line = headline(summary)
    print(json.dumps(line), flush=True)
    return summary


def main(argv=None) -> int:
    run(parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
