"""`time_forward`: one forward of a random full-size network at each window (GPU recipe;
`python -m scd_core.models.cosmos --time` prints it)."""
from __future__ import annotations

from typing import Sequence

import torch

from .config import MODEL_NAMES, T5_MAX_LENGTH, CosmosConfig, full_size_config
from .network import KVCache, random_model


def time_forward(name: str | CosmosConfig = "cosmos-1-ar-4b", windows: Sequence[int] = (1, 32, 64, 128),
                 device: str = "cuda", dtype: torch.dtype = torch.bfloat16, repeats: int = 10) -> dict[int, float]:
    """Milliseconds per forward of a random full-size model (or of a given config) at each
    window L, after a prefill of the conditioning prefix (GPU recipe)."""
    import time
    cfg = name if isinstance(name, CosmosConfig) else full_size_config(name)
    net = random_model(cfg, device=device, dtype=dtype)
    cache = KVCache.allocate(cfg, 1, cfg.seq_len + max(windows), device, dtype)
    if cfg.cross_attention:
        net.set_context(cache, torch.zeros(1, T5_MAX_LENGTH, cfg.context_dim, device=device, dtype=dtype))
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
    start = cfg.offset + cfg.prefix_len
    result = {}
    with torch.no_grad():
        net(torch.zeros(1, start, dtype=torch.long, device=device),
            torch.arange(start, device=device)[None], cache)
        for L in windows:
            tok = torch.randint(0, cfg.vocab_size, (1, L), device=device)
            pos = (start + torch.arange(L, device=device))[None]
            for _ in range(3):
                net(tok, pos, cache)
            sync()
            t0 = time.perf_counter()
            for _ in range(repeats):
                net(tok, pos, cache)
            sync()
            result[L] = (time.perf_counter() - t0) / repeats * 1e3
    return result


def _main(argv: Sequence[str] | None = None) -> None:
    """`python -m scd_core.models.cosmos --time`: the GPU forward-timing recipe."""
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time", action="store_true", help="time one forward of a random full-size model")
    ap.add_argument("--model", default="cosmos-1-ar-4b", choices=list(MODEL_NAMES))
    ap.add_argument("--windows", default="1,32,64,128")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args(argv)
    if not args.time:
        from scd_core.models import model_status
        for name in MODEL_NAMES:
            print(f"{name}: {model_status(name).label}")
        return
    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    windows = [int(w) for w in args.windows.split(",")]
    for L, ms in time_forward(args.model, windows, device=args.device, dtype=dtype).items():
        print(f"{args.model} L={L:4d}: {ms:8.2f} ms per forward")
