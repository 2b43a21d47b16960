"""The study's sample tables on Ray: ``demo`` and ``reproduce`` take ``--table-backend`` and
``--table-workers`` and hand them to every stage that decodes a sample table (the fixed rules', the
verifier's and the attempt policy's); on 2 Ray workers those tables are file for file, byte for byte
the tables built in this process, and a rerun over whole tables starts no worker."""

from __future__ import annotations

import importlib.util
import os

import pytest

ray = pytest.importorskip("ray", reason="the ray backend needs the [ray] extra")

from decoding_adapters.cli import demo as demo_cli  # noqa: E402
from decoding_adapters.cli import main  # noqa: E402
from decoding_adapters.cli import reproduce as reproduce_cli  # noqa: E402
from decoding_adapters.decoding import table_engines  # noqa: E402
from decoding_adapters.decoding.ray_rollouts import TaskSpec  # noqa: E402
from decoding_adapters.decoding.table_engines import TableBackend  # noqa: E402
from decoding_adapters.evaluation import EvalConfig, greedy_method  # noqa: E402
from decoding_adapters.experiments import demo, pipeline  # noqa: E402
from decoding_adapters.experiments.study_config import (  # noqa: E402
    AttemptStageConfig,
    RulesConfig,
    StudyConfig,
    VerifierStageConfig,
)
from decoding_adapters.lm.models import ModelSpec, load_frozen_lm  # noqa: E402

# 3 rows per problem and 6 per batch: chunks of 2 problems, so each table has several for the workers to share
CFG = StudyConfig(token_budget=4, seeds=1, batch_rows=6, eval=EvalConfig(k_values=(1,)), eval_problems=3,
                  rules=RulesConfig(enabled=True, samples=2, problems=4, rules=("self_consistency", "esc")),
                  verifier=VerifierStageConfig(enabled=True, train_problems=5),
                  attempt=AttemptStageConfig(enabled=True, train_problems=5, steps=2, prices=(0.1,)))
TABLES = ("rules/validation", "rules/test", "attempt/train")


@pytest.fixture(scope="module")
def ray_cluster():
    os.environ.setdefault("RAY_worker_niceness", "0")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


class CountedRayChunks(table_engines.RayChunks):
    started = 0

    def __init__(self, *args, **kwargs):
        type(self).started += 1
        super().__init__(*args, **kwargs)


def _table_stages(out, model_dir, tables: TableBackend):
    """The study's rules, verifier and attempt stages into ``out``, their tables decoded by ``tables``."""
    lm = load_frozen_lm(ModelSpec(name_or_path=str(model_dir), dtype="float32"))
    spec = TaskSpec("arithmetic")
    out.mkdir(parents=True, exist_ok=True)
    run = demo._Run(out=out, lm=lm, task=spec.build(), task_spec=spec, tables=tables,
                    clock=pipeline.StageClock("test", out / "stage_minutes.json"), model="tiny", command="",
                    progress=False, minutes=None, speed=1.0)
    problems = run.task.load("test")[: CFG.eval_problems]
    evaluation = pipeline.evaluate_methods(lm, run.task, problems, [greedy_method()], CFG, out / "eval", meta={},
                                           progress=False)
    return demo._rules_and_attempt(run, CFG, evaluation, problems)


def _files(path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted(path.iterdir())}


def test_the_studys_tables_on_two_ray_workers_are_the_local_ones(ray_cluster, tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(table_engines, "RayChunks", CountedRayChunks)
    here = _table_stages(tmp_path / "hf", tiny_model_dir, TableBackend())
    there = _table_stages(tmp_path / "ray", tiny_model_dir, TableBackend("ray", workers=2))
    assert CountedRayChunks.started == 1  # one set of workers for every stage
    for table in TABLES:
        assert len(list((tmp_path / "ray" / table).glob("chunk-*.npz"))) >= 2
        assert _files(tmp_path / "hf" / table) == _files(tmp_path / "ray" / table)
    for curve in ("rules/curves.json", "verifier/verifier_rules.json"):
        assert (tmp_path / "hf" / curve).read_text() == (tmp_path / "ray" / curve).read_text().replace("/ray/", "/hf/")
    assert there.details["per_problem"] == here.details["per_problem"]
    _table_stages(tmp_path / "ray", tiny_model_dir, TableBackend("ray", workers=2))  # resumed: the tables are whole
    assert CountedRayChunks.started == 1  # so no worker was started


@pytest.mark.parametrize("command", [demo_cli, reproduce_cli])
def test_the_study_commands_hand_their_table_backend_to_the_run(command, tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(command, "run_demo", lambda *args, **kwargs: seen.append(kwargs["tables"]))
    name = command.__name__.rsplit(".", 1)[-1]
    argv = [name, "--out", str(tmp_path / "run"), "--size", "tiny" if name == "demo" else "smoke"]
    assert main(argv) == 0
    assert main(argv + ["--table-backend", "ray", "--table-workers", "2"]) == 0
    assert seen == [TableBackend(), TableBackend("ray", workers=2)]


def test_bad_table_options_fail_in_one_line_before_anything_loads(tmp_path, capsys, monkeypatch):
    argv = ["reproduce", "--size", "smoke", "--out", str(tmp_path / "run"), "--model", str(tmp_path / "none")]
    assert main(argv + ["--table-workers", "0"]) == 2
    assert "table workers must be >= 1" in capsys.readouterr().err
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    assert main(argv + ["--table-backend", "ray"]) == 2
    assert "--table-backend ray needs Ray" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
