"""A sample table built through a real vLLM engine (``rules --backend vllm``'s tables): the rows
from vLLM, cut at their first complete answer afterwards, the hidden states and confidences from a
teacher-forced pass of the project's LM. Its greedy arm equals the loop's table: answers, rewards
and token counts exactly, confidences and mean hidden states within a stated tolerance."""

from __future__ import annotations

import numpy as np
import pytest

from decoding_adapters.decoding.actions import GREEDY, ActionSet, DecodingAction
from decoding_adapters.decoding.table_engines import LocalChunks
from decoding_adapters.decoding.vllm_rollouts import VLLMRollouts
from decoding_adapters.evaluation.sample_table import build_sample_table
from vllm_lane.lane_helpers import report

pytestmark = pytest.mark.vllm

ARMS = [GREEDY, DecodingAction(temperature=0.5)]
PROBLEMS, BUDGET = 8, 24
# The teacher-forced pass against the loop's step-by-step states in float32 (TEACHER_FORCED_ATOL in
# the CPU suite) plus vLLM's own kernels deciding the same greedy tokens; readings are compared
# where the tokens are the same, so only the pass's rounding remains.
CONFIDENCE_ATOL, HIDDEN_ATOL = 1e-3, 1e-2


def test_a_vllm_table_equals_the_loops_on_the_greedy_arm(engine, frozen_lm, arithmetic, vllm_spec, vllm_config,
                                                          tmp_path, capsys):
    problems = arithmetic.load("validation")[:PROBLEMS]
    settings = dict(samples=2, token_budget=BUDGET, split="validation", chunk_problems=4, hidden=True, progress=False)
    loop = build_sample_table(frozen_lm, arithmetic, problems, ARMS, path=tmp_path / "loop", **settings)
    rollouts = VLLMRollouts(vllm_spec, ActionSet(ARMS), frozen_lm.tokenizer, config=vllm_config)
    table = build_sample_table(frozen_lm, arithmetic, problems, ARMS, path=tmp_path / "vllm",
                               engine=LocalChunks(frozen_lm, arithmetic, rollouts=rollouts), **settings)
    greedy = 0
    same = (table.tokens[:, greedy] == loop.tokens[:, greedy]).all(axis=1)
    report(capsys, f"vllm table: greedy token counts equal on {int(same.sum())}/{PROBLEMS} problems, "
                   f"greedy correct {loop.correct[:, greedy, 0].mean():.2f} (loop) "
                   f"{table.correct[:, greedy, 0].mean():.2f} (vllm)")
    np.testing.assert_array_equal(table.rewards[:, greedy], loop.rewards[:, greedy])
    answers = [[s[i] if i >= 0 else "" for i in row] for s, row in zip(table.answer_strings, table.answers[:, greedy])]
    wanted = [[s[i] if i >= 0 else "" for i in row] for s, row in zip(loop.answer_strings, loop.answers[:, greedy])]
    assert answers == wanted
    assert same.all()
    np.testing.assert_allclose(table.confidence[:, greedy], loop.confidence[:, greedy], atol=CONFIDENCE_ATOL,
                               rtol=1e-3, equal_nan=True)
    np.testing.assert_allclose(table.hidden[:, greedy].astype(np.float32), loop.hidden[:, greedy].astype(np.float32),
                               atol=HIDDEN_ATOL)
    assert (table.tokens[:, 1] >= 1).all() and np.isfinite(table.confidence[:, 1, :, :8]).all()  # sampled arm read


TRAINED_PROBLEMS = {"train": 96, "validation": 48, "test": 96}
TRAINED_SAMPLES = 4


def test_a_policy_trained_on_a_vllm_table_scores_as_one_trained_on_the_loops(engine, frozen_lm, arithmetic, vllm_spec,
                                                                             vllm_config, tmp_path, capsys):
    """The tables' purpose: an attempt policy and a verifier trained on tables built through vLLM
    score, on either source's test table, within the paired 95% interval of the ones trained on the
    loop's tables (the sampled rows differ: vLLM draws from its own random streams)."""
    from decoding_adapters.core.stats import paired_ci
    from decoding_adapters.evaluation.abandon import replay
    from decoding_adapters.evaluation.attempt import rule_baselines, train_and_score
    from decoding_adapters.evaluation.verifier import fit_on_table, ranking_quality, table_scores
    from decoding_adapters.policies.attempt import load_attempt_adapter
    from decoding_adapters.training.attempt import AttemptTrainConfig
    from decoding_adapters.training.verifier import VerifierTrainConfig

    settings = dict(samples=TRAINED_SAMPLES, token_budget=BUDGET, chunk_problems=16, hidden=True, progress=False)
    engines = {"loop": None, "vllm": LocalChunks(frozen_lm, arithmetic, rollouts=VLLMRollouts(
        vllm_spec, ActionSet(ARMS), frozen_lm.tokenizer, config=vllm_config))}
    tables = {(source, split): build_sample_table(frozen_lm, arithmetic, arithmetic.load(split)[:count], ARMS,
                                                  split=split, path=tmp_path / source / split, engine=engine,
                                                  **settings)
              for source, engine in engines.items() for split, count in TRAINED_PROBLEMS.items()}
    correct, auc = {}, {}
    for trained in engines:
        train, validation, test = (tables[trained, split] for split in TRAINED_PROBLEMS)
        train_and_score(train, validation, test, AttemptTrainConfig(steps=150), rule_baselines(validation, test),
                        out_dir=tmp_path / "policy" / trained)
        policy, _ = load_attempt_adapter(tmp_path / "policy" / trained)
        verifier = fit_on_table(train, VerifierTrainConfig())
        for scored_on in engines:
            outcome, _ = replay(policy, tables[scored_on, "test"])
            correct[trained, scored_on] = outcome.correct.astype(float).tolist()
            scores = table_scores(verifier, tables[scored_on, "test"])
            auc[trained, scored_on] = ranking_quality(scores, tables[scored_on, "test"])["all"]["auc"]
    for scored_on in engines:
        mean, low, high = paired_ci(correct["vllm", scored_on], correct["loop", scored_on])
        report(capsys, f"attempt policy on the {scored_on} test table ({TRAINED_PROBLEMS['test']} problems): trained "
                       f"on vllm {np.mean(correct['vllm', scored_on]):.3f}, on the loop "
                       f"{np.mean(correct['loop', scored_on]):.3f}, difference {100 * mean:+.1f} "
                       f"[{100 * low:+.1f}, {100 * high:+.1f}] points; verifier AUC {auc['vllm', scored_on]:.3f} "
                       f"(vllm-trained) {auc['loop', scored_on]:.3f} (loop-trained)")
        assert low - 1e-12 <= 0.0 <= high + 1e-12
        assert abs(auc["vllm", scored_on] - auc["loop", scored_on]) < 0.05
