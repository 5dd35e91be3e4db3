"""Toy models behind the TokenModel contract.

- `ToyModel`: an exactly enumerable model (tiny V and N). Its logits are a deterministic
  function of (prompt, full prefix), drawn once from a seeded normal table over every
  prefix, with real classifier-free guidance (a conditional table per prompt and one
  unconditional table). `exact_joint` returns the exact law of the decoded sequence under
  given sampling settings, for chi-square tests of the decoders.
- `ToyGridModel`: a fast synthetic image-grid model with tunable entropy and spatial
  correlation (the token to the left and above raise their own logits), with a small MLP
  whose width sets the cost of a forward pass, for unit tests and the benchmark.
- `RandomLogitsModel`: seeded random logits at no model cost (the engine's own cost).

Each takes a `dtype` (float32 by default): its tables or weights are held, and its logits
returned, in that dtype, as a model running in bfloat16 returns them.
"""
from __future__ import annotations

import zlib
from typing import Sequence

import torch
from PIL import Image

from scd_core.sampling import SamplingConfig, guide, processed_probs

from . import tree
from .checkpoints import as_dtype
from .rows import GuidedRows


def _prompt_seed(prompt: str, salt: int) -> int:
    return zlib.crc32(prompt.encode()) ^ (salt * 0x9E3779B1 & 0xFFFFFFFF)


# ---------------------------------------------------------------------------------------
# Exactly enumerable toy model


class ToyModel:
    """V^N sequences, logits ~ N(0, scale^2) per (prompt, prefix), seeded."""

    def __init__(self, vocab_size: int = 3, grid: tuple[int, ...] = (2, 3), scale: float = 1.5, seed: int = 0,
                 dtype: torch.dtype | str = torch.float32):
        if vocab_size < 2 or vocab_size ** _prod(grid) > 5_000_000:
            raise ValueError("vocab_size/grid: need V >= 2 and V**N small enough to enumerate")
        self.vocab_size, self.grid, self.scale, self.seed = vocab_size, tuple(grid), scale, seed
        self.dtype = as_dtype(dtype)
        self.N = _prod(grid)
        V, N = vocab_size, self.N
        # prefix of length l with rank r (base-V number) has node id offset[l] + r
        self.offset = [sum(V ** i for i in range(length)) for length in range(N + 2)]
        self.num_nodes = self.offset[N + 1]
        self._tables: dict[str, torch.Tensor] = {}

    def table(self, prompt: str | None) -> torch.Tensor:
        """[nodes, V] logits for every prefix; prompt None is the unconditional table."""
        key = "\x00uncond" if prompt is None else prompt
        if key not in self._tables:
            g = torch.Generator().manual_seed(_prompt_seed(key, self.seed))
            table = torch.randn(self.num_nodes, self.vocab_size, generator=g) * self.scale
            self._tables[key] = table.to(self.dtype)
        return self._tables[key]

    def guided_table(self, prompt: str, cfg_scale: float) -> torch.Tensor:
        return guide(self.table(prompt), self.table(None), cfg_scale)

    def start(self, prompts: Sequence[str], cfg_scale: float) -> "ToySession":
        return ToySession(self, list(prompts), cfg_scale)

    def decode(self, tokens: torch.LongTensor) -> list:
        """Tokens -> small greyscale images (one pixel per token)."""
        H, W = (self.grid[-2], self.grid[-1]) if len(self.grid) >= 2 else (1, self.grid[0])
        scale = 255 // max(self.vocab_size - 1, 1)
        pixels = (tokens.clamp(min=0) * scale).to(torch.uint8).reshape(tokens.shape[0], -1, H, W)
        out = [[Image.fromarray(frame.numpy(), "L") for frame in row] for row in pixels]
        return [frames if len(self.grid) == 3 else frames[0] for frames in out]

    def exact_joint(self, prompt: str, cfg_scale: float, sampling: SamplingConfig) -> torch.Tensor:
        """[V**N] exact probability of every sequence (index = base-V number, position 0 first)."""
        V, N = self.vocab_size, self.N
        probs = processed_probs(self.guided_table(prompt, cfg_scale).double(), sampling).double()
        joint = torch.ones(1, dtype=torch.float64)
        for length in range(N):
            nodes = probs[self.offset[length]: self.offset[length] + V ** length]   # [V^l, V]
            joint = (joint.unsqueeze(1) * nodes).reshape(-1)
        return joint

    def sequence_index(self, tokens: torch.LongTensor) -> torch.LongTensor:
        """[B, N] tokens -> [B] base-V index into `exact_joint`."""
        weights = self.vocab_size ** torch.arange(self.N - 1, -1, -1)
        return (tokens * weights).sum(1)


