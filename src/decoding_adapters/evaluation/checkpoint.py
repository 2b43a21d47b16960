"""Seed checkpoints of an evaluation: the decoded rows of its finished seeds in one checksummed
JSON file, so that an interrupted evaluation decodes only the seeds still missing."""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ..core.files import CHECKSUM_SUFFIX, read_checked, write_checked
from ..decoding.actions import DecodingAction
from .keys import key_from_json, key_json
from .store import RowStore

__all__ = ["SeedCheckpoint", "CHECKPOINT_FORMAT"]

log = logging.getLogger(__name__)

_KEYED_FIELDS = ("correct", "answer", "length", "records", "seconds", "decodes", "generated", "source",
                 "all_greedy", "row_actions")
"""What a seed checkpoint keeps of ``RowStore`` by key (not the tokenizer, the wanted keys or the argmax
rows' policy-identity map, which a resumed process rebuilds); ``token_counts`` is kept beside them."""
CHECKPOINT_FORMAT = 1
"""The version of a seed checkpoint's JSON layout: another version is ignored (decoded again)."""


def _value_json(name: str, value):
    if name == "source":
        return key_json(value)
    if name == "records":  # the actions of every token are dataclasses: their fields
        return {**value, "_actions": [a.to_dict() for a in value["_actions"]]}
    return value


def _value_from_json(name: str, value):
    if name == "source":
        return key_from_json(value)
    if name == "records":
        return {**value, "_actions": [DecodingAction.from_dict(a) for a in value["_actions"]]}
    return value


@dataclass
class SeedCheckpoint:
    """The decoded rows of an evaluation's finished seeds, in ``path`` (JSON, with its SHA-256 in
    ``path.sha256`` as every file a later run reads back: a changed file is refused, and reading it
    runs no code), for ``options`` (anything that JSON-encodes: a checkpoint made under other
    options is ignored, with a log line)."""

    path: Path
    options: dict

    def restore(self, store: "RowStore") -> set[int]:
        """Fill ``store`` from the checkpoint; the seeds it holds (none when absent or stale). A file
        that does not match its checksum is a one-line ValueError."""
        if not Path(self.path).is_file():
            return set()
        data = read_checked(self.path)  # before parsing: a changed file is refused unread
        try:
            saved = json.loads(data)
            if saved.get("format") != CHECKPOINT_FORMAT:
                raise ValueError(f"format {saved.get('format')!r}, not {CHECKPOINT_FORMAT}")
            if saved.get("options") != _json_form(self.options):
                log.info("the evaluation checkpoint %s was made with other options: starting over", self.path)
                return set()
            fields = {name: {key_from_json(k): _value_from_json(name, v) for k, v in saved["store"][name]}
                      for name in _KEYED_FIELDS}
            counts = {m: Counter({int(a): int(c) for a, c in per.items()})
                      for m, per in saved["token_counts"].items()}
            seeds = {int(s) for s in saved["seeds"]}
        except (ValueError, KeyError, TypeError, AttributeError) as err:  # an older or foreign layout
            log.warning("ignoring the evaluation checkpoint %s (%s): decoding again", self.path, err)
            return set()
        for name, values in fields.items():
            getattr(store, name).update(values)
        store.token_counts.update(counts)
        log.info("resuming the evaluation from %s: seed(s) %s already decoded", self.path,
                 ",".join(map(str, sorted(seeds))))
        return seeds

    def save(self, store: "RowStore", seeds: set[int]) -> None:
        """Write every decoded row of ``store`` and the finished ``seeds`` (atomically, checksummed)."""
        saved = {
            "format": CHECKPOINT_FORMAT,
            "options": _json_form(self.options),
            "seeds": sorted(seeds),
            "store": {name: [[key_json(k), _value_json(name, v)] for k, v in getattr(store, name).items()]
                      for name in _KEYED_FIELDS},
            "token_counts": {m: {str(a): c for a, c in counts.items()} for m, counts in store.token_counts.items()},
        }
        write_checked(self.path, json.dumps(saved).encode("utf-8"))

    def remove(self) -> None:
        Path(self.path).unlink(missing_ok=True)
        Path(str(self.path) + CHECKSUM_SUFFIX).unlink(missing_ok=True)


def _json_form(options: dict) -> str:
    return json.dumps(options, sort_keys=True, default=str)
