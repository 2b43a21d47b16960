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
  with which arms, why it stopped and what it answered; ``attempt_records`` each attempt's arm,
  tokens and ``cut_at``. An adapter directory holding an abandon rule (``policies.abandon``) cuts
  attempts at its checkpoints; ``cut_at`` says where (None: not cut). ``parallel_budget`` n: n
  independent chains of attempts (``attempt_choices``); streaming sends each chain's chosen
  attempt's tokens once its decision is made.
  ``problem_ids`` key a prompt's attempts as a sample table keys the same problem's samples, so on
  a table's problems, with its seed, they are the table's attempts and the decisions those of
  ``evaluation.abandon.replay``.

A prompt is a string (sent as one user message through the chat template, as in training) or a
chat: a list of ``{"role", "content"}`` messages.

Reproducibility: completion j of prompt i in a call with seed s draws its tokens (and a token
adapter's actions) from ``row_seed(s, i, j)``, and a sampling sequence policy draws prompt i's action
from ``row_seed(s, i, "policy")``. So a completion depends on its prompt, s, i and j only — not on the
other prompts of the call nor on how ``serve`` merges requests into one batch (up to float rounding
of padded batch matmuls).

``prepare`` (validate + tokenize) and ``run`` (one batched decode for many prepared prompts) are
public so that the server can merge several requests into one decode call. How each kind decodes a
chunk is its decoder's (``serving.decoders``, one per ``policies.kinds.Decoding``).
"""

from __future__ import annotations

import functools
import json
import warnings
from typing import Sequence

import torch

from ..decoding.actions import ActionSet
from ..decoding.attempts import Gone
from ..lm.models import FrozenLM
from ..policies.abandon import AbandonRule
from ..policies.kinds import AdapterKind
from ..policies.networks import AdapterConfig, check_compatible
from ..tasks import task_from_record
from ..tasks.base import Problem
from .decoders import Decoder, decoder_for
from .generation import Generation, PreparedPrompt, Prompt, TokenCallback, TokenEvent, question_text

__all__ = ["AdaptiveGenerator", "Generation", "PreparedPrompt", "Prompt", "TokenEvent", "format_generations"]


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


def _check_not_empty(prompts: Sequence[Prompt]) -> None:
    """A prompt with no text at all (``""``, or a chat whose messages are all blank) is refused."""
    for i, prompt in enumerate(prompts):
        if isinstance(prompt, (str, list, tuple)) and not question_text(prompt).strip():
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
        abandon: AbandonRule | None = None,
    ):
        """Prefer ``Adapter.generator()``. ``max_batch_rows`` bounds the rows (prompts x B) of one decode.
        ``task``: where the adapter stops at the first complete answer (``config.stop_at_answer``,
        what it was trained with), the task whose ``answer_complete`` says where (default: the
        adapter's own task, ``config.task``). ``abandon``: an attempt adapter's abandon rule (its
        attempts cut at the rule's checkpoints; refused for the other kinds)."""
        check_compatible(config, lm)
        _check_input_size(config, lm)
        self.lm, self.config, self.name = lm, config, name
        self.decoder: Decoder = decoder_for(config.adapter_kind)
        """How this adapter's kind decodes a chunk (``serving.decoders``)."""
        self.policy = policy.to(self.decoder.policy_device(lm)).eval()
        self.action_set = ActionSet(config.action_list, device=lm.device)
        self.max_batch_rows = _check_positive("max_batch_rows", max_batch_rows)
        self.draft_context = self.decoder.draft_context(config)
        self.reading_task = self.decoder.reading_task(config, task)
        self.answer_task = self.reading_task if config.stop_at_answer else None
        self.prompt_task = _prompt_task(config, self.reading_task)
        self.abandon = self.decoder.abandoner(self, abandon)
        """The abandon rule cutting attempts (``policies.abandon``), or None."""
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
    def serve_options(self) -> dict:
        """What a server passes to :meth:`run` for this adapter (a draft-gated adapter: every answer)."""
        return dict(self.decoder.serve_options)

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
        return self.decoder.default_token_budget(self)

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
        problem_ids: Sequence[str] | None = None,
    ) -> list[Generation]:
        """Decode ``parallel_budget`` completions of at most ``token_budget`` new tokens per prompt.

        ``deterministic_policy``: take the adapter's most likely action (True) or sample it (False);
        None (default): the adapter's stored ``policy_mode`` (:attr:`policy_mode`).
        ``problem_ids`` (attempt adapters): one id per prompt, keying its attempts' seeds as a sample
        table built with ``seed`` keys that problem's samples (module docstring).
        Returns one ``Generation`` per prompt, in order."""
        prepared = self.prepare(prompts, token_budget, parallel_budget, seed, problem_ids=problem_ids)
        return self.run(prepared, deterministic_policy)

    def prepare(
        self,
        prompts: Prompt | Sequence[Prompt],
        token_budget: int | None = None,
        parallel_budget: int = 1,
        seed: int = 0,
        raw_text: bool = False,
        problem_ids: Sequence[str] | None = None,
    ) -> list[PreparedPrompt]:
        """Validate and tokenize; raises ``ValueError`` on a malformed prompt or one too long for the LM.
        ``raw_text``: string prompts are text to continue (tokenized as they are), not user messages.
        ``problem_ids``: see :meth:`generate`."""
        prompts = _normalize_prompts(prompts)
        ids_of = self._problem_ids(problem_ids, len(prompts))
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
            PreparedPrompt(prompt, tuple(p), parallel_budget, budget, seed, i, ids_of[i])
            for i, (prompt, p) in enumerate(zip(prompts, ids))
        ]

    def _problem_ids(self, problem_ids: Sequence[str] | None, count: int) -> list[str | None]:
        """``problem_ids`` checked (one distinct non-empty string per prompt, an adapter that keys
        attempts by them), or None per prompt."""
        if problem_ids is None:
            return [None] * count
        self.decoder.check_problem_ids(self)
        ids = list(problem_ids) if isinstance(problem_ids, (list, tuple)) else None
        if ids is None or len(ids) != count or not all(isinstance(k, str) and k for k in ids) or len(set(ids)) < count:
            raise ValueError(f"problem_ids must be {count} distinct non-empty strings, one per prompt, got "
                             f"{problem_ids!r}"[:300])
        return ids

    def check_parallel_budget(self, parallel_budget: int) -> None:
        """Refuse (ValueError) a parallel budget this adapter cannot serve; the server asks before
        queueing a request."""
        _check_positive("parallel_budget", parallel_budget)
        self.decoder.check_parallel_budget(self, parallel_budget)

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
            out += self.decoder.decode(self, chunk, deterministic, on_tokens, len(out), all_answers, gone)
        return out

    def attempt_service(self):
        """Rounds that prepared prompts join between (``serving.decoders.AttemptService``), for an
        adapter that decodes sequential attempts (the server's worker shares them among concurrent
        requests); None for the other kinds."""
        return self.decoder.service(self)

    @functools.cached_property
    def attempt_decider(self):
        """The kind's decider over sequential attempts (an attempt policy's holds its state lattice):
        built once, on first use, by the kinds that decode attempts."""
        return self.adapter_kind.decider(self.policy, self.config)

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

    def _answer_check(self, p: PreparedPrompt):
        """The check that ends a row of prompt ``p`` at its first complete answer (the answer task's;
        a chat is asked as its question's text, as a task's ``Problem`` holds it)."""
        return functools.partial(self.answer_task.answer_complete,
                                 Problem(f"prompt/{p.index}", question_text(p.prompt), ""))

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
            attempts = ", ".join(r["arm"] + ("" if r["cut_at"] is None else f" cut at {r['cut_at']} tokens")
                                 for r in g.attempt_records or [])
            lines.append(f"{g.decodes} attempt(s) ({attempts}), stopped: {g.stopped_by}; "
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
