"""How the page streams updates to Gradio: each update names every output given a value so
far (`in_full`, and `streams_in_full` for a handler), and the session's run history it
carries from one Generate to the next."""
from __future__ import annotations

import collections
import functools
from typing import Callable, Iterable, Iterator, Sequence

import gradio as gr

from demo import picture_files

def in_full(updates: Iterable[dict], outputs: Sequence) -> Iterator[dict]:
    """A stream of page updates (dicts, output -> value) in which every update names every
    output already given a value in this stream, repeating the value it got last.

    Gradio treats an output left out of a streamed update as "no change", and keeps a copy
    of the component in the visitor's session each time such an output later gets a value;
    the copies stay as long as the session does. Repeating the last value costs little: a
    stream sends each update as the difference from the one before. Pictures go as PNG
    files written once (`picture_files`): an array would be encoded and its cache file
    rewritten at every repeat, under a browser that may be reading it. A picture given again
    (the final picture, then the replay's last pass) is encoded once."""
    last: dict = {}
    files: collections.OrderedDict[int, tuple[object, str]] = collections.OrderedDict()   # the last few given

    def as_file(picture):
        if id(picture) not in files:        # each kept with its file: its id is not reused meanwhile
            files[id(picture)] = (picture, picture_files.as_file(picture))
            while len(files) > 4:
                files.popitem(last=False)
        return files[id(picture)][1]

    for update in updates:
        last.update({o: as_file(v) if isinstance(o, gr.Image) else v for o, v in update.items()})
        yield {o: last[o] for o in outputs if o in last}


def history_of(history: dict | None, name: str) -> dict:
    """This session's earlier runs on model `name`, by method (keys starting with "_" are the
    model's name and the chain runs, `chain_nfe`); another model's are dropped."""
    return dict(history or {}) if (history or {}).get("_model") == name else {"_model": name}


WALLS_KEPT = 5          # a method's warm times kept for the latency speed-up's median


def first_run(history: dict) -> bool:
    """Whether no run of this session has finished on the model yet: the next one may be its
    worker's first, which warms the model up and takes several times longer (tiny's AR: 3.02 s,
    then 0.97 s and 0.34 s), so its time is never a reference."""
    return not history.get("_runs")


def remember(history: dict, method: str, nfe: list[int], committed: list[int], wall: float | None,
             tree: tuple[int, int], seed: int, window: int, stability: float | None = None) -> None:
    """Keep a finished run in the session's history: its curve for the tokens chart, its
    seconds (`wall`, None when it shared its passes; `walls`: the method's last WALLS_KEPT warm
    ones, the session's first run on the model left out, `first_run`), its draft stability
    (None: AR) for the flicker chart, and a chain run's NFE for `chain_nfe`."""
    walls = list(history.get(method, {}).get("walls", []))
    if wall is not None and not first_run(history):
        walls = (walls + [wall])[-WALLS_KEPT:]
    history["_runs"] = history.get("_runs", 0) + 1
    history[method] = {"nfe": nfe, "committed": committed, "wall": wall, "walls": walls, "stability": stability}
    if tree[0] == 1 or tree[1] == 0:
        history["_chain"] = {**history.get("_chain", {}), method: (nfe[-1], seed, window)}


def chain_nfe(history: dict, method: str, seed: int, window: int) -> int | None:
    """The NFE of this session's last chain run of `method` with this seed and window (None:
    there is none), to set a draft tree's passes against."""
    nfe, *same = history.get("_chain", {}).get(method, (None, None, None))
    return nfe if same == [seed, window] else None


def streams_in_full(outputs: Callable[[], Sequence]):
    """A streaming handler whose every update names every output it has given a value
    (`in_full`; `outputs()` is called at the first run, once the page's components exist)."""
    def wrap(fn):
        @functools.wraps(fn)
        def stream(*args, **kwargs):
            yield from in_full(fn(*args, **kwargs), outputs())
        return stream
    return wrap
