"""What a new user meets first, on the tiny model: data a task needs is asked for (and named) before
the model loads, bad options and missing adapters are one line, and --max-problems bounds the
validation problems evaluate spends on choosing a Best action."""

import json
import logging

from adapter_helpers import make_adapter
from decoding_adapters.cli import main


def _math_file(path, n):
    path.write_text("".join(json.dumps({"problem": f"What is {i} + {i}?", "answer": str(2 * i)}) + "\n"
                            for i in range(n)))
    return path


def test_a_task_without_its_data_says_so_before_the_model_loads(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DECODING_ADAPTERS_DATA", raising=False)
    # the model does not exist: a data error printed first proves the data was checked first
    args = ["train-token", "--task", "math", "--model", str(tmp_path / "no-model"), "--steps", "1",
            "--out", str(tmp_path / "tok")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs data files: pass --data train=" in err[0] and "DECODING_ADAPTERS_DATA" in err[0]


def test_the_files_a_task_reads_are_named_before_the_model_loads(tmp_path, capsys, caplog):
    train = _math_file(tmp_path / "train.jsonl", 40)
    args = ["train-token", "--task", "math", "--data", f"train={train}", "--model", str(tmp_path / "no-model"),
            "--out", str(tmp_path / "tok")]
    with caplog.at_level(logging.INFO):
        assert main(args) == 2  # the missing model, after the data line
    named = [r.getMessage() for r in caplog.records if str(train) in r.getMessage()]
    assert named and named[0].startswith("task math, split train: ") and "hash band 10%-100%" in named[0]
    assert "no-model" in capsys.readouterr().err


def test_a_bad_option_is_one_line_without_the_usage(tmp_path, capsys):
    for command in ("evaluate", "select-actions", "train-token"):
        code = None
        try:
            main([command, "--k" if command != "train-token" else "--steps", "x", "--out", str(tmp_path)])
        except SystemExit as stop:
            code = stop.code
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and err[0].startswith(f"decoding-adapters {command}: error: "), err


def test_evaluate_checks_adapter_directories_before_the_model_loads(tmp_path, capsys):
    args = ["evaluate", "--model", str(tmp_path / "no-model"), "--out", str(tmp_path / "eval"), "--max-problems", "2"]
    assert main([*args, "--adapter", str(tmp_path / "missing-dir")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"decoding-adapters evaluate: error: --adapter {tmp_path / 'missing-dir'}: no such directory"
    )
    (tmp_path / "empty").mkdir()
    assert main([*args, "--adapter", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds no adapter.json" in err[0] and "no-model" not in err[0]


def test_max_problems_bounds_the_validation_problems_of_best(tmp_path, tiny_lm, tiny_model_dir, caplog):
    tok = make_adapter(tmp_path / "tok", tiny_lm, "token")
    args = ["evaluate", "--model", str(tiny_model_dir), "--max-problems", "2", "--adapter", str(tok), "--k", "1",
            "--seeds", "1", "--token-budget", "2", "--best-action", "greedy", "--baselines", "best,best-token",
            "--no-progress", "--out", str(tmp_path / "eval")]
    with caplog.at_level(logging.INFO):
        assert main(args) == 0
    choosing = [r.getMessage() for r in caplog.records if r.getMessage().startswith("choosing the best")]
    assert choosing == ["choosing the best of 4 actions on 2 validation problems"]


def test_generate_and_serve_default_to_the_same_token_budget(tmp_path, tiny_lm, capsys):
    from adapter_helpers import save_tiny_base
    from decoding_adapters.serving.server import ServerLimits

    base = save_tiny_base(tiny_lm, tmp_path / "base")
    tok = make_adapter(tmp_path / "tok", tiny_lm, "token", base_model=str(base))  # trained at budget 8
    args = ["generate", "--adapter", str(tok), "Tell me a long story.", "--parallel-budget", "4", "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)["generations"][0]
    default = ServerLimits().default_max_tokens
    assert default == 128 and max(out["completion_tokens"]) > 8  # not cut at the training budget
    assert all(n == default or reason == "stop" for n, reason in zip(out["completion_tokens"], out["finish_reasons"]))


def test_a_missing_data_file_is_named_with_the_option_that_gives_it(tmp_path, capsys):
    missing = tmp_path / "nope.jsonl"
    args = ["evaluate", "--task", "math", "--data", f"test={missing}", "--model", str(tmp_path / "no-model"),
            "--out", str(tmp_path / "eval")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"JSONL file not found: {missing}" in err[0] and "--data" in err[0]
    assert "task data=" not in err[0]
