"""A mixture of tasks (domains), for mixed-domain training: ``--task arithmetic+pyfunc``.

The paper trains one adapter on a balanced mixture of math and code and evaluates it on each
domain's own test split. ``MixTask`` is that mixture as one task:

- its name is the spec it was built from (``"arithmetic+pyfunc"``, or with weights
  ``"arithmetic:1+pyfunc:1"``), so the adapter's ``adapter.json`` records what it was trained on;
- every problem keeps its domain's id (ids of the built-in tasks start with the task name, so they
  cannot clash; a clash is an error) and is tagged with ``meta["domain"]``;
- ``prompt``, ``reward`` and ``extract_answer`` go to the problem's own domain task;
- a split is the union of the domains' splits of that name (a domain without it adds nothing),
  interleaved by weight with a smooth weighted round-robin, so that any prefix of a split (the
  trainers take ``[:max_train_prompts]``, ``[:val_problems]``) holds the domains in proportion;
- the trainers' prompt sampler (``training.common.sample_prompt_batch``) draws each step's prompts
  per domain in proportion to ``weights`` (:meth:`MixTask.prompt_groups`), not in proportion to how
  many problems each domain has.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from .base import Problem, Task, get_task, register_task

__all__ = ["MixTask", "parse_mix_spec", "domain_of", "is_mix_spec"]

MIX_SEPARATOR = "+"


def is_mix_spec(name: str) -> bool:
    """Whether a task name names a mixture (``"a+b"``)."""
    return isinstance(name, str) and MIX_SEPARATOR in name


def parse_mix_spec(spec: str | Mapping[str, float] | Sequence[str]) -> dict[str, float]:
    """``"arithmetic:2+pyfunc:1"`` -> ``{"arithmetic": 2.0, "pyfunc": 1.0}``; a name without a weight
    weighs 1. A mapping or a list of names is accepted too. At least two distinct domains."""
    if isinstance(spec, str):
        weights: dict[str, float] = {}
        for part in spec.split(MIX_SEPARATOR):
            name, sep, weight = (piece.strip() for piece in part.partition(":"))
            if not name:
                raise ValueError(f"task mix {spec!r}: empty task name (write e.g. arithmetic+pyfunc)")
            if name in weights:
                raise ValueError(f"task mix {spec!r}: {name!r} is named twice")
            try:
                weights[name] = float(weight) if sep else 1.0
            except ValueError:
                raise ValueError(f"task mix {spec!r}: weight {weight!r} of {name!r} is not a number") from None
    elif isinstance(spec, Mapping):
        weights = {str(k): float(v) for k, v in spec.items()}
    elif isinstance(spec, Sequence):
        weights = {str(k): 1.0 for k in spec}
    else:
        raise ValueError(f"tasks must be 'a+b', 'a:w+b:w', a mapping or a list of names; got {spec!r}")
    if len(weights) < 2:
        raise ValueError(f"a task mix needs at least two different tasks, got {list(weights)}")
    for name, weight in weights.items():
        if not weight > 0:
            raise ValueError(f"task mix: weight of {name!r} must be > 0, got {weight}")
        if is_mix_spec(name) or name == "mix":
            raise ValueError(f"task mix: {name!r} cannot itself be a mix")
    return weights


def domain_of(problem: Problem) -> str | None:
    """The domain a mixed task tagged ``problem`` with, or None."""
    return problem.meta.get("domain")


def interleave(by_domain: Mapping[str, Sequence[Problem]], weights: Mapping[str, float]) -> list[Problem]:
    """All problems of ``by_domain``, each domain's in its own order, interleaved by smooth weighted
    round-robin: every prefix holds the domains in ``weights``' proportions (+-1) until one runs out."""
    queues = {d: list(ps) for d, ps in by_domain.items() if ps}
    position = dict.fromkeys(queues, 0)
    credit = dict.fromkeys(queues, 0.0)
    out: list[Problem] = []
    while queues:
        total = sum(weights[d] for d in queues)
        for d in queues:
            credit[d] += weights[d]
        pick = max(queues, key=lambda d: credit[d])  # ties: the first domain in order
        credit[pick] -= total
        out.append(queues[pick][position[pick]])
        position[pick] += 1
        if position[pick] == len(queues[pick]):
            del queues[pick]
    return out


