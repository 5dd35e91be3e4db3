"""Prompt clips for video-continuation models (the Cosmos family): examples and checks.

A clip model's engine prompt is a path to a short video, optionally followed by `|text`
(Video2World). Everything here raises ValueError with a message a user can act on.
"""
from __future__ import annotations

import functools
import os
import tempfile

import numpy as np

from demo.export import write_mp4
from demo.texts import quoted

CLIP_FRAMES = 12                     # frames of each generated example clip
MAX_TEXT_CHARS = 500


CLIPS_FOLDER = "scd-example-clips-v1"   # under the temp folder; a new version of the clips, a new name


@functools.lru_cache(maxsize=1)
def example_clips() -> tuple[str, ...]:
    """Two short synthetic clips (a disc crossing a gradient; a growing ring): nothing to ship,
    nothing to download. Written once to one folder under the temp folder, each file whole or
    not at all, and found there by every later start of the page."""
    folder = os.path.join(tempfile.gettempdir(), CLIPS_FOLDER)
    os.makedirs(folder, exist_ok=True)
    yy, xx = np.mgrid[0:96, 0:128].astype(np.float32)
    paths = []
    for name, colour in (("red-ball", (220, 40, 40)), ("blue-ring", (40, 90, 220))):
        path = os.path.join(folder, f"{name}.mp4")
        paths.append(path)
        if os.path.isfile(path):
            continue
        frames = []
        for t in range(CLIP_FRAMES):
            img = np.stack([40 + xx, 80 + yy, 160 + 0 * xx], -1)
            if name == "red-ball":
                mask = (xx - 16 - 8 * t) ** 2 + (yy - 48) ** 2 < 14 ** 2
            else:
                mask = abs(np.hypot(xx - 64, yy - 48) - 6 - 3 * t) < 4
            img[mask] = colour
            frames.append(np.clip(img, 0, 255).astype(np.uint8))
        staging = tempfile.mkdtemp(dir=folder, prefix=".clip-")
        os.replace(write_mp4(frames, os.path.join(staging, f"{name}.mp4"), fps=8), path)
        os.rmdir(staging)
    return tuple(paths)


def clip_path(clip) -> str:
    """The prompt clip (a path, or a file dict with a "path") checked to be a readable video."""
    path = clip.get("path") if isinstance(clip, dict) else clip
    if path is None or path == "":
        raise ValueError("Prompt clip: pick one of the example clips or upload a short video "
                         "(MP4) for the model to continue.")
    if not isinstance(path, str):
        raise ValueError(f"Prompt clip: expected a video file, got {type(path).__name__}.")
    name = os.path.basename(path)
    if not os.path.isfile(path):
        raise ValueError(f"Prompt clip: file not found: {quoted(name)}. Pick an example clip or upload "
                         "the video again.")
    if "|" in path:
        raise ValueError("Prompt clip: the file name must not contain '|'; rename it and upload again.")
    import imageio.v3 as iio

    try:
        frames = iio.imiter(path)
        first = next(frames, None)
        frames.close()
    except Exception as exc:
        raise ValueError(f"Prompt clip: cannot read {quoted(name)} as a video ({type(exc).__name__}). "
                         "Upload an MP4 or WebM clip.") from None
    if first is None:
        raise ValueError(f"Prompt clip: {quoted(name)} has no frames.")
    return path


def clip_prompt(clip, text: str | None = "") -> str:
    """The engine prompt of a clip model: 'clip.mp4', or 'clip.mp4|text' with a text."""
    if text is not None and not isinstance(text, str):
        raise ValueError("Clip text must be text.")
    text = (text or "").strip()
    if len(text) > MAX_TEXT_CHARS:
        raise ValueError(f"Clip text is {len(text):,} characters long; the limit is "
                         f"{MAX_TEXT_CHARS}. Please shorten it.")
    path = clip_path(clip)
    return f"{path}|{text}" if text else path
