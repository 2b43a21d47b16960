"""Scale-out with Ray: rollouts on several actors, and token-level training on Ray Train (DDP).

``RayRollouts`` (``--backend ray --workers N``)
    N Ray actors (``RolloutWorker``), each with its own copy of the frozen LM loaded from the
    ``ModelSpec``. ``run`` cuts the request into chunks (``RolloutRequest.chunks``; at most
    ``batch_rows`` rows and at most ``ceil(rows / N)``, so every worker gets work) and hands them
    out dynamically (a free actor takes the next chunk), then merges the chunks with
    ``concat_results``. A chooser (e.g. a ``TokenPolicyChooser``) is put in the object store once
    per call and shipped to every actor. Since every row draws its randomness from its own seed,
    the result is token for token the one ``HFRollouts`` gives for the same request.

``train_token_ddp`` (``train-token --backend ray --workers N``)
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
    single-process step within float tolerance (``tests/test_distributed.py``).

    Rank 0 writes ``train_log.jsonl``, ``checkpoint.pt`` and the adapter into ``out_dir``; the
    other ranks only read the checkpoint on ``resume``, so ``out_dir`` must be on a file system all
    workers see (always true on a local cluster). Ray Train's own run files go to
    ``out_dir/ray_train``.

Ray is started locally (``ray.init(num_cpus=..., include_dashboard=False)``) unless Ray is already
initialised in this process or an ``address`` of an existing cluster is given.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch

from .actions import ActionSet, DecodingAction
from .decoding import Chooser, DecodeResult
from .models import ModelSpec
from .rollouts import HFRollouts, RolloutRequest, Rollouts, concat_results, decode_request

log = logging.getLogger(__name__)

__all__ = ["RayRollouts", "RolloutWorker", "TaskSpec", "train_token_ddp", "connect", "select_rows"]


def _ray():
    try:
        import ray
    except ImportError as err:  # pragma: no cover - ray is in the [ray] extra
        raise ImportError("the ray backend needs Ray: pip install -e '.[ray]'") from err
    return ray


def connect(address: str | None = None, num_cpus: int | None = None) -> bool:
    """Join the cluster at ``address``, or start a local one with ``num_cpus`` CPUs (default: all).
    Returns True when this call started Ray (so the caller may shut it down)."""
    ray = _ray()
    if ray.is_initialized():
        return False
    if address is not None:
        ray.init(address=address, log_to_driver=False)
    else:
        # Ray nices its workers to 15 by default; here the workers *are* the job (the driver only
        # waits), and at nice 15 they would starve behind any other process on a shared machine.
        os.environ.setdefault("RAY_worker_niceness", "0")
        ray.init(num_cpus=num_cpus, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    return True


def _cluster(resource: str) -> float:
    return float(_ray().cluster_resources().get(resource, 0.0))


def _wants_gpu(spec: ModelSpec) -> bool:
    return spec.device.startswith("cuda") or (spec.device == "auto" and _cluster("GPU") > 0)


def _move_chooser(chooser: Chooser | None, device: torch.device) -> Chooser | None:
    """Put a policy-backed chooser (``.policy`` is a module) on the worker's device."""
    policy = getattr(chooser, "policy", None)
    if isinstance(policy, torch.nn.Module):
        policy.to(device)
    return chooser


class RolloutWorker:
    """One rollout actor: a frozen LM copy and the action set on its device. Wrapped with
    ``ray.remote`` by ``RayRollouts`` (the plain class stays importable and testable)."""

    def __init__(self, model_spec: ModelSpec, actions: Sequence[DecodingAction], threads: int):
        from .models import load_frozen_lm

        torch.set_num_threads(max(1, threads))
        self.lm = load_frozen_lm(model_spec)
        self.action_set = ActionSet(actions, device=self.lm.device)

    def ready(self) -> dict:
        return {"threads": torch.get_num_threads(), "device": str(self.lm.device)}

    def run(self, request: RolloutRequest, chooser: Chooser | None, record_features: bool) -> DecodeResult:
        return decode_request(self.lm, self.action_set, request, _move_chooser(chooser, self.lm.device), record_features)


