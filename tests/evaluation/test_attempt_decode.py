"""The attempt policy decoding live problems makes the attempts it reads on a sample table built
with the same settings: the same attempts in the same order, the same answer."""

import pytest
import torch

from decoding_adapters.decoding.actions import GREEDY, DecodingAction
from decoding_adapters.evaluation.attempt import attempt_decode
from decoding_adapters.evaluation.sample_table import build_sample_table
from decoding_adapters.policies.attempt import AttemptInputs, AttemptLattice, AttemptPolicy, walk
from decoding_adapters.tasks import get_task
from decoding_adapters.training.attempt import AttemptTrainConfig, policy_config_from_table

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.mark.parametrize("features", [("confidence", "agreement"), ("confidence", "hidden", "answer_probs")])
def test_live_attempts_are_the_table_s_attempts(tiny_lm, tmp_path, features):
    task = get_task("arithmetic")
    problems = task.load("validation")[:5]
    arms = [GREEDY, DecodingAction(temperature=1.0), DecodingAction(temperature=0.7, top_k=5)]
    table = build_sample_table(tiny_lm, task, problems, arms, samples=3, token_budget=6, split="validation",
                               path=tmp_path / "t", hidden=True, progress=False)
    config = policy_config_from_table(table, AttemptTrainConfig(features=features, max_attempts=5))
    torch.manual_seed(1)
    policy = AttemptPolicy(config)
    inputs = AttemptInputs.from_table(table)
    policy.set_standardisation(inputs)
    with torch.no_grad():  # a policy that goes on for a while and varies its arm
        for p in policy.stop_net.parameters():
            p.normal_(0, 1.0)
        policy.stop_net[-1].bias[0] = -1.0
    lattice = AttemptLattice(config.distinct, config.first_arm, config.max_attempts)
    offline = walk(policy, inputs, lattice)
    live = attempt_decode(tiny_lm, task, problems, policy, arms, token_budget=6)
    assert live.paths == offline.paths
    assert max(live.decodes) > 1  # the check is not only of the first attempt
    assert live.stopped_by == offline.stopped_by
    said = [table.answer_strings[i][a] if a >= 0 else "" for i, a in enumerate(offline.answers)]
    assert live.answers == said
    assert live.tokens == [int(t) for t in offline.tokens]
