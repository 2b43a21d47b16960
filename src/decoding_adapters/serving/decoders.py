"""How an ``AdaptiveGenerator`` decodes a chunk of prepared prompts, one decoder per way an adapter
kind decodes (``policies.kinds.Decoding``), found once by :func:`decoder_for`; and what the
server's responses say of each completion. The generator, the server and the worker call the
decoder; none of them tests a kind.

- one action per prompt: the sequence policy picks it from the prompt embedding and B, then one
  batched decode;
- per token: the token policy is the decode loop's chooser;
- draft, then re-decode: ``policies.draft.draft_gated_decode``, streamed as the draft's tokens once
  the choice is made, then the re-decodes' as they are generated;
- sequential attempts: ``decoding.attempts.AttemptRounds`` with the kind's decider (``AttemptService``:
  rounds that prompts of concurrent requests join between) and the adapter's abandon rule, if it
  carries one (``policies.abandon``: attempts cut at its checkpoints), n completions as n
  independent chains of attempts, each chain's chosen attempt's tokens streamed once its decision is made."""

from __future__ import annotations

import functools
import warnings
from dataclasses import replace
from typing import Callable, ClassVar

import torch

from ..decoding.actions import DEFAULT_TOKEN_BUDGET
from ..decoding.attempts import AttemptRounds, Gone, ProblemAttempts
from ..decoding.confidence import CONFIDENCE_FEATURES
from ..decoding.grid import SAMPLE_SEED_TAG
from ..decoding.loop import DecodeResult, StepTokens, decode, row_seed
from ..policies.abandon import AbandonRule
from ..policies.draft import KEEP_DRAFT, DraftContextConfig, DraftGatedResult, draft_gated_decode
from ..policies.kinds import DRAFT_THEN_REDECODE, ONE_PER_PROMPT, PER_TOKEN, SEQUENTIAL_ATTEMPTS, AdapterKind, Decoding
from ..policies.networks import AdapterConfig, TokenPolicyChooser
from ..tasks import task_from_record
from ..tasks.base import Problem
from .generation import Generation, PreparedPrompt, TokenCallback, TokenEvent, ended, question_text

__all__ = ["Decoder", "decoder_for", "AttemptService", "attempt_events"]


class Decoder:
    """One way of decoding, as the generator runs it and the server reports it. ``gen``: the
    ``AdaptiveGenerator`` (its LM, policy, action set, tasks)."""

    serve_options: ClassVar[dict] = {}
    """What the server passes to ``AdaptiveGenerator.run`` besides the prompts."""

    def policy_device(self, lm) -> torch.device | str:
        """Where the policy runs (the LM's device unless its decisions are read on the CPU)."""
        return lm.device

    def draft_context(self, config: AdapterConfig) -> DraftContextConfig | None:
        """What the policy reads of a draft (None: it reads no draft)."""
        return None

    def reading_task(self, config: AdapterConfig, task):
        """The task whose ``answer_complete`` ends rows at their first complete answer (and whose
        answers the decisions read), or None: ``task``, else the adapter's own, where the adapter
        stops at the first answer."""
        if not config.stop_at_answer:
            return None
        return task if task is not None else _adapter_task(config, required=False)

    def default_token_budget(self, gen) -> int:
        return DEFAULT_TOKEN_BUDGET

    def check_parallel_budget(self, gen, parallel_budget: int) -> None:
        """Refuse a parallel budget this way of decoding cannot answer with (ValueError)."""

    def abandoner(self, gen, rule: AbandonRule | None) -> AbandonRule | None:
        """The abandon rule as this way of decoding uses it; refused (ValueError) where it decodes no
        attempts to cut."""
        if rule is not None:
            raise ValueError(f"an abandon rule cuts sequential attempts: a {gen.kind} adapter makes none "
                             "(remove abandon.json and abandon.safetensors from its directory)")
        return None

    def check_problem_ids(self, gen) -> None:
        """Refuse problem ids as seed keys (ValueError) where this way of decoding keys rows by position."""
        raise ValueError(f"problem_ids key an attempt adapter's attempts as a sample table's; a {gen.kind} adapter's "
                         "rows are keyed by their position")

    def decode(self, gen, chunk: list[PreparedPrompt], deterministic: bool, on_tokens: TokenCallback | None,
               offset: int, all_answers: bool = False, gone: Gone | None = None) -> list[Generation]:
        """One ``Generation`` per prompt of ``chunk`` (``offset``: the chunk's first prompt's position
        in the run, for ``TokenEvent.prompt``; ``gone``: ``AdaptiveGenerator.run``'s, read by the
        decoders that decode in rounds)."""
        raise NotImplementedError

    def service(self, gen) -> AttemptService | None:
        """Rounds that prepared prompts join between, for a way of decoding in rounds; else None."""
        return None

    def choice_info(self, g: Generation, j: int) -> dict:
        """What a response's adapter field says of completion ``j`` of ``g`` besides its index and
        action counts."""
        return {"action": g.action,
                "action_probs": dict(zip(g.action_names, [round(p, 6) for p in g.action_probs]))}

    def stream_info(self, actions: list[list[int]], index: int, n: int, names: list[str], info: dict | None) -> dict:
        """The same for a streamed completion: ``actions[r]`` the action of each token streamed for
        completion ``r`` of the request, ``index`` this one, ``n`` completions per prompt, ``info``
        what its last ``TokenEvent`` carried."""
        return {"action": names[actions[index][0]] if actions[index] else None}


