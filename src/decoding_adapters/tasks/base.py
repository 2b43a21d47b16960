"""The task interface: problems, prompts, verifiers, a registry, and the helpers every task shares.

A task turns a data set into chat prompts and scores completions with a verifier that returns
0.0 or 1.0. Tasks are registered by name (``@register_task("math")``) so that the CLI can build
one from a string plus keyword options: ``get_task("math", data="../shared/data/math/test500.jsonl")``.

Conventions shared by the built-in tasks:

- ``data=`` names the files (see "Splits" below): ``None`` (the task's default files), a mapping
  ``{"train": path, "test": path, ...}``, the same mapping as text ``"train=a.jsonl,test=b.jsonl"``
  (the CLI's ``--data``; :func:`parse_data_spec`), or one path.
- ``system_prompt=`` is either a preset name from :data:`SYSTEM_PROMPTS` or literal text; ``None``
  leaves the model's own default (no system message).
- ``prompt(problem, cot=True)`` asks for step-by-step reasoning; :func:`assign_cot` decides, per
  problem and independently of batch composition, which prompts get it.

Splits are disjoint by content. A problem's identity is :func:`content_hash`, a hash of its
normalised question (:func:`normalise_question` says exactly what is normalised); ids that
file-based tasks give their problems are built from it, so the same question has the same id
whichever split or file it was read from. How ``data=`` becomes splits (:func:`.splits.plan_splits`):

- a file named for a split is that split, whole: ``{"train": a, "test": b}``;
- a split the files do not name is carved from train by content hash where possible: validation
  is the problems of the train file whose hash falls in the lowest :data:`VALIDATION_FRACTION`
  (10%) of hash space, and train keeps the other 90%;
- one path (not a mapping) is never reused whole as every split: its problems are divided by
  content hash in the proportions :data:`SINGLE_FILE_FRACTIONS` (test 10%, validation 10%, train
  80%). To evaluate on a whole file, name its split: ``data="test=file.jsonl"``. A task that only
  has one split (e.g. HumanEval's test) takes a single path whole as that split.

Bands of hash space do not depend on the order or the number of the problems in a file, so a split
is stable across runs and machines, and a problem stays in its split when the file grows.
Problems with the same content inside one split are kept once (a warning says how many were
dropped). :func:`.splits.check_disjoint` verifies that the splits share no problem and names the files and
the count when they do; trainers and ``evaluate`` call it when they start.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import json
import re
import unicodedata
import warnings
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
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
"""A task's ``data=`` option: a mapping split -> path (or its text form ``"train=a,test=b"``), one
path (divided among the splits by content hash), or None (the task's default files)."""

VALIDATION_FRACTION = 0.1
"""Share of a train file carved out as validation (by content hash) when no validation file is named."""
SINGLE_FILE_FRACTIONS: dict[str, float] = {"test": 0.1, "validation": 0.1, "train": 0.8}
"""How one ``data=`` path is divided among the splits (by content hash; bands in this order)."""


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
            raise ValueError(f"Problem {self.id!r}: answer must be a string, got {type(self.answer).__name__}")
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

    def reward_batch(self, problems: Sequence[Problem], completions: Sequence[str]) -> list[float]:
        """:meth:`reward` of each ``(problem, completion)`` pair; tasks whose verifier is slow (a
        sandbox run per program) override it to score several at once."""
        return [self.reward(p, c) for p, c in zip(problems, completions)]

    def extract_answer(self, problem: Problem, completion: str) -> str:
        """The answer ``completion`` states, as the task's verifier reads it (the number, the
        normalised expression, the program), normalised so that answers the verifier treats alike
        compare equal; "" when it states none. It is the one answer key: every vote (the fixed
        rules' sample tables, the attempt policy, majority metrics, ``generate``'s ``answer``)
        groups samples by it, so two wordings of one answer are one answer. Never raises.
        Default: the stripped completion (a task whose verifier reads no part of it)."""
        return completion.strip()

    def draw_order(self, problems: Sequence[Problem], seed: int) -> list[Problem]:
        """The order in which a run that asks for fewer than all of a split's ``problems`` takes
        them (:meth:`subset`). Default: at random, fixed by ``seed`` and each problem's content
        (:func:`content_hash`), so a file sorted by type still gives a representative subset, and
        the subset neither depends on the file's order nor changes when the file grows. A task whose
        split order is itself balanced (a generated task's family mix) keeps that order."""
        return sorted(problems, key=lambda p: _unit_interval(seed, content_hash(p)))

    def subset(self, problems: Sequence[Problem], n: int | None, seed: int) -> list[Problem]:
        """At most ``n`` of a split's ``problems`` (None: all, in their order): the first ``n`` of
        :meth:`draw_order`, so a larger ``n`` holds every smaller one (a table grown later keeps
        what it has)."""
        if n is None or n >= len(problems):
            return list(problems)
        return self.draw_order(problems, seed)[:n]

    def answer_complete(self, problem: Problem, text: str) -> bool:
        """Whether ``text``, a completion so far (it may go on), already states a complete answer
        that the verifier would read, so a decoder may end the row there: the "stop at the first
        answer" baseline checks it after every generated token and ends the row at the first
        True. It must not read an answer that later tokens could still change (a number whose
        next digit may follow). Never raises. Default: never (a task that does not say what a
        complete answer is, e.g. code, is decoded to its end)."""
        return False

    @property
    def answer_check(self) -> str | None:
        """The name of the check :meth:`answer_complete` applies, or None where it never fires (the
        stop at the first answer is off: rows decode to EOS or the budget). Default: the overriding
        class's method, where a task overrides it."""
        cls = type(self)
        if getattr(cls, "answer_complete", None) is Task.answer_complete:
            return None
        return f"{cls.__name__}.answer_complete"

    def check_split(self, split: str) -> None:
        """Raise a ValueError naming the valid splits if ``split`` is not one of them."""
        if split not in self.splits:
            raise ValueError(f"task {self.name!r} has no split {split!r}; choose one of {list(self.splits)}")

    def split_sources(self) -> Mapping[str, "SplitSource"]:
        """Where each split's problems come from (file and hash band), for messages; empty for a
        task that generates its problems."""
        return {}

    def locate(self, problem: Problem) -> str:
        """Where ``problem`` was read from, for messages (``file:line`` where the task knows it)."""
        return problem.id


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
    """Build the task registered as ``name`` with keyword ``options`` (its constructor's fields); a
    name joining tasks with ``+`` (``"arithmetic+pyfunc"``, ``"arithmetic:2+pyfunc:1"``) is a ``MixTask``."""
    cls = _REGISTRY.get(name)
    if cls is None and "+" in str(name) and "mix" in _REGISTRY:  # "arithmetic+pyfunc": tasks/mix.py
        return _REGISTRY["mix"](tasks=name, **options)
    if cls is None:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(available_tasks())}")
    accepted = {f.name for f in fields(cls)} if hasattr(cls, "__dataclass_fields__") else None
    if accepted is not None:
        unknown = sorted(set(options) - accepted)
        if unknown:
            raise ValueError(f"task {name!r} has no option(s) {unknown}; accepted: {sorted(accepted)}")
    return cls(**options)


