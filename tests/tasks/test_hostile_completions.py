"""Hostile completions against every code task's reward path: no reward call raises, each scores
0.0, and honest completions batched with them keep their rewards. Plus the bounded report cache."""

from __future__ import annotations

import gc
import json
import tracemalloc

import pytest

from decoding_adapters.tasks import pyfunc as pyfunc_module
from decoding_adapters.tasks.code import CodeContestsTask, HumanEvalTask
from decoding_adapters.tasks.jsonl import JsonlTask
from decoding_adapters.tasks.pyfunc import (
    MAX_REPORT_DEPTH,
    PyFuncTask,
    ReportCache,
    RunReport,
    nesting_within,
    parse_report,
)

# --------------------------------------------------------------------------- pyfunc


def forge_report(payload: str) -> str:
    """Code for a pyfunc completion that writes ``payload`` as its report (it can read the run's
    marker and report channel from the harness) and ends the run before the real report."""
    return (
        "import os, sys\n"
        "_main = sys.modules['__main__']\n"
        f"os.write(_main._report_fd, _main.MARKER.encode() + {payload} + b'\\n')\n"
        "os._exit(0)\n"
    )


def pyfunc_hostile(name: str) -> dict[str, str]:
    """Completions for a pyfunc problem whose function is ``name``."""
    body = f"def {name}(*args):\n    return None\n"
    block = "```python\n{}```"
    return {
        "deep report": block.format(forge_report("b'{\"outputs\": ' + b'[' * 30000 + b']' * 30000 + b'}'") + body),
        "report just under the parser's recursion limit": block.format(
            forge_report("b'{\"outputs\": [{\"value\": ' + b'[' * 900 + b']' * 900 + b'}]}'") + body
        ),
        "non-UTF-8 report": block.format(forge_report("b'\\xff\\xfe{\\xc3'") + body),
        "report with a 5000-digit number": block.format(
            forge_report("b'{\"outputs\": [{\"value\": ' + b'9' * 5000 + b'}]}'") + body
        ),
        "lone surrogates": block.format(f"def {name}(*args):\n    return '\\ud800' + '\udcff'\n"),
        "unclosed think tags": "<think>" * 9000,
        "huge return value": block.format(f"def {name}(*args):\n    return [[] for _ in range(10**6)]\n"),
        "nested user namespace": block.format(
            "import ctypes\n"
            "if ctypes.CDLL(None).unshare(0x10000000) != 0:\n"
            "    raise SystemExit('refused')\n" + body
        ),
    }


@pytest.fixture(scope="module")
def pyfunc_task():
    return PyFuncTask(timeout_s=10.0, workers=2)


def test_pyfunc_hostile_batch_keeps_honest_rewards(pyfunc_task):
    problems = pyfunc_task.load("test")[:3]
    honest = [f"```python\n{problem.answer}\n```" for problem in problems]
    alone = pyfunc_task.reward_batch(problems, honest)
    assert alone == [1.0, 1.0, 1.0]
    hostile = pyfunc_hostile(problems[0].meta["entry_point"])
    batch_problems = [problems[0]] * len(hostile) + problems
    batch = list(hostile.values()) + honest
    rewards = pyfunc_task.reward_batch(batch_problems, batch)
    assert rewards[: len(hostile)] == [0.0] * len(hostile), dict(zip(hostile, rewards))
    assert rewards[len(hostile) :] == alone
    for completion in hostile.values():  # and the answers used for voting never raise either
        assert isinstance(pyfunc_task.extract_answer(problems[0], completion), str)


@pytest.mark.parametrize(
    "payload",
    [
        "[" * 100_000 + "]" * 100_000,
        '{"outputs": ' + "[" * 5000 + "]" * 5000 + "}",
        '{"outputs": [' + "[" * (MAX_REPORT_DEPTH + 1) + "]" * (MAX_REPORT_DEPTH + 1) + "]}",
        '{"outputs": [' + "9" * 5000 + "]}",
        '{"outputs": "\ud800',
        '{"outputs": [' + "0," * 200_000 + "0]}",  # over MAX_REPORT_CHARS
    ],
)
def test_parse_report_returns_none_on_hostile_text(payload):
    assert parse_report("noise\n@@m@@" + payload + "\n", "@@m@@") is None