class PromptDecoder(Decoder):
    """One action per prompt, chosen before decoding; all B completions use it."""

    def decode(self, gen, chunk, deterministic, on_tokens, offset, all_answers=False, gone=None):
        chosen, probs = _sequence_actions(gen, chunk, deterministic)
        return _decode_rows(gen, chunk, deterministic, on_tokens, offset, chosen, probs)


class TokenDecoder(Decoder):
    """The token policy picks an action at every generated token."""

    def decode(self, gen, chunk, deterministic, on_tokens, offset, all_answers=False, gone=None):
        return _decode_rows(gen, chunk, deterministic, on_tokens, offset, None, None)

    def choice_info(self, g, j):
        return {"token_actions": g.token_actions[j]}

    def stream_info(self, actions, index, n, names, info):
        return {"token_actions": actions[index]}


class DraftDecoder(Decoder):
    """A greedy draft, then keep it or re-decode (``draft_gated_decode``)."""

    serve_options = {"all_answers": True}  # a client that asks for n completions gets n, the kept draft among them

    def draft_context(self, config):
        return DraftContextConfig(**config.draft)

    def reading_task(self, config, task):  # the policy reads the stopped draft: its task must be rebuilt
        if not config.stop_at_answer:
            return None
        return task if task is not None else _adapter_task(config, required=True)

    def default_token_budget(self, gen):
        return gen.draft_context.token_budget  # its length feature is a fraction of the draft's budget

    def decode(self, gen, chunk: list[PreparedPrompt], deterministic: bool, on_tokens: TokenCallback | None,
               offset: int, all_answers: bool = False, gone: Gone | None = None) -> list[Generation]:
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
            gen.lm, [list(p.prompt_ids) for p in chunk], gen.policy, gen.draft_context, gen.action_set.actions,
            budgets, seeds=[row_seed(p.seed, p.index, "draft") for p in chunk], deterministic=deterministic,
            token_budgets=[p.token_budget for p in chunk], on_draft=on_draft, on_redecode_step=on_step,
            answer_complete=None if gen.answer_task is None else [gen._answer_check(p) for p in chunk],
            fill_kept=all_answers, stop_at_answer=gen.answer_task is not None,
        )
        return [_draft_generation(gen, p, i, result) for i, p in enumerate(chunk)]

    def choice_info(self, g, j):
        return {**super().choice_info(g, j), "draft_kept": g.draft_kept, "decodes": g.decodes,
                "draft_tokens": g.draft_tokens}

    def stream_info(self, actions, index, n, names, info):
        # a draft's tokens carry output 0, re-decoded ones the chosen output
        siblings = actions[index - index % n: index - index % n + n]
        return {**super().stream_info(actions, index, n, names, info),
                "draft_kept": all(not a or a[0] == 0 for a in siblings)}


