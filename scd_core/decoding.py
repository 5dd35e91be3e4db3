"""The decoding loop: AR, SJD, SCD with maximal coupling, SCD with Gumbel coupling.

One pass, for every method, in the paper's order (`decode_pass`, then `advance`):

1. feed each row's window: its last committed token and its drafts (slot i of row b is
   the draft for position n_b + i, drawn from the law q stored with it);
2. one forward pass gives p, the processed distribution at every window position;
3. verify every draft at once: accept x if U < min(1, p(x)/q(x)) (`coupling.accept_prob`);
4. the first rejection a ends the accepted prefix: each draft is verified once, when
   everything before it in the window was accepted;
5. commit the a accepted drafts, then a draw from the residual norm(max(0, p - q)) at the
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

A draft tree (`Settings.tree`) is a layer of its own, `scd_core.tree_pass`, entered by one
`if` in `decode_pass`: a chain never runs its code.

The pass is GPU-shaped: every tensor's shape is fixed by the batch, the window and the
vocabulary, every draw is made at every slot (and the unused ones dropped by `torch.where`),
and no operation waits for the device. It therefore compiles whole
(`scd_core.compiled`); the loop's one check per pass, "are all rows done", is the only
moment the host waits.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Iterator, NamedTuple, Sequence

import torch
import torch.nn.functional as F

from scd_core import coupling
from scd_core.prompts import check_prompt_length, warn_unknown
from scd_core.protocols import Session, TokenModel, can_tree, row_decoder
from scd_core.sampling import SamplingConfig, probs_and_support, processed_probs  # noqa: F401 (re-exported)
from scd_core.settings import INITS, MAX_WINDOW, METHODS, Settings  # noqa: F401 (re-exported)
from scd_core.trace import Iteration, Run

MAX_SEED = 2**63
# The counter layout of a row's stream: pass t uses counters [t * S * uses, (t + 1) * S * uses)
# for the `Uniforms` of a pass, S = STREAM_SLOTS counters per use, so a window may hold up to
# S slots. It fixes which number every draw gets: changing it changes every sample.
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
    def uses_tree(self) -> bool:     # a pass feeds a draft tree (`tree_pass`), not a chain
        return self.settings.uses_tree

    @property
    def L(self) -> int:              # slots of a pass's main line: the window on a chain (1 for AR)
        return self.settings.line

    @property
    def D(self) -> int:              # draft slots: the main line after the last committed token
        return self.L - 1

    @property
    def N(self) -> int:              # tokens in the grid
        return math.prod(self.grid)

    @property
    def sampling(self) -> SamplingConfig:
        return self.settings.sampling

    @property
    def cfg_scale(self) -> float:
        return self.settings.cfg_scale

    @property
    def copy_stride(self) -> int:    # how far back a copy init looks: a row, or a frame
        return {"repeat-above": self.grid[-1], "repeat-frame": self.grid[-1] * self.grid[-2]}.get(self.settings.init, 0)

    def check_session(self, session: Session) -> None:
        """A ValueError naming `tree` if the run needs a tree and the session cannot feed one."""
        if self.uses_tree and not can_tree(session):
            k, depth = self.settings.tree
            raise ValueError(f"tree {k}x{depth}: this model's session cannot feed a draft tree "
                             f"(it has no step_tree / keep_path); use tree=(1, 0), the plain chain")


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
    accept_prob: torch.Tensor        # [B, D] min(1, p/q) of each fed draft on the main line (NaN: not fed)
    branches: torch.LongTensor | None = None   # draft trees: [B, depth] candidate taken at each tree level (-1: none)
    parents: torch.LongTensor | None = None    # draft trees: [B, W] parent of each fed node


class Uniforms(NamedTuple):
    """A pass's uniforms [B, L], one per slot and use, from each row's stream (`pass_uniforms`)."""
    accept: torch.Tensor             # the test of the draft in each slot
    residual: torch.Tensor           # a draw from the residual at a rejected slot
    fresh: torch.Tensor              # a draw from p (the bonus, a redraft)
    init: torch.Tensor               # an empty slot's draft, by the init scheme
    refill: torch.Tensor             # a slot a bigger window adds (`resize`)


# ----------------------------------------------------------------------------- one pass

def decode_pass(session: Session, state: State, plan: Plan) -> tuple[State, Verdict]:
    """Feed every row's window, one forward pass, then `advance`."""
    if plan.uses_tree:
        from scd_core import tree_pass
        return tree_pass.decode_pass(session, state, plan)
    start, fed = window(state, plan)                     # [B], [B, W]
    logits = session.step(fed, start)                    # [B, W, V]: logits[b, j] predicts start + j + 1
    state, verdict = advance(state, logits, start, plan)
    return state, verdict._replace(fed=fed)