def test_parse_report_accepts_the_deepest_honest_value():
    value = 1
    for _ in range(32):  # the encoder's own limit, with dicts: the most JSON levels per level
        value = {"k": value}
    report = json.dumps({"outputs": [{"value": pyfunc_module.encode_value(value)}]})
    with pytest.raises(TypeError):
        pyfunc_module.encode_value({"k": value})
    assert parse_report("@@m@@" + report, "@@m@@") is not None


def test_nesting_within_is_iterative():
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    assert not nesting_within(deep, 128) and nesting_within([[1], {"a": [2]}], 3)


# --------------------------------------------------------------------------- the report cache


BIG_OUTPUTS = json.dumps([{"value": [[] for _ in range(20_000)]}])
"""~60 KiB of JSON that parses into ~1 MiB of Python objects (empty lists), as a report may."""


def test_the_task_holds_a_bounded_number_of_bytes_of_reports(pyfunc_task, monkeypatch):
    problem = pyfunc_task.load("test")[0]
    name = problem.meta["entry_point"]
    monkeypatch.setattr(pyfunc_task, "_cache", ReportCache(max_bytes=2**20))
    # Each run parses its report afresh, as the sandboxed harness's report is.
    monkeypatch.setattr(pyfunc_module, "run_candidate", lambda *args: RunReport(tuple(json.loads(BIG_OUTPUTS)), "ok"))
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(40):  # 2.4 MiB of JSON, ~45 MiB as Python objects
            pyfunc_task.outputs(problem, f"```python\ndef {name}(x):\n    return {i}\n```")
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    cache = pyfunc_task._cache
    assert cache.nbytes <= 2**20 and 0 < len(cache) < 40
    assert held < 3 * 2**20, held  # the cap plus the dict and the digests
    last = pyfunc_task.outputs(problem, f"```python\ndef {name}(x):\n    return 39\n```")
    assert len(last.outputs[0]["value"]) == 20_000


def test_the_report_cache_keeps_recently_used_entries_and_skips_oversized_ones():
    cache = ReportCache(max_bytes=4000, max_entries=3)
    keys = [ReportCache.key(str(i), "f", "[]") for i in range(4)]
    for key in keys[:3]:
        cache.put(key, RunReport(({"value": 1},), "ok"))
    assert cache.get(keys[0]) is not None  # now the most recently used
    cache.put(keys[3], RunReport(None, "timeout", "x"))
    assert cache.get(keys[1]) is None and cache.get(keys[0]) is not None and len(cache) == 3
    cache.put(ReportCache.key("big", "f", "[]"), RunReport(({"value": "x" * 2000},), "ok"))
    assert cache.get(ReportCache.key("big", "f", "[]")) is None  # over a quarter of the cap: not kept
    assert ReportCache.key("a", "bc", "") != ReportCache.key("ab", "c", "")


def test_pyfunc_task_caches_runs_in_its_bounded_cache(pyfunc_task, monkeypatch):
    problem = pyfunc_task.load("test")[0]
    runs = []

    def fake_run(code, name, inputs, config):
        runs.append(code)
        return RunReport(tuple({"value": None} for _ in inputs), "ok")

    monkeypatch.setattr(pyfunc_module, "run_candidate", fake_run)
    completion = f"```python\ndef {problem.meta['entry_point']}(x):\n    return None\n```"
    pyfunc_task.reward(problem, completion)
    pyfunc_task.extract_answer(problem, completion)
    assert len(runs) == 1 and isinstance(pyfunc_task._cache, ReportCache)


