"""Can a policy find the head-room before it decodes, or while it does? The two predictability studies
of ``docs/headroom.md`` (sections 4 and 5), one sub-command each; the estimators they use are the
package's (``evaluation.predictability``).

- ``prompt``: does the prompt embedding (what a sequence adapter sees) predict which problems gain
  from sampling? Cross-validated predictors against the best static strategy and the cross-fitted
  oracle, and one-pass switching policies for contrast.
- ``hidden``: does greedy's hidden state know, while it decodes, that greedy will be wrong, and can
  one pass use it? Per-step probes, and the policies they drive.

    PYTHONPATH=src .venv/bin/python benchmarks/headroom_probes.py prompt --out runs/predictability
    PYTHONPATH=src OMP_NUM_THREADS=1 .venv/bin/python benchmarks/headroom_probes.py hidden --out runs/hidden

``benchmarks/headroom_probes.py prompt --help`` / ``hidden --help`` describe each study.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from decoding_adapters.core.stats import mean_ci
from decoding_adapters.decoding.actions import GREEDY, ActionSet, DecodingAction
from decoding_adapters.decoding.loop import StepFeatures, decode, row_seed
from decoding_adapters.decoding.rollouts import encode_problems
from decoding_adapters.evaluation.headroom import pass_at_k_matrix
from decoding_adapters.evaluation.predictability import (
    TAU_GRID,
    auc,
    choose_logistic,
    choose_tau,
    crossfit_oracle,
    first_firing_step,
    neighbours_predict,
    ridge_predict,
    spearman,
    standardise,
    switching_chooser,
)
from decoding_adapters.lm.cpu_features import cpu_features
from decoding_adapters.lm.models import ModelSpec, load_frozen_lm
from decoding_adapters.selection.outcomes import evaluate_pool
from decoding_adapters.tasks import get_task
from decoding_adapters.tasks.base import problems_digest

PROMPT_STUDY = """Can a policy that sees only the prompt embedding capture the sequence-level head-room?

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

    PYTHONPATH=src .venv/bin/python benchmarks/headroom_probes.py prompt --out runs/predictability
"""

HIDDEN_STUDY = """Does greedy's hidden state know, while decoding, that greedy will be wrong, and can one pass use it?

The predictability study (``headroom_probes.py prompt``) found that the prompt embedding does not
predict which problems gain from sampling, while a summary of greedy's finished attempt does (a
two-pass method). The token adapter acts inside one pass: at step t it sees the hidden state of
that step. This script measures what such a policy could do, on ``--problems`` problems of
``--split`` (default: the training split, where an adapter learns) at ``--budget`` tokens:

1. **Greedy**, one decode per problem with the hidden state of every step recorded.
2. **Static samplers**, ``--samples`` decodes per problem at each temperature of ``--temperatures``
   (pure temperature sampling). Sample ``s`` of a problem uses the same seed in every sampled pass
   (common random numbers), and every pass decodes the same problems in the same chunks of
   ``--batch-rows`` rows (one row per problem, same order), so that a pass that stays greedy on a row
   shares greedy's batch composition until some row of the chunk leaves greedy.
3. **Probes**, cross-fitted over ``--folds`` folds of problems: at each step t, on the hidden state
   h_t and on its running mean over steps 0..t, a ridge probe (penalty by leave-one-out on the
   training folds, ``evaluation.predictability.ridge_predict``) and a logistic probe (on the top
   ``--pca`` principal components of the training folds' standardised features, L2 penalty by
   inner 3-fold cross-validation) predict "greedy's final answer is wrong". A step's probe is fitted
   on the rows still decoding at that step; its held-out AUC (pooled over folds) is plotted per step
   (``auc.png``).