def window(state: State, plan: Plan) -> tuple[torch.LongTensor, torch.LongTensor]:
    """Step 1: where each row's window starts [B] and its W tokens [B, W]: the last committed
    token, then the drafts; a row near the grid's end starts further back and re-feeds
    committed tokens, so every row feeds W = min(L, N)."""
    W = min(plan.L, plan.N)
    start = (state.n - 1).clamp(max=plan.N - W)
    return start, canvas_at(state, start.unsqueeze(1) + torch.arange(W, device=start.device))


def advance(state: State, logits: torch.Tensor, start: torch.LongTensor, plan: Plan) -> tuple[State, Verdict]:
    """Steps 2-8, given the pass's logits [B, W, V] (logits[b, j] predicts start[b] + j + 1)."""
    if plan.D == 0:
        return advance_ar(state, logits, start, plan)
    B, W, V = logits.shape
    L, D, N = plan.L, plan.D, plan.N
    slots = torch.arange(L, device=logits.device)                               # [L]
    n = state.n.unsqueeze(1)                                                    # [B, 1]
    offset = n - 1 - start.unsqueeze(1)                                         # [B, 1] logits index of position n
    m = W - 1 - offset                                                          # [B, 1] drafts fed: slots 0 .. m - 1
    p, support = probs_and_support(logits, plan.sampling, (offset + slots).clamp(max=W - 1))   # [B, L, V] at n .. n + L - 1
    u = pass_uniforms(state, L)

    # 3-4. verify every fed draft x ~ q; the accepted prefix ends at the first rejection
    x = state.drafts.clamp(min=0)                                               # [B, D]
    was_fed = slots[:D] < m                                                     # [B, D]
    p_drafts = p[:, :D]                                                         # [B, D, V] p at the drafts
    alpha = coupling.accept_prob(p_drafts, state.q, x)                          # [B, D] min(1, p(x) / q(x))
    kept = (u.accept[:, :D] < alpha) & was_fed                                  # [B, D] fed and passed
    a = kept.long().cumprod(1).sum(1, keepdim=True)                             # [B, 1] accepted drafts
    rejected = a < m                                                            # [B, 1]

    # 5-6. every slot's token: the accepted drafts, then the last committed token, then the redrafts
    residuals = coupling.residual_mass(p_drafts, state.q)                       # [B, D, V]
    line = draw_line(p, support, residuals, x, kept, was_fed, a, rejected, u, state.keys, n + slots, plan)   # [B, L]
    c = (a + 1).clamp(max=N - n)                                                # [B, 1] committed: no bonus past the grid
    tokens = commit(state.tokens, n, c, line)                                   # [B, N]

    # 7-8. carry the redrafts after the commit with q <- p, fill the empty slots by the init scheme
    after = carry_and_fill(state, tokens, c, m, line, p, u, plan)
    accept_prob = torch.where(was_fed, alpha, float("nan"))                     # [B, D]
    return after, Verdict(start, None, a.squeeze(1), rejected.squeeze(1), accept_prob)


def advance_ar(state: State, logits: torch.Tensor, start: torch.LongTensor, plan: Plan) -> tuple[State, Verdict]:
    """`advance` for AR, the pass with a window of one token and no drafts (L = 1, D = 0): it
    commits a draw from p [B, 1, V], the draw the general pass takes for its bonus at slot 0."""
    n = state.n.unsqueeze(1)                                                    # [B, 1]
    token = coupling.sample(processed_probs(logits, plan.sampling), pass_uniforms(state, 1).fresh)   # [B, 1]
    c = (n < plan.N).long()                                                     # [B, 1] nothing past the grid
    after = State(commit(state.tokens, n, c, token), state.n + c.squeeze(1), state.drafts, state.q,
                  state.keys, state.passes + 1)
    none = torch.zeros_like(state.n)
    return after, Verdict(start, None, none, none.bool(), torch.zeros(none.shape[0], 0, device=none.device))


