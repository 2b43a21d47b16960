"""Token-level training with data parallelism on Ray Train (``train-token --backend ray --workers N``).

Ray Train ``TorchTrainer`` with N workers and the gloo backend: the policy is a small MLP that
lives on CPU, as in ``TokenTrainer`` (the frozen LM goes wherever the ``ModelSpec`` says; with a
CUDA spec each worker reserves a GPU).
Every worker runs the ordinary ``TokenTrainer`` loop with two substitutions:

- **Rollouts are sharded, then gathered.** Each worker decodes the rows of every
  ``world_size``-th prompt of a request (probe filtering, training steps, validation) and the
  parts are all-gathered, so every worker holds the full step batch. Group baselines, EMA
  baselines, the decision-step count and all logged statistics are therefore computed on the
  whole batch, exactly as in one process.
- **The update is data-parallel.** Worker ``r`` computes the loss of its own share of the rows
  with the *global* normaliser (the number of decision steps of the whole batch), through a
  ``DistributedDataParallel`` policy. DDP averages gradients over workers, so the local loss is
  scaled by ``world_size``: the all-reduced gradient is then the single-process gradient (up
  to float summation order), and clipping, Adam and the LR schedule act identically on every
  worker.

Identical start: ``TokenTrainer`` seeds its policy's initial weights from ``config.seed`` on every
worker, and DDP broadcasts rank 0's weights anyway. Dropout masks differ from a single-process
run (each worker draws masks for its own rows); with ``dropout=0`` one DDP step equals one
single-process step within float tolerance (``tests/decoding/test_distributed.py``).

Rank 0 writes ``train_log.jsonl``, ``checkpoint.pt`` and the adapter into ``out_dir``; the
other ranks only read the checkpoint on ``resume``, so ``out_dir`` must be on a file system all
workers see (always true on a local cluster). Ray Train's own run files go to
``out_dir/ray_train``.

``DDPTokenTrainer`` is ``TokenTrainer`` with three hooks overridden (``own_rows``, ``loss``,
``mean_over_ranks``); ``TokenTrainer.update`` itself serves both. Ray is imported only here, in
functions (it is an optional dependency).
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from ..core.files import JsonlLog
from ..decoding.actions import ActionSet, load_action_set
from ..decoding.ray_rollouts import ShardedRollouts, TaskSpec, cluster_resource, connect, ray_module, wants_gpu
from ..decoding.rollouts import HFRollouts
from ..lm.models import ModelSpec, load_frozen_lm, locate_model
from .common import seed_everything
from .token import TokenBatch, TokenTrainer, token_loss

log = logging.getLogger(__name__)

__all__ = ["DDPTokenTrainer", "train_token_ddp"]


class _DDPForward:
    """What ``token_loss`` needs from a policy, with the forward routed through DDP so that the
    backward pass all-reduces gradients (DDP itself does not forward ``observation``/``temperature``)."""

    def __init__(self, ddp):
        self.ddp, self.module = ddp, ddp.module

    def __call__(self, observation, dropout_key=None):
        return self.ddp(observation, dropout_key=dropout_key)

    def log_probs(self, observation, dropout_key=None):
        return (self.ddp(observation, dropout_key=dropout_key) / self.module.temperature).log_softmax(-1)

    def __getattr__(self, name):
        return getattr(self.module, name)


class _RankZeroLog:
    """A ``JsonlLog`` that only rank 0 writes."""

    def __init__(self, inner, rank: int):
        self.inner, self.rank = inner, rank

    def append(self, record: dict) -> None:
        if self.rank == 0:
            self.inner.append(record)

    def truncate_after(self, step: int) -> None:
        if self.rank == 0:
            self.inner.truncate_after(step)

    def read(self) -> list[dict]:
        return self.inner.read()


class _RankZeroCheckpoint(_RankZeroLog):
    """A ``Checkpoint`` that every rank reads and only rank 0 writes."""

    def exists(self) -> bool:
        return self.inner.exists()

    def load(self) -> dict:
        return self.inner.load()

    def save(self, state: dict) -> None:
        if self.rank == 0:
            self.inner.save(state)


class DDPTokenTrainer(TokenTrainer):
    """``TokenTrainer`` on one DDP rank: the same loop and ``update``, with this rank's share of the
    rows in the loss (through ``DistributedDataParallel``) and rank-0-only writes."""

    def __init__(self, *args, rank: int, world: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.rank, self.world = rank, world
        self.ddp = DistributedDataParallel(self.policy)  # broadcasts rank 0's weights
        self.log = _RankZeroLog(self.log, rank)
        self.checkpoint = _RankZeroCheckpoint(self.checkpoint, rank)

    def own_rows(self, batch: TokenBatch) -> TokenBatch:
        """Every ``world``-th row, from ``rank`` (dropout masks seeded per rank)."""
        seed_everything(self.config.seed, "dropout", self.step, "rank", self.rank)
        return batch.select_rows(batch.row.unique()[self.rank::self.world])

    def loss(self, mine: TokenBatch, normalizer: int):
        if mine.num_decisions == 0:  # still one DDP forward, so this rank joins the all-reduce
            dummy = torch.zeros(1, self.policy.config.input_dim, device=next(self.policy.parameters()).device)
            return self.ddp(dummy).sum() * 0.0, {"entropy": 0.0}
        return token_loss(_DDPForward(self.ddp), mine, normalizer, **self.loss_options())

    def mean_over_ranks(self, local_mean: float, weight: int) -> float:
        t = torch.tensor([local_mean * weight, float(weight)], dtype=torch.float64)
        dist.all_reduce(t)
        return float(t[0] / t[1]) if t[1] > 0 else 0.0

    def save(self) -> Path:
        return super().save() if self.rank == 0 else self.out_dir


def _train_worker(args: dict) -> None:
    """The per-worker loop run by Ray Train (args built by ``train_token_ddp``)."""
    import ray.train

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    torch.set_num_threads(max(1, args["threads"]))
    config, spec = args["config"], args["model_spec"]
    lm = load_frozen_lm(spec)
    task = args["task"] if not isinstance(args["task"], TaskSpec) else args["task"].build()
    action_set = ActionSet(load_action_set(config.actions), device=lm.device)
    rollouts = ShardedRollouts(HFRollouts(lm, action_set, args["batch_rows"]), rank, world)
    trainer = DDPTokenTrainer(config, lm, task, rollouts, args["out_dir"], task_name=args["task_name"],
                                   progress=False, rank=rank, world=world)
    trainer.train(resume=args["resume"])


def _follow_log(path: Path, total: int, stop: threading.Event) -> None:
    """Driver-side progress bar fed by rank 0's ``train_log.jsonl`` (local clusters)."""
    log_file = JsonlLog(path)
    with tqdm(total=total, desc="train-token (ray)", unit="step") as bar:
        while not stop.wait(1.0):
            records = [r for r in log_file.read() if "reward" in r]
            if records:
                bar.n = records[-1]["step"]
                bar.set_postfix(reward=f"{records[-1]['reward']:.2f}")
                bar.refresh()


