"""Where a token-training step's time goes, and the trainer's rollouts against the plain loop.

A ``TokenTrainer`` (the demo's math-token actions, prior at greedy, ``--prompts`` x ``--group``
rollouts per step at ``--token-budget`` tokens) runs ``--steps`` steps on the default task. Each
step's wall time is split by timers around the parts the step calls, top to bottom:

- ``decode``: the trainer's rollouts (``rollouts.run`` with features recorded), less the policy;
- ``policy``: the per-token chooser inside the decode (observation, dropout masks, MLP, draw);
- ``scoring``: the task's verifier on the texts (``score_rows``);
- ``batch``: advantages and the loss's inputs (``rollout_batch_from_result``);
- ``update``: the PPO epochs (recomputed log-probs, loss, backward, clip, Adam);
- ``other``: the rest of the step (prompt batch, logging, statistics).

After every step the same prompts and row seeds are decoded again by the **plain loop**: one fixed
action per row (T = 1), no chooser, no features. ``rollout_vs_loop`` is the trainer's decoded
tokens per second (decode + policy) over the plain loop's, the two interleaved step by step in one
run (so the machine's load drifts on both alike); the target is >= 0.8.

The first line names the CPU (``lm.cpu_features``). Last line: one JSON object with the per-part
seconds, shares and the ratio.

    PYTHONPATH=src .venv/bin/python benchmarks/training_step.py [--steps 6] [--prompts 8] [--group 4]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager

import torch

from decoding_adapters.decoding.actions import PRESETS, ActionSet, DecodingAction
from decoding_adapters.decoding.rollouts import HFRollouts, RolloutRequest
from decoding_adapters.lm.cpu_features import cpu_features
from decoding_adapters.lm.models import load_frozen_lm
from decoding_adapters.policies import networks
from decoding_adapters.tasks import get_task
from decoding_adapters.training import token as token_module
from decoding_adapters.training.token import TokenTrainConfig, TokenTrainer

PARTS = ("decode", "policy", "scoring", "batch", "update", "other")


class Timers:
    """Seconds per part, summed over the run; ``time(part)`` nests (a part's time is its own, the
    parts timed inside it are subtracted by the caller)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def time(self, part: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[part] += time.perf_counter() - start


def wrap(owner, name: str, timers: Timers, part: str) -> None:
    """Replace ``owner.name`` by the same callable timed under ``part``."""
    original = getattr(owner, name)

    def timed(*args, **kwargs):
        with timers.time(part):
            return original(*args, **kwargs)

    setattr(owner, name, timed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--steps", type=int, default=6, help="timed training steps (one untimed warm-up first)")
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step")
    parser.add_argument("--group", type=int, default=4, help="rollouts per prompt (G)")
    parser.add_argument("--token-budget", type=int, default=48)
    parser.add_argument("--ppo-epochs", type=int, default=4)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: as configured)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    cpu = cpu_features()
    print(f"CPU: {cpu.describe()}", flush=True)

    lm = load_frozen_lm(args.model)
    task = get_task("arithmetic")
    actions = ActionSet(list(PRESETS["math-token"]))
    rows = args.prompts * args.group
    rollouts = HFRollouts(lm, actions, batch_rows=rows)
    config = TokenTrainConfig(steps=args.steps + 1, prompts_per_step=args.prompts, group_size=args.group,
                              token_budget=args.token_budget, ppo_epochs=args.ppo_epochs, prior_action=0,
                              filter_samples=0, max_train_prompts=256, val_every=10**6, checkpoint_every=10**6)
    timers = Timers()
    with tempfile.TemporaryDirectory() as out:
        trainer = TokenTrainer(config, lm, task, rollouts, out, progress=False)
        trainer.prepare()
        decoded: list[int] = []  # tokens of each trainer rollout call
        trainer_run = trainer.rollouts.run

        def timed_run(*a, **k):
            with timers.time("rollouts"):
                result = trainer_run(*a, **k)
            decoded.append(int(result.lengths.sum()))
            return result

        trainer.rollouts.run = timed_run
        wrap(networks.TokenPolicyChooser, "__call__", timers, "policy")
        wrap(token_module, "score_rows", timers, "scoring")
        wrap(token_module, "rollout_batch_from_result", timers, "batch")
        wrap(trainer, "update", timers, "update")
        # the plain loop: the step's prompts and row seeds again, one fixed T = 1 action per row
        plain = HFRollouts(lm, ActionSet([DecodingAction(temperature=1.0)]), batch_rows=rows)
        requests: list[RolloutRequest] = []
        trainer_request = trainer._request

        def recorded_request(*a, **k):
            requests.append(trainer_request(*a, **k))
            return requests[-1]

        trainer._request = recorded_request
        step_seconds = loop_seconds = 0.0
        rollout_tokens = loop_tokens = 0
        for step in range(args.steps + 1):
            start = time.perf_counter()
            trainer.train_step()
            trainer.step += 1
            elapsed = time.perf_counter() - start
            r = requests[-1]
            loop_start = time.perf_counter()
            result = plain.run(RolloutRequest(r.prompts, r.prompt_of_row, r.row_seeds, r.token_budget,
                                              row_actions=[0] * r.num_rows))
            loop_elapsed = time.perf_counter() - loop_start
            if step == 0:  # warm-up: first calls allocate caches and pick kernels
                timers.seconds.clear()
                continue
            step_seconds += elapsed
            loop_seconds += loop_elapsed
            loop_tokens += int(result.lengths.sum())
            rollout_tokens += decoded[-1]

    seconds = dict(timers.seconds)
    parts = {
        "decode": seconds.get("rollouts", 0.0) - seconds.get("policy", 0.0),
        "policy": seconds.get("policy", 0.0),
        "scoring": seconds.get("scoring", 0.0),
        "batch": seconds.get("batch", 0.0),
        "update": seconds.get("update", 0.0),
    }
    parts["other"] = max(step_seconds - sum(parts.values()), 0.0)
    print(f"{args.steps} steps of {args.prompts} prompts x G={args.group} at {args.token_budget} tokens, "
          f"{step_seconds:.1f} s ({step_seconds / args.steps:.2f} s per step)")
    for part in PARTS:
        print(f"  {part:>8}: {parts[part]:7.2f} s  {parts[part] / step_seconds * 100:5.1f}%")
    rollout_tok_s = rollout_tokens / (parts["decode"] + parts["policy"])
    loop_tok_s = loop_tokens / loop_seconds
    print(f"  trainer rollouts: {rollout_tok_s:.0f} tok/s; plain loop on the same rows: {loop_tok_s:.0f} tok/s; "
          f"rollout_vs_loop {rollout_tok_s / loop_tok_s:.2f}")
    figures = {
        "cpu": cpu.model,
        "cpu_flags": cpu.relevant(),
        "dtype": str(lm.dtype) if hasattr(lm, "dtype") else None,
        "steps": args.steps,
        "rows_per_step": rows,
        "token_budget": args.token_budget,
        "ppo_epochs": args.ppo_epochs,
        "step_seconds": step_seconds / args.steps,
        "seconds": parts,
        "share": {p: parts[p] / step_seconds for p in PARTS},
        "rollout_tok_s": rollout_tok_s,
        "loop_tok_s": loop_tok_s,
        "rollout_vs_loop": rollout_tok_s / loop_tok_s,
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
