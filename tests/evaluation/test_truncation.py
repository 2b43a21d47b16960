"""Greedy truncation figures: the fraction of rows stopped by a budget and their mean capped length,
for every budget from one decode, and the budget chosen from them."""

import pytest
import torch

from decoding_adapters.decoding.actions import GREEDY, ActionSet
from decoding_adapters.decoding.loop import DecodeResult, decode
from decoding_adapters.evaluation.truncation import (
    TruncationStats,
    choose_token_budget,
    greedy_truncation,
    truncation_stats,
    truncation_table,
)
from decoding_adapters.tasks import get_task


def fake_result(lengths, eos, budget=10) -> DecodeResult:
    n = len(lengths)
    return DecodeResult(
        prompt_of_row=torch.arange(n), tokens=torch.zeros(n, budget, dtype=torch.long),
        lengths=torch.tensor(lengths), actions=torch.zeros(n, budget, dtype=torch.long),
        entropy=torch.zeros(n, budget), max_prob=torch.zeros(n, budget),
        stopped_at_eos=torch.tensor(eos), texts=[""] * n, token_budgets=torch.full((n,), budget),
    )


def test_rows_without_eos_within_the_budget_are_truncated():
    result = fake_result([3, 6, 10, 10], [True, True, True, False])  # row 2 ends with EOS as its 10th token
    at10, at6, at3 = truncation_stats(result, 10), truncation_stats(result, 6), truncation_stats(result, 3)
    assert at10.truncated_fraction == 0.25 and at10.mean_length == pytest.approx(29 / 4)
    assert at6.truncated_fraction == 0.5 and at6.mean_length == pytest.approx((3 + 6 + 6 + 6) / 4)
    assert at3.truncated_fraction == 0.75 and at3.max_length == 3
    assert [s.token_budget for s in truncation_table(result, [10, 3, 6, 6])] == [3, 6, 10]
    with pytest.raises(ValueError, match="token_budget"):
        truncation_stats(result, 11)


def test_the_smallest_budget_under_the_threshold_is_chosen():
    stats = [TruncationStats(b, 10, 1.0, f, b) for b, f in ((16, 0.4), (24, 0.05), (32, 0.0), (48, 0.0))]
    assert choose_token_budget(stats, 0.0) == 32 and choose_token_budget(stats, 0.05) == 24
    assert choose_token_budget(stats[:1], 0.0) == 16  # none fits: the largest measured


def test_greedy_truncation_on_the_tiny_model_is_consistent_across_budgets(tiny_lm):
    task = get_task("arithmetic")
    problems = task.load("validation")[:4]
    small, large = greedy_truncation(tiny_lm, task, problems, [2, 6], batch_rows=8, stop_at_answer=False)
    assert small.rows == large.rows == 4 and small.token_budget == 2
    assert small.truncated_fraction >= large.truncated_fraction and small.mean_length <= large.mean_length


def test_greedy_reward_at_a_budget_scores_what_a_decode_at_that_budget_says(tiny_lm):
    """Cutting the one decode at b and scoring it must equal decoding at b itself: the reward column
    tells budgets that cut answers from budgets that only cut rows."""
    arithmetic = get_task("arithmetic")
    problems = arithmetic.load("validation")[:4]
    scored: list[str] = []

    class TextLength(type(arithmetic)):  # reward = length of the scored text, so every cut shows
        def reward(self, problem, text):
            scored.append(text)
            return float(len(text))

    stats = greedy_truncation(tiny_lm, TextLength(), problems, [2, 6], batch_rows=8, stop_at_answer=False)
    prompts = tiny_lm.encode_chat([arithmetic.prompt(p) for p in problems])
    for st in stats:
        direct = decode(tiny_lm, prompts, ActionSet([GREEDY]), row_actions=0, token_budget=st.token_budget)
        assert st.greedy_reward == pytest.approx(sum(len(t) for t in direct.texts) / len(problems))
    assert stats[0].greedy_reward < stats[1].greedy_reward and len(scored) == 8


def test_a_row_ended_at_its_first_answer_is_not_cut_by_the_budget(tiny_lm, monkeypatch):
    task = get_task("arithmetic")
    problems = task.load("validation")[:3]
    monkeypatch.setattr(type(task), "answer_complete", lambda self, problem, text: len(text) >= 1)
    stopped = greedy_truncation(tiny_lm, task, problems, [2, 6], batch_rows=8, stop_at_answer=True)
    full = greedy_truncation(tiny_lm, task, problems, [2, 6], batch_rows=8, stop_at_answer=False)
    assert [st.truncated_fraction for st in stopped] == [0.0, 0.0]  # every row answered within one token
    assert full[1].truncated_fraction > 0 and stopped[1].mean_length < full[1].mean_length  # else a weak test
