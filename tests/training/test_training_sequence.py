"""Sequence trainer on synthetic contextual bandits (no LLM): it learns context- and budget-
dependent choices, and the w/o-budget variant provably cannot in the budget-dependent case."""

import zlib

import pytest
import torch

from conftest import FakeLM
from decoding_adapters.decoding.actions import ActionSet, DecodingAction
from decoding_adapters.lm.protocols import LanguageModel, VerifiableTask
from decoding_adapters.policies.networks import load_adapter
from decoding_adapters.tasks import Problem
from decoding_adapters.training.sequence import RewardSource, SequenceTrainConfig, SequenceTrainer, inference_reward
from helpers import killed_at_step

DIM = 8
ACTIONS = ActionSet([DecodingAction(do_sample=False), DecodingAction(temperature=1.0)])


class ClusterTask:
    """Problems in two context clusters; meta['cluster'] in {0, 1}."""

    name = "synthetic"

    def __init__(self, n=64):
        gen = torch.Generator().manual_seed(0)
        self.problems = []
        for i in range(n):
            c = i % 2
            e = torch.randn(DIM, generator=gen) * 0.3
            e[0] += 2.0 if c else -2.0
            self.problems.append(Problem(id=f"p{i}", question="q", answer="a", meta={"cluster": c, "e": e}))

    def load(self, split):
        return self.problems if split == "train" else self.problems[:16]

    def prompt(self, problem, cot=False):
        return [{"role": "user", "content": problem.question}]

    def reward(self, problem, completion):  # rewards come from SyntheticRewards
        raise AssertionError("the synthetic trainer never decodes")

    def reward_batch(self, problems, completions):
        raise AssertionError("the synthetic trainer never decodes")

    def extract_answer(self, problem, completion):
        return completion.strip()


def success_prob(cluster: int, action: int, budget: int, budget_case: bool) -> float:
    """Expected pass@B of an action. Context case: cluster c is solved by action c (0.8 vs 0.2).
    Budget case: action 0 is deterministic (0.6 whatever B), action 1 samples independently
    (0.35 per sample, so pass@B = 1 - 0.65^B): greedy wins at B=1, sampling at B=8."""
    if not budget_case:
        return 0.8 if action == cluster else 0.2
    return 0.6 if action == 0 else 1 - 0.65 ** budget


class SyntheticRewards:
    """A reward source (``RewardSource``): Bernoulli(success_prob) per prompt."""

    action_set = ACTIONS
    offline = False

    def __init__(self, budget_case=False):
        self.budget_case = budget_case

    def scorable(self, problem_ids):
        return None

    def rewards(self, problems, prompts, actions, budgets, metrics, key, progress=False):
        # crc32, not hash(): a str inside the key hashes differently in every process (PYTHONHASHSEED)
        gen = torch.Generator().manual_seed(zlib.crc32(repr(key).encode()))
        probs = torch.tensor([success_prob(p.meta["cluster"], a, b, self.budget_case)
                              for p, a, b in zip(problems, actions, budgets)])
        return (torch.rand(len(probs), generator=gen) < probs).float()


class SyntheticTrainer(SequenceTrainer):
    def _encode(self, problems):
        return None, torch.stack([p.meta["e"] for p in problems]), [False] * len(problems)


def test_fakes_follow_the_protocols():
    assert isinstance(FakeLM(DIM), LanguageModel) and isinstance(ClusterTask(4), VerifiableTask)
    assert isinstance(SyntheticRewards(), RewardSource)


def expected_reward(trainer, task, budget_case, budgets):
    """Exact expected reward of the (stochastic) policy, and the optimum."""
    total = best = 0.0
    trainer.policy.eval()
    for p in task.problems:
        for b in budgets:
            with torch.no_grad():
                probs = trainer.policy.probs(p.meta["e"].unsqueeze(0), torch.tensor([b]))[0]
            values = torch.tensor([success_prob(p.meta["cluster"], a, b, budget_case) for a in range(2)])
            total += float(probs @ values)
            best += float(values.max())
    return total / best


