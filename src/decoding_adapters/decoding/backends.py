"""``make_rollouts``: the rollout engine named on the command line (hf, ray or vllm).

It sits above ``rollouts`` (the interface and the in-process engine), ``ray_rollouts`` (Ray actors)
and ``vllm_rollouts``, so that none of those imports another; Ray and vLLM themselves are imported
only when their engine is built.

With the vllm backend every action set is checked against vLLM's limits (``check_vllm_actions``)
before an engine starts, and ``gpu_memory_utilization`` (the ``--gpu-memory-utilization`` option)
reaches the engine's ``VLLMConfig``.
"""

from __future__ import annotations

from dataclasses import replace

from .actions import ActionSet
from .ray_rollouts import RayRollouts
from .rollouts import HFRollouts, Rollouts
from .vllm_rollouts import VLLMConfig, VLLMRollouts, check_vllm_actions

__all__ = ["make_rollouts", "check_backend_actions"]


def check_backend_actions(backend: str, action_sets) -> None:
    """Fail fast, before any engine starts, when ``backend`` cannot run one of ``action_sets``
    (ActionSets or lists of DecodingActions): for vllm, :func:`check_vllm_actions` on each."""
    if backend != "vllm":
        return
    for actions in action_sets:
        check_vllm_actions(actions)


def make_rollouts(backend: str, lm, action_set: ActionSet, *, batch_rows: int = 64, workers: int = 1,
                  ray_address: str | None = None, model_spec=None, gpu_memory_utilization: float | None = None,
                  vllm_config: VLLMConfig | None = None) -> Rollouts:
    """Build the rollout backend named ``backend`` (hf, ray or vllm). ``gpu_memory_utilization``
    (vllm only; None: ``VLLMConfig``'s default) overrides ``vllm_config``'s."""
    if backend == "hf":
        return HFRollouts(lm, action_set, batch_rows)
    if backend == "ray":
        return RayRollouts(
            model_spec or lm.spec, action_set, workers=workers, batch_rows=batch_rows, address=ray_address
        )
    if backend == "vllm":
        check_vllm_actions(action_set)  # before the engine (and its GPU memory) is claimed
        config = vllm_config or VLLMConfig()
        if gpu_memory_utilization is not None:
            config = replace(config, gpu_memory_utilization=gpu_memory_utilization)
        return VLLMRollouts(
            model_spec or lm.spec, action_set, tokenizer=lm.tokenizer if lm is not None else None, config=config
        )
    raise ValueError(f"unknown backend {backend!r}: choose hf, ray or vllm")
