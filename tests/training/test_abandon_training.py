"""The abandon rule learned on a planted table: a prefix signal that says which attempts end wrong.
The prefix verifier finds it, the tuned thresholds cut attempts and save tokens at no loss of
accuracy on validation, and a fresh table shows the same."""

from __future__ import annotations

import numpy as np
import pytest

from decoding_adapters.evaluation.sample_table import synthetic_sample_table
from decoding_adapters.policies.abandon import cut_table
from decoding_adapters.policies.fixed_rules import vote
from decoding_adapters.training.abandon import prefix_training_inputs, train_prefix_verifier, tune_thresholds
from decoding_adapters.training.verifier import VerifierTrainConfig

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

EVERY, BUDGET = 16, 64


def planted(problems: int, seed: int):
    """A synthetic table whose attempts are all long (48-63 tokens), with checkpoints at 16, 32, 48:
    the prefix hidden state's first coordinate is +1 on attempts that end right, -1 on the others
    (plus noise); the confidences at the checkpoints carry nothing."""
    table = synthetic_sample_table(problems, samples=4, seed=seed, hidden_size=4)
    gen = np.random.default_rng(seed + 100)
    table.header["token_budget"], table.header["checkpoints"] = BUDGET, EVERY
    table.tokens[:] = gen.integers(49, BUDGET, size=table.tokens.shape)
    table.tokens[:, 0] = table.tokens[:, 0, :1]  # greedy: one sample repeated
    k = len(table.checkpoint_tokens)
    shape = table.shape + (k,)
    right = np.broadcast_to(table.correct[..., None], shape)
    conf = gen.normal(size=shape + (len(table.confidence_names),)).astype(np.float32) + 2.0
    hidden = gen.normal(size=shape + (4,)).astype(np.float32) * 0.7
    hidden[..., 0] += np.where(right, 1.0, -1.0)
    conf[:, 0], hidden[:, 0] = conf[:, 0, :1], hidden[:, 0, :1]
    table.prefix_confidence, table.prefix_hidden = conf, hidden.astype(np.float16)
    return table


def majority(table) -> tuple[float, float]:
    """A decider for the test: the majority of greedy and every sample (an attempt without an answer
    casts no vote); every attempt's tokens spent."""
    answers = np.concatenate([table.answers[:, 0, :1], table.answers[:, 1]], axis=1)  # [P, 1 + N]
    tokens = table.tokens[:, 0, 0] + table.tokens[:, 1].sum(1)
    chosen = vote(answers)
    right = np.concatenate([table.answer_correct(), np.zeros((len(chosen), 1), bool)], axis=1)
    return float(right[np.arange(len(chosen)), np.where(chosen >= 0, chosen, right.shape[1] - 1)].mean()), \
        float(tokens.mean())


def test_the_prefix_verifier_finds_the_planted_signal():
    rule = train_prefix_verifier(planted(200, 0), VerifierTrainConfig(steps=100))
    test = planted(200, 2)
    scores = rule.table_scores(test)
    inputs = prefix_training_inputs(test)
    assert inputs.problems == int(np.isfinite(scores[:, :1, :1]).sum() + np.isfinite(scores[:, 1:]).sum())
    flat = scores[:, 1][np.isfinite(scores[:, 1])]
    right = np.broadcast_to(test.correct[:, 1, :, None], scores[:, 1].shape)[np.isfinite(scores[:, 1])]
    ranks = flat.argsort().argsort()
    auc = (ranks[right].mean() - (right.sum() - 1) / 2) / (~right).sum()
    assert auc > 0.8


def test_tuned_thresholds_save_tokens_at_equal_accuracy():
    rule = train_prefix_verifier(planted(200, 0), VerifierTrainConfig(steps=100))
    validation, test = planted(200, 1), planted(200, 2)
    tuned = tune_thresholds(rule, validation, majority, tolerance=0.005)
    assert any(t > 0 for t in tuned.rule.thresholds)
    assert tuned.accuracy >= tuned.reference_accuracy - 0.005
    assert tuned.tokens < 0.9 * tuned.reference_tokens
    base_acc, base_tokens = majority(test)
    acc, tokens = majority(tuned.rule.apply(test))
    assert tokens < 0.9 * base_tokens and acc >= base_acc - 0.03


def test_a_cut_sample_gives_no_answer_and_reads_its_checkpoint():
    table = planted(5, 3)
    cut = np.full(table.shape, -1)
    cut[0, 1, 2] = 1
    seen = cut_table(table, cut)
    assert seen.answers[0, 1, 2] == -1 and seen.rewards[0, 1, 2] == 0 and seen.tokens[0, 1, 2] == 2 * EVERY
    np.testing.assert_array_equal(seen.confidence[0, 1, 2], table.prefix_confidence[0, 1, 2, 1])
    np.testing.assert_array_equal(seen.hidden[0, 1, 2], table.prefix_hidden[0, 1, 2, 1])
    keep = np.ones(table.shape, bool)
    keep[0, 1, 2] = False
    np.testing.assert_array_equal(seen.answers[keep], table.answers[keep])
    assert seen.answers is not table.answers  # the original table is left as it was
