"""The draft-gated adapter: decode greedily first, read the draft, then keep it or re-decode.

The paper's adapters choose how to decode before decoding, from the prompt embedding; on the
default model and task that embedding predicts how hard a problem is but not which decoder wins
(docs/headroom.md section 4). Greedy's own attempt does: how sure it was of its answer (token
entropy and max-probability over the answer, its length, whether it stopped at EOS) and the hidden
states along it. The draft-gated adapter is the sequence policy (``networks.SequencePolicy``, one
class) fed that summary instead of the prompt embedding:

    prompt -> greedy draft (hidden states recorded) -> DraftSummary -> context x = features(draft)
    -> pi(a | x, B), a = 0: keep the draft; a = k >= 1: re-decode with the k-th re-decode action.

The draft counts as one of the B answers: at B = 1 the answer is the draft (a = 0, one decode) or
the re-decode (two decodes); at B > 1 a kept draft is the only answer (one decode), a re-decode adds
B - 1 samples of the chosen action to it (B decodes). ``draft_gated_decode`` is the one function
that does this; evaluation, ``AdaptiveGenerator`` and the server call it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal, Sequence

import torch

from ..decoding.actions import DEFAULT_TOKEN_BUDGET, GREEDY, ActionSet, DecodingAction
from ..decoding.loop import DecodeResult, StepCallback, StopCheck, decode, row_seed
from .networks import SequencePolicy

__all__ = [
    "DRAFT_FEATURE_SETS",
    "CONFIDENCE_FEATURES",
    "KEEP_DRAFT",
    "DraftContextConfig",
    "DraftSummary",
    "summarise_draft",
    "draft_context",
    "DraftGatedResult",
    "draft_gated_decode",
    "redecode_rows",
    "fill_actions",
    "expected_decodes",
]

KEEP_DRAFT = 0
"""Policy output 0 keeps the draft; output k >= 1 re-decodes with re-decode action k - 1."""

CONFIDENCE_FEATURES = ("entropy_mean", "entropy_max", "max_prob_mean", "max_prob_min", "length_fraction",
                       "stopped_at_eos")
"""The draft's confidence summary, in this order (``DraftSummary.confidence``)."""

DRAFT_FEATURE_SETS = ("confidence", "mean", "hidden", "prompt")
"""What the policy reads: 'confidence' (the 6 summary numbers), 'mean' (those and the mean hidden
state over the draft), 'hidden' (those, the mean and the last hidden state), 'prompt' (the prompt
embedding instead of the draft: the control that sees what a sequence adapter sees)."""


@dataclass(frozen=True)
class DraftContextConfig:
    """Which summary of the greedy draft the draft-gated policy reads (saved in ``adapter.json``)."""

    features: Literal["confidence", "mean", "hidden", "prompt"] = "confidence"
    """See :data:`DRAFT_FEATURE_SETS`."""
    token_budget: int = DEFAULT_TOKEN_BUDGET
    """The draft's (and every re-decode's) token budget; the length feature is a fraction of it."""
    pooling: Literal["mean", "last"] = "mean"
    """Pooling of the prompt embedding (features='prompt' only)."""

    def __post_init__(self) -> None:
        if self.features not in DRAFT_FEATURE_SETS:
            raise ValueError(f"draft features must be one of {list(DRAFT_FEATURE_SETS)}, got {self.features!r}")
        if self.token_budget < 1:
            raise ValueError(f"token_budget must be >= 1, got {self.token_budget}")

    def dim(self, hidden_size: int) -> int:
        """Width of the context vector for an LM of ``hidden_size``."""
        c = len(CONFIDENCE_FEATURES)
        return {"confidence": c, "mean": c + hidden_size, "hidden": c + 2 * hidden_size, "prompt": hidden_size}[
            self.features]


@dataclass
class DraftSummary:
    """What a draft says about itself, one row per draft."""

    confidence: torch.Tensor
    """``[N, 6]`` float32, :data:`CONFIDENCE_FEATURES`."""
    mean_hidden: torch.Tensor
    """``[N, H]`` float32, the mean over the draft's steps of the hidden state that produced each token."""
    last_hidden: torch.Tensor
    """``[N, H]`` float32, the hidden state that produced the draft's last token."""

    def __len__(self) -> int:
        return len(self.confidence)

    def rows(self, index: Sequence[int] | torch.Tensor) -> "DraftSummary":
        index = torch.as_tensor(index, dtype=torch.long)
        return DraftSummary(self.confidence[index], self.mean_hidden[index], self.last_hidden[index])

    @staticmethod
    def cat(parts: Sequence["DraftSummary"]) -> "DraftSummary":
        return DraftSummary(*(torch.cat([getattr(p, f) for p in parts]) for f in
                              ("confidence", "mean_hidden", "last_hidden")))


