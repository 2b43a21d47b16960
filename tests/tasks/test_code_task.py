"""Code tasks: extraction of code from completions, HumanEval and CodeContests verifiers."""

from __future__ import annotations

import json

import pytest

from decoding_adapters.sandbox.runner import SandboxConfig
from decoding_adapters.tasks.base import content_hash, get_task
from decoding_adapters.tasks.code import (
    CodeContestsTask,
    HumanEvalTask,
    defines_function,
    humaneval_passes,
    humaneval_solution,
    normalise_output,
    outputs_match,
)

# --------------------------------------------------------------------------- HumanEval (pure)


def test_defines_function():
    assert defines_function("import math\n\ndef area(r):\n    return math.pi * r * r", "area")
    assert defines_function("    def area(r):\n        return 1", "area")  # uniformly indented block
    assert not defines_function("    return area(r)", "area")
    assert not defines_function("def area_of(r):\n    pass", "area")


# --------------------------------------------------------------------------- HumanEval

STUB = 'def add(a, b):\n    """Return a + b."""\n'
TEST = "def check(candidate):\n    assert candidate(2, 3) == 5\n"


def test_humaneval_solution_continues_a_body():
    assert humaneval_solution(STUB, "    return a + b\n", "add") == STUB + "    return a + b\n"


def test_humaneval_solution_indents_a_flush_body():
    assert STUB + "    return a + b" in humaneval_solution(STUB, "return a + b", "add")


def test_humaneval_solution_holds_no_test():
    assert "check" not in humaneval_solution(STUB, "    return a + b\n", "add")


def test_humaneval_solution_keeps_prompt_before_a_redefinition():
    solution = humaneval_solution(STUB, "def add(a, b):\n    return a + b\n", "add")
    assert solution.index(STUB) < solution.index("def add(a, b):\n    return a + b")
    compile(solution, "<solution>", "exec")


def test_humaneval_passes_compares_values_outside_the_sandbox():
    config = SandboxConfig(timeout_s=20.0)
    assert humaneval_passes(STUB, "    return a + b\n", TEST, "add", config)
    assert not humaneval_passes(STUB, "    return a - b\n", TEST, "add", config)
    assert not humaneval_passes(STUB, "    return str(a + b)\n", TEST, "add", config)  # "5" != 5


@pytest.fixture(scope="module")
def humaneval():
    task = HumanEvalTask(timeout_s=20.0)
    problems = {p.id: p for p in task.load("test")}
    return task, problems


def test_humaneval_loads_the_packaged_problems(humaneval):
    task, problems = humaneval
    assert len(problems) == 164
    problem = problems["HumanEval/0"]
    assert problem.meta["entry_point"] == "has_close_elements" and "def check" in problem.meta["test"]
    messages = task.prompt(problem)
    assert messages[-1]["role"] == "user" and "```python" in messages[-1]["content"]
    assert "def has_close_elements" in messages[-1]["content"]
    assert "step by step" in task.prompt(problem, cot=True)[-1]["content"]


# HumanEval/10 and /38 define helpers in the prompt that the solution calls.
@pytest.mark.parametrize("task_id", ["HumanEval/0", "HumanEval/10", "HumanEval/38"])
def test_humaneval_canonical_solution_passes(humaneval, task_id):
    task, problems = humaneval
    problem = problems[task_id]
    assert task.reward(problem, problem.answer) == 1.0
    whole_function = f"Here is the function:\n```python\n{problem.question}{problem.answer}```\n"
    assert task.reward(problem, whole_function) == 1.0


@pytest.mark.parametrize(
    "completion",
    [
        "    return True\n",  # wrong answer
        "```python\ndef has_close_elements(numbers, threshold):\n    return False\n```",  # wrong redefinition
        "```python\ndef has_close_elements(numbers, threshold) return\n```",  # syntax error
        "I cannot solve this.",  # no code at all
        "```python\nimport sys\nsys.exit(0)\n```",  # exits with status 0 before the tests
        "```python\ndef has_close_elements(numbers, threshold):\n    raise SystemExit(0)\n```",
    ],
)
def test_humaneval_wrong_completions_score_zero(humaneval, completion):
    task, problems = humaneval
    assert task.reward(problems["HumanEval/0"], completion) == 0.0


@pytest.mark.slow
def test_every_humaneval_canonical_solution_passes(humaneval):
    # The trusted check runs here and calls the sandboxed solution: every problem's arguments and
    # return values must make the round trip (floats, tuples, nested lists, strings with escapes).
    task, problems = humaneval
    failed = [pid for pid, problem in problems.items() if task.reward(problem, problem.answer) != 1.0]
    assert failed == []


def test_humaneval_endless_completion_scores_zero():
    task = HumanEvalTask(timeout_s=1.0)
    problem = next(p for p in task.load("test") if p.id == "HumanEval/0")
    assert task.reward(problem, "    while True:\n        pass\n") == 0.0


def test_humaneval_options_are_validated():
    with pytest.raises(ValueError, match="timeout_s"):
        HumanEvalTask(timeout_s=0)
    with pytest.raises(ValueError, match="split"):
        HumanEvalTask().load("train")
    task = get_task("humaneval", system_prompt="qwen3-code-think", memory_mb=256)
    assert task.system_prompt.endswith("/think") and task.sandbox.memory_mb == 256


# --------------------------------------------------------------------------- CodeContests

