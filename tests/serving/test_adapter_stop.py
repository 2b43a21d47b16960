"""An adapter's stop at the first answer: recorded in adapter.json (new adapters stop; an old file
without the field reads False and keeps decoding to the budget; an old draft-gated file's two flags
read as one), and generate/serve end each row where the adapter was trained to."""

from __future__ import annotations

import json

import pytest

from adapter_helpers import make_adapter, save_tiny_base
from decoding_adapters.policies.networks import AdapterConfig, read_adapter_config
from decoding_adapters.serving.adapter import Adapter


class _AnswerAfterTwoCharacters:
    """A task stand-in whose "complete answer" is any text of two or more characters."""

    def answer_complete(self, problem, text):
        return len(text) >= 2


def _fields(directory) -> dict:
    return json.loads((directory / "adapter.json").read_text())


def test_new_adapters_stop_and_old_files_without_the_field_do_not(tmp_path, tiny_lm):
    new = make_adapter(tmp_path / "new", tiny_lm, "sequence", stop_at_answer=True)
    assert _fields(new)["stop_at_answer"] is True and read_adapter_config(new).stop_at_answer is True
    fields = {k: v for k, v in _fields(new).items() if k != "stop_at_answer"}  # as written before the field
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "adapter.json").write_text(json.dumps(fields))
    assert read_adapter_config(tmp_path / "old").stop_at_answer is False
    assert AdapterConfig.from_dict(fields).stop_at_answer is False
    assert AdapterConfig(**fields).stop_at_answer is True  # a config made now: the protocol's default


def test_an_old_draft_file_reads_its_two_flags_as_one():
    base = {"kind": "draft", "policy": {"embed_dim": 6, "num_actions": 2, "use_budget": True, "hidden": 8},
            "actions": [{"do_sample": True, "temperature": 1.0}], "base_model": "t", "base_fingerprint": {}}
    context = {"features": "confidence", "token_budget": 8}
    for flags, want in (((True, True), True), ((False, False), False)):
        old = {**base, "draft": {**context, "draft_stop_at_answer": flags[0], "redecode_stop_at_answer": flags[1]}}
        config = AdapterConfig.from_dict(old)
        assert config.stop_at_answer is want and config.draft == context
    with pytest.raises(ValueError, match="differently"):
        AdapterConfig.from_dict({**base, "draft": {**context, "draft_stop_at_answer": True}})


@pytest.mark.parametrize("kind", ["sequence", "token"])
def test_generate_stops_where_the_adapter_was_trained_to(tmp_path, tiny_lm, kind):
    base = str(save_tiny_base(tiny_lm, tmp_path / "base"))
    rows = {}
    for stop in (False, True):
        adapter = Adapter.from_pretrained(make_adapter(tmp_path / f"{kind}-{stop}", tiny_lm, kind, base_model=base,
                                                       stop_at_answer=stop), lm=tiny_lm)
        rows[stop] = adapter.generator(task=_AnswerAfterTwoCharacters()).generate(["What is 2+3?"], parallel_budget=2,
                                                                                    seed=3)[0]
    for full, stopped in zip(rows[False].completions, rows[True].completions):
        assert full.startswith(stopped) and len(stopped) >= 2
        assert len(stopped) < len(full)  # the tiny LM writes to the budget: the stop cut it (else a weak test)
    assert rows[True].finish_reasons == ["stop", "stop"]
