"""Prompts prefilled once and reused: each prompt's keys, values, last hidden state and logits.

Sequential attempts (``decoding.attempts``) decode one round per ``decode`` call, and every call
would prefill its prompts again. A ``PromptCache`` handed to ``decode`` (``prompt_cache=``) keeps
what the prefill made of each prompt (per layer its keys and values ``[kv_heads, len, head_dim]``,
its last hidden state ``[hidden]`` and float32 logits ``[vocab]``) and gives it back to the next
call that decodes the prompt: only the prompts not found are prefilled, and the row cache is filled
from both as if all had been prefilled together.

Reuse changes no bit: it is used only where a prompt's prefill does not depend on the prompts
prefilled beside it (``FrozenLM.start_decode``: the packed prefill, or length groups without padding
under ``ModelSpec.batch_invariant``), so a row's keys and values are the same whether its prompt was
prefilled in this call, in an earlier one beside other prompts, or alone. An entry is used only by
the LM, dtype, device and way of prefilling that made it; another replaces it.

Entries are kept in least-recently-used order under a byte cap (``max_bytes``); ``discard`` drops a
prompt its owner is done with (``AttemptRounds`` drops a problem's prompt when the problem stops).
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

__all__ = ["PROMPT_CACHE_BYTES", "PromptCache", "Prefill"]

PROMPT_CACHE_BYTES = 1 << 30
"""The default cap of a ``PromptCache``, 1 GiB: the default LM (30 layers, 3 KV heads of 64) keeps
23 KB of keys and values per prompt token in bf16 (46 KB in float32) and 0.2 MB of logits per
prompt, so a chat prompt of ~100 tokens takes ~2.5 MB (~5 MB in float32): the cap holds ~200-400
such prompts, more than a round of attempts or the server's batch decodes at once, in memory
that a machine running the LM has to spare."""

Prefill = Callable[[Sequence[Sequence[int]]], tuple]
"""A prefill of ``FrozenLM`` (``_prefill_packed`` and the like): prompts -> (last hidden ``[P, hidden]``,
float32 logits ``[P, vocab]``, per layer ``(keys, values)`` ``[P, kv_heads, W, head_dim]`` left-padded
to the longest prompt, the mask ``[P, W]``)."""


@dataclass(frozen=True)
class _Entry:
    """One prompt's prefill: ``kv`` ``[layers, 2, kv_heads, len, head_dim]``, ``hidden`` ``[hidden]``,
    ``logits`` ``[vocab]``, and ``maker``: what made it (``PromptCache._maker``)."""

    kv: torch.Tensor
    hidden: torch.Tensor
    logits: torch.Tensor
    maker: tuple

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.kv, self.hidden, self.logits))


class PromptCache:
    """Prefilled prompts by token tuple, least recently used evicted past ``max_bytes`` (module docstring)."""

    def __init__(self, max_bytes: int = PROMPT_CACHE_BYTES):
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"max_bytes must be an int >= 0, got {max_bytes!r}")
        self.max_bytes = max_bytes
        """The most bytes the entries hold together; an entry that alone exceeds it is not kept."""
        self._entries: OrderedDict[tuple[int, ...], _Entry] = OrderedDict()
        self.nbytes = 0
        """Bytes the entries hold now."""
        self.hits = 0
        """Prompts given back instead of prefilled, over the cache's life."""
        self.misses = 0
        """Prompts prefilled (not found, or found made by another LM or dtype)."""

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, prompt: Sequence[int]) -> bool:
        return tuple(prompt) in self._entries

    def discard(self, prompt: Sequence[int]) -> None:
        """Forget ``prompt`` (nothing happens if it is not here)."""
        entry = self._entries.pop(tuple(prompt), None)
        if entry is not None:
            self.nbytes -= entry.nbytes

    def clear(self) -> None:
        self._entries.clear()
        self.nbytes = 0

    @staticmethod
    def _maker(lm, how: str) -> tuple:
        """What an entry must have been made by to be reused: this LM object (a weak reference: an LM
        freed and another made at its address is another LM), its dtype, device and spec, and the way
        of prefilling (``how``)."""
        return weakref.ref(lm), lm.dtype, lm.device, lm.spec, how

    def prefill(self, lm, prompts: Sequence[Sequence[int]], prefill: Prefill, how: str) -> tuple:
        """What ``prefill(prompts)`` returns, the prompts found here (made by ``lm`` the same ``how``)
        given back and only the others prefilled (then kept)."""
        maker = self._maker(lm, how)
        found: dict[int, _Entry] = {}
        for i, prompt in enumerate(prompts):
            entry = self._entries.get(tuple(prompt))
            if entry is not None and entry.maker == maker:
                self._entries.move_to_end(tuple(prompt))
                found[i] = entry
        missing = [i for i in range(len(prompts)) if i not in found]
        self.hits, self.misses = self.hits + len(found), self.misses + len(missing)
        made = prefill([prompts[i] for i in missing]) if missing else None
        for slot, i in enumerate(missing):
            entry = _entry_of(made, slot, len(prompts[i]), maker)
            self._keep(tuple(prompts[i]), entry)
            found[i] = entry
        if len(found) == len(missing):  # nothing was found: the prefill's own output
            return made
        return _assemble([found[i] for i in range(len(prompts))], lm.device)

    def _keep(self, key: tuple[int, ...], entry: _Entry) -> None:
        self.discard(key)
        if entry.nbytes > self.max_bytes:
            return
        self._entries[key] = entry
        self.nbytes += entry.nbytes
        while self.nbytes > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self.nbytes -= evicted.nbytes


def _entry_of(made: tuple, slot: int, length: int, maker: tuple) -> _Entry:
    """Prompt ``slot`` of a prefill's output (``Prefill``), its ``length`` columns copied out of the
    left-padded keys and values."""
    hidden, logits, layer_kv, mask = made
    width = mask.shape[1]
    kv = torch.stack([torch.stack((k[slot, :, width - length:], v[slot, :, width - length:])) for k, v in layer_kv])
    return _Entry(kv, hidden[slot].clone(), logits[slot].clone(), maker)


def _assemble(entries: list[_Entry], device: torch.device) -> tuple:
    """The ``Prefill`` output of ``entries`` in order: keys and values left-padded to the longest
    prompt (zeros in the padding, as the prefills leave it), the mask 1 on each prompt's columns."""
    lengths = torch.tensor([e.kv.shape[3] for e in entries], device=device)
    width = int(lengths.max())
    layers, _, kv_heads, _, head_dim = entries[0].kv.shape
    kv = entries[0].kv.new_zeros(layers, 2, len(entries), kv_heads, width, head_dim)
    for row, entry in enumerate(entries):
        kv[:, :, row, :, width - entry.kv.shape[3]:] = entry.kv
    layer_kv = [(kv[layer, 0], kv[layer, 1]) for layer in range(layers)]
    mask = (torch.arange(width, device=device) >= width - lengths[:, None]).long()  # [P, W], left-padded
    hidden = torch.stack([e.hidden for e in entries])
    logits = torch.stack([e.logits for e in entries])
    return hidden, logits, layer_kv, mask
