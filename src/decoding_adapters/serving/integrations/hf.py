"""A token adapter inside transformers' ``model.generate``: a ``LogitsProcessor`` fed by a forward hook.

    with adapter.logits_processor(model) as lp:          # installs one forward hook on the decoder
        out = model.generate(**inputs, max_new_tokens=64, **lp.generate_kwargs())
    # the hook is gone here; lp.actions holds the action index per row and step

How it works, per generation step (``generate``'s ``_sample`` loop):

1. the model's forward runs; a forward hook on its decoder (``model.get_decoder()``, the transformer
   without the LM head) keeps the final hidden state of the last position, ``[B, H]`` — the state
   that produced this step's logits (after the final norm, as our own decode loop sees it);
2. ``generate`` calls the logits processors with ``(input_ids, scores [B, V])``; ours builds the
   adapter's observation (hidden state or base entropy, remaining budget b - t), picks an action per
   row (argmax, or a draw from a seeded ``torch.Generator``), and applies that row's action:
   temperature -> top-k -> top-p -> min-p with the project's per-row transforms. A **greedy** row
   becomes one-hot on the argmax of the raw scores (0 there, -inf elsewhere), so ``do_sample=True``
   draws exactly the greedy token;
3. ``generate`` samples from ``softmax`` of what we return.

``generate`` appends its own warpers (temperature, top-k, top-p, min-p from the generation config,
the model's defaults filling unset fields) *after* custom processors, so they must be neutral:
``lp.generate_kwargs()`` returns ``do_sample=True, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0`` plus the
processor list. Other custom processors (repetition penalty, ...) placed before ours change the
scores the adapter sees, as they would in our own loop.

The hook lives exactly as long as the ``with`` block (``__exit__`` removes it, also on error);
calling the processor outside the block raises. Beam search is not supported (rows are reordered
between steps and the hidden states would not follow them).
"""

from __future__ import annotations

import torch

from ...decoding.loop import base_entropy
from ...policies.networks import categorical_from_uniform
from .rows import ActionTable, greedy_one_hot

__all__ = ["AdapterLogitsProcessor", "greedy_one_hot"]

try:  # subclass transformers' LogitsProcessor when it is importable (it always is for this package)
    from transformers import LogitsProcessor as _HFLogitsProcessor
except ImportError:  # pragma: no cover
    _HFLogitsProcessor = object


class AdapterLogitsProcessor(_HFLogitsProcessor):
    """A token adapter as a transformers ``LogitsProcessor`` (see the module docstring).

    Args:
        adapter: a token ``Adapter``.
        model: the HF causal LM that ``generate`` runs (already checked against the adapter).
        token_budget: b for the remaining-budget feature ``b - t`` (default: the adapter's training
            budget); pass the same value as ``max_new_tokens``.
        deterministic: take the adapter's most likely action (default) or sample it.
        seed: seeds the action draws when ``deterministic`` is False.
    """

    def __init__(self, adapter, model, *, token_budget: int | None = None, deterministic: bool = True, seed: int = 0):
        self.adapter, self.model = adapter, model
        self.token_budget = adapter.token_budget if token_budget is None else int(token_budget)
        if self.token_budget < 1:
            raise ValueError(f"token_budget must be >= 1, got {token_budget}")
        self.deterministic, self.seed = deterministic, seed
        self.device = next(model.parameters()).device
        self.policy = adapter.policy.to(self.device).eval()
        self.table = ActionTable(adapter.actions, self.device)
        self.actions: list[torch.Tensor] = []
        """Per step, the action index ``[B]`` chosen for every row (CPU)."""
        self._handle = None
        self._hidden: torch.Tensor | None = None
        self._prompt_len: int | None = None
        self._last_len, self._prefilled = -1, False
        self._generator: torch.Generator | None = None

    # ---- lifetime of the hook ----------------------------------------------------------------
    def __enter__(self) -> "AdapterLogitsProcessor":
        if self._handle is not None:
            raise RuntimeError("this logits processor is already active; use one `with` block at a time")
        self._handle = self.model.get_decoder().register_forward_hook(self._keep_hidden)
        self.reset()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Remove the hook (idempotent)."""
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        self._hidden = None

    def reset(self) -> None:
        """Forget the previous generation (prompt length, recorded actions, RNG): one per ``generate``."""
        self.actions, self._prompt_len = [], None
        self._generator = torch.Generator(self.device).manual_seed(int(self.seed))

    def _keep_hidden(self, module, args, output) -> None:
        hidden = output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0]
        self._hidden = hidden[:, -1].detach()  # [B, H]: left padding puts every row's last token last
        self._prefilled = self._prefilled or hidden.shape[1] > 1

    def generate_kwargs(self) -> dict:
        """What to pass to ``model.generate`` besides the inputs: this processor and neutral warpers."""
        from transformers import LogitsProcessorList

        return {"logits_processor": LogitsProcessorList([self]), "do_sample": True,
                "temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "num_beams": 1}

    # ---- the step ----------------------------------------------------------------------------
    @torch.no_grad()
    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        if self._handle is None or self._hidden is None:
            raise RuntimeError("use the processor inside `with adapter.logits_processor(model) as lp:` "
                               "(its hook feeds the hidden states)")
        if self._hidden.shape[0] != scores.shape[0]:
            raise RuntimeError(f"hidden states for {self._hidden.shape[0]} rows but scores for {scores.shape[0]}: "
                               f"beam search and assisted decoding are not supported")
        length = input_ids.shape[1]
        # A new generate call: a multi-token (prefill) forward ran, or input_ids did not grow by one.
        if self._prompt_len is None or self._prefilled or length != self._last_len + 1:
            self.reset()
            self._prompt_len = length
        self._prefilled, self._last_len = False, length
        action = self.choose(scores, input_ids.shape[1] - self._prompt_len)
        self.actions.append(action.cpu())
        return self.table.transform(scores, action).to(scores.dtype)

    def choose(self, scores: torch.Tensor, step: int) -> torch.Tensor:
        """Action index ``[B]`` for this step from the kept hidden state and the raw scores."""
        rows = scores.shape[0]
        entropy, _ = base_entropy(scores)
        remaining = torch.full((rows,), max(self.token_budget - step, 1), device=scores.device)
        obs = self.policy.observation(self._hidden.to(scores.device), entropy, remaining)
        probs = self.policy.probs(obs)
        if self.deterministic:
            return probs.argmax(-1)
        uniform = torch.rand(rows, generator=self._generator, device=self._generator.device)
        return categorical_from_uniform(probs, uniform.to(probs.device))

    @property
    def action_matrix(self) -> torch.Tensor:
        """``[B, steps]`` action indices of the last generation (rows stay in ``generate``'s order)."""
        return torch.stack(self.actions, dim=1) if self.actions else torch.empty(0, 0, dtype=torch.long)
