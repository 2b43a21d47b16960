"""The reward path on hostile answers: bounded in time and in the trainer's memory, unsettled
outcomes never kept as final scores, stdout alone judged for stdin/stdout tasks."""

from __future__ import annotations

import json
import os
import time
import tracemalloc

import pytest

from decoding_adapters.sandbox.functions import MAX_ANSWER_BYTES, FunctionSession, parse_literal
from decoding_adapters.sandbox.runner import SandboxConfig
from decoding_adapters.tasks import pyfunc as pyfunc_module
from decoding_adapters.tasks.code import CodeContestsTask, HumanEvalTask
from decoding_adapters.tasks.pyfunc import PyFuncTask, RunReport

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the sandbox needs POSIX")

TIMEOUT_S = 4.0
P = 2**61 - 1
"""Every multiple of this prime hashes to 0 in CPython: a set of them is built in quadratic time
(38,000 of them, ~950 KB of text: 11 s with the GIL held where nothing bounds the answer)."""


def answer_with_repr(text_expression: str) -> str:
    """Code defining ``f`` whose return value's repr is ``text_expression`` (evaluated in the
    sandbox): the program never builds the object the text describes."""
    return (
        "class _Answer:\n"
        f"    text = {text_expression}\n"
        "    def __repr__(self):\n"
        "        return self.text\n"
        "def f(*args):\n"
        "    return _Answer()\n"
    )


COLLIDING_SET = answer_with_repr(f"'set([' + ', '.join(str({P} * k) for k in range(1, 38001)) + '])'")
HALF_MEGABYTE_OF_ONES = answer_with_repr("'[' + '1,' * (2**18) + ']'")  # 512 KiB: under the stream cap


def test_a_hash_colliding_set_is_refused_without_stalling_the_caller():
    config = SandboxConfig(timeout_s=TIMEOUT_S)
    start = time.monotonic()
    with FunctionSession(COLLIDING_SET, "f", config) as session:
        outcome = session.call_outcome()
    assert time.monotonic() - start < TIMEOUT_S + 1.0
    assert not outcome.ok and outcome.error.startswith("output limit"), outcome.error
    assert session.result.status == "output_limit"


def test_a_half_megabyte_answer_costs_the_trainer_little_memory():
    tracemalloc.start()
    try:
        with FunctionSession(HALF_MEGABYTE_OF_ONES, "f", SandboxConfig(timeout_s=TIMEOUT_S)) as session:
            outcome = session.call_outcome()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not outcome.ok and outcome.error.startswith("output limit")
    assert peak < 64 * 2**20, f"{peak / 2**20:.0f} MiB"


def test_the_largest_answer_still_parses_quickly():
    # The worst answer under the cap: as many colliding integers as fit. It must parse (an honest
    # large set is fine) and does so in a few tens of milliseconds (quadratic in ~1,400 items).
    items, size = [], 6
    while size + len(str(P * (len(items) + 1))) + 2 < MAX_ANSWER_BYTES:
        items.append(str(P * (len(items) + 1)))
        size += len(items[-1]) + 2
    text = "set([" + ", ".join(items) + "])"
    assert len(parse_literal(text)) == len(items)
    with pytest.raises(ValueError, match="over the limit"):
        parse_literal(text + " " * MAX_ANSWER_BYTES)


def test_humaneval_reward_on_hostile_answers_is_bounded():
    task = HumanEvalTask(timeout_s=TIMEOUT_S)
    problem = next(p for p in task.load("test") if p.id == "HumanEval/0")
    for code in (COLLIDING_SET, HALF_MEGABYTE_OF_ONES):
        completion = "```python\n" + code.replace("def f(", "def has_close_elements(") + "```"
        start = time.monotonic()
        assert task.reward(problem, completion) == 0.0
        assert time.monotonic() - start < TIMEOUT_S + 1.0


def test_unsettled_outcomes_are_never_cached():
    # A run that timed out (a busy host, a hostile neighbour) must be run again next time, not
    # remembered as 0.0; a settled outcome is kept.
    task = PyFuncTask(timeout_s=TIMEOUT_S)
    problem = task.load("test")[0]
    name = problem.meta["entry_point"]
    passing = tuple({"value": value} for value in problem.meta["expected"])
    replies = [RunReport(None, "timeout"), RunReport(None, "memory"), RunReport(None, "error"),
               RunReport(None, "setup_failed"), RunReport(passing, "ok")]
    calls = []

    def fake_run(code, entry_point, inputs, config):
        calls.append(code)
        return replies[len(calls) - 1]

    original = pyfunc_module.run_candidate
    pyfunc_module.run_candidate = fake_run
    try:
        completion = f"```python\ndef {name}(*args):\n    return None\n```"
        assert [task.reward(problem, completion) for _ in range(5)] == [0.0, 0.0, 0.0, 0.0, 1.0]
        assert task.reward(problem, completion) == 1.0 and len(calls) == 5  # the settled one is cached
    finally:
        pyfunc_module.run_candidate = original


def test_codecontests_judges_stdout_alone(tmp_path):
    record = {"description": "Print a + b.", "public_tests": {"input": ["1 2\n"], "output": ["3\n"]}}
    path = tmp_path / "sum.jsonl"
    path.write_text(json.dumps(record) + "\n")
    task = CodeContestsTask(data={"test": path}, timeout_s=TIMEOUT_S)
    problem = task.load("test")[0]
    chatty = (
        "```python\nimport sys\nsys.stderr.write('debug\\n' * 50_000)\n"  # 300 KB of stderr
        "a, b = map(int, input().split())\nprint(a + b)\n```"
    )
    assert task.reward(problem, chatty) == 1.0
    flooding = "```python\nimport sys\nprint(3)\nsys.stdout.write('3\\n' * 10**6)\n```"
    assert task.reward(problem, flooding) == 0.0
