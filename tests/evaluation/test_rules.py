"""The fixed answer rules against hand-computed cases (answers and decodes as each paper defines
them), their tuning on validation, and the sample table they read (save / load / resume on the tiny
random-weight model)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from decoding_adapters.decoding.actions import GREEDY, DecodingAction
from decoding_adapters.evaluation.rules import draws_from_table, greedy_then, rule_grid, tune_rules
from decoding_adapters.evaluation.sample_table import (
    CONFIDENCE_FEATURES,
    ConfidenceConfig,
    SampleTable,
    build_sample_table,
    confidence_summary,
    synthetic_sample_table,
)
from decoding_adapters.policies.fixed_rules import (
    RULES,
    Draws,
    RuleSetting,
    adaptive_consistency,
    beta_exceeds_half,
    cges,
    confidence_threshold,
    deepconf_offline,
    deepconf_online,
    esc,
    reasc,
    score_setting,
    self_consistency,
    vote,
)
from decoding_adapters.tasks import get_task

pytestmark = pytest.mark.usefixtures("one_thread")

A = np.array


def _tokens(answers):
    """Token counts 1, 2, 3, ... per draw: a rule's token total tells which draws it read."""
    return np.tile(np.arange(1, answers.shape[1] + 1), (answers.shape[0], 1))


def _tri(n):  # tokens of the first n draws under _tokens
    return n * (n + 1) / 2


# ---- votes ------------------------------------------------------------------------------------------


def test_vote_ties_go_to_the_answer_drawn_first_and_no_answer_casts_no_vote():
    answers = A([[1, 0, 0, 1], [-1, -1, 2, -1], [-1, -1, -1, -1], [3, 2, 2, 3]])
    assert vote(answers).tolist() == [1, 2, -1, 3]
    assert vote(answers, upto=3).tolist() == [0, 2, -1, 2]
    assert vote(answers, weights=A([[1, 1, 1, 2.5]] * 4)).tolist() == [1, 2, -1, 3]


# ---- self-consistency -------------------------------------------------------------------------------


def test_self_consistency_is_the_majority_of_the_first_n_draws():
    answers = A([[0, 1, 1, 2, 1], [0, 1, 2, 2, 2], [-1, 3, -1, 4, 4]])
    result = self_consistency(answers, _tokens(answers), 3)
    assert result.answers.tolist() == [1, 0, 3]  # 1 twice; a three-way tie -> first drawn; -1 skipped
    assert result.decodes.tolist() == [3, 3, 3] and result.tokens.tolist() == [6, 6, 6]
    assert self_consistency(answers, _tokens(answers), 1).answers.tolist() == [0, 0, -1]
    assert self_consistency(answers, _tokens(answers), 5).answers.tolist() == [1, 2, 4]


# ---- ESC --------------------------------------------------------------------------------------------


def test_esc_stops_after_the_first_window_whose_answers_all_agree():
    answers = A([[0, 0, 1, 1, 2, 2],   # window 1 agrees: 2 draws, answer 0
                 [0, 1, 1, 1, 0, 0],   # window 2 agrees: 4 draws, majority of 0 1 1 1 = 1
                 [0, 1, 2, 0, 1, 2],   # never: 6 draws, a three-way tie -> first drawn, 0
                 [-1, -1, 3, 3, 0, 0]])  # a window of no answers does not agree: 4 draws, 3
    result = esc(answers, _tokens(answers), window=2, max_draws=6)
    assert result.answers.tolist() == [0, 1, 0, 3]
    assert result.decodes.tolist() == [2, 4, 6, 4]
    assert result.tokens.tolist() == [_tri(2), _tri(4), _tri(6), _tri(4)]
    capped = esc(answers, _tokens(answers), window=2, max_draws=5)  # whole windows only: 4 draws at most
    assert capped.decodes.tolist() == [2, 4, 4, 4]
    # windows of 3: no window of any problem agrees
    assert esc(answers, _tokens(answers), window=3, max_draws=6).decodes.tolist() == [6, 6, 6, 6]


# ---- Adaptive-Consistency ---------------------------------------------------------------------------