SUM_RECORD = {
    "name": "sum_two",
    "description": "Read two integers a and b on one line and print a + b.",
    "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
    "private_tests": {"input": ["10 -4\n", "1000000000 1000000000\n"], "output": ["6\n", "2000000000\n"]},
    "generated_tests": {"input": ["0 0\n"], "output": ["0   \n\n"]},  # judge ignores trailing space
    "solutions": {"language": [2, 3], "solution": ["int main(){}", "print(sum(map(int, input().split())))"]},
}
CORRECT = "Read and add:\n```python\na, b = map(int, input().split())\nprint(a + b)\n```"
WRONG_ON_PRIVATE = "```python\na, b = map(int, input().split())\nprint(a + b if a < 100 else 0)\n```"
ENDLESS = "```python\nwhile True:\n    pass\n```"
CRASHING = "```python\nraise SystemExit(1)\n```"


@pytest.fixture
def contests(tmp_path):
    path = tmp_path / "contests.jsonl"
    no_tests = {"name": "empty", "description": "Nothing to check.", "public_tests": {"input": [], "output": []}}
    path.write_text(json.dumps(SUM_RECORD) + "\n\n" + json.dumps(no_tests) + "\n")
    return path


def test_codecontests_loads_records(contests):
    task = CodeContestsTask(data={"test": contests})
    problems = task.load("test")  # the record without tests is skipped
    assert [p.meta["name"] for p in problems] == ["sum_two"]
    assert [p.id for p in problems] == [f"codecontests/{content_hash(problems[0])}"]
    assert len(problems[0].meta["tests"]) == 4 and problems[0].answer.startswith("print(sum")
    assert "standard input" in task.prompt(problems[0])[-1]["content"]


def test_codecontests_rewards(contests):
    task = CodeContestsTask(data={"test": contests}, timeout_s=1.0)
    problem = task.load("test")[0]
    assert task.reward(problem, CORRECT) == 1.0
    assert task.reward(problem, WRONG_ON_PRIVATE) == 0.0  # passes the public test only
    assert task.reward(problem, CRASHING) == 0.0
    assert task.reward(problem, ENDLESS) == 0.0


def test_codecontests_test_selection(contests):
    public_only = CodeContestsTask(data={"test": contests}, test_sets="public_tests")
    problem = public_only.load("test")[0]
    assert len(problem.meta["tests"]) == 1 and public_only.reward(problem, WRONG_ON_PRIVATE) == 1.0
    first_two = CodeContestsTask(data={"test": contests}, max_tests=2)
    assert first_two.reward(first_two.load("test")[0], WRONG_ON_PRIVATE) == 1.0


def test_codecontests_long_correct_output_is_not_truncated(tmp_path):
    big = "\n".join(str(i) for i in range(30_000)) + "\n"  # ~170 KB, above the default cap
    record = {"description": "Print 0..29999, one per line.", "public_tests": {"input": [""], "output": [big]}}
    path = tmp_path / "big.jsonl"
    path.write_text(json.dumps(record) + "\n")
    task = CodeContestsTask(data={"test": path}, timeout_s=20.0)
    problem = task.load("test")[0]
    assert problem.id.startswith("codecontests/") and problem.meta["name"] == "0"
    assert task.reward(problem, "```python\nprint('\\n'.join(map(str, range(30000))))\n```") == 1.0


def test_codecontests_bad_records_name_the_file(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"public_tests": {"input": ["1"], "output": ["1"]}}) + "\n")
    with pytest.raises(ValueError, match=r"bad\.jsonl.*description"):
        CodeContestsTask(data={"test": path}).load("test")
    path.write_text(json.dumps({"description": "x", "public_tests": {"input": ["1"], "output": []}}) + "\n")
    with pytest.raises(ValueError, match="public_tests"):
        CodeContestsTask(data={"test": path}).load("test")


def test_codecontests_options_are_validated():
    with pytest.raises(ValueError, match="test_sets"):
        CodeContestsTask(test_sets="hidden_tests")
    with pytest.raises(ValueError, match="max_tests"):
        CodeContestsTask(max_tests=0)
    with pytest.raises(ValueError, match="data="):
        CodeContestsTask().load("test")


@pytest.mark.parametrize(
    "expected, actual, same",
    [
        ("3\n", "3", True),
        ("1 2\n3\n", "1 2   \n3\n\n\n", True),
        ("1 2\n3\n", "1 2\r\n3\r\n", True),
        ("1\n2\n", "1\n\n2\n", False),
        ("3\n", "4\n", False),
        ("", "\n\n", True),
    ],
)
def test_outputs_match(expected, actual, same):
    assert outputs_match(expected, actual) is same


def test_normalise_output():
    assert normalise_output("a  \nb\t\n\n") == ["a", "b"]


def test_code_tasks_plan_content_disjoint_splits(tmp_path):
    """One codecontests file is divided 80/10/10 by content hash (never reused whole as
    every split); humaneval's default is {"test": the package's copy}."""
    from decoding_adapters.tasks import check_disjoint

    path = tmp_path / "many.jsonl"
    rows = [{"description": f"Print {i}.", "public_tests": {"input": [""], "output": [str(i)]}} for i in range(60)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = CodeContestsTask(data=str(path))
    assert task.splits == ("train", "validation", "test")
    sizes = {s: len(task.load(s)) for s in task.splits}
    assert sum(sizes.values()) == 60 and sizes["train"] > sizes["test"] > 0
    hashes = check_disjoint(task)
    assert not set(hashes["train"]) & set(hashes["test"])
    split = CodeContestsTask(data=f"train={path},test={path}")
    with pytest.raises(ValueError, match="overlap"):
        check_disjoint(split)
    humaneval = HumanEvalTask()
    assert set(humaneval.split_sources()) == {"test"} and humaneval.splits == ("test",)