def train(tmp_path, budget_case, use_budget, steps=150):
    task = ClusterTask()
    config = SequenceTrainConfig(parallel_budgets=(1, 8), use_budget=use_budget, steps=steps, prompts_per_step=32,
                                 lr=3e-3, entropy_coef=0.001, val_every=1000, checkpoint_every=1000, policy_hidden=32,
                                 keep_best=False)
    trainer = SyntheticTrainer(config, FakeLM(DIM), task, SyntheticRewards(budget_case), tmp_path, progress=False)
    trainer.train()
    return trainer, task


def test_learns_context_dependent_actions(tmp_path):
    trainer, task = train(tmp_path, budget_case=False, use_budget=True)
    assert expected_reward(trainer, task, False, (1, 8)) >= 0.9


def test_budget_dependent_case_needs_the_budget(tmp_path):
    with_budget, task = train(tmp_path / "with", budget_case=True, use_budget=True)
    without, _ = train(tmp_path / "without", budget_case=True, use_budget=False)
    ratio_with = expected_reward(with_budget, task, True, (1, 8))
    ratio_without = expected_reward(without, task, True, (1, 8))
    assert ratio_with >= 0.9
    # Without B the best single action reaches (0.35 + 0.968) / (0.6 + 0.968) = 0.84 of the optimum.
    assert ratio_without <= 0.85 < ratio_with


def test_resume_after_a_kill_gives_the_same_policy(tmp_path):
    reference, _ = train(tmp_path / "ref", budget_case=False, use_budget=True, steps=6)
    task = ClusterTask()
    config = SequenceTrainConfig(parallel_budgets=(1, 8), steps=6, prompts_per_step=32, lr=3e-3, entropy_coef=0.001,
                                 val_every=1000, checkpoint_every=2, policy_hidden=32, keep_best=False)
    killed = SyntheticTrainer(config, FakeLM(DIM), task, SyntheticRewards(), tmp_path / "run", progress=False)
    with killed_at_step(SyntheticTrainer, 4):
        killed.train()
    with pytest.raises(ValueError, match="--resume"):
        SyntheticTrainer(config, FakeLM(DIM), task, SyntheticRewards(), tmp_path / "run", progress=False).train()
    resumed = SyntheticTrainer(config, FakeLM(DIM), task, SyntheticRewards(), tmp_path / "run", progress=False)
    resumed.train(resume=True)
    for k, v in reference.policy.state_dict().items():
        torch.testing.assert_close(v, resumed.policy.state_dict()[k])
    steps = [r["step"] for r in resumed.log.read()]
    assert steps == [1, 2, 3, 4, 5, 6]
    policy, cfg = load_adapter(tmp_path / "run")
    assert cfg.kind == "sequence" and cfg.parallel_budgets == [1, 8]


def test_inference_rewards():
    assert inference_reward([0, 1, 0], None, "pass") == 1.0
    assert inference_reward([0, 1, 0, 1], None, "mean") == 0.5
    assert inference_reward([0, 1, 1], ["3", "4", "4"], "majority") == 1.0
    assert inference_reward([1, 0, 0], ["4", "5", "5"], "majority") == 0.0
    with pytest.raises(ValueError):
        inference_reward([], None, "pass")


def test_majority_vote_compares_extracted_answers():
    from decoding_adapters.tasks import get_task

    task = get_task("arithmetic")
    problem = task.load("test")[0]
    texts = ["7 + 5 = 12", "The answer is 12.", "13"]
    answers = [task.extract_answer(problem, t) for t in texts]
    assert answers == ["12", "12", "13"]
    assert inference_reward([1.0, 1.0, 0.0], answers, "majority") == 1.0
    math_task = get_task("math")
    half = math_task.extract_answer(problem, r"\boxed{\frac{1}{2}}")
    assert math_task.extract_answer(problem, r"so \boxed{\frac12}") == half


