"""Options derived from config dataclasses: types, help from field docstrings, round trip, and
every field of every trainer / evaluation / demo config reachable from the command line."""

from __future__ import annotations

import argparse
import dataclasses
import shlex
from dataclasses import dataclass, field
from typing import Literal

import pytest

from decoding_adapters.cli import build_parser
from decoding_adapters.cli.config_args import add_config_arguments, build_config, field_docs
from decoding_adapters.cli.study import study_command
from decoding_adapters.evaluation import EvalConfig
from decoding_adapters.experiments.presets import SIZES
from decoding_adapters.experiments.study_config import StudyConfig
from decoding_adapters.training.sequence import SequenceTrainConfig
from decoding_adapters.training.token import TokenTrainConfig


@dataclass(frozen=True)
class Example:
    """example options"""

    name: str
    """a required name (100% documented)"""
    mode: Literal["a", "b"] = "a"
    """which mode"""
    flag: bool = True
    """a switch"""
    sizes: tuple[int, ...] = (1, 2)
    limit: int | None = 3
    paths: list[str] = field(default_factory=list)
    rate: float = field(default=0.5, metadata={"help": "from metadata"})


def parse(argv, **kwargs):
    p = argparse.ArgumentParser()
    add_config_arguments(p, Example, **kwargs)
    return p, p.parse_args(argv)


def test_types_defaults_and_round_trip():
    _, args = parse(["--name", "x"])
    assert build_config(Example, args) == Example(name="x")
    _, args = parse(["--name", "x", "--mode", "b", "--no-flag", "--sizes", "4,8", "--limit", "none",
                     "--paths", "p", "--paths", "q", "--rate", "2"])
    assert build_config(Example, args) == Example("x", "b", False, (4, 8), None, ["p", "q"], 2.0)


@pytest.mark.parametrize("argv", [[], ["--name", "x", "--mode", "c"], ["--name", "x", "--sizes", "0,1"],
                                  ["--name", "x", "--sizes", "a"]])
def test_bad_values_are_argparse_errors(argv):
    with pytest.raises(SystemExit):
        parse(argv)


def test_help_comes_from_docstrings_and_metadata():
    assert field_docs(Example)["name"] == "a required name (100% documented)"
    text = parse(["--name", "x"])[0].format_help()
    assert "a required name (100% documented)" in text and "from metadata" in text and "{a,b}" in text
    assert "--flag, --no-flag" in text and "example options" in text


def test_renames_aliases_and_overrides():
    _, args = parse(["--the-name", "x", "--switch"], flags={"name": ["--the-name"]}, aliases={"flag": ["switch"]},
                    defaults={"flag": False})
    assert args.name == "x" and args.flag is True
    _, args = parse(["--mode", "b"], overrides_only=True)
    assert not hasattr(args, "flag")
    assert build_config(Example, args, base=Example("base")) == Example("base", mode="b")


@pytest.mark.parametrize("command,config", [("train-sequence", SequenceTrainConfig), ("train-token", TokenTrainConfig),
                                            ("evaluate", EvalConfig), ("demo", StudyConfig),
                                            ("reproduce", StudyConfig), ("domains", StudyConfig)])
def test_every_config_field_is_an_option(command, config):
    parser = build_parser(command)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    dests = {a.dest for a in sub._actions}
    missing = []
    for f in dataclasses.fields(config):
        inner = getattr(config(), f.name)
        if dataclasses.is_dataclass(inner):  # a nested config: its fields as --name.field, but those the study sets
            missing += [f"{f.name}.{g.name}" for g in dataclasses.fields(inner)
                        if g.name not in f.metadata.get("exclude", ()) and f"{f.name}.{g.name}" not in dests]
        elif f.name not in dests:
            missing.append(f.name)
    assert not missing


def test_trainer_flags_build_the_config():
    parser = build_parser("train-sequence")
    argv = ["train-sequence", "--out", "x", "--parallel-budgets", "1,4", "--no-use-budget", "--policy-hidden", "16"]
    args = parser.parse_args(argv + ["--seed", "3", "--token-budget", "8", "--max-train-prompts", "none"])
    cfg = build_config(SequenceTrainConfig, args)
    assert cfg == SequenceTrainConfig(parallel_budgets=(1, 4), use_budget=False, policy_hidden=16, seed=3,
                                      token_budget=8, max_train_prompts=None)
    for retired in (["--budgets", "1,4"], ["--no-budget"]):  # one name per option
        with pytest.raises(SystemExit):
            parser.parse_args(["train-sequence", "--out", "x", *retired])
    demo = build_parser("demo").parse_args(["demo", "--size", "tiny", "--seeds", "1", "--token.lr", "0.01",
                                            "--selection.pool-subsample", "none", "--eval.k-values", "1,4"])
    cfg = build_config(StudyConfig, demo, base=SIZES[demo.size])
    tiny = SIZES["tiny"]
    assert cfg == dataclasses.replace(tiny, seeds=1, token=dataclasses.replace(tiny.token, lr=0.01),
                                      selection=dataclasses.replace(tiny.selection, pool_subsample=None),
                                      eval=dataclasses.replace(tiny.eval, k_values=(1, 4)))
    assert cfg.eval.seeds == 1 and cfg.sequence.steps == tiny.sequence.steps  # the study's seeds reach the evaluation


def test_a_study_run_is_reproduced_by_its_command():
    argv = ["demo", "--size", "tiny", "--out", "o", "--seeds", "1", "--token.lr", "0.01", "--selection.pool-subsample",
            "none", "--sequence.parallel-budgets", "1", "--eval.k-values", "1,4"]
    args = build_parser("demo").parse_args(argv)
    cfg = build_config(StudyConfig, args, base=SIZES["tiny"])
    command = study_command("demo", args, cfg, SIZES)
    assert "--token.lr 0.01" in command and "--token.token-budget" not in command  # the study's own budget only
    again = build_parser("demo").parse_args(shlex.split(command)[1:])
    assert build_config(StudyConfig, again, base=SIZES["tiny"]) == cfg


def test_the_full_study_is_reproduce_not_a_demo_size():
    with pytest.raises(SystemExit):
        build_parser("demo").parse_args(["demo", "--size", "full"])
    assert build_parser("reproduce").parse_args(["reproduce", "--size", "full"]).size == "full"
