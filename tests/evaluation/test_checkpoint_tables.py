"""Sample tables with readings at checkpoints: off by default (the header and chunk files a table
had before), each checkpoint's readings are those of the attempt's first t tokens, they survive a
save, a load and a subset, and a chunk that lacks them is refused."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from decoding_adapters.decoding.actions import GREEDY, ActionSet, DecodingAction
from decoding_adapters.decoding.checkpoints import checkpoint_tokens
from decoding_adapters.decoding.confidence import ConfidenceConfig, trace_readings
from decoding_adapters.decoding.grid import SAMPLE_SEED_TAG
from decoding_adapters.decoding.loop import decode, row_seed
from decoding_adapters.decoding.rollouts import encode_problems
from decoding_adapters.evaluation.sample_table import SampleTable, build_sample_table
from decoding_adapters.tasks import get_task

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

SAMPLER = DecodingAction(temperature=1.0)
BUDGET, EVERY = 9, 4


def _build(lm, path, checkpoints=0, hidden=True, problems=3):
    task = get_task("arithmetic")
    return build_sample_table(lm, task, task.load("validation")[:problems], [GREEDY, SAMPLER], samples=2,
                              token_budget=BUDGET, path=path, split="validation", hidden=hidden, progress=False,
                              stop_at_answer=False, checkpoints=checkpoints)


def test_checkpoints_are_off_by_default_and_leave_the_files_as_they_were(tiny_lm, tmp_path):
    table = _build(tiny_lm, tmp_path / "plain")
    header = json.loads((tmp_path / "plain" / "header.json").read_text())
    assert "checkpoints" not in header
    assert table.prefix_confidence is None and table.checkpoint_tokens == []
    with np.load(tmp_path / "plain" / "chunk-00000.npz") as data:
        assert sorted(data.files) == ["answers", "confidence", "hidden", "rewards", "tokens"]
    with_marks = _build(tiny_lm, tmp_path / "marks", checkpoints=EVERY)
    for name in ("answers", "rewards", "tokens", "confidence", "hidden"):  # the same samples either way
        np.testing.assert_array_equal(getattr(table, name), getattr(with_marks, name))


def test_a_checkpoint_reads_the_attempt_s_first_tokens(tiny_lm, tmp_path):
    table = _build(tiny_lm, tmp_path / "t", checkpoints=EVERY)
    marks = checkpoint_tokens(EVERY, BUDGET)
    assert table.checkpoint_tokens == marks == [4, 8]
    p, a, n = table.shape
    assert table.prefix_confidence.shape == (p, a, n, len(marks), len(table.confidence_names))
    assert table.prefix_hidden.shape[:4] == (p, a, n, len(marks))
    reached = np.isfinite(table.prefix_confidence[..., 0])
    assert (reached == (table.tokens[..., None] > np.array(marks))).all()
    assert reached.any()
    # the sample decoded again with a budget of t tokens: its readings are the checkpoint's
    task = get_task("arithmetic")
    problems = task.load("validation")[:p]
    prompts, _ = encode_problems(tiny_lm, task, problems, seed=0)
    i, arm, j, c = [int(x) for x in np.argwhere(reached[:, 1:])[0]]
    arm += 1
    t = marks[c]
    seed = row_seed(0, problems[i].id, table.arm_names[arm], j, *SAMPLE_SEED_TAG)
    result = decode(tiny_lm, [prompts[i]], ActionSet(table.actions), row_actions=[arm], token_budget=t,
                    record_features=True, row_seeds=[seed])
    assert int(result.lengths[0]) == t
    summary, hidden = trace_readings(tiny_lm, result, [""], ConfidenceConfig(), True)
    np.testing.assert_allclose(table.prefix_confidence[i, arm, j, c], summary[0].numpy(), rtol=1e-4, atol=1e-5,
                               equal_nan=True)
    np.testing.assert_allclose(table.prefix_hidden[i, arm, j, c].astype(np.float32), hidden[0].numpy(), rtol=1e-2,
                               atol=1e-2)
    assert np.isnan(table.prefix_confidence[i, arm, j, c, table.confidence_names.index("answer_logprob")])


def test_checkpoints_survive_save_load_and_subset(tiny_lm, tmp_path):
    table = _build(tiny_lm, tmp_path / "t", checkpoints=EVERY)
    again = SampleTable.load(tmp_path / "t")
    np.testing.assert_array_equal(again.prefix_confidence, table.prefix_confidence)
    part = again.subset([2, 0])
    np.testing.assert_array_equal(part.prefix_hidden, again.prefix_hidden[[2, 0]])
    saved = SampleTable.load(part.save(tmp_path / "copy"))
    np.testing.assert_array_equal(saved.prefix_confidence, part.prefix_confidence)
    assert saved.checkpoint_every == EVERY


def test_a_chunk_without_its_checkpoints_is_refused(tiny_lm, tmp_path):
    table = _build(tiny_lm, tmp_path / "t", checkpoints=EVERY)
    arrays = dict(np.load(tmp_path / "t" / "chunk-00000.npz"))
    del arrays["prefix_confidence"], arrays["prefix_hidden"]
    np.savez_compressed(tmp_path / "t" / "chunk-00000.npz", **arrays)
    with pytest.raises(ValueError, match=r"chunk-00000.npz: .*checkpoints"):
        SampleTable.load(tmp_path / "t")
    assert table.shape[0] == 3


def test_a_table_without_checkpoints_is_not_extended_with_them(tiny_lm, tmp_path):
    _build(tiny_lm, tmp_path / "t", problems=2)
    with pytest.raises(ValueError, match="checkpoints"):
        _build(tiny_lm, tmp_path / "t", checkpoints=EVERY, problems=3)


def test_no_checkpoint_below_one_token():
    with pytest.raises(ValueError, match="every >= 1"):
        checkpoint_tokens(0, 10)
    assert torch.tensor(checkpoint_tokens(5, 10)).tolist() == [5]
