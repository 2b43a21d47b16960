"""The attempt policy and the fixed rules on a user's own data, through the command line: a
``train-attempt`` adapter records its task, so ``generate`` rebuilds its verifier, stop and prompt
(the instruction included) with no further options; a table passed in is read, not extended, unless
``--extend-tables``; ``rules`` and ``train-attempt`` share their table defaults, so each reads and
extends the other's tables; a table decoded under other settings names the setting; the curve says
"at matched compute" only where it is; both commands hold their ``--out`` lock; an interrupted table
build says what it kept; too few right attempts are warned about."""

from __future__ import annotations

import json
import logging
import math
import subprocess
import sys
import time

import numpy as np
import pytest

from decoding_adapters.cli import main
from decoding_adapters.evaluation.attempt import Scored, format_curve
from decoding_adapters.evaluation.sample_table import SampleTable, build_sample_table, synthetic_sample_table
from decoding_adapters.policies.attempt import AttemptOutcome
from decoding_adapters.policies.networks import load_adapter
from decoding_adapters.tasks import get_task

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

TINY = ["--token-budget", "4", "--samples", "2", "--steps", "1", "--prices", "0.05", "--rules", "self_consistency,esc"]


@pytest.fixture
def word_problems(tmp_path):
    """40 two-field word problems with numeric golds (split 80/10/10 by content)."""
    path = tmp_path / "words.jsonl"
    rows = [{"Body": f"Tom has {a} apples and buys {b} more.", "Question": "How many apples does he have?",
             "Answer": float(a + b)} for a in range(1, 9) for b in range(1, 6)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def _task_args(data) -> list[str]:
    return ["--task", "jsonl", "--data", str(data), "--question-template", "{Body} {Question}", "--answer-field",
            "Answer", "--verifier", "numeric", "--instruction", "Answer with a number."]


def test_an_attempt_adapter_records_its_task_and_generates_with_the_training_prompt(
        tiny_model_dir, tiny_lm, word_problems, tmp_path, capsys, caplog):
    caplog.set_level(logging.WARNING)
    out = tmp_path / "attempt"
    assert main(["train-attempt", "--model", str(tiny_model_dir), *_task_args(word_problems), *TINY,
                 "--train-problems", "6", "--val-problems", "3", "--holdout", "0.5", "--out", str(out)]) == 0
    assert "too few" in caplog.text and "the strongest on validation" in caplog.text  # 6 problems: too few
    curve = json.loads((out / "curve.json").read_text())
    assert "price" not in curve["config"] and curve["config"]["prices"] == [0.05]  # the price each policy trained at
    assert curve["policies"][0]["price"] == 0.05 and "too few" in curve["warning"]
    adapter = out / "policies" / "price-0.05-seed-0"
    _, config = load_adapter(adapter)
    assert config.task == "jsonl" and config.task_options["instruction"] == "Answer with a number."
    assert config.task_options["verifier"] == "numeric" and config.task_options["data"] == str(word_problems)

    # generate with no task options: the recorded ones rebuild the verifier, the stop and the prompt
    task = get_task("jsonl", data=str(word_problems), question_template="{Body} {Question}", answer_field="Answer",
                    verifier="numeric", instruction="Answer with a number.")
    problem = task.load("train")[0]
    capsys.readouterr()
    assert main(["generate", "--adapter", str(adapter), "--json", problem.question]) == 0
    generation = json.loads(capsys.readouterr().out)["generations"][0]
    assert generation["prompt_tokens"] == len(tiny_lm.encode_chat([task.prompt(problem)])[0])

    from decoding_adapters.serving.adapter import Adapter

    generator = Adapter.from_pretrained(adapter, lm=tiny_lm).generator()
    assert generator.answer_task is not None  # it stops where training stopped
    prepared = generator.prepare([problem.question, [{"role": "user", "content": problem.question}]])
    training = tuple(tiny_lm.encode_chat([task.prompt(problem)])[0])
    assert prepared[0].prompt_ids == training and prepared[1].prompt_ids == training


def test_a_table_passed_in_is_read_not_extended_unless_asked(tiny_model_dir, tmp_path, capsys):
    first = tmp_path / "first"
    base = ["train-attempt", "--model", str(tiny_model_dir), *TINY, "--holdout", "0.5", "--val-problems", "2"]
    assert main([*base, "--train-problems", "4", "--out", str(first)]) == 0
    tables = ["--table", str(first / "tables" / "train"), "--val-table", str(first / "tables" / "validation")]
    assert main([*base, *tables, "--train-problems", "6", "--out", str(tmp_path / "second")]) == 0
    assert SampleTable.load(first / "tables" / "train").shape[0] == 4  # read as it is
    assert main([*base, *tables, "--train-problems", "6", "--extend-tables", "--out", str(tmp_path / "third")]) == 0
    assert SampleTable.load(first / "tables" / "train").shape[0] == 6


def test_train_attempt_extends_the_tables_rules_built_and_a_mismatch_names_the_setting(
        tiny_model_dir, tiny_lm, tmp_path, capsys):
    val, test = tmp_path / "tables" / "val", tmp_path / "tables" / "test"
    assert main(["rules", "--model", str(tiny_model_dir), "--token-budget", "4", "--samples", "2", "--max-problems",
                 "2", "--table", str(test), "--validation-table", str(val), "--rules", "self_consistency",
                 "--out", str(tmp_path / "rules")]) == 0
    # the same table defaults: train-attempt decodes more problems into the table rules wrote
    assert main(["train-attempt", "--model", str(tiny_model_dir), *TINY, "--val-table", str(val), "--val-problems",
                 "3", "--extend-tables", "--train-problems", "2", "--holdout", "0", "--out", str(tmp_path / "a")]) == 0
    assert SampleTable.load(val).shape[0] == 3
    task = get_task("arithmetic")
    with pytest.raises(ValueError) as err:
        build_sample_table(tiny_lm, task, task.load("validation")[:4], SampleTable.load(val).actions, samples=2,
                           token_budget=4, path=val, split="validation", hidden=False, progress=False)
    assert "hidden: the table has True, this run False (set by --hidden / --no-hidden)" in str(err.value)
    assert "} vs {" not in str(err.value)  # the field that differs, not two header dicts


def _scored(decodes: float, rule_decodes: float) -> Scored:
    outcome = AttemptOutcome(np.zeros(2, int), np.ones(2, int), np.ones(2), [[0], [0]], ["stop", "stop"],
                             np.zeros(2, bool))
    return Scored(0.02, 0, ("confidence",), 0.21, decodes, 30.0, "cges (T=0.5)", 0.25, (-0.04, -0.1, 0.02), outcome,
                  rule_decodes=rule_decodes)


def test_the_curve_says_matched_compute_only_where_it_is():
    matched, cheaper = format_curve([_scored(1.5, 1.5)]), format_curve([_scored(1.0, 2.0)])
    assert "at matched compute cges (T=0.5)" in matched
    assert "matched" not in cheaper and "which spends more: 2.00 decodes at its cheapest point" in cheaper
    assert _scored(1.0, 2.0).record()["matched_compute"] is False and _scored(1.5, 1.5).matched
    assert "spends less: 3.00 decodes at its last point" in format_curve([_scored(4.0, 3.0)])
    assert not math.isnan(_scored(1.0, 2.0).record()["rule_decodes"])


def _hold_lock(directory) -> subprocess.Popen:
    """Another process holding ``directory``'s run lock until killed."""
    directory.mkdir(parents=True, exist_ok=True)
    code = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(directory / ".lock")], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


