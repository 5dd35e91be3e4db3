"""Why a model gives SCD a large or a small lead over SJD: where in the window drafts fail,
and how strongly the model's p reacts to one changed token.

    python scripts/draft_profile.py --model tiny                 # ~15 s on one CPU thread
    python scripts/draft_profile.py --model toy-grid --model-arg grid=8,8
    python scripts/draft_profile.py --model texture

Decodes the model's example prompts (at most 8; a fixed list of 8 for a model without any)
at the model's own sampling settings (`default_settings`; top-k 100 and CFG 3 for a model
without them, as in the benchmark tables), `--top-k` and `--cfg-scale` overriding. Prints:
1. per method, the mean acceptance probability min(1, p/q) of each draft slot, and how often
   each slot is the first rejection, the last count being the passes with no rejection (slot
   0 is the draft right after the last committed token; after a rejection it was drafted for
   a context that the residual token replaced);
2. for AR samples: the mean entropy of p, the collision probability sum(p^2) (how often two
   independent draws agree: SJD's fresh drafts hold at about this rate), and the mean total
   variation between p at position j and p at j after the token at j - d is replaced by an
   independent draw from its own p, for several distances d (1 = left, W = above).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import scd_core  # noqa: E402
from scd_core.bench_rows import parse_model_args  # noqa: E402
from scd_core.protocols import optional  # noqa: E402
from scd_core.sampling import SamplingConfig, processed_probs  # noqa: E402

PROMPTS = ["red apple", "grinning face", "cat face", "flag france", "rocket", "pizza", "dog face", "red heart"]


def model_prompts(model) -> list[str]:
    """The model's example prompts (at most 8), else PROMPTS."""
    return list(optional(model, "example_prompts") or PROMPTS)[:8]


def model_settings(model, top_k: int | None, cfg_scale: float | None) -> dict:
    """The model's own sampling settings, else top-k 100 and CFG 3; top_k / cfg_scale override."""
    settings = dict(top_k=100, top_p=1.0, temperature=1.0, cfg_scale=3.0)
    settings.update({k: v for k, v in optional(model, "default_settings", {}).items() if k in settings})
    settings.update({k: v for k, v in (("top_k", top_k), ("cfg_scale", cfg_scale)) if v is not None})
    return settings


def slot_profile(model, method: str, window: int, seeds: int, settings: dict,
                 prompts: list[str] = PROMPTS) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean min(1, p/q) per draft slot [L - 1], and the passes whose first rejection is at each
    slot, then the passes with none [L]."""
    total, count = torch.zeros(window - 1), torch.zeros(window - 1)
    first = torch.zeros(window, dtype=torch.long)
    for prompt in prompts:
        for seed in range(seeds):
            for it in scd_core.stream(model, [prompt], method=method, window=window, seed=seed, **settings):
                if it.index == 0:
                    continue                                   # the prefill has no drafts
                a = it.accept_prob[0]
                fed = ~torch.isnan(a)
                total[fed] += a[fed]
                count[fed] += 1
                first[int(it.num_accepted[0]) if bool(it.resampled[0]) else window - 1] += 1
    return total / count.clamp(min=1), first


def sensitivity(model, distances: list[int], settings: dict, every: int, prompts: list[str] = PROMPTS) -> dict:
    """Entropy, collision probability and TV(p_j, p_j | token j-d redrawn) on AR samples."""
    run = scd_core.generate(model, prompts, method="ar", seed=0, **settings)
    tokens = run.tokens
    B, N = tokens.shape
    zero = torch.zeros(B, dtype=torch.long)
    sampling = SamplingConfig(temperature=settings["temperature"], top_k=settings["top_k"], top_p=settings["top_p"])
    session = model.start(prompts, settings["cfg_scale"])
    logits = torch.cat([session.first_logits.unsqueeze(1), session.step(tokens[:, :-1], zero)], 1)
    p = processed_probs(logits, sampling)
    redrawn = torch.multinomial(p.reshape(-1, p.shape[-1]), 1, generator=torch.Generator().manual_seed(1)).view(B, N)
    out = {"entropy": float(-(p * p.clamp_min(1e-30).log()).sum(-1).mean()),
           "collision": float((p * p).sum(-1).mean())}
    for d in distances:
        tvs = []
        for site in range(0, N - d, every):
            changed = tokens.clone()
            changed[:, site] = redrawn[:, site]
            fed = model.start(prompts, settings["cfg_scale"]).step(changed[:, : site + d], zero)[:, -1]
            tvs.append(0.5 * (processed_probs(fed, sampling) - p[:, site + d]).abs().sum(-1))
        out[f"TV d={d}"] = float(torch.stack(tvs).mean())
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--model-arg", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--methods", default="sjd,scd-mc")
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--top-k", type=int, default=None, help="default: the model's (else 100)")
    ap.add_argument("--cfg-scale", type=float, default=None, help="default: the model's (else 3)")
    ap.add_argument("--every", type=int, default=3, help="perturb every n-th position (default 3)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    methods = args.methods.split(",")
    if not set(methods) <= {"sjd", "scd-mc", "scd-gumbel"}:
        ap.error(f"--methods: expected speculative methods among sjd, scd-mc, scd-gumbel, got {args.methods!r}")
    for name in ("seeds", "every", "threads"):
        if getattr(args, name) < 1:
            ap.error(f"--{name}: expected an integer >= 1, got {getattr(args, name)}")
    torch.set_num_threads(args.threads)
    try:
        model = scd_core.load_model(args.model, **parse_model_args(args.model_arg))
        settings, prompts = model_settings(model, args.top_k, args.cfg_scale), model_prompts(model)
        profiles = [(m, *slot_profile(model, m, args.window, args.seeds, settings, prompts)) for m in methods]
    except ValueError as err:                                     # a bad argument: its message, exit 2
        ap.error(str(err))
    print(f"# {args.model}: {len(prompts)} prompts x {args.seeds} seeds, L = {args.window}, {settings}")
    for method, accept, first in profiles:
        print(f"{method}: mean min(1, p/q) per slot  " + " ".join(f"{v:.2f}" for v in accept.tolist()))
        print(f"{method}: first rejection per slot   " + " ".join(str(v) for v in first.tolist())
              + f" (last: none)  {first[0] / first.sum():.0%} at slot 0")
    W = int(model.grid[-1])
    stats = sensitivity(model, [1, 2, 3, W - 1, W, W + 1, 2 * W], settings, args.every, prompts)
    print("AR samples: " + "  ".join(f"{k} {v:.3f}" for k, v in stats.items()))


if __name__ == "__main__":
    main()