def task_record(task: Task) -> dict[str, Any]:
    """What rebuilds ``task`` elsewhere (an adapter's ``task_options``): ``get_task(task.name,
    **task_record(task))`` — the options that differ from their defaults and can be written as JSON,
    data paths made absolute (so the adapter works from any folder). A callable verifier is kept by
    its importable ``module:function`` name, else left out (the record says ``"verifier": null``
    then: the default)."""
    if not hasattr(task, "__dataclass_fields__"):
        return {}
    out: dict[str, Any] = {}
    for f in fields(task):
        if not f.init:
            continue
        value = getattr(task, f.name)
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING)
        if value == default:
            continue
        if f.name == "data":
            value = _absolute_data(value)
        elif callable(value) and not isinstance(value, type):
            module, qualname = getattr(value, "__module__", ""), getattr(value, "__qualname__", "")
            value = f"{module}:{qualname}" if module and module != "__main__" and "<" not in qualname else None
        try:
            json.dumps(value)
        except TypeError:
            continue
        out[f.name] = value
    return out


def _absolute_data(data: Any) -> Any:
    data = normalise_data_spec(data)
    if isinstance(data, Mapping):
        return {k: str(Path(v).resolve()) for k, v in data.items()}
    return None if data is None else str(Path(data).resolve())


