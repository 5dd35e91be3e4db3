"""The chain pass: AR, SJD, SCD with maximal coupling, SCD with Gumbel coupling.

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

AR is this pass with a window of one token: no drafts, so every token is the bonus of step 5.
`advance` runs it as `advance_ar`, the same draw with the empty draft machinery left out (a
third of the operations; `tests/test_decoding.py` checks that both give the same tokens and
records). Rows advance by their own accepted lengths. Every random number of row b comes from
its own counter-based stream, keyed by its seed and its pass count, so a row's tokens do not
depend on the other rows of its batch. `docs/exactness.md` states the rules this keeps and the
tests that check each.

This module is the bottom layer of the engine: it imports only the draws (`coupling`,
`sampling`) and the settings. A draft tree is a layer above it (`scd_core.tree_pass`); which
pass a run runs, chain or tree, eager or compiled, is chosen in one place, `scd_core.passes`;
the loop and the public API are `scd_core.decoding`.

The pass is GPU-shaped: every tensor's shape is fixed by the batch, the window and the
vocabulary, every draw is made at every slot (and the unused ones dropped by `torch.where`),
and no operation waits for the device, so it compiles whole.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple, Sequence

import torch
import torch.nn.functional as F

from scd_core import coupling
from scd_core.protocols import Session, TokenModel, can_tree
from scd_core.sampling import SamplingConfig, probs_and_support, processed_probs
from scd_core.settings import MAX_WINDOW, Settings

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
    # [M] the tokens random-init drafts are drawn from, uniformly (None: all V). Any fixed set
    # is exact (q is the uniform law over it); one the logits restrict p to is accepted most.
    draft_vocab: torch.LongTensor | None = field(default=None, compare=False)

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
    p_draft: torch.Tensor            # [B, D] p(x) of each fed draft x on the main line (NaN: not fed)
    q_draft: torch.Tensor            # [B, D] q(x), the law it was drawn from, at x (NaN: not fed)
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
    """Steps 2-8, given the pass's logits [B, W, V] (logits[b, j] predicts start[b] + j + 1);
    AR (no draft slots) by `advance_ar`."""
    return (advance_ar if plan.D == 0 else advance_drafts)(state, logits, start, plan)


class Verification(NamedTuple):
    """Steps 3-4 of a pass, per row: what the test of the fed drafts decided."""
    x: torch.LongTensor              # [B, D] the drafts (clamped: -1 past the grid's end reads as 0)
    was_fed: torch.BoolTensor        # [B, D] the draft was in the window
    kept: torch.BoolTensor           # [B, D] fed and passed its test U < min(1, p(x) / q(x))
    a: torch.LongTensor              # [B, 1] drafts accepted: the prefix before the first rejection
    rejected: torch.BoolTensor       # [B, 1] a fed draft was rejected: slot a takes a residual draw
    residuals: torch.Tensor          # [B, D, V] max(0, p - q) at each draft (`coupling.residual_mass`)
    positions: torch.LongTensor      # [B, L] the position of each slot of the line: n .. n + L - 1


def advance_drafts(state: State, logits: torch.Tensor, start: torch.LongTensor, plan: Plan) -> tuple[State, Verdict]:
    """Steps 2-8 of a pass with draft slots (D = L - 1)."""
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
    p_x, q_x = coupling.masses_at(p_drafts, state.q, x, was_fed)               # [B, D] p(x), q(x) (NaN: not fed)
    alpha = coupling.accept_ratio(p_x, q_x)                                     # [B, D] min(1, p(x) / q(x)) (NaN: not fed)
    kept = u.accept[:, :D] < alpha                                              # [B, D] fed and passed (never at a NaN)
    a = kept.cumprod(1).sum(1, keepdim=True)                                    # [B, 1] accepted drafts (int64)
    tested = Verification(x, was_fed, kept, a, a < m, coupling.residual_mass(p_drafts, state.q), n + slots)

    # 5-6. every slot's token: the accepted drafts, then the last committed token, then the redrafts
    line = draw_line(p, support, tested, u, state.keys, plan)                   # [B, L]
    c = (a + 1).clamp(max=N - n)                                                # [B, 1] committed: no bonus past the grid
    tokens = commit(state.tokens, n, c, line)                                   # [B, N]

    # 7-8. carry the redrafts after the commit with q <- p, fill the empty slots by the init scheme
    after = carry_and_fill(state, tokens, c, m, line, p, u, plan)
    return after, Verdict(start, None, a.squeeze(1), tested.rejected.squeeze(1), alpha, p_x, q_x)


def advance_ar(state: State, logits: torch.Tensor, start: torch.LongTensor, plan: Plan) -> tuple[State, Verdict]:
    """`advance` for AR, the pass with a window of one token and no drafts (L = 1, D = 0): it
    commits a draw from p [B, 1, V], the draw the general pass takes for its bonus at slot 0."""
    n = state.n.unsqueeze(1)                                                    # [B, 1]
    token = coupling.sample(processed_probs(logits, plan.sampling), pass_uniforms(state, 1).fresh)   # [B, 1]
    c = (n < plan.N).long()                                                     # [B, 1] nothing past the grid
    after = State(commit(state.tokens, n, c, token), state.n + c.squeeze(1), state.drafts, state.q,
                  state.keys, state.passes + 1)
    none = torch.zeros_like(state.n)
    no_drafts = torch.zeros(none.shape[0], 0, device=none.device)              # [B, 0]
    return after, Verdict(start, None, none, none.bool(), no_drafts, no_drafts, no_drafts)


def draw_line(p: torch.Tensor, support: torch.LongTensor | None, tested: Verification, u: Uniforms,
              keys: torch.LongTensor, plan: Plan) -> torch.LongTensor:
    """Steps 5-6: the token [B, L] of every slot of the line: the accepted drafts x (slots < a);
    at slot a the last committed token, a draw from the residual where its draft was rejected,
    else the bonus, a draw from p; after it the redrafts: SJD draws from p, SCD-MC keeps each
    fed draft its test kept and redraws the others from their residual (MRS: the maximal
    coupling of old and new draft) and draws from p after the fed drafts, SCD-Gumbel takes
    argmax(log p + G) with the Gumbel noise of each slot's absolute position.

    p [B, L, V] at positions n .. n + L - 1, and the tokens it has mass on [B, L, k] under
    top-k (`probs_and_support`: the Gumbel noise is hashed there alone; None: all). Every slot
    takes at most one draw, and every draw is made at every slot (fixed shapes), each with its
    own uniform of the row's stream (keys [B, 1]: each row's stream key)."""
    B, L, V = p.shape
    D = tested.x.shape[1]
    slots = torch.arange(L, device=p.device)
    a, rejected = tested.a, tested.rejected                                     # [B, 1]
    x = F.pad(tested.x, (0, L - D))                                             # [B, L]
    if plan.method == "scd-mc":
        from_residual = F.pad(tested.was_fed & ~tested.kept, (0, L - D), value=False)   # MRS at every rejected draft
        keep_x = F.pad(tested.kept, (0, L - D), value=False)
    else:
        from_residual = rejected & (slots == a)                                 # the first rejection alone
        keep_x = slots < a
    if plan.method == "scd-gumbel":
        redraft = (coupling.gumbel_argmax(p, coupling.gumbel_noise(keys, tested.positions, V)) if support is None
                   else coupling.gumbel_argmax_on(p, support, keys, tested.positions))                    # [B, L]
        at_a = coupling.sample(rows_at(tested.residuals, a.clamp(max=D - 1)), u.residual.gather(1, a))  # [B, 1]
        drawn = torch.where(from_residual, at_a, redraft)
    else:
        law = torch.where(from_residual.unsqueeze(-1), F.pad(tested.residuals, (0, 0, 0, L - D)), p)  # [B, L, V]
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
    return fill_slots(after, carried, u.init[:, :D], plan)


def fill_slots(state: State, carried: torch.BoolTensor, u: torch.Tensor, plan: Plan) -> State:
    """Fill every slot without a carried draft (a suffix of the window) by the init scheme.

    random: uniform over the vocabulary (or the plan's `draft_vocab`), q = that uniform law
    (exact, and accepted far more often than a one-hot q). repeat-above / repeat-frame: the token `stride` positions back, q one-hot;
    a source that is itself an empty slot passes the copy on, so each slot copies the last
    filled position on its chain (pos - stride, pos - 2 stride, ...); a chain that leaves the
    grid's start falls back to random. The laws are written into the empty slots of
    `state.q` in place: the callers pass a q they have just made (the carried p, or a padded q).
    """
    B, D, V = state.q.shape
    pos = state.n.unsqueeze(1) + torch.arange(D, device=u.device)               # [B, D]
    empty = ~carried
    if plan.draft_vocab is None:                                                # random init: uniform over V
        draft = (u * V).long()
        q = state.q.masked_fill_(empty.unsqueeze(-1), 1.0 / V)
    else:                                                                       # uniform over the draft vocabulary
        M = plan.draft_vocab.shape[0]
        draft = plan.draft_vocab[(u * M).long()]
        uniform = torch.zeros(V, dtype=state.q.dtype, device=u.device).index_fill_(0, plan.draft_vocab, 1.0 / M)
        q = state.q.masked_fill_(empty.unsqueeze(-1), 0.0).add_(empty.unsqueeze(-1) * uniform)
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
    return fill_slots(grown, carried, pass_uniforms(state, plan.L).refill[:, :D], plan)


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


