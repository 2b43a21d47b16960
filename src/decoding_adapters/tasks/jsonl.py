"""``jsonl``: your own task from JSONL files and a verifier function, without touching the package.

    get_task("jsonl", data={"train": "train.jsonl", "test": "test.jsonl"}, verifier="mypkg.check:score")
    get_task("jsonl", data="train=train.jsonl,test=test.jsonl", verifier="mypkg.check:score")  # CLI form

Data: one JSON object per line with a question and a gold answer (field names ``question`` and
``answer`` by default; ``question_field=`` / ``answer_field=`` rename them). A question spread over
several fields is put together by ``question_template=`` (``"{Body} {Question}"``: Python format
fields naming JSONL fields). An ``id`` field, when present, names the problem; every other field is
kept in ``Problem.meta``. ``data=`` is one path
(used for every split), a mapping split -> path, or the string ``"train=a.jsonl,test=b.jsonl"``.

Verifier: ``verifier(completion, answer) -> float`` (or ``verifier(completion, answer, row)``, which
also receives the problem's whole JSONL row as a dict), returning 1.0 for a correct completion and
0.0 otherwise (booleans are fine; partial credit in [0, 1] is kept; anything else is clipped to
[0, 1], and NaN counts as 0). Give it as ``"module:function"`` (importable from the current
directory or ``PYTHONPATH``), or as a Python callable. Without one, :func:`exact_match` is used.

**A verifier never crashes a run.** It runs in a separate worker *process* (a small script speaking
JSON lines over pipes, started when the task is made or on first use, and reused): a verifier that
raises counts as 0.0 with a logged warning; one that runs longer than ``verifier_timeout_s``
(default 10 s) or kills its process counts as 0.0 with a warning, and its process is killed and
started again for the next call. The verifier's module is imported only there, never in the calling
process (its top-level code runs under the worker's caps, and its prints go to stderr): the worker
says whether the spec names a callable when the task is made, and runs the verifier's companions
(``answer_complete`` below) on request. The worker talks to training over pipes of its own (fd 1 is
pointed at stderr, so neither a print nor a child process can write into the channel; a reply that
is not one JSON line scores 0 with a warning), has an address-space cap and a process cap
(``VERIFIER_MEMORY_MB``, ``VERIFIER_MAX_PROCESSES``; for the worker and all its children together
where the host gives it a control group, see ``sandbox.cgroups.helper_control_group``), and dies with
training. A process, not a thread, because a hung thread can be neither stopped nor prevented from
holding the GIL (a catastrophic regex does), and it keeps burning a core. The one exception: a
Python callable that cannot be imported by name (a lambda, a function defined in ``__main__``) runs
in a worker *thread* with the same timeout — it still scores 0 after the timeout, but the thread
cannot be killed — so prefer a module-level function in an importable module.

The stop at the first answer (``answer_complete``) follows the verifier: ``exact`` (the default)
stops at a closed ``\\boxed{}``, ``math`` at a boxed or ``Answer: X`` line ended by a newline,
``numeric`` at the first complete number after an answer cue ("= 43.", "answer is 43 ") or at the
end of a line (the number the extraction would read if the completion ended there). A verifier of
your own may supply its check as an attribute ``answer_complete(text) -> bool`` of the function
(``score.answer_complete = ...``) or a function ``<name>_answer_complete`` beside it in its module;
without one the stop is off (:attr:`JsonlTask.answer_check` is None, and the draft tables and the
adapter say so).

The answer a vote counts (``extract_answer``: the fixed rules, the attempt policy and ``generate``'s
``answer`` group samples by it) follows the verifier too: ``exact`` reads the last box or line
(stripped, case-folded), ``math`` the normalised final answer, ``numeric`` the number (``"1,000"``,
``"$1000"`` and ``"1000.0"`` are one answer; a ratio or time when the gold is one). A verifier of
your own supplies its reader the same way, as ``answer_key(completion) -> str`` (an attribute or
``<name>_answer_key`` beside it); without one a sample's answer is its whole stripped completion.

With ``numeric``, a gold answer is read whole (a number, a fraction "-(1/3)", a ratio "3:4", a time
"3:30 p.m."); rows whose gold states no number or several ("Yes", "3 and 4") could never score and
are refused when the split is loaded, with one warning that counts them.

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
import re
import select
import string
import subprocess
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Union

from ..sandbox.cgroups import helper_control_group, release_control_group
from ._verifier_worker import wants_meta
from .arithmetic import arithmetic_answer_complete
from .base import (
    SPLITS,
    Problem,
    SplitSource,
    Task,
    chat_messages,
    content_hash,
    normalise_data_spec,
    read_jsonl,
    register_task,
    resolve_system_prompt,
    validate_data_option,
)
from .math import (
    extract_boxed,
    final_answer_complete,
    gsm8k_gold,
    has_closed_box,
    math_answer_key,
    numeric_answer_key,
    read_numeric,
)
from .splits import load_planned_split, plan_splits

log = logging.getLogger(__name__)

__all__ = ["JsonlTask", "exact_match", "exact_answer_key", "numeric_answer_complete", "template_fields",
           "VerifierRunner", "NAMED_VERIFIERS"]

WORKER_SCRIPT = Path(__file__).with_name("_verifier_worker.py")

VERIFIER_MEMORY_MB = 2048
"""Address space of the verifier's worker process (and, where the host gives a control group,
the memory of the worker and all its children together), in MiB."""
VERIFIER_MAX_PROCESSES = 32
"""Processes (and threads) the verifier may start besides its worker."""
MAX_REPLY_BYTES = 4096
"""Longest reply line the worker may send (a score or an error message); longer is garbage."""
LOG_FIRST_FAILURES = 10

Verifier = Union[str, Callable[..., Any], None]


def _exact_norm(text: str) -> str:
    return text.strip().rstrip(".").strip().casefold()


def exact_answer_key(completion: str) -> str:
    """The answer :func:`exact_match` reads: the completion's last ``\\boxed{...}``, else its last
    non-empty line, stripped, trailing period removed, case-folded ("" when there is none)."""
    text = extract_boxed(completion)
    if text is None:
        lines = [line.strip() for line in completion.strip().splitlines() if line.strip()]
        text = lines[-1] if lines else ""
    return _exact_norm(text)


def exact_match(completion: str, answer: str) -> float:
    """The default verifier: the completion's last non-empty line (or its last ``\\boxed{...}``),
    stripped, trailing period removed, case-insensitive, equals the gold answer."""
    key = exact_answer_key(completion)
    return float(bool(key) and key == _exact_norm(answer))


NAMED_VERIFIERS: dict[str, str] = {
    "exact": "decoding_adapters.tasks.jsonl:exact_match",
    "math": "decoding_adapters.tasks.math:score_math",
    "numeric": "decoding_adapters.tasks.math:score_gsm8k",
}
"""The project's own checkers by name: ``exact`` (the default), ``math`` (the math task's answer
extraction and math-verify) and ``numeric`` (the last number or final answer, compared as a number)."""


# A number that ends its line: "70 - 27 = 43\n", "The total is $43.\n" (the extraction's last
# number, were the completion to end there).
_NUMBER_ENDS_LINE = re.compile(r"\d[ \t]*[*$%]*\.?[ \t]*\n")


def numeric_answer_complete(text: str) -> bool:
    """The ``numeric`` verifier's stop: ``text`` (a completion so far) holds a finished answer that
    the extraction reads — a closed ``\\boxed{}`` or ``####`` / "answer is" line ended by a newline,
    a number after "=", "equals", "answer is" or "####" that a non-digit follows ("= 43 apples",
    "answer is 43."; not "= 4" that may become 43), or a line that ends in a number and a newline.
    Linear in the text's length."""
    if final_answer_complete(text) or arithmetic_answer_complete(text):
        return True
    return _NUMBER_ENDS_LINE.search(text) is not None


