"""``serve``: an OpenAI-compatible HTTP server that decodes with an adapter (``serving.server``).

The limits are the ``ServerLimits`` fields; uvicorn is imported when the server starts.
"""

from __future__ import annotations

import argparse
import logging
import os
from dataclasses import dataclass, field
from typing import Literal

from ..serving.server import ServerLimits, check_api_key, create_app
from .config_args import add_config_arguments, build_config
from .generate import ADAPTER_HELP, add_generator_model_arguments, deterministic_from_mode, generator_from_args

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServeOptions:
    """server"""

    adapter: str = field(metadata={"help": ADAPTER_HELP})
    data: str | None = None
    """a draft-gated adapter's task data, where the files it records (adapter.json) are gone: as train-draft's
    --data"""
    host: str = "127.0.0.1"
    """address to listen on (the server has no TLS; keep it local or add --api-key)"""
    port: int = 8000
    """port to listen on"""
    policy_mode: str | None = None
    """how the adapter picks actions: sample or argmax (default: the adapter's stored policy_mode, the mode
    evaluate reports: sample for token adapters, argmax for sequence adapters)"""
    served_model_name: str | None = None
    """model id in responses and /v1/models (default: adapter directory name)"""
    api_key: str | None = field(default_factory=lambda: os.environ.get("DECODING_ADAPTERS_API_KEY"))
    """require 'Authorization: Bearer KEY' on /v1/*, the API docs and /health's details (default:
    $DECODING_ADAPTERS_API_KEY, else none; an empty key is refused)"""
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    """uvicorn's log level"""


def configure_parser(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, ServeOptions)
    add_config_arguments(p, ServerLimits, title="limits")
    add_generator_model_arguments(p)


def run_cli(args) -> int:
    import uvicorn  # optional at import time: only `serve` needs it

    check_api_key(args.api_key)  # before the model loads: an empty key would turn authentication off
    limits = build_config(ServerLimits, args)
    generator = generator_from_args(args)
    if args.host not in ("127.0.0.1", "localhost", "::1") and not args.api_key:
        log.warning("listening on %s without --api-key: anyone who can reach this port can use the model", args.host)
    app = create_app(generator, limits, deterministic_policy=deterministic_from_mode(args.policy_mode),
                     model_name=args.served_model_name, api_key=args.api_key)
    print(f"serving adapter {generator.name} ({generator.kind}) on http://{args.host}:{args.port}/v1", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0
