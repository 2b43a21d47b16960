"""Training the verifier: it learns (parameters move, held-out AUC well above chance on a table whose
confidences carry the signal), its weights do not depend on the thread count, and cross-fitted scores
of a problem do not depend on that problem's own labels."""

import numpy as np
import torch

from decoding_adapters.evaluation.sample_table import synthetic_sample_table
from decoding_adapters.evaluation.verifier import crossfit_table_scores, fit_on_table, ranking_quality, table_scores
from decoding_adapters.policies.verifier import Verifier
from decoding_adapters.training.verifier import VerifierTrainConfig, verifier_config_from_table

CONFIG = VerifierTrainConfig(steps=40, width=16, hidden_proj=4, folds=3)


def test_it_learns_and_ranks_held_out_attempts():
    train, test = synthetic_sample_table(120, seed=3, hidden_size=6), synthetic_sample_table(80, seed=4, hidden_size=6)
    torch.manual_seed(0)
    start = Verifier(verifier_config_from_table(train, CONFIG))
    verifier = fit_on_table(train, CONFIG)
    assert not torch.equal(start.net[0].weight, verifier.net[0].weight)
    quality = ranking_quality(table_scores(verifier, test), test)
    assert quality["all"]["auc"] > 0.7 and 0 <= quality["all"]["ece"] <= 1


def test_weights_do_not_depend_on_the_thread_count():
    table = synthetic_sample_table(60, seed=5, hidden_size=6)
    before = torch.get_num_threads()
    states = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        states.append(fit_on_table(table, CONFIG).state_dict())
        assert torch.get_num_threads() == threads  # the caller's count is put back
    torch.set_num_threads(before)
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])


def test_crossfit_scores_of_a_fold_ignore_its_own_labels():
    table = synthetic_sample_table(60, seed=6, hidden_size=6)
    scores = crossfit_table_scores(table, CONFIG)
    flipped = table.subset(np.arange(60))
    flipped.rewards = table.rewards.copy()
    flipped.rewards[:20] = 1.0 - flipped.rewards[:20]  # the first fold's labels
    again = crossfit_table_scores(flipped, CONFIG)
    np.testing.assert_array_equal(scores[:20], again[:20])  # scored by a verifier fitted on folds 2-3 only
    assert not np.array_equal(scores[20:], again[20:])  # which the flipped labels did change


def test_a_table_without_answers_keeps_the_start():
    table = synthetic_sample_table(8, seed=7, hidden_size=6)
    table.answers[:] = -1
    verifier = fit_on_table(table, CONFIG)
    assert all(torch.isfinite(v).all() for v in verifier.state_dict().values())
    assert (table_scores(verifier, table) == 0).all()
