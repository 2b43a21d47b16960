"""Decode prompts with a trained adapter: the library behind ``generate`` and ``serve``.

    gen = Adapter.from_pretrained("runs/tok", lm="base").generator()   # the adapter on its base model
    out = gen.generate(["What is 2+3?"], token_budget=64, parallel_budget=4, seed=0)
    out[0].completions   # 4 strings
    out[0].actions       # sequence adapter: one action name; token adapter: names per token per completion

How the adapter decides (by default in the adapter's stored ``policy_mode``, the mode ``evaluate``
reports by default: a draw from pi for token adapters, the argmax for sequence adapters; see
``policies.default_policy_mode``; ``deterministic_policy=True/False`` overrides it):
- **sequence adapter**: one action per prompt from (prompt embedding e, parallel budget B), the
  argmax of pi(a | e, B) or a draw. All B completions of that prompt use the chosen action.
- **token adapter**: an action at every generated token of every completion, from the LM's hidden
  state (and the remaining token budget): a draw from pi, or its argmax.
- **draft-gated adapter**: a greedy draft first, then, from the draft's summary and B, keep it or
  re-decode with one action (``policies.draft.draft_gated_decode``, the function evaluation calls
  too). The draft is one of the B completions (at B = 1 a re-decode replaces it);
  ``Generation.draft_kept`` and ``decodes`` say which happened and what it cost. Streaming sends the
  final answers' tokens: a kept draft's (or, at B > 1, the draft's) once the choice is made, then the
  re-decodes' as they are generated.
- **attempt adapters** (the learned attempt policy, kind ``attempt``, and a fixed rule with no
  weights, kind ``rule``): sequential attempts (``decoding.attempts``), the stopped greedy first,
  then one more attempt at a time with the arm the policy or rule picks, until it stops; the answer
  is its pick among the attempts' answers and the completion the first attempt that says it.
  ``Generation.decodes``, ``attempt_actions``, ``stopped_by`` and ``answer`` say how many attempts,
  with which arms, why it stopped and what it answered. One completion per prompt
  (``parallel_budget`` 1); streaming sends the chosen attempt's tokens once the decision is made.

A prompt is a string (sent as one user message through the chat template, as in training) or a
chat: a list of ``{"role", "content"}`` messages.

Reproducibility: completion j of prompt i in a call with seed s draws its tokens (and a token
adapter's actions) from ``row_seed(s, i, j)``, and a sampling sequence policy draws prompt i's action
from ``row_seed(s, i, "policy")``. So a completion depends on its prompt, s, i and j only — not on the
other prompts of the call nor on how ``serve`` merges requests into one batch (up to float rounding
of padded batch matmuls).

``prepare`` (validate + tokenize) and ``run`` (one batched decode for many prepared prompts) are
public so that the server can merge several requests into one decode call.
"""

from __future__ import annotations

import functools
import json
import warnings
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Callable, Collection, Literal, Sequence, Union

import torch

from ..decoding.actions import DEFAULT_TOKEN_BUDGET, ActionSet
from ..decoding.attempts import AttemptRounds, Gone, ProblemAttempts
from ..decoding.loop import DecodeResult, StepTokens, decode, row_seed
from ..lm.models import FrozenLM
from ..policies.draft import KEEP_DRAFT, DraftContextConfig, DraftGatedResult, draft_gated_decode
from ..policies.kinds import AdapterKind
from ..policies.networks import (
    AdapterConfig,
    TokenPolicyChooser,
    check_compatible,
)
from ..tasks import task_from_record
from ..tasks.base import Problem

__all__ = ["AdaptiveGenerator", "Generation", "PreparedPrompt", "Prompt", "TokenEvent", "format_generations"]

Prompt = Union[str, list[dict]]
"""A user message as text, or a chat (list of ``{"role", "content"}`` messages)."""


