"""A row's tokens as the pictures a front end shows: decoded where the model is, with the
row's own decoder, one frame per token frame, box-filtered to about the size shown.

A decode client's `pictures` (`scd_core.client`) runs `display_frames` beside the model, so
that what travels to a page is a few small pictures, never the model. Pixel work is numpy
on whole arrays; the only Python loops run over rows and frames, never over tokens.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch


def grid3(grid: Sequence[int]) -> tuple[int, int, int]:
    """(H, W) -> (1, H, W); (T, H, W) unchanged."""
    g = tuple(int(x) for x in grid)
    if len(g) == 2:
        return (1, *g)
    if len(g) == 3:
        return g  # type: ignore[return-value]
    raise ValueError(f"grid: expected (H, W) or (T, H, W), got {grid!r}")


def fill_empty(canvas: torch.Tensor, fill: int = 0) -> torch.Tensor:
    """Replace the -1 (empty) positions of a canvas with a valid code so it can be decoded."""
    return canvas.clamp(min=0) if fill == 0 else canvas.masked_fill(canvas < 0, fill)


def to_rgb(img) -> np.ndarray:
    """A decoded image (PIL, or an array in [0, 1] or [0, 255]) as HxWx3 uint8."""
    from PIL import Image

    if isinstance(img, Image.Image):
        return np.asarray(img.convert("RGB"))
    arr = np.asarray(img)
    if arr.ndim == 2:
        arr = np.repeat(arr[..., None], 3, axis=2)
    if arr.dtype != np.uint8:
        arr = np.clip(arr * (255 if arr.max() <= 1.0 else 1), 0, 255).astype(np.uint8)
    return arr[..., :3]


def shrink(frame: np.ndarray, target: int) -> np.ndarray:
    """Box-filter a large frame down by an integer factor to about `target` (or leave it).
    Shrinking a shrunk frame again to the same target leaves it as it is."""
    h, w = frame.shape[:2]
    f = max(h, w) // target
    if f < 2:
        return frame
    h2, w2 = h // f, w // f
    blocks = frame[:h2 * f, :w2 * f].reshape(h2, f, w2, f, -1).astype(np.float32)
    return blocks.mean(axis=(1, 3)).round().astype(np.uint8)


def decode_frames(model, canvas_row: torch.Tensor, decode: Callable | None = None) -> list[np.ndarray]:
    """Decode one canvas row [N] into a list of HxWx3 uint8 frames (one for an image), with
    `decode` (the row's own decoder: a served request's `decode`) or else `model.decode`."""
    out = (decode or model.decode)(fill_empty(canvas_row.reshape(1, -1)))[0]
    frames = out if isinstance(out, (list, tuple)) else [out]
    return [to_rgb(f) for f in frames]


def token_frame_picks(model, n_decoded: int, T: int, frame_tokens: int, decode=None) -> list[int]:
    """Which of `n_decoded` pixel frames to show for each of the T generated token frames.

    A causal temporal tokenizer (Cosmos DV: 1 + 8k pixel frames for 1 + k latent frames)
    decodes the conditioning latent frames in front of the generated ones. When the row's
    decoder `decode` carries them (`prefix_tokens` [1, P * H * W], as Cosmos' does), each
    generated token frame shows the last pixel frame of its chunk; otherwise the frames are
    spread evenly.
    """
    prefix = getattr(decode, "prefix_tokens", None)
    p = int(prefix.shape[-1]) // frame_tokens if hasattr(prefix, "shape") and frame_tokens else 0
    if p > 0 and (n_decoded - 1) % (p + T - 1) == 0:
        r = (n_decoded - 1) // (p + T - 1)
        return [r * (p + t) for t in range(T)]
    return [t * n_decoded // T for t in range(T)]


def shown_frames(model, canvas_row: torch.Tensor, size: int | None = None, decode: Callable | None = None,
                 clip: bool = False) -> list[np.ndarray]:
    """One canvas row [N] as shown: decoded (`decode_frames`), one frame per token frame of
    the model's grid (a temporal tokenizer's frames picked by `token_frame_picks`; `clip`:
    every decoded frame, a video's clip), each box-filtered to about `size` px (None: as
    decoded)."""
    frames = decode_frames(model, canvas_row, decode)
    T, H, W = grid3(model.grid)
    if not clip and len(frames) != T:
        frames = [frames[i] for i in token_frame_picks(model, len(frames), T, H * W, decode)]
    return frames if size is None else [shrink(f, size) for f in frames]


def display_frames(model, canvases: torch.Tensor, size: int | None = None,
                   decoders: Sequence[Callable | None] | None = None, clip: bool = False) -> list[list[np.ndarray]]:
    """`shown_frames` of each row of `canvases` [R, N] (-1 where empty), row r decoded with
    `decoders[r]` (None, or no list: the model's own decoder). Canvases from elsewhere are
    checked first (`check_canvases`)."""
    decoders = list(decoders) if decoders is not None else [None] * canvases.shape[0]
    if len(decoders) != canvases.shape[0]:
        raise ValueError(f"decoders: expected one per canvas ({canvases.shape[0]}), got {len(decoders)}")
    with torch.inference_mode():
        return [shown_frames(model, canvases[r], size, decoders[r], clip) for r in range(canvases.shape[0])]


def check_canvases(model: Any, canvases) -> torch.Tensor:
    """`canvases` as a LongTensor [R, N] of the model's grid (N tokens), each token in
    [-1, vocab_size); a ValueError naming `canvases` otherwise (they come from a front end)."""
    if not isinstance(canvases, torch.Tensor) or canvases.dtype != torch.long or canvases.dim() != 2:
        raise ValueError(f"canvases: expected a LongTensor [rows, tokens], got "
                         f"{getattr(canvases, 'dtype', type(canvases).__name__)} "
                         f"{tuple(getattr(canvases, 'shape', ()))}")
    N = int(np.prod(grid3(model.grid)))
    if canvases.shape[1] != N:
        raise ValueError(f"canvases: expected {N} tokens per row (the grid {tuple(model.grid)}), "
                         f"got {canvases.shape[1]}")
    if canvases.numel() and (int(canvases.min()) < -1 or int(canvases.max()) >= int(model.vocab_size)):
        raise ValueError(f"canvases: tokens must lie in [-1, {int(model.vocab_size) - 1}]")
    return canvases
