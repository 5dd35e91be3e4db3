"""Synthetic textures: a hand-built image-token model, the case where coupling helps most.

Not trained and not a picture model. A token is a (palette, shade) pair: 8 palettes x 256
shades on each palette's colour ramp, V = 2,048. The prompt's words choose the palette (p is 0
on the other palettes' tokens) and a pattern. p at a position is a Gaussian bump on the
ramp around the pattern's value there (waves, rings, clouds, ...), plus a fixed random term
that depends on the shades of the token to the left and the token above:

    logits(shade s | pos, left, up) = -(s - S * pattern(pos))^2 / (2 sigma^2) + gamma * (R[left, s] + R[up, s])

p sees nothing else, so a changed token moves p at its right and lower neighbours only
(total variation about 0.5 at the next position, exactly 0 further along the row). Coupled
drafts further along the window then stay valid from one pass to the next, while SJD's
independent redraws flicker: SCD needs about half of SJD's passes here, as on Lumina-mGPT
in the paper. Classifier-free guidance mixes with the pattern-free logits (u = the neighbour
term alone).
"""
from __future__ import annotations

import math
import re
from typing import Sequence

import torch

from scd_core.prompts import unknown_pieces
from PIL import Image

from . import static
from .checkpoints import as_dtype
from .checks import device_check
from .tree import Tree, check_path, check_tree, path_tokens

PALETTES: dict[str, list[tuple[int, int, int]]] = {
    "ocean": [(4, 18, 58), (18, 82, 150), (70, 170, 215), (230, 248, 255)],
    "sunset": [(38, 10, 60), (170, 36, 92), (245, 122, 48), (255, 228, 140)],
    "forest": [(8, 28, 12), (36, 94, 30), (128, 168, 58), (228, 238, 168)],
    "lava": [(20, 4, 4), (120, 16, 8), (230, 80, 10), (255, 220, 90)],
    "ice": [(40, 60, 110), (120, 160, 210), (200, 228, 250), (255, 255, 255)],
    "candy": [(90, 20, 120), (230, 80, 170), (250, 180, 210), (255, 245, 200)],
    "desert": [(80, 40, 20), (180, 110, 50), (230, 180, 110), (250, 235, 200)],
    "night": [(2, 2, 10), (30, 20, 80), (90, 70, 170), (240, 230, 140)],
}
PATTERNS = ("waves", "rings", "clouds", "stripes", "checks", "marble")
DEFAULT_PALETTE, DEFAULT_PATTERN = "ocean", "clouds"
EXAMPLE_PROMPTS = ["ocean waves", "sunset rings", "forest clouds", "lava marble", "ice stripes",
                   "candy checks", "desert waves", "night clouds"]
CELL = 8                                    # pixels per token side when decoded


class TextureWords:
    """The words a texture prompt may use: one palette and one pattern (others ignored)."""

    def known(self, prompt: str) -> list[str]:
        return [w for w in _words(prompt) if w in PALETTES or w in PATTERNS]

    def unknown(self, prompt: str) -> list[str]:
        """The prompt's pieces (split at spaces, as typed) that name neither a palette nor a
        pattern: the model ignores them."""
        return unknown_pieces(prompt, lambda piece: bool(self.known(piece)))

    def choose(self, prompt: str) -> tuple[str, str]:
        """(palette, pattern): the last palette word and the last pattern word, else defaults."""
        words = _words(prompt)
        palette = next((w for w in reversed(words) if w in PALETTES), DEFAULT_PALETTE)
        pattern = next((w for w in reversed(words) if w in PATTERNS), DEFAULT_PATTERN)
        return palette, pattern


def _words(prompt: str) -> list[str]:
    return re.findall(r"[a-z]+", prompt.lower())


def pattern_field(pattern: str, grid: tuple[int, int], seed: int = 0) -> torch.Tensor:
    """[H * W] values in [0, 1]: the prompt pattern's shade at every token position."""
    H, W = grid
    y, x = torch.meshgrid(torch.arange(H, dtype=torch.float64), torch.arange(W, dtype=torch.float64),
                          indexing="ij")
    if pattern == "waves":
        v = torch.sin(2 * math.pi * (0.8 * x + 0.6 * y) / 9 + 1.5 * torch.sin(2 * math.pi * y / 17))
    elif pattern == "rings":
        v = torch.cos(2 * math.pi * torch.hypot(x - W / 2, y - H / 2) / 7)
    elif pattern == "stripes":
        v = torch.sin(2 * math.pi * x / 8)
    elif pattern == "checks":
        v = torch.sin(2 * math.pi * x / 12) * torch.sin(2 * math.pi * y / 12) * 2
    elif pattern == "marble":
        v = torch.sin(2 * math.pi * (x + y) / 14 + 3 * _smooth_noise(grid, seed + 1))
    else:                                   # clouds: a few random low-frequency waves
        v = _smooth_noise(grid, seed)
    v = v.clamp(-1, 1)
    return ((v + 1) / 2).reshape(-1).float()


