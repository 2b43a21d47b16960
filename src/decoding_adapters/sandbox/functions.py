"""Calling a function of untrusted code: its arguments go in, literal values come back.

The verdict on a program must come from something the program cannot reach. So the untrusted
process (a sandboxed run of :mod:`~decoding_adapters.sandbox.runner`) only ever receives *inputs*
(a function's arguments) and returns *values*; the expected values and the comparison stay in the
caller's process. Values come back as ``repr`` text that the caller parses with
:func:`parse_literal` (literals only: no code runs, no object of the program's making, so no
``__eq__`` that is always True). :func:`call_function` makes a list of calls; a
:class:`FunctionSession` is the conversation itself, whose ``candidate`` stands in for the function
in trusted test code (HumanEval's ``check(candidate)``). Answers are read up to
:data:`MAX_ANSWER_BYTES` each, so parsing one costs the caller a bounded time and memory.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from .runner import ExecutionResult, Layers, SandboxConfig, _map_bounded, _Run, _to_result


class CandidateError(Exception):
    """A call to the sandboxed function did not return a value (it raised, the program ended,
    time ran out, or its answer was not a literal)."""


@dataclass(frozen=True)
class CallOutcome:
    """What one call of the sandboxed function gave."""

    ok: bool
    """True when the call returned a value that parsed as a literal."""
    value: Any = None
    """The returned value (a Python literal: numbers, strings, bytes, tuples, lists, dicts, sets,
    None, booleans; floats include inf and nan), when ``ok``."""
    error: str | None = None
    """Why there is no value ("ValueError: ...", "timeout", "the program ended", ...)."""


@dataclass(frozen=True)
class CallResult:
    """The calls of one program, made in one sandboxed process."""

    outcomes: tuple[CallOutcome, ...]
    """One per call, in order."""
    execution: ExecutionResult
    """How the process ran (status, the program's own output on stderr, active layers)."""

    @property
    def values(self) -> list[Any]:
        """The returned values (None where a call failed)."""
        return [outcome.value for outcome in self.outcomes]

    @property
    def errors(self) -> list[str | None]:
        """Per call, None or why it gave no value."""
        return [outcome.error for outcome in self.outcomes]

    @property
    def layers(self) -> Layers:
        """The isolation layers that were active for the run."""
        return self.execution.layers


Call = tuple
"""The positional arguments of one call, e.g. ``(2, 3)`` for ``f(2, 3)``."""


def call_function(
    code: str, entry_point: str, calls: Sequence[Call], config: SandboxConfig | None = None
) -> CallResult:
    """Define ``code`` in a sandboxed process and call ``entry_point(*args)`` for each of ``calls``.

    Arguments go in as ``repr`` text (so they must be literals); each call gets fresh copies.
    A failing call does not stop the next ones; a program that ends or runs out of time fails
    the calls left. Compare ``result.values`` with the expected values yourself.
    """
    config = config or SandboxConfig()
    with FunctionSession(code, entry_point, config) as session:
        outcomes = tuple(session.call_outcome(*args) for args in calls)
    return CallResult(outcomes, session.result)


def call_function_batch(
    jobs: Sequence[tuple[str, str, Sequence[Call]]], config: SandboxConfig | None = None, workers: int = 2
) -> list[CallResult]:
    """:func:`call_function` for many ``(code, entry_point, calls)`` jobs, ``workers`` processes
    at a time (our machines have 2 cores), results in the order of ``jobs``."""
    return _map_bounded(lambda job: call_function(*job, config=config), jobs, workers)


class FunctionSession:
    """A conversation with one sandboxed process that defines a function.

    ``session.candidate`` is a stand-in for the function in trusted test code that runs here,
    in the caller (HumanEval's ``check(candidate)``): each call sends its arguments to the
    program, which calls the function and answers with the ``repr`` of the value; the stand-in
    returns the parsed literal or raises :class:`CandidateError`. One call at a time, so the
    program never sees later arguments. Use as a context manager; ``result`` is the run's
    :class:`ExecutionResult` once closed.
    """

    def __init__(self, code: str, entry_point: str, config: SandboxConfig | None = None) -> None:
        if not (isinstance(entry_point, str) and entry_point.isidentifier()):
            raise ValueError(f"entry_point must be a Python identifier, got {entry_point!r}")
        self.config = config or SandboxConfig()
        # Room for the answers (each at most MAX_ANSWER_BYTES); the program's own prints go to
        # stderr (see _FUNCTION_DRIVER).
        run_config = replace(self.config, max_output_bytes=max(self.config.max_output_bytes, 2**20))
        self._run = _Run(_FUNCTION_DRIVER, run_config, files={"solution.py": code, "entry_point.txt": entry_point})
        self._dead: str | None = None
        self.result: ExecutionResult | None = None

    def __enter__(self) -> FunctionSession:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> ExecutionResult:
        """End the program (stdin closes, it exits) and return how it ran."""
        if self.result is None:
            self.result = _to_result(self._run.finish(), self._run.config)
        return self.result

    def candidate(self, *args, **kwargs) -> Any:
        """Call the sandboxed function; its value, or :class:`CandidateError`."""
        outcome = self.call_outcome(*args, **kwargs)
        if not outcome.ok:
            raise CandidateError(outcome.error)
        return outcome.value

    def call_outcome(self, *args, **kwargs) -> CallOutcome:
        """Call the sandboxed function and report what happened (never raises for the program)."""
        if self.result is not None:
            raise RuntimeError("the session is closed")
        if self._dead is not None:
            return CallOutcome(False, error=self._dead)
        request = repr((args, kwargs))
        try:
            parse_literal(request, max_chars=2**20)  # the program must get exactly these values back (trusted)
        except ValueError as err:
            raise ValueError(f"arguments must be Python literals: {err}") from None
        self._run.send(request.encode("utf-8", "surrogatepass") + b"\n")
        line = self._run.read_line(max_bytes=MAX_ANSWER_BYTES)
        if line is None:
            self._dead = self._why_no_answer()
            return CallOutcome(False, error=self._dead)
        try:
            kind, text = parse_literal(line.decode("utf-8", "replace"), max_chars=MAX_ANSWER_BYTES)
            if not (isinstance(kind, str) and isinstance(text, str)):
                raise ValueError("not a (kind, text) pair")
        except (ValueError, TypeError) as err:
            return CallOutcome(False, error=f"unreadable answer from the program: {err}")
        if kind == "ok":
            try:
                return CallOutcome(True, value=parse_literal(text, max_chars=MAX_ANSWER_BYTES))
            except ValueError as err:
                return CallOutcome(False, error=f"the value is not a literal: {err}")
        if kind == "load_error":
            self._dead = f"the code did not load: {text}"
        return CallOutcome(False, error=self._dead or text)

    def _why_no_answer(self) -> str:
        run = self._run
        refused = run.refusal()
        if refused is not None:
            return f"the sandbox could not set up {refused.get('layer')}: {refused.get('error')}"
        if run.stopped_for == "output_limit":
            return f"output limit: an answer over {MAX_ANSWER_BYTES} bytes or output over {run.config.max_output_bytes}"
        return "timeout" if run.timed_out else "the program ended before answering"


MAX_ANSWER_BYTES = 32 * 1024
"""Longest answer (one call's value, as ``repr`` text) a :class:`FunctionSession` reads: parsing
costs this process ~500 bytes per byte of answer (``ast`` nodes) and, for a set or dict of keys
that all hash alike, time quadratic in their number; at 32 KiB that is at most ~16 MiB and a few
tens of milliseconds. A longer answer stops the run ("output limit")."""


_LITERAL_NAMES = {"inf": math.inf, "nan": math.nan, "True": True, "False": False, "None": None}


def parse_literal(text: str, max_chars: int = MAX_ANSWER_BYTES) -> Any:
    """The Python literal ``text`` is the ``repr`` of, evaluating no code.

    Like :func:`ast.literal_eval` plus ``inf``/``nan`` (repr of float infinities and NaN),
    ``set()`` and ``frozenset(...)``; raises ValueError for anything else, for text longer than
    ``max_chars`` and for nesting too deep to parse.
    """
    if not isinstance(text, str):
        raise ValueError(f"expected text, got {type(text).__name__}")
    if len(text) > max_chars:
        raise ValueError(f"literal of {len(text)} characters is over the limit of {max_chars}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
        return _literal(tree.body)
    except (SyntaxError, RecursionError, MemoryError, TypeError, OverflowError) as err:
        raise ValueError(f"not a literal ({type(err).__name__}: {err})"[:300]) from None


def _literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Tuple):
        return tuple(map(_literal, node.elts))
    if isinstance(node, ast.List):
        return list(map(_literal, node.elts))
    if isinstance(node, ast.Set):
        return set(map(_literal, node.elts))
    if isinstance(node, ast.Dict):
        if any(key is None for key in node.keys):
            raise ValueError("** in a dict is not a literal")
        return dict(zip(map(_literal, node.keys), map(_literal, node.values)))
    if isinstance(node, ast.Name) and node.id in _LITERAL_NAMES:
        return _LITERAL_NAMES[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _literal(node.operand)
        if isinstance(operand, (int, float, complex)) and not isinstance(operand, bool):
            return -operand if isinstance(node.op, ast.USub) else +operand
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        # repr of a complex number: (1+2j), (-0-1j)
        left, right = _literal(node.left), _literal(node.right)
        if isinstance(left, (int, float)) and isinstance(right, complex) and not isinstance(left, bool):
            return left + right if isinstance(node.op, ast.Add) else left - right
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        return _literal_call(node)
    raise ValueError(f"not a literal: {ast.dump(node)[:80]}")


def _literal_call(node: ast.Call) -> Any:
    """The calls a ``repr`` may hold: ``set()``, ``set([...])``, ``frozenset(...)``, ``float("inf")``."""
    if node.func.id in ("set", "frozenset") and len(node.args) <= 1:
        items = _literal(node.args[0]) if node.args else ()
        if isinstance(items, (list, tuple, set, frozenset)):
            return (set if node.func.id == "set" else frozenset)(items)
    if node.func.id == "float" and len(node.args) == 1 and isinstance(node.args[0], ast.Constant):
        if node.args[0].value in ("inf", "-inf", "nan"):
            return float(node.args[0].value)
    raise ValueError(f"not a literal: {ast.dump(node)[:80]}")


# The program a FunctionSession runs. It keeps the conversation on private copies of stdin and
# stdout, then points fd 0 at /dev/null and fd 1 at stderr, so the code's input() and print()
# cannot disturb it. The code is trusted with nothing: it may tamper with this driver, but all it
# can change is the values sent back, which the caller checks.
_FUNCTION_DRIVER = r"""
import os, sys
_requests = os.fdopen(os.dup(0), "r", encoding="utf-8", errors="surrogatepass", newline="\n")
_answers = os.fdopen(os.dup(1), "w", encoding="utf-8", errors="backslashreplace")
os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
os.dup2(2, 1)


def _answer(kind, text):
    _answers.write(repr((kind, text)) + "\n")
    _answers.flush()


def _describe(exc):
    return ("%s: %s" % (type(exc).__name__, exc))[:2000]


with open("entry_point.txt") as _f:
    _entry_point = _f.read()
with open("solution.py") as _f:
    _source = _f.read()
_globals = {"__name__": "solution", "__builtins__": __builtins__}
try:
    exec(compile(_source, "solution.py", "exec"), _globals)
    _function = _globals[_entry_point]
except BaseException as _exc:
    _answer("load_error", _describe(_exc))
    raise SystemExit(0)
_names = {"__builtins__": {}, "inf": float("inf"), "nan": float("nan"), "set": set, "frozenset": frozenset}
for _line in _requests:
    try:
        _args, _kwargs = eval(_line, _names)
        _answer("ok", repr(_function(*_args, **_kwargs)))
    except BaseException as _exc:  # SystemExit and KeyboardInterrupt from the code too
        _answer("error", _describe(_exc))
"""
