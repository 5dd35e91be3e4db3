"""The decoding loop: AR, SJD, SCD with maximal coupling, SCD with Gumbel coupling.

One pass, for every method, in the paper's order (`decode_pass`, then `advance`):

1. feed each row's window: its last committed token and its drafts (slot i of row b is
   the draft for position n_b + i, drawn from the law q stored with it);
2. one forward pass gives p, the processed distribution at every window position;
3. verify every draft at once: accept x if U < min(1, p(x)/q(x)) (`coupling.mrs`);
4. the first rejection k ends the accepted prefix: each draft is verified once, when
   everything before it in the window was accepted;
5. commit the k accepted drafts, then a draw from the residual norm(max(0, p - q)) at the
   first rejection, or, when every draft passed, a bonus token drawn from the last p;
6. redraft the slots after the commit from this pass's p: SJD draws independently, SCD-MC
   keeps the MRS output (the maximal coupling with the previous draft), SCD-Gumbel takes
   argmax(log p + G) with G fixed per position;
7. carry the redrafts to the next pass with q <- p for every one of them;
8. fill the empty slots by the init scheme, each with the exact law it is drawn from.

AR is the same pass with a window of one token (no drafts: every token is a "bonus"). Rows
advance by their own accepted lengths. Every random number of row b comes from its own
counter-based stream, keyed by its seed and its pass count, so a row's tokens do not depend
on the other rows of its batch. `docs/exactness.md` states the rules this keeps and the
tests that check each.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Iterator, NamedTuple, Sequence

import torch
import torch.nn.functional as F

from scd_core import coupling
from scd_core.protocols import Session, TokenModel, row_decoder
from scd_core.sampling import SamplingConfig, processed_probs
from scd_core.settings import INITS, MAX_WINDOW, METHODS, Settings  # noqa: F401 (re-exported)
from scd_core.trace import Iteration, Run

METHOD_LABELS = {"ar": "AR", "sjd": "SJD", "scd-mc": "SCD maximal coupling",
                 "scd-gumbel": "SCD Gumbel coupling"}
INIT_LABELS = {"random": "random (uniform)", "repeat-above": "repeat the token above",
               "repeat-frame": "repeat the previous frame (video)"}
MAX_SEED = 2**63
_STREAMS = ("accept", "residual", "fresh", "init", "refill")   # the uniforms of a pass, per slot
# The counter layout of a row's stream: pass t uses counters [t * S * len(_STREAMS),
# (t + 1) * S * len(_STREAMS)), S = STREAM_SLOTS counters per use, so a window may hold up
# to S slots. It fixes which number every draw gets: changing it changes every sample.
STREAM_SLOTS = 1024
assert MAX_WINDOW <= STREAM_SLOTS, "a window may not outgrow the stream layout"


@dataclass(frozen=True)
class Plan:
    """What is fixed for a run: its checked `Settings` and the model's grid and vocabulary."""
    settings: Settings
    grid: tuple[int, ...]
    vocab_size: int

    @classmethod
    def of(cls, settings: Settings, model: TokenModel) -> "Plan":
        return cls(settings.check_model(model), tuple(int(s) for s in model.grid), int(model.vocab_size))

    @property
    def method(self) -> str:
        return self.settings.method

    @property
    def window(self) -> int:         # L: tokens fed per pass (1 for AR)
        return self.settings.feeds

    @property
    def init(self) -> str:
        return self.settings.init

    @property
    def sampling(self) -> SamplingConfig:
        return self.settings.sampling

    @property
    def cfg_scale(self) -> float:
        return self.settings.cfg_scale

    @property
    def N(self) -> int:              # tokens in the grid
        return math.prod(self.grid)

    @property
    def D(self) -> int:              # draft slots
        return self.window - 1

    @property
    def copy_stride(self) -> int:    # how far back a copy init looks: a row, or a frame
        return {"repeat-above": self.grid[-1], "repeat-frame": self.grid[-1] * self.grid[-2]}.get(self.init, 0)