@pytest.mark.parametrize("command", ["rules", "train-attempt"])
def test_rules_and_train_attempt_hold_their_out_lock(command, tmp_path, capsys):
    synthetic_sample_table(30, samples=2, seed=1).save(tmp_path / "val")
    synthetic_sample_table(20, samples=2, seed=2).save(tmp_path / "test")
    out = tmp_path / "out"
    argv = (["rules", "--table", str(tmp_path / "test"), "--validation-table", str(tmp_path / "val")]
            if command == "rules" else
            ["train-attempt", "--table", str(tmp_path / "test"), "--val-table", str(tmp_path / "val"),
             "--train-problems", "20", "--val-problems", "30", "--steps", "1", "--prices", "0.05"])
    argv += ["--rules", "self_consistency", "--out", str(out)]
    holder = _hold_lock(out)
    try:
        assert main(argv) == 2
        assert "is in use by another run" in capsys.readouterr().err
    finally:
        holder.kill()
        holder.wait()
    assert main(argv) == 0
    if command == "rules":  # a finished --out is refused unless --force
        assert main(argv) == 2 and "--force" in capsys.readouterr().err
        assert main(argv + ["--force"]) == 0


def test_an_interrupted_table_build_says_what_it_kept(tiny_model_dir, tmp_path, capsys, monkeypatch):
    import decoding_adapters.cli.train_attempt as train_attempt

    real = train_attempt.build_sample_table

    def interrupted(*args, on_chunk=None, **kwargs):
        def stop(done, total):
            raise KeyboardInterrupt
        return real(*args, on_chunk=stop, **kwargs)

    out = tmp_path / "a"
    argv = ["train-attempt", "--model", str(tiny_model_dir), *TINY, "--train-problems", "4", "--val-problems", "2",
            "--batch-rows", "5", "--holdout", "0.5", "--out", str(out)]
    monkeypatch.setattr(train_attempt, "build_sample_table", interrupted)
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert "kept the train table's chunks of 1 problem(s)" in err and "the same command continues" in err
    monkeypatch.undo()
    start = time.perf_counter()
    assert main(argv) == 0
    assert SampleTable.load(out / "tables" / "train").shape[0] == 4 and time.perf_counter() - start < 120
