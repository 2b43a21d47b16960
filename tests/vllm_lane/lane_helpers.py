"""Helpers of the vLLM lane's tests."""

from __future__ import annotations

import math

import torch


def model_runner(llm):
    """The in-process engine's model runner (its model, input batch and logits processors)."""
    core = llm.llm_engine.engine_core.engine_core
    worker = core.model_executor.driver_worker
    return getattr(worker, "worker", worker).model_runner


def report(capsys, line: str) -> None:
    """Print a measured figure past pytest's capture (the lane's output lists them)."""
    with capsys.disabled():
        print(f"\n[vllm lane] {line}", flush=True)


def chi_square_passes(observed: torch.Tensor, expected: torch.Tensor) -> tuple[bool, float, int]:
    """The decode loop's goodness-of-fit test (``test_actions``): chi-square over the tokens with
    expected count >= 5 (the rest pooled into one bin when it expects >= 5, else dropped), passing
    when chi2 < dof + 5 sqrt(2 dof) + 10. Returns (passes, chi2, dof)."""
    expected, observed = expected.double(), observed.double()
    big = expected >= 5
    obs, exp = list(observed[big]), list(expected[big])
    if expected[~big].sum() >= 5:
        obs.append(observed[~big].sum())
        exp.append(expected[~big].sum())
    obs, exp = torch.stack(obs), torch.stack(exp)
    chi2 = float(((obs - exp) ** 2 / exp).sum())
    dof = len(exp) - 1
    return chi2 < dof + 5 * math.sqrt(2 * dof) + 10, chi2, dof
