"""Sequence-level adapter training: a budget-aware contextual bandit trained with REINFORCE
(paper Sec. "Sequence-Level: Contextual Bandits", Alg. "Sequence-Level Decoding Adapter").

Each step draws a batch of prompts and a parallel budget B per prompt (from ``parallel_budgets``),
samples one action a ~ pi(.|e, B) per prompt, gets the reward of B completions under a from a
``RewardSource``, and scores them with the inference metric under budget B: ``pass`` (pass@B:
any of the B is right, i.e. best-of-B with a verifier), ``majority`` (the most common extracted
answer is right), ``mean`` (fraction right), or ``mix`` (one of those drawn per prompt, the
paper's "mix of inference strategies").

Objective: E[r] + beta * H(pi(.|x)), optimised with the score-function gradient
``(r - b(B)) * grad log pi(a|x) + beta * grad H``. Departures from textbook REINFORCE:
- **Baseline.** b(B) is an exponential moving average of the reward *per budget B* (and per
  metric), since pass@8 rewards are systematically higher than pass@1; the first observation
  initialises it.
- **Offline replay** (``replay=outcomes.jsonl`` from ``select-actions``): rewards are simulated by
  drawing B stored samples of the (problem, action) cell instead of decoding. It is much faster but
  limited to the problems and actions in that table; logs mark such runs ``"offline_replay": true``.

The reward seam: ``LiveRewards`` (decode with a rollout engine, score with the task) and
``ReplayRewards`` (the table) are the two ``RewardSource``s; ``reward_source(config, ...)`` picks
one, and tests pass their own. The loss is ``training.reinforce.reinforce_loss``.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, Protocol, Sequence, runtime_checkable

import torch

from ..core.files import load_tensors, save_tensors
from ..decoding.actions import DEFAULT_TOKEN_BUDGET, ActionSet
from ..decoding.loop import row_seed
from ..decoding.protocol import STOP_AT_ANSWER, DecodingProtocol
from ..decoding.rollouts import RolloutRequest, Rollouts, answer_stops, encode_problems, score_rows
from ..policies.networks import (
    DEFAULT_POLICY_TEMPERATURE,
    AdapterConfig,
    SequencePolicy,
    SequencePolicyConfig,
    prior_distribution,
    save_adapter,
)
from ..selection.outcomes import OutcomeTable, check_replay_header
from ..selection.replay import ReplayEnvironment
from ..tasks import check_disjoint, problems_record, task_record
from .common import (
    TrainingLoop,
    Validation,
    action_histogram,
    check_shared_fields,
    load_split,
    prompt_groups,
    sample_prompt_batch,
    seed_everything,
    step_generator,
)
from .reinforce import clipped_loss, ema_update, group_advantages, reinforce_loss

log = logging.getLogger(__name__)

__all__ = [
    "SequenceTrainConfig",
    "SequenceTrainer",
    "RewardSource",
    "LiveRewards",
    "ReplayRewards",
    "reward_source",
    "inference_reward",
    "sequence_loss",
    "PromptEmbeddings",
]

METRICS = ("pass", "majority", "mean")

VALIDATED_MODE = "argmax"
"""The policy mode validation scores: the one a sequence adapter is evaluated and served in (it
stores none, so ``evaluate``, ``generate`` and ``serve`` use ``default_policy_mode("sequence")``),
so that keep-best compares the policies a user would get."""


@dataclass(frozen=True)
class SequenceTrainConfig:
    """Hyper-parameters of sequence-level training."""

    actions: str = "mix"
    """Action set: preset name or JSON file (e.g. select-actions' actions.json)."""
    parallel_budgets: tuple[int, ...] = (1, 2, 4, 8)
    """Parallel budgets B drawn uniformly per prompt."""
    use_budget: bool = True
    """x = [e ; g(B)] (w/ budget) or x = e (w/o budget)."""
    metric: Literal["pass", "majority", "mean", "mix"] = "pass"
    """Reward of the B completions: pass@B, majority vote, mean, or one of those per prompt (mix)."""
    token_budget: int = DEFAULT_TOKEN_BUDGET
    """b: max new tokens per completion."""
    stop_at_answer: bool = STOP_AT_ANSWER
    """Every rollout (and a replay table's samples, and the adapter's samples when served) ends at
    the task's first complete answer; recorded in adapter.json. False: to the token budget."""
    steps: int = 60
    """Optimiser steps."""
    prompts_per_step: int = 16
    """Prompts (bandit rounds) per step."""
    group_size: int = 1
    """G: actions drawn per prompt and budget in a step. 1: one action, advantage against a moving
    average per budget; G > 1: G independent draws, each advantage its reward minus the mean of the
    prompt's G (the prompt's difficulty drops out, as in the token trainer)."""
    lr: float = 3e-3
    """Adam learning rate (with ``ppo_epochs`` and ``prior_mass``, chosen on the planted benchmark:
    docs/token-defaults.md)."""
    ppo_epochs: int = 4
    """Optimiser steps per batch of bandit rounds: the first is REINFORCE, later ones use PPO's
    clipped ratio against the policy the actions were drawn from (see ``lr`` for the measurement)."""
    clip: float = 0.2
    """PPO clip range eps."""
    entropy_coef: float = 0.01
    """beta: weight of the policy-entropy bonus."""
    ema_decay: float = 0.9
    """Decay of the per-(metric, B) moving-average reward baseline."""
    policy_hidden: int = 256
    """Width of the policy's hidden layer."""
    policy_temperature: float = DEFAULT_POLICY_TEMPERATURE
    """Softmax temperature of the policy."""
    prior_action: int | None = None
    """Index of the best static action (chosen on validation by the caller, e.g. the set's Best):
    the policy starts at a prior with ``prior_mass`` on it (a fixed logit bias; the last layer
    starts at zero) and learns per-prompt deviations. None: no prior, the usual random start."""
    prior_mass: float = 0.5
    """Probability the prior puts on ``prior_action`` (the rest spread evenly over the others). 0.5:
    a bandit round tries one action per prompt, so the others need real probability to be tried."""
    budget_prior_actions: tuple[int, ...] | None = None
    """With ``use_budget``: the prior's action at each of ``parallel_budgets`` (same order), e.g. the
    best static action at pass@B for each B; it replaces ``prior_action`` (the best at pass@1 is
    rarely the best at pass@8)."""
    pooling: Literal["mean", "last"] = "mean"
    """Prompt-embedding pooling over the prompt's hidden states."""
    max_train_prompts: int | None = 256
    """Use at most this many training prompts (none: all)."""
    val_every: int = 10
    """Validate every this many steps (and after the last)."""
    val_problems: int = 400
    """Validation problems (held out of training); a validation split with fewer is logged as a
    warning. Each is scored once per (action, sample): a sampled action's pass@1 is one draw per
    problem, whose paired difference with greedy has a standard error of about 7 points on 48
    problems and under 3 on 400."""
    keep_best: bool = True
    """Validate at step 0 and keep the best validated weights, the start included, so the adapter
    never validates worse than the policy it started from."""
    min_improvement_se: float = 1.96
    """A later step is kept only when its paired gain over step 0 (per validation problem, the same
    rows) is above this many standard errors at every parallel budget where its choices change
    (1.96: the gain's 95% interval above 0); otherwise step 0 is kept."""
    checkpoint_every: int = 5
    """Write checkpoint.pt every this many steps (and after the last)."""
    cot_ratio: float = 0.0
    """Fraction of prompts given a chain-of-thought instruction (fixed per prompt)."""
    replay: str | None = None
    """OFFLINE REPLAY: a select-actions outcomes.jsonl whose stored samples stand in for rollouts."""
    seed: int = 0
    """Seed of the initial weights, the prompt batches, the actions drawn and the rollouts."""

    def __post_init__(self) -> None:
        if not self.parallel_budgets or min(self.parallel_budgets) < 1:
            raise ValueError("parallel_budgets must be positive integers")
        if self.metric not in METRICS + ("mix",):
            raise ValueError(f"metric must be one of {METRICS + ('mix',)}, got {self.metric!r}")
        if self.prompts_per_step < 1 or self.steps < 0 or self.val_every < 1 or self.checkpoint_every < 1:
            raise ValueError("prompts_per_step, val_every and checkpoint_every must be >= 1 and steps >= 0")
        if self.group_size < 1 or self.ppo_epochs < 1 or not 0 < self.clip < 1:
            raise ValueError("group_size and ppo_epochs must be >= 1 and clip in (0, 1)")
        if not 0 < self.prior_mass < 1 or self.min_improvement_se < 0:
            raise ValueError("prior_mass must be in (0, 1) and min_improvement_se >= 0")
        if self.budget_prior_actions is not None and len(self.budget_prior_actions) != len(self.parallel_budgets):
            raise ValueError(f"budget_prior_actions needs one action per parallel budget {self.parallel_budgets}, "
                             f"got {self.budget_prior_actions}")
        if self.replay and self.metric in ("majority", "mix"):
            raise ValueError("offline replay stores rewards, not answers: majority vote (and mix) need live rollouts")
        check_shared_fields(self)

    @property
    def protocol(self) -> DecodingProtocol:
        """The token budget and the stop at the first answer as one object (validated there)."""
        return DecodingProtocol(self.token_budget, self.stop_at_answer)


def inference_reward(rewards: Sequence[float], answers: Sequence[str] | None, metric: str) -> float:
    """The reward of B completions under an inference metric (see module docstring)."""
    if not rewards:
        raise ValueError("no completions to score")
    if metric == "pass":
        return float(max(rewards))
    if metric == "mean":
        return float(sum(rewards) / len(rewards))
    if metric == "majority":
        if answers is None:
            raise ValueError("majority vote needs the extracted answers")
        counts = Counter(a for a in answers if a)
        if not counts:
            return 0.0
        top = max(counts.values())
        # Ties between answers: the earliest completion among the tied answers wins (deterministic).
        winner = next(a for a in answers if a and counts[a] == top)
        return float(max(r for a, r in zip(answers, rewards) if a == winner))
    raise ValueError(f"unknown metric {metric!r}")


def sequence_loss(policy: SequencePolicy, embeddings, budgets, actions, advantages, entropy_coef: float,
                  old_logp: torch.Tensor | None = None, clip: float = 0.2):
    """(loss, probabilities ``[N, K]``, entropy ``[N]``): ``reinforce_loss`` averaged over the
    rows of a batch; with ``old_logp [N]`` (the log-prob each action was drawn with) PPO's clipped
    ratio instead (``reinforce.clipped_loss``)."""
    logp = policy.log_probs(embeddings, budgets)
    if old_logp is None:
        loss, entropy = reinforce_loss(logp, actions, advantages, entropy_coef)
    else:
        loss, stats = clipped_loss(logp, actions, advantages, old_logp=old_logp, clip=clip, entropy_coef=entropy_coef)
        entropy = stats["entropy"]
    return loss, logp.exp().detach(), entropy.detach()


# ---- reward sources: where the reward of B completions comes from -----------------------------


@runtime_checkable
class RewardSource(Protocol):
    """The reward of each prompt's B completions under its chosen action and metric."""

    action_set: ActionSet
    offline: bool
    """True when rewards are replayed from a table rather than decoded (logged as offline_replay)."""

    def scorable(self, problem_ids: Sequence[str]) -> list[str] | None:
        """The problems it can score (None: any problem)."""

    def rewards(self, problems, prompts, actions: list[int], budgets: list[int], metrics: list[str],
                key: tuple, progress: bool | str = False) -> torch.Tensor:
        """``[P]`` rewards; ``key`` names the draw (step or validation) for the seeds. ``progress``: a
        bar label (the rollout engine's) where the source decodes, ignored where it replays."""


class LiveRewards:
    """Decode B completions per prompt with a rollout engine and score them with the task.

    Row j of a prompt is seeded by (draw key, problem, j) alone, so under one action the B = 2
    completions are the first two of the B = 8 ones: each (problem, action) of a call is decoded
    once, at its largest B, and a greedy action once in all (its rows are all alike). Rows are
    remembered by (key, problem, action, j), so a draw repeated with the same key (validation) only
    decodes the (problem, action) pairs it has not seen."""

    offline = False

    def __init__(self, rollouts: Rollouts, task, token_budget: int, seed: int, stop_at_answer: bool = STOP_AT_ANSWER):
        self.rollouts, self.task, self.token_budget, self.seed = rollouts, task, token_budget, seed
        self.stop_at_answer = stop_at_answer
        self.action_set = rollouts.action_set
        self.rows: dict[tuple, list[tuple[float, str]]] = {}
        """(key, problem id, action) -> [(reward, text)] of rows 0, 1, ... decoded so far."""

    def scorable(self, problem_ids):
        return None

    def rewards(self, problems, prompts, actions, budgets, metrics, key, progress=False):
        prompt_of: dict[tuple, int] = {}  # (key, problem id, action) -> its first prompt index
        needed: dict[tuple, int] = {}  # -> rows it needs
        for i, (problem, a, b) in enumerate(zip(problems, actions, budgets)):
            cell = (key, problem.id, a)
            prompt_of.setdefault(cell, i)
            needed[cell] = max(needed.get(cell, 0), 1 if self.action_set.actions[a].is_greedy else b)
        todo = [(cell, prompt_of[cell], j) for cell, n in needed.items()
                for j in range(len(self.rows.get(cell, ())), n)]
        if todo:
            request = RolloutRequest(
                prompts=prompts, prompt_of_row=[i for _, i, _ in todo],
                row_seeds=[row_seed(self.seed, *key, problems[i].id, j) for _, i, j in todo],
                token_budget=self.token_budget, row_actions=[cell[2] for cell, _, _ in todo],
                stop_checks=answer_stops(self.task, problems, [i for _, i, _ in todo], self.stop_at_answer),
            )
            result = self.rollouts.run(request, progress=progress)
            for (cell, _, _), reward, text in zip(todo, score_rows(self.task, problems, result).tolist(),
                                                  result.texts):
                self.rows.setdefault(cell, []).append((reward, text))
        out = []
        for problem, a, b, metric in zip(problems, actions, budgets, metrics):
            rows = self.rows[(key, problem.id, a)]
            rows = rows[:b] if len(rows) >= b else rows * b  # a greedy row stands for all B
            answers = [self.task.extract_answer(problem, t) for _, t in rows] if metric == "majority" else None
            out.append(inference_reward([r for r, _ in rows], answers, metric))
        return torch.tensor(out)


class ReplayRewards:
    """Offline replay: draw B stored samples of each (problem, action) cell of an outcome table."""

    offline = True

    def __init__(self, table: OutcomeTable, action_set: ActionSet, seed: int):
        self.env, self.action_set, self.seed = ReplayEnvironment(table), action_set, seed

    def scorable(self, problem_ids):
        stored = set(self.env.problem_ids)
        return [i for i in problem_ids if i in stored]

    def rewards(self, problems, prompts, actions, budgets, metrics, key, progress=False):
        gen = step_generator(self.seed, "replay", *key)
        names = self.action_set.names
        return torch.tensor([
            inference_reward(self.env.sample_rewards(p.id, names[a], b, gen).tolist(), None, m)
            for p, a, b, m in zip(problems, actions, budgets, metrics)
        ])


def reward_source(
    config: SequenceTrainConfig, task, action_set: ActionSet, rollouts: Rollouts | None = None, lm=None
) -> RewardSource:
    """Replay from ``config.replay`` when set, else live rollouts (which ``rollouts`` must then be).
    A replay table decoded under other settings than ``config`` (and ``lm``, when given) is refused
    (``selection.check_replay_header``)."""
    if config.replay:
        if not Path(config.replay).is_file():
            raise FileNotFoundError(f"replay table {config.replay} not found (select-actions writes outcomes.jsonl)")
        table = OutcomeTable.load(config.replay)
        check_replay_header(table, task=task, lm=lm, token_budget=config.token_budget, seed=config.seed,
                            cot_ratio=config.cot_ratio, stop_at_answer=config.stop_at_answer)
        return ReplayRewards(table, action_set, config.seed)
    if rollouts is None:
        raise ValueError("live sequence-level training needs a rollout engine (or replay=outcomes.jsonl)")
    return LiveRewards(rollouts, task, config.token_budget, config.seed, config.stop_at_answer)


class PromptEmbeddings:
    """Prompt embeddings computed once per prompt and cached (in memory and on disk)."""

    def __init__(self, lm, pooling: str, cache_path: Path | None = None):
        self.lm, self.pooling, self.cache_path = lm, pooling, cache_path
        self.table: dict[str, torch.Tensor] = {}
        if cache_path is not None and cache_path.is_file():
            try:  # tensors and plain data only, checksum checked: a changed cache is recomputed, never run
                saved = load_tensors(cache_path)
            except ValueError as err:
                log.warning("ignoring the prompt-embedding cache: %s", err)
                saved = None
            if (isinstance(saved, dict) and saved.get("fingerprint") == lm.fingerprint()
                    and saved.get("pooling") == pooling and isinstance(saved.get("table"), dict)):
                self.table = saved["table"]

    def get(self, keys: Sequence[str], prompts: Sequence[list[int]]) -> torch.Tensor:
        missing = [i for i, k in enumerate(keys) if k not in self.table]
        if missing:
            fresh = self.lm.prompt_embeddings([prompts[i] for i in missing], pooling=self.pooling)
            for i, e in zip(missing, fresh):
                self.table[keys[i]] = e
            if self.cache_path is not None:
                saved = {"fingerprint": self.lm.fingerprint(), "pooling": self.pooling, "table": self.table}
                save_tensors(self.cache_path, saved)
        return torch.stack([self.table[k] for k in keys])


class SequenceTrainer(TrainingLoop):
    """Trains a ``SequencePolicy`` against a reward source (live rollouts or replay); resumable
    from ``out_dir``."""

    name = "train-sequence"

    def __init__(
        self,
        config: SequenceTrainConfig,
        lm,
        task,
        rewards: RewardSource,
        out_dir: str | Path,
        *,
        task_name: str = "",
        progress: bool = True,
    ):
        self.config, self.lm, self.task, self.rewards = config, lm, task, rewards
        self.action_set = rewards.action_set
        self._init_loop(out_dir, progress)
        self.task_name = task_name or getattr(task, "name", "")
        with torch.random.fork_rng():  # same seed, same initial weights, whatever ran before
            seed_everything(config.seed, "init")
            self.policy = self._build_policy()
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=config.lr)
        self.embeddings = PromptEmbeddings(lm, config.pooling, self.out_dir / "embeddings.pt")
        self.baselines: dict[str, float] = {}
        self._prepare()

    def _build_policy(self) -> SequencePolicy:
        """The policy over prompt embeddings (the draft trainer overrides the context)."""
        cfg = self.config
        return SequencePolicy(
            SequencePolicyConfig(
                embed_dim=self.lm.hidden_size,
                num_actions=len(self.action_set),
                use_budget=cfg.use_budget,
                hidden=cfg.policy_hidden,
                temperature=cfg.policy_temperature,
                max_budget=max(max(cfg.parallel_budgets), 2),
                prior=prior_distribution(len(self.action_set), cfg.prior_action, cfg.prior_mass),
                budget_priors=self._budget_priors(len(self.action_set)),
            )
        )

    def _budget_priors(self, outputs: int) -> tuple[tuple[int, tuple[float, ...]], ...] | None:
        cfg = self.config
        if not cfg.use_budget or cfg.budget_prior_actions is None:
            return None
        return tuple((b, prior_distribution(outputs, a, cfg.prior_mass))
                     for b, a in zip(cfg.parallel_budgets, cfg.budget_prior_actions))

    def _prepare(self) -> None:
        cfg = self.config
        if hasattr(self.task, "splits"):  # train, validation and test share no problem (by content)
            check_disjoint(self.task)
        self.val_problems = load_split(self.task, "validation")[: cfg.val_problems]
        if len(self.val_problems) < cfg.val_problems:
            log.warning("validation has %d problems, fewer than the %d asked for", len(self.val_problems),
                        cfg.val_problems)
        val_ids = {p.id for p in self.val_problems}
        self.train_problems = [p for p in self.task.load("train") if p.id not in val_ids][: cfg.max_train_prompts]
        candidates = self.task.load("train") + self.val_problems
        scorable = self.rewards.scorable([p.id for p in candidates])
        if scorable is not None:  # offline replay can only score problems the table holds
            # The table usually holds validation problems only: replay then trains and validates on
            # them (in-sample validation, logged as such).
            stored = set(scorable)
            self.train_problems = [p for p in candidates if p.id in stored]
            self.val_problems = [p for p in self.val_problems if p.id in stored]
            if not self.train_problems:
                raise ValueError("the replay table holds none of this task's problems")

    # ---- pieces --------------------------------------------------------------------------------
    def _encode(self, problems) -> tuple[list[list[int]], torch.Tensor, list[bool]]:
        prompts, cot = encode_problems(self.lm, self.task, problems, self.config.cot_ratio, self.config.seed)
        keys = [f"{p.id}|cot={c}" for p, c in zip(problems, cot)]
        return prompts, self.embeddings.get(keys, prompts), cot

    def _advantages(self, rewards: torch.Tensor, budgets: list[int], metrics: list[str]) -> torch.Tensor:
        """r - b(metric, B), the baseline a moving average per metric and budget."""
        advantages = torch.empty_like(rewards)
        for i, (r, b, m) in enumerate(zip(rewards.tolist(), budgets, metrics)):
            key = f"{m}@{b}"
            advantages[i] = r - self.baselines.get(key, r)
            _, self.baselines[key] = ema_update(self.baselines.get(key), r, self.config.ema_decay)
        return advantages

    def train_step(self) -> dict:
        """One REINFORCE step: prompts and budgets -> actions -> rewards -> advantages -> loss -> step."""
        cfg = self.config
        gen = step_generator(cfg.seed, "step", self.step)
        # the step's bandit rounds: prompts, a parallel budget B (and a metric) for each
        problems = [
            self.train_problems[i]
            for i in sample_prompt_batch(
                len(self.train_problems), cfg.prompts_per_step, gen, **prompt_groups(self.task, self.train_problems)
            )
        ]
        prompts, emb, cot = self._encode(problems)
        choices = cfg.parallel_budgets
        budgets = [choices[i] for i in torch.randint(len(choices), (len(problems),), generator=gen).tolist()]
        metrics = (
            [METRICS[i] for i in torch.randint(len(METRICS), (len(problems),), generator=gen).tolist()]
            if cfg.metric == "mix"
            else [cfg.metric] * len(problems)
        )
        # rollout: G actions a ~ pi(. | e, B) per prompt (prompt-major rows), B completions under each
        g = cfg.group_size
        self.policy.train()
        with torch.no_grad():
            probs = self.policy.probs(emb, torch.tensor(budgets))
        actions = torch.multinomial(probs, g, replacement=True, generator=gen).reshape(-1)
        problems = [p for p in problems for _ in range(g)]  # prompts stay one per prompt: draw j's rows align
        emb = emb.repeat_interleave(g, 0)
        budgets, metrics = [b for b in budgets for _ in range(g)], [m for m in metrics for _ in range(g)]
        budget_t = torch.tensor(budgets)
        # reward, advantage
        rewards = self._rewards(problems, prompts, actions, budgets, metrics, g)
        advantages = group_advantages(rewards, g) if g > 1 else self._advantages(rewards, budgets, metrics)
        # loss, step (ppo_epochs > 1: the same rows again, PPO-clipped against the drawing policy)
        old_logp = probs.repeat_interleave(g, 0).gather(1, actions.unsqueeze(1)).squeeze(1).log()
        for epoch in range(cfg.ppo_epochs):
            self.optimizer.zero_grad(set_to_none=True)
            loss, step_probs, step_entropy = sequence_loss(
                self.policy, emb, budget_t, actions, advantages, cfg.entropy_coef,
                old_logp=old_logp if cfg.ppo_epochs > 1 else None, clip=cfg.clip,
            )
            if epoch == 0:
                probs, entropy = step_probs, step_entropy  # logged: the policy the rows were drawn from
            loss.backward()
            self.optimizer.step()
        record = {
            "reward": float(rewards.mean()),
            "entropy": float(entropy.mean()),
            "loss": float(loss.detach()),
            "action_probs": probs.mean(0).tolist(),
            "action_freq": action_histogram(actions, len(self.action_set)),
            "reward_by_budget": {str(b): float(rewards[budget_t == b].mean()) for b in sorted(set(budgets))},
            "offline_replay": self.rewards.offline,
        }
        if cfg.cot_ratio > 0:
            cot_t = torch.tensor(cot).repeat_interleave(g)
            for name, sel in (("action_probs_cot", cot_t), ("action_probs_nocot", ~cot_t)):
                record[name] = probs[sel].mean(0).tolist() if bool(sel.any()) else None
        return record

    def _rewards(self, problems, prompts, actions, budgets, metrics, g: int) -> torch.Tensor:
        """Rewards of the step's rows (prompt-major, G per prompt); draw j of a prompt is keyed
        ``("train", step, j)`` (just ``("train", step)`` for j = 0), so its completions differ from
        the other draws' even under the same action."""
        if g == 1:
            return self.rewards.rewards(problems, prompts, actions.tolist(), budgets, metrics, ("train", self.step))
        out = torch.empty(len(problems))
        for j in range(g):
            rows = list(range(j, len(problems), g))
            key = ("train", self.step) if j == 0 else ("train", self.step, j)
            out[rows] = self.rewards.rewards([problems[r] for r in rows], prompts, [int(actions[r]) for r in rows],
                                             [budgets[r] for r in rows], [metrics[r] for r in rows], key).float()
        return out

    def validate(self) -> Validation:
        """Reward of every validation problem at every parallel budget under the policy in the mode
        the adapter is evaluated and served in (``VALIDATED_MODE``: its argmax), ``[len(budgets) *
        P]`` scores, budget-major, the same rows at every validation. With ``use_budget`` the scores
        are grouped by budget: a policy that sees B serves each B by itself, so keep-best takes a new
        policy only if it gains at every budget where it changes (a gain at B = 8 cannot pay for a
        loss at B = 1)."""
        if not self.val_problems:
            return Validation(None)
        prompts, emb, _ = self._encode(self.val_problems)
        choices = self.config.parallel_budgets
        budgets = [b for b in choices for _ in self.val_problems]
        self.policy.eval()
        actions, _ = self.policy.choose(emb.repeat(len(choices), 1), torch.tensor(budgets))  # argmax
        metric = "pass" if self.config.metric == "mix" else self.config.metric
        repeat = len(choices)
        rewards = self.rewards.rewards(
            self.val_problems * repeat, None if prompts is None else prompts * repeat, actions.tolist(), budgets,
            [metric] * len(budgets), ("val",), progress="validate" if self.progress else False,
        )
        groups = torch.tensor(budgets) if self.config.use_budget else None
        problems = torch.arange(len(self.val_problems)).repeat(repeat)  # [len(budgets) * P], budget-major
        return Validation(rewards.double(), mode=VALIDATED_MODE, groups=groups, problems=problems)

    # ---- loop hooks (see TrainingLoop) --------------------------------------------------------
    def state(self) -> dict:
        return {
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "baselines": self.baselines,
        }

    def restore(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.baselines = state["baselines"]

    def save(self) -> Path:
        config = AdapterConfig(
            kind="sequence",
            policy=asdict(self.policy.config),
            actions=self.action_set.to_json(),
            base_model=self.lm.spec.name_or_path,
            base_fingerprint=self.lm.fingerprint(),
            embedding={"pooling": self.config.pooling},
            parallel_budgets=list(self.config.parallel_budgets),
            token_budget=self.config.token_budget,  # its rewards were decoded at this budget
            task=self.task_name,
            task_options=task_record(self.task),
            training=asdict(self.config),
            lm_dtype=self.lm.fingerprint().get("dtype"),
            trained_on=problems_record(self.train_problems) if self.train_problems else None,
            selected_on=selection_record(self.config.actions),
            stop_at_answer=self.config.stop_at_answer,
        )
        return save_adapter(self.out_dir, self.policy, config)


def selection_record(actions) -> dict | None:
    """``problems_record`` of the problems an action set was selected on: ``selection_data.selected_on``
    of a ``select-actions`` actions.json; None for a preset or a file that does not record it."""
    path = Path(actions) if isinstance(actions, (str, Path)) else None
    if path is None or path.suffix != ".json" or not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    record = (data.get("selection_data") or {}).get("selected_on") if isinstance(data, dict) else None
    return record if isinstance(record, dict) else None
