"""train-sequence / train-token end to end through the CLI on the tiny model and a tiny budget."""

import json

import pytest

from decoding_adapters.cli import main
from decoding_adapters.policies.networks import load_adapter


def common(tiny_model_dir, out):
    return ["--force", "--model", str(tiny_model_dir), "--task", "arithmetic", "--token-budget", "4", "--out", str(out),
            "--val-every", "2", "--val-problems", "4", "--checkpoint-every", "1", "--max-train-prompts", "8"]


def test_train_token_cli_and_resume(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "tok"
    args = ["train-token", *common(tiny_model_dir, out), "--steps", "2", "--prompts-per-step", "2", "--group-size", "2",
            "--filter-samples", "0"]
    assert main(args) == 0
    policy, cfg = load_adapter(out)
    assert cfg.kind == "token" and cfg.policy["use_budget"] and len(cfg.actions) == 4
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [0, 1, 2] and "val_reward" in log[-1]
    # an existing run is never overwritten silently, and --resume at the end is a no-op
    assert main(args) == 2
    assert "--resume" in capsys.readouterr().err
    assert main(args + ["--resume"]) == 0


def test_train_sequence_cli_without_budget(tiny_model_dir, tmp_path):
    out = tmp_path / "seq"
    args = ["train-sequence", *common(tiny_model_dir, out), "--steps", "2", "--prompts-per-step", "2",
            "--parallel-budgets", "1,2", "--no-use-budget", "--actions", "math-token"]
    assert main(args) == 0
    _, cfg = load_adapter(out)
    assert cfg.kind == "sequence" and not cfg.policy["use_budget"] and cfg.parallel_budgets == [1, 2]
    assert (out / "embeddings.pt").exists()


def test_bad_input_gives_one_clear_line(tmp_path, capsys):
    assert main(["train-token", "--model", str(tmp_path / "missing"), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err
    with pytest.raises(SystemExit):
        main(["train-sequence", "--parallel-budgets", "0,1", "--out", str(tmp_path)])
