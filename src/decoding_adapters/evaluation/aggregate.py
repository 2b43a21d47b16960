"""From decoded rows to numbers: a problem's answer accuracy (a vote over B samples) and pass@k,
a metric's interval over problems, and what an answer cost (decodes and tokens of the samples it
used). Each has its draft-gated form beside it: the draft, kept or followed by re-decodes."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from typing import Mapping, Sequence

from ..core.stats import finite_or_none, pass_at_k, problem_binomial_halfwidth, problem_interval
from .keys import Key
from .methods import ANSWER_ACCURACY, EvalConfig
from .store import RowStore

__all__ = ["vote", "answer_accuracy", "draft_answer_accuracy", "draft_pass", "summarise", "subset_cost", "draft_cost"]


def vote(answers: Sequence[str], correct: Sequence[float]) -> float:
    """Whether the majority answer among ``answers`` is right (``correct[j]``: sample j's reward):
    the most frequent non-empty answer, ties to the one stated first; where no sample states an
    answer, the first sample. Samples with the same answer share its correctness."""
    counts = Counter(a for a in answers if a)
    if not counts:
        return float(correct[0] >= 0.5)
    top = max(counts.values())
    winner = next(j for j, a in enumerate(answers) if a and counts[a] == top)
    return float(correct[winner] >= 0.5)


def answer_accuracy(keys: list[Key], k: int, store: RowStore) -> float:
    """Accuracy of the one answer a method returns from B = k samples, without a verifier
    (``Method.answer_rule``), averaged over the disjoint blocks of k of its n samples (every sample
    used once: at k = 1 it is pass@1)."""
    blocks = [keys[b * k:(b + 1) * k] for b in range(len(keys) // k)]
    return statistics.fmean(_block_vote(block, store) for block in blocks)


def draft_answer_accuracy(keys: list[Key], k: int, store: RowStore) -> float:
    """:func:`answer_accuracy` of a draft-gated method (``keys[0]`` the draft): the draft where kept
    (one key); where re-decoded, the re-decode at k = 1, else a vote over the draft (first) and k - 1
    re-decodes, over the disjoint blocks of its re-decodes."""
    if len(keys) == 1:
        return float(store.correct[keys[0]] >= 0.5)
    samples, size = keys[1:], max(k - 1, 1)
    blocks = [samples[b * size:(b + 1) * size] for b in range(len(samples) // size)]
    if k > 1:
        blocks = [[keys[0], *block] for block in blocks]
    return statistics.fmean(_block_vote(block, store) for block in blocks)


def _block_vote(block: list[Key], store: RowStore) -> float:
    return vote([store.answer[key] for key in block], [store.correct[key] for key in block])


def draft_pass(keys: list[Key], k: int, n: int, store: RowStore) -> tuple[float, list[Key]]:
    """pass@k of a draft-gated method on one problem and the keys of its answers: the draft alone
    (kept); at k = 1 the re-decode (its n samples' mean); above, the draft and k - 1 samples (right
    unless all are wrong, unbiased over the n samples)."""
    draft = float(store.correct[keys[0]] >= 0.5)
    if len(keys) == 1:
        return draft, keys
    c = int(round(sum(store.correct[key] >= 0.5 for key in keys[1:])))
    if k == 1:
        return c / n, keys[1:]
    return 1 - (1 - draft) * (1 - pass_at_k(n, c, min(k - 1, n))), keys


def summarise(per_problem: dict[str, list[list[float]]], cfg: EvalConfig) -> tuple[dict, dict]:
    """results entry ``{metric: {mean, ci_low, ci_high}}`` and extra summary statistics."""
    entry, extra = {}, {}
    for metric, rows in per_problem.items():
        # a probability's interval is clipped to [0, 1]; every interval counts a problem once
        clip = (0.0, 1.0) if metric.startswith(("pass@", ANSWER_ACCURACY)) else None
        mean, low, high = problem_interval(rows, cfg.confidence, clip)
        entry[metric] = {"mean": mean, "ci_low": finite_or_none(low), "ci_high": finite_or_none(high)}
        seed_means = [statistics.fmean(r[s] for r in rows) for s in range(cfg.seeds)]
        runs = len(rows)  # distinct problems: a problem's seeds are not independent outcomes
        if metric.startswith("pass@"):  # the paper's ± (comparable with its tables; not used for verdicts)
            entry[metric]["binomial_halfwidth"], entry[metric]["outcomes"] = problem_binomial_halfwidth(
                rows, cfg.confidence)
        extra[metric] = {
            "seed_means": seed_means,
            "seed_std": statistics.stdev(seed_means) if len(seed_means) > 1 else 0.0,
            "binomial_se": math.sqrt(max(mean * (1 - mean), 0.0) / runs) if metric.startswith("pass@") else None,
        }
    return entry, extra


def subset_cost(sources: Sequence, costs: Mapping, k: int) -> tuple[float, float]:
    """Expected ``(decodes, tokens)`` of answering with ``k`` of the ``n`` samples ``sources`` (one
    entry per sample: the decoded generation it is; ``costs[source] = (decodes, tokens)``), the
    ``k`` drawn without replacement as pass@k's estimator draws them. Samples that are one
    generation (a deterministic row standing for several samples) cost it once: a generation that
    is ``m`` of the ``n`` samples is among the ``k`` with probability ``1 - C(n-m, k) / C(n, k)``.
    So ``k`` distinct samples cost ``k`` times their mean, and greedy costs one decode at every k."""
    n = len(sources)
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, {n}], got {k}")
    decodes = tokens = 0.0
    for source, m in Counter(sources).items():
        share = 1.0 - math.comb(n - m, k) / math.comb(n, k)
        decodes += share * costs[source][0]
        tokens += share * costs[source][1]
    return decodes, tokens


def draft_cost(sources: Sequence, costs: Mapping, k: int) -> tuple[float, float]:
    """A draft-gated answer's ``(decodes, tokens)``: the draft (``sources[0]``), plus, where it
    re-decoded, the expected cost of the 1 (k = 1) or k - 1 of the n samples ``sources[1:]`` that
    the answer uses (:func:`subset_cost`)."""
    decodes, tokens = costs[sources[0]]
    if len(sources) > 1:
        extra = subset_cost(sources[1:], costs, min(max(1, k - 1), len(sources) - 1))
        decodes, tokens = decodes + extra[0], tokens + extra[1]
    return decodes, tokens
