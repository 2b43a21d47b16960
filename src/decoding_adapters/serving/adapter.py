"""``Adapter``: one public handle on a trained decoding adapter, for use in other decoding stacks.

    from decoding_adapters import Adapter
    adapter = Adapter.from_pretrained("runs/tok")                 # sequence or token adapter
    # this project's own batched decode loop (as behind `generate` and `serve`), on the base model
    gen = Adapter.from_pretrained("runs/tok", lm="base").generator()
    # transformers, token adapter: the adapter picks an action at every token of model.generate
    with adapter.logits_processor(model) as lp:
        out = model.generate(**inputs, max_new_tokens=64, **lp.generate_kwargs())
    # transformers, sequence adapter: one GenerationConfig per prompt (needs the LM for embeddings)
    adapter = Adapter.from_pretrained("runs/seq", lm="smollm2")
    configs = adapter.generation_config(["What is 2+3?"], n=4)
    # vLLM, sequence adapter: one SamplingParams (or its keyword dict) per prompt
    params = adapter.sampling_params(["What is 2+3?"], n=4, max_tokens=256)

It wraps ``policies.load_adapter`` / ``AdapterConfig`` / ``check_compatible``: an adapter is only
ever used with an LM whose hidden size and vocabulary match the one it was trained on.

``lm`` is what the adapter runs beside: a ``FrozenLM``, a ``ModelSpec`` or a model name/path (loaded
with ``load_frozen_lm``), or None. A sequence adapter needs it (it chooses from the LM's prompt
embedding); a token adapter used through ``logits_processor(model)`` does not (the hook reads the
hidden states of the ``model`` it is given, which is checked instead).

Greedy and ``n``: HF ``generate`` and vLLM >= 0.33 both reject greedy decoding with more than one
return sequence; B greedy completions are identical anyway, so a prompt whose chosen action is
greedy gets ``n = 1`` (``num_return_sequences = 1``): repeat that completion if you need B copies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence, Union

import torch

from ..decoding.actions import DEFAULT_TOKEN_BUDGET, DecodingAction
from ..decoding.loop import row_seed
from ..decoding.vllm_rollouts import sampling_params_dict
from ..lm.models import DEFAULT_DEVICE, DEFAULT_DTYPE, FrozenLM, ModelSpec, load_frozen_lm, locate_model
from ..policies.abandon import AbandonRule, load_abandon_rule, remove_abandon_rule, save_abandon_rule
from ..policies.kind_sequence import SEQUENCE
from ..policies.kind_token import TOKEN
from ..policies.kinds import AdapterKind
from ..policies.networks import AdapterConfig, categorical_from_uniform, check_compatible, load_adapter, save_adapter
from ..tasks import task_from_record
from .generator import AdaptiveGenerator
from .integrations.hf import AdapterLogitsProcessor

__all__ = ["Adapter", "Prompt"]

Prompt = Union[str, list[dict]]
"""A user message as text, or a chat (list of ``{"role", "content"}`` messages)."""


def _as_chat(prompt: Prompt, position: int) -> list[dict]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if (
        isinstance(prompt, (list, tuple))
        and prompt
        and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in prompt
        )
    ):
        return [{"role": m["role"], "content": m["content"]} for m in prompt]
    raise ValueError(
        f"prompt {position} must be a string or a non-empty list of {{'role', 'content'}} messages, got {prompt!r:.80}"
    )


_USE_INSTEAD = {
    TOKEN: "adapter.logits_processor(model), or adapter.generator()",
    SEQUENCE: "adapter.generation_config(...) / sampling_params(...), or adapter.generator()",
}
"""What decodes with an adapter of a kind, for the error of a method made for another kind."""
# a draft-gated adapter decodes a draft, then maybe re-decodes: only this project's loop does both
_ONLY_GENERATOR = ("adapter.generator(): Adapter.from_pretrained(dir, lm='base').generator().generate(prompts); "
                   "it has no transformers or vLLM form")


def _as_prompt_list(prompts: Prompt | Sequence[Prompt]) -> list[Prompt]:
    """A bare string or a single chat is one prompt; otherwise a sequence of prompts."""
    if isinstance(prompts, str) or (
        isinstance(prompts, (list, tuple)) and prompts and all(isinstance(m, dict) for m in prompts)
    ):
        return [prompts]
    prompts = list(prompts)
    if not prompts:
        raise ValueError("no prompts given")
    return prompts


class Adapter:
    """A trained decoding adapter (policy + action set + config), optionally bound to its LM."""

    def __init__(
        self, policy: torch.nn.Module, config: AdapterConfig, lm: FrozenLM | None = None, name: str = "adapter",
        abandon: AbandonRule | None = None,
    ):
        self.policy, self.config, self.name = policy.eval(), config, name
        self.abandon = abandon
        """An attempt adapter's abandon rule (``policies.abandon``: attempts cut at its checkpoints), or None."""
        self.actions: list[DecodingAction] = config.action_list
        expected = config.policy.get("num_actions")
        if expected is not None and expected != config.adapter_kind.outputs(len(self.actions)):  # + keep the draft
            raise ValueError(
                f"adapter policy has {expected} outputs but its action set has {len(self.actions)} actions"
            )
        self.lm: FrozenLM | None = None
        if lm is not None:
            self.bind(lm)

    # ---- loading -----------------------------------------------------------------------------
    @classmethod
    def from_pretrained(
        cls,
        directory: str | Path,
        lm: FrozenLM | ModelSpec | str | None = None,
        *,
        device: str = DEFAULT_DEVICE,
        dtype: str | None = None,
    ) -> "Adapter":
        """Load the adapter saved in ``directory`` (``adapter.json`` + ``adapter.safetensors``, and an
        attempt adapter's abandon rule where the directory holds ``abandon.json`` + ``abandon.safetensors``).

        ``lm``: a ``FrozenLM``, a ``ModelSpec``, a model name/path (loaded on ``device`` in ``dtype``;
        ``"base"`` loads the adapter's own base model, ``config.base_model``, also looked for next to
        the adapter when it is a relative path), or None. A model whose hidden size or vocabulary
        differs from the adapter's base model raises ``ValueError``. ``dtype`` None: the dtype the
        adapter was trained with (``lm_dtype``), else ``auto``."""
        directory = Path(directory)
        policy, config = load_adapter(directory)
        abandon = load_abandon_rule(directory)
        dtype = dtype or config.lm_dtype or DEFAULT_DTYPE
        if isinstance(lm, str) and lm == "base":
            lm = _own_base_model(config.base_model, directory)
        if isinstance(lm, (str, ModelSpec)):
            spec = lm if isinstance(lm, ModelSpec) else ModelSpec(name_or_path=lm, device=device, dtype=dtype)
            lm = load_frozen_lm(spec)
        return cls(policy, config, lm, name=directory.resolve().name, abandon=abandon)

    def save_pretrained(self, directory: str | Path) -> Path:
        """Write the adapter (``adapter.safetensors`` + ``adapter.json``, and its abandon rule) to ``directory``."""
        out = save_adapter(directory, self.policy, self.config)
        if self.abandon is not None:
            save_abandon_rule(directory, self.abandon)
        else:  # a rule left from an earlier save would cut attempts this adapter does not
            remove_abandon_rule(directory)
        return out

    def bind(self, lm: FrozenLM) -> "Adapter":
        """Use ``lm`` from now on, after checking that it matches the adapter's base model."""
        check_compatible(self.config, lm)
        self._check_hidden_size(lm.hidden_size)
        self.lm = lm
        self.policy.to(lm.device)
        return self

    def _check_hidden_size(self, hidden_size: int) -> None:
        self.config.adapter_kind.check_lm(self.config, hidden_size)

    def check_model(self, model, tokenizer=None) -> None:
        """Check a raw HF causal LM (and optionally its tokenizer) against the adapter's base model."""
        self._check_hidden_size(int(model.config.hidden_size))
        want = self.config.base_fingerprint.get("vocab_size")
        rows = int(model.get_output_embeddings().weight.shape[0])
        have = len(tokenizer) if tokenizer is not None else rows
        # The fingerprint records len(tokenizer); without a tokenizer the LM head may be padded past it.
        if want is not None and (want != have if tokenizer is not None else want > rows):
            raise ValueError(
                f"adapter was trained on {self.config.base_model!r} (vocab_size={want}) but the given model "
                f"has vocab_size={have}: use it with its own base model."
            )

    # ---- identity ----------------------------------------------------------------------------
    @property
    def kind(self) -> str:
        return self.config.kind

    @property
    def adapter_kind(self) -> AdapterKind:
        """The kind object (``policies.kinds``) that says how this adapter decodes."""
        return self.config.adapter_kind

    @property
    def features(self) -> str:
        """Token adapter input: 'hidden' (final hidden state) or 'entropy' (the ablation)."""
        return self.config.policy.get("features", "hidden")

    @property
    def action_names(self) -> list[str]:
        return [a.name for a in self.actions]

    @property
    def token_budget(self) -> int:
        """The token adapter's training budget b (its remaining-budget feature is scaled by it)."""
        return int(self.config.policy.get("token_budget", DEFAULT_TOKEN_BUDGET))

    @property
    def base_model_path(self) -> str:
        """Where transformers' ``from_pretrained`` finds the adapter's base model: the cached
        safetensors copy of the embedded default or of a ``.gguf`` (converted on first use), a local
        HF directory, or a hub id (``decoding-adapters model-path --adapter DIR`` prints it)."""
        return locate_model(self.config.base_model)

    def __repr__(self) -> str:
        base = self.config.base_model
        return f"Adapter({self.name!r}, kind={self.kind}, base_model={base!r}, actions={self.action_names})"

    # ---- sequence adapter: one action per prompt ----------------------------------------------
    @property
    def policy_mode(self) -> str:
        """'sample' or 'argmax': how the adapter picks actions by default (stored in adapter.json;
        the mode ``evaluate`` reports by default; see ``policies.default_policy_mode``)."""
        return self.config.policy_mode

    def deterministic(self, deterministic: bool | None = None) -> bool:
        """``deterministic``, or (None) whether the adapter's stored mode is argmax. Every method
        here that takes ``deterministic`` defaults to None: the adapter's mode."""
        return self.policy_mode == "argmax" if deterministic is None else bool(deterministic)

    def _require(self, kind: AdapterKind, what: str) -> None:
        if self.adapter_kind is not kind:
            other = _USE_INSTEAD.get(self.adapter_kind, _ONLY_GENERATOR)
            raise ValueError(f"{what} needs a {kind.name} adapter; this one is a {self.kind} adapter (use {other})")

    @torch.inference_mode()
    def choose(
        self, prompts: Prompt | Sequence[Prompt], n: int = 1, *, deterministic: bool | None = None, seed: int = 0
    ) -> tuple[list[int], torch.Tensor]:
        """Sequence adapter: the action index per prompt and pi(a | e, B=n) ``[P, K]`` (CPU).

        ``deterministic`` takes the most likely action; otherwise prompt i's action is drawn with the
        uniform of ``row_seed(seed, i, "policy")`` (as ``AdaptiveGenerator`` does); None: the
        adapter's stored ``policy_mode``."""
        self._require(SEQUENCE, "choosing one action per prompt")
        deterministic = self.deterministic(deterministic)
        if self.lm is None:
            raise ValueError(
                "a sequence adapter chooses from the LM's prompt embedding: load it with "
                "Adapter.from_pretrained(dir, lm=...) or call adapter.bind(FrozenLM(model, tokenizer))"
            )
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n (the parallel budget B) must be an integer >= 1, got {n!r}")
        prompts = _as_prompt_list(prompts)
        ids = self.lm.encode_chat([_as_chat(p, i) for i, p in enumerate(prompts)])
        emb = self.lm.prompt_embeddings(ids, pooling=self.config.embedding.get("pooling", "mean"))
        device = next(self.policy.parameters()).device
        probs = self.policy.probs(emb.to(device), torch.full((len(ids),), n, device=device)).float().cpu()
        if deterministic:
            return probs.argmax(-1).tolist(), probs
        uniform = torch.stack(
            [
                torch.rand((), generator=torch.Generator().manual_seed(row_seed(seed, i, "policy")))
                for i in range(len(ids))
            ]
        )
        return categorical_from_uniform(probs, uniform).tolist(), probs

    def generation_config(
        self,
        prompts: Prompt | Sequence[Prompt],
        n: int = 1,
        *,
        max_new_tokens: int | None = None,
        deterministic: bool | None = None,
        seed: int = 0,
        **extra,
    ) -> list:
        """Sequence adapter: one ``transformers.GenerationConfig`` per prompt for ``model.generate``.

        Every sampling field is set explicitly (temperature 1, top_k 0, top_p 1, min_p 0 when the
        action leaves them off), so the model's own ``generation_config`` defaults cannot leak in.
        ``extra`` is passed to every ``GenerationConfig`` (e.g. ``eos_token_id``)."""
        from transformers import GenerationConfig

        chosen, _ = self.choose(prompts, n, deterministic=deterministic, seed=seed)
        return [
            GenerationConfig(**generation_kwargs(self.actions[a], n), max_new_tokens=max_new_tokens, **extra)
            for a in chosen
        ]

    def sampling_params_dicts(
        self,
        prompts: Prompt | Sequence[Prompt],
        n: int = 1,
        *,
        max_tokens: int = DEFAULT_TOKEN_BUDGET,
        seed: int | None = None,
        deterministic: bool | None = None,
        **extra,
    ) -> list[dict]:
        """Sequence adapter: vLLM ``SamplingParams`` keyword arguments per prompt (no vLLM needed).

        ``seed`` (optional) gives prompt i the vLLM seed ``row_seed(seed, i)``; ``extra`` is merged into
        every dict (e.g. ``stop_token_ids``)."""
        chosen, _ = self.choose(prompts, n, deterministic=deterministic, seed=seed or 0)
        out = []
        for i, a in enumerate(chosen):
            action = self.actions[a]
            d = sampling_params_dict(
                action, max_tokens, None if seed is None else row_seed(seed, i), n=1 if action.is_greedy else n
            )
            out.append({**d, **extra})
        return out

    def sampling_params(self, prompts: Prompt | Sequence[Prompt], n: int = 1, **kwargs) -> list:
        """Sequence adapter: one ``vllm.SamplingParams`` per prompt (see ``sampling_params_dicts``)."""
        try:
            from vllm import SamplingParams
        except ImportError as err:
            raise ImportError(
                "vllm is not installed: `pip install decoding-adapters[vllm]`, or use "
                "adapter.sampling_params_dicts(...) for the plain keyword dicts"
            ) from err
        return [SamplingParams(**d) for d in self.sampling_params_dicts(prompts, n, **kwargs)]

    # ---- this project's own decode loop ---------------------------------------------------------
    def generator(self, max_batch_rows: int = 64, task=None, data=None,
                  verifier: str | None = None) -> AdaptiveGenerator:
        """An ``AdaptiveGenerator`` on the bound LM: this project's batched decode loop, the one behind
        ``generate`` and ``serve``. ``max_batch_rows`` bounds the rows (prompts x B) of one decode.
        ``task``: where the adapter stops at the first complete answer (``config.stop_at_answer``,
        as it was trained), the task that says where (default: the adapter's own, by the name it
        was trained on, rebuilt from the options ``adapter.json`` records);
        ``data``: that task with other data files (``--data``), where the recorded ones are gone;
        ``verifier``: the task's verifier of your own (``module:function``), named again to run it (a
        recorded one is code the adapter's files cannot vouch for, so it is not run unasked). An
        attempt adapter's abandon rule (:attr:`abandon`) cuts its attempts there."""
        if task is None and (data is not None or verifier is not None) and self.config.task:
            task = task_from_record(self.config.task, self.config.task_options, data=data, verifier=verifier)
        if self.lm is None:
            raise ValueError(
                "the project's decode loop needs the LM: load with Adapter.from_pretrained(dir, lm='base') "
                "(its own base model) or lm=<model>, or bind one"
            )
        return AdaptiveGenerator(self.policy, self.config, self.lm, name=self.name, max_batch_rows=max_batch_rows,
                                 task=task, abandon=self.abandon)

    # ---- token adapter: one action per token ---------------------------------------------------
    def logits_processor(
        self,
        model,
        *,
        tokenizer=None,
        token_budget: int | None = None,
        deterministic: bool | None = None,
        seed: int = 0,
    ):
        """Token adapter: an ``AdapterLogitsProcessor`` for ``model.generate`` (a context manager that
        installs the hidden-state hook on enter and removes it on exit); see ``integrations.hf``.
        It chooses the actions only: an adapter trained with the stop at the first answer
        (``config.stop_at_answer``) ends there in ``generator()``; with ``model.generate`` pass a
        stopping criterion for it (the task's ``answer_complete``)."""
        self._require(TOKEN, "a per-token logits processor")
        self.check_model(model, tokenizer)
        return AdapterLogitsProcessor(
            self, model, token_budget=token_budget, deterministic=self.deterministic(deterministic), seed=seed
        )


def _own_base_model(base_model: str, adapter_dir: Path) -> str:
    """``base_model`` as recorded in adapter.json; a relative path that does not exist from here but
    does next to the adapter (a base model saved beside it) is taken from there."""
    path = Path(base_model).expanduser()
    if not path.is_absolute() and not path.exists() and (adapter_dir / base_model).exists():
        return str(adapter_dir / base_model)
    return base_model


def generation_kwargs(action: DecodingAction, n: int = 1) -> dict:
    """``GenerationConfig`` sampling fields for one action, every one explicit (none left to defaults)."""
    if action.is_greedy:  # no sampling: generate applies no warper, and a sampling field set here would
        # only make transformers warn that it is ignored; None keeps each unset whatever the model's defaults
        return {
            "do_sample": False,
            "num_return_sequences": 1,
            "temperature": None,
            "top_k": None,
            "top_p": None,
            "min_p": None,
        }
    return {
        "do_sample": True,
        "num_return_sequences": n,
        "temperature": float(action.temperature),
        "top_k": int(action.top_k or 0),
        "top_p": float(action.top_p if action.top_p is not None else 1.0),
        "min_p": float(action.min_p or 0.0),
    }