class AttemptsDecoder(Decoder):
    """Sequential attempts until the kind's decider stops; each completion its own chain of attempts."""

    def policy_device(self, lm):
        return "cpu"  # its decider reads the attempts' summaries on the CPU

    def reading_task(self, config, task):  # its decisions read each attempt's answer
        return task if task is not None else _adapter_task(config, required=True)

    def default_token_budget(self, gen):
        return gen.config.token_budget or DEFAULT_TOKEN_BUDGET  # the budget its attempts were read at

    def check_parallel_budget(self, gen, parallel_budget):  # n completions: n independent chains of attempts
        if parallel_budget < 1:
            raise ValueError(f"parallel_budget (n) must be >= 1, got {parallel_budget}")

    def abandoner(self, gen, rule):  # the live readings' columns; the verifier's hidden width is the LM's
        if rule is None:
            return None
        width = rule.verifier.config.hidden_size
        if rule.reads_hidden and width != gen.lm.hidden_size:
            raise ValueError(f"the abandon rule's verifier reads hidden states of width {width}, the LM's are "
                             f"{gen.lm.hidden_size}: it was fitted on another model")
        return rule.reading(CONFIDENCE_FEATURES)

    def check_problem_ids(self, gen):
        return None

    def service(self, gen) -> AttemptService:
        return AttemptService(gen)

    def decode(self, gen, chunk: list[PreparedPrompt], deterministic: bool, on_tokens: TokenCallback | None,
               offset: int, all_answers: bool = False, gone: Gone | None = None) -> list[Generation]:
        """Sequential attempts for the chunk's prompts (``AttemptService``), the kind's decider
        deciding after each round. A prompt ``gone`` names stops where it is (its Generation holds
        the attempt cut there, or nothing)."""
        service = AttemptService(gen)
        keys = [service.add(p) for p in chunk]  # 0 .. len(chunk) - 1: the chunk's positions
        done: dict[int, tuple[Generation, list[int]]] = {}
        while service.live:
            done.update(service.round(None if gone is None else _chunk_gone(gone, offset)))
        out = []
        for i, key in enumerate(keys):
            answer, ids = done[key]
            out.append(answer)
            if on_tokens is not None:  # each chain's shown attempt's tokens, now that its decision is made
                on_tokens(attempt_events(offset + i, answer, ids))
        return out

    def choice_info(self, g, j):  # how many attempts completion j's chain made, with which arms, why it stopped
        return g.choice_info(j)

    def stream_info(self, actions, index, n, names, info):  # the returned attempt's arm, its attempts, the stop
        return {**super().stream_info(actions, index, n, names, info), **(info or {})}


class AttemptService:
    """Prepared prompts of an attempt adapter joining shared rounds (``decoding.attempts.
    AttemptRounds``), its abandon rule (``gen.abandon``) cutting attempts at its checkpoints: attempt
    j of arm a of a prompt draws from ``row_seed(seed, index, "attempt", a, j)`` (with a
    ``problem_id``: ``row_seed(seed, problem_id, arm name, j, "draft-table")``, the seed of the same
    sample in a sample table), so its Generation is the same whichever prompts shared its rounds and
    whenever it joined. A prompt asking for n > 1 completions runs n independent chains of attempts
    (chain c > 0 draws from the same seeds with ``"choice", c`` inserted after the prompt's key), one
    row each, and is answered when its last chain stops."""

    def __init__(self, gen):
        plan = gen.adapter_kind.attempt_plan(gen.config)
        self.generator = gen
        self.rounds = AttemptRounds(gen.lm, gen.action_set.actions, gen.attempt_decider,
                                    first_arm=plan["first_arm"], distinct=plan["distinct"],
                                    max_attempts=plan["max_attempts"], with_hidden=plan["with_hidden"],
                                    abandon=gen.abandon)
        self._prompts: dict[int, PreparedPrompt] = {}
        self._chains: dict[int, tuple[int, int]] = {}  # the rounds' key -> (prompt key, its chain c)
        self._done: dict[int, list] = {}  # prompt key -> per chain, (Generation, shown ids) once it stopped
        self._next_key = 0

    @property
    def live(self) -> int:
        """Chains of attempts going (each one row of a round)."""
        return len(self.rounds.live)

    def add(self, p: PreparedPrompt) -> int:
        """Prompt ``p`` joins the next round (``p.parallel_budget`` chains); its key."""
        gen = self.generator
        problem = Problem(p.problem_id or f"prompt/{p.index}", question_text(p.prompt), "")
        key, self._next_key = self._next_key, self._next_key + 1
        for c in range(p.parallel_budget):
            choice = () if c == 0 else ("choice", c)  # chain 0 draws exactly what one completion draws
            seeds = (functools.partial(row_seed, p.seed, p.index, *choice, "attempt") if p.problem_id is None
                     else functools.partial(_table_seed, p.seed, p.problem_id, gen.action_set.names, choice))
            chain = self.rounds.add(p.prompt_ids, p.token_budget, seeds,
                                    functools.partial(gen.reading_task.extract_answer, problem),
                                    None if gen.answer_task is None else gen._answer_check(p))
            self._chains[chain] = (key, c)
        self._prompts[key], self._done[key] = p, [None] * p.parallel_budget
        return key

    def round(self, gone: Gone | None = None) -> dict[int, tuple[Generation, list[list[int]]]]:
        """One round (``AttemptRounds.round``; ``gone`` over prompt keys); the prompts whose every
        chain has stopped, by key: their Generation and each chain's shown attempt's token ids."""
        done = self.rounds.round(None if gone is None else self._chain_gone(gone))
        answered = {}
        for chain, problem in done.items():
            key, c = self._chains.pop(chain)
            self._done[key][c] = _attempt_generation(self.generator, self._prompts[key], problem)
            if all(part is not None for part in self._done[key]):
                parts = self._done.pop(key)
                self._prompts.pop(key)
                answered[key] = (_merge_chains([g for g, _ in parts]), [ids for _, ids in parts])
        return answered

    def _chain_gone(self, gone: Gone) -> Gone:
        """``gone`` over the rounds' keys: the chains of the prompts ``gone`` names."""

        def chain_gone(chains):
            left = set(gone(sorted({self._chains[c][0] for c in chains})))
            return [c for c in chains if self._chains[c][0] in left]

        return chain_gone


