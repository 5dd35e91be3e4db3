"""The harness's PNG charts, drawn with Pillow alone: lines of (x, y) points, and labelled
points with dashed goal lines."""
from __future__ import annotations

import math
from pathlib import Path

COLOURS = [(31, 119, 180), (214, 39, 40), (44, 160, 44), (148, 103, 189), (255, 127, 14), (23, 190, 207),
           (140, 86, 75), (127, 127, 127)]


def line_chart(series: dict[str, list[tuple[float, float]]], path: Path, title: str, x_label: str,
               x_ticks: list[float], size=(760, 420), y_label_format: str = "{:.2f}") -> None:
    """Lines of (x, y) points, one colour each, on a linear y axis from 0 (Pillow only)."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(img)
    left, right, top, bottom = 60, 230, 34, 46
    w, h = size[0] - left - right, size[1] - top - bottom
    xs = [x for pts in series.values() for x, _ in pts] + list(x_ticks)
    x_lo, x_hi = min(xs), max(xs)
    top_value = max(y for pts in series.values() for _, y in pts)
    step = next(s for s in (0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 5.0) if top_value / s <= 8)
    y_max = step * math.ceil(top_value / step + 1e-9)

    def xy(x: float, y: float) -> tuple[float, float]:
        return left + w * (x - x_lo) / max(1e-9, x_hi - x_lo), top + h * (1 - y / y_max)

    draw.text((left, 10), title, fill="black")
    for i in range(int(round(y_max / step)) + 1):
        y = xy(x_lo, i * step)[1]
        draw.line([(left, y), (left + w, y)], fill=(225, 225, 225))
        draw.text((8, y - 6), y_label_format.format(i * step), fill="black")
    for x in x_ticks:
        px = xy(x, 0)[0]
        draw.line([(px, top + h), (px, top + h + 4)], fill="black")
        draw.text((px - 6, top + h + 8), f"{x:g}", fill="black")
    draw.text((left + w // 2 - 3 * len(x_label), size[1] - 18), x_label, fill="black")
    draw.rectangle([left, top, left + w, top + h], outline="black")
    for k, (name, pts) in enumerate(series.items()):
        colour = COLOURS[k % len(COLOURS)]
        px = [xy(x, y) for x, y in pts]
        if len(px) > 1:
            draw.line(px, fill=colour, width=2)
        for x, y in px:
            draw.ellipse([x - 3, y - 3, x + 3, y + 3], fill=colour)
        ly = top + 8 + 18 * k
        draw.line([(left + w + 12, ly + 6), (left + w + 32, ly + 6)], fill=colour, width=3)
        draw.text((left + w + 38, ly), name, fill="black")
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path)


def scatter(points: list[tuple[str, float, float]], references: list[tuple[str, float]], path: Path,
            title: str, lead_goal: float, rate_goal: float | None, size=(820, 460)) -> None:
    """Labelled points (x: rate in [0, 1], y: lead) with the goals and references as lines (Pillow only)."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(img)
    left, right, top, bottom = 60, 30, 34, 46
    w, h = size[0] - left - right, size[1] - top - bottom
    x_max = max([x for _, x, _ in points] + [rate_goal or 0.0, 0.05])
    x_step = next(s for s in (0.01, 0.02, 0.05, 0.1, 0.2) if x_max / s <= 8)
    x_max = x_step * math.ceil(x_max / x_step + 0.25)
    ys = [y for _, _, y in points] + [y for _, y in references] + [lead_goal]
    y_lo = max(0.0, math.floor(min(ys) * 4 - 1) / 4)
    y_hi = math.ceil(max(ys) * 4 + 1) / 4

    def xy(x: float, y: float) -> tuple[float, float]:
        return left + w * x / x_max, top + h * (1 - (y - y_lo) / (y_hi - y_lo))

    draw.text((left, 10), title, fill="black")
    for i in range(int(round((y_hi - y_lo) / 0.25)) + 1):
        y = y_lo + 0.25 * i
        py = xy(0, y)[1]
        draw.line([(left, py), (left + w, py)], fill=(230, 230, 230))
        draw.text((8, py - 6), f"{y:.2f}x", fill="black")
    for i in range(int(round(x_max / x_step)) + 1):
        px = xy(i * x_step, y_lo)[0]
        draw.line([(px, top + h), (px, top + h + 4)], fill="black")
        draw.text((px - 8, top + h + 8), f"{i * x_step:.0%}", fill="black")
    draw.text((left + w // 2 - 150, size[1] - 18), "nearest-emoji rate (own design among the 10 nearest)",
              fill="black")
    draw.rectangle([left, top, left + w, top + h], outline="black")

    def dashed(a: tuple[float, float], b: tuple[float, float], colour, dash: int) -> None:
        length = math.dist(a, b)
        for k in range(0, int(length), 2 * dash):
            t0, t1 = k / length, min(1.0, (k + dash) / length)
            draw.line([(a[0] + (b[0] - a[0]) * t0, a[1] + (b[1] - a[1]) * t0),
                       (a[0] + (b[0] - a[0]) * t1, a[1] + (b[1] - a[1]) * t1)], fill=colour, width=1)

    grey = (120, 120, 120)
    y = xy(0, lead_goal)[1]
    dashed((left, y), (left + w, y), grey, 6)
    draw.text((left + w - 110, y + 3), f"lead goal {lead_goal:.2f}x", fill=grey)
    if rate_goal is not None:
        x = xy(rate_goal, y_lo)[0]
        dashed((x, top), (x, top + h), grey, 6)
        draw.text((x + 4, top + 4), f"draws like tiny ({rate_goal:.0%})", fill=grey)
    for name, lead in references:
        y = xy(0, lead)[1]
        dashed((left, y), (left + w, y), (150, 60, 150), 2)
        label = f"{name} {lead:.2f}x"
        draw.text((left + w - 6 - 6 * len(label), y - 14), label, fill=(150, 60, 150))
    for k, (name, x, y) in enumerate(points):
        colour = COLOURS[k % len(COLOURS)]
        px, py = xy(x, y)
        draw.ellipse([px - 5, py - 5, px + 5, py + 5], fill=colour)
        draw.text((px + 8, py - 6), name, fill="black")
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path)
