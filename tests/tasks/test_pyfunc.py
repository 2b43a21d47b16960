"""The embedded code task (pyfunc): families, disjoint splits, code extraction and the verifier."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from decoding_adapters.tasks import available_tasks, get_task
from decoding_adapters.tasks.pyfunc import (
    ALL_FAMILIES,
    FAMILY_OPS,
    OOD_FAMILIES,
    TRAIN_FAMILIES,
    PyFuncConfig,
    PyFuncTask,
    build_splits,
    encode_value,
    family_pool,
    harness,
    make_tests,
    parse_report,
    same_value,
)

SPLITS = ("train", "validation", "test", "ood")


@pytest.fixture(scope="module")
def task() -> PyFuncTask:
    return PyFuncTask(timeout_s=2.0, workers=2)


@pytest.fixture(scope="module")
def problem(task: PyFuncTask):
    """A str_param problem: ``decorate(word)`` returns word + 'ok' (first of the default test split)."""
    found = next(p for p in task.load("test") if p.meta["family"] == "str_param")
    return found


# --------------------------------------------------------------------------- config and families


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(families={"nope": 1.0}), "unknown pyfunc family"),
        (dict(families={"affine": 0.0}), "weight must be > 0"),
        (dict(families={}), "at least one"),
        (dict(families="affine"), "mapping"),
        (dict(families=["affine", "words"], ood_families=["words"]), "held out"),
        (dict(test_size=-1), "test_size"),
    ],
)
def test_config_rejects_bad_values(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        PyFuncConfig(**kwargs)


def test_config_round_trips_through_json() -> None:
    cfg = PyFuncConfig(families=["affine", "cond"], seed=3)
    assert cfg.families == {"affine": 1.0, "cond": 1.0}
    assert PyFuncConfig(**json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert set(PyFuncConfig().families) == set(TRAIN_FAMILIES)
    assert set(PyFuncConfig().ood_families) == set(OOD_FAMILIES)


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_every_family_pool_is_unique_and_its_reference_runs(family: str) -> None:
    pool = family_pool(family)
    questions = [s.question for s in pool]
    assert len(set(questions)) == len(questions) >= 50
    for spec in pool[:: max(1, len(pool) // 25)]:
        assert f"`{spec.name}(" in spec.question and spec.solution.startswith(f"def {spec.name}(")
        inputs, outputs = make_tests(spec)
        assert len(outputs) == len(inputs) == 5 and make_tests(spec) == (inputs, outputs)
        # The tests must tell programs apart: a constant function fails at least one of them.
        assert len({json.dumps(encode_value(o)) for o in outputs}) > 1


def test_families_do_not_share_questions() -> None:
    seen: dict[str, str] = {}
    for family in FAMILY_OPS:
        for spec in family_pool(family):
            assert seen.setdefault(spec.question, family) == family


# --------------------------------------------------------------------------- splits


def test_splits_are_sized_disjoint_and_deterministic() -> None:
    splits = build_splits(PyFuncConfig())
    assert {s: len(v) for s, v in splits.items()} == {"train": 500, "validation": 100, "test": 200, "ood": 200}
    texts = {s: {p.question for p in v} for s, v in splits.items()}
    for i, a in enumerate(SPLITS):
        for b in SPLITS[i + 1 :]:
            assert not texts[a] & texts[b], (a, b)
    assert len(texts["test"]) == 200 and len(texts["ood"]) == 200  # no repeats within test or ood
    assert build_splits(PyFuncConfig()) == splits
    assert build_splits(PyFuncConfig(seed=1))["test"] != splits["test"]
    assert {p.meta["family"] for p in splits["ood"]} == set(OOD_FAMILIES)
    assert not {p.meta["family"] for s in ("train", "validation", "test") for p in splits[s]} & set(OOD_FAMILIES)
    assert Counter(p.meta["family"] for p in splits["test"]) == {
        f: round(w * 200) for f, w in PyFuncConfig().families.items()
    }


def test_get_task_builds_pyfunc_and_rejects_unknown_options() -> None:
    assert "pyfunc" in available_tasks()
    task = get_task("pyfunc", test_size=10, seed=2)
    assert isinstance(task, PyFuncTask) and len(task.load("ood")) == 10
    assert task.load("test")[0].id == "pyfunc/test/0"
    with pytest.raises(ValueError, match="no option"):
        get_task("pyfunc", nope=1)
    with pytest.raises(ValueError, match="no split"):
        task.load("dev")


def test_task_pickles_for_worker_processes(problem) -> None:
    import pickle

    task = PyFuncTask(test_size=20, timeout_s=2.0)
    task.load("test")
    copy = pickle.loads(pickle.dumps(task))
    assert copy.config == task.config and copy.sandbox == task.sandbox and copy.load("test") == task.load("test")
    assert copy.reward(problem, f"```python\n{problem.answer}```") == 1.0


def test_prompt_names_the_function_and_asks_for_a_code_block(problem) -> None:
    task = PyFuncTask()
    (message,) = task.prompt(problem)
    assert message["role"] == "user" and "`decorate(word)`" in message["content"]
    assert message["content"].endswith("```python code block.")
    assert "step by step" in task.prompt(problem, cot=True)[-1]["content"]


# --------------------------------------------------------------------------- values


def test_encode_value_tags_types_and_refuses_objects() -> None:
    assert encode_value([1, "a", None, 2.5]) == [1, "a", None, 2.5]
    assert encode_value(True) == {"bool": True} and encode_value((1,)) == {"tuple": [1]}
    with pytest.raises(TypeError):
        encode_value(object())

    class LyingInt(int):
        def __eq__(self, other):
            return True

    with pytest.raises(TypeError):
        encode_value(LyingInt(3))


def test_same_value_is_strict_about_types() -> None:
    assert same_value(3, 3.0) and same_value(0.1 + 0.2, 0.3)
    assert not same_value(encode_value(True), 1) and not same_value(encode_value((1,)), [1])
    assert not same_value("3", 3) and not same_value([1, 2], [1, 2, 3])


def test_the_harness_holds_inputs_but_never_expected_values(problem) -> None:
    program = harness("def decorate(word):\n    return 1\n", "decorate", problem.meta["inputs"], "@@m@@")
    for value in problem.meta["expected"]:
        assert repr(value) not in program and json.dumps(value) not in program
    assert parse_report('noise\n@@m@@{"outputs": []}\n', "@@m@@") == {"outputs": []}
    assert parse_report("@@m@@not json", "@@m@@") is None


# --------------------------------------------------------------------------- the verifier case table

FORGE = """
def decorate(word):
    return None
