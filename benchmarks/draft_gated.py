"""The draft-gated adapter on the default task: both-arms tables, training, and the comparison.

Stages (each resumable; outputs under ``--out``):

1. ``tables``: the both-arms tables (``training.draft.build_draft_table``) of ``--val-problems``
   validation problems and ``--train-problems`` training problems: per problem the greedy draft
   (outcome, answer, confidence summary, mean and last hidden state, prompt embedding) and
   ``--samples`` re-decodes under each of ``--actions``.
2. ``train``: draft-gated adapters (``training.draft.DraftTrainer``) for each feature set of
   ``--features`` (and the prompt-fed control), each re-decode action set of ``--action-sets`` and
   each re-decode cost of ``--costs``; every choice is made on the validation table.
   ``join``: one pair of tables from tables decoded in parts (``--parts``), optionally with the
   re-decodes of another folder's tables (``--samples-from``: e.g. stopped drafts beside samples
   decoded without the stop).
3. ``compare``: on the validation table, per method, pass@1 (and pass@k with majority-vote accuracy
   at k > 1), decodes and tokens per problem, paired 95% intervals against Greedy, the strongest
   static method, the tuned confidence threshold at the same re-decode rate and the random gate
   (``evaluation.draft``). Writes ``compare.json``; the last line printed is its JSON.

    PYTHONPATH=src .venv/bin/python benchmarks/draft_gated.py tables --out runs/draft
    PYTHONPATH=src .venv/bin/python benchmarks/draft_gated.py train --out runs/draft
    PYTHONPATH=src .venv/bin/python benchmarks/draft_gated.py compare --out runs/draft
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from decoding_adapters.decoding.actions import DecodingAction
from decoding_adapters.decoding.protocol import STOP_AT_ANSWER
from decoding_adapters.lm.cpu_features import cpu_features
from decoding_adapters.lm.models import ModelSpec, load_frozen_lm
from decoding_adapters.tasks import get_task


def parse_action(text: str) -> DecodingAction:
    temperature, top_k, top_p, min_p = text.split(",")
    return DecodingAction(temperature=float(temperature), top_k=int(top_k), top_p=float(top_p), min_p=float(min_p))


def tables(args, lm, task) -> None:
    from decoding_adapters.selection.outcomes import OutcomeTable
    from decoding_adapters.training.draft import build_draft_table

    actions = [parse_action(a) for a in args.actions.split(";")]
    splits = {"validation": args.val_problems, "train": args.train_problems}
    for split in args.splits.split(","):
        start = time.perf_counter()
        problems = task.load(split)[args.offset: splits[split]]
        stored = OutcomeTable.load(args.stored) if args.stored and split == "train" else None
        build_draft_table(lm, task, problems, actions, samples=args.samples, token_budget=args.budget,
                          path=args.out / f"table_{split}.jsonl", split=split, seed=args.seed, stored=stored,
                          stop_at_answer=args.stop_at_answer,
                          on_chunk=lambda done, total, s=split, t0=start: print(
                              f"{s}: {done}/{total} problems ({time.perf_counter() - t0:.0f} s)", flush=True))


def join(args) -> None:
    """One pair of tables in ``--out`` from the tables of ``--parts`` (folders decoded under the same
    settings, e.g. a split's problems in two processes). With ``--samples-from``, every problem's
    re-decodes are taken from that folder's tables instead (the same problems' samples decoded
    another way, e.g. without the stop) and the header says so."""
    from decoding_adapters.training.draft import DraftTable, table_stop

    for split in ("train", "validation"):
        parts = [Path(p) / f"table_{split}.jsonl" for p in args.parts.split(",")]
        tables = [DraftTable.load(p) for p in parts if p.is_file()]
        if not tables:
            continue
        header = dict(tables[0].header)
        if any(t.header != header for t in tables[1:]):
            raise ValueError(f"the {split} tables of {args.parts} were decoded under other settings")
        records = {pid: r for t in tables for pid, r in t.records.items()}
        if args.samples_from:
            other = DraftTable.load(Path(args.samples_from) / f"table_{split}.jsonl")
            if other.header["actions"] != header["actions"]:
                raise ValueError("--samples-from holds other re-decode actions")
            missing = [pid for pid in records if pid not in other.records]
            if missing:
                raise ValueError(f"--samples-from lacks {len(missing)} {split} problems, e.g. {missing[0]}")
            # one stop covers drafts and samples: a table whose samples were not stopped reads as unstopped
            if not table_stop(other.header):
                for key in ("stop_at_answer", "draft_stop_at_answer", "redecode_stop_at_answer"):
                    header.pop(key, None)
            header.update({k: other.header[k] for k in ("samples", "samples_from") if k in other.header})
            header["samples_table"] = str(Path(args.samples_from) / f"table_{split}.jsonl")
            records = {pid: {**r, "samples": other.records[pid]["samples"]} for pid, r in records.items()}
        ids = sorted(records, key=lambda pid: int(pid.rsplit("/", 1)[1]))
        args.out.mkdir(parents=True, exist_ok=True)
        with (args.out / f"table_{split}.jsonl").open("w") as f:
            f.write(json.dumps({"header": header}) + "\n")
            for pid in ids:
                f.write(json.dumps(records[pid]) + "\n")
        print(f"{split}: {len(ids)} problems from {len(tables)} parts", flush=True)


def adapter_name(features: str, actions: list[str], cost: float, overrides: dict | None = None) -> str:
    name = f"{features}__{'+'.join(a.replace(',', '_').replace('=', '') for a in actions)}__cost{cost:g}"
    return name + "".join(f"__{k}{v:g}" if isinstance(v, float) else f"__{k}{v}" for k, v in (overrides or {}).items())


def grid(spec: str) -> list[dict]:
    """``{"lr": [1e-3, 3e-3], "policy_hidden": [32]}`` -> every combination, as DraftTrainConfig overrides."""
    import itertools

    options = json.loads(spec) if spec else {}
    keys = list(options)
    return [dict(zip(keys, values)) for values in itertools.product(*(options[k] for k in keys))] or [{}]


def train(args, lm, task) -> None:
    """One adapter per (features, re-decode action set, cost); the validation figure of each in
    ``train_summary.json`` (the choice is made there, on validation)."""
    from decoding_adapters.training.draft import DraftTable, DraftTrainConfig, DraftTrainer, table_stop

    train_table = DraftTable.load(args.out / "table_train.jsonl")
    names = [a.name for a in train_table.actions]
    stop = table_stop(train_table.header)  # the adapter decodes as its tables were
    action_sets = [[names[int(i)] for i in group.split("+")] for group in args.action_sets.split(",")]
    summary_path = args.out / f"train_summary{args.tag}.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    for features in args.features.split(","):
        for actions in action_sets:
            for cost, overrides in [(float(c), o) for c in args.costs.split(",") for o in grid(args.grid)]:
                name = adapter_name(features, actions, cost, overrides) + (
                    "" if args.budgets == "1" else f"__B{args.budgets.replace(',', '-')}") + args.tag
                if name in summary:
                    continue
                config = DraftTrainConfig(**{**dict(
                    table=str(args.out / "table_train.jsonl"), val_table=str(args.out / "table_validation.jsonl"),
                    features=features, redecode_actions=tuple(actions), redecode_cost=cost,
                    parallel_budgets=tuple(int(b) for b in args.budgets.split(",")), token_budget=args.budget,
                    steps=args.steps, prompts_per_step=args.prompts_per_step, val_every=args.val_every,
                    val_problems=args.val_problems, max_train_prompts=args.train_problems, prior_action=0,
                    checkpoint_every=args.val_every, seed=args.seed, lr=args.lr,
                    stop_at_answer=stop,
                ), **overrides})
                start = time.perf_counter()
                trainer = DraftTrainer(config, lm, task, args.out / "adapters" / name, progress=False)
                trainer.train(resume=True)
                best = json.loads((args.out / "adapters" / name / "adapter.json").read_text())["training"]
                log_path = args.out / "adapters" / name / "train_log.jsonl"
                summary[name] = {"features": features, "actions": actions, "cost": cost, "overrides": overrides,
                                 "budgets": list(config.parallel_budgets), "seconds":
                                 round(time.perf_counter() - start, 1), "val": validation_figures(trainer),
                                 "config": {k: best[k] for k in ("steps", "lr", "prompts_per_step")},
                                 "log": str(log_path)}
                print(f"{name}: {summary[name]['val']}", flush=True)
                summary_path.write_text(json.dumps(summary, indent=1) + "\n")


def validation_figures(trainer) -> dict:
    """The trained (kept) policy's validation pass@B (no cost subtracted) and re-decode share per budget."""
    from decoding_adapters.training.draft import arm_values

    ids = [p.id for p in trainer.val_problems]
    _, contexts, _ = trainer._encode(trainer.val_problems)
    out = {}
    for b in trainer.config.parallel_budgets:
        choice, _ = trainer.policy.choose(contexts, torch.full((len(ids),), b))
        values = torch.cat([arm_values(trainer.rewards.records[i][0], [i], trainer.rewards.actions, b) for i in ids])
        out[str(b)] = {"pass": round(100 * float(values.gather(1, choice.unsqueeze(1)).mean()), 1),
                       "redecode_share": round(float((choice > 0).double().mean()), 3)}
    return out