@dataclass
class State:
    """B rows being decoded. Draft slot i of row b is the draft for position n[b] + i."""
    tokens: torch.LongTensor         # [B, N] committed tokens, -1 at positions >= n
    n: torch.LongTensor              # [B] tokens committed
    drafts: torch.LongTensor         # [B, D] the next pass's drafts (-1: past the grid's end)
    q: torch.Tensor                  # [B, D, V] the law each draft was drawn from
    keys: torch.LongTensor           # [B, 1] each row's random-stream key (from its seed)
    passes: torch.LongTensor         # [B] forward passes each row has had: its stream's counter

    def select(self, rows: torch.LongTensor) -> "State":
        """The state of some rows, in the order given (rows leaving a running batch)."""
        return State(*(getattr(self, f)[rows] for f in self.__dataclass_fields__))

    @staticmethod
    def cat(states: Sequence["State"]) -> "State":
        """One state from several (rows joining a running batch)."""
        return State(*(torch.cat([getattr(s, f) for s in states]) for f in State.__dataclass_fields__))


class Verdict(NamedTuple):
    """What a pass decided, per row, beyond the new state (the trace records it)."""
    start: torch.LongTensor          # [B] position of the first fed token (-1: the prefill)
    fed: torch.LongTensor            # [B, W] the tokens fed
    num_accepted: torch.LongTensor   # [B] drafts accepted
    resampled: torch.BoolTensor      # [B] a draft was rejected (its slot took a residual draw)
    accept_prob: torch.Tensor        # [B, D] min(1, p/q) of each fed draft (NaN: not fed)


# ----------------------------------------------------------------------------- one pass

def decode_pass(session: Session, state: State, plan: Plan) -> tuple[State, Verdict]:
    """Feed every row's window, one forward pass, then `advance`."""
    W = min(plan.window, plan.N)
    start = (state.n - 1).clamp(max=plan.N - W)          # [B] a row near the end re-feeds committed tokens
    fed = canvas_at(state, start.unsqueeze(1) + torch.arange(W, device=start.device))   # [B, W]
    logits = session.step(fed, start)                    # [B, W, V]: logits[b, j] predicts start + j + 1
    offset = state.n - 1 - start                         # [B] index of the logits for position n
    p = processed_probs(logits, plan.sampling, window_rows(offset, plan.window, W))    # [B, L, V]
    state, verdict = advance(state, p, m=W - 1 - offset, plan=plan)
    return state, verdict._replace(start=start, fed=fed)


