"""The evidence runs (``reproduce --size full`` and ``complete``) make every choice on at least 400
validation problems: the checkpoint each trainer keeps, the draft stage's threshold and share
(tuned on its validation table, which takes the sequence stage's problems) and every fixed rule's
setting per compute level."""

import pytest

from decoding_adapters.experiments.presets import REPRODUCE_SIZES
from decoding_adapters.experiments.study_config import study_task_options
from decoding_adapters.tasks import get_task


@pytest.mark.parametrize("size", ["full", "complete"])
def test_every_choice_of_an_evidence_run_is_made_on_400_validation_problems(size):
    cfg = REPRODUCE_SIZES[size]
    validation = get_task("arithmetic", **study_task_options(cfg)).load("validation")
    wanted = {"sequence (and draft)": cfg.sequence.val_problems, "token": cfg.token.val_problems,
              "fixed rules": cfg.rules.problems}
    assert cfg.rules.enabled
    assert min(wanted.values()) >= 400, wanted
    assert len(validation) >= max(wanted.values())  # the split holds them all
    assert cfg.sequence.keep_best and cfg.sequence.min_improvement_se >= 1.96
