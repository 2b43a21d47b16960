"""The protocol every method shares: one frozen object with one default per field, validated once,
read from and written to the flat keys every stored file has."""

import pytest

from decoding_adapters.decoding.actions import DEFAULT_TOKEN_BUDGET
from decoding_adapters.decoding.protocol import (
    STOP_AT_ANSWER,
    STOP_OF_UNMARKED_FILES,
    DecodingProtocol,
    stored_stop,
)


def test_defaults_are_the_homes():
    assert DecodingProtocol() == DecodingProtocol(DEFAULT_TOKEN_BUDGET, STOP_AT_ANSWER)
    assert STOP_AT_ANSWER is True and STOP_OF_UNMARKED_FILES is False


@pytest.mark.parametrize("fields", [dict(token_budget=0), dict(token_budget=True), dict(token_budget=2.0),
                                    dict(stop_at_answer=None), dict(stop_at_answer=1)])
def test_bad_fields_are_refused(fields):
    with pytest.raises(ValueError):
        DecodingProtocol(**fields)


def test_a_numpy_integer_budget_is_kept_as_an_int():
    np = pytest.importorskip("numpy")
    budget = DecodingProtocol(np.int64(8)).token_budget
    assert budget == 8 and type(budget) is int


def test_it_is_frozen():
    with pytest.raises(AttributeError):
        DecodingProtocol().token_budget = 4


def test_records_keep_the_flat_keys_and_old_files_read_as_decoded_to_the_budget():
    protocol = DecodingProtocol(48, False)
    assert protocol.as_record() == {"token_budget": 48, "stop_at_answer": False}
    assert DecodingProtocol.from_record(protocol.as_record()) == protocol
    assert DecodingProtocol.from_record({"token_budget": 16}) == DecodingProtocol(16, False)
    assert stored_stop({}) is False and stored_stop({"stop_at_answer": 1}) is True


def test_a_study_puts_its_protocol_whole_on_every_nested_config():
    from decoding_adapters.experiments.study_config import StudyConfig

    study = StudyConfig(token_budget=48, stop_at_answer=False, seeds=2)
    assert study.protocol == DecodingProtocol(48, False)
    assert study.sequence.protocol == study.token.protocol == study.eval.protocol == study.protocol
    assert study.eval.seeds == 2
    with pytest.raises(ValueError, match="token_budget"):
        StudyConfig(token_budget=0)


def test_onto_replaces_both_fields_and_nothing_else():
    from decoding_adapters.evaluation.methods import EvalConfig

    config = EvalConfig(seeds=2, token_budget=8, stop_at_answer=True)
    moved = DecodingProtocol(16, False).onto(config)
    assert (moved.token_budget, moved.stop_at_answer, moved.seeds) == (16, False, 2)
