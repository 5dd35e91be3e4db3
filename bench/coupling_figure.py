"""Two positions of a real SCD-MC run, for the figure in "How it works": at each, the draft's law
q (p at the pass that drew it), p at the next pass, their overlap, and what the coupling did.

    python -m bench coupling-figure            # writes demo/texts/coupling.json

It decodes tiny ("red heart", SCD-MC, L = 16, seed 0, the model's sampling), then replays the
run's passes through the model's session (the same `step` calls the engine made) to read p at
every fed position. Both positions are fed after the first rejection in two passes in a row, the
draft of the first fed to the second. `kept`: one whose draft the second pass kept, with total
variation between the two p nearest 0.35 (a typical one: maximal coupling keeps a draft with
probability 1 - TV). `redrawn`: one where p fell at the draft, so that it was kept only with
probability min(1, p/q) < 1 (nearest 0.5), and the coupling redrew it from the residual
norm(max(0, p - q)). The page draws both (`demo.charts.coupling_figure`).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

import scd_core
from bench import ROOT
from scd_core.sampling import processed_probs
from scd_core.settings import Settings

OUT = ROOT / "demo" / "texts" / "coupling.json"
MODEL, PROMPT, SEED, WINDOW, TYPICAL_TV, SHOWN = "tiny", "red heart", 0, 16, 0.35, 12


def measure() -> dict:
    model = scd_core.load_model(MODEL)
    settings = Settings.for_model(model, method="scd-mc", window=WINDOW)
    records = list(scd_core.stream(model, [PROMPT], settings=settings, seed=SEED))
    session = model.start([PROMPT], settings.cfg_scale)
    p = {}
    with torch.inference_mode():
        for it in records[1:]:                       # the engine's own calls, in its order
            p[it.index] = processed_probs(session.step(it.window_tokens, it.start), settings.sampling)[0]   # [W, V]

    def p_at(it, pos: int) -> torch.Tensor:          # slot k predicts position start + k + 1
        return p[it.index][pos - int(it.start[0]) - 1]

    kept = redrawn = None
    for a, b in zip(records[1:], records[2:]):
        untested = max(int(r.n_before[0]) + int(r.num_accepted[0]) + 1 for r in (a, b))
        for pos in range(untested, int(b.start[0]) + b.window_tokens.shape[1]):
            in_a, in_b = pos - int(a.n_after[0]), pos - int(b.n_after[0])
            if not (0 <= in_a < a.drafts_after.shape[1] and 0 <= in_b < b.drafts_after.shape[1]
                    and pos - int(a.start[0]) <= WINDOW):      # p at it known to pass a too
                continue
            x = int(b.window_tokens[0, pos - int(b.start[0])])
            if int(a.drafts_after[0, in_a]) != x:
                continue                            # not a's coupled draft, fed to b
            q, now = p_at(a, pos), p_at(b, pos)
            tv = 0.5 * float((q - now).abs().sum())
            keep = min(1.0, float(now[x] / q[x]))
            again = int(b.drafts_after[0, in_b])
            if again == x and (kept is None or abs(tv - TYPICAL_TV) < abs(kept[0] - TYPICAL_TV)):
                kept = (tv, a, b, pos, x, q, now, again)
            if again != x and keep < 1 and (redrawn is None or abs(keep - 0.5) < abs(redrawn[0] - 0.5)):
                redrawn = (keep, a, b, pos, x, q, now, again)
    return {"model": MODEL, "prompt": PROMPT, "seed": SEED, "window": WINDOW,
            "kept": case(*kept[1:]), "redrawn": case(*redrawn[1:])}


def case(a, b, pos: int, x: int, q: torch.Tensor, now: torch.Tensor, again: int) -> dict:
    """One position as the figure draws it: the SHOWN tokens most likely under q or p (the
    draft and its redraw among them), q, p and the residual norm(max(0, p - q)) at each."""
    residual = (now - q).clamp(min=0)
    residual = residual / residual.sum()
    must = list(dict.fromkeys([x, again]))
    likely = [t for t in torch.argsort(torch.maximum(q, now), descending=True).tolist() if t not in must]
    shown = sorted(must + likely[:SHOWN - len(must)])
    tv = 0.5 * float((q - now).abs().sum())
    return {"before": a.index, "now": b.index, "position": pos, "draft": x, "again": again,
            "overlap": round(1 - tv, 4), "tokens": shown,
            "q": [round(float(q[t]), 4) for t in shown], "p": [round(float(now[t]), 4) for t in shown],
            "residual": [round(float(residual[t]), 4) for t in shown],
            "rest_q": round(1 - float(q[shown].sum()), 4), "rest_p": round(1 - float(now[shown].sum()), 4)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    data = measure()
    args.out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(data))
