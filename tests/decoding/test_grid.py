"""The decoded grid: rows, seeds, the resume loop and the two storage layouts."""

from __future__ import annotations

import json

import numpy as np
import pytest

from decoding_adapters.decoding.actions import GREEDY, DecodingAction
from decoding_adapters.decoding.grid import (
    SAMPLE_SEED_TAG,
    ChunkDirectory,
    Grid,
    GridRow,
    JsonlTable,
    fill_chunks,
    group_chunks,
    refuse_other_settings,
)
from decoding_adapters.decoding.loop import row_seed

SAMPLER = DecodingAction(temperature=0.7)


def test_rows_are_problem_major_and_a_greedy_action_is_decoded_once():
    grid = Grid((GREEDY, SAMPLER), samples=3, seed=5)
    rows = grid.rows(2)
    assert rows[:4] == [GridRow(0, 0, 0, (0, 1, 2)), GridRow(0, 1, 0, (0,)), GridRow(0, 1, 1, (1,)),
                        GridRow(0, 1, 2, (2,))]
    assert [r.problem for r in rows] == [0] * 4 + [1] * 4
    every = Grid((GREEDY, SAMPLER), samples=3, seed=5, greedy_once=False).rows(1)
    assert [(r.action, r.sample) for r in every] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]


def test_rows_skip_what_is_stored():
    grid = Grid((GREEDY, SAMPLER), samples=3, seed=5)
    stored = {(0, 0, 0), (0, 1, 0), (0, 1, 2)}
    rows = grid.rows(1, lambda p, a, s: (p, a, s) in stored)
    assert rows == [GridRow(0, 0, 1, (1, 2)), GridRow(0, 1, 1, (1,))]
    assert grid.rows(1, lambda p, a, s: True) == []


def test_seeds_are_the_row_seed_of_problem_action_sample_and_tag():
    rows = [GridRow(1, 1, 2, (2,)), GridRow(0, 0, 0, (0, 1))]
    plain = Grid((GREEDY, SAMPLER), samples=3, seed=5)
    tagged = Grid((GREEDY, SAMPLER), samples=3, seed=5, seed_tag=SAMPLE_SEED_TAG)
    assert plain.seeds(["a", "b"], rows) == [row_seed(5, "b", SAMPLER.name, 2), row_seed(5, "a", GREEDY.name, 0)]
    assert tagged.seeds(["a", "b"], rows)[0] == row_seed(5, "b", SAMPLER.name, 2, "draft-table")
    with pytest.raises(ValueError, match="samples >= 1"):
        Grid((GREEDY,), samples=0, seed=0)


def test_fill_chunks_stores_each_chunk_before_the_next_and_counts():
    stored, calls = [], []
    fill_chunks([[1, 2], [3]], lambda chunk: [x * 10 for x in chunk], stored.append,
                lambda done, total: calls.append((done, total)), size=len)
    assert stored == [[10, 20], [30]] and calls == [(2, 3), (3, 3)]


def test_group_chunks_keeps_problems_whole_up_to_the_limit():
    assert group_chunks([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]
    rows = [("a", 3), ("b", 2), ("c", 9), ("d", 1)]
    assert group_chunks(rows, 5, weight=lambda item: item[1]) == [[("a", 3), ("b", 2)], [("c", 9)], [("d", 1)]]


def test_a_jsonl_table_drops_a_torn_line_and_appends_after_it(tmp_path):
    path = tmp_path / "t.jsonl"
    table = JsonlTable(path)
    table.open({"format": "x"})
    table.append([{"a": 1}, {"a": 2}])
    table.close()
    with path.open("ab") as f:
        f.write(b'{"a": 3')  # a kill mid-write
    assert JsonlTable(path).read() == ({"format": "x"}, [{"a": 1}, {"a": 2}])
    table.open({"format": "x"})  # the header is not written twice
    table.append([{"a": 4}])
    table.close()
    assert path.read_text().splitlines() == ['{"header": {"format": "x"}}', '{"a": 1}', '{"a": 2}', '{"a": 4}']


def test_a_chunk_directory_keeps_its_plan_and_refuses_other_settings(tmp_path):
    store = ChunkDirectory(tmp_path / "d")
    store.open({"seed": 1}, ["p0", "p1"])
    assert store.unfinished() and store.stored_ids() == []
    store.write_chunk(0, {"x": np.arange(3)}, {"problems": ["p0", "p1"]})
    assert not store.unfinished() and store.stored_ids() == ["p0", "p1"]
    np.testing.assert_array_equal(store.read_arrays(0)["x"], np.arange(3))
    with pytest.raises(ValueError, match=r"other settings \(seed: stored 1 vs now 2\)"):
        store.open({"seed": 2}, ["p0"])
    (tmp_path / "d" / "chunk-00000.json").write_text("{")
    with pytest.raises(ValueError, match="chunk-00000.json: damaged"):
        store.read_meta(0)
    assert json.loads((tmp_path / "d" / "plan.json").read_text()) == {"problems": ["p0", "p1"]}


def test_refuse_other_settings_compares_as_json():
    refuse_other_settings("t", {"ids": [1, 2]}, {"ids": (1, 2)})  # a tuple stored as a list is the same
    with pytest.raises(ValueError, match="ids: stored"):
        refuse_other_settings("t", {"ids": [1, 2]}, {"ids": (1, 3)})
