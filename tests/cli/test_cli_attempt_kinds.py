"""``make-rule`` writes a fixed rule as an adapter, and ``generate`` decodes with it and with an
attempt policy: the output says how many attempts, with which arms, and why it stopped."""

import json

import pytest
import torch

from decoding_adapters.cli import main
from decoding_adapters.decoding.actions import GREEDY, DecodingAction
from decoding_adapters.decoding.confidence import CONFIDENCE_FEATURES
from decoding_adapters.policies.attempt import AttemptPolicy, AttemptPolicyConfig, save_attempt_adapter
from decoding_adapters.policies.networks import load_adapter

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def test_make_rule_then_generate(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "esc"
    assert main(["make-rule", "--rule", "esc", "--window", "2", "--max-draws", "4", "--arm", "0.7",
                 "--model", str(tiny_model_dir), "--out", str(out)]) == 0
    _, config = load_adapter(out)
    assert config.policy["settings"] == {"window": 2, "max_draws": 4} and config.task == "arithmetic"
    assert [a["temperature"] for a in config.actions] == [0.0, 0.7]
    capsys.readouterr()
    assert main(["generate", "--adapter", str(out), "--model", str(tiny_model_dir), "--token-budget", "5",
                 "--json", "What is 2+3?"]) == 0
    g = json.loads(capsys.readouterr().out)["generations"][0]
    assert g["kind"] == "rule" and 1 <= g["decodes"] <= 4 and len(g["attempt_actions"]) == g["decodes"]
    assert g["stopped_by"] in ("agreement", "budget") and g["attempt_actions"][0] == "greedy"
    # without --model: the model make-rule recorded
    assert main(["generate", "--adapter", str(out), "--token-budget", "5", "What is 2+3?"]) == 0
    assert "attempt(s)" in capsys.readouterr().out
    assert main(["make-rule", "--rule", "esc", "--n", "3", "--out", str(tmp_path / "bad")]) != 0
    assert "does not read --n" in capsys.readouterr().err


def test_generate_with_an_attempt_policy(tiny_model_dir, tmp_path, capsys):
    config = AttemptPolicyConfig(("greedy", "T=0.5"), 0, (1, 2), tuple(CONFIDENCE_FEATURES),
                                 ("confidence", "agreement"), 3, token_budget=5, stop_bias=-50.0)
    torch.manual_seed(0)
    save_attempt_adapter(tmp_path / "a", AttemptPolicy(config),
                         [GREEDY.to_dict(), DecodingAction(temperature=0.5).to_dict()], task="arithmetic")
    assert main(["generate", "--adapter", str(tmp_path / "a"), "--model", str(tiny_model_dir), "--json",
                 "What is 2+3?", "What is 4+4?"]) == 0
    gens = json.loads(capsys.readouterr().out)["generations"]
    # it never stops by itself: the greedy, then both T=0.5 attempts, then no arm is left
    assert [(g["decodes"], g["stopped_by"]) for g in gens] == [(3, "budget")] * 2
    assert gens[0]["attempt_actions"] == ["greedy", "T=0.5", "T=0.5"] and gens[0]["completion_tokens"][0] <= 5
