"""The task interface: Problem, registry, system prompts, CoT assignment, JSONL reading."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from decoding_adapters.tasks import (
    SYSTEM_PROMPTS,
    Problem,
    PromptedProblem,
    Task,
    assign_cot,
    available_tasks,
    build_prompts,
    get_task,
    read_jsonl,
    register_task,
    resolve_system_prompt,
)


def test_problem_is_frozen_hashable_and_validated() -> None:
    p = Problem("t/0", "What?", "1", {"family": "x"})
    assert hash(p) == hash(Problem("t/0", "What?", "1", {"family": "y"}))  # meta not hashed
    assert p == Problem("t/0", "What?", "1", {"family": "x"})
    with pytest.raises(AttributeError):
        p.answer = "2"  # type: ignore[misc]
    for bad in (dict(id=""), dict(question="  "), dict(answer=1), dict(meta=[])):
        kwargs = {"id": "t/0", "question": "q", "answer": "1", **bad}
        with pytest.raises(ValueError):
            Problem(**kwargs)


def test_registry_lists_builtin_tasks_and_rejects_unknown_names() -> None:
    assert {"arithmetic", "math", "gsm8k"} <= set(available_tasks())
    with pytest.raises(ValueError, match="known tasks: .*arithmetic"):
        get_task("no-such-task")
    with pytest.raises(ValueError, match="no option"):
        get_task("math", bogus=1)
    with pytest.raises(ValueError, match="no option"):
        get_task("arithmetic", bogus=1)


def test_register_task_rejects_a_second_class_under_a_taken_name() -> None:
    with pytest.raises(ValueError, match="already registered"):

        @register_task("arithmetic")
        class Impostor(Task):  # noqa: F841
            def load(self, split):
                return []

            def prompt(self, problem, cot=False):
                return []

            def reward(self, problem, completion):
                return 0.0


def test_system_prompt_presets_and_literals() -> None:
    assert resolve_system_prompt("qwen3-code-think") == SYSTEM_PROMPTS["qwen3-code-think"]
    assert resolve_system_prompt("Be brief.") == "Be brief."
    assert resolve_system_prompt(None) is None
    with pytest.raises(ValueError, match="preset name"):
        resolve_system_prompt("  ")
    task = get_task("arithmetic", system_prompt="qwen3-math-think", test_size=2)
    messages = task.prompt(task.load("test")[0])
    assert messages[0] == {"role": "system", "content": SYSTEM_PROMPTS["qwen3-math-think"]}
    plain = get_task("arithmetic", test_size=2)
    assert [m["role"] for m in plain.prompt(plain.load("test")[0])] == ["user"]


def test_unknown_split_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="choose one of"):
        get_task("arithmetic").load("dev")


def test_assign_cot_is_per_id_deterministic_and_near_ratio() -> None:
    ids = [f"p/{i}" for i in range(4000)]
    flags = assign_cot(ids, 0.3, seed=7)
    assert flags == assign_cot(ids, 0.3, seed=7)
    assert abs(sum(flags) / len(ids) - 0.3) < 0.03
    # A problem's flag does not depend on the rest of the batch.
    assert assign_cot(ids[10:20][::-1], 0.3, seed=7) == flags[10:20][::-1]
    assert assign_cot(ids, 0.3, seed=8) != flags
    assert assign_cot(ids, 0.0, 1) == [False] * len(ids) and assign_cot(ids, 1.0, 1) == [True] * len(ids)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        assign_cot(ids, 1.5, 0)


def test_build_prompts_records_which_prompts_got_cot() -> None:
    task = get_task("arithmetic", test_size=50)
    problems = task.load("test")
    prompted = build_prompts(task, problems, cot_ratio=0.5, seed=3)
    assert all(isinstance(p, PromptedProblem) for p in prompted)
    flags = assign_cot([p.id for p in problems], 0.5, 3)
    for (messages, cot), problem, flag in zip(prompted, problems, flags):
        assert cot == flag
        assert messages == task.prompt(problem, cot=flag)
        assert (task.cot_instruction in messages[-1]["content"]) == cot


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_read_jsonl_reads_objects_and_skips_blank_lines(tmp_path: Path) -> None:
    path = _write(tmp_path / "d.jsonl", [json.dumps({"a": 1, "b": 2}), "", json.dumps({"a": 3, "b": 4})])
    assert read_jsonl(path, ["a"]) == [{"a": 1, "b": 2}, {"a": 3, "b": 4}]


@pytest.mark.parametrize(
    "bad_line,message",
    [
        ("{not json", r"d\.jsonl:2: not valid JSON"),
        ("[1, 2]", r"d\.jsonl:2: expected a JSON object"),
        ('{"b": 1}', r"d\.jsonl:2: missing field 'a'"),
    ],
)
def test_read_jsonl_names_file_line_and_field(tmp_path: Path, bad_line: str, message: str) -> None:
    path = _write(tmp_path / "d.jsonl", [json.dumps({"a": 1}), bad_line, json.dumps({"a": 2})])
    with pytest.raises(ValueError, match=message):
        read_jsonl(path, ["a"])
    with pytest.warns(UserWarning, match="skipped 1 bad line"):
        assert read_jsonl(path, ["a"], skip_bad=True) == [{"a": 1}, {"a": 2}]


def test_read_jsonl_reads_gzip_by_name_with_the_same_checks(tmp_path: Path) -> None:
    plain = _write(tmp_path / "d.jsonl", [json.dumps({"a": 1}), "", json.dumps({"a": 2})])
    packed = tmp_path / "d.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert read_jsonl(packed, ["a"]) == read_jsonl(plain, ["a"]) == [{"a": 1}, {"a": 2}]
    with pytest.raises(ValueError, match=r"d\.jsonl\.gz:1: missing field 'b'"):
        read_jsonl(packed, ["b"])


def test_read_jsonl_missing_file_says_how_to_fix(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="data="):
        read_jsonl(tmp_path / "absent.jsonl", [])
    with pytest.raises(FileNotFoundError, match="absent.jsonl"):
        get_task("math", data=tmp_path / "absent.jsonl").load("test")
