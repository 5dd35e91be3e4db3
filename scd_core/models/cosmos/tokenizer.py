"""NVIDIA's discrete video tokenizer Cosmos-1.0-Tokenizer-DV8x16x16, and the video input side.

NVIDIA ships the tokenizer as two TorchScript files, `encoder.jit` and `decoder.jit`
(hub: nvidia/Cosmos-1.0-Tokenizer-DV8x16x16). As published (cosmos1/models/autoregressive/
tokenizer/discrete_video.py):
- the encoder takes a clip [B, 3, T, H, W] in [-1, 1] (bf16 on GPU), T = 33 frames per chunk,
  and returns `(indices, codes, ...)`; codes are FSQ codes [B, 6, t, h, w] with
  t = 1 + (T - 1) // 8, h = H // 16, w = W // 16;
- token ids are `codes_to_indices(codes)` with FSQ levels [8, 8, 8, 5, 5, 5] (64,000 codes);
- the decoder takes indices [B, t, h, w] and returns a clip [B, 3, T, H, W] in [-1, 1].

The video input is prepared as in cosmos1/models/autoregressive/utils/inference.py: the LAST
`num_input_frames` frames of the clip (9, or 1), the last one repeated up to 33 frames, resized
(aspect kept, ceil) and center-cropped to 640x1024, scaled to [-1, 1]; an image is a static
33-frame clip, conditioned on 1 frame. We resize with torch's bilinear antialiased
interpolation rather than torchvision's (not a dependency here), so pixels can differ slightly.
"""
from __future__ import annotations

import math
import os
from collections import deque
from typing import Sequence

import torch
import torch.nn.functional as F

FSQ_LEVELS: tuple[int, ...] = (8, 8, 8, 5, 5, 5)
COMPRESSION: tuple[int, int, int] = (8, 16, 16)      # (time, height, width)
PIXEL_CHUNK = 33                                     # frames per tokenizer chunk
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp", ".bmp")
VIDEO_EXTENSIONS = (".mp4", ".mov", ".avi", ".mkv", ".webm", ".gif")


def fsq_basis(levels: Sequence[int] = FSQ_LEVELS) -> torch.Tensor:
    """Mixed-radix basis of the FSQ code index: [1, 8, 64, 512, 2560, 12800] for the DV levels."""
    basis = [1]
    for level in levels[:-1]:
        basis.append(basis[-1] * int(level))
    return torch.tensor(basis, dtype=torch.long)


def codes_to_indices(codes: torch.Tensor, levels: Sequence[int] = FSQ_LEVELS) -> torch.Tensor:
    """FSQ codes [..., C] in [-1, 1] -> token ids [...] (as FSQuantizer.codes_to_indices)."""
    lv = torch.tensor(list(levels), dtype=torch.float32, device=codes.device)
    half = torch.div(lv, 2, rounding_mode="floor")
    digits = torch.round(codes.float() * half + half).long()
    return (digits * fsq_basis(levels).to(codes.device)).sum(-1)


def latent_frames(pixel_frames: int, temporal: int = COMPRESSION[0]) -> int:
    """Latent frames of a causal chunk: the first frame has its own latent, then 8x."""
    return 1 + (pixel_frames - 1) // temporal


class DVTokenizer:
    """The TorchScript encoder/decoder pair of the discrete video tokenizer."""

    def __init__(self, encoder: torch.jit.ScriptModule, decoder: torch.jit.ScriptModule,
                 device: torch.device, dtype: torch.dtype, levels: Sequence[int] = FSQ_LEVELS,
                 compression: Sequence[int] = COMPRESSION, pixel_chunk: int = PIXEL_CHUNK):
        self.encoder, self.decoder = encoder, decoder
        self.device, self.dtype = torch.device(device), dtype
        self.levels, self.compression, self.pixel_chunk = tuple(levels), tuple(compression), pixel_chunk
        self.vocab_size = math.prod(self.levels)

    @classmethod
    def load(cls, folder: str, device: str | torch.device = "cpu",
             dtype: torch.dtype = torch.float32, **kwargs) -> "DVTokenizer":
        """Load `encoder.jit` and `decoder.jit` from `folder` (TorchScript: no pickle)."""
        enc, dec = (os.path.join(folder, f) for f in ("encoder.jit", "decoder.jit"))
        missing = [p for p in (enc, dec) if not os.path.isfile(p)]
        if missing:
            raise FileNotFoundError(
                f"Cosmos DV tokenizer not found: missing {', '.join(missing)}. Download "
                "nvidia/Cosmos-1.0-Tokenizer-DV8x16x16 (encoder.jit, decoder.jit) and pass its folder "
                "as tokenizer_path=..., or put it next to the model folder.")
        encoder = torch.jit.load(enc, map_location=device).eval().to(dtype)
        decoder = torch.jit.load(dec, map_location=device).eval().to(dtype)
        return cls(encoder, decoder, torch.device(device), dtype, **kwargs)

    @torch.no_grad()
    def encode(self, clip: torch.Tensor) -> torch.Tensor:
        """clip [B, 3, T, H, W] in [-1, 1], T = pixel_chunk -> token ids [B, t, h, w] (long)."""
        if clip.ndim != 5 or clip.shape[1] != 3:
            raise ValueError(f"clip: expected [B, 3, T, H, W], got {tuple(clip.shape)}")
        out = self.encoder(clip.to(self.device, self.dtype))
        codes = out[1] if isinstance(out, (tuple, list)) else out
        if codes.ndim == 5 and codes.shape[1] == len(self.levels):
            return codes_to_indices(codes.permute(0, 2, 3, 4, 1), self.levels)
        return out[0].long()          # an encoder that returns indices only

    @torch.no_grad()
    def decode(self, indices: torch.Tensor) -> torch.Tensor:
        """token ids [B, t, h, w] -> clip [B, 3, T, H, W] in [-1, 1] (float32, on CPU)."""
        if indices.ndim != 4:
            raise ValueError(f"indices: expected [B, t, h, w], got {tuple(indices.shape)}")
        return self.decoder(indices.to(self.device).long()).float().cpu()


