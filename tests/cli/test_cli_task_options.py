"""CLI wiring of the user task: ``--verifier`` / ``--verifier-timeout-s`` reach ``get_task("jsonl")``,
and ``evaluate`` writes its table into the model card of every adapter it scored."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap

import pytest

from adapter_helpers import make_adapter
from decoding_adapters import cli
from decoding_adapters.cli.common import add_task_arguments, task_options

VERIFIER = """
def always(completion, answer):
    return 1.0
"""


@pytest.fixture()
def user_dir(tmp_path, monkeypatch):
    """Data files and a verifier module in the current folder, which is NOT on sys.path (as for the
    `decoding-adapters` console script): the CLI must find the module there by itself."""
    (tmp_path / "cliverify.py").write_text(textwrap.dedent(VERIFIER))
    rows = {  # disjoint splits: evaluate refuses a test split that shares problems with train
        "train": [{"question": "Capital of France?", "answer": "Paris"}, {"question": "2+3?", "answer": "5"}],
        "test": [{"question": "Capital of Italy?", "answer": "Rome"}, {"question": "4+4?", "answer": "8"}],
    }
    for split, split_rows in rows.items():
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in split_rows))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    sys.modules.pop("cliverify", None)
    return tmp_path


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_task_arguments(p)
    return p.parse_args(argv)


def test_task_options_carry_the_verifier_only_when_given():
    assert task_options(_parse(["--task", "jsonl", "--data", "a.jsonl"])) == {"data": "a.jsonl"}
    given = task_options(_parse(["--data", "a.jsonl", "--verifier", "m:f", "--verifier-timeout-s", "2.5"]))
    assert given == {"data": "a.jsonl", "verifier": "m:f", "verifier_timeout_s": 2.5}


def test_generated_split_sizes_reach_the_arithmetic_task():
    options = task_options(_parse(["--train-size", "1500", "--validation-size", "400"]))
    assert options == {"train_size": 1500, "validation_size": 400}
    from decoding_adapters.tasks import get_task

    task = get_task("arithmetic", **options)
    assert len(task.load("train")) == 1500 and len(task.load("validation")) == 400


def _evaluate(user_dir, tiny_model_dir, *extra: str) -> int:
    return cli.main([
        "evaluate", "--task", "jsonl", "--data", f"train={user_dir / 'train.jsonl'},test={user_dir / 'test.jsonl'}",
        "--model", str(tiny_model_dir), "--token-budget", "2", "--baselines", "greedy", "--actions", "math-token",
        "--k", "1", "--seeds", "1", "--no-progress", *extra,
    ])


def test_evaluate_scores_with_the_given_verifier_and_fills_the_model_card(user_dir, tiny_model_dir, tiny_lm, capsys):
    adapter = make_adapter(user_dir / "my-adapter", tiny_lm, "token", base_model=str(tiny_model_dir))
    assert "## Evaluation" not in (adapter / "README.md").read_text()
    out = user_dir / "eval"
    code = _evaluate(user_dir, tiny_model_dir, "--verifier", "cliverify:always", "--verifier-timeout-s", "5",
                     "--adapter", f"Mine={adapter}", "--out", str(out))
    assert code == 0, capsys.readouterr().err
    results = json.loads((out / "results.json").read_text())
    # the default verifier (exact match) gives the random tiny model 0; the user's verifier says 1
    assert results["Greedy"]["pass@1"]["mean"] == 1.0 and results["Mine"]["pass@1"]["mean"] == 1.0
    card = (adapter / "README.md").read_text()
    assert "## Evaluation" in card and "| Mine |" in card and "| Greedy |" in card
    assert "model card:" in capsys.readouterr().out


def test_verifier_errors_are_one_clear_line(user_dir, tiny_model_dir, capsys):
    assert _evaluate(user_dir, tiny_model_dir, "--verifier", "nosuchmodule:f", "--out", str(user_dir / "e1")) == 2
    err = capsys.readouterr().err
    assert "nosuchmodule" in err and "Traceback" not in err
    code = cli.main(["evaluate", "--task", "arithmetic", "--verifier", "cliverify:always", "--model",
                     str(tiny_model_dir), "--out", str(user_dir / "e2"), "--no-progress"])
    assert code == 2 and "verifier" in capsys.readouterr().err  # a task without a verifier option says so
