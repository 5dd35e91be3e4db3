# Built by hub/vendor.py from scd_core/prompts.py: edit the library, then rebuild.
"""Benchmark prompts: PartiPrompts (shipped in scd_core/assets/prompts), a text file, or a default list.

    prompts = load_prompts("parti:8")                       # a fixed sample of 8 Parti prompts
    prompts = load_prompts("parti", categories=["Animals"])
    prompts = load_prompts("my_prompts.txt")                # one prompt per line

`--prompts` of the benchmark command takes the same specifications. A sample of N is the same
on every machine and run: N prompts drawn with a fixed seed from the (category-filtered) list,
kept in file order.

What a model makes of a prompt: `check_prompt_length` (at most MAX_PROMPT_CHARS characters
each, the one limit), and `unknown_words` (the words a bag-of-words model ignores, from its
`vocab`; `warn_unknown` says them as a `UnknownWordsWarning`).
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
MAX_PROMPT_CHARS = 500          # characters per text prompt


# ------------------------------------------------------------------ what a model reads

class UnknownWordsWarning(UserWarning):
    """A prompt has words the model does not know: it ignores them."""


def check_prompt_length(prompts: Sequence[str], limit: int = MAX_PROMPT_CHARS) -> None:
    """A ValueError naming `prompts` when one is longer than `limit` characters."""
    for i, p in enumerate(prompts):
        if isinstance(p, str) and len(p) > limit:
            raise ValueError(f"prompts: prompt {i} is {len(p):,} characters long; the limit is {limit}")


def unknown_pieces(prompt: str, knows, stop_words=frozenset()) -> list[str]:
    """The space-separated pieces of `prompt` for which `knows(piece)` is false, each once,
    in order; stop words and bare punctuation (no letter, digit or symbol) are skipped."""
    out = []
    for piece in prompt.split():
        bare = piece.strip(".,;:!?\"'()")
        if bare.lower() in stop_words or not any(ch.isalnum() or ord(ch) > 127 for ch in bare):
            continue
        if not knows(bare) and bare not in out:
            out.append(bare)
    return out


def unknown_words(model, prompt: str) -> list[str] | None:
    """The words of `prompt` that `model` ignores, as typed (its `vocab.unknown`); None for a
    model without a word vocabulary (it reads the whole text)."""
    vocab = getattr(model, "vocab", None)
    unknown = getattr(vocab, "unknown", None)
    return None if unknown is None else list(unknown(prompt))


def reads_nothing(model, prompt: str) -> bool:
    """Whether a bag-of-words model knows none of the prompt's words: it samples unconditioned."""
    known = getattr(getattr(model, "vocab", None), "known", None)
    return known is not None and not known(prompt)


def warn_unknown(model, prompts: Sequence[str]) -> None:
    """An UnknownWordsWarning for each prompt with words the model ignores (or none it knows)."""
    import warnings

    for i, p in enumerate(prompts):
        words = unknown_words(model, p)
        if words:
            warnings.warn(f"prompts: prompt {i} has words the model does not know, ignored: "
                          f"{' '.join(words)}"
                          + ("; it knows none, so the sample is unconditioned" if reads_nothing(model, p) else ""),
                          UnknownWordsWarning, stacklevel=3)


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
