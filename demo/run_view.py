"""A Generate run as the page shows it: what it accumulates pass by pass for the pictures and
charts (`TraceStats`), and its status line, summary table and replay caption. Every metric
is the trace's (`scd_core.trace`), computed from the run's records."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from demo.labels import METHOD_LABELS
from demo.pictures import F_CHANGED, F_EMPTY, F_FRESH, F_KEPT
from demo.texts import FILM_TITLE
from scd_core import trace
from scd_core.race import Sample, sample_of
from scd_core.settings import tree_nodes
from scd_core.trace import Iteration

METRIC_HELP = {
    "nfe": "NFE: model forward passes so far, the prefill included (a CFG pair counts once)",
    "acceptance": "acceptance rate = accepted drafts / verified drafts (never above 1)",
    "mean_len": "mean accepted length = accepted drafts per forward pass (prefill excluded); "
                "each pass commits one token more (the residual or bonus token)",
    "compression": "step compression = AR NFE / this NFE (AR needs one pass per token)",
    "speedup": "latency speed-up = AR wall time (the median of your warm AR runs) / this wall time, same process",
    "stability": "draft stability = carried-over drafts whose token did not change from one pass "
                 "to the next / carried-over drafts",
    "sibling": "sibling share = passes whose accepted path took a candidate other than the first at "
               "some tree level / passes: where a chain would have stopped at its first rejection",
}


@dataclass
class TraceStats:
    """What the page shows of one row, gathered as records arrive (O(N) each): the per-pass
    curves its charts draw, which pass committed each position, how long each draft stayed
    unchanged, and the filmstrip's draft states.

    The run's metrics (acceptance rate, mean accepted length, draft stability, step
    compression) are the trace's own (`scd_core.trace`), computed from the records kept here.
    """

    grid: tuple[int, ...]
    row: int = 0
    method: str = ""
    records: list[Iteration] = field(default_factory=list)
    index: list[int] = field(default_factory=list)
    nfe: list[int] = field(default_factory=list)
    committed: list[int] = field(default_factory=list)   # cumulative tokens committed
    accepted: list[int] = field(default_factory=list)    # accepted drafts this pass (the trace's count)
    verified: list[int] = field(default_factory=list)    # verified drafts this pass (the trace's count)
    new_kind: list[str] = field(default_factory=list)    # "resampled" / "bonus" / "sample" / ""
    carried: list[int] = field(default_factory=list)     # drafts fed and still drafts after the pass
    changed: list[int] = field(default_factory=list)     # of those, drafts whose token changed
    committed_at: np.ndarray | None = None                # [N] pass that committed the position
    streak: np.ndarray | None = None                      # [N] current run of unchanged passes
    longest_unchanged: np.ndarray | None = None           # [N] longest such run
    film: list[np.ndarray] = field(default_factory=list)  # [D] draft states after each pass
    counts: trace.DraftCounts = field(default_factory=trace.DraftCounts)   # over the records so far
    _canvas: np.ndarray | None = None                     # [N] the last record's canvas (this row)
    _sample: tuple[int, Sample] | None = None

    @property
    def num_tokens(self) -> int:
        return int(np.prod(self.grid))

    def add(self, it: Iteration) -> None:
        n, row = self.num_tokens, self.row
        if self.committed_at is None:
            self.committed_at = np.full(n, -1, np.int64)
            self.streak = np.zeros(n, np.int64)
            self.longest_unchanged = np.zeros(n, np.int64)
        nb, na = int(it.n_before[row]), int(it.n_after[row])
        self.records.append(it)
        self.method = it.method
        self.index.append(it.index)
        self.nfe.append(int(it.nfe))
        self.committed.append(na)
        counts = trace.DraftCounts.of([it], row)
        self.counts = self.counts + counts
        self.accepted.append(counts.accepted)
        self.verified.append(counts.verified)
        self.new_kind.append("" if na <= nb else "resampled" if bool(it.resampled[row])
                             else "bonus" if bool(it.bonus[row]) else "sample")
        self.carried.append(counts.carried)
        self.changed.append(counts.carried - counts.unchanged)
        self.committed_at[nb:na] = it.index
        self._track_drafts(it, na)

    def _track_drafts(self, it: Iteration, na: int) -> None:
        """Each draft after the pass against the token its position held on the previous
        record's canvas (what this pass was fed there): unchanged, changed (flicker), fresh
        from the init scheme, or none (past the grid)."""
        row, n = self.row, self.num_tokens
        canvas = it.canvas[row].numpy()
        drafts = it.drafts_after[row].numpy()
        pos = na + np.arange(drafts.shape[0])
        inside = pos < n
        carried = it.carried[row].numpy()
        was = np.full(drafts.shape[0], -1, canvas.dtype)
        if self._canvas is not None:
            was[inside] = self._canvas[pos[inside]]
        self._canvas = canvas
        kept = carried & (drafts == was)
        film = np.full(drafts.shape[0], F_EMPTY, np.int8)
        film[inside & ~carried] = F_FRESH
        film[carried & ~kept] = F_CHANGED
        film[kept] = F_KEPT
        self.film.append(film)
        streak = np.zeros(n, np.int64)
        streak[pos[inside]] = np.where(kept[inside], self.streak[pos[inside]] + 1,
                                       (drafts[inside] >= 0).astype(np.int64))
        self.streak = streak
        self.longest_unchanged = np.maximum(self.longest_unchanged, streak)

    def sample(self) -> Sample:
        """This row's metrics over the records so far, by the trace's definitions."""
        if self._sample is None or self._sample[0] != len(self.records):
            self._sample = (len(self.records), sample_of(self.records, self.row, self.num_tokens,
                                                            self.counts))
        return self._sample[1]

    @property
    def running_acceptance(self) -> np.ndarray:
        """The trace's acceptance rate of the records up to each pass (its two counts add up
        over records), NaN before any draft was verified."""
        acc, ver = np.cumsum(self.accepted), np.cumsum(self.verified)
        return np.where(ver > 0, acc / np.maximum(ver, 1), np.nan)

    @property
    def done(self) -> bool:
        return bool(self.committed) and self.committed[-1] >= self.num_tokens


# --------------------------------------------------------------------------- text

SUMMARY_WAITING = ("*When the run ends: tokens committed per pass, which pass committed each token, how long each "
                   "draft stayed unchanged, and here the run's metrics, each with its definition.*")
REPLAY_WAITING = "Nothing to replay yet: generate an image first."


def film_title(method: str | None) -> str:
    """The drafts strip's title: what it shows, that it comes at the end (`method` None: no
    run has ended), or why there is none (AR)."""
    if method is None:
        return f"{FILM_TITLE} (drawn when the run ends)"
    if method == "ar":
        return "Drafts after each pass: none, AR feeds no drafts (each pass samples one token from p)"
    return FILM_TITLE

def shared_note(others: int) -> str:
    """How many other samples shared a run's forward passes, in words ("" when none)."""
    return f"passes shared with up to {others} other sample{'s' if others != 1 else ''}" if others else ""


