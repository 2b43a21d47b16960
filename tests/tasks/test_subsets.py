"""``--max-problems`` / ``--train-problems``: a subset of a file's split is drawn at random with the
run's seed (said in the output); a generated split keeps its first problems (their order keeps the mix)."""

from __future__ import annotations

import json
import logging
import random

import pytest

from decoding_adapters.cli.common import load_problems
from decoding_adapters.tasks import content_hash, get_task


def _sorted_file(path, n=60):
    """A word-problem file sorted by type: the first half all one type."""
    kinds = ["AB"[i >= n // 2] for i in range(n)]
    rows = [{"question": f"Problem {i} of type {kinds[i]}?", "answer": str(i), "type": kinds[i]} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def test_a_file_s_subset_is_drawn_at_random_with_the_seed(tmp_path):
    rows = _sorted_file(tmp_path / "sorted.jsonl")
    task = get_task("jsonl", data=f"test={tmp_path / 'sorted.jsonl'}")
    every = task.load("test")
    first = task.subset(every, 20, seed=0)
    assert len(first) == 20 and first != every[:20]
    assert 5 <= sum(p.meta["type"] == "A" for p in first) <= 15  # not the file's head, which is all A
    assert task.subset(every, 20, seed=0) == first  # the seed fixes it
    assert task.subset(every, 20, seed=1) != first
    assert task.subset(every, 30, seed=0)[:20] == first  # a larger subset holds the smaller one
    assert task.subset(every, None, seed=0) == every
    # the draw follows each problem's content, not its place in the file
    shuffled = tmp_path / "shuffled.jsonl"
    random.Random(3).shuffle(rows)
    shuffled.write_text("".join(json.dumps(r) + "\n" for r in rows))
    other = get_task("jsonl", data=f"test={shuffled}")
    assert [content_hash(p) for p in other.subset(other.load("test"), 20, seed=0)] == [content_hash(p) for p in first]
    task.close()
    other.close()


@pytest.mark.parametrize("name", ["arithmetic", "arithmetic+pyfunc"])
def test_a_generated_split_keeps_its_first_problems(name):
    task = get_task(name)
    every = task.load("test")
    assert task.subset(every, 10, seed=5) == every[:10]


def test_load_problems_says_how_the_subset_was_drawn(tmp_path, caplog):
    _sorted_file(tmp_path / "sorted.jsonl")
    task = get_task("jsonl", data=f"test={tmp_path / 'sorted.jsonl'}")
    with caplog.at_level(logging.INFO, logger="decoding_adapters.cli.common"):
        problems = load_problems(task, "test", 12, seed=7)
    assert problems == task.subset(task.load("test"), 12, seed=7)
    assert any("12 of 60 problem(s), drawn at random with seed 7" in r.getMessage() for r in caplog.records)
    task.close()
