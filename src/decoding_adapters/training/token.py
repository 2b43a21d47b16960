"""Token-level adapter training: REINFORCE over per-token decoding actions (paper Sec. "Token-Level").

How this departs from textbook REINFORCE (each choice follows the paper's stabilisation notes):
- **Group baseline.** Every training prompt is rolled out G times under the current policy; a
  rollout's advantage is its terminal reward minus the mean reward of its group (the G rollouts
  of the same prompt). This removes the prompt's difficulty from the signal; a group whose
  rewards are all equal contributes no gradient. (``baseline="ema"``: a moving average instead.)
- **Masked steps.** Steps where the frozen LM's base next-token max-probability exceeds
  ``mask_max_prob`` (0.95) carry no gradient: every action samples the same token there, so they
  add variance and no signal. The policy still acts on them during rollouts.
- **Prompt filtering.** Before training, each prompt is probed with a few rollouts of the uniform
  (Mixed) policy; prompts that always or never succeed give no learning signal and are dropped.
- **Normalisation.** The loss is the sum over unmasked decision steps of
  ``-(A * log pi(a_t | x_t) + beta * H(pi(. | x_t)))`` divided by the number of unmasked steps in
  the *whole* batch, so splitting a batch into micro-batches (or across DDP workers) leaves the
  gradient unchanged.
- **Recomputed log-probs.** Rollouts run the policy in eval mode without gradients and record the
  observations; the loss recomputes log-probs in train mode (dropout on), as a one-step
  on-policy update.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import torch

from ..actions import ActionSet
from ..decoding import DecodeResult, StepFeatures, row_seed
from ..policies import AdapterConfig, TokenPolicy, TokenPolicyChooser, TokenPolicyConfig, save_adapter
from ..rollouts import RolloutRequest, Rollouts, encode_problems, score_rows
from .common import (
    TrainingLoop,
    action_histogram,
    add_loop_arguments,
    load_split,
    run_training_cli,
    sample_prompt_batch,
    seed_everything,
    step_generator,
)

log = logging.getLogger(__name__)

__all__ = ["TokenTrainConfig", "TokenBatch", "TokenTrainer", "token_loss", "rollout_batch_from_result", "UniformChooser"]


@dataclass(frozen=True)
class TokenTrainConfig:
    """Hyper-parameters of token-level training (defaults sized for the 2-core default setup)."""

    actions: str = "math-token"
    """Action set: preset name or JSON file (paper: greedy, T=0.5, T=1.0, T=1.25)."""
    token_budget: int = 32
    """b: max new tokens per rollout."""
    use_budget: bool = True
    """x_t = [h_t ; phi(b_t)] (w/ budget) or h_t (w/o budget)."""
    features: Literal["hidden", "entropy"] = "hidden"
    steps: int = 60
    prompts_per_step: int = 8
    group_size: int = 8
    """G: rollouts per prompt (group baseline)."""
    lr: float = 3e-4
    lr_decay: float = 0.99
    """Exponential learning-rate decay per step."""
    grad_clip: float = 1.0
    entropy_coef: float = 0.01
    """beta: weight of the policy-entropy bonus."""
    mask_max_prob: float = 0.95
    """Steps whose base max-probability exceeds this carry no gradient (1.0 disables)."""
    baseline: Literal["group", "ema"] = "group"
    ema_decay: float = 0.9
    policy_width: int = 256
    policy_layers: int = 3
    dropout: float = 0.1
    policy_temperature: float = 1.0
    filter_samples: int = 4
    """Probe rollouts per prompt for filtering (0 disables filtering)."""
    filter_min_pass: float = 0.0
    """Drop prompts whose probe pass rate is <= this ..."""
    filter_max_pass: float = 1.0
    """... or >= this."""
    max_train_prompts: int | None = 256
    val_every: int = 10
    val_problems: int = 64
    checkpoint_every: int = 5
    cot_ratio: float = 0.0
    bf16: bool = False
    """bf16 autocast for the policy on CUDA (ignored on CPU)."""
    seed: int = 0

    def __post_init__(self) -> None:
        if self.baseline not in ("group", "ema"):
            raise ValueError(f"baseline must be 'group' or 'ema', got {self.baseline!r}")
        if self.group_size < 1 or self.prompts_per_step < 1 or self.steps < 0:
            raise ValueError("group_size and prompts_per_step must be >= 1 and steps >= 0")
        if self.baseline == "group" and self.group_size < 2:
            raise ValueError("a group baseline needs group_size >= 2")
        if not 0 < self.mask_max_prob <= 1:
            raise ValueError("mask_max_prob must be in (0, 1]")
        if self.val_every < 1 or self.checkpoint_every < 1:
            raise ValueError("val_every and checkpoint_every must be >= 1")


@dataclass
class TokenBatch:
    """Everything the loss needs from a rollout batch, flattened over valid steps.

    S = number of valid (row, step) pairs; M = those not masked."""

    hidden: torch.Tensor  # [S, H] float
    entropy: torch.Tensor  # [S]
    remaining: torch.Tensor  # [S] long, b - t
    actions: torch.Tensor  # [S] long
    advantage: torch.Tensor  # [S] float, the row's advantage broadcast to its steps
    decision: torch.Tensor  # [S] bool, True where the step carries gradient (not masked)
    row: torch.Tensor  # [S] long, which rollout row each step belongs to

    def select_rows(self, rows: torch.Tensor) -> "TokenBatch":
        keep = torch.isin(self.row, rows)
        return TokenBatch(*(getattr(self, f)[keep] for f in ("hidden", "entropy", "remaining", "actions", "advantage", "decision", "row")))

    @property
    def num_decisions(self) -> int:
        return int(self.decision.sum())


def rollout_batch_from_result(result: DecodeResult, advantages: torch.Tensor, mask_max_prob: float) -> TokenBatch:
    """Flatten a decode (recorded with features) and per-row advantages into a TokenBatch."""
    if result.features is None:
        raise ValueError("token-level training needs rollouts recorded with record_features=True")
    valid = result.valid_mask()
    steps = torch.arange(valid.shape[1]).expand_as(valid)
    remaining = result.token_budgets.unsqueeze(1) - steps
    rows = torch.arange(valid.shape[0]).unsqueeze(1).expand_as(valid)
    return TokenBatch(
        hidden=result.features[valid],
        entropy=result.entropy[valid],
        remaining=remaining[valid],
        actions=result.actions[valid],
        advantage=advantages.unsqueeze(1).expand_as(valid)[valid].float(),
        decision=result.max_prob[valid] <= mask_max_prob,
        row=rows[valid],
    )


def token_loss(policy: TokenPolicy, batch: TokenBatch, normalizer: int, entropy_coef: float) -> tuple[torch.Tensor, dict]:
    """REINFORCE + entropy loss summed over the batch's decision steps, divided by ``normalizer``
    (the number of decision steps in the *whole* batch, across micro-batches and workers)."""
    device = next(policy.parameters()).device
    take = batch.decision
    if not bool(take.any()):
        zero = sum(p.sum() * 0 for p in policy.parameters())  # keeps DDP's all-reduce in step
        return zero, {"entropy": 0.0}
    obs = policy.observation(batch.hidden[take].to(device), batch.entropy[take].to(device), batch.remaining[take].to(device))
    logp_all = (policy(obs) / policy.temperature).log_softmax(-1)
    logp = logp_all.gather(-1, batch.actions[take].to(device).unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    objective = batch.advantage[take].to(device) * logp + entropy_coef * entropy
    return -objective.sum() / max(normalizer, 1), {"entropy": float(entropy.detach().mean())}


class UniformChooser:
    """The Mixed static baseline as a chooser: each token's action uniform over K, from the row's
    own uniform draw (reproducible)."""

    def __init__(self, num_actions: int):
        self.k = num_actions

    def __call__(self, f: StepFeatures) -> torch.Tensor:
        return (f.uniform * self.k).long().clamp(max=self.k - 1)


def group_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """r - mean(r of the same prompt's group); rows are laid out prompt-major."""
    groups = rewards.view(-1, group_size)
    return (groups - groups.mean(1, keepdim=True)).reshape(-1)


class TokenTrainer(TrainingLoop):
    """Trains a ``TokenPolicy`` on a task with a rollout backend; resumable from ``out_dir``."""

    name = "train-token"

    def __init__(self, config: TokenTrainConfig, lm, task, rollouts: Rollouts, out_dir: str | Path, *,
                 task_name: str = "", progress: bool = True, train_problems: list | None = None):
        """``train_problems``: already-filtered training problems (skips the probe), e.g. shared by
        several runs that would otherwise filter the same prompts again."""
        self.config, self.lm, self.task, self.rollouts = config, lm, task, rollouts
        self.given_problems = train_problems
        self._init_loop(out_dir, progress)
        self.task_name = task_name or getattr(task, "name", "")
        self.action_set: ActionSet = rollouts.action_set
        with torch.random.fork_rng():  # same seed, same initial weights, whatever ran before
            seed_everything(config.seed, "init")
            self.policy = TokenPolicy(TokenPolicyConfig(
                hidden_size=lm.hidden_size, num_actions=len(self.action_set), features=config.features,
                use_budget=config.use_budget, token_budget=config.token_budget, width=config.policy_width,
                layers=config.policy_layers, dropout=config.dropout, temperature=config.policy_temperature,
            ))
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=config.lr)
        self.scheduler = torch.optim.lr_scheduler.ExponentialLR(self.optimizer, gamma=config.lr_decay)
        self.ema_baseline: float | None = None
        self.train_problems: list = []
        self.val_problems: list = []

    # ---- data ----------------------------------------------------------------------------------
    def prepare(self) -> dict:
        """Load splits and filter training prompts by probe pass rate; returns a summary."""
        cfg = self.config
        self.val_problems = load_split(self.task, "validation")[: cfg.val_problems]
        val_ids = {p.id for p in self.val_problems}
        problems = [p for p in self.task.load("train") if p.id not in val_ids][: cfg.max_train_prompts]
        if self.given_problems is not None:
            self.train_problems = list(self.given_problems)
            return {"train_prompts": len(problems), "kept": len(self.train_problems), "prefiltered": True}
        if cfg.filter_samples == 0:
            self.train_problems = problems
            return {"train_prompts": len(problems), "kept": len(problems)}
        request = self._request(problems, cfg.filter_samples, ("probe",))
        result = self.rollouts.run(request, UniformChooser(len(self.action_set)), progress="probe prompts" if self.progress else False)
        rates = score_rows(self.task, problems, result).view(len(problems), cfg.filter_samples).mean(1)
        keep = (rates > cfg.filter_min_pass) & (rates < cfg.filter_max_pass)
        self.train_problems = [p for p, k in zip(problems, keep.tolist()) if k]
        summary = {"train_prompts": len(problems), "kept": len(self.train_problems),
                   "dropped_all_fail": int((rates <= cfg.filter_min_pass).sum()),
                   "dropped_all_pass": int((rates >= cfg.filter_max_pass).sum())}
        log.info("prompt filtering: kept %d of %d (%d always failed, %d always passed)", summary["kept"],
                 summary["train_prompts"], summary["dropped_all_fail"], summary["dropped_all_pass"])
        if not self.train_problems:
            raise ValueError("prompt filtering kept no training prompt: every probe always failed or always passed; "
                             "loosen --filter-min-pass/--filter-max-pass or use --filter-samples 0")
        return summary

    def _request(self, problems, samples: int, key: tuple) -> RolloutRequest:
        prompts, _ = encode_problems(self.lm, self.task, problems, self.config.cot_ratio, self.config.seed)
        rows = [(i, g) for i in range(len(problems)) for g in range(samples)]
        return RolloutRequest(
            prompts=prompts, prompt_of_row=[i for i, _ in rows],
            row_seeds=[row_seed(self.config.seed, *key, problems[i].id, g) for i, g in rows],
            token_budget=self.config.token_budget,
        )

    # ---- one step ----------------------------------------------------------------------------
    def rollout(self, step: int) -> tuple[TokenBatch, torch.Tensor, DecodeResult]:
        cfg = self.config
        picked = sample_prompt_batch(len(self.train_problems), cfg.prompts_per_step, step_generator(cfg.seed, "batch", step))
        problems = [self.train_problems[i] for i in picked]
        request = self._request(problems, cfg.group_size, ("train", step))
        self.policy.eval()
        result = self.rollouts.run(request, TokenPolicyChooser(self.policy), record_features=True)
        rewards = score_rows(self.task, problems, result)
        if cfg.baseline == "group":
            advantages = group_advantages(rewards, cfg.group_size)
        else:
            base = float(rewards.mean()) if self.ema_baseline is None else self.ema_baseline
            advantages = rewards - base
            self.ema_baseline = cfg.ema_decay * base + (1 - cfg.ema_decay) * float(rewards.mean())
        return rollout_batch_from_result(result, advantages, cfg.mask_max_prob), rewards, result

    def update(self, batch: TokenBatch, micro_batches: int = 1) -> dict:
        """One optimiser step on ``batch`` (optionally in micro-batches of rows)."""
        cfg = self.config
        self.policy.train()
        self.optimizer.zero_grad(set_to_none=True)
        normalizer = batch.num_decisions
        rows = batch.row.unique()
        stats = {"entropy": 0.0}
        for part in rows.chunk(micro_batches):
            autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=cfg.bf16 and next(self.policy.parameters()).is_cuda)
            with autocast:
                loss, stats = token_loss(self.policy, batch.select_rows(part), normalizer, cfg.entropy_coef)
            loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        return {"grad_norm": float(grad_norm), "policy_entropy": stats["entropy"]}

    def validate(self) -> float:
        """Mean reward of one policy-sampled rollout per validation problem (fixed seeds)."""
        if not self.val_problems:
            return float("nan")
        self.policy.eval()
        request = self._request(self.val_problems, 1, ("val",))
        result = self.rollouts.run(request, TokenPolicyChooser(self.policy))
        return float(score_rows(self.task, self.val_problems, result).mean())

    # ---- loop hooks (see TrainingLoop) --------------------------------------------------------
    def start(self) -> dict:
        return {"event": "filter", **self.prepare()}

    def train_step(self) -> dict:
        batch, rewards, result = self.rollout(self.step)
        stats = self.update(batch)
        return {
            "reward": float(rewards.mean()), **stats,
            "action_freq": action_histogram(result.actions, len(self.action_set)),
            "action_freq_decisions": action_histogram(batch.actions[batch.decision], len(self.action_set)),
            "action_probs": self._mean_probs(batch),
            "masked_fraction": 1 - batch.num_decisions / max(len(batch.actions), 1),
            "mean_length": float(result.lengths.float().mean()), "lr": self.scheduler.get_last_lr()[0],
        }

    def _mean_probs(self, batch: TokenBatch) -> list[float]:
        take = batch.decision
        if not bool(take.any()):
            return [1.0 / len(self.action_set)] * len(self.action_set)
        self.policy.eval()
        with torch.no_grad():
            obs = self.policy.observation(batch.hidden[take], batch.entropy[take], batch.remaining[take])
            return self.policy.probs(obs).mean(0).tolist()

    def state(self) -> dict:
        return {
            "policy": self.policy.state_dict(), "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(), "ema_baseline": self.ema_baseline,
            "train_ids": [p.id for p in self.train_problems],
        }

    def restore(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.ema_baseline = state["ema_baseline"]
        by_id = {p.id: p for p in self.task.load("train")}
        self.train_problems = [by_id[i] for i in state["train_ids"]]
        self.val_problems = load_split(self.task, "validation")[: self.config.val_problems]

    def save(self) -> Path:
        """Write the adapter (safetensors + JSON) into the output directory."""
        config = AdapterConfig(
            kind="token", policy=asdict(self.policy.config), actions=self.action_set.to_json(),
            base_model=self.lm.spec.name_or_path, base_fingerprint=self.lm.fingerprint(),
            budgets=[self.config.token_budget], task=self.task_name, training=asdict(self.config),
        )
        return save_adapter(self.out_dir, self.policy, config)


# ---- CLI ------------------------------------------------------------------------------------------


def configure_parser(p: argparse.ArgumentParser) -> None:
    from ..cli_common import add_model_arguments, add_rollout_arguments, add_task_arguments

    add_model_arguments(p)
    add_task_arguments(p, max_problems=False)
    add_rollout_arguments(p, token_budget=TokenTrainConfig.token_budget)
    g = p.add_argument_group("token-level training")
    g.add_argument("--actions", default=TokenTrainConfig.actions, help="action set: preset or JSON file")
    g.add_argument("--no-budget", action="store_true", help="w/o budget variant: the policy does not see b_t")
    g.add_argument("--features", default="hidden", choices=["hidden", "entropy"], help="'entropy' = the entropy-only ablation")
    add_loop_arguments(g, TokenTrainConfig,
                       ("steps", "prompts_per_step", "group_size", "val_every", "val_problems", "checkpoint_every",
                        "filter_samples", "max_train_prompts"),
                       ("lr", "lr_decay", "grad_clip", "entropy_coef", "mask_max_prob", "dropout", "filter_min_pass",
                        "filter_max_pass"))
    g.add_argument("--baseline", default="group", choices=["group", "ema"])
    g.add_argument("--bf16", action="store_true", help="bf16 autocast for the policy on CUDA")
    p.add_argument("--out", required=True, help="output directory (adapter, checkpoint, train_log.jsonl)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")


def config_from_args(args) -> TokenTrainConfig:
    return TokenTrainConfig(
        actions=args.actions, token_budget=args.token_budget, use_budget=not args.no_budget, features=args.features,
        steps=args.steps, prompts_per_step=args.prompts_per_step, group_size=args.group_size, lr=args.lr,
        lr_decay=args.lr_decay, grad_clip=args.grad_clip, entropy_coef=args.entropy_coef,
        mask_max_prob=args.mask_max_prob, baseline=args.baseline, dropout=args.dropout,
        filter_samples=args.filter_samples, filter_min_pass=args.filter_min_pass, filter_max_pass=args.filter_max_pass,
        max_train_prompts=args.max_train_prompts, val_every=args.val_every, val_problems=args.val_problems,
        checkpoint_every=args.checkpoint_every, cot_ratio=args.cot_ratio, bf16=args.bf16, seed=args.seed,
    )


def run_cli(args) -> int:
    if args.backend == "ray":  # DDP on Ray Train: every worker rolls out its shard of the prompts
        from ..cli_common import task_options
        from ..distributed import TaskSpec, train_token_ddp
        from ..models import ModelSpec
        from .common import resolve_config

        config = resolve_config(args, TokenTrainConfig, config_from_args)
        out = train_token_ddp(config, ModelSpec(args.model, args.device, args.dtype), TaskSpec(args.task, task_options(args)),
                              args.out, workers=args.workers, batch_rows=args.batch_rows, address=args.ray_address,
                              resume=args.resume, task_name=args.task)
        print(f"token adapter written to {out}")
        return 0

    def make_trainer(config, lm, task, rollouts, action_set):
        return TokenTrainer(config, lm, task, rollouts, args.out, task_name=args.task)

    return run_training_cli(args, TokenTrainConfig, config_from_args, make_trainer, "token adapter")