def pace_note(pace: float, shown: float, running: bool = True) -> str:
    """Slow motion in words: while a run goes (`running`), the seconds each pass stays on
    screen and how to turn it off; after, only a pace asked for below the shortest the page
    shows a pass, raised to it ("" otherwise, and at full speed)."""
    if pace <= 0 or not running and pace >= shown:
        return ""
    raised = f"{pace:g} s asked, each pass shown {shown:g} s at least" if pace < shown else f"{shown:g} s a pass"
    return f"slow motion: {raised} (0 turns it off: full speed)"


def plural(count: int, word: str) -> str:
    """'1 draft', '2 drafts', '0 drafts', '2 passes'."""
    return f"{count} {word}{'' if count == 1 else 'es' if word.endswith('s') else 's'}"


def nfe_words(nfe: int) -> str:
    """NFE with what it is, where the status first names it."""
    return f"NFE {nfe} (forward passes)"


def tree_note(tree: tuple[int, int], counts: trace.DraftCounts) -> str:
    """What a run's draft tree did, in words ("" on the chain)."""
    k, depth = tree
    if k == 1 or depth == 0:
        return ""
    return (f"tree {k} x {depth}: a sibling taken in {counts.siblings} of {counts.passes} passes "
            f"({counts.sibling_share:.0%})")


