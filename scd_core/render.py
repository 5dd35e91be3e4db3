"""Pictures of a decode: token-grid overlays, heat maps, live plots, GIF/MP4 export.

Everything here reads the trace (`scd_core.trace.Iteration`) of row 0 of a run and a
decoded image; nothing here touches the engine. Pixel work is numpy on whole arrays;
the only Python loops run over frames or iterations, never over tokens.

Token states, as drawn on the grid and named in the legend:
- committed earlier: plain pixels;
- accepted this iteration: green outline (drafts that passed `U < min(1, p/q)`);
- rejected and resampled: orange fill, red outline (the first rejected draft, replaced by a
  sample of `norm(max(0, p - q))`);
- new sample: blue outline (the one token a plain AR step commits, or the bonus token after
  a fully accepted window);
- still draft: faded and hatched (drafted, not yet verified);
- empty: flat grey (nothing drafted there yet).
"""
from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from scd_core.decoding import METHOD_LABELS
from scd_core.race import (MethodSummary, Sample, Spread, bench_command, explain_gap,
                           sample_of, summarise)
from scd_core.trace import Iteration

EMPTY, COMMITTED, ACCEPTED, RESAMPLED, NEW, DRAFT = range(6)

# state -> (legend label, RGB colour, tint alpha, draw outline)
STYLE: dict[int, tuple[str, tuple[int, int, int], float, bool]] = {
    COMMITTED: ("committed earlier", (255, 255, 255), 0.0, False),
    ACCEPTED: ("accepted this pass", (22, 163, 74), 0.35, True),
    RESAMPLED: ("residual sample (first rejection)", (234, 88, 12), 0.45, True),
    NEW: ("bonus / AR sample", (37, 99, 235), 0.25, True),
    DRAFT: ("still draft", (100, 116, 139), 0.55, False),
    EMPTY: ("empty", (200, 200, 200), 1.0, False),
}
OUTLINE = {ACCEPTED: (22, 163, 74), RESAMPLED: (220, 38, 38), NEW: (37, 99, 235)}
LEGEND_ORDER = (COMMITTED, ACCEPTED, RESAMPLED, NEW, DRAFT, EMPTY)

METRIC_HELP = {
    "nfe": "NFE: model forward passes so far, the prefill included (a CFG pair counts once)",
    "acceptance": "acceptance rate = accepted drafts / verified drafts (never above 1)",
    "mean_len": "mean accepted length = accepted drafts per forward pass (prefill excluded); "
                "each pass commits one token more (the residual or bonus token)",
    "compression": "step compression = AR NFE / this NFE (AR needs one pass per token)",
    "speedup": "latency speed-up = AR wall time / this wall time, same process",
    "stability": "draft stability = carried-over drafts whose token did not change from one pass "
                 "to the next / carried-over drafts",
}


# ----------------------------------------------------------------------------- grid

def grid3(grid: Sequence[int]) -> tuple[int, int, int]:
    """(H, W) -> (1, H, W); (T, H, W) unchanged."""
    g = tuple(int(x) for x in grid)
    if len(g) == 2:
        return (1, *g)
    if len(g) == 3:
        return g  # type: ignore[return-value]
    raise ValueError(f"grid: expected (H, W) or (T, H, W), got {grid!r}")


def token_states(it: Iteration, row: int = 0) -> np.ndarray:
    """[N] int8 state of every generated position after iteration `it` (row `row`)."""
    canvas = it.canvas[row].numpy()
    n = canvas.shape[0]
    nb, na = int(it.n_before[row]), int(it.n_after[row])
    n_acc = min(int(it.accepted[row].sum()), max(na - nb, 0))
    states = np.full(n, EMPTY, dtype=np.int8)
    states[canvas >= 0] = DRAFT
    states[:nb] = COMMITTED
    states[nb:nb + n_acc] = ACCEPTED
    states[nb + n_acc:na] = RESAMPLED if bool(it.resampled[row]) else NEW
    return states


def fill_empty(canvas, fill: int = 0):
    """Replace the -1 (empty) positions of a canvas with a valid code so it can be decoded."""
    return canvas.clamp(min=0) if fill == 0 else canvas.masked_fill(canvas < 0, fill)


def decode_frames(model, canvas_row, decode=None) -> list[np.ndarray]:
    """Decode one canvas row [N] into a list of HxWx3 uint8 frames (one for an image), with
    `decode` (the row's own decoder: a served request's `decode`) or else `model.decode`."""
    out = (decode or model.decode)(fill_empty(canvas_row.reshape(1, -1)))[0]
    frames = out if isinstance(out, (list, tuple)) else [out]
    return [to_rgb(f) for f in frames]


def to_rgb(img) -> np.ndarray:
    if isinstance(img, Image.Image):
        return np.asarray(img.convert("RGB"))
    arr = np.asarray(img)
    if arr.ndim == 2:
        arr = np.repeat(arr[..., None], 3, axis=2)
    if arr.dtype != np.uint8:
        arr = np.clip(arr * (255 if arr.max() <= 1.0 else 1), 0, 255).astype(np.uint8)
    return arr[..., :3]


# -------------------------------------------------------------------------- overlay

def scale_for(h: int, w: int, target: int = 320) -> int:
    """Integer nearest-neighbour factor that brings the longer side to about `target`."""
    return max(1, int(round(target / max(h, w, 1))))


def _cell_index(size: int, cells: int) -> tuple[np.ndarray, np.ndarray]:
    """For each pixel along an axis: its cell index and its distance to the cell's edge."""
    idx = np.arange(size) * cells // size
    starts = np.searchsorted(idx, np.arange(cells))
    ends = np.append(starts[1:], size)
    pos = np.arange(size)
    edge = np.minimum(pos - starts[idx], ends[idx] - 1 - pos)
    return idx, edge


