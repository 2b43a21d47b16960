"""train-attempt end to end through the CLI: on the tiny model it builds its sample tables and
writes an attempt adapter per price; on stored tables it scores the policies against the rules on
the held-out training problems and resumes without retraining."""

import json

from decoding_adapters.cli import main
from decoding_adapters.evaluation.attempt import planted_attempt_table
from decoding_adapters.evaluation.sample_table import SampleTable
from decoding_adapters.policies.attempt import load_attempt_adapter


def test_train_attempt_cli_builds_its_tables_and_writes_adapters(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "attempt"
    args = ["train-attempt", "--model", str(tiny_model_dir), "--task", "arithmetic", "--token-budget", "4",
            "--out", str(out), "--train-problems", "4", "--val-problems", "3", "--samples", "2",
            "--holdout", "0.5", "--prices", "0.05,0.2", "--steps", "2", "--val-every", "1",
            "--rules", "self_consistency,confidence_threshold", "--features", "confidence,hidden,agreement"]
    assert main(args) == 0
    train = SampleTable.load(out / "tables" / "train")
    assert train.shape == (4, 2, 2) and train.hidden is not None
    assert SampleTable.load(out / "tables" / "validation").shape[0] == 3
    curve = json.loads((out / "curve.json").read_text())
    assert [p["price"] for p in curve["policies"]] == [0.05, 0.2] and curve["problems"]["scored"] == 2
    policy, meta = load_attempt_adapter(out / "policies" / "price-0.05-seed-0")
    assert meta["kind"] == "attempt" and policy.config.features == ("confidence", "hidden", "agreement")
    assert policy.config.hidden_size == train.hidden.shape[-1] and len(meta["actions"]) == 2
    log = [json.loads(line) for line in (out / "policies" / "price-0.05-seed-0" / "train_log.jsonl").open()]
    assert [r["step"] for r in log] == [0, 1, 2]
    assert "strongest rule" in capsys.readouterr().out


def test_train_attempt_cli_on_stored_tables_resumes(tmp_path, capsys):
    train, _ = planted_attempt_table(80, seed=1)
    validation, _ = planted_attempt_table(40, seed=2)
    train.save(tmp_path / "train")
    validation.save(tmp_path / "val")
    out = tmp_path / "out"
    args = ["train-attempt", "--out", str(out), "--table", str(tmp_path / "train"), "--val-table",
            str(tmp_path / "val"), "--train-problems", "80", "--val-problems", "40", "--prices", "0.02",
            "--seeds", "2", "--steps", "3", "--rules", "self_consistency"]
    assert main(args) == 0
    first = json.loads((out / "curve.json").read_text())
    assert first["problems"] == {"fit": 60, "validation": 40, "scored": 20}
    assert [p["seed"] for p in first["policies"]] == [0, 1]
    assert 0 <= first["seed_agreement"]["0.02"] <= 1
    assert main(args) == 2  # the policies are there: without --resume it refuses to overwrite them
    assert "--resume" in capsys.readouterr().err
    assert main(args + ["--resume"]) == 0  # finished runs are kept: the same policies, the same curve
    again = json.loads((out / "curve.json").read_text())
    assert [p["accuracy"] for p in again["policies"]] == [p["accuracy"] for p in first["policies"]]


def _train_attempt_on_planted(tmp_path, train_problems: int) -> dict:
    """train-attempt on stored planted tables (``train_problems`` training problems, 60 validation)."""
    train, _ = planted_attempt_table(train_problems, seed=1)
    validation, _ = planted_attempt_table(60, seed=2)
    train.save(tmp_path / "train")
    validation.save(tmp_path / "val")
    out = tmp_path / "out"
    assert main(["train-attempt", "--out", str(out), "--table", str(tmp_path / "train"), "--val-table",
                 str(tmp_path / "val"), "--train-problems", str(train_problems), "--val-problems", "60",
                 "--prices", "0.05", "--steps", "1", "--rules", "self_consistency,esc"]) == 0
    return json.loads((out / "curve.json").read_text())


def test_train_attempt_warns_once_on_a_thin_training_table(tmp_path, caplog):
    caplog.set_level("WARNING")
    curve = _train_attempt_on_planted(tmp_path, 60)  # 45 fitted problems: under 100 with a right and a wrong attempt
    warned = [r.getMessage() for r in caplog.records if "too few" in r.getMessage()]
    assert len(warned) == 1 and "\n" not in warned[0]
    assert "the strongest on validation: " in warned[0] and "--train-problems" in warned[0]
    assert curve["warning"] == warned[0]


def test_train_attempt_is_silent_on_a_table_with_enough_right_attempts(tmp_path, caplog):
    caplog.set_level("WARNING")
    curve = _train_attempt_on_planted(tmp_path, 400)  # 300 fitted problems, most with a right and a wrong attempt
    assert "too few" not in caplog.text and "warning" not in curve
