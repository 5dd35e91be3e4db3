"""LlamaGen's VQ-16 image tokenizer (`vq_model.py`), with the published parameter names."""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F


def _group_norm(c: int) -> nn.GroupNorm:
    return nn.GroupNorm(32, c, eps=1e-6, affine=True)


class VQResnetBlock(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.norm1, self.conv1 = _group_norm(cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.norm2, self.conv2 = _group_norm(cout), nn.Conv2d(cout, cout, 3, padding=1)
        if cin != cout:
            self.nin_shortcut = nn.Conv2d(cin, cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return (self.nin_shortcut(x) if hasattr(self, "nin_shortcut") else x) + h


class VQAttnBlock(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.norm = _group_norm(c)
        self.q, self.k, self.v, self.proj_out = (nn.Conv2d(c, c, 1) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        b, c, hh, ww = h.shape
        q, k, v = (m(h).reshape(b, c, hh * ww).transpose(1, 2) for m in (self.q, self.k, self.v))
        out = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, c, hh, ww)
        return x + self.proj_out(out)


class _Resample(nn.Module):
    def __init__(self, c: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        self.conv = nn.Conv2d(c, c, 3, stride=stride, padding=0 if stride == 2 else 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 2:                       # downsample: asymmetric zero padding
            return self.conv(F.pad(x, (0, 1, 0, 1)))
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


def _level(cin: int, cout: int, n: int, attn: bool) -> tuple[nn.Module, int]:
    block = nn.Module()
    block.res, block.attn = nn.ModuleList(), nn.ModuleList()
    for _ in range(n):
        block.res.append(VQResnetBlock(cin, cout))
        cin = cout
        if attn:
            block.attn.append(VQAttnBlock(cout))
    return block, cout


def _run_level(block: nn.Module, h: torch.Tensor) -> torch.Tensor:
    for i, res in enumerate(block.res):
        h = res(h)
        if len(block.attn):
            h = block.attn[i](h)
    return h


class VQEncoder(nn.Module):
    def __init__(self, ch: int, ch_mult: Sequence[int], num_res_blocks: int, z_channels: int) -> None:
        super().__init__()
        self.conv_in = nn.Conv2d(3, ch, 3, padding=1)
        self.conv_blocks = nn.ModuleList()
        c = ch
        for i, m in enumerate(ch_mult):
            block, c = _level(c, ch * m, num_res_blocks, attn=i == len(ch_mult) - 1)
            if i != len(ch_mult) - 1:
                block.downsample = _Resample(c, 2)
            self.conv_blocks.append(block)
        self.mid = nn.ModuleList([VQResnetBlock(c, c), VQAttnBlock(c), VQResnetBlock(c, c)])
        self.norm_out = _group_norm(c)
        self.conv_out = nn.Conv2d(c, z_channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv_in(x)
        for block in self.conv_blocks:
            h = _run_level(block, h)
            if hasattr(block, "downsample"):
                h = block.downsample(h)
        for m in self.mid:
            h = m(h)
        return self.conv_out(F.silu(self.norm_out(h)))


class VQDecoder(nn.Module):
    def __init__(self, ch: int, ch_mult: Sequence[int], num_res_blocks: int, z_channels: int) -> None:
        super().__init__()
        c = ch * ch_mult[-1]
        self.conv_in = nn.Conv2d(z_channels, c, 3, padding=1)
        self.mid = nn.ModuleList([VQResnetBlock(c, c), VQAttnBlock(c), VQResnetBlock(c, c)])
        self.conv_blocks = nn.ModuleList()
        for i in reversed(range(len(ch_mult))):
            block, c = _level(c, ch * ch_mult[i], num_res_blocks + 1, attn=i == len(ch_mult) - 1)
            if i != 0:
                block.upsample = _Resample(c, 1)
            self.conv_blocks.append(block)
        self.norm_out = _group_norm(c)
        self.conv_out = nn.Conv2d(c, 3, 3, padding=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        h = self.conv_in(z)
        for m in self.mid:
            h = m(h)
        for block in self.conv_blocks:
            h = _run_level(block, h)
            if hasattr(block, "upsample"):
                h = block.upsample(h)
        return self.conv_out(F.silu(self.norm_out(h)))


class VectorQuantizer(nn.Module):
    def __init__(self, n_e: int, e_dim: int, l2_norm: bool = True, show_usage: bool = True) -> None:
        super().__init__()
        self.l2_norm = l2_norm
        self.embedding = nn.Embedding(n_e, e_dim)
        if show_usage:                     # a training statistic; kept so checkpoints load strictly
            self.register_buffer("codebook_used", torch.zeros(65536))

    def codebook(self) -> torch.Tensor:
        w = self.embedding.weight
        return F.normalize(w, p=2, dim=-1) if self.l2_norm else w

    def lookup(self, indices: torch.Tensor, shape: tuple[int, int, int, int]) -> torch.Tensor:
        """Indices [B*H*W] -> latents [B, C, H, W] (shape = (B, C, H, W))."""
        b, c, h, w = shape
        return self.codebook()[indices].reshape(b, h, w, c).permute(0, 3, 1, 2).contiguous()

    def indices(self, z: torch.Tensor) -> torch.Tensor:
        """Latents [B, C, H, W] -> nearest code indices [B, H*W]."""
        flat = z.permute(0, 2, 3, 1).reshape(z.shape[0], -1, z.shape[1])
        if self.l2_norm:
            flat = F.normalize(flat, p=2, dim=-1)
        d = torch.cdist(flat, self.codebook()[None].expand(z.shape[0], -1, -1))
        return d.argmin(-1)


class VQModel(nn.Module):
    """LlamaGen's VQ-16 (ch 128, ch_mult 1,1,2,2,4, codebook 16384 x 8, l2-normalised)."""

    def __init__(self, codebook_size: int = 16384, codebook_embed_dim: int = 8, ch: int = 128,
                 ch_mult: Sequence[int] = (1, 1, 2, 2, 4), num_res_blocks: int = 2,
                 z_channels: int = 256) -> None:
        super().__init__()
        self.encoder = VQEncoder(ch, ch_mult, num_res_blocks, z_channels)
        self.decoder = VQDecoder(ch, ch_mult, num_res_blocks, z_channels)
        self.quantize = VectorQuantizer(codebook_size, codebook_embed_dim)
        self.quant_conv = nn.Conv2d(z_channels, codebook_embed_dim, 1)
        self.post_quant_conv = nn.Conv2d(codebook_embed_dim, z_channels, 1)
        self.downsample = 2 ** (len(ch_mult) - 1)

    def encode_indices(self, x: torch.Tensor) -> torch.Tensor:
        return self.quantize.indices(self.quant_conv(self.encoder(x)))

    def decode_code(self, codes: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
        """Codes [B, H*W] -> pixels [B, 3, H*d, W*d] in about [-1, 1]."""
        b = codes.shape[0]
        z = self.quantize.lookup(codes.reshape(-1), (b, self.quantize.embedding.weight.shape[1], *grid))
        return self.decoder(self.post_quant_conv(z))