def template_fields(template: str) -> tuple[str, ...]:
    """The JSONL fields a question template names (``"{Body} {Question}"`` -> ``("Body", "Question")``);
    ValueError for a template that names none or is not a format string."""
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as err:
        raise ValueError(f"question template {template!r}: {err}") from None
    if not names or any(not n or not n.replace("_", "").replace("-", "").replace(" ", "").isalnum() for n in names):
        raise ValueError(f"question template {template!r} must name JSONL fields in braces, "
                         "e.g. '{Body} {Question}'")
    return tuple(dict.fromkeys(names))


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
    """Fail early with one clear line when ``spec`` is not ``module:function``. The module is not
    imported here (its top-level code would run in this process, uncapped, writing to the real
    stdout): ``VerifierRunner.describe`` loads it in the worker and says whether it names a callable."""
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        raise ValueError(
            f"verifier must be 'module:function' (e.g. mypkg.check:score) or one of {', '.join(NAMED_VERIFIERS)}, "
            f"got {spec!r}"
        )
    if os.getcwd() not in sys.path and "" not in sys.path:
        # `module:function` from the current folder, whatever folder the running script is in (the
        # worker sees this process's sys.path)
        sys.path.append(os.getcwd())


class _WorkerFunction:
    """A companion of a ``module:function`` verifier (its ``answer_complete``, ...) run in the
    verifier's worker process; raises ``RuntimeError`` where the call fails there."""

    def __init__(self, runner: "VerifierRunner", name: str, qualified: str):
        self.runner, self.name = runner, name
        self.__module__, _, self.__qualname__ = qualified.partition(":")

    def __call__(self, *args):
        return self.runner.call(self.name, args)