@dataclass
class Generation:
    """The completions of one prompt and the decoding actions the adapter took for them."""

    prompt: Prompt
    """The prompt as given (text or chat)."""
    completions: list[str]
    """``parallel_budget`` completions, special tokens removed."""
    kind: str
    """Which adapter decided: one action per prompt, one per token, or keep-or-re-decode after a draft."""
    action_names: list[str]
    """The adapter's action set, in policy-output order (indices below point into it; a draft-gated
    adapter's output 0 is ``"keep draft"``)."""
    finish_reasons: list[str]
    """Per completion: ``"stop"`` (EOS) or ``"length"`` (token budget reached)."""
    completion_tokens: list[int]
    """Per completion: tokens generated (the EOS token included when one ended it)."""
    prompt_tokens: int
    """Tokens of the chat-formatted prompt."""
    seed: int
    """Seed of the call; completion j of prompt i used ``row_seed(seed, i, j)``."""
    action_index: int | None = None
    """Sequence adapter: the action chosen for this prompt."""
    action_probs: list[float] | None = None
    """Sequence adapter: pi(a | e, B) over the action set."""
    token_actions: list[list[int]] | None = None
    """Token adapter: per completion, the action index at each generated token."""
    draft_kept: bool | None = None
    """Draft-gated adapter: whether the greedy draft was kept (no re-decode)."""
    decodes: int | None = None
    """Draft-gated adapter: sequences decoded for this prompt, the draft included (1 when kept)."""
    draft_tokens: int | None = None
    """Draft-gated adapter: tokens of the draft (generated whether or not it is an answer)."""
    stopped_by: str | None = None
    """Attempt adapter: why it stopped ("policy", "agreement", "confident", "budget";
    ``decoding.attempts.STOP_REASONS``)."""
    attempt_actions: list[str] | None = None
    """Attempt adapter: the arm of each attempt, in order (``decodes`` of them)."""
    answer: str | None = None
    """Attempt adapter: the answer it gives ("" when no attempt stated one)."""
    attempt_tokens: int | None = None
    """Attempt adapter: tokens generated over every attempt (the completion is one of them)."""

    @property
    def action(self) -> str | None:
        """Sequence adapter: the name of the chosen action (None for a token adapter); attempt
        adapter: the arm of the attempt returned."""
        return None if self.action_index is None else self.action_names[self.action_index]

    def adapter_info(self) -> dict:
        """Attempt adapter: what the response's adapter field says of its decision."""
        return {"decodes": self.decodes, "attempts": self.attempt_actions, "stopped_by": self.stopped_by,
                "answer": self.answer, "attempt_tokens": self.attempt_tokens}

    @property
    def token_action_names(self) -> list[list[str]] | None:
        """Token adapter: per completion, the action name at each generated token."""
        if self.token_actions is None:
            return None
        return [[self.action_names[a] for a in row] for row in self.token_actions]

    @property
    def actions(self) -> str | list[list[str]] | None:
        """The actions taken: one name (sequence adapter) or names per token per completion (token)."""
        return self.token_action_names if self.token_actions is not None else self.action

    def action_counts(self) -> list[dict[str, int]]:
        """Per completion, how many tokens each action produced (every token: the sequence action)."""
        if self.token_actions is None:
            return [{self.action: n} for n in self.completion_tokens]
        return [dict(Counter(self.action_names[a] for a in row).most_common()) for row in self.token_actions]

    def to_dict(self) -> dict:
        return {**asdict(self), "action": self.action, "action_counts": self.action_counts()}


@dataclass(frozen=True)
class PreparedPrompt:
    """One prompt, validated and tokenized, ready to be decoded together with others."""

    prompt: Prompt
    prompt_ids: tuple[int, ...]
    parallel_budget: int
    token_budget: int
    seed: int
    index: int
    """Position of the prompt in its own call: with ``seed`` it keys the row seeds."""


@dataclass(frozen=True)
class TokenEvent:
    """One new token of one completion, reported by ``run(..., on_tokens=...)`` while decoding."""

    prompt: int
    """Position of the prompt in the list given to ``run``."""
    completion: int
    """Which of its ``parallel_budget`` completions (j)."""
    token_id: int
    """The token (an EOS token included: it decodes to no text); -1: this completion will not be
    generated and ends here empty (a draft-gated adapter that keeps its draft at B > 1)."""
    action: int
    """Index of the action that produced it (into ``action_names``)."""
    finish_reason: Literal["stop", "length"] | None
    """Set on the completion's last token: ``"stop"`` (EOS) or ``"length"`` (token budget)."""
    adapter_info: dict | None = None
    """Set on an attempt adapter's last token: ``Generation.adapter_info`` (attempts, why it stopped)."""


TokenCallback = Callable[[list[TokenEvent]], "Collection[tuple[int, int]] | None"]
"""Gets each step's new tokens; may return ``(prompt, completion)`` pairs to stop now (their
Generation then ends there with finish reason ``"length"``)."""