def test_beta_criterion_matches_the_binomial_identity_and_a_quadrature():
    # P(Beta(a, b) > 1/2) = P(Bin(a + b - 1, 1/2) <= a - 1) at integers
    for v1, v2 in [(1, 0), (2, 0), (3, 1), (5, 1), (6, 1), (7, 7)]:
        a, b = v1 + 1, v2 + 1
        n = a + b - 1
        exact = sum(math.comb(n, j) for j in range(a)) / 2 ** n
        assert beta_exceeds_half(A([a]), A([b]))[0] == pytest.approx(exact, abs=1e-12)
    x = np.linspace(0, 1, 200001)[1:-1]
    for a, b in [(1.9, 1.5), (2.7, 1.2), (4.25, 3.5)]:
        density = x ** (a - 1) * (1 - x) ** (b - 1)
        assert beta_exceeds_half(A([a]), A([b]))[0] == pytest.approx(density[x > 0.5].sum() / density.sum(), abs=1e-4)


def test_adaptive_consistency_stops_when_the_beta_criterion_passes_its_threshold():
    answers = A([[0, 0, 0, 0, 0, 0, 0, 0],   # (v1, v2) = (4, 0): 1 - 2^-5 = 0.969 > 0.95 at draw 4
                 [0, 1, 0, 0, 0, 0, 0, 0],   # (4,1): 57/64, (5,1): 120/128, (6,1): 247/256 > 0.95 at 7
                 [0, 1, 2, 3, 0, 1, 2, 3]])  # never: 8 draws, tie -> 0
    result = adaptive_consistency(answers, _tokens(answers), threshold=0.95, max_draws=8)
    assert result.decodes.tolist() == [4, 7, 8] and result.answers.tolist() == [0, 0, 0]
    assert result.tokens.tolist() == [_tri(4), _tri(7), _tri(8)]
    # (1, 0): P = 0.75 passes 0.7 after one draw
    assert adaptive_consistency(answers, _tokens(answers), threshold=0.7, max_draws=8).decodes.tolist() == [1, 1, 1]
    assert adaptive_consistency(answers, _tokens(answers), threshold=0.95, max_draws=5).decodes.tolist() == [4, 5, 5]


# ---- DeepConf -----------------------------------------------------------------------------------------


def test_deepconf_offline_filters_the_most_confident_and_weights_by_confidence():
    answers = A([[0, 1, 1, 2], [0, 1, 1, 2]])
    conf = A([[0.9, 0.2, 0.3, 0.8], [0.9, 0.5, 0.5, 0.1]])
    # eta 50: the two most confident; problem 0 keeps draws 0 and 3 (0 wins 0.9 to 0.8), problem 1
    # draws 0 and 1 (the tie between 1 and 2 goes to the earlier draw): 0 wins 0.9 to 0.5
    filtered = deepconf_offline(answers, _tokens(answers), conf, n=4, eta=50)
    assert filtered.answers.tolist() == [0, 0] and filtered.decodes.tolist() == [4, 4]
    # eta 100, the weighted vote over all: problem 0: 0.9 / 0.5 / 0.8 -> 0; problem 1: 0.9 / 1.0 -> 1
    assert deepconf_offline(answers, _tokens(answers), conf, n=4, eta=100).answers.tolist() == [0, 1]
    # n = 2: eta 10 keeps one draw, the most confident
    assert deepconf_offline(answers, _tokens(answers), conf, n=2, eta=10).answers.tolist() == [0, 0]


def test_deepconf_online_drops_draws_below_the_warmup_bar_and_stops_at_consensus():
    answers = A([[0, 1, 1, 0, 0, 1]])
    conf = A([[0.8, 0.6, 0.5, 0.9, 0.9, 0.9]])
    # warm-up 2, eta 50: the bar is the median of 0.8 and 0.6, 0.7; draw 2 (0.5) is dropped.
    # shares of the leader: after 2 draws 0.8 / 1.4, after 3 the same, after 4 1.7 / 2.3 = 0.739
    result = deepconf_online(answers, _tokens(answers), conf, warmup=2, eta=50, consensus=0.6, max_draws=6)
    assert result.answers.tolist() == [0] and result.decodes.tolist() == [4] and result.tokens.tolist() == [_tri(4)]
    later = deepconf_online(answers, _tokens(answers), conf, warmup=2, eta=50, consensus=0.75, max_draws=6)
    assert later.decodes.tolist() == [5]  # 2.6 / 3.2 = 0.8125
    # a dropped draw's answer never counts: were draw 2 kept, 1 would lead 1.1 to 0.8 after 3 draws
    kept_all = deepconf_online(answers, _tokens(answers), conf, warmup=3, eta=100, consensus=0.55, max_draws=3)
    assert kept_all.answers.tolist() == [1]


