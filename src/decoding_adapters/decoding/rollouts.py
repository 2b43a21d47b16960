"""One rollout interface for every engine.

A rollout request is a set of distinct prompts and, per output row, the prompt it continues, a
fixed action (or a per-token chooser), a token budget and a seed. ``Rollouts.run`` returns one
``DecodeResult`` for all rows, in request order. Backends:

- ``HFRollouts`` (default, in-process): rows are grouped by prompt (so a prompt is prefilled once
  per chunk) and decoded in chunks of at most ``batch_rows`` rows.
- ``RayRollouts`` (``decoding_adapters.decoding.ray_rollouts``): the same chunks spread over Ray actors.
- ``VLLMRollouts`` (``decoding_adapters.decoding.vllm_rollouts``): static actions only, through vLLM.

Since each row's randomness comes from its own seed (see ``decoding``), every backend and every
chunking gives the same tokens for the same request.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

import torch
from tqdm.auto import tqdm

from ..tasks import Task, build_prompts
from .actions import ActionSet
from .loop import Chooser, DecodeResult, StopCheck, decode
from .protocol import STOP_AT_ANSWER

__all__ = [
    "STOP_AT_ANSWER",
    "answer_stops",
    "answer_check",
    "says_when_complete",
    "RolloutRequest",
    "Rollouts",
    "HFRollouts",
    "concat_results",
    "take_rows",
    "decode_request",
    "encode_problems",
    "score_rows",
]


def says_when_complete(task) -> bool:
    """Whether ``task`` has a notion of a complete answer (it defines ``answer_complete`` beyond
    the base class's "never"): where it has none, the stop changes nothing and no check is run."""
    check = getattr(type(task), "answer_complete", None)
    return check is not None and check is not Task.answer_complete


def answer_check(task, problem) -> StopCheck | None:
    """The check that ends a row at its first complete answer to ``problem``; None where the task
    says no answer is complete before the end."""
    return functools.partial(task.answer_complete, problem) if says_when_complete(task) else None


def answer_stops(task, problems: Sequence, prompt_of_row: Sequence[int],
                 stop_at_answer: bool) -> list[StopCheck] | None:
    """Per row, the check that ends it at the first complete answer to ``problems[prompt_of_row[r]]``
    (``task.answer_complete``), when ``stop_at_answer``; None when off or where the task has no such
    notion (rows run to EOS or their budget)."""
    if not stop_at_answer or not says_when_complete(task):
        return None
    return [functools.partial(task.answer_complete, problems[i]) for i in prompt_of_row]


@dataclass
class RolloutRequest:
    """Rows to generate. ``prompts`` are distinct; every per-row list has one entry per row."""

    prompts: list[list[int]]
    prompt_of_row: list[int]
    row_seeds: list[int]
    token_budget: int | list[int]
    row_actions: list[int] | None = None
    """Fixed action index per row; None when a chooser decides every token."""
    stop_checks: list[StopCheck | None] | None = None
    """Per row, a condition on its text that ends it early (``decode``'s ``stop_checks``), or None."""

    def __post_init__(self) -> None:
        n = len(self.prompt_of_row)
        if len(self.row_seeds) != n or (self.row_actions is not None and len(self.row_actions) != n):
            raise ValueError("prompt_of_row, row_seeds and row_actions need one entry per row")
        if self.stop_checks is not None and len(self.stop_checks) != n:
            raise ValueError("stop_checks needs one entry (a check or None) per row")
        if isinstance(self.token_budget, list) and len(self.token_budget) != n:
            raise ValueError("a per-row token_budget needs one entry per row")

    @property
    def num_rows(self) -> int:
        return len(self.prompt_of_row)

    def budget_of(self, rows: Sequence[int]) -> int | list[int]:
        return self.token_budget if isinstance(self.token_budget, int) else [self.token_budget[r] for r in rows]

    def subset(self, rows: Sequence[int]) -> "RolloutRequest":
        """The sub-request of ``rows`` (global indices, kept in this order), prompts re-indexed."""
        used = sorted({self.prompt_of_row[r] for r in rows})
        local = {p: i for i, p in enumerate(used)}
        return RolloutRequest(
            prompts=[self.prompts[p] for p in used],
            prompt_of_row=[local[self.prompt_of_row[r]] for r in rows],
            row_seeds=[self.row_seeds[r] for r in rows],
            token_budget=self.budget_of(rows),
            row_actions=None if self.row_actions is None else [self.row_actions[r] for r in rows],
            stop_checks=None if self.stop_checks is None else [self.stop_checks[r] for r in rows],
        )

    def chunks(self, batch_rows: int) -> list[tuple[list[int], "RolloutRequest"]]:
        """Split into sub-requests of <= batch_rows rows, rows of one prompt kept together where
        possible; returns (global row indices, sub-request) pairs."""
        order = sorted(range(self.num_rows), key=lambda r: self.prompt_of_row[r])
        return [
            (order[s : s + batch_rows], self.subset(order[s : s + batch_rows]))
            for s in range(0, len(order), batch_rows)
        ]


def decode_request(
    lm, action_set: ActionSet, request: RolloutRequest, chooser: Chooser | None, record_features: bool
) -> DecodeResult:
    return decode(
        lm,
        request.prompts,
        action_set,
        prompt_of_row=request.prompt_of_row,
        row_actions=request.row_actions,
        chooser=chooser,
        token_budget=request.token_budget,
        row_seeds=request.row_seeds,
        record_features=record_features,
        stop_checks=request.stop_checks,
    )


def concat_results(
    parts: Sequence[tuple[list[int], DecodeResult]],
    num_rows: int,
    prompts: list[list[int]],
    prompt_of_row: Sequence[int],
) -> DecodeResult:
    """Merge chunk results (each with its global row indices) into one result in request order."""
    steps = max(r.tokens.shape[1] for _, r in parts)

    def gather(name: str, fill) -> torch.Tensor:
        first = getattr(parts[0][1], name)
        shape = (num_rows, steps) + tuple(first.shape[2:]) if first.dim() >= 2 else (num_rows,)
        out = torch.full(shape, fill, dtype=first.dtype)
        for rows, r in parts:
            value = getattr(r, name)
            if value.dim() >= 2:
                out[rows, : value.shape[1]] = value
            else:
                out[rows] = value
        return out

    texts = [""] * num_rows
    for rows, r in parts:
        for i, row in enumerate(rows):
            texts[row] = r.texts[i]
    with_features = parts[0][1].features is not None

    def gather_optional(name: str, default) -> torch.Tensor | None:
        """A per-row field some parts may lack (None there: ``default(part)``); None if all lack it."""
        if all(getattr(r, name) is None for _, r in parts):
            return None
        first = next(getattr(r, name) for _, r in parts if getattr(r, name) is not None)
        out = torch.zeros(num_rows, dtype=first.dtype)
        for rows, r in parts:
            value = getattr(r, name)
            out[rows] = value if value is not None else default(r).to(first.dtype)
        return out

    return DecodeResult(
        prompt_of_row=torch.as_tensor(list(prompt_of_row), dtype=torch.long),
        tokens=gather("tokens", -1),
        lengths=gather("lengths", 0),
        actions=gather("actions", -1),
        entropy=gather("entropy", 0.0),
        max_prob=gather("max_prob", 0.0),
        stopped_at_eos=gather("stopped_at_eos", False),
        texts=texts,
        token_budgets=gather("token_budgets", 0),
        features=gather("features", 0.0) if with_features else None,
        prompts=prompts,
        stopped_by_check=gather_optional("stopped_by_check", lambda r: torch.zeros_like(r.stopped_at_eos)),
        decodes=gather_optional("decodes", lambda r: r.row_costs()[0]),
        generated_tokens=gather_optional("generated_tokens", lambda r: r.row_costs()[1]),
    )


def take_rows(result: DecodeResult, rows: Sequence[int]) -> DecodeResult:
    """The rows ``rows`` of ``result`` (in that order) as a result of their own, e.g. the drafts a
    two-pass method keeps, to merge with its re-decodes by :func:`concat_results`."""
    index = torch.as_tensor(list(rows), dtype=torch.long)

    def pick(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t[index]

    return DecodeResult(
        prompt_of_row=result.prompt_of_row[index],
        tokens=result.tokens[index],
        lengths=result.lengths[index],
        actions=result.actions[index],
        entropy=result.entropy[index],
        max_prob=result.max_prob[index],
        stopped_at_eos=result.stopped_at_eos[index],
        texts=[result.texts[r] for r in index.tolist()],
        token_budgets=result.token_budgets[index],
        features=pick(result.features),
        prompts=result.prompts,
        stopped_by_check=pick(result.stopped_by_check),
        decodes=pick(result.decodes),
        generated_tokens=pick(result.generated_tokens),
    )


class Rollouts:
    """Interface: generate the rows of a request with fixed actions or a per-token chooser."""

    action_set: ActionSet

    def run(
        self,
        request: RolloutRequest,
        chooser: Chooser | None = None,
        *,
        record_features: bool = False,
        progress: bool | str = False,
    ) -> DecodeResult:
        raise NotImplementedError

    def close(self) -> None:
        """Release workers, if any."""


class HFRollouts(Rollouts):
    """In-process rollouts with the batched HF decode loop."""

    def __init__(self, lm, action_set: ActionSet, batch_rows: int = 64):
        if batch_rows < 1:
            raise ValueError("batch_rows must be >= 1")
        self.lm, self.action_set, self.batch_rows = lm, action_set, batch_rows

    def run(self, request, chooser=None, *, record_features=False, progress=False):
        chunks = request.chunks(self.batch_rows)
        parts = []
        label = progress if isinstance(progress, str) else "rollouts"
        with tqdm(total=request.num_rows, desc=label, unit="row", disable=not progress, leave=False) as bar:
            for rows, sub in chunks:
                parts.append((rows, decode_request(self.lm, self.action_set, sub, chooser, record_features)))
                bar.update(len(rows))
        return concat_results(parts, request.num_rows, request.prompts, request.prompt_of_row)


def encode_problems(lm, task, problems, cot_ratio: float = 0.0, seed: int = 0) -> tuple[list[list[int]], list[bool]]:
    """Token ids of each problem's chat prompt and whether it got chain of thought (seeded)."""
    prompted = build_prompts(task, problems, cot_ratio, seed)
    return lm.encode_chat([p.messages for p in prompted]), [p.cot for p in prompted]


def score_rows(task, problems, result: DecodeResult) -> torch.Tensor:
    """Verifiable reward ``[N]`` of every row: ``task.reward(problem of its prompt, text)``, scored
    as one batch (``task.reward_batch``) so that sandboxed verifiers run several programs at once."""
    rewards = task.reward_batch([problems[int(p)] for p in result.prompt_of_row], result.texts)
    return torch.tensor(rewards, dtype=torch.float32)
