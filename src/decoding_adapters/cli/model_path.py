"""``model-path``: print the directory transformers loads a model from (``models.locate_model``).

The embedded default (``smollm2``) and ``.gguf`` files are converted to safetensors once and cached
(``$DECODING_ADAPTERS_CACHE``, default ``~/.cache/decoding-adapters``); this prints that directory,
so the base model can be passed to ``AutoModelForCausalLM.from_pretrained`` and
``AutoTokenizer.from_pretrained`` as it is. A local HF directory is printed as given and a hub id
unchanged. ``Adapter.base_model_path`` gives the same from Python.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from ..lm.models import DEFAULT_MODEL, locate_model
from ..policies.networks import read_adapter_config
from .config_args import add_config_arguments


@dataclass(frozen=True)
class ModelPathOptions:
    """model"""

    model: str = DEFAULT_MODEL
    """model name or path: smollm2 (the embedded default), a .gguf file, a local HF directory, or a hub id"""
    adapter: str | None = None
    """print the base model of this adapter directory instead (its adapter.json's base_model)"""


def configure_parser(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, ModelPathOptions)


def run_cli(args) -> int:
    if args.adapter and not (Path(args.adapter) / "adapter.json").is_file():
        raise FileNotFoundError(f"--adapter {args.adapter} holds no adapter.json: point at a directory from train-*")
    name = read_adapter_config(args.adapter).base_model if args.adapter else args.model
    print(locate_model(name))
    return 0