def _table_seed(seed: int, problem_id: str, names: list[str], choice: tuple, arm: int, j: int) -> int:
    """Attempt j of arm ``arm``: the seed of sample j of that arm of problem ``problem_id`` in a sample
    table built with ``seed`` (``decoding.grid``; ``choice``: another chain's tag, () for the first)."""
    return row_seed(seed, problem_id, *choice, names[arm], j, *SAMPLE_SEED_TAG)


def _merge_chains(chains: list[Generation]) -> Generation:
    """One prompt's Generation from its chains' (one completion each): completion c is chain c's
    shown attempt; the attempt fields are chain 0's, every chain's in ``attempt_choices``."""
    if len(chains) == 1:
        return chains[0]
    return replace(chains[0], completions=[g.completions[0] for g in chains],
                   finish_reasons=[g.finish_reasons[0] for g in chains],
                   completion_tokens=[g.completion_tokens[0] for g in chains],
                   attempt_choices=[g.choice_info(0) for g in chains])


def _attempt_generation(gen, p: PreparedPrompt, problem: ProblemAttempts) -> tuple[Generation, list[int]]:
    """Prompt ``p``'s Generation from its attempts (the chosen one shown, else the last) and the
    shown attempt's token ids."""
    names = gen.action_set.names
    texts, ids, ended_ = problem.texts or [""], problem.token_ids or [[]], problem.ended or [False]
    shown = problem.chosen if problem.chosen >= 0 else len(texts) - 1
    arm = problem.path[shown] if problem.path else gen.adapter_kind.attempt_plan(gen.config)["first_arm"]
    answer = Generation(
        prompt=p.prompt, completions=[texts[shown]], kind=gen.kind, action_names=gen.action_names,
        finish_reasons=["stop" if ended_[shown] else "length"], completion_tokens=[len(ids[shown])],
        prompt_tokens=len(p.prompt_ids), seed=p.seed, action_index=gen.action_names.index(names[arm]),
        decodes=len(problem.path), stopped_by=problem.stopped_by, attempt_actions=[names[a] for a in problem.path],
        answer=problem.answer, attempt_tokens=sum(len(t) for t in problem.token_ids),
        attempt_token_counts=[len(t) for t in problem.token_ids], attempt_cut_at=list(problem.cut_at))
    return answer, ids[shown]


def attempt_events(position: int, answer: Generation, ids: list[list[int]]) -> list[TokenEvent]:
    """An attempt adapter's answer to prompt ``position`` as ``TokenEvent``s: per completion c, its
    chain's shown attempt's tokens ``ids[c]``, the last carrying the finish reason and the chain's
    ``choice_info`` (token -1: an empty answer)."""
    events = []
    for c, tokens in enumerate(ids):
        tokens = tokens or [-1]
        last, info = len(tokens) - 1, answer.choice_info(c)
        action = answer.action_names.index(info["action"]) if info.get("action") in answer.action_names else (
            answer.action_index)
        info = {k: v for k, v in info.items() if k != "action"}
        events += [TokenEvent(position, c, t, action, answer.finish_reasons[c] if k == last else None,
                              info if k == last else None) for k, t in enumerate(tokens)]
    return events


def _chunk_gone(gone: Gone, offset: int) -> Gone:
    """``gone`` over ``run``'s prompt positions as a chunk's: its prompt i is position ``offset + i``."""

    def chunk_gone(going):
        left = set(gone([offset + i for i in going]))
        return [i for i in going if offset + i in left]

    return chunk_gone


