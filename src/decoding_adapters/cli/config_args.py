"""Command-line options derived from config dataclasses: every setting is defined once.

``add_config_arguments(parser, Config)`` adds one option per field of a dataclass, in a group:

- the option is ``--field-name`` (``flags`` renames it, ``aliases`` adds more names);
- its help is the field's docstring (the string literal under it in the class body) or
  ``field(metadata={"help": ...})``; ``--help`` shows the default;
- ``bool`` -> ``--x`` / ``--no-x``; ``Literal[...]`` -> ``choices``; ``tuple[int, ...]`` -> a
  comma-separated list (``1,2,4``; integers must be positive); ``list[str]`` -> a repeatable option; ``X | None`` also
  accepts ``none``; a field without a default is required.

``build_config(Config, args)`` builds the dataclass back from the parsed namespace (the
dataclass's own ``__post_init__`` validates it). With ``overrides_only=True`` the options have no
default and ``build_config(..., base=preset)`` replaces only the fields given on the command line.
Compare TRL's ``GRPOConfig`` + ``HfArgumentParser``.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import textwrap
import types
import typing
from functools import lru_cache
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence, Union

__all__ = ["add_config_arguments", "build_config", "field_docs"]


@lru_cache(maxsize=None)
def field_docs(cls: type) -> dict[str, str]:
    """``{field: docstring}`` from the string literals that follow fields in ``cls``'s body."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):  # no source (e.g. a frozen build): metadata only
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs = {}
    for node, after in zip(body, body[1:] + [None]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            docs[node.target.id] = " ".join(inspect.cleandoc(after.value.value).split())
    return docs


def _unwrap_optional(tp) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0], True
    return tp, False


def _comma_list(item: Callable[[str], Any]) -> Callable[[str], tuple]:
    """``"1,2,4"`` -> ``(1, 2, 4)``. Integer lists are budgets and k values: positive integers."""

    def parse(text: str) -> tuple:
        try:
            values = tuple(item(x.strip()) for x in text.split(",") if x.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}") from None
        if not values or (item is int and min(values) < 1):
            raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
        return values

    parse.__name__ = "comma-separated list"
    return parse


def _or_none(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        return None if text.strip().lower() in ("none", "null") else convert(text)

    parse.__name__ = getattr(convert, "__name__", "value")
    return parse


def _option(tp) -> dict:
    """argparse keywords (type / choices / action / nargs) for a field type."""
    tp, optional = _unwrap_optional(tp)
    origin = typing.get_origin(tp)
    if tp is bool:
        return {"action": argparse.BooleanOptionalAction}
    if origin is Literal:
        choices = list(typing.get_args(tp))
        kwargs: dict = {"choices": choices, "type": type(choices[0])}
    elif origin is tuple:
        item = typing.get_args(tp)[0]
        kwargs = {"type": _comma_list(item), "metavar": f"{item.__name__.upper()}[,...]"}
    elif origin is list:
        return {"action": "append", "type": typing.get_args(tp)[0]}
    elif tp in (int, float, str):
        kwargs = {"type": tp}
    else:
        raise TypeError(f"no command-line option for a field of type {tp!r}")
    if optional:
        kwargs["type"] = _or_none(kwargs["type"])
        if "choices" in kwargs:
            kwargs["choices"] = kwargs["choices"] + [None]
    return kwargs


def _default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def add_config_arguments(parser: argparse.ArgumentParser, cls: type, *, title: str | None = None,
                         exclude: Iterable[str] = (), flags: Mapping[str, Sequence[str]] | None = None,
                         aliases: Mapping[str, Sequence[str]] | None = None, defaults: Mapping[str, Any] | None = None,
                         choices: Mapping[str, Sequence[Any]] | None = None, overrides_only: bool = False):
    """Add an option group for the fields of dataclass ``cls`` (see the module docstring).

    ``flags`` replaces a field's option names, ``aliases`` adds names (old spellings), ``defaults``
    changes a default for this command, ``choices`` restricts a plain ``str`` field, and
    ``overrides_only`` leaves unset options out of the namespace."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    group = parser.add_argument_group(title or (inspect.getdoc(cls) or cls.__name__).split("\n")[0])
    skip, flags, aliases, defaults, choices = set(exclude), flags or {}, aliases or {}, defaults or {}, choices or {}
    for f in dataclasses.fields(cls):
        if f.name in skip or not f.init:
            continue
        kwargs = _option(hints[f.name])
        if f.name in choices:
            kwargs["choices"] = list(choices[f.name])
        names = list(flags.get(f.name, ["--" + f.name.replace("_", "-")]))
        if f.name in flags and "choices" not in kwargs and "action" not in kwargs:
            kwargs["metavar"] = names[0].lstrip("-").replace("-", "_").upper()
        names += [("--" + a.replace("_", "-")) if not a.startswith("-") else a for a in aliases.get(f.name, ())]
        default = defaults.get(f.name, _default(f))
        help_text = f.metadata.get("help") or docs.get(f.name, "")
        kwargs["help"] = help_text.replace("%", "%%")
        if overrides_only:
            kwargs["default"] = argparse.SUPPRESS
        elif default is dataclasses.MISSING:
            kwargs["required"] = True
        elif kwargs.get("action") == "append":
            kwargs["default"] = list(default)
        else:
            kwargs["default"] = default
        group.add_argument(*names, dest=f.name, **kwargs)
    return group


def build_config(cls: type, args: argparse.Namespace, *, base: Any = None, **overrides):
    """The ``cls`` instance the parsed ``args`` describe: every field found in ``args`` (fields
    missing there keep ``base``'s value, or the dataclass default), then ``overrides``."""
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if f.init and hasattr(args, f.name)}
    given.update(overrides)
    hints = typing.get_type_hints(cls)
    for name, value in given.items():  # a tuple field given a list (e.g. from JSON) becomes a tuple
        if isinstance(value, list) and typing.get_origin(hints[name]) is tuple:
            given[name] = tuple(value)
    return dataclasses.replace(base, **given) if base is not None else cls(**given)
