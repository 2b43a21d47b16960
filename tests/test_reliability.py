"""Issue 18 part 4: no result silently stale, overwritten or lost, and one-line errors (naming the
file) instead of tracebacks on bad input. Each test failed on the code before the fix."""

from __future__ import annotations

import math

import pytest

from decoding_adapters import actions as actions_module
from decoding_adapters.actions import DecodingAction, load_action_set
from decoding_adapters.cli import main


def _write(path, text: str | bytes):
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


# ---------------------------------------------------------------- decoding actions


@pytest.mark.parametrize(
    "fields",
    [
        {"temperature": 50.0},
        {"temperature": math.inf},
        {"temperature": math.nan},
        {"temperature": "hot"},
        {"temperature": None},
        {"top_k": True},
        {"top_k": 2.5},
        {"top_p": "0.9"},
        {"min_p": True},
    ],
)
def test_decoding_action_rejects_bad_values(fields):
    with pytest.raises(ValueError):
        DecodingAction(**fields)


def test_decoding_action_accepts_the_bound():
    bound = actions_module.MAX_TEMPERATURE
    assert DecodingAction(temperature=bound).temperature == bound
    assert DecodingAction(temperature=1, top_k=5).name == "T=1,top_k=5"


@pytest.mark.parametrize(
    "content, expected",
    [
        ('{"names": ["a"]}', "'actions'"),
        ("3", "list of actions"),
        ("[1, 2]", "action 0"),
        ('[{"temperature": "hot"}]', "temperature"),
        ('[{"temperature": null}]', "temperature"),
        ('[{"temperature": 1e999}]', "temperature"),
        ('{"actions": [{"top_k": true}]}', "top_k"),
        ("{not json", "not a JSON action file"),
    ],
)
def test_bad_action_file_is_one_line_naming_the_file(tmp_path, content, expected):
    path = _write(tmp_path / "acts.json", content)
    with pytest.raises(ValueError) as err:
        load_action_set(path)
    message = str(err.value)
    assert str(path) in message and expected in message and "\n" not in message


def test_bad_action_file_through_the_cli(tmp_path, capsys):
    path = _write(tmp_path / "acts.json", '{"names": []}')
    code = main(["train-sequence", "--actions", str(path), "--model", str(tmp_path / "nomodel"),
                 "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and str(path) in err
