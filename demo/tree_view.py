"""A pass's draft tree as the live view shows it: at each tree level, the k candidates fed
under the node the accepted path had reached, which were rejected, which one was taken and
which were never tested. Read from the pass's record alone (`window_tokens`, `parents`,
`branches`: `scd_core.trace.Iteration`); nothing here touches the engine.

Verification tests a node's children in order and takes the first accepted one, so at each
level the candidates before the taken one were rejected and those after it were not needed.
A level where none was accepted ends the pass with a residual sample there."""
from __future__ import annotations

from dataclasses import dataclass

from demo.pictures import ACCEPTED, OUTLINE, RESAMPLED, STYLE
from scd_core.trace import Iteration

TAKEN, REJECTED, UNTESTED = "taken", "rejected", "not needed"


@dataclass(frozen=True)
class Level:
    """One tree level of one pass: the draft position and its candidates (token, verdict)."""

    position: int
    candidates: tuple[tuple[int, str], ...]
    residual: int | None = None         # the token the residual drew when none was taken


def children(it: Iteration, node: int, row: int = 0) -> list[int]:
    """The nodes fed under `node`, in the order they are tested: its main-line child first
    (the chain's next node, for a node on the main line), then the other candidates."""
    parents = it.parents[row].tolist()
    line = it.line
    off = [m for m in range(line, len(parents)) if parents[m] == node]
    return ([node + 1] if node + 1 < line else []) + off


def tree_levels(it: Iteration, row: int = 0) -> list[Level]:
    """The tree levels this pass verified for row `row` ([] for a chain, the prefill, a
    finished row, or a window moved back near the grid's end, where the tree's levels fall on
    committed tokens fed again): at each, the candidates under the node reached so far."""
    if it.parents is None or it.branches is None or it.branches.shape[1] == 0 or \
            not bool(it.active[row]) or int(it.start[row]) + 1 != int(it.n_before[row]):
        return []
    branches = it.branches[row].tolist()
    tokens = it.window_tokens[row].tolist()
    committed = it.committed_tokens[row].tolist()
    levels, node, n = [], 0, int(it.n_before[row])
    for d, taken in enumerate(branches):
        kids = children(it, node, row)
        if not kids or n + d >= it.num_tokens:
            break
        verdicts = tuple((tokens[m], TAKEN if c == taken else REJECTED if taken < 0 or c < taken else UNTESTED)
                         for c, m in enumerate(kids))
        levels.append(Level(n + d, verdicts, residual=committed[d] if taken < 0 else None))
        if taken < 0:
            break
        node = kids[taken]
    return levels


def last_sibling(records, row: int = 0) -> Iteration | None:
    """The last of these passes whose accepted path took a sibling (None: none did)."""
    return next((it for it in reversed(records) if bool(it.took_sibling[row])), None)


def _box(token: int, verdict: str) -> str:
    colour = {TAKEN: OUTLINE[ACCEPTED], REJECTED: OUTLINE[RESAMPLED], UNTESTED: (148, 163, 184)}[verdict]
    fill = {TAKEN: STYLE[ACCEPTED][1], REJECTED: STYLE[RESAMPLED][1], UNTESTED: (241, 245, 249)}[verdict]
    alpha = 0.18 if verdict != UNTESTED else 1.0
    return (f'<span class="tree-cand" style="display:inline-block;margin:2px 6px 2px 0;padding:1px 6px;'
            f'border:2px {"dashed" if verdict == UNTESTED else "solid"} rgb{colour};'
            f'background:rgba({fill[0]},{fill[1]},{fill[2]},{alpha});white-space:nowrap">'
            f'token {token} <small>{verdict}</small></span>')


def tree_html(it: Iteration | None, tree: tuple[int, int], row: int = 0, last: bool = False) -> str:
    """The pass's tree in words and boxes ("" when the run has no tree). `tree`: its (k, depth);
    `last`: the pass is shown as the run's last one that took a sibling."""
    k, depth = tree
    if depth == 0 or k == 1:
        return ""
    head = (f"<b>Draft tree {k} x {depth}</b>: {k} candidates at each of the first {depth} draft "
            f"positions, tested in order; the first accepted is taken (each box: a candidate's token "
            f"id in the model's vocabulary).")
    levels = tree_levels(it, row) if it is not None else []
    if not levels:
        return f'<div id="tree-now" style="font-size:0.9em">{head}</div>'
    lines = []
    for lv in levels:
        end = f" → none accepted: the residual drew <b>token {lv.residual}</b>" if lv.residual is not None else ""
        lines.append(f'<div>position {lv.position}: {"".join(_box(t, v) for t, v in lv.candidates)}{end}</div>')
    which = f"Pass {it.index}" + (", the run's last that took a sibling" if last else "")
    note = (": a sibling was taken, where a chain would have stopped at its first rejection"
            if bool(it.took_sibling[row]) else "")
    return (f'<div id="tree-now" style="font-size:0.9em;line-height:1.7">{head}<br>'
            f'<b>{which}</b>{note}.{"".join(lines)}</div>')