def summarise_draft(result: DecodeResult) -> DraftSummary:
    """The summary of every row of a decode made with ``record_features=True``."""
    if result.features is None:
        raise ValueError("summarising a draft needs its hidden states: decode with record_features=True")
    valid = result.valid_mask()  # [N, T]
    lengths = result.lengths.clamp(min=1).float()  # [N]
    masked = valid.float()
    entropy_mean = (result.entropy * masked).sum(1) / lengths
    entropy_max = result.entropy.masked_fill(~valid, 0.0).amax(1)
    max_prob_mean = (result.max_prob * masked).sum(1) / lengths
    max_prob_min = result.max_prob.masked_fill(~valid, 1.0).amin(1)
    length_fraction = result.lengths.float() / result.token_budgets.clamp(min=1).float()
    # "ended on its own": at EOS, or (a draft decoded with the stop) at its first complete answer
    ended = result.stopped_at_eos
    if result.stopped_by_check is not None:
        ended = ended | result.stopped_by_check
    confidence = torch.stack([entropy_mean, entropy_max, max_prob_mean, max_prob_min, length_fraction,
                              ended.float()], dim=1)
    features = result.features.float()  # [N, T, H]
    mean_hidden = (features * masked.unsqueeze(-1)).sum(1) / lengths.unsqueeze(-1)
    last = (result.lengths - 1).clamp(min=0)
    last_hidden = features[torch.arange(len(last)), last]
    return DraftSummary(confidence, mean_hidden, last_hidden)


def draft_context(summary: DraftSummary | None, config: DraftContextConfig,
                  prompt_embeddings: torch.Tensor | None = None) -> torch.Tensor:
    """The policy's context ``[N, config.dim(H)]`` from a draft summary (or, features='prompt',
    from the prompt embeddings ``[N, H]``)."""
    if config.features == "prompt":
        if prompt_embeddings is None:
            raise ValueError("features='prompt' needs the prompt embeddings")
        return prompt_embeddings.float()
    if summary is None:
        raise ValueError(f"features={config.features!r} needs the draft's summary")
    parts = [summary.confidence]
    if config.features in ("mean", "hidden"):
        parts.append(summary.mean_hidden)
    if config.features == "hidden":
        parts.append(summary.last_hidden)
    return torch.cat(parts, dim=1).float()


def redecode_rows(budget: int) -> int:
    """Re-decoded answers added to the draft at parallel budget ``budget``: 1 at B = 1 (it replaces
    the draft), B - 1 above (the draft is one of the B)."""
    return max(1, budget - 1)


@dataclass
class DraftGatedResult:
    """The outcome of ``draft_gated_decode`` for each prompt."""

    draft: DecodeResult
    """The greedy drafts, one row per prompt."""
    choices: torch.Tensor
    """``[P]`` long, the policy's output per prompt: 0 keeps the draft, k re-decodes with action k - 1."""
    probs: torch.Tensor
    """``[P, 1 + K]`` the policy's probabilities."""
    texts: list[list[str]]
    """Per prompt, its answers: the draft alone when kept; at B = 1 the re-decode alone; above, the
    draft and the B - 1 re-decodes."""
    decodes: list[int]
    """Per prompt, sequences decoded (the draft included)."""
    tokens: list[int]
    """Per prompt, tokens generated (the draft's included)."""
    redecoded: DecodeResult | None = None
    """The re-decoded rows (None when every draft was kept); ``redecode_prompt`` maps them to prompts."""
    redecode_prompt: list[int] = field(default_factory=list)

    @property
    def kept(self) -> list[bool]:
        return [int(c) == KEEP_DRAFT for c in self.choices]


