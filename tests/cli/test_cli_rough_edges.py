"""What a new user meets past the first commands: what train-token says it kept and why it has fewer
prompts, help lines that end where a sentence or clause does, comma lists in logs, and what
``generate --help`` names."""

from __future__ import annotations

import logging

import torch

from decoding_adapters.cli import main
from decoding_adapters.cli.help import short_help_text

TINY_TOKEN = ["--force", "--token-budget", "4", "--val-problems", "2", "--prompts-per-step", "2", "--group-size", "2"]


def _half_solved(task, problems, result):
    """Every prompt's rows alternate 0 and 1: filtering keeps every prompt (pass rate 0.5) and every
    validation scores 0.5, so no later step beats the start."""
    return (torch.arange(len(result.texts)) % 2).float()


def test_train_token_says_it_kept_the_start_and_why_it_has_fewer_prompts(tiny_model_dir, tmp_path, capsys, caplog,
                                                                         monkeypatch):
    import decoding_adapters.training.token as token

    monkeypatch.setattr(token, "score_rows", _half_solved)
    caplog.set_level(logging.INFO)
    argv = ["train-token", "--model", str(tiny_model_dir), *TINY_TOKEN, "--steps", "2", "--val-every", "1",
            "--filter-samples", "2", "--max-train-prompts", "3", "--out", str(tmp_path / "tok")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "kept step 0 of 2, the untrained start" in out
    assert "the adapter kept is step 0, the untrained start" in caplog.text
    assert "--max-train-prompts 3 capped the prompts probed" in caplog.text and "ran out" not in caplog.text


def test_help_lines_end_at_a_sentence_or_a_clause():
    long = ("the plan's minutes, scaled by the decode probe (a few seconds at the start, 0.5 x on a machine half "
            "as fast as the reference machine); the run cuts the later stages when the finished ones ran slower")
    short = short_help_text(long)
    assert short.endswith("reference machine) ...") or short == long
    assert not short.rstrip(" .").endswith("the")
    sentence = "Adam learning rate. " + "More about it, " * 12 + "and the rest."
    assert short_help_text(sentence) == "Adam learning rate. ..."


def test_resume_logs_tuples_as_comma_lists(tiny_model_dir, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    out = tmp_path / "seq"
    argv = ["train-sequence", "--force", "--model", str(tiny_model_dir), "--token-budget", "4", "--steps", "1",
            "--prompts-per-step", "2", "--max-train-prompts", "4", "--val-problems", "2", "--parallel-budgets", "1,2",
            "--out", str(out)]
    assert main(argv) == 0
    assert main(["train-sequence", "--out", str(out), "--resume", "--steps", "2"]) == 0
    assert "--parallel-budgets 1,2" in caplog.text and "(1, 2)" not in caplog.text


def test_generate_help_names_every_trainer(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert main(["generate", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert all(name in text for name in ("train-sequence", "train-token", "train-draft"))


def test_a_sequence_adapter_records_its_token_budget_and_an_interrupt_has_its_own_line(
        tiny_model_dir, tmp_path, capsys, monkeypatch):
    from decoding_adapters.policies.networks import load_adapter
    from decoding_adapters.training.sequence import SequenceTrainer

    argv = ["train-sequence", "--force", "--model", str(tiny_model_dir), "--token-budget", "3", "--steps", "1",
            "--prompts-per-step", "2", "--max-train-prompts", "4", "--val-problems", "2", "--parallel-budgets", "1"]
    assert main([*argv, "--out", str(tmp_path / "seq")]) == 0
    assert load_adapter(tmp_path / "seq")[1].token_budget == 3
    assert "| token budget b of training | 3 |" in (tmp_path / "seq" / "README.md").read_text()

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(SequenceTrainer, "train_step", interrupted)
    capsys.readouterr()
    assert main([*argv, "--out", str(tmp_path / "cut")]) == 130
    assert "\ninterrupted; " in capsys.readouterr().err


def test_one_k_is_named_once():
    from decoding_adapters.reporting.report import evidence_lines

    entry = {"mean": 0.5, "ci_low": 0.1, "ci_high": 0.9}
    results = {"Greedy": {"pass@1": entry}, "Best": {"pass@1": entry}}
    details = {"problems": ["a", "b"]}
    text = " ".join(evidence_lines(results, details))
    assert "at pass@1." in text and "pass@1 or pass@1" not in text


def test_evaluate_continues_after_ctrl_c_from_its_finished_seeds(tiny_model_dir, tmp_path, capsys, caplog,
                                                                  monkeypatch):
    import json

    from decoding_adapters.evaluation import runner

    argv = ["evaluate", "--model", str(tiny_model_dir), "--max-problems", "2", "--seeds", "2", "--k", "1",
            "--token-budget", "3", "--best-problems", "2", "--no-progress"]
    assert main([*argv, "--out", str(tmp_path / "whole")]) == 0
    keys_for_seed = runner._keys_for_seed

    def interrupted_at_seed_1(methods, cfg, s, problems, choices):
        if s == 1:
            raise KeyboardInterrupt
        return keys_for_seed(methods, cfg, s, problems, choices)

    monkeypatch.setattr(runner, "_keys_for_seed", interrupted_at_seed_1)
    capsys.readouterr()
    assert main([*argv, "--out", str(tmp_path / "cut")]) == 130
    assert "finished seeds are saved" in capsys.readouterr().err

    monkeypatch.setattr(runner, "_keys_for_seed", keys_for_seed)
    caplog.set_level(logging.INFO)
    assert main([*argv, "--out", str(tmp_path / "cut")]) == 0
    assert "seed(s) 0 already decoded" in caplog.text  # seed 0 came from the checkpoint
    assert not (tmp_path / "cut" / "eval_checkpoint.json").exists()
    whole = json.loads((tmp_path / "whole" / "results.json").read_text())
    resumed = json.loads((tmp_path / "cut" / "results.json").read_text())
    assert {m: r["pass@1"]["mean"] for m, r in resumed.items()} == {m: r["pass@1"]["mean"] for m, r in whole.items()}
