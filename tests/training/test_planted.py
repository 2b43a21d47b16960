"""The planted worlds (``training.planted``; ``benchmarks/planted.py`` prints their figures) as a
test: the real trainers, fed a synthetic LM and task whose optimal policy is known, recover at least
80% of the oracle's margin over the best static action on every seed at both levels, and a trainer
that cannot see the observation (features zeroed) does not."""

import pytest

from decoding_adapters.training import planted

SEEDS = (0, 1, 2)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def test_the_planted_optimum_beats_every_static_action_by_a_set_margin():
    problems = planted.PlantedTask().load("test")
    for values in (planted.token_values(None, problems), planted.sequence_values(None, problems)):
        best_static = max(v for k, v in values.items() if k.startswith("static:"))
        assert values["oracle"] - best_static > 0.2


@pytest.mark.parametrize("seed", SEEDS)
def test_token_trainer_recovers_the_planted_optimum(tmp_path, seed):
    assert planted.run_token(seed, tmp_path)["recovered"] >= 0.8


@pytest.mark.parametrize("seed", SEEDS)
def test_sequence_trainer_recovers_the_planted_optimum(tmp_path, seed):
    assert planted.run_sequence(seed, tmp_path)["recovered"] >= 0.8


def test_a_trainer_blind_to_the_observation_fails_the_benchmark(tmp_path):
    assert planted.run_token(0, tmp_path / "token", blind=True)["recovered"] < 0.8
    assert planted.run_sequence(0, tmp_path / "sequence", blind=True)["recovered"] < 0.8


def test_with_nothing_to_learn_the_token_trainer_ends_where_it_started(tmp_path):
    """The null world: greedy is optimal everywhere; the adapter kept must be no worse than it."""
    assert planted.run_token(1, tmp_path, null=True)["recovered"] > -0.01


def test_the_weak_world_blurs_the_fork_to_the_real_signals_strength():
    problems = planted.PlantedTask().load("test")
    assert 0.7 < planted.weak_signal_auc(problems) < 0.8
    values = planted.token_values(None, problems, weak=True)
    best_static = max(v for k, v in values.items() if k.startswith("static:"))
    assert values == {**planted.token_values(None, problems), "attainable": values["attainable"]}  # same problems
    assert best_static + 0.05 < values["attainable"] < values["oracle"] - 0.2
