"""Benchmark prompts: PartiPrompts (shipped in scd_core/assets/prompts), a text file, or a default list.

    prompts = load_prompts("parti:8")                       # a fixed sample of 8 Parti prompts
    prompts = load_prompts("parti", categories=["Animals"])
    prompts = load_prompts("my_prompts.txt")                # one prompt per line

`--prompts` of the benchmark command takes the same specifications. A sample of N is the same
on every machine and run: N prompts drawn with a fixed seed from the (category-filtered) list,
kept in file order.
"""
from __future__ import annotations

import csv
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

PARTI_PATH = Path(__file__).resolve().parent / "assets" / "prompts" / "PartiPrompts.tsv"
PARTI = "parti"
SAMPLE_SEED = 0


@dataclass(frozen=True)
class Prompt:
    text: str
    category: str = ""
    challenge: str = ""


def parti_prompts(path: Path = PARTI_PATH) -> list[Prompt]:
    """All PartiPrompts in file order (Prompt, Category, Challenge columns)."""
    if not path.is_file():
        raise ValueError(f"--prompts: PartiPrompts not found at {path}")
    with path.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [Prompt(r["Prompt"].strip(), r["Category"].strip(), r["Challenge"].strip())
            for r in rows if r.get("Prompt", "").strip()]


def categories(path: Path = PARTI_PATH) -> list[str]:
    return sorted({p.category for p in parti_prompts(path)})


def select(prompts: list[Prompt], wanted: Sequence[str] | None) -> list[Prompt]:
    """The prompts of the `wanted` categories (case-insensitive); all when none are named."""
    if not wanted:
        return prompts
    known = {p.category.lower(): p.category for p in prompts}
    unknown = [c for c in wanted if c.strip().lower() not in known]
    if unknown:
        raise ValueError(f"--category: unknown {', '.join(map(repr, unknown))}; "
                         f"PartiPrompts has {', '.join(sorted(known.values()))}")
    keep = {c.strip().lower() for c in wanted}
    return [p for p in prompts if p.category.lower() in keep]


def sample(prompts: list[Prompt], n: int) -> list[Prompt]:
    """`n` prompts drawn with a fixed seed, kept in their original order."""
    if n > len(prompts):
        raise ValueError(f"--prompts: asked for {n} prompts, only {len(prompts)} match")
    picked = sorted(random.Random(SAMPLE_SEED).sample(range(len(prompts)), n))
    return [prompts[i] for i in picked]


def load_prompt_records(spec: str | None, categories: Sequence[str] | None = None,
                        default: Sequence[str] = ()) -> list[Prompt]:
    """Prompts (with their Parti category) for `spec`: None (the `default` texts), "parti",
    "parti:N", or a path to a text file with one prompt per line."""
    if categories and (spec is None or not _is_parti(spec)):
        raise ValueError("--category: categories filter PartiPrompts; use it with --prompts parti or parti:N")
    if spec is None:
        records = [Prompt(t) for t in default]
    elif _is_parti(spec):
        records = select(parti_prompts(), categories)
        count = spec.strip()[len(PARTI):]
        if count:
            n = _count(count[1:]) if count.startswith(":") else None
            if n is None:
                raise ValueError(f"--prompts: expected 'parti' or 'parti:N' with N >= 1, got {spec!r}")
            records = sample(records, n)
    else:
        path = Path(spec).expanduser()
        if not path.is_file():
            raise ValueError(f"--prompts: no such file {spec} (or use 'parti' / 'parti:N')")
        records = [Prompt(line.strip()) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not records:
        raise ValueError(f"--prompts: {spec or 'the default list'} has no prompts")
    return records


def load_prompts(spec: str | None, categories: Sequence[str] | None = None,
                 default: Sequence[str] = ()) -> list[str]:
    """The prompt texts of `load_prompt_records`."""
    return [p.text for p in load_prompt_records(spec, categories, default)]


def _is_parti(spec: str) -> bool:
    s = spec.strip().lower()
    return s == PARTI or s.startswith(PARTI + ":")


def _count(text: str) -> int | None:
    return int(text) if text.isdigit() and int(text) >= 1 else None
