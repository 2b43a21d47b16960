"""What ``--help`` tells a user: every default is a value the option accepts, ``--task`` names every
registered task, option help stays short, and no help text speaks of the project's history."""

from __future__ import annotations

import argparse
import re

import pytest

from decoding_adapters.cli import build_parser
from decoding_adapters.cli.common import model_spec
from decoding_adapters.tasks import available_tasks

PARSER = build_parser()
COMMANDS = next(a for a in PARSER._actions if isinstance(a, argparse._SubParsersAction)).choices
HISTORY = re.compile(r"\bissues? \d|\bcommit [0-9a-f]{7}", re.IGNORECASE)
MAX_HELP_CHARS = 400  # about five lines of argparse's help column: what it does and when to change it


def _options(command: str) -> list[argparse.Action]:
    return [a for a in COMMANDS[command]._actions if a.option_strings and a.help != argparse.SUPPRESS]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_default_is_an_accepted_choice(command):
    for action in _options(command):
        if action.choices is not None and action.default not in (None, argparse.SUPPRESS):
            defaults = action.default if isinstance(action.default, list) else [action.default]
            assert set(defaults) <= set(action.choices), (command, action.option_strings, action.default)


REQUIRED = {  # the fewest arguments each model-loading command parses with
    "train-token": ["--out", "x"],
    "train-sequence": ["--out", "x"],
    "select-actions": ["--out", "x"],
    "evaluate": ["--out", "x"],
    "generate": ["--adapter", "a", "hi"],
    "serve": ["--adapter", "a"],
}


@pytest.mark.parametrize("dtype", ["auto", "float32", "bfloat16", "float16"])
def test_dtype_accepts_auto_its_default_and_every_named_dtype(dtype):
    for command, required in REQUIRED.items():
        assert PARSER.parse_args([command, *required]).dtype == "auto"  # the default
        args = PARSER.parse_args([command, "--dtype", dtype, *required])
        assert args.dtype == dtype
        if command != "generate" and command != "serve":  # those pass it to Adapter.from_pretrained
            assert model_spec(args).dtype == dtype
    with pytest.raises(SystemExit):
        PARSER.parse_args(["train-token", "--dtype", "bf16", "--out", "x"])


BUILT_IN_TASKS = {"arithmetic", "pyfunc", "math", "gsm8k", "humaneval", "codecontests", "jsonl", "mix"}


def test_task_help_names_every_registered_task():
    tasks = BUILT_IN_TASKS  # what the package registers (other tests may register more later)
    assert tasks <= set(available_tasks())
    for command in ("select-actions", "train-sequence", "train-token", "evaluate"):
        [task] = [a for a in _options(command) if "--task" in a.option_strings]
        named = set(re.findall(r"[a-z0-9]+", task.help))
        assert set(tasks) <= named, (command, sorted(set(tasks) - named))


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_option_help_is_short_and_says_what_is_true_now(command):
    for action in _options(command):
        assert len(action.help) <= MAX_HELP_CHARS, (command, action.option_strings, len(action.help))
        assert not HISTORY.search(action.help), (command, action.option_strings, action.help)


def test_top_level_help_speaks_of_no_issue():
    assert not HISTORY.search(PARSER.format_help())
