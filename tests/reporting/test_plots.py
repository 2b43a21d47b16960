"""reporting.plots: each figure draws what its data says (checked on the Figure before it is saved),
writes one file, and degrades to a "no data" panel instead of raising on empty input."""

from __future__ import annotations

import numpy as np
import pytest

from decoding_adapters.reporting import plots

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def figures(monkeypatch):
    """The Figure objects the plot functions save, in call order (files are still written)."""
    saved = []
    real_save = plots._save

    def keep(fig, path):
        saved.append(fig)
        return real_save(fig, path)

    monkeypatch.setattr(plots, "_save", keep)
    return saved


def _entry(mean, low=None, high=None):
    return {"mean": mean, "ci_low": low, "ci_high": high}


def _texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_pass_at_k_draws_one_series_per_method_with_its_values(tmp_path, figures):
    results = {
        "Greedy": {"pass@1": _entry(0.5, 0.4, 0.6), "pass@4": _entry(0.5, 0.4, 0.6)},
        "Adapter": {"pass@1": _entry(0.3, 0.2, 0.4), "pass@4": _entry(0.7, 0.6, 0.8), "mean_length": 3},
        "No pass@k": {"mean_length": 5},
    }
    path = plots.plot_pass_at_k(results, tmp_path / "f" / "pass.png", static=["Greedy"])
    assert path.read_bytes().startswith(PNG)
    [ax] = figures[0].axes
    lines = {bars.get_label(): bars.lines[0] for bars in ax.containers}  # errorbar: (data line, caps, bars)
    assert set(lines) == {"Greedy", "Adapter"}  # a method without pass@k draws nothing
    assert np.allclose(lines["Adapter"].get_ydata(), [30.0, 70.0])  # percent
    assert lines["Greedy"].get_linestyle() == "--" and lines["Adapter"].get_linestyle() == "-"
    # methods are nudged apart on the (log-2) k axis so their bars do not hide each other
    assert lines["Greedy"].get_xdata()[0] != lines["Adapter"].get_xdata()[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "4"]


def test_moving_average_smooths_with_a_warm_start():
    x = np.array([0.0, 3.0, 6.0, 9.0])
    assert np.allclose(plots._moving_average(x, 2), [0.0, 1.5, 4.5, 7.5])  # the first value pads the window
    assert plots._moving_average(x, 1) is x and plots._moving_average(x, 5) is x  # nothing to smooth


def test_training_plot_stacks_the_logged_action_probabilities(tmp_path, figures):
    records = [{"step": s, "action_probs": [p, 1 - p], "reward": p, **({"val_reward": p} if s % 2 == 0 else {})}
               for s, p in zip(range(1, 5), (0.1, 0.4, 0.6, 0.9))]
    plots.plot_training(records, ["greedy", "T=1.0"], tmp_path / "train.png")
    stack_ax = figures[0].axes[0]
    assert [c.get_label() for c in stack_ax.collections] == ["greedy", "T=1.0"]
    reward_ax = figures[0].axes[1]
    val = next(line for line in reward_ax.get_lines() if line.get_marker() == "o")
    assert list(val.get_xdata()) == [2.0, 4.0] and list(val.get_ydata()) == [0.4, 0.9]
    figures.clear()
    plots.plot_training([{"step": 1, "reward": 0.5}], ["greedy"], tmp_path / "empty.png")  # no probabilities logged
    assert "no action probabilities in this log" in _texts(figures[0])


def test_empty_inputs_give_a_no_data_panel(tmp_path, figures):
    plots.plot_lengths([("token level", {"Greedy": []})], tmp_path / "lengths.png")
    plots.plot_sequence_choices({}, {}, tmp_path / "choices.png")
    plots.plot_validation_curves({"run": []}, tmp_path / "curves.png")
    assert all("no data" in _texts(fig) for fig in figures) and len(figures) == 3
    assert all((tmp_path / name).read_bytes().startswith(PNG) for name in ("lengths.png", "choices.png", "curves.png"))


def test_sequence_choices_are_shares_of_problems_per_budget(tmp_path, figures):
    choices = {"Seq": {"k_values": [1, 4], "actions": [[0, 1], [0, 1], [1, 1], [0, 0]]}}
    plots.plot_sequence_choices(choices, {"Seq": ["greedy", "T=1.0"]}, tmp_path / "c.png")
    [ax] = figures[0].axes
    heights = {}
    for bars in ax.containers:
        heights[bars.get_label()] = [round(b.get_height(), 6) for b in bars]
    assert heights == {"greedy": [0.75, 0.25], "T=1.0": [0.25, 0.75]}


def test_action_trace_colours_tokens_by_action_and_escapes_text(tmp_path):
    trajectory = {"problem_id": "p<1>", "tokens": ["<b>", "x", "y"], "actions": [0, 1, 1],
                  "entropy": [1.0, 0.5, 0.1], "max_prob": [0.3, 0.99, 0.5], "correct": 1.0, "stop_reason": "eos"}
    path = plots.action_trace_html([("Example & co", trajectory)], ["greedy", "T=1.0"], tmp_path / "trace.html",
                                   prompts={"p<1>": "What is 2<3?"})
    page = path.read_text(encoding="utf-8")
    assert "<b>" not in page  # token text is escaped
    assert "&lt;b&gt;" in page and "What is 2&lt;3?" in page and "Example &amp; co" in page
    assert f"color:{plots.action_color(0)}" in page and f"color:{plots.action_color(1)}" in page
    assert page.count('class="det"') == 1  # the token above the max-prob threshold is black
    assert "correct" in page and "problem p&lt;1&gt;" in page
    empty = plots.action_trace_html([], ["greedy"], tmp_path / "none.html").read_text(encoding="utf-8")
    assert "No trajectories were recorded." in empty


def test_colours_cycle_and_leave_black_to_the_trace():
    assert plots.action_color(0) == plots.action_color(len(plots.ACTION_COLORS))
    assert "#000000" not in plots.ACTION_COLORS and len(set(plots.ACTION_COLORS)) == len(plots.ACTION_COLORS)
