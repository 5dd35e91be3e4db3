"""The architecture and layout of a Cosmos-1 AR model, and the published configurations."""
from __future__ import annotations

import math
from dataclasses import dataclass

INPUT_FRAMES = (1, 9)         # the context lengths NVIDIA supports: 1 frame (an image) or 9 (a clip)
NUM_INPUT_FRAMES = 9          # a clip is continued from its last 9 frames (2 latent frames)
T5_MAX_LENGTH = 512
MODEL_NAMES = ("cosmos-1-ar-4b", "cosmos-1-ar-5b-video2world")


@dataclass(frozen=True)
class CosmosConfig:
    """Architecture and layout of a Cosmos-1 AR model (defaults: the published 4B base)."""
    dim: int = 4096
    n_layers: int = 16
    n_heads: int = 32
    n_kv_heads: int = 8
    head_dim: int | None = None
    ffn_hidden_size: int = 14336
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    vocab_size: int = 64000               # logits
    embed_vocab_size: int | None = None   # token-embedding rows (> vocab_size for Video2World)
    latent_shape: tuple[int, int, int] = (5, 40, 64)
    cond_latent_frames: int = 2
    use_qk_normalization: bool = True
    cross_attention: bool = False         # Video2World
    cross_attn_every_k_layers: int = 1
    context_dim: int = 1024
    abs_pos_emb: bool = False             # Video2World
    bov: bool = False                     # Video2World: <bov> (id vocab_size) at position 0
    pixel_size: tuple[int, int] = (640, 1024)

    @property
    def hd(self) -> int:
        return self.head_dim or self.dim // self.n_heads

    @property
    def n_embed(self) -> int:
        return self.embed_vocab_size or self.vocab_size

    @property
    def offset(self) -> int:
        """Sequence index of latent token 0 (1 when a <bov> token comes first)."""
        return 1 if self.bov else 0

    @property
    def seq_len(self) -> int:
        return self.offset + math.prod(self.latent_shape)

    @property
    def prefix_len(self) -> int:
        """Latent tokens fed at session start (the conditioning frames)."""
        _, h, w = self.latent_shape
        return self.cond_latent_frames * h * w

    @property
    def grid(self) -> tuple[int, int, int]:
        t, h, w = self.latent_shape
        return (t - self.cond_latent_frames, h, w)


def full_size_config(name: str = "cosmos-1-ar-4b") -> CosmosConfig:
    """The published config of `name` ("cosmos-1-ar-4b" or "cosmos-1-ar-5b-video2world")."""
    if name == "cosmos-1-ar-4b":
        return CosmosConfig()
    if name == "cosmos-1-ar-5b-video2world":
        # 64000 codes + <bov>, rounded up to a multiple of 64 by the published vocab expansion
        return CosmosConfig(cross_attention=True, abs_pos_emb=True, bov=True, embed_vocab_size=64064)
    raise ValueError(f"name: unknown Cosmos model {name!r}; expected one of {', '.join(MODEL_NAMES)}")
