"""A fixed rule as a weightless adapter kind: its adapter.json is checked (the rule's knobs, bounds),
it loads through ``load_adapter``, and run live, round by round, it stops after the same draws with
the same answer as the rule scored on the whole stored sequence."""

import json

import numpy as np
import pytest
import torch

from decoding_adapters.decoding.actions import GREEDY, DecodingAction
from decoding_adapters.decoding.attempts import AttemptState
from decoding_adapters.evaluation.rules import greedy_then
from decoding_adapters.evaluation.sample_table import synthetic_sample_table
from decoding_adapters.policies.fixed_rules import Calibration, RuleSetting, score_setting
from decoding_adapters.policies.kind_rule import RuleConfig, RuleDecider, save_rule_adapter
from decoding_adapters.policies.networks import AdapterConfig, load_adapter

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

ARMS = [GREEDY, DecodingAction(temperature=0.5)]
CAL = {"slope": 1.5, "intercept": -0.5, "mean": 1.0, "scale": 0.7}
SETTINGS = [
    ("self_consistency", {"n": 4}),
    ("esc", {"window": 2, "max_draws": 6}),
    ("adaptive_consistency", {"threshold": 0.8, "max_draws": 7}),
    ("deepconf_offline", {"feature": "group_conf_min", "n": 5, "eta": 50}),
    ("deepconf_online", {"feature": "tail_conf", "warmup": 2, "eta": 50, "consensus": 0.8, "max_draws": 7}),
    ("reasc", {"feature": "max_prob_mean", "single_threshold": 1.6, "threshold": 0.8, "max_draws": 7}),
    ("cges", {"feature": "max_prob_mean", "threshold": 0.9, "max_draws": 7}),
    ("confidence_threshold", {"feature": "max_prob_mean", "threshold": 1.2, "redecodes": 3, "with_draft": True}),
]


def _live(config: RuleConfig, table):
    """Run the decider round by round on the table's draws (greedy, then the T=0.5 samples in order),
    as ``sequential_attempts`` does: (decodes, answer ids, reasons) per problem."""
    p, a, n = table.answers.shape
    state = AttemptState(torch.full((p, a, n), -1, dtype=torch.long), torch.zeros(p, a, n, table.confidence.shape[-1]),
                         torch.zeros(p, a, n), None, [[] for _ in range(p)], [[] for _ in range(p)],
                         tuple(table.confidence_names))
    decider = RuleDecider(config)
    going, reasons, arm, j = list(range(p)), [""] * p, {i: 0 for i in range(p)}, {i: 0 for i in range(p)}
    while going:
        for i in going:
            k, s = arm[i], j[i]
            state.answers[i, k, s] = int(table.answers[i, k, s])
            state.confidence[i, k, s] = torch.as_tensor(table.confidence[i, k, s])
            state.tokens[i, k, s] = float(table.tokens[i, k, s])
            state.order[i].append((k, s))
        still = []
        for i in going:  # the engine's budget stop
            if len(state.order[i]) >= config.max_draws:
                reasons[i] = "budget"
            else:
                still.append(i)
        going = []
        for i, (nxt, why) in zip(still, decider.decide(state, still) if still else []):
            if nxt is None:
                reasons[i] = why
            else:
                j[i] = j[i] + 1 if arm[i] == nxt else 0
                arm[i] = nxt
                going.append(i)
    return np.array([len(o) for o in state.order]), np.array(decider.answer(state, list(range(p)))), reasons


@pytest.mark.parametrize("rule, settings", SETTINGS, ids=[r for r, _ in SETTINGS])
def test_live_rule_stops_where_the_stored_rule_does(rule, settings):
    table = synthetic_sample_table(40, samples=8, arms=ARMS, seed=11)
    config = RuleConfig(rule, settings, 2, calibration=CAL if rule in ("reasc", "cges") else None)
    stored = score_setting(RuleSetting(rule, tuple(settings.items())), greedy_then(table, 1),
                           {settings.get("feature"): Calibration(**CAL)} if "feature" in settings else None)
    decodes, answers, reasons = _live(config, table)
    assert decodes.tolist() == stored.decodes.tolist()
    assert answers.tolist() == stored.answers.tolist()
    assert set(reasons) <= {"agreement", "confident", "budget"}
    if rule == "esc":  # an agreeing window before the budget says so
        assert any(r == "agreement" for r, d in zip(reasons, decodes) if d < 6)