# --------------------------------------------------------------------------- HumanEval


def humaneval_hostile(entry_point: str) -> dict[str, str]:
    forge = "import sys\n_main = sys.modules['__main__']\n"
    return {
        "deep answer": f"```python\n{forge}def {entry_point}(*a):\n"
        "    _main._answers.write('(' * 100000 + ')' * 100000 + '\\n'); _main._answers.flush()\n"
        "    return False\n```",
        "deep literal inside an answer": f"```python\n{forge}def {entry_point}(*a):\n"
        "    _main._answers.write(repr(('ok', '[' * 5000 + ']' * 5000)) + '\\n'); _main._answers.flush()\n"
        "    return False\n```",
        "answer over the output cap": f"```python\ndef {entry_point}(*a):\n    return 'x' * (3 * 2**20)\n```",
        "non-UTF-8 answer": f"```python\n{forge}import os\ndef {entry_point}(*a):\n"
        "    os.write(1, b'\\xff\\xfe\\n')\n    return False\n```",
        "lone surrogates": f"```python\ndef {entry_point}(*a):\n    return '\ud800'\n```",
        "unclosed think tags": "<think>" * 9000,
    }


def test_humaneval_hostile_batch_keeps_honest_rewards():
    task = HumanEvalTask(timeout_s=20.0)
    problems = {p.id: p for p in task.load("test")}
    honest_problems = [problems["HumanEval/0"], problems["HumanEval/2"]]
    honest = [problem.answer for problem in honest_problems]
    alone = task.reward_batch(honest_problems, honest)
    assert alone == [1.0, 1.0]
    hostile = humaneval_hostile("has_close_elements")
    rewards = task.reward_batch([problems["HumanEval/0"]] * len(hostile) + honest_problems,
                                list(hostile.values()) + honest)
    assert rewards[: len(hostile)] == [0.0] * len(hostile), dict(zip(hostile, rewards))
    assert rewards[len(hostile) :] == alone


# --------------------------------------------------------------------------- CodeContests


def test_codecontests_hostile_batch_keeps_honest_rewards(tmp_path):
    record = {"description": "Print a + b.", "public_tests": {"input": ["1 2\n", "5 6\n"], "output": ["3\n", "11\n"]}}
    path = tmp_path / "sum.jsonl"
    path.write_text(json.dumps(record) + "\n")
    task = CodeContestsTask(data={"test": path}, timeout_s=10.0)
    problem = task.load("test")[0]
    honest = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    hostile = {
        "lone surrogates": "```python\nprint('\ud800')\n```",
        "non-UTF-8 output": "```python\nimport os\nos.write(1, b'3\\xff\\n')\n```",
        "huge output": "```python\nimport sys\nsys.stdout.write('3\\n' * 10**7)\n```",
        "unclosed think tags": "<think>" * 9000,
        "deep nesting": "```python\nprint(" + "[" * 5000 + "]" * 5000 + ")\n```",
    }
    alone = task.reward_batch([problem], [honest])
    assert alone == [1.0]
    rewards = task.reward_batch([problem] * (len(hostile) + 1), list(hostile.values()) + [honest])
    assert rewards == [0.0] * len(hostile) + alone, dict(zip(hostile, rewards))


# --------------------------------------------------------------------------- JSONL (default verifier)


def test_jsonl_default_verifier_scores_hostile_completions_zero(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps({"question": "1+1?", "answer": "2"}) + "\n")
    task = JsonlTask(data=f"test={path}", verifier_timeout_s=20.0)  # one file as a named split: used whole
    problem = task.load("test")[0]
    hostile = ["\ud800\udcff", "\\boxed{" * 200, "{" * 100_000, "2" * 100_000 + "\n\x00"]
    try:
        rewards = task.reward_batch([problem] * (len(hostile) + 1), hostile + ["The answer is\n2"])
    finally:
        task.close()
    assert rewards == [0.0] * len(hostile) + [1.0]