class ToySession(GuidedRows):
    """One guided table per distinct prompt (guidance is mixed into the tables: one block)."""

    reps = 1

    def __init__(self, model: ToyModel, prompts: list[str], cfg_scale: float):
        self.model, self.cfg_scale = model, cfg_scale
        distinct = list(dict.fromkeys(prompts))
        self.tables = torch.stack([model.guided_table(p, cfg_scale) for p in distinct])
        self.row_table = torch.tensor([distinct.index(p) for p in prompts], dtype=torch.long)
        self.history = torch.zeros(len(prompts), model.N + 1, dtype=torch.long)
        self.node_offset = torch.tensor(model.offset)                    # table row of the first prefix of each length
        self.batch = len(prompts)
        self.first_logits = self.tables[self.row_table, model.offset[0]]

    def start_like(self, prompts: Sequence[str]) -> "ToySession":
        return ToySession(self.model, list(prompts), self.cfg_scale)

    def join_state(self, new: "ToySession", order: torch.Tensor) -> None:
        self.row_table = torch.cat([self.row_table, new.row_table + len(self.tables)])[order]
        self.tables = torch.cat([self.tables, new.tables])
        self.history = torch.cat([self.history, new.history])[order]

    def select_state(self, index: torch.Tensor) -> None:
        self.row_table, self.history = self.row_table[index], self.history[index]

    def step(self, tokens: torch.LongTensor, start: torch.LongTensor) -> torch.Tensor:
        B, W = tokens.shape
        pos = start.unsqueeze(1) + torch.arange(W)
        self.history.scatter_(1, pos, tokens)
        return self.tables[self.row_table.unsqueeze(1), self._prefix_nodes(self.history, pos + 1)]

    def step_tree(self, tokens: torch.LongTensor, parents: torch.LongTensor, start: torch.LongTensor) -> torch.Tensor:
        """Each node's logits from its own context: the committed prefix and its path."""
        B, T = tokens.shape
        contexts = tree.node_histories(self.history, tokens, parents, start).view(B * T, -1)   # [B T, N + 1]
        length = (tree.positions(start, parents) + 1).view(B * T, 1)          # prefix length predicted
        nodes = self._prefix_nodes(contexts, length).view(B, T)
        self._fed = (tokens, start)
        return self.tables[self.row_table.unsqueeze(1), nodes]

    def keep_path(self, nodes: torch.LongTensor) -> None:
        tokens, start = self._fed
        keep_history_path(self.history, tokens, start, nodes)

    def _prefix_nodes(self, history: torch.LongTensor, length: torch.LongTensor) -> torch.LongTensor:
        """[R, S] table row of the prefix of each length [R, S] of each history [R, N + 1]."""
        m, V = self.model, self.model.vocab_size
        rank = torch.zeros(history.shape[0], m.N + 2, dtype=torch.long)    # rank[:, l] of prefix length l
        for i in range(m.N):
            rank[:, i + 1] = rank[:, i] * V + history[:, i]
        return self.node_offset[length] + rank.gather(1, length)


def keep_history_path(history: torch.LongTensor, tokens: torch.LongTensor, start: torch.LongTensor,
                      nodes: torch.LongTensor) -> None:
    """Write a kept path `nodes` [B, P] (-1: padding) of a tree's `tokens` [B, T] fed at `start`
    [B] into `history` [B, N + 1] at start + i; padding goes to the last column, which no
    logit reads (fixed shapes: no value decides what is written)."""
    last = history.shape[1] - 1
    at = start.unsqueeze(1) + torch.arange(nodes.shape[1], device=nodes.device)
    at = torch.where(nodes >= 0, at.clamp(max=last), last)
    history.scatter_(1, at, tokens.gather(1, nodes.clamp(min=0)))


def load_toy(name: str = "toy", vocab_size: int = 3, grid: tuple[int, ...] = (2, 3), scale: float = 1.5,
             seed: int = 0, dtype: torch.dtype | str = torch.float32, **_: object) -> ToyModel:
    return ToyModel(vocab_size=vocab_size, grid=grid, scale=scale, seed=seed, dtype=dtype)


# ---------------------------------------------------------------------------------------
# Fast synthetic grid model


