"""Sample tables on disk: the committed tables still load, a killed build reads as unfinished and
resumes to its full size, and every kind of damaged chunk is refused in one line naming its file."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np
import pytest

from decoding_adapters.cli import main
from decoding_adapters.cli.rules import _unfinished
from decoding_adapters.decoding.actions import GREEDY, DecodingAction
from decoding_adapters.evaluation.sample_table import (
    SampleTable,
    build_sample_table,
    synthetic_sample_table,
    unfinished,
)
from decoding_adapters.selection.outcomes import OutcomeTable
from decoding_adapters.tasks import get_task

DOCS = Path(__file__).resolve().parents[2] / "docs"
SAMPLER = DecodingAction(temperature=1.0)


def test_committed_tables_still_load():
    table = SampleTable.load(DOCS / "rules" / "tables" / "validation")
    assert table.shape[0] > 0 and table.shape[1] == len(table.header["actions"])
    assert len(set(table.problem_ids)) == table.shape[0]
    outcomes = OutcomeTable.load(DOCS / "headroom" / "pool.jsonl")
    assert outcomes.header["format"] == "decoding-adapters/outcomes" and len(outcomes) > 0
    assert not unfinished(DOCS / "rules" / "tables" / "validation")  # written before plans: taken as it is


class Killed(Exception):
    pass


def test_a_killed_build_is_unfinished_and_resumes_to_its_full_size(tiny_lm, tmp_path):
    task = get_task("arithmetic")
    problems = task.load("validation")[:3]
    path = tmp_path / "val"
    kwargs = dict(samples=1, token_budget=4, split="validation", chunk_problems=1, progress=False)

    def kill(done: int, total: int) -> None:
        if done == 1:
            raise Killed

    with pytest.raises(Killed):
        build_sample_table(tiny_lm, task, problems, [GREEDY, SAMPLER], path=path, on_chunk=kill, **kwargs)
    assert len(SampleTable.load(path).problem_ids) == 1
    assert unfinished(path)
    # the rules command without --max-problems sees it (before: taken as finished)
    assert _unfinished(str(path), argparse.Namespace(max_problems=None))
    table = build_sample_table(tiny_lm, task, problems, [GREEDY, SAMPLER], path=path, **kwargs)
    assert table.problem_ids == [p.id for p in problems] and not unfinished(path)
    assert not _unfinished(str(path), argparse.Namespace(max_problems=None))


# ---- damaged chunks -------------------------------------------------------------------------------------


def _saved(tmp_path: Path) -> Path:
    return synthetic_sample_table(5, samples=3, seed=2).save(tmp_path / "t")


def _rewrite(path: Path, **changes) -> None:
    """Rewrite chunk 0's arrays with some of them changed."""
    file = path / "chunk-00000.npz"
    with np.load(file) as data:
        arrays = {k: data[k] for k in data.files}
    for name, change in changes.items():
        change(arrays[name])
    with file.open("wb") as f:
        np.savez_compressed(f, **arrays)


def _refused(path: Path, file: str, match: str) -> None:
    with pytest.raises(ValueError, match=match) as err:
        SampleTable.load(path)
    message = str(err.value)
    assert "\n" not in message and str(path / file) in message


def test_a_truncated_chunk_is_refused_in_one_line(tmp_path, capsys):
    path = _saved(tmp_path)
    npz = path / "chunk-00000.npz"
    npz.write_bytes(npz.read_bytes()[: npz.stat().st_size // 2])
    _refused(path, "chunk-00000.npz", "damaged")
    synthetic_sample_table(5, samples=3, seed=3).save(tmp_path / "test")
    code = main(["rules", "--table", str(tmp_path / "test"), "--validation-table", str(path),
                 "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code != 0 and len(err.splitlines()) == 1 and "chunk-00000.npz" in err and "Traceback" not in err


def test_an_answer_id_beyond_the_answer_strings_is_refused_before_any_allocation(tmp_path):
    path = _saved(tmp_path)

    def huge(answers):
        answers[0, 1, 0] = 2_000_000_000

    _rewrite(path, answers=huge)
    _refused(path, "chunk-00000.npz", "answer ids out of range")


def test_a_chunk_copied_under_a_new_index_is_refused(tmp_path):
    path = _saved(tmp_path)
    for suffix in (".npz", ".json"):
        shutil.copy(path / f"chunk-00000{suffix}", path / f"chunk-00007{suffix}")
    _refused(path, "chunk-00007.json", "also in chunk-00000")


def test_infinite_confidences_are_refused(tmp_path):
    path = _saved(tmp_path)

    def inf(confidence):
        confidence[2, 1, 1, 0] = np.inf

    _rewrite(path, confidence=inf)
    _refused(path, "chunk-00000.npz", "infinite confidences")


def test_negative_token_counts_are_refused(tmp_path):
    path = _saved(tmp_path)

    def negative(tokens):
        tokens[1, 0, :] = -5

    _rewrite(path, tokens=negative)
    _refused(path, "chunk-00000.npz", "negative token counts")


def test_nan_confidences_still_load(tmp_path):
    """A draft table read as a sample table keeps NaN for the readings it lacks: not damage."""
    path = _saved(tmp_path)

    def nan(confidence):
        confidence[:, :, :, 3] = np.nan

    _rewrite(path, confidence=nan)
    assert np.isnan(SampleTable.load(path).confidence[..., 3]).all()
