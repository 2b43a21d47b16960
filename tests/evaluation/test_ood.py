"""Out-of-distribution labels (evaluation.ood) and their place in evaluate's details and the report."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from decoding_adapters.evaluation import ood_label, ood_labels
from decoding_adapters.evaluation.ood import training_domains
from decoding_adapters.reporting.report import ood_lines


@pytest.mark.parametrize("train, task, split, ood, label", [
    ("arithmetic", "arithmetic", "test", False, "arithmetic -> arithmetic"),
    ("arithmetic", "arithmetic", "validation", False, "arithmetic -> arithmetic:validation"),
    ("arithmetic", "arithmetic", "ood", True, "arithmetic -> arithmetic:ood"),
    ("arithmetic", "pyfunc", "test", True, "arithmetic -> pyfunc"),
    ("arithmetic+pyfunc", "pyfunc", "test", False, "arithmetic+pyfunc -> pyfunc"),
    ("arithmetic:2+pyfunc:1", "arithmetic", "ood", True, "arithmetic:2+pyfunc:1 -> arithmetic:ood"),
    ("arithmetic+pyfunc", "math", "test", True, "arithmetic+pyfunc -> math"),
    ("", "math", "test", None, "? -> math"),
])
def test_ood_label(train, task, split, ood, label):
    got = ood_label(train, task, split)
    assert got["ood"] is ood and got["label"] == label and got["train_task"] == train


def test_training_domains():
    assert training_domains("arithmetic+pyfunc") == ["arithmetic", "pyfunc"]
    assert training_domains("math") == ["math"] and training_domains("") == []


def test_ood_labels_cover_adapters_only():
    methods = [
        SimpleNamespace(name="Greedy", adapter=None),
        SimpleNamespace(name="Seq", adapter=SimpleNamespace(task="arithmetic")),
        SimpleNamespace(name="Old", adapter=SimpleNamespace(task="")),
    ]
    labels = ood_labels(methods, "pyfunc", "test")
    assert set(labels) == {"Seq", "Old"}
    assert labels["Seq"]["ood"] is True and labels["Old"]["ood"] is None


def test_report_lines_name_the_ood_adapters():
    lines = ood_lines({"Seq": ood_label("arithmetic", "pyfunc"), "Tok": ood_label("pyfunc", "pyfunc")})
    assert lines == ["- Seq: **OOD** (`arithmetic -> pyfunc`)", "- Tok: in distribution (`pyfunc -> pyfunc`)"]
    assert ood_lines(None) == []
