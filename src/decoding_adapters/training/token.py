"""Token-level adapter training: REINFORCE over per-token decoding actions (paper Sec. "Token-Level").

How this departs from textbook REINFORCE (each choice follows the paper's stabilisation notes):
- **Group baseline.** Every training prompt is rolled out G times under the current policy; a
  rollout's advantage is its terminal reward minus the mean reward of its group (the G rollouts
  of the same prompt). This removes the prompt's difficulty from the signal; a group whose
  rewards are all equal contributes no gradient. (``baseline="ema"``: a moving average instead.)
- **Masked steps.** Steps where the frozen LM's base next-token max-probability exceeds
  ``mask_max_prob`` (0.95) carry no gradient: every action samples the same token there, so they
  add variance and no signal. The policy still acts on them during rollouts.
- **Prompt filtering.** Before training, each prompt is probed with a few rollouts of the policy the
  trainer starts from (its prior, sampled as the first rollouts sample it); prompts where it always
  or never succeeds give a group baseline no signal and are dropped. Prompts are probed in rounds
  until ``min_train_prompts`` survive (or the split runs out), and a run walks through the kept
  prompts epoch by epoch, so it sees ``min(kept, steps x prompts_per_step)`` distinct prompts.
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
  Validation, evaluation and serving use the policy with dropout off (module eval mode).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import torch

from ..decoding.actions import DEFAULT_TOKEN_BUDGET, ActionSet
from ..decoding.loop import DecodeResult, row_seed
from ..decoding.protocol import STOP_AT_ANSWER, DecodingProtocol
from ..decoding.rollouts import RolloutRequest, Rollouts, answer_stops, encode_problems, score_rows
from ..policies.networks import (
    DEFAULT_POLICY_TEMPERATURE,
    POLICY_MODES,
    AdapterConfig,
    TokenPolicy,
    TokenPolicyChooser,
    TokenPolicyConfig,
    prior_distribution,
    save_adapter,
)
from ..tasks import check_disjoint, content_hash, problems_record, task_record
from .common import (
    TrainingLoop,
    Validation,
    action_histogram,
    check_shared_fields,
    epoch_prompt_batch,
    load_split,
    prompt_groups,
    sample_prompt_batch,
    seed_everything,
    step_generator,
)
from .reinforce import clipped_loss, ema_update, group_advantages

log = logging.getLogger(__name__)

PROBE_ROUND_FACTOR = 3
"""Prompt filtering probes, per round, this many prompts per prompt still wanted (then another round
for what is still missing): the starting policy's filter keeps about a third on the default task
(300 of 1,004 probed with 2 samples at 48 tokens), so a short run does not pay for probing prompts
it never trains on."""

__all__ = [
    "TokenTrainConfig",
    "TokenBatch",
    "TokenTrainer",
    "token_loss",
    "rollout_log_probs",
    "rollout_batch_from_result",
]


@dataclass(frozen=True)
class TokenTrainConfig:
    """Hyper-parameters of token-level training (defaults sized for the 2-core default setup)."""

    actions: str = "math-token"
    """Action set: preset name or JSON file (paper: greedy, T=0.5, T=1.0, T=1.25)."""
    token_budget: int = DEFAULT_TOKEN_BUDGET
    """b: max new tokens per rollout."""
    stop_at_answer: bool = STOP_AT_ANSWER
    """Every rollout (training, the prompt filter, validation, and the adapter's samples when
    served) ends at the task's first complete answer; recorded in adapter.json. False: to the
    token budget."""
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
    lr: float = 1e-3
    """Adam learning rate; higher rates random-walk on small batches when the signal is weak (the
    measurements behind the default: docs/token-defaults.md)."""
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
    policy_temperature: float = DEFAULT_POLICY_TEMPERATURE
    """Softmax temperature of the policy."""
    prior_action: int | None = None
    """Index of the best static token action (chosen on validation by the caller): the policy starts
    at a prior with ``prior_mass`` on it (the log-prior is a fixed logit bias and the last layer
    starts at zero) and learns deviations from it. None: no prior, the usual random start."""
    prior_mass: float = 0.8
    """Probability the prior puts on ``prior_action`` (the rest spread evenly over the others);
    measurements: docs/token-defaults.md."""
    kl_coef: float = 0.0
    """Weight of KL(pi || prior) per decision step (needs ``prior_action``); off by default, since it
    held the planted benchmark's policy back from the optimum (docs/token-defaults.md)."""
    ppo_epochs: int = 4
    """Optimiser steps per rollout batch: epoch 1 is exactly REINFORCE, later epochs use PPO's clipped
    ratio on the recorded features (no decoding); measurements: docs/token-defaults.md."""
    clip: float = 0.2
    """PPO clip range eps: the ratio pi / pi_rollout is clipped to [1 - eps, 1 + eps]."""
    filter_samples: int = 4
    """Probe rollouts per prompt of the starting policy for filtering (0 disables filtering)."""
    filter_min_pass: float = 0.0
    """Drop prompts whose probe pass rate is <= this ..."""
    filter_max_pass: float = 1.0
    """... or >= this."""
    max_train_prompts: int | None = None
    """Use at most this many training prompts before filtering (none: all of the split)."""
    min_train_prompts: int = 300
    """Probe training prompts until this many survive the filter (at most steps x prompts_per_step:
    a run cannot see more), or the split runs out; fewer is logged as a warning."""
    val_every: int = 10
    """Validate every this many steps (and after the last)."""
    val_problems: int = 400
    """Validation problems (held out of training); a validation split with fewer is logged as a
    warning (a generated task makes more: e.g. ``validation_size`` of ``arithmetic``)."""
    val_samples: int = 2
    """Rollouts per validation problem and policy mode (fixed seeds): the standard error of the
    validation reward (over problems, logged as ``val_se``) shrinks with problems x samples."""
    val_modes: tuple[str, ...] = ("sample", "argmax")
    """Policy modes validated (``policies.POLICY_MODES``): the better one is kept with the weights
    and stored in the adapter as its ``policy_mode``."""
    keep_best: bool = True
    """Validate at step 0 and keep the best validated weights, the start included, so the adapter
    never validates worse than the policy it started from."""
    min_improvement_se: float = 1.96
    """A validation counts as better than the best only by more than this many standard errors of
    the paired difference (per validation problem) between the two: 1.96, a later step is kept
    only when its paired gain's 95% interval is above 0 (the start, step 0, on the same problems
    and seeds, is the first best)."""
    checkpoint_every: int = 5
    """Write checkpoint.pt every this many steps (and after the last)."""
    patience: int = 0
    """Early stopping: stop after this many validations without a better validation reward and keep
    the best validated weights (0: train every step)."""
    min_improvement: float = 0.0
    """Early stopping: a validation reward must beat the best by more than this to count as better."""
    cot_ratio: float = 0.0
    """Fraction of prompts given a chain-of-thought instruction (fixed per prompt)."""
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
        if self.patience < 0 or self.min_improvement < 0 or self.min_improvement_se < 0:
            raise ValueError("patience, min_improvement and min_improvement_se must be >= 0")
        if self.val_samples < 1 or self.ppo_epochs < 1 or not 0 < self.clip < 1:
            raise ValueError("val_samples and ppo_epochs must be >= 1 and clip in (0, 1)")
        if not self.val_modes or any(m not in POLICY_MODES for m in self.val_modes):
            raise ValueError(f"val_modes must be a non-empty subset of {list(POLICY_MODES)}, got {self.val_modes}")
        if self.kl_coef < 0 or (self.kl_coef > 0 and self.prior_action is None):
            raise ValueError("kl_coef must be >= 0, and > 0 only with a prior_action")
        if not 0 < self.prior_mass < 1:
            raise ValueError(f"prior_mass must be in (0, 1), got {self.prior_mass}")

    @property
    def protocol(self) -> DecodingProtocol:
        """The token budget and the stop at the first answer as one object (validated there)."""
        return DecodingProtocol(self.token_budget, self.stop_at_answer)


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
    old_logp: torch.Tensor | None = None  # [S] log pi_rollout(action): the PPO ratio's denominator

    def select_rows(self, rows: torch.Tensor) -> "TokenBatch":
        keep = torch.isin(self.row, rows)
        names = ("hidden", "entropy", "remaining", "actions", "advantage", "decision", "row", "seed", "step",
                 "old_logp")
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


