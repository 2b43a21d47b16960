"""Every number an adapter file holds is checked against sane bounds before anything is built from
it: one line naming the file and the field, never a huge allocation, a traceback or a NaN that
silently decides every choice. A checkpoint's step is checked the same way, and a fake GGUF base
model is one line."""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict

import pytest

from decoding_adapters.cli import main
from decoding_adapters.core.files import Checkpoint
from decoding_adapters.decoding.actions import PRESETS, ActionSet
from decoding_adapters.policies.networks import (
    AdapterConfig,
    TokenPolicy,
    TokenPolicyConfig,
    load_adapter,
    save_adapter,
)


def _adapter(directory, lm):
    policy = TokenPolicy(TokenPolicyConfig(hidden_size=lm.hidden_size, num_actions=4, token_budget=8, width=8,
                                           prior=(0.25, 0.25, 0.25, 0.25)))
    actions = ActionSet(PRESETS["math-token"]).to_json()
    config = AdapterConfig(kind="token", policy=asdict(policy.config), actions=actions, base_model="tiny",
                           base_fingerprint=lm.fingerprint(), token_budget=8)
    save_adapter(directory, policy, config)
    return directory


def _policy(**fields):
    return lambda d: {**d, "policy": {**d["policy"], **fields}}


@pytest.mark.parametrize(
    "edit, expected",
    [
        (_policy(layers=10**7), "policy.layers"),
        (_policy(width=10**7), "policy.width"),
        (_policy(width=16_384, layers=64), "parameters"),
        (_policy(width=-5), "policy.width"),
        (_policy(width="256"), "policy.width must be an integer"),
        (_policy(width=True), "policy.width must be an integer"),
        (_policy(token_budget=1e30), "policy.token_budget"),
        (_policy(dropout=1.5), "policy.dropout"),
        (_policy(temperature=0), "policy.temperature"),
        (lambda d: {**d, "token_budget": 1e30}, "token_budget"),
        (lambda d: {**d, "token_budget": 10**12}, "token_budget"),
        (lambda d: {**d, "parallel_budgets": [0]}, "parallel_budgets[0]"),
        (lambda d: {**d, "base_fingerprint": {**d["base_fingerprint"], "hidden_size": -1}}, "hidden_size"),
        (lambda d: {**d, "kind": {"kind": "token"}}, "kind must be a string"),
        (lambda d: {**d, "task": "x" * 1000}, "task must be a task name"),
        (lambda d: {**d, "task_options": ["data.jsonl"]}, "task_options must be an object"),
        (lambda d: {**d, "task_options": {"instruction": "x" * 50_000}}, "task_options.instruction"),
        (lambda d: {**d, "task_options": {"fields": list(range(1000))}}, "task_options.fields"),
        (lambda d: {**d, "task_options": {"k": [1e300]}}, "task_options.k[0]"),
    ],
)
def test_out_of_bounds_numbers_are_one_line(tmp_path, tiny_lm, edit, expected):
    directory = _adapter(tmp_path / "a", tiny_lm)
    path = directory / "adapter.json"
    path.write_text(json.dumps(edit(json.loads(path.read_text()))))
    started = time.monotonic()
    with pytest.raises(ValueError) as err:
        load_adapter(directory)
    message = str(err.value)
    assert expected in message and str(path) in message and "\n" not in message, message
    assert time.monotonic() - started < 5  # refused before anything of that size is built


def test_a_nan_prior_is_refused(tmp_path, tiny_lm):
    directory = _adapter(tmp_path / "a", tiny_lm)
    path = directory / "adapter.json"
    path.write_text(path.read_text().replace("0.25,", "NaN,", 1))
    with pytest.raises(ValueError, match="NaN"):
        load_adapter(directory)
    with pytest.raises(ValueError, match="prior"):
        TokenPolicyConfig(hidden_size=8, num_actions=2, prior=(math.nan, 1.0))


def test_a_kind_nested_100k_deep_is_one_line(tmp_path, tiny_lm):
    directory = _adapter(tmp_path / "a", tiny_lm)
    path = directory / "adapter.json"
    data = json.loads(path.read_text())
    text = json.dumps({**data, "kind": "KIND"}).replace('"KIND"', "[" * 100_000 + "]" * 100_000)
    path.write_text(text)
    with pytest.raises(ValueError, match="nests deeper"):
        load_adapter(directory)


def test_through_the_cli_no_traceback(tmp_path, tiny_lm, capsys):
    directory = _adapter(tmp_path / "a", tiny_lm)
    path = directory / "adapter.json"
    path.write_text(json.dumps(_policy(width="256")(json.loads(path.read_text()))))
    code = main(["generate", "--adapter", str(directory), "hi"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_a_fake_gguf_base_model_is_one_line(tmp_path, tiny_lm, capsys, monkeypatch):
    monkeypatch.setenv("DECODING_ADAPTERS_CACHE", str(tmp_path / "cache"))
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 8 + b"\xff" * 7 + b"\x7f")
    directory = _adapter(tmp_path / "a", tiny_lm)
    path = directory / "adapter.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "base_model": str(fake)}))
    code = main(["generate", "--adapter", str(directory), "hi"])
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("INFO")]
    assert code == 2 and len(err) == 1 and "fake.gguf" in err[0], err
    assert not [p for p in (tmp_path / "cache").glob("*") if ".tmp" in p.name]  # no half conversion left


@pytest.mark.parametrize("step", [-1, 2**70, 1.5, "3", True])
def test_a_checkpoint_step_out_of_bounds_is_refused(tmp_path, step):
    ckpt = Checkpoint(tmp_path)
    ckpt.save({"step": step, "config": {}})
    with pytest.raises(ValueError, match="step"):
        ckpt.load()