def advance(state: State, p: torch.Tensor, m: torch.LongTensor, plan: Plan) -> tuple[State, Verdict]:
    """Verify, commit, redraft, carry and fill, given p [B, L, V] for positions n .. n + L - 1
    and the number m [B] of drafts fed (slots 0 .. m - 1; p is valid at slots 0 .. m).
    AR is this pass with no drafts (L = 1, D = 0): it commits the bonus draw at slot 0.
    Each draw is made only at the slots that use it (`at_slots`): one pass sweeps the
    vocabulary at a few slots per row, not at all L."""
    B, L, V = p.shape
    D, N = plan.D, plan.N
    slots = torch.arange(L, device=p.device)                                    # [L]
    n, m = state.n.unsqueeze(1), m.unsqueeze(1)                                 # [B, 1]
    u = pass_uniforms(state, L)                                                 # name -> [B, L]

    # verify every fed draft: accept x ~ q if U < min(1, p(x)/q(x)); the prefix ends at the first rejection
    x = state.drafts.clamp(min=0)                                               # [B, D]
    alpha = coupling.accept_prob(p[:, :D], state.q, x)                          # [B, D]
    kept = u["accept"][:, :D] < alpha
    was_fed = slots[:D] < m                                                     # [B, D]
    k = (kept & was_fed).long().cumprod(1).sum(1, keepdim=True)                 # [B, 1] up to the first rejection
    resampled = k < m                                                           # [B, 1]
    c = (k + 1).clamp(max=N - n)                                                # [B, 1] committed: no bonus past the grid

    # the MRS output of a rejected draft, a residual draw: at the first rejection, and for
    # SCD-MC at every rejected fed draft (its redraft is the MRS output: the maximal coupling)
    residual_at = ~kept & was_fed if plan.method == "scd-mc" else (slots[:D] == k) & resampled   # [B, D]
    residual = at_slots(residual_at, coupling.resample, p[:, :D], state.q, u["residual"][:, :D])
    mrs_tokens = F.pad(torch.where(kept, x, residual), (0, L - D))              # [B, L]

    # a draw from p: the bonus (slot k, every fed draft accepted) and the redrafts from p
    # (SJD, SCD-Gumbel: the slots after the commit; SCD-MC: the slot after the fed drafts)
    redrafted = (slots >= c) & (slots <= m)                                     # [B, L] old slots redrafted
    from_p = (redrafted & (slots >= m) if plan.method == "scd-mc" else redrafted) | ((slots == k) & ~resampled)
    if plan.method == "scd-gumbel":                                             # coupled across passes
        p_draws = at_slots(from_p, gumbel_draw, p, state.keys.expand(B, L), noise_positions(n, slots).expand(B, L))
    else:                                                                       # independent
        p_draws = at_slots(from_p, coupling.sample, p, u["fresh"])              # [B, L]

    # commit the accepted drafts, then the residual draw at the first rejection or the bonus
    last = torch.where(resampled, mrs_tokens.gather(1, k), p_draws.gather(1, k))   # [B, 1]
    values = torch.where(slots < k, F.pad(x, (0, L - D)), last)                 # [B, L] for positions n + slot
    tokens = commit(state.tokens, n, c, values)                                 # [B, N]

    # redraft the slots after the commit and carry them with the law each was drawn from
    redraft = torch.where(slots < m, mrs_tokens, p_draws) if plan.method == "scd-mc" else p_draws   # [B, L]
    src = (c + slots[:D]).clamp(max=L - 1)                                      # [B, D] old slot of each new slot
    carried = (c + slots[:D] <= m) & (n + c + slots[:D] < N)                    # [B, D] slots with a redraft
    drafts = torch.where(carried, redraft.gather(1, src), -1)                   # [B, D]
    q = redraft_laws(p, state.q, kept)[rows_of(src), src]                       # [B, D, V]: whole rows copied

    # fill the empty slots by the init scheme, with the law each draft is drawn from
    after = State(tokens, state.n + c.squeeze(1), drafts, q, state.keys, state.passes + 1)
    after = fill_empty(after, carried, u["init"][:, :D], plan)
    accept_prob = torch.where(was_fed, alpha, float("nan"))                     # [B, D]
    return after, Verdict(None, None, k.squeeze(1), resampled.squeeze(1), accept_prob)


def at_slots(where: torch.BoolTensor, draw, *per_slot: torch.Tensor) -> torch.LongTensor:
    """[B, S] draw(*rows) at the slots where `where` [B, S] holds, -1 elsewhere: each tensor
    of `per_slot` ([B, S, ...]) is gathered at those R slots first ([R, ...]), so the work
    is R rows, not B x S."""
    out = torch.full(where.shape, -1, dtype=torch.long, device=where.device)
    out[where] = draw(*(t[where] for t in per_slot))
    return out


def gumbel_draw(p: torch.Tensor, keys: torch.LongTensor, positions: torch.LongTensor) -> torch.LongTensor:
    """[R] argmax(log p + G) of rows p [R, V], G the Gumbel noise of (row key, position) [R]."""
    return coupling.gumbel_argmax(p, coupling.gumbel_noise(keys.unsqueeze(1), positions.unsqueeze(1), p.shape[-1])[:, 0])


def redraft_laws(p: torch.Tensor, q: torch.Tensor, kept: torch.BoolTensor) -> torch.Tensor:
    """The law [B, L, V] of the redraft at each slot, given this pass's p [B, L, V], the fed
    drafts' laws q [B, D, V] and which drafts the verification kept: p at every slot, for
    every method and whatever the coupling did (rule 5: a kept draft's law is p too)."""
    return p


def noise_positions(n: torch.LongTensor, slots: torch.LongTensor) -> torch.LongTensor:
    """[B, L] what keys the Gumbel noise of each slot: its absolute position n + slot (rule 7:
    fixed per position at every pass, never shared between positions)."""
    return n + slots


