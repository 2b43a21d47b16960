"""The ``jsonl`` task: user data + a ``module:function`` verifier that can never crash a run."""

from __future__ import annotations

import json
import logging
import sys
import textwrap
import time

import pytest

from decoding_adapters.tasks import get_task
from decoding_adapters.tasks.base import parse_data_spec
from decoding_adapters.tasks.jsonl import JsonlTask, exact_match

VERIFIERS = """
import time

def score(completion, answer):
    print("user output on stdout must not break the protocol")
    return completion.strip() == answer

def with_row(completion, answer, row):
    return float(completion.strip() == row["alias"])

def boom(completion, answer):
    raise RuntimeError("verifier bug")

def hang(completion, answer):
    if completion == "hang":
        while True:
            pass
    return 1.0

def die(completion, answer):
    import os
    if completion == "die":
        os._exit(3)
    return 1.0

def nan(completion, answer):
    return float("nan")

def half(completion, answer):
    return 7
"""


@pytest.fixture()
def user_dir(tmp_path, monkeypatch):
    """A user folder with data files and a verifier module, importable as `uverify` (cwd on sys.path)."""
    (tmp_path / "uverify.py").write_text(textwrap.dedent(VERIFIERS))
    rows = [
        {"question": "What is 2+3?", "answer": 5, "alias": "five"},
        {"id": "q7", "question": "Capital of France?", "answer": "Paris"},
    ]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "test.jsonl").write_text(json.dumps(rows[1]) + "\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("uverify", None)
    return tmp_path


def _task(user_dir, verifier, **kw):
    return get_task(
        "jsonl", data=f"train={user_dir / 'train.jsonl'},test={user_dir / 'test.jsonl'}", verifier=verifier, **kw
    )


def test_cli_style_options_load_prompt_and_score(user_dir):
    task = _task(user_dir, "uverify:score", instruction="Answer briefly.")
    assert task.splits == ("train", "test")
    train = task.load("train")
    assert [p.id for p in train] == ["jsonl/train/0", "jsonl/train/q7"]
    assert train[0].answer == "5" and train[0].meta == {"alias": "five"}
    assert task.prompt(train[1])[-1]["content"] == "Capital of France?\n\nAnswer briefly."
    assert task.reward(train[0], " 5\n") == 1.0 and task.reward(train[0], "6") == 0.0
    assert task.verifier_failures == 0
    with pytest.raises(ValueError, match="no split 'validation'"):
        task.load("validation")
    task.close()


def test_verifier_may_take_the_row(user_dir):
    task = _task(user_dir, "uverify:with_row")
    p = task.load("train")[0]
    assert task.reward(p, "five") == 1.0 and task.reward(p, "5") == 0.0
    task.close()


def test_bad_user_input_fails_early_with_one_clear_line(user_dir):
    with pytest.raises(ValueError, match="module:function"):
        _task(user_dir, "uverify.score")
    with pytest.raises(ValueError, match="cannot import module 'nope'"):
        _task(user_dir, "nope:score")
    with pytest.raises(ValueError, match="no attribute 'missing'"):
        _task(user_dir, "uverify:missing")
    with pytest.raises(ValueError, match="needs data: --data train="):
        get_task("jsonl", verifier="uverify:score")
    with pytest.raises(ValueError, match="split=path"):
        parse_data_spec("train=a.jsonl,test")
    with pytest.raises(ValueError, match=r"unknown split 'dev'; valid splits: \['train', 'validation', 'test'\]"):
        get_task("jsonl", data="train=a.jsonl,dev=b.jsonl", verifier="uverify:score")


def test_raising_hanging_dying_and_nan_verifiers_score_zero_with_a_warning(user_dir, caplog):
    p = JsonlTask(data=f"test={user_dir / 'train.jsonl'}", verifier="uverify:boom").load("test")[1]
    caplog.set_level(logging.WARNING, logger="decoding_adapters.tasks.jsonl")
    boom = _task(user_dir, "uverify:boom")
    assert boom.reward(p, "Paris") == 0.0 and boom.verifier_failures == 1
    assert "RuntimeError: verifier bug" in caplog.text
    boom.close()

    hang = _task(user_dir, "uverify:hang", verifier_timeout_s=1.0)
    start = time.monotonic()
    assert hang.reward(p, "hang") == 0.0
    assert time.monotonic() - start < 5
    assert "timed out after 1 s" in caplog.text
    assert hang.reward(p, "fine") == 1.0  # a fresh worker serves the next call
    hang.close()

    die = _task(user_dir, "uverify:die")
    assert die.reward(p, "die") == 0.0 and "exited with code 3" in caplog.text
    assert die.reward(p, "ok") == 1.0
    die.close()

    nan = _task(user_dir, "uverify:nan")
    assert nan.reward(p, "x") == 0.0 and "returned nan" in caplog.text
    assert _task(user_dir, "uverify:half").reward(p, "x") == 1.0  # clipped to [0, 1]


def test_python_callables_and_register_task(user_dir):
    calls = []

    def local(completion, answer):  # not importable by name: runs in a thread
        calls.append(completion)
        if completion == "raise":
            raise KeyError("x")
        return completion == answer

    task = JsonlTask(data={"test": user_dir / "test.jsonl"}, verifier=local)
    p = task.load("test")[0]
    assert task.reward(p, "Paris") == 1.0 and task.reward(p, "raise") == 0.0 and calls == ["Paris", "raise"]
    # an importable function goes to the worker process (by name)
    assert (
        JsonlTask(data=str(user_dir / "test.jsonl"), verifier=exact_match).verifier_name
        == "decoding_adapters.tasks.jsonl:exact_match"
    )

    from dataclasses import dataclass

    from decoding_adapters.tasks import register_task

    @register_task("my-capitals")
    @dataclass
    class Capitals(JsonlTask):
        data: object = f"test={user_dir / 'test.jsonl'}"
        verifier: object = "uverify:score"

    mine = get_task("my-capitals")
    assert mine.name == "my-capitals" and mine.reward(mine.load("test")[0], "Paris") == 1.0
    mine.close()


def test_exact_match_default():
    assert exact_match("Let me think.\nParis.", "paris") == 1.0
    assert exact_match("so \\boxed{42} is it\nbye", "42") == 1.0
    assert exact_match("", "x") == 0.0 and exact_match("Lyon", "Paris") == 0.0


def test_cli_runs_the_jsonl_task_from_data_spec(user_dir, tiny_model_dir, capsys):
    """`--task jsonl --data train=...,test=...` already works through the CLI (default verifier)."""
    from decoding_adapters import cli

    out = user_dir / "eval"
    argv = [
        "evaluate",
        "--task",
        "jsonl",
        "--data",
        f"train={user_dir / 'train.jsonl'},test={user_dir / 'test.jsonl'}",
        "--model",
        str(tiny_model_dir),
        "--token-budget",
        "2",
        "--baselines",
        "greedy",
        "--actions",
        "math-token",
        "--k",
        "1",
        "--seeds",
        "1",
        "--no-progress",
        "--out",
        str(out),
    ]
    # the fixture's test file repeats a train question: evaluate refuses overlapping splits
    assert cli.main(argv) != 0
    assert "splits overlap in 1 problem(s)" in capsys.readouterr().err
    (user_dir / "test.jsonl").write_text(json.dumps({"question": "Capital of Italy?", "answer": "Rome"}) + "\n")
    code = cli.main(argv)
    assert code == 0
    assert json.loads((out / "results.json").read_text())["Greedy"]["pass@1"]["mean"] == 0.0
