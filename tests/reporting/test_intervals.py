"""The verdicts' across-seed clause carries the Student-t interval over training seeds beside the
per-seed direction."""

from __future__ import annotations

import math
import statistics

from decoding_adapters.reporting.verdicts import seed_clause


def test_seed_clause_has_the_interval_over_seeds():
    diffs = [-0.006, 0.031, 0.009]  # the gate minus the threshold per seed, as fractions
    text = seed_clause(diffs, lambda d: d > 0)
    half = 4.302653 * statistics.stdev(diffs) / math.sqrt(3) * 100
    mean = sum(diffs) / 3 * 100
    assert text.startswith("per seed -0.6 / +3.1 / +0.9 (over seeds +1.1 [")
    assert f"[{mean - half:+.1f}, {mean + half:+.1f}]" in text
    assert text.endswith("holds on 2 of 3 seeds")
    assert "over seeds" not in seed_clause([0.02], lambda d: d > 0)
