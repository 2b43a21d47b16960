"""Decoding actions and batched, per-row logit transforms.

A *decoding action* is one sampling configuration (temperature, top-k, top-p, min-p or greedy).
The adapters pick an action index per prompt or per token; the decode loop turns a batch of action
indices into per-row parameter tensors and applies each transform to the whole ``[batch, vocab]``
logits tensor in one op, rows with different actions side by side (after vLLM v1's sampler).

Processor order (the same as HF ``generate``): temperature -> top-k -> top-p -> min-p, then sample.
(vLLM applies min-p before top-k/top-p; we follow HF so that our outputs can be checked against
``TemperatureLogitsWarper`` / ``TopKLogitsWarper`` / ``TopPLogitsWarper`` / ``MinPLogitsWarper``.)

Edge cases, decided and tested:
- greedy (``do_sample=False`` or ``temperature == 0``) is the exact argmax of the *raw* logits;
  we never divide by a tiny temperature.
- top-k keeps every token tied with the k-th largest logit (HF behaviour), so a row may keep > k.
- top-p keeps the smallest set whose mass is >= p, and always the most likely token (HF).
- sampling is the inverse CDF at one uniform per row (``inverse_cdf_sample``): one draw per row per
  step, so a row's token depends on its own uniform only. The decode loop makes those uniforms with
  a counter-based generator (``counter_uniform``: a hash of the row's seed and the step), so a
  row's tokens do not depend on which other rows share its batch, without a generator per row.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import torch

__all__ = [
    "DecodingAction",
    "MAX_TEMPERATURE",
    "ActionSet",
    "SamplingParams",
    "PRESETS",
    "candidate_pool",
    "load_action_set",
    "apply_temperature",
    "apply_top_k",
    "apply_top_p",
    "apply_min_p",
    "transform_logits",
    "sample",
    "sampling_weights",
    "inverse_cdf_sample",
    "counter_uniform",
    "TOKEN_STREAM",
    "ACTION_STREAM",
    "token_logprobs",
]


MAX_TEMPERATURE = 10.0
"""Largest accepted sampling temperature. The paper's pool stops at 1.25; at T = 10 a typical LM
distribution is already close to uniform over its vocabulary, so anything larger (50, ``1e999``)
is a mistake, and a non-finite value would also be written to JSON as non-standard ``Infinity``."""


def _is_number(value) -> bool:
    """A real number that is not a bool (``True`` is an ``int`` in Python, never a temperature or a k)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


DEFAULT_TOKEN_BUDGET = 128
"""The token budget b (max new tokens per completion) wherever none is given: the one default of
every component (the decode loop, the evaluation, the token policy's budget feature, the study,
``generate`` and ``serve``); a component that is always given one by its caller has none of its
own. A study passes its own value down; the training and evaluation commands pass theirs
(``cli.common.COMMAND_TOKEN_BUDGET``)."""


@dataclass(frozen=True)
class DecodingAction:
    """One decoding configuration. ``None`` switches a truncation off."""

    do_sample: bool = True
    """False means greedy (exact argmax); the other fields are then ignored."""
    temperature: float = 1.0
    """Softmax temperature in [0, MAX_TEMPERATURE] (10); 0 means greedy."""
    top_k: int | None = None
    """Keep the k most likely tokens (and ties with the k-th); None = off."""
    top_p: float | None = None
    """Nucleus mass in (0, 1]; None or 1.0 = off."""
    min_p: float | None = None
    """Drop tokens with probability < min_p * max probability, in [0, 1); None or 0 = off."""

    def __post_init__(self) -> None:
        # Types first: JSON gives strings, nulls and booleans where numbers belong, and Python
        # would compare ``True >= 1`` or fail on ``"hot" >= 0`` with a TypeError.
        if not isinstance(self.do_sample, bool):
            raise ValueError(f"do_sample must be a bool, got {self.do_sample!r}")
        if not _is_number(self.temperature):
            raise ValueError(f"temperature must be a number, got {self.temperature!r}")
        if not (0 <= self.temperature <= MAX_TEMPERATURE):  # also rejects NaN and infinities
            raise ValueError(
                f"temperature must be in [0, {MAX_TEMPERATURE:g}], got {self.temperature!r} "
                f"(above {MAX_TEMPERATURE:g} sampling is near-uniform noise: a typo, not a strategy)"
            )
        if self.top_k is not None and (not _is_number(self.top_k) or int(self.top_k) != self.top_k or self.top_k < 1):
            raise ValueError(f"top_k must be an integer >= 1 or None, got {self.top_k!r}")
        if self.top_p is not None and (not _is_number(self.top_p) or not 0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1] or None, got {self.top_p!r} (top_p=0 would keep no token)")
        if self.min_p is not None and (not _is_number(self.min_p) or not 0 <= self.min_p < 1):
            raise ValueError(f"min_p must be in [0, 1) or None, got {self.min_p!r}")

    @property
    def is_greedy(self) -> bool:
        return not self.do_sample or self.temperature == 0

    @property
    def name(self) -> str:
        """Short human-readable label, e.g. ``T=0.75,top_p=0.9,min_p=0.1`` or ``greedy``."""
        if self.is_greedy:
            return "greedy"
        parts = [f"T={self.temperature:g}"]
        if self.top_k is not None:
            parts.append(f"top_k={self.top_k}")
        if self.top_p is not None and self.top_p < 1:
            parts.append(f"top_p={self.top_p:g}")
        if self.min_p:
            parts.append(f"min_p={self.min_p:g}")
        return ",".join(parts)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "DecodingAction":
        if not isinstance(d, dict):
            raise ValueError(f"a decoding action must be a JSON object of its fields, got {d!r}")
        unknown = set(d) - {"do_sample", "temperature", "top_k", "top_p", "min_p"}
        if unknown:
            raise ValueError(f"unknown decoding-action fields {sorted(unknown)}")
        return cls(**d)


