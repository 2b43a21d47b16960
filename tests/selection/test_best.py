"""The Best static baseline: the best single strategy per pass@k, greedy included."""

from __future__ import annotations

import math

import numpy as np
import pytest

from decoding_adapters.core.stats import pass_at_k
from decoding_adapters.selection.best import (
    BestStatic,
    best_static,
    best_static_from_counts,
    best_static_from_table,
    pass_at_k_cells,
)
from decoding_adapters.selection.outcomes import OutcomeTable


def test_greedy_can_be_best_at_pass1_and_a_sampler_at_pass8():
    # greedy solves 6 of 10 problems every time; the sampler solves each problem 2 times in 4
    names = ["sampler", "greedy"]
    correct = np.array([[2, 4]] * 6 + [[2, 0]] * 4)
    best = best_static_from_counts(correct, 4, (1, 2, 4, 8), names)
    assert best.name_for(1) == "greedy" and best.score_for(1) == pytest.approx(0.6)
    assert best.score_for(1, "sampler") == pytest.approx(0.5)
    assert best.name_for(2) == "sampler"  # 1 - C(2,2)/C(4,2) = 5/6 > 0.6
    assert best.score_for(2, "sampler") == pytest.approx(5 / 6)
    assert best.name_for(8) == "sampler" and best.extrapolated(8) and not best.extrapolated(4)
    # extrapolated from c/n (1 - 0.5**8), floored at its measured pass@4 (1.0): pass@k never falls with k
    assert best.score_for(8, "sampler") == pytest.approx(1.0) and best.score_for(4, "sampler") == pytest.approx(1.0)
    assert best.score_for(8, "greedy") == pytest.approx(0.6)  # exact for a deterministic action


def test_pass_at_k_cells_unbiased_up_to_n_then_extrapolated():
    rng = np.random.default_rng(0)
    n = rng.integers(1, 6, size=(5, 3))
    c = rng.integers(0, 6, size=(5, 3)) % (n + 1)
    for k in (1, 3, 7):
        got = pass_at_k_cells(c, n, k)
        for idx in np.ndindex(c.shape):
            ni, ci = int(n[idx]), int(c[idx])
            want = pass_at_k(ni, ci, k) if k <= ni else 1 - (1 - ci / ni) ** k
            assert got[idx] == pytest.approx(want)
    with pytest.raises(ValueError):
        pass_at_k_cells(np.array([[3]]), 2, 1)


def test_ties_go_to_the_lowest_index_and_k_order_is_sorted():
    best = best_static({4: [0.5, 0.7, 0.7], 1: [0.3, 0.3 + 1e-15, 0.1]}, ["a", "b", "c"], samples=4, problems=2)
    assert best.k_values == (1, 4)
    assert best.name_for(1) == "a" and best.name_for(4) == "b"
    with pytest.raises(KeyError, match="pass@2"):
        best.name_for(2)
    with pytest.raises(ValueError):
        best_static({1: [0.1, 0.2]}, ["a", "b", "c"], samples=1, problems=1)


def test_dict_round_trip():
    best = best_static_from_counts(np.array([[1, 2], [0, 2]]), 2, (1, 2, 4), ["x", "y"])
    again = BestStatic.from_dict(best.to_dict())
    assert again == best
    assert best.to_dict()["extrapolated"] == [4]


def test_from_table_counts_correct_samples_and_uses_every_candidate():
    table = OutcomeTable()
    for pid, rewards in (("p0", [1, 0, 1, 1]), ("p1", [0, 0, 0, 1])):
        for s, r in enumerate(rewards):
            table.add(pid, "T=1", s, r, 5)
        for s in range(4):  # greedy: one decode stored for every sample
            table.add(pid, "greedy", s, 1.0 if pid == "p0" else 0.0, 3)
    best = best_static_from_table(table, (1, 4))
    assert best.names == ("T=1", "greedy") and best.samples == 4 and best.problems == 2
    assert best.score_for(1, "T=1") == pytest.approx((3 / 4 + 1 / 4) / 2)
    assert best.score_for(1, "greedy") == pytest.approx(0.5)
    assert best.name_for(1) == "T=1"  # 0.5 each: the tie goes to the first candidate
    assert best.name_for(4) == "T=1" and best.score_for(4) == pytest.approx(1.0)
    partial = OutcomeTable()
    partial.add("p0", "a", 0, 0.6, 1)  # a reward >= 0.5 counts as correct, as in the evaluation
    assert best_static_from_table(partial, (1,)).score_for(1) == pytest.approx(1.0)
    table.add("p2", "T=1", 0, 1.0, 4)
    with pytest.raises(ValueError, match="no sample of 'greedy'"):
        best_static_from_table(table, (1,))


def test_best_static_needs_one_score_per_candidate_and_finite_ks():
    with pytest.raises(ValueError):
        best_static_from_counts(np.zeros((0, 2)), 1, (1,), ["a", "b"])
    with pytest.raises(ValueError):
        best_static_from_counts(np.zeros((2, 2)), 1, (0,), ["a", "b"])
    assert math.isclose(best_static_from_counts(np.ones((2, 1)), 1, (1,), ["a"]).score_for(1), 1.0)
