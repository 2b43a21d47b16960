"""Can a policy that sees only the prompt embedding capture the sequence-level head-room?

The head-room tables (``benchmarks/headroom.py``) show that choosing, per problem, between greedy and
a sampler beats the best single strategy at pass@1 even when cross-fitted (each problem's choice
made on half of its samples, scored on the other half). A sequence adapter does not see samples of a
new problem: it sees the prompt's embedding (the frozen LM's final hidden state, mean-pooled, as
``training.sequence`` and ``serving`` compute it). This script asks whether that embedding predicts
which problems gain from sampling, with predictors far simpler than the adapter and an honest
split: nothing is tuned on the problem it is scored on.

1. ``--problems`` problems of ``--split`` (default: the training split, where an adapter learns),
   each decoded greedily once and ``--samples`` times with ``--action`` at ``--budget`` tokens
   (an outcome table under ``--out``, resumable: re-running continues where it stopped).
2. Per problem and k: the sampler's unbiased pass@k minus greedy's (0 or 1), ``gain``.
3. ``--folds``-fold cross-validation over problems. On the training folds: the best static strategy
   (greedy or the sampler, by mean pass@k) and two predictors of ``gain``, ridge regression (penalty
   chosen by leave-one-out on the training folds only) and the mean gain of the ``--neighbours``
   nearest training problems (cosine), each on two standardised feature sets: the prompt embedding
   (what a sequence adapter sees) and, for contrast, how sure greedy decoding was of its own answer
   (``greedy_confidence``: available only after a greedy decode, so to a two-pass method, not to the
   paper's adapters). On the held-out fold each predictor's policy samples where its predicted gain
   is > 0, else decodes greedily.
4. Printed per k: the held-out policy's pass@k minus the best static one's, as a paired 95% t
   interval over problems (points), and the Spearman correlation of predicted and actual gain.
   Beside them the *cross-fitted oracle* (per problem, the better of the two on samples 0..n/2-1,
   scored on the rest and vice versa; k <= n/2): the head-room a per-problem choice could capture.

5. One pass, for contrast with the two-pass policy of step 3: policies that sample (with ``--action``)
   at a step whose max-probability is below a threshold (``--switch-thresholds``), at that step only
   or from it to the end of the row (latched), greedy elsewhere; ``--switch-samples`` decodes per
   problem (``one_pass.json``, each policy kept as it finishes), pass@1 against greedy.

Writes ``summary.json`` under ``--out``; the last line printed is its JSON.

    PYTHONPATH=src .venv/bin/python benchmarks/headroom_predictability.py --out runs/predictability
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from decoding_adapters.core.stats import mean_ci
from decoding_adapters.decoding.actions import GREEDY, ActionSet, DecodingAction
from decoding_adapters.decoding.loop import StepFeatures, decode, row_seed
from decoding_adapters.decoding.rollouts import encode_problems
from decoding_adapters.evaluation.headroom import oracle_table, pass_at_k_matrix
from decoding_adapters.lm.cpu_features import cpu_features
from decoding_adapters.lm.models import ModelSpec, load_frozen_lm
from decoding_adapters.selection.coverage import evaluate_pool
from decoding_adapters.tasks import get_task
from decoding_adapters.tasks.base import problems_digest

RIDGE_PENALTIES = (1.0, 10.0, 100.0, 1e3, 1e4, 1e5)


def standardise(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Centre and scale each feature by the training rows' mean and std (a constant feature stays 0)."""
    mean, std = train.mean(0), train.std(0)
    std[std == 0] = 1.0
    return (train - mean) / std, (test - mean) / std


def ridge_predict(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray) -> tuple[np.ndarray, float]:
    """Ridge regression with an intercept, its penalty chosen among ``RIDGE_PENALTIES`` by the exact
    leave-one-out error on the training rows (kernel form: features outnumber rows here)."""
    y_mean = y_train.mean()
    y = y_train - y_mean
    kernel = x_train @ x_train.T  # [n, n]
    eigval, eigvec = np.linalg.eigh(kernel)
    best = (np.inf, RIDGE_PENALTIES[0])
    for penalty in RIDGE_PENALTIES:
        # hat matrix H = K (K + penalty I)^-1 = V diag(l / (l + penalty)) V^T
        shrink = eigval / (eigval + penalty)
        fitted = eigvec @ (shrink * (eigvec.T @ y))
        leverage = (eigvec**2) @ shrink
        loo = np.mean(((y - fitted) / (1 - leverage)) ** 2)
        best = min(best, (loo, penalty))
    penalty = best[1]
    alpha = eigvec @ ((eigvec.T @ y) / (eigval + penalty))  # dual weights [n]
    return y_mean + x_test @ (x_train.T @ alpha), penalty


def neighbours_predict(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, k: int) -> np.ndarray:
    """Mean target of the ``k`` training rows most cosine-similar to each test row."""
    a = x_train / np.linalg.norm(x_train, axis=1, keepdims=True).clip(1e-12)
    b = x_test / np.linalg.norm(x_test, axis=1, keepdims=True).clip(1e-12)
    nearest = np.argsort(-(b @ a.T), axis=1)[:, :k]
    return y_train[nearest].mean(1)


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    ranks = [np.argsort(np.argsort(v, kind="stable"), kind="stable").astype(float) for v in (a, b)]
    if ranks[0].std() == 0 or ranks[1].std() == 0:
        return float("nan")
    return float(np.corrcoef(*ranks)[0, 1])


