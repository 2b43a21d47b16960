"""A sample table whose rows an engine that returns tokens only decodes (vLLM; here the project's own
rollouts without stop checks or hidden states, the same seeds): the rows run to the end and are cut
at their first complete answer afterwards, and a teacher-forced pass gives their hidden states, so
the table equals the loop's: answers, rewards and token counts exactly, confidences and mean hidden
states within ``TEACHER_FORCED_ATOL`` (float32)."""

from __future__ import annotations

import numpy as np
import pytest

from decoding_adapters.decoding.actions import GREEDY, ActionSet, DecodingAction
from decoding_adapters.decoding.rollouts import HFRollouts
from decoding_adapters.decoding.table_engines import LocalChunks
from decoding_adapters.decoding.teacher_forced import TEACHER_FORCED_ATOL
from decoding_adapters.evaluation.sample_table import build_sample_table
from decoding_adapters.tasks import get_task

ARMS = [GREEDY, DecodingAction(temperature=1.0)]


class TokensOnly(HFRollouts):
    """What vLLM gives a table: tokens, no hidden states, no stop on a text condition (refused)."""

    def run(self, request, chooser=None, *, record_features=False, progress=False):
        assert not record_features and request.stop_checks is None
        return super().run(request, chooser, record_features=False, progress=progress)


def test_a_table_from_tokens_only_equals_the_loops(tiny_lm, tmp_path):
    task = get_task("arithmetic")
    problems = task.load("validation")[:3]
    settings = dict(samples=2, token_budget=12, split="validation", chunk_problems=2, hidden=True, progress=False)
    loop = build_sample_table(tiny_lm, task, problems, ARMS, path=tmp_path / "loop", **settings)
    engine = LocalChunks(tiny_lm, task, rollouts=TokensOnly(tiny_lm, ActionSet(ARMS), batch_rows=4))
    other = build_sample_table(tiny_lm, task, problems, ARMS, path=tmp_path / "other", engine=engine, **settings)
    for name in ("answers", "rewards", "tokens"):
        np.testing.assert_array_equal(getattr(other, name), getattr(loop, name))
    assert other.answer_strings == loop.answer_strings
    np.testing.assert_allclose(other.confidence, loop.confidence, atol=TEACHER_FORCED_ATOL, rtol=1e-4, equal_nan=True)
    np.testing.assert_allclose(other.hidden.astype(np.float32), loop.hidden.astype(np.float32),
                               atol=1e-3)  # stored in float16: its rounding, not the pass's


def test_a_table_from_another_engine_is_not_extended_by_the_loop(tiny_lm, tmp_path):
    task = get_task("arithmetic")
    problems = task.load("validation")[:2]
    settings = dict(samples=1, token_budget=4, split="validation", progress=False)
    engine = LocalChunks(tiny_lm, task, rollouts=TokensOnly(tiny_lm, ActionSet(ARMS)))
    build_sample_table(tiny_lm, task, problems[:1], ARMS, path=tmp_path / "t", engine=engine, **settings)
    with pytest.raises(ValueError, match=r"rows_from: the table has TokensOnly, this run None \(set by --backend\)"):
        build_sample_table(tiny_lm, task, problems, ARMS, path=tmp_path / "t", **settings)
    assert build_sample_table(tiny_lm, task, problems, ARMS, path=tmp_path / "t", engine=engine,
                              **settings).shape[0] == 2
