"""Sample tables on Ray: a table built on 2 local Ray workers is file for file, byte for byte the
table built in this process (same chunks, same per-row seeds), a build killed part-way on Ray
resumes to the same table, and ``rules --backend ray --workers 2`` writes the tables ``--backend hf``
writes. One local Ray cluster (2 CPUs, no dashboard) serves the module."""

from __future__ import annotations

import os

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="the ray backend needs the [ray] extra")

from decoding_adapters.cli import main  # noqa: E402
from decoding_adapters.decoding.actions import GREEDY, DecodingAction  # noqa: E402
from decoding_adapters.decoding.ray_rollouts import TaskSpec  # noqa: E402
from decoding_adapters.decoding.table_engines import LocalChunks, RayChunks  # noqa: E402
from decoding_adapters.evaluation.sample_table import SampleTable, build_sample_table  # noqa: E402
from decoding_adapters.lm.models import ModelSpec, load_frozen_lm  # noqa: E402
from decoding_adapters.tasks import get_task  # noqa: E402

ARMS = [GREEDY, DecodingAction(temperature=1.0)]
SETTINGS = dict(samples=2, token_budget=5, split="validation", chunk_problems=1, hidden=True, progress=False)


@pytest.fixture(scope="module")
def ray_cluster():
    os.environ.setdefault("RAY_worker_niceness", "0")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def spec(tiny_model_dir):
    return ModelSpec(name_or_path=str(tiny_model_dir), dtype="float32")


@pytest.fixture
def engine(ray_cluster, spec):
    """2 actors on the module's 2 CPUs (released at the end of each test, for the CLI's own)."""
    with RayChunks(spec, TaskSpec("arithmetic"), workers=2) as chunks:
        yield chunks


def _files(path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted(path.iterdir())}


def test_two_workers_build_the_table_one_process_builds(engine, spec, tmp_path):
    assert engine.workers == 2 and all(w["threads"] == 1 for w in engine.worker_info)
    lm, task = load_frozen_lm(spec), get_task("arithmetic")
    problems = task.load("validation")[:4]
    here = build_sample_table(lm, task, problems, ARMS, path=tmp_path / "here", **SETTINGS)
    there = build_sample_table(lm, task, problems, ARMS, path=tmp_path / "ray", engine=engine, **SETTINGS)
    assert _files(tmp_path / "here") == _files(tmp_path / "ray")  # header, plan, every chunk's npz and json
    assert len(list((tmp_path / "ray").glob("chunk-*.npz"))) == 4
    assert there.problem_ids == here.problem_ids and there.hidden is not None
    np.testing.assert_array_equal(there.confidence, here.confidence)


class Killed(Exception):
    pass


def test_a_build_killed_on_ray_resumes_to_the_same_table(engine, spec, tmp_path):
    lm, task = load_frozen_lm(spec), get_task("arithmetic")
    problems = task.load("validation")[:4]
    whole = build_sample_table(lm, task, problems, ARMS, path=tmp_path / "whole", engine=LocalChunks(lm, task),
                               **SETTINGS)

    def kill(done: int, total: int) -> None:
        if done == 2:
            raise Killed

    with pytest.raises(Killed):
        build_sample_table(lm, task, problems, ARMS, path=tmp_path / "killed", engine=engine, on_chunk=kill,
                           **SETTINGS)
    assert len(SampleTable.load(tmp_path / "killed").problem_ids) == 2
    resumed = build_sample_table(lm, task, problems, ARMS, path=tmp_path / "killed", engine=engine, **SETTINGS)
    assert resumed.problem_ids == whole.problem_ids
    for name in ("answers", "rewards", "tokens", "confidence", "hidden"):
        np.testing.assert_array_equal(getattr(resumed, name), getattr(whole, name))


def test_rules_on_two_ray_workers_writes_the_tables_of_one_process(ray_cluster, tiny_model_dir, tmp_path):
    def rules(backend: list[str], name: str) -> None:
        argv = ["rules", "--model", str(tiny_model_dir), "--token-budget", "4", "--samples", "2", "--max-problems", "3",
                "--batch-rows", "3", "--table", str(tmp_path / name / "test"), "--validation-table",
                str(tmp_path / name / "val"), "--rules", "self_consistency", "--out", str(tmp_path / name / "out")]
        assert main(argv + backend) == 0

    rules([], "hf")
    rules(["--backend", "ray", "--workers", "2"], "ray")
    for table in ("val", "test"):
        assert len(list((tmp_path / "ray" / table).glob("chunk-*.npz"))) == 3  # one problem per chunk
        assert _files(tmp_path / "hf" / table) == _files(tmp_path / "ray" / table)
    assert ray.is_initialized()  # the cluster the command joined is left running


@pytest.mark.parametrize("command", ["rules", "train-attempt"])
def test_table_commands_without_vllm_refuse_its_backend_before_loading(command, tmp_path, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    tables = (["--table", str(tmp_path / "t"), "--validation-table", str(tmp_path / "v")] if command == "rules" else [])
    argv = [command, "--model", str(tmp_path / "no-such-model"), "--backend", "vllm", *tables, "--out",
            str(tmp_path / "out")]
    assert main(argv) == 2
    assert "--backend vllm needs vLLM" in capsys.readouterr().err
