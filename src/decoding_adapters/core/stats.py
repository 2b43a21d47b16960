"""Statistics of an evaluation: the unbiased pass@k estimator and confidence intervals.

A leaf module (standard library only): ``pass_at_k``, Student-t intervals of a mean
(``mean_ci``) and of paired differences (``paired_ci``), the one reduction of per-problem values
over seeds and samples that every interval over problems starts from (``problem_means``,
``problem_interval``, ``problem_binomial_halfwidth``), and how an interval is printed
(``format_interval``). ``evaluation`` summarises with them and ``report`` compares with them.
"""

from __future__ import annotations

import math
import statistics
from typing import Sequence

__all__ = [
    "check_int",
    "pass_at_k",
    "t_quantile",
    "mean_ci",
    "paired_ci",
    "binomial_halfwidth",
    "problem_means",
    "problem_interval",
    "problem_binomial_halfwidth",
    "seed_interval",
    "finite_or_none",
    "format_interval",
]


def check_int(name: str, value) -> int:
    if isinstance(value, bool) or int(value) != value:
        raise ValueError(f"{name} must be an integer, got {value!r}")
    return int(value)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct: ``1 - C(n-c, k) / C(n, k)``.

    Computed as ``1 - prod_{i=n-c+1}^{n} (1 - k/i)`` (no huge binomials). The package's one pass@k:
    every estimate of it, in evaluation, selection and the draft-gated trainer, calls this.

    Needs ``1 <= k <= n`` and ``0 <= c <= n``; raises ValueError otherwise. ``k > n`` is refused
    rather than clamped: ``n`` samples hold no ``k``-subset, so the estimator is undefined there.
    A caller that wants "all ``n`` samples" when it asks for more clamps at its call site
    (``pass_at_k(n, c, min(k, n))``), where the reader sees it; one that wants an extrapolation
    (``selection.best``) writes its own rule for ``k > n``.
    """
    n, c, k = check_int("n", n), check_int("c", c), check_int("k", k)
    if n < 1 or k < 1:
        raise ValueError(f"n and k must be >= 1, got n={n}, k={k}")
    if not 0 <= c <= n:
        raise ValueError(f"c must be in [0, n={n}], got {c}")
    if k > n:
        raise ValueError(f"pass@{k} needs at least k samples, got n={n}")
    if n - c < k:  # every k-subset contains a correct sample
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta ``I_x(a, b)``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def _t_cdf(t: float, df: float) -> float:
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """Quantile of Student's t with ``df`` degrees of freedom (bisection on the exact CDF)."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"need 0 < p < 1 and df > 0, got p={p}, df={df}")
    if df > 1e6:
        return statistics.NormalDist().inv_cdf(p)
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _t_cdf(mid, df) < p else (lo, mid)
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def mean_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): mean and two-sided Student-t interval of the mean of ``values``.

    With a single value the interval is undefined and returned as NaN; identical values give a
    zero-width interval."""
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("mean_ci needs at least one value")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    mean = math.fsum(xs) / len(xs)
    if len(xs) < 2:
        return mean, math.nan, math.nan
    half = t_quantile(0.5 + confidence / 2.0, len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    return mean, mean - half, mean + half


def paired_ci(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high) of the per-item difference ``a - b`` (items paired: the same problems)."""
    if len(a) != len(b):
        raise ValueError(f"paired values need equal lengths, got {len(a)} and {len(b)}")
    return mean_ci([x - y for x, y in zip(a, b)], confidence)


def binomial_halfwidth(p: float, outcomes: int, confidence: float = 0.95) -> float:
    """Half-width of the normal-approximation binomial interval, ``z * sqrt(p (1 - p) / outcomes)``,
    over ``outcomes`` (problem, run) results: the ± of the paper's tables (e.g. 71.7% over ~5,000
    outcomes gives ±1.25 points at 95%). It treats every outcome as an independent Bernoulli draw, so
    it ignores problem-to-problem variation and is narrower than ``mean_ci``'s interval."""
    if outcomes < 1:
        raise ValueError("a binomial interval needs at least one outcome")
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
    return z * math.sqrt(min(max(p * (1 - p), 0.0), 0.25) / outcomes)


def problem_means(rows: Sequence) -> list[float]:
    """Each distinct problem's value, averaged over its seeds and samples: ``rows[i]`` holds problem
    i's values (one per seed, or per seed and sample, nested lists; a bare number is one value).

    Every interval over problems starts here, so a problem counts once whether it was scored once
    (a deterministic row standing for every seed) or once per seed and sample: the seeds of one
    problem are not independent draws of the problem population."""
    def flat(value) -> list[float]:
        if isinstance(value, (int, float)):
            return [float(value)]
        return [x for v in value for x in flat(v)]

    out = []
    for i, row in enumerate(rows):
        values = flat(row)
        if not values:
            raise ValueError(f"problem {i} has no values")
        out.append(math.fsum(values) / len(values))
    return out


def problem_interval(rows: Sequence, confidence: float = 0.95,
                     bounds: tuple[float, float] | None = None) -> tuple[float, float, float]:
    """(mean, low, high) over distinct problems: the Student-t interval of :func:`problem_means`,
    clipped to ``bounds`` (e.g. ``(0, 1)`` for a probability) where given."""
    mean, low, high = mean_ci(problem_means(rows), confidence)
    if bounds is not None and not math.isnan(low):
        low, high = max(low, bounds[0]), min(high, bounds[1])
    return mean, low, high


def problem_binomial_halfwidth(rows: Sequence, confidence: float = 0.95) -> tuple[float, int]:
    """(half-width, problems): the paper-style binomial interval of the mean of
    :func:`problem_means`, with N the number of distinct problems (not problems x seeds: a problem
    repeated over seeds is one draw of the problem population, and a deterministic row repeats it
    exactly)."""
    means = problem_means(rows)
    return binomial_halfwidth(math.fsum(means) / len(means), len(means), confidence), len(means)


def seed_interval(per_seed: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high) of per-training-seed values (e.g. one paired difference per seed): the
    Student-t interval over seeds, which carries the training-seed variance the interval over
    problems leaves out. With one seed the interval is NaN."""
    return mean_ci(per_seed, confidence)


def finite_or_none(x: float) -> float | None:
    return None if x is None or math.isnan(x) else x


INTERVAL_NOTE = ("Each cell is the mean with its 95% interval: `m ± h` (half-width) where the interval is "
                 "symmetric, `m [low, high]` where it was clipped to the possible range (0-100 for pass@k).")
"""The one sentence that says how :func:`format_interval` prints an interval, for every table that uses it."""


def format_interval(mean: float, low: float | None, high: float | None, digits: int = 2) -> str:
    """``m ± h`` for a symmetric interval, ``m [lo, hi]`` for a clipped one, ``m`` without one."""
    if low is None or high is None:
        return f"{mean:.{digits}f}"
    if abs((high - mean) - (mean - low)) < 0.5 * 10 ** -digits:
        return f"{mean:.{digits}f} ± {(high - low) / 2:.{digits}f}"
    return f"{mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"