def clip_to_frames(clip: torch.Tensor) -> list[list]:
    """[B, 3, T, H, W] in [-1, 1] -> per row a list of T PIL images (uint8 RGB)."""
    from PIL import Image
    u8 = ((clip.float() * 0.5 + 0.5).clamp(0, 1) * 255).round().to(torch.uint8)
    u8 = u8.permute(0, 2, 3, 4, 1).numpy()            # B, T, H, W, 3
    return [[Image.fromarray(frame) for frame in row] for row in u8]


def is_image(path: str) -> bool:
    return os.path.splitext(path)[1].lower() in IMAGE_EXTENSIONS


def read_frames(path: str, last: int | None = None) -> torch.Tensor:
    """The frames of a video (its `last` ones when given), or one image, as uint8 [T, H, W, 3]."""
    if not isinstance(path, str) or not os.path.isfile(path):
        raise ValueError(f"prompts: video file not found: {path!r}")
    if last is not None and (not isinstance(last, int) or last < 1):
        raise ValueError(f"last: expected a positive number of frames, got {last!r}")
    ext = os.path.splitext(path)[1].lower()
    if ext in IMAGE_EXTENSIONS:
        from PIL import Image
        import numpy as np
        return torch.from_numpy(np.asarray(Image.open(path).convert("RGB")).copy())[None]
    if ext not in VIDEO_EXTENSIONS:
        raise ValueError(f"prompts: {path!r} is neither a video ({', '.join(VIDEO_EXTENSIONS)}) "
                         f"nor an image ({', '.join(IMAGE_EXTENSIONS)})")
    import imageio.v3 as iio
    import numpy as np
    frames: deque = deque(maxlen=last)           # streamed: only the last `last` frames are kept
    try:
        for frame in iio.imiter(path):
            frames.append(np.asarray(frame))
    except Exception as exc:                     # a corrupt or unsupported file
        raise ValueError(f"prompts: cannot read video {path!r}: {exc}") from exc
    if not frames:
        raise ValueError(f"prompts: video {path!r} has no frames")
    video = np.stack(frames)
    if video.ndim == 3:                          # grayscale frames
        video = np.repeat(video[..., None], 3, axis=-1)
    return torch.from_numpy(video[..., :3].copy())


def prepare_clip(frames: torch.Tensor, num_input_frames: int, size: tuple[int, int],
                 total_frames: int = PIXEL_CHUNK) -> torch.Tensor:
    """uint8 [T, H, W, 3] -> float clip [3, total_frames, h, w] in [-1, 1], as published.

    The last `num_input_frames` frames are kept, the last one is repeated up to
    `total_frames`, then resized (aspect kept) and center-cropped. An image is a 1-frame clip.
    """
    if frames.shape[0] < num_input_frames:
        raise ValueError(f"prompts: the video has {frames.shape[0]} frame(s), fewer than the "
                         f"{num_input_frames} conditioning frames needed"
                         + (" (an image conditions on 1 frame)" if frames.shape[0] == 1 else ""))
    video = frames[-num_input_frames:].float() / 127.5 - 1.0
    video = torch.cat([video, video[-1:].expand(total_frames - video.shape[0], -1, -1, -1)])
    video = video.permute(0, 3, 1, 2)                           # T, 3, H, W
    return resize_center_crop(video, size).permute(1, 0, 2, 3).contiguous()


def resize_center_crop(video: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """[T, 3, H, W] -> [T, 3, h, w]: scale so both sides cover the target, then center crop."""
    th, tw = size
    h, w = video.shape[-2:]
    scale = max(tw / w, th / h)
    rh, rw = int(math.ceil(scale * h)), int(math.ceil(scale * w))
    if (rh, rw) != (h, w):
        video = F.interpolate(video, size=(rh, rw), mode="bilinear", antialias=True, align_corners=False)
    top, left = int(round((rh - th) / 2.0)), int(round((rw - tw) / 2.0))
    return video[..., top:top + th, left:left + tw]
