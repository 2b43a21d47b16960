"""Draft-gated methods inside ``evaluate`` (the evaluation table) and on a both-arms table: a gate
that keeps every draft is Greedy at one decode per problem; one that re-decodes everything is the
sampler at pass@1 (two decodes) and the draft plus k - 1 samples at pass@k (k decodes); the random
gate at share 0 / 1 is those two; the table-based controls (threshold, weighted vote, agreement)
follow their rules."""

import dataclasses

import pytest

from decoding_adapters.core.stats import pass_at_k
from decoding_adapters.decoding.actions import DecodingAction
from decoding_adapters.evaluation import (
    GREEDY_TO_BUDGET,
    EvalConfig,
    evaluate,
    greedy_method,
    greedy_to_budget_method,
    static_method,
)
from decoding_adapters.evaluation import draft as ev
from decoding_adapters.evaluation.methods import adapter_method
from decoding_adapters.policies.draft import DraftContextConfig
from decoding_adapters.policies.networks import AdapterConfig, SequencePolicy, SequencePolicyConfig, save_adapter
from decoding_adapters.reporting import report
from decoding_adapters.training.draft import DraftTable
from helpers import HasOneTask

SAMPLER = DecodingAction(temperature=1.25)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def draft_adapter(directory, lm, keep: bool, stop: bool = False) -> str:
    context = DraftContextConfig(features="mean", token_budget=6)
    policy = SequencePolicy(SequencePolicyConfig(embed_dim=context.dim(lm.hidden_size), num_actions=2,
                                                 prior=(0.99, 0.01) if keep else (0.01, 0.99),
                                                 input_norm="standardise"))
    config = AdapterConfig(kind="draft", policy=dataclasses.asdict(policy.config), actions=[SAMPLER.to_dict()],
                           base_model="tiny", base_fingerprint=lm.fingerprint(), draft=dataclasses.asdict(context),
                           stop_at_answer=stop)
    save_adapter(directory, policy, config)
    return str(directory)


def test_draft_gated_rows_in_evaluate(tmp_path, tiny_lm):
    task = HasOneTask()
    keep = adapter_method(draft_adapter(tmp_path / "keep", tiny_lm, True), tiny_lm, name="Draft-gated keep")
    redo = adapter_method(draft_adapter(tmp_path / "redo", tiny_lm, False), tiny_lm, name="Draft-gated redo")
    assert keep.kind == "draft" and keep.role == "draft-gated" and keep.draft_context["features"] == "mean"
    methods = [greedy_method(), static_method(SAMPLER, name="Sampler"), keep, redo,
               ev.random_gate_method(SAMPLER, 0.0, "Random 0"), ev.random_gate_method(SAMPLER, 1.0, "Random 1"),
               ev.threshold_gate_method(SAMPLER, "max_prob_mean", 2.0, "Threshold all")]
    cfg = EvalConfig(k_values=(1, 2, 4), seeds=2, token_budget=6, keep_trajectories=3)
    result = evaluate(tiny_lm, task, task.load("test"), methods, cfg, batch_rows=16)
    per = result.details["per_problem"]
    assert per["Draft-gated keep"] == per["Greedy"] == per["Random 0"]
    assert per["Draft-gated redo"]["pass@1"] == per["Sampler"]["pass@1"] == per["Random 1"]["pass@1"]
    assert per["Threshold all"] == per["Draft-gated redo"]  # every max-probability is below 2
    for i in range(3):  # the draft and k - 1 of the sampler's n = 4 samples (the same generations)
        for s in range(2):
            draft, c = per["Greedy"]["pass@1"][i][s], round(4 * per["Sampler"]["pass@1"][i][s])
            for k in (2, 4):
                want = 1 - (1 - draft) * (1 - pass_at_k(4, c, k - 1))
                assert per["Draft-gated redo"][f"pass@{k}"][i][s] == pytest.approx(want)
    compute, shared = result.details["draft"], result.details["methods"]
    for name, want in (("Draft-gated keep", {"1": 1, "2": 1, "4": 1}), ("Draft-gated redo", {"1": 2, "2": 2, "4": 4})):
        assert compute[name]["decodes_per_problem"] == want
        # the evaluation's compute fields (and the cost of its own answer, B = 1)
        assert shared[name]["decodes_per_problem"] == pytest.approx({**want, "answer": want["1"]})
        for k in ("1", "2", "4"):
            assert shared[name]["tokens_per_problem"][k] == pytest.approx(compute[name]["tokens_per_problem"][k])
    assert compute["Draft-gated redo"]["redecode_share"]["1"] == 1
    assert compute["Draft-gated keep"]["tokens_per_problem"]["1"] == pytest.approx(
        sum(result.details["lengths"]["Greedy"]) / 3)
    assert result.details["action_usage"]["Draft-gated keep"][0] == 1  # output 0: the draft
    # what a reader needs to re-make and re-score the gate: every draft's confidence summary, and every
    # re-decode outcome decoded (here the sampler's rows, decoded for "Sampler" and the redo gate)
    problems = task.load("test")
    for name in ("Draft-gated keep", "Draft-gated redo"):
        summary = compute[name]["confidence"]
        assert list(summary) == [p.id for p in problems] and all(len(v) == 6 for v in summary.values())
        assert 0.0 < summary[problems[0].id]["max_prob_min"] <= summary[problems[0].id]["max_prob_mean"] <= 1.0
        outcomes = compute[name]["redecode_outcomes"]  # [seed][problem][action]
        assert [[row[0] for row in per_seed] for per_seed in outcomes] == [
            [per["Sampler"]["pass@1"][i][s] for i in range(3)] for s in range(2)]