def overlay_frame(frame: np.ndarray, states: np.ndarray, scale: int) -> np.ndarray:
    """Upscale one frame (nearest) and draw the token-state grid `states` [H, W] on it."""
    img = np.repeat(np.repeat(frame, scale, axis=0), scale, axis=1).astype(np.float32)
    ph, pw = img.shape[:2]
    gh, gw = states.shape
    ri, redge = _cell_index(ph, gh)
    ci, cedge = _cell_index(pw, gw)
    st = states[ri[:, None], ci[None, :]]
    cell = min(ph // gh, pw // gw)
    thick = max(2, cell // 8) if cell >= 8 else 1
    edge = np.minimum(redge[:, None], cedge[None, :])
    for s, (_, colour, alpha, _) in STYLE.items():
        if alpha > 0:
            m = st == s
            img[m] = (1 - alpha) * img[m] + alpha * np.asarray(colour, np.float32)
    hatch = ((np.arange(ph)[:, None] + np.arange(pw)[None, :]) % max(4, cell // 4)) == 0
    img[(st == DRAFT) & hatch] = (71, 85, 105)
    if cell >= 6:   # faint grid lines so single tokens can be told apart
        img[edge == 0] *= 0.85
    for s, colour in OUTLINE.items():
        img[(st == s) & (edge < thick)] = colour
    return img.astype(np.uint8)


def tile_frames(frames: Sequence[np.ndarray], cols: int | None = None, gap: int = 6) -> np.ndarray:
    """Lay frames out on a white sheet, `cols` per row (a single frame is returned as is)."""
    if len(frames) == 1:
        return frames[0]
    cols = cols or min(len(frames), 4)
    rows = math.ceil(len(frames) / cols)
    h, w = frames[0].shape[:2]
    sheet = np.full((rows * h + (rows - 1) * gap, cols * w + (cols - 1) * gap, 3), 255, np.uint8)
    for i, f in enumerate(frames):
        r, c = divmod(i, cols)
        sheet[r * (h + gap):r * (h + gap) + h, c * (w + gap):c * (w + gap) + w] = f
    return sheet


def shrink(frame: np.ndarray, target: int) -> np.ndarray:
    """Box-filter a large frame down by an integer factor to about `target` (or leave it)."""
    h, w = frame.shape[:2]
    f = max(h, w) // target
    if f < 2:
        return frame
    h2, w2 = h // f, w // f
    blocks = frame[:h2 * f, :w2 * f].reshape(h2, f, w2, f, -1).astype(np.float32)
    return blocks.mean(axis=(1, 3)).round().astype(np.uint8)


def token_frame_picks(model, n_decoded: int, T: int, frame_tokens: int, decode=None) -> list[int]:
    """Which of `n_decoded` pixel frames to show for each of the T generated token frames.

    A causal temporal tokenizer (Cosmos DV: 1 + 8k pixel frames for 1 + k latent frames)
    decodes the conditioning latent frames in front of the generated ones. When the row's
    decoder `decode` carries them (`prefix_tokens` [1, P * H * W], as Cosmos' does; else the
    model's `last_prefix`), each generated token frame shows the last pixel frame of its chunk;
    otherwise the frames are spread evenly.
    """
    prefix = getattr(decode, "prefix_tokens", None)
    if prefix is None:
        prefix = getattr(model, "last_prefix", None)
    p = int(prefix.shape[-1]) // frame_tokens if hasattr(prefix, "shape") and frame_tokens else 0
    if p > 0 and (n_decoded - 1) % (p + T - 1) == 0:
        r = (n_decoded - 1) // (p + T - 1)
        return [r * (p + t) for t in range(T)]
    return [t * n_decoded // T for t in range(T)]


def render_iteration(model, it: Iteration, row: int = 0, target: int = 320,
                     overlay: bool = True, decode=None) -> np.ndarray:
    """The picture of one iteration: decoded canvas (committed + drafts) with the grid overlay;
    `decode` as for `decode_frames`.

    Small images are upscaled (nearest) to about `target` px, large ones box-filtered down
    so that streaming a picture per iteration stays cheap.
    """
    return _draw(model, decode_frames(model, it.canvas[row], decode), token_states(it, row), target, overlay,
                 decode=decode)


def render_samples(model, it: Iteration, rows: Sequence[int], target: int = 96,
                   cols: int = 4) -> np.ndarray:
    """Some rows of one iteration side by side (one decode call), each about `target` px a
    side, `cols` to a line; a video row shows its frames, four to a line."""
    decoded = model.decode(fill_empty(it.canvas))        # every row: a model may decode a batch
    pics = []                                            # only as a whole (Cosmos: its prompts)
    for b in rows:
        out = decoded[b]
        frames = [to_rgb(f) for f in (out if isinstance(out, (list, tuple)) else [out])]
        pics.append(_draw(model, frames, token_states(it, b), target, True, frame_target=target,
                          at_least=True))
    if len(pics) == 1:
        return pics[0]
    return tile_frames(pics, cols=min(cols, len(pics)), gap=4)


def _draw(model, decoded: list[np.ndarray], states: np.ndarray, target: int, overlay: bool,
          frame_target: int | None = None, at_least: bool = False, decode=None) -> np.ndarray:
    """Frames shrunk or upscaled to about `frame_target` px (at least that with `at_least`),
    overlaid with the token states, tiled."""
    T, H, W = grid3(model.grid)
    if frame_target is None:
        frame_target = target if T == 1 else max(96, target // 2)
    if len(decoded) != T:   # a temporal tokenizer: show one decoded frame per token frame
        decoded = [decoded[i] for i in token_frame_picks(model, len(decoded), T, H * W, decode)]
    frames = [shrink(f, frame_target) for f in decoded]
    states = states.reshape(T, H, W)
    scale = scale_for(*frames[0].shape[:2], target=frame_target)
    if at_least:
        scale = max(scale, math.ceil(frame_target / max(frames[0].shape[:2])))
    if overlay:
        drawn = [overlay_frame(f, states[t], scale) for t, f in enumerate(frames)]
    else:
        drawn = [np.repeat(np.repeat(f, scale, 0), scale, 1) for f in frames]
    return tile_frames(drawn)


def upscale(frame: np.ndarray, target: int = 320) -> np.ndarray:
    s = scale_for(*frame.shape[:2], target=target)
    return np.repeat(np.repeat(frame, s, axis=0), s, axis=1)


def legend_html() -> str:
    """The colour legend of the token grid, as an HTML strip (kept on screen)."""
    items = []
    for s in LEGEND_ORDER:
        label, colour, _, outline = STYLE[s]
        border = OUTLINE.get(s, (120, 120, 120))
        bg = "repeating-linear-gradient(45deg,#64748b 0 2px,#cbd5e1 2px 6px)" if s == DRAFT \
            else f"rgb{colour}"
        items.append(
            f'<span style="display:inline-flex;align-items:center;margin-right:14px;white-space:nowrap">'
            f'<span style="display:inline-block;width:16px;height:16px;margin-right:5px;'
            f'background:{bg};border:{3 if outline else 1}px solid rgb{border}"></span>{label}</span>')
    return f'<div id="scd-legend" style="font-size:0.9em;line-height:1.9">{"".join(items)}</div>'


def legend_strip(width: int) -> np.ndarray:
    """The legend drawn as pixels, appended under exported frames."""
    font = ImageFont.load_default(size=11)
    entries = [(STYLE[s][0], STYLE[s][1], OUTLINE.get(s, (120, 120, 120))) for s in LEGEND_ORDER]
    lines, line, x = [], [], 4
    for e in entries:
        w = 18 + int(font.getlength(e[0])) + 10
        if line and x + w > width:
            lines.append(line)
            line, x = [], 4
        line.append((x, e))
        x += w
    lines.append(line)
    img = Image.new("RGB", (width, 18 * len(lines) + 4), "white")
    draw = ImageDraw.Draw(img)
    for r, ln in enumerate(lines):
        y = 4 + 18 * r
        for x0, (label, colour, border) in ln:
            draw.rectangle([x0, y, x0 + 12, y + 12], fill=colour, outline=border, width=2)
            draw.text((x0 + 16, y), label, fill="black", font=font)
    return np.asarray(img)


# ---------------------------------------------------------------------- trace stats

# filmstrip states: what each position held after a pass, seen against the pass before
F_EMPTY, F_KEPT, F_CHANGED, F_FRESH = range(4)
FILM_STYLE: dict[int, tuple[str, tuple[int, int, int]]] = {
    F_KEPT: ("draft unchanged since the previous pass", (51, 65, 85)),
    F_CHANGED: ("draft changed since the previous pass (flicker)", (220, 38, 38)),
    F_FRESH: ("fresh draft (init scheme)", (196, 181, 253)),
    F_EMPTY: ("no draft (past the grid's end)", (241, 245, 249)),
}


@dataclass
class TraceStats:
    """Per-pass numbers of one row, gathered as records arrive (O(N) each).

    The run's metrics (acceptance rate, mean accepted length, draft stability) are the
    trace's own, computed from the records kept here; the per-pass lists feed the charts.
    """

    grid: tuple[int, ...]
    row: int = 0
    method: str = ""
    records: list[Iteration] = field(default_factory=list)
    index: list[int] = field(default_factory=list)
    nfe: list[int] = field(default_factory=list)
    committed: list[int] = field(default_factory=list)   # cumulative tokens committed
    accepted: list[int] = field(default_factory=list)    # accepted drafts this pass
    verified: list[int] = field(default_factory=list)    # verified drafts this pass
    new_kind: list[str] = field(default_factory=list)    # "resampled" / "bonus" / "sample" / ""
    carried: list[int] = field(default_factory=list)     # drafts fed and still drafts after the pass
    changed: list[int] = field(default_factory=list)     # of those, drafts whose token changed
    committed_at: np.ndarray | None = None                # [N] pass that committed the position
    streak: np.ndarray | None = None                      # [N] current run of unchanged passes
    longest_unchanged: np.ndarray | None = None           # [N] longest such run
    film: list[np.ndarray] = field(default_factory=list)  # [D] draft states after each pass
    _sample: tuple[int, Sample] | None = None

    @property
    def num_tokens(self) -> int:
        return int(np.prod(self.grid))

    def add(self, it: Iteration) -> None:
        n, row = self.num_tokens, self.row
        if self.committed_at is None:
            self.committed_at = np.full(n, -1, np.int64)
            self.streak = np.zeros(n, np.int64)
            self.longest_unchanged = np.zeros(n, np.int64)
        nb, na = int(it.n_before[row]), int(it.n_after[row])
        self.records.append(it)
        self.method = it.method
        self.index.append(it.index)
        self.nfe.append(int(it.nfe))
        self.committed.append(na)
        self.accepted.append(int(it.accepted[row].sum()))
        self.verified.append(int(it.verified[row].sum()))
        self.new_kind.append("" if na <= nb else "resampled" if bool(it.resampled[row])
                             else "bonus" if bool(it.bonus[row]) else "sample")
        self.carried.append(int(it.carried[row].sum()))
        self.changed.append(int(it.changed[row]))
        self.committed_at[nb:na] = it.index
        self._track_drafts(it, na)

    def _track_drafts(self, it: Iteration, na: int) -> None:
        """Each draft after the pass against the token its position was fed in the pass:
        unchanged, changed (flicker), fresh from the init scheme, or none (past the grid)."""
        row, n = self.row, self.num_tokens
        drafts = it.drafts_after[row].numpy()
        pos = na + np.arange(drafts.shape[0])
        carried = it.carried[row].numpy()
        start, fed = int(it.start[row]), it.window_tokens[row].numpy()
        at = pos - start
        was = np.where((at >= 0) & (at < fed.shape[0]), fed[np.clip(at, 0, max(fed.shape[0] - 1, 0))]
                       if fed.shape[0] else -1, -1)
        kept = carried & (drafts == was)
        film = np.full(drafts.shape[0], F_EMPTY, np.int8)
        film[(pos < n) & ~carried] = F_FRESH
        film[carried & ~kept] = F_CHANGED
        film[kept] = F_KEPT
        self.film.append(film)
        inside = pos < n
        streak = np.zeros(n, np.int64)
        streak[pos[inside]] = np.where(kept[inside], self.streak[pos[inside]] + 1,
                                       (drafts[inside] >= 0).astype(np.int64))
        self.streak = streak
        self.longest_unchanged = np.maximum(self.longest_unchanged, streak)

    def sample(self) -> Sample:
        """This row's metrics over the records so far, by the trace's definitions."""
        if self._sample is None or self._sample[0] != len(self.records):
            self._sample = (len(self.records), sample_of(self.records, self.row, self.num_tokens))
        return self._sample[1]

    @property
    def running_acceptance(self) -> np.ndarray:
        """Accepted / verified drafts up to each pass (the same ratio, accumulated)."""
        acc, ver = np.cumsum(self.accepted), np.cumsum(self.verified)
        return np.where(ver > 0, acc / np.maximum(ver, 1), np.nan)

    @property
    def done(self) -> bool:
        return bool(self.committed) and self.committed[-1] >= self.num_tokens


# --------------------------------------------------------------------------- charts

METHOD_COLOURS = {"ar": "#64748b", "sjd": "#f59e0b", "scd-mc": "#16a34a", "scd-gumbel": "#7c3aed"}


def _rgb(colour: str) -> tuple[int, int, int]:
    return tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))  # type: ignore[return-value]


def _css(rgb: tuple[int, int, int], alpha: float | None = None) -> str:
    return f"rgb{rgb}" if alpha is None else f"rgba({rgb[0]}, {rgb[1]}, {rgb[2]}, {alpha})"


def title(text: str, detail: str = "") -> str:
    """A chart title short enough for a phone, its figures on a second, smaller line."""
    return text + (f"<br><sub>{detail}</sub>" if detail else "")


def _figure(data: list[dict], title: str, x: str, y: str, height: int = 300, **layout):
    """A plotly Figure from plain dicts (many times faster than the graph_objects builders)."""
    import plotly.graph_objects as go

    axis = dict(gridcolor="#e5e7eb", zerolinecolor="#cbd5e1", linecolor="#94a3b8")
    base = dict(title=dict(text=title, font=dict(size=14)), height=height,
                margin=dict(l=50, r=10, t=56, b=40), plot_bgcolor="white", paper_bgcolor="white",
                xaxis=dict(title=dict(text=x, standoff=4), **axis),
                yaxis=dict(title=dict(text=y), **axis),
                legend=dict(orientation="h", x=0, y=-0.22, yanchor="top", font=dict(size=11)),
                hovermode="closest")
    for key, value in layout.items():
        base[key] = {**base[key], **value} if isinstance(base.get(key), dict) else value
    legend_rows = sum(1 for d in data if d.get("showlegend", True) and d.get("name"))
    if legend_rows:
        base["margin"]["b"] = base["margin"]["b"] + 40 + 16 * (legend_rows // 3)
        base["height"] = base["height"] + 16 * (legend_rows // 3)
    return go.Figure(dict(data=data, layout=base), skip_invalid=True)


def run_figures(stats: TraceStats, history: dict, method: str, live: bool = False) -> tuple:
    """A Generate run's charts: tokens vs NFE (with this session's earlier runs of other
    methods, `history`), drafts changed per pass, then, once it has ended, tokens per pass and
    the acceptance rate. While it runs only the first two, which move most: a chart costs the
    browser far more to draw than the server to make."""
    curves = {m: (h["nfe"], h["committed"]) for m, h in history.items() if m != "_model"}
    curves[method] = (stats.nfe, stats.committed)
    live_ones = (committed_vs_nfe_figure(curves, stats.num_tokens, method), flicker_figure(stats))
    return live_ones if live else live_ones + (accepted_length_figure(stats), acceptance_figure(stats))


def committed_vs_nfe_figure(curves: dict[str, tuple[list[int], list[int]]], num_tokens: int,
                            current: str | None = None):
    """Tokens committed against forward passes: the AR diagonal, then one curve per run."""
    data = [dict(type="scatter", x=[0, num_tokens], y=[0, num_tokens], mode="lines",
                 name="one token per pass (AR)", line=dict(color="#94a3b8", dash="dash"),
                 hovertemplate="AR: one token per forward pass<br>NFE %{x} → %{y} "
                               "tokens<extra></extra>")]
    for method, (nfe, committed) in curves.items():
        label = METHOD_LABELS.get(method, method)
        data.append(dict(
            type="scatter", x=[0, *nfe], y=[0, *committed], mode="lines", name=label,
            line=dict(color=METHOD_COLOURS.get(method), width=3 if method == current else 1.5,
                      shape="hv"),
            hovertemplate=(f"{label}<br>NFE %{{x}} (forward passes, prefill included)"
                           "<br>%{y} tokens committed<extra></extra>")))
    return _figure(data, title("Tokens committed vs NFE", "forward passes, the prefill included"), "NFE",
                   "tokens committed",
                   height=320, xaxis=dict(range=[0, num_tokens * 1.02]),
                   yaxis=dict(range=[0, num_tokens * 1.05]))


def race_progress_figure(curves: dict[str, np.ndarray], num_tokens: int, upto: int | None = None):
    """Per method, the mean over its K samples of tokens committed after each pass, with a
    band from the slowest to the fastest sample. `curves[m]` is [K, NFE]; `upto` cuts the
    curves at that NFE (the lockstep replay)."""
    data = [dict(type="scatter", x=[0, num_tokens], y=[0, num_tokens], mode="lines",
                 name="one token per pass (AR)", line=dict(color="#94a3b8", dash="dash"),
                 hoverinfo="skip")]
    for method, c in curves.items():
        c = np.asarray(c, dtype=float)
        if upto is not None:
            c = c[:, :upto]
        if c.size == 0:
            continue
        x = list(range(0, c.shape[1] + 1))
        mean, low, high = (np.concatenate([[0.0], f(c, 0)]) for f in (np.mean, np.min, np.max))
        colour = METHOD_COLOURS.get(method, "#000000")
        label = METHOD_LABELS.get(method, method)
        k = c.shape[0]
        data.append(dict(type="scatter", x=x, y=low.tolist(), mode="lines", line=dict(width=0),
                         showlegend=False, legendgroup=method, hoverinfo="skip"))
        data.append(dict(type="scatter", x=x, y=high.tolist(), mode="lines", line=dict(width=0),
                         fill="tonexty", fillcolor=_css(_rgb(colour), 0.18), showlegend=False,
                         legendgroup=method, hoverinfo="skip"))
        data.append(dict(type="scatter", x=x, y=mean.round(1).tolist(), mode="lines",
                         name=f"{label}: mean of {k}" + (", band min-max" if k > 1 else ""),
                         legendgroup=method, line=dict(color=colour, width=2.5),
                         hovertemplate=f"{label}<br>NFE %{{x}}: %{{y}} tokens on average over "
                                       f"{k} samples<extra></extra>"))
    return _figure(data, title("Tokens committed vs NFE", "mean over the samples, band: min–max"),
                   "NFE", "tokens committed", height=320,
                   xaxis=dict(range=[0, num_tokens * 1.02]), yaxis=dict(range=[0, num_tokens * 1.05]))


def accepted_length_figure(stats: TraceStats):
    """Per forward pass: accepted drafts (green), then the one token sampled from p: the
    residual at the first rejection (orange) or the bonus / AR sample (blue)."""
    steps = np.diff([0, *stats.committed]) - np.asarray(stats.accepted, int)
    kinds = np.asarray(stats.new_kind)
    data = [dict(type="bar", x=stats.index, y=stats.accepted, name="accepted drafts",
                 marker=dict(color=_css(STYLE[ACCEPTED][1])),
                 hovertemplate="pass %{x}: %{y} drafts accepted (U < min(1, p/q))<extra></extra>")]
    for kind, name, colour in (("resampled", "residual sample (first rejection)", STYLE[RESAMPLED][1]),
                               ("new", "bonus / AR sample", STYLE[NEW][1])):
        mask = (kinds == "resampled") if kind == "resampled" else np.isin(kinds, ["bonus", "sample"])
        data.append(dict(type="bar", x=np.asarray(stats.index)[mask].tolist(),
                         y=np.clip(steps[mask], 0, None).tolist(), name=name,
                         marker=dict(color=_css(colour)),
                         hovertemplate=f"pass %{{x}}: +%{{y}} {name}<extra></extra>"))
    mean_len = stats.sample().mean_accepted_length if stats.records else 0.0
    return _figure(data, title("Tokens committed per pass", f"mean accepted length {mean_len:.2f}"),
                   "pass", "tokens", barmode="stack", bargap=0.1)


def flicker_figure(stats: TraceStats):
    """Per pass: carried-over drafts whose token changed since the previous pass (flicker)
    against those that stayed the same. SJD redraws nearly all; coupling keeps most."""
    kept = (np.asarray(stats.carried) - np.asarray(stats.changed)).tolist()
    data = [dict(type="bar", x=stats.index, y=stats.changed, name="drafts changed (flicker)",
                 marker=dict(color=_css(FILM_STYLE[F_CHANGED][1])),
                 hovertemplate="pass %{x}: %{y} carried drafts changed<extra></extra>"),
            dict(type="bar", x=stats.index, y=kept, name="drafts unchanged",
                 marker=dict(color=_css(FILM_STYLE[F_KEPT][1])),
                 hovertemplate="pass %{x}: %{y} carried drafts unchanged<extra></extra>")]
    stab = stats.sample().draft_stability if stats.records else 0.0
    return _figure(data, title("Drafts changed since the last pass", f"draft stability {stab:.2f}"),
                   "pass", "carried drafts", barmode="stack", bargap=0.1)


def acceptance_figure(stats: TraceStats):
    """Running acceptance rate: accepted drafts / verified drafts so far."""
    rate = stats.running_acceptance
    colour = METHOD_COLOURS.get(stats.method, "#16a34a")
    data = [dict(type="scatter", x=stats.index, y=[None if np.isnan(r) else float(r) for r in rate],
                 mode="lines", line=dict(color=colour, width=2),
                 name=f"{METHOD_LABELS.get(stats.method, stats.method)}: acceptance rate so far",
                 hovertemplate="pass %{x}: acceptance rate %{y:.3f}<br>= accepted drafts / "
                               "verified drafts so far (≤ 1)<extra></extra>")]
    rate_now = stats.sample().acceptance_rate if stats.records else 0.0
    return _figure(data, title("Acceptance rate", f"{rate_now:.3f} so far"), "pass", "accepted / verified",
                   yaxis=dict(range=[0, 1.02]))


def histogram_figure(histograms: dict[str, list[float]], samples: int | None = None):
    """Share of passes that committed 1, 2, 3, ... tokens, one bar group per method."""
    width = max((len(h) for h in histograms.values()), default=1)
    data = []
    for method, h in histograms.items():
        label = METHOD_LABELS.get(method, method)
        data.append(dict(type="bar", x=list(range(1, len(h) + 1)), y=[round(v, 4) for v in h],
                         name=label, marker=dict(color=METHOD_COLOURS.get(method)),
                         hovertemplate=f"{label}: %{{y:.1%}} of passes committed %{{x}} "
                                       f"token(s)<extra></extra>"))
    over = f", {samples} samples pooled" if samples else ""
    return _figure(data, title("Tokens committed per pass", "share of passes" + over),
                   "tokens committed in one pass", "share of passes", barmode="group", bargap=0.15,
                   xaxis=dict(dtick=1, range=[0.5, width + 0.5]), yaxis=dict(tickformat=".0%"))


def race_flicker_figure(changed: dict[str, np.ndarray]):
    """Per method: carried-over drafts that changed in each pass, mean over the samples."""
    data = []
    for method, c in changed.items():
        c = np.asarray(c, dtype=float)
        if c.size == 0 or method == "ar":
            continue
        label = METHOD_LABELS.get(method, method)
        data.append(dict(type="scatter", x=list(range(1, c.shape[1] + 1)), y=c.mean(0).round(2).tolist(),
                         mode="lines", name=label, line=dict(color=METHOD_COLOURS.get(method), width=2),
                         hovertemplate=f"{label}<br>pass %{{x}}: %{{y}} drafts changed on "
                                       f"average<extra></extra>"))
    return _figure(data, title("Drafts changed since the last pass", "flicker, mean over the samples"),
                   "pass (NFE)", "changed drafts")


def _tile_maps(values: np.ndarray, grid: tuple[int, ...], cols: int = 4) -> np.ndarray:
    """[N] -> one float map with the frames laid out like `tile_frames` (NaN gaps)."""
    T, H, W = grid3(grid)
    v = values.reshape(T, H, W).astype(np.float64)
    if T == 1:
        return v[0]
    cols = min(T, cols)
    rows = -(-T // cols)
    sheet = np.full((rows * (H + 1) - 1, cols * (W + 1) - 1), np.nan)
    for t in range(T):
        r, c = divmod(t, cols)
        sheet[r * (H + 1):r * (H + 1) + H, c * (W + 1):c * (W + 1) + W] = v[t]
    return sheet


def _map_axes(shape: tuple[int, int]) -> dict:
    """Axes of a token map: row and column numbers, cells separated by white gaps (no grid
    lines through the cells), square cells."""
    h, w = shape
    axis = dict(showgrid=False, zeroline=False, ticks="outside", constrain="domain")
    return dict(xaxis=dict(axis, title=dict(text="column"), dtick=1 if w <= 16 else None),
                yaxis=dict(axis, title=dict(text="row"), autorange="reversed", scaleanchor="x",
                           dtick=1 if h <= 16 else None))


def heatmap_figure(values: np.ndarray, grid: tuple[int, ...], title: str, hover: str,
                   colorscale: str = "Viridis", missing: float | None = None, colorbar: str = ""):
    z = _tile_maps(values, grid)
    if missing is not None:
        z = np.where(z == missing, np.nan, z)
    rows = [[None if np.isnan(v) else float(v) for v in r] for r in z]
    gap = 1 if max(z.shape) <= 32 else 0
    data = [dict(type="heatmap", z=rows, colorscale=colorscale, hoverongaps=False, xgap=gap, ygap=gap,
                 hovertemplate=hover + "<extra></extra>",
                 colorbar=dict(thickness=10, title=dict(text=colorbar, side="right")))]
    return _figure(data, title, "", "", height=300, margin=dict(b=40), **_map_axes(z.shape))


def committed_at_figure(stats: TraceStats):
    """Which forward pass committed each token."""
    vals = stats.committed_at if stats.committed_at is not None else np.full(stats.num_tokens, -1)
    return heatmap_figure(vals, stats.grid, "Committed by pass k",
                          "row %{y}, column %{x}<br>committed by forward pass %{z}",
                          missing=-1, colorbar="pass")


def unchanged_figure(stats: TraceStats):
    """The longest run of passes in which each position's draft kept the same token."""
    n = stats.num_tokens
    vals = stats.longest_unchanged if stats.longest_unchanged is not None else np.zeros(n)
    return heatmap_figure(vals, stats.grid, "Longest run a draft stayed unchanged",
                          "row %{y}, column %{x}<br>draft unchanged for %{z} consecutive passes"
                          "<br>(0: never drafted)", colorscale="Magma", colorbar="passes")


def accept_prob_figure(it: Iteration, grid: tuple[int, ...], row: int = 0):
    """min(1, p/q) of the drafts this pass verified (the accepted ones and the first
    rejection), at their positions; drafts fed after the first rejection were never tested."""
    n = int(np.prod(grid))
    probs = it.accept_prob[row].float().numpy()
    pos = int(it.n_before[row]) + np.arange(probs.shape[0])
    verified = it.verified[row].numpy() & (pos < n)
    untested = np.isfinite(probs) & ~verified & (pos < n)
    vals = np.full(n, np.nan)
    vals[pos[verified]] = probs[verified]
    fig = heatmap_figure(vals, grid, title("min(1, p/q) of the verified drafts", f"pass {it.index}"),
                         "row %{y}, column %{x}<br>verified: min(1, p/q) = %{z:.3f}",
                         colorscale="RdYlGn", colorbar="min(1, p/q)").update_traces(zmin=0, zmax=1)
    mask = np.full(n, np.nan)
    mask[pos[untested]] = 1.0
    sheet = _tile_maps(mask, grid)
    ys, xs = np.nonzero(np.isfinite(sheet))
    fig.add_scatter(x=xs.tolist(), y=ys.tolist(), mode="markers",
                    marker=dict(symbol="square-open", size=7, color="#94a3b8"),
                    name="fed, not verified (after the first rejection)",
                    hovertemplate="row %{y}, column %{x}<br>draft fed after the first rejection: "
                                  "not tested<extra></extra>")
    fig.add_scatter(x=[None], y=[None], mode="markers", name="verified draft, coloured by min(1, p/q)",
                    marker=dict(symbol="square", size=9, color="rgb(26, 152, 80)"))
    return fig.update_layout(height=420, margin=dict(b=110), legend=dict(y=-0.28))


def filmstrip_image(film: Sequence[np.ndarray], height: int = 180, width: int = 720) -> np.ndarray | None:
    """The window's drafts across passes: one column per pass (left to right), one row per
    draft slot after that pass (top: the next position to decide), coloured unchanged since
    the previous pass, changed (flicker), fresh (init) or none. None when the run has no
    draft slots (AR): there is nothing to draw, and an empty picture cannot be encoded."""
    if not film or film[0].size == 0:
        return None
    states = np.stack(film, axis=1)                                  # [slots, passes]
    lut = np.zeros((len(FILM_STYLE), 3), np.uint8)
    for s, (_, colour) in FILM_STYLE.items():
        lut[s] = colour
    sy = max(2, height // max(states.shape[0], 1))
    sx = max(1, min(12, width // states.shape[1]))
    img = np.repeat(np.repeat(lut[states], sy, axis=0), sx, axis=1)
    if sx >= 4:                                                      # a gap between passes
        img[:, sx - 1::sx] = 255
    return img


def film_legend_html() -> str:
    items = []
    for s, (label, colour) in FILM_STYLE.items():
        items.append(f'<span style="display:inline-flex;align-items:center;margin-right:12px;'
                     f'white-space:nowrap"><span style="display:inline-block;width:14px;height:14px;'
                     f'margin-right:4px;border:1px solid #94a3b8;background:rgb{colour}"></span>'
                     f'{label}</span>')
    return f'<div id="film-legend" style="font-size:0.85em;line-height:1.8">{"".join(items)}</div>'


# ----------------------------------------------------------------------------- tables

def _spread(s: Spread, fmt: str = "{:.2f}", ends: str | None = None) -> str:
    """'mean (min–max)', or the value alone when every sample gave the same."""
    if s.count < 2 or s.low == s.high:
        return fmt.format(s.mean)
    ends = ends or fmt
    return f"{fmt.format(s.mean)} ({ends.format(s.low)}–{ends.format(s.high)})"


RACE_HEADERS = ["method", "same tokens as AR", "NFE: mean (min–max)", "step compression",
                "latency speed-up", "mean accepted length", "acceptance rate", "draft stability",
                "wall (s)"]


def race_rows(summaries: Sequence[MethodSummary], greedy: bool) -> list[list[str]]:
    rows = []
    for s in summaries:
        if s.method == "ar":
            same = "— (reference)"
        elif not greedy:
            same = "n/a (sampling)"
        else:
            same = "—" if s.same_as_ar is None else "yes" if s.same_as_ar else "NO"
        spec = s.method != "ar"
        rows.append([METHOD_LABELS.get(s.method, s.method), same, _spread(s.nfe, "{:.1f}", "{:.0f}"),
                     f"{s.step_compression.mean:.2f}x",
                     f"{s.latency_speedup:.2f}x" if s.latency_speedup is not None else "—",
                     _spread(s.mean_accepted_length) if spec else "—",
                     _spread(s.acceptance_rate) if spec else "—",
                     _spread(s.draft_stability) if spec else "—",
                     f"{s.wall:.2f}"])
    return rows


def race_table_html(summaries: Sequence[MethodSummary], greedy: bool) -> str:
    """The race summary as a compact HTML table that wraps instead of scrolling."""
    if not summaries:
        return ""
    head = "".join(f"<th>{h}</th>" for h in RACE_HEADERS)
    body = "".join("<tr>" + "".join(f"<td>{v}</td>" for v in r) + "</tr>"
                   for r in race_rows(summaries, greedy))
    return (f'<table id="race-table" style="width:100%;table-layout:fixed;font-size:0.9em;'
            f'border-collapse:collapse"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>')


# --------------------------------------------------------------------------- text

def shared_note(others: int) -> str:
    """How many other samples shared a run's forward passes, in words ("" when none)."""
    return f"passes shared with up to {others} other sample{'s' if others != 1 else ''}" if others else ""


def run_status(label: str, stats: TraceStats, wall: float, state: str, shared: int = 0) -> str:
    """One line: method, tokens, NFE; `state` is "running", "done" or "stopped"; `shared`: the
    most other samples (other visitors' rows) that one of its passes decoded with it."""
    n, total, nfe = stats.committed[-1], stats.num_tokens, stats.nfe[-1]
    if state == "stopped":
        return f"**{label}** · **stopped at NFE {nfe}, {n}/{total} tokens**"
    head = f"**{label}** · {n}/{total} tokens · NFE {nfe}"
    if state != "done":
        return head + (f" · decoding, {shared_note(shared)}…" if shared else " · decoding…")
    sample = stats.sample()
    return (head + f" · **done** in {wall:.2f} s" + (f" ({shared_note(shared)})" if shared else "")
            + f" · step compression {sample.step_compression:.2f}x · acceptance "
            f"{sample.acceptance_rate:.2f} · mean accepted length {sample.mean_accepted_length:.2f}")


# --------------------------------------------------------------------------- export

def _even16(frame: np.ndarray) -> np.ndarray:
    """Pad a frame with white to sides that are multiples of 16 (H.264 macro blocks)."""
    h, w = frame.shape[:2]
    H, W = -(-h // 16) * 16, -(-w // 16) * 16
    if (H, W) == (h, w):
        return frame
    out = np.full((H, W, 3), 255, np.uint8)
    out[:h, :w] = frame
    return out


def write_mp4(frames: Sequence[np.ndarray], path: str, fps: float = 8) -> str:
    """H.264 / yuv420p MP4 (browser-playable) with imageio-ffmpeg's bundled ffmpeg."""
    import imageio.v2 as imageio

    padded = [_even16(f) for f in frames]
    writer = imageio.get_writer(path, fps=fps, codec="libx264", pixelformat="yuv420p",
                                macro_block_size=16, quality=8,
                                ffmpeg_log_level="error")
    try:
        for f in padded:
            writer.append_data(f)
    finally:
        writer.close()
    return path


def write_gif(frames: Sequence[np.ndarray], path: str, fps: float = 8,
              hold_last: float = 0.0) -> str:
    """Looping GIF; the last frame stays `hold_last` extra seconds."""
    images = [Image.fromarray(f) for f in frames]
    step = max(20, int(1000 / fps))
    durations = [step] * (len(images) - 1) + [step + int(1000 * hold_last)]
    images[0].save(path, save_all=True, append_images=images[1:], loop=0,
                   duration=durations, optimize=False)
    return path


def export_clip(frames: Sequence[np.ndarray], stem: str, fps: float = 8,
                folder: str | None = None, target: int = 256) -> tuple[str, str]:
    """A finished video clip as (mp4, gif), frames upscaled (nearest) to about `target` px."""
    folder = folder or tempfile.mkdtemp(prefix="scd_")
    big = [upscale(to_rgb(f), target) for f in frames]
    return (write_mp4(big, os.path.join(folder, f"{stem}.mp4"), fps),
            write_gif(big, os.path.join(folder, f"{stem}.gif"), fps))


def pick_frames(count: int, limit: int = 200) -> list[int]:
    """Indices of at most `limit` iterations, evenly spread, first and last included."""
    if count <= limit:
        return list(range(count))
    return sorted(set(np.linspace(0, count - 1, limit).round().astype(int).tolist()))


def export_decoding(model, iterations: Sequence[Iteration], stem: str, fps: float = 10,
                    folder: str | None = None, limit: int = 200, decode=None) -> tuple[str, str]:
    """The decoding itself (one frame per iteration, with overlay and legend) as (mp4, gif)."""
    folder = folder or tempfile.mkdtemp(prefix="scd_")
    frames = []
    for i in pick_frames(len(iterations), limit):
        pic = render_iteration(model, iterations[i], decode=decode)
        frames.append(np.concatenate([pic, legend_strip(pic.shape[1])], axis=0))
    held = frames + [frames[-1]] * int(fps)     # hold the final picture for a second
    return (write_mp4(held, os.path.join(folder, f"{stem}.mp4"), fps),
            write_gif(frames, os.path.join(folder, f"{stem}.gif"), fps, hold_last=1.0))


def run_summary(label: str, sample: Sample, wall: float, ar_wall: float | None, device: str,
                shared: int = 0, complete: bool = True) -> str:
    """The ended run's metrics as a markdown table, each with its definition. `ar_wall`: this
    session's last AR run that ran alone; `shared` as for `run_status`: a run that shared its
    passes has no latency of its own (the race times each method alone); a stopped run
    (`complete` False) has neither a step compression nor a latency speed-up."""
    stopped = f"not measured: stopped after {sample.committed} tokens"
    if not complete:
        speedup = stopped
    elif shared:
        speedup = f"not measured: this run's {shared_note(shared)} (the Race times each method alone)"
    elif ar_wall and label != "AR" and wall > 0:
        speedup = f"{ar_wall / wall:.2f}x (against this session's AR run, {ar_wall:.2f} s)"
    else:
        speedup = "run AR once to measure it (a run that shared its passes does not count)"
    timed = f"engine time of this run on {device}" + (
        f"; its {shared_note(shared)}, so it includes their work" if shared else "")
    rows = [("NFE", sample.nfe, METRIC_HELP["nfe"]),
            ("step compression", f"{sample.step_compression:.2f}x" if complete else stopped,
             METRIC_HELP["compression"]),
            ("acceptance rate", f"{sample.acceptance_rate:.3f}", METRIC_HELP["acceptance"]),
            ("mean accepted length", f"{sample.mean_accepted_length:.2f}", METRIC_HELP["mean_len"]),
            ("draft stability", f"{sample.draft_stability:.3f}", METRIC_HELP["stability"]),
            ("wall time", f"{wall:.2f} s", timed),
            ("latency speed-up", speedup, METRIC_HELP["speedup"])]
    return "| metric | value | definition |\n|---|---|---|\n" + \
        "\n".join(f"| {a} | {b} | {c} |" for a, b, c in rows)


def replay_caption(iterations: Sequence[Iteration], i: int) -> str:
    it = iterations[i]
    nb, na = int(it.n_before[0]), int(it.n_after[0])
    acc, ver = int(it.accepted[0].sum()), int(it.verified[0].sum())
    return (f"pass {i} of {len(iterations) - 1} · NFE {it.nfe} · committed {nb} → {na} (+{na - nb}): "
            f"{ver} drafts verified, {acc} accepted"
            + (", the first rejection replaced by a residual sample" if bool(it.resampled[0]) else
               ", then one token sampled from p" if na > nb + acc else ""))


def race_progress(runs: dict, tick: int | None, note: str = "") -> str:
    """Per method at NFE `tick` (the end when None): tokens committed, mean over the samples,
    or when its slowest sample finished."""
    parts = []
    for method, run in runs.items():
        it = run.records[-1] if tick is None else run.at(tick)
        done = int(it.n_after.min()) >= run.num_tokens
        parts.append(f"**{METHOD_LABELS[method]}** " + (
            f"all done at NFE {it.index + 1} ✓" if done else
            f"{float(it.n_after.float().mean()):.0f}/{run.num_tokens}"))
    return ("" if tick is None else f"NFE {tick}: ") + " · ".join(parts) + (f"  \n{note}" if note else "")


def race_note(samples: int, seed: int, greedy: bool, device: str, bench: str) -> str:
    """How the race was run and timed, and the benchmark command that gives the same figures."""
    cpu = (" On a CPU latency follows NFE poorly: a pass over a window of L tokens costs more "
           "than a single-token pass, and batched AR passes are cheap." if device.startswith("CPU") else "")
    return (f"{samples} samples per method (seeds {seed}–{seed + samples - 1}), each method's batch "
            f"decoded alone and timed on its own (engine time, rendering excluded) on **{device}**."
            f"{cpu}  \n"
            + ("**Greedy**: every method must return exactly AR's tokens; the second column checks it."
               if greedy else "**Sampling**: the methods draw different samples from the same "
               "distribution; tick *Greedy* to see identical tokens.")
            + f"  \nThe same NFE, step compression, mean accepted length, acceptance rate and draft "
            f"stability from the benchmark: `{bench}`" + (" (it numbers seeds from 0)" if seed else "")
            + f"; it times one sample at a time, and a batch of {samples} as here with `--seeds 1 "
            f"--batch {samples}`.")


def race_decoding(run) -> str:
    """A method's batch while it decodes, or where Stop ended it."""
    label, n, N = METHOD_LABELS[run.method], int(run.records[-1].n_after.min()), run.num_tokens
    if run.stopped:
        return (f"**Stopped at NFE {run.nfe}, {n}/{N} tokens** (the slowest of {run.rows} samples) "
                f"while decoding {label}; the methods before it finished.")
    return (f"Decoding **{label}**: {run.rows} samples, timed alone · NFE {run.nfe} · {n}/{N} tokens "
            "in the slowest sample")


class RacePanels:
    """Each method's samples at a tick of the race replay, redrawn only when they changed:
    all K samples of an image model, or the frames of one sample (`sample`) of a video model."""

    def __init__(self, model, sample: int | None = None) -> None:
        self.model, self.sample, self._drawn = model, sample, {}

    def at(self, runs: dict, tick: int | None = None) -> dict[str, np.ndarray]:
        """{method: picture} after `tick` passes (the end when None)."""
        out = {}
        for method, run in runs.items():
            it = run.records[-1] if tick is None else run.at(tick)
            rows = list(range(run.rows)) if self.sample is None else [self.sample]
            key = (it.index, tuple(rows))
            if self._drawn.get(method, (None,))[0] != key:
                self._drawn[method] = (key, render_samples(self.model, it, rows, target=96))
            out[method] = self._drawn[method][1]
        return out


def race_report(name: str, settings, runs: dict, samples: int, device: str, probe=None) -> tuple:
    """A finished race as shown: its table (HTML), why SCD's lead over SJD is what it is (with
    `probe`, `race.gap_probe`'s measure of how far p moves), how it was run with the benchmark
    command that gives the same figures, and its three charts."""
    greedy = settings.temperature == 0 or settings.top_k == 1
    table = summarise(runs, greedy)
    return (race_table_html(table, greedy), explain_gap(table, probe),
            race_note(samples, settings.seed, greedy, device, bench_command(name, settings, samples)),
            race_figures(runs, samples))


def race_figures(runs: dict, samples: int) -> tuple:
    """The race's three charts: tokens vs NFE (mean and band), tokens per pass, flicker."""
    return (race_progress_figure({m: r.committed_curves() for m, r in runs.items()},
                                 next(iter(runs.values())).num_tokens),
            histogram_figure({m: r.histogram() for m, r in runs.items() if m != "ar"}, samples),
            race_flicker_figure({m: r.changed_per_pass() for m, r in runs.items()}))


def export_run_clip(model, it: Iteration, stem: str, decode=None) -> tuple[str, str]:
    """A video model's finished clip (row 0 after `it`) as (mp4, gif), at the model's fps."""
    return export_clip(decode_frames(model, it.canvas[0], decode), stem, fps=float(getattr(model, "fps", 6)))
