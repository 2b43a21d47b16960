"""The learned verifier: the probability that one attempt's answer is right, from that attempt alone.

    v(f_i) = sigmoid(mlp(f_i)),   f_i = [standardised confidence columns, length / budget,
                                         (answer tokens' probabilities), W_h * standardised mean hidden state]

It reads what a sample table stores per attempt (``AttemptInputs``: the confidence summary, the
generated tokens, the mean hidden state) and nothing about the other attempts or which arm drew it,
so one verifier scores the attempts of any decoder. An attempt that states no answer scores 0 (it
casts no vote and cannot be right). Every fixed rule can read ``v`` in place of its confidence
(``policies.fixed_rules``: the verifier-reading variants); the attempt policy's own per-attempt
weight is the same kind of score learned jointly with its stop.

Saved as ``verifier.safetensors`` (weights and the standardisation buffers) and ``verifier.json``
(``VerifierConfig`` and what training recorded); ``load_verifier`` reads it back on its own, with no
LM and no adapter around it. Training: ``training.verifier``.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from ..core.files import atomic_write, write_json
from ..decoding.actions import DEFAULT_TOKEN_BUDGET
from .attempt import ANSWER_PROB_COLUMNS, AttemptInputs

__all__ = ["VERIFIER_FEATURE_SETS", "VERIFIER_FORMAT", "VerifierConfig", "Verifier", "save_verifier",
           "load_verifier", "attempt_mask", "single_thread"]

VERIFIER_FEATURE_SETS = ("confidence", "answer_probs", "hidden")
"""What the verifier may read of an attempt (module docstring)."""

VERIFIER_FORMAT = "decoding-adapters/verifier"
"""The ``format`` in ``verifier.json``."""


@dataclass(frozen=True)
class VerifierConfig:
    """The verifier's shape and what it reads (saved in ``verifier.json``)."""

    confidence_names: tuple[str, ...]
    """The confidence columns of the tables it scores, in order (matched by name when scoring)."""
    features: tuple[str, ...] = ("confidence", "hidden")
    """Feature sets read (``VERIFIER_FEATURE_SETS``)."""
    hidden_size: int = 0
    """Width of the tables' mean hidden state (0: none)."""
    hidden_proj: int = 8
    """Width of the learned projection of the hidden state (with ``hidden``)."""
    width: int = 64
    """Hidden width of the scoring network."""
    token_budget: int = DEFAULT_TOKEN_BUDGET
    """Token budget of the attempts (the length feature is a fraction of it)."""

    def __post_init__(self) -> None:
        unknown = [f for f in self.features if f not in VERIFIER_FEATURE_SETS]
        if unknown or not self.features:
            raise ValueError(f"unknown or no verifier features {unknown}; choose from {list(VERIFIER_FEATURE_SETS)}")
        if "hidden" in self.features and self.hidden_size < 1:
            raise ValueError("the hidden feature set needs hidden_size >= 1 (tables with hidden states)")
        if self.width < 1 or self.hidden_proj < 1 or self.token_budget < 1:
            raise ValueError("width, hidden_proj and token_budget must be >= 1")

    @property
    def trace_columns(self) -> tuple[int, ...]:
        """Indices of the confidence columns read with ``confidence``."""
        return tuple(i for i, n in enumerate(self.confidence_names) if n not in ANSWER_PROB_COLUMNS)

    @property
    def answer_columns(self) -> tuple[int, ...]:
        """Indices of the confidence columns read with ``answer_probs``."""
        return tuple(i for i, n in enumerate(self.confidence_names) if n in ANSWER_PROB_COLUMNS)

    @property
    def input_dim(self) -> int:
        """Width of one attempt's feature vector."""
        d = 0
        if "confidence" in self.features:
            d += len(self.trace_columns) + 1  # and the length fraction
        if "answer_probs" in self.features:
            d += len(self.answer_columns)
        if "hidden" in self.features:
            d += self.hidden_proj
        return max(d, 1)

    @classmethod
    def from_dict(cls, data: dict) -> "VerifierConfig":
        """From ``verifier.json``'s ``config`` (lists read back as tuples); an unknown field raises TypeError."""
        fields_ = dict(data)
        for name in ("confidence_names", "features"):
            if isinstance(fields_.get(name), list):
                fields_[name] = tuple(fields_[name])
        return cls(**fields_)


