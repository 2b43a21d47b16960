"""Pieces both REINFORCE trainers share: the resumable training loop (checkpoints and the JSONL
log come from ``core.files``), seeding, prompt batches and the validation split."""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..core.files import Checkpoint, JsonlLog
from ..decoding.actions import GREEDY, ActionSet
from ..decoding.loop import decode, row_seed
from ..decoding.rollouts import encode_problems
from ..lm.models import FrozenLM

log = logging.getLogger(__name__)

__all__ = [
    "TrainingLoop",
    "EarlyStopping",
    "Validation",
    "paired_se",
    "step_generator",
    "seed_everything",
    "sample_prompt_batch",
    "epoch_prompt_batch",
    "group_quotas",
    "prompt_groups",
    "config_from_dict",
    "action_histogram",
    "load_split",
    "RESUME_EXTENDS",
    "RESUME_HARMLESS",
    "check_resume",
    "check_shared_fields",
    "NothingSolvedError",
    "Preflight",
    "preflight_check",
    "PREFLIGHT_PROBLEMS",
]

PREFLIGHT_PROBLEMS = 8
"""Training problems the pre-flight check decodes greedily (the start policy's prior action)."""


class NothingSolvedError(ValueError):
    """The pre-flight check found no solved row: training would learn from rewards that are all 0."""


@dataclass(frozen=True)
class Preflight:
    """What the pre-flight check saw before step 1: the share of rows solved and cut by the budget."""

    rows: int
    """Rows scored (decoded problems, or a table's drafts and re-decodes)."""
    solved: float
    """Share of rows with reward >= 0.5."""
    truncated: float
    """Share of rows the token budget cut (no EOS, no complete answer)."""
    source: str
    """What was scored, for the message (e.g. "greedy on the first 8 training problems")."""

    def record(self) -> dict:
        return {"preflight": {"rows": self.rows, "solved": round(self.solved, 4),
                              "truncated": round(self.truncated, 4), "source": self.source}}


def preflight_check(rewards: Sequence[float], truncated: Sequence[bool], source: str, *, force: bool,
                    token_budget: int | None = None) -> Preflight | None:
    """The one pre-flight check every trainer runs before step 1: logs the share solved and the
    share truncated; when nothing is solved it raises :class:`NothingSolvedError` (every reward
    would be 0: the policy learns nothing, and the adapter written says nothing of it), or only
    warns with ``force``. None when there is nothing to check (no rows)."""
    if not rewards:
        return None
    solved = sum(float(r) >= 0.5 for r in rewards) / len(rewards)
    cut = sum(bool(t) for t in truncated) / max(len(truncated), 1)
    result = Preflight(len(rewards), solved, cut, source)
    log.info("pre-flight: %s: %.0f%% solved, %.0f%% cut by the token budget (%d rows)", source, 100 * solved,
             100 * cut, len(rewards))
    if solved > 0:
        return result
    budget = f" of {token_budget} tokens" if token_budget else ""
    why = (f"{cut:.0%} of the rows were cut by the token budget{budget}: raise --token-budget, or ask for a short "
           "answer (--instruction)" if cut >= 0.5 else
           "the rows end before the budget, so the verifier does not read their answers: check --verifier, "
           "--answer-field and the instruction (--instruction), or use a stronger model")
    message = f"pre-flight: nothing was solved ({source}, {len(rewards)} rows): {why}"
    if not force:
        raise NothingSolvedError(f"{message}; pass --force to train anyway")
    log.warning("%s; training anyway (--force)", message)
    return result


def greedy_preflight_rows(lm, task, problems: Sequence, token_budget: int, seed: int) -> tuple[list, list]:
    """Rewards and budget cuts of greedy (the usual start policy's prior action) on ``problems``."""
    prompts, _ = encode_problems(lm, task, problems, seed=seed)
    result = decode(lm, prompts, ActionSet([GREEDY], device=lm.device), row_actions=0, token_budget=token_budget)
    ended = result.stopped_at_eos
    if result.stopped_by_check is not None:
        ended = ended | result.stopped_by_check
    return task.reward_batch(problems, result.texts), (~ended).tolist()


