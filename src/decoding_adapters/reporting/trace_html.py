"""The HTML action trace: a few decoded samples, each token coloured by the action that sampled it
(black where the base distribution was near-deterministic), with the prompt, the verdict and why
the sample stopped; one self-contained file, no figure library."""

from __future__ import annotations

import html
from collections import Counter
from pathlib import Path
from typing import Mapping, Sequence

from .colors import action_color

__all__ = ["action_trace_html"]

_TRACE_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 62rem; margin: 2rem auto;
       padding: 0 1rem; color: #222; line-height: 1.5; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
.meta { color: #555; font-size: 0.95rem; }
.label { margin: 0.8rem 0 0.25rem; font-size: 0.8rem; font-weight: 600; color: #666; text-transform: uppercase;
         letter-spacing: 0.05em; }
.legend { display: flex; flex-wrap: wrap; gap: 0.4rem 1.2rem; margin: 0.8rem 0; font-size: 0.95rem; }
.legend .sw { display: inline-block; width: 0.9em; height: 0.9em; border-radius: 2px; margin-right: 0.35em;
              vertical-align: -0.1em; }
.prompt { background: #f3f3f3; border-left: 4px solid #bbb; padding: 0.5rem 0.8rem; white-space: pre-wrap;
          font-size: 0.95rem; }
.gen { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; white-space: pre-wrap;
       word-break: break-word; font-size: 15px; line-height: 1.75; border: 1px solid #ddd; border-radius: 6px;
       padding: 0.9rem 1rem; background: #fff; }
.gen span { border-radius: 3px; font-weight: 600; }
.gen span.det { color: #000; font-weight: 400; }
"""


def _rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _trace_spans(trajectory: Mapping, action_names: Sequence[str], threshold: float) -> str:
    out = []
    tokens, actions = trajectory.get("tokens", []), trajectory.get("actions", [])
    ent, pmax = trajectory.get("entropy", []), trajectory.get("max_prob", [])
    for t, tok in enumerate(tokens):
        a = actions[t] if t < len(actions) else -1
        p = pmax[t] if t < len(pmax) else 0.0
        name = action_names[a] if 0 <= a < len(action_names) else "?"
        tip = f"action {a}: {name} | entropy {ent[t] if t < len(ent) else float('nan'):.3f} | max-prob {p:.3f}"
        text = html.escape(str(tok), quote=True)
        if p > threshold:
            out.append(f'<span class="det" title="{html.escape(tip, quote=True)}">{text}</span>')
        else:
            color = action_color(a) if a >= 0 else "#999999"
            out.append(
                f'<span style="color:{color};background:{_rgba(color, 0.12)}" '
                f'title="{html.escape(tip, quote=True)}">{text}</span>'
            )
    return "".join(out)


def _trace_legend(trajectories: Sequence[Mapping], action_names: Sequence[str], threshold: float) -> str:
    counts = Counter(
        a for t in trajectories for a, p in zip(t.get("actions", []), t.get("max_prob", [])) if p <= threshold
    )
    items = [
        f'<span><span class="sw" style="background:#000"></span>near-deterministic (max-prob &gt; {threshold:g})</span>'
    ]
    for i, name in enumerate(action_names):
        items.append(
            f'<span><span class="sw" style="background:{action_color(i)}"></span>{html.escape(name)} '
            f'<span class="meta">({counts.get(i, 0)} tokens)</span></span>'
        )
    return '<div class="legend">' + "".join(items) + "</div>"


def action_trace_html(
    examples: Sequence[tuple[str, Mapping]],
    action_names: Sequence[str],
    path,
    title: str = "Action trace",
    threshold: float = 0.95,
    intro: str = "",
    prompts: Mapping[str, str] | None = None,
) -> Path:
    """An HTML page showing each example generation with every token coloured by the action taken
    for it; tokens whose base max-probability exceeds ``threshold`` (the action barely matters) are
    black. Hovering a token shows its action, entropy and max-probability. ``examples`` are
    ``(heading, trajectory)`` pairs; ``prompts`` maps problem ids to their question text."""
    trajs = [t for _, t in examples]
    parts = [
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>',
        f"<style>{_TRACE_CSS}</style></head><body><h1>{html.escape(title)}</h1>",
    ]
    if intro:
        parts.append(f'<p class="meta">{html.escape(intro)}</p>')
    parts.append(_trace_legend(trajs, action_names, threshold))
    if not examples:
        parts.append("<p>No trajectories were recorded.</p>")
    for heading, t in examples:
        verdict = {1.0: "correct", 0.0: "incorrect"}.get(t.get("correct"), "unscored")
        parts.append(f"<h2>{html.escape(heading)}</h2>")
        parts.append(
            f'<p class="meta">problem {html.escape(str(t.get("problem_id", "?")))} · {verdict} · '
            f"{t.get('length', len(t.get('tokens', [])))} tokens · "
            f"stopped at {html.escape(str(t.get('stop_reason', '?')))}</p>"
        )
        question = (prompts or {}).get(str(t.get("problem_id")))
        if question:
            parts.append(f'<p class="label">Prompt</p><div class="prompt">{html.escape(question)}</div>')
        parts.append(
            f'<p class="label">Generation</p><div class="gen">{_trace_spans(t, action_names, threshold)}</div>'
        )
    parts.append("</body></html>\n")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(parts), encoding="utf-8")
    return path
