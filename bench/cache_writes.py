"""Bytes a pass writes into its KV cache, or into copies of it, per layer: a chain's `step`
against a draft tree's `step_tree` + `keep_path`, on the embedded tiny models.

    python -m bench cache-writes                     # tiny (64 positions), tiny-video (512)
    python -m bench cache-writes --models tiny --tree 2x2

Every aten operation of the pass is seen (a `TorchDispatchMode`); counted are the bytes it
writes in place into a cache tensor (a scatter's or a slice copy's values), and the bytes of
every new tensor shaped like a cache ([rows, heads, at least the cache's slots, head_dim]: a
copy of the cache, such as `torch.cat([cache, new], 2)`). A pass whose cache writes are
O(its tokens) writes the same bytes at any cache size; one that copies the cache writes
O(capacity).
"""
from __future__ import annotations

import argparse

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import scd_core

WRITES = {"scatter_": 3, "index_put_": 2, "copy_": 1}    # in-place op -> its argument holding the values written


class CacheWrites(TorchDispatchMode):
    """Bytes written into the tensors `caches` (their storages) or into new cache-shaped ones."""

    def __init__(self, caches: list[torch.Tensor]) -> None:
        super().__init__()
        self.storages = {t.untyped_storage().data_ptr() for t in caches}
        self.heads, self.slots, self.head_dim = caches[0].shape[1], caches[0].shape[2], caches[0].shape[3]
        self.written = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in WRITES and isinstance(args[0], torch.Tensor) \
                and args[0].untyped_storage().data_ptr() in self.storages:
            values = args[WRITES[name]]
            values = values[0] if isinstance(values, (list, tuple)) else values
            if isinstance(values, torch.Tensor):
                self.written += values.numel() * args[0].element_size()
        elif isinstance(out, torch.Tensor) and out.dim() == 4 and out.shape[1] == self.heads \
                and out.shape[3] == self.head_dim and out.shape[2] >= self.slots - 1 \
                and out.untyped_storage().data_ptr() not in self.storages:         # not a view of the cache
            self.written += out.numel() * out.element_size()                 # a copy of the cache
        return out


def caches(session) -> list[torch.Tensor]:
    return [t for kv in session.cache for t in kv]


@torch.no_grad()
def measure(name: str, k: int, depth: int) -> dict:
    model = scd_core.load_model(name)
    V, B = model.vocab_size, 1
    session = model.start(["red heart"], 3.0)
    g = torch.Generator().manual_seed(0)
    session.step(torch.randint(0, V, (B, 4), generator=g), torch.zeros(B, dtype=torch.long))
    layers = len(session.cache)
    T = 1 + sum(k ** d for d in range(1, depth + 1))
    parents = [-1] + [(j - 1) // k for j in range(1, T)]               # a full k-ary tree, breadth first
    tokens = torch.randint(0, V, (B, T), generator=g)
    if hasattr(session, "reserve_tree"):
        session.reserve_tree(T)
    with CacheWrites(caches(session)) as chain:
        session.step(tokens, torch.full((B,), 4))
    with CacheWrites(caches(session)) as tree:
        session.step_tree(tokens, torch.tensor([parents]), torch.full((B,), 4))
        session.keep_path(torch.tensor([[0, 1] + [-1] * (depth - 1)]))
    cache_bytes = sum(t.numel() * t.element_size() for t in caches(session)) // (2 * layers)
    return dict(model=name, slots=model.gpt.cfg.n_tokens, tokens=T, cache=cache_bytes,
                chain=chain.written // layers, tree=tree.written // layers)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="tiny,tiny-video")
    ap.add_argument("--tree", default="2x2", help="k x depth")
    a = ap.parse_args(argv)
    k, depth = (int(v) for v in a.tree.split("x"))
    print("| model | positions | tokens a pass | keys of a layer | chain pass writes a layer | tree pass writes a layer |\n"
          "|---|---|---|---|---|---|")
    for name in a.models.split(","):
        r = measure(name, k, depth)
        print(f"| {r['model']} | {r['slots']} | {r['tokens']} | {r['cache'] / 1024:.0f} KiB | "
              f"{r['chain'] / 1024:.1f} KiB | {r['tree'] / 1024:.1f} KiB |", flush=True)
