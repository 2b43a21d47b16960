"""Disjoint splits by content: content hashes, data specs, hash-band splits,
validation carved from train, and the overlap check that trainers and ``evaluate`` run."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from decoding_adapters.tasks import get_task
from decoding_adapters.tasks.base import (
    SINGLE_FILE_FRACTIONS,
    VALIDATION_FRACTION,
    Problem,
    content_hash,
    content_hashes,
    normalise_question,
    parse_data_spec,
    problems_digest,
    problems_in,
    problems_record,
)
from decoding_adapters.tasks.splits import check_disjoint, load_planned_split, plan_splits

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
needs_math = pytest.mark.skipif(
    not (SHARED_DATA / "math" / "test500.jsonl").is_file(), reason=f"MATH data not found under {SHARED_DATA}"
)
needs_gsm8k = pytest.mark.skipif(
    not (SHARED_DATA / "gsm8k" / "test.jsonl").is_file(), reason=f"GSM8K data not found under {SHARED_DATA}"
)


def _math_file(path: Path, questions: list[str]) -> Path:
    path.write_text("".join(json.dumps({"problem": q, "answer": str(i)}) + "\n" for i, q in enumerate(questions)))
    return path


def _questions(n: int, offset: int = 0) -> list[str]:
    return [f"What is {i} plus {i + 7}?" for i in range(offset, offset + n)]


# --------------------------------------------------------------------------- content identity


def test_content_hash_ignores_trivial_formatting_only() -> None:
    same = [
        "What is $x = 3$ if $\\dfrac{1}{2}$?",
        "  what IS  x=3 if \\frac{1}{2} ?\n",
        "What is x = 3 if \\frac{1}{2}\\big?",
        "What\u00a0is x\\,=\\,3 if \\tfrac{1}{2}?",
    ]
    assert len({content_hash(q) for q in same}) == 1, [normalise_question(q) for q in same]
    different = ["What is x = 4 if \\frac{1}{2}?", "What is x = 3 if \\frac{1}{3}?", "What is 12 3?", "What is 123?"]
    assert len({content_hash(q) for q in different}) == len(different)
    problem = Problem("a/1", same[0], "3")
    assert content_hash(problem) == content_hash(Problem("b/9", same[1], "other answer", {"x": 1}))
    # Pinned: a change to the normalisation or the hash moves problems between splits.
    assert content_hash("What is 1 + 1?") == "0ab60986ffbd49a1"


def test_problems_digest_is_an_order_free_set_digest() -> None:
    problems = [Problem(f"p/{i}", q, "0") for i, q in enumerate(_questions(5))]
    digest = problems_digest(problems)
    assert len(digest) == 64
    assert problems_digest(problems[::-1]) == digest
    assert problems_digest(problems + problems[:2]) == digest  # a set: repeats do not count
    assert problems_digest(content_hashes(problems)) == digest  # recomputable from stored hashes
    assert problems_digest(problems[:4]) != digest
    with pytest.raises(ValueError, match="content hashes"):
        problems_digest(["What is 1 + 1?"])


# --------------------------------------------------------------------------- data specs


def test_parse_data_spec() -> None:
    assert parse_data_spec("train=a.jsonl,test=b.jsonl") == {"train": "a.jsonl", "test": "b.jsonl"}
    assert parse_data_spec(" train = a.jsonl , validation=v.jsonl,") == {"train": "a.jsonl", "validation": "v.jsonl"}
    assert parse_data_spec("data/all.jsonl") == "data/all.jsonl"
    for bad, message in [
        ("dev=a.jsonl", "unknown split 'dev'"),
        ("train=a,train=b", "named twice"),
        ("train=", "not split=path"),
        ("train=a,b.jsonl", "not split=path"),
        ("  ", "must be"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_data_spec(bad)


def test_plan_single_file_is_divided_by_documented_fractions() -> None:
    plan = plan_splits("all.jsonl", {}, "t")
    assert list(plan) == ["train", "validation", "test"]
    widths = {s: src.band[1] - src.band[0] for s, src in plan.items()}
    assert widths == pytest.approx(SINGLE_FILE_FRACTIONS)
    assert not any(src.whole_file for src in plan.values())
    # A task with a single split takes a single file whole (e.g. HumanEval's test).
    assert plan_splits("he.jsonl", {}, "t", splits=("test",))["test"].whole_file
    # Named files are whole; validation is carved from train when not named.
    plan = plan_splits({"train": "a", "test": "b"}, {}, "t")
    assert plan["test"].whole_file and plan["validation"].path == plan["train"].path == Path("a")
    assert plan["validation"].band == (0.0, VALIDATION_FRACTION) and plan["train"].band == (VALIDATION_FRACTION, 1.0)
    assert list(plan_splits({"test": "b"}, {}, "t")) == ["test"]
    with pytest.raises(ValueError, match="unknown split"):
        plan_splits({"dev": "a"}, {}, "t")


# --------------------------------------------------------------------------- file-based tasks


def test_single_file_is_split_not_reused_and_nothing_is_lost(tmp_path: Path) -> None:
    questions = _questions(2000)
    task = get_task("math", data=str(_math_file(tmp_path / "all.jsonl", questions)))
    splits = {s: task.load(s) for s in ("train", "validation", "test")}
    hashes = {s: set(content_hashes(p)) for s, p in splits.items()}
    assert not hashes["train"] & hashes["test"] and not hashes["train"] & hashes["validation"]
    assert not hashes["validation"] & hashes["test"]
    assert sum(len(h) for h in hashes.values()) == len(questions)  # a partition of the file
    for split, share in SINGLE_FILE_FRACTIONS.items():
        assert abs(len(splits[split]) / len(questions) - share) < 0.03, (split, len(splits[split]))
    # File order is kept within a split.
    order = {q: i for i, q in enumerate(questions)}
    assert [order[p.question] for p in splits["test"]] == sorted(order[p.question] for p in splits["test"])
    assert set(check_disjoint(task)) == {"train", "validation", "test"}


def test_splits_are_stable_when_the_file_is_reordered_or_grows(tmp_path: Path) -> None:
    questions = _questions(400)
    first = get_task("math", data=str(_math_file(tmp_path / "a.jsonl", questions)))
    shuffled = get_task("math", data=str(_math_file(tmp_path / "b.jsonl", questions[::-1] + _questions(100, 1000))))
    for split in ("train", "validation", "test"):
        before = {p.id for p in first.load(split)}
        after = {p.id for p in shuffled.load(split)}
        assert before and before <= after  # same problems in the same split, new ones added around them
        assert before == {p.id for p in first.load(split)}  # and the same on a second load


def test_ids_follow_content_and_repeats_are_dropped(tmp_path: Path, caplog) -> None:
    questions = _questions(50)
    a = _math_file(tmp_path / "a.jsonl", questions)
    b = _math_file(tmp_path / "b.jsonl", [q.upper() for q in questions[::-1]] + ["  " + questions[0]])
    with caplog.at_level(logging.WARNING):
        from_a = get_task("math", data={"test": a}).load("test")
        from_b = get_task("math", data={"test": b}).load("test")
    assert {p.id for p in from_a} == {p.id for p in from_b}  # same content, same id, whatever the file
    assert len(from_b) == 50 and "dropped 1 repeated problem" in caplog.text
    assert all(p.id == f"math/{content_hash(p)}" for p in from_a)


def test_overlap_is_detected_and_names_files_and_count(tmp_path: Path) -> None:
    train = _math_file(tmp_path / "mine-train.jsonl", _questions(200))
    # Three training problems, reformatted, slipped into the test file.
    test = _math_file(
        tmp_path / "mine-test.jsonl", _questions(30, 500) + [f" {q.lower()}  " for q in _questions(3, 10)]
    )
    task = get_task("math", data=f"train={train},test={test}")
    assert task.splits == ("train", "validation", "test")
    with pytest.raises(ValueError, match=r"overlap in 3 problem\(s\)") as err:
        check_disjoint(task)
    assert "mine-train.jsonl" in str(err.value) and "mine-test.jsonl" in str(err.value)
    assert set(check_disjoint(task, splits=("train", "validation"))) == {"train", "validation"}
    clean = get_task("math", data={"train": train, "test": _math_file(tmp_path / "ok.jsonl", _questions(30, 500))})
    hashes = check_disjoint(clean)
    assert len(hashes["test"]) == 30 and len(hashes["train"]) + len(hashes["validation"]) == 200


def test_same_file_named_for_two_splits_is_refused(tmp_path: Path) -> None:
    path = _math_file(tmp_path / "one.jsonl", _questions(40))
    with pytest.raises(ValueError, match=r"one\.jsonl.*one\.jsonl"):
        check_disjoint(get_task("math", data={"train": path, "test": path}))


@needs_math
def test_readme_example_no_longer_trains_on_the_test_set() -> None:
    # The README's old `--task math --data ../shared/data/math/test500.jsonl`: the one file used to
    # be served whole as train, validation and test.
    task = get_task("math", data=str(SHARED_DATA / "math" / "test500.jsonl"))
    train, test = task.load("train"), task.load("test")
    assert train and test and len(train) + len(test) + len(task.load("validation")) == 500
    assert not {p.question for p in train} & {p.question for p in test}
    check_disjoint(task)


@needs_math
def test_math_default_data_offers_a_disjoint_validation_split(monkeypatch) -> None:
    monkeypatch.setenv("DECODING_ADAPTERS_DATA", str(SHARED_DATA))
    task = get_task("math")
    assert task.splits == ("train", "validation", "test")
    validation, train, test = task.load("validation"), task.load("train"), task.load("test")
    assert 0.07 < len(validation) / (len(validation) + len(train)) < 0.13
    assert len(test) == 500
    hashes = check_disjoint(task)
    assert hashes["validation"] == content_hashes(validation)


@needs_gsm8k
def test_gsm8k_default_data_has_three_disjoint_splits(monkeypatch) -> None:
    monkeypatch.setenv("DECODING_ADAPTERS_DATA", str(SHARED_DATA))
    task = get_task("gsm8k")
    hashes = check_disjoint(task)
    assert set(hashes) == {"train", "validation", "test"} and len(hashes["test"]) == 1319


def test_arithmetic_splits_are_disjoint_by_content() -> None:
    check_disjoint(get_task("arithmetic"))
    check_disjoint(get_task("arithmetic", train_size=40, validation_size=10, test_size=10, seed=3))


def test_generic_split_loading_for_other_tasks(tmp_path: Path) -> None:
    # What a task outside math.py (e.g. the code tasks) does: plan, then load with its own reader.
    path = _math_file(tmp_path / "he.jsonl", _questions(20))

    def read(p: Path) -> list[Problem]:
        return [
            Problem(f"own/{i}", json.loads(line)["problem"], "") for i, line in enumerate(p.read_text().splitlines())
        ]

    whole = load_planned_split(plan_splits(str(path), {}, "he", splits=("test",)), "test", read, "he")
    assert [p.id for p in whole] == [f"own/{i}" for i in range(20)]  # own ids kept without id_prefix
    parts = [
        load_planned_split(plan_splits(str(path), {}, "cc"), s, read, "cc") for s in ("train", "validation", "test")
    ]
    assert sorted(p.id for part in parts for p in part) == sorted(p.id for p in whole)
    with pytest.raises(ValueError, match="no split 'validation'"):
        load_planned_split(plan_splits({"test": path}, {}, "he"), "validation", read, "he")


def test_problems_in_finds_recorded_problems_by_content() -> None:
    seen = [Problem("a/1", "What is 2 + 2?", "4"), Problem("a/2", "What is 3 + 3?", "6")]
    candidates = [Problem("b/1", "what is 2+2 ?", "4"), Problem("b/2", "What is 5 + 5?", "10")]
    assert [p.id for p in problems_in(candidates, content_hashes(seen))] == ["b/1"]
    record = json.loads(json.dumps(problems_record(seen + seen[:1])))  # JSON round trip, repeats once
    assert record["count"] == 2 and record["digest"] == problems_digest(seen)
    assert [p.id for p in problems_in(candidates, record["content_hashes"])] == ["b/1"]


@pytest.mark.parametrize("name", ["math", "gsm8k"])
def test_math_tasks_read_no_folder_unless_told(name, monkeypatch) -> None:
    monkeypatch.delenv("DECODING_ADAPTERS_DATA", raising=False)
    task = get_task(name)
    assert task.splits == ("train", "validation", "test")
    with pytest.raises(ValueError, match=r"needs data files: pass --data train=.*DECODING_ADAPTERS_DATA"):
        task.load("train")
