"""Keep-best never ends below its start: a later step is kept only when its paired gain over step 0,
on the same validation rows, is significant at every parallel budget where its choices changed;
otherwise the adapter is step 0. The trainer case below is the failure of a live run: the policy
collapsed onto a sampled action at every budget, whose single validation draw at B = 1 came out
level with greedy although its pass@1 is lower, and its gains at B = 4 carried the mean."""

import pytest
import torch

from conftest import FakeLM
from decoding_adapters.decoding.actions import ActionSet, DecodingAction
from decoding_adapters.policies.networks import load_adapter, resolve_policy_mode
from decoding_adapters.tasks import Problem
from decoding_adapters.training.common import EarlyStopping, Validation
from decoding_adapters.training.sequence import RewardSource, SequenceTrainConfig, SequenceTrainer

pytestmark = pytest.mark.usefixtures("one_thread")

DIM, VAL = 8, 48
ACTIONS = ActionSet([DecodingAction(do_sample=False), DecodingAction(temperature=1.0)])
GREEDY_SOLVES = set(range(VAL // 2))
"""Validation problems greedy solves (its rows are alike at every B): pass@B 0.5."""
SAMPLED_AT_4 = {i for i in range(VAL) if i % 8 != 7}
"""Validation problems the sampled action solves in 4 samples: pass@4 0.875."""


class TwoSplitTask:
    """64 training and 48 validation problems; each problem's embedding is seeded noise."""

    name = "scripted"

    def __init__(self):
        gen = torch.Generator().manual_seed(0)
        self.splits_ = {split: [Problem(id=f"{split}{i}", question=f"q{split}{i}", answer="a",
                                        meta={"index": i, "e": torch.randn(DIM, generator=gen)})
                                for i in range(n)] for split, n in (("train", 64), ("validation", VAL))}

    def load(self, split):
        return list(self.splits_[split])

    def prompt(self, problem, cot=False):
        return [{"role": "user", "content": problem.question}]

    def extract_answer(self, problem, completion):
        return completion


class ScriptedRewards:
    """Training rounds: the sampled action always pays, greedy never (the policy collapses onto the
    sampled action at every budget). Validation (key ``("val",)``): fixed rows, greedy solving
    ``GREEDY_SOLVES`` and the sampled action ``sampled_at_1`` in one sample, ``SAMPLED_AT_4`` in 4."""

    action_set = ACTIONS
    offline = False

    def __init__(self, sampled_at_1: set[int]):
        self.sampled_at_1 = sampled_at_1

    def scorable(self, problem_ids):
        return None

    def rewards(self, problems, prompts, actions, budgets, metrics, key, progress=False):
        if key[0] != "val":
            return torch.tensor([float(a == 1) for a in actions])
        solved = {(0, 1): GREEDY_SOLVES, (0, 4): GREEDY_SOLVES, (1, 1): self.sampled_at_1, (1, 4): SAMPLED_AT_4}
        return torch.tensor([float(p.meta["index"] in solved[a, b]) for p, a, b in zip(problems, actions, budgets)])


class EmbeddedTrainer(SequenceTrainer):
    def _encode(self, problems):
        return None, torch.stack([p.meta["e"] for p in problems]), [False] * len(problems)


def train(tmp_path, sampled_at_1: set[int]) -> tuple[EmbeddedTrainer, list[dict]]:
    """8 steps from a prior on greedy at both budgets, validated at steps 0 and 8."""
    config = SequenceTrainConfig(parallel_budgets=(1, 4), budget_prior_actions=(0, 0), steps=8, prompts_per_step=16,
                                 lr=0.05, ppo_epochs=2, val_every=8, val_problems=VAL, checkpoint_every=8,
                                 policy_hidden=16)
    rewards = ScriptedRewards(sampled_at_1)
    assert isinstance(rewards, RewardSource)
    trainer = EmbeddedTrainer(config, FakeLM(DIM), TwoSplitTask(), rewards, tmp_path, progress=False)
    trainer.train()
    return trainer, [r for r in trainer.log.read() if "val_reward" in r]


def test_a_collapse_level_at_b1_on_one_draw_is_not_kept(tmp_path):
    # one sample per problem: the sampled action solves every other problem, 24 of 48 like greedy
    # (half of them ones greedy fails); its pass@1 could well be 0.42, below greedy's 0.5
    trainer, validations = train(tmp_path, sampled_at_1=set(range(0, VAL, 2)))
    start, last = validations
    assert start["val_by_group"] == {"1": 0.5, "4": 0.5}  # greedy at both budgets
    assert last["val_by_group"] == {"1": 0.5, "4": 0.875}  # collapsed: the sampled action at both
    assert last["val_reward"] > start["val_reward"] + 2 * last["val_paired_se"]  # the mean alone looks like a gain
    assert [r["kept_step"] for r in validations] == [0, 0]
    policy, _ = load_adapter(tmp_path)
    embeddings = torch.stack([p.meta["e"] for p in trainer.val_problems])
    for b in (1, 4):  # the adapter is the start: greedy at both budgets
        assert policy.choose(embeddings, torch.full((VAL,), b))[0].eq(0).all()


def test_a_gain_at_every_budget_it_changes_is_kept(tmp_path):
    # the sampled action solves every problem greedy solves and 17 more in one sample: a real gain
    _, validations = train(tmp_path, sampled_at_1=GREEDY_SOLVES | set(range(VAL // 2, VAL // 2 + 17)))
    assert [r["kept_step"] for r in validations] == [0, 8]
    assert validations[-1]["val_gain_over_start"] > 1.96 * validations[-1]["val_gain_se"]


def test_validation_scores_the_mode_the_adapter_is_used_in(tmp_path):
    trainer, validations = train(tmp_path, sampled_at_1=set(range(0, VAL, 2)))
    _, config = load_adapter(tmp_path)
    assert trainer.validate().mode == resolve_policy_mode(config.policy_mode, "sequence") == "argmax"
    assert {r["val_mode"] for r in validations} == {"argmax"}


def test_each_changed_group_must_gain_by_itself():
    groups = torch.tensor([1] * 8 + [4] * 8)
    start = Validation(torch.tensor([1.0] * 4 + [0.0] * 4 + [0.0] * 8), groups=groups)
    b1_same = torch.tensor([1.0] * 4 + [0.0] * 4)
    clear_b4 = torch.tensor([1.0] * 7 + [0.0])  # +7/8, standard error 1/8
    assert Validation(torch.cat([b1_same, clear_b4]), groups=groups).significantly_above(start, 1.96)
    # B = 1 changed rows without a gain (one problem lost, one won): the B = 4 gain cannot carry it
    b1_swapped = torch.tensor([0.0] + [1.0] * 3 + [1.0] + [0.0] * 3)
    assert not Validation(torch.cat([b1_swapped, clear_b4]), groups=groups).significantly_above(start, 1.96)
    assert not Validation(start.scores.clone(), groups=groups).significantly_above(start, 1.96)  # nothing changed
    # ungrouped, the same rows pool: a gain of 6/16 over a standard error of about 0.15
    assert Validation(torch.cat([b1_swapped, clear_b4])).significantly_above(Validation(start.scores), 1.96)
    assert not Validation(clear_b4).significantly_above(start, 0.0)  # other rows: never above


def test_a_later_step_is_judged_against_step_0_not_the_last_kept_one():
    early, policy = EarlyStopping(), torch.nn.Linear(2, 2)
    early.observe(Validation(torch.tensor([0.0] * 16)), 0, policy, 0, 0.0, 1.96)
    early.observe(Validation(torch.tensor([1.0] * 8 + [0.0] * 8)), 8, policy, 0, 0.0, 1.96)
    assert early.best_step == 8
    # higher than step 8 but within noise of it, and far above step 0: kept
    early.observe(Validation(torch.tensor([1.0] * 9 + [0.0] * 7)), 16, policy, 0, 0.0, 1.96)
    assert early.best_step == 16
    # the start is part of the state: a resumed run judges against the same step 0
    resumed = EarlyStopping.from_state(early.state())
    torch.testing.assert_close(resumed.start_scores, torch.zeros(16))
    resumed.observe(Validation(torch.tensor([1.0] * 2 + [0.0] * 14)), 24, policy, 0, 0.0, 1.96)
    assert resumed.best_step == 16


def test_a_problem_scored_at_several_budgets_counts_once():
    # 6 problems, each scored at 3 budgets with the same gain: 18 rows, but 6 independent gains
    gains = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, -1.0]).repeat(3)
    start = Validation(torch.zeros(18))
    assert Validation(gains).significantly_above(start, 1.96)  # as 18 independent rows: about 2.7 SE
    clustered = Validation(gains, problems=torch.arange(6).repeat(3))
    assert not clustered.significantly_above(start, 1.96)  # as 6 problems: about 1.5 SE
    mean, se = clustered.gain_over(start)
    per_problem = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, -1.0])
    assert mean == pytest.approx(0.5) and se == pytest.approx(per_problem.std().item() / 6 ** 0.5)
