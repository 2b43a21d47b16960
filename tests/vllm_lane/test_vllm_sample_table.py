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
