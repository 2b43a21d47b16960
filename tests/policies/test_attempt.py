"""The attempt policy: its state lattice, the exact expected reward against an enumeration of every
path, the walk's answer (summed weights, ties to the answer drawn first), and save / load."""

import numpy as np
import pytest
import torch

from decoding_adapters.decoding.actions import GREEDY, DecodingAction
from decoding_adapters.evaluation.sample_table import synthetic_sample_table
from decoding_adapters.policies.attempt import (
    AttemptInputs,
    AttemptLattice,
    AttemptPolicy,
    AttemptPolicyConfig,
    expected_reward,
    load_attempt_adapter,
    save_attempt_adapter,
    walk,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

ARMS = [GREEDY, DecodingAction(temperature=0.5), DecodingAction(temperature=1.0)]


def _policy(table, features=("confidence", "agreement", "hidden", "answer_probs"), max_attempts=5, seed=0):
    config = AttemptPolicyConfig(tuple(table.arm_names), 0, tuple(int(d) for d in table.distinct),
                                 tuple(table.confidence_names), features, max_attempts,
                                 0 if table.hidden is None else table.hidden.shape[-1])
    torch.manual_seed(seed)
    policy = AttemptPolicy(config)
    policy.set_standardisation(AttemptInputs.from_table(table))
    with torch.no_grad():  # away from the near-uniform start, so every path has its own probability
        for p in policy.stop_net.parameters():
            p.normal_(0, 0.5)
    return policy, AttemptLattice(config.distinct, 0, max_attempts)


def test_the_lattice_holds_each_count_and_last_arm_once():
    # greedy (1 distinct) then two arms of 3 samples, at most 4 attempts
    lattice = AttemptLattice([1, 3, 3], 0, 4)
    keys = {(tuple(c.tolist()), int(last)) for c, last in zip(lattice.counts, lattice.last)}
    assert len(keys) == len(lattice)
    # level v >= 1: counts (1, i, v - i) with the last arm one that was drawn
    expected = 1 + sum(sum((i > 0) + (v - i > 0) for i in range(v + 1)) for v in range(1, 4))
    assert len(lattice) == expected
    assert lattice.level.tolist() == sorted(lattice.level.tolist())  # states come level by level
    assert (lattice.succ[lattice.level == 3] == -1).all()  # no attempt left
    assert (lattice.succ[:, 0] == -1).all()  # greedy is drawn once
    # one sampled arm of 8: greedy then 8 samples, one state per attempt count
    assert len(AttemptLattice([1, 8], 0, 9)) == 9
    # the draft-gated adapter's case: keep the draft or re-decode once
    assert len(AttemptLattice([1, 8], 0, 2)) == 2


def test_expected_reward_is_the_sum_over_every_path():
    table = synthetic_sample_table(4, samples=3, arms=ARMS, seed=3, hidden_size=4)
    policy, lattice = _policy(table)
    inputs = AttemptInputs.from_table(table)
    price = 0.05
    exact = expected_reward(policy, inputs, lattice, price)["reward"].detach()
    out = policy.on_lattice(inputs, lattice)
    probs = torch.softmax(out.logits, -1).detach()
    choice = policy.answer_probs(out).detach()
    correct = inputs.answer_correct.float()
    k = min(choice.shape[-1], correct.shape[1])

    def paths(state, prob):  # every sequence of actions from ``state``: (stop state, probability)
        yield state, prob * float(probs[i, state, 0])
        for arm in range(3):
            nxt = int(lattice.succ[state, arm])
            if nxt >= 0:
                yield from paths(nxt, prob * float(probs[i, state, 1 + arm]))

    for i in range(4):
        total = sum(p * (float((choice[i, s, :k] * correct[i, :k]).sum()) - price * (int(lattice.level[s]) + 1))
                    for s, p in paths(0, 1.0))
        assert float(exact[i]) == pytest.approx(total, abs=1e-5)
    # probabilities of stopping sum to one
    stop = sum(p for _, p in paths(0, 1.0))
    assert stop == pytest.approx(1.0, abs=1e-5)


def test_walk_answers_the_largest_summed_weight_ties_to_the_first_drawn():
    table = synthetic_sample_table(1, samples=3, arms=ARMS[:2], seed=0)
    table.answers[0, 0, :] = 5  # greedy says 5; the samples say 7, 5, 7
    table.answers[0, 1] = [7, 5, 7]
    policy, lattice = _policy(table, features=("confidence",), max_attempts=4)
    with torch.no_grad():  # never stop before the budget; every attempt weighs the same
        policy.stop_net[-1].weight.zero_()
        policy.stop_net[-1].bias.copy_(torch.tensor([-5.0, 0.0, 5.0]))
        policy.weight_net[-1].weight.zero_()
    inputs = AttemptInputs.from_table(table)
    out = walk(policy, inputs, lattice)
    assert out.paths == [[0, 1, 1, 1]] and out.attempts.tolist() == [4] and out.stopped_by == ["budget"]
    assert out.answers.tolist() == [5]  # 5 and 7 hold two votes each: 5 was drawn first
    assert out.tokens[0] == table.tokens[0, 0, 0] + table.tokens[0, 1, :3].sum()
    with torch.no_grad():  # weigh the T=0.5 attempts above greedy's: 7 (two of them) beats 5 (greedy and one)
        policy.weight_net[0].weight.zero_()
        policy.weight_net[0].bias.zero_()
        # an attempt's features: has-an-answer, then the arm's one-hot (column 2: T=0.5)
        policy.weight_net[0].weight[0, 2] = 3.0
        policy.weight_net[-1].weight[0, 0] = 1.0
    assert walk(policy, inputs, lattice).answers.tolist() == [7]


def test_save_and_load_give_the_same_policy(tmp_path):
    table = synthetic_sample_table(6, samples=3, arms=ARMS, seed=1, hidden_size=4)
    policy, lattice = _policy(table)
    save_attempt_adapter(tmp_path / "a", policy, [a.to_dict() for a in ARMS], {"price": 0.1, "steps": 3})
    loaded, meta = load_attempt_adapter(tmp_path / "a")
    inputs = AttemptInputs.from_table(table)
    assert meta["kind"] == "attempt" and loaded.config == policy.config
    assert torch.equal(loaded.on_lattice(inputs, lattice).logits, policy.on_lattice(inputs, lattice).logits)
    assert "attempt-policy" in (tmp_path / "a" / "README.md").read_text()
    assert np.array_equal(walk(loaded, inputs, lattice).answers, walk(policy, inputs, lattice).answers)


def test_a_policy_that_reads_hidden_states_refuses_a_table_without_them():
    with pytest.raises(ValueError, match="hidden"):
        AttemptPolicyConfig(("greedy", "t"), 0, (1, 4), ("a",), ("hidden",), 3, 0)