def test_selection_record_is_read_from_select_actions_output(tmp_path):
    """A sequence adapter records the problems its action set was selected on, read from
    the actions.json that select-actions writes (selection_data.selected_on); presets record none."""
    import json

    from decoding_adapters.tasks import Problem, problems_record
    from decoding_adapters.training.sequence import selection_record

    record = problems_record([Problem(id="a", question="What is 1+1?", answer="2")])
    path = tmp_path / "actions.json"
    path.write_text(json.dumps({"actions": [], "selection_data": {"task": "x", "selected_on": record}}))
    assert selection_record(str(path)) == record
    assert selection_record("math") is None
    path.write_text(json.dumps({"actions": []}))
    assert selection_record(str(path)) is None


class CountingRollouts:
    """Rows whose text is their (seed, action); a row is right when its seed is odd. Counts rows."""

    def __init__(self, action_set):
        self.action_set, self.rows = action_set, 0

    def run(self, request, chooser=None, *, record_features=False, progress=False):
        from types import SimpleNamespace

        self.rows += request.num_rows
        texts = [f"{s}:{a}" for s, a in zip(request.row_seeds, request.row_actions)]
        return SimpleNamespace(prompt_of_row=torch.tensor(request.prompt_of_row), texts=texts)


class OddSeedTask:
    def reward_batch(self, problems, texts):
        return [float(int(t.split(":")[0]) % 2) for t in texts]

    def extract_answer(self, problem, text):
        return text


def test_live_rewards_decode_each_cell_once_at_its_largest_budget(tmp_path):
    from decoding_adapters.decoding.loop import row_seed
    from decoding_adapters.training.sequence import LiveRewards

    actions = ActionSet([DecodingAction(do_sample=False), DecodingAction(temperature=1.0)])
    rollouts = CountingRollouts(actions)
    live = LiveRewards(rollouts, OddSeedTask(), token_budget=8, seed=3)
    problems = [Problem(id=f"p{i}", question="q", answer="a") for i in range(3)]
    budgets = [1, 2, 4, 8]
    rows = [(p, b) for b in budgets for p in range(3)]
    sampled = live.rewards([problems[p] for p, _ in rows], [[1], [2], [3]], [1] * len(rows),
                           [b for _, b in rows], ["pass"] * len(rows), ("val",))
    assert rollouts.rows == 3 * 8  # not 3 * (1 + 2 + 4 + 8): pass@2 is the first two rows of pass@8
    for (p, b), reward in zip(rows, sampled.tolist()):  # the same as decoding the B rows by themselves
        assert reward == max(row_seed(3, "val", problems[p].id, j) % 2 for j in range(b))
    live.rewards(problems, [[1], [2], [3]], [1, 1, 1], [8, 8, 8], ["pass"] * 3, ("val",))
    assert rollouts.rows == 3 * 8  # the same draw again: remembered
    greedy = live.rewards(problems, [[1], [2], [3]], [0, 0, 0], [8, 8, 8], ["mean"] * 3, ("train", 1))
    assert rollouts.rows == 3 * 8 + 3  # greedy rows are all alike: one each
    assert greedy.tolist() == [float(row_seed(3, "train", 1, p.id, 0) % 2) for p in problems]


def test_budget_aware_validation_is_grouped_by_budget_and_keeps_no_budget_loss():
    from decoding_adapters.training.common import EarlyStopping, Validation

    early, policy = EarlyStopping(), torch.nn.Linear(2, 2)
    groups = torch.tensor([1] * 8 + [8] * 8)
    start = Validation(torch.tensor([1.0] * 4 + [0.0] * 4 + [0.0] * 8), groups=groups)
    early.observe(start, 0, policy, 0, 0.0, 1.0)
    # far better on average (+6/16), but B = 1 loses one problem: a B = 8 gain cannot pay for it
    trade = Validation(torch.tensor([1.0] * 3 + [0.0] * 5 + [1.0] * 7 + [0.0]), groups=groups)
    early.observe(trade, 1, policy, 0, 0.0, 1.0)
    assert early.best_step == 0
    assert trade.record()["val_by_group"] == {"1": 3 / 8, "8": 7 / 8}
    gain = Validation(torch.tensor([1.0] * 4 + [0.0] * 4 + [1.0] * 7 + [0.0]), groups=groups)
    early.observe(gain, 2, policy, 0, 0.0, 1.0)
    assert early.best_step == 2
    ungrouped = EarlyStopping()
    ungrouped.observe(Validation(start.scores), 0, policy, 0, 0.0, 1.0)
    ungrouped.observe(Validation(trade.scores), 1, policy, 0, 0.0, 1.0)
    assert ungrouped.best_step == 1  # without groups the mean decides


