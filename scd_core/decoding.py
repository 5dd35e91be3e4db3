"""The decoding loops: AR, SJD, SCD with maximal coupling, SCD with Gumbel coupling.

One loop serves every method. Each iteration feeds, per row, the last committed token and
the row's drafts in one forward pass of window W, then:

1. verify: draft slot i of row b (generated position n_b + i) is accepted if
   U < min(1, p(x)/q(x)); the first rejection k_b ends the accepted prefix, so each draft
   is verified once, when everything before it was accepted (rules 2 and 6);
2. commit: the k_b accepted drafts, then a residual sample norm(max(0, p - q)) at slot k_b,
   or, when all were accepted, a bonus token from the last p (rule 3);
3. redraft the slots after k_b from this pass's p, with q <- p for every one of them
   (rule 4): SJD draws independently, SCD-MC takes the MRS output of the verification
   pass (keep, or residual: the maximal coupling), SCD-Gumbel takes argmax(log p + G);
4. fill the empty slots with the init scheme and its exact q (random: uniform; copies:
   one-hot).

AR is the same loop with a window of 1 (no drafts, every token a "bonus" sample). Rows
advance by their own accepted lengths. A row near the end of the grid re-feeds committed
tokens at earlier positions instead of running past N (legal under the Session contract),
so every row's window fits the grid.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator, Sequence

import torch

from scd_core import coupling
from scd_core.protocols import TokenModel
from scd_core.sampling import SamplingConfig, processed_probs, validate_sampling
from scd_core.trace import Iteration, Run

METHODS = ("ar", "sjd", "scd-mc", "scd-gumbel")
INITS = ("random", "repeat-above", "repeat-frame")
MAX_WINDOW = 1024


@dataclass(frozen=True)
class DecodeConfig:
    method: str
    window: int
    init: str
    seed: int
    sampling: SamplingConfig
    cfg_scale: float


def validate(model: TokenModel, prompts: Sequence[str], method: str, window: int, init: str,
             seed: int, temperature: float, top_k: int, top_p: float, cfg_scale: float) -> DecodeConfig:
    """Check every argument; a ValueError names the argument and what is allowed."""
    if not hasattr(model, "start") or not hasattr(model, "grid") or not hasattr(model, "vocab_size"):
        raise ValueError(f"model must follow the TokenModel contract (vocab_size, grid, start, decode), got {type(model).__name__}")
    if isinstance(prompts, str) or not isinstance(prompts, Sequence) or len(prompts) == 0:
        raise ValueError("prompts must be a non-empty list of strings (one per batch row)")
    if not all(isinstance(p, str) for p in prompts):
        raise ValueError("prompts must contain only strings")
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if isinstance(window, bool) or not isinstance(window, int):
        raise ValueError(f"window must be an integer, got {window!r}")
    low = 1 if method == "ar" else 2
    if not low <= window <= MAX_WINDOW:
        raise ValueError(f"window must be in [{low}, {MAX_WINDOW}] for method {method!r}, got {window}")
    if init not in INITS:
        raise ValueError(f"init must be one of {', '.join(INITS)}, got {init!r}")
    if init == "repeat-frame" and len(model.grid) != 3:
        raise ValueError(f"init 'repeat-frame' needs a video grid (T, H, W); this model's grid is {tuple(model.grid)}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise ValueError(f"seed must be an integer in [0, 2**63), got {seed!r}")
    if not isinstance(cfg_scale, (int, float)) or not 0 <= cfg_scale <= 100:
        raise ValueError(f"cfg_scale must be a number in [0, 100], got {cfg_scale!r}")
    sampling = validate_sampling(temperature, top_k, top_p)
    return DecodeConfig(method, window if method != "ar" else 1, init, seed, sampling, float(cfg_scale))


def generate(model: TokenModel, prompts: Sequence[str], method: str = "scd-mc", window: int = 16,
             seed: int = 0, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
             cfg_scale: float = 1.0, init: str = "random") -> Run:
    """Decode one grid of tokens per prompt; returns a Run with tokens, NFE, images, trace."""
    iterations = list(stream(model, prompts, method=method, window=window, seed=seed,
                             temperature=temperature, top_k=top_k, top_p=top_p,
                             cfg_scale=cfg_scale, init=init))
    return Run.from_iterations(iterations, decode=model.decode)


def stream(model: TokenModel, prompts: Sequence[str], method: str = "scd-mc", window: int = 16,
           seed: int = 0, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
           cfg_scale: float = 1.0, init: str = "random") -> Iterator[Iteration]:
    """Yield one `Iteration` record per forward pass (index 0 is the prefill)."""
    cfg = validate(model, prompts, method, window, init, seed, temperature, top_k, top_p, cfg_scale)
    decoder = _Decoder(model, cfg, len(prompts))
    with torch.inference_mode():       # no autograd bookkeeping: a third less time per tensor op
        record = decoder.prefill(list(prompts))
    yield record
    while not decoder.finished():
        with torch.inference_mode():
            record = decoder.iterate()
        yield record


class _Decoder:
    """Per-run state. Draft slot i of row b holds the draft for position n[b] + i."""

    def __init__(self, model: TokenModel, cfg: DecodeConfig, batch: int):
        self.model, self.cfg, self.B = model, cfg, batch
        self.N = 1
        for size in model.grid:
            self.N *= int(size)
        self.V = int(model.vocab_size)
        self.L = cfg.window
        self.D = self.L - 1
        self.stride = _copy_stride(model.grid, cfg.init)
        self.gumbel = cfg.method == "scd-gumbel"
        self.nfe, self.index = 0, 0
        self.busy = 0.0            # seconds spent inside prefill/iterate: the run's wall time
        self.step_time = 0.0

    # -- setup -------------------------------------------------------------------------

    def prefill(self, prompts: list[str]) -> Iteration:
        """Start the session (one forward pass) and commit position 0 from its logits."""
        self.entered = t = time.perf_counter()
        self.session = self.model.start(prompts, self.cfg.cfg_scale)
        first = self.session.first_logits
        self._sync(first)
        self.step_time += time.perf_counter() - t
        self.device = first.device
        self.generator = torch.Generator(device=self.device).manual_seed(self.cfg.seed)
        B, N, D = self.B, self.N, self.D
        self.rows = torch.arange(B, device=self.device)
        self.slots = torch.arange(self.L, device=self.device)    # slot indices 0..L-1, reused
        self.slot_row = self.slots.unsqueeze(0)                   # [1, L]
        self.draft_row = self.slot_row[:, :D]                     # [1, D]
        self.copy_offset = self.draft_row - self.stride           # copy init: slot -> source offset from n
        self.no_offset = torch.zeros(B, dtype=torch.long, device=self.device)
        self.all_fed = torch.full((B, 1), D, dtype=torch.long, device=self.device)
        # committed tokens, plus L spare columns that absorb the -1 padding past the grid's end
        self.buffer = torch.full((B, N + self.L), -1, dtype=torch.long, device=self.device)
        self.tokens = self.buffer[:, :N]
        self.n = torch.zeros(B, dtype=torch.long, device=self.device)
        self.drafts = torch.full((B, D), -1, dtype=torch.long, device=self.device)
        self.q = torch.zeros(B, D, self.V, device=self.device)
        if self.gumbel:   # each position's hash key, computed once per run; noise cached per block
            keys = coupling.row_keys(self.cfg.seed, self.rows).unsqueeze(1)
            self.block = max(3 * self.L, 64)                      # positions hashed at a time
            self.position_keys = coupling.position_keys(keys, torch.arange(N + self.block, device=self.device))
            self.block_low = -self.block                          # no block yet
        self.n_min = self.n_max = 0
        p0 = processed_probs(first, self.cfg.sampling).unsqueeze(1)
        token0 = self._sample_target(p0)[:, 0]
        self.init_u = torch.rand((B, D), generator=self.generator, device=self.device, dtype=torch.float64)
        self.tokens[:, 0] = token0
        self.nfe = 1
        n_before = self.n
        self.n = self.n + 1
        self.empty = torch.ones(B, D, dtype=torch.bool, device=self.device)   # draft slots to fill: all
        return self._record(n_before, start=torch.full_like(self.n, -1),
                            fed=torch.zeros(B, 0, dtype=torch.long, device=self.device),
                            k=torch.zeros_like(self.n),
                            rejected=torch.zeros_like(self.n, dtype=torch.bool),
                            accept_prob=torch.full((B, D), float("nan"), device=self.device))

    def finished(self) -> bool:
        if self.B == 1:
            self.n_min = self.n_max = int(self.n)             # for the next window
        else:
            n_min, n_max = torch.aminmax(self.n)
            self.n_min, self.n_max = int(n_min), int(n_max)
        return self.n_min >= self.N

    # -- one iteration -----------------------------------------------------------------

    def iterate(self) -> Iteration:
        self.entered = time.perf_counter()
        if self.D == 0:
            return self._iterate_ar()
        self._fill_drafts()
        fed, start, off, m_col = self._build_window()            # m_col [B, 1]: drafts fed
        p = self._forward(fed, start, off)                       # [B, L, V]: p for position n + i
        drafts, D = self.drafts, self.D
        # every uniform of this pass in one call: accept tests, samples, next pass's init
        u = torch.rand((self.B, 3 * D + self.L), generator=self.generator, device=self.device, dtype=torch.float64)
        u_accept, u_draw, self.init_u = u.split([D, D + self.L, D], 1)
        kept, accept_prob = self._verify(p[:, :D], drafts, u_accept)
        # per-row counts as [B, 1] columns: k = first rejection (m if none)
        k_col = kept.cumprod(1).sum(1, keepdim=True)
        if not self.full:
            k_col = torch.minimum(k_col, m_col)
        rejected = k_col < m_col
        draws = self._draws(p, u_draw)                           # [B, D + L]: residual draws, then p draws
        residual_draws, fresh = draws.split([D, self.L], 1)
        coupled = torch.where(kept, drafts, residual_draws) if self.cfg.method == "scd-mc" else None   # MRS
        redraft = self._redraft(fresh, coupled, m_col)
        # the residual draw at the first rejection, else the bonus: the p draw at slot k (= m)
        last = draws.gather(1, torch.where(rejected, k_col, k_col + D))
        n_before = self.n
        n_col = n_before.unsqueeze(1)
        c_col = k_col + self._one_more(rejected, n_col, m_col)  # + the residual or the bonus token
        self._commit(drafts, last, n_col, k_col)
        n_col = n_col + c_col
        self.n = n_col.view(-1)
        self._carry_drafts(redraft, p, c_col, m_col)
        if not self.full:
            accept_prob = accept_prob.masked_fill(self.draft_row >= m_col, float("nan"))
        return self._record(n_before, start, fed, k_col.view(-1), rejected.view(-1), accept_prob)

    def _one_more(self, rejected: torch.Tensor, n_col: torch.Tensor, m_col: torch.Tensor):
        """Whether a row commits a token after its k accepted drafts: the residual draw at a
        rejection, else the bonus token if it fits in the grid (1 where every row has room)."""
        if self.full and self.n_max < self.N - self.D:
            return 1
        room = n_col < self.N - self.D if self.full else n_col + m_col < self.N
        return rejected | room

    def _iterate_ar(self) -> Iteration:
        """AR: feed each row's last token, sample the next from p (all rows move together)."""
        last = self.n - 1
        fed = self.tokens.gather(1, last.unsqueeze(1))
        self.full = True
        p = self._forward(fed, last, self.no_offset)
        token = self._sample_target(p)                            # [B, 1]
        n_before = self.n
        self.buffer.scatter_(1, n_before.unsqueeze(1), token)
        self.n = n_before + 1
        return self._record(n_before, last, fed, self.no_offset, self.no_offset.bool(), self.q.new_zeros(self.B, 0))

    def _fill_drafts(self) -> None:
        """Fill empty draft slots with the init scheme and its exact q.

        Slots past the grid's end are filled too (one mask less per pass); they are never fed
        (`_build_window` keeps every fed position inside the grid) nor committed.
        """
        empty = self.empty                                        # set by the previous pass
        if self.stride:
            empty = self._fill_copies(empty, self.n.unsqueeze(1) + self.copy_offset)
            if empty is None:                                     # every empty slot took a copy
                return
        tok = (self.init_u * self.V).long()                      # uniform over the vocabulary
        self.drafts = torch.where(empty, tok, self.drafts)
        self.q = torch.where(empty.unsqueeze(-1), 1.0 / self.V, self.q)

    def _fill_copies(self, empty: torch.Tensor, src: torch.Tensor) -> torch.Tensor | None:
        """Copy init: the token `stride` positions back (row above / previous frame), q one-hot.

        `src` [B, D] is each slot's source position. A source may be committed or a draft,
        including one filled in an earlier round here, so rounds run until no slot can take a
        copy (at most D / stride + 1 rounds). Returns the slots still empty (no source yet:
        the random init fills them), or None where no slot can be left empty.
        """
        if self.D < self.stride:        # the window is shorter than the stride: one round
            return self._copy_committed(empty, src)
        for _ in range(self.D // self.stride + 1):
            from_committed = (src >= 0) & (src < self.n.unsqueeze(1))
            rel = (src - self.n.unsqueeze(1)).clamp(0, self.D - 1)
            from_draft = (src >= self.n.unsqueeze(1)) & (self.drafts.gather(1, rel) >= 0)
            take = empty & (from_committed | from_draft)
            if not bool(take.any()):
                return empty
            value = torch.where(from_committed, self.tokens.gather(1, src.clamp(0, self.N - 1)),
                                self.drafts.gather(1, rel))
            self._take_copies(take, value.clamp(min=0))           # -1 only where no copy is taken
            empty = empty & ~take
        return empty

    def _copy_committed(self, empty: torch.Tensor, src: torch.Tensor) -> torch.Tensor | None:
        """`_fill_copies` when every source lies before n (D < stride): a committed token, or
        none (before the grid). Once every row is past its first row (frame), every empty slot
        takes a copy: returns None."""
        inside = self.n_min >= self.stride                        # no source before the grid
        take = empty if inside else empty & (src >= 0)
        self._take_copies(take, self.tokens.gather(1, src if inside else src.clamp(min=0)))
        return None if inside else empty & ~take

    def _take_copies(self, take: torch.Tensor, value: torch.Tensor) -> None:
        """Drafts <- value [B, D] where `take`, with a one-hot q there; value must be a valid
        token everywhere."""
        self.drafts = torch.where(take, value, self.drafts)
        take_q = take.unsqueeze(-1)
        self.q = torch.where(take_q, 0.0, self.q).scatter_add_(-1, value.unsqueeze(-1), take_q.to(self.q.dtype))

    def _build_window(self):
        """Tokens to feed [B, W] and each row's start, offset and number of drafts fed.

        W = min(L, the most tokens any row still needs); a row needing fewer starts earlier
        (start = N - W) and re-feeds committed tokens, so that it never runs past the grid.
        Sets `self.full`: every row feeds its last token and all D drafts (the usual case).
        """
        n_min, n_max = self.n_min, self.n_max                   # from `finished()`
        W = min(self.L, self.N - n_min)
        last = self.n - 1
        self.full = W == self.L and n_max - 1 <= self.N - W
        if self.full:
            fed = torch.cat([self.tokens.gather(1, last.unsqueeze(1)), self.drafts], 1)
            return fed, last, self.no_offset, self.all_fed
        start = last.clamp(max=self.N - W)
        off = last - start                                        # committed tokens re-fed after the last one
        m = W - 1 - off                                           # drafts fed
        pos = start.unsqueeze(1) + self.slots[:W]
        rel = pos - self.n.unsqueeze(1)
        from_tokens = self.tokens.gather(1, pos.clamp(0, self.N - 1))
        from_drafts = self.drafts.gather(1, rel.clamp(0, max(self.D - 1, 0))) if self.D else from_tokens
        fed = torch.where(rel < 0, from_tokens, from_drafts)
        return fed, start, off, m.unsqueeze(1)

    def _forward(self, fed: torch.Tensor, start: torch.Tensor, off: torch.Tensor) -> torch.Tensor:
        """One forward pass; returns p aligned to slots: p[b, i] is for position n[b] + i."""
        t = time.perf_counter()
        logits = self.session.step(fed, start)
        self._sync(logits)
        self.step_time += time.perf_counter() - t
        self.nfe += 1
        if not self.full:                                         # W < L, or a row re-fed committed tokens
            idx = (off.unsqueeze(1) + self.slots).clamp(max=fed.shape[1] - 1)
            logits = logits.gather(1, idx.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))
        return processed_probs(logits, self.cfg.sampling)

    def _verify(self, p: torch.Tensor, drafts: torch.Tensor, u: torch.Tensor):
        """The acceptance test of every draft slot at once; returns (kept, min(1, p/q))."""
        return coupling.accept_test_with(p, self.q, drafts if self.full else drafts.clamp(min=0), u)

    def _residual(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """Residual weights max(0, p - q) (rule 2; p where they have no mass), unnormalised."""
        return coupling.residual_weights(p, q)

    def _draws(self, p: torch.Tensor, u: torch.Tensor) -> torch.LongTensor:
        """[B, D + L]: a draw from each draft slot's residual, then a draw from each slot's p.

        Slot k's residual draw is the token committed at a first rejection at k; for SCD-MC
        the residual draws are also the MRS redrafts of rejected slots; the p draws are the
        bonus and the redrafts of SJD (and Gumbel-coupled ones for SCD-Gumbel). One sampler
        call serves both where the same generator draws them.
        """
        residual = self._residual(p[:, : self.D], self.q)
        if self.gumbel:
            return torch.cat([coupling.sample_with(residual, u[:, : self.D]), self._sample_target(p)], 1)
        return coupling.sample_with(torch.cat([residual, p], 1), u)

    def _sample_target(self, p: torch.Tensor) -> torch.LongTensor:
        """Draw from p [B, S, V], the laws of positions n[b] .. n[b] + S - 1: Gumbel-coupled for
        SCD-Gumbel."""
        if self.gumbel:
            return coupling.exponential_argmax(p, self._noise(p.shape[1]))
        return coupling.sample(p, self.generator)

    def _noise(self, S: int) -> torch.Tensor:
        """The Exponential(1) noise exp(-G) [B, S, V] of positions n[b] .. n[b] + S - 1 (S <= L).

        A position's noise never changes and stays in the window for several passes, so
        the hash runs over a block of max(3L, 64) positions per row at a time (from the row's
        n), and again only once some row's window may leave its block. A single row reads
        its S positions as a slice of the block; rows at different positions, by a gather.
        """
        if self.n_max - self.block_low > self.block - self.L:   # a row's window may leave its block
            self.noise_start = self.n.unsqueeze(1)
            self.block_low = self.n_min                          # no row's block starts lower
            block = self.noise_start + torch.arange(self.block, device=self.device)
            self.noise_block = coupling.exponential_noise_at(self.position_keys.gather(1, block), self.V)
        if self.B == 1:                                          # its block starts at block_low
            first = self.n_min - self.block_low
            return self.noise_block[:, first: first + S]
        rel = self.n.unsqueeze(1) + self.slots[:S] - self.noise_start
        return self.noise_block.gather(1, rel.unsqueeze(-1).expand(-1, -1, self.V))

    def _redraft(self, fresh: torch.Tensor, coupled: torch.Tensor | None, m_col: torch.Tensor) -> torch.Tensor:
        """Next drafts for slots 0..L-1 (used after the first rejection), all with q = p.

        SCD-MC keeps the MRS output where a draft was fed (the maximal coupling of this
        pass's p with the previous q); the slot after the last fed draft has no previous
        draft and takes a fresh draw. SJD and SCD-Gumbel take `fresh` everywhere.
        """
        if coupled is None:
            return fresh
        if not self.full:
            coupled = torch.where(self.draft_row < m_col, coupled, fresh[:, : self.D])
        return torch.cat([coupled, fresh[:, self.D:]], 1)

    def _commit(self, drafts: torch.Tensor, last: torch.Tensor, n_col: torch.Tensor, k_col: torch.Tensor) -> None:
        """Write the drafts at positions n, n+1, ... of each row, then `last` at n + k.

        Positions below the new n (the k accepted drafts, and `last` when it is committed)
        are final; the ones after hold drafts that a later pass overwrites before it commits
        them. Nothing reads the buffer at or after n (the trace masks it), and writes past
        the grid land on the spare columns of `buffer`.
        """
        self.buffer.scatter_(1, n_col + self.draft_row, drafts)
        self.buffer.scatter_(1, n_col + k_col, last)

    def _carry_drafts(self, redraft: torch.Tensor, p: torch.Tensor, c_col: torch.Tensor, m_col: torch.Tensor) -> None:
        """Shift the redrafted slots past the c committed ones; q <- this pass's p for each.

        Old slots 0..m have a redraft (m drafts fed, then the slot after them); the new slots
        past those are `empty`, for the init scheme to fill next pass. A redraft may lie past
        the grid's end: it is never fed (see `_fill_drafts`).
        """
        src = c_col + self.draft_row                              # old slot index
        self.empty = src > m_col
        src_c = src.clamp(max=self.D)
        self.drafts = torch.where(self.empty, -1, redraft.gather(1, src_c))
        self.q = p.gather(1, src_c.unsqueeze(-1).expand(-1, -1, self.V))

    # -- bookkeeping -------------------------------------------------------------------

    def _sync(self, t: torch.Tensor) -> None:
        if t.is_cuda:
            torch.cuda.synchronize(t.device)

    def _record(self, n_before, start, fed, k, rejected, accept_prob) -> Iteration:
        """The trace record of this pass (on the host; on a CPU without copies: nothing the
        record holds is modified in place afterwards, except the shared token buffer, whose
        positions below n_after never change: see `Iteration.tokens_after`)."""
        tensors = dict(n_before=n_before, n_after=self.n, start=start, window_tokens=fed, num_accepted=k,
                       accept_prob=accept_prob, resampled=rejected,
                       drafts_after=self.drafts)
        if self.device.type != "cpu":
            tensors = {name: t.cpu() for name, t in tensors.items()}
        record = Iteration(index=self.index, method=self.cfg.method, nfe=self.nfe, step_time=self.step_time,
                           wall_time=self.busy + time.perf_counter() - self.entered,
                           committed_buffer=self.tokens, **tensors)
        self.busy = record.wall_time
        self.index += 1
        return record


def _copy_stride(grid: Sequence[int], init: str) -> int:
    """Distance back to the copied token: one row (repeat-above) or one frame (repeat-frame)."""
    if init == "repeat-above":
        return int(grid[-1])
    if init == "repeat-frame":
        return int(grid[-1]) * int(grid[-2])
    return 0
