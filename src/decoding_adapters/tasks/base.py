"""The task interface: problems, prompts, verifiers, a registry, and the helpers every task shares.

A task turns a data set into chat prompts and scores completions with a verifier that returns
0.0 or 1.0. Tasks are registered by name (``@register_task("math")``) so that the CLI can build
one from a string plus keyword options: ``get_task("math", data="../shared/data/math/test500.jsonl")``.

Conventions shared by the built-in tasks:

- ``data=`` is either one JSONL path (used for every split: handy for a single evaluation file) or
  a mapping ``{"train": path, "test": path, ...}``; ``None`` means the task's default location.
- ``system_prompt=`` is either a preset name from :data:`SYSTEM_PROMPTS` or literal text; ``None``
  leaves the model's own default (no system message).
- ``prompt(problem, cot=True)`` asks for step-by-step reasoning; :func:`assign_cot` decides, per
  problem and independently of batch composition, which prompts get it.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, NamedTuple, TypeVar, Union

SPLITS: tuple[str, ...] = ("train", "validation", "test")
"""Every split name a task may offer; each task documents which of them it has."""

SYSTEM_PROMPTS: dict[str, str] = {
    "qwen3-math-nothink": "Provide the final answer within \\boxed{}. /nothink",
    "qwen3-math-think": "Provide the final answer within \\boxed{}. /think",
    "qwen3-code-nothink": "You are a coding assistant. /nothink",
    "qwen3-code-think": "You are a coding assistant. Please reason step by step. /think",
}
"""The paper's Qwen3 system prompts, by preset name (``system_prompt="qwen3-math-think"``)."""

DataSpec = Union[str, Path, Mapping[str, Union[str, Path]], None]
"""A task's ``data=`` option: one path for every split, a mapping split -> path, or None (default)."""


@dataclass(frozen=True)
class Problem:
    """One task instance: what the model is asked and what counts as correct."""

    id: str
    """Stable identifier, unique within a task and split (e.g. ``"math/test/17"``)."""
    question: str
    """The problem text, without any prompt instruction."""
    answer: str
    """The gold answer as a string (the verifier decides what matches it)."""
    meta: dict[str, Any] = field(default_factory=dict, hash=False)
    """Free-form extras: family, level, type, unit tests, ...; excluded from the hash (dicts are
    unhashable) but still compared by ``==``."""

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValueError(f"Problem.id must be a non-empty string, got {self.id!r}")
        if not isinstance(self.question, str) or not self.question.strip():
            raise ValueError(f"Problem {self.id!r}: question must be a non-empty string")
        if not isinstance(self.answer, str):
            raise ValueError(
                f"Problem {self.id!r}: answer must be a string, got {type(self.answer).__name__}"
            )
        if not isinstance(self.meta, dict):
            raise ValueError(f"Problem {self.id!r}: meta must be a dict, got {type(self.meta).__name__}")


class Task(ABC):
    """A family of verifiable problems: loading, prompting and scoring.

    Subclasses set ``name`` through :func:`register_task` and are usually dataclasses whose
    fields are the options ``get_task`` accepts.
    """

    name: ClassVar[str] = ""
    splits: ClassVar[tuple[str, ...]] = SPLITS
    """The splits :meth:`load` accepts."""
    system_prompt: str | None = None
    """System message text, or None for the model's default (no system message)."""

    @abstractmethod
    def load(self, split: str) -> list[Problem]:
        """Return the problems of ``split`` (one of :attr:`splits`) in a fixed order."""

    @abstractmethod
    def prompt(self, problem: Problem, cot: bool = False) -> list[dict[str, str]]:
        """Chat messages (``[{"role": ..., "content": ...}]``) asking ``problem``."""

    @abstractmethod
    def reward(self, problem: Problem, completion: str) -> float:
        """1.0 if ``completion`` answers ``problem`` correctly, else 0.0; never raises."""

    def extract_answer(self, problem: Problem, completion: str) -> str:
        """The answer ``completion`` states, normalised so that equal answers compare equal (for
        majority voting); "" when it states none. Default: the stripped completion."""
        return completion.strip()

    def check_split(self, split: str) -> None:
        """Raise a ValueError naming the valid splits if ``split`` is not one of them."""
        if split not in self.splits:
            raise ValueError(
                f"task {self.name!r} has no split {split!r}; choose one of {list(self.splits)}"
            )


# --------------------------------------------------------------------------- registry

_REGISTRY: dict[str, type[Task]] = {}
T = TypeVar("T", bound=type[Task])


def register_task(name: str):
    """Class decorator: make ``cls`` available as ``get_task(name)`` and set ``cls.name``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"task name must be a non-empty string, got {name!r}")

    def decorator(cls: T) -> T:
        previous = _REGISTRY.get(name)
        # Re-registering the same class (module reload) is fine; two classes sharing a name is a bug.
        if previous is not None and previous.__qualname__ != cls.__qualname__:
            raise ValueError(f"task name {name!r} is already registered by {previous.__qualname__}")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return decorator


def available_tasks() -> list[str]:
    """Names of the registered tasks, sorted."""
    return sorted(_REGISTRY)


def get_task(name: str, **options: Any) -> Task:
    """Build the task registered as ``name`` with keyword ``options`` (its constructor's fields)."""
    cls = _REGISTRY.get(name)
    if cls is None:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(available_tasks())}")
    accepted = {f.name for f in fields(cls)} if hasattr(cls, "__dataclass_fields__") else None
    if accepted is not None:
        unknown = sorted(set(options) - accepted)
        if unknown:
            raise ValueError(
                f"task {name!r} has no option(s) {unknown}; accepted: {sorted(accepted)}"
            )
    return cls(**options)