class AnswersAtTwoTokens(HasOneTask):
    """The has-one task whose "complete answer" is any text of two or more characters."""

    def answer_complete(self, problem, text):
        return len(text) >= 2


def test_a_stopped_draft_is_greedy_under_the_protocol_in_evaluate(tmp_path, tiny_lm):
    """A draft-gated adapter trained with the stop that keeps every draft is the Greedy row under
    the protocol (same generations, same tokens); one that re-decodes everything is the sampler
    stopped likewise; a control decodes the same draft; an old adapter (no stop) decodes to the budget."""
    task = AnswersAtTwoTokens()
    keep = adapter_method(draft_adapter(tmp_path / "keep", tiny_lm, True, True), tiny_lm, name="Keep")
    redo = adapter_method(draft_adapter(tmp_path / "redo", tiny_lm, False, True), tiny_lm, name="Redo")
    old = adapter_method(draft_adapter(tmp_path / "old", tiny_lm, True, False), tiny_lm, name="Old keep")
    assert (keep.stop_at_answer, old.stop_at_answer) == (True, False)
    stopped_sampler = static_method(SAMPLER, name="Sampler stopped")
    methods = [greedy_method(), greedy_to_budget_method(), stopped_sampler, keep, redo, old,
               ev.random_gate_method(SAMPLER, 0.0, "Random 0")]
    cfg = EvalConfig(k_values=(1,), seeds=1, token_budget=6, keep_trajectories=3)
    result = evaluate(tiny_lm, task, task.load("test"), methods, cfg, batch_rows=16)
    per, shared = result.details["per_problem"], result.details["methods"]
    assert per["Keep"] == per["Greedy"] == per["Random 0"]
    assert per["Old keep"] == per[GREEDY_TO_BUDGET]
    assert per["Redo"]["pass@1"] == per["Sampler stopped"]["pass@1"]
    assert shared["Keep"]["tokens_per_problem"]["1"] == pytest.approx(shared["Greedy"]["tokens_per_problem"]["1"])
    assert shared["Keep"]["tokens_per_problem"]["1"] < shared[GREEDY_TO_BUDGET]["tokens_per_problem"]["1"]
    assert shared["Random 0"]["family"] == "fixed rule" and shared["Keep"]["family"] == "learned"
    assert result.details["draft"]["Keep"]["tokens_per_problem"]["1"] == pytest.approx(
        shared["Greedy"]["tokens_per_problem"]["1"])
    # the report: its draft-gated section and the accuracy-per-compute points hold the draft rows
    rows = {r["method"]: r for r in report.draft_rows(result.details)}
    assert rows["Keep"]["redecode_share"] == 0 and rows["Keep"]["n_kept"] == 3 and rows["Keep"]["redecoded"] is None
    assert rows["Redo"]["n_redecoded"] == 3 and rows["Redo"]["redecoded"] == pytest.approx(
        sum(r[0] for r in per["Redo"]["pass@1"]) / 3)
    assert "| Keep | 1 | 0% |" in report.draft_section(result.details)
    points = {p["method"] for p in report.compute_points(result.results, result.details)}
    assert {"Keep", "Redo", "Random 0"} <= points


