"""What the command line refuses, and how: an abbreviated or unknown option (pointing to the
sub-command's own help), every ``make-rule`` knob out of range (one line naming the option, before
anything is written), an output directory that already holds files, a full disk (one line naming the
file, no temporary file left), and a refused run leaves no lock file."""

from __future__ import annotations

import argparse
import errno
import pathlib

import pytest

from decoding_adapters.cli import _help_text, build_parser, main

ESC = ["make-rule", "--rule", "esc", "--window", "2"]


def test_no_parser_accepts_an_abbreviation():
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert not parser.allow_abbrev and all(not p.allow_abbrev for p in commands.values())


def test_an_unknown_option_points_to_the_sub_command_help(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["train-attempt", "--out", str(tmp_path / "a"), "--price", "0.1"])
    err = capsys.readouterr().err
    assert "unrecognized arguments: --price 0.1" in err and "(see decoding-adapters train-attempt --help)" in err
    assert not (tmp_path / "a").exists()


def test_the_help_names_every_command_and_serve_every_adapter_kind():
    top = " ".join(_help_text(["--help"]).split())
    assert all(name in top for name in ("rules", "train-attempt", "make-rule"))
    serve = " ".join(_help_text(["serve", "--help"]).split())
    assert all(name in serve for name in ("train-sequence", "train-token", "train-draft", "train-attempt",
                                          "make-rule"))


@pytest.mark.parametrize("knobs,message", [
    (["--rule", "self_consistency", "--n", "1000000000"], "--n must be between 1 and 256"),
    (["--rule", "self_consistency", "--n", "257"], "--n must be between 1 and 256"),
    (["--rule", "confidence_threshold", "--threshold", "0.5", "--redecodes", "100000", "--feature",
      "max_prob_mean"], "--redecodes must be between 1 and 255"),
    (["--rule", "deepconf_offline", "--n", "4", "--eta", "1000"], "--eta must be in [0, 100]"),
    (["--rule", "deepconf_offline", "--n", "4", "--eta", "-1"], "--eta must be in [0, 100]"),
    (["--rule", "deepconf_online", "--eta", "10", "--warmup", "2", "--consensus", "5"], "--consensus must be in"),
    (["--rule", "confidence_threshold", "--threshold", "nan", "--redecodes", "2", "--feature", "max_prob_mean"],
     "--threshold must be a finite number"),
    (["--rule", "confidence_threshold", "--threshold", "1e300", "--redecodes", "2", "--feature", "max_prob_mean"],
     "--threshold must be in"),
    (["--rule", "cges", "--threshold", "0.9", "--feature", "max_prob_mean", "--calibration", "1,0,0,0"],
     "--calibration scale must be in (0,"),
    (["--rule", "cges", "--threshold", "0.9", "--feature", "max_prob_mean", "--calibration", "1,inf,0,1"],
     "--calibration intercept must be a finite number"),
])
def test_make_rule_checks_every_knob_before_writing(knobs, message, tmp_path, capsys):
    assert main(["make-rule", *knobs, "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_a_rule_with_a_zero_calibration_scale_is_refused_at_load_too(tmp_path):
    from decoding_adapters.policies.kind_rule import RuleConfig

    with pytest.raises(ValueError, match="calibration.scale"):
        RuleConfig("cges", {"threshold": 0.9, "feature": "max_prob_mean", "max_draws": 4}, 2,
                   calibration={"slope": 1.0, "intercept": 0.0, "mean": 0.0, "scale": 0.0})


def test_make_rule_refuses_a_directory_that_holds_files_unless_forced(tmp_path, capsys):
    out = tmp_path / "esc"
    assert main([*ESC, "--out", str(out)]) == 0
    assert main([*ESC, "--max-draws", "4", "--out", str(out)]) == 2
    assert "--force" in capsys.readouterr().err
    assert '"max_draws": 8' in (out / "adapter.json").read_text()
    assert main([*ESC, "--max-draws", "4", "--out", str(out), "--force"]) == 0
    assert '"max_draws": 4' in (out / "adapter.json").read_text()


def test_make_rule_on_a_full_disk_is_one_line_naming_the_file(tmp_path, capsys, monkeypatch):
    import shutil
    from collections import namedtuple

    from safetensors import SafetensorError

    import decoding_adapters.policies.adapter_files as adapter_files

    usage = namedtuple("usage", "total used free")

    def full(*args, **kwargs):
        raise SafetensorError("Error while serializing: IoError(Os { code: 28, kind: StorageFull })")

    monkeypatch.setattr(adapter_files, "save_file", full)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(1 << 30, 1 << 30, 0))
    assert main([*ESC, "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "no space left on device writing" in err and "adapter.safetensors" in err
    assert len(err.strip().splitlines()) == 1
    monkeypatch.undo()

    real = pathlib.Path.write_text

    def card_fills_the_disk(self, text, *args, **kwargs):
        if self.name.startswith("README.md"):
            real(self, text[:10], *args, **kwargs)  # part of it, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, text, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "write_text", card_fills_the_disk)
    assert main([*ESC, "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "README.md" in err and len(err.strip().splitlines()) == 1
    assert not [p.name for p in (tmp_path / "b").iterdir() if ".tmp" in p.name]


def test_a_refused_evaluate_leaves_no_lock(tmp_path, capsys):
    out = tmp_path / "eval"
    assert main(["evaluate", "--task", "jsonl", "--data", str(tmp_path / "missing.jsonl"), "--out", str(out)]) == 2
    assert "missing.jsonl" in capsys.readouterr().err
    assert not out.exists()
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["evaluate", "--task", "jsonl", "--data", str(tmp_path / "missing.jsonl"), "--out", str(out)]) == 2
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_train_token_resumes_only_on_the_model_it_was_started_with(tiny_model_dir, tmp_path, capsys):
    from conftest import make_tiny_lm

    other = tmp_path / "wider-model"
    wider = make_tiny_lm(hidden_size=48)
    wider.model.save_pretrained(other)
    wider.tokenizer.save_pretrained(other)
    out = tmp_path / "tok"
    argv = ["train-token", "--force", "--token-budget", "3", "--steps", "1", "--prompts-per-step", "2", "--group-size",
            "2", "--filter-samples", "0", "--val-problems", "2", "--max-train-prompts", "2", "--out", str(out)]
    assert main([*argv, "--model", str(tiny_model_dir)]) == 0
    capsys.readouterr()
    assert main([*argv, "--steps", "2", "--resume", "--model", str(other)]) == 2
    err = capsys.readouterr().err
    assert f"was trained on --model {tiny_model_dir}" in err and len(err.strip().splitlines()) == 1
    assert main([*argv, "--steps", "2", "--resume"]) == 0  # without --model: the model it started with


def test_rules_on_a_full_disk_names_the_figure(tmp_path, capsys, monkeypatch):
    from matplotlib.figure import Figure

    from decoding_adapters.evaluation.sample_table import synthetic_sample_table

    synthetic_sample_table(30, samples=2, seed=1).save(tmp_path / "val")
    synthetic_sample_table(20, samples=2, seed=2).save(tmp_path / "test")

    def full(self, path, *args, **kwargs):
        pathlib.Path(path).write_bytes(b"\x89PNG")  # part of it, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", full)
    out = tmp_path / "out"
    assert main(["rules", "--table", str(tmp_path / "test"), "--validation-table", str(tmp_path / "val"),
                 "--rules", "self_consistency", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "curves.png" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()  # no temporary file, no curves.json: nothing of the refused run is left