GREEDY = DecodingAction(do_sample=False, temperature=0.0)


def _a(t: float, k: int | None = None, p: float | None = None, m: float | None = None) -> DecodingAction:
    return DecodingAction(True, t, k, p, m)


# The paper's selected action tables (appendix "Action Space Selection").
PRESETS: dict[str, tuple[DecodingAction, ...]] = {
    "math": (
        _a(0.75, None, 0.9, 0.1), _a(1.0, None, 0.9), _a(1.25, 10, 0.9), _a(1.0, 5, 0.9), _a(1.25, 50, 0.9), _a(1.25)
    ),
    "coding": (
        _a(1.25, None, 0.95, 0.1), _a(1.25, None, 0.95, 0.2), _a(1.0, None, 0.95, 0.2),
        _a(1.25, 50, 0.9, 0.1), _a(1.25, 5, 0.9), _a(0.75, 5, None, 0.1),
    ),
    "mix": (_a(0.5), _a(1.0), _a(1.25), _a(0.75, 10), _a(0.75, 10, 0.95, 0.1), GREEDY),
    "math-token": (GREEDY, _a(0.5), _a(1.0), _a(1.25)),
}

# Sweep ranges of the candidate pool (paper table "Sweep ranges"): 5 x 4 x 3 x 3 = 180 configurations.
POOL_TEMPERATURES = (0.3, 0.5, 0.75, 1.0, 1.25)
POOL_TOP_KS = (5, 10, 50, None)
POOL_TOP_PS = (0.9, 0.95, None)
POOL_MIN_PS = (0.1, 0.2, None)


def candidate_pool() -> list[DecodingAction]:
    """The paper's 180-configuration candidate pool (temperature x top-k x top-p x min-p)."""
    grid = itertools.product(POOL_TEMPERATURES, POOL_TOP_KS, POOL_TOP_PS, POOL_MIN_PS)
    return [_a(t, k, p, m) for t, k, p, m in grid]


