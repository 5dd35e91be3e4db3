"""Geometric augmentation on a white background (shift, zoom, rotation), batched."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def affine_white(x: torch.Tensor, dx: torch.Tensor, dy: torch.Tensor, scale: torch.Tensor,
                 angle_deg: torch.Tensor) -> torch.Tensor:
    """Move the content of x [B, 3, S, S] in [0, 1] by (dx, dy) pixels, zoom by `scale`,
    rotate by `angle_deg`; uncovered area is white."""
    b, _, s, _ = x.shape
    a = angle_deg * math.pi / 180
    cos, sin = torch.cos(a) / scale, torch.sin(a) / scale
    tx, ty = -2 * dx / s, -2 * dy / s
    theta = torch.stack([torch.stack([cos, -sin, cos * tx - sin * ty], -1),
                         torch.stack([sin, cos, sin * tx + cos * ty], -1)], 1)
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    out = F.grid_sample(x - 1, grid, mode="bilinear", padding_mode="zeros", align_corners=False) + 1
    return out.clamp(0, 1)


def shift_white(x: torch.Tensor, dx: int, dy: int) -> torch.Tensor:
    """Exact integer shift by (dx, dy) pixels with white fill."""
    out = torch.ones_like(x)
    s = x.shape[-1]
    xs, xd = (slice(0, s - dx), slice(dx, s)) if dx >= 0 else (slice(-dx, s), slice(0, s + dx))
    ys, yd = (slice(0, s - dy), slice(dy, s)) if dy >= 0 else (slice(-dy, s), slice(0, s + dy))
    out[..., yd, xd] = x[..., ys, xs]
    return out


def random_affine(x: torch.Tensor, gen: torch.Generator, p: float = 0.5) -> torch.Tensor:
    """Augment a random fraction p of the batch with shift +-3 px, zoom 0.75-1.15, rotation +-15."""
    b = x.shape[0]
    u = torch.rand(b, 5, generator=gen)
    dx, dy = (u[:, 0] * 2 - 1) * 3, (u[:, 1] * 2 - 1) * 3
    scale = 0.75 + 0.4 * u[:, 2]
    angle = (u[:, 3] * 2 - 1) * 15
    moved = affine_white(x, dx, dy, scale, angle)
    pick = (u[:, 4] < p).view(b, 1, 1, 1)
    return torch.where(pick, moved, x)
