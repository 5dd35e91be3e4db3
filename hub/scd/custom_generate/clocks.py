# Built by hub/vendor.py from scd_core/clocks.py: edit the library, then rebuild.
"""The clocks of a run: how long the engine and the model took, read after the device is done.

On a GPU the host queues work and moves on: a pass "returns" long before it has run. A clock
read at that moment measures the launch, not the work. So every time here is read only once
the work it times has reached the host: a pass's wall time after its record has been copied
back (`Iteration.from_pass` waits for that copy), the model's time from CUDA events that are read
then too. The model's share of a pass (its `step`) is therefore part of the pass's wall time,
and the engine's share, wall - step, is never negative.
"""
from __future__ import annotations

import time

import torch

from .protocols import Session, TokenModel


def device_events():
    """A (begin, end) pair of timing events on the current CUDA device."""
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


class Stopwatch:
    """Seconds spent decoding, summed over the spans between `start` and `stop` (the time a
    consumer holds a record between passes is not counted). `stop` must be called once the
    span's work has reached the host."""

    def __init__(self) -> None:
        self.total, self._since = 0.0, None

    def start(self) -> None:
        self._since = time.perf_counter()

    def stop(self) -> float:
        """The total so far, this span included."""
        self.total += time.perf_counter() - self._since
        return self.total


class TimedSession:
    """A model's Session that adds up the seconds spent in the model (`start` and every
    `step`): the rest of a run's wall time is the engine's. On a GPU each step is timed by
    CUDA events, read (`seconds`) once the pass's record has reached the host, so timing adds
    no wait and counts the step's device time, not its launch."""

    def __init__(self, session: Session, seconds: float, on_device: bool = False) -> None:
        self.session, self._seconds, self._events = session, seconds, []
        self.first_logits = session.first_logits
        self.on_device = on_device           # steps are timed by device events, not the host's clock

    @classmethod
    def start(cls, model: TokenModel, prompts: list[str], cfg_scale: float) -> "TimedSession":
        t = time.perf_counter()
        session = model.start(prompts, cfg_scale)
        on_device = session.first_logits.is_cuda
        if on_device:
            torch.cuda.synchronize(session.first_logits.device)
        return cls(session, time.perf_counter() - t, on_device)

    @property
    def seconds(self) -> float:
        """Seconds spent in the model so far (it waits for the timed steps to end on the device:
        read it after the pass's record, which has waited already)."""
        for begin, end in self._events:
            end.synchronize()
            self._seconds += begin.elapsed_time(end) / 1000
        self._events.clear()
        return self._seconds

    @seconds.setter
    def seconds(self, value: float) -> None:
        self._seconds, self._events = value, []

    def timed(self, fn, *args):
        """fn(*args), its time counted as the model's."""
        if not self.on_device:
            t = time.perf_counter()
            out = fn(*args)
            self._seconds += time.perf_counter() - t
            return out
        begin, end = device_events()
        begin.record()
        out = fn(*args)
        end.record()
        self._events.append((begin, end))
        return out

    def step(self, tokens: torch.LongTensor, start: torch.LongTensor) -> torch.Tensor:
        return self.timed(self.session.step, tokens, start)

    def step_tree(self, tokens: torch.LongTensor, parents: torch.LongTensor, start: torch.LongTensor) -> torch.Tensor:
        return self.timed(self.session.step_tree, tokens, parents, start)

    def keep_path(self, nodes: torch.LongTensor) -> None:
        self.timed(self.session.keep_path, nodes)
