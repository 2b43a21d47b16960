"""core.files: atomic writes, the JSONL training log, checkpoints and the output-folder pre-flight."""

from __future__ import annotations

import json
import os

import pytest
import torch

from decoding_adapters.core.files import Checkpoint, JsonlLog, atomic_write, check_output_dir, write_json, write_text


def test_atomic_write_replaces_whole_or_not_at_all(tmp_path):
    target = tmp_path / "deep" / "out.txt"
    write_text(target, "first")
    assert target.read_text() == "first"

    def torn(tmp):
        tmp.write_text("half of the sec")
        raise KeyboardInterrupt  # killed mid-write

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, torn)
    assert target.read_text() == "first"  # the reader still sees the old file
    write_json(target, {"a": [1, 2]})
    assert json.loads(target.read_text()) == {"a": [1, 2]}
    assert not (tmp_path / "deep" / "out.txt.tmp").exists()


def test_jsonl_log_appends_reads_and_truncates_for_a_resume(tmp_path):
    log = JsonlLog(tmp_path / "run" / "train_log.jsonl")
    assert log.read() == []
    log.truncate_after(3)  # no file yet: nothing to do
    for step in range(5):
        log.append({"step": step, "reward": step / 4})
    assert [r["step"] for r in log.read()] == [0, 1, 2, 3, 4]
    log.truncate_after(2)  # a resume from step 2 redoes steps 3 and 4
    assert [r["step"] for r in log.read()] == [0, 1, 2]
    with log.path.open("a") as f:
        f.write('{"step": 3, "rew')  # a torn last line after a kill
    assert [r["step"] for r in log.read()] == [0, 1, 2]
    log.truncate_after(2)
    log.append({"step": 3})
    assert [r["step"] for r in log.read()] == [0, 1, 2, 3]  # the torn line is gone, not glued to the next


def test_checkpoint_round_trips_and_refuses_damaged_files(tmp_path):
    ckpt = Checkpoint(tmp_path)
    assert not ckpt.exists()
    ckpt.save({"step": 4, "config": {"lr": 0.1}, "weights": torch.arange(3.0)})
    state = ckpt.load()
    assert ckpt.exists() and state["step"] == 4 and torch.equal(state["weights"], torch.arange(3.0))
    ckpt.path.write_bytes(ckpt.path.read_bytes()[:20])
    with pytest.raises(ValueError, match="does not match its checksum"):
        ckpt.load()
    ckpt.save({"weights": 1})
    with pytest.raises(ValueError, match="not a training checkpoint"):
        ckpt.load()


def test_check_output_dir_refuses_files_finished_results_and_read_only_parents(tmp_path):
    assert check_output_dir(tmp_path / "new" / "run") == tmp_path / "new" / "run"  # created later
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is a file, not a directory"):
        check_output_dir(tmp_path / "file")
    with pytest.raises(ValueError, match="cannot be created"):
        check_output_dir(tmp_path / "file" / "run", option="--eval-out")
    done = tmp_path / "done"
    done.mkdir()
    (done / "results.json").write_text("{}")
    with pytest.raises(ValueError, match=r"finished result \(results.json\).*--force"):
        check_output_dir(done, ("results.json", "report.md"))
    assert check_output_dir(done, ("results.json",), force=True) == done
    if os.geteuid() != 0:  # root may write anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(ValueError, match="not writable"):
            check_output_dir(locked / "run")