# ---- ReASC --------------------------------------------------------------------------------------------


def test_reasc_answers_from_one_confident_draw_else_accumulates_weighted_evidence():
    answers = A([[0, 1, 1, 1, 1], [2, 2, 0, 0, 0], [0, 1, 1, 1, 1]])
    conf = A([[0.2, 0, 0, 0, 0], [0.95, 0, 0, 0, 0], [0.2, 0, 0, 0, 0]])
    ones = np.ones((3, 5))
    result = reasc(answers, _tokens(answers), conf, ones, single_threshold=0.9, threshold=0.8, max_draws=5)
    # problem 0: weights 1: (1,1) 0.5, (2,1) 11/16, (3,1) 13/16 > 0.8 at draw 4 -> 1;
    # problem 1: its first draw is confident: 1 draw, answer 2
    assert result.answers.tolist() == [1, 2, 1] and result.decodes.tolist() == [4, 1, 4]
    # weights 0.5 on the first draw: (v1, v2) = (1, 0.5): P(Beta(2, 1.5) > 1/2) = 0.619, (2, 0.5):
    # 0.784, (3, 0.5): 0.881 (quadrature below) -> at threshold 0.78 three draws, where counts need four
    weights = ones.copy()
    weights[:, 0] = 0.5
    x = np.linspace(0, 1, 200001)[1:-1]
    for a, expected in ((2, 0.619), (3, 0.784)):
        density = x ** (a - 1) * (1 - x) ** 0.5
        assert density[x > 0.5].sum() / density.sum() == pytest.approx(expected, abs=1e-3)
    weighted = reasc(answers, _tokens(answers), conf, weights, single_threshold=0.9, threshold=0.78, max_draws=5)
    assert weighted.decodes.tolist() == [3, 1, 3] and weighted.answers.tolist() == [1, 2, 1]
    counted = reasc(answers, _tokens(answers), conf, ones, single_threshold=0.9, threshold=0.78, max_draws=5)
    assert counted.decodes.tolist() == [4, 1, 4]


# ---- CGES ---------------------------------------------------------------------------------------------


def test_cges_stops_when_one_answer_holds_the_posterior_mass():
    answers = A([[0, 0, 1], [0, 1, 1]])
    prob = A([[0.9, 0.9, 0.9], [0.6, 0.7, 0.7]])
    # problem 0: after draw 1 (K = 2): 0.9 vs unseen 0.1; after draw 2: 0.81 vs 0.01 -> 0.988
    # problem 1: after 2 draws (K = 3): 0: 0.6 * 0.15, 1: 0.2 * 0.7, unseen 0.2 * 0.15 -> 1 at 0.538;
    #            after 3: 0.0135 / 0.098 / 0.0045 -> 1 at 0.845
    result = cges(answers, _tokens(answers), prob, threshold=0.95, max_draws=3)
    assert result.answers.tolist() == [0, 1] and result.decodes.tolist() == [2, 3]
    assert cges(answers, _tokens(answers), prob, threshold=0.84, max_draws=3).decodes.tolist() == [1, 3]
    capped = cges(answers, _tokens(answers), prob, threshold=0.95, max_draws=2)  # 1 leads 0.538 at the cap
    assert capped.decodes.tolist() == [2, 2] and capped.answers.tolist() == [0, 1]
    early = cges(answers, _tokens(answers), prob, threshold=0.55, max_draws=3)
    assert early.decodes.tolist() == [1, 1] and early.answers.tolist() == [0, 0]
    mid = cges(answers, _tokens(answers), prob, threshold=0.62, max_draws=3)
    assert mid.decodes.tolist() == [1, 3]  # 0.6 < 0.62, 0.538 < 0.62, 0.845 -> answer 1 at 3


# ---- the confidence threshold ------------------------------------------------------------------------