def task_from_record(name: str, options: Mapping[str, Any] | None, data: DataSpec = None,
                     verifier: str | None = None) -> Task:
    """The task an adapter records (``AdapterConfig.task`` and ``task_options``); ``data`` replaces
    the recorded files (``--data``). A record that says nothing of data (an adapter from before
    records existed, or a task that reads none) builds the task with its defaults.

    A record that names a verifier of your own (``module:function``) is code an ``adapter.json``
    cannot vouch for (a downloaded adapter could name any importable function): it is refused unless
    the caller names the same verifier again (``verifier=``)."""
    options = dict(options or {})
    recorded = options.get("verifier")
    if isinstance(recorded, str) and ":" in recorded and verifier != recorded:
        raise ValueError(f"its task names the verifier {recorded!r}, code that adapter.json cannot vouch for: "
                         f"pass verifier={recorded!r} (or task=) to run it")
    if data is not None:
        options["data"] = data
    return get_task(name, **options)


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
    path: str | Path, required_fields: Sequence[str] = (), *, skip_bad: bool = False,
    line_numbers: list[int] | None = None,
) -> list[dict[str, Any]]:
    """Read a JSON-lines file of objects (gzip-compressed if its name ends in ``.gz``), checking that
    each has ``required_fields``.

    Blank lines are ignored. A line that is not UTF-8, not a JSON object, or lacks a field, raises
    a ValueError naming the file, the 1-based line number and the field; with ``skip_bad=True``
    such lines are dropped instead and one warning reports how many. A file with no row at all is
    a ValueError too (an empty data set would otherwise surface much later, after the model loads).
    ``line_numbers``, when given, receives each returned row's 1-based line number.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"JSONL file not found: {path} (check the path given with --data; from Python, data=)"
        )
    rows, bad = [], 0
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:  # bytes: a line that is not UTF-8 is reported with its number
        for lineno, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                if not skip_bad:
                    raise ValueError(f"{path}:{lineno}: not valid UTF-8 (byte {err.start + 1} of the line)") from None
                bad += 1
                continue
            if not line.strip():
                continue
            try:
                rows.append(_parse_row(line, required_fields))
                if line_numbers is not None:
                    line_numbers.append(lineno)
            except ValueError as err:
                if not skip_bad:
                    raise ValueError(f"{path}:{lineno}: {err}") from None
                bad += 1
    if bad:
        warnings.warn(f"skipped {bad} bad line(s) in {path}", stacklevel=2)
    if not rows:
        raise ValueError(f"{path} holds no data rows (an empty file, or only blank or bad lines)")
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


def validate_data_option(data: Any, splits: Sequence[str]) -> None:
    """Check the type of a task's ``data=`` option (files are checked when a split is loaded)."""
    data = normalise_data_spec(data)
    if data is None or isinstance(data, (str, Path)):
        return
    if not isinstance(data, Mapping):
        raise ValueError(f"data must be a path, a mapping split -> path, or None; got {type(data).__name__}")
    unknown = sorted(set(data) - set(splits))
    if unknown:
        raise ValueError(f"data= mapping has unknown split(s) {unknown}; valid splits: {list(splits)}")


