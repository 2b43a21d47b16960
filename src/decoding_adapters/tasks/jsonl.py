"""``jsonl``: your own task from JSONL files and a verifier function, without touching the package.

    get_task("jsonl", data={"train": "train.jsonl", "test": "test.jsonl"}, verifier="mypkg.check:score")
    get_task("jsonl", data="train=train.jsonl,test=test.jsonl", verifier="mypkg.check:score")  # CLI form

Data: one JSON object per line with a question and a gold answer (field names ``question`` and
``answer`` by default; ``question_field=`` / ``answer_field=`` rename them). An ``id`` field, when
present, names the problem; every other field is kept in ``Problem.meta``. ``data=`` is one path
(used for every split), a mapping split -> path, or the string ``"train=a.jsonl,test=b.jsonl"``.

Verifier: ``verifier(completion, answer) -> float`` (or ``verifier(completion, answer, row)``, which
also receives the problem's whole JSONL row as a dict), returning 1.0 for a correct completion and
0.0 otherwise (booleans are fine; partial credit in [0, 1] is kept; anything else is clipped to
[0, 1], and NaN counts as 0). Give it as ``"module:function"`` (importable from the current
directory or ``PYTHONPATH``), or as a Python callable. Without one, :func:`exact_match` is used.

**A verifier never crashes a run.** It runs in a separate worker *process* (a small script
speaking JSON lines over pipes, started on first use and reused): a verifier that raises counts as
0.0 with a logged warning; one that runs longer than ``verifier_timeout_s`` (default 10 s) or kills
its process counts as 0.0 with a warning, and its process is killed and started again for the next
call. A process, not a thread, because a hung thread can be neither stopped nor prevented from
holding the GIL (a catastrophic regex does), and it keeps burning a core. The one exception: a
Python callable that cannot be imported by name (a lambda, a function defined in ``__main__``) runs
in a worker *thread* with the same timeout — it still scores 0 after the timeout, but the thread
cannot be killed — so prefer a module-level function in an importable module.

Warnings: the first ``10`` failures are logged one by one, then every 100th with a count, so a
broken verifier does not flood the log; ``task.verifier_failures`` counts them all.
"""

from __future__ import annotations

import concurrent.futures
import importlib
import json
import logging
import math
import os
import select
import subprocess
import sys
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Union

from ._verifier_worker import wants_meta
from .base import (
    SPLITS,
    Problem,
    SplitSource,
    Task,
    chat_messages,
    content_hash,
    load_planned_split,
    normalise_data_spec,
    plan_splits,
    read_jsonl,
    register_task,
    resolve_system_prompt,
    validate_data_option,
)
from .math import extract_boxed, has_closed_box

log = logging.getLogger(__name__)

__all__ = ["JsonlTask", "exact_match", "VerifierRunner", "NAMED_VERIFIERS"]

WORKER_SCRIPT = Path(__file__).with_name("_verifier_worker.py")
LOG_FIRST_FAILURES = 10

Verifier = Union[str, Callable[..., Any], None]


def exact_match(completion: str, answer: str) -> float:
    """The default verifier: the completion's last non-empty line (or its last ``\\boxed{...}``),
    stripped, trailing period removed, case-insensitive, equals the gold answer."""
    text = extract_boxed(completion)
    if text is None:
        lines = [line.strip() for line in completion.strip().splitlines() if line.strip()]
        text = lines[-1] if lines else ""
    norm = lambda s: s.strip().rstrip(".").strip().casefold()  # noqa: E731
    return float(bool(text) and norm(text) == norm(answer))


NAMED_VERIFIERS: dict[str, str] = {
    "exact": "decoding_adapters.tasks.jsonl:exact_match",
    "math": "decoding_adapters.tasks.math:score_math",
    "numeric": "decoding_adapters.tasks.math:score_gsm8k",
}
"""The project's own checkers by name: ``exact`` (the default), ``math`` (the math task's answer
extraction and math-verify) and ``numeric`` (the last number or final answer, compared as a number)."""


