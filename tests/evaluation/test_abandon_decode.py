"""An abandon rule cuts on live problems exactly the attempts it cuts on a sample table with
checkpoints built with the same settings, and the attempt policy then makes the same decisions."""

import numpy as np
import pytest
import torch

from decoding_adapters.decoding.actions import GREEDY, DecodingAction
from decoding_adapters.evaluation.abandon import abandon_decode, replay
from decoding_adapters.evaluation.sample_table import build_sample_table
from decoding_adapters.policies.attempt import AttemptInputs, AttemptPolicy
from decoding_adapters.tasks import get_task
from decoding_adapters.training.abandon import train_prefix_verifier
from decoding_adapters.training.attempt import AttemptTrainConfig, policy_config_from_table
from decoding_adapters.training.verifier import VerifierTrainConfig

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

BUDGET, EVERY = 10, 3


@pytest.fixture(scope="module")
def setting(tiny_lm, tmp_path_factory):
    task = get_task("arithmetic")
    problems = task.load("validation")[:5]
    arms = [GREEDY, DecodingAction(temperature=1.0)]
    table = build_sample_table(tiny_lm, task, problems, arms, samples=3, token_budget=BUDGET, split="validation",
                               path=tmp_path_factory.mktemp("t") / "t", hidden=True, progress=False,
                               checkpoints=EVERY, stop_at_answer=False)
    return task, problems, arms, table


def _policy(table, seed=1):
    config = policy_config_from_table(table, AttemptTrainConfig(features=("confidence", "hidden"), max_attempts=4))
    torch.manual_seed(seed)
    policy = AttemptPolicy(config)
    policy.set_standardisation(AttemptInputs.from_table(table))
    with torch.no_grad():  # a policy that goes on for a while and varies its arm
        for p in policy.stop_net.parameters():
            p.normal_(0, 1.0)
        policy.stop_net[-1].bias[0] = -3.0
    return policy


def test_live_cuts_and_decisions_are_the_replay_s(tiny_lm, setting):
    task, problems, arms, table = setting
    rule = train_prefix_verifier(table, VerifierTrainConfig(steps=5))
    scores = rule.table_scores(table)
    medians = [float(np.nanmedian(scores[..., c])) if np.isfinite(scores[..., c]).any() else 0.0
               for c in range(scores.shape[-1])]
    rule = rule.with_thresholds(medians)  # cuts about half the prefixes at each checkpoint
    policy = _policy(table)
    offline, seen = replay(policy, table, rule)
    live = abandon_decode(tiny_lm, task, problems, policy, arms, rule, token_budget=BUDGET, stop_at_answer=False)
    assert live.paths == offline.paths
    assert max(live.decodes) > 1
    assert live.stopped_by == offline.stopped_by
    assert live.tokens == [int(t) for t in offline.tokens]
    said = [seen.answer_strings[i][a] if a >= 0 else "" for i, a in enumerate(offline.answers)]
    assert live.answers == said
    cuts = rule.cuts(table)
    expected = []
    for i, path in enumerate(offline.paths):
        seen_arm = [0] * len(arms)
        row = []
        for arm in path:
            c = int(cuts[i, arm, seen_arm[arm]])
            row.append(None if c < 0 else (c + 1) * EVERY)
            seen_arm[arm] += 1
        expected.append(row)
    assert live.cut_at == expected
    assert any(c is not None for row in live.cut_at for c in row)  # the check covers cut attempts
    assert any(c is None for row in live.cut_at for c in row)


def test_no_rule_is_the_plain_attempt_policy(tiny_lm, setting):
    task, problems, arms, table = setting
    policy = _policy(table, seed=2)
    plain, _ = replay(policy, table, None)
    never = train_prefix_verifier(table, VerifierTrainConfig(steps=2))  # thresholds 0: never cuts
    cut, seen = replay(policy, table, never)
    assert cut.paths == plain.paths and list(cut.tokens) == list(plain.tokens)
    live = abandon_decode(tiny_lm, task, problems, policy, arms, never, token_budget=BUDGET, stop_at_answer=False)
    assert all(c is None for row in live.cut_at for c in row)