class RayRollouts(Rollouts):
    """Rollouts spread over ``workers`` Ray actors; same rows, same tokens as ``HFRollouts``.

    Args:
        model_spec: the frozen LM every actor loads (a path must exist on every node).
        action_set: the actions (each actor rebuilds the set on its own device).
        workers: number of actors.
        batch_rows: the most rows one actor decodes in one batch.
        address: an existing cluster (``ray://...`` or ``host:port``); None starts a local one.
        num_cpus: CPUs of a local cluster (default: all of this machine's).
        cpus_per_worker: CPUs each actor reserves and uses as torch threads
            (default: the cluster's CPUs / workers; fractions allowed, threads = max(1, floor)).
        gpus_per_worker: GPUs each actor reserves (default: the cluster's GPUs / workers when the
            spec asks for CUDA, else 0).
    """

    def __init__(self, model_spec: ModelSpec, action_set: ActionSet, *, workers: int = 2, batch_rows: int = 64,
                 address: str | None = None, num_cpus: int | None = None, cpus_per_worker: float | None = None,
                 gpus_per_worker: float | None = None):
        if workers < 1 or batch_rows < 1:
            raise ValueError("workers and batch_rows must be >= 1")
        if address is None:
            from .models import _locate

            _locate(model_spec.name_or_path)  # fail fast on a bad path; convert a GGUF once, not once per actor
        self.action_set, self.batch_rows, self.model_spec = action_set, batch_rows, model_spec
        self._owns_ray = connect(address, num_cpus)
        cpus = cpus_per_worker if cpus_per_worker is not None else max(_cluster("CPU") / workers, 0.01)
        gpus = gpus_per_worker if gpus_per_worker is not None else (_cluster("GPU") / workers if _wants_gpu(model_spec) else 0)
        remote = _ray().remote(num_cpus=cpus, num_gpus=gpus)(RolloutWorker)
        self.actors = [remote.remote(model_spec, list(action_set.actions), int(cpus)) for _ in range(workers)]
        self.worker_info = self._wait_ready()

    def _wait_ready(self) -> list[dict]:
        ray = _ray()
        try:
            return ray.get([a.ready.remote() for a in self.actors])
        except ray.exceptions.RayActorError as err:
            self.close()
            raise RuntimeError(f"a Ray rollout worker failed to start (model {self.model_spec.name_or_path!r}): {err}") from err

    @property
    def workers(self) -> int:
        return len(self.actors)

    def rows_per_chunk(self, num_rows: int) -> int:
        """Chunk size for a request: at most ``batch_rows``, small enough to keep every actor busy."""
        return max(1, min(self.batch_rows, math.ceil(num_rows / len(self.actors))))

    def run(self, request, chooser=None, *, record_features=False, progress=False):
        from tqdm.auto import tqdm

        if not self.actors:
            raise RuntimeError("RayRollouts.run after close()")
        ray = _ray()
        queue = list(request.chunks(self.rows_per_chunk(request.num_rows)))
        chooser_ref = ray.put(chooser) if chooser is not None else None
        idle, pending, parts = list(self.actors), {}, []
        label = progress if isinstance(progress, str) else "rollouts (ray)"
        with tqdm(total=request.num_rows, desc=label, unit="row", disable=not progress, leave=False) as bar:
            while queue or pending:
                while queue and idle:  # a free actor takes the next chunk
                    actor, (rows, sub) = idle.pop(), queue.pop(0)
                    pending[actor.run.remote(sub, chooser_ref, record_features)] = (rows, actor)
                [done], _ = ray.wait(list(pending), num_returns=1)
                rows, actor = pending.pop(done)
                parts.append((rows, ray.get(done)))
                idle.append(actor)
                bar.update(len(rows))
        return concat_results(parts, request.num_rows, request.prompts, request.prompt_of_row)

    def close(self) -> None:
        """Kill the actors (and shut Ray down if this object started it)."""
        ray = _ray()
        for actor in getattr(self, "actors", []):
            ray.kill(actor)
        self.actors = []
        if getattr(self, "_owns_ray", False) and ray.is_initialized():
            ray.shutdown()
            self._owns_ray = False


# ==== token-level training on Ray Train ==========================================================


@dataclass(frozen=True)
class TaskSpec:
    """How a worker rebuilds the task: ``get_task(name, **options)``."""

    name: str
    options: dict = field(default_factory=dict)

    def build(self):
        from .tasks import get_task

        return get_task(self.name, **self.options)


def select_rows(request: RolloutRequest, rows: Sequence[int]) -> RolloutRequest:
    """The sub-request of ``rows`` (global indices, kept in this order), prompts re-indexed."""
    used = sorted({request.prompt_of_row[r] for r in rows})
    local = {p: i for i, p in enumerate(used)}
    return RolloutRequest(
        prompts=[request.prompts[p] for p in used],
        prompt_of_row=[local[request.prompt_of_row[r]] for r in rows],
        row_seeds=[request.row_seeds[r] for r in rows],
        token_budget=request.budget_of(rows),
        row_actions=None if request.row_actions is None else [request.row_actions[r] for r in rows],
    )


