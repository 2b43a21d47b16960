"""What ``--help`` prints, and how it stays fast.

- **Short by default.** ``--help`` shows each option with the first sentence of its help, a usage
  line of the required options only, and leaves out the nested study overrides (``--token.*``,
  ``--selection.*``, ...); ``--help-all`` shows everything. Every default is printed once, by the
  formatter, and never for a required option or one whose default is "none".
- **Fast.** Building a sub-command's parser imports the library (torch among it: about 2 s), so the
  text of a help screen is kept in the user's cache, keyed by the package's source files (their
  names, sizes and modification times), the command, the screen width and ``--help-all``. The first
  ``--help`` of a command builds it; later ones print it without importing the library. Any edit of
  the package changes the key.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import sys
import textwrap
from pathlib import Path

__all__ = ["HelpFormatter", "shorten_help", "cached_help", "store_help", "help_width", "HELP_FLAGS"]

HELP_FLAGS = ("-h", "--help", "--help-all")
PACKAGE = Path(__file__).resolve().parents[1]


def help_width() -> int:
    """The help's line width: the terminal's, between 80 and 100 columns."""
    return min(max(shutil.get_terminal_size((100, 24)).columns, 80), 100)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Prints each default once: not for required options, ``None`` or ``False`` switches, nor where
    the help already states one."""

    def __init__(self, prog, indent_increment=2, max_help_position=32, width=None):
        super().__init__(prog, indent_increment, max_help_position, width or help_width())

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if (action.required or default in (None, argparse.SUPPRESS, False, []) or "%(default)" in text
                or re.search(r"\bdefault\b", text) or not action.option_strings):
            return text
        return text + " (default: %(default)s)"

    def _expand_help(self, action):
        if isinstance(action.default, tuple):  # as the option is written: 1,2,4
            action = argparse.Action(action.option_strings, action.dest, default=",".join(map(str, action.default)),
                                     help=action.help, metavar=action.metavar, choices=action.choices)
        return super()._expand_help(action)


ADVANCED = frozenset({
    # the frozen LM's kernels and the rollout engine
    "attention", "linear_kernel", "cuda_graphs", "compile_step", "batch_invariant", "batch_rows", "backend", "workers",
    "ray_address", "gpu_memory_utilization", "table_backend", "table_workers",
    # task details
    "system_prompt", "cot_ratio", "verifier_timeout_s", "drop_overlap", "train_size", "validation_size",
    # trainer internals (docs/token-defaults.md says why their defaults are what they are)
    "lr_decay", "grad_clip", "entropy_coef", "mask_max_prob", "baseline", "ema_decay", "policy_width",
    "policy_layers", "dropout", "policy_temperature", "prior_mass", "kl_coef", "ppo_epochs", "clip",
    "filter_min_pass", "filter_max_pass", "val_samples", "val_modes", "keep_best", "min_improvement_se",
    "patience", "min_improvement", "checkpoint_every", "hidden", "weight_decay", "val_every", "pooling",
    "budget_prior_actions", "replay",
    # the draft trainer's tables and update (docs/draft-gated.md)
    "full_information", "redecode_cost", "table_samples",
    # the attempt trainer's network, its tables' growth and the decoder ablation (docs/attempt.md)
    "width", "hidden_proj", "stop_bias", "problems_per_step", "extend_tables", "decoder_count", "decoder_ablation",
})
"""Options ``--help`` names in one paragraph instead of describing (``--help-all`` describes them)."""

SHORT_HELP_CHARS = 150
"""The longest option help ``--help`` prints (about three lines); ``--help-all`` prints all of it."""

_FIRST_SENTENCE = re.compile(r"^(.+?[.!?])(\s+[A-Z(]|\s*$)", re.S)
_CLAUSE_END = re.compile(r"[;:]\s")


def short_help_text(text: str) -> str:
    """An option's help for ``--help``: its first sentence, else its first clauses (up to a ";" or
    ":") that fit in :data:`SHORT_HELP_CHARS`, else all of it; never a cut inside a clause, and " ..."
    (the rest in ``--help-all``) only after a whole sentence or clause."""
    match = _FIRST_SENTENCE.match(text)
    if match and len(match.group(1)) < len(text) and len(match.group(1)) <= SHORT_HELP_CHARS:
        return match.group(1) + " ..."
    ends = [m.start() for m in _CLAUSE_END.finditer(text) if 40 <= m.start() <= SHORT_HELP_CHARS]
    if len(text) > SHORT_HELP_CHARS and ends:
        # a clause that opened a bracket is not whole: end at the last clause with brackets balanced
        whole = [e for e in ends if text[:e].count("(") == text[:e].count(")")]
        if whole:
            return text[:whole[-1]] + " ..."
    return text


def shorten_help(parser: argparse.ArgumentParser) -> None:
    """Turn ``parser``'s help into the short form: first sentences, no nested study groups, a usage
    line of the required options only."""
    for group in parser._action_groups:
        nested = group.title and group.title.endswith(".*)")
        for action in group._group_actions:
            if nested:
                action.help = argparse.SUPPRESS
            elif action.help and action.help != argparse.SUPPRESS and len(action.help) > 110:
                action.help = short_help_text(action.help)
    parser._action_groups = [g for g in parser._action_groups if not (g.title or "").endswith(".*)")]
    advanced = [a for a in parser._actions if a.dest in ADVANCED and a.help != argparse.SUPPRESS]
    for action in advanced:
        action.help = argparse.SUPPRESS
    if advanced:
        names = ", ".join(a.option_strings[0] for a in advanced)
        parser.add_argument_group("more options (described by --help-all)",
                                  textwrap.fill(names, help_width() - 2, break_on_hyphens=False))
    required = [a for a in parser._actions if a.required and a.option_strings]
    tail = " ".join(f"{a.option_strings[0]} {a.metavar or a.dest.upper()}" for a in required)
    parser.usage = f"%(prog)s [options] {tail}".rstrip()
    parser.epilog = "--help-all: every option, with its full help" + (
        " and the stage-size overrides" if any("." in a.dest for a in parser._actions) else "")


# ---- the cache ---------------------------------------------------------------------------------

def _source_key() -> str:
    digest = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        stat = path.stat()
        digest.update(f"{path.relative_to(PACKAGE)}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:20]


def _cache_file(argv: list[str]) -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "decoding-adapters" / "help"
    command = next((a for a in argv if not a.startswith("-")), "")
    kind = "all" if "--help-all" in argv else "short"
    return root / f"{_source_key()}-{command or 'main'}-{kind}-{help_width()}.txt"


def is_help_request(argv: list[str]) -> bool:
    """``[command] --help``: a help screen and nothing else."""
    words = [a for a in argv if not a.startswith("-")]
    flags = [a for a in argv if a.startswith("-")]
    return len(words) <= 1 and len(flags) == 1 and flags[0] in HELP_FLAGS


def cached_help(argv: list[str]) -> str | None:
    """The stored help text for this request, if any (never raises)."""
    try:
        return _cache_file(argv).read_text(encoding="utf-8")
    except OSError:
        return None


def store_help(argv: list[str], text: str) -> None:
    """Keep ``text`` for the next identical request (a read-only cache is fine: nothing is kept)."""
    try:
        path = _cache_file(argv)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
    except OSError:
        pass


def print_help_text(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()