def load_action_set(spec: str | Path | Sequence[DecodingAction]) -> list[DecodingAction]:
    """Actions from a preset name (``math``, ``coding``, ``mix``, ``math-token``, ``pool``), a JSON
    file (a list of action dicts, or ``{"actions": [...]}`` as written by ``select-actions``) or a list."""
    if not isinstance(spec, (str, Path)):
        return list(spec)
    if str(spec) == "pool":
        return candidate_pool()
    if str(spec) in PRESETS:
        return list(PRESETS[str(spec)])
    path = Path(spec)
    if not path.is_file():
        raise ValueError(
            f"action set {str(spec)!r} is neither a preset ({', '.join([*PRESETS, 'pool'])}) nor an existing JSON file"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not a JSON action file ({err})") from None
    if isinstance(data, dict):
        if "actions" not in data:
            raise ValueError(f"{path}: a JSON object action file needs an 'actions' list (as select-actions writes)")
        items = data["actions"]
    else:
        items = data
    if not isinstance(items, list):
        raise ValueError(f"{path}: expected a list of actions (or {{\"actions\": [...]}}), got {type(items).__name__}")
    if not items:
        raise ValueError(f"{path}: the action set is empty")
    actions = []
    for i, item in enumerate(items):
        try:
            actions.append(DecodingAction.from_dict(item))
        except (ValueError, TypeError) as err:
            raise ValueError(f"{path}: action {i}: {err}") from None
    return actions


@dataclass(frozen=True)
class SamplingParams:
    """Per-row sampling parameters, each a tensor of shape ``[batch]`` (off = neutral value)."""

    temperature: torch.Tensor  # float; 1.0 on greedy rows (never divided by 0)
    top_k: torch.Tensor  # long; 0 = off
    top_p: torch.Tensor  # float; 1.0 = off
    min_p: torch.Tensor  # float; 0.0 = off
    greedy: torch.Tensor  # bool


class ActionSet:
    """A fixed list of actions plus their parameters as ``[K]`` tensors, for per-row gathering."""

    def __init__(self, actions: Sequence[DecodingAction], device: torch.device | str = "cpu"):
        if not actions:
            raise ValueError("an action set needs at least one action")
        self.actions = list(actions)
        greedy = [a.is_greedy for a in self.actions]
        self._params = SamplingParams(
            temperature=torch.tensor(
                [1.0 if g else a.temperature for a, g in zip(self.actions, greedy)], device=device
            ),
            top_k=torch.tensor([a.top_k or 0 for a in self.actions], dtype=torch.long, device=device),
            top_p=torch.tensor([a.top_p or 1.0 for a in self.actions], device=device),
            min_p=torch.tensor([a.min_p or 0.0 for a in self.actions], device=device),
            greedy=torch.tensor(greedy, device=device),
        )
        # Fast-path flags for the whole set: a transform no action uses is skipped without a sync.
        self.uses_top_k = any(a.top_k for a in self.actions if not a.is_greedy)
        self.uses_top_p = any(a.top_p and a.top_p < 1 for a in self.actions if not a.is_greedy)
        self.uses_min_p = any(a.min_p for a in self.actions if not a.is_greedy)
        self.all_greedy = all(greedy)
        self.uses_greedy = any(greedy)
        self._params_on = {self._params.greedy.device: self._params}  # the [K] tables, per device they were asked on

    def __len__(self) -> int:
        return len(self.actions)

    @property
    def names(self) -> list[str]:
        return [a.name for a in self.actions]

    def params(self, action_index: torch.Tensor) -> SamplingParams:
        """Gather ``[batch]`` parameters for ``action_index`` (long ``[batch]``) on the indices' device:
        an action set built on the CPU serves rows decoded on a GPU (its ``[K]`` tables are copied
        there once, on first use)."""
        p = self._on(action_index.device)
        return SamplingParams(*(t[action_index] for t in (p.temperature, p.top_k, p.top_p, p.min_p, p.greedy)))

    def _on(self, device: torch.device) -> SamplingParams:
        """The ``[K]`` parameter tables on ``device``."""
        if device not in self._params_on:
            p = self._params
            self._params_on[device] = SamplingParams(
                *(t.to(device) for t in (p.temperature, p.top_k, p.top_p, p.min_p, p.greedy))
            )
        return self._params_on[device]

    def to_json(self) -> list[dict]:
        return [a.to_dict() for a in self.actions]


# ---- transforms: pure functions over [batch, vocab] logits; none modifies its input in place ----


def apply_temperature(logits: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
    """``logits / T`` row-wise; ``temperature`` is ``[batch]`` and must be > 0."""
    return logits / temperature.unsqueeze(-1).to(logits.dtype)


def _top_k_mask(sorted_asc: torch.Tensor, top_k: torch.Tensor) -> torch.Tensor:
    """Mask (True = remove) in ascending-sorted order for per-row top-k; k = 0 keeps everything."""
    vocab = sorted_asc.shape[-1]
    k = torch.where(top_k > 0, top_k.clamp(max=vocab), torch.full_like(top_k, vocab))
    kth_largest = sorted_asc.gather(-1, (vocab - k).unsqueeze(-1))  # [batch, 1]
    return sorted_asc < kth_largest  # ties with the k-th are kept, as in HF


def _top_p_mask(sorted_asc: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Mask in ascending-sorted order for per-row nucleus sampling (HF's formula, row-wise p)."""
    cumulative = sorted_asc.softmax(dim=-1).cumsum(dim=-1)
    mask = cumulative <= (1 - top_p).unsqueeze(-1).to(cumulative.dtype)
    mask[..., -1] = False  # always keep the most likely token
    return mask & (top_p < 1).unsqueeze(-1)  # p = 1 means off: remove nothing, not even 0-mass tokens


def apply_top_k(logits: torch.Tensor, top_k: torch.Tensor) -> torch.Tensor:
    """Per-row top-k (``top_k`` long ``[batch]``, 0 = off); removed tokens get ``-inf``."""
    sorted_asc, order = logits.sort(dim=-1)
    remove = _top_k_mask(sorted_asc, top_k)
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))


def apply_top_p(logits: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Per-row top-p (``top_p`` float ``[batch]`` in (0, 1]; 1 = off)."""
    sorted_asc, order = logits.sort(dim=-1)
    remove = _top_p_mask(sorted_asc, top_p)
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))


def apply_min_p(logits: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """Per-row min-p (``min_p`` float ``[batch]``; 0 = off): drop p < min_p * max p (HF's formula)."""
    probs = logits.softmax(dim=-1)
    threshold = min_p.unsqueeze(-1).to(probs.dtype) * probs.amax(dim=-1, keepdim=True)
    return logits.masked_fill(probs < threshold, float("-inf"))


def _apply_top_k_top_p(logits: torch.Tensor, top_k: torch.Tensor | None, top_p: torch.Tensor | None) -> torch.Tensor:
    """top-k then top-p with a single sort: after top-k the removed tokens are the smallest, so the
    ascending order is unchanged and top-p can reuse it."""
    sorted_asc, order = logits.sort(dim=-1)
    remove = torch.zeros_like(sorted_asc, dtype=torch.bool)
    if top_k is not None:
        remove = _top_k_mask(sorted_asc, top_k)
        sorted_asc = sorted_asc.masked_fill(remove, float("-inf"))
    if top_p is not None:
        remove = remove | _top_p_mask(sorted_asc, top_p)
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))


def transform_logits(
    logits: torch.Tensor,
    params: SamplingParams,
    *,
    use_top_k: bool = True,
    use_top_p: bool = True,
    use_min_p: bool = True,
) -> torch.Tensor:
    """Temperature -> top-k -> top-p -> min-p over ``[batch, vocab]`` float logits.

    The ``use_*`` flags are fast paths: pass False when no row needs that transform (rows with the
    neutral value are unaffected either way). Greedy rows are transformed with T = 1 and should be
    decided by ``sample`` from the raw logits.
    """
    logits = apply_temperature(logits.float(), params.temperature)
    if use_top_k or use_top_p:
        logits = _apply_top_k_top_p(logits, params.top_k if use_top_k else None, params.top_p if use_top_p else None)
    if use_min_p:
        logits = apply_min_p(logits, params.min_p)
    return logits


# ---- randomness: a counter-based generator, one stream per row -------------------------------

_GOLDEN = 0x9E3779B97F4A7C15  # splitmix64's increment (2^64 / golden ratio)
_MIX1, _MIX2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
TOKEN_STREAM, ACTION_STREAM = 0, 1
"""Stream ids of ``counter_uniform``: the token draw and the chooser's action draw of a step."""


def _int64(value: int) -> int:
    """``value`` mod 2^64 as a signed 64-bit integer (torch's int64 arithmetic wraps the same way)."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 (``>>`` on a signed tensor is arithmetic)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def _mix64(x: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser on int64 ``x`` (bijective; every output bit depends on every input bit)."""
    x = (x ^ _shift_right(x, 30)) * _int64(_MIX1)
    x = (x ^ _shift_right(x, 27)) * _int64(_MIX2)
    return x ^ _shift_right(x, 31)


def counter_uniform(
    seeds: torch.Tensor, step: int | torch.Tensor, stream: int = TOKEN_STREAM, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """One U[0, 1) draw per row, a pure function of ``(seeds[i], step, stream)``: long ``[B]`` -> ``[B]``.

    A counter-based generator (splitmix64 applied twice: once to ``seed`` and ``stream``, once to
    that key plus the step), computed for the whole batch in a few int64 tensor ops. A row's draws
    therefore depend on its seed and the step only, never on its batch-mates, and need no
    ``torch.Generator`` per row. float64 draws carry 53 random bits, float32 draws 24 (so a float32
    draw is never rounded up to 1)."""
    bits = {torch.float64: 53, torch.float32: 24}.get(dtype)
    if bits is None:
        raise ValueError(f"counter_uniform makes float32 or float64 draws, not {dtype}")
    key = _mix64(seeds.long() + _int64(stream * _GOLDEN))
    # step: an int, or a long tensor (a device scalar a CUDA graph reads at replay); int64 wraps mod 2^64 alike
    counter = (step + 1) * _int64(_GOLDEN) if isinstance(step, torch.Tensor) else _int64((step + 1) * _GOLDEN)
    z = _mix64(key + counter)
    return _shift_right(z, 64 - bits).to(dtype) * 2.0 ** -bits


# ---- sampling ---------------------------------------------------------------------------------


def sampling_weights(transformed_logits: torch.Tensor) -> torch.Tensor:
    """Unnormalised probabilities ``exp(x - max x)`` of ``[batch, vocab]`` logits (``-inf`` -> 0)."""
    return (transformed_logits - transformed_logits.amax(dim=-1, keepdim=True)).exp()


def inverse_cdf_sample(weights: torch.Tensor, uniform: torch.Tensor, block: int = 256) -> torch.Tensor:
    """Token per row, long ``[batch]``, drawn from ``weights / weights.sum()`` by the inverse CDF at
    ``uniform`` (``[batch]`` in [0, 1)).

    Two levels, so that no long float32 cumsum swallows small probabilities: float32 sums of
    ``block`` tokens (relative error ~1e-7 of a block's mass) accumulated in float64 pick the block,
    then a float64 cumsum inside that block picks the token.
    A token of weight 0 is never returned (rounding at a boundary falls back to the last positive
    entry)."""
    rows, vocab = weights.shape
    blocks_n = -(-vocab // block)
    if blocks_n * block != vocab:
        weights = torch.nn.functional.pad(weights, (0, blocks_n * block - vocab))
    blocks = weights.view(rows, blocks_n, block)
    block_cdf = blocks.sum(-1).to(torch.float64).cumsum(-1)  # [rows, blocks]; float32 sums of <= block entries
    target = (uniform.to(torch.float64) * block_cdf[:, -1]).unsqueeze(-1)  # [rows, 1]
    # The first block reaching the total is the last one with mass.
    b = torch.minimum(torch.searchsorted(block_cdf, target, right=True),
                      torch.searchsorted(block_cdf, block_cdf[:, -1:].contiguous()))
    below = torch.where(b > 0, block_cdf.gather(-1, (b - 1).clamp(min=0)), torch.zeros_like(target))
    inner = blocks.gather(1, b.unsqueeze(-1).expand(rows, 1, block)).squeeze(1)
    inner = inner.to(torch.float64).cumsum(-1)  # [rows, block]
    j = torch.minimum(torch.searchsorted(inner, target - below, right=True),
                      torch.searchsorted(inner, inner[:, -1:].contiguous()))
    return (b * block + j).squeeze(-1)


def _uniforms(rows: int, generator, device) -> torch.Tensor:
    """One float64 uniform per row from ``generator`` (one for the batch, or a list with one per row:
    then row ``i`` draws from ``generator[i]`` only, so its stream never depends on the other rows)."""
    if not isinstance(generator, (list, tuple)):
        return torch.rand(rows, generator=generator, dtype=torch.float64, device=device)
    if len(generator) != rows:
        raise ValueError(f"got {len(generator)} generators for {rows} rows")
    return torch.cat([torch.rand(1, generator=g, dtype=torch.float64, device=device) for g in generator])


def sample(
    raw_logits: torch.Tensor,
    transformed_logits: torch.Tensor,
    greedy: torch.Tensor,
    generator: torch.Generator | Sequence[torch.Generator] | None = None,
    *,
    uniform: torch.Tensor | None = None,
    all_greedy: bool = False,
) -> torch.Tensor:
    """Next token per row, long ``[batch]``.

    Greedy rows take ``argmax(raw_logits)``; the others are drawn from ``softmax(transformed_logits)``
    by the inverse CDF at one uniform per row: ``uniform`` (``[batch]``, e.g. from
    ``counter_uniform``) or drawn from ``generator`` (see ``_uniforms``). With ``all_greedy`` nothing
    is drawn at all. Inputs are not modified."""
    greedy_tokens = raw_logits.argmax(dim=-1)
    if all_greedy:
        return greedy_tokens
    if uniform is None:
        uniform = _uniforms(raw_logits.shape[0], generator, raw_logits.device)
    sampled = inverse_cdf_sample(sampling_weights(transformed_logits.float()), uniform)
    return torch.where(greedy, greedy_tokens, sampled)


def token_logprobs(transformed_logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log-probability ``[batch]`` of ``tokens`` under the transformed distribution they were sampled
    from (for analysis; REINFORCE uses the policy's action log-probs, not these)."""
    return transformed_logits.log_softmax(dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
