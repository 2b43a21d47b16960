"""Tasks: data sets turned into chat prompts, with verifiers that return 0.0 or 1.0.

Importing this package registers the built-in tasks, so ``get_task(name, **options)`` works for
every name in ``available_tasks()``: ``arithmetic`` (the embedded default), ``pyfunc`` (the embedded
code task), ``math``, ``gsm8k``, ``humaneval``, ``codecontests``, ``jsonl`` (your own data and
verifier) and ``mix`` (``arithmetic+pyfunc``: several tasks as one).
"""

from . import arithmetic, code, jsonl, math, mix, pyfunc  # noqa: F401  (importing registers the tasks)
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
    task_from_record,
    task_record,
)
from .math import GSM8KTask, MathTask, score_gsm8k, score_math
from .mix import MixTask
from .pyfunc import PyFuncConfig, PyFuncTask
from .splits import check_disjoint

__all__ = [
    "task_from_record",
    "task_record",
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
