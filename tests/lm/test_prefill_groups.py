"""Prompts grouped by length for prefill: the optimal grouping and the padding it saves."""

import itertools
import random

import pytest

from decoding_adapters.lm.models import padded_fraction, prefill_groups


def _cost(lengths, groups, group_cost):
    return sum(len(g) * max(lengths[i] for i in g) for g in groups) + group_cost * len(groups)


def _brute_force_cost(lengths, group_cost):
    """Least cost over every split of the sorted distinct lengths into contiguous runs."""
    distinct = sorted(set(lengths))
    best = float("inf")
    for cuts in itertools.product([False, True], repeat=len(distinct) - 1):
        groups, current = [], [distinct[0]]
        for length, cut in zip(distinct[1:], cuts):
            if cut:
                groups.append(current)
                current = []
            current.append(length)
        groups.append(current)
        best = min(best, sum(sum(lengths.count(v) for v in g) * g[-1] + group_cost for g in groups))
    return best


@pytest.mark.parametrize("seed", range(6))
def test_grouping_is_optimal_and_a_partition(seed):
    rng = random.Random(seed)
    lengths = [rng.choice([rng.randint(3, 20), rng.randint(40, 120)]) for _ in range(rng.randint(1, 14))]
    cost = rng.choice([0, 8, 32, 200])
    groups = prefill_groups(lengths, cost)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    assert all(g == sorted(g) for g in groups)
    assert all(max(lengths[i] for i in a) < min(lengths[i] for i in b) for a, b in zip(groups, groups[1:]))
    assert _cost(lengths, groups, cost) == _brute_force_cost(lengths, cost)
    assert padded_fraction(lengths, groups) <= padded_fraction(lengths) + 1e-12


def test_grouping_extremes_and_padded_fraction():
    lengths = [10, 100, 12, 98, 10]
    assert prefill_groups(lengths, 10_000) == [[0, 1, 2, 3, 4]]  # one call is cheaper than any padding saved
    assert prefill_groups(lengths, 0) == [[0, 4], [2], [3], [1]]  # no padding at all
    assert prefill_groups(lengths, 32) == [[0, 2, 4], [1, 3]]
    assert padded_fraction(lengths) == pytest.approx(1 - 230 / 500)
    assert padded_fraction(lengths, [[0, 2, 4], [1, 3]]) == pytest.approx(1 - 230 / (3 * 12 + 2 * 100))
    assert prefill_groups([]) == [] and padded_fraction([5, 5]) == 0.0
    with pytest.raises(ValueError):
        prefill_groups([3], -1)