def fill_empty(state: State, carried: torch.BoolTensor, u: torch.Tensor, plan: Plan) -> State:
    """Fill every slot without a carried draft (a suffix of the window) by the init scheme.

    random: uniform over the vocabulary, q = uniform (exact, and accepted far more often than
    a one-hot q). repeat-above / repeat-frame: the token `stride` positions back, q one-hot;
    a source that is itself an empty slot passes the copy on, so each slot copies the last
    filled position on its chain (pos - stride, pos - 2 stride, ...); a chain that leaves the
    grid's start falls back to random. The laws are written into the empty slots of
    `state.q` in place: the callers pass a q they have just made (the carried p, or a padded q).
    """
    B, D, V = state.q.shape
    pos = state.n.unsqueeze(1) + torch.arange(D, device=u.device)               # [B, D]
    draft, copy = (u * V).long(), torch.zeros_like(carried)                     # random init: uniform
    stride = plan.copy_stride
    if stride:
        first_empty = pos[:, :1] + carried.sum(1, keepdim=True)                 # [B, 1]
        src = pos - stride * torch.div(pos - first_empty + stride, stride, rounding_mode="floor")  # [B, D]
        copy = src >= 0
        draft = torch.where(copy, canvas_at(state, src.clamp(min=0)), draft)
    empty = ~carried
    drafts = torch.where(empty, draft, state.drafts).masked_fill(pos >= plan.N, -1)
    q = state.q.masked_fill_(empty.unsqueeze(-1), 1.0 / V)                      # uniform: random init
    one_hot = (empty & copy).nonzero(as_tuple=True)                             # ([C], [C]) slots of a copy
    q[one_hot] = 0.0
    q[one_hot + (draft[one_hot],)] = 1.0                                        # one-hot: a copy
    return State(state.tokens, state.n, drafts, q, state.keys, state.passes)


# ---------------------------------------------------------------------------- helpers

def rows_of(index: torch.LongTensor) -> torch.LongTensor:
    """[B, 1] the row number of each row of index [B, S], to index [B, ...] tensors at (b, index[b, s])."""
    return torch.arange(index.shape[0], device=index.device).unsqueeze(1)


def canvas_at(state: State, pos: torch.LongTensor) -> torch.LongTensor:
    """Token at generated positions pos [B, S]: committed below n, else the draft there."""
    rel = pos - state.n.unsqueeze(1)                                            # draft slot
    committed = state.tokens.gather(1, pos.clamp(0, state.tokens.shape[1] - 1))
    drafts = F.pad(state.drafts, (0, 1), value=-1)                              # [B, D + 1]
    return torch.where(rel < 0, committed, drafts.gather(1, rel.clamp(0, drafts.shape[1] - 1)))


def window_rows(offset: torch.LongTensor, L: int, W: int) -> torch.LongTensor:
    """[B, L] the index into a pass's W logits of each slot: slot i reads offset[b] + i
    (clamped to the window: slots past the fed drafts are never read)."""
    return (offset.unsqueeze(1) + torch.arange(L, device=offset.device)).clamp(max=W - 1)


def commit(tokens: torch.LongTensor, n: torch.LongTensor, c: torch.LongTensor,
           values: torch.LongTensor) -> torch.LongTensor:
    """tokens [B, N] with positions n .. n + c - 1 of each row set to values[:, :c]."""
    rel = torch.arange(tokens.shape[1], device=tokens.device) - n               # [B, N] slot of each position
    new = (rel >= 0) & (rel < c)
    return torch.where(new, values.gather(1, rel.clamp(0, values.shape[1] - 1)), tokens)


def pass_uniforms(state: State, L: int) -> dict[str, torch.Tensor]:
    """This pass's uniforms [B, L] per use, from each row's stream: counter = (the row's pass
    count, slot, use), so no number is ever drawn twice and none depends on another row or
    on the window (a row's window may change between passes: `resize`)."""
    uses = len(_STREAMS)
    counters = state.passes.unsqueeze(1) * (uses * STREAM_SLOTS) + torch.arange(uses * L, device=state.n.device)
    u = coupling.uniforms(state.keys, counters).view(-1, L, uses)                     # [B, L, 5]
    return dict(zip(_STREAMS, u.unbind(2)))