def tree_vs_chain(tree: tuple[int, int], window: int, nfe: int, chain_nfe: int | None) -> str:
    """What a draft tree cost against the chain, in words ("" on the chain): its passes against
    `chain_nfe` (this session's chain run of the same method, seed and window) when there is
    one, and the window slots its siblings take from the chain of drafts."""
    k, depth = tree
    if k == 1 or depth == 0:
        return ""
    siblings = tree_nodes(tree) - depth
    slots = (f"its {siblings} sibling candidates take {siblings} of the window's {window} slots, so a pass "
             f"can commit at most {window - siblings} tokens where the chain commits up to {window}")
    if chain_nfe is None:
        return f"{slots}; run the chain with the same seed and window to see whether the tree saves passes"
    verdict = "fewer" if nfe < chain_nfe else "more" if nfe > chain_nfe else "as many"
    return (f"NFE {nfe} against {chain_nfe} for this session's chain run (same method, seed and window): "
            f"{verdict} passes with the tree; {slots}")


def run_status(label: str, stats: TraceStats, wall: float, state: str, shared: int = 0,
               shown_for: float | None = None, pace_raised: str = "",
               tree: tuple[int, int] = (1, 0), chain_nfe: int | None = None, model: str = "") -> str:
    """One line: method, tokens, NFE; `state` is "running", "done" or "stopped"; `shared`: the
    most other samples (other visitors' rows) that one of its passes decoded with it;
    `shown_for`: seconds slow motion took to show the run (None at full speed); `pace_raised`:
    `pace_note`'s words; `tree`: the run's (k, depth), `chain_nfe` the NFE of this session's chain
    run to compare it with (None: none); `model`: the model's name, said after the method's.
    AR has no drafts: nothing is said about acceptance."""
    n, total, nfe = stats.committed[-1], stats.num_tokens, stats.nfe[-1]
    raised = f" · {pace_raised}" if pace_raised else ""
    who = f"**{label}**" + (f" on **{model}**" if model else "")
    if state == "stopped":
        return f"{who} · **stopped at NFE {nfe}, {n}/{total} tokens** (NFE: forward passes)" + raised
    head = f"{who} · {n}/{total} tokens · {nfe_words(nfe)}"
    if state != "done":
        live = f" · {trace.step_compression(n, max(nfe, 1)):.1f} tokens per pass so far"    # AR: 1
        if stats.method != "ar" and stats.counts.verified:
            live += f" · acceptance so far {stats.counts.acceptance_rate:.2f}"
        return head + live + (f" · decoding, {shared_note(shared)}…" if shared else " · decoding…") + raised
    sample = stats.sample()
    timing = f"decoded in {wall:.2f} s" + (f"; shown over {shown_for:.1f} s in slow motion"
                                          if shown_for is not None else "")
    drafts = (" · no drafts (AR)" if stats.method == "ar" else
              f" · acceptance {sample.acceptance_rate:.2f} · mean accepted length "
              f"{sample.mean_accepted_length:.2f}")
    tree_done = tree_note(tree, stats.counts)
    tree_done = f" · {tree_done}" if tree_done else ""
    if tree_done and chain_nfe is not None:
        tree_done += f"; NFE {nfe} against {chain_nfe} on the chain"
    return (head + f" · **done** · {timing}" + (f" ({shared_note(shared)})" if shared else "")
            + (" · one pass per token (step compression 1.00x)" if stats.method == "ar" else
               f" · {sample.step_compression:.2f}x fewer passes than AR (step compression)") + drafts + tree_done
            + raised)


def spoken(label: str, model: str, stats: TraceStats, state: str, first: bool = False) -> str:
    """The status in a few words for the live region (`texts.said`): a run started (`first`),
    where it stands, done or stopped."""
    n, total, nfe = stats.committed[-1], stats.num_tokens, stats.nfe[-1]
    if state == "stopped":
        return f"Generate stopped: {n} of {total} tokens after {plural(nfe, 'pass')}."
    if state == "done":
        fewer = "one pass per token" if stats.method == "ar" else \
            f"{stats.sample().step_compression:.2f} times fewer than AR"
        return f"Generate done: {label} on {model}, {total} tokens in {plural(nfe, 'pass')}, {fewer}."
    if first:
        return f"Generate started: {label} on {model}, {total} tokens to decode."
    return f"Generate: {n} of {total} tokens after {plural(nfe, 'pass')}."


