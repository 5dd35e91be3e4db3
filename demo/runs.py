"""Each visitor's run in progress: one at a time (Generate, a race or a Lossless comparison).

A second click while one goes is refused with a word (the click's check asks `going`); a
model switch, or a new prompt or method, stops it at once (`interrupt`): after a switch
nothing more of it is shown (its last update is the new model's empty views: Gradio repeats a
stream's last update when it ends, so that is what stays), after a new prompt or method its
stopped status says why. The page's process keeps this (on ZeroGPU too: the handler that
forwards a call's updates runs here), keyed by the visitor's session.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from demo.labels import METHOD_LABELS

KINDS = {"generate": "Generate", "race": "race", "lossless": "Lossless comparison"}


@dataclass
class Run:
    """A visitor's run: what it is (`kind`, a key of KINDS), on which model, with which method
    and prompt; `why` it was stopped from elsewhere ("" while it was not); `left`: its model
    was switched away (to model `left`), so nothing more of it is shown; `quiet` is set once
    it has ended."""

    kind: str
    model: str
    method: str = ""
    prompt: str = ""
    why: str = ""
    left: str = ""
    quiet: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)

    def named(self) -> str:
        """The run in words: "your SJD run on texture", "your race on tiny"."""
        what = f"{METHOD_LABELS.get(self.method, self.method)} run" if self.kind == "generate" else KINDS[self.kind]
        return f"your {what} on {self.model}"


class Runs:
    """The run each visitor (by session key) has going; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, Run] = {}

    def going(self, key: str) -> Run | None:
        with self._lock:
            return self._runs.get(key)

    def start(self, key: str, run: Run) -> Run:
        with self._lock:
            self._runs[key] = run
        return run

    def end(self, key: str, run: Run) -> None:
        run.quiet.set()
        with self._lock:
            if self._runs.get(key) is run:
                del self._runs[key]

    def interrupt(self, key: str, why: str, left: str = "", kinds=tuple(KINDS)) -> Run | None:
        """Mark the visitor's run (one of `kinds`) as stopped from elsewhere, `why` in words
        (`left`: the model switched to); the caller stops it. The run, or None."""
        with self._lock:
            run = self._runs.get(key)
            if run is None or run.kind not in kinds or run.left:
                return None
            run.why, run.left = why, left
            return run


def busy_message(run: Run) -> str:
    """Beside the buttons, for a click while the visitor's run goes."""
    return (f"**Not started:** {run.named()} is still going: press **Stop** first, or wait for it to end "
            "(one run at a time).")
