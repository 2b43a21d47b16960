"""Command-line options derived from config dataclasses: every setting is defined once.

``add_config_arguments(parser, Config)`` adds one option per field of a dataclass, in a group:

- the option is ``--field-name`` (``flags`` renames it, ``aliases`` adds more names);
- its help is the field's docstring (the string literal under it in the class body) or
  ``field(metadata={"help": ...})``; ``--help`` shows the default;
- ``bool`` -> ``--x`` / ``--no-x``; ``Literal[...]`` -> ``choices``; ``tuple[int, ...]`` -> a
  comma-separated list (``1,2,4``; integers must be positive); ``list[str]`` -> a repeatable option; ``X | None`` also
  accepts ``none``; a field without a default is required;
- a field that is itself a dataclass (a config nested in another, e.g. ``StudyConfig.token``) gets
  its own group, its fields named ``--token.lr``; the nested fields listed in the field's
  ``metadata["exclude"]`` are set by the outer config and get no option.

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
    """``{field: docstring}`` from the string literals that follow fields in the bodies of ``cls``
    and of the dataclasses it inherits from (a subclass's docstring wins)."""
    docs: dict[str, str] = {}
    for base in reversed(cls.__mro__):
        if base is not object and dataclasses.is_dataclass(base):
            docs.update(_own_field_docs(base))
    return docs


def _own_field_docs(cls: type) -> dict[str, str]:
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
    return _add_group(parser, cls, title=title, exclude=exclude, flags=flags, aliases=aliases, defaults=defaults,
                      choices=choices, overrides_only=overrides_only, prefix="")


def _add_group(parser, cls, *, title, exclude, flags, aliases, defaults, choices, overrides_only, prefix):
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    title = title or (inspect.getdoc(cls) or cls.__name__).split("\n")[0]
    group = parser.add_argument_group(f"{title} ({prefix}*)" if prefix else title)
    skip, flags, aliases, defaults, choices = set(exclude), flags or {}, aliases or {}, defaults or {}, choices or {}
    nested = []
    for f in dataclasses.fields(cls):
        if f.name in skip or not f.init:
            continue
        if dataclasses.is_dataclass(hints[f.name]):
            nested.append(f)
            continue
        kwargs = _option(hints[f.name])
        if f.name in choices:
            kwargs["choices"] = list(choices[f.name])
        names = list(flags.get(f.name, ["--" + prefix + f.name.replace("_", "-")]))
        if (f.name in flags or prefix) and "choices" not in kwargs and "action" not in kwargs:
            kwargs.setdefault("metavar", names[0].lstrip("-").split(".")[-1].replace("-", "_").upper())
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
        group.add_argument(*names, dest=prefix + f.name, **kwargs)
    for f in nested:  # after the outer fields: one group per nested config
        inner = _default(f)
        _add_group(parser, hints[f.name], title=docs.get(f.name), exclude=f.metadata.get("exclude", ()), flags=None,
                   aliases=None, defaults=None if inner is dataclasses.MISSING else dataclasses.asdict(inner),
                   choices=None, overrides_only=overrides_only, prefix=f"{prefix}{f.name}.")
    return group


def build_config(cls: type, args: argparse.Namespace, *, base: Any = None, prefix: str = "", **overrides):
    """The ``cls`` instance the parsed ``args`` describe: every field found in ``args`` (fields
    missing there keep ``base``'s value, or the dataclass default), then ``overrides``. A nested
    config is built the same way from its ``name.field`` options."""
    hints = typing.get_type_hints(cls)
    given = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if dataclasses.is_dataclass(hints[f.name]):
            inner = getattr(base, f.name) if base is not None else _default(f)
            inner = None if inner is dataclasses.MISSING else inner
            if any(k.startswith(f"{prefix}{f.name}.") for k in vars(args)):
                given[f.name] = build_config(hints[f.name], args, base=inner, prefix=f"{prefix}{f.name}.")
        elif hasattr(args, prefix + f.name):
            given[f.name] = getattr(args, prefix + f.name)
    given.update(overrides)
    for name, value in given.items():  # a tuple field given a list (e.g. from JSON) becomes a tuple
        if isinstance(value, list) and typing.get_origin(hints[name]) is tuple:
            given[name] = tuple(value)
    return dataclasses.replace(base, **given) if base is not None else cls(**given)
