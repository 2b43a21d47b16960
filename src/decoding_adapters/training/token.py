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
- **Dropout, on-policy.** The policy keeps the paper's dropout 0.1, and rollouts and loss see the
  *same* dropped-out policy: every dropout mask is a counter-based function of (the row's seed,
  the decode step, the layer) (``policies.counter_dropout_keep``). The rollout's chooser draws the
  action under those masks (``TokenPolicyChooser(training_dropout=True)``, no gradients), and the
  loss recomputes the log-prob of that action from the recorded observation under the identical
  masks (``TokenBatch.seed``/``step``), with gradients: the recomputed log-prob equals the one the
  action was sampled from, so the update is exactly on-policy (one optimiser step per batch).
  (Before issue 13, rollouts ran with dropout off and the loss with fresh random masks.)
  Validation, evaluation and serving use the policy with dropout off (module eval mode).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import torch

from ..decoding.actions import ActionSet
from ..decoding.loop import DecodeResult, row_seed
from ..decoding.rollouts import RolloutRequest, Rollouts, encode_problems, score_rows
from ..policies.networks import (
    AdapterConfig,
    TokenPolicy,
    TokenPolicyChooser,
    TokenPolicyConfig,
    UniformChooser,
    save_adapter,
)
from ..tasks import check_disjoint, problems_record
from .common import (
    TrainingLoop,
    action_histogram,
    check_shared_fields,
    load_split,
    prompt_groups,
    sample_prompt_batch,
    seed_everything,
    step_generator,
)
from .reinforce import ema_update, group_advantages, reinforce_loss

log = logging.getLogger(__name__)

PROBE_PROMPTS_PER_TRAINING_PROMPT = 4
"""Prompt filtering probes at most ``steps x prompts_per_step x`` this many training prompts (and at
most ``max_train_prompts``): enough that a filter dropping most of them still leaves a prompt per
training slot, and a short run does not pay for probing prompts it never trains on."""

__all__ = [
    "TokenTrainConfig",
    "TokenBatch",
    "TokenTrainer",
    "token_loss",
    "rollout_batch_from_result",
    "UniformChooser",
    "group_advantages",
]


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
    """Policy input: the LM's hidden state, or only the base distribution's entropy (ablation)."""
    steps: int = 60
    """Optimiser steps."""
    prompts_per_step: int = 8
    """Prompts per step (each rolled out group_size times)."""
    group_size: int = 8
    """G: rollouts per prompt (group baseline)."""
    lr: float = 3e-4
    """Adam learning rate."""
    lr_decay: float = 0.99
    """Exponential learning-rate decay per step."""
    grad_clip: float = 1.0
    """Clip the gradient's global norm to this."""
    entropy_coef: float = 0.01
    """beta: weight of the policy-entropy bonus."""
    mask_max_prob: float = 0.95
    """Steps whose base max-probability exceeds this carry no gradient (1.0 disables)."""
    baseline: Literal["group", "ema"] = "group"
    """Advantage baseline: the mean reward of the prompt's group, or a moving average."""
    ema_decay: float = 0.9
    """Decay of the moving-average baseline (baseline=ema)."""
    policy_width: int = 256
    """Width of the policy MLP's hidden layers."""
    policy_layers: int = 3
    """Linear layers of the policy MLP."""
    dropout: float = 0.1
    """Dropout of the policy MLP in training (rollouts and loss share masks keyed by row seed and step);
    off in validation, evaluation and serving."""
    policy_temperature: float = 1.0
    """Softmax temperature of the policy."""
    filter_samples: int = 4
    """Probe rollouts per prompt for filtering (0 disables filtering)."""
    filter_min_pass: float = 0.0
    """Drop prompts whose probe pass rate is <= this ..."""
    filter_max_pass: float = 1.0
    """... or >= this."""
    max_train_prompts: int | None = 256
    """Use at most this many training prompts before filtering (none: all); filtering probes at most
    steps x prompts_per_step x 4 of them."""
    val_every: int = 10
    """Validate every this many steps (and after the last)."""
    val_problems: int = 64
    """Validation problems (held out of training)."""
    checkpoint_every: int = 5
    """Write checkpoint.pt every this many steps (and after the last)."""
    patience: int = 0
    """Early stopping: stop after this many validations without a better validation reward and keep
    the best validated weights (0: train every step)."""
    min_improvement: float = 0.0
    """Early stopping: a validation reward must beat the best by more than this to count as better."""
    cot_ratio: float = 0.0
    """Fraction of prompts given a chain-of-thought instruction (fixed per prompt)."""
    bf16: bool = False
    """bf16 autocast for the policy's loss on CUDA (the policy lives on CPU, so today it has no effect)."""
    seed: int = 0
    """Seed of the initial weights, the prompt batches and the rollouts."""

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
        check_shared_fields(self)
        if self.patience < 0 or self.min_improvement < 0:
            raise ValueError("patience and min_improvement must be >= 0")


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
    seed: torch.Tensor | None = None  # [S] long, the row's seed: with ``step`` it keys the dropout masks
    step: torch.Tensor | None = None  # [S] long, the decode step

    def select_rows(self, rows: torch.Tensor) -> "TokenBatch":
        keep = torch.isin(self.row, rows)
        names = ("hidden", "entropy", "remaining", "actions", "advantage", "decision", "row", "seed", "step")
        return TokenBatch(*(None if getattr(self, f) is None else getattr(self, f)[keep] for f in names))

    def dropout_key(self, take: torch.Tensor, device) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(seeds, steps) of the steps ``take``: the rollout's dropout masks; None if not recorded."""
        if self.seed is None or self.step is None:
            return None
        return self.seed[take].to(device), self.step[take].to(device)

    @property
    def num_decisions(self) -> int:
        return int(self.decision.sum())


