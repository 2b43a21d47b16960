"""Adapter kinds: what every kind of adapter must say about itself, and the registry that finds one
by the ``kind`` of its ``adapter.json``.

A kind is one object (a subclass of :class:`AdapterKind`, one module each: ``kind_sequence``,
``kind_token``, ``kind_draft``, ``kind_rule``, ``kind_attempt``) registered with
:func:`register_kind`. Everything that differs between kinds is asked of that object; no other
module compares a kind's name with a string:

- what the policy reads as context (``context``, ``policy_config``, ``input_width``) and how many
  outputs it has (``outputs``: a draft-gated policy's output 0 keeps the draft);
- how it decodes one batch (``per_token``: a chooser at every token inside the decode loop;
  otherwise one choice per prompt, before decoding or, with ``keeps_draft``, after a greedy draft);
- its default policy mode (``default_policy_mode``);
- how an evaluation names and places it (``level``, ``role``, ``method_name``);
- what its model card says (``label``, ``card_inputs``, ``card_usage``) and which command trains it
  (``trainer``).

Layers above ``policies`` that need a behaviour this layer cannot know (evaluation's keys and
scores, the server's stream) read these flags and hooks; see ``docs/architecture.md``, "Adding an
adapter kind".
"""

from __future__ import annotations

from typing import ClassVar

__all__ = ["AdapterKind", "register_kind", "adapter_kind", "kind_names", "POLICY_MODES", "KEEP_DRAFT_NAME"]

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
    per_token: ClassVar[bool] = False
    """True: the policy picks an action at every generated token (a chooser inside the decode loop);
    False: one choice per prompt, all its completions decoded with it."""
    keeps_draft: ClassVar[bool] = False
    """True: a greedy draft is decoded first, and the policy's output 0 keeps it (outputs 1.. are
    re-decode actions); its answers are scored as a draft plus conditional re-decodes."""
    attempts: ClassVar[bool] = False
    """True: sequential attempts (``decoding.attempts.sequential_attempts``): the stopped greedy
    first, then, round by round, one more attempt of the arm its decider (``decider``) picks for each
    problem still going, until the decider stops it (``attempt_plan`` gives the arms' limits); scored
    as answer accuracy at its mean attempts. False for one choice per prompt, per token, or a draft."""
    default_policy_mode: ClassVar[str] = "argmax"
    """The mode (:data:`POLICY_MODES`) it is evaluated and served with unless its ``adapter.json`` says
    otherwise (``networks.default_policy_mode`` gives the reasons)."""
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

    def outputs(self, num_actions: int) -> int:
        """Policy outputs for ``num_actions`` listed actions (one more when output 0 keeps a draft)."""
        return num_actions + int(self.keeps_draft)

    def output_names(self, action_names: list[str]) -> list[str]:
        """Names of the policy's outputs, in order."""
        return ([KEEP_DRAFT_NAME] if self.keeps_draft else []) + list(action_names)

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