def step_generator(seed: int, *keys) -> torch.Generator:
    """A generator for one training step, so a resumed run redraws exactly what it would have."""
    return torch.Generator().manual_seed(row_seed(seed, *keys))


def seed_everything(seed: int, *keys) -> None:
    """Seed the global RNGs (dropout) from ``(seed, *keys)``."""
    s = row_seed(seed, *keys)
    torch.manual_seed(s)
    random.seed(s)


def sample_prompt_batch(
    num_prompts: int,
    batch: int,
    generator: torch.Generator,
    groups: Sequence[str] | None = None,
    weights: Mapping[str, float] | None = None,
) -> list[int]:
    """``batch`` distinct prompt indices (all of them when there are fewer).

    With ``groups`` (a label per prompt, e.g. its domain in a task mix), every step is balanced:
    each group gets its share of ``batch`` by ``weights`` (equal when None; :func:`group_quotas`),
    drawn without replacement within the group; indices come group by group."""
    if groups is None:
        return torch.randperm(num_prompts, generator=generator)[: min(batch, num_prompts)].tolist()
    if len(groups) != num_prompts:
        raise ValueError(f"got {len(groups)} group labels for {num_prompts} prompts")
    members: dict[str, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    quotas = group_quotas({g: len(m) for g, m in members.items()}, batch, weights)
    picked: list[int] = []
    for g, m in members.items():
        picked += [m[j] for j in torch.randperm(len(m), generator=generator)[: quotas[g]].tolist()]
    return picked


def epoch_prompt_batch(num_prompts: int, batch: int, seed: int, step: int) -> list[int]:
    """``batch`` distinct prompt indices for (0-based) step ``step``, walking through the prompts
    epoch by epoch (each epoch a fresh permutation seeded by ``(seed, epoch)``), so that ``steps``
    steps see ``min(num_prompts, steps * batch)`` distinct prompts; independent draws per step see
    far fewer (384 draws from 300 prompts reach about 220). A batch that straddles two epochs skips
    the next epoch's prompts already in it. Depends only on its arguments: a resumed run redraws it."""
    if batch >= num_prompts:
        return torch.randperm(num_prompts, generator=step_generator(seed, "epoch-all", step)).tolist()
    orders: dict[int, list[int]] = {}
    picked: list[int] = []
    position = step * batch
    while len(picked) < batch:
        epoch, offset = divmod(position, num_prompts)
        if epoch not in orders:
            orders[epoch] = torch.randperm(num_prompts, generator=step_generator(seed, "epoch", epoch)).tolist()
        index = orders[epoch][offset]
        if index not in picked:
            picked.append(index)
        position += 1
    return picked


def group_quotas(sizes: Mapping[str, int], batch: int, weights: Mapping[str, float] | None = None) -> dict[str, int]:
    """Prompts per group in a batch of ``batch``: proportional to ``weights`` (largest remainder,
    ties to the earlier group), never more than a group holds; what a full group cannot take goes
    to the others by the same rule. Sums to ``min(batch, sum(sizes))``."""
    weights = {g: float((weights or {}).get(g, 1.0)) for g in sizes}
    quotas, left = dict.fromkeys(sizes, 0), min(batch, sum(sizes.values()))
    while left > 0:
        open_groups = [g for g in sizes if quotas[g] < sizes[g] and weights[g] > 0]
        if not open_groups:
            break
        total = sum(weights[g] for g in open_groups)
        exact = {g: left * weights[g] / total for g in open_groups}
        share = {g: min(int(exact[g]), sizes[g] - quotas[g]) for g in open_groups}
        rest = left - sum(share.values())
        for g in sorted(open_groups, key=lambda g: -(exact[g] - int(exact[g]))):  # stable: ties in order
            if rest > 0 and quotas[g] + share[g] < sizes[g]:
                share[g], rest = share[g] + 1, rest - 1
        for g in open_groups:
            quotas[g] += share[g]
        given = sum(share.values())
        if given == 0:
            break
        left -= given
    return quotas


def prompt_groups(task, problems: Sequence) -> dict:
    """``sample_prompt_batch``'s grouping for ``task``'s ``problems``: a task mix balances its
    domains in every step (``MixTask.prompt_groups``); other tasks: none (``{}``)."""
    grouping = getattr(task, "prompt_groups", None)
    return grouping(problems) if callable(grouping) else {}


def config_from_dict(cls, data: dict):
    """Rebuild a config dataclass from JSON (or a checkpoint); lists become tuples. A field ``cls``
    does not have is a ValueError naming it."""
    unknown = sorted(set(data) - {f.name for f in fields(cls)})
    if unknown:
        raise ValueError(f"{cls.__name__} has no field(s) {unknown}")
    return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in data.items()})