def chosen_adapters(args, budget: int) -> dict[str, str]:
    """The adapters a user would pick on validation for parallel budget B: per group (the draft's
    feature sets, or the prompt-fed control) the best validation pass@B among those trained at B
    that spend at most ``--max-decodes`` decodes per problem at B = 1 (ties: fewer re-decodes)."""
    summary = json.loads((args.out / f"train_summary{args.tag}.json").read_text())
    best: dict[str, tuple] = {}
    for name, row in summary.items():
        figure = row["val"].get(str(budget))
        if figure is None or (budget == 1 and 1 + figure["redecode_share"] > args.max_decodes + 1e-9):
            continue
        if budget > 1 and row.get("budgets", [1]) == [1]:
            continue
        group = "Draft-gated (prompt)" if row["features"] == "prompt" else "Draft-gated"
        key = (figure["pass"], -figure["redecode_share"])
        if group not in best or key > best[group][0]:
            best[group] = (key, name)
    return {group: name for group, (_, name) in best.items()}


def compare(args) -> dict:
    """Every method on the validation table at each budget (see the module docstring)."""
    from decoding_adapters.evaluation import draft as ev
    from decoding_adapters.policies.draft import DraftContextConfig
    from decoding_adapters.policies.networks import load_adapter
    from decoding_adapters.training.draft import DraftTable, table_stop

    table = DraftTable.load(args.out / "table_validation.jsonl")
    train_table = DraftTable.load(args.out / "table_train.jsonl")
    train_ids = train_table.problem_ids[: args.train_problems]
    if args.report == "train-holdout":  # training-split problems no adapter was trained on
        table, ids = train_table, train_table.problem_ids[args.train_problems:]
        tuning = DraftTable.load(args.out / "table_validation.jsonl")
    else:
        ids, tuning = table.problem_ids, table
    action = table.actions[0].name
    stop = table_stop(table.header)
    # the draft alone is a static method: greedy (under the stop, as every method decodes), or greedy to the budget
    draft_name = "Greedy" if stop else "Greedy to the budget"
    sampler_name = f"Sampler ({action}{'' if stop else ', to the budget'})"
    greedy_table = None
    if args.greedy_table:
        greedy_table = DraftTable.load(Path(args.greedy_table) / (
            "table_train.jsonl" if args.report == "train-holdout" else "table_validation.jsonl"))
    out = {"report": args.report, "stop_at_answer": stop,
           "problems": len(ids), "action": action, "adapters": {}, "by_budget": {}}
    samples = min(len(table.records[i]["samples"][action]) for i in ids)
    features = args.threshold_features.split(",")
    on_train = ev.tune_threshold(train_table, train_ids, action, max_decodes=args.max_decodes, features=features)
    tuned = ev.tune_threshold(tuning, tuning.problem_ids, action, max_decodes=args.max_decodes, features=features)
    for budget in [b for b in (1, 2, 4, 8) if b <= samples]:
        adapters = chosen_adapters(args, budget)
        out["adapters"][str(budget)] = adapters
        choices = {}
        for group, name in adapters.items():
            policy, config = load_adapter(args.out / "adapters" / name)
            x = table.context(ids, DraftContextConfig(**config.draft))
            choices[group] = (policy, x, [a.name for a in config.action_list], name)
        rows = {draft_name: ev.static_rows(table, ids, None, budget, draft_name),
                sampler_name: ev.static_rows(table, ids, action, budget, "Sampler")}
        on_validation = {draft_name: ev.static_rows(tuning, tuning.problem_ids, None, budget),  # Best: chosen there
                         sampler_name: ev.static_rows(tuning, tuning.problem_ids, action, budget)}
        if greedy_table is not None:  # greedy run to EOS or the budget, decoded in other batches
            rows["Greedy (reference)"] = ev.static_rows(greedy_table, ids, None, budget, "Greedy")
        best_name = max(on_validation, key=lambda n: sum(on_validation[n].passed) / len(tuning.problem_ids))
        rows["Best"] = rows[best_name]
        redecode_all = ev.gated_rows(table, ids, [1] * len(ids), [action], budget, "redecode")
        oracle = ev.MethodRows("Oracle (per-problem best arm)", budget)  # keep (the draft alone) or re-decode
        keep = ev.gated_rows(table, ids, [0] * len(ids), [action], budget, "keep")
        for i in range(len(ids)):
            j = max((keep, redecode_all), key=lambda r: r.passed[i])
            oracle.add(j.passed[i], j.majority[i], j.decodes[i], j.tokens[i], j.redecoded[i])
        rows["Oracle (per-problem best arm)"] = oracle
        for group, (policy, x, actions, _) in choices.items():
            choice, _ = policy.choose(x, torch.full((len(ids),), budget))
            rows[group] = ev.gated_rows(table, ids, choice.tolist(), actions, budget, group)
        if "Draft-gated" in rows:
            share = sum(rows["Draft-gated"].redecoded) / len(ids)
            rows["Random gate (same share)"] = ev.random_gate_rows(table, ids, share, action, budget, "Random gate")
            best_feature = max(features, key=lambda f: sum(ev.gated_rows(  # the feature is chosen on validation
                tuning, tuning.problem_ids, ev.threshold_choices(ev.confidence_of(tuning, tuning.problem_ids, f),
                ev.threshold_for_rate(ev.confidence_of(tuning, tuning.problem_ids, f), share)), [action], budget,
                f).passed))
            confidence = ev.confidence_of(table, ids, best_feature)
            gate = ev.threshold_choices(confidence, ev.threshold_for_rate(confidence, share))
            rows["Confidence threshold (same share)"] = ev.gated_rows(table, ids, gate, [action], budget, best_feature)
        rows["Confidence threshold (tuned on validation)"] = ev.gated_rows(
            table, ids, ev.threshold_choices(ev.confidence_of(table, ids, tuned["feature"]), tuned["threshold"]),
            [action], budget, "Confidence threshold (tuned)")
        rows["Confidence threshold (tuned on train)"] = ev.gated_rows(
            table, ids, ev.threshold_choices(ev.confidence_of(table, ids, on_train["feature"]), on_train["threshold"]),
            [action], budget, "Confidence threshold (tuned on train)")
        if budget > 1:
            rows["Confidence-weighted vote"] = ev.weighted_vote_rows(table, ids, action, budget, "DeepConf vote")
            rows["Agreement stopping"] = ev.agreement_rows(table, ids, action, budget, "Adaptive-Consistency")
        against = {draft_name.lower().replace(" ", "_"): rows[draft_name], "best": rows["Best"]}
        for extra in ("Confidence threshold (same share)", "Random gate (same share)"):
            if extra in rows:
                against[extra.split(" (")[0].lower().replace(" ", "_")] = rows[extra]
        out["by_budget"][str(budget)] = {"best_static": best_name, "threshold_validation": tuned,
                                         "threshold_train": on_train,
                                         "methods": {n: ev.summarise_rows(r, against) for n, r in rows.items()}}
        print(f"B = {budget} (best static: {best_name})", flush=True)
        for n, r in out["by_budget"][str(budget)]["methods"].items():
            extra = "".join(f"  vs {k[8:]} {v[0]:+.1f} [{v[1]:+.1f}, {v[2]:+.1f}]" for k, v in r.items()
                            if k.startswith("pass_vs_"))
            print(f"  {n:38s} pass {r['pass']:5.1f}  majority {r['majority']:5.1f}  decodes "
                  f"{r['decodes_per_problem']:.2f}  tokens {r['tokens_per_problem']:6.1f}{extra}", flush=True)
    (args.out / f"compare{args.tag}_{args.report}.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stage", choices=["tables", "join", "train", "compare"])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--task", default="arithmetic")
    parser.add_argument("--val-problems", type=int, default=100)
    parser.add_argument("--train-problems", type=int, default=400)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--actions", default="0.3,5,0.9,0.1;0.3,10,0.95,0.1",
                        help="re-decode actions as temperature,top_k,top_p,min_p, ';'-separated (default: the "
                        "selected pool's best sampled actions at pass@4-8 and pass@2 of docs/reproduce/actions.json)")
    parser.add_argument("--stored", default="",
                        help="tables: an outcome table whose samples of --actions stand in for decoding them on "
                        "the training split (e.g. docs/headroom/predictability/outcomes.jsonl)")
    parser.add_argument("--splits", default="validation,train", help="tables: which splits' tables to build")
    parser.add_argument("--parts", default="", help="join: ','-separated folders whose tables are joined")
    parser.add_argument("--samples-from", default="",
                        help="join: a folder whose tables' re-decodes replace the parts' (the same problems)")
    parser.add_argument("--offset", type=int, default=0,
                        help="tables: start at this problem (a second process can decode the rest into another --out)")
    parser.add_argument("--stop-at-answer", action=argparse.BooleanOptionalAction, default=STOP_AT_ANSWER,
                        help="tables: the drafts and re-decodes end at their first complete answer "
                             "(Task.answer_complete; the protocol's default)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--budget", type=int, default=48)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--features", default="confidence,mean,hidden,prompt",
                        help="feature sets to train (policies.draft.DRAFT_FEATURE_SETS)")
    parser.add_argument("--action-sets", default="0,1,0+1",
                        help="re-decode action sets as '+'-joined indices into --actions, ','-separated")
    parser.add_argument("--costs", default="0,0.05", help="re-decode costs to train with")
    parser.add_argument("--budgets", default="1", help="parallel budgets B of training")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--prompts-per-step", type=int, default=32)
    parser.add_argument("--val-every", type=int, default=10)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--tag", default="", help="suffix of the adapters' names and of the summary files")
    parser.add_argument("--report", choices=["validation", "train-holdout"], default="validation",
                        help="compare: score on the validation table, or on the training problems after the first "
                        "--train-problems (which no adapter trained on; every choice stays on validation)")
    parser.add_argument("--grid", default="",
                        help='train: JSON of DraftTrainConfig fields to lists of values, e.g. {"policy_hidden": [32]}')
    parser.add_argument("--greedy-table", default="",
                        help="compare: a --out folder whose tables hold the same problems' greedy drafts run to EOS "
                        "or the budget: a reference 'Greedy' row where this folder's drafts stop at the first answer")
    parser.add_argument("--max-decodes", type=float, default=1.5,
                        help="compare: the decodes per problem a chosen adapter or tuned threshold may spend at B = 1")
    parser.add_argument("--threshold-features", default="max_prob_mean,max_prob_min,entropy_mean,entropy_max",
                        help="compare: confidence features a threshold may use (chosen on validation)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.stage == "join":
        return join(args)
    print(f"CPU: {cpu_features().describe()}", flush=True)
    lm = load_frozen_lm(ModelSpec(dtype=args.dtype))
    task = get_task(args.task)
    if args.stage == "tables":
        tables(args, lm, task)
    elif args.stage == "train":
        torch.set_grad_enabled(True)
        train(args, lm, task)
    else:
        compare(args)


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    main()
