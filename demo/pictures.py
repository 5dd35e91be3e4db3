"""Pictures of a decode: the token grid drawn over the decoded image, its legend (HTML and
pixels), a batch's samples side by side, and the filmstrip of drafts across passes.

Everything here reads a pass's record (`scd_core.trace.Iteration`) and a decoded image;
nothing here touches the engine. Pixel work is numpy on whole arrays; the only Python loops
run over frames, never over tokens.

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
from typing import Sequence

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont

from scd_core.frames import display_frames, grid3, shrink, to_rgb, token_frame_picks
from scd_core.trace import Iteration

EMPTY, COMMITTED, ACCEPTED, RESAMPLED, NEW, DRAFT = range(6)

# state -> (legend label, RGB colour, tint alpha, draw outline)
STYLE: dict[int, tuple[str, tuple[int, int, int], float, bool]] = {
    COMMITTED: ("committed earlier", (255, 255, 255), 0.0, False),
    ACCEPTED: ("accepted this pass", (22, 163, 74), 0.35, True),
    RESAMPLED: ("residual sample (first rejection)", (234, 88, 12), 0.45, True),
    NEW: ("bonus / AR sample", (59, 130, 246), 0.25, True),
    DRAFT: ("still draft", (100, 116, 139), 0.55, False),
    EMPTY: ("empty", (200, 200, 200), 1.0, False),
}
OUTLINE = {ACCEPTED: (22, 163, 74), RESAMPLED: (220, 38, 38), NEW: (59, 130, 246)}
LEGEND_ORDER = (COMMITTED, ACCEPTED, RESAMPLED, NEW, DRAFT, EMPTY)


# ----------------------------------------------------------------------------- grid

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


def shown_frames(model, canvases, size: int | None, decoders=None, clip: bool = False) -> list[list[np.ndarray]]:
    """Each canvas row [R, N] as frames of about `size` px, one per token frame (`clip`: every
    decoded frame): drawn by the decode client for a model the page does not hold (its
    `pictures`; `decoders`: the rows' request ids), else decoded here, with a row's decoder
    where it is given as one (a model the page holds has no decoder of a row's own)."""
    if hasattr(model, "pictures"):
        return model.pictures(canvases, size, decoders, clip)
    own = [d if callable(d) else None for d in decoders] if decoders is not None else None
    return display_frames(model, canvases, size, own, clip)


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
    fh, fw = frame.shape[:2]
    gh, gw = states.shape
    if fh % gh == 0 and fw % gw == 0:    # each pixel of the frame in one cell: tinted at its own size
        cells = np.repeat(np.repeat(states, fh // gh, axis=0), fw // gw, axis=1)
        img = _tinted(frame.astype(np.float32), cells)
        img = np.repeat(np.repeat(img, scale, axis=0), scale, axis=1)
    else:
        img = np.repeat(np.repeat(frame, scale, axis=0), scale, axis=1).astype(np.float32)
    ph, pw = img.shape[:2]
    ri, redge = _cell_index(ph, gh)
    ci, cedge = _cell_index(pw, gw)
    st = states[ri[:, None], ci[None, :]]
    if not (fh % gh == 0 and fw % gw == 0):
        img = _tinted(img, st)
    cell = min(ph // gh, pw // gw)
    thick = max(2, cell // 8) if cell >= 8 else 1
    edge = np.minimum(redge[:, None], cedge[None, :])
    hatch = ((np.arange(ph)[:, None] + np.arange(pw)[None, :]) % max(4, cell // 4)) == 0
    img[(st == DRAFT) & hatch] = (71, 85, 105)
    if cell >= 6:   # faint grid lines so single tokens can be told apart
        img[edge == 0] *= 0.85
    for s, colour in OUTLINE.items():
        img[(st == s) & (edge < thick)] = colour
    return img.astype(np.uint8)


def _tinted(img: np.ndarray, states: np.ndarray) -> np.ndarray:
    """`img` (float, H x W x 3) with each pixel blended with the colour of its state [H, W]."""
    for s, (_, colour, alpha, _) in STYLE.items():
        if alpha > 0:
            m = states == s
            img[m] = (1 - alpha) * img[m] + alpha * np.asarray(colour, np.float32)
    return img


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


def render_iteration(model, it: Iteration, row: int = 0, target: int = 320,
                     overlay: bool = True, decode=None) -> np.ndarray:
    """The picture of one iteration: decoded canvas (committed + drafts) with the grid overlay;
    `decode`: the row's decoder (a request id of the decode client, or a callable; None: the
    model's own), as for `shown_frames`.

    Small images are upscaled (nearest) to about `target` px, large ones box-filtered down
    (where the model is) so that streaming a picture per iteration stays cheap.
    """
    return render_iterations(model, [it], row, target, overlay, decode)[0]


def frame_size(target: int, frames: int) -> int:
    """About how many px a side each frame of a picture `target` px a side is drawn: a video's
    frames are tiled, each half as large, but no smaller than 96."""
    return target if frames == 1 else max(96, target // 2)


def render_iterations(model, its: Sequence[Iteration], row: int = 0, target: int = 320,
                      overlay: bool = True, decode=None) -> list[np.ndarray]:
    """`render_iteration` of several iterations of one row, their frames asked for at once."""
    T = grid3(model.grid)[0]
    frame_target = frame_size(target, T)
    canvases = torch.cat([it.canvas[row: row + 1] for it in its]) if its else torch.zeros(0, 0, dtype=torch.long)
    frames = shown_frames(model, canvases, frame_target, [decode] * len(its))
    return [_draw(model, f, token_states(it, row), target, overlay, frame_target) for f, it in zip(frames, its)]


def _draw(model, decoded: list[np.ndarray], states: np.ndarray, target: int, overlay: bool,
          frame_target: int | None = None) -> np.ndarray:
    """Frames (one per token frame, or a temporal tokenizer's pixel frames, spread) shrunk or
    upscaled to about `frame_target` px, overlaid with the token states, tiled."""
    T, H, W = grid3(model.grid)
    if frame_target is None:
        frame_target = frame_size(target, T)
    if len(decoded) != T:   # a temporal tokenizer's pixel frames: one per token frame
        decoded = [decoded[i] for i in token_frame_picks(model, len(decoded), T, H * W)]
    frames = [shrink(f, frame_target) for f in decoded]
    states = states.reshape(T, H, W)
    scale = scale_for(*frames[0].shape[:2], target=frame_target)
    if overlay:
        drawn = [overlay_frame(f, states[t], scale) for t, f in enumerate(frames)]
    else:
        drawn = [np.repeat(np.repeat(f, scale, 0), scale, 1) for f in frames]
    return tile_frames(drawn)


def blank_picture(grid: Sequence[int], target: int = 320) -> np.ndarray:
    """The token grid with nothing there yet (every cell grey, "empty" in the legend), its
    frames tiled as a decoded run's are: what a picture shows before a run."""
    T, H, W = grid3(grid)
    frame_target = frame_size(target, T)
    scale = max(1, scale_for(H, W, frame_target))
    states = np.full((H, W), EMPTY, np.int8)
    frame = np.zeros((H, W, 3), np.uint8)
    return tile_frames([overlay_frame(frame, states, scale)] * T)


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


F_EMPTY, F_KEPT, F_CHANGED, F_FRESH = range(4)
# The colours the charts draw too (demo.charts): each at least 3:1 against white and against the
# dark theme's panel (#1f2937), and unchanged and changed told apart by hue, not by red alone.
FILM_STYLE: dict[int, tuple[str, tuple[int, int, int]]] = {
    F_KEPT: ("draft unchanged since the previous pass", (8, 145, 178)),
    F_CHANGED: ("draft changed since the previous pass (flicker)", (220, 38, 38)),
    F_FRESH: ("fresh draft (init scheme)", (196, 181, 253)),
    F_EMPTY: ("no draft (past the grid's end)", (241, 245, 249)),
}


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
