"""Issue 18 part 4: no result silently stale, overwritten or lost, and one-line errors (naming the
file) instead of tracebacks on bad input. Each test failed on the code before the fix."""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import asdict

import pytest

from conftest import make_tiny_lm
from decoding_adapters import actions as actions_module
from decoding_adapters.actions import PRESETS, ActionSet, DecodingAction, load_action_set
from decoding_adapters.cli import main
from decoding_adapters.policies import AdapterConfig, TokenPolicy, TokenPolicyConfig, load_adapter, save_adapter
from decoding_adapters.tasks.base import read_jsonl


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


# ---------------------------------------------------------------- data files: errors before the model loads

NO_MODEL = ["--model", "/nonexistent/model-dir"]  # loading it would fail: an error about the data proves order


def test_invalid_utf8_in_a_data_file_names_file_and_line(tmp_path):
    path = _write(tmp_path / "d.jsonl", b'{"question": "1+1", "answer": "#### 2"}\n{"question": "\xff"}\n')
    with pytest.raises(ValueError, match=r"d\.jsonl:2: not valid UTF-8"):
        read_jsonl(path, ["question"])


@pytest.mark.parametrize("content", [None, "", "\n\n"])
def test_missing_or_empty_data_file_is_reported_before_the_model_loads(tmp_path, capsys, content):
    data = tmp_path / "d.jsonl"
    if content is not None:
        data.write_text(content)
    for command in (["evaluate", "--split", "test"], ["select-actions", "--split", "test"]):
        code = main([*command, "--task", "gsm8k", "--data", f"test={data}", *NO_MODEL, "--out", str(tmp_path / "o")])
        err = capsys.readouterr().err
        assert code == 2 and "Traceback" not in err and str(data) in err and "nonexistent" not in err, err


@pytest.mark.parametrize("value", ["0", "-3"])
def test_max_problems_must_be_positive(tmp_path, capsys, value):
    for command in ("evaluate", "select-actions"):
        code = main([command, "--max-problems", value, *NO_MODEL, "--out", str(tmp_path / "o")])
        err = capsys.readouterr().err
        assert code == 2 and "--max-problems" in err and "nonexistent" not in err, err


# ---------------------------------------------------------------- outputs: checked before any work


def test_evaluate_refuses_a_finished_evaluation_without_force(tmp_path, capsys):
    out = tmp_path / "eval"
    out.mkdir()
    (out / "results.json").write_text("{}")
    assert main(["evaluate", *NO_MODEL, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--force" in err and "nonexistent" not in err
    # with --force the pre-flight passes and the run goes on to load the model (which fails here)
    assert main(["evaluate", *NO_MODEL, "--out", str(out), "--force"]) == 2
    assert "nonexistent" in capsys.readouterr().err
    assert (out / "results.json").read_text() == "{}"


@pytest.mark.parametrize("command", ["evaluate", "select-actions", "train-token", "train-sequence", "demo"])
def test_out_naming_a_file_fails_before_any_work(tmp_path, capsys, command):
    out = _write(tmp_path / "results.txt", "not a directory")
    assert main([command, *NO_MODEL, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "is a file" in err and "Traceback" not in err and "nonexistent" not in err, err


# ---------------------------------------------------------------- adapter files


def _saved_adapter(directory, lm, **overrides):
    policy = TokenPolicy(TokenPolicyConfig(hidden_size=lm.hidden_size, num_actions=4, token_budget=8, width=8))
    actions = ActionSet(PRESETS["math-token"]).to_json()
    config = AdapterConfig(kind="token", policy=asdict(policy.config), actions=actions, base_model="tiny",
                           base_fingerprint=lm.fingerprint(), token_budget=8, **overrides)
    save_adapter(directory, policy, config)
    return directory


def _edit_json(path, edit):
    data = json.loads(path.read_text())
    path.write_text(json.dumps(edit(data)))


@pytest.mark.parametrize(
    "edit, expected",
    [
        (lambda d: [d], "JSON object"),
        (lambda d: {k: v for k, v in d.items() if k != "actions"}, "missing: ['actions']"),
        (lambda d: {**d, "colour": "red"}, "unknown: ['colour']"),
        (lambda d: {**d, "policy": {**d["policy"], "hidden_size": 99}}, "base_fingerprint.hidden_size"),
        (lambda d: {**d, "policy": {**d["policy"], "num_actions": 3}}, "3 outputs but 4 actions"),
        (lambda d: {**d, "actions": [{"temperature": "hot"}] * 4}, "temperature"),
        (lambda d: {**d, "policy": {**d["policy"], "depth": 2}}, "token policy"),
    ],
)
def test_bad_adapter_json_is_one_line_naming_the_file(tmp_path, tiny_lm, edit, expected):
    directory = _saved_adapter(tmp_path / "a", tiny_lm)
    _edit_json(directory / "adapter.json", edit)
    with pytest.raises(ValueError) as err:
        load_adapter(directory)
    message = str(err.value)
    assert str(directory / "adapter.json") in message and expected in message and "\n" not in message


def test_truncated_or_mismatched_weights_are_one_line_naming_the_file(tmp_path, tiny_lm):
    directory = _saved_adapter(tmp_path / "a", tiny_lm)
    weights = directory / "adapter.safetensors"
    full = weights.read_bytes()
    weights.write_bytes(full[: len(full) // 2])
    with pytest.raises(ValueError, match="adapter.safetensors.*truncated or corrupt"):
        load_adapter(directory)
    other = _saved_adapter(tmp_path / "b", tiny_lm)
    _edit_json(other / "adapter.json", lambda d: {**d, "policy": {**d["policy"], "width": 16}})
    with pytest.raises(ValueError, match="does not fit the policy"):
        load_adapter(other)


def test_bad_adapter_through_the_cli_is_one_line(tmp_path, tiny_model_dir, capsys):
    directory = _saved_adapter(tmp_path / "a", make_tiny_lm())
    _edit_json(directory / "adapter.json", lambda d: [d])
    code = main(["evaluate", "--model", str(tiny_model_dir), "--adapter", str(directory), "--max-problems", "1",
                 "--out", str(tmp_path / "eval"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and "adapter.json" in err


def test_lm_dtype_is_recorded_old_files_load_and_a_mismatch_warns_once(tmp_path, tiny_lm):
    directory = _saved_adapter(tmp_path / "a", tiny_lm)
    assert load_adapter(directory)[1].lm_dtype == "float32"
    # a file written before lm_dtype existed (and before the fingerprint had a dtype) still loads
    _edit_json(directory / "adapter.json", lambda d: {**{k: v for k, v in d.items() if k != "lm_dtype"},
                                                      "base_fingerprint": {"hidden_size": tiny_lm.hidden_size}})
    assert load_adapter(directory, tiny_lm)[1].lm_dtype is None
    trained_in_bf16 = _saved_adapter(tmp_path / "b", tiny_lm, lm_dtype="bfloat16")
    with pytest.warns(UserWarning, match="bfloat16.*float32"):
        load_adapter(trained_in_bf16, tiny_lm)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_adapter(trained_in_bf16, tiny_lm)  # once is enough