def crossfit_oracle(greedy: np.ndarray, samples: np.ndarray, k: int) -> tuple[float, float, float]:
    """``evaluation.headroom``'s cross-fitted head-room between greedy and the sampler, in points (mean
    and 95% interval over problems): per problem the better of the two chosen on one half of the
    samples and scored on the other, both ways, minus the best static strategy chosen the same way.
    Greedy is deterministic, so its one outcome stands for each of its samples."""
    rewards = np.stack([np.repeat(greedy[:, None], samples.shape[1], axis=1), samples], axis=1)  # [P, 2, n]
    row = oracle_table(rewards, ["greedy", "sampler"], [k])[0]
    low, high = row.crossfit_headroom_ci
    return 100 * row.crossfit_headroom, 100 * low, 100 * high


def greedy_confidence(lm, prompts, budget: int, batch_rows: int) -> np.ndarray:
    """``[P, 6]`` how sure greedy decoding was of its own answer: the mean and largest token entropy,
    the mean and smallest max-probability over its tokens, its length and whether it stopped at EOS
    (a second greedy decode, with the per-step statistics the outcome table does not keep)."""
    rows = []
    for start in range(0, len(prompts), batch_rows):
        result = decode(lm, prompts[start : start + batch_rows], ActionSet([GREEDY]), row_actions=0,
                        token_budget=budget)
        valid = result.valid_mask()
        for i in range(len(result.texts)):
            entropy, max_prob = result.entropy[i][valid[i]], result.max_prob[i][valid[i]]
            rows.append([entropy.mean(), entropy.max(), max_prob.mean(), max_prob.min(), result.lengths[i],
                         result.stopped_at_eos[i]])
    return np.array(rows, dtype=float)


def switching_chooser(threshold: float, latch: bool, rows: int) -> Callable:
    """A one-pass policy over actions (greedy, the sampler): sample at a step whose base max-probability
    is below ``threshold``; with ``latch``, also at every later step of that row."""
    switched = torch.zeros(rows, dtype=torch.bool)

    def choose(features: StepFeatures) -> torch.Tensor:
        unsure = features.max_prob < threshold
        if not latch:
            return unsure.long()
        switched[features.rows] |= unsure
        return switched[features.rows].long()

    return choose