def test_a_rule_adapter_loads_and_its_settings_are_checked(tmp_path):
    actions = [a.to_dict() for a in ARMS]
    save_rule_adapter(tmp_path / "esc", "esc", {"window": 2, "max_draws": 8}, actions, task="arithmetic")
    policy, config = load_adapter(tmp_path / "esc")
    assert not list(policy.parameters()) and config.adapter_kind.attempts
    assert config.adapter_kind.attempt_plan(config) == {"first_arm": 0, "distinct": [1, 8], "max_attempts": 8,
                                                        "with_hidden": False}
    data = json.loads((tmp_path / "esc" / "adapter.json").read_text())
    for change, message in (({"max_draws": 10_000}, "policy.settings.max_draws"),
                            ({"window": 2.5}, "policy.settings.window"), ({"typo": "x"}, "reads the settings")):
        bad = json.loads(json.dumps(data))
        bad["policy"]["settings"].update(change)
        with pytest.raises(ValueError, match=message):
            AdapterConfig.from_dict(bad)
    with pytest.raises(ValueError, match="calibration"):
        save_rule_adapter(tmp_path / "c", "cges", {"feature": "max_prob_mean", "threshold": 0.9, "max_draws": 4},
                          actions)
    with pytest.raises(ValueError, match="settings.n must be between 1 and 256"):
        save_rule_adapter(tmp_path / "s", "self_consistency", {"n": 0}, actions)


def test_the_pass_at_k_runner_refuses_an_attempt_adapter_clearly(tmp_path):
    from decoding_adapters.evaluation.methods import adapter_method

    save_rule_adapter(tmp_path / "esc", "esc", {"window": 2, "max_draws": 4}, [a.to_dict() for a in ARMS])
    with pytest.raises(ValueError, match="sequential attempts"):
        adapter_method(tmp_path / "esc")


def test_rules_writes_the_tuned_rule_as_an_adapter(tmp_path, capsys):
    from decoding_adapters.cli import main

    synthetic_sample_table(60, samples=4, seed=5).save(tmp_path / "val")
    synthetic_sample_table(40, samples=4, seed=6).save(tmp_path / "test")
    base = ["rules", "--table", str(tmp_path / "test"), "--validation-table", str(tmp_path / "val"),
            "--out", str(tmp_path / "out"), "--rules", "self_consistency,esc,cges", "--levels", "1,2,5"]
    assert main(base + ["--adapter-out", str(tmp_path / "cges"), "--adapter-rule", "cges",
                        "--adapter-level", "2"]) == 0
    curves = json.loads((tmp_path / "out" / "curves.json").read_text())["rules"]["cges"]["points"]
    tuned = [p for p in curves if p["level"] <= 2][-1]["setting"]
    _, config = load_adapter(tmp_path / "cges")
    assert config.policy["rule"] == "cges" and {"rule": "cges", **config.policy["settings"]} == tuned
    assert set(config.policy["calibration"]) == {"slope", "intercept", "mean", "scale"}
    assert [a["temperature"] for a in config.actions] == [0.0, 0.5] and config.policy["arm"] == 1
    # without --adapter-rule: the rule most accurate on validation within the level
    assert main(base + ["--adapter-out", str(tmp_path / "best"), "--adapter-level", "5", "--force"]) == 0
    best = load_adapter(tmp_path / "best")[1].policy["rule"]
    points = json.loads((tmp_path / "out" / "curves.json").read_text())["rules"]
    accuracy = {r: [p for p in c["points"] if p["level"] <= 5][-1]["validation"]["accuracy"] for r, c in points.items()}
    assert accuracy[best] == max(accuracy.values())
