"""How it is timed: CUDA-synchronised forwards of a session at each window, the engine alone
at the same sizes, and one image per method from the prompt, eager and compiled."""
from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

import scd_core
from scd_core.models.toy import RandomLogitsModel

from .configs import Bench, sync


def random_tokens(vocab: int, width: int, device: torch.device, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (1, width), generator=g).to(device)


def fill_context(session, vocab: int, n_fill: int, chunk: int, device: torch.device) -> None:
    """Feed generated positions 0..n_fill-1 in chunks, as a run half-way through would hold."""
    for start in range(0, n_fill, chunk):
        width = min(chunk, n_fill - start)
        session.step(random_tokens(vocab, width, device, seed=start), torch.tensor([start]))


def time_steps(session, vocab: int, window: int, start: int, device: torch.device, warmup: int,
               repeats: int) -> list[float]:
    """Milliseconds of `repeats` synchronised `Session.step` calls of width `window` at `start`."""
    tokens = random_tokens(vocab, window, device, seed=1000 + window)
    at = torch.tensor([start])
    with torch.no_grad():
        for _ in range(warmup):
            session.step(tokens, at)
        sync(device)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            session.step(tokens, at)
            sync(device)
            times.append(1e3 * (time.perf_counter() - t0))
    return times


def time_forwards(bench: Bench, windows: Sequence[int], context: float, warmup: int, repeats: int,
                  device: torch.device) -> tuple[dict[int, list[float]], int, float]:
    """Per window L the step times in ms; also the context fed and the prefill's seconds."""
    n = math.prod(bench.model.grid)
    vocab = int(bench.model.vocab_size)
    t0 = time.perf_counter()
    with torch.no_grad():
        session = bench.start()
        sync(device)
        prefill_s = time.perf_counter() - t0
        if max(windows) >= n:
            raise ValueError(f"--windows: L = {max(windows)} does not fit the grid of {n} positions")
        n_fill = max(1, min(int(context * n), n - max(windows)))
        fill_context(session, vocab, n_fill, chunk=256, device=device)
        times = {L: time_steps(session, vocab, L, min(n_fill, n - L), device, warmup, repeats) for L in windows}
    del session
    return times, n_fill, prefill_s