def parse_data_spec(text: str) -> dict[str, str] | str:
    """The CLI form of ``data=``: ``"train=a.jsonl,test=b.jsonl"`` -> ``{"train": "a.jsonl", "test":
    "b.jsonl"}``; text without ``=`` is one path and is returned unchanged (stripped).

    Split names must be among :data:`SPLITS`, each named once, each with a non-empty path. Paths
    may not contain commas (use the mapping form from Python for such names).
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"data must be a path or 'split=path,...', got {text!r}")
    text = text.strip()
    if "=" not in text:
        return text
    mapping: dict[str, str] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        split, sep, path = (piece.strip() for piece in part.partition("="))
        if not sep or not path:
            raise ValueError(f"data {text!r}: {part.strip()!r} is not split=path (e.g. train=a.jsonl,test=b.jsonl)")
        if split not in SPLITS:
            raise ValueError(f"data {text!r}: unknown split {split!r}; valid splits: {list(SPLITS)}")
        if split in mapping:
            raise ValueError(f"data {text!r}: split {split!r} is named twice")
        mapping[split] = path
    if not mapping:
        raise ValueError(f"data {text!r} names no file")
    return mapping


def normalise_data_spec(data: Any) -> Any:
    """``data`` with its text mapping form parsed (:func:`parse_data_spec`); anything else unchanged."""
    if isinstance(data, str) and "=" in data:
        return parse_data_spec(data)
    return data


# --------------------------------------------------------------------------- content identity

_LATEX_SPACING = re.compile(r"\\[,;:! ]|\\q?quad(?![a-zA-Z])|~")
_LATEX_SIZING = re.compile(r"\\(?:left|right|big|Big|bigg|Bigg)(?![a-zA-Z])")
_SPACE_NEXT_TO_SYMBOL = re.compile(r" (?=[^\w ])|(?<=[^\w ]) ")  # after whitespace is collapsed


def normalise_question(text: str) -> str:
    """The form of a question that :func:`content_hash` hashes. Normalised, in this order:

    1. Unicode NFKC (full-width digits, ligatures, non-breaking spaces become plain ones);
    2. case (``str.casefold``);
    3. trivial LaTeX formatting: ``$`` delimiters removed, ``\\dfrac``/``\\tfrac`` -> ``\\frac``,
       sizing commands (``\\left``, ``\\right``, ``\\big``...) removed, spacing commands
       (``\\,`` ``\\;`` ``\\:`` ``\\!`` ``\\ `` ``\\quad`` ``~``) become spaces;
    4. whitespace: runs collapse to one space, ends are stripped, and spaces next to a symbol
       (anything but a letter, digit or underscore) are dropped, so ``x = 3`` equals ``x=3``.

    Spaces between two words or numbers are kept (``12 3`` differs from ``123``); nothing else
    (punctuation, numbers, wording) is changed.
    """
    s = unicodedata.normalize("NFKC", text).casefold()
    s = s.replace("$", "").replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = _LATEX_SPACING.sub(" ", _LATEX_SIZING.sub("", s))
    return _SPACE_NEXT_TO_SYMBOL.sub("", " ".join(s.split()))


CONTENT_HASH_CHARS = 16
"""Hex characters of a content hash (64 bits: a collision among 10^5 problems has odds ~3e-10)."""
_HEX = re.compile(rf"[0-9a-f]{{{CONTENT_HASH_CHARS}}}")


def content_hash(problem: Problem | str) -> str:
    """A problem's identity by content: the first 16 hex digits of the SHA-256 of its normalised
    question (:func:`normalise_question`); ``problem`` may be a Problem or the question text.
    The answer, id and metadata are not part of it."""
    question = problem.question if isinstance(problem, Problem) else problem
    if not isinstance(question, str):
        raise ValueError(f"content_hash needs a Problem or a question string, got {type(problem).__name__}")
    return _question_hash(question)


@functools.lru_cache(maxsize=1 << 16)  # the same questions are hashed at load and at every check
def _question_hash(question: str) -> str:
    return hashlib.sha256(normalise_question(question).encode("utf-8")).hexdigest()[:CONTENT_HASH_CHARS]


def content_hashes(problems: Iterable[Problem | str]) -> list[str]:
    """:func:`content_hash` of each item, in order."""
    return [content_hash(p) for p in problems]


def problems_digest(problems: Iterable[Problem | str]) -> str:
    """One SHA-256 hex digest of the *set* of content hashes of ``problems`` (order and repeats do
    not matter). Items are Problems or content hashes (16 lowercase hex digits, as recorded in an
    adapter), so a digest can be recomputed from stored hashes."""
    hashes = set()
    for item in problems:
        if isinstance(item, Problem):
            hashes.add(content_hash(item))
        elif isinstance(item, str) and _HEX.fullmatch(item):
            hashes.add(item)
        else:
            raise ValueError(
                f"problems_digest takes Problems or {CONTENT_HASH_CHARS}-digit content hashes, got {item!r}"
            )
    return hashlib.sha256("\n".join(sorted(hashes)).encode("ascii")).hexdigest()


def hash_position(digest: str) -> float:
    """Where a content hash lies in [0, 1): its first 13 hex digits read as a binary fraction
    (uniform; 52 bits, so the float is exact and never rounds up to 1.0)."""
    return int(digest[:13], 16) / 16**13


def problems_record(problems: Sequence[Problem]) -> dict[str, Any]:
    """What an adapter stores about a set of problems it was trained or selected on (JSON-ready):
    ``{"count": n distinct, "digest": problems_digest, "content_hashes": sorted hashes}``."""
    hashes = sorted(set(content_hashes(problems)))
    return {"count": len(hashes), "digest": problems_digest(hashes), "content_hashes": hashes}


def problems_in(problems: Iterable[Problem], hashes: Iterable[str]) -> list[Problem]:
    """The problems whose content hash is among ``hashes`` (e.g. the hashes an adapter recorded
    for its training and selection problems), in order: what ``evaluate`` must not score it on."""
    recorded = set(hashes)
    return [p for p in problems if content_hash(p) in recorded]


# --------------------------------------------------------------------------- file-based splits


@dataclass(frozen=True)
class SplitSource:
    """Where one split comes from: the problems of ``path`` whose content hash lies in ``band``."""

    path: Path
    """The data file."""
    band: tuple[float, float] = (0.0, 1.0)
    """``[low, high)`` of hash space (see :func:`hash_position`); ``(0, 1)`` is the whole file."""

    def __post_init__(self) -> None:
        low, high = self.band
        if not 0.0 <= low < high <= 1.0:
            raise ValueError(f"a split's hash band must satisfy 0 <= low < high <= 1, got {self.band}")

    @property
    def whole_file(self) -> bool:
        return self.band == (0.0, 1.0)

    def holds(self, digest: str) -> bool:
        """Whether the problem with content hash ``digest`` belongs to this split."""
        return self.band[0] <= hash_position(digest) < self.band[1]

    def describe(self) -> str:
        """``path`` alone, or ``path [hash band 10%-100%]`` for part of a file."""
        if self.whole_file:
            return str(self.path)
        return f"{self.path} [hash band {self.band[0]:.0%}-{self.band[1]:.0%}]"
