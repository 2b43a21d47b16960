"""The adapter file format: ``adapter.json`` (``AdapterConfig``, its fields checked by ``bounds`` and
read as the file meant them) beside ``adapter.safetensors``, written by ``save_adapter`` and read back
by ``load_adapter``; ``check_compatible`` refuses a base LM the adapter was not trained on, and
``add_evaluation`` adds an evaluation to the directory's model card. The policies themselves live in
``networks``."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path

from safetensors.torch import load_file, save_file
from torch import nn

from ..core.files import atomic_write, write_json
from ..decoding.actions import DecodingAction
from ..decoding.protocol import STOP_AT_ANSWER, STOP_OF_UNMARKED_FILES
from .bounds import check_adapter_fields, parse_json
from .kinds import POLICY_MODES, adapter_kind
from .model_card import EVALUATIONS_FILE, evaluation_label, read_evaluations, read_results, write_model_card

__all__ = [
    "AdapterConfig",
    "POLICY_MODES",
    "default_policy_mode",
    "resolve_policy_mode",
    "save_adapter",
    "add_evaluation",
    "load_adapter",
    "read_adapter_config",
    "check_compatible",
]


def default_policy_mode(kind: str) -> str:
    """The mode an adapter of ``kind`` is evaluated and served with unless told otherwise.

    The paper's pseudocode (``SeqSelectStrategy`` / ``TokSelectStrategy``) offers both (a
    ``deterministic`` flag) and does not say which its tables use; we follow what each level's text
    describes and what REINFORCE optimises:

    - token adapters: ``sample``. REINFORCE maximises the expected reward of the *stochastic* policy
      (every training rollout draws s_t ~ Categorical(p_t)); its argmax is a different policy that
      was never trained nor validated. The paper's token-level analysis describes how the learned
      policy *allocates* stochasticity across tokens, i.e. its distribution over actions.
    - sequence adapters: ``argmax``. The paper's sequence-level adapter "commits to a single decoding
      strategy per prompt" for a given parallel budget; validation during training takes the argmax.

    ``evaluate``, ``generate``, ``serve``, ``AdaptiveGenerator`` and ``Adapter`` all default to the
    adapter's stored ``policy_mode`` (this default when none is stored), so the number a report
    prints describes what a user gets by default. Draft-gated adapters (a sequence policy over the
    draft's summary) follow sequence adapters."""
    return adapter_kind(kind).default_policy_mode


def resolve_policy_mode(mode: str | None, kind: str) -> str:
    """``mode`` checked against :data:`POLICY_MODES`, or the default of ``kind`` when None."""
    if mode is None:
        return default_policy_mode(kind)
    if mode not in POLICY_MODES:
        raise ValueError(f"policy_mode must be one of {list(POLICY_MODES)}, got {mode!r}")
    return mode


@dataclass
class AdapterConfig:
    """Everything needed to use a trained adapter again (saved as ``adapter.json``)."""

    kind: str
    """A registered adapter kind (``policies.kinds``): 'sequence', 'token' or 'draft'."""
    policy: dict
    """The SequencePolicyConfig (sequence and draft adapters) / TokenPolicyConfig fields."""
    actions: list[dict]
    """The action set, as DecodingAction dicts, in policy-output order (draft adapters: the
    re-decode actions, outputs 1.. of the policy; output 0 keeps the draft)."""
    base_model: str
    """ModelSpec.name_or_path of the frozen LM it was trained on."""
    base_fingerprint: dict
    """hidden_size and vocab size of that LM: loading onto a mismatched LM fails clearly."""
    embedding: dict = field(default_factory=lambda: {"pooling": "mean"})
    """How prompt embeddings are made (sequence adapters)."""
    parallel_budgets: list[int] = field(default_factory=list)
    """Parallel budgets B seen in training (sequence adapters)."""
    token_budget: int | None = None
    """Token budget b of training (every kind: the rollouts its rewards came from were decoded at it)."""
    task: str = ""
    task_options: dict | None = None
    """The ``get_task`` options of ``task`` it was trained with (``tasks.task_record``: data paths
    absolute, the fields or question template, the instruction, the verifier), so that its generator
    rebuilds the task (the answer check) without them being typed again; None: the task's defaults."""
    training: dict = field(default_factory=dict)
    lm_dtype: str | None = None
    """dtype of the frozen LM's weights in training (e.g. ``bfloat16``): the policy's input features
    were computed in it, so using the adapter with another dtype warns (once). None: the
    ``base_fingerprint``'s dtype, when that has one."""
    policy_mode: str | None = None
    """'sample' or 'argmax': the mode it is evaluated and served with (None: the kind's default,
    :func:`default_policy_mode`)."""
    trained_on: dict | None = None
    """``tasks.problems_record`` (count, digest, content hashes) of the problems it was trained on."""
    selected_on: dict | None = None
    """Sequence adapters: ``problems_record`` of the problems its action set was selected on."""
    draft: dict | None = None
    """Draft-gated adapters: the ``policies.draft.DraftContextConfig`` fields (which summary of the
    greedy draft the policy reads, and the draft's token budget)."""
    stop_at_answer: bool = STOP_AT_ANSWER
    """Each sample it decodes (a draft-gated adapter: its draft and re-decodes) ends at the task's
    first complete answer (``Task.answer_complete``), as it was trained and is served and evaluated
    (the protocol's default, ``decoding.protocol.STOP_AT_ANSWER``). An ``adapter.json`` without the
    field (written before the stop was the protocol) reads ``STOP_OF_UNMARKED_FILES`` (False): it
    decodes to the budget, as it was trained."""

    def __post_init__(self) -> None:
        kind = adapter_kind(self.kind)
        kind.check(self)
        for name, typ in (("policy", dict), ("actions", list), ("base_fingerprint", dict), ("base_model", str)):
            if not isinstance(getattr(self, name), typ):
                raise ValueError(f"adapter field {name!r} must be a {typ.__name__}, got {getattr(self, name)!r}")
        if self.lm_dtype is None:
            self.lm_dtype = self.base_fingerprint.get("dtype")
        try:
            shape = kind.policy_config(self.policy)
        except TypeError as err:  # a missing or unknown policy field
            raise ValueError(f"adapter 'policy' does not describe a {self.kind} policy: {err}") from None
        actions = self.action_list  # validates every action
        if shape.num_actions != kind.outputs(len(actions)):  # a draft policy's output 0 keeps the draft
            raise ValueError(f"adapter policy has {shape.num_actions} outputs but {len(actions)} actions are listed")
        kind.check_fingerprint(self)
        self.policy_mode = resolve_policy_mode(self.policy_mode, self.kind)

    @property
    def adapter_kind(self):
        """The kind object (``policies.kinds``) that says how this adapter decodes, is scored and served."""
        return adapter_kind(self.kind)

    @property
    def seen_hashes(self) -> set[str]:
        """Content hashes of every problem it was trained or selected on (empty when not recorded)."""
        return {h for rec in (self.trained_on, self.selected_on) if rec for h in rec.get("content_hashes", [])}

    @classmethod
    def from_dict(cls, data: dict) -> "AdapterConfig":
        """Read ``adapter.json``. Anything but an object with exactly the known fields (the required
        ones present) is a ValueError."""
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object of adapter fields, got {type(data).__name__}")
        check_adapter_fields(data)  # types and bounds of every number, before anything is built from them
        known = {f.name: f for f in fields(cls)}
        missing = [n for n, f in known.items() if n not in data and f.default is MISSING
                   and f.default_factory is MISSING]
        data = _legacy_stop(data)
        unknown = sorted(set(data) - set(known))
        if unknown or missing:
            raise ValueError(
                "adapter fields do not match"
                + (f"; unknown: {unknown}" if unknown else "") + (f"; missing: {missing}" if missing else "")
            )
        return cls(**data)

    @property
    def action_list(self) -> list[DecodingAction]:
        return [DecodingAction.from_dict(a) for a in self.actions]

    def build_policy(self) -> nn.Module:
        """A fresh (untrained) policy of this adapter's kind and shape."""
        return self.adapter_kind.build_policy(self.policy)


def _legacy_stop(data: dict) -> dict:
    """``adapter.json`` fields with the stop read as the file meant it: no ``stop_at_answer`` is
    False (the adapter decoded to the budget), except a draft-gated adapter whose draft context
    carries the two flags it once had (draft and re-decodes), which must agree."""
    if "stop_at_answer" in data:
        return data
    data = dict(data)
    draft = data.get("draft")
    legacy = ("draft_stop_at_answer", "redecode_stop_at_answer")
    if isinstance(draft, dict) and any(k in draft for k in legacy):
        flags = {bool(draft.get(k, False)) for k in legacy}
        if len(flags) > 1:
            given = ", ".join(f"{k}={draft.get(k)}" for k in legacy)
            raise ValueError(f"this draft-gated adapter stops its draft and its re-decodes differently ({given}): "
                             "one stop_at_answer now covers both")
        data["draft"] = {k: v for k, v in draft.items() if k not in legacy}
        data["stop_at_answer"] = flags.pop()
    else:
        data["stop_at_answer"] = STOP_OF_UNMARKED_FILES
    return data


def save_adapter(directory: str | Path, policy: nn.Module, config: AdapterConfig) -> Path:
    """Write ``adapter.safetensors`` and ``adapter.json`` atomically into ``directory``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in policy.state_dict().items()}
    atomic_write(directory / "adapter.safetensors", lambda tmp: save_file(state, str(tmp)))
    write_json(directory / "adapter.json", asdict(config))  # last: its presence marks a complete adapter
    write_model_card(directory, config)  # README.md beside adapter.json: the directory describes itself
    return directory


def add_evaluation(adapter_dir: str | Path, eval_dir_or_results: str | Path | Mapping) -> Path:
    """Add an evaluation to the model card of ``adapter_dir`` (an ``evaluate`` output directory, a
    ``results.json`` path, or the results mapping). Evaluations are kept per task and split
    (``evaluations.json`` beside the card): a later one on another task or split is added as its own
    table, labelled with its size; one on the same task and split replaces the earlier."""
    adapter_dir = Path(adapter_dir)
    config = read_adapter_config(adapter_dir)
    key, label = evaluation_label(eval_dir_or_results)
    store = read_evaluations(adapter_dir)
    store[key] = {"label": label, "results": dict(read_results(eval_dir_or_results))}
    write_json(adapter_dir / EVALUATIONS_FILE, store)
    return write_model_card(adapter_dir, config, evaluations=store)


def load_adapter(directory: str | Path, lm=None) -> tuple[nn.Module, AdapterConfig]:
    """Load an adapter; with ``lm`` (a FrozenLM), check that it matches the adapter's base model."""
    directory = Path(directory)
    if not (directory / "adapter.json").is_file():
        raise FileNotFoundError(
            f"{directory} holds no adapter.json: point at a directory written by train-token / train-sequence "
            "or Adapter.save_pretrained."
        )
    config = read_adapter_config(directory)
    if lm is not None:
        check_compatible(config, lm)
    policy = config.build_policy()
    weights = directory / "adapter.safetensors"
    try:
        state = load_file(str(weights))
    except FileNotFoundError:
        raise FileNotFoundError(f"{weights} not found: the adapter directory is incomplete") from None
    except Exception as err:  # safetensors raises its own error type on a truncated or corrupt file
        raise ValueError(f"{weights}: unreadable weights ({err}); the file is truncated or corrupt") from None
    try:
        policy.load_state_dict(state)
    except RuntimeError as err:  # missing, unexpected or mis-shaped tensors
        first = str(err).strip().splitlines()[0]
        raise ValueError(f"{weights} does not fit the policy {directory / 'adapter.json'} describes: {first}") from None
    return policy.eval(), config


def read_adapter_config(directory: str | Path) -> AdapterConfig:
    """``DIR/adapter.json`` as an ``AdapterConfig``; any problem is a one-line ValueError naming the file."""
    path = Path(directory) / "adapter.json"
    try:
        return AdapterConfig.from_dict(parse_json(path.read_text(encoding="utf-8"), path.name))
    except (ValueError, TypeError, UnicodeDecodeError) as err:  # JSONDecodeError is a ValueError
        raise ValueError(f"{path}: {err}") from None


_DTYPE_WARNED: set[tuple[str, str, str]] = set()


def check_compatible(config: AdapterConfig, lm) -> None:
    """Refuse an LM whose hidden or vocabulary size differs from the adapter's base model; warn
    (once per base model and dtype pair) when its dtype differs from the one used in training."""
    want, have = config.base_fingerprint, lm.fingerprint()
    dtype = have.get("dtype")
    if config.lm_dtype and dtype and dtype != config.lm_dtype:
        key = (config.base_model, config.lm_dtype, dtype)
        if key not in _DTYPE_WARNED:
            _DTYPE_WARNED.add(key)
            warnings.warn(
                f"adapter for {config.base_model!r} was trained with the LM in {config.lm_dtype} and is used with "
                f"{dtype}: its input features shift slightly, so its choices may differ (use --dtype "
                f"{config.lm_dtype} to match)",
                stacklevel=2,
            )
    for key in ("hidden_size", "vocab_size"):
        if key in want and want[key] != have[key]:
            raise ValueError(
                f"adapter was trained on {config.base_model!r} ({key}={want[key]}) "
                f"but the given model has {key}={have[key]}: load it onto its own base model."
            )
