"""Does a chart's legend name every colour it draws? For plotly figures as dicts or objects."""
from __future__ import annotations

import re


def _rgb(colour) -> tuple[int, int, int] | None:
    if not isinstance(colour, str):
        return None
    c = colour.strip().lower()
    if re.fullmatch(r"#[0-9a-f]{6}", c):
        return tuple(int(c[i:i + 2], 16) for i in (1, 3, 5))
    m = re.fullmatch(r"rgba?\(([^)]*)\)", c.replace(" ", ""))
    if m:
        return tuple(int(float(v)) for v in m.group(1).split(",")[:3])
    return None


def colours(trace: dict) -> set:
    """Colours a trace draws with: its line, its markers (one or many), its fill."""
    out = set()
    marker = trace.get("marker") or {}
    values = [(trace.get("line") or {}).get("color"), trace.get("fillcolor")]
    mc = marker.get("color")
    values += list(mc) if isinstance(mc, (list, tuple)) else [mc]
    line_width = (trace.get("line") or {}).get("width")
    for v in values:
        if v is (trace.get("line") or {}).get("color") and line_width == 0:
            continue
        rgb = _rgb(v)
        if rgb is not None:
            out.add(rgb)
    return out


def unnamed_colours(figure) -> list[tuple[str, tuple]]:
    """(trace, colour) pairs drawn that no legend entry shows (a heatmap is named by its
    colour bar instead)."""
    data = [d if isinstance(d, dict) else d.to_plotly_json() for d in
            (figure["data"] if isinstance(figure, dict) else figure.data)]
    shown = [d for d in data if d.get("showlegend", True) is not False and d.get("name")
             and d.get("type", "scatter") != "heatmap"]
    named = set().union(*(colours(d) for d in shown)) if shown else set()
    return [(d.get("name") or d.get("type", "?"), c) for d in data if d.get("type") != "heatmap"
            for c in colours(d) if c not in named]