4. **Policies**, each problem scored with the probe of its own held-out fold (the logistic probe on
   the running mean), firing where its P(wrong) exceeds a threshold tau. tau is chosen per fold and
   temperature on the training folds alone: the tau (0.5 to 0.95, or never) that maximises their
   value when a fired problem takes the sampler's mean reward instead of greedy's, scoring each
   training problem with inner cross-fitted probes.

   - *one pass, per step*: sample at T at the steps where the probe fires, greedy elsewhere;
   - *one pass, latched*: from the first step where it fires to the end of the row;
   - *restart*: decode greedily; where the probe fires at the row's last step, decode again from the
     prompt at T and answer with that (1 + fired share decodes per problem; the re-decode is the
     static pass's sample, which has the same seed and so is the same decode).

   Beside them, the *oracle restart* re-decodes exactly where greedy is wrong (a ceiling).

Printed: pass@1 of each policy with its paired 95% interval against greedy over problems (a
problem's samples averaged first), decodes and generated tokens per problem, how often it left
greedy, and the noise check: sampled rows that never left greedy must equal greedy's tokens.
Everything decoded is cached under ``--out/cache`` (re-running resumes); ``summary.json``,
``rewards.json`` and ``auc.png`` are written under ``--out``.

    PYTHONPATH=src OMP_NUM_THREADS=1 .venv/bin/python benchmarks/headroom_probes.py hidden --out runs/hidden
"""


# ---- prompt: does the prompt embedding predict the gain? ------------------------------------------


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


def _setup(args):
    """The output folder, the CPU line, the frozen LM, the task and its ``--split``: what every study
    here starts from."""
    args.out.mkdir(parents=True, exist_ok=True)
    cpu = cpu_features()
    print(f"CPU: {cpu.describe()}", flush=True)
    lm = load_frozen_lm(ModelSpec(dtype=args.dtype))
    task = get_task(args.task)
    return cpu, lm, task, task.load(args.split)


def prompt_main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="headroom_probes.py prompt", description=PROMPT_STUDY,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
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
    args = parser.parse_args(argv)
    temperature, top_k, top_p, min_p = args.action.split(",")
    sampler = DecodingAction(temperature=float(temperature), top_k=int(top_k), top_p=float(top_p), min_p=float(min_p))
    ks = [k for k in map(int, args.ks.split(",")) if k <= args.samples]
    cpu, lm, task, split = _setup(args)
    problems = split[: args.problems]
    start = time.perf_counter()
    table = evaluate_pool(
        lm, task, problems, [GREEDY, sampler], samples=args.samples, token_budget=args.budget, seed=args.seed,
        table_path=args.out / "outcomes.jsonl", batch_rows=args.batch_rows,
        data={"split": args.split, "count": len(split), "digest": problems_digest(split)},
        on_chunk=lambda done, total: print(f"decoded chunk {done}/{total} ({time.perf_counter() - start:.0f} s)",
                                           flush=True),
        stop_at_answer=False,
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


# ---- hidden: does greedy's hidden state know while it decodes? ------------------------------------


MIN_CLASS_ROWS = 5  # a step's probe needs this many right and wrong training rows, else it never fires


def step_features(hidden: np.ndarray, lengths: np.ndarray) -> dict[str, np.ndarray]:
    """Per-step features ``[P, T, d]``: the hidden state h_t and its running mean over steps 0..t
    (entries at steps past a row's end are unused)."""
    steps = np.arange(hidden.shape[1])
    valid = steps[None, :] < lengths[:, None]  # [P, T]
    masked = hidden * valid[:, :, None]
    running = np.cumsum(masked, axis=1) / (steps[None, :, None] + 1)
    return {"h_t": hidden, "running_mean": running}


def crossfit_probes(hidden, lengths, wrong, folds, args) -> dict:
    """Held-out AUC per step of the ridge and logistic probes on both feature sets; and for the
    policies, the logistic running-mean probe per (fold, step) as raw-feature affine maps, with the
    held-out P(wrong) of every problem at every step it decodes, and the inner held-out P(wrong) of
    every training problem per fold."""
    problems, steps, dim = hidden.shape
    features = step_features(hidden, lengths)
    heldout = {f"{name}/{kind}": np.full((problems, steps), np.nan)
               for name in features for kind in ("ridge", "logistic")}
    inner_prob = np.full((args.folds, problems, steps), np.nan)  # inner held-out P(wrong), training rows
    weights = np.zeros((args.folds, steps, dim), dtype=np.float32)
    biases = np.full((args.folds, steps), -1e4, dtype=np.float32)  # never fires where no probe was fitted
    for fold in range(args.folds):
        start = time.perf_counter()
        for t in range(steps):
            active = lengths > t
            train, test = active & (folds != fold), active & (folds == fold)
            y = wrong[train]
            if min(y.sum(), (1 - y).sum()) < MIN_CLASS_ROWS or not test.any():
                continue
            for name, x in features.items():
                x_train, x_test = x[train, t], x[test, t]
                a, b = standardise(x_train, x_test)
                heldout[f"{name}/ridge"][test, t], _ = ridge_predict(a, y, b)
                probe, inner_logits = choose_logistic(x_train, y, args.pca, args.seed + 1000 * fold + t)
                heldout[f"{name}/logistic"][test, t] = probe.logit(x_test)
                if name == "running_mean":
                    weights[fold, t], biases[fold, t] = probe.weight, probe.bias
                    inner_prob[fold, np.flatnonzero(train), t] = 1 / (1 + np.exp(-inner_logits))
        print(f"probes, fold {fold + 1}/{args.folds}: {time.perf_counter() - start:.0f} s", flush=True)
    auc_by_step = {
        name: [auc(values[lengths > t, t], wrong[lengths > t]) if (lengths > t).sum() > 1 else float("nan")
               for t in range(steps)]
        for name, values in heldout.items()
    }
    heldout_prob = 1 / (1 + np.exp(-heldout["running_mean/logistic"]))
    return {"auc_by_step": auc_by_step, "weights": weights, "biases": biases, "heldout_prob": heldout_prob,
            "inner_prob": inner_prob, "rows_by_step": [int((lengths > t).sum()) for t in range(steps)]}


# ----------------------------------------------------------------------------------------------- decoding


def probe_chooser(weights: torch.Tensor, biases: torch.Tensor, fold_of_row: torch.Tensor, tau_of_row: torch.Tensor,
                  start_step: torch.Tensor, start_sum: torch.Tensor, latch: bool):
    """The one-pass policy from its first firing step on, over actions (greedy, sampler): rows are
    decoded from the prompt plus greedy's tokens before ``start_step [N]``; ``start_sum [N, d]`` is the
    sum of greedy's hidden states over those steps. At the first step the row samples (the probe
    fired there); later, latched rows keep sampling, per-step rows sample where the row's fold's
    logistic probe on the running mean of its own hidden states says P(wrong) > its tau."""
    running = start_sum.clone()
    logit_tau = torch.logit(tau_of_row.clamp(max=1 - 1e-6))

    def choose(features: StepFeatures) -> torch.Tensor:
        rows = features.rows
        if latch:
            return torch.ones(len(rows), dtype=torch.long)
        step = start_step[rows] + features.step  # [B] the step in the whole row
        running[rows] += features.hidden.float()
        mean = running[rows] / (step + 1).unsqueeze(-1)
        fold = fold_of_row[rows]
        logit = (mean * weights[fold, step]).sum(-1) + biases[fold, step]  # [B]
        fire = logit > logit_tau[rows]
        if features.step == 0:
            fire = torch.ones_like(fire)  # the step where the probe fired on greedy's own states
        return fire.long()

    return choose


class Decoder:
    """Decodes passes in fixed chunks of ``--batch-rows`` rows (the same rows in the same order in
    every pass over the same row list) and caches each chunk's outcome under ``cache``."""

    def __init__(self, lm, task, problems, prompts, args):
        self.lm, self.task, self.problems, self.prompts, self.args = lm, task, problems, prompts, args
        self.cache = args.out / "cache"
        self.cache.mkdir(parents=True, exist_ok=True)

    def run(self, name: str, actions: ActionSet, problem_of_row, seeds, *, prefix=None, make_chooser=None,
            record_features=False) -> dict:
        """One pass over rows (``problem_of_row``, ``seeds``; ``prefix``: per row, greedy tokens that
        continue the prompt, the budget shrinking by their length): rewards, lengths (new tokens),
        tokens, non-greedy step counts per row and (with ``record_features``) hidden states
        ``[rows, T, d]``."""
        rows = len(problem_of_row)
        prefix = prefix if prefix is not None else [[] for _ in range(rows)]
        parts = []
        start = time.perf_counter()
        for first in range(0, rows, self.args.batch_rows):
            chunk = range(first, min(first + self.args.batch_rows, rows))
            path = self.cache / f"{name}_{first:05d}.pt"
            key = [[problem_of_row[r], seeds[r], len(prefix[r])] for r in chunk]  # what the chunk decodes
            if not path.exists() or torch.load(path).get("key") != key:
                problems = [self.problems[problem_of_row[r]] for r in chunk]
                result = decode(
                    self.lm, [self.prompts[problem_of_row[r]] + list(prefix[r]) for r in chunk], actions,
                    token_budget=[self.args.budget - len(prefix[r]) for r in chunk],
                    row_seeds=[seeds[r] for r in chunk], record_features=record_features,
                    row_actions=None if make_chooser else 0, chooser=make_chooser(chunk) if make_chooser else None,
                )
                texts = self.lm.tokenizer.batch_decode(
                    [list(prefix[r]) + result.tokens[i, : result.lengths[i]].tolist() for i, r in enumerate(chunk)],
                    skip_special_tokens=True)
                rewards = self.task.reward_batch(problems, texts)
                torch.save({
                    "key": key, "rewards": torch.tensor(rewards), "lengths": result.lengths, "tokens": result.tokens,
                    "switched_steps": (result.actions > 0).sum(1),
                    "features": result.features.half() if record_features else None,
                }, path)
            parts.append(torch.load(path))
        took = time.perf_counter() - start
        if took > 1:
            print(f"decoded {name} ({rows} rows): {took:.0f} s", flush=True)
        if not parts:
            return {"rewards": np.zeros(0), "lengths": np.zeros(0, dtype=int), "switched_steps": np.zeros(0, dtype=int)}
        out = {key: torch.cat([p[key] for p in parts]).numpy() for key in ("rewards", "lengths", "switched_steps")}
        width = max(p["tokens"].shape[1] for p in parts)
        out["tokens"] = torch.cat([torch.nn.functional.pad(p["tokens"], (0, width - p["tokens"].shape[1]), value=-1)
                                   for p in parts]).numpy()
        if record_features:
            steps = self.args.budget
            out["features"] = torch.cat([torch.nn.functional.pad(p["features"].float(),
                                                                 (0, 0, 0, steps - p["features"].shape[1]))
                                         for p in parts]).numpy()
        return out


# ----------------------------------------------------------------------------------------------- report


def compare(name: str, rewards: np.ndarray, greedy: np.ndarray, decodes: float, tokens: float, extra: dict) -> dict:
    """A policy's pass@1 and paired 95% interval against greedy (``rewards [P, S]``), in points."""
    mean, low, high = mean_ci((100 * (rewards.mean(1) - greedy)).tolist())
    row = {"pass1": round(100 * float(rewards.mean()), 1), "vs_greedy": [round(v, 1) for v in (mean, low, high)],
           "decodes_per_problem": round(decodes, 2), "tokens_per_problem": round(tokens, 1), **extra}
    print(f"{name}: pass@1 {row['pass1']:.1f}, vs greedy {mean:+.1f} [{low:+.1f}, {high:+.1f}], "
          f"{decodes:.2f} decodes and {tokens:.1f} tokens per problem, {extra}", flush=True)
    return row


def plot_auc(auc_by_step: dict, rows_by_step: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, values in auc_by_step.items():
        ax.plot(range(len(values)), values, label=name.replace("/", ", "),
                linestyle="-" if "running" in name else "--")
    ax.axhline(0.5, color="grey", linewidth=0.8)
    ax.set_xlabel("step t (greedy's token index)")
    ax.set_ylabel("held-out AUC, 'greedy will be wrong'")
    ax.set_ylim(0.3, 1.0)
    twin = ax.twinx()
    twin.plot(range(len(rows_by_step)), rows_by_step, color="black", alpha=0.25, label="rows still decoding")
    twin.set_ylabel("rows still decoding")
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def hidden_main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="headroom_probes.py hidden", description=HIDDEN_STUDY,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--task", default="arithmetic")
    parser.add_argument("--split", default="train")
    parser.add_argument("--problems", type=int, default=400)
    parser.add_argument("--samples", type=int, default=4, help="decodes per problem of each sampled policy")
    parser.add_argument("--temperatures", default="0.5,1.0")
    parser.add_argument("--budget", type=int, default=48)
    parser.add_argument("--folds", type=int, default=10)
    parser.add_argument("--pca", type=int, default=64, help="principal components of the logistic probe")
    parser.add_argument("--batch-rows", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    temperatures = [float(v) for v in args.temperatures.split(",") if v]
    cpu, lm, task, split = _setup(args)
    problems = split[: args.problems]
    prompts, _ = encode_problems(lm, task, problems, seed=args.seed)
    decoder = Decoder(lm, task, problems, prompts, args)
    total = len(problems)

    every = list(range(total))
    greedy_pass = decoder.run("greedy", ActionSet([GREEDY]), every, [row_seed(args.seed, p.id) for p in problems],
                              record_features=True)
    greedy, lengths = greedy_pass["rewards"].astype(float), greedy_pass["lengths"].astype(int)
    wrong = (greedy < 0.5).astype(float)
    print(f"{total} {args.split} problems: greedy pass@1 {100 * greedy.mean():.1f}", flush=True)
    seeds = [[row_seed(args.seed, p.id, s) for p in problems] for s in range(args.samples)]
    static = {}
    for temperature in temperatures:
        action = ActionSet([DecodingAction(temperature=temperature)])
        passes = [decoder.run(f"static_T{temperature:g}_s{s}", action, every, seeds[s]) for s in range(args.samples)]
        static[temperature] = passes

    folds = np.random.default_rng(args.seed).permutation(total) % args.folds
    probe_path = args.out / "cache" / "probes.npz"
    if probe_path.exists():
        probes = dict(np.load(probe_path, allow_pickle=True))
        probes["auc_by_step"] = probes["auc_by_step"].item()
        probes["rows_by_step"] = probes["rows_by_step"].tolist()
    else:
        probes = crossfit_probes(greedy_pass["features"].astype(np.float64), lengths, wrong, folds, args)
        np.savez(probe_path, **probes)
    plot_auc(probes["auc_by_step"], probes["rows_by_step"], args.out / "auc.png")

    summary = {"cpu": cpu.model, "cpu_flags": cpu.relevant(), "task": args.task, "split": args.split,
               "data_digest": problems_digest(split), "problems": total, "samples": args.samples,
               "budget": args.budget, "folds": args.folds, "pca": args.pca, "batch_rows": args.batch_rows,
               "dtype": str(lm.dtype) if hasattr(lm, "dtype") else args.dtype,
               "greedy_pass1": round(100 * greedy.mean(), 1),
               "greedy_tokens_per_problem": round(float(lengths.mean()), 1),
               "auc_by_step": {k: [round(v, 3) for v in vals] for k, vals in probes["auc_by_step"].items()},
               "rows_by_step": probes["rows_by_step"], "policies": {}, "tau": {}, "switch_economics": {}}
    for name, values in probes["auc_by_step"].items():
        best = int(np.nanargmax(values))
        print(f"AUC {name}: step 0 {values[0]:.3f}, step 8 {values[8]:.3f}, best {values[best]:.3f} at step {best}, "
              f"last row's step {values[-1]:.3f}", flush=True)
    end_prob = probes["heldout_prob"][np.arange(total), lengths - 1]
    summary["auc_at_last_step_of_row"] = round(auc(end_prob, wrong), 3)
    print(f"AUC of the running-mean logistic probe at each row's last step: {summary['auc_at_last_step_of_row']:.3f}")

    weights, biases = torch.from_numpy(probes["weights"]), torch.from_numpy(probes["biases"])
    rewards_out = {"problem_ids": [p.id for p in problems], "greedy": greedy.tolist()}
    for temperature in temperatures:
        passes = static[temperature]
        sampled = np.stack([p["rewards"] for p in passes], 1).astype(float)  # [P, S]
        sampled_tokens = np.stack([p["lengths"] for p in passes], 1).astype(float)
        rewards_out[f"static T={temperature:g}"] = sampled.tolist()
        summary["policies"][f"static T={temperature:g}"] = compare(
            f"static T={temperature:g}", sampled, greedy, 1.0, sampled_tokens.mean(), {})
        # thresholds, per fold, chosen on the training folds with inner held-out probabilities
        tau = {"one_pass": np.empty(total), "restart": np.empty(total)}
        for fold in range(args.folds):
            train = folds != fold
            for kind in tau:
                tau[kind][folds == fold] = choose_tau(probes["inner_prob"][fold], lengths, greedy, sampled.mean(1),
                                                      train, kind == "restart")
        summary["tau"][f"T={temperature:g}"] = {k: sorted(set(np.round(v, 2).tolist())) for k, v in tau.items()}
        fired_end = probes["heldout_prob"][np.arange(total), lengths - 1] > tau["restart"]
        fired_end &= ~np.isnan(probes["heldout_prob"][np.arange(total), lengths - 1])
        restart = np.where(fired_end[:, None], sampled, greedy[:, None])
        rewards_out[f"restart T={temperature:g}"] = restart.tolist()
        summary["policies"][f"restart T={temperature:g}"] = compare(
            f"restart T={temperature:g}", restart, greedy, 1 + fired_end.mean(),
            lengths.mean() + (fired_end[:, None] * sampled_tokens).mean(),
            {"fired_share": round(float(fired_end.mean()), 3)})
        oracle = np.where(wrong[:, None] > 0, sampled, greedy[:, None])
        summary["policies"][f"oracle restart T={temperature:g}"] = compare(
            f"oracle restart T={temperature:g}", oracle, greedy, 1 + wrong.mean(),
            lengths.mean() + (wrong[:, None] * sampled_tokens).mean(), {"fired_share": round(float(wrong.mean()), 3)})
        # Why a switch pays or not: the sampler's pass rate where greedy is wrong (what a switch can
        # win) and where greedy is right (what it risks); a switch pays on average only where the
        # probe's P(wrong) exceeds the break-even. Then, in hindsight (descriptive, chosen on the
        # same problems), the restart at every tau of the grid with the held-out end-of-row probe.
        fix, keep = sampled.mean(1)[wrong > 0].mean(), sampled.mean(1)[wrong == 0].mean()
        break_even = (1 - keep) / (fix + 1 - keep)
        end = np.nan_to_num(probes["heldout_prob"][np.arange(total), lengths - 1], nan=0.0)
        hindsight = {f"{tau:g}": round(100 * float(np.where(end > tau, sampled.mean(1), greedy).mean()
                                                   - greedy.mean()), 1) for tau in TAU_GRID[:-1]}
        summary["switch_economics"][f"T={temperature:g}"] = {
            "sampler_pass_where_greedy_wrong": round(100 * float(fix), 1),
            "sampler_pass_where_greedy_right": round(100 * float(keep), 1),
            "break_even_p_wrong": round(float(break_even), 3),
            "share_of_problems_above_break_even_at_row_end": round(float((end > break_even).mean()), 3),
            "restart_gain_by_tau_in_hindsight": hindsight}
        print(f"T={temperature:g}: sampler passes {100 * fix:.1f}% where greedy is wrong, {100 * keep:.1f}% where "
              f"it is right: a switch pays where P(wrong) > {break_even:.2f}; restart gain by tau in hindsight "
              f"{hindsight}", flush=True)

        # One pass: greedy until the probe first fires on greedy's own states (step t*), then the
        # sampler from there (latched) or wherever the probe fires on the row's own states (per
        # step). Rows where it never fires are greedy's rows; the others are decoded from the prompt
        # plus greedy's first t* tokens, so that no row differs from greedy before its policy does.
        first = first_firing_step(probes["heldout_prob"], lengths, tau["one_pass"])
        fired_rows = np.flatnonzero(first >= 0)
        prefix = [greedy_pass["tokens"][i, : first[i]].tolist() for i in fired_rows]
        start_sum = torch.stack([torch.from_numpy(greedy_pass["features"][i, : first[i]].sum(0)) for i in fired_rows]) \
            if len(fired_rows) else torch.zeros(0, greedy_pass["features"].shape[-1])
        for latch in (False, True):
            name = f"one pass {'latched' if latch else 'per step'} T={temperature:g}"
            actions = ActionSet([GREEDY, DecodingAction(temperature=temperature)])

            def make_chooser(chunk, latch=latch, fired_rows=fired_rows, first=first, tau=tau["one_pass"],
                             start_sum=start_sum):
                index = fired_rows[list(chunk)]
                return probe_chooser(weights, biases, torch.as_tensor(folds[index]),
                                     torch.as_tensor(tau[index], dtype=torch.float32),
                                     torch.as_tensor(first[index]), start_sum[list(chunk)].float(), latch)

            tag = f"from_fire_{'latched' if latch else 'perstep'}_T{temperature:g}"
            rewards, tokens, sampled_steps = np.repeat(greedy[:, None], args.samples, 1), \
                np.repeat(lengths[:, None].astype(float), args.samples, 1), np.zeros((total, args.samples))
            for s in range(args.samples):
                part = decoder.run(f"{tag}_s{s}", actions, fired_rows.tolist(), [seeds[s][i] for i in fired_rows],
                                   prefix=prefix, make_chooser=make_chooser)
                rewards[fired_rows, s] = part["rewards"]
                tokens[fired_rows, s] = first[fired_rows] + part["lengths"]
                sampled_steps[fired_rows, s] = part["switched_steps"]
            rewards_out[name] = rewards.tolist()
            summary["policies"][name] = compare(
                name, rewards, greedy, 1.0, tokens.mean(),
                {"fired_share": round(float(len(fired_rows) / total), 3),
                 "mean_first_step": round(float(first[fired_rows].mean()), 1) if len(fired_rows) else None,
                 "sampled_steps_per_row": round(float(sampled_steps.mean()), 2)})
        (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        (args.out / "rewards.json").write_text(json.dumps(rewards_out) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k not in ("auc_by_step", "rows_by_step")}))


STUDIES = {"prompt": prompt_main, "hidden": hidden_main}


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] not in STUDIES:
        print(__doc__)
        raise SystemExit("usage: headroom_probes.py {prompt,hidden} [options]  (--help after the study name)")
    torch.set_grad_enabled(False)
    STUDIES[argv[0]](argv[1:])


if __name__ == "__main__":
    main()