def distinct_questions(problems: list) -> list:
    """``problems`` with each content (``tasks.content_hash``, the identity the splits use) kept once,
    the first: counts of training prompts count distinct prompts (a generated split asked for more
    problems than a family's pool holds repeats questions)."""
    seen: set[str] = set()
    out = []
    for p in problems:
        key = content_hash(p)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def _per_step(per_row: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``[N]`` row values broadcast to the ``[S]`` valid steps."""
    return per_row.unsqueeze(1).expand_as(valid)[valid]


def token_loss(
    policy: TokenPolicy,
    batch: TokenBatch,
    normalizer: int,
    entropy_coef: float,
    *,
    kl_coef: float = 0.0,
    clip: float = 0.2,
) -> tuple[torch.Tensor, dict]:
    """``clipped_loss`` over the batch's decision steps, divided by ``normalizer`` (the number of
    decision steps in the *whole* batch, across micro-batches and workers). Without
    ``batch.old_logp`` the ratio is 1 (REINFORCE); ``kl_coef`` pulls toward the policy's prior."""
    device = next(policy.parameters()).device
    take = batch.decision
    if not bool(take.any()):
        zero = sum(p.sum() * 0 for p in policy.parameters())  # keeps DDP's all-reduce in step
        return zero, {"entropy": 0.0, "kl": 0.0, "clipped": 0.0}
    logp = _decision_log_probs(policy, batch, device)
    prior = policy.prior_log_probs()
    loss, stats = clipped_loss(
        logp,
        batch.actions[take].to(device),
        batch.advantage[take].to(device),
        old_logp=None if batch.old_logp is None else batch.old_logp[take].to(device),
        clip=clip,
        entropy_coef=entropy_coef,
        kl_coef=kl_coef,
        prior_logp=None if prior is None else prior.to(device),
        normalizer=normalizer,
    )
    clipped = ((stats["ratio"] - 1).abs() > clip).float().mean()
    return loss, {"entropy": float(stats["entropy"].mean()), "kl": float(stats["kl"].mean()),
                  "clipped": float(clipped)}