def draw_line(p: torch.Tensor, support: torch.LongTensor | None, residuals: torch.Tensor, x: torch.LongTensor,
              kept: torch.BoolTensor, was_fed: torch.BoolTensor, a: torch.LongTensor, rejected: torch.BoolTensor,
              u: Uniforms, keys: torch.LongTensor, positions: torch.LongTensor, plan: Plan) -> torch.LongTensor:
    """Steps 5-6: the token [B, L] of every slot of the line: the accepted drafts x (slots < a);
    at slot a the last committed token, a draw from the residual where its draft was rejected,
    else the bonus, a draw from p; after it the redrafts: SJD draws from p, SCD-MC keeps each
    fed draft its test kept and redraws the others from their residual (MRS: the maximal
    coupling of old and new draft) and draws from p after the fed drafts, SCD-Gumbel takes
    argmax(log p + G) with the Gumbel noise of each slot's absolute position.

    p [B, L, V], and the tokens it has mass on [B, L, k] under top-k (`probs_and_support`: the
    Gumbel noise is hashed there alone; None: all); residuals [B, D, V] = max(0, p - q) of each
    draft (`coupling.residual_mass`); x, kept, was_fed [B, D]; a, rejected [B, 1]. Every slot
    takes at most one draw, and every draw is made at every slot (fixed shapes), each with its
    own uniform of the row's stream."""
    B, L, V = p.shape
    D = x.shape[1]
    slots = torch.arange(L, device=p.device)
    x = F.pad(x, (0, L - D))                                                    # [B, L]
    if plan.method == "scd-mc":
        from_residual = F.pad(was_fed & ~kept, (0, L - D), value=False)         # MRS at every rejected draft
        keep_x = F.pad(kept, (0, L - D), value=False)
    else:
        from_residual = rejected & (slots == a)                                 # the first rejection alone
        keep_x = slots < a
    if plan.method == "scd-gumbel":
        redraft = (coupling.gumbel_argmax(p, coupling.gumbel_noise(keys, positions, V)) if support is None
                   else coupling.gumbel_argmax_on(p, support, keys, positions))                     # [B, L]
        at_a = coupling.sample(rows_at(residuals, a.clamp(max=D - 1)), u.residual.gather(1, a))  # [B, 1]
        drawn = torch.where(from_residual, at_a, redraft)
    else:
        law = torch.where(from_residual.unsqueeze(-1), F.pad(residuals, (0, 0, 0, L - D)), p)  # [B, L, V]
        drawn = coupling.sample(law, torch.where(from_residual, u.residual, u.fresh))
    return torch.where(keep_x, x, drawn)


def carry_and_fill(state: State, tokens: torch.LongTensor, c: torch.LongTensor, m: torch.LongTensor,
                   line: torch.LongTensor, p: torch.Tensor, u: Uniforms, plan: Plan) -> State:
    """Steps 7-8: the next state, given the new committed tokens [B, N], the tokens committed
    c and drafts fed m [B, 1], the line's tokens [B, L] and p [B, L, V]: the redrafts after
    the commit are carried with the law each was drawn from, p (rule 5: a draft the coupling
    kept takes p too); the slots left empty are filled by the init scheme."""
    L, D, N = plan.L, plan.D, plan.N
    slots = torch.arange(D, device=line.device)
    n = state.n.unsqueeze(1)                                                    # [B, 1]
    src = c + slots                                                             # [B, D] old slot of each new slot
    carried = (src <= m) & (n + src < N)                                        # [B, D] slots with a redraft
    src = src.clamp(max=L - 1)
    after = State(tokens, state.n + c.squeeze(1), torch.where(carried, line.gather(1, src), -1),
                  rows_at(p, src), state.keys, state.passes + 1)                # [B, D, V]: whole rows copied
    return fill_empty(after, carried, u.init[:, :D], plan)


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
    empty = ~carried
    draft = (u * V).long()                                                      # random init: uniform
    q = state.q.masked_fill_(empty.unsqueeze(-1), 1.0 / V)
    stride = plan.copy_stride
    if stride:
        first_empty = pos[:, :1] + carried.sum(1, keepdim=True)                 # [B, 1]
        src = pos - stride * torch.div(pos - first_empty + stride, stride, rounding_mode="floor")  # [B, D]
        copy = empty & (src >= 0)                                               # [B, D] slots of a copy
        draft = torch.where(copy, canvas_at(state, src.clamp(min=0)), draft)
        q.masked_fill_(copy.unsqueeze(-1), 0.0).scatter_add_(-1, draft.unsqueeze(-1), copy.unsqueeze(-1).to(q.dtype))
    drafts = torch.where(empty, draft, state.drafts).masked_fill(pos >= plan.N, -1)
    return State(state.tokens, state.n, drafts, q, state.keys, state.passes)


