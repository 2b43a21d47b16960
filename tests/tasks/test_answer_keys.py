"""The answer a vote counts (``Task.extract_answer``) is the value the task's verifier reads: one
test per verifier, the ``numeric`` verifier's gold read whole (and unreadable golds refused), and
the sample tables and the attempt policy grouping by it on a JSONL word-problem file."""

from __future__ import annotations

import json
import logging
import re
import sys
from pathlib import Path

import pytest

from decoding_adapters.decoding.confidence import answer_ids
from decoding_adapters.tasks import Problem, get_task
from decoding_adapters.tasks.math import read_numeric, score_gsm8k

DATA = Path(__file__).resolve().parents[1] / "data"
NUMBER_KEY = re.compile(r"-?\d+(?:/\d+)?")


def _one_answer(task, problem, completions) -> bool:
    ids, strings = answer_ids([task.extract_answer(problem, c) for c in completions])
    return len(strings) == 1 and ids == [0] * len(completions)


@pytest.fixture
def numeric_task():
    task = get_task("jsonl", data=f"test={DATA / 'svamp_like.jsonl'}", verifier="numeric",
                    question_template="{Body} {Question}", answer_field="Answer")
    yield task
    task.close()


# ---- one test per verifier ------------------------------------------------------------------------


def test_arithmetic_keys_are_the_integer_the_verifier_reads():
    """The default task's ids stay what they were: the committed evidence re-derives from them."""
    task = get_task("arithmetic")
    problem = task.load("test")[0]
    cases = {"12": "12", "7 + 5 = 12.": "12", "The answer is 1,000.": "1000", "\\boxed{12.0}": "12",
             "no number": "", "12\nthen 3 more": "12", "x = -3": "-3", "12.5": ""}
    assert {c: task.extract_answer(problem, c) for c in cases} == cases


def test_jsonl_numeric_groups_two_wordings_of_one_number(numeric_task):
    problem = numeric_task.load("test")[0]
    wordings = ["There are 12 peaches. So, the answer is 12.", "Jake has 19 - 7 = 12 peaches.",
                "\\boxed{12}", "The answer is 12.0", "#### 12"]
    assert _one_answer(numeric_task, problem, wordings)
    assert numeric_task.extract_answer(problem, "The answer is 1,000.") == "1000"
    assert numeric_task.extract_answer(problem, "no number at all") == ""


def test_jsonl_exact_keys_are_the_stripped_last_line(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps({"question": "Capital of France?", "answer": "Paris"}) + "\n")
    task = get_task("jsonl", data=f"test={path}")
    problem = task.load("test")[0]
    assert _one_answer(task, problem, ["Let me think.\nParis.", "I know this one.\n  paris  ", "So \\boxed{Paris}"])
    assert task.extract_answer(problem, "Rome\n") == "rome"
    task.close()


def test_jsonl_math_keys_are_the_normalised_expression(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps({"question": "Half of one?", "answer": "1/2"}) + "\n")
    task = get_task("jsonl", data=f"test={path}", verifier="math")
    problem = task.load("test")[0]
    assert _one_answer(task, problem, ["So \\boxed{\\frac12}.", "We get \\boxed{0.5}", "The answer is $\\frac{1}{2}$."])
    assert task.extract_answer(problem, "\\boxed{x + 1}") == "x+1"
    task.close()


def answer_keyed(completion, answer):
    return float(completion.strip().endswith(answer))


answer_keyed.answer_key = lambda completion: completion.strip().split()[-1] if completion.strip() else ""


def plain(completion, answer):
    return float(completion.strip() == answer)


def test_jsonl_own_verifier_brings_its_reader_or_votes_on_the_completion(tmp_path, monkeypatch):
    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps({"question": "Say ok", "answer": "ok"}) + "\n")
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    module = sys.modules[__name__].__name__
    keyed = get_task("jsonl", data=f"test={path}", verifier=f"{module}:answer_keyed")
    problem = keyed.load("test")[0]
    assert _one_answer(keyed, problem, ["I say ok", "then ok"])
    bare = get_task("jsonl", data=f"test={path}", verifier=f"{module}:plain")
    assert bare.extract_answer(problem, "  I say ok ") == "I say ok"
    keyed.close()
    bare.close()


def test_math_and_gsm8k_keys_follow_their_verifiers():
    math_task, gsm8k = get_task("math", data="unused.jsonl"), get_task("gsm8k", data="unused.jsonl")
    problem = Problem("p", "q?", "18")
    assert _one_answer(math_task, problem, ["\\boxed{0.5}", "\\boxed{\\frac{1}{2}}", "The answer is 1/2."])
    # GSM8K's verifier reads the last number when no final answer is given: so does its key
    assert _one_answer(gsm8k, problem, ["She has 3 left, so 18 in total", "\\boxed{\\$18.00}", "#### 18"])


def test_code_keys_are_the_program_the_verifier_runs():
    task = get_task("humaneval")
    problem = Problem("HumanEval/x", "def add(a, b):\n", "", {"entry_point": "add", "test": ""})
    code = "```python\ndef add(a, b):\n    return a + b\n```"
    assert _one_answer(task, problem, [f"Here you go:\n{code}", f"{code}\nThis adds the numbers."])
    assert task.extract_answer(problem, code) == "def add(a, b):\n    return a + b"