RESUME_EXTENDS = frozenset({"steps"})
"""Config fields a resumed run may raise: the run goes on further, what it did stays valid."""
RESUME_HARMLESS = frozenset({"val_every", "checkpoint_every"})
"""Config fields a resumed run may change freely: they change when the run validates or writes a
checkpoint, never the weights it trains. Every other field (lr, token budget, actions, seed, ...)
alters the run: a resumed run that changed one would be neither the old run nor a new one."""


def check_resume(saved: dict, config, step: int, where: str | Path = "the checkpoint") -> list[str]:
    """Compare a checkpoint's config (``saved``, as stored) with the config of the run asked to
    resume it, field by field. Raises a one-line ValueError naming every field that would alter
    the run (and ``steps`` below the ``step`` already done); returns descriptions of the allowed
    changes (``"steps 4 -> 8"``), for the caller to report."""
    try:
        before = config_from_dict(type(config), saved)
    except ValueError as err:
        message = f"cannot resume {where}: its config does not fit this trainer ({err}); start a new run"
        raise ValueError(message) from None
    refused, allowed = [], []
    for f in fields(config):
        old, new = getattr(before, f.name), getattr(config, f.name)
        if old == new:
            continue
        change = f"{f.name} {old!r} -> {new!r}"
        if f.name in RESUME_HARMLESS or (f.name in RESUME_EXTENDS and new >= old):
            allowed.append(change)
        else:
            refused.append(change)
    if getattr(config, "steps", step) < step:
        refused.append(f"steps {config.steps} < the {step} steps already done")
    if refused:
        note = f" (allowed: {', '.join(allowed)})" if allowed else ""
        raise ValueError(
            f"cannot resume {where}: {'; '.join(refused)} would change the run{note}. Resume with the options it "
            f"was started with (only {', '.join(sorted(RESUME_EXTENDS))} may grow and "
            f"{', '.join(sorted(RESUME_HARMLESS))} may change), or start a new --out"
        )
    return allowed


def check_shared_fields(config) -> None:
    """Value checks on the fields both trainer configs share (called from their ``__post_init__``,
    so every entry point gets them): values that would otherwise be accepted silently and fail,
    or do nothing, much later."""
    if config.token_budget < 1:
        raise ValueError(f"token_budget must be >= 1, got {config.token_budget}")
    if not (math.isfinite(config.lr) and config.lr > 0):
        raise ValueError(f"lr must be a finite number > 0, got {config.lr}")
    if not (math.isfinite(config.entropy_coef) and config.entropy_coef >= 0):
        raise ValueError(f"entropy_coef must be a finite number >= 0, got {config.entropy_coef}")
    if not 0 <= config.ema_decay < 1:
        raise ValueError(f"ema_decay must be in [0, 1), got {config.ema_decay}")
    if not (math.isfinite(config.policy_temperature) and config.policy_temperature > 0):
        raise ValueError(f"policy_temperature must be a finite number > 0, got {config.policy_temperature}")
    if config.max_train_prompts is not None and config.max_train_prompts < 1:  # 0 would mean "all" nowhere
        raise ValueError(f"max_train_prompts must be >= 1 or None (all), got {config.max_train_prompts}")
    if config.val_problems < 1:
        raise ValueError(f"val_problems must be >= 1, got {config.val_problems}")
    if not 0 <= config.cot_ratio <= 1:
        raise ValueError(f"cot_ratio must be in [0, 1], got {config.cot_ratio}")


def action_histogram(actions: torch.Tensor, num_actions: int) -> list[float]:
    """Fraction of each action among ``actions`` (any shape, -1 entries ignored)."""
    valid = actions[actions >= 0]
    if valid.numel() == 0:
        return [0.0] * num_actions
    return (torch.bincount(valid, minlength=num_actions).float() / valid.numel()).tolist()