# ---------------------------------------------------------------------------- helpers

def rows_at(t: torch.Tensor, index: torch.LongTensor) -> torch.Tensor:
    """[B, S, ...] the rows t[b, index[b, s]] of t [B, W, ...]."""
    return t[torch.arange(index.shape[0], device=index.device).unsqueeze(1), index]


def canvas_at(state: State, pos: torch.LongTensor) -> torch.LongTensor:
    """Token at generated positions pos [B, S]: committed below n, else the draft there."""
    rel = pos - state.n.unsqueeze(1)                                            # draft slot
    committed = state.tokens.gather(1, pos.clamp(0, state.tokens.shape[1] - 1))
    drafts = F.pad(state.drafts, (0, 1), value=-1)                              # [B, D + 1]
    return torch.where(rel < 0, committed, drafts.gather(1, rel.clamp(0, drafts.shape[1] - 1)))


def commit(tokens: torch.LongTensor, n: torch.LongTensor, c: torch.LongTensor,
           values: torch.LongTensor) -> torch.LongTensor:
    """tokens [B, N] with positions n .. n + c - 1 of each row set to values[:, :c]."""
    rel = torch.arange(tokens.shape[1], device=tokens.device) - n               # [B, N] slot of each position
    new = (rel >= 0) & (rel < c)
    return torch.where(new, values.gather(1, rel.clamp(0, values.shape[1] - 1)), tokens)


def pass_uniforms(state: State, L: int) -> Uniforms:
    """This pass's uniforms [B, L] per use, from each row's stream: counter = (the row's pass
    count, slot, use), so no number is ever drawn twice and none depends on another row or
    on the window (a row's window may change between passes: `resize`)."""
    uses = len(Uniforms._fields)
    counters = state.passes.unsqueeze(1) * (uses * STREAM_SLOTS) + torch.arange(uses * L, device=state.n.device)
    return Uniforms(*coupling.uniforms(state.keys, counters).view(-1, L, uses).unbind(2))


def resize(state: State, plan: Plan) -> State:
    """The state for a new window or tree (its main line `plan.L`; 1: AR) before the next pass:
    drafts past it are dropped; new slots are filled by the init scheme from the row's
    "refill" stream. Exact for any window chosen before the pass draws its randomness."""
    D_old, D = state.drafts.shape[1], plan.D
    if D <= D_old:
        return State(state.tokens, state.n, state.drafts[:, :D], state.q[:, :D], state.keys, state.passes)
    grown = State(state.tokens, state.n, F.pad(state.drafts, (0, D - D_old), value=-1),
                  F.pad(state.q, (0, 0, 0, D - D_old)), state.keys, state.passes)
    carried = grown.drafts >= 0                                                 # the old drafts (a prefix)
    return fill_empty(grown, carried, pass_uniforms(state, plan.L).refill[:, :D], plan)


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
    state, verdict = advance(empty, first_logits.unsqueeze(1), empty.n - 1, plan)
    return state, verdict._replace(fed=empty.tokens[:, :0])


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
    check_prompt_length(prompts)
    warn_unknown(model, prompts)                         # a bag-of-words model says which words it ignores
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
             tree: tuple[int, int] | None = None, compile: bool | None = None,
             settings: Settings | None = None) -> Run:
    """Decode one grid of tokens per prompt; returns a Run with tokens, NFE, images, trace.
    The keywords left out take their value from `settings` (by default `Settings()`:
    scd-mc, window 16, random init, temperature 1, no top-k/top-p, no guidance, no tree, eager).
    `tree=(k, depth)` feeds k candidates at each of the first depth draft positions (a full
    k-ary tree: k + k^2 + ... + k^depth nodes after the last committed token, within the window);
    `compile=True` runs the pass compiled (`scd_core.compiled`: the same tokens)."""
    settings = settings_of(settings, method=method, window=window, init=init, temperature=temperature,
                           top_k=top_k, top_p=top_p, cfg_scale=cfg_scale, tree=tree, compile=compile)
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
           tree: tuple[int, int] | None = None, compile: bool | None = None,
           settings: Settings | None = None) -> Iterator[Iteration]:
    """Yield one `Iteration` record per forward pass (index 0 is the prefill). The arguments
    are checked before the first record is asked for (keywords as in `generate`)."""
    settings = settings_of(settings, method=method, window=window, init=init, temperature=temperature,
                           top_k=top_k, top_p=top_p, cfg_scale=cfg_scale, tree=tree, compile=compile)
    plan, seeds = validate(model, prompts, settings, seed)
    return decode(model, list(prompts), seeds, plan)