def resize(state: State, plan: Plan) -> State:
    """The state for a new window (`plan.window`, 1: AR) before the next pass: drafts past
    it are dropped; new slots are filled by the init scheme from the row's "refill" stream.
    Exact for any window chosen before the pass draws its randomness."""
    D_old, D = state.drafts.shape[1], plan.D
    if D <= D_old:
        return State(state.tokens, state.n, state.drafts[:, :D], state.q[:, :D], state.keys, state.passes)
    grown = State(state.tokens, state.n, F.pad(state.drafts, (0, D - D_old), value=-1),
                  F.pad(state.q, (0, 0, 0, D - D_old)), state.keys, state.passes)
    carried = grown.drafts >= 0                                                 # the old drafts (a prefix)
    return fill_empty(grown, carried, pass_uniforms(state, plan.window)["refill"][:, :D], plan)


def start_rows(first_logits: torch.Tensor, seeds: Sequence[int], plan: Plan) -> tuple[State, Verdict]:
    """The state after the prefill: position 0 drawn from the first logits [B, V] (a pass
    with no drafts fed), and the first drafts filled by the init scheme."""
    B, V, N, D = first_logits.shape[0], plan.vocab_size, plan.N, plan.D
    device = first_logits.device
    empty = State(tokens=torch.full((B, N), -1, dtype=torch.long, device=device),
                  n=torch.zeros(B, dtype=torch.long, device=device),
                  drafts=torch.full((B, D), -1, dtype=torch.long, device=device),
                  q=torch.zeros(B, D, V, device=device),
                  keys=coupling.row_keys(torch.tensor(list(seeds), dtype=torch.long, device=device)).unsqueeze(1),
                  passes=torch.zeros(B, dtype=torch.long, device=device))
    p = processed_probs(first_logits.unsqueeze(1), plan.sampling, window_rows(empty.n, plan.window, 1))
    state, verdict = advance(empty, p, torch.zeros_like(empty.n), plan)
    return state, verdict._replace(start=torch.full_like(empty.n, -1), fed=empty.tokens[:, :0])


# ------------------------------------------------------------------------ the public API

def validate(model: TokenModel, prompts: Sequence[str], settings: Settings,
             seed: int | Sequence[int] = 0) -> tuple[Plan, list[int]]:
    """Check the model, the prompts, the settings against the model, and the seeds (a
    ValueError names the argument and what is allowed); return the run's plan and one seed
    per row: a list as given, or for an int s, s + b for row b."""
    if not all(hasattr(model, a) for a in ("start", "decode", "grid", "vocab_size")):
        raise ValueError(f"model must follow the TokenModel contract (vocab_size, grid, start, decode), "
                         f"got {type(model).__name__}")
    if isinstance(prompts, str) or not isinstance(prompts, Sequence) or len(prompts) == 0:
        raise ValueError("prompts must be a non-empty list of strings (one per batch row)")
    if not all(isinstance(p, str) for p in prompts):
        raise ValueError("prompts must contain only strings")
    if not isinstance(settings, Settings):
        raise ValueError(f"settings must be a scd_core.Settings, got {type(settings).__name__}")
    seeds = validate_seeds(seed, len(prompts))
    return Plan.of(settings, model), seeds


def settings_of(settings: Settings | None = None, **given) -> Settings:
    """`settings` (the library's defaults if None) with the keywords given (not None) in place."""
    base = Settings() if settings is None else settings
    if not isinstance(base, Settings):
        raise ValueError(f"settings must be a scd_core.Settings, got {type(base).__name__}")
    changes = {k: v for k, v in given.items() if v is not None}
    return base.replace(**changes) if changes else base


def validate_seeds(seed: int | Sequence[int], rows: int) -> list[int]:
    """One seed per row in [0, 2**63): a list with one per prompt, or an int s (row b: s + b)."""
    def ok(s) -> bool:
        return isinstance(s, int) and not isinstance(s, bool) and 0 <= s < MAX_SEED

    if isinstance(seed, Sequence) and not isinstance(seed, str):
        if len(seed) != rows or not all(ok(s) for s in seed):
            raise ValueError(f"seed must be an integer in [0, 2**63) or a list of {rows} such integers "
                             f"(one per prompt), got {seed!r}")
        return list(seed)
    if not ok(seed) or seed + rows > MAX_SEED:
        raise ValueError(f"seed must be an integer in [0, 2**63 - {rows}] (row b uses seed + b), got {seed!r}")
    return [seed + b for b in range(rows)]


