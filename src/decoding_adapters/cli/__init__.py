"""``decoding-adapters``: thin sub-commands over the library.

The command-line layer over the library. Each sub-command is one module of this package with two
functions, ``configure_parser(parser)`` (its options, derived from config dataclasses by
``config_args``) and ``run_cli(args) -> int``; this file only wires them together. Library
modules never import from ``cli``.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import logging
import sys
from pathlib import Path

from ..lm.cpu_allocator import keep_freed_memory
from .help import HelpFormatter, cached_help, is_help_request, print_help_text, shorten_help, store_help

# sub-command -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": (
        "decoding_adapters.cli.demo",
        "the main job: select actions, train both adapters, evaluate, write a report",
    ),
    "reproduce": (
        "decoding_adapters.cli.reproduce",
        "the headline study: the published evidence run on the sealed2 split (the demo's stages at full size; "
        "--plan prints its plan)",
    ),
    "select-actions": (
        "decoding_adapters.cli.select_actions",
        "evaluate a candidate pool and pick K complementary actions",
    ),
    "train-sequence": ("decoding_adapters.cli.train_sequence", "train a sequence-level (contextual bandit) adapter"),
    "train-draft": ("decoding_adapters.cli.train_draft",
                    "train a draft-gated adapter (keep a greedy draft or re-decode)"),
    "train-attempt": ("decoding_adapters.cli.train_attempt",
                      "train the attempt policy (stop, or one more attempt with an arm) on sample tables, against the "
                      "fixed rules"),
    "train-verifier": ("decoding_adapters.cli.train_verifier",
                       "train the learned verifier (is this attempt right?) on a sample table; its AUC, calibration"),
    "rules": ("decoding_adapters.cli.rules",
              "tune the fixed answer rules (self-consistency, ESC, DeepConf, ...) on a validation sample table, "
              "score them on another"),
    "attach-abandon": ("decoding_adapters.cli.attach_abandon",
                       "fit an abandon rule (cut an attempt short at checkpoints) for an attempt adapter and write it "
                       "into the adapter"),
    "make-rule": ("decoding_adapters.cli.make_rule",
                  "write a fixed answer rule (ESC, self-consistency, DeepConf, ...) as an adapter with no weights"),
    "train-token": ("decoding_adapters.cli.train_token", "train a token-level (POMDP) adapter"),
    "evaluate": ("decoding_adapters.cli.evaluate", "pass@k of static baselines and adapters with confidence intervals"),
    "report": ("decoding_adapters.cli.report", "write report.md, results.json and figures from an evaluation"),
    "domains": (
        "decoding_adapters.cli.domains",
        "study: adapters trained on arithmetic, pyfunc and their mix, evaluated per domain and out of distribution",
    ),
    "generate": ("decoding_adapters.cli.generate", "decode prompts with a trained adapter"),
    "serve": ("decoding_adapters.cli.serve", "OpenAI-compatible HTTP server that decodes with an adapter"),
    "model-path": (
        "decoding_adapters.cli.model_path",
        "print the directory transformers loads a model (or an adapter's base model) from",
    ),
}

DESCRIPTION = """\
Learn how a frozen LLM should decode. A small policy (a decoding adapter) picks the decoding
strategy (temperature / top-k / top-p / min-p / greedy) once per prompt, or at every token,
and is trained with REINFORCE on verifiable rewards. Defaults run on the embedded
SmolLM2-135M-Instruct and the generated arithmetic task: no network needed.

typical flow:
  decoding-adapters select-actions --task arithmetic --k 6 --out runs/actions
  decoding-adapters train-sequence --task arithmetic --actions runs/actions/actions.json --out runs/seq
  decoding-adapters train-token --task arithmetic --token-budget 32 --out runs/tok
  decoding-adapters evaluate --task arithmetic --adapter runs/seq --adapter runs/tok --out runs/eval
  decoding-adapters rules --table runs/tables/test --validation-table runs/tables/val --out runs/rules
  decoding-adapters train-attempt --val-table runs/tables/val --out runs/attempt   # the attempt policy
  decoding-adapters make-rule --rule esc --window 2 --out runs/esc                # a fixed rule as an adapter
  decoding-adapters demo --out runs/demo          # all of the above, fitted to 15 minutes on this machine (--minutes)
  decoding-adapters demo --size tiny --out runs/demo-tiny   # every stage, rules and attempt policy, in minutes