def test_confidence_threshold_keeps_a_confident_draft_and_re_decodes_the_rest():
    answers = A([[0, 1, 2], [0, 1, 2], [3, 3, 4]])
    conf = A([[0.9, 0, 0], [0.2, 0, 0], [0.1, 0, 0]])
    one = confidence_threshold(answers, _tokens(answers), conf, threshold=0.5)
    assert one.answers.tolist() == [0, 1, 3] and one.decodes.tolist() == [1, 2, 2]
    assert one.tokens.tolist() == [1, 3, 3]
    two = confidence_threshold(answers, _tokens(answers), conf, threshold=0.5, redecodes=2)
    assert two.answers.tolist() == [0, 1, 3]  # re-decodes only: 1 vs 2 tie -> 1; 3 vs 4 -> 3
    with_draft = confidence_threshold(answers, _tokens(answers), conf, threshold=0.5, redecodes=2, with_draft=True)
    assert with_draft.answers.tolist() == [0, 0, 3] and with_draft.decodes.tolist() == [1, 3, 3]


# ---- scoring and tuning -------------------------------------------------------------------------------


def _draws(answers, correct_ids, conf=None):
    answers = A(answers)
    p, s = answers.shape
    features = np.zeros((p, s, len(CONFIDENCE_FEATURES)))
    if conf is not None:
        features[..., CONFIDENCE_FEATURES.index("max_prob_mean")] = conf
    k = max(2, answers.max() + 1)
    answer_correct = np.zeros((p, k), bool)
    answer_correct[np.arange(p), correct_ids] = True
    return Draws(answers, _tokens(answers), features, CONFIDENCE_FEATURES, answer_correct)


def test_scoring_reads_the_chosen_answer_s_correctness():
    draws = _draws([[0, 1, 1], [1, 0, 0], [-1, -1, -1]], [1, 1, 0])
    scored = draws.score(self_consistency(draws.answers, draws.tokens, 3))
    assert scored.correct.tolist() == [True, False, False] and scored.accuracy == pytest.approx(1 / 3)
    assert scored.decodes == 3 and scored.tokens == 6


def test_tuning_picks_the_best_validation_setting_within_each_compute_level():
    table = synthetic_sample_table(300, samples=6, seed=3)
    validation, test = greedy_then(table.subset(range(150)), 1), greedy_then(table.subset(range(150, 300)), 1)
    curves = tune_rules(validation, test, rules=["self_consistency", "adaptive_consistency"], levels=(1.0, 2.0, 4.0))
    for rule, curve in curves.items():
        grid = rule_grid(validation, [rule])
        scores = [validation.score(score_setting(x, validation)) for x in grid]
        for point in curve["points"]:
            assert point["validation"]["decodes"] <= point["level"] + 1e-9
            best = max(sc.accuracy for sc in scores if sc.decodes <= point["level"] + 1e-9)
            assert point["validation"]["accuracy"] == pytest.approx(best)
            chosen = RuleSetting(rule, tuple(point["setting"].items())[1:])
            assert test.score(score_setting(chosen, test)).accuracy == pytest.approx(point["test"]["accuracy"])
    assert curves["self_consistency"]["points"][0]["setting"] == {"rule": "self_consistency", "n": 1}
    # every rule runs at every setting of its grid on the synthetic table
    for rule in RULES:
        for setting in rule_grid(validation, [rule])[::7]:
            result = score_setting(setting, validation)
            assert result.answers.shape == (150,) and (result.decodes >= 1).all()
            assert (result.decodes <= validation.length).all()


# ---- the sample table ---------------------------------------------------------------------------------


def test_confidence_summary_by_hand():
    # one trace of 3 tokens over a vocabulary of 2; top-1 = the sampled token
    probs = torch.tensor([[[0.5, 0.5], [0.9, 0.1], [0.8, 0.2]]])
    logp = probs.log()
    token = logp[..., 0]
    answer = torch.tensor([[False, False, True]])
    out = confidence_summary(logp, token, torch.tensor([3]), answer, ConfidenceConfig(conf_top_k=2, group_window=2))[0]
    named = dict(zip(CONFIDENCE_FEATURES, out.tolist()))
    conf = (-logp.mean(-1))[0]  # DeepConf's token confidence with k = 2
    assert named["max_prob_mean"] == pytest.approx((0.5 + 0.9 + 0.8) / 3)
    assert named["max_prob_min"] == pytest.approx(0.5)
    assert named["logprob_mean"] == pytest.approx(float(token.mean()))
    assert named["token_conf_mean"] == pytest.approx(float(conf.mean()))
    groups = [float(conf[0:2].mean()), float(conf[1:3].mean())]
    assert named["group_conf_min"] == pytest.approx(min(groups))
    assert named["group_conf_bottom10"] == pytest.approx(min(groups))
    assert named["tail_conf"] == pytest.approx(groups[1])
    assert named["answer_logprob"] == pytest.approx(math.log(0.8))
    assert named["answer_prob_min"] == pytest.approx(0.8)
    entropy = -(probs * logp).sum(-1)[0]
    assert named["entropy_mean"] == pytest.approx(float(entropy.mean()))