def generate(model: TokenModel, prompts: Sequence[str], method: str | None = None, window: int | None = None,
             seed: int | Sequence[int] = 0, temperature: float | None = None, top_k: int | None = None,
             top_p: float | None = None, cfg_scale: float | None = None, init: str | None = None,
             settings: Settings | None = None) -> Run:
    """Decode one grid of tokens per prompt; returns a Run with tokens, NFE, images, trace.
    The keywords left out take their value from `settings` (by default `Settings()`:
    scd-mc, window 16, random init, temperature 1, no top-k/top-p, no guidance)."""
    settings = settings_of(settings, method=method, window=window, init=init, temperature=temperature,
                           top_k=top_k, top_p=top_p, cfg_scale=cfg_scale)
    plan, seeds = validate(model, prompts, settings, seed)
    decoders = []                                        # each row's own decoder (a clip model's knows its prefix)
    records = list(decode(model, list(prompts), seeds, plan, on_start=lambda session: decoders.extend(
        row_decoder(model, session, b) for b in range(len(prompts)))))
    return Run.from_iterations(records, decode=batch_decoder(model, decoders))


def batch_decoder(model: TokenModel, decoders: list):
    """tokens [B, N] -> decoded rows, each by its own row decoder (`model.decode` at once
    when no row needs context of its own)."""
    if all(d == model.decode for d in decoders):
        return model.decode
    return lambda tokens: [out for b, d in enumerate(decoders) for out in d(tokens[b: b + 1])]


def stream(model: TokenModel, prompts: Sequence[str], method: str | None = None, window: int | None = None,
           seed: int | Sequence[int] = 0, temperature: float | None = None, top_k: int | None = None,
           top_p: float | None = None, cfg_scale: float | None = None, init: str | None = None,
           settings: Settings | None = None) -> Iterator[Iteration]:
    """Yield one `Iteration` record per forward pass (index 0 is the prefill). The arguments
    are checked before the first record is asked for (keywords as in `generate`)."""
    settings = settings_of(settings, method=method, window=window, init=init, temperature=temperature,
                           top_k=top_k, top_p=top_p, cfg_scale=cfg_scale)
    plan, seeds = validate(model, prompts, settings, seed)
    return decode(model, list(prompts), seeds, plan)


def decode(model: TokenModel, prompts: list[str], seeds: list[int], plan: Plan,
           on_start: Callable[[Session], None] | None = None) -> Iterator[Iteration]:
    """`stream` with its arguments already checked (`validate`); `on_start(session)` hears
    the model's session once it has started."""
    entered = time.perf_counter()
    with torch.inference_mode():                         # no autograd bookkeeping in the loop
        session = TimedSession.start(model, prompts, plan.cfg_scale)
        if on_start is not None:
            on_start(session.session)
        state, verdict = start_rows(session.first_logits, seeds, plan)
        record = Iteration.of(0, plan.method, None, state, verdict, nfe=1,
                              wall_time=time.perf_counter() - entered, step_time=session.seconds)
    yield record
    while not bool((state.n >= plan.N).all()):
        entered = time.perf_counter()
        with torch.inference_mode():
            before = state
            state, verdict = decode_pass(session, state, plan)
            record = Iteration.of(record.index + 1, plan.method, before, state, verdict, nfe=record.nfe + 1,
                                  wall_time=record.wall_time + time.perf_counter() - entered,
                                  step_time=session.seconds, log=record.log)
        yield record


class TimedSession:
    """A model's Session that adds up the seconds spent in the model (`start` and every
    `step`, synchronised on CUDA): the rest of a run's wall time is the engine's."""

    def __init__(self, session: Session, seconds: float) -> None:
        self.session, self.seconds = session, seconds
        self.first_logits = session.first_logits

    @classmethod
    def start(cls, model: TokenModel, prompts: list[str], cfg_scale: float) -> "TimedSession":
        t = time.perf_counter()
        session = model.start(prompts, cfg_scale)
        _sync(session.first_logits)
        return cls(session, time.perf_counter() - t)

    def step(self, tokens: torch.LongTensor, start: torch.LongTensor) -> torch.Tensor:
        t = time.perf_counter()
        logits = self.session.step(tokens, start)
        _sync(logits)
        self.seconds += time.perf_counter() - t
        return logits


def _sync(t: torch.Tensor) -> None:
    if t.is_cuda:
        torch.cuda.synchronize(t.device)
