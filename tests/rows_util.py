"""Checks shared by the adapters' tests of rows joining and leaving a running session.

Every check feeds the same tokens at the same positions to the session under test and to
reference sessions (the same prompts started alone, or a session left untouched) and
compares the logits, to float32 rounding relative to the logit scale.
"""
from __future__ import annotations

import math

import torch

import scd_core
from scd_core import testing
from scd_core.protocols import can_resize
from scd_core.serve import Scheduler


def assert_close_logits(got: torch.Tensor, want: torch.Tensor, what: str, rel: float = 1e-4) -> None:
    """`scd_core.testing.assert_close_logits` at 1e-4 of the logits' scale (float32 rounding of
    a reordered attention)."""
    testing.assert_close_logits(got, want, what, rel)


def _starts(fed: torch.Tensor, back: list[int], W: int, N: int) -> torch.Tensor:
    """Each row continues `back[r]` positions before what it was fed (a rejection), the
    window kept inside the grid."""
    start = (fed - torch.tensor([back[r % len(back)] for r in range(len(fed))])).clamp(min=0)
    return torch.minimum(start, torch.full_like(start, N - W))


def check_added_rows(tm, old: list[str], new: list[str], cfg_scale: float, seed: int = 0,
                     windows: tuple[int, ...] = (4, 3, 1)) -> None:
    """Rows added to a running session give the logits of their prompts started alone, at the
    same fed positions, and the running rows give those of a session nobody joined."""
    N, V, B, b = math.prod(tm.grid), tm.vocab_size, len(old), len(new)
    g = torch.Generator().manual_seed(seed)
    s, untouched = tm.start(old, cfg_scale), tm.start(old, cfg_scale)
    assert can_resize(s)
    toks = torch.randint(0, V, (B, 5), generator=g)
    zeros = torch.zeros(B, dtype=torch.long)
    assert_close_logits(s.step(toks, zeros), untouched.step(toks, zeros), "running rows before the join")

    first = s.add_rows(new)
    alone = [tm.start([p], cfg_scale) for p in new]
    assert first.shape == (b, V)
    for i in range(b):
        assert_close_logits(first[i], alone[i].first_logits[0], f"first logits of added row {i}")
    assert s.first_logits.shape == (B + b, V)

    fed = torch.tensor([5] * B + [0] * b)
    back = [2, 0, 4, 1, 3, 0]                        # per-row rejections: rows sit at different starts
    for W in windows:
        start = _starts(fed, back, W, N)
        toks = torch.randint(0, V, (B + b, W), generator=g)
        out = s.step(toks, start)
        assert out.shape == (B + b, W, V)
        assert_close_logits(out[:B], untouched.step(toks[:B], start[:B]), f"running rows, window {W}")
        for i in range(b):
            ref = alone[i].step(toks[B + i:B + i + 1], start[B + i:B + i + 1])[0]
            assert_close_logits(out[B + i], ref, f"added row {i}, window {W}")
        fed = start + W


def check_kept_rows(tm, prompts: list[str], keep: list[int], cfg_scale: float, seed: int = 1,
                    windows: tuple[int, ...] = (4, 2, 1)) -> object:
    """After `keep_rows`, the kept rows' next logits are those of an untouched session; returns
    the session (for family-specific checks)."""
    N, V, B = math.prod(tm.grid), tm.vocab_size, len(prompts)
    g = torch.Generator().manual_seed(seed)
    s, untouched = tm.start(prompts, cfg_scale), tm.start(prompts, cfg_scale)
    toks = torch.randint(0, V, (B, 6), generator=g)
    zeros = torch.zeros(B, dtype=torch.long)
    s.step(toks, zeros)
    untouched.step(toks, zeros)

    s.keep_rows(torch.tensor(keep))
    index = torch.tensor(keep)
    assert_close_logits(s.first_logits, untouched.first_logits[index], "first logits of kept rows")
    fed = torch.full((B,), 6)
    back = [1, 3, 0, 2, 4, 1]
    for W in windows:
        start = _starts(fed, back, W, N)
        toks = torch.randint(0, V, (B, W), generator=g)
        out = s.step(toks[index], start[index])
        assert out.shape == (len(keep), W, V)
        assert_close_logits(out, untouched.step(toks, start)[index], f"kept rows, window {W}")
        fed = start + W
    return s


def run_scheduler(scheduler: Scheduler, joins: dict[int, list[str]]) -> tuple[list, list[int]]:
    """Step the scheduler until idle, submitting `joins[k]` before step k; returns the
    requests and the batch size after every step."""
    requests, sizes, step = [], [], 0
    while True:
        for prompt in joins.get(step, []):
            requests.append(scheduler.submit(prompt, seed=len(requests)))
        if not scheduler.busy and step > max(joins):
            return requests, sizes
        scheduler.step()
        sizes.append(scheduler.batch_size)
        step += 1


def _pixels(images: list) -> list:
    """Decoded output (images, or lists of frames) as nested lists of bytes, comparable."""
    return [_pixels(x) if isinstance(x, (list, tuple)) else x.tobytes() for x in images]


def check_scheduler_greedy(tm, joins: dict[int, list[str]], cfg_scale: float, window: int = 4,
                           method: str = "scd-mc", pixels: bool = True) -> None:
    """Requests joining a running batch at different passes and leaving when done decode, with
    top_k = 1, exactly the greedy AR tokens of their prompts run alone (and, with `pixels`,
    the same pictures: each row decodes with its own context)."""
    scheduler = Scheduler(tm, method=method, window=window, top_k=1, cfg_scale=cfg_scale)
    requests, sizes = run_scheduler(scheduler, joins)
    nfe, greedy = 0, {}
    for request in requests:
        run = request.result(timeout=60)
        alone = scd_core.generate(tm, [request.prompt], method="ar", window=1, top_k=1, cfg_scale=cfg_scale)
        assert torch.equal(run.tokens.cpu(), alone.tokens.cpu()), request.prompt
        if pixels:
            assert _pixels(run.images) == _pixels(alone.images), f"{request.prompt}: decoded with another row's context"
        greedy[request.prompt] = tuple(alone.tokens[0].tolist())
        nfe += run.nfe
    # a comparison with teeth: no prompt's greedy run is one repeated token, no two are alike
    assert all(len(set(tokens)) > 1 for tokens in greedy.values()) and len(set(greedy.values())) == len(greedy)
    assert scheduler.passes < nfe                                # passes were shared
    grew = [i for i in range(1, len(sizes)) if sizes[i] > sizes[i - 1]]
    shrank = [i for i in range(1, len(sizes)) if 0 < sizes[i] < sizes[i - 1]]
    assert grew and shrank, f"rows must join a running batch and leave it early: {sizes}"