def test_synthetic_table_save_load_round_trip(tmp_path):
    table = synthetic_sample_table(7, samples=3, seed=1, hidden_size=4)
    loaded = SampleTable.load(table.save(tmp_path / "t"))
    assert loaded.problem_ids == table.problem_ids and loaded.answer_strings == table.answer_strings
    for name in ("answers", "rewards", "tokens", "confidence", "hidden"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(table, name))
    assert (loaded.answers[:, 0] == loaded.answers[:, 0, :1]).all()  # greedy: one sample in every slot
    draws = draws_from_table(loaded, [("greedy", 0), (1, 2), (1, 0)])
    np.testing.assert_array_equal(draws.answers, table.answers[:, [0, 1, 1], [0, 2, 0]])
    with pytest.raises(ValueError, match="distinct samples"):
        draws_from_table(loaded, [("greedy", 1)])


SAMPLER = DecodingAction(temperature=1.0)


def test_sample_table_builds_resumes_and_refuses_other_settings(tiny_lm, tmp_path):
    task = get_task("arithmetic")
    problems = task.load("validation")[:3]
    path = tmp_path / "table"
    kwargs = dict(samples=2, token_budget=6, split="validation", progress=False)
    first = build_sample_table(tiny_lm, task, problems[:2], [GREEDY, SAMPLER], path=path, chunk_problems=1,
                               hidden=True, **kwargs)
    assert first.shape == (2, 2, 2) and first.hidden.shape == (2, 2, 2, tiny_lm.hidden_size)
    header = json.loads((path / "header.json").read_text())
    assert header["stop_at_answer"] is True and header["samples"] == 2 and header["model"] == tiny_lm.fingerprint()
    # a kill mid-chunk: the chunk's JSON (written last) is missing, so the chunk is decoded again
    (path / "chunk-00001.json").unlink()
    table = build_sample_table(tiny_lm, task, problems, [GREEDY, SAMPLER], path=path, chunk_problems=2,
                               hidden=True, **kwargs)
    assert table.problem_ids == [p.id for p in problems]
    np.testing.assert_array_equal(table.answers[:2], first.answers)  # same seeds per row: same samples
    np.testing.assert_allclose(table.confidence[:2], first.confidence, rtol=1e-5, equal_nan=True)
    assert SampleTable.load(path).problem_ids == [problems[0].id, problems[1].id, problems[2].id]
    assert (table.tokens >= 1).all() and (table.tokens <= 6).all()
    conf = table.feature("max_prob_mean")
    assert ((conf > 0) & (conf <= 1)).all()
    assert (table.feature("group_conf_min") <= table.feature("tail_conf") + 1e-5).all()
    with pytest.raises(ValueError, match="other settings"):
        build_sample_table(tiny_lm, task, problems, [GREEDY, SAMPLER], path=path, stop_at_answer=False, **kwargs)