def one_pass_part(lm, task, problems, prompts, sampler, args) -> dict[str, np.ndarray]:
    """``--switch-samples`` decodes per problem of each switching policy (``--switch-thresholds``, per
    step and latched); rewards ``[P, samples]`` per policy, cached in ``one_pass.json`` as they finish."""
    path = args.out / "one_pass.json"
    done = json.loads(path.read_text()) if path.exists() else {}
    actions = ActionSet([GREEDY, sampler])
    for threshold in args.switch_thresholds:
        for latch in (False, True):
            name = f"{'latched' if latch else 'per-step'} max_prob<{threshold:g}"
            if name in done:
                continue
            start, rewards = time.perf_counter(), []
            per_chunk = max(1, args.batch_rows // args.switch_samples)
            for first in range(0, len(problems), per_chunk):
                chunk = range(first, min(first + per_chunk, len(problems)))
                of_row = [i for i in chunk for _ in range(args.switch_samples)]
                result = decode(lm, [prompts[i] for i in chunk], actions, prompt_of_row=[i - first for i in of_row],
                                chooser=switching_chooser(threshold, latch, len(of_row)), token_budget=args.budget,
                                row_seeds=[row_seed(args.seed, problems[i].id, s) for i in chunk
                                           for s in range(args.switch_samples)])
                rewards += task.reward_batch([problems[i] for i in of_row], result.texts)
            done[name] = np.array(rewards).reshape(len(problems), args.switch_samples).tolist()
            path.write_text(json.dumps(done))
            print(f"decoded {name}: {time.perf_counter() - start:.0f} s", flush=True)
    return {name: np.array(v) for name, v in done.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--task", default="arithmetic")
    parser.add_argument("--split", default="train")
    parser.add_argument("--problems", type=int, default=400)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--action", default="0.3,5,0.9,0.1",
                        help="the sampler as temperature,top_k,top_p,min_p (default: the best sampled action "
                        "of docs/headroom.md at pass@1)")
    parser.add_argument("--budget", type=int, default=48)
    parser.add_argument("--folds", type=int, default=10)
    parser.add_argument("--neighbours", type=int, default=15)
    parser.add_argument("--ks", default="1,2,4,8")
    parser.add_argument("--switch-thresholds", type=lambda v: [float(x) for x in v.split(",") if x], default=[0.5, 0.8],
                        help="max-probability thresholds of the one-pass switching policies ('' for none)")
    parser.add_argument("--switch-samples", type=int, default=4)
    parser.add_argument("--batch-rows", type=int, default=128)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    temperature, top_k, top_p, min_p = args.action.split(",")
    sampler = DecodingAction(temperature=float(temperature), top_k=int(top_k), top_p=float(top_p), min_p=float(min_p))
    ks = [k for k in map(int, args.ks.split(",")) if k <= args.samples]
    args.out.mkdir(parents=True, exist_ok=True)
    cpu = cpu_features()
    print(f"CPU: {cpu.describe()}", flush=True)

    lm = load_frozen_lm(ModelSpec(dtype=args.dtype))
    task = get_task(args.task)
    split = task.load(args.split)
    problems = split[: args.problems]
    start = time.perf_counter()
    table = evaluate_pool(
        lm, task, problems, [GREEDY, sampler], samples=args.samples, token_budget=args.budget, seed=args.seed,
        table_path=args.out / "outcomes.jsonl", batch_rows=args.batch_rows,
        data={"split": args.split, "count": len(split), "digest": problems_digest(split)},
        on_chunk=lambda done, total: print(f"decoded chunk {done}/{total} ({time.perf_counter() - start:.0f} s)",
                                           flush=True),
    )
    greedy = np.array([table.outcomes(p.id, GREEDY.name)[0].reward >= 0.5 for p in problems], dtype=float)
    samples = np.array([[o.reward for o in table.outcomes(p.id, sampler.name)] for p in problems])  # [P, n]
    prompts, _ = encode_problems(lm, task, problems, seed=args.seed)
    features = {
        "embedding": lm.prompt_embeddings(prompts, pooling="mean").double().numpy(),  # [P, hidden]
        "greedy_confidence": greedy_confidence(lm, prompts, args.budget, args.batch_rows),  # [P, 6]
    }

    folds = np.random.default_rng(args.seed).permutation(len(problems)) % args.folds
    summary = {"cpu": cpu.model, "cpu_flags": cpu.relevant(), "task": args.task, "split": args.split,
               "problems": len(problems), "samples": args.samples, "sampler": sampler.name, "budget": args.budget,
               "folds": args.folds, "neighbours": args.neighbours, "greedy_pass1": round(100 * greedy.mean(), 1),
               "sampler_pass1": round(100 * samples.mean(), 1), "by_k": {}}
    print(f"{len(problems)} {args.split} problems: greedy pass@1 {100 * greedy.mean():.1f}, "
          f"{sampler.name} pass@1 {100 * samples.mean():.1f}", flush=True)
    for k in ks:
        sampled = pass_at_k_matrix(samples[:, None, :], k)[:, 0]  # [P]
        gain = sampled - greedy
        static = np.empty(len(problems))
        predicted = {f"{f}/{m}": np.empty(len(problems)) for f in features for m in ("ridge", "neighbours")}
        for fold in range(args.folds):
            train, test = folds != fold, folds == fold
            static[test] = sampled[test] if sampled[train].mean() > greedy[train].mean() else greedy[test]
            for name, x in features.items():
                x_train, x_test = standardise(x[train], x[test])
                predicted[f"{name}/ridge"][test], _ = ridge_predict(x_train, gain[train], x_test)
                predicted[f"{name}/neighbours"][test] = neighbours_predict(x_train, gain[train], x_test,
                                                                           args.neighbours)
        row = {"sampler_better_share": round(float((gain > 0).mean()), 3), "static_pass": round(100 * static.mean(), 1)}
        line = [f"pass@{k}: best static (chosen per fold) {100 * static.mean():.1f}"]
        for name, prediction in predicted.items():
            policy = np.where(prediction > 0, sampled, greedy)
            mean, low, high = mean_ci(100 * (policy - static))
            row[name] = {"policy_pass": round(100 * policy.mean(), 1),
                         "vs_static": [round(v, 1) for v in (mean, low, high)],
                         "sampled_share": round(float((prediction > 0).mean()), 3),
                         "spearman": round(spearman(prediction, gain), 3)}
            line.append(f"{name}: {mean:+.1f} [{low:+.1f}, {high:+.1f}] (samples {(prediction > 0).mean():.0%} of "
                        f"problems, Spearman {row[name]['spearman']:+.2f})")
        if 2 * k <= args.samples:
            mean, low, high = crossfit_oracle(greedy, samples, k)
            row["crossfit_oracle_vs_static"] = [round(v, 1) for v in (mean, low, high)]
            line.append(f"cross-fitted oracle {mean:+.1f} [{low:+.1f}, {high:+.1f}]")
        summary["by_k"][str(k)] = row
        print("; ".join(line), flush=True)
    switched = one_pass_part(lm, task, problems, prompts, sampler, args)
    summary["one_pass_vs_greedy_pass1"] = {}
    for name, rewards in switched.items():
        mean, low, high = mean_ci(100 * (rewards.mean(1) - greedy))
        summary["one_pass_vs_greedy_pass1"][name] = [round(v, 1) for v in (mean, low, high)]
        print(f"one pass, {name}: pass@1 {100 * rewards.mean():.1f}, vs greedy {mean:+.1f} [{low:+.1f}, {high:+.1f}]",
              flush=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    main()