class VerifierRunner:
    """Runs a verifier with a time bound; every failure becomes ``(0.0, reason)``, never an exception.

    ``spec`` (``module:function``) runs in a reusable worker process; ``fn`` (a callable that cannot
    be imported by name) runs in a worker thread. Thread-safe (one call at a time)."""

    def __init__(self, spec: str | None = None, fn: Callable | None = None, timeout_s: float = 10.0,
                 memory_mb: int = VERIFIER_MEMORY_MB, max_processes: int = VERIFIER_MAX_PROCESSES):
        if (spec is None) == (fn is None):
            raise ValueError("give exactly one of spec (module:function) or fn (a callable)")
        for name, value in (("memory_mb", memory_mb), ("max_processes", max_processes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"verifier {name} must be an integer >= 1, got {value!r}")
        self.spec, self.fn, self.timeout_s = spec, fn, float(timeout_s)
        self.memory_mb, self.max_processes = memory_mb, max_processes
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._buffer = b""  # bytes of a reply line not complete yet
        # the live worker, its control group and the parent's pipe ends, shared with the finalizer
        # (which must not hold self)
        self._procs: list = [None, None, None, None, None]
        weakref.finalize(self, VerifierRunner._kill, self._procs)

    def __call__(self, completion: str, answer: str, meta: dict) -> tuple[float, str | None]:
        with self._lock:
            return (
                self._call_process(completion, answer, meta)
                if self.spec
                else self._call_thread(completion, answer, meta)
            )

    def describe(self, names: tuple[str, ...] = ()) -> dict[str, str | None]:
        """Load the verifier in the worker (a ``ValueError`` in one line where it names no callable);
        per name of ``names``, its companion's ``module:qualname`` there, or None."""
        with self._lock:
            reply, failure = self._exchange({"describe": list(names)})
        if failure is not None or not isinstance(reply.get("companions"), dict):
            failure = failure or "the verifier process answered garbage"
            reason = failure.split(": ", 1)[1] if failure.startswith("cannot load verifier") else failure
            raise ValueError(f"verifier {self.spec!r}: {reason}")
        return reply["companions"]

    def call(self, name: str, args: tuple) -> Any:
        """The value of the verifier's companion ``name`` (``describe`` found it) on ``args``, computed
        in the worker; ``RuntimeError`` where it fails there."""
        with self._lock:
            reply, failure = self._exchange({"call": name, "args": list(args)})
        if failure is not None or "value" not in reply:
            raise RuntimeError(f"verifier {self.spec!r}, {name}: {failure or 'no value'}")
        return reply["value"]

    # ---- process ------------------------------------------------------------------------------
    def _start(self) -> subprocess.Popen:
        env = dict(os.environ)
        # The child sees what this process can import (cwd, pytest's rootdir, sys.path edits).
        paths = [p or os.getcwd() for p in sys.path]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        dirs, procs = helper_control_group(self.memory_mb, self.max_processes)
        requests_r, requests_w = os.pipe()
        replies_r, replies_w = os.pipe()
        lifeline_r, lifeline_w = os.pipe()  # never written: its closing (our exit, or close()) ends the worker
        settings = {"requests": requests_r, "replies": replies_w, "lifeline": lifeline_r, "memory_mb": self.memory_mb,
                    "max_processes": self.max_processes, "cgroup_procs": procs}
        try:
            proc = subprocess.Popen(
                [sys.executable, str(WORKER_SCRIPT), self.spec, json.dumps(settings)],
                stdin=subprocess.DEVNULL,
                stdout=None,
                stderr=None,
                pass_fds=(requests_r, replies_w, lifeline_r),
                env=env,
                start_new_session=True,
            )
        except BaseException:
            for fd in (requests_r, requests_w, replies_r, replies_w, lifeline_r, lifeline_w):
                os.close(fd)
            release_control_group(dirs)
            raise
        for fd in (requests_r, replies_w, lifeline_r):  # the child's ends
            os.close(fd)
        os.set_blocking(requests_w, False)
        os.set_blocking(replies_r, False)
        self._procs[:] = [proc, dirs, requests_w, replies_r, lifeline_w]
        self._buffer = b""
        return proc

    def _call_process(self, completion, answer, meta) -> tuple[float, str | None]:
        reply, failure = self._exchange({"completion": completion, "answer": answer, "meta": meta})
        if failure is not None:
            return 0.0, failure
        try:
            return float(reply["score"]), None
        except (ValueError, TypeError, KeyError):
            self.close()  # its state is unknown: the next call starts a fresh worker
            return 0.0, f"the verifier process answered garbage ({str(reply)[:80]!r}; its process was killed)"

    def _exchange(self, request: dict) -> tuple[dict | None, str | None]:
        """One request to the worker (started when none runs) and its reply, or None and why not
        (the worker's own error, a timeout, its death, garbage: those three kill it). Hold the lock."""
        proc = self._proc if self._proc is not None and self._proc.poll() is None else None
        if proc is None:
            self.close()
            proc = self._proc = self._start()
        deadline = time.monotonic() + self.timeout_s
        data = (json.dumps(request, default=str) + "\n").encode("utf-8")
        try:
            sent = self._send(data, deadline)
            line = self._receive(deadline) if sent else None
        except OSError as err:
            self.close()
            return None, f"the verifier process died ({err})"
        if line is None:
            self.close()
            return None, f"timed out after {self.timeout_s:g} s (its process was killed)"
        if not line:
            code = proc.wait()
            self.close()
            return None, f"the verifier process exited with code {code}"
        try:
            reply = json.loads(line)
            if not isinstance(reply, dict):
                raise TypeError(type(reply).__name__)
        except (ValueError, TypeError):
            self.close()  # its state is unknown: the next call starts a fresh worker
            return None, f"the verifier process answered garbage ({line[:80]!r}; its process was killed)"
        if "error" in reply:
            return None, str(reply["error"])
        return reply, None

    def _send(self, data: bytes, deadline: float) -> bool:
        """Write ``data`` to the request pipe by ``deadline`` (a verifier that stopped reading
        cannot block the caller); False when the time ran out."""
        fd = self._procs[2]
        while data:
            _, ready, _ = select.select([], [fd], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return False
            try:
                data = data[os.write(fd, data):]
            except BlockingIOError:
                continue
        return True

    def _receive(self, deadline: float) -> bytes | None:
        """One reply line from the worker by ``deadline``: None when the time ran out, ``b""`` when
        the worker closed the pipe (it died). A partial line is never taken as a reply."""
        fd = self._procs[3]
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                return b""
            self._buffer += chunk
            if len(self._buffer) > MAX_REPLY_BYTES:
                return self._buffer[:MAX_REPLY_BYTES]  # no reply is this long: garbage, refused by the caller
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

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
        proc, dirs, *fds = procs
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, 9)  # its own session: the verifier's children go too
            except (ProcessLookupError, PermissionError):
                proc.kill()
            proc.wait()
        release_control_group(dirs or [])  # children that left the session are still in its group
        for fd in fds:
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        procs[:] = [None, None, None, None, None]

    def close(self) -> None:
        """Stop the worker (a later call starts a new one)."""
        self._kill(self._procs)
        self._proc = None

    def __getstate__(self):  # a task may be pickled (e.g. to another worker): the process stays here
        return {"spec": self.spec, "fn": self.fn, "timeout_s": self.timeout_s, "memory_mb": self.memory_mb,
                "max_processes": self.max_processes}

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
    question_template: str | None = None
    """The question put together from several fields (``"{Body} {Question}"``); replaces
    ``question_field`` when given."""
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
        self._question_fields = (template_fields(self.question_template) if self.question_template
                                 else (self.question_field,))
        self._companions: dict[str, str | None] = {}  # a module:function verifier's, as its worker names them
        self._runner = self._make_runner(self.verifier)
        self._complete = self._answer_check_fn()
        self._answer_key = self._answer_key_fn()
        self._refused: set[str] = set()  # "split path" whose refused golds were warned about

    def _make_runner(self, verifier: Verifier) -> VerifierRunner:
        if verifier is None:
            verifier = exact_match
        if isinstance(verifier, str) and verifier in NAMED_VERIFIERS:
            verifier = NAMED_VERIFIERS[verifier]
        if isinstance(verifier, str):
            _check_spec(verifier)
            runner = VerifierRunner(spec=verifier, timeout_s=self.verifier_timeout_s)
            self._companions = runner.describe(("answer_complete",))  # it loads, in its worker
            return runner
        if not callable(verifier):
            raise ValueError(f"verifier must be 'module:function' or a callable, got {type(verifier).__name__}")
        name = _importable_name(verifier)
        return (
            VerifierRunner(spec=name, timeout_s=self.verifier_timeout_s)
            if name
            else VerifierRunner(fn=verifier, timeout_s=self.verifier_timeout_s)
        )

    def _answer_check_fn(self) -> Callable[[str], bool] | None:
        """The verifier's "holds a complete answer" check (module docstring), or None (the stop is off)."""
        v = self.verifier
        if v is None or v == "exact" or v is exact_match:
            return has_closed_box
        if v == "numeric":
            return numeric_answer_complete
        if v == "math":
            return final_answer_complete
        return self._verifier_companion("answer_complete")

    def _answer_key_fn(self) -> Callable[[str, str], str] | None:
        """The verifier's answer reader ``(completion, gold) -> str`` (module docstring), or None
        (a verifier of your own without one: the stripped completion is the answer)."""
        v = self.verifier
        if v is None or v == "exact" or v is exact_match:
            return lambda completion, gold: exact_answer_key(completion)
        if v == "numeric":
            return numeric_answer_key
        if v == "math":
            return lambda completion, gold: math_answer_key(completion)
        key = self._verifier_companion("answer_key")
        return None if key is None else (lambda completion, gold: str(key(completion)))

    def _verifier_companion(self, name: str) -> Callable | None:
        """A verifier of your own's ``name`` function: its attribute ``name``, or a function
        ``<verifier>_<name>`` beside it in its module; None when it has neither. For a
        ``module:function`` verifier it is found and run in the verifier's worker (the module is
        never imported in this process)."""
        fn = self.verifier
        if isinstance(fn, str):
            if name not in self._companions:
                self._companions.update(self._runner.describe((name,)))
            qualified = self._companions[name]
            return None if qualified is None else _WorkerFunction(self._runner, name, qualified)
        companion = getattr(fn, name, None)
        return companion if callable(companion) else None

    @property
    def answer_check(self) -> str | None:
        """The name of the stop at the first answer this verifier has (None: off, rows decode to the end)."""
        fn = self._complete
        return None if fn is None else f"{fn.__module__}:{fn.__qualname__}"

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
        if self.verifier == "numeric":
            problems = self._readable_golds(problems, split)
        if self.drop_overlap:
            later = [s for s in self.splits[self.splits.index(split) + 1 :]]
            taken = {content_hash(p) for s in later for p in self.load(s)}
            kept = [p for p in problems if content_hash(p) not in taken]
            if len(kept) < len(problems):
                log.warning("task %s, split %s: dropped %d problem(s) that %s also hold%s (drop_overlap)", self.name,
                            split, len(problems) - len(kept), " / ".join(later), "s" if len(later) == 1 else "")
            problems = kept
        return problems

    def _readable_golds(self, problems: list[Problem], split: str) -> list[Problem]:
        """``problems`` less those whose gold the ``numeric`` verifier cannot read as one value
        (no number, or several: "Yes", "3 and 4"), which could never score; one warning per split
        and file says how many and quotes the first."""
        kept = [p for p in problems if read_numeric(gsm8k_gold(p.answer)) is not None]
        refused = [p for p in problems if read_numeric(gsm8k_gold(p.answer)) is None]
        where = self.split_sources()[split].describe()
        if refused and f"{split} {where}" not in self._refused:
            self._refused.add(f"{split} {where}")
            log.warning("task %s, split %s: refused %d of %d problem(s) whose gold answer the numeric verifier "
                        "cannot read as one number, fraction, ratio or time (first: %s %r) from %s", self.name,
                        split, len(refused), len(problems), self.locate(refused[0]), refused[0].answer, where)
        return kept

    def _read(self, path: Path, split: str) -> list[Problem]:
        lines: list[int] = []
        rows = read_jsonl(path, (*self._question_fields, self.answer_field), line_numbers=lines)
        problems = []
        for i, (row, line) in enumerate(zip(rows, lines)):
            pid = f"{self.name}/{split}/{row.get('id', i)}"
            # a template's fields stay in meta, so that a verifier reading the row sees them
            dropped = (self.answer_field,) if self.question_template else (self.question_field, self.answer_field)
            meta = {k: v for k, v in row.items() if k not in dropped}
            question = (self.question_template.format(**{k: row[k] for k in self._question_fields})
                        if self.question_template else str(row[self.question_field]))
            try:
                problems.append(Problem(pid, question, str(row[self.answer_field]), meta))
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
        row = ({self.answer_field: problem.answer, **problem.meta} if self.question_template else
               {self.question_field: problem.question, self.answer_field: problem.answer, **problem.meta})
        score, failure = self._runner(completion, problem.answer, row)
        if failure is None and not math.isfinite(score):
            failure = f"returned {score}"
        if failure is not None:
            self._warn(problem, failure)
            return 0.0
        return min(max(score, 0.0), 1.0)

    def extract_answer(self, problem: Problem, completion: str) -> str:
        """The answer the verifier reads (module docstring): the number for ``numeric``, the
        normalised expression for ``math``, the stripped last line or box for ``exact``; a verifier
        of your own's ``answer_key``, else the stripped completion. Never raises."""
        if self._answer_key is None:
            return completion.strip()
        try:
            return self._answer_key(completion, problem.answer)
        except Exception:  # a user's reader must not end a decode: no answer
            return ""

    def answer_complete(self, problem: Problem, text: str) -> bool:
        """The verifier's check (module docstring); never where it has none. Never raises."""
        if self._complete is None:
            return False
        try:
            return bool(self._complete(text))
        except Exception:  # a user's check must not end a decode
            return False

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
