"""File output that a kill cannot tear: one atomic write, JSON files, an append-only JSONL log
and a checkpoint.

A leaf module (standard library and torch only). Every file the package writes for later reading
goes through :func:`atomic_write`: the content is written to ``NAME.tmp`` next to the target and
renamed over it with ``os.replace`` (atomic on POSIX), so a reader sees the old file or the new
one, never half of one.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import io
import json
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

import torch

__all__ = [
    "atomic_write", "write_json", "write_text", "write_checked", "read_checked", "save_tensors", "load_tensors",
    "NoSpaceError", "JsonlLog", "Checkpoint", "check_output_dir", "lock_output_dir", "release_refused_locks",
    "LOCK_FILE", "sha256_file",
]

CHECKSUM_SUFFIX = ".sha256"
"""A file read back by a later run (a checkpoint, a cache) has its SHA-256 beside it in
``NAME.sha256``: a flipped byte or a swapped file is refused before anything is loaded."""

_FULL_DISK_BYTES = 1 << 20
"""A write that fails with under this much free space left is reported as a full disk: torch's
zip writer turns ENOSPC into a RuntimeError ("unexpected pos ...") that names no cause."""


class NoSpaceError(OSError):
    """A write failed because the file system is full; the message is one line naming the file."""

    def __str__(self) -> str:
        return self.strerror


_UMASK = os.umask(0o022)
os.umask(_UMASK)  # read once (os.umask can only be read by setting it), restored at once


def atomic_write(path: str | Path, write: Callable[[Path], Any]) -> Path:
    """Call ``write(tmp)`` to fill a temporary file next to ``path``, then rename it over ``path``.
    The file gets the mode of any file the process creates (0644 under umask 022), whatever mode
    ``write`` gave it (safetensors writes 0600)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException as err:  # a failed or interrupted write leaves no temporary file behind
        tmp.unlink(missing_ok=True)
        if _disk_full(err, path.parent):
            raise NoSpaceError(errno.ENOSPC, f"no space left on device writing {path}") from None
        raise
    return path


def _disk_full(err: BaseException, directory: Path) -> bool:
    """Whether ``err`` (raised by a write into ``directory``) means the disk is full."""
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    # torch and safetensors wrap ENOSPC in their own errors (safetensors' SafetensorError, named here:
    # this module imports neither library)
    if isinstance(err, (OSError, RuntimeError)) or type(err).__name__ == "SafetensorError":
        try:
            return shutil.disk_usage(directory).free < _FULL_DISK_BYTES
        except OSError:
            return False
    return False


def sha256_file(path: Path) -> str:
    """The SHA-256 of a file's bytes, read in 1 MiB blocks (hex)."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _checksum_path(path: Path) -> Path:
    return path.with_name(path.name + CHECKSUM_SUFFIX)


def _accepted_digests(path: Path) -> list[str]:
    """The digests ``path``'s checksum file accepts (none when it is missing or unreadable)."""
    try:
        digests = json.loads(_checksum_path(path).read_text(encoding="utf-8")).get("sha256", [])
    except (OSError, ValueError, AttributeError):
        return []
    return [d for d in digests if isinstance(d, str)] if isinstance(digests, list) else []


def write_checked(path: str | Path, data: bytes) -> Path:
    """Write ``data`` atomically to ``path`` with its SHA-256 in ``path.sha256``.

    The checksum file is written before the rename and names both the new digest and the one of
    the file it replaces, then rewritten with the new one only: a kill at any moment leaves a
    file whose digest the checksum file accepts (:func:`read_checked`)."""
    path = Path(path)
    new = hashlib.sha256(data).hexdigest()
    current = _accepted_digests(path)[:1] if path.is_file() else []

    def fill(tmp: Path) -> None:
        with tmp.open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())  # ENOSPC can surface only at the flush: it must do so here, inside the write

    _write_digests(path, [new, *current])
    atomic_write(path, fill)
    _write_digests(path, [new])
    return path


def _write_digests(path: Path, digests: list[str]) -> None:
    text = json.dumps({"file": path.name, "sha256": digests})
    atomic_write(_checksum_path(path), lambda tmp: tmp.write_text(text, encoding="utf-8"))


def read_checked(path: str | Path) -> bytes:
    """The bytes of ``path`` after checking them against ``path.sha256`` (:func:`write_checked`);
    a missing checksum or a mismatch is a one-line ``ValueError``."""
    path = Path(path)
    data = path.read_bytes()
    accepted = _accepted_digests(path)
    if not accepted:
        raise ValueError(
            f"{path} has no readable checksum beside it ({_checksum_path(path).name}): refusing to load it; "
            "delete it to start over"
        )
    if hashlib.sha256(data).hexdigest() not in accepted:
        raise ValueError(
            f"{path} does not match its checksum ({_checksum_path(path).name}): the file is corrupted or was "
            "changed; delete it to start over"
        )
    return data