def _decision_log_probs(policy: TokenPolicy, batch: TokenBatch, device) -> torch.Tensor:
    """log pi ``[M, K]`` at the batch's decision steps, under the rollout's dropout masks."""
    take = batch.decision
    obs = policy.observation(
        batch.hidden[take].to(device), batch.entropy[take].to(device), batch.remaining[take].to(device)
    )
    key = batch.dropout_key(take, device)  # the rollout's masks: the log-prob the action was drawn from
    return policy.log_probs(obs, dropout_key=key) if key is not None else policy.log_probs(obs)


def rollout_log_probs(policy: TokenPolicy, batch: TokenBatch) -> torch.Tensor:
    """``[S]`` log-prob of each step's action under ``policy`` as it stands (no gradient), 0 on
    masked steps: with the rollout's dropout masks this is the log-prob it was drawn with."""
    out = torch.zeros(len(batch.actions))
    take = batch.decision
    if bool(take.any()):
        with torch.no_grad():
            logp = _decision_log_probs(policy, batch, next(policy.parameters()).device)
            out[take] = logp.gather(-1, batch.actions[take].to(logp.device).unsqueeze(-1)).squeeze(-1).cpu()
    return out


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
                    prior=prior_distribution(len(self.action_set), config.prior_action, config.prior_mass),
                )
            )
        self.policy_mode = config.val_modes[0]  # the validated mode, once validation has run
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=config.lr)
        self.scheduler = torch.optim.lr_scheduler.ExponentialLR(self.optimizer, gamma=config.lr_decay)
        self.ema_baseline: float | None = None
        self.train_problems: list = []
        self.val_problems: list = []

    # ---- data ----------------------------------------------------------------------------------
    def prepare(self) -> dict:
        """Load splits and filter training prompts by the starting policy's probe pass rate; returns
        a summary (also logged)."""
        cfg = self.config
        if hasattr(self.task, "splits"):  # train, validation and test share no problem (by content)
            check_disjoint(self.task)
        self.val_problems = load_split(self.task, "validation")[: cfg.val_problems]
        if len(self.val_problems) < cfg.val_problems:
            log.warning("validation has %d problems, fewer than the %d asked for", len(self.val_problems),
                        cfg.val_problems)
        val_ids = {p.id for p in self.val_problems}
        problems = distinct_questions([p for p in self.task.load("train") if p.id not in val_ids])
        problems = problems[: cfg.max_train_prompts]
        if not problems and self.given_problems is None and cfg.steps:
            raise ValueError(
                f"no training prompt left: the train split holds {len(self.task.load('train'))} problem(s) and "
                f"validation takes {len(self.val_problems)} of them; give more training rows or a validation file"
            )
        base = {"val_problems": len(self.val_problems), "val_samples": cfg.val_samples}
        if self.given_problems is not None:
            self.train_problems = list(self.given_problems)
            return {**base, "train_prompts": len(problems), "kept": len(self.train_problems), "prefiltered": True,
                    "distinct_prompts_per_run": self.distinct_prompts_per_run()}
        if cfg.filter_samples == 0 or cfg.steps == 0:  # no steps: nothing to filter for, the adapter is its start
            self.train_problems = problems
            return {**base, "train_prompts": len(problems), "kept": len(problems),
                    "distinct_prompts_per_run": self.distinct_prompts_per_run()}
        wanted = max(1, min(cfg.min_train_prompts, cfg.steps * cfg.prompts_per_step))
        self.policy.eval()
        start_policy = TokenPolicyChooser(self.policy)  # sampled, no dropout: what the first rollouts draw
        kept, rates, probed = [], [], 0
        while probed < len(problems) and len(kept) < wanted:
            batch = problems[probed : probed + PROBE_ROUND_FACTOR * (wanted - len(kept))]
            probed += len(batch)
            request = self._request(batch, cfg.filter_samples, ("probe",))  # row seeds keyed by problem id
            result = self.rollouts.run(request, start_policy, progress="probe prompts" if self.progress else False)
            batch_rates = score_rows(self.task, batch, result).view(len(batch), cfg.filter_samples).mean(1)
            rates += batch_rates.tolist()
            kept += [p for p, r in zip(batch, batch_rates.tolist()) if cfg.filter_min_pass < r < cfg.filter_max_pass]
        self.train_problems = kept
        rates_t = torch.tensor(rates)
        summary = {
            **base,
            "judged_by": "start policy",
            "train_prompts": probed,
            "kept": len(kept),
            "dropped_all_fail": int((rates_t <= cfg.filter_min_pass).sum()),
            "dropped_all_pass": int((rates_t >= cfg.filter_max_pass).sum()),
            "wanted": wanted,
            "distinct_prompts_per_run": self.distinct_prompts_per_run(),
        }
        log.info(
            "prompt filtering by the starting policy: kept %d of %d probed (%d always failed, %d always passed); "
            "a run sees %d distinct prompts",
            summary["kept"], summary["train_prompts"], summary["dropped_all_fail"], summary["dropped_all_pass"],
            summary["distinct_prompts_per_run"],
        )
        if not self.train_problems:
            raise ValueError(
                "prompt filtering kept no training prompt: every probe always failed or always passed; "
                "loosen --filter-min-pass/--filter-max-pass or use --filter-samples 0"
            )
        if len(kept) < wanted:
            available = len(distinct_questions([p for p in self.task.load("train") if p.id not in val_ids]))
            if cfg.max_train_prompts is not None and available > cfg.max_train_prompts:
                log.warning("prompt filtering kept %d training prompts, fewer than the %d wanted: --max-train-prompts "
                            "%d capped the prompts probed (the train split holds %d); raise it to probe more",
                            len(kept), wanted, cfg.max_train_prompts, available)
            else:
                log.warning("prompt filtering kept %d training prompts, fewer than the %d wanted: the train split "
                            "ran out (a generated task makes more, e.g. train_size of arithmetic)", len(kept), wanted)
        return summary

    def distinct_prompts_per_run(self) -> int:
        """Distinct training prompts a run of this config sees (epoch-wise batches of the kept ones)."""
        return min(len(self.train_problems), self.config.steps * self.config.prompts_per_step)

    def _request(self, problems, samples: int, key: tuple) -> RolloutRequest:
        prompts, _ = encode_problems(self.lm, self.task, problems, self.config.cot_ratio, self.config.seed)
        rows = [(i, g) for i in range(len(problems)) for g in range(samples)]
        return RolloutRequest(
            prompts=prompts,
            prompt_of_row=[i for i, _ in rows],
            row_seeds=[row_seed(self.config.seed, *key, problems[i].id, g) for i, g in rows],
            token_budget=self.config.token_budget,
            stop_checks=answer_stops(self.task, problems, [i for i, _ in rows], self.config.stop_at_answer),
        )

    # ---- one step ----------------------------------------------------------------------------
    def rollout(self, step: int) -> tuple[TokenBatch, torch.Tensor, DecodeResult]:
        """rollout -> reward -> advantage for step ``step``: G rollouts of each of the step's
        prompts under the current policy, their rewards, and the loss's inputs."""
        cfg = self.config
        groups = prompt_groups(self.task, self.train_problems)
        if groups:  # a task mix: every step balanced over its domains
            picked = sample_prompt_batch(len(self.train_problems), cfg.prompts_per_step,
                                         step_generator(cfg.seed, "batch", step), **groups)
        else:  # epoch by epoch: a run sees min(kept, steps x prompts_per_step) distinct prompts
            picked = epoch_prompt_batch(len(self.train_problems), cfg.prompts_per_step, cfg.seed, step)
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
        """loss -> step: ``ppo_epochs`` optimiser steps on ``batch``. The loss covers this process's
        rows (all of them; a DDP rank's share in ``DDPTokenTrainer``) and is normalised by the whole
        batch's decision steps, so the summed gradients are the single-process gradient. Epoch 1's
        ratio is exactly 1 (the recorded log-probs are recomputed under the rollout's dropout
        masks), so one epoch is REINFORCE."""
        cfg = self.config
        self.policy.train()
        mine = self.own_rows(batch)
        if cfg.ppo_epochs > 1:
            mine.old_logp = rollout_log_probs(self.policy, mine)
        for _ in range(cfg.ppo_epochs):
            self.optimizer.zero_grad(set_to_none=True)
            loss, stats = self.loss(mine, batch.num_decisions)
            (loss * self.world).backward()  # DDP averages gradients over the world; x world makes it a sum
            grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.grad_clip)
            self.optimizer.step()
        self.scheduler.step()
        return {
            "grad_norm": float(grad_norm),
            "policy_entropy": self.mean_over_ranks(stats["entropy"], mine.num_decisions),
            "kl_to_prior": self.mean_over_ranks(stats["kl"], mine.num_decisions),
            "clipped_fraction": self.mean_over_ranks(stats["clipped"], mine.num_decisions),
        }

    # ---- what a data-parallel trainer overrides (see training.ddp) ----------------------------
    world = 1

    def own_rows(self, batch: TokenBatch) -> TokenBatch:
        """The rows whose loss this process computes: all of them."""
        return batch

    def loss(self, mine: TokenBatch, normalizer: int) -> tuple[torch.Tensor, dict]:
        return token_loss(self.policy, mine, normalizer, **self.loss_options())

    def loss_options(self) -> dict:
        cfg = self.config
        return {"entropy_coef": cfg.entropy_coef, "kl_coef": cfg.kl_coef, "clip": cfg.clip}

    def mean_over_ranks(self, local_mean: float, weight: int) -> float:
        return local_mean

    def validate(self) -> Validation:
        """Mean reward over ``val_samples`` rollouts of each validation problem (fixed seeds), for each
        of ``val_modes``: the better mode's per-problem scores, with every mode's mean."""
        cfg = self.config
        if not self.val_problems:
            return Validation(None)
        self.policy.eval()
        request = self._request(self.val_problems, cfg.val_samples, ("val",))
        scores = {}
        for mode in cfg.val_modes:
            chooser = TokenPolicyChooser(self.policy, deterministic=mode == "argmax")
            result = self.rollouts.run(request, chooser, progress=f"validate ({mode})" if self.progress else False)
            rewards = score_rows(self.task, self.val_problems, result)
            scores[mode] = rewards.view(len(self.val_problems), cfg.val_samples).mean(1)
        best = max(cfg.val_modes, key=lambda m: float(scores[m].mean()))  # ties: the first listed
        return Validation(scores[best], mode=best, by_mode={m: float(v.mean()) for m, v in scores.items()})

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
            task_options=task_record(self.task),
            training=asdict(self.config),
            lm_dtype=self.lm.fingerprint().get("dtype"),
            trained_on=problems_record(self.train_problems) if self.train_problems else None,
            policy_mode=self.policy_mode,
            stop_at_answer=self.config.stop_at_answer,
        )
        return save_adapter(self.out_dir, self.policy, config)
