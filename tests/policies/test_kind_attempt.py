"""The attempt policy as an adapter kind: saved and loaded through ``save_adapter`` / ``load_adapter``
like every kind, its numbers bounds-checked, and its live decider deciding as ``walk`` does."""

import json

import numpy as np
import pytest
import torch

from decoding_adapters.decoding.actions import GREEDY, DecodingAction
from decoding_adapters.decoding.confidence import CONFIDENCE_FEATURES
from decoding_adapters.evaluation.sample_table import synthetic_sample_table
from decoding_adapters.policies.attempt import (
    AttemptInputs,
    AttemptLattice,
    AttemptPolicy,
    AttemptPolicyConfig,
    PolicyDecider,
    save_attempt_adapter,
    walk,
)
from decoding_adapters.policies.kinds import adapter_kind
from decoding_adapters.policies.networks import AdapterConfig, load_adapter

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

ARMS = [GREEDY, DecodingAction(temperature=0.5)]


def _policy(table, max_attempts=4, seed=0):
    config = AttemptPolicyConfig(tuple(table.arm_names), 0, tuple(int(d) for d in table.distinct),
                                 tuple(table.confidence_names), ("confidence", "agreement"), max_attempts)
    torch.manual_seed(seed)
    policy = AttemptPolicy(config)
    policy.set_standardisation(AttemptInputs.from_table(table))
    with torch.no_grad():
        for p in policy.stop_net.parameters():
            p.normal_(0, 0.5)
    return policy


def test_an_attempt_adapter_loads_through_load_adapter(tmp_path):
    table = synthetic_sample_table(5, samples=3, arms=ARMS, seed=2)
    policy = _policy(table)
    save_attempt_adapter(tmp_path / "a", policy, [a.to_dict() for a in ARMS], {"price": 0.1}, task="arithmetic")
    loaded, config = load_adapter(tmp_path / "a")
    kind = config.adapter_kind
    assert kind is adapter_kind("attempt") and kind.attempts and not kind.keeps_draft and not kind.per_token
    assert kind.attempt_plan(config) == {"first_arm": 0, "distinct": [1, 3], "max_attempts": 4, "with_hidden": False}
    assert kind.output_names(["greedy", "t"]) == ["stop", "greedy", "t"]
    inputs = AttemptInputs.from_table(table)
    lattice = AttemptLattice(policy.config.distinct, 0, 4)
    assert torch.equal(loaded.on_lattice(inputs, lattice).logits, policy.on_lattice(inputs, lattice).logits)
    assert "attempt-policy" in (tmp_path / "a" / "README.md").read_text()


@pytest.mark.parametrize("field, value, message", [
    ("max_attempts", 10_000, "policy.max_attempts"), ("distinct", [1, -2], r"policy.distinct\[1\]"),
    ("stop_bias", 1e9, "policy.stop_bias"), ("first_arm", True, "policy.first_arm"),
])
def test_its_numbers_are_bounds_checked(tmp_path, field, value, message):
    table = synthetic_sample_table(3, samples=2, arms=ARMS, seed=0)
    save_attempt_adapter(tmp_path / "a", _policy(table), [a.to_dict() for a in ARMS])
    data = json.loads((tmp_path / "a" / "adapter.json").read_text())
    data["policy"][field] = value
    with pytest.raises(ValueError, match=message):
        AdapterConfig.from_dict(data)


class _State:
    """The engine's state for problems whose attempts were made in the order ``walk`` made them."""

    def __init__(self, inputs, paths):
        p, a, n = inputs.answers.shape
        self.answers = torch.full((p, a, n), -1, dtype=torch.long)
        self.confidence, self.tokens, self.hidden = inputs.confidence, inputs.tokens, None
        self.confidence_names = tuple(CONFIDENCE_FEATURES)
        self.order = []
        for i, path in enumerate(paths):
            seen = [0] * a
            order = []
            for arm in path:
                order.append((arm, seen[arm]))
                self.answers[i, arm, seen[arm]] = inputs.answers[i, arm, seen[arm]]
                seen[arm] += 1
            self.order.append(order)

    def counts(self, i, arms):
        seen = [0] * arms
        for arm, _ in self.order[i]:
            seen[arm] += 1
        return seen


def test_the_live_decider_stops_and_answers_where_walk_does():
    table = synthetic_sample_table(12, samples=3, arms=ARMS, seed=5)
    policy = _policy(table, seed=3)
    inputs = AttemptInputs.from_table(table)
    outcome = walk(policy, inputs, AttemptLattice(policy.config.distinct, 0, 4))
    decider = PolicyDecider(policy)
    # at the end of its path walk stopped: the decider stops there too, with walk's answer
    state = _State(inputs, outcome.paths)
    rows = [i for i, why in enumerate(outcome.stopped_by) if why == "policy"]
    assert rows, "the random policy stops somewhere before the budget"
    assert all(arm is None and why == "policy" for arm, why in decider.decide(state, rows))
    assert np.array_equal(np.array(decider.answer(state, list(range(12)))), outcome.answers)
    # one attempt short of a longer path, it asks for walk's next arm
    longer = [i for i, path in enumerate(outcome.paths) if len(path) > 1]
    short = _State(inputs, [path[:-1] if len(path) > 1 else path for path in outcome.paths])
    assert [arm for arm, _ in decider.decide(short, longer)] == [outcome.paths[i][-1] for i in longer]
