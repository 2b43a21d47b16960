"""The answer a user gets: one answer per problem without a verifier (a majority vote over a
method's B samples, a draft-gated method's draft or re-decodes), its accuracy beside pass@k, and
its compute, against hand-computed cases."""

from __future__ import annotations

import pytest

from decoding_adapters.decoding.actions import DecodingAction
from decoding_adapters.evaluation import EvalConfig, evaluate, greedy_method, static_method, vote
from decoding_adapters.evaluation.aggregate import answer_accuracy, draft_answer_accuracy
from decoding_adapters.evaluation.store import RowStore
from decoding_adapters.tasks import get_task

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def test_vote_takes_the_most_frequent_stated_answer_ties_to_the_first():
    assert vote(["3", "5", "3"], [0, 1, 0]) == 0.0
    assert vote(["5", "3"], [1, 0]) == 1.0 and vote(["3", "5"], [0, 1]) == 0.0  # a tie: the first stated
    assert vote(["", "5", ""], [0, 1, 0]) == 1.0  # a sample that states nothing does not vote
    assert vote(["", ""], [1, 0]) == 1.0  # nothing stated: the first sample


def store_of(answers: dict, correct: dict) -> RowStore:
    store = RowStore(tokenizer=None)
    store.answer.update(answers)
    store.correct.update(correct)
    return store


def test_answer_accuracy_votes_in_disjoint_blocks_of_k_samples():
    store = store_of({"a": "3", "b": "5", "c": "5", "d": "5"}, {"a": 0.0, "b": 1.0, "c": 1.0, "d": 1.0})
    keys = ["a", "b", "c", "d"]
    assert answer_accuracy(keys, 1, store) == 0.75  # each sample alone: pass@1
    assert answer_accuracy(keys, 2, store) == 0.5  # {3, 5}: a tie, the first (wrong); {5, 5}: right
    assert answer_accuracy(keys, 4, store) == 1.0  # 5 three times out of four
    assert answer_accuracy(["g"] * 4, 2, store_of({"g": "7"}, {"g": 1.0})) == 1.0  # one greedy row


def test_a_draft_gated_answer_is_the_draft_or_a_vote_that_includes_it():
    store = store_of({"d": "5", "r1": "3", "r2": "3", "r3": "5", "r4": "3"},
                     {"d": 1.0, "r1": 0.0, "r2": 0.0, "r3": 1.0, "r4": 0.0})
    redone = ["d", "r1", "r2", "r3", "r4"]
    assert draft_answer_accuracy(["d"], 4, store) == 1.0  # kept: the draft
    assert draft_answer_accuracy(redone, 1, store) == 0.25  # B = 1: the re-decode alone
    assert draft_answer_accuracy(redone, 2, store) == 1.0  # the draft and one re-decode: a tie, the draft
    assert draft_answer_accuracy(redone, 3, store) == 0.5  # {5, 3, 3} wrong, {5, 5, 3} right
    assert draft_answer_accuracy(redone, 4, store) == 1.0  # {5, 3, 3, 5}: a tie, the draft


def test_evaluation_reports_answer_accuracy_family_and_its_compute(tiny_lm):
    task = get_task("arithmetic")
    problems = task.load("validation")[:4]
    sampler = DecodingAction(True, 1.0)
    cfg = EvalConfig(k_values=(1, 2, 4), seeds=2, token_budget=8, keep_trajectories=0)
    ev = evaluate(tiny_lm, task, problems, [greedy_method(), static_method(sampler, name="Sampler", role="s")], cfg)
    per, info = ev.details["per_problem"], ev.details["methods"]
    for name in ("Greedy", "Sampler"):
        assert per[name]["answer_accuracy@1"] == per[name]["pass@1"]  # one sample: its own answer
        assert per[name]["answer_accuracy"] == per[name]["answer_accuracy@1"]
        assert info[name]["family"] == "static" and info[name]["answer_rule"]
        assert info[name]["decodes_per_problem"]["answer"] == info[name]["decodes_per_problem"]["1"]
        assert "answer_accuracy@4" in ev.results[name]
    for k in (2, 4):  # greedy's one answer at every B
        assert per["Greedy"][f"answer_accuracy@{k}"] == per["Greedy"]["pass@1"]
    assert info["Sampler"]["decodes_per_problem"]["4"] == 4.0
