"""Options and builders shared by the sub-commands: the frozen LM, the task, the rollout engine,
and a training run's output directory. Each group is derived from one dataclass
(``config_args.add_config_arguments``), so a setting's name, default and help live in one place."""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ..core.files import LOCK_FILE, check_output_dir
from ..decoding.actions import ActionSet
from ..decoding.backends import make_rollouts
from ..decoding.protocol import STOP_AT_ANSWER
from ..decoding.ray_rollouts import TaskSpec
from ..decoding.rollouts import Rollouts
from ..decoding.table_engines import ChunkEngine, LocalChunks, TableBackend
from ..evaluation.decoder_choice import table_arms
from ..lm.models import ModelSpec, load_frozen_lm
from ..tasks import available_tasks, get_task
from .config_args import add_config_arguments, build_config

__all__ = [
    "TaskOptions",
    "COMMAND_TOKEN_BUDGET",
    "RolloutOptions",
    "RunOptions",
    "TableOptions",
    "add_model_arguments",
    "add_task_arguments",
    "add_rollout_arguments",
    "add_run_arguments",
    "model_spec",
    "build_lm",
    "build_task",
    "build_rollouts",
    "check_table_backend",
    "table_engine",
    "task_options",
    "check_output_dir",
    "check_adapter_out",
    "load_problems",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TaskOptions:
    """task"""

    task: str = field(
        default="arithmetic",
        metadata={"help": f"task name, one of {', '.join(available_tasks())}; tasks joined with + are one balanced "
                  "mix (arithmetic+pyfunc, weighted: arithmetic:2+pyfunc:1)"},
    )
    data: str | None = None
    """JSONL data of tasks that read files: 'train=a.jsonl,test=b.jsonl' names a file per split (validation
    carved from train); one file is divided 80/10/10 into train/validation/test by content hash"""
    cot_ratio: float = 0.0
    """fraction of prompts that get a chain-of-thought instruction (paper: 0.3)"""
    system_prompt: str | None = None
    """system prompt preset (e.g. qwen3-math-nothink) or literal text"""
    max_problems: int | None = None
    """use at most this many problems of the split: from a file drawn at random with --seed, of a generated
    task its first ones"""
    verifier: str | None = None
    """task jsonl: math (answer extraction + math-verify), numeric (the final number), exact (the default:
    last line equals the answer), or your own module:function, e.g. mypkg.check:score"""
    verifier_timeout_s: float | None = None
    """seconds one verifier call may take before it scores 0 (task jsonl; default 10)"""
    train_size: int | None = None
    """problems a generated task makes for its train split (task arithmetic; default 500)"""
    validation_size: int | None = None
    """problems a generated task makes for its validation split (task arithmetic; default 100; the first
    ones and the test split stay the same problems whatever the size)"""
    question_field: str | None = None
    """task jsonl: the JSONL field holding the question (default question)"""
    question_template: str | None = None
    """task jsonl: the question put together from several fields, e.g. '{Body} {Question}' (replaces
    --question-field)"""
    instruction: str | None = None
    """task jsonl: text added after every question, e.g. 'Give the final answer as a number after Answer:'"""
    answer_field: str | None = None
    """task jsonl: the JSONL field holding the gold answer (default answer)"""
    drop_overlap: bool = False
    """task jsonl: drop from train and validation the problems test (or validation) also holds, instead of
    refusing the overlap"""

    def __post_init__(self) -> None:
        if self.max_problems is not None and self.max_problems < 1:  # 0 would silently mean "all"
            raise ValueError(f"--max-problems must be >= 1 (or none for all), got {self.max_problems}")
        for name in ("train_size", "validation_size"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.cot_ratio <= 1.0:
            raise ValueError(f"--cot-ratio must be in [0, 1], got {self.cot_ratio}")


COMMAND_TOKEN_BUDGET = 32
"""The token budget of the commands that train, evaluate and select on their own (``train-*``,
``evaluate``, ``select-actions``, ``rules``) when ``--token-budget`` is not given: short, for quick
runs on the 2-core default setup. It is passed explicitly to the library, whose default is
``decoding.actions.DEFAULT_TOKEN_BUDGET``; the study commands take theirs from the ``--size`` preset."""


@dataclass(frozen=True)
class RolloutOptions:
    """rollouts"""

    token_budget: int = COMMAND_TOKEN_BUDGET
    """max new tokens per completion (b)"""
    batch_rows: int = 64
    """rows decoded together in one batch"""
    backend: Literal["hf", "ray", "vllm"] = "hf"
    """rollout engine"""
    workers: int = 1
    """Ray workers (backend ray)"""
    ray_address: str | None = None
    """join an existing Ray cluster instead of starting a local one"""
    seed: int = 0
    """base seed of every row's randomness"""
    gpu_memory_utilization: float = 0.5
    """share of the GPU's memory the vLLM engine may take, in (0, 1] (backend vllm; vLLM's own 0.92 leaves
    no room for the HF copy of the LM on the same GPU)"""


@dataclass(frozen=True)
class RunOptions:
    """output"""

    out: str
    """output directory (adapter, checkpoint, train_log.jsonl)"""
    resume: bool = False
    """continue the run in --out from its last checkpoint"""


@dataclass(frozen=True)
class TableOptions:
    """sample tables"""

    # one set of defaults for every command that builds tables (rules, train-attempt): a table one
    # built is read and extended by the other

    temperatures: tuple[float, ...] = (0.5,)
    """sampled arms beside greedy when a table is built: one per temperature (unless --decoders)"""
    decoders: str | None = None
    """sampled arms beside greedy from an action set instead of --temperatures: a select-actions actions.json (its
    coverage-selected actions, in the order chosen) or a preset; greedy is dropped"""
    decoder_count: int | None = None
    """how many of --decoders' sampled actions, in its order (default: all)"""
    samples: int = 8
    """samples per sampled arm when a table is built"""
    hidden: bool = True
    """a built table keeps each sample's mean hidden state (the attempt policy's hidden features read it)"""
    stop_at_answer: bool = STOP_AT_ANSWER
    """a built table's samples end at their first complete answer (the protocol); off: decoded to the budget"""
    checkpoints: int = 0
    """a built table stores each sample's readings every this many tokens (0: none); attach-abandon fits an abandon
    rule on them"""

    def __post_init__(self) -> None:
        if self.samples < 1 or not self.temperatures or any(not t > 0 for t in self.temperatures):
            raise ValueError("--samples must be >= 1 and --temperatures positive")
        if self.checkpoints < 0:
            raise ValueError(f"--checkpoints must be >= 0 tokens, got {self.checkpoints}")
        if self.decoder_count is not None and self.decoders is None:
            raise ValueError("--decoder-count needs --decoders")
        if self.decoders is not None:
            self.arms  # noqa: B018  (an unreadable action set or too few sampled actions: refused here)

    @property
    def arms(self) -> list:
        """The arms of a built table: greedy, then the sampled ones (--decoders', else one per temperature)."""
        return table_arms(self.temperatures, self.decoders, self.decoder_count)

    @property
    def rows_per_problem(self) -> int:
        return 1 + (len(self.arms) - 1) * self.samples


def add_model_arguments(p: argparse.ArgumentParser, **kwargs) -> None:
    """--model / --device / --dtype (the ``ModelSpec`` fields)."""
    add_config_arguments(
        p, ModelSpec, title="frozen LM", flags={"name_or_path": ["--model"]}, **kwargs
    )


def add_task_arguments(p: argparse.ArgumentParser, exclude=()) -> None:
    add_config_arguments(p, TaskOptions, exclude=exclude)


def add_rollout_arguments(p: argparse.ArgumentParser, exclude=(), **kwargs) -> None:
    add_config_arguments(p, RolloutOptions, exclude=exclude, **kwargs)


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, RunOptions)


def model_spec(args) -> ModelSpec:
    return build_config(ModelSpec, args)


def build_lm(args):
    return load_frozen_lm(model_spec(args))


def task_options(args) -> dict:
    """The ``get_task`` keyword options given on the command line (Ray workers rebuild the task from them)."""
    options = {}
    if args.data is not None:
        options["data"] = args.data
    if args.system_prompt is not None:
        options["system_prompt"] = args.system_prompt
    # --verifier / --verifier-timeout-s / --question-field / --answer-field reach tasks that take them (jsonl),
    # --train-size / --validation-size the generated ones (arithmetic); get_task names any task that does not
    for name in ("verifier", "verifier_timeout_s", "question_field", "question_template", "instruction",
                 "answer_field", "train_size", "validation_size"):
        if getattr(args, name, None) is not None:
            options[name] = getattr(args, name)
    if getattr(args, "drop_overlap", False):
        options["drop_overlap"] = True
    if options.get("verifier") and "" not in sys.path and os.getcwd() not in sys.path:
        # `module:function` from the current folder, as with `python -m` (a console script lacks it)
        sys.path.append(os.getcwd())
    return options


def build_task(args):
    build_config(TaskOptions, args)  # validates the task options given (e.g. --max-problems 0)
    return get_task(args.task, **task_options(args))


def check_adapter_out(out: str, force: bool, option: str = "--out") -> None:
    """Pre-flight of a directory an adapter is written into whole (``make-rule``, ``rules
    --adapter-out``): a directory that already holds files is refused unless ``force`` (its model
    card and adapter files would be replaced), and its run lock is taken."""
    path = Path(out)
    held = sorted(p.name for p in path.iterdir() if p.name != LOCK_FILE) if path.is_dir() else []
    check_output_dir(path, tuple(held[:3]), force=force, option=option)


def load_problems(task, split: str, max_problems: int | None = None, seed: int = 0) -> list:
    """``task.load(split)``, at most ``max_problems`` of it (``Task.subset``: drawn at random with
    ``seed`` from a file, a generated split's first ones), refusing an empty split: called before
    the model loads, so a missing, empty or unreadable data file costs no model load."""
    every = task.load(split)
    problems = task.subset(every, max_problems, seed)
    if not problems:
        raise ValueError(f"task {task.name!r} has no problems in split {split!r}: check --data")
    if len(problems) < len(every):  # which ones, said once: a subset of a sorted file is not its head
        how = "its first ones" if problems == every[: len(problems)] else f"drawn at random with seed {seed} (--seed)"
        log.info("task %s, split %s: %d of %d problem(s), %s", task.name, split, len(problems), len(every), how)
    source = task.split_sources().get(split)
    if source is not None:  # a task that reads files names the one it read, before any model loads
        log.info("task %s, split %s: %d problem(s) from %s", task.name, split, len(problems), source.describe())
    return problems


def build_rollouts(args, lm, action_set: ActionSet) -> Rollouts:
    return make_rollouts(
        args.backend,
        lm,
        action_set,
        batch_rows=args.batch_rows,
        workers=args.workers,
        ray_address=args.ray_address,
        model_spec=lm.spec,
        gpu_memory_utilization=getattr(args, "gpu_memory_utilization", None),
    )


def check_table_backend(args) -> None:
    """Pre-flight of a command that builds sample tables with ``--backend vllm``: vLLM installed,
    before any model loads."""
    if args.backend == "vllm" and importlib.util.find_spec("vllm") is None:
        raise ValueError("--backend vllm needs vLLM (pip install -e '.[vllm]' on a CUDA machine, or the CPU build "
                         "`make test-vllm` sets up); or build the tables with --backend hf or ray")


def table_engine(args, lm, task, actions=()) -> ChunkEngine:
    """Where a command's sample tables are decoded: ``lm`` and ``task`` in this process (``--backend
    hf``); ``--workers`` Ray actors (``--backend ray``, ``--ray-address``), each loading the LM from
    ``lm.spec`` and rebuilding the task from the command's task options; or vLLM for the rows
    (``--backend vllm``, the table's arms ``actions``) with their hidden states and confidences from
    a teacher-forced pass of ``lm``. Close it when done."""
    check_table_backend(args)
    if args.backend == "vllm":
        return LocalChunks(lm, task, rollouts=build_rollouts(args, lm, ActionSet(list(actions))))
    backend = TableBackend(args.backend, args.workers, args.ray_address)
    return backend.open(lm, task, TaskSpec(args.task, task_options(args)))
