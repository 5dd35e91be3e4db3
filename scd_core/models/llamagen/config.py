"""LlamaGen's sizes and settings: the GPT configuration, the published model sizes, the
sampling settings and example prompts of its sampling scripts."""
from __future__ import annotations

import math
from dataclasses import dataclass

# As published: sample_c2i.py (cfg 4.0, top-k 2000), sample_t2i.py (cfg 7.5, top-k 1000).
DEFAULT_SETTINGS = {
    "c2i": {"cfg_scale": 4.0, "top_k": 2000, "top_p": 1.0, "temperature": 1.0, "window": 32},
    "t2i": {"cfg_scale": 7.5, "top_k": 1000, "top_p": 1.0, "temperature": 1.0, "window": 32},
}
# The class ids of LlamaGen's sample_c2i.py (golden retriever, otter, red panda, geyser, macaw,
# valley, balloon, arctic fox) and prompts of its sample_t2i.py.
EXAMPLE_PROMPTS = {
    "c2i": ["207", "360", "387", "974", "88", "979", "417", "279"],
    "t2i": ["A blue Porsche 356 parked in front of a yellow brick wall.",
            "A photo of an astronaut riding a horse in the forest. There is a river in front of them "
            "with water lilies.",
            "A map of the United States made out of sushi. It is on a table next to a glass of red wine."],
}
# (n_layer, n_head, dim) of the published GPT sizes.
GPT_SIZES = {
    "GPT-B": (12, 12, 768), "GPT-L": (24, 16, 1024), "GPT-XL": (36, 20, 1280),
    "GPT-XXL": (48, 24, 1536), "GPT-XXXL": (48, 40, 2560),
    "GPT-1B": (22, 32, 2048), "GPT-3B": (24, 32, 3200), "GPT-7B": (32, 32, 4096),
}
HEADS_BY_DIM = {dim: heads for _, heads, dim in GPT_SIZES.values()}


def find_multiple(n: int, k: int) -> int:
    return n if n % k == 0 else n + k - (n % k)


@dataclass
class GPTConfig:
    dim: int = 768
    n_layer: int = 12
    n_head: int = 12
    n_kv_head: int | None = None
    ffn_hidden: int | None = None       # None: LlamaGen's SwiGLU size (multiple of 256)
    multiple_of: int = 256
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    model_type: str = "c2i"
    num_classes: int = 1000
    caption_dim: int = 2048
    vocab_size: int = 16384
    cls_token_num: int = 1
    block_size: int = 256               # grid_size ** 2

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_head

    @property
    def kv_heads(self) -> int:
        return self.n_kv_head or self.n_head

    @property
    def hidden(self) -> int:
        return self.ffn_hidden or find_multiple(int(2 * 4 * self.dim / 3), self.multiple_of)

    @property
    def grid_size(self) -> int:
        g = int(round(math.sqrt(self.block_size)))
        if g * g != self.block_size:
            raise ValueError(f"block_size: {self.block_size} is not a square grid")
        return g