def _importable_name(fn: Callable) -> str | None:
    """``module:qualname`` if ``fn`` can be imported back by that name in a fresh process."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or module == "__main__" or "<" in qualname:
        return None
    try:
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return None
    return f"{module}:{qualname}" if obj is fn else None


def _check_spec(spec: str) -> None:
    """Fail early, in the caller's process, with one clear line when ``spec`` names no callable."""
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        raise ValueError(
            f"verifier must be 'module:function' (e.g. mypkg.check:score) or one of {', '.join(NAMED_VERIFIERS)}, "
            f"got {spec!r}"
        )
    if os.getcwd() not in sys.path and "" not in sys.path:
        # `module:function` from the current folder, whatever folder the running script is in
        sys.path.append(os.getcwd())
    try:
        obj = importlib.import_module(module)
    except ImportError as err:
        raise ValueError(
            f"verifier {spec!r}: cannot import module {module!r} ({err}); is its folder the current "
            f"directory or on PYTHONPATH?"
        ) from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"verifier {spec!r}: module {module!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"verifier {spec!r} is not callable")


class VerifierRunner:
    """Runs a verifier with a time bound; every failure becomes ``(0.0, reason)``, never an exception.

    ``spec`` (``module:function``) runs in a reusable worker process; ``fn`` (a callable that cannot
    be imported by name) runs in a worker thread. Thread-safe (one call at a time)."""

    def __init__(self, spec: str | None = None, fn: Callable | None = None, timeout_s: float = 10.0):
        if (spec is None) == (fn is None):
            raise ValueError("give exactly one of spec (module:function) or fn (a callable)")
        self.spec, self.fn, self.timeout_s = spec, fn, float(timeout_s)
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._procs: list = [None]  # the live worker process, shared with the finalizer (which must not hold self)
        weakref.finalize(self, VerifierRunner._kill, self._procs)

    def __call__(self, completion: str, answer: str, meta: dict) -> tuple[float, str | None]:
        with self._lock:
            return (
                self._call_process(completion, answer, meta)
                if self.spec
                else self._call_thread(completion, answer, meta)
            )

    # ---- process ------------------------------------------------------------------------------
    def _start(self) -> subprocess.Popen:
        env = dict(os.environ)
        # The child sees what this process can import (cwd, pytest's rootdir, sys.path edits).
        paths = [p or os.getcwd() for p in sys.path]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        proc = subprocess.Popen(
            [sys.executable, str(WORKER_SCRIPT), self.spec],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
            text=True,
            bufsize=1,
            env=env,
            start_new_session=True,
        )
        self._procs[0] = proc
        return proc

    def _call_process(self, completion, answer, meta) -> tuple[float, str | None]:
        proc = self._proc if self._proc is not None and self._proc.poll() is None else None
        if proc is None:
            proc = self._proc = self._start()
        try:
            proc.stdin.write(json.dumps({"completion": completion, "answer": answer, "meta": meta}, default=str) + "\n")
            proc.stdin.flush()
            ready, _, _ = select.select([proc.stdout], [], [], self.timeout_s)
            line = proc.stdout.readline() if ready else None
        except (BrokenPipeError, OSError) as err:
            self.close()
            return 0.0, f"the verifier process died ({err})"
        if line is None:
            self.close()
            return 0.0, f"timed out after {self.timeout_s:g} s (its process was killed)"
        if not line:
            code = proc.wait()
            self.close()
            return 0.0, f"the verifier process exited with code {code}"
        reply = json.loads(line)
        return (0.0, reply["error"]) if "error" in reply else (reply["score"], None)

    # ---- thread -------------------------------------------------------------------------------
    def _call_thread(self, completion, answer, meta) -> tuple[float, str | None]:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="verifier")
        args = (completion, answer) + ((meta,) if wants_meta(self.fn) else ())
        future = self._pool.submit(self.fn, *args)
        try:
            return float(future.result(timeout=self.timeout_s)), None
        except concurrent.futures.TimeoutError:
            # The thread cannot be stopped: abandon its pool so later calls are not queued behind it.
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
            return 0.0, f"timed out after {self.timeout_s:g} s (a thread cannot be killed: it may still be running)"
        except Exception as err:
            return 0.0, f"{type(err).__name__}: {err}"

    # ---- cleanup ------------------------------------------------------------------------------
    @staticmethod
    def _kill(procs: list) -> None:
        proc = procs[0]
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, 9)  # its own session: the verifier's children go too
            except (ProcessLookupError, PermissionError):
                proc.kill()
            proc.wait()
        if proc is not None:
            for stream in (proc.stdin, proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
        procs[0] = None

    def close(self) -> None:
        """Stop the worker (a later call starts a new one)."""
        self._kill(self._procs)
        self._proc = None

    def __getstate__(self):  # a task may be pickled (e.g. to another worker): the process stays here
        return {"spec": self.spec, "fn": self.fn, "timeout_s": self.timeout_s}

    def __setstate__(self, state):
        self.__init__(**state)


@register_task("jsonl")
@dataclass
class JsonlTask(Task):
    """A user task: JSONL files of questions and answers, scored by a user verifier (see module docstring)."""

    data: Any = None
    """One JSONL path for every split, a mapping split -> path, or ``"train=a.jsonl,test=b.jsonl"``."""
    verifier: Verifier = None
    """``"module:function"``, a name from :data:`NAMED_VERIFIERS` (``exact``, ``math``, ``numeric``), or a
    callable ``(completion, answer[, row]) -> float``; None = :func:`exact_match`."""
    question_field: str = "question"
    """JSONL field holding the question."""
    answer_field: str = "answer"
    """JSONL field holding the gold answer (converted to a string)."""
    instruction: str | None = None
    """Text appended to every question (e.g. "Answer with a single number."); None = none."""
    system_prompt: str | None = None
    """A preset name from ``SYSTEM_PROMPTS``, literal text, or None (the model's default)."""
    verifier_timeout_s: float = 10.0
    """Longest a single verifier call may take; longer counts as 0.0 (the worker is restarted)."""
    drop_overlap: bool = False
    """Drop from train and validation the problems that a later split also holds (test wins, then
    validation), instead of refusing the overlap."""
    verifier_failures: int = field(default=0, init=False, compare=False)
    """How many verifier calls raised, timed out or died (each scored 0.0)."""

    def __post_init__(self) -> None:
        if self.data is None:
            raise ValueError(
                "task 'jsonl' needs data: --data train=a.jsonl,test=b.jsonl or one JSONL path (from Python, data=)"
            )
        self.data = normalise_data_spec(self.data)
        validate_data_option(self.data, SPLITS)
        self.splits = tuple(self.split_sources())
        self._lines: dict[str, str] = {}  # problem id -> "file:line", for messages
        self.system_prompt = resolve_system_prompt(self.system_prompt)
        if not self.verifier_timeout_s > 0:
            raise ValueError(f"verifier_timeout_s must be > 0, got {self.verifier_timeout_s}")
        self._runner = self._make_runner(self.verifier)

    def _make_runner(self, verifier: Verifier) -> VerifierRunner:
        if verifier is None:
            verifier = exact_match
        if isinstance(verifier, str) and verifier in NAMED_VERIFIERS:
            verifier = NAMED_VERIFIERS[verifier]
        if isinstance(verifier, str):
            _check_spec(verifier)
            return VerifierRunner(spec=verifier, timeout_s=self.verifier_timeout_s)
        if not callable(verifier):
            raise ValueError(f"verifier must be 'module:function' or a callable, got {type(verifier).__name__}")
        name = _importable_name(verifier)
        return (
            VerifierRunner(spec=name, timeout_s=self.verifier_timeout_s)
            if name
            else VerifierRunner(fn=verifier, timeout_s=self.verifier_timeout_s)
        )

    @property
    def verifier_name(self) -> str:
        r = self._runner
        return r.spec if r.spec else getattr(r.fn, "__qualname__", repr(r.fn))

    # ---- Task -----------------------------------------------------------------------------------
    def split_sources(self) -> dict[str, SplitSource]:
        """One path is divided 80/10/10 by content hash; a mapping names a whole file per split."""
        if isinstance(self.data, (str, Path)):
            return plan_splits(self.data, {}, self.name, SPLITS)
        return {s: SplitSource(Path(self.data[s])) for s in SPLITS if s in self.data}

    def load(self, split: str) -> list[Problem]:
        self.check_split(split)
        problems = load_planned_split(self.split_sources(), split, lambda path: self._read(path, split), self.name)
        if self.drop_overlap:
            later = [s for s in self.splits[self.splits.index(split) + 1 :]]
            taken = {content_hash(p) for s in later for p in self.load(s)}
            kept = [p for p in problems if content_hash(p) not in taken]
            if len(kept) < len(problems):
                log.warning("task %s, split %s: dropped %d problem(s) that %s also hold%s (drop_overlap)", self.name,
                            split, len(problems) - len(kept), " / ".join(later), "s" if len(later) == 1 else "")
            problems = kept
        return problems

    def _read(self, path: Path, split: str) -> list[Problem]:
        lines: list[int] = []
        rows = read_jsonl(path, (self.question_field, self.answer_field), line_numbers=lines)
        problems = []
        for i, (row, line) in enumerate(zip(rows, lines)):
            pid = f"{self.name}/{split}/{row.get('id', i)}"
            meta = {k: v for k, v in row.items() if k not in (self.question_field, self.answer_field)}
            try:
                problems.append(Problem(pid, str(row[self.question_field]), str(row[self.answer_field]), meta))
            except ValueError as err:
                raise ValueError(f"{path}:{line}: {err}") from None
            self._lines[pid] = f"{path}:{line}"
        if len({p.id for p in problems}) != len(problems):
            raise ValueError(f"{path}: the 'id' field must be unique within a split")
        return problems

    def locate(self, problem: Problem) -> str:
        return self._lines.get(problem.id, problem.id)

    def prompt(self, problem: Problem, cot: bool = False) -> list[dict[str, str]]:
        parts = [problem.question, "Think step by step." if cot else None, self.instruction]
        return chat_messages(self.system_prompt, "\n\n".join(p for p in parts if p))

    def reward(self, problem: Problem, completion: str) -> float:
        row = {self.question_field: problem.question, self.answer_field: problem.answer, **problem.meta}
        score, failure = self._runner(completion, problem.answer, row)
        if failure is None and not math.isfinite(score):
            failure = f"returned {score}"
        if failure is not None:
            self._warn(problem, failure)
            return 0.0
        return min(max(score, 0.0), 1.0)

    def answer_complete(self, problem: Problem, text: str) -> bool:
        """With the default verifier (:func:`exact_match`, which prefers a boxed answer): a closed
        ``\\boxed{}``. A verifier of your own may read anything: never."""
        return self.verifier is None and has_closed_box(text)

    def _warn(self, problem: Problem, failure: str) -> None:
        self.verifier_failures += 1
        n = self.verifier_failures
        if n <= LOG_FIRST_FAILURES or n % 100 == 0:
            more = " (further failures are logged every 100th)" if n == LOG_FIRST_FAILURES else ""
            log.warning(
                "verifier %s failed on %s, scored 0 (%d failure(s) so far): %s%s",
                self.verifier_name,
                problem.id,
                n,
                failure,
                more,
            )

    def close(self) -> None:
        """Stop the verifier worker (it also stops when the task is garbage-collected or the process exits)."""
        self._runner.close()