def test_sample_table_confidence_matches_the_decode_and_the_draft_table_samples(tiny_lm, tmp_path):
    from decoding_adapters.decoding.actions import ActionSet
    from decoding_adapters.decoding.loop import decode
    from decoding_adapters.decoding.rollouts import encode_problems
    from decoding_adapters.training.draft import build_draft_table

    task = get_task("arithmetic")
    problems = task.load("validation")[:2]
    table = build_sample_table(tiny_lm, task, problems, [GREEDY, SAMPLER], samples=2, token_budget=6,
                               path=tmp_path / "t", split="validation", stop_at_answer=False, progress=False)
    prompts, _ = encode_problems(tiny_lm, task, problems)
    greedy = decode(tiny_lm, prompts, ActionSet([GREEDY]), row_actions=0, token_budget=6)
    mean_max = (greedy.max_prob * greedy.valid_mask()).sum(1) / greedy.lengths
    np.testing.assert_allclose(table.feature("max_prob_mean")[:, 0, 0], mean_max.numpy(), rtol=1e-4)
    np.testing.assert_array_equal(table.tokens[:, 0, 0], greedy.lengths.numpy())
    # the sampled arm's rows use the draft table's seeds: the same samples
    drafts = build_draft_table(tiny_lm, task, problems, [SAMPLER], samples=2, token_budget=6,
                               path=tmp_path / "d.jsonl", split="validation", stop_at_answer=False)
    for i, problem in enumerate(problems):
        stored = drafts.records[problem.id]["samples"][SAMPLER.name]
        lengths = [s["length"] for s in stored]
        assert table.tokens[i, 1].tolist() == lengths
        answers = [table.answer_strings[i][a] if a >= 0 else "" for a in table.answers[i, 1]]
        assert answers == [s["answer"] for s in stored]


def test_rules_command_tunes_on_validation_and_writes_curves(tmp_path, capsys):
    from decoding_adapters.cli import main

    synthetic_sample_table(60, samples=4, seed=5).save(tmp_path / "val")
    synthetic_sample_table(40, samples=4, seed=6).save(tmp_path / "test")
    code = main(["rules", "--table", str(tmp_path / "test"), "--validation-table", str(tmp_path / "val"),
                 "--out", str(tmp_path / "out"), "--rules", "self_consistency,esc,cges", "--levels", "1,2,5"])
    assert code == 0
    curves = json.loads((tmp_path / "out" / "curves.json").read_text())
    assert set(curves["rules"]) == {"self_consistency", "esc", "cges"} and curves["test_problems"] == 40
    assert curves["sequence"].startswith("greedy, then")
    assert (tmp_path / "out" / "curves.png").stat().st_size > 0
    assert sorted(curves["pass_at_k"][next(iter(curves["pass_at_k"]))]) == ["1", "2", "3", "4"]
    assert "self_consistency" in capsys.readouterr().out


def test_calibration_is_a_rising_curve_where_confidence_predicts_correctness():
    from decoding_adapters.policies.fixed_rules import Calibration

    gen = np.random.default_rng(0)
    conf = gen.normal(size=2000)
    correct = gen.random(2000) < 1 / (1 + np.exp(-2 * conf))
    cal = Calibration.fit(conf, correct)
    values = cal(np.array([-2.0, 0.0, 2.0]))
    assert values[0] < values[1] < values[2] and values[1] == pytest.approx(0.5, abs=0.05)
    assert values[2] == pytest.approx(1 / (1 + np.exp(-4)), abs=0.03)


def test_a_draft_table_reads_as_a_sample_table(tiny_lm, tmp_path):
    from decoding_adapters.evaluation.sample_table import from_draft_table
    from decoding_adapters.training.draft import build_draft_table

    task = get_task("arithmetic")
    problems = task.load("validation")[:2]
    drafts = build_draft_table(tiny_lm, task, problems, [SAMPLER], samples=2, token_budget=6,
                               path=tmp_path / "d.jsonl", split="validation", stop_at_answer=False)
    table = from_draft_table(drafts)
    assert table.shape == (2, 2, 2) and table.arm_names[1] == SAMPLER.name and table.actions[0].is_greedy
    for i, problem in enumerate(problems):
        record = drafts.records[problem.id]
        assert table.rewards[i, 0].tolist() == [record["draft"]["reward"]] * 2
        stored = record["samples"][SAMPLER.name]
        assert table.tokens[i, 1].tolist() == [s["length"] for s in stored]
        assert table.feature("max_prob_mean")[i, 1].tolist() == pytest.approx([s["confidence"] for s in stored])
        answers = [table.answer_strings[i][a] if a >= 0 else "" for a in table.answers[i, 1]]
        assert answers == [s["answer"] for s in stored]
    draws = greedy_then(table, SAMPLER.name)
    assert self_consistency(draws.answers, draws.tokens, 3).decodes.tolist() == [3, 3]
