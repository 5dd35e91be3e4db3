"""A decode as files to download: the decoding itself (one frame per pass, with the grid and
its legend) and a video model's finished clip, as MP4 (H.264, browser-playable) and GIF."""
from __future__ import annotations

import os
from typing import Callable, Sequence

import numpy as np
from PIL import Image

from demo.picture_files import RUN_FILES
from demo.pictures import legend_strip, render_iterations, shown_frames, to_rgb, upscale
from scd_core.trace import Iteration

# --------------------------------------------------------------------------- export

EXPORT_BATCH = 16     # canvases decoded per call while exporting a decoding


class Stopped(RuntimeError):
    """An export stopped before its files were written (`stopped()` turned true)."""

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
    folder = folder or RUN_FILES.new_folder()
    big = [upscale(to_rgb(f), target) for f in frames]
    return (write_mp4(big, os.path.join(folder, f"{stem}.mp4"), fps),
            write_gif(big, os.path.join(folder, f"{stem}.gif"), fps))


def pick_frames(count: int, limit: int = 200) -> list[int]:
    """Indices of at most `limit` iterations, evenly spread, first and last included."""
    if count <= limit:
        return list(range(count))
    return sorted(set(np.linspace(0, count - 1, limit).round().astype(int).tolist()))


def export_decoding(model, iterations: Sequence[Iteration], stem: str, fps: float = 10,
                    folder: str | None = None, limit: int = 200, decode=None,
                    stopped: Callable[[], bool] = lambda: False) -> tuple[str, str]:
    """The decoding itself (one frame per iteration, with overlay and legend) as (mp4, gif);
    `Stopped` if `stopped()` turns true before the files are written."""
    frames, picked = [], pick_frames(len(iterations), limit)
    for at in range(0, len(picked), EXPORT_BATCH):              # a few canvases decoded at a time
        if stopped():
            raise Stopped("the export was stopped")
        for pic in render_iterations(model, [iterations[i] for i in picked[at: at + EXPORT_BATCH]], decode=decode):
            frames.append(np.concatenate([pic, legend_strip(pic.shape[1])], axis=0))
    if stopped():
        raise Stopped("the export was stopped")
    folder = folder or RUN_FILES.new_folder()
    held = frames + [frames[-1]] * int(fps)     # hold the final picture for a second
    return (write_mp4(held, os.path.join(folder, f"{stem}.mp4"), fps),
            write_gif(frames, os.path.join(folder, f"{stem}.gif"), fps, hold_last=1.0))


def export_run_clip(model, it: Iteration, stem: str, decode=None) -> tuple[str, str]:
    """A video model's finished clip (row 0 after `it`, every decoded frame, as decoded) as
    (mp4, gif), at the model's fps (6 when it has none)."""
    frames = shown_frames(model, it.canvas[:1], None, [decode], clip=True)[0]
    return export_clip(frames, stem, fps=float(getattr(model, "fps", None) or 6))
