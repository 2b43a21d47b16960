"""Pieces both REINFORCE trainers share: the resumable training loop (checkpoints and the JSONL
log come from ``core.files``), seeding, prompt batches, resume checks and the validation split. The
pre-flight check lives in ``preflight``, validations and early stopping in ``validation``; their
names are re-exported here, beside the loop that runs them."""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, fields
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..core.files import Checkpoint, JsonlLog
from ..decoding.loop import row_seed
from ..lm.models import FrozenLM
from .preflight import (  # re-exported (see the module docstring)
    PREFLIGHT_PROBLEMS,
    NothingSolvedError,
    Preflight,
    greedy_preflight_rows,
    preflight_check,
)
from .validation import EarlyStopping, Validation, paired_se  # re-exported (see the module docstring)

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