def decode(model: TokenModel, prompts: list[str], seeds: list[int], plan: Plan,
           on_start: Callable[[Session], None] | None = None) -> Iterator[Iteration]:
    """`stream` with its arguments already checked (`validate`); `on_start(session)` hears
    the model's session once it has started."""
    from scd_core import compiled
    entered = time.perf_counter()
    with no_autograd(plan):                              # no autograd bookkeeping in the loop
        session = TimedSession.start(model, prompts, plan.cfg_scale)
        if on_start is not None:
            on_start(session.session)
        plan.check_session(session.session)
        state, verdict = start_rows(session.first_logits, seeds, plan)
        record = Iteration.of(0, plan.method, None, state, verdict, nfe=1,
                              wall_time=time.perf_counter() - entered, step_time=session.seconds)
    yield record
    one_pass = compiled.pass_for(session, plan)          # `decode_pass`, or the same pass compiled
    while not bool((record.n_after >= plan.N).all()):   # the record is on the host: the pass's one wait
        entered = time.perf_counter()
        with no_autograd(plan):
            before = state
            state, verdict = one_pass(session, state, plan)
            record = Iteration.of(record.index + 1, plan.method, before, state, verdict, nfe=record.nfe + 1,
                                  wall_time=record.wall_time + time.perf_counter() - entered,
                                  step_time=session.seconds, log=record.log)
        yield record


def no_autograd(plan: Plan):
    """The context a run's passes run in: `torch.inference_mode()`, or for a compiled pass
    `torch.no_grad()` (a compiled graph cannot take views of inference-mode tensors)."""
    return torch.no_grad() if plan.settings.compile else torch.inference_mode()


class TimedSession:
    """A model's Session that adds up the seconds spent in the model (`start` and every
    `step`): the rest of a run's wall time is the engine's. On a GPU each step is timed by
    CUDA events, read once the pass's record has reached the host, so timing adds no wait."""

    def __init__(self, session: Session, seconds: float) -> None:
        self.session, self._seconds, self._events = session, seconds, []
        self.first_logits = session.first_logits

    @classmethod
    def start(cls, model: TokenModel, prompts: list[str], cfg_scale: float) -> "TimedSession":
        t = time.perf_counter()
        session = model.start(prompts, cfg_scale)
        if session.first_logits.is_cuda:
            torch.cuda.synchronize(session.first_logits.device)
        return cls(session, time.perf_counter() - t)

    @property
    def seconds(self) -> float:
        """Seconds spent in the model so far (it waits for the GPU's timed steps to end)."""
        for begin, end in self._events:
            end.synchronize()
            self._seconds += begin.elapsed_time(end) / 1000
        self._events.clear()
        return self._seconds

    @seconds.setter
    def seconds(self, value: float) -> None:
        self._seconds, self._events = value, []

    def timed(self, fn, *args):
        """fn(*args), its time counted as the model's."""
        if not self.first_logits.is_cuda:
            t = time.perf_counter()
            out = fn(*args)
            self._seconds += time.perf_counter() - t
            return out
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        out = fn(*args)
        end.record()
        self._events.append((begin, end))
        return out

    def step(self, tokens: torch.LongTensor, start: torch.LongTensor) -> torch.Tensor:
        return self.timed(self.session.step, tokens, start)

    def step_tree(self, tokens: torch.LongTensor, parents: torch.LongTensor, start: torch.LongTensor) -> torch.Tensor:
        return self.timed(self.session.step_tree, tokens, parents, start)

    def keep_path(self, nodes: torch.LongTensor) -> None:
        self.timed(self.session.keep_path, nodes)