def _record(draft: float, answer: str, conf: float, samples: list[tuple[float, str, float]]) -> dict:
    return {"draft": {"reward": draft, "answer": answer, "length": 4, "confidence": [1.0, 2.0, conf, 0.1, 0.5, 1.0]},
            "samples": {"s": [{"reward": r, "answer": a, "length": 6, "confidence": c} for r, a, c in samples]}}


def test_rows_above_the_stored_samples_score_all_of_them():
    """A budget beyond the table's n samples is clamped to n at the call site: pass@n, via
    ``core.stats.pass_at_k``."""
    records = {"p": _record(0.0, "3", 0.4, [(1.0, "5", 0.9), (0.0, "4", 0.3)])}  # n = 2, one right
    table = DraftTable({"actions": []}, records)
    for budget in (1, 2, 3, 5):
        static = ev.static_rows(table, ["p"], "s", budget)
        assert static.passed == [pytest.approx(pass_at_k(2, 1, min(budget, 2)))]
        gated = ev.gated_rows(table, ["p"], [1], ["s"], budget, "g")
        want = 0.5 if budget == 1 else pass_at_k(2, 1, min(budget - 1, 2))  # the draft is wrong
        assert gated.passed == [pytest.approx(want)]
    assert ev.static_rows(table, ["p"], "s", 5).passed == [1.0]


def test_table_controls():
    records = {
        "sure-right": _record(1.0, "7", 0.9, [(0.0, "8", 0.5), (1.0, "7", 0.6), (0.0, "8", 0.5)]),
        "unsure-wrong": _record(0.0, "3", 0.4, [(1.0, "5", 0.9), (1.0, "5", 0.8), (0.0, "4", 0.3)]),
    }
    table = DraftTable({"actions": []}, records)
    ids = list(records)
    conf = ev.confidence_of(table, ids)
    gate = ev.threshold_choices(conf, ev.threshold_for_rate(conf, 0.5))
    assert gate == [0, 1]  # the least confident half is re-decoded
    rows = ev.gated_rows(table, ids, gate, ["s"], 1, "t")
    assert rows.passed == [1.0, pytest.approx(2 / 3)] and rows.decodes == [1, 2] and rows.tokens == [4, 10]
    tuned = ev.tune_threshold(table, ids, "s", max_decodes=1.5)
    assert tuned["pass"] == pytest.approx((1 + 2 / 3) / 2) and tuned["decodes"] == 1.5
    vote = ev.weighted_vote_rows(table, ids, "s", 3, "v")
    assert vote.majority == [1.0, 1.0] and vote.decodes == [3, 3]  # 0.9 > 0.5 + ...: "7"; two "5"s beat "3"
    agree = ev.agreement_rows(table, ids, "s", 4, "a")
    assert agree.decodes == [3, 3] and agree.majority == [1.0, 1.0]  # "7","8","7" / "3","5","5": two agree
    rand = ev.random_gate_rows(table, ids, 0.5, "s", 1, "r")
    assert rand.passed == [pytest.approx(0.5 + 0.5 / 3), pytest.approx(1 / 3)] and rand.decodes == [1.5, 1.5]
    summary = ev.summarise_rows(rows, {"random": rand})
    assert summary["decodes_per_problem"] == 1.5 and summary["pass_vs_random"][0] == pytest.approx(
        100 * ((1 - 0.5 - 0.5 / 3) + (2 / 3 - 1 / 3)) / 2, abs=0.05)