@pytest.mark.parametrize("use_budget", [True, False])
def test_validation_scores_every_problem_at_every_budget(tmp_path, use_budget):
    task = ClusterTask()
    config = SequenceTrainConfig(parallel_budgets=(1, 8), use_budget=use_budget, steps=0, val_problems=6,
                                 policy_hidden=8, checkpoint_every=1)
    trainer = SyntheticTrainer(config, FakeLM(DIM), task, SyntheticRewards(), tmp_path, progress=False)
    validation = trainer.validate()
    assert len(validation.scores) == 2 * len(trainer.val_problems)
    assert (validation.groups is not None) == use_budget  # only a policy that sees B is judged per B
    if use_budget:
        assert sorted(validation.group_means()) == [1, 8]


def test_validation_shows_progress_through_the_rollout_bar_as_the_token_trainer_does(tiny_lm, tmp_path):
    """A validation that decodes (live rewards) labels the rollout engine's bar, as the token
    trainer's ``validate (mode)``; training steps and a trainer without progress show none."""
    from decoding_adapters.decoding.rollouts import HFRollouts
    from decoding_adapters.tasks import get_task
    from decoding_adapters.training.sequence import LiveRewards

    labels = []

    class Recording(HFRollouts):
        def run(self, request, chooser=None, *, record_features=False, progress=False):
            labels.append(progress)
            return super().run(request, chooser, record_features=record_features, progress=progress)

    task = get_task("arithmetic")
    config = SequenceTrainConfig(parallel_budgets=(1, 2), token_budget=2, steps=1, prompts_per_step=2,
                                 val_problems=2, val_every=1, checkpoint_every=1)
    for progress, expected in ((True, "validate"), (False, False)):
        labels.clear()
        rewards = LiveRewards(Recording(tiny_lm, ACTIONS, 8), task, config.token_budget, seed=0)
        trainer = SequenceTrainer(config, tiny_lm, task, rewards, tmp_path / str(progress), progress=progress)
        trainer.validate()
        assert labels and set(labels) == {expected}


class _CompleteAtOnce(OddSeedTask):
    """OddSeedTask with a notion of a complete answer (any text)."""

    def answer_complete(self, problem, text):
        return bool(text)


def test_live_rewards_end_rows_at_the_first_answer_under_the_protocol():
    from decoding_adapters.decoding.protocol import STOP_AT_ANSWER
    from decoding_adapters.training.sequence import LiveRewards, SequenceTrainConfig
    from decoding_adapters.training.token import TokenTrainConfig

    assert STOP_AT_ANSWER is True and SequenceTrainConfig().stop_at_answer and TokenTrainConfig().stop_at_answer
    problems = [Problem(id=f"p{i}", question="q", answer="a") for i in range(2)]
    seen = {}
    for task, stop in ((_CompleteAtOnce(), True), (_CompleteAtOnce(), False), (OddSeedTask(), True)):
        rollouts = CountingRollouts(ActionSet([DecodingAction(temperature=1.0)]))
        original = rollouts.run

        def run(request, *args, original=original, **kwargs):
            seen["checks"] = request.stop_checks
            return original(request, *args, **kwargs)

        rollouts.run = run
        LiveRewards(rollouts, task, token_budget=8, seed=0, stop_at_answer=stop).rewards(
            problems, [[1], [2]], [0, 0], [2, 2], ["pass"] * 2, ("val",))
        checks = seen["checks"]
        if stop and isinstance(task, _CompleteAtOnce):  # one check per row, each on its own problem
            assert len(checks) == 4 and all(c.args == (problems[i // 2],) for i, c in enumerate(checks))
        else:  # off, or a task that never says an answer is complete: nothing changes
            assert checks is None
