"""The task mix (tasks/mix.py): spec parsing, splits as the union of the domains' splits, problems
tagged and routed to their own domain's prompt and verifier, and ``get_task("a+b")``."""

from __future__ import annotations

import pickle
from collections import Counter

import pytest

from decoding_adapters.lm.protocols import VerifiableTask
from decoding_adapters.tasks import MixTask, get_task
from decoding_adapters.tasks.mix import domain_of, interleave, parse_mix_spec

SMALL = {"arithmetic": {"train_size": 30, "validation_size": 10, "test_size": 12},
         "pyfunc": {"train_size": 20, "validation_size": 10, "test_size": 12}}


@pytest.fixture(scope="module")
def mix() -> MixTask:
    return MixTask("arithmetic+pyfunc", options=SMALL)


@pytest.mark.parametrize("spec, weights", [
    ("arithmetic+pyfunc", {"arithmetic": 1.0, "pyfunc": 1.0}),
    ("arithmetic:2+pyfunc:0.5", {"arithmetic": 2.0, "pyfunc": 0.5}),
    (" arithmetic : 3 + pyfunc ", {"arithmetic": 3.0, "pyfunc": 1.0}),
    (["arithmetic", "pyfunc"], {"arithmetic": 1.0, "pyfunc": 1.0}),
    ({"pyfunc": 2, "arithmetic": 1}, {"pyfunc": 2.0, "arithmetic": 1.0}),
])
def test_parse_mix_spec(spec, weights):
    assert parse_mix_spec(spec) == weights


@pytest.mark.parametrize("spec, message", [
    ("arithmetic", "at least two"),
    ("arithmetic+arithmetic", "named twice"),
    ("arithmetic+", "empty task name"),
    ("arithmetic:x+pyfunc", "not a number"),
    ("arithmetic:0+pyfunc", "must be > 0"),
    ("arithmetic:-1+pyfunc", "must be > 0"),
])
def test_parse_mix_spec_rejects(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_mix_spec(spec)


def test_unknown_domain_and_options_are_clear_errors():
    with pytest.raises(ValueError, match="unknown task 'nosuch'"):
        get_task("arithmetic+nosuch")
    with pytest.raises(ValueError, match="does not contain"):
        MixTask("arithmetic+pyfunc", options={"math": {}})


def test_get_task_builds_a_mix_from_its_name():
    task = get_task("arithmetic:2+pyfunc:1")
    assert isinstance(task, MixTask) and isinstance(task, VerifiableTask)
    assert task.name == "arithmetic:2+pyfunc:1" and task.weights == {"arithmetic": 2.0, "pyfunc": 1.0}
    assert get_task("arithmetic+pyfunc").name == "arithmetic+pyfunc"  # equal weights: the short form
    assert get_task("mix", tasks="pyfunc+arithmetic").name == "pyfunc+arithmetic"


def test_splits_are_the_union_of_the_domains(mix):
    assert mix.splits == ("train", "validation", "test", "ood", "sealed", "sealed2")
    for split in mix.splits:
        problems = mix.load(split)
        expected = {p.id for d, t in mix.domains.items() if split in t.splits for p in t.load(split)}
        assert {p.id for p in problems} == expected and len(problems) == len(expected)
        assert all(p.meta["domain"] == p.id.split("/")[0] for p in problems)


def test_prefixes_hold_the_domains_in_proportion():
    mix = MixTask({"arithmetic": 2, "pyfunc": 1}, options=SMALL)
    train = mix.load("train")  # 30 arithmetic, 20 pyfunc
    for n in (3, 9, 30, 45):
        counts = Counter(domain_of(p) for p in train[:n])
        assert abs(counts["arithmetic"] - 2 * n / 3) <= 1, (n, counts)
    # once pyfunc's 20 are used up (at 60 = 40 + 20 had arithmetic had 40), the rest is arithmetic
    assert Counter(domain_of(p) for p in train) == {"arithmetic": 30, "pyfunc": 20}


def test_interleave_keeps_each_domains_order():
    out = interleave({"a": ["a0", "a1", "a2"], "b": ["b0"]}, {"a": 1.0, "b": 1.0})
    assert out == ["a0", "b0", "a1", "a2"]


def test_prompts_and_rewards_go_to_the_problems_own_domain(mix):
    problems = mix.load("test")
    arith = next(p for p in problems if domain_of(p) == "arithmetic")
    code = next(p for p in problems if domain_of(p) == "pyfunc")
    assert mix.prompt(arith) == mix.domains["arithmetic"].prompt(arith)
    assert mix.prompt(code, cot=True) == mix.domains["pyfunc"].prompt(code, cot=True)
    assert mix.reward(arith, f"The answer is {arith.answer}.") == 1.0
    assert mix.reward(arith, "no idea") == 0.0
    entry = code.meta["entry_point"]
    assert mix.reward(code, f"```python\ndef {entry}(x):\n    return None\n```") == 0.0
    assert mix.extract_answer(arith, f"{arith.answer}") == str(int(arith.answer))


def test_an_untagged_problem_scores_zero_and_is_named(mix):
    plain = mix.domains["arithmetic"].load("test")[0]  # no domain tag
    assert mix.reward(plain, plain.answer) == 0.0
    with pytest.raises(ValueError, match="domain None"):
        mix.prompt(plain)


def test_prompt_groups_and_pickling(mix):
    problems = mix.load("validation")[:6]
    groups = mix.prompt_groups(problems)
    assert groups["groups"] == [domain_of(p) for p in problems]
    assert groups["weights"] == {"arithmetic": 1.0, "pyfunc": 1.0}
    clone = pickle.loads(pickle.dumps(mix))
    assert [p.id for p in clone.load("validation")] == [p.id for p in mix.load("validation")]
