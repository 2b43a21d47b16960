"""Files a run reads back (checkpoints, the prompt-embedding cache) hold tensors and plain data
only, with a checksum beside them: a tampered file runs no code and a corrupted one is refused in
one line; a full disk is named as such and leaves no temporary file."""

from __future__ import annotations

import errno
import hashlib
import json
import pickle
import subprocess
from pathlib import Path

import pytest
import torch

from decoding_adapters.cli import main
from decoding_adapters.core import files
from decoding_adapters.core.files import Checkpoint, atomic_write

NO_MODEL = ["--model", "/nonexistent/model-dir"]  # the checkpoint is read before any model loads


class _OpensAFile:
    """A pickle payload: unpickling it creates ``path`` (what a hostile checkpoint would do)."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def _hostile_checkpoint(directory: Path, marker: Path) -> Path:
    """A checkpoint whose pickle runs code, with a checksum that matches it (an attacker who can
    write the folder can write both)."""
    path = directory / "checkpoint.pt"
    torch.save({"step": 1, "config": {}, "payload": _OpensAFile(marker)}, path, pickle_protocol=2)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    (directory / "checkpoint.pt.sha256").write_text(json.dumps({"file": "checkpoint.pt", "sha256": [digest]}))
    return path


def test_a_checkpoint_that_runs_code_is_refused_before_it_runs(tmp_path):
    marker = tmp_path / "pwned"
    _hostile_checkpoint(tmp_path, marker)
    with pytest.raises(ValueError, match="unreadable as tensors and plain data"):
        Checkpoint(tmp_path).load()
    assert not marker.exists()


def test_resume_from_a_hostile_checkpoint_is_one_line_and_runs_nothing(tmp_path, capsys):
    marker = tmp_path / "pwned"
    _hostile_checkpoint(tmp_path, marker)
    code = main(["train-token", *NO_MODEL, "--out", str(tmp_path), "--resume"])
    err = capsys.readouterr().err
    assert code == 2 and "checkpoint.pt" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not marker.exists()


def test_a_non_dict_pickle_runs_nothing_either(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(pickle.dumps(_OpensAFile(marker), protocol=2))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    (tmp_path / "checkpoint.pt.sha256").write_text(json.dumps({"sha256": [digest]}))
    with pytest.raises(ValueError):
        Checkpoint(tmp_path).load()
    assert not marker.exists()


def test_flipped_bytes_inside_a_weight_tensor_are_refused(tmp_path):
    ckpt = Checkpoint(tmp_path)
    weights = torch.arange(4096, dtype=torch.float32)
    ckpt.save({"step": 3, "config": {"lr": 0.1}, "policy": {"w": weights}})
    data = bytearray(ckpt.path.read_bytes())
    at = bytes(data).find(weights.numpy().tobytes()[:64])  # the tensor's raw bytes inside the zip
    assert at > 0
    data[at + 256: at + 320] = bytes(b ^ 0xFF for b in data[at + 256: at + 320])  # 64 flipped bytes
    ckpt.path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="does not match its checksum") as err:
        ckpt.load()
    assert "\n" not in str(err.value)


def test_a_kill_between_the_checksum_and_the_rename_still_resumes(tmp_path):
    ckpt = Checkpoint(tmp_path)
    ckpt.save({"step": 1, "config": {}})
    old = ckpt.path.read_bytes()
    ckpt.save({"step": 2, "config": {}})
    # the moment after the checksum file names both digests and before the rename: the old file is
    # still in place; the checksum file written then accepts it
    new_digest = hashlib.sha256(ckpt.path.read_bytes()).hexdigest()
    old_digest = hashlib.sha256(old).hexdigest()
    ckpt.path.write_bytes(old)
    (tmp_path / "checkpoint.pt.sha256").write_text(json.dumps({"sha256": [new_digest, old_digest]}))
    assert ckpt.load()["step"] == 1


def test_a_changed_embedding_cache_is_recomputed_not_run(tmp_path):
    from decoding_adapters.training.sequence import PromptEmbeddings

    class _LM:
        def fingerprint(self):
            return "fp"

        def prompt_embeddings(self, prompts, pooling):
            return [torch.full((2,), float(len(p))) for p in prompts]

    cache = tmp_path / "embeddings.pt"
    table = PromptEmbeddings(_LM(), "mean", cache)
    assert table.get(["a"], [[1, 2, 3]]).tolist() == [[3.0, 3.0]]
    assert files.load_tensors(cache)["table"]["a"].tolist() == [3.0, 3.0]
    assert PromptEmbeddings(_LM(), "mean", cache).table.keys() == {"a"}  # the checked cache is reused

    marker = tmp_path / "pwned"
    torch.save({"fingerprint": "fp", "pooling": "mean", "table": {"a": _OpensAFile(marker)}}, cache)
    digest = hashlib.sha256(cache.read_bytes()).hexdigest()
    (tmp_path / "embeddings.pt.sha256").write_text(json.dumps({"sha256": [digest]}))
    assert PromptEmbeddings(_LM(), "mean", cache).table == {}
    assert not marker.exists()


def test_a_full_disk_is_named_and_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "out.bin"
    atomic_write(target, lambda tmp: tmp.write_bytes(b"old"))

    def no_space(tmp):
        tmp.write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match=f"no space left on device writing {target}"):
        atomic_write(target, no_space)
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def _small_filesystem(path: Path) -> bool:
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(path)], capture_output=True)
    return done.returncode == 0


def test_a_checkpoint_on_a_full_filesystem(tmp_path, capsys):
    fs = tmp_path / "fs"
    if not _small_filesystem(fs):
        pytest.skip("mounting a 1 MB tmpfs needs root")
    try:
        ckpt = Checkpoint(fs)
        ckpt.save({"step": 1, "config": {}, "w": torch.zeros(1000)})
        with pytest.raises(OSError) as err:
            ckpt.save({"step": 2, "config": {}, "w": torch.zeros(400_000)})  # 1.6 MB on a 1 MB disk
        assert str(err.value) == f"no space left on device writing {ckpt.path}"
        assert not list(fs.glob("*.tmp"))
        assert ckpt.load()["step"] == 1  # the previous checkpoint and its checksum are intact
        files.save_tensors(fs / "other.pt", {"w": torch.zeros(10)})
    finally:
        subprocess.run(["umount", "-l", str(fs)], check=False)