def test_mix_keys_are_their_domain_s(numeric_task):
    mix = get_task("arithmetic+pyfunc")
    problem = next(p for p in mix.load("test") if p.meta["domain"] == "arithmetic")
    assert mix.extract_answer(problem, "7 + 5 = 12.") == get_task("arithmetic").extract_answer(problem, "7 + 5 = 12.")


# ---- the numeric verifier reads the gold whole ----------------------------------------------------


@pytest.mark.parametrize("gold,right,wrong", [
    ("3:4", "The ratio is 3:4.", "The answer is 4."),
    ("-(1/3)", "The answer is -1/3.", "The answer is 3."),
    ("3:30 p.m.", "They meet at 3:30 pm.", "The answer is 30."),
    ("9 (apples)", "She has 9 apples.", "She has 8 apples."),
    ("$1,000", "The answer is 1000.", "The answer is 1."),
])
def test_numeric_reads_the_gold_whole(gold, right, wrong):
    assert score_gsm8k(right, gold) == 1.0
    assert score_gsm8k(wrong, gold) == 0.0


def test_numeric_refuses_golds_it_cannot_read_with_one_warning(tmp_path, caplog):
    path = tmp_path / "golds.jsonl"
    golds = ["12", "Yes", "Mrs. Hilt", "3 and 4", "3:4"]
    path.write_text("".join(json.dumps({"question": f"Q{i}?", "answer": g}) + "\n" for i, g in enumerate(golds)))
    assert [read_numeric(g) is not None for g in golds] == [True, False, False, False, True]
    task = get_task("jsonl", data=f"test={path}", verifier="numeric")
    with caplog.at_level(logging.WARNING, logger="decoding_adapters.tasks.jsonl"):
        first, again = task.load("test"), task.load("test")
    assert [p.answer for p in first] == ["12", "3:4"] and first == again
    refusals = [r for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == 1 and "refused 3 of 5" in refusals[0].getMessage()
    task.close()


# ---- where the answer ids are made ----------------------------------------------------------------


def test_a_sample_table_on_jsonl_data_stores_the_numbers_not_the_completions(tiny_lm, tmp_path, numeric_task):
    from decoding_adapters.decoding.actions import GREEDY, DecodingAction
    from decoding_adapters.evaluation.sample_table import build_sample_table

    problems = numeric_task.load("test")[:3]
    table = build_sample_table(tiny_lm, numeric_task, problems, [GREEDY, DecodingAction(temperature=1.0)], samples=4,
                               token_budget=12, path=tmp_path / "t", split="test", stop_at_answer=False,
                               progress=False)
    strings = [s for per_problem in table.answer_strings for s in per_problem]
    assert strings and all(NUMBER_KEY.fullmatch(s) for s in strings)


def test_the_attempt_policy_answers_with_the_number(tiny_lm, tmp_path, numeric_task):
    import torch

    from decoding_adapters.decoding.actions import GREEDY, DecodingAction
    from decoding_adapters.evaluation.attempt import attempt_decode
    from decoding_adapters.evaluation.sample_table import build_sample_table
    from decoding_adapters.policies.attempt import AttemptInputs, AttemptPolicy
    from decoding_adapters.training.attempt import AttemptTrainConfig, policy_config_from_table

    problems = numeric_task.load("test")[:3]
    arms = [GREEDY, DecodingAction(temperature=1.0)]
    table = build_sample_table(tiny_lm, numeric_task, problems, arms, samples=2, token_budget=12,
                               path=tmp_path / "t", split="test", progress=False)
    config = policy_config_from_table(table, AttemptTrainConfig(features=("confidence", "agreement"), max_attempts=3))
    torch.manual_seed(0)
    policy = AttemptPolicy(config)
    policy.set_standardisation(AttemptInputs.from_table(table))
    live = attempt_decode(tiny_lm, numeric_task, problems, policy, arms, token_budget=12)
    assert all(a == "" or NUMBER_KEY.fullmatch(a) for a in live.answers)


def test_generate_s_answer_is_the_number(tiny_lm, tmp_path):
    """A rule adapter on a JSONL word-problem file: the answer ``generate`` gives is the number its
    votes grouped, not a completion."""
    from adapter_helpers import save_tiny_base
    from decoding_adapters.decoding.actions import GREEDY, DecodingAction
    from decoding_adapters.policies.kind_rule import save_rule_adapter
    from decoding_adapters.serving.adapter import Adapter

    options = {"data": f"test={DATA / 'svamp_like.jsonl'}", "verifier": "numeric",
               "question_template": "{Body} {Question}", "answer_field": "Answer"}
    base = str(save_tiny_base(tiny_lm, tmp_path / "base"))
    actions = [GREEDY.to_dict(), DecodingAction(temperature=1.0).to_dict()]
    directory = save_rule_adapter(tmp_path / "sc", "self_consistency", {"n": 4}, actions, task="jsonl",
                                  task_options=options, token_budget=12, stop_at_answer=False, base_model=base)
    generator = Adapter.from_pretrained(directory, lm=tiny_lm).generator()
    said = generator.generate(["Jake has 7 fewer peaches than Steven. How many?", "Dan had 97 cards."], token_budget=12)
    assert all(g.answer == "" or NUMBER_KEY.fullmatch(g.answer) for g in said)
    assert any(g.answer for g in said) and all(g.decodes == 4 for g in said)
