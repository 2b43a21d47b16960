"""Out-of-distribution labels: is an adapter evaluated on what it was trained on?

An adapter records its training task in ``adapter.json`` (``task``: ``"arithmetic"``, or a mix
``"arithmetic+pyfunc"``). Evaluated on task ``E`` and split ``S``, it is

- **in distribution** when ``E`` is its training task or one of the domains of its training mix,
  and ``S`` is not ``ood``;
- **OOD** otherwise: another task (``arithmetic -> pyfunc``) or the held-out families of its own
  task (``arithmetic -> arithmetic:ood``);
- unknown when the adapter records no task (``task`` empty in ``adapter.json``).

The label reads ``train task -> eval task[:split]`` (the split is shown unless it is ``test``).
``evaluate`` stores the labels in ``eval_details.json`` (``config.ood``) and the report prints them.
"""

from __future__ import annotations

from typing import Sequence

from ..tasks.mix import is_mix_spec, parse_mix_spec

__all__ = ["OOD_SPLIT", "training_domains", "ood_label", "ood_labels"]

OOD_SPLIT = "ood"
"""The split of held-out families (``arithmetic``, ``pyfunc``)."""


def training_domains(train_task: str) -> list[str]:
    """The tasks an adapter trained on ``train_task`` has seen: the task, or a mix's domains."""
    if not train_task:
        return []
    return list(parse_mix_spec(train_task)) if is_mix_spec(train_task) else [train_task]


def ood_label(train_task: str, eval_task: str, split: str = "test") -> dict:
    """``{"train_task", "eval", "ood": True/False/None, "label": "train -> eval"}``; ``ood`` is None
    when the training task is unknown."""
    target = eval_task if split == "test" else f"{eval_task}:{split}"
    if not train_task:
        return {"train_task": "", "eval": target, "ood": None, "label": f"? -> {target}"}
    seen = eval_task in training_domains(train_task) or eval_task == train_task
    return {"train_task": train_task, "eval": target, "ood": not seen or split == OOD_SPLIT,
            "label": f"{train_task} -> {target}"}


def ood_labels(methods: Sequence, eval_task: str, split: str = "test") -> dict[str, dict]:
    """:func:`ood_label` of every adapter method (``method.adapter.task``), by method name."""
    return {
        m.name: ood_label(getattr(m.adapter, "task", "") or "", eval_task, split)
        for m in methods
        if m.adapter is not None
    }
