"""The clocks are read after the device is done (`scd_core.clocks`).

On a GPU a step returns as soon as its work is queued; the work runs later, and the host waits
for it only when it reads the pass's record. These tests put the engine on such a device, a
stand-in that runs each step's work (a fixed number of seconds) after the step has returned,
times it with events as CUDA does, and makes the host wait for it when the record is copied.
A clock read before that wait measures the launch: the pass's wall time would then be shorter
than the step's device time, and the engine's share negative.
"""
from __future__ import annotations

import time

import pytest

import scd_core
from scd_core import clocks, trace

WORK = 0.02          # seconds of device work per step


class LateDevice:
    """A queue of work that finishes after the calls that queued it have returned."""

    def __init__(self) -> None:
        self.done_at = time.perf_counter()

    def queue(self, seconds: float) -> None:
        self.done_at = max(self.done_at, time.perf_counter()) + seconds

    def wait(self) -> None:
        time.sleep(max(0.0, self.done_at - time.perf_counter()))


class Event:
    """A timing event: where the device's queue ends when it is recorded."""

    def __init__(self, device: LateDevice) -> None:
        self.device, self.at = device, None

    def record(self) -> None:
        self.at = max(self.device.done_at, time.perf_counter())

    def synchronize(self) -> None:
        self.device.wait()

    def elapsed_time(self, end: "Event") -> float:
        return (end.at - self.at) * 1000                   # milliseconds, as CUDA's


class LateSession:
    """A session whose step queues WORK seconds on the device and returns at once."""

    def __init__(self, session, device: LateDevice) -> None:
        self.session, self.device = session, device
        self.first_logits = session.first_logits

    def step(self, tokens, start):
        logits = self.session.step(tokens, start)
        self.device.queue(WORK)
        return logits


@pytest.fixture
def late(monkeypatch):
    device = LateDevice()
    model = scd_core.load_model("texture", grid=(4, 6))

    def start(cls, model_, prompts, cfg_scale):
        return cls(LateSession(model_.start(prompts, cfg_scale), device), 0.0, on_device=True)

    real_from_pass = trace.Iteration.from_pass.__func__

    def from_pass(cls, *args, **kwargs):                   # copying a record waits for the device
        device.wait()
        return real_from_pass(cls, *args, **kwargs)

    monkeypatch.setattr(clocks.TimedSession, "start", classmethod(start))
    monkeypatch.setattr(clocks, "device_events", lambda: (Event(device), Event(device)))
    monkeypatch.setattr(trace.Iteration, "from_pass", classmethod(from_pass))
    return model


@pytest.mark.parametrize("method", ["ar", "scd-mc"])
def test_a_pass_wall_time_covers_its_device_work(late, method):
    records = list(scd_core.stream(late, ["ocean waves"], method=method, window=4, seed=0))
    assert len(records) > 3
    for before, it in zip(records, records[1:]):
        wall, step = it.wall_time - before.wall_time, it.step_time - before.step_time
        assert step >= WORK * 0.99, f"pass {it.index}: the step's device time {step:.4f} s"
        assert wall >= step, f"pass {it.index}: wall {wall:.4f} s < step {step:.4f} s"
    run = scd_core.Run.from_iterations(records)
    assert run.engine_time >= 0 and run.wall_time >= run.step_time


def test_the_stopwatch_counts_only_its_spans():
    watch = clocks.Stopwatch()
    watch.start()
    time.sleep(0.01)
    first = watch.stop()
    time.sleep(0.03)                                      # a consumer holding a record: not counted
    watch.start()
    total = watch.stop()
    assert 0.01 <= first <= total < first + 0.02