def latency_words(wall: float, ar_walls: Sequence[float], first: bool) -> str:
    """The latency speed-up of a run that ran alone, in words: against the median of this
    session's warm AR runs (`ar_walls`: never a first run on the model, `streaming.first_run`),
    said as one run each where there is one; none for the session's `first` run (its worker
    may have warmed up in it)."""
    if first:
        return ("not measured: your first run on this model here, which may include warming it up "
                "(a first run can take several times longer); run it again")
    if not ar_walls or wall <= 0:
        return "run AR (after a first run on this model) to measure it; a run that shared its passes does not count"
    ar = statistics.median(ar_walls)
    ratio = f"{trace.latency_speedup(ar, wall):.2f}x"
    if len(ar_walls) == 1:
        return (f"{ratio}, one run each (this one {wall:.2f} s, your AR run {ar:.2f} s): the same run can "
                "take twice as long the next time; run AR again for a median")
    return (f"{ratio} against the median of your last {len(ar_walls)} AR runs, {ar:.2f} s "
            f"({min(ar_walls):.2f}–{max(ar_walls):.2f}); this run once, {wall:.2f} s")


def run_summary(label: str, sample: Sample, wall: float, ar_walls: Sequence[float] | float | None, device: str,
                shared: int = 0, complete: bool = True, tree: tuple[int, int] = (1, 0),
                counts: trace.DraftCounts | None = None, window: int = 0, chain_nfe: int | None = None,
                first: bool = False) -> str:
    """The ended run's metrics as a markdown table, each with its definition. `ar_walls`: this
    session's warm AR runs that ran alone (a number: one); `first`: this is the session's first
    run on the model (`latency_words`); `shared` as for `run_status`: a run that shared its
    passes has no latency of its own (the race times each method alone); a stopped run
    (`complete` False) has neither a step compression nor a latency speed-up. `window` and
    `chain_nfe` say what a draft tree cost against the chain (`tree_vs_chain`)."""
    stopped = f"not measured: stopped after {sample.committed} tokens"
    ar_walls = [ar_walls] if isinstance(ar_walls, (int, float)) else list(ar_walls or [])
    if not complete:
        speedup = stopped
    elif shared:
        speedup = f"not measured: this run's {shared_note(shared)} (the Race times each method alone)"
    elif label == METHOD_LABELS["ar"]:
        speedup = "1.00x: AR is the reference"
    else:
        speedup = latency_words(wall, ar_walls, first)
    timed = f"engine time of this run on {device}" + (
        f"; its {shared_note(shared)}, so it includes their work" if shared else "")
    ar = label == METHOD_LABELS["ar"]
    no_drafts = "no drafts (AR)"
    tree_row = tree_note(tree, counts) if counts is not None else ""
    if tree_row and complete:
        tree_row += "; " + tree_vs_chain(tree, window, sample.nfe, chain_nfe)
    rows = [("NFE", sample.nfe, METRIC_HELP["nfe"]),
            ("step compression", f"{sample.step_compression:.2f}x" if complete else stopped,
             METRIC_HELP["compression"]),
            ("acceptance rate", no_drafts if ar else f"{sample.acceptance_rate:.3f}", METRIC_HELP["acceptance"]),
            ("mean accepted length", no_drafts if ar else f"{sample.mean_accepted_length:.2f}",
             METRIC_HELP["mean_len"]),
            ("draft stability", no_drafts if ar else f"{sample.draft_stability:.3f}", METRIC_HELP["stability"]),
            *([("draft tree", tree_row, METRIC_HELP["sibling"])] if tree_row else []),
            ("wall time", f"{wall:.2f} s", timed),
            ("latency speed-up", speedup, METRIC_HELP["speedup"])]
    return "| metric | value | definition |\n|---|---|---|\n" + \
        "\n".join(f"| {a} | {b} | {c} |" for a, b, c in rows)


@dataclass(frozen=True)
class DraftFact:
    """What a pass did with one draft it fed (a chain's), for the replay's map and its table."""

    position: int
    token: int                    # the draft x
    p: float                      # p(x) at this pass
    q: float                      # q(x), the law x was drawn from
    keep: float                   # min(1, p/q)
    test: str                     # "accepted", "rejected" or "untested" (fed after the first rejection)
    residual: int | None          # the token the residual drew where it was rejected
    next_draft: int | None        # the next pass's draft at this position (None: none there)