def _smooth_noise(grid: tuple[int, int], seed: int, waves: int = 6) -> torch.Tensor:
    """A fixed smooth random field in about [-1, 1] (a sum of low-frequency cosines)."""
    H, W = grid
    g = torch.Generator().manual_seed(seed)
    y, x = torch.meshgrid(torch.arange(H, dtype=torch.float64), torch.arange(W, dtype=torch.float64),
                          indexing="ij")
    v = torch.zeros(H, W, dtype=torch.float64)
    for _ in range(waves):
        fx, fy = (torch.rand(2, generator=g, dtype=torch.float64) * 2 - 1) * 0.35
        phase = torch.rand(1, generator=g, dtype=torch.float64) * 2 * math.pi
        v += torch.cos(fx * x + fy * y + phase)
    return v / math.sqrt(waves / 2)


class TextureModel:
    """The synthetic texture model behind the TokenModel contract (see the module docstring)."""

    default_settings = {"top_k": 0, "top_p": 1.0, "temperature": 1.0, "cfg_scale": 1.0}
    example_prompts = EXAMPLE_PROMPTS
    prompt_kind = "text"

    def __init__(self, shades: int = 256, grid: tuple[int, int] = (24, 24), sigma: float = 8.0,
                 gamma: float = 1.0, seed: int = 0, device: str | torch.device = "cpu",
                 dtype: torch.dtype | str = torch.float32):
        if shades < 2 or len(grid) != 2 or min(grid) < 1:
            raise ValueError(f"shades/grid: need at least 2 shades and a grid (H, W), got {shades}, {grid}")
        self.shades, self.grid = int(shades), (int(grid[0]), int(grid[1]))
        self.vocab_size = len(PALETTES) * self.shades
        self.N = self.grid[0] * self.grid[1]
        self.sigma, self.gamma = float(sigma), float(gamma)
        self.device, self.dtype = torch.device(device), as_dtype(dtype)   # the logits' dtype
        self.vocab = TextureWords()
        g = torch.Generator().manual_seed(seed)
        # R[a, s]: the neighbour term over shades; row S stands for "no neighbour" (the border)
        self.neighbour = (torch.randn(self.shades + 1, self.shades, generator=g) * self.gamma).to(self.device)
        self.levels = torch.arange(self.shades, dtype=torch.float32, device=self.device)
        ramps = [_ramp(PALETTES[name], self.shades) for name in PALETTES]
        self.colours = torch.cat(ramps)                                    # [V, 3] uint8
        self._fields: dict[str, torch.Tensor] = {}

    def field(self, pattern: str) -> torch.Tensor:
        if pattern not in self._fields:
            self._fields[pattern] = pattern_field(pattern, self.grid).to(self.device)
        return self._fields[pattern]

    def start(self, prompts: Sequence[str], cfg_scale: float) -> "TextureSession":
        return TextureSession(self, list(prompts), float(cfg_scale))

    def decode(self, tokens: torch.LongTensor) -> list:
        """Tokens [B, N] -> RGB images, one CELL x CELL block per token in its colour."""
        H, W = self.grid
        rgb = self.colours[tokens.clamp(0, self.vocab_size - 1).cpu()].reshape(-1, H, W, 3)
        rgb = rgb.repeat_interleave(CELL, 1).repeat_interleave(CELL, 2)
        return [Image.fromarray(img.numpy(), "RGB") for img in rgb]


def _ramp(keys: list[tuple[int, int, int]], shades: int) -> torch.Tensor:
    """[shades, 3] uint8 colours interpolated linearly between the palette's key colours."""
    k = torch.tensor(keys, dtype=torch.float32)
    pos = torch.linspace(0, len(keys) - 1, shades)
    i0 = pos.floor().long().clamp(max=len(keys) - 2)
    frac = (pos - i0).unsqueeze(1)
    return (k[i0] * (1 - frac) + k[i0 + 1] * frac).round().to(torch.uint8)