import sys
print("all tests passed")
sys.__stdout__.write('@@pyfunc-0000000000000000@@{"outputs": [{"value": "x"}]}\\n')
"""

CASES = [
    ("correct, fenced", "```python\ndef decorate(word):\n    return word + 'ok'\n```", 1.0),
    ("correct, other spelling", "```python\ndef decorate(word):\n    return f'{word}ok'\n```", 1.0),
    (
        "extra text around bare code",
        "Sure! Here is the function:\ndef decorate(word):\n    return word + 'ok'\nIt appends 'ok'.",
        1.0,
    ),
    ("indented bare code", "    def decorate(word):\n        result = word + 'ok'\n        return result\n", 1.0),
    ("closing fence cut off", "```python\ndef decorate(word):\n    return word + 'ok'", 1.0),
    (
        "example usage that crashes after the definition",
        "```python\ndef decorate(word):\n    return word + 'ok'\nprint(decorate(input()))\n```",
        1.0,
    ),
    ("wrong", "```python\ndef decorate(word):\n    return word + 'OK'\n```", 0.0),
    (
        "wrong on some inputs",
        "```python\ndef decorate(word):\n    return 'hellook' if word == 'hello' else word\n```",
        0.0,
    ),
    ("syntax error", "```python\ndef decorate(word)\n    return word + 'ok'\n```", 0.0),
    ("prints instead of returns", "```python\ndef decorate(word):\n    print(word + 'ok')\n```", 0.0),
    ("wrong name", "```python\ndef add_ok(word):\n    return word + 'ok'\n```", 0.0),
    ("raises", "```python\ndef decorate(word):\n    raise ValueError(word)\n```", 0.0),
    ("exits before the tests", "```python\nimport sys\ndef decorate(word):\n    sys.exit(0)\n```", 0.0),
    ("forging: prints a pass and a fake report", f"```python\n{FORGE}```", 0.0),
    (
        "forging: os._exit(0) right away",
        "```python\nimport os\nos._exit(0)\ndef decorate(word):\n    return word\n```",
        0.0,
    ),
    (
        "forging: object that equals everything",
        "```python\nclass A(str):\n    def __eq__(self, o):\n        return True\n"
        "def decorate(word):\n    return A(word)\n```",
        0.0,
    ),
    ("no code", "I am not sure how to do that.", 0.0),
]


@pytest.mark.parametrize("label,completion,expected", CASES, ids=[c[0] for c in CASES])
def test_verifier_case_table(task, problem, label, completion, expected) -> None:
    assert task.reward(problem, completion) == expected, label


def test_infinite_loop_scores_zero_in_bounded_time(problem) -> None:
    task = PyFuncTask(timeout_s=1.0)
    start = time.monotonic()
    completion = "```python\ndef decorate(word):\n    while True:\n        pass\n```"
    assert task.reward(problem, completion) == 0.0
    assert time.monotonic() - start < 10.0
    assert task.extract_answer(problem, completion) == ""
    assert task.outputs(problem, completion).status == "timeout"


def test_run_reports_say_why_there_are_no_outputs(task, problem) -> None:
    assert task.outputs(problem, "no code at all").status == "no code"
    assert task.outputs(problem, "```python\ndef decorate(word)\n    return 1\n```").status == "not defined"
    assert task.outputs(problem, "```python\ndef decorate(word):\n    return 1\n```").status == "ok"


def test_reward_batch_matches_reward_and_extract_answer_groups_equal_behaviour(task, problem) -> None:
    completions = [c for _, c, _ in CASES[:8]]
    assert task.reward_batch([problem] * len(completions), completions) == [e for _, _, e in CASES[:8]]
    same = [task.extract_answer(problem, c) for c in completions[:2]]
    assert same[0] == same[1] != "" and task.extract_answer(problem, completions[6]) not in ("", same[0])
    with pytest.raises(ValueError, match="problems"):
        task.reward_batch([problem], [])


def test_reference_solutions_pass_in_the_sandbox(task) -> None:
    problems = [
        next(p for p in task.load(s) if p.meta["family"] == f)
        for s, families in (("test", TRAIN_FAMILIES), ("ood", OOD_FAMILIES))
        for f in families
    ]
    completions = [f"```python\n{p.answer}```" for p in problems]
    assert task.reward_batch(problems, completions) == [1.0] * len(problems)