def draft_facts(it: Iteration, row: int = 0) -> list[DraftFact]:
    """Each draft a chain's pass fed, in window order, with what the pass did with it; [] for a
    tree's pass (its nodes share positions) and for AR."""
    if it.parents is not None:
        return []
    fed, a = it.window_tokens[row].tolist(), it.accept_prob[row].float().tolist()
    p_x, q_x = it.p_draft[row].float().tolist(), it.q_draft[row].float().tolist()
    n_before, n_after, accepted = int(it.n_before[row]), int(it.n_after[row]), int(it.num_accepted[row])
    start = int(it.start[row])         # the window's first position (held at the grid's end by the last passes)
    committed, nxt = it.tokens_after[row].tolist(), it.drafts_after[row].tolist()
    out = []
    for i, keep in enumerate(a):
        pos = n_before + i
        if pos >= len(committed) or np.isnan(keep):
            continue
        test = "accepted" if i < accepted else "rejected" if i == accepted else "untested"
        again = nxt[pos - n_after] if pos >= n_after and pos - n_after < len(nxt) and nxt[pos - n_after] >= 0 \
            else None
        out.append(DraftFact(pos, fed[pos - start], p_x[i], q_x[i], keep, test,
                             committed[pos] if test == "rejected" else None, again))
    return out


def place(position: int, grid: tuple[int, ...]) -> str:
    """A position as the maps number it, from 0: "row r, column c" (a video: its frame first)."""
    *frames, h, w = grid
    where = f"row {position // w % h}, column {position % w}"
    return f"frame {position // (h * w)}, {where}" if frames and frames[0] > 1 else where


def draft_table(it: Iteration, grid: tuple[int, ...], method: str) -> str:
    """The replayed pass's drafts as a table (what pointing at the map says, for the keyboard
    and a screen reader), in a closed box; "" when the pass tested none."""
    facts = draft_facts(it)
    if not facts:
        return ""
    kept = "kept by the coupling" if method.startswith("scd") else "drawn again, the same token"
    rows = []
    for f in facts:
        test = {"accepted": "accepted, committed",
                "rejected": f"rejected; the residual drew token {f.residual}",
                "untested": "not tested (after the first rejection)"}[f.test]
        nxt = "—" if f.next_draft is None else kept if f.next_draft == f.token else f"redrawn: token {f.next_draft}"
        rows.append(f"| {place(f.position, grid)} | {f.token} | {f.p:.3f} | {f.q:.3f} | {f.keep:.3f} | {test} | {nxt} |")
    return ("\n\n<details><summary>This pass's drafts as a table: each draft's p(x), q(x) and test</summary>\n\n"
            "| position | draft token x | p(x) at this pass | q(x) when drawn | min(1, p/q) | test | "
            "the next pass's draft there |\n|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n</details>")


def telling_pass(iterations: Sequence[Iteration]) -> int:
    """The pass the replay opens on: of the passes whose test rejected a draft (the residual
    drew there), the one that verified the most drafts (the latest of those); the last pass
    when none rejected (greedy, AR)."""
    best = None
    for i, it in enumerate(iterations):
        if bool(it.resampled[0]):
            verified = trace.verified_drafts([it], 0)
            if best is None or verified >= best[0]:
                best = (verified, i)
    return len(iterations) - 1 if best is None else best[1]


def replay_caption(iterations: Sequence[Iteration], i: int, opened: bool = False) -> str:
    """The replayed pass in words; `opened`: the pass the replay opens on (`telling_pass`),
    said so, with where the last one is."""
    it = iterations[i]
    last = len(iterations) - 1
    nb, na = int(it.n_before[0]), int(it.n_after[0])
    acc, ver = trace.accepted_drafts([it], 0), trace.verified_drafts([it], 0)
    why = ""
    if opened and i != last:
        why = (f"  \nThe replay opens here: of the passes that rejected a draft, this one verified the most. "
               f"Move the slider (or press End) for the last pass, {last}.")
    return (f"pass {i} of {last} · NFE {it.nfe} · committed {nb} → {na} (+{na - nb}): "
            f"{plural(ver, 'draft')} verified, {acc} accepted"
            + (", the first rejection replaced by a residual sample" if bool(it.resampled[0]) else
               ", then one token sampled from p" if na > nb + acc else "") + why)