@contextlib.contextmanager
def single_thread():
    """Run the body with one torch thread, then restore the caller's count: a float reduction's order
    can follow the number of threads torch splits it over, and a verifier's weights and scores must
    not depend on the machine's thread count (the network is small: one thread costs seconds)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def attempt_mask(answers: torch.Tensor, distinct) -> torch.Tensor:
    """``[P, A, N]`` bool: the attempt is distinct (a greedy arm's repeated slots counted once) and
    states an answer: the attempts a verifier is trained and judged on."""
    distinct = torch.as_tensor(list(distinct))
    slot = torch.arange(answers.shape[2])[None, :] < distinct[:, None]  # [A, N]
    return slot[None] & (answers >= 0)


class Verifier(nn.Module):
    """The scoring network, the hidden projection and the standardisation (buffers saved with the weights)."""

    def __init__(self, config: VerifierConfig):
        super().__init__()
        self.config = config
        c = len(config.confidence_names)
        self.register_buffer("conf_mean", torch.zeros(c))
        self.register_buffer("conf_std", torch.ones(c))
        h = max(1, config.hidden_size)
        self.register_buffer("hidden_mean", torch.zeros(h))
        self.register_buffer("hidden_std", torch.ones(h))
        self.hidden_proj = nn.Linear(h, config.hidden_proj, bias=False)
        self.net = nn.Sequential(nn.Linear(config.input_dim, config.width), nn.Tanh(), nn.Linear(config.width, 1))

    def set_standardisation(self, inputs: AttemptInputs, distinct) -> None:
        """Means and scales of the confidence columns and hidden states over the distinct attempts of
        ``inputs`` (the training attempts; NaN entries skipped)."""
        slot = attempt_mask(torch.zeros_like(inputs.answers), distinct)[0]  # [A, N]
        conf = inputs.confidence[:, slot].reshape(-1, inputs.confidence.shape[-1]).double()
        finite = torch.isfinite(conf)
        count = finite.sum(0).clamp(min=1)
        mean = torch.where(finite, conf, 0.0).sum(0) / count
        var = torch.where(finite, (conf - mean) ** 2, 0.0).sum(0) / count
        self.conf_mean.copy_(mean.float())
        self.conf_std.copy_(var.sqrt().clamp(min=1e-6).float())
        if inputs.hidden is not None and self.config.hidden_size:
            hid = inputs.hidden[:, slot].reshape(-1, inputs.hidden.shape[-1]).double()
            self.hidden_mean.copy_(hid.mean(0).float())
            self.hidden_std.copy_(hid.std(0).clamp(min=1e-6).float())

    def features(self, inputs: AttemptInputs) -> torch.Tensor:
        """``[P, A, N, F]`` each attempt's feature vector."""
        cfg = self.config
        conf = (inputs.confidence.float() - self.conf_mean) / self.conf_std
        conf = torch.nan_to_num(conf, nan=0.0, posinf=0.0, neginf=0.0).clamp(-8, 8)
        parts = []
        if "confidence" in cfg.features:
            parts.append(conf[..., list(cfg.trace_columns)])
            parts.append((inputs.tokens.float() / cfg.token_budget).unsqueeze(-1))
        if "answer_probs" in cfg.features:
            parts.append(conf[..., list(cfg.answer_columns)])
        if "hidden" in cfg.features:
            if inputs.hidden is None:
                raise ValueError("this verifier reads hidden states: the table has none")
            parts.append(self.hidden_proj((inputs.hidden.float() - self.hidden_mean) / self.hidden_std))
        return torch.cat(parts, dim=-1)

    def logits(self, inputs: AttemptInputs) -> torch.Tensor:
        """``[P, A, N]`` the score before the sigmoid (what training differentiates)."""
        return self.net(self.features(inputs)).squeeze(-1)

    def score(self, inputs: AttemptInputs) -> torch.Tensor:
        """``[P, A, N]`` the probability each attempt is right (0 for an attempt without an answer)."""
        with torch.no_grad(), single_thread():
            return torch.sigmoid(self.logits(inputs)) * (inputs.answers >= 0)

    def inputs_from_table(self, table) -> AttemptInputs:
        """A ``SampleTable``'s attempts with its confidence columns in this verifier's order (by name)."""
        inputs = AttemptInputs.from_table(table)
        names = list(table.confidence_names)
        missing = [n for n in self.config.confidence_names if n not in names]
        if missing:
            raise ValueError(f"the table lacks the confidence columns {missing} the verifier reads")
        columns = [names.index(n) for n in self.config.confidence_names]
        inputs.confidence = inputs.confidence[..., columns]
        if "hidden" not in self.config.features:
            inputs.hidden = None
        elif inputs.hidden is None or inputs.hidden.shape[-1] != self.config.hidden_size:
            raise ValueError(f"the verifier reads hidden states of width {self.config.hidden_size}: the table has "
                             f"{None if inputs.hidden is None else inputs.hidden.shape[-1]}")
        return inputs

    def score_table(self, table) -> torch.Tensor:
        """``[P, A, N]`` the probability each attempt of a ``SampleTable`` is right."""
        return self.score(self.inputs_from_table(table))


def save_verifier(directory: str | Path, verifier: Verifier, training: dict | None = None) -> Path:
    """Write ``verifier.safetensors`` and ``verifier.json`` atomically into ``directory``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().clone() for k, v in verifier.state_dict().items()}
    atomic_write(directory / "verifier.safetensors", lambda tmp: save_file(state, str(tmp)))
    write_json(directory / "verifier.json", {"format": VERIFIER_FORMAT, "config": asdict(verifier.config),
                                             "training": json.loads(json.dumps(training or {}))})
    return directory


def load_verifier(directory: str | Path) -> tuple[Verifier, dict]:
    """The verifier (in eval mode) and its ``verifier.json``."""
    directory = Path(directory)
    meta_path = directory / "verifier.json"
    if not meta_path.is_file():
        raise FileNotFoundError(f"{directory} holds no verifier (no verifier.json)")
    meta = json.loads(meta_path.read_text())
    if meta.get("format") != VERIFIER_FORMAT:
        raise ValueError(f"{meta_path} is not a verifier (format {meta.get('format')!r})")
    verifier = Verifier(VerifierConfig.from_dict(meta["config"]))
    verifier.load_state_dict(load_file(str(directory / "verifier.safetensors")))
    return verifier.eval(), meta
