"""Adapter kinds: what every kind of adapter must say about itself, and the registry that finds one
by the ``kind`` of its ``adapter.json``.

A kind is one object (a subclass of :class:`AdapterKind`, one module each: ``kind_sequence``,
``kind_token``, ``kind_draft``, ``kind_attempt``, ``kind_rule``) registered with :func:`register_kind`.
Everything that differs between kinds is asked of that object; no other module compares a kind's
name with a string:

- what the policy reads as context (``context``, ``policy_config``, ``input_width``) and how many
  outputs it has (``outputs``: a draft-gated policy's output 0 keeps the draft);
- how it decodes one batch (``decoding``: one of the :class:`Decoding` objects below: one action
  per prompt, a chooser at every token, a greedy draft then a re-decode, or sequential attempts);
- its default policy mode (``default_policy_mode``);
- how an evaluation names and places it (``level``, ``role``, ``method_name``);
- what its model card says (``label``, ``card_inputs``, ``card_usage``) and which command trains it
  (``trainer``).

Layers above ``policies`` that need a behaviour this layer cannot know (evaluation's keys and
scores, the generator's decode, the server's responses) map each :class:`Decoding` to a handler of
their own once (``evaluation.plans.adapter_plan``, ``serving.decoders.decoder_for``) and call it;
see ``docs/architecture.md``, "Adding an adapter kind".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

__all__ = [
    "AdapterKind",
    "register_kind",
    "adapter_kind",
    "kind_names",
    "POLICY_MODES",
    "KEEP_DRAFT_NAME",
    "Decoding",
    "ONE_PER_PROMPT",
    "PER_TOKEN",
    "DRAFT_THEN_REDECODE",
    "SEQUENTIAL_ATTEMPTS",
    "DECODINGS",
]


@dataclass(frozen=True)
class Decoding:
    """One way an adapter kind decodes a batch. Kinds that decode the same way share the object; a
    layer above keys its handlers by it (a dict built once), so a new way is one new object and one
    handler in each such dict, never a flag that callers test."""

    name: str
    """Short name (for messages and the architecture page)."""
    description: str
    """What the adapter does, in words."""


ONE_PER_PROMPT = Decoding("per prompt", "one action per prompt, chosen from the prompt embedding (and the parallel "
                          "budget B) before decoding; all B completions of the prompt use it")
PER_TOKEN = Decoding("per token", "a chooser picks an action at every generated token, inside the decode loop")
DRAFT_THEN_REDECODE = Decoding("draft, then re-decode", "a greedy draft first; the policy's output 0 keeps it, "
                               "output k + 1 re-decodes with action k")
SEQUENTIAL_ATTEMPTS = Decoding("sequential attempts", "the stopped greedy first, then, round by round, one more "
                               "attempt of the arm its decider picks for each problem still going, until it stops")
DECODINGS = (ONE_PER_PROMPT, PER_TOKEN, DRAFT_THEN_REDECODE, SEQUENTIAL_ATTEMPTS)
"""Every way a kind decodes (the handlers' dicts above this layer cover each)."""

POLICY_MODES = ("sample", "argmax")
"""How a trained adapter picks its action when it is used: a draw from pi, or its most likely action."""

KEEP_DRAFT_NAME = "keep draft"
"""The name of a draft-gated policy's output 0 (``output_names``; ``Generation.action_names``)."""


class AdapterKind:
    """One kind of adapter. Subclasses set the class attributes and implement the hooks; one
    instance per kind lives in the registry (:func:`adapter_kind`)."""

    name: ClassVar[str]
    """The ``kind`` written in ``adapter.json`` (and ``Method.kind`` in an evaluation)."""
    label: ClassVar[str]
    """How the model card names it (``A **<label> decoding adapter**``)."""
    level: ClassVar[str]
    """The evaluation table it belongs to: 'sequence' or 'token'."""
    context: ClassVar[str]
    """What its policy reads, in words (the architecture page's table of kinds)."""
    decoding: ClassVar[Decoding] = ONE_PER_PROMPT
    """How it decodes one batch (:data:`DECODINGS`): one action per prompt before decoding, a chooser
    at every token, a greedy draft then a re-decode (output 0 keeps the draft), or sequential attempts
    (``decoding.attempts.sequential_attempts`` with ``decider``, limits from ``attempt_plan``)."""
    default_policy_mode: ClassVar[str] = "argmax"
    """The mode (:data:`POLICY_MODES`) it is evaluated and served with unless its ``adapter.json`` says
    otherwise (``adapter_files.default_policy_mode`` gives the reasons)."""
    trainer: ClassVar[str]
    """The sub-command that trains it (its trainer lives in ``training/``)."""

    # ---- the policy ------------------------------------------------------------------------------
    def policy_config(self, policy: dict):
        """The policy's shape (a frozen config dataclass) from ``adapter.json``'s ``policy``; a
        missing or unknown field raises TypeError."""
        raise NotImplementedError

    def build_policy(self, policy: dict):
        """A fresh policy module of that shape (weights loaded afterwards)."""
        raise NotImplementedError

    @property
    def report_group(self) -> str:
        """Which verdicts the report gives it: its ``level`` (``sequence`` / ``token``), or ``draft``."""
        return self.level

    @property
    def per_token(self) -> bool:
        """Its decoding is :data:`PER_TOKEN` (what a policy's size bounds and the vLLM model ask)."""
        return self.decoding is PER_TOKEN

    @property
    def keeps_draft(self) -> bool:
        """Its decoding is :data:`DRAFT_THEN_REDECODE`."""
        return self.decoding is DRAFT_THEN_REDECODE

    @property
    def attempts(self) -> bool:
        """Its decoding is :data:`SEQUENTIAL_ATTEMPTS`."""
        return self.decoding is SEQUENTIAL_ATTEMPTS

    def outputs(self, num_actions: int) -> int:
        """Policy outputs for ``num_actions`` listed actions (more where it has outputs of its own)."""
        return num_actions

    def output_names(self, action_names: list[str]) -> list[str]:
        """Names of the policy's outputs, in order."""
        return list(action_names)

    def runs_on_logits(self, policy: dict) -> bool:
        """Whether a policy of this shape (``adapter.json``'s ``policy``) decides from the next-token
        logits alone, so a logits processor that sees no hidden state can run it."""
        return False

    def check(self, config) -> None:
        """Validate the kind's own fields of an ``AdapterConfig`` (ValueError); by default the
        policy must read LM features of the base model's hidden size, and no ``draft`` field."""
        if config.draft is not None:
            raise ValueError("a draft-gated adapter (and only one) needs the 'draft' field")

    def check_fingerprint(self, config) -> None:
        """The policy must read features of ``base_fingerprint``'s hidden size."""
        hidden = config.base_fingerprint.get("hidden_size")
        width = self.policy_input_width(config)
        if hidden is not None and self.input_width(config, hidden) not in (None, width):
            raise ValueError(
                f"adapter policy expects LM features of size {width} but base_fingerprint.hidden_size is {hidden}"
            )

    def check_lm(self, config, hidden_size: int) -> None:
        """The policy's input width must fit an LM of ``hidden_size`` (also when the fingerprint lacks it)."""
        want, have = self.input_width(config, hidden_size), self.policy_input_width(config)
        if want is not None and want != have:
            raise ValueError(
                f"{self.label} adapter (base model {config.base_model!r}) reads {have} features but on a model "
                f"with hidden_size={hidden_size} its context has {want}: use it with its own base model."
            )

    def input_width(self, config, hidden_size: int) -> int | None:
        """The context width the policy must read on an LM of ``hidden_size``, or None when it does
        not depend on the LM (e.g. an entropy-only policy)."""
        raise NotImplementedError

    def policy_input_width(self, config) -> int:
        """The context width the stored policy reads."""
        raise NotImplementedError

    # ---- sequential attempts (kinds with ``attempts``) -------------------------------------------
    def attempt_plan(self, config) -> dict:
        """``first_arm``, ``distinct`` (attempts per arm at most), ``max_attempts`` and ``with_hidden``
        (the decider reads mean hidden states) of an adapter that decodes sequential attempts."""
        raise NotImplementedError

    def decider(self, policy, config):
        """The ``decoding.attempts.AttemptDecider`` of an adapter of this kind (its loaded policy)."""
        raise NotImplementedError

    # ---- evaluation ------------------------------------------------------------------------------
    def role(self, config) -> str:
        """Its column in the paper's tables ('w/ budget', 'w/o budget', 'entropy-only', ...)."""
        return "w/ budget" if config.policy.get("use_budget", True) else "w/o budget"

    def method_name(self, role: str) -> str:
        """The evaluation's default display name of an adapter of this kind and ``role``."""
        raise NotImplementedError

    # ---- model card ------------------------------------------------------------------------------
    def card_inputs(self, config) -> str:
        """What the model card says the policy decides from (one clause)."""
        raise NotImplementedError

    def card_usage(self, config, name: str) -> list[str]:
        """Python lines of the model card's "How to use" (``name``: the adapter's path)."""
        raise NotImplementedError


_REGISTRY: dict[str, AdapterKind] = {}


def register_kind(kind: AdapterKind) -> AdapterKind:
    """Add ``kind`` to the registry (its module calls this on import); a name taken twice is an error."""
    if kind.name in _REGISTRY and type(_REGISTRY[kind.name]) is not type(kind):
        raise ValueError(f"adapter kind {kind.name!r} is registered twice")
    _REGISTRY[kind.name] = kind
    return kind


def adapter_kind(name: str) -> AdapterKind:
    """The registered kind called ``name`` (ValueError naming the known ones otherwise)."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"adapter kind must be one of {list(_REGISTRY)}, got {name!r}") from None


def kind_names() -> tuple[str, ...]:
    """Names of the registered kinds, in registration order."""
    return tuple(_REGISTRY)
