"""Action selection: greedy coverage, the resumable outcome table, offline replay, select-actions."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from decoding_adapters.decoding.actions import GREEDY, ActionSet, DecodingAction, candidate_pool, load_action_set
from decoding_adapters.decoding.rollouts import HFRollouts, Rollouts
from decoding_adapters.selection.coverage import (
    build_pool,
    coverage,
    coverage_curve,
    greedy_coverage,
    select_actions,
    top_k_by_mean,
)
from decoding_adapters.selection.outcomes import OutcomeTable, evaluate_pool
from decoding_adapters.selection.replay import ReplayEnvironment
from decoding_adapters.tasks import get_task

# ---------------------------------------------------------------------------- selection


def test_greedy_avoids_redundant_high_mean_columns():
    # columns 0 and 1 are identical and best on average; column 2 solves what they miss.
    R = np.array([[1, 1, 0], [1, 1, 0], [1, 1, 0], [0, 0, 1]], dtype=float)
    assert top_k_by_mean(R, 2) == [0, 1]
    assert greedy_coverage(R, 2) == [0, 2]
    assert coverage(R, [0, 1]) == pytest.approx(0.75)
    assert coverage(R, [0, 2]) == pytest.approx(1.0)
    sel = select_actions(R, 2)
    assert sel.coverage == pytest.approx([0.75, 1.0]) and sel.top_k_coverage == pytest.approx([0.75, 0.75])
    assert sel.pool_coverage == pytest.approx(1.0)
    assert sel.full_order[:2] == [0, 2] and sel.full_coverage == pytest.approx([0.75, 1.0, 1.0])
    assert sel.saturation == 2  # column 1 adds nothing once 0 and 2 are in


def test_saturation_is_where_coverage_reaches_the_pool_and_stays():
    rng = np.random.default_rng(1)
    R = (rng.random((30, 10)) < 0.15).astype(float)
    sel = select_actions(R, 3)
    s = sel.saturation
    assert sel.full_order[:3] == sel.order and sel.full_coverage[:3] == pytest.approx(sel.coverage)
    assert sel.full_coverage[s - 1] == pytest.approx(sel.pool_coverage)
    assert s == 1 or sel.full_coverage[s - 2] < sel.pool_coverage - 1e-9  # not reached one pick earlier
    assert all(f == pytest.approx(sel.pool_coverage) for f in sel.full_coverage[s - 1:])
    assert select_actions(np.zeros((4, 3)), 2).saturation == 0  # nothing solved: no saturation point


def test_coverage_is_monotone_along_greedy_order_with_diminishing_gains():
    rng = np.random.default_rng(0)
    R = rng.integers(0, 3, size=(40, 12)) / 2.0  # mean over 2 samples: 0, 0.5 or 1
    order = greedy_coverage(R, 12)
    assert sorted(order) == list(range(12))
    curve = coverage_curve(R, order)
    assert curve == pytest.approx([coverage(R, order[:i]) for i in range(1, 13)])
    assert all(b >= a for a, b in zip(curve, curve[1:]))
    gains = np.diff([0.0, *curve])
    assert all(g2 <= g1 + 1e-12 for g1, g2 in zip(gains, gains[1:]))  # submodular: greedy gains shrink
    assert curve[0] == pytest.approx(R.mean(axis=0).max())  # the first pick is the best single column
    assert curve[-1] == pytest.approx(coverage(R, range(12)))


def test_ties_go_to_the_lowest_index():
    R = np.ones((3, 4))
    assert greedy_coverage(R, 4) == [0, 1, 2, 3]
    assert top_k_by_mean(R, 2) == [0, 1]
    # equal in exact arithmetic, summed in another order in floating point
    R = np.array([[0.1, 0.7, 0.2], [0.2, 0.1, 0.7], [0.7, 0.2, 0.1]])
    assert greedy_coverage(R, 1) == [0]
    # after column 2, columns 0 and 1 add the same
    R = np.array([[1, 0, 1, 0], [0, 0, 0, 1], [0, 0, 1, 0]], dtype=float)
    assert greedy_coverage(R, 2) == [2, 3]
    assert greedy_coverage(R, 3) == [2, 3, 0]
    assert greedy_coverage(R, 3) == greedy_coverage(R.copy(), 3)


def test_selection_rejects_bad_k():
    with pytest.raises(ValueError):
        greedy_coverage(np.ones((2, 3)), 4)
    with pytest.raises(ValueError):
        top_k_by_mean(np.ones((2, 3)), 0)
    assert coverage(np.ones((2, 3)), []) == 0.0


# ---------------------------------------------------------------------------- table, pool


def test_outcome_table_matrix_and_missing_cells(tmp_path):
    t = OutcomeTable()
    for s, r in enumerate([1, 0, 1, 1]):
        t.add("p1", "a", s, r, 5 + s)
    t.add("p1", "b", 0, 0, 2)
    t.add("p2", "a", 0, 1, 3)
    with pytest.raises(ValueError, match="lacks 1"):
        t.to_matrix()
    t.add("p2", "b", 0, 0.0, 4)
    pids, names, R = t.to_matrix()
    assert (pids, names) == (["p1", "p2"], ["a", "b"])
    np.testing.assert_allclose(R, [[0.75, 0], [1, 0]])
    np.testing.assert_allclose(t.length_matrix()[2], [[6.5, 2], [3, 4]])
    sub = t.subset(["p2", "p1"], ["a"], samples=2)
    assert sub.problem_ids == ["p2", "p1"] and len(sub) == 3


def test_build_pool():
    pool = build_pool("pool", 12)
    assert len(pool) == 13 and pool[-1] == GREEDY
    full = candidate_pool()
    assert pool[0] == full[0] and pool[-2] == full[-1]
    assert {a.temperature for a in pool[:-1]} == {0.3, 0.5, 0.75, 1.0, 1.25}
    assert build_pool("pool", 12) == pool  # deterministic
    mix = build_pool("mix")  # already has greedy: not added twice
    assert [a.name for a in mix] == [a.name for a in load_action_set("mix")]
    assert GREEDY not in build_pool("math", add_greedy=False)


# ---------------------------------------------------------------------------- evaluate_pool on the tiny model


class CountingRollouts(Rollouts):
    """Records the seed of every decoded row (a row's seed names its problem, action and sample)."""

    def __init__(self, inner: Rollouts):
        self.inner, self.action_set, self.seeds = inner, inner.action_set, []

    def run(self, request, chooser=None, **kwargs):
        self.seeds += request.row_seeds
        return self.inner.run(request, chooser, **kwargs)


POOL = [GREEDY, DecodingAction(True, 1.0), DecodingAction(True, 0.75, 10, 0.9)]
SETTINGS = dict(samples=2, token_budget=6, seed=3, batch_rows=5, progress=False,  # 5 rows = one problem per chunk
                stop_at_answer=False)


@pytest.fixture(scope="module")
def arithmetic():
    task = get_task("arithmetic")
    return task, task.load("validation")[:3]


def _run(lm, task, problems, path, **extra):
    rollouts = CountingRollouts(HFRollouts(lm, ActionSet(POOL), batch_rows=5))
    table = evaluate_pool(lm, task, problems, POOL, table_path=path, rollouts=rollouts, **{**SETTINGS, **extra})
    return table, rollouts.seeds


def _cells(table: OutcomeTable) -> dict:
    return {(p, a): table.outcomes(p, a) for p in table.problem_ids for a in table.action_names}


@pytest.fixture(scope="module")
def reference(tiny_lm, arithmetic, tmp_path_factory):
    task, problems = arithmetic
    path = tmp_path_factory.mktemp("ref") / "outcomes.jsonl"
    table, seeds = _run(tiny_lm, task, problems, path)
    return table, seeds, path


def test_evaluate_pool_fills_the_grid(reference, arithmetic):
    table, seeds, path = reference
    _, problems = arithmetic
    pids, names, R = table.to_matrix()
    assert pids == [p.id for p in problems] and names == [a.name for a in POOL]
    assert R.shape == (3, 3) and ((R >= 0) & (R <= 1)).all()
    assert len(table) == 3 * 3 * 2
    assert len(seeds) == 3 * 5  # greedy decoded once per problem, stored for both samples
    g = table.outcomes(problems[0].id, "greedy")
    assert len(g) == 2 and g[0] == g[1]
    lines = path.read_text().splitlines()
    assert json.loads(lines[0])["header"]["token_budget"] == 6 and len(lines) == 1 + 18


def test_resume_after_a_kill_recomputes_nothing(tiny_lm, arithmetic, reference, tmp_path):
    task, problems = arithmetic
    path = tmp_path / "outcomes.jsonl"

    def kill(done, total):
        raise KeyboardInterrupt  # as if the process died right after the first chunk reached the disk

    rollouts = CountingRollouts(HFRollouts(tiny_lm, ActionSet(POOL), batch_rows=5))
    with pytest.raises(KeyboardInterrupt):
        evaluate_pool(tiny_lm, task, problems, POOL, table_path=path, rollouts=rollouts, on_chunk=kill, **SETTINGS)
    first = list(rollouts.seeds)
    assert len(first) == 5
    table, second = _run(tiny_lm, task, problems, path)
    assert not set(first) & set(second) and len(second) == 10
    assert sorted(first + second) == sorted(reference[1])
    assert _cells(table) == _cells(reference[0])
    assert _run(tiny_lm, task, problems, path)[1] == []  # a third run has nothing left to do


def test_torn_last_line_is_dropped_and_recomputed(tiny_lm, arithmetic, reference, tmp_path):
    task, problems = arithmetic
    path = tmp_path / "outcomes.jsonl"
    path.write_bytes(reference[2].read_bytes()[:-15])  # killed in the middle of the last record
    loaded = OutcomeTable.load(path)
    assert len(loaded) == 17
    table, seeds = _run(tiny_lm, task, problems, path)
    assert len(seeds) == 1 and _cells(table) == _cells(reference[0])
    assert [json.loads(x) for x in path.read_text().splitlines()]  # the file is whole again
    with path.open("a") as f:
        f.write('{"problem": "x", "act')
    assert _run(tiny_lm, task, problems, path)[1] == []


def test_resume_with_other_settings_is_refused(tiny_lm, arithmetic, reference, tmp_path):
    task, problems = arithmetic
    path = tmp_path / "outcomes.jsonl"
    path.write_bytes(reference[2].read_bytes())
    with pytest.raises(ValueError, match="token_budget"):
        _run(tiny_lm, task, problems, path, token_budget=7)


def test_unshared_prefill_gives_the_same_outcomes(tiny_lm, arithmetic, reference, tmp_path):
    task, problems = arithmetic
    table, seeds = _run(tiny_lm, task, problems, tmp_path / "outcomes.jsonl", share_prefill=False)
    assert _cells(table) == _cells(reference[0])


# ---------------------------------------------------------------------------- offline replay


def test_replay_environment_draws_stored_rewards():
    t = OutcomeTable()
    for s, r in enumerate([1.0, 0.0, 1.0, 1.0]):
        t.add("p", "a", s, r, 3)
    env = ReplayEnvironment(t)
    g = torch.Generator().manual_seed(0)
    assert env.sample_rewards("p", "a", 4, g).sum() == 3  # without replacement: every stored sample once
    two = env.sample_rewards("p", "a", 2, g)
    assert two.shape == (2,) and two.sum() >= 1  # only one 0 stored
    many = env.sample_rewards("p", "a", 50, g)
    assert many.shape == (50,) and set(many.tolist()) == {0.0, 1.0}
    same = [env.sample_rewards("p", "a", 3, torch.Generator().manual_seed(7)).tolist() for _ in range(2)]
    assert same[0] == same[1]
    assert env.mean_reward("p", "a") == 0.75 and env.num_samples("p", "a") == 4
    assert env.sample_batch(["p", "p"], ["a", "a"], g).shape == (2,)
    with pytest.raises(KeyError, match="offline replay"):
        env.sample_rewards("p", "b", 1, g)


# ---------------------------------------------------------------------------- CLI


def test_select_actions_cli_end_to_end(tiny_lm, tmp_path, monkeypatch, capsys):
    from decoding_adapters import cli

    model_dir = tmp_path / "tiny"
    tiny_lm.model.save_pretrained(model_dir)
    tiny_lm.tokenizer.save_pretrained(model_dir)
    # only this sub-command: the others may not exist yet in a partial checkout
    monkeypatch.setattr(cli, "COMMANDS", {"select-actions": cli.COMMANDS["select-actions"]})
    out = tmp_path / "sel"
    argv = ["select-actions", "--model", str(model_dir), "--task", "arithmetic", "--max-problems", "2",
            "--pool", "pool", "--pool-subsample", "3", "--k", "3", "--samples", "2", "--token-budget", "4",
            "--batch-rows", "8", "--out", str(out), "--no-progress"]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "| K | greedy F | top-K F |" in printed
    for name in ("outcomes.jsonl", "actions.json", "selection.md", "selection.png"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0
    actions = load_action_set(out / "actions.json")
    data = json.loads((out / "actions.json").read_text())
    assert len(actions) == 3 and data["method"] == "greedy-coverage" and data["pool"] == 4
    assert len(data["coverage"]) == 3 and data["task"] == "arithmetic"
    assert DecodingAction.from_dict(data["best_single"]) in build_pool("pool", 3)
    best = data["best_per_k"]  # Best per pass@k over every candidate, greedy included
    assert best["k_values"] == [1, 2, 4, 8] and set(best["scores"]) == {a.name for a in build_pool("pool", 3)}
    assert best["best"]["1"] == data["best_single_name"] and best["extrapolated"] == [4, 8]
    assert all(DecodingAction.from_dict(best["actions"][name]).name == name for name in best["best"].values())
    assert data["saturation"] <= data["pool"] and len(data["coverage_curve"]["coverage"]) == data["pool"]
    assert "Best static strategy per metric" in printed and "| pass@8 (extrapolated) |" in printed
    before = (out / "outcomes.jsonl").read_text()
    assert cli.main(argv) == 0  # resumes: nothing to add
    assert (out / "outcomes.jsonl").read_text() == before
    assert cli.main([*argv[:-3], "--k", "9", "--out", str(out)]) == 2  # k above the pool size: one-line error
