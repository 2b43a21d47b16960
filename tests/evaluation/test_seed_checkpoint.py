"""``evaluate``'s seed checkpoint is JSON with its checksum beside it: it reads back every decoded
row, and a changed file (a pickle that would run code, or one flipped byte) is refused in one line
before anything in it is parsed."""

from __future__ import annotations

import os
import pickle
from collections import Counter

import pytest

from decoding_adapters.decoding.actions import GREEDY, DecodingAction
from decoding_adapters.evaluation.checkpoint import SeedCheckpoint
from decoding_adapters.evaluation.keys import StaticKey, TokenKey
from decoding_adapters.evaluation.store import RowStore

HOT = DecodingAction(do_sample=True, temperature=0.7, top_p=0.9)


def _filled_store() -> RowStore:
    store = RowStore(tokenizer=None)
    greedy, hot, token = StaticKey(GREEDY, 0, 0, 0, True), StaticKey(HOT, 1, 2, 3, False), TokenKey("adapter", 0, 1, 0)
    for i, key in enumerate((greedy, hot, token)):
        store.correct[key] = float(i % 2)
        store.answer[key] = f"answer {i}"
        store.length[key] = 5 + i
        store.decodes[key] = 1 + i
        store.generated[key] = 5 + 2 * i
        store.seconds[key] = 0.25 * i
    store.source[StaticKey(GREEDY, 1, 0, 0, True)] = greedy
    store.records[hot] = {"text": "x = 4", "token_ids": [1, 2], "tokens": ["x", " = 4"], "_actions": [HOT, GREEDY],
                          "entropy": [0.5, 0.1], "max_prob": [0.6, 0.9], "correct": 1.0, "length": 2,
                          "stop_reason": "answer"}
    store.all_greedy[token] = True
    store.row_actions[token] = [0, 0, 0]
    store.token_counts["adapter"] = Counter({0: 6, 2: 1})
    return store


def test_the_checkpoint_reads_back_every_decoded_row(tmp_path):
    path = tmp_path / "eval_checkpoint.json"
    store = _filled_store()
    SeedCheckpoint(path, {"seeds": 2}).save(store, {0, 1})
    assert path.with_name(path.name + ".sha256").is_file()
    back = RowStore(tokenizer=None)
    assert SeedCheckpoint(path, {"seeds": 2}).restore(back) == {0, 1}
    for name in ("correct", "answer", "length", "decodes", "generated", "seconds", "source", "records",
                 "all_greedy", "row_actions", "token_counts"):
        assert getattr(back, name) == getattr(store, name), name
    assert SeedCheckpoint(path, {"seeds": 3}).restore(RowStore(tokenizer=None)) == set()  # other options: ignored


class _RunsCode:
    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


@pytest.mark.parametrize("tamper", ["pickle", "flipped byte"])
def test_a_changed_checkpoint_is_refused_in_one_line_and_runs_no_code(tmp_path, tamper):
    path = tmp_path / "eval_checkpoint.json"
    SeedCheckpoint(path, {"seeds": 2}).save(_filled_store(), {0})
    marker = tmp_path / "code_ran"
    if tamper == "pickle":
        payload = _RunsCode()
        payload.marker = marker
        path.write_bytes(pickle.dumps(payload))
        pickle.loads(path.read_bytes())  # the payload works: unpickled, it runs
        assert marker.is_dir()
        os.rmdir(marker)
    else:
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 1
        path.write_bytes(bytes(data))
    store = RowStore(tokenizer=None)
    with pytest.raises(ValueError) as err:
        SeedCheckpoint(path, {"seeds": 2}).restore(store)
    message = str(err.value)
    assert "checksum" in message and str(path) in message and "\n" not in message, message
    assert not marker.exists() and not store.correct