# --------------------------------------------------------------------------- prompts


def resolve_system_prompt(value: str | None) -> str | None:
    """Map a preset name from :data:`SYSTEM_PROMPTS` to its text; other strings are literal."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValueError(
            f"system_prompt must be a preset name {sorted(SYSTEM_PROMPTS)}, literal text, or None "
            f"(None keeps the model default), got {value!r}"
        )
    return SYSTEM_PROMPTS.get(value, value)


def chat_messages(system_prompt: str | None, user: str) -> list[dict[str, str]]:
    """A single-turn chat: an optional system message, then the user message."""
    messages = [] if system_prompt is None else [{"role": "system", "content": system_prompt}]
    messages.append({"role": "user", "content": user})
    return messages


def _unit_interval(seed: int, key: str) -> float:
    """A uniform number in [0, 1) that depends only on ``(seed, key)`` (not on Python's hash seed)."""
    digest = hashlib.sha256(f"{seed}\x00{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def assign_cot(problem_ids: Sequence[str], ratio: float, seed: int) -> list[bool]:
    """Which problems get a chain-of-thought prompt: ``True`` for about ``ratio`` of them.

    Each flag is a function of ``(seed, id)`` alone, so a problem keeps its flag whatever else is
    in the batch; the realised fraction is ``ratio`` up to sampling noise (exact at 0 and 1).
    """
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"cot ratio must be in [0, 1], got {ratio}")
    return [_unit_interval(seed, f"cot/{pid}") < ratio for pid in problem_ids]


class PromptedProblem(NamedTuple):
    """A prompt ready for the model, and whether it asked for chain of thought."""

    messages: list[dict[str, str]]
    cot: bool


def build_prompts(
    task: Task, problems: Sequence[Problem], cot_ratio: float = 0.0, seed: int = 0
) -> list[PromptedProblem]:
    """Prompt every problem, giving chain of thought to the ones :func:`assign_cot` picks."""
    flags = assign_cot([p.id for p in problems], cot_ratio, seed)
    return [PromptedProblem(task.prompt(p, cot=c), c) for p, c in zip(problems, flags)]


# --------------------------------------------------------------------------- data files


def read_jsonl(
    path: str | Path, required_fields: Sequence[str] = (), *, skip_bad: bool = False
) -> list[dict[str, Any]]:
    """Read a JSON-lines file of objects, checking that each has ``required_fields``.

    Blank lines are ignored. A line that is not a JSON object, or lacks a field, raises a
    ValueError naming the file, the 1-based line number and the field; with ``skip_bad=True``
    such lines are dropped instead and one warning reports how many.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"JSONL file not found: {path} (check the path, or pass the task data=<path to a JSONL file>)"
        )
    rows, bad = [], 0
    with path.open(encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                rows.append(_parse_row(line, required_fields))
            except ValueError as err:
                if not skip_bad:
                    raise ValueError(f"{path}:{lineno}: {err}") from None
                bad += 1
    if bad:
        warnings.warn(f"skipped {bad} bad line(s) in {path}", stacklevel=2)
    return rows


def _parse_row(line: str, required_fields: Sequence[str]) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise ValueError(f"not valid JSON ({err.msg} at column {err.colno})") from None
    if not isinstance(row, dict):
        raise ValueError(f"expected a JSON object, got {type(row).__name__}")
    for name in required_fields:
        if name not in row:
            raise ValueError(f"missing field {name!r}")
    return row


def resolve_data_path(data: Any, split: str, default: Mapping[str, Path], task: str) -> Path:
    """The file that holds ``split``: ``data`` if it is one path, ``data[split]`` if a mapping,
    else ``default[split]``. Raises a ValueError when ``split`` has no file."""
    if data is None:
        source, where = default, "default data"
    elif isinstance(data, Mapping):
        source, where = data, "data= mapping"
    else:
        return Path(data)
    if split not in source:
        raise ValueError(
            f"task {task!r}: the {where} has no file for split {split!r} "
            f"(has {sorted(source)}); pass data={{{split!r}: <path>}} or a single data=<path>"
        )
    return Path(source[split])


def validate_data_option(data: Any, splits: Sequence[str]) -> None:
    """Check the type of a task's ``data=`` option (files are checked when a split is loaded)."""
    if data is None or isinstance(data, (str, Path)):
        return
    if not isinstance(data, Mapping):
        raise ValueError(f"data must be a path, a mapping split -> path, or None; got {type(data).__name__}")
    unknown = sorted(set(data) - set(splits))
    if unknown:
        raise ValueError(f"data= mapping has unknown split(s) {unknown}; valid splits: {list(splits)}")
