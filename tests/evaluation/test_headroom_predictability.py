"""The prompt-side estimators of ``evaluation.predictability`` (``benchmarks/headroom_probes.py
prompt``): its predictors find a planted signal, and the cross-fitted oracle gains nothing where the
two strategies are the same coin."""

import numpy as np

from decoding_adapters.evaluation import predictability as bench


def test_ridge_and_neighbours_recover_a_planted_linear_gain():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(240, 64))
    gain = x[:, 0] - 0.5 * x[:, 1] + 0.1 * rng.normal(size=240)
    x_train, x_test = bench.standardise(x[:200], x[200:])
    ridge, penalty = bench.ridge_predict(x_train, gain[:200], x_test)
    assert penalty in bench.RIDGE_PENALTIES
    assert bench.spearman(ridge, gain[200:]) > 0.9
    clustered = np.repeat(np.eye(8), 30, axis=0) + 0.05 * rng.normal(size=(240, 8))  # 8 tight clusters
    cluster_gain = np.repeat(np.linspace(-1, 1, 8), 30)
    near = bench.neighbours_predict(clustered[::2], cluster_gain[::2], clustered[1::2], k=5)
    np.testing.assert_allclose(near, cluster_gain[1::2], atol=1e-9)


def test_predictors_find_nothing_where_features_carry_nothing():
    rng = np.random.default_rng(1)
    x_train, x_test = bench.standardise(rng.normal(size=(200, 300)), rng.normal(size=(1000, 300)))
    y_train, y_test = rng.normal(size=200), rng.normal(size=1000)
    ridge, _ = bench.ridge_predict(x_train, y_train, x_test)
    near = bench.neighbours_predict(x_train, y_train, x_test, k=15)
    assert abs(bench.spearman(ridge, y_test)) < 0.1 and abs(bench.spearman(near, y_test)) < 0.1


def test_crossfit_oracle_against_known_answers():
    rng = np.random.default_rng(2)
    greedy = (rng.random(4000) < 0.5).astype(float)
    # a sampler that always does what greedy does: no choice can gain
    assert bench.crossfit_oracle(greedy, np.repeat(greedy[:, None], 8, axis=1), 1)[0] == 0.0
    # a fair coin against a deterministic greedy that solves half the problems: on the failed half
    # the sampler is picked when one of 4 choosing samples succeeds (15/16) and scores 1/2, so the
    # oracle is 1/2 * 15/32 + 1/2 above the static 1/2: +23.4 points
    coin = (rng.random((4000, 8)) < 0.5).astype(float)
    assert abs(bench.crossfit_oracle(greedy, coin, 1)[0] - 100 * 15 / 64) < 2.0
    # half the problems solved only by sampling, the other half only greedily: +50 points
    split = np.arange(4000) % 2 == 0
    sampler = np.repeat(split[:, None].astype(float), 8, axis=1)
    assert bench.crossfit_oracle((~split).astype(float), sampler, 1)[0] == 50.0


def test_switching_chooser_samples_at_unsure_steps_and_latches_per_row():
    import torch

    from decoding_adapters.decoding.loop import StepFeatures

    def step(rows, max_prob):
        n = len(rows)
        return StepFeatures(hidden=torch.zeros(n, 2), entropy=torch.zeros(n), max_prob=torch.tensor(max_prob),
                            step=0, remaining_budget=torch.ones(n, dtype=torch.long), rows=torch.tensor(rows),
                            uniform=torch.zeros(n))

    per_step, latched = bench.switching_chooser(0.5, False, 3), bench.switching_chooser(0.5, True, 3)
    assert per_step(step([0, 1, 2], [0.9, 0.4, 0.6])).tolist() == [0, 1, 0]
    assert latched(step([0, 1, 2], [0.9, 0.4, 0.6])).tolist() == [0, 1, 0]
    # row 1 is confident again and row 0 has finished: the latch keeps row 1 sampling, per step does not
    assert per_step(step([1, 2], [0.95, 0.3])).tolist() == [0, 1]
    assert latched(step([1, 2], [0.95, 0.3])).tolist() == [1, 1]