_DECODERS: dict[Decoding, Decoder] = {
    ONE_PER_PROMPT: PromptDecoder(),
    PER_TOKEN: TokenDecoder(),
    DRAFT_THEN_REDECODE: DraftDecoder(),
    SEQUENTIAL_ATTEMPTS: AttemptsDecoder(),
}


def decoder_for(kind: AdapterKind) -> Decoder:
    """The decoder of ``kind``'s way of decoding."""
    return _DECODERS[kind.decoding]


@torch.inference_mode()
def _sequence_actions(gen, chunk: list[PreparedPrompt], deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Action ``[P]`` and probabilities ``[P, K]`` (CPU) of the sequence policy, one per prompt."""
    pooling = gen.config.embedding.get("pooling", "mean")
    emb = gen.lm.prompt_embeddings([list(p.prompt_ids) for p in chunk], pooling=pooling)
    budget = torch.tensor([p.parallel_budget for p in chunk])
    if deterministic:
        return gen.policy.choose(emb, budget)
    # One uniform per prompt from its own generator: the draw does not depend on the batch.
    seeds = [row_seed(p.seed, p.index, "policy") for p in chunk]
    uniform = torch.stack([torch.rand((), generator=torch.Generator().manual_seed(s)) for s in seeds])
    return gen.policy.choose(emb, budget, deterministic=False, uniform=uniform)


def _decode_rows(gen, chunk: list[PreparedPrompt], deterministic: bool, on_tokens: TokenCallback | None, offset: int,
                 chosen: torch.Tensor | None, probs: torch.Tensor | None) -> list[Generation]:
    """One batched decode of every completion of ``chunk``: with the action ``chosen[i]`` of each
    prompt, or (None) with the token policy as the loop's chooser."""
    prompt_of_row = [i for i, p in enumerate(chunk) for _ in range(p.parallel_budget)]
    result = decode(
        gen.lm,
        [list(p.prompt_ids) for p in chunk],
        gen.action_set,
        prompt_of_row=prompt_of_row,
        row_actions=None if chosen is None else chosen[prompt_of_row],
        chooser=TokenPolicyChooser(gen.policy, deterministic=deterministic) if chosen is None else None,
        token_budget=[p.token_budget for p in chunk for _ in range(p.parallel_budget)],
        row_seeds=[row_seed(p.seed, p.index, j) for p in chunk for j in range(p.parallel_budget)],
        on_step=None if on_tokens is None else _step_reporter(chunk, offset, on_tokens),
        stop_checks=None if gen.answer_task is None else [gen._answer_check(chunk[i]) for i in prompt_of_row],
    )
    return _generations(gen, chunk, result, chosen, probs)


def _generations(gen, chunk, result: DecodeResult, chosen, probs) -> list[Generation]:
    out, row = [], 0
    for i, p in enumerate(chunk):
        rows = range(row, row + p.parallel_budget)
        row += p.parallel_budget
        lengths = [int(result.lengths[r]) for r in rows]
        out.append(
            Generation(
                prompt=p.prompt,
                completions=[result.texts[r] for r in rows],
                kind=gen.kind,
                action_names=gen.action_set.names,
                finish_reasons=["stop" if ended(result, r) else "length" for r in rows],
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


def _draft_generation(gen, p: PreparedPrompt, i: int, result: DraftGatedResult) -> Generation:
    draft = result.draft
    rows = [(draft, i)] if result.kept[i] or p.parallel_budget > 1 else []
    rows += [(result.redecoded, r) for r, q in enumerate(result.redecode_prompt) if q == i]
    lengths = [int(res.lengths[r]) for res, r in rows]
    choice = int(result.choices[i])
    return Generation(
        prompt=p.prompt, completions=[res.texts[r] for res, r in rows], kind=gen.kind,
        action_names=gen.action_names,
        finish_reasons=["stop" if ended(res, r) else "length" for res, r in rows],
        completion_tokens=lengths, prompt_tokens=len(p.prompt_ids), seed=p.seed, action_index=choice,
        action_probs=result.probs[i].tolist(), draft_kept=choice == KEEP_DRAFT, decodes=result.decodes[i],
        draft_tokens=int(draft.lengths[i]),
    )


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
        warnings.warn(message + "; decoding to the budget", stacklevel=4)
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
                reason = ("stop" if ended(draft, i) else "length") if last else None
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
