"""The MATH / GSM8K verifiers: answer extraction, equivalence, speed, threads, and the tasks."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from decoding_adapters.tasks import Problem, get_task
from decoding_adapters.tasks.base import content_hash
from decoding_adapters.tasks.math import (
    extract_boxed,
    extract_final_answer,
    gsm8k_gold,
    score_gsm8k,
    score_math,
)

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"

# (completion, gold, expected score)
MATH_CASES = [
    # plain and boxed forms of the same number
    ("The answer is \\boxed{5}.", "5", 1.0),
    ("\\boxed{5}", "6", 0.0),
    ("so we get $\\boxed{-3}$", "-3", 1.0),
    ("\\boxed{3}", "-3", 0.0),  # wrong sign
    # fractions, decimals, \dfrac / \tfrac, shorthand \frac12
    ("\\boxed{\\frac{1}{2}}", "\\frac12", 1.0),
    ("\\boxed{1/2}", "\\frac{1}{2}", 1.0),
    ("\\boxed{0.5}", "\\frac{1}{2}", 1.0),
    ("\\boxed{\\dfrac{3}{4}}", "\\frac{3}{4}", 1.0),
    ("\\boxed{\\tfrac{3}{4}}", "0.75", 1.0),
    ("\\boxed{-\\frac{2}{3}}", "-\\frac{2}{3}", 1.0),
    ("\\boxed{1/2}", "2", 0.0),
    ("\\boxed{\\frac{2}{4}}", "\\frac{1}{2}", 1.0),
    ("\\boxed{0.333333}", "\\frac{1}{3}", 1.0),
    ("\\boxed{0.33}", "\\frac{1}{3}", 0.0),
    # formatting noise: \left/\right, units, degrees, dollars, separators, spaces, periods
    ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)", 1.0),
    ("\\boxed{(3,\\frac{\\pi}{2})}", "\\left( 3, \\frac{\\pi}{2} \\right)", 1.0),
    ("\\boxed{5 \\text{ cm}}", "5", 1.0),
    ("\\boxed{90^\\circ}", "90", 1.0),
    ("\\boxed{90}", "90^\\circ", 1.0),
    ("\\boxed{\\$18}", "18", 1.0),
    ("\\boxed{1,000}", "1000", 1.0),
    ("\\boxed{10,\\!000}", "10000", 1.0),
    ("\\boxed{x = 3}", "3", 1.0),
    ("\\boxed{3}", "x=5", 0.0),
    ("\\boxed{5.}", "5", 1.0),
    ("\\boxed{\\text{Evelyn}}", "\\text{Evelyn}", 1.0),
    ("\\boxed{\\text{(C)}}", "\\text{(C)}", 1.0),
    ("\\boxed{25\\%}", "25", 1.0),
    # intervals, sets, tuples
    ("\\boxed{[1, 2)}", "[1,2)", 1.0),
    ("\\boxed{(-\\infty, 3]}", "(-\\infty,3]", 1.0),
    ("\\boxed{(1,2)}", "(1,2)", 1.0),
    ("\\boxed{(2,1)}", "(1,2)", 0.0),
    ("\\boxed{\\{2, 1\\}}", "\\{1,2\\}", 1.0),
    ("\\boxed{3, 5, 7}", "3, 5, 7", 1.0),
    # radicals, pi, complex numbers, expressions
    ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}", 1.0),
    ("\\boxed{\\sqrt{2}}", "2", 0.0),
    ("\\boxed{11\\sqrt{2}}", "11\\sqrt2", 1.0),
    ("\\boxed{\\frac{\\pi}{2}}", "\\pi/2", 1.0),
    ("\\boxed{\\pi}", "2\\pi", 0.0),
    ("\\boxed{6-5i}", "6 - 5i", 1.0),
    ("\\boxed{(x+1)^2}", "x^2+2x+1", 1.0),
    ("\\boxed{p-q}", "q-p", 0.0),
    ("\\boxed{52_8}", "52_8", 1.0),
    # nested braces and \fbox
    ("\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{3}}{2}", 1.0),
    ("\\fbox{7}", "7", 1.0),
    ("first \\boxed{1} then \\boxed{2}", "2", 1.0),
    # no box: final-answer lines
    ("We add them.\nThe answer is 12.", "12", 1.0),
    ("The final answer is $\\frac{1}{4}$. I hope it is correct.", "\\frac14", 1.0),
    ("Answer: 7", "7", 1.0),
    ("work...\n#### 42", "42", 1.0),
    ("I think it is 12 because 5 + 7 = 12", "12", 0.0),  # no final answer stated: not guessed
    ("", "1", 0.0),
    # pathological: must be rejected quickly, not hang SymPy
    ("\\boxed{10^{10^{10}}}", "3", 0.0),
    ("\\boxed{" + "x+" * 400 + "1}", "1", 0.0),
]


@pytest.mark.parametrize("completion,gold,expected", MATH_CASES)
def test_score_math_table(completion: str, gold: str, expected: float) -> None:
    assert score_math(completion, gold) == expected


def test_score_math_average_time_under_50ms() -> None:
    score_math("\\boxed{\\sqrt{2}}", "\\frac{\\pi}{3}")  # warm-up: imports SymPy and math-verify
    start = time.perf_counter()
    for completion, gold, _ in MATH_CASES:
        score_math(completion, gold)
    average = (time.perf_counter() - start) / len(MATH_CASES)
    assert average < 0.050, f"{average * 1000:.1f} ms per case"


def test_score_math_works_outside_the_main_thread() -> None:
    # math-verify's signal.alarm timeouts raise in worker threads; ours are disabled.
    results = {}

    def worker() -> None:
        results["eq"] = score_math("\\boxed{2\\sqrt{2}}", "\\sqrt{8}")
        results["ne"] = score_math("\\boxed{(2,1)}", "(1,2)")

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(timeout=60)
    assert results == {"eq": 1.0, "ne": 0.0}


@pytest.mark.parametrize("bad", [None, 3, b"\\boxed{1}"])
def test_score_math_never_raises(bad) -> None:
    assert score_math(bad, "1") == 0.0  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text,expected",
    [
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{a} and \\boxed{\\{1,2\\}}", "\\{1,2\\}"),
        ("\\boxed {3}", "3"),
        ("\\fbox{x}", "x"),
        ("no box here", None),
        ("\\boxed{5} then cut off \\boxed{\\frac{1", "5"),
    ],
)
def test_extract_boxed(text: str, expected: str | None) -> None:
    assert extract_boxed(text) == expected


def test_extract_final_answer_prefers_box() -> None:
    assert extract_final_answer("The answer is 3. \\boxed{4}") == "4"
    assert extract_final_answer("nothing") is None


GSM8K_CASES = [
    ("So she makes \\boxed{18} dollars.", "reasoning\n#### 18", 1.0),
    ("\\boxed{\\$18.00}", "#### 18", 1.0),
    ("The answer is 1,000.", "#### 1000", 1.0),
    ("#### 1,000", "#### 1,000", 1.0),
    ("She has 3 left, so 18 in total", "#### 18", 1.0),  # last number
    ("18.0", "18", 1.0),
    ("\\boxed{18 \\text{ dollars}}", "#### 18", 1.0),
    ("\\boxed{17}", "#### 18", 0.0),
    ("She earns 18 dollars and spends 2.", "#### 18", 0.0),
    ("-5", "#### -5", 1.0),
    ("no number", "#### 3", 0.0),
]


@pytest.mark.parametrize("completion,gold,expected", GSM8K_CASES)
def test_score_gsm8k(completion: str, gold: str, expected: float) -> None:
    assert score_gsm8k(completion, gold) == expected


def test_gsm8k_gold() -> None:
    assert gsm8k_gold("a\nb = <<1+1=2>>2\n#### 2,000") == "2,000"


# --------------------------------------------------------------------------- tasks


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_math_task_from_one_file(tmp_path: Path) -> None:
    data = _write_jsonl(tmp_path / "m.jsonl",
                        [{"problem": "1+1?", "answer": "2", "level": "Level 1", "type": "Algebra"}])
    task = get_task("math", data=f"test={data}", system_prompt="qwen3-math-nothink")
    problems = task.load("test")
    assert problems[0].id == f"math/{content_hash('1+1?')}" and problems[0].meta["type"] == "Algebra"
    assert task.splits == ("test",)  # a file named for one split is that split only
    assert get_task("math", data={"train": data}).load("train") == [
        Problem(problems[0].id, "1+1?", "2", problems[0].meta)]
    messages = task.prompt(problems[0])
    assert messages[0] == {"role": "system", "content": "Provide the final answer within \\boxed{}. /nothink"}
    assert messages[1]["content"].endswith(task.instruction) and task.cot_instruction not in messages[1]["content"]
    assert task.cot_instruction in task.prompt(problems[0], cot=True)[1]["content"]
    assert task.reward(problems[0], "\\boxed{2}") == 1.0


def test_math_task_split_mapping(tmp_path: Path) -> None:
    data = _write_jsonl(tmp_path / "m.jsonl", [{"problem": "q", "answer": "1"}])
    task = get_task("math", data={"test": data})
    assert len(task.load("test")) == 1
    with pytest.raises(ValueError, match="no split 'train'"):
        task.load("train")
    with pytest.raises(ValueError, match="unknown split"):
        get_task("math", data={"dev": data})


def test_math_task_missing_field_names_line(tmp_path: Path) -> None:
    data = _write_jsonl(tmp_path / "m.jsonl", [{"problem": "q", "answer": "1"}, {"problem": "q"}])
    with pytest.raises(ValueError, match=r"m\.jsonl:2: missing field 'answer'"):
        get_task("math", data=data).load("test")


def test_gsm8k_task_answer_is_the_number(tmp_path: Path) -> None:
    data = _write_jsonl(tmp_path / "g.jsonl", [{"question": "How many?", "answer": "3 + 4 = <<3+4=7>>7\n#### 7"}])
    task = get_task("gsm8k", data={"test": data})
    problem = task.load("test")[0]
    assert problem.answer == "7" and "####" in problem.meta["solution"]
    assert task.reward(problem, "There are \\boxed{7}.") == 1.0
    assert task.reward(problem, "There are \\boxed{8}.") == 0.0


@pytest.mark.skipif(not (SHARED_DATA / "math" / "test500.jsonl").is_file(),
                    reason=f"MATH data not found under {SHARED_DATA}")
def test_math_default_files_and_gold_self_consistency(monkeypatch) -> None:
    monkeypatch.setenv("DECODING_ADAPTERS_DATA", str(SHARED_DATA))  # the shared data, named explicitly
    task = get_task("math")
    problems = task.load("test")
    assert len(problems) == 500 and len({p.id for p in problems}) == 500
    # Every gold answer, boxed, must verify against itself.
    wrong = [p.answer for p in problems if task.reward(p, f"\\boxed{{{p.answer}}}") != 1.0]
    assert wrong == []


@pytest.mark.skipif(not (SHARED_DATA / "gsm8k" / "test.jsonl").is_file(),
                    reason=f"GSM8K data not found under {SHARED_DATA}")
def test_gsm8k_default_files_and_gold_self_consistency(monkeypatch) -> None:
    monkeypatch.setenv("DECODING_ADAPTERS_DATA", str(SHARED_DATA))
    task = get_task("gsm8k")
    problems = task.load("test")
    assert len(problems) == 1319
    wrong = [p.id for p in problems if task.reward(p, p.meta["solution"]) != 1.0]
    assert wrong == []
