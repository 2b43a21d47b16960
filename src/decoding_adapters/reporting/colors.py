"""The report's colours: one per action everywhere (by action index), one per method within a
figure; shared by the figures (``plots``) and the HTML action trace (``trace_html``)."""

__all__ = ["ACTION_COLORS", "action_color", "method_color"]

ACTION_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
                 "#bcbd22", "#7f7f7f"]
"""tab10 without black: black is reserved for near-deterministic tokens in the action trace."""

_METHOD_COLORS = ["#555555", "#1f77b4", "#9467bd", "#ff7f0e", "#2ca02c", "#d62728", "#8c564b", "#e377c2", "#17becf"]


def action_color(index: int) -> str:
    return ACTION_COLORS[index % len(ACTION_COLORS)]


def method_color(index: int) -> str:
    return _METHOD_COLORS[index % len(_METHOD_COLORS)]
