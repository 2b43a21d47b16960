"""Tasks: data sets turned into chat prompts, with verifiers that return 0.0 or 1.0.

Importing this package registers the built-in tasks, so ``get_task(name, **options)`` works for
every name in ``available_tasks()``: ``arithmetic`` (the embedded default), ``pyfunc`` (the embedded
code task), ``math``, ``gsm8k``, ``mix`` (``arithmetic+pyfunc``: several tasks as one), and
the code tasks when ``tasks/code.py`` is present.
"""

import importlib

from . import arithmetic, math, mix, pyfunc  # noqa: F401  (importing registers the tasks)
from .arithmetic import ArithmeticConfig, ArithmeticTask
from .base import (
    SPLITS,
    SYSTEM_PROMPTS,
    Problem,
    PromptedProblem,
    Task,
    assign_cot,
    available_tasks,
    build_prompts,
    chat_messages,
    check_disjoint,
    content_hash,
    content_hashes,
    get_task,
    parse_data_spec,
    problems_digest,
    problems_in,
    problems_record,
    read_jsonl,
    register_task,
    resolve_system_prompt,
)
from .math import GSM8KTask, MathTask, score_gsm8k, score_math
from .mix import MixTask
from .pyfunc import PyFuncConfig, PyFuncTask


def _import_optional(module: str) -> None:
    """Import a built-in task module that may not exist in every checkout (it registers itself).
    Only the module's own absence is tolerated; an error inside it still surfaces."""
    name = f"{__name__}.{module}"
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name != name:
            raise


_import_optional("code")
_import_optional("jsonl")  # your own task: JSONL files + a module:function verifier

__all__ = [
    "ArithmeticConfig",
    "ArithmeticTask",
    "GSM8KTask",
    "MathTask",
    "MixTask",
    "PyFuncConfig",
    "PyFuncTask",
    "score_gsm8k",
    "score_math",
    "SPLITS",
    "SYSTEM_PROMPTS",
    "Problem",
    "PromptedProblem",
    "Task",
    "assign_cot",
    "available_tasks",
    "build_prompts",
    "chat_messages",
    "check_disjoint",
    "content_hash",
    "content_hashes",
    "get_task",
    "parse_data_spec",
    "problems_digest",
    "problems_in",
    "problems_record",
    "read_jsonl",
    "register_task",
    "resolve_system_prompt",
]
