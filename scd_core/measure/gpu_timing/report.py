"""The report: the markdown tables, the environment, the JSON file."""
from __future__ import annotations

import json
import platform
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch


@dataclass
class Row:
    model: str
    L: int
    forward_ms: float
    forward_ratio: float                   # forward(L) / forward(1)
    forward_ms_runs: list[float]
    engine_ms: dict[str, float] = field(default_factory=dict)
    engine_share: dict[str, float] = field(default_factory=dict)   # engine ms / forward ms
    break_even: dict[str, float] = field(default_factory=dict)
    # tokens per forward a method must commit to beat AR in latency:
    # (forward(L) + engine(L)) / (forward(1) + engine_ar(1))


def make_rows(name: str, times: dict[int, list[float]], engine: dict[int, dict[str, float]]) -> list[Row]:
    median = {L: statistics.median(ts) for L, ts in times.items()}
    base = median.get(1)
    ar_iter = base + engine.get(1, {}).get("ar", 0.0) if base is not None else None
    rows = []
    for L in sorted(times):
        ms = median[L]
        eng = engine.get(L, {})
        row = Row(name, L, ms, ms / base if base else float("nan"), list(times[L]), dict(eng),
                  {m: e / ms for m, e in eng.items()})
        if ar_iter and L > 1:
            row.break_even = {m: (ms + e) / ar_iter for m, e in eng.items()}
        rows.append(row)
    return rows


def markdown(rows: list[Row], methods: Sequence[str]) -> str:
    cases = ["ar", *methods]
    header = (["model", "L", "forward ms", "fwd(L)/fwd(1)"] + [f"engine ms/iter {m}" for m in cases]
              + [f"engine share {m}" for m in cases])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    fmt = lambda d, m, f: f(d[m]) if m in d else "-"  # noqa: E731
    for r in rows:
        cells = [r.model, str(r.L), f"{r.forward_ms:.2f}", f"{r.forward_ratio:.2f}"]
        cells += [fmt(r.engine_ms, m, lambda v: f"{v:.2f}") for m in cases]
        cells += [fmt(r.engine_share, m, lambda v: f"{100 * v:.1f}%") for m in cases]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def environment(device: torch.device, dtype: torch.dtype, tiny: bool) -> dict:
    import transformers

    env = {"torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
           "device": str(device), "dtype": str(dtype).replace("torch.", ""), "tiny": tiny}
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
    if _version(transformers.__version__) < TESTED_TRANSFORMERS:
        env["warning"] = (f"transformers {transformers.__version__} is older than the "
                          f"{'.'.join(map(str, TESTED_TRANSFORMERS))} the adapters are tested with "
                          "(Lumina's forward fails on 5.17); carry the newer wheel, see this script's docstring")
        print(f"warning: {env['warning']}", file=sys.stderr)
    return env


TESTED_TRANSFORMERS = (5, 24)


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:2]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def write_json(path: Path, report: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(report, indent=2))
    tmp.replace(path)