class ToyGridModel:
    """A synthetic (H, W) image-token model with realistic, tunable statistics.

    logits(position) = MLP(context * (embed(left) + embed(above)) + embed(position) + embed(prompt)) / tau
                       + corr * (onehot(left) + onehot(above))
    `tau` sets the entropy, `context` how much a token depends on its neighbours, `corr` the
    spatial correlation (flat regions that continue),
    `hidden` the cost of a forward pass. Weights are random but fixed by `seed`.
    """

    def __init__(self, vocab_size: int = 512, grid: tuple[int, int] = (16, 16), dim: int = 128,
                 hidden: int = 2048, tau: float = 0.3, corr: float = 1.0, context: float = 6.0, seed: int = 0,
                 device: str | torch.device = "cpu", dtype: torch.dtype | str = torch.float32):
        self.vocab_size, self.grid = vocab_size, tuple(grid)
        self.N = _prod(grid)
        self.tau, self.corr, self.context = tau, corr, context
        self.dtype = as_dtype(dtype)
        g = torch.Generator().manual_seed(seed)
        init = lambda *shape: (torch.randn(*shape, generator=g) / shape[0] ** 0.5).to(device, self.dtype)  # noqa: E731
        self.embed_left = init(vocab_size + 1, dim)     # last row: "no neighbour"
        self.embed_up = init(vocab_size + 1, dim)
        self.embed_pos = init(self.N, dim)
        self.w1, self.w2, self.w3 = init(dim, hidden), init(hidden, hidden), init(hidden, vocab_size)
        self.palette = (torch.rand(vocab_size, 3, generator=g) * 255).to(torch.uint8)
        self.device = torch.device(device)

    def prompt_embedding(self, prompt: str) -> torch.Tensor:
        g = torch.Generator().manual_seed(_prompt_seed(prompt, 7))
        return (torch.randn(self.embed_pos.shape[1], generator=g) * 0.5).to(self.device, self.dtype)

    def logits(self, history: torch.Tensor, positions: torch.Tensor, prompt_emb: torch.Tensor) -> torch.Tensor:
        """history [B, N+1] tokens, positions [B, W] to predict -> logits [B, W, V]."""
        H, W = self.grid
        V = self.vocab_size
        col = positions % W
        left_pos, up_pos = positions - 1, positions - W
        left = torch.where(col > 0, history.gather(1, left_pos.clamp(min=0)), V)
        up = torch.where(up_pos >= 0, history.gather(1, up_pos.clamp(min=0)), V)
        x = self.context * (self.embed_left[left] + self.embed_up[up]) + self.embed_pos[positions.clamp(max=self.N - 1)]
        x = x + prompt_emb.unsqueeze(1)
        h = torch.relu(x @ self.w1)
        h = torch.relu(h @ self.w2)
        out = (h @ self.w3) / self.tau
        bonus = torch.zeros_like(out)
        bonus.scatter_add_(-1, left.clamp(max=V - 1).unsqueeze(-1), (left < V).to(out.dtype).unsqueeze(-1) * self.corr)
        bonus.scatter_add_(-1, up.clamp(max=V - 1).unsqueeze(-1), (up < V).to(out.dtype).unsqueeze(-1) * self.corr)
        return out + bonus

    def start(self, prompts: Sequence[str], cfg_scale: float) -> "ToyGridSession":
        return ToyGridSession(self, list(prompts), cfg_scale)

    def decode(self, tokens: torch.LongTensor) -> list:
        """Tokens -> RGB images, one 4x4 block of the token's palette colour per token."""
        H, W = self.grid
        rgb = self.palette[tokens.clamp(min=0).cpu()].reshape(tokens.shape[0], H, W, 3)
        rgb = rgb.repeat_interleave(4, 1).repeat_interleave(4, 2)
        return [Image.fromarray(img.numpy(), "RGB") for img in rgb]


