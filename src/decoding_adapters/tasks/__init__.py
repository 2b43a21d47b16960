"""Tasks: data sets turned into chat prompts, with verifiers that return 0.0 or 1.0.

Importing this package registers the built-in tasks, so ``get_task(name, **options)`` works for
every name in ``available_tasks()``: ``arithmetic`` (the embedded default), ``pyfunc`` (the embedded
code task), ``math``, ``gsm8k``, and the code tasks when ``tasks/code.py`` is present.
"""

import importlib

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
    get_task,
    read_jsonl,
    register_task,
    resolve_system_prompt,
)

from . import arithmetic, math, pyfunc  # noqa: E402, F401  (importing registers the tasks)
from .arithmetic import ArithmeticConfig, ArithmeticTask  # noqa: E402
from .math import GSM8KTask, MathTask, score_gsm8k, score_math  # noqa: E402
from .pyfunc import PyFuncConfig, PyFuncTask  # noqa: E402


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

__all__ = [
    "ArithmeticConfig",
    "ArithmeticTask",
    "GSM8KTask",
    "MathTask",
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
    "get_task",
    "read_jsonl",
    "register_task",
    "resolve_system_prompt",
]
