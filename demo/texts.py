"""The page's words and looks, read once at import: the header, hints and "How it works"
(`demo/texts/*.md`), the style sheet (`demo/static/page.css`) and the browser code run on a
Generate or Race click (`demo/static/page.js`), and the short notes built from a model."""
from __future__ import annotations

import json
import re
from pathlib import Path

from scd_core.prompts import reads_nothing, unknown_words
from scd_core.protocols import optional

HERE = Path(__file__).parent


def _read(path: str) -> str:
    return (HERE / path).read_text(encoding="utf-8")


def _text(name: str) -> str:
    """A prose file of demo/texts, without its final newline."""
    return _read(f"texts/{name}.md").rstrip("\n")


HEADER = _text("header") + " "
GENERATE_HINT = _text("generate_hint")
RACE_HINT = _text("race_hint")
WAITING = _text("waiting")
CANNOT_RUN = ("cannot run here, so Generate and Race are off: the note under **Model** says why "
              "and what would let it run. The embedded models run anywhere.")
STOPPED_EARLY = ("**Stopped** before its first pass: a Stop, or another model picked, came "
                 "first.")     # in the queue, or before its row got one


# What Markdown (CommonMark: every ASCII punctuation mark may be escaped) or the HTML it becomes
# would read as markup in a visitor's text. Gradio finds LaTeX between `$$` after the Markdown is
# HTML, in each run of text: an empty element after each `$` leaves no two in one run.
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "$": "\\$<span></span>"}     # never inside an attribute
_MARKDOWN = set("\\`*_{}[]()#+-.!|~:=^")


def as_text(text) -> str:
    """A visitor's text (a prompt, a name they typed) as itself inside the page's Markdown and
    the HTML it becomes: HTML's characters as entities, Markdown's escaped with a backslash, line
    breaks as spaces. `<img src=x>` shows as those characters, `**a**` with its stars."""
    out = []
    for ch in " ".join(str(text).split("\n")).replace("\r", " "):
        out.append(_HTML.get(ch) or ("\\" + ch if ch in _MARKDOWN else ch))
    return "".join(out)


SAID_KINDS = ("start", "step", "end")


def said(words: str, kind: str) -> str:
    """What the page's live region says of a status (demo/static/load.js), carried in the
    status's Markdown as a hidden span: a run's "start", a "step" (said now and then, not at
    every update) or its "end". `words` are shown as text."""
    if kind not in SAID_KINDS:
        raise ValueError(f"kind: one of {SAID_KINDS}, got {kind!r}")
    return f' <span class="say-{kind}" hidden>{as_text(words)}</span>'


def quoted(value) -> str:
    """A value the visitor gave, quoted as Python writes it, shown as text (`as_text`)."""
    return as_text(repr(value))


def code_block(text: str) -> str:
    """`text` as a fenced code block whose fence no run of backticks in it can close."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"


QUIET = '<span class="say-quiet" hidden></span>'     # a status the live region does not say: no news


def hint(text: str, name: str) -> str:
    """A tab's hint before a run, naming the model it will run (not said by the live region)."""
    return f"**{name}** · {text}{QUIET}"


def pace_info(shortest: float) -> str:
    return (f"0 turns slow motion off. When on, Generate shows each pass at least {shortest:g} s (less is "
            "raised to that; the status says so), and a race replays its passes at this pace")
# The drafts strip's layout, said the same in its panel's title and in "How it works"
FILM_LAYOUT = "one column per pass, one row per window slot, the top row the next position to decide"
FILM_TITLE = f"Drafts after each pass: {FILM_LAYOUT}"
HOW_IT_WORKS = "\n" + _read("texts/how_it_works.md").replace("FILM_LAYOUT", FILM_LAYOUT)
# The widest window given one column (controls, then results) instead of two: below Gradio's
# 1,024 px breakpoint two columns leave the results about 350 px, narrower than a phone's.
NARROW_PX = 1023
CSS = "\n" + _read("static/page.css").replace("NARROW_PX", str(NARROW_PX))
CLICK_JS = _read("static/page.js").strip().replace("NARROW_PX", str(NARROW_PX))
# Beside the prompt clip when the browser cannot play the file uploaded (said in the browser)
UNPLAYABLE_CLIP = ("Prompt clip: your browser cannot play this file as a video; "
                   "upload an MP4 (H.264) or WebM clip, or pick an example clip.")
LOAD_JS = _read("static/load.js").strip().replace("NARROW_PX", str(NARROW_PX)) \
    .replace("UNPLAYABLE_CLIP", json.dumps(UNPLAYABLE_CLIP))       # run once when the page loads
# The note under the model the moment one is picked, in the browser: where it stands comes after
PICKED_JS = "(name) => '`' + name + '`: finding out where it stands here…'"


def click_js(tab: str, target: str = "#run-box") -> str:
    """Browser code run before a Generate, Race or Lossless request: show `tab`, on one column
    bring `target` to the top (Stop and the results under it), and stamp the click (the last
    input) with the browser's clock, so that a later Stop stops this run even queued."""
    return CLICK_JS.replace("TAB", json.dumps(tab)).replace("TARGET", json.dumps(target))


def prompt_note(model, prompt: str) -> str:
    """For models that read a few known words (the embedded ones): which words they read,
    and which they ignored."""
    known = getattr(optional(model, "vocab"), "known", None)
    if known is None:
        return ""
    if reads_nothing(model, prompt):
        return ("None of the prompt's words is known to this model: this is an unconditioned "
                "sample. Try an example prompt.\n\n")
    unknown = unknown_words(model, prompt) or []
    return (f"Prompt words the model knows: {as_text(', '.join(known(prompt)))}"
            + (f"; ignored: {as_text(' '.join(unknown))}" if unknown else "") + ".\n\n")


def prompt_words_note(model, name: str, prompt: str) -> str:
    """Under the prompt box, before a run: the words a bag-of-words model will ignore, or
    that it knows none and samples unconditioned ("" for a model that reads the whole text)."""
    unknown = unknown_words(model, prompt) if model is not None and prompt.strip() else None
    if not unknown:
        return ""
    if reads_nothing(model, prompt):
        return (f"{name} knows none of these words ({as_text(' '.join(unknown))}): it runs unconditioned. "
                "Try an example prompt.")
    return f"not known to {name}, ignored: {as_text(' '.join(unknown))}"



def command_blocks(markdown: str) -> str:
    """Each `hf download ...` command in `markdown` as a block of its own, one option a line
    (continued with a backslash): read whole on any screen, and copied as it runs."""
    def block(m: re.Match) -> str:
        first, *options = m.group(1).split(" --")
        command, _, repo = first.rpartition(" ")
        return "\n\n```\n" + " \\\n".join([command, f"  {repo}", *(f"  --{o}" for o in options)]) + "\n```\n\n"
    return re.sub(r"`(hf download [^`]+)`\.?", block, markdown)