def engine_grid(grid: Sequence[int], max_tokens: int) -> tuple[int, ...]:
    """The grid cut to about `max_tokens` positions: whole rows (images) or frames of rows (video)."""
    grid = tuple(int(g) for g in grid)
    if len(grid) == 2:
        h, w = grid
        return (max(1, min(h, max_tokens // w)), w)
    t, h, w = grid
    frames = min(t, 2)                                   # two frames: repeat-frame copies happen
    return (frames, max(1, min(h, max_tokens // (frames * w))), w)


def time_engine(vocab: int, grid: Sequence[int], method: str, window: int, settings: dict, init: str,
                device: torch.device, batch: int = 1) -> float:
    """Engine milliseconds per iteration (outside Session.step) of one run on random logits."""
    model = RandomLogitsModel(vocab_size=vocab, grid=tuple(grid), device=device)
    run = scd_core.generate(model, ["timing"] * batch, method=method, window=window, seed=0,
                            init=init if method != "ar" else "random", cfg_scale=1.0, **settings)
    return 1e3 * run.engine_time / run.nfe


def time_engines(bench: Bench, windows: Sequence[int], methods: Sequence[str], max_tokens: int,
                 device: torch.device) -> tuple[dict[int, dict[str, float]], tuple[int, ...]]:
    """{L: {method: engine ms per iteration}}: AR at L = 1, every method at L > 1."""
    vocab = int(bench.model.vocab_size)
    grid = engine_grid(bench.model.grid, max(max_tokens, 2 * max(windows)))
    for method in ("ar", *methods):                      # warm-up: kernels, allocator, generator
        time_engine(vocab, grid, method, 1 if method == "ar" else max(2, min(windows[-1], 8)),
                    bench.settings, bench.init, device)
    out: dict[int, dict[str, float]] = {}
    for L in windows:
        cases = ["ar"] if L == 1 else list(methods)
        out[L] = {m: time_engine(vocab, grid, m, L, bench.settings, bench.init, device) for m in cases}
    return out, grid


IMAGE_METHODS = ("ar", "sjd", "scd-mc", "scd-gumbel")
IMAGE_MODELS = ("janus-pro-7b", "lumina-mgpt-7b-768")        # a text prompt each (Cosmos continues a clip)


@dataclass
class Image:
    """One image decoded from a prompt, timed from the call to the tokens on the host."""
    model: str
    how: str                               # "ar", "sjd", "scd-mc", "scd-gumbel" or "transformers"
    compiled: bool
    window: int
    nfe: int
    seconds: float
    engine_share: float | None = None      # the engine's share of the run's wall time (None: not measurable)
    compile_s: float | None = None         # the first, compiling run's extra seconds

    @property
    def ms_per_pass(self) -> float:
        return 1e3 * self.seconds / self.nfe


def time_image(bench: Bench, method: str, compiled: bool, device: torch.device) -> Image:
    """One image of `bench`'s prompt by `scd_core.generate` at the model's own settings."""
    from scd_core.settings import Settings

    settings = Settings.for_model(bench.model, method=method, compile=compiled)
    decode = lambda: scd_core.generate(bench.model, ["a timing prompt"], seed=0, settings=settings)  # noqa: E731
    compile_s = None
    if compiled:                            # the compile, apart: a server pays it once per setting
        sync(device)
        t0 = time.perf_counter()
        decode()
        sync(device)
        compile_s = time.perf_counter() - t0
    sync(device)
    t0 = time.perf_counter()
    run = decode()
    sync(device)
    seconds = time.perf_counter() - t0
    if compile_s is not None:
        compile_s -= seconds
    # compiled, the model's step runs inside the pass's graph and counts as the model's: the
    # engine's share cannot be told apart ("-"), not 0
    share = None if compiled else run.engine_time / run.wall_time
    return Image(bench.name, method, compiled, 1 if method == "ar" else settings.window, run.nfe, seconds,
                 share, compile_s)


def time_hf_image(bench: Bench, device: torch.device) -> Image:
    """One image by transformers' own `generate` (one pass per token, as our AR), after a warm-up."""
    n = math.prod(bench.model.grid)
    with torch.no_grad():
        bench.hf_generate()                 # warm-up: kernels, the static cache's first allocation
        sync(device)
        t0 = time.perf_counter()
        tokens = bench.hf_generate()
        sync(device)
    assert tokens.shape[-1] == n, f"transformers generated {tokens.shape[-1]} tokens, the grid has {n}"
    return Image(bench.name, "transformers", False, 1, n, time.perf_counter() - t0)     # its first pass is the prefill


def time_images(bench: Bench, methods: Sequence[str], compile_methods: Sequence[str],
                device: torch.device) -> list[Image]:
    """Transformers' generate (where the model has one here), then each method eager and, for
    `compile_methods`, compiled."""
    images = [time_hf_image(bench, device)] if bench.hf_generate is not None else []
    for method in methods:
        images.append(time_image(bench, method, False, device))
        if method in compile_methods:
            images.append(time_image(bench, method, True, device))
    return images


def images_markdown(images: list[Image]) -> str:
    lines = ["| model | how | L | NFE | s per image | ms per pass | engine share | compile s |",
             "|---|---|---|---|---|---|---|---|"]
    for im in images:
        how = f"{im.how} compiled" if im.compiled else im.how
        share = "-" if im.engine_share is None else f"{100 * im.engine_share:.1f}%"
        comp = "-" if im.compile_s is None else f"{im.compile_s:.1f}"
        lines.append(f"| {im.model} | {how} | {im.window} | {im.nfe} | {im.seconds:.2f} | {im.ms_per_pass:.2f} | "
                     f"{share} | {comp} |")
    return "\n".join(lines)