def _worker_error(err: Exception) -> Exception:
    """The first worker's own exception, when Ray Train reports one (ValueError stays a ValueError
    for the CLI's one-line errors)."""
    failures = getattr(err, "worker_failures", None) or {}
    for _, failure in sorted(failures.items()):
        cause = getattr(failure, "cause", None) or failure
        if isinstance(cause, (ValueError, FileNotFoundError)):
            return cause
    return RuntimeError(f"distributed token training failed: {err}")


def train_token_ddp(config, model_spec: ModelSpec, task_spec: TaskSpec | Any, out_dir: str | Path, workers: int = 2, *,
                    batch_rows: int = 64, address: str | None = None, num_cpus: int | None = None,
                    cpus_per_worker: float | None = None, resume: bool = False, task_name: str | None = None,
                    progress: bool = True) -> Path:
    """Train a token-level adapter with ``workers`` Ray Train workers (see the module docstring).

    Args:
        config: a ``TokenTrainConfig``.
        model_spec: the frozen LM each worker loads.
        task_spec: ``TaskSpec(name, options)`` (workers call ``get_task``), or a picklable ``Task``.
        out_dir: adapter, ``checkpoint.pt`` and ``train_log.jsonl`` (written by rank 0).
        workers: DDP world size.
        batch_rows: rows per decode batch inside a worker.
        address / num_cpus: an existing cluster, or the CPUs of a local one.
        cpus_per_worker: CPUs each worker reserves and uses as torch threads (default: cluster/workers).
        resume: continue from ``out_dir/checkpoint.pt``.
        task_name: recorded in the adapter (default: the TaskSpec name).
        progress: a driver-side progress bar fed by the training log.

    Returns the output directory (holding ``adapter.json`` / ``adapter.safetensors``).
    """
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    if workers < 1:
        raise ValueError("workers must be >= 1")
    out_dir = Path(out_dir).resolve()
    if address is None:
        locate_model(model_spec.name_or_path)  # convert a GGUF once here, not once per worker
    owns = connect(address, num_cpus)
    try:
        cpus = cpus_per_worker if cpus_per_worker is not None else max(cluster_resource("CPU") / workers, 0.01)
        use_gpu = wants_gpu(model_spec)
        args = {
            "config": config, "model_spec": model_spec, "task": task_spec, "out_dir": str(out_dir),
            "task_name": task_name or getattr(task_spec, "name", ""), "batch_rows": batch_rows,
            "threads": int(cpus), "resume": resume,
        }
        trainer = TorchTrainer(
            _train_worker, train_loop_config=args,
            torch_config=TorchConfig(backend="gloo"),  # the policy lives on CPU (as in TokenTrainer)
            scaling_config=ScalingConfig(num_workers=workers, use_gpu=use_gpu, resources_per_worker={"CPU": cpus}),
            run_config=RunConfig(name="train-token", storage_path=str(out_dir / "ray_train")),
        )
        _fit_with_progress(trainer, out_dir, config.steps, progress)
    finally:
        if owns:
            ray_module().shutdown()
    return out_dir


def _fit_with_progress(trainer, out_dir: Path, steps: int, progress: bool) -> None:
    stop = threading.Event()
    follower = None
    if progress:
        follower = threading.Thread(target=_follow_log, args=(out_dir / "train_log.jsonl", steps, stop), daemon=True)
        follower.start()
    started = time.perf_counter()
    try:
        trainer.fit()
    except Exception as err:  # Ray Train wraps worker exceptions
        if getattr(err, "worker_failures", None) is None:
            raise
        raise _worker_error(err) from err
    finally:
        stop.set()
        if follower is not None:
            follower.join(timeout=5)
    log.info("distributed token training finished in %.1f s", time.perf_counter() - started)