`decoding-adapters COMMAND --help` lists a command's options (--help-all: every option, with its full help).
"""


USER_ERRORS = (ValueError, FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)
"""Exceptions that mean bad input (an option, a file): reported as one line naming the problem.
Library code raises ValueError with the file's name for a malformed file (action set, adapter.json,
data, checkpoint, outcome table), so nothing else needs catching here."""


class _OneLineErrorParser(argparse.ArgumentParser):
    """A bad option is one line naming it (as a bad file or value is), not the usage text first.
    Abbreviations are refused: ``--price`` is not ``--prices`` (a typo must not run a long job)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **{**kwargs, "allow_abbrev": False})

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(command: str | None = None, full_help: bool = True) -> argparse.ArgumentParser:
    """The full parser; only ``command``'s module is imported (all of them when None), so that
    ``decoding-adapters --help`` and each sub-command start quickly. ``full_help=False`` gives the
    short ``--help`` (``help.shorten_help``)."""
    parser = _OneLineErrorParser(
        prog="decoding-adapters", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        if command is not None and name != command:
            sub.add_parser(name, help=help_text)
            continue
        module = importlib.import_module(module_name)
        p = sub.add_parser(
            name,
            help=help_text,
            description=(module.__doc__ or help_text).split("\n\n")[0],
            formatter_class=HelpFormatter,
        )
        module.configure_parser(p)
        if not full_help:
            shorten_help(p)
        # a command that can say what an interrupted run kept has ``interrupted_note(args)``
        p.set_defaults(_run=module.run_cli, _interrupted=getattr(module, "interrupted_note", None))
    return parser


def _help_text(argv: list[str]) -> str:
    """The help screen ``argv`` (``[command] --help`` or ``--help-all``) asks for."""
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(command or "", full_help="--help-all" in argv)
    if command is None:
        return parser.format_help()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command].format_help()


def warm_help_cache() -> int:
    """Build every help screen once (``make setup`` runs this), so that the first ``--help`` of each
    command is as fast as the next. Returns how many screens were stored."""
    stored = 0
    for argv in [["--help"]] + [[name, flag] for name in COMMANDS for flag in ("--help", "--help-all")]:
        if cached_help(argv) is None:
            store_help(argv, _help_text(argv))
            stored += 1
    return stored


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    if is_help_request(argv) and (command is None or command in COMMANDS):
        text = cached_help(argv)  # a help screen is kept: printing it again imports no library module
        if text is None:
            text = _help_text(argv)
            store_help(argv, text)
        print_help_text(text)
        return 0
    full_help = "--help-all" in argv
    argv = ["--help" if a == "--help-all" else a for a in argv]
    parser = build_parser(command if command in COMMANDS else "", full_help=full_help or "--help" not in argv)
    args = _parse(parser, argv, command)
    args._given = _given_options(parser, argv) if getattr(args, "resume", False) else set()
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    keep_freed_memory()  # an application-level allocator setting: see cpu_allocator
    try:
        return int(args._run(args) or 0)
    except USER_ERRORS as err:  # user errors: one clear line, no traceback
        _release_refused_locks()  # a refused run leaves no lock file behind
        print(f"decoding-adapters {args.command}: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        _release_refused_locks()
        print(f"decoding-adapters {args.command}: error: {err.strerror}", file=sys.stderr)  # a full disk: one line
        return 2
    except KeyboardInterrupt:
        # on its own line: a progress bar may hold the cursor at the end of its line
        print(f"\ninterrupted; {_saved_note(args)}", file=sys.stderr)
        return 130


def _release_refused_locks() -> None:
    """``core.files.release_refused_locks`` where a run has taken a lock (looked up, not imported:
    importing it loads torch, which ``--help`` must not wait for)."""
    files = sys.modules.get(__name__.rpartition(".")[0] + ".core.files")
    if files is not None:
        files.release_refused_locks()


def _parse(parser: argparse.ArgumentParser, argv: list[str], command: str | None) -> argparse.Namespace:
    """``argv`` parsed; an option the sub-command does not take is refused by that sub-command's
    parser, so the error points to its own ``--help``."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        owner = sub.choices.get(command) if sub is not None and command in COMMANDS else None
        (owner or parser).error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def _given_options(parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """The ``dest`` of every option ``argv`` sets itself (not by default): parsed again with every
    default suppressed."""
    parsers = [parser] + [c for a in parser._actions if isinstance(a, argparse._SubParsersAction)
                          for c in a.choices.values()]
    saved = [(a, a.default) for p in parsers for a in p._actions]
    try:
        for action, _ in saved:
            action.default = argparse.SUPPRESS
        return set(vars(parser.parse_args(argv)))
    finally:
        for action, default in saved:
            action.default = default


def _saved_note(args) -> str:
    """What an interrupted command leaves: a checkpoint to resume, finished stages, or nothing."""
    note = getattr(args, "_interrupted", None)
    if note is not None:
        try:
            return note(args)
        except (OSError, ValueError):  # a half-written output it cannot read: the general note
            pass
    out = Path(getattr(args, "out", "") or "")
    if args.command in ("train-token", "train-sequence"):
        if (out / "checkpoint.pt").is_file():
            return f"the last checkpoint is in {out}: add --resume to the same command to continue"
        return f"nothing saved yet (no checkpoint in {out}): the same command starts over"
    if args.command == "evaluate":
        if (out / "eval_checkpoint.json").is_file():
            return f"the finished seeds are saved in {out}: the same command continues from them"
        return "no seed had finished, nothing saved: the same command starts over"
    if str(out) not in ("", ".") and out.is_dir() and any(p.name != ".lock" for p in out.iterdir()):
        return f"finished stages are in {out}: the same command continues from them"
    return "nothing saved yet"


if __name__ == "__main__":
    sys.exit(main())
