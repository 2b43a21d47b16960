import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from decoding_adapters.core.stats import pass_at_k
from decoding_adapters.evaluation.headroom import (
    answer_prefixes,
    bucket_summary,
    classify_failure,
    oracle_table,
    pass_at_k_matrix,
    repetition_period,
)


def test_pass_at_k_matrix_matches_the_scalar_estimator():
    rng = np.random.default_rng(0)
    rewards = (rng.random((5, 3, 6)) < 0.4).astype(float)
    table = pass_at_k_matrix(rewards, 2)
    for i in range(5):
        for j in range(3):
            assert table[i, j] == pytest.approx(pass_at_k(6, int(rewards[i, j].sum()), 2))


def test_oracle_gains_where_problems_prefer_different_actions():
    # Problem 0 is solved only by action 0, problem 1 only by action 1: each static action gets
    # 50%, the per-problem oracle 100%, and the cross-fitted oracle sees the same on held-out samples.
    rewards = np.zeros((2, 2, 4))
    rewards[0, 0] = 1
    rewards[1, 1] = 1
    (row,) = oracle_table(rewards, ["a", "b"], [1])
    assert row.best_static == pytest.approx(0.5)
    assert row.oracle == pytest.approx(1.0)
    assert row.headroom == pytest.approx(0.5)
    assert row.crossfit_oracle == pytest.approx(1.0)
    assert row.crossfit_headroom == pytest.approx(0.5)
    assert row.headroom_ci[0] <= 0.5 <= row.headroom_ci[1]


def test_crossfit_oracle_does_not_reward_luck():
    # Two identical coin-flip actions: the in-sample oracle takes the luckier estimate per problem
    # and gains; the cross-fitted one chooses on one half and scores on the other, and gains little.
    rng = np.random.default_rng(1)
    rewards = (rng.random((400, 2, 8)) < 0.5).astype(float)
    (row,) = oracle_table(rewards, ["a", "b"], [1])
    assert row.headroom > 0.05
    assert abs(row.crossfit_headroom) < 0.04
    low, high = row.crossfit_headroom_ci
    assert low < 0 < high  # no real head-room: the interval covers 0
    assert row.headroom_ci[0] > 0  # the in-sample oracle's luck looks real
    with_k_too_large = oracle_table(rewards, ["a", "b"], [8])[0]
    assert with_k_too_large.crossfit_oracle is None


def test_bucket_summary_groups_by_feature_and_averages_per_problem():
    records = [
        dict(problem="p", entropy=0.2, delta=1.0, changed=True),
        dict(problem="p", entropy=0.3, delta=0.0, changed=False),
        dict(problem="q", entropy=0.1, delta=0.0, changed=True),
        dict(problem="q", entropy=1.5, delta=-1.0, changed=True),
    ]
    low, high = bucket_summary(records, "entropy", (0.0, 1.0, 2.0))
    assert (low.deviations, low.problems) == (3, 2)
    assert low.mean == pytest.approx(0.25)  # p: 0.5, q: 0.0
    assert low.changed == pytest.approx(2 / 3)
    assert high.mean == -1.0 and math.isnan(high.low)
    assert high.to_dict()["low"] is None
    with pytest.raises(ValueError):
        bucket_summary(records, "entropy", (1.0, 1.0))


def test_repetition_period_finds_a_loop_at_the_end_only():
    assert repetition_period([5] * 20) == 1
    assert repetition_period([9, 8] + [1, 2, 3] * 8) == 3
    assert repetition_period(list(range(40))) is None
    assert repetition_period([1, 2, 3] * 8 + [7, 8, 9, 10]) is None


def test_answer_prefixes_end_after_whole_numbers():
    assert answer_prefixes("7 + 5 = 12, so 1,200.") == ["7", "7 + 5", "7 + 5 = 12", "7 + 5 = 12, so 1,200"]


def test_classify_failure_in_order():
    def right(text):
        return text.strip().endswith("12")

    assert classify_failure([1, 2], True, "It is 12. No wait, 13", right) == "right_then_overwritten"
    assert classify_failure([4] * 20, False, "13 and so on", right) == "repetition_loop"
    assert classify_failure(list(range(20)), False, "13 and so", right) == "cut_by_budget"
    assert classify_failure([1, 2], True, "13", right) == "wrong_computation"


def _headroom(argv: list[str]) -> subprocess.CompletedProcess:
    """``benchmarks/headroom.py`` run as a user runs it, on this checkout's package."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, str(root / "benchmarks" / "headroom.py"), *argv], env=env,
                          capture_output=True, text=True, timeout=600)


def test_benchmark_tiny_run_and_resume(tmp_path, tiny_model_dir):
    argv = ["--out", str(tmp_path), "--size", "tiny", "--problems", "3", "--fail-budgets", "6,10",
            "--seq-budget", "6", "--dev-budget", "8", "--model", str(tiny_model_dir), "--batch-rows", "16"]
    done = _headroom(argv)
    assert done.returncode == 0, done.stderr[-2000:]
    first = json.loads((tmp_path / "summary.json").read_text())
    assert set(first["failures"]) == {"plain", "cot"}
    assert set(first["failures"]["plain"]["budgets"]) == {"6", "10"}
    assert first["sequence"]["oracle"][0]["oracle"] >= first["sequence"]["oracle"][0]["best_static"]
    deviations = (tmp_path / "deviations.jsonl").read_text().splitlines()
    assert sum("done" in json.loads(line) for line in deviations) == 3
    assert _headroom(argv).returncode == 0  # everything from the caches
    again = json.loads((tmp_path / "summary.json").read_text())
    assert again["sequence"] == first["sequence"] and again["deviation"] == first["deviation"]
    assert (tmp_path / "deviations.jsonl").read_text().splitlines() == deviations
    refused = _headroom(argv[:-2] + ["--fail-budgets", "7"])  # the failures part's settings changed
    assert refused.returncode != 0 and "other settings" in refused.stderr
