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

With a draft tree (`Settings.tree` = (k, depth)), step 1 feeds k candidates at each of the
first `depth` draft positions: a full k-ary tree under the last committed token, in which
branch 0 of every level continues as the chain. Candidate 0 of a position is its carried
draft, the others are drawn from the same stored law q without replacement. Step 3 then
walks the tree top-down: at each node its children are tested in order by recursive
rejection sampling (`coupling.recursive_rejection`) and the first that passes is taken;
none passing commits a draw from the residual left after the last; a path that reaches a
leaf off branch 0 commits a bonus token from the leaf's p. Steps 6-7 continue along branch
0 only, with each slot's own test. The chain is the tree with k = 1.

AR is the same pass with a window of one token (no drafts: every token is a "bonus"). Rows
advance by their own accepted lengths. Every random number of row b comes from its own
counter-based stream, keyed by its seed and its pass count, so a row's tokens do not depend
on the other rows of its batch. `docs/exactness.md` states the rules this keeps and the
tests that check each.
"""
from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass
from typing import Callable, Iterator, NamedTuple, Sequence

import torch
import torch.nn.functional as F

from scd_core import coupling
from scd_core.prompts import check_prompt_length, warn_unknown
from scd_core.protocols import Session, TokenModel, can_tree, row_decoder
from scd_core.sampling import SamplingConfig, processed_probs
from scd_core.settings import INITS, MAX_WINDOW, METHODS, Settings  # noqa: F401 (re-exported)
from scd_core.trace import Iteration, Run

METHOD_LABELS = {"ar": "AR", "sjd": "SJD", "scd-mc": "SCD maximal coupling",
                 "scd-gumbel": "SCD Gumbel coupling"}
INIT_LABELS = {"random": "random (uniform)", "repeat-above": "repeat the token above",
               "repeat-frame": "repeat the previous frame (video)"}
MAX_SEED = 2**63
_STREAMS = ("accept", "residual", "fresh", "init", "refill")   # the uniforms of a pass, per slot
_TREE_STREAMS = ("sibling", "sibling-accept")   # per slot and sibling: each sibling's draw and its test
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
    def tree(self) -> tuple[int, int]:   # (k, depth); (1, 0): the chain
        return self.settings.tree

    @property
    def uses_tree(self) -> bool:     # a pass feeds a tree (step_tree), not a chain (step)
        return self.settings.uses_tree

    @property
    def line(self) -> int:           # slots of a pass: the root and the drafts of the main line (L on a chain)
        return self.settings.line

    @property
    def shape(self) -> "TreeShape":
        """The tree a pass feeds; a chain when the main line does not fit in the grid."""
        k, depth = self.tree
        if not self.uses_tree or self.line > self.N:
            return tree_shape(1, 0, min(self.line, self.N))
        return tree_shape(k, depth, self.line)

    def check_session(self, session: Session) -> None:
        """A ValueError naming `tree` if the run needs a tree and the session cannot feed one."""
        if self.uses_tree and not can_tree(session):
            raise ValueError(f"tree {self.tree[0]}x{self.tree[1]}: this model's session cannot feed a draft tree "
                             f"(it has no step_tree / keep_path); use tree=(1, 0), the plain chain")

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
    def D(self) -> int:              # draft slots (positions of the main line after the root)
        return self.line - 1

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
    accept_prob: torch.Tensor        # [B, D] min(1, p/q) of each fed draft on the main line (NaN: not fed)
    branches: torch.LongTensor | None = None   # [B, depth] candidate taken at each tree level (-1: none)
    parents: torch.LongTensor | None = None    # [B, W] parent of each fed node (None: a chain, `step`)
    path: torch.LongTensor | None = None       # [B, line] fed nodes kept: the committed path (-1 padded)


class TreeShape(NamedTuple):
    """Where the nodes of a pass's tree are fed. The main line comes first: node j < line is at
    depth j (the root, branch 0 of each tree level, then the chain), so a chain is the line
    alone. Then, level by level, the other nodes of each tree level."""
    k: int
    depth: int
    line: int
    parents: torch.LongTensor        # [W] each node's parent (-1: the root)
    levels: tuple                    # [k^d] per level d = 0 .. depth: node of each base-k index (0: on the line)
    off_slot: torch.LongTensor       # [X] draft slot of each node off the line (its level - 1)
    off_candidate: torch.LongTensor  # [X] which of its slot's candidates it carries


@functools.lru_cache(maxsize=32)
def tree_shape(k: int, depth: int, line: int) -> TreeShape:
    """The fixed tree of (k, depth) with `line` nodes on the main line. Level d's node with
    base-k index j (digits: the branch taken at each level) has the parent of index j // k
    on level d - 1 and carries candidate j % k of slot d - 1."""
    parents, levels, off_slot, off_candidate = list(range(-1, line - 1)), [[0]], [], []
    for d in range(1, depth + 1):
        level = []
        for j in range(k ** d):
            if j == 0:
                level.append(d)                            # branch 0: on the line
                continue
            level.append(len(parents))
            parents.append(levels[d - 1][j // k])
            off_slot.append(d - 1)
            off_candidate.append(j % k)
        levels.append(level)
    long = functools.partial(torch.tensor, dtype=torch.long)
    return TreeShape(k, depth, line, long(parents), tuple(long(lv) for lv in levels), long(off_slot),
                     long(off_candidate))


class Tree(NamedTuple):
    """The tree a pass fed beyond its main line (depth 0: none, a chain)."""
    shape: TreeShape
    candidates: torch.LongTensor     # [B, depth, k] candidates of each tree slot: 0 the carried draft; -1 none
    fed: torch.BoolTensor            # [B] the row was fed the tree (near the grid's end, only its line)
    u_accept: torch.Tensor           # [B, depth, k - 1] the uniforms of the siblings' tests

    @staticmethod
    def none(B: int, device) -> "Tree":
        empty = torch.zeros(B, 0, 1, device=device)
        return Tree(tree_shape(1, 0, 1), empty.long(), torch.zeros(B, dtype=torch.bool, device=device), empty)


# ----------------------------------------------------------------------------- one pass

def decode_pass(session: Session, state: State, plan: Plan) -> tuple[State, Verdict]:
    """Feed every row's window (its main line, and the tree's other nodes), one forward pass,
    then `advance`."""
    shape = plan.shape
    S = shape.line                                       # main-line tokens fed: min(line, N)
    start = (state.n - 1).clamp(max=plan.N - S)          # [B] a row near the end re-feeds committed tokens
    line = canvas_at(state, start.unsqueeze(1) + torch.arange(S, device=start.device))   # [B, S]
    offset = state.n - 1 - start                         # [B] index of the logits for position n
    rows = window_rows(offset, plan.line, S)             # [B, L] the line's logits of each slot
    if plan.uses_tree:
        tree = draft_tree(state, plan, shape, fed=offset == 0)
        fed = torch.cat([line, tree_tokens(tree, line)], 1)                      # [B, W]
        parents = shape.parents.to(start.device).expand(fed.shape[0], -1)        # [B, W]
        logits = session.step_tree(fed, parents, start)                          # [B, W, V]
        rows = torch.cat([rows, torch.arange(S, fed.shape[1], device=start.device).expand(fed.shape[0], -1)], 1)
    else:
        tree, fed, parents = Tree.none(state.n.shape[0], state.n.device), line, None
        logits = session.step(fed, start)                # [B, W, V]: logits[b, j] predicts start + j + 1
    p = processed_probs(logits, plan.sampling, rows)     # [B, L + X, V]: the line's slots, then the other nodes
    state, verdict = advance(state, p, m=S - 1 - offset, plan=plan, tree=tree)
    j = torch.arange(S, device=start.device)
    path = torch.where(tree.fed.unsqueeze(1), verdict.path[:, :S],                # [B, S] fed nodes kept
                       torch.where(j <= (offset + verdict.num_accepted).unsqueeze(1), j, -1))
    if plan.uses_tree:
        session.keep_path(path)
    return state, verdict._replace(start=start, fed=fed, parents=parents, path=path,
                                   branches=verdict.branches if plan.uses_tree else None)


def draft_tree(state: State, plan: Plan, shape: TreeShape, fed: torch.BoolTensor) -> Tree:
    """The candidates of the tree slots: each slot's carried draft, then k - 1 more drawn from
    its stored law q without replacement (SCD-Gumbel: the next largest log q + G of the slot's
    noise; the others: fresh draws from the row's "sibling" stream), so that the k candidates
    are exactly a sample of k from q without replacement, as the verification assumes."""
    B, k, depth = state.n.shape[0], shape.k, shape.depth
    first, q = state.drafts[:, :depth], state.q[:, :depth]                      # [B, depth], [B, depth, V]
    u = tree_uniforms(state, depth, k)
    if plan.method == "scd-gumbel":
        slots = torch.arange(depth, device=state.n.device)
        g = coupling.gumbel_noise(state.keys, noise_positions(state.n.unsqueeze(1), slots).expand(B, depth), q.shape[-1])
        candidates = coupling.gumbel_siblings(q, first, g, k)                    # [B, depth, k]
    else:
        candidates = coupling.sample_siblings(q, first, u["sibling"])            # [B, depth, k]
    return Tree(shape, candidates, fed, u["sibling-accept"])


def tree_tokens(tree: Tree, line: torch.LongTensor) -> torch.LongTensor:
    """[B, X] the tokens of the nodes off the main line: their candidates; a row not fed the
    tree, or a missing candidate, repeats the line's token at that depth (never tested)."""
    shape = tree.shape
    slot, which = shape.off_slot.to(line.device), shape.off_candidate.to(line.device)
    tokens = tree.candidates[:, slot, which]                                     # [B, X]
    return torch.where(tree.fed.unsqueeze(1) & (tokens >= 0), tokens, line[:, slot + 1])


def advance(state: State, p: torch.Tensor, m: torch.LongTensor, plan: Plan,
            tree: Tree | None = None) -> tuple[State, Verdict]:
    """Verify, commit, redraft, carry and fill, given p [B, L + X, V] (p at the L slots of the
    main line for positions n .. n + L - 1, then at the X other nodes of the tree), the number
    m [B] of drafts fed on the line (slots 0 .. m - 1; p is valid at slots 0 .. m) and the tree.
    AR is this pass with no drafts (L = 1, D = 0): it commits the bonus draw at slot 0.
    Each draw is made only at the slots that use it (`at_slots`): one pass sweeps the
    vocabulary at a few slots per row, not at all L."""
    B, _, V = p.shape
    L, D, N = plan.line, plan.D, plan.N
    tree = Tree.none(B, p.device) if tree is None else tree
    p_line = p[:, :L]                                                           # [B, L, V]
    slots = torch.arange(L, device=p.device)                                    # [L]
    n, m = state.n.unsqueeze(1), m.unsqueeze(1)                                 # [B, 1]
    u = pass_uniforms(state, L)                                                 # name -> [B, L]

    # verify the main line: accept x ~ q if U < min(1, p(x)/q(x)); its prefix ends at the first rejection
    x = state.drafts.clamp(min=0)                                               # [B, D]
    alpha = coupling.accept_prob(p_line[:, :D], state.q, x)                     # [B, D]
    kept = u["accept"][:, :D] < alpha
    was_fed = slots[:D] < m                                                     # [B, D]
    k = (kept & was_fed).long().cumprod(1).sum(1, keepdim=True)                 # [B, 1] up to the first rejection

    # walk the tree: where it decides (a rejection inside it, or a path off the line), it sets
    # the accepted length, and the laws of the last token
    walk = walk_tree(p, state.q, tree, u)
    k = torch.where(walk.decides, walk.length, k)                               # [B, 1] accepted path length
    resampled = torch.where(walk.decides, walk.length < tree.shape.depth, k < m)   # [B, 1]
    c = (k + 1).clamp(max=N - n)                                                # [B, 1] committed: no bonus past the grid

    # the last committed token: a draw from the residual at the first rejection (after every
    # candidate of the node), or the bonus, a draw from p after the last accepted node
    at_k = (rows_of(k), k)
    p_stop = torch.where(walk.decides.unsqueeze(-1), walk.p_last, p_line[at_k])                  # [B, 1, V]
    q_stop = torch.where(walk.decides.unsqueeze(-1), walk.q_last, state.q[rows_of(k), k.clamp(max=max(D - 1, 0))]
                         if D else p_stop)
    residual = at_slots(resampled, coupling.resample, p_stop, q_stop, u["residual"].gather(1, k))
    p_bonus = bonus_law(torch.where(walk.decides.unsqueeze(-1), walk.p_leaf, p_line[at_k]))   # [B, 1, V]
    bonus = draw_from_p(~resampled, p_bonus, u["fresh"].gather(1, k), state.keys, noise_positions(n, slots).gather(1, k), plan)
    last = torch.where(resampled, residual, bonus)                              # [B, 1]

    # commit the accepted path's tokens, then the last token
    path_tokens = F.pad(torch.cat([walk.tokens, x[:, walk.tokens.shape[1]:]], 1), (0, L - D))   # [B, L]
    values = torch.where(slots < k, path_tokens, last)                          # [B, L] for positions n + slot
    tokens = commit(state.tokens, n, c, values)                                 # [B, N]

    # redraft the main line's slots after the commit from this pass's p (its own test at each
    # slot, never a sibling's): SJD and SCD-Gumbel draw from p; SCD-MC keeps the MRS output
    # of each fed draft (the maximal coupling with it) and draws from p at the slot after them
    redrafted = (slots >= c) & (slots <= m)                                     # [B, L] old slots redrafted
    if plan.method == "scd-mc":
        p_res, q_res = redraft_residual_laws(p_line[:, :D], state.q, walk.line_p_last, walk.line_q_last)
        mrs_residual = at_slots(~kept & was_fed & (slots[:D] >= c), coupling.resample, p_res, q_res,
                                u["residual"][:, :D])
        mrs_tokens = F.pad(torch.where(kept, x, mrs_residual), (0, L - D))      # [B, L]
        redraft = torch.where(slots < m, mrs_tokens, draw_from_p(redrafted & (slots >= m), p_line, u["fresh"],
                                                                 state.keys, noise_positions(n, slots), plan))
    else:
        redraft = draw_from_p(redrafted, p_line, u["fresh"], state.keys, noise_positions(n, slots), plan)   # [B, L]

    # carry the redrafts with the law each was drawn from
    src = (c + slots[:D]).clamp(max=L - 1)                                      # [B, D] old slot of each new slot
    carried = (c + slots[:D] <= m) & (n + c + slots[:D] < N)                    # [B, D] slots with a redraft
    drafts = torch.where(carried, redraft.gather(1, src), -1)                   # [B, D]
    q = redraft_laws(p_line, state.q, kept)[rows_of(src), src]                  # [B, D, V]: whole rows copied

    # fill the empty slots by the init scheme, with the law each draft is drawn from
    after = State(tokens, state.n + c.squeeze(1), drafts, q, state.keys, state.passes + 1)
    after = fill_empty(after, carried, u["init"][:, :D], plan)
    accept_prob = torch.where(was_fed, alpha, float("nan"))                     # [B, D]
    path = torch.where(walk.decides, walk.nodes, torch.where(slots <= k, slots, -1))   # [B, L] from the root
    return after, Verdict(None, None, k.squeeze(1), resampled.squeeze(1), accept_prob, walk.branches, None, path)


class Walk(NamedTuple):
    """What the tree walk decided, per row (`decides` False: the main line decides)."""
    decides: torch.BoolTensor        # [B, 1] the row's path stopped inside the tree or left the main line
    length: torch.LongTensor         # [B, 1] tree levels accepted on the path
    branches: torch.LongTensor       # [B, depth] candidate taken at each level (-1: none; all -1 off the tree)
    tokens: torch.LongTensor         # [B, depth] the path's token at each tree slot (the line's draft elsewhere)
    nodes: torch.LongTensor          # [B, L] fed node of the path at each depth (L = line slots)
    p_last: torch.Tensor             # [B, 1, V] the stop's last test: p and q, whose residual the stop draws from
    q_last: torch.Tensor             # [B, 1, V]
    p_leaf: torch.Tensor             # [B, 1, V] p after the path's leaf (its bonus)
    line_p_last: torch.Tensor        # [B, depth, V] the last test at each tree slot under the main line
    line_q_last: torch.Tensor        # [B, depth, V]


def walk_tree(p: torch.Tensor, q: torch.Tensor, tree: Tree, u: dict[str, torch.Tensor]) -> Walk:
    """Test every node's children by recursive rejection (every node of a level at once: all
    share the level's candidates), then follow the first child that passed from the root
    (`choose_path`). p [B, L + X, V] as in `advance`; q [B, D, V] the stored laws."""
    shape, cand = tree.shape, tree.candidates                                   # [B, depth, k]
    B, V, L, depth = p.shape[0], p.shape[2], shape.line, shape.depth
    device = p.device
    tests, lasts = [], []
    for d in range(depth):                                                      # slot d, level d + 1
        parents = p[:, shape.levels[d].to(device)]                              # [B, P, V] p after each level-d node
        P = parents.shape[1]
        u_level = torch.cat([u["accept"][:, d: d + 1], tree.u_accept[:, d]], 1)  # [B, k]
        passed, p_last, q_last = coupling.recursive_rejection(
            parents, q[:, d: d + 1].expand(B, P, V), cand[:, d: d + 1].expand(B, P, -1), u_level.unsqueeze(1).expand(B, P, -1))
        tests.append(passed & tree.fed.view(B, 1, 1))
        lasts.append((p_last, q_last))
    branches = choose_path(tests, B, device)                                    # [B, depth]
    length = (branches >= 0).sum(1, keepdim=True)                               # [B, 1]
    off = tree.fed.unsqueeze(1) & (branches > 0).any(1, keepdim=True)           # [B, 1] left the main line
    decides = tree.fed.unsqueeze(1) & ((length < depth) | off)

    # the path's node at each level, and the laws at its stop
    index = torch.zeros(B, dtype=torch.long, device=device)                     # base-k index on the level
    nodes = torch.full((B, L), -1, dtype=torch.long, device=device)
    nodes[:, 0] = 0
    p_last = p_leaf = p[:, :1]
    q_last = q[:, :1] if q.shape[1] else p[:, :1]
    rows = torch.arange(B, device=device)
    for d in range(depth + 1):
        here = (length.squeeze(1) == d).view(B, 1, 1)                           # the path stops after level d
        if d < depth:
            p_last = torch.where(here, lasts[d][0][rows, index].unsqueeze(1), p_last)
            q_last = torch.where(here, lasts[d][1][rows, index].unsqueeze(1), q_last)
        else:
            p_leaf = p[rows, shape.levels[d].to(device)[index]].unsqueeze(1)
        if d < depth:
            index = index * shape.k + branches[:, d].clamp(min=0)
            nodes[:, d + 1] = torch.where(branches[:, d] >= 0, shape.levels[d + 1].to(device)[index], -1)
    taken = cand.gather(2, branches.clamp(min=0).unsqueeze(-1)).squeeze(-1)     # [B, depth]
    tokens = torch.where(branches >= 0, taken, cand[..., 0].clamp(min=0))
    if depth:
        line_p_last = torch.stack([pl[:, 0] for pl, _ in lasts], 1)            # [B, depth, V]
        line_q_last = torch.stack([ql[:, 0] for _, ql in lasts], 1)
    else:
        line_p_last = line_q_last = p.new_zeros(B, 0, V)
    return Walk(decides, length, branches, tokens, nodes, p_last, q_last, p_leaf, line_p_last, line_q_last)


def choose_path(tests: list[torch.BoolTensor], B: int, device) -> torch.LongTensor:
    """[B, depth] the candidate taken at each tree level, -1 from where none passed: from the
    root down, the first child that passed its test at the node reached (tests: per level,
    [B, P, k] whether child i of each node on the level passed)."""
    index = torch.zeros(B, dtype=torch.long, device=device)
    alive = torch.ones(B, dtype=torch.bool, device=device)
    rows, branches = torch.arange(B, device=device), []
    for passed in tests:
        here = passed[rows, index]                                              # [B, k] children of the node reached
        alive = alive & here.any(1)
        first = here.long().argmax(1)                                           # the first that passed
        branches.append(torch.where(alive, first, -1))
        index = index * passed.shape[2] + first
    return torch.stack(branches, 1) if branches else torch.zeros(B, 0, dtype=torch.long, device=device)


def draw_from_p(where: torch.BoolTensor, p: torch.Tensor, u: torch.Tensor, keys: torch.LongTensor,
                positions: torch.LongTensor, plan: Plan) -> torch.LongTensor:
    """[B, S] draws from p [B, S, V] at the slots where `where` [B, S] holds (-1 elsewhere):
    SCD-Gumbel argmax(log p + G) with G the noise of each slot's position (coupled across
    passes), the others by inverse CDF with u [B, S] (independent)."""
    B, S = where.shape
    if plan.method == "scd-gumbel":
        return at_slots(where, gumbel_draw, p, keys.expand(B, S), positions.expand(B, S))
    return at_slots(where, coupling.sample, p, u)


def bonus_law(p: torch.Tensor) -> torch.Tensor:
    """The law [..., V] of the bonus token after the last accepted node, given the p there:
    that p (rule 3: the bonus is a draw from p like any other token, never an unverified
    guess)."""
    return p


def redraft_residual_laws(p: torch.Tensor, q: torch.Tensor, sibling_p: torch.Tensor,
                          sibling_q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The (p, q) [B, D, V] whose residual a carried draft rejected by its slot's MRS test is
    redrawn from (SCD-MC): the slot's own main-line test, p and the stored q (rule 13), never
    what the tree's sibling tests left (sibling_p, sibling_q [B, depth, V])."""
    return p, q


def at_slots(where: torch.BoolTensor, draw, *per_slot: torch.Tensor) -> torch.LongTensor:
    """[B, S] draw(*rows) at the slots where `where` [B, S] holds, -1 elsewhere: each tensor
    of `per_slot` ([B, S, ...]) is gathered at those R slots first ([R, ...]), so the work
    is R rows, not B x S."""
    out = torch.full(where.shape, -1, dtype=torch.long, device=where.device)
    out[where] = draw(*(t[where] for t in per_slot))
    return out


def gumbel_draw(p: torch.Tensor, keys: torch.LongTensor, positions: torch.LongTensor) -> torch.LongTensor:
    """[R] argmax(log p + G) of rows p [R, V], G the Gumbel noise of (row key, position) [R]."""
    return coupling.keyed_gumbel_argmax(p, keys, positions)


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


def tree_uniforms(state: State, depth: int, k: int) -> dict[str, torch.Tensor]:
    """This pass's uniforms [B, depth, k - 1] of the tree's siblings, per use (`_TREE_STREAMS`):
    sibling i of slot s of a use draws from its own sub-stream of the row's key at counter
    (pass count, slot), so the row's other numbers (`pass_uniforms`) are those of a chain."""
    counters = state.passes.unsqueeze(1) * STREAM_SLOTS + torch.arange(depth, device=state.n.device)   # [B, depth]
    out = {}
    for use, name in enumerate(_TREE_STREAMS):
        per_sibling = [coupling.uniforms(coupling.stream_keys(state.keys, 1 + use * STREAM_SLOTS + i), counters)
                       for i in range(1, k)]
        out[name] = torch.stack(per_sibling, 2) if per_sibling else counters.new_zeros(counters.shape + (0,)).double()
    return out


def resize(state: State, plan: Plan) -> State:
    """The state for a new window (`plan.window`, 1: AR; or a new tree: its `plan.line`) before the next pass: drafts past
    it are dropped; new slots are filled by the init scheme from the row's "refill" stream.
    Exact for any window chosen before the pass draws its randomness."""
    D_old, D = state.drafts.shape[1], plan.D
    if D <= D_old:
        return State(state.tokens, state.n, state.drafts[:, :D], state.q[:, :D], state.keys, state.passes)
    grown = State(state.tokens, state.n, F.pad(state.drafts, (0, D - D_old), value=-1),
                  F.pad(state.q, (0, 0, 0, D - D_old)), state.keys, state.passes)
    carried = grown.drafts >= 0                                                 # the old drafts (a prefix)
    return fill_empty(grown, carried, pass_uniforms(state, plan.line)["refill"][:, :D], plan)


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
    p = processed_probs(first_logits.unsqueeze(1), plan.sampling, window_rows(empty.n, plan.line, 1))
    state, verdict = advance(empty, p, torch.zeros_like(empty.n), plan)
    return state, verdict._replace(start=torch.full_like(empty.n, -1), fed=empty.tokens[:, :0], branches=None)


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
             tree: tuple[int, int] | None = None, settings: Settings | None = None) -> Run:
    """Decode one grid of tokens per prompt; returns a Run with tokens, NFE, images, trace.
    The keywords left out take their value from `settings` (by default `Settings()`:
    scd-mc, window 16, random init, temperature 1, no top-k/top-p, no guidance, no tree).
    `tree=(k, depth)` feeds k candidates at each of the first depth draft positions."""
    settings = settings_of(settings, method=method, window=window, init=init, temperature=temperature,
                           top_k=top_k, top_p=top_p, cfg_scale=cfg_scale, tree=tree)
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
           tree: tuple[int, int] | None = None, settings: Settings | None = None) -> Iterator[Iteration]:
    """Yield one `Iteration` record per forward pass (index 0 is the prefill). The arguments
    are checked before the first record is asked for (keywords as in `generate`)."""
    settings = settings_of(settings, method=method, window=window, init=init, temperature=temperature,
                           top_k=top_k, top_p=top_p, cfg_scale=cfg_scale, tree=tree)
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
        plan.check_session(session.session)
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


    def step_tree(self, tokens: torch.LongTensor, parents: torch.LongTensor, start: torch.LongTensor) -> torch.Tensor:
        t = time.perf_counter()
        logits = self.session.step_tree(tokens, parents, start)
        _sync(logits)
        self.seconds += time.perf_counter() - t
        return logits

    def keep_path(self, nodes: torch.LongTensor) -> None:
        t = time.perf_counter()
        self.session.keep_path(nodes)
        self.seconds += time.perf_counter() - t


def _sync(t: torch.Tensor) -> None:
    if t.is_cuda:
        torch.cuda.synchronize(t.device)
