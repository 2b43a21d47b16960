"""The hidden-state probes of ``evaluation.predictability`` (``benchmarks/headroom_probes.py hidden``):
the AUC, the logistic probe finding a planted direction, the first step a probe fires at, and the
threshold chosen on training rows."""

import numpy as np

from decoding_adapters.evaluation import predictability as bench


def test_auc_counts_ties_half_and_orders():
    assert bench.auc(np.array([0.9, 0.8, 0.1]), np.array([1, 1, 0])) == 1.0
    assert bench.auc(np.array([0.1, 0.9]), np.array([1, 0])) == 0.0
    assert bench.auc(np.array([0.5, 0.5]), np.array([1, 0])) == 0.5


def test_logistic_probe_finds_a_planted_direction_and_nothing_in_noise():
    # hidden-state-like features: a few strong latent factors mixed into 80 coordinates, plus noise;
    # the label follows one factor (the probe sees the top principal components only)
    rng = np.random.default_rng(0)
    latent = rng.normal(size=(400, 8))
    x = latent @ rng.normal(size=(8, 80)) + 0.3 * rng.normal(size=(400, 80)) + 5
    y = (rng.uniform(size=400) < 1 / (1 + np.exp(-2 * latent[:, 3]))).astype(float)
    probe, inner = bench.choose_logistic(x[:300], y[:300], components=32, seed=0)
    assert bench.auc(probe.logit(x[300:]), y[300:]) > 0.75 and bench.auc(inner, y[:300]) > 0.75
    noise = rng.uniform(size=400) < 0.5
    probe, _ = bench.choose_logistic(x[:300], noise[:300].astype(float), components=32, seed=0)
    assert abs(bench.auc(probe.logit(x[300:]), noise[300:].astype(float)) - 0.5) < 0.15


def test_first_firing_step_looks_only_inside_the_row():
    prob = np.array([[0.1, 0.9, 0.9], [0.1, 0.2, 0.95], [np.nan, 0.1, 0.1]])
    first = bench.first_firing_step(prob, np.array([3, 2, 3]), np.array([0.5, 0.5, 0.5]))
    assert first.tolist() == [1, -1, -1]  # row 1 fires only past its end; NaN (no probe) never fires


def test_tau_is_chosen_on_the_given_rows_and_never_fires_without_gain():
    prob = np.array([[0.9], [0.9], [0.2], [0.2]])
    lengths = np.ones(4, dtype=int)
    greedy, sampled = np.array([0.0, 0.0, 1.0, 1.0]), np.array([0.5, 0.5, 0.5, 0.5])
    rows = np.ones(4, dtype=bool)
    assert 0.2 <= bench.choose_tau(prob, lengths, greedy, sampled, rows, at_end=False) < 0.9
    assert bench.choose_tau(prob, lengths, 1 - greedy, sampled, rows, at_end=False) > 1  # firing only loses
