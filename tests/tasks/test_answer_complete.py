"""``Task.answer_complete``: when a completion so far already states a finished answer (where the
"stop at the first answer" baseline ends a row). A number that may still grow is never complete."""

from __future__ import annotations

import pytest

from decoding_adapters.tasks import Problem, get_task
from decoding_adapters.tasks.arithmetic import arithmetic_answer_complete, score_arithmetic
from decoding_adapters.tasks.math import extract_boxed, final_answer_complete, has_closed_box

PROBLEM = Problem("p", "What is 8 + 8?", "16")


@pytest.mark.parametrize("text", [
    "Jack has 8 + 8 = 16 pencils",
    "8 + 8 = 16.\n",
    "8 + 8 = 16\n",
    "The answer is 16.\nBecause",
    "The answer is **16**",
    "#### 16\n",
    "16\n",
    "**16**\nBecause 8 + 8",
    "It equals 16 apples",
    "So \\boxed{16}",
    "= 1,600 apples",
])
def test_complete_answers(text):
    assert arithmetic_answer_complete(text)


@pytest.mark.parametrize("text", [
    "",
    "Jack has 8",  # a number outside an answer context
    "8 + 8 = 1",  # the next token may be a digit
    "8 + 8 = 16",
    "8 + 8 = 16 ",
    "8 + 8 = 16.",  # 16.5 may follow
    "4 more = 7 + 4",  # an expression goes on
    "= 7 +",
    "= 9 x 6",
    "The answer is 15 - 1",
    "16",  # a bare first line not ended yet
    "So \\boxed{16",
    "1. 9 + 1",
])
def test_incomplete_answers(text):
    assert not arithmetic_answer_complete(text)


def test_a_stopped_completion_scores_its_first_answer():
    """Cut where the check first holds, the verifier reads the first answer, not the overwrite."""
    full = "Jack has 8 + 8 = 16 pencils.\nJack has 16 - 8 = 4 more pencils.\n#### 4\nThe answer is 4."
    cut = next(full[:i] for i in range(1, len(full) + 1) if arithmetic_answer_complete(full[:i]))
    assert cut == "Jack has 8 + 8 = 16 p"
    assert score_arithmetic(cut, "16") == 1.0 and score_arithmetic(full, "16") == 0.0


def test_each_task_says_what_a_complete_answer_is():
    arithmetic = get_task("arithmetic")
    assert arithmetic.answer_complete(PROBLEM, "8 + 8 = 16 pencils")
    assert final_answer_complete("so \\boxed{\\frac{1}{2}} and")
    assert final_answer_complete("#### 42\n") and final_answer_complete("The answer is $x^2$.\nDone")
    assert not final_answer_complete("#### 42") and not final_answer_complete("\\boxed{\\frac{1}{2}")
    assert not final_answer_complete("The answer is 4")
    assert get_task("math").answer_complete(PROBLEM, "\\boxed{16}")
    assert get_task("gsm8k").answer_complete(PROBLEM, "#### 16\n")
    jsonl = get_task("jsonl", data="x.jsonl")
    assert jsonl.answer_complete(PROBLEM, "\\boxed{16}") and not jsonl.answer_complete(PROBLEM, "16\n")
    custom = get_task("jsonl", data="x.jsonl", verifier="json:loads")
    assert not custom.answer_complete(PROBLEM, "\\boxed{16}")  # a verifier of one's own may read anything
    pyfunc = get_task("pyfunc")
    assert not pyfunc.answer_complete(PROBLEM, "```python\ndef f(x):\n    return 16\n```\n")  # code: never
    mix = get_task("arithmetic+pyfunc")
    tagged = [p for p in mix.load("test") if p.meta["domain"] == "arithmetic"][0]
    assert mix.answer_complete(tagged, "= 16 apples") and not mix.answer_complete(PROBLEM, "= 16 apples")


@pytest.mark.parametrize("text", ["=" + " " * 50_000 + "x", " " * 50_000 + "5", "= " * 25_000, "answer" + " " * 50_000,
                                  "\\boxed{" * 5_000, "**" * 25_000 + "\n"])
def test_hostile_text_is_no_answer_and_never_raises(text):
    assert not arithmetic_answer_complete(text)
    assert not final_answer_complete(text)


@pytest.mark.parametrize("text", ["\\boxed{5}", "\\boxed{\\frac{1}{2}}", "\\boxed{ \\boxed{5}", "a {b} \\fbox{x}",
                                  "\\boxed{", "\\boxed{\\frac{1}{2}", "{}\\boxed{{}", "no box {}", "\\boxed{a}}{"])
def test_has_closed_box_agrees_with_the_extractor(text):
    assert has_closed_box(text) == (extract_boxed(text) is not None)
