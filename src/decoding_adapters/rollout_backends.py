"""``make_rollouts``: the rollout engine named on the command line (hf, ray or vllm).

It sits above ``rollouts`` (the interface and the in-process engine), ``distributed`` (Ray actors)
and ``vllm_backend``, so that none of those imports another; Ray and vLLM themselves are imported
only when their engine is built.
"""

from __future__ import annotations

from .actions import ActionSet
from .distributed import RayRollouts
from .rollouts import HFRollouts, Rollouts
from .vllm_backend import VLLMRollouts

__all__ = ["make_rollouts"]


def make_rollouts(backend: str, lm, action_set: ActionSet, *, batch_rows: int = 64, workers: int = 1,
                  ray_address: str | None = None, model_spec=None) -> Rollouts:
    """Build the rollout backend named ``backend`` (hf, ray or vllm)."""
    if backend == "hf":
        return HFRollouts(lm, action_set, batch_rows)
    if backend == "ray":
        return RayRollouts(
            model_spec or lm.spec, action_set, workers=workers, batch_rows=batch_rows, address=ray_address
        )
    if backend == "vllm":
        return VLLMRollouts(model_spec or lm.spec, action_set, tokenizer=lm.tokenizer if lm is not None else None)
    raise ValueError(f"unknown backend {backend!r}: choose hf, ray or vllm")
