"""core.stats: pass@k against its definition, Student-t quantiles against published values, and
the intervals built from them."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest

from decoding_adapters.core.stats import (
    binomial_halfwidth,
    check_int,
    finite_or_none,
    format_interval,
    mean_ci,
    paired_ci,
    pass_at_k,
    problem_binomial_halfwidth,
    problem_interval,
    problem_means,
    seed_interval,
    t_quantile,
)


@pytest.mark.parametrize("n,c,k", [(1, 0, 1), (1, 1, 1), (5, 2, 1), (5, 2, 3), (8, 1, 4), (8, 5, 8), (10, 3, 7)])
def test_pass_at_k_is_the_share_of_k_subsets_holding_a_correct_sample(n, c, k):
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    expected = sum(any(samples[i] for i in s) for s in subsets) / len(subsets)
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("n,c,k,error", [(4, 1, 5, "at least k"), (4, 5, 1, "c must be"), (0, 0, 1, ">= 1"),
                                         (4, 1, 1.5, "integer"), (4, True, 1, "integer")])
def test_pass_at_k_refuses_impossible_counts(n, c, k, error):
    with pytest.raises(ValueError, match=error):
        pass_at_k(n, c, k)


def test_pass_at_k_refuses_k_above_n_and_a_caller_clamps_explicitly():
    """One decision about k > n: refused (n samples hold no k-subset); clamping is the caller's
    explicit ``min(k, n)``, which scores every sample: pass@n."""
    for n in range(1, 6):
        for c in range(n + 1):
            with pytest.raises(ValueError, match="at least k"):
                pass_at_k(n, c, n + 1)
            assert pass_at_k(n, c, min(n + 3, n)) == (1.0 if c else 0.0)


@pytest.mark.parametrize("df,expected", [(1, 12.706204736), (2, 4.302652730), (5, 2.570581836), (10, 2.228138852),
                                         (30, 2.042272456), (1000, 1.962339081)])
def test_t_quantile_matches_published_values(df, expected):
    assert t_quantile(0.975, df) == pytest.approx(expected, rel=1e-7)
    assert t_quantile(0.025, df) == pytest.approx(-expected, rel=1e-7)  # symmetric
    assert t_quantile(0.975, 1e7) == pytest.approx(statistics.NormalDist().inv_cdf(0.975))
    with pytest.raises(ValueError):
        t_quantile(1.0, df)


def test_mean_ci_is_the_student_t_interval():
    xs = [0.0, 1.0, 1.0, 0.0, 1.0]
    mean, low, high = mean_ci(xs)
    half = 2.776445105 * statistics.stdev(xs) / math.sqrt(5)  # t(0.975, 4)
    assert (mean, low, high) == pytest.approx((0.6, 0.6 - half, 0.6 + half), rel=1e-7)
    narrower = mean_ci(xs, confidence=0.5)
    assert narrower[1] > low and narrower[2] < high
    assert mean_ci([0.5, 0.5, 0.5]) == (0.5, 0.5, 0.5)  # identical values: zero width
    single = mean_ci([0.7])
    assert single[0] == 0.7 and math.isnan(single[1]) and math.isnan(single[2])
    with pytest.raises(ValueError):
        mean_ci([])


def test_paired_ci_is_the_interval_of_the_differences():
    a, b = [1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.0]
    assert paired_ci(a, b) == mean_ci([1.0, 0.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="equal lengths"):
        paired_ci(a, b[:3])


def test_binomial_halfwidth_is_the_papers_plus_minus():
    assert binomial_halfwidth(0.717, 5000) == pytest.approx(0.01249, abs=2e-5)  # ±1.25 points
    assert binomial_halfwidth(0.0, 10) == 0.0 and binomial_halfwidth(1.0, 10) == 0.0
    assert binomial_halfwidth(0.5, 400) == pytest.approx(2 * binomial_halfwidth(0.5, 1600))
    with pytest.raises(ValueError):
        binomial_halfwidth(0.5, 0)


def test_format_interval_and_small_helpers():
    assert format_interval(0.5, 0.4, 0.6) == "0.50 ± 0.10"
    assert format_interval(0.05, 0.0, 0.2) == "0.05 [0.00, 0.20]"  # asymmetric: both ends shown
    assert format_interval(12.345, None, None, digits=1) == "12.3"
    assert finite_or_none(math.nan) is None and finite_or_none(None) is None and finite_or_none(0.25) == 0.25
    assert check_int("k", 3.0) == 3


def test_problem_intervals_count_each_problem_once():
    """Hand-computed: 4 problems x 3 seeds, two of them deterministic (the same value every seed).
    Per-problem means 1, 0, 2/3, 1/3: mean 0.5, sd sqrt(5/27), t_{3, 0.975} = 3.182446."""
    rows = [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [1.0, 1.0, 0.0], [[0.0, 1.0], [0.0, 0.0], [0.5, 0.5]]]
    assert problem_means(rows) == pytest.approx([1.0, 0.0, 2 / 3, 1 / 3])
    mean, low, high = problem_interval(rows)
    half = 3.182446 * math.sqrt(5 / 27) / 2
    assert mean == pytest.approx(0.5) and high - mean == pytest.approx(half, rel=1e-5)
    assert problem_interval(rows, bounds=(0.0, 1.0))[1] == 0.0  # clipped: 0.5 - 0.685 < 0
    h, n = problem_binomial_halfwidth(rows)
    assert n == 4 and h == pytest.approx(1.959964 * math.sqrt(0.25 / 4))
    # 200 problems scored once and repeated over 3 seeds: the paper's ± at 50% is ±6.9, not ±4.0
    h, n = problem_binomial_halfwidth([[float(i % 2)] * 3 for i in range(200)])
    assert n == 200 and round(100 * h, 1) == 6.9
    with pytest.raises(ValueError):
        problem_means([[1.0], []])


def test_seed_interval_is_a_t_interval_over_seeds():
    mean, low, high = seed_interval([-0.006, 0.031, 0.009])
    sd = statistics.stdev([-0.006, 0.031, 0.009])
    assert mean == pytest.approx(0.034 / 3)
    assert high - mean == pytest.approx(4.302653 * sd / math.sqrt(3), rel=1e-5)
    assert math.isnan(seed_interval([0.01])[1])