@register_task("mix")
class MixTask(Task):
    """Several tasks as one, weighted (``get_task("mix", tasks="arithmetic+pyfunc")``, or
    ``get_task("arithmetic+pyfunc")``). Options: ``tasks=`` (the spec), ``system_prompt=`` (given to
    every domain), ``options=`` (per-domain keyword options, ``{"pyfunc": {"test_size": 50}}``)."""

    def __init__(
        self,
        tasks: str | Mapping[str, float] | Sequence[str] = "arithmetic+pyfunc",
        *,
        system_prompt: str | None = None,
        options: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.weights = parse_mix_spec(tasks)
        options = dict(options or {})
        unknown = sorted(set(options) - set(self.weights))
        if unknown:
            raise ValueError(f"task mix: options for {unknown}, which the mix does not contain ({list(self.weights)})")
        shared = {} if system_prompt is None else {"system_prompt": system_prompt}
        self.domains: dict[str, Task] = {
            d: get_task(d, **{**shared, **dict(options.get(d, {}))}) for d in self.weights
        }
        self.system_prompt = None  # each domain prompts with its own
        # The instance's name is its spec, so an adapter records what it was trained on.
        self.name = self.spec
        self.splits = tuple(dict.fromkeys(s for t in self.domains.values() for s in t.splits))

    @property
    def spec(self) -> str:
        """``"a+b"`` for equal weights, ``"a:w+b:w"`` otherwise (what ``get_task`` accepts back)."""
        if len(set(self.weights.values())) == 1:
            return MIX_SEPARATOR.join(self.weights)
        return MIX_SEPARATOR.join(f"{d}:{w:g}" for d, w in self.weights.items())

    def domain_task(self, problem: Problem) -> Task:
        """The task ``problem`` belongs to (by its ``meta["domain"]`` tag)."""
        domain = domain_of(problem)
        if domain not in self.domains:
            raise ValueError(
                f"problem {problem.id!r} has domain {domain!r}, not one of this mix's {list(self.domains)}"
            )
        return self.domains[domain]

    def load(self, split: str) -> list[Problem]:
        self.check_split(split)
        by_domain = {
            d: [replace(p, meta={**p.meta, "domain": d}) for p in t.load(split)]
            for d, t in self.domains.items()
            if split in t.splits
        }
        seen: dict[str, str] = {}
        for d, problems in by_domain.items():
            for p in problems:
                if seen.setdefault(p.id, d) != d:
                    raise ValueError(f"task mix: problem id {p.id!r} is in both {seen[p.id]!r} and {d!r}")
        return interleave(by_domain, self.weights)

    def draw_order(self, problems: Sequence[Problem], seed: int) -> list[Problem]:
        """Each domain's problems in its own draw order, interleaved by weight (a subset keeps the mix)."""
        by_domain = {d: t.draw_order([p for p in problems if domain_of(p) == d], seed) for d, t in self.domains.items()}
        return interleave(by_domain, self.weights)

    def prompt(self, problem: Problem, cot: bool = False) -> list[dict[str, str]]:
        return self.domain_task(problem).prompt(problem, cot=cot)

    def reward(self, problem: Problem, completion: str) -> float:
        try:
            task = self.domain_task(problem)
        except ValueError:  # a verifier never raises: an untagged problem scores 0
            return 0.0
        return task.reward(problem, completion)

    def extract_answer(self, problem: Problem, completion: str) -> str:
        return self.domain_task(problem).extract_answer(problem, completion)

    def answer_complete(self, problem: Problem, text: str) -> bool:
        try:
            task = self.domain_task(problem)
        except ValueError:
            return False
        return task.answer_complete(problem, text)

    def prompt_groups(self, problems: Sequence[Problem]) -> dict[str, Any]:
        """The trainers' per-step grouping: ``{"groups": domain of each problem, "weights": ...}``."""
        return {"groups": [domain_of(p) for p in problems], "weights": dict(self.weights)}