def draft_gated_decode(
    lm,
    prompts: Sequence[Sequence[int]],
    policy: SequencePolicy,
    context: DraftContextConfig,
    redecode_actions: Sequence[DecodingAction],
    budgets: Sequence[int] | int = 1,
    *,
    seeds: Sequence[int] | None = None,
    seed: int = 0,
    deterministic: bool = True,
    choose: Callable[[DraftSummary, torch.Tensor], torch.Tensor] | None = None,
    token_budgets: Sequence[int] | None = None,
    on_draft: Callable[[DecodeResult, torch.Tensor], None] | None = None,
    on_redecode_step: StepCallback | None = None,
    answer_complete: Sequence[StopCheck | None] | None = None,
    fill_kept: bool = False,
    stop_at_answer: bool,
) -> DraftGatedResult:
    """Draft, summarise, choose and re-decode, for a batch of prompts (token-id lists).

    ``budgets``: the parallel budget B per prompt (or one for all). ``seeds``: one per prompt (its
    re-decode row j is seeded ``row_seed(seeds[p], j)``; default ``row_seed(seed, p)``).
    ``deterministic``: the policy's argmax; else a draw keyed by the prompt's seed. ``choose``
    replaces the policy (``summary, budgets -> choice [P]``: the controls, e.g. a confidence
    threshold, run through the same path). ``token_budgets``: per prompt (default: the context's,
    the budget the policy was trained at). ``on_draft(draft, choices)``: called once the choice is
    made, before re-decoding (e.g. to stream a kept draft). ``on_redecode_step``: the decode loop's
    callback for the re-decode pass (row indices are re-decode rows, ``DraftGatedResult.redecode_prompt``).
    ``answer_complete``: per prompt, the task's "holds a complete answer" check on a text; with
    ``stop_at_answer`` (the adapter's ``AdapterConfig.stop_at_answer``: what it was trained with)
    the draft and the re-decodes end there (a prompt's None: no stop for it).
    ``fill_kept``: at B > 1 a kept draft gets B - 1 samples of the policy's most probable re-decode
    action too, so every prompt has B answers (a client that asked for B completions; B decodes)."""
    n = len(prompts)
    budgets_t = torch.as_tensor([budgets] * n if isinstance(budgets, int) else list(budgets), dtype=torch.long)
    seeds = [row_seed(seed, p) for p in range(n)] if seeds is None else list(seeds)
    lengths = [context.token_budget] * n if token_budgets is None else list(token_budgets)
    checks = list(answer_complete) if answer_complete is not None else None
    if checks is not None and len(checks) != n:
        raise ValueError(f"got {len(checks)} answer checks for {n} prompts")
    if checks is None and stop_at_answer:
        raise ValueError("this adapter stops at the first complete answer: pass the task's answer_complete checks")
    checks = checks if stop_at_answer else None
    draft = decode(lm, prompts, ActionSet([GREEDY]), row_actions=0, token_budget=lengths,
                   record_features=context.features != "prompt", row_seeds=seeds,
                   stop_checks=checks)
    summary = summarise_draft(draft) if context.features != "prompt" else None
    if choose is not None:
        choices = torch.as_tensor(choose(summary, budgets_t), dtype=torch.long)
        probs = torch.nn.functional.one_hot(choices, 1 + len(redecode_actions)).float()
    else:
        embeddings = lm.prompt_embeddings(prompts, pooling=context.pooling) if context.features == "prompt" else None
        x = draft_context(summary, context, embeddings)
        uniform = torch.tensor([(row_seed(s, "draft-choice") % 2**24) / 2**24 for s in seeds])
        choices, probs = policy.choose(x, budgets_t, deterministic=deterministic, uniform=uniform)
    if on_draft is not None:
        on_draft(draft, choices)
    return _redecode(lm, prompts, draft, choices, probs, budgets_t, seeds, lengths, redecode_actions,
                     on_redecode_step, checks, fill_kept)


def fill_actions(choices: torch.Tensor, probs: torch.Tensor, budgets: torch.Tensor, fill_kept: bool) -> list[int]:
    """Per prompt, the policy output whose rows the second pass decodes (0: none): the chosen one,
    or, with ``fill_kept``, for a draft kept at B > 1 the most probable re-decode output."""
    out = []
    for p in range(len(choices)):
        choice = int(choices[p])
        if choice == KEEP_DRAFT and fill_kept and int(budgets[p]) > 1:
            choice = 1 + int(probs[p, 1:].argmax())
        out.append(choice)
    return out


def _redecode(lm, prompts, draft: DecodeResult, choices, probs, budgets, seeds, lengths, actions,
              on_step, checks=None, fill_kept: bool = False) -> DraftGatedResult:
    """The second pass: B - 1 (at B = 1: one) rows of the chosen action for every re-decoded prompt
    (and, ``fill_kept``, for every draft kept at B > 1)."""
    n = len(prompts)
    prompt_of_row, row_actions, row_seeds = [], [], []
    for p, output in enumerate(fill_actions(choices, probs, budgets, fill_kept)):
        if output != KEEP_DRAFT:
            for j in range(redecode_rows(int(budgets[p]))):
                prompt_of_row.append(p)
                row_actions.append(output - 1)
                row_seeds.append(row_seed(seeds[p], "redecode", j))
    redecoded = None
    if prompt_of_row:
        redecoded = decode(lm, prompts, ActionSet(list(actions)), prompt_of_row=prompt_of_row,
                           row_actions=row_actions, token_budget=[lengths[p] for p in prompt_of_row],
                           row_seeds=row_seeds, on_step=on_step,
                           stop_checks=None if checks is None else [checks[p] for p in prompt_of_row])
    texts = [[draft.texts[p]] for p in range(n)]
    decodes, tokens = [1] * n, [int(draft.lengths[p]) for p in range(n)]
    for r, p in enumerate(prompt_of_row):
        if int(budgets[p]) == 1:
            texts[p] = [redecoded.texts[r]]  # at B = 1 the re-decode replaces the draft
        else:
            texts[p].append(redecoded.texts[r])
        decodes[p] += 1
        tokens[p] += int(redecoded.lengths[r])
    return DraftGatedResult(draft, choices, probs, texts, decodes, tokens, redecoded, prompt_of_row)


def expected_decodes(keep_share: float, budget: int) -> float:
    """Mean decodes per problem when a share ``keep_share`` of drafts is kept at parallel budget B."""
    if not 0 <= keep_share <= 1 or budget < 1:
        raise ValueError("keep_share must be in [0, 1] and budget >= 1")
    return keep_share + (1 - keep_share) * (1 + redecode_rows(budget))