def save_tensors(path: str | Path, obj: Any) -> Path:
    """``torch.save`` ``obj`` (tensors, numbers, strings, lists, dicts) with a checksum beside it.
    The bytes are serialised in memory first, so a full disk fails in the plain file write."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return write_checked(path, buffer.getvalue())


def load_tensors(path: str | Path) -> Any:
    """What :func:`save_tensors` wrote, checksum checked, loaded with ``weights_only=True``: the
    file can hold only tensors and plain containers, so loading it runs no code."""
    data = read_checked(path)
    try:
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as err:  # UnpicklingError for a forbidden type, RuntimeError / EOFError for a damaged file
        raise ValueError(
            f"{path} is unreadable as tensors and plain data ({type(err).__name__}); delete it to start over"
        ) from None


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


MAX_STEPS = 10**9
"""Most training steps a checkpoint may say it has done."""


class Checkpoint:
    """``DIR/checkpoint.pt`` written atomically: a kill mid-write leaves the previous checkpoint
    intact, so ``--resume`` loses at most one checkpoint interval. It holds tensors and plain
    data only, with its checksum in ``checkpoint.pt.sha256`` (:func:`save_tensors`): a changed or
    corrupted checkpoint is refused, and loading one runs no code."""

    def __init__(self, directory: str | Path):
        self.path = Path(directory) / "checkpoint.pt"

    def exists(self) -> bool:
        return self.path.is_file()

    def save(self, state: dict[str, Any]) -> None:
        save_tensors(self.path, state)

    def load(self) -> dict[str, Any]:
        state = load_tensors(self.path)
        if not isinstance(state, dict) or "step" not in state or "config" not in state:
            raise ValueError(f"{self.path} is not a training checkpoint (no step and config)")
        step = state["step"]
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEPS:
            raise ValueError(f"{self.path}: step must be an integer between 0 and {MAX_STEPS}, got {step!r}"[:300])
        if not isinstance(state["config"], dict):
            raise ValueError(f"{self.path}: config must be a mapping of options, got {type(state['config']).__name__}")
        return state


LOCK_FILE = ".lock"
"""The file in an output directory that the run writing it holds an exclusive ``flock`` on (its
pid and command inside): a second run into the same directory is refused. The kernel releases the
lock when the process ends, however it ends (kill -9 included), so a stale file never blocks."""

_LOCKS: dict[str, int] = {}  # directory (resolved) -> the open descriptor holding its lock
_CREATED: set[str] = set()  # the locked directories this process created (resolved)
_NEW_LOCK_FILES: set[str] = set()  # the locked directories whose lock file this process created


def lock_output_dir(out: str | Path, option: str = "--out") -> Path:
    """Create ``out`` and take its run lock for the rest of this process; a directory another
    process holds is refused in one line naming that run (its pid and command). Taking it again in
    the same process is a no-op (a pipeline's stages share their parent's folders)."""
    path = Path(out)
    created = not path.exists()
    path.mkdir(parents=True, exist_ok=True)
    key = str(path.resolve())
    if key in _LOCKS:
        return path
    if created:
        _CREATED.add(key)
    lock = path / LOCK_FILE
    new_file = not lock.exists()
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _lock_holder(fd)
        os.close(fd)
        raise ValueError(f"{option} {path} is in use by another run ({holder}): wait for it to finish, "
                         "stop it, or choose another directory") from None
    except OSError:  # a file system without flock (some network mounts): run unlocked, as before
        os.close(fd)
        return path
    record = json.dumps({"pid": os.getpid(), "command": shlex.join(sys.argv)}) + "\n"
    os.ftruncate(fd, 0)
    os.pwrite(fd, record.encode("utf-8"), 0)
    _LOCKS[key] = fd
    if new_file:
        _NEW_LOCK_FILES.add(key)
    return path


def release_refused_locks() -> list[Path]:
    """Give up every lock this process holds, for a run refused before it finished: a lock file
    this process created is removed, and so is a directory it created that holds nothing else, so
    a refused command leaves no trace where it wrote nothing. Returns the directories released."""
    released = []
    for key, fd in list(_LOCKS.items()):
        path = Path(key)
        os.close(fd)
        del _LOCKS[key]
        try:
            if key in _NEW_LOCK_FILES:
                (path / LOCK_FILE).unlink(missing_ok=True)
            if key in _CREATED and not any(path.iterdir()):
                path.rmdir()
        except OSError:
            pass
        _CREATED.discard(key)
        _NEW_LOCK_FILES.discard(key)
        released.append(path)
    return released


def _lock_holder(fd: int) -> str:
    """``pid N: COMMAND`` of the run holding a lock file (as it wrote them)."""
    try:
        record = json.loads(os.pread(fd, 65536, 0).decode("utf-8", "replace") or "{}")
        return f"pid {int(record['pid'])}: {str(record.get('command', '?'))[:300]}"
    except (ValueError, KeyError, TypeError, OSError):
        return "a process that has not written its pid yet"


def check_output_dir(out: str | Path, finished: tuple[str, ...] = (), *, force: bool = False,
                     option: str = "--out", lock: bool = True) -> Path:
    """Pre-flight for an output directory, before any model load or decoding: ``out`` must be a
    directory (or not exist yet) that can be created and written, must not already hold a
    finished result (any of the ``finished`` file names) unless ``force``, and must not be the
    output of another run still going (``lock``: the directory is created and its run lock taken
    for the rest of this process, :func:`lock_output_dir`)."""
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
    return lock_output_dir(path, option) if lock else path
