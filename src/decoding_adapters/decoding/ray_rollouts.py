"""Scale-out with Ray: rollouts on several actors (token-level DDP training: ``training.ddp``).

``RayRollouts`` (``--backend ray --workers N``)
    N Ray actors (``RolloutWorker``), each with its own copy of the frozen LM loaded from the
    ``ModelSpec``. ``run`` cuts the request into chunks (``RolloutRequest.chunks``; at most
    ``batch_rows`` rows and at most ``ceil(rows / N)``, so every worker gets work) and hands them
    out dynamically (a free actor takes the next chunk), then merges the chunks with
    ``concat_results``. A chooser (e.g. a ``TokenPolicyChooser``) is put in the object store once
    per call and shipped to every actor. Since every row draws its randomness from its own seed,
    the result is token for token the one ``HFRollouts`` gives for the same request.

``ShardedRollouts`` and ``TaskSpec``
    What a DDP worker of ``train-token --backend ray`` needs to roll out its share of a request
    and rebuild the task; the trainer and the Ray Train driver are in ``training.ddp``.

Ray is started locally (``ray.init(num_cpus=..., include_dashboard=False)``) unless Ray is already
initialised in this process or an ``address`` of an existing cluster is given.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
import torch.distributed as dist
from tqdm.auto import tqdm

from ..lm.models import ModelSpec, load_frozen_lm, locate_model
from ..tasks import get_task
from .actions import ActionSet, DecodingAction
from .loop import Chooser, DecodeResult
from .rollouts import RolloutRequest, Rollouts, concat_results, decode_request

log = logging.getLogger(__name__)

__all__ = ["RayRollouts", "RolloutWorker", "TaskSpec", "ShardedRollouts", "connect", "start_actors", "stop_actors"]


def ray_module():
    try:
        import ray
    except ImportError as err:  # pragma: no cover - ray is in the [ray] extra
        raise ImportError("the ray backend needs Ray: pip install -e '.[ray]'") from err
    return ray


def connect(address: str | None = None, num_cpus: int | None = None) -> bool:
    """Join the cluster at ``address``, or start a local one with ``num_cpus`` CPUs (default: all).
    Returns True when this call started Ray (so the caller may shut it down)."""
    ray = ray_module()
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


def cluster_resource(resource: str) -> float:
    return float(ray_module().cluster_resources().get(resource, 0.0))


def wants_gpu(spec: ModelSpec) -> bool:
    return spec.device.startswith("cuda") or (spec.device == "auto" and cluster_resource("GPU") > 0)


def start_actors(actor_class, model_spec: ModelSpec, workers: int, args: tuple, *, address: str | None = None,
                 num_cpus: int | None = None, cpus_per_worker: float | None = None,
                 gpus_per_worker: float | None = None) -> tuple[list, bool, list[dict]]:
    """``workers`` actors ``actor_class(model_spec, *args, threads)``, each reserving its share of the
    cluster (CPUs / workers, used as torch threads; GPUs / workers when the spec asks for CUDA)
    unless ``cpus_per_worker`` / ``gpus_per_worker`` say: ``(actors, whether this call started Ray,
    each actor's ready())``. A worker that fails to start stops the others with one error."""
    if address is None:
        locate_model(model_spec.name_or_path)  # fail fast on a bad path; convert a GGUF once, not once per actor
    owns_ray = connect(address, num_cpus)
    cpus = cpus_per_worker if cpus_per_worker is not None else max(cluster_resource("CPU") / workers, 0.01)
    gpus = (
        gpus_per_worker
        if gpus_per_worker is not None
        else (cluster_resource("GPU") / workers if wants_gpu(model_spec) else 0)
    )
    ray = ray_module()
    remote = ray.remote(num_cpus=cpus, num_gpus=gpus)(actor_class)
    actors = [remote.remote(model_spec, *args, int(cpus)) for _ in range(workers)]
    try:
        return actors, owns_ray, ray.get([a.ready.remote() for a in actors])
    except ray.exceptions.RayActorError as err:
        stop_actors(actors, owns_ray)
        raise RuntimeError(f"a Ray worker failed to start (model {model_spec.name_or_path!r}): {err}") from err


def stop_actors(actors: list, owns_ray: bool) -> None:
    """Kill ``actors`` (from :func:`start_actors`), and shut Ray down where that call started it."""
    ray = ray_module()
    for actor in actors:
        ray.kill(actor)
    if owns_ray and ray.is_initialized():
        ray.shutdown()


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
        torch.set_num_threads(max(1, threads))
        self.lm = load_frozen_lm(model_spec)
        self.action_set = ActionSet(actions, device=self.lm.device)

    def ready(self) -> dict:
        return {"threads": torch.get_num_threads(), "device": str(self.lm.device)}

    def run(self, request: RolloutRequest, chooser: Chooser | None, record_features: bool) -> DecodeResult:
        return decode_request(
            self.lm, self.action_set, request, _move_chooser(chooser, self.lm.device), record_features
        )


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

    def __init__(
        self,
        model_spec: ModelSpec,
        action_set: ActionSet,
        *,
        workers: int = 2,
        batch_rows: int = 64,
        address: str | None = None,
        num_cpus: int | None = None,
        cpus_per_worker: float | None = None,
        gpus_per_worker: float | None = None,
    ):
        if workers < 1 or batch_rows < 1:
            raise ValueError("workers and batch_rows must be >= 1")
        self.action_set, self.batch_rows, self.model_spec = action_set, batch_rows, model_spec
        self.actors, self._owns_ray, self.worker_info = start_actors(
            RolloutWorker, model_spec, workers, (list(action_set.actions),), address=address, num_cpus=num_cpus,
            cpus_per_worker=cpus_per_worker, gpus_per_worker=gpus_per_worker)

    @property
    def workers(self) -> int:
        return len(self.actors)

    def rows_per_chunk(self, num_rows: int) -> int:
        """Chunk size for a request: at most ``batch_rows``, small enough to keep every actor busy."""
        return max(1, min(self.batch_rows, math.ceil(num_rows / len(self.actors))))

    def run(self, request, chooser=None, *, record_features=False, progress=False):
        if not self.actors:
            raise RuntimeError("RayRollouts.run after close()")
        ray = ray_module()
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
        stop_actors(getattr(self, "actors", []), getattr(self, "_owns_ray", False))
        self.actors, self._owns_ray = [], False


# ==== pieces of token-level training on Ray Train (the trainer: training.ddp) ===================


@dataclass(frozen=True)
class TaskSpec:
    """How a worker rebuilds the task: ``get_task(name, **options)``."""

    name: str
    options: dict = field(default_factory=dict)

    def build(self):
        return get_task(self.name, **self.options)


class ShardedRollouts(Rollouts):
    """Inside a DDP worker: decode the rows of every ``world``-th prompt with ``inner`` and
    all-gather the parts, so that every rank returns the full result (a collective call: every
    rank must call ``run`` with the same request)."""

    def __init__(self, inner: Rollouts, rank: int, world: int):
        self.inner, self.rank, self.world = inner, rank, world
        self.action_set = inner.action_set

    def run(self, request, chooser=None, *, record_features=False, progress=False):
        rows = [r for r in range(request.num_rows) if request.prompt_of_row[r] % self.world == self.rank]
        part = [(rows, self.inner.run(request.subset(rows), chooser, record_features=record_features))] if rows else []
        gathered: list[Any] = [None] * self.world
        dist.all_gather_object(gathered, part)
        parts = [p for g in gathered for p in g]
        return concat_results(parts, request.num_rows, request.prompts, request.prompt_of_row)