def _as_chat(prompt: Prompt, position: int) -> list[dict]:
    """The chat messages of ``prompt``, checked, with a clear error naming the prompt."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if not isinstance(prompt, (list, tuple)) or not prompt:
        raise ValueError(
            f"prompt {position} must be a string or a non-empty list of chat messages, got {type(prompt).__name__}"
        )
    for m in prompt:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise ValueError(
                f"prompt {position}: every chat message must be a dict with string 'role' and 'content', got {m!r}"
            )
    return [{"role": m["role"], "content": m["content"]} for m in prompt]


def _question_text(prompt: Prompt) -> str:
    """The question a prompt asks, as a task's ``Problem.question`` holds it: the text itself, or a
    chat's last non-empty user message (the other messages' text when it has none)."""
    if isinstance(prompt, str):
        return prompt
    users = [m["content"] for m in prompt if m.get("role") == "user" and m["content"].strip()]
    return users[-1] if users else "\n".join(m["content"] for m in prompt)


def _check_not_empty(prompts: Sequence[Prompt]) -> None:
    """A prompt with no text at all (``""``, or a chat whose messages are all blank) is refused."""
    for i, prompt in enumerate(prompts):
        if isinstance(prompt, (str, list, tuple)) and not _question_text(prompt).strip():
            raise ValueError(f"prompt {i} is empty: give it some text")


def _normalize_prompts(prompts: Prompt | Sequence[Prompt]) -> list[Prompt]:
    """A bare string or a single chat is one prompt; otherwise a sequence of prompts."""
    if isinstance(prompts, str):
        return [prompts]
    if isinstance(prompts, (list, tuple)) and prompts and all(isinstance(m, dict) for m in prompts):
        return [list(prompts)]
    prompts = list(prompts)
    if not prompts:
        raise ValueError("no prompts given")
    return prompts


def _check_positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


class AdaptiveGenerator:
    """A frozen LM plus a trained decoding adapter that picks how it decodes."""

    def __init__(
        self,
        policy: torch.nn.Module,
        config: AdapterConfig,
        lm: FrozenLM,
        name: str = "adapter",
        max_batch_rows: int = 64,
        task=None,
    ):
        """Prefer ``Adapter.generator()``. ``max_batch_rows`` bounds the rows (prompts x B) of one decode.
        ``task``: where the adapter stops at the first complete answer (``config.stop_at_answer``,
        what it was trained with), the task whose ``answer_complete`` says where (default: the
        adapter's own task, ``config.task``)."""
        check_compatible(config, lm)
        _check_input_size(config, lm)
        self.lm, self.config, self.name = lm, config, name
        # an attempt adapter's decider reads the attempts' summaries on the CPU
        self.policy = policy.to("cpu" if config.adapter_kind.attempts else lm.device).eval()
        self.action_set = ActionSet(config.action_list, device=lm.device)
        self.max_batch_rows = _check_positive("max_batch_rows", max_batch_rows)
        self.draft_context = DraftContextConfig(**config.draft) if self.adapter_kind.keeps_draft else None
        self.answer_task = self.reading_task = None
        reads_answers = self.adapter_kind.attempts  # its decisions read each attempt's answer
        if config.stop_at_answer or reads_answers:
            self.reading_task = task if task is not None else _adapter_task(
                config, self.adapter_kind.keeps_draft or reads_answers)
            self.answer_task = self.reading_task if config.stop_at_answer else None
        self.prompt_task = _prompt_task(config, self.reading_task)
        expected = config.policy.get("num_actions")
        if expected is not None and expected != self.adapter_kind.outputs(len(self.action_set)):
            raise ValueError(
                f"adapter policy has {expected} outputs but its action set has {len(self.action_set)} actions"
            )

    @property
    def kind(self) -> str:
        return self.config.kind

    @property
    def adapter_kind(self) -> AdapterKind:
        """The kind object (``policies.kinds``) that says how this adapter decodes."""
        return self.config.adapter_kind

    @property
    def action_names(self) -> list[str]:
        """Names of the policy's outputs (a draft-gated adapter's output 0 keeps the draft)."""
        return self.adapter_kind.output_names(self.action_set.names)

    @property
    def default_token_budget(self) -> int:
        """``DEFAULT_TOKEN_BUDGET`` (``generate``'s default and ``serve``'s ``max_tokens``, at most
        ``--max-tokens-limit``), whatever budget the adapter was trained at (a short training budget
        would cut answers; a token adapter trained at a smaller budget b sees a remaining budget above
        b for the first tokens: pass its budget to match training); a draft-gated adapter: its draft's
        budget (its length feature is a fraction of it)."""
        if self.draft_context is not None:
            return self.draft_context.token_budget
        if self.adapter_kind.attempts and self.config.token_budget:  # the budget its attempts were read at
            return self.config.token_budget
        return DEFAULT_TOKEN_BUDGET

    @property
    def max_context(self) -> int | None:
        """The LM's context length (prompt + completion tokens), when its config states one."""
        return getattr(self.lm.model.config, "max_position_embeddings", None)

    def describe(self) -> dict:
        """A JSON-able summary (used by ``serve``'s /health and /v1/models)."""
        return {
            "name": self.name,
            "kind": self.kind,
            "base_model": self.config.base_model,
            "lm": self.lm.spec.name_or_path,
            "actions": self.action_names,
            "device": str(self.lm.device),
            "max_context": self.max_context,
            "policy_mode": self.policy_mode,
        }

    # ---- generation --------------------------------------------------------------------------
    def generate(
        self,
        prompts: Prompt | Sequence[Prompt],
        token_budget: int | None = None,
        parallel_budget: int = 1,
        seed: int = 0,
        deterministic_policy: bool | None = None,
    ) -> list[Generation]:
        """Decode ``parallel_budget`` completions of at most ``token_budget`` new tokens per prompt.

        ``deterministic_policy``: take the adapter's most likely action (True) or sample it (False);
        None (default): the adapter's stored ``policy_mode`` (:attr:`policy_mode`).
        Returns one ``Generation`` per prompt, in order."""
        return self.run(self.prepare(prompts, token_budget, parallel_budget, seed), deterministic_policy)

    def check_parallel_budget(self, parallel_budget: int) -> None:
        """Refuse (ValueError) a parallel budget this adapter cannot serve; the server asks before
        queueing a request."""
        _check_positive("parallel_budget", parallel_budget)
        if self.adapter_kind.attempts and parallel_budget != 1:
            raise ValueError(f"this {self.adapter_kind.label} adapter answers once per prompt (its attempts decide how "
                             f"many decodes): parallel_budget (n) must be 1, got {parallel_budget}")

    def prepare(
        self,
        prompts: Prompt | Sequence[Prompt],
        token_budget: int | None = None,
        parallel_budget: int = 1,
        seed: int = 0,
        raw_text: bool = False,
    ) -> list[PreparedPrompt]:
        """Validate and tokenize; raises ``ValueError`` on a malformed prompt or one too long for the LM.
        ``raw_text``: string prompts are text to continue (tokenized as they are), not user messages."""
        prompts = _normalize_prompts(prompts)
        budget = _check_positive("token_budget", self.default_token_budget if token_budget is None else token_budget)
        self.check_parallel_budget(parallel_budget)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        if raw_text and all(isinstance(p, str) for p in prompts):
            _check_not_empty(prompts)
            ids = [self.lm.tokenizer(p)["input_ids"] for p in prompts]
        else:
            chats = [_as_chat(p, i) for i, p in enumerate(prompts)]
            _check_not_empty(chats)
            ids = self.lm.encode_chat([self._asked(chat, i) for i, chat in enumerate(chats)])
        for i, p in enumerate(ids):
            if self.max_context is not None and len(p) + budget > self.max_context:
                raise ValueError(
                    f"prompt {i} has {len(p)} tokens: with a token budget of {budget} it exceeds the model's "
                    f"context of {self.max_context} tokens; shorten it or lower the token budget"
                )
        return [
            PreparedPrompt(prompt, tuple(p), parallel_budget, budget, seed, i)
            for i, (prompt, p) in enumerate(zip(prompts, ids))
        ]

    def _asked(self, chat: list[dict], index: int) -> list[dict]:
        """A chat of one user message, asked the way training asked its questions (its task's prompt:
        system prompt and instruction) where the adapter records a prompt of its own; else as it is."""
        if self.prompt_task is None or len(chat) != 1 or chat[0]["role"] != "user":
            return chat
        return self.prompt_task.prompt(Problem(f"prompt/{index}", chat[0]["content"], ""))

    @property
    def policy_mode(self) -> str:
        """'sample' or 'argmax': how the adapter picks actions unless a call says otherwise (stored in
        the adapter; the mode ``evaluate`` reports by default)."""
        return self.config.policy_mode

    def deterministic(self, deterministic_policy: bool | None = None) -> bool:
        """``deterministic_policy``, or the adapter's mode when it is None."""
        return self.policy_mode == "argmax" if deterministic_policy is None else bool(deterministic_policy)

    def run(
        self,
        prepared: Sequence[PreparedPrompt],
        deterministic_policy: bool | None = None,
        on_tokens: TokenCallback | None = None,
        all_answers: bool = False,
        gone: Gone | None = None,
    ) -> list[Generation]:
        """Decode prepared prompts (possibly from several calls) in as few decode calls as
        ``max_batch_rows`` allows; one ``Generation`` per prepared prompt, in order.
        ``deterministic_policy`` None: the adapter's ``policy_mode``.

        ``on_tokens``: called after every decode step with the new tokens (``TokenEvent``s), for
        streaming; it may return ``(prompt, completion)`` pairs to stop early.
        ``all_answers``: a draft-gated adapter answers every prompt with its parallel budget B of
        completions even where it keeps the draft (the draft and B - 1 samples of its most probable
        re-decode action: a client that asked for B); else a kept draft is the only answer.
        ``gone``: prompt positions still being decoded -> those nobody wants any more (a served
        request whose client left); an attempt adapter asks it before each round and at every decode
        step, and stops their attempts there (the other kinds stop such rows through ``on_tokens``)."""
        deterministic = self.deterministic(deterministic_policy)
        out: list[Generation] = []
        for chunk in self._chunks(list(prepared)):
            if self.adapter_kind.keeps_draft:
                out += self._draft_chunk(chunk, deterministic, on_tokens, len(out), all_answers)
                continue
            if self.adapter_kind.attempts:
                out += self._attempts_chunk(chunk, on_tokens, len(out), gone)
                continue
            out += self._decode_chunk(chunk, deterministic, on_tokens, offset=len(out))
        return out

    def _chunks(self, prepared: list[PreparedPrompt]) -> list[list[PreparedPrompt]]:
        """Consecutive groups of at most ``max_batch_rows`` rows (a bigger prompt goes alone)."""
        chunks, rows = [[]], 0
        for p in prepared:
            if chunks[-1] and rows + p.parallel_budget > self.max_batch_rows:
                chunks.append([])
                rows = 0
            chunks[-1].append(p)
            rows += p.parallel_budget
        return [c for c in chunks if c]

    def _decode_chunk(
        self, chunk: list[PreparedPrompt], deterministic: bool, on_tokens: TokenCallback | None = None, offset: int = 0
    ) -> list[Generation]:
        if self.adapter_kind.keeps_draft:
            return self._draft_chunk(chunk, deterministic, on_tokens, offset)
        prompt_of_row = [i for i, p in enumerate(chunk) for _ in range(p.parallel_budget)]
        chosen = probs = None
        if not self.adapter_kind.per_token:  # one action per prompt, chosen before decoding
            chosen, probs = self._sequence_actions(chunk, deterministic)
        result = decode(
            self.lm,
            [list(p.prompt_ids) for p in chunk],
            self.action_set,
            prompt_of_row=prompt_of_row,
            row_actions=None if chosen is None else chosen[prompt_of_row],
            chooser=TokenPolicyChooser(self.policy, deterministic=deterministic) if chosen is None else None,
            token_budget=[p.token_budget for p in chunk for _ in range(p.parallel_budget)],
            row_seeds=[row_seed(p.seed, p.index, j) for p in chunk for j in range(p.parallel_budget)],
            on_step=None if on_tokens is None else _step_reporter(chunk, offset, on_tokens),
            stop_checks=None if self.answer_task is None else [self._answer_check(chunk[i]) for i in prompt_of_row],
        )
        return self._split(chunk, result, chosen, probs)

    def _answer_check(self, p: PreparedPrompt):
        """The check that ends a row of prompt ``p`` at its first complete answer (the answer task's;
        a chat is asked as its question's text, as a task's ``Problem`` holds it)."""
        return functools.partial(self.answer_task.answer_complete,
                                 Problem(f"prompt/{p.index}", _question_text(p.prompt), ""))

    @torch.inference_mode()
    def _sequence_actions(self, chunk: list[PreparedPrompt], deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Action ``[P]`` and probabilities ``[P, K]`` (CPU) of the sequence policy, one per prompt."""
        pooling = self.config.embedding.get("pooling", "mean")
        emb = self.lm.prompt_embeddings([list(p.prompt_ids) for p in chunk], pooling=pooling)
        budget = torch.tensor([p.parallel_budget for p in chunk])
        if deterministic:
            return self.policy.choose(emb, budget)
        # One uniform per prompt from its own generator: the draw does not depend on the batch.
        seeds = [row_seed(p.seed, p.index, "policy") for p in chunk]
        uniform = torch.stack([torch.rand((), generator=torch.Generator().manual_seed(s)) for s in seeds])
        return self.policy.choose(emb, budget, deterministic=False, uniform=uniform)

    def _split(self, chunk, result: DecodeResult, chosen, probs) -> list[Generation]:
        out, row = [], 0
        for i, p in enumerate(chunk):
            rows = range(row, row + p.parallel_budget)
            row += p.parallel_budget
            lengths = [int(result.lengths[r]) for r in rows]
            out.append(
                Generation(
                    prompt=p.prompt,
                    completions=[result.texts[r] for r in rows],
                    kind=self.kind,
                    action_names=self.action_set.names,
                    finish_reasons=["stop" if _ended(result, r) else "length" for r in rows],
                    completion_tokens=lengths,
                    prompt_tokens=len(p.prompt_ids),
                    seed=p.seed,
                    action_index=None if chosen is None else int(chosen[i]),
                    action_probs=None if probs is None else probs[i].tolist(),
                    token_actions=None
                    if chosen is not None
                    else [result.actions[r, :n].tolist() for r, n in zip(rows, lengths)],
                )
            )
        return out


    # ---- draft-gated adapters ------------------------------------------------------------------
    def _draft_chunk(self, chunk: list[PreparedPrompt], deterministic: bool, on_tokens: TokenCallback | None,
                     offset: int, all_answers: bool = False) -> list[Generation]:
        """Both passes for the chunk's prompts (``draft_gated_decode``), then one Generation each.
        Completion j of a prompt: the draft is 0 when it is an answer; re-decode j' is j' + 1 then,
        else j' (B = 1)."""
        budgets = [p.parallel_budget for p in chunk]
        state: dict = {}
        on_draft = on_step = None
        if on_tokens is not None:
            on_draft = _draft_reporter(chunk, offset, on_tokens, state, all_answers)
            on_step = _redecode_reporter(chunk, offset, on_tokens, state, all_answers)
        result = draft_gated_decode(
            self.lm, [list(p.prompt_ids) for p in chunk], self.policy, self.draft_context, self.action_set.actions,
            budgets, seeds=[row_seed(p.seed, p.index, "draft") for p in chunk], deterministic=deterministic,
            token_budgets=[p.token_budget for p in chunk], on_draft=on_draft, on_redecode_step=on_step,
            answer_complete=None if self.answer_task is None else [self._answer_check(p) for p in chunk],
            fill_kept=all_answers, stop_at_answer=self.answer_task is not None,
        )
        return [self._draft_generation(p, i, result) for i, p in enumerate(chunk)]

    def _draft_generation(self, p: PreparedPrompt, i: int, result: DraftGatedResult) -> Generation:
        draft = result.draft
        rows = [(draft, i)] if result.kept[i] or p.parallel_budget > 1 else []
        rows += [(result.redecoded, r) for r, q in enumerate(result.redecode_prompt) if q == i]
        lengths = [int(res.lengths[r]) for res, r in rows]
        choice = int(result.choices[i])
        return Generation(
            prompt=p.prompt, completions=[res.texts[r] for res, r in rows], kind=self.kind,
            action_names=self.action_names,
            finish_reasons=["stop" if _ended(res, r) else "length" for res, r in rows],
            completion_tokens=lengths, prompt_tokens=len(p.prompt_ids), seed=p.seed, action_index=choice,
            action_probs=result.probs[i].tolist(), draft_kept=choice == KEEP_DRAFT, decodes=result.decodes[i],
            draft_tokens=int(draft.lengths[i]),
        )


    # ---- attempt adapters ----------------------------------------------------------------------
    @functools.cached_property
    def _attempt_decider(self):
        """The kind's decider (an attempt policy's holds its state lattice): built once, on first use."""
        return self.adapter_kind.decider(self.policy, self.config)

    def _attempts_chunk(self, chunk: list[PreparedPrompt], on_tokens: TokenCallback | None,
                        offset: int, gone: Gone | None = None) -> list[Generation]:
        """Sequential attempts for the chunk's prompts (``AttemptService``), the kind's decider
        deciding after each round. A prompt ``gone`` names stops where it is (its Generation holds
        the attempt cut there, or nothing)."""
        service = AttemptService(self)
        keys = [service.add(p) for p in chunk]  # 0 .. len(chunk) - 1: the chunk's positions
        done: dict[int, tuple[Generation, list[int]]] = {}
        while service.live:
            done.update(service.round(None if gone is None else _chunk_gone(gone, offset)))
        out = []
        for i, key in enumerate(keys):
            gen, ids = done[key]
            out.append(gen)
            if on_tokens is not None:  # the chosen attempt's tokens, now that the decision is made
                on_tokens(attempt_events(offset + i, gen, ids))
        return out

    def attempt_service(self) -> "AttemptService | None":
        """For an adapter that decodes sequential attempts, rounds that prepared prompts join between
        (the server's worker shares them among concurrent requests); None for the other kinds."""
        return AttemptService(self) if self.adapter_kind.attempts else None

    def _attempt_generation(self, p: PreparedPrompt, problem: ProblemAttempts) -> tuple[Generation, list[int]]:
        """Prompt ``p``'s Generation from its attempts (the chosen one shown, else the last) and the
        shown attempt's token ids."""
        names = self.action_set.names
        texts, ids, ended = problem.texts or [""], problem.token_ids or [[]], problem.ended or [False]
        shown = problem.chosen if problem.chosen >= 0 else len(texts) - 1
        arm = problem.path[shown] if problem.path else self.adapter_kind.attempt_plan(self.config)["first_arm"]
        gen = Generation(
            prompt=p.prompt, completions=[texts[shown]], kind=self.kind, action_names=self.action_names,
            finish_reasons=["stop" if ended[shown] else "length"], completion_tokens=[len(ids[shown])],
            prompt_tokens=len(p.prompt_ids), seed=p.seed, action_index=self.action_names.index(names[arm]),
            decodes=len(problem.path), stopped_by=problem.stopped_by, attempt_actions=[names[a] for a in problem.path],
            answer=problem.answer, attempt_tokens=sum(len(t) for t in problem.token_ids))
        return gen, ids[shown]


class AttemptService:
    """Prepared prompts of an attempt adapter joining shared rounds (``decoding.attempts.
    AttemptRounds``): attempt j of arm a of a prompt draws from ``row_seed(seed, index, "attempt", a,
    j)``, so its Generation is the same whichever prompts shared its rounds and whenever it joined."""

    def __init__(self, generator: AdaptiveGenerator):
        plan = generator.adapter_kind.attempt_plan(generator.config)
        self.generator = generator
        self.rounds = AttemptRounds(generator.lm, generator.action_set.actions, generator._attempt_decider,
                                    first_arm=plan["first_arm"], distinct=plan["distinct"],
                                    max_attempts=plan["max_attempts"], with_hidden=plan["with_hidden"])
        self._prompts: dict[int, PreparedPrompt] = {}

    @property
    def live(self) -> int:
        """Prompts going (each one row of a round)."""
        return len(self.rounds.live)

    def add(self, p: PreparedPrompt) -> int:
        """Prompt ``p`` joins the next round; its key."""
        gen = self.generator
        problem = Problem(f"prompt/{p.index}", _question_text(p.prompt), "")
        key = self.rounds.add(p.prompt_ids, p.token_budget, functools.partial(row_seed, p.seed, p.index, "attempt"),
                              functools.partial(gen.reading_task.extract_answer, problem),
                              None if gen.answer_task is None else gen._answer_check(p))
        self._prompts[key] = p
        return key

    def round(self, gone: Gone | None = None) -> dict[int, tuple[Generation, list[int]]]:
        """One round (``AttemptRounds.round``; ``gone`` over keys); the prompts that stopped, by key:
        their Generation and its shown attempt's token ids."""
        done = self.rounds.round(gone)
        return {key: self.generator._attempt_generation(self._prompts.pop(key), problem)
                for key, problem in done.items()}


def attempt_events(position: int, gen: Generation, ids: list[int]) -> list[TokenEvent]:
    """An attempt adapter's answer to prompt ``position`` as ``TokenEvent``s: the shown attempt's
    tokens, the last carrying the finish reason and ``adapter_info`` (token -1: an empty answer)."""
    ids = ids or [-1]
    last = len(ids) - 1
    return [TokenEvent(position, 0, t, gen.action_index, gen.finish_reasons[0] if k == last else None,
                       gen.adapter_info() if k == last else None) for k, t in enumerate(ids)]


def _chunk_gone(gone: Gone, offset: int) -> Gone:
    """``gone`` over ``run``'s prompt positions as a chunk's: its prompt i is position ``offset + i``."""

    def chunk_gone(going):
        left = set(gone([offset + i for i in going]))
        return [i for i in going if offset + i in left]

    return chunk_gone


def _ended(result: DecodeResult, row: int) -> bool:
    """The row ended on its own: at EOS, or at its first complete answer."""
    return bool(result.stopped_at_eos[row]) or (result.stopped_by_check is not None
                                                and bool(result.stopped_by_check[row]))


def _adapter_task(config: AdapterConfig, required: bool):
    """The task an adapter was trained on (its ``answer_complete`` ends each row at its first
    complete answer), rebuilt from the options ``adapter.json`` records (data paths, fields,
    verifier). Where it names none, or one that cannot be rebuilt here: an error when the stop is
    ``required`` (a draft-gated policy reads the stopped draft), else a warning and rows decoded to
    the budget."""
    try:
        if not config.task:
            raise ValueError("it names no task")
        return task_from_record(config.task, config.task_options)
    except (ValueError, OSError, KeyError) as err:
        message = (f"this adapter stops at the first complete answer, but its task {config.task!r} cannot be "
                   f"rebuilt from adapter.json ({err}): give --data (from Python, .generator(data=...) or task=)")
        if required:
            raise ValueError(message) from None
        warnings.warn(message + "; decoding to the budget", stacklevel=3)
        return None


PROMPT_OPTIONS = ("system_prompt", "instruction")
"""Task options that change how a question is asked: an adapter that records either asks a plain
text prompt through its task's prompt, as its training and scoring did."""


def _prompt_task(config: AdapterConfig, task):
    """The task whose prompt asks a text prompt (None: sent as one bare user message): ``task``, or
    the adapter's recorded task, where its options set a system prompt or an instruction."""
    options = config.task_options or {}
    if not config.task or not any(options.get(k) for k in PROMPT_OPTIONS):
        return None
    if task is not None:
        return task
    try:
        return task_from_record(config.task, options)
    except (ValueError, OSError, KeyError) as err:
        named = ", ".join(k for k in PROMPT_OPTIONS if options.get(k))
        warnings.warn(f"this adapter was trained with its task's prompt ({named}), but its task {config.task!r} cannot "
                      f"be rebuilt from adapter.json ({err}): prompts are sent as they are; give --data (from Python, "
                      ".generator(data=...) or task=)", stacklevel=3)
        return None


def _draft_reporter(chunk, offset: int, on_tokens: TokenCallback, state: dict, all_answers: bool = False) -> Callable:
    """``draft_gated_decode``'s ``on_draft``: the draft's tokens as completion 0 of every prompt
    whose draft is one of its answers (kept, or B > 1), all at once once the choice is made; a kept
    draft's other completions end empty unless ``all_answers`` (then they are decoded)."""

    def on_draft(draft: DecodeResult, choices: torch.Tensor) -> None:
        state["choices"] = choices
        events = []
        for i, p in enumerate(chunk):
            choice = int(choices[i])
            if choice != KEEP_DRAFT and p.parallel_budget == 1:
                continue
            n = int(draft.lengths[i])
            for t in range(n):
                last = t == n - 1
                reason = ("stop" if _ended(draft, i) else "length") if last else None
                events.append(TokenEvent(offset + i, 0, int(draft.tokens[i, t]), KEEP_DRAFT, reason))
            if choice == KEEP_DRAFT and not all_answers:  # the draft is the only answer: the others end empty
                events += [TokenEvent(offset + i, j, -1, KEEP_DRAFT, "stop") for j in range(1, p.parallel_budget)]
        if events:
            on_tokens(events)  # the draft is finished: nothing left to stop

    return on_draft


def _redecode_reporter(chunk, offset: int, on_tokens: TokenCallback, state: dict,
                       all_answers: bool = False) -> Callable:
    """``on_redecode_step``: re-decode row r (of prompt q, its j-th) -> completion j (+1 when the draft
    is completion 0), with the re-decode's output as the action; stop requests map back to rows."""
    keys: list[tuple[int, int]] = []

    def on_step(step: StepTokens) -> list[int] | None:
        if not keys:
            choices = state["choices"]
            for i in range(len(chunk)):
                if int(choices[i]) == KEEP_DRAFT and not (all_answers and chunk[i].parallel_budget > 1):
                    continue
                first = 1 if chunk[i].parallel_budget > 1 else 0  # the draft is completion 0 at B > 1
                keys.extend((offset + i, first + j) for j in range(max(1, chunk[i].parallel_budget - 1)))
        columns = (step.rows, step.tokens, step.actions, step.finished, step.at_eos)
        events = []
        for row, token, action, finished, eos in zip(*(c.tolist() for c in columns)):
            prompt, completion = keys[row]
            events.append(TokenEvent(prompt, completion, token, action + 1,  # output k: re-decode action k - 1
                                     ("stop" if eos else "length") if finished else None))
        stop = on_tokens(events)
        if not stop:
            return None
        row_of = {key: row for row, key in enumerate(keys)}
        return [row_of[key] for key in stop if key in row_of]

    return on_step


def _step_reporter(chunk: list[PreparedPrompt], offset: int, on_tokens: TokenCallback) -> Callable:
    """decode's ``on_step`` for one chunk: rows -> ``TokenEvent``s keyed by (prompt position in
    ``run``'s list, completion), and the pairs ``on_tokens`` wants stopped -> rows."""
    keys = [(offset + i, j) for i, p in enumerate(chunk) for j in range(p.parallel_budget)]
    row_of = {key: row for row, key in enumerate(keys)}

    def on_step(step: StepTokens) -> list[int] | None:
        columns = (step.rows, step.tokens, step.actions, step.finished, step.at_eos)
        events = [
            TokenEvent(*keys[row], token, action, ("stop" if eos else "length") if finished else None)
            for row, token, action, finished, eos in zip(*(c.tolist() for c in columns))
        ]
        stop = on_tokens(events)
        return [row_of[key] for key in stop if key in row_of] if stop else None

    return on_step


def _check_input_size(config: AdapterConfig, lm: FrozenLM) -> None:
    """The policy's input width must fit the LM's hidden size (also when the fingerprint lacks it)."""
    config.adapter_kind.check_lm(config, lm.hidden_size)


# ---- printing ----------------------------------------------------------------------------------


def format_generations(gen: AdaptiveGenerator, outs: Sequence[Generation]) -> str:
    """Readable text: per prompt, the action(s) taken and each completion."""
    lines = [
        f"adapter {gen.name} ({gen.kind}) on {gen.lm.spec.name_or_path}; actions: {' | '.join(gen.action_names)}"
    ]
    for i, g in enumerate(outs):
        lines.append(f"\n=== prompt {i + 1}: {g.prompt if isinstance(g.prompt, str) else json.dumps(g.prompt)}")
        if g.stopped_by is not None:  # sequential attempts
            lines.append(f"{g.decodes} attempt(s) ({', '.join(g.attempt_actions or [])}), stopped: {g.stopped_by}; "
                         f"answer: {g.answer!r} (completion: the {g.action} attempt that says it)")
        elif g.draft_kept is None and g.action_index is not None:  # one action per prompt
            lines.append(f"action: {g.action} (p={g.action_probs[g.action_index]:.2f}, budget B={len(g.completions)})")
        if g.draft_kept is not None:
            lines.append(f"draft {'kept' if g.draft_kept else 're-decoded with ' + str(g.action)} "
                         f"(p={g.action_probs[g.action_index]:.2f}; {g.decodes} decode(s))")
        for j, (text, counts) in enumerate(zip(g.completions, g.action_counts())):
            detail = f"{g.finish_reasons[j]}, {g.completion_tokens[j]} tokens"
            if g.token_actions is not None:
                detail += "; actions: " + ", ".join(f"{name} x{n}" for name, n in counts.items())
            lines += [f"--- completion {j + 1}/{len(g.completions)} [{detail}]", text]
    return "\n".join(lines)