def rollout_batch_from_result(
    result: DecodeResult, advantages: torch.Tensor, mask_max_prob: float, row_seeds=None
) -> TokenBatch:
    """Flatten a decode (recorded with features) and per-row advantages into a TokenBatch.
    ``row_seeds`` (the request's, one per row) let the loss recompute the rollout's dropout masks."""
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
        seed=None if row_seeds is None else _per_step(torch.as_tensor(list(row_seeds), dtype=torch.long), valid),
        step=steps[valid],
    )


def _per_step(per_row: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``[N]`` row values broadcast to the ``[S]`` valid steps."""
    return per_row.unsqueeze(1).expand_as(valid)[valid]


def token_loss(
    policy: TokenPolicy, batch: TokenBatch, normalizer: int, entropy_coef: float
) -> tuple[torch.Tensor, dict]:
    """``reinforce_loss`` over the batch's decision steps, divided by ``normalizer`` (the number of
    decision steps in the *whole* batch, across micro-batches and workers)."""
    device = next(policy.parameters()).device
    take = batch.decision
    if not bool(take.any()):
        zero = sum(p.sum() * 0 for p in policy.parameters())  # keeps DDP's all-reduce in step
        return zero, {"entropy": 0.0}
    obs = policy.observation(
        batch.hidden[take].to(device), batch.entropy[take].to(device), batch.remaining[take].to(device)
    )
    key = batch.dropout_key(take, device)  # the rollout's masks: the log-prob the action was drawn from
    loss, entropy = reinforce_loss(
        policy.log_probs(obs, dropout_key=key) if key is not None else policy.log_probs(obs),
        batch.actions[take].to(device),
        batch.advantage[take].to(device),
        entropy_coef,
        normalizer,
    )
    return loss, {"entropy": float(entropy.detach().mean())}


class TokenTrainer(TrainingLoop):
    """Trains a ``TokenPolicy`` on a task with a rollout backend; resumable from ``out_dir``."""

    name = "train-token"

    def __init__(
        self,
        config: TokenTrainConfig,
        lm,
        task,
        rollouts: Rollouts,
        out_dir: str | Path,
        *,
        task_name: str = "",
        progress: bool = True,
        train_problems: list | None = None,
    ):
        """``train_problems``: already-filtered training problems (skips the probe), e.g. shared by
        several runs that would otherwise filter the same prompts again."""
        self.config, self.lm, self.task, self.rollouts = config, lm, task, rollouts
        self.given_problems = train_problems
        self._init_loop(out_dir, progress)
        self.task_name = task_name or getattr(task, "name", "")
        self.action_set: ActionSet = rollouts.action_set
        with torch.random.fork_rng():  # same seed, same initial weights, whatever ran before
            seed_everything(config.seed, "init")
            self.policy = TokenPolicy(
                TokenPolicyConfig(
                    hidden_size=lm.hidden_size,
                    num_actions=len(self.action_set),
                    features=config.features,
                    use_budget=config.use_budget and config.features == "hidden",  # entropy-only sees H_t alone
                    token_budget=config.token_budget,
                    width=config.policy_width,
                    layers=config.policy_layers,
                    dropout=config.dropout,
                    temperature=config.policy_temperature,
                )
            )
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=config.lr)
        self.scheduler = torch.optim.lr_scheduler.ExponentialLR(self.optimizer, gamma=config.lr_decay)
        self.ema_baseline: float | None = None
        self.train_problems: list = []
        self.val_problems: list = []

    # ---- data ----------------------------------------------------------------------------------
    def prepare(self) -> dict:
        """Load splits and filter training prompts by probe pass rate; returns a summary."""
        cfg = self.config
        if hasattr(self.task, "splits"):  # train, validation and test share no problem (by content)
            check_disjoint(self.task)
        self.val_problems = load_split(self.task, "validation")[: cfg.val_problems]
        val_ids = {p.id for p in self.val_problems}
        problems = [p for p in self.task.load("train") if p.id not in val_ids][: cfg.max_train_prompts]
        if self.given_problems is None and cfg.filter_samples:  # the probe is sized to the run it feeds
            problems = problems[: cfg.steps * cfg.prompts_per_step * PROBE_PROMPTS_PER_TRAINING_PROMPT]
        if self.given_problems is not None:
            self.train_problems = list(self.given_problems)
            return {"train_prompts": len(problems), "kept": len(self.train_problems), "prefiltered": True}
        if cfg.filter_samples == 0:
            self.train_problems = problems
            return {"train_prompts": len(problems), "kept": len(problems)}
        request = self._request(problems, cfg.filter_samples, ("probe",))
        result = self.rollouts.run(
            request, UniformChooser(len(self.action_set)), progress="probe prompts" if self.progress else False
        )
        rates = score_rows(self.task, problems, result).view(len(problems), cfg.filter_samples).mean(1)
        keep = (rates > cfg.filter_min_pass) & (rates < cfg.filter_max_pass)
        self.train_problems = [p for p, k in zip(problems, keep.tolist()) if k]
        summary = {
            "train_prompts": len(problems),
            "kept": len(self.train_problems),
            "dropped_all_fail": int((rates <= cfg.filter_min_pass).sum()),
            "dropped_all_pass": int((rates >= cfg.filter_max_pass).sum()),
        }
        log.info(
            "prompt filtering: kept %d of %d (%d always failed, %d always passed)",
            summary["kept"],
            summary["train_prompts"],
            summary["dropped_all_fail"],
            summary["dropped_all_pass"],
        )
        if not self.train_problems:
            raise ValueError(
                "prompt filtering kept no training prompt: every probe always failed or always passed; "
                "loosen --filter-min-pass/--filter-max-pass or use --filter-samples 0"
            )
        return summary

    def _request(self, problems, samples: int, key: tuple) -> RolloutRequest:
        prompts, _ = encode_problems(self.lm, self.task, problems, self.config.cot_ratio, self.config.seed)
        rows = [(i, g) for i in range(len(problems)) for g in range(samples)]
        return RolloutRequest(
            prompts=prompts,
            prompt_of_row=[i for i, _ in rows],
            row_seeds=[row_seed(self.config.seed, *key, problems[i].id, g) for i, g in rows],
            token_budget=self.config.token_budget,
        )

    # ---- one step ----------------------------------------------------------------------------
    def rollout(self, step: int) -> tuple[TokenBatch, torch.Tensor, DecodeResult]:
        """rollout -> reward -> advantage for step ``step``: G rollouts of each of the step's
        prompts under the current policy, their rewards, and the loss's inputs."""
        cfg = self.config
        picked = sample_prompt_batch(
            len(self.train_problems),
            cfg.prompts_per_step,
            step_generator(cfg.seed, "batch", step),
            **prompt_groups(self.task, self.train_problems),
        )
        problems = [self.train_problems[i] for i in picked]
        self.policy.eval()
        request = self._request(problems, cfg.group_size, ("train", step))
        chooser = TokenPolicyChooser(self.policy, training_dropout=True)  # the masks the loss recomputes
        result = self.rollouts.run(request, chooser, record_features=True)
        rewards = score_rows(self.task, problems, result)
        if cfg.baseline == "group":
            advantages = group_advantages(rewards, cfg.group_size)
        else:
            base, self.ema_baseline = ema_update(self.ema_baseline, float(rewards.mean()), cfg.ema_decay)
            advantages = rewards - base
        batch = rollout_batch_from_result(result, advantages, cfg.mask_max_prob, request.row_seeds)
        return batch, rewards, result

    def update(self, batch: TokenBatch) -> dict:
        """loss -> step: one optimiser step on ``batch``. The loss covers this process's rows (all of
        them; a DDP rank's share in ``DDPTokenTrainer``) and is normalised by the whole batch's
        decision steps, so the summed gradients are the single-process gradient."""
        cfg = self.config
        self.policy.train()
        self.optimizer.zero_grad(set_to_none=True)
        mine = self.own_rows(batch)
        autocast = torch.autocast(
            "cuda", dtype=torch.bfloat16, enabled=cfg.bf16 and next(self.policy.parameters()).is_cuda
        )
        with autocast:
            loss, stats = self.loss(mine, batch.num_decisions)
        (loss * self.world).backward()  # DDP averages gradients over the world; x world makes it a sum
        grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        return {
            "grad_norm": float(grad_norm),
            "policy_entropy": self.mean_over_ranks(stats["entropy"], mine.num_decisions),
        }

    # ---- what a data-parallel trainer overrides (see training.ddp) ----------------------------
    world = 1

    def own_rows(self, batch: TokenBatch) -> TokenBatch:
        """The rows whose loss this process computes: all of them."""
        return batch

    def loss(self, mine: TokenBatch, normalizer: int) -> tuple[torch.Tensor, dict]:
        return token_loss(self.policy, mine, normalizer, self.config.entropy_coef)

    def mean_over_ranks(self, local_mean: float, weight: int) -> float:
        return local_mean

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
        batch, rewards, result = self.rollout(self.step)  # rollout -> reward -> advantage
        stats = self.update(batch)  # loss -> step
        return {
            "reward": float(rewards.mean()),
            **stats,
            "action_freq": action_histogram(result.actions, len(self.action_set)),
            "action_freq_decisions": action_histogram(batch.actions[batch.decision], len(self.action_set)),
            "action_probs": self._mean_probs(batch),
            "masked_fraction": 1 - batch.num_decisions / max(len(batch.actions), 1),
            "mean_length": float(result.lengths.float().mean()),
            "lr": self.scheduler.get_last_lr()[0],
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
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "ema_baseline": self.ema_baseline,
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
            kind="token",
            policy=asdict(self.policy.config),
            actions=self.action_set.to_json(),
            base_model=self.lm.spec.name_or_path,
            base_fingerprint=self.lm.fingerprint(),
            token_budget=self.config.token_budget,
            task=self.task_name,
            training=asdict(self.config),
            lm_dtype=self.lm.fingerprint().get("dtype"),
            trained_on=problems_record(self.train_problems) if self.train_problems else None,
        )
        return save_adapter(self.out_dir, self.policy, config)
