"""File output that a kill cannot tear: one atomic write, JSON files, an append-only JSONL log
and a checkpoint.

A leaf module (standard library and torch only). Every file the package writes for later reading
goes through :func:`atomic_write`: the content is written to ``NAME.tmp`` next to the target and
renamed over it with ``os.replace`` (atomic on POSIX), so a reader sees the old file or the new
one, never half of one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

import torch

__all__ = ["atomic_write", "write_json", "write_text", "JsonlLog", "Checkpoint", "check_output_dir"]


_UMASK = os.umask(0o022)
os.umask(_UMASK)  # read once (os.umask can only be read by setting it), restored at once


def atomic_write(path: str | Path, write: Callable[[Path], Any]) -> Path:
    """Call ``write(tmp)`` to fill a temporary file next to ``path``, then rename it over ``path``.
    The file gets the mode of any file the process creates (0644 under umask 022), whatever mode
    ``write`` gave it (safetensors writes 0600)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    os.chmod(tmp, 0o666 & ~_UMASK)
    os.replace(tmp, path)
    return path


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) atomically."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_json(path: str | Path, obj) -> Path:
    """Write ``obj`` as indented JSON atomically."""
    return write_text(path, json.dumps(obj, indent=2))


class JsonlLog:
    """Append-only training log; ``truncate_after(step)`` drops lines a resumed run will redo."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def truncate_after(self, step: int) -> None:
        if not self.path.exists():
            return
        keep = [line for line in self.read() if line.get("step", -1) <= step]
        write_text(self.path, "".join(json.dumps(x) + "\n" for x in keep))

    def append(self, record: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()

    def read(self) -> list[dict]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:  # a torn last line after a kill
                break
        return out


class Checkpoint:
    """``DIR/checkpoint.pt`` written atomically: a kill mid-write leaves the previous checkpoint
    intact, so ``--resume`` loses at most one checkpoint interval."""

    def __init__(self, directory: str | Path):
        self.path = Path(directory) / "checkpoint.pt"

    def exists(self) -> bool:
        return self.path.is_file()

    def save(self, state: dict[str, Any]) -> None:
        atomic_write(self.path, lambda tmp: torch.save(state, tmp))

    def load(self) -> dict[str, Any]:
        try:
            state = torch.load(self.path, map_location="cpu", weights_only=False)
        except Exception as err:  # torch raises RuntimeError / UnpicklingError / EOFError on a damaged file
            raise ValueError(f"{self.path} is unreadable ({type(err).__name__}); delete it to start over") from None
        if not isinstance(state, dict) or "step" not in state or "config" not in state:
            raise ValueError(f"{self.path} is not a training checkpoint (no step and config)")
        return state


def check_output_dir(out: str | Path, finished: tuple[str, ...] = (), *, force: bool = False,
                     option: str = "--out") -> Path:
    """Pre-flight for an output directory, before any model load or decoding: ``out`` must be a
    directory (or not exist yet) that can be created and written, and must not already hold a
    finished result (any of the ``finished`` file names) unless ``force``."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{option} {path} is a file, not a directory: name a directory for the outputs")
    existing = next((p for p in (path, *path.parents) if p.exists()), Path("."))
    if not existing.is_dir():
        raise ValueError(f"{option} {path}: {existing} is a file, so the directory cannot be created")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{option} {path}: {existing} is not writable")
    done = [name for name in finished if (path / name).exists()]
    if done and not force:
        raise ValueError(
            f"{option} {path} already holds a finished result ({', '.join(done)}): pass --force to overwrite it "
            "or choose another directory"
        )
    return path
