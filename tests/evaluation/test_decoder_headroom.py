"""The planted decoder-choice world and the head-room of choosing an arm: every arm is as good as
another on average, the type's own arm is better, the oracle's lead shows where the choice pays,
and a real table's head-room is cross-fitted (the oracle's arm chosen on samples the vote does not read)."""

import numpy as np
import pytest

from decoding_adapters.evaluation.decoder_choice import choice_headroom, planted_decoder_table, vote_with_arm


def test_the_planted_world_makes_the_types_own_arm_the_better_one():
    table, types = planted_decoder_table(3000, seed=0)
    correct = table.correct[:, 1:, :].mean(-1)  # [P, 3]
    own = correct[np.arange(len(types)), types].mean()
    assert own == pytest.approx(0.6, abs=0.03)
    assert all(correct[:, a].mean() == pytest.approx((0.6 + 2 * 0.15) / 3, abs=0.03) for a in range(3))
    assert table.correct[:, 0, 0].mean() == pytest.approx(0.3, abs=0.03)


def test_the_vote_reads_greedy_then_the_chosen_arms_samples():
    table, _ = planted_decoder_table(50, seed=1)
    # with no sample read, the vote is greedy's answer
    assert vote_with_arm(table, np.ones(50, int), []).tolist() == table.correct[:, 0, 0].tolist()
    # a tie between greedy and one sample: greedy was drawn first
    assert vote_with_arm(table, np.full(50, 2), [0]).tolist() == table.correct[:, 0, 0].tolist()


def test_the_oracle_leads_the_best_single_arm_where_types_differ_and_not_where_they_do_not():
    validation, _ = planted_decoder_table(400, seed=1)
    test, types = planted_decoder_table(1000, seed=2)
    rows = choice_headroom(validation, test, [2, 3], types)
    assert [r["decodes"] for r in rows] == [3, 4]
    assert all(r["difference"][1] > 0.1 for r in rows)  # the planted gain is there, interval above 0
    flat, flat_types = planted_decoder_table(1000, seed=3, right_own=0.3, right_other=0.3)
    assert all(abs(r["difference"][0]) < 0.05 for r in choice_headroom(validation, flat, [2, 3], flat_types))
    crossfit = choice_headroom(validation, validation, [2])  # no types: chosen on the samples not read
    assert crossfit[0]["oracle"] >= crossfit[0]["single"] - 0.05