class ToyGridSession(GuidedRows):
    """Rows of the batch, then (with guidance) their unconditional twins."""

    def __init__(self, model: ToyGridModel, prompts: list[str], cfg_scale: float):
        m = self.model = model
        self.cfg_scale = cfg_scale
        self.use_cfg = cfg_scale != 1.0
        self.reps = 2 if self.use_cfg else 1
        self.batch = len(prompts)
        cond = torch.stack([m.prompt_embedding(p) for p in prompts])
        self.prompt_emb = torch.cat([cond, torch.zeros_like(cond)]) if self.use_cfg else cond
        self.history = torch.zeros(self.prompt_emb.shape[0], m.N + 1, dtype=torch.long, device=m.device)
        first_pos = torch.zeros(self.prompt_emb.shape[0], 1, dtype=torch.long, device=m.device)
        self.first_logits = self._guide(m.logits(self.history, first_pos, self.prompt_emb))[:, 0]

    def start_like(self, prompts: Sequence[str]) -> "ToyGridSession":
        return ToyGridSession(self.model, list(prompts), self.cfg_scale)

    def join_state(self, new: "ToyGridSession", order: torch.Tensor) -> None:
        order = order.to(self.history.device)
        self.prompt_emb = torch.cat([self.prompt_emb, new.prompt_emb])[order]
        self.history = torch.cat([self.history, new.history])[order]

    def select_state(self, index: torch.Tensor) -> None:
        index = index.to(self.history.device)
        self.prompt_emb, self.history = self.prompt_emb[index], self.history[index]

    def _guide(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.use_cfg:
            return logits
        cond, uncond = logits.chunk(2)
        return guide(cond, uncond, self.cfg_scale)

    def step(self, tokens: torch.LongTensor, start: torch.LongTensor) -> torch.Tensor:
        if self.use_cfg:
            tokens, start = torch.cat([tokens, tokens]), torch.cat([start, start])
        pos = start.unsqueeze(1) + torch.arange(tokens.shape[1], device=tokens.device)
        self.history.scatter_(1, pos, tokens)
        return self._guide(self.model.logits(self.history, pos + 1, self.prompt_emb))

    def step_tree(self, tokens: torch.LongTensor, parents: torch.LongTensor, start: torch.LongTensor) -> torch.Tensor:
        """Each node's logits from its own context: the committed tokens and its path."""
        if self.use_cfg:
            tokens, parents, start = torch.cat([tokens, tokens]), torch.cat([parents, parents]), torch.cat([start, start])
        B, T = tokens.shape
        contexts = tree.node_histories(self.history, tokens, parents, start).view(B * T, -1)   # [B T, N + 1]
        pos = tree.positions(start, parents).view(B * T, 1)
        logits = self.model.logits(contexts, pos + 1, self.prompt_emb.repeat_interleave(T, 0))   # [B T, 1, V]
        self._fed = (tokens, start)
        return self._guide(logits.view(B, T, -1))

    def keep_path(self, nodes: torch.LongTensor) -> None:
        tokens, start = self._fed
        if self.use_cfg:
            nodes = torch.cat([nodes, nodes])
        keep_history_path(self.history, tokens, start, nodes)


def load_toy_grid(name: str = "toy-grid", device: str | None = None, **kwargs) -> ToyGridModel:
    return ToyGridModel(device=device or "cpu", **kwargs)


def _prod(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


# ---------------------------------------------------------------------------------------
# Instant model: the engine's own cost at any size


class RandomLogitsModel:
    """Seeded random logits at no model cost, to time the engine alone at a model's sizes
    (e.g. Janus-Pro: vocab_size=16384, grid=(24, 24), window 32 or 64)."""

    def __init__(self, vocab_size: int = 16384, grid: tuple[int, ...] = (24, 24), scale: float = 3.0,
                 device: str | torch.device = "cpu", dtype: torch.dtype | str = torch.float32):
        self.vocab_size, self.grid, self.scale = vocab_size, tuple(grid), scale
        self.device, self.dtype = torch.device(device), as_dtype(dtype)

    def start(self, prompts: Sequence[str], cfg_scale: float) -> "RandomLogitsSession":
        return RandomLogitsSession(self, len(prompts))

    def decode(self, tokens: torch.LongTensor) -> list:
        return [None] * tokens.shape[0]


class RandomLogitsSession:
    def __init__(self, model: RandomLogitsModel, batch: int):
        self.model = model
        self.generator = torch.Generator(device=model.device).manual_seed(0)
        self.first_logits = self._logits(batch, 1)[:, 0]

    def _logits(self, batch: int, width: int) -> torch.Tensor:
        shape = (batch, width, self.model.vocab_size)
        logits = torch.randn(shape, generator=self.generator, device=self.model.device) * self.model.scale
        return logits.to(self.model.dtype)

    def step(self, tokens: torch.LongTensor, start: torch.LongTensor) -> torch.Tensor:
        return self._logits(*tokens.shape)

    def step_tree(self, tokens: torch.LongTensor, parents: torch.LongTensor, start: torch.LongTensor) -> torch.Tensor:
        return self._logits(*tokens.shape)

    def keep_path(self, nodes: torch.LongTensor) -> None:
        """Nothing to keep: the logits depend on no context."""


def load_random_logits(name: str = "random-logits", device: str | None = None, **kwargs) -> RandomLogitsModel:
    return RandomLogitsModel(device=device or "cpu", **kwargs)