class ShardedRollouts(Rollouts):
    """Inside a DDP worker: decode the rows of every ``world``-th prompt with ``inner`` and
    all-gather the parts, so that every rank returns the full result (a collective call: every
    rank must call ``run`` with the same request)."""

    def __init__(self, inner: Rollouts, rank: int, world: int):
        self.inner, self.rank, self.world = inner, rank, world
        self.action_set = inner.action_set

    def run(self, request, chooser=None, *, record_features=False, progress=False):
        import torch.distributed as dist

        rows = [r for r in range(request.num_rows) if request.prompt_of_row[r] % self.world == self.rank]
        part = [(rows, self.inner.run(select_rows(request, rows), chooser, record_features=record_features))] if rows else []
        gathered: list[Any] = [None] * self.world
        dist.all_gather_object(gathered, part)
        parts = [p for g in gathered for p in g]
        return concat_results(parts, request.num_rows, request.prompts, request.prompt_of_row)


class _DDPForward:
    """What ``token_loss`` needs from a policy, with the forward routed through DDP so that the
    backward pass all-reduces gradients (DDP itself does not forward ``observation``/``temperature``)."""

    def __init__(self, ddp):
        self.ddp, self.module = ddp, ddp.module

    def __call__(self, observation):
        return self.ddp(observation)

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


def _ddp_trainer_class():
    """``TokenTrainer`` with a DDP update and rank-0-only writes (built lazily: the import of the
    training module stays out of ``import decoding_adapters.distributed``)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from .training.common import seed_everything
    from .training.token import TokenTrainer, token_loss

    class DDPTokenTrainer(TokenTrainer):
        def __init__(self, *args, rank: int, world: int, **kwargs):
            super().__init__(*args, **kwargs)
            self.rank, self.world = rank, world
            self.ddp = DistributedDataParallel(self.policy)  # broadcasts rank 0's weights
            self.log = _RankZeroLog(self.log, rank)
            self.checkpoint = _RankZeroCheckpoint(self.checkpoint, rank)

        def update(self, batch, micro_batches: int = 1) -> dict:
            """One DDP step: this rank's rows, global normaliser, loss x world (DDP averages)."""
            cfg = self.config
            self.policy.train()
            self.optimizer.zero_grad(set_to_none=True)
            seed_everything(cfg.seed, "dropout", self.step, "rank", self.rank)
            mine = batch.select_rows(batch.row.unique()[self.rank::self.world])
            autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=cfg.bf16 and next(self.policy.parameters()).is_cuda)
            with autocast:
                loss, stats = self._local_loss(mine, batch.num_decisions)
            (loss * self.world).backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.grad_clip)
            self.optimizer.step()
            self.scheduler.step()
            return {"grad_norm": float(grad_norm), "policy_entropy": self._global_mean(stats["entropy"], mine.num_decisions)}

        def _local_loss(self, mine, normalizer: int):
            if mine.num_decisions == 0:  # still one DDP forward, so this rank joins the all-reduce
                dummy = torch.zeros(1, self.policy.config.input_dim, device=next(self.policy.parameters()).device)
                return self.ddp(dummy).sum() * 0.0, {"entropy": 0.0}
            return token_loss(_DDPForward(self.ddp), mine, normalizer, self.config.entropy_coef)

        def _global_mean(self, local_mean: float, weight: int) -> float:
            t = torch.tensor([local_mean * weight, float(weight)], dtype=torch.float64)
            dist.all_reduce(t)
            return float(t[0] / t[1]) if t[1] > 0 else 0.0

        def save(self) -> Path:
            return super().save() if self.rank == 0 else self.out_dir

    return DDPTokenTrainer


def _train_worker(args: dict) -> None:
    """The per-worker loop run by Ray Train (args built by ``train_token_ddp``)."""
    import ray.train

    from .models import load_frozen_lm
    from .actions import load_action_set
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    torch.set_num_threads(max(1, args["threads"]))
    config, spec = args["config"], args["model_spec"]
    lm = load_frozen_lm(spec)
    task = args["task"] if not isinstance(args["task"], TaskSpec) else args["task"].build()
    action_set = ActionSet(load_action_set(config.actions), device=lm.device)
    rollouts = ShardedRollouts(HFRollouts(lm, action_set, args["batch_rows"]), rank, world)
    trainer = _ddp_trainer_class()(config, lm, task, rollouts, args["out_dir"], task_name=args["task_name"],
                                   progress=False, rank=rank, world=world)
    trainer.train(resume=args["resume"])


def _follow_log(path: Path, total: int, stop: threading.Event) -> None:
    """Driver-side progress bar fed by rank 0's ``train_log.jsonl`` (local clusters)."""
    from tqdm.auto import tqdm

    from .training.common import JsonlLog

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
        from .models import _locate

        _locate(model_spec.name_or_path)  # convert a GGUF once here, not once per worker
    owns = connect(address, num_cpus)
    try:
        cpus = cpus_per_worker if cpus_per_worker is not None else max(_cluster("CPU") / workers, 0.01)
        use_gpu = _wants_gpu(model_spec)
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
            _ray().shutdown()
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