class TextureSession:
    compilable = True

    def __init__(self, model: TextureModel, prompts: list[str], cfg_scale: float):
        self.model, self.cfg_scale = model, cfg_scale
        B, S = len(prompts), model.shades
        chosen = [model.vocab.choose(p) for p in prompts]
        centre = torch.stack([model.field(pattern) for _, pattern in chosen]) * (S - 1)      # [B, N]
        offset = torch.tensor([list(PALETTES).index(palette) * S for palette, _ in chosen], device=model.device)
        history = torch.zeros(B, model.N + 1, dtype=torch.long, device=model.device)       # written in place
        self.centre, self.offset, self.history = static.buffers_of(model).holding(self, [centre, offset, history])
        self.first_logits = self._logits(torch.zeros(B, 1, dtype=torch.long, device=model.device))[:, 0]
        self.tree: Tree | None = None                   # the last step_tree's, until keep_path

    def _logits(self, positions: torch.Tensor, token_at=None) -> torch.Tensor:
        """positions [B, W] to predict -> guided logits [B, W, V], -inf outside the row's palette.

        `token_at(p)` gives the tokens at positions p [B, W] (each before its own position);
        by default the history's."""
        m = self.model
        H, W = m.grid
        S = m.shades
        token_at = token_at or (lambda p: self.history.gather(1, p))
        pos = positions.clamp(max=m.N - 1)
        col, row = pos % W, pos // W
        left = torch.where(col > 0, token_at((pos - 1).clamp(min=0)) % S, S)
        up = torch.where(row > 0, token_at((pos - W).clamp(min=0)) % S, S)
        centre = self.centre.gather(1, pos).unsqueeze(-1)                              # [B, W, 1]
        bump = -((m.levels - centre) ** 2) / (2 * m.sigma ** 2)                        # [B, W, S]
        shade_logits = self.cfg_scale * bump + m.neighbour[left] + m.neighbour[up]     # guide(u + bump, u, s) in closed form: c - u = bump
        out = torch.full((*pos.shape, m.vocab_size), float("-inf"), device=pos.device, dtype=m.dtype)
        cols = self.offset.view(-1, 1, 1) + m.levels.long()                            # [B, 1, S]
        return out.scatter_(-1, cols.expand(*pos.shape, S), shade_logits.to(m.dtype))

    def step(self, tokens: torch.LongTensor, start: torch.LongTensor) -> torch.Tensor:
        self.tree = None
        pos = start.unsqueeze(1) + torch.arange(tokens.shape[1], device=tokens.device)
        self.history.scatter_(1, pos, tokens)
        return self._logits(pos + 1)

    # a tree of drafts (`protocols.TreeSession`): p needs only the tokens to the left and
    # above, read from each node's own path where they lie at or after `start`
    def step_tree(self, tokens: torch.LongTensor, parents: torch.LongTensor,
                  start: torch.LongTensor) -> torch.Tensor:
        tree = check_tree(tokens, parents, start, self.history.shape[0], self.model.vocab_size,
                          device=self.history.device)
        device_check(tree.start <= self.model.N, "start: positions must lie in [0, {N}]", N=self.model.N)
        path = path_tokens(tree.tokens, tree.parents)                                  # [B, T, T] by depth
        begin = tree.start.unsqueeze(1)

        def token_at(p: torch.Tensor) -> torch.Tensor:
            on_path = path.gather(2, (p - begin).clamp(min=0).unsqueeze(2)).squeeze(2)
            return torch.where(p >= begin, on_path, self.history.gather(1, p))

        self.tree = tree
        return self._logits(tree.positions + 1, token_at)

    def keep_path(self, nodes: torch.LongTensor) -> None:
        index, kept = check_path(self.tree, nodes)
        pos = (self.tree.start.unsqueeze(1) + torch.arange(index.shape[1], device=index.device)).clamp(max=self.model.N)
        fed = torch.where(kept, self.tree.tokens.gather(1, index), self.history.gather(1, pos))
        self.history.scatter_(1, pos, fed)
        self.tree = None


def load_texture(name: str = "texture", device: str | torch.device | None = None, **kwargs) -> TextureModel:
    """The texture model; `dtype` is that of its logits (computed in float32: a closed form)."""
    return TextureModel(device=device or "cpu", **kwargs)