def load_split(task, split: str) -> list:
    """``task.load(split)``; a task without a validation split lends the last 10% of its train
    split (the trainers then leave those problems out of training)."""
    try:
        return task.load(split)
    except ValueError:
        if split != "validation":
            raise
        train = task.load("train")
        return train[len(train) - max(1, len(train) // 10):]


@dataclass
class Validation:
    """One validation: the mean reward of each validation problem (over its samples) under the
    policy mode that validated better, and the mean of every mode tried."""

    scores: torch.Tensor | None
    """``[P]`` mean reward per validation problem; None when there is nothing to validate on."""
    mode: str | None = None
    """The policy mode these scores are of (None: the trainer has one mode)."""
    by_mode: dict[str, float] = field(default_factory=dict)
    groups: torch.Tensor | None = None
    """``[P]`` a label per score (e.g. the parallel budget it was scored at): keep-best then takes a
    new policy only if it gains in every group where it changed (see ``significantly_above``)."""
    problems: torch.Tensor | None = None
    """``[P]`` the validation problem of each score, where a problem has several (one per parallel
    budget): its rows are not independent, so a paired standard error counts each problem once
    (the mean of its rows' gains). None: one score per problem."""

    @classmethod
    def of(cls, value) -> "Validation":
        """A trainer's ``validate()`` result as a Validation (a bare float: one score, no spread)."""
        if isinstance(value, Validation):
            return value
        return cls(None if value != value else torch.tensor([float(value)], dtype=torch.float64))  # value != value: NaN

    @property
    def mean(self) -> float:
        return float("nan") if self.scores is None else float(self.scores.double().mean())

    @property
    def se(self) -> float:
        """Standard error of the mean over problems (NaN with fewer than two)."""
        if self.scores is None or len(self.scores) < 2:
            return float("nan")
        return float(self.scores.float().std() / math.sqrt(len(self.scores)))

    def group_means(self) -> dict[int, float]:
        """Mean score per group label (empty without groups)."""
        if self.scores is None or self.groups is None:
            return {}
        return {int(g): float(self.scores[self.groups == g].double().mean()) for g in self.groups.unique()}

    def significantly_above(self, start: "Validation", z: float, min_gain: float = 0.0) -> bool:
        """True when these scores beat ``start``'s on the same rows: the paired gain (per row, this
        score minus the start's) has a mean above ``min_gain`` and above ``z`` standard errors of
        that mean. With groups (e.g. the parallel budget a row was scored at: the adapter serves
        each budget by itself), each group is its own decision: a group where no row changed is
        neutral, every other group must show such a gain by itself, and at least one must change.
        Scores not on the same rows (other length or groups) never count as above."""
        if self.scores is None or start.scores is None or self.scores.shape != start.scores.shape:
            return False
        diff = self.scores.double() - start.scores.double()  # [N] paired gain per row
        if self.groups is None and start.groups is None:
            return _gain_is_significant(_per_problem(diff, self.problems), z, min_gain)
        if self.groups is None or start.groups is None or not torch.equal(self.groups, start.groups):
            return False
        per_group = [(diff[rows], None if self.problems is None else self.problems[rows])
                     for rows in (self.groups == g for g in self.groups.unique())]
        changed = [(d, units) for d, units in per_group if bool(d.ne(0).any())]
        return bool(changed) and all(_gain_is_significant(_per_problem(d, units), z, min_gain) for d, units in changed)

    def gain_over(self, start: "Validation") -> tuple[float, float]:
        """(mean paired gain over ``start`` on the same rows, its standard error with each problem
        counted once); NaNs when the rows do not pair."""
        if self.scores is None or start.scores is None or self.scores.shape != start.scores.shape:
            return float("nan"), float("nan")
        diff = self.scores.double() - start.scores.double()
        units = _per_problem(diff, self.problems)
        return float(diff.mean()), float(units.std() / math.sqrt(len(units))) if len(units) >= 2 else 0.0

    def loses_a_group_to(self, best: "Validation | None") -> bool:
        """True when some group's mean is below ``best``'s mean for that group."""
        if best is None or best.groups is None or self.groups is None or not torch.equal(self.groups, best.groups):
            return False
        theirs = best.group_means()
        return any(mean < theirs[g] - 1e-12 for g, mean in self.group_means().items())

    def record(self) -> dict:
        out = {"val_reward": self.mean, "val_se": self.se}
        if self.groups is not None:
            out["val_by_group"] = {str(g): m for g, m in self.group_means().items()}
        if self.mode is not None:
            out["val_mode"] = self.mode
        if self.by_mode:
            out["val_by_mode"] = self.by_mode
        return out


def _per_problem(diff: torch.Tensor, problems: torch.Tensor | None) -> torch.Tensor:
    """``diff [N]`` averaged over the rows of each problem (``problems [N]``; None: as it is)."""
    if problems is None:
        return diff
    _, inverse = problems.unique(return_inverse=True)
    count = torch.bincount(inverse).to(diff.dtype)
    return torch.zeros(len(count), dtype=diff.dtype).index_add_(0, inverse, diff) / count


def _gain_is_significant(diff: torch.Tensor, z: float, min_gain: float) -> bool:
    """mean(diff) > max(min_gain, z * its standard error) (no spread with fewer than two rows)."""
    mean = float(diff.mean())
    se = float(diff.std() / math.sqrt(len(diff))) if len(diff) >= 2 else 0.0
    return mean > max(min_gain, z * se)


def paired_se(a: torch.Tensor | None, b: torch.Tensor | None) -> float:
    """Standard error of mean(a - b) over paired per-problem scores (0 when not paired)."""
    if a is None or b is None or len(a) != len(b) or len(a) < 2:
        return 0.0
    return float((a.float() - b.float()).std() / math.sqrt(len(a)))


class TrainingLoop:
    """The loop both trainers share: resume or start, one ``train_step`` per step, validation every
    ``val_every`` steps, a JSONL record per step, an atomic checkpoint every ``checkpoint_every``
    steps and at the end, then ``save`` (the adapter). Subclasses set ``config`` (with ``steps``,
    ``val_every``, ``checkpoint_every``, ``seed``), ``out_dir``, ``progress`` and ``step``, and
    implement ``start`` / ``train_step`` / ``validate`` / ``state`` / ``restore`` / ``save``.

    Early stopping (a config with ``patience > 0``, e.g. ``TokenTrainConfig``): after each
    validation the loop keeps the best validation reward and a copy of ``self.policy``'s weights at
    that point; when ``patience`` validations in a row have not beaten the best by more than
    ``min_improvement``, training stops, the best weights are put back and saved. The stop and the
    best step are logged (``early_stop`` record) and kept in the checkpoint, so a resumed run that
    had stopped stays stopped.

    Keep-best (a config with ``keep_best``): the loop also validates at step 0, before any update,
    and the adapter saved is the best validated policy *including the start*. A later step is kept
    only when its paired gain over step 0 (the same validation rows: problems, seeds, budgets) is
    above ``min_improvement`` and above ``min_improvement_se`` standard errors, in every group it
    changes (``Validation.significantly_above``), and its mean is the highest so far; otherwise step
    0 is kept. ``validate`` scores each policy in the mode the adapter is used in; a trainer that
    validates several policy modes (``Validation.mode``) keeps the mode with the weights
    (``self.policy_mode``)."""

    name = "train"
    refuse_unsolved = False
    """Refuse (:class:`NothingSolvedError`) rather than only warn when the pre-flight check finds
    nothing solved: the CLI's trainers set it unless ``--force``; from Python (and in the demo's
    stages) the check warns."""

    def preflight_rows(self) -> tuple[list, list, str] | None:
        """``(rewards, truncated, source)`` the pre-flight check judges: greedy on the first
        :data:`PREFLIGHT_PROBLEMS` training problems at the config's token budget (a trainer whose
        start policy is read from a table overrides it); None: nothing to check."""
        problems = list(getattr(self, "train_problems", []) or [])[:PREFLIGHT_PROBLEMS]
        lm, task = getattr(self, "lm", None), getattr(self, "task", None)
        budget = getattr(self.config, "token_budget", None)
        if not problems or not isinstance(lm, FrozenLM) or task is None or not budget or not self.config.steps:
            return None  # nothing to train, or an LM the decode loop does not run (a test's stand-in)
        rewards, truncated = greedy_preflight_rows(lm, task, problems, budget, self.config.seed)
        return rewards, truncated, f"greedy on the first {len(problems)} training problems"

    def _preflight(self) -> dict:
        rows = self.preflight_rows()
        if rows is None:
            return {}
        checked = preflight_check(*rows, force=not self.refuse_unsolved,
                                  token_budget=getattr(self.config, "token_budget", None))
        return {} if checked is None else checked.record()

    def _init_loop(self, out_dir, progress: bool) -> None:
        self.out_dir, self.progress, self.step = Path(out_dir), progress, 0
        self.checkpoint = Checkpoint(self.out_dir)
        self.log = JsonlLog(self.out_dir / "train_log.jsonl")
        self.early = EarlyStopping()

    def start(self) -> dict | None:
        """Work before step 1 of a fresh run; a returned dict is logged as step 0."""
        return None

    def train(self, resume: bool = False) -> Path:
        cfg = self.config
        keep_best = getattr(cfg, "keep_best", False)
        if resume and self.checkpoint.exists():
            state = self.checkpoint.load()
            for change in check_resume(state["config"], cfg, state["step"], self.checkpoint.path):
                log.info("resuming %s with %s (allowed: it does not alter the steps already done)",
                         self.out_dir, change)
            self.restore(state)
            self.step = state["step"]
            self.early = EarlyStopping.from_state(state.get("early_stopping"))
        elif self.checkpoint.exists():
            raise ValueError(
                f"{self.out_dir} already holds a run: pass --resume to continue it or choose another --out"
            )
        else:
            summary = self.start()
            preflight = self._preflight()  # refuses here, before any step, when nothing is solved
            if preflight:
                summary = {**(summary or {}), **preflight}
            self.log.truncate_after(-1)
            if keep_best:  # step 0: the start is a candidate like any later validation
                summary = {**(summary or {}), **self._observe_validation(patience=0)}
            if summary is not None:
                self.log.append({"step": 0, **summary})
            # the filtered prompts and the step-0 validation are kept: a kill from here on resumes after them
            self.checkpoint.save(
                {"step": 0, "config": asdict(cfg), **self.state(), "early_stopping": self.early.state()}
            )
        self.log.truncate_after(self.step)
        bar = tqdm(total=cfg.steps, initial=self.step, desc=self.name, unit="step", disable=not self.progress)
        patience = getattr(cfg, "patience", 0)  # only configs that declare it stop early
        while self.step < cfg.steps and not self.early.stopped:
            started = time.perf_counter()
            seed_everything(cfg.seed, "dropout", self.step)
            record = self.train_step()
            self.step += 1
            record = {"step": self.step, **record, "seconds": time.perf_counter() - started}
            if self.step % cfg.val_every == 0 or self.step == cfg.steps:
                record.update(self._observe_validation(patience))
            self.log.append(record)
            shown = {"reward": f"{record['reward']:.2f}"}
            if "val_reward" in record:  # only on steps that validated, in the mode the log records
                mode = record.get("val_mode")
                shown["val"] = f"{record['val_reward']:.2f}" + (f" ({mode})" if mode else "")
            bar.set_postfix(**shown)
            bar.update(1)
            if self.step % cfg.checkpoint_every == 0 or self.step == cfg.steps or self.early.stopped:
                self.checkpoint.save(
                    {"step": self.step, "config": asdict(cfg), **self.state(), "early_stopping": self.early.state()}
                )
        bar.close()
        self.kept_step = self.step
        if (patience > 0 or keep_best) and self.early.best_policy is not None:
            self.policy.load_state_dict(self.early.best_policy)  # the adapter is the best validated one
            self.kept_step = self.early.best_step
            if self.kept_step == 0 and self.step > 0:
                log.warning("the adapter kept is step 0, the untrained start: no validation after it beat it by "
                            "the margin asked (%d steps trained); train longer, on more prompts, or check the "
                            "validation reward in train_log.jsonl", self.step)
            if self.early.best_mode is not None and hasattr(self, "policy_mode"):
                self.policy_mode = self.early.best_mode
        elif self.early.last_mode is not None and hasattr(self, "policy_mode"):
            self.policy_mode = self.early.last_mode
        return self.save()

    def _observe_validation(self, patience: int) -> dict:
        """Validate now, let early stopping / keep-best see it; the log record's validation fields."""
        cfg = self.config
        validation = Validation.of(self.validate())
        best_scores = self.early.best_scores
        stop = self.early.observe(
            validation, self.step, self.policy, patience, getattr(cfg, "min_improvement", 0.0),
            getattr(cfg, "min_improvement_se", 0.0),
        )
        record = validation.record()
        if best_scores is not None and validation.scores is not None:
            record["val_paired_se"] = paired_se(validation.scores, best_scores)
        start = self.early.start_scores
        if self.step > 0 and start is not None and validation.scores is not None:
            record["val_gain_over_start"], record["val_gain_se"] = validation.gain_over(Validation(start))
        if getattr(cfg, "keep_best", False) or getattr(cfg, "patience", 0) > 0:
            record["kept_step"] = self.early.best_step  # the step whose weights the adapter ends with so far
        if patience > 0 and stop:
            record["early_stop"] = {"best_step": self.early.best_step, "best_val_reward": self.early.best}
        return record


class EarlyStopping:
    """Best validation reward so far, the weights (and policy mode) at that point and validations
    since (see ``TrainingLoop``); the step-0 validation, which every later one must beat (keep-best).
    A NaN validation reward (no validation problems) never counts as better."""

    def __init__(self):
        self.best = float("-inf")
        self.best_step = 0
        self.since_best = 0
        self.stopped = False
        self.best_policy: dict | None = None
        self.best_scores: torch.Tensor | None = None
        self.best_groups: torch.Tensor | None = None
        self.best_mode: str | None = None
        self.last_mode: str | None = None
        self.start_scores: torch.Tensor | None = None
        self.start_groups: torch.Tensor | None = None

    def observe(self, value, step: int, policy: torch.nn.Module, patience: int, min_improvement: float,
                min_improvement_se: float = 0.0) -> bool:
        """Record a validation (a ``Validation`` or a bare reward); True when this one ends training
        (never with ``patience`` 0). A step-0 validation (keep-best) is the start. After a start,
        better: significantly above the start (``Validation.significantly_above`` with
        ``min_improvement_se`` standard errors and ``min_improvement``) and above the best by more
        than ``min_improvement``. Without one (early stopping alone): above the best by more than
        ``min_improvement`` and ``min_improvement_se`` paired standard errors, and, for grouped
        scores (``Validation.groups``), no group's mean below the best's."""
        validation = Validation.of(value)
        mean = validation.mean
        self.last_mode = validation.mode
        if step == 0 and self.start_scores is None and validation.scores is not None:
            self.start_scores, self.start_groups = validation.scores, validation.groups
            better = mean == mean  # mean == mean: not NaN
        elif self.start_scores is not None:  # a later step against the start, on the same rows
            start = Validation(self.start_scores, groups=self.start_groups)
            better = (mean > self.best + min_improvement
                      and validation.significantly_above(start, min_improvement_se, min_improvement))
        else:
            margin = max(min_improvement, min_improvement_se * paired_se(validation.scores, self.best_scores))
            loses_a_group = validation.loses_a_group_to(Validation(self.best_scores, groups=self.best_groups))
            better = mean == mean and mean > self.best + margin and not loses_a_group
        if better:
            self.best, self.best_step, self.since_best = mean, step, 0
            self.best_policy = {k: v.detach().clone() for k, v in policy.state_dict().items()}
            self.best_scores, self.best_groups, self.best_mode = validation.scores, validation.groups, validation.mode
        else:
            self.since_best += 1
        self.stopped = patience > 0 and self.since_best >= patience
        return self.stopped

    def state(self) -> dict:
        return {
            "best": self.best,
            "best_step": self.best_step,
            "since_best": self.since_best,
            "stopped": self.stopped,
            "best_policy": self.best_policy,
            "best_scores": self.best_scores,
            "best_groups": self.best_groups,
            "best_mode": self.best_mode,
            "last_mode": self.last_mode,
            "start_scores": self.start_scores,
            "start_groups": self.start_groups,
        }

    @classmethod
    def from_state(cls, state: dict | None) -> "EarlyStopping":
        early = cls()
        for key, value in (state or {}).items():
            setattr(early, key, value)
        return early
