"""ZeroGPU, as far as a CPU can check it: the decode backend a ZeroGPU Space gets, the page's
events run as `@spaces.GPU` calls in a forked process that does all their decoding and
drawing (`tests/zerogpu_calls.py` runs the calls as `spaces` 0.51.3 runs them on ZeroGPU,
minus the GPU), what crosses between the two processes, Stop across them, and how long each
call asks to hold the GPU."""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import spaces

import gradio as gr

from demo import backend, generate_tab, layout, race_tab, runs, zerogpu
from scd_core.models import REGISTRY
from scd_core.models.status import MAX_GPU_SECONDS, MIN_GPU_SECONDS
from test_app import args, visitor

pytestmark = pytest.mark.served

REPO = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------------ backend

def test_zero_gpu_decodes_inside_the_calls_and_nothing_else_is_accepted():
    assert backend.backend_kind({"SPACES_ZERO_GPU": "true"}) == "call"
    assert backend.backend_kind({"SPACES_ZERO_GPU": "1", "SCD_DECODE": "call"}) == "call"
    for other in ("process", "local", "ray://local"):
        with pytest.raises(ValueError, match=f"SCD_DECODE={other} cannot decode on ZeroGPU"):
            backend.backend_kind({"SPACES_ZERO_GPU": "true", "SCD_DECODE": other})
    assert backend.backend_kind({}) == "process" and backend.backend_kind({"SPACES_ZERO_GPU": "false"}) == "process"
    assert backend.backend_kind({"SCD_DECODE": "call"}) == "call"        # the same path off Spaces
    with pytest.raises(ValueError, match="SCD_DECODE must be one of process, local, call"):
        backend.backend_kind({"SCD_DECODE": "gpu"})


def test_spaces_gpu_hands_the_function_back_off_zero_gpu():
    """The installed spaces package (not a stand-in): off ZeroGPU its decorator is the identity,
    so the page's events run as written; on ZeroGPU they are the wrapped calls tested below."""
    assert not spaces.config.Config.zero_gpu

    def event(x):
        return x
    assert spaces.GPU(duration=lambda x: 30)(event) is event and spaces.GPU(event) is event


# ---------------------------------------------------------------- the calls, emulated

@pytest.fixture(scope="module")
def emulated(tmp_path_factory) -> tuple[dict, list[list[str]]]:
    log = tmp_path_factory.mktemp("zerogpu") / "model-operations.log"
    env = {**os.environ, "SCD_DECODE": "call", "SCD_TEST_THREADS": "1"}
    out = subprocess.run([sys.executable, str(REPO / "tests" / "zerogpu_calls.py"), str(log)],
                         capture_output=True, text=True, env=env, cwd=REPO, timeout=1200)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1]), [line.split(" ", 2) for line in log.read_text().splitlines()]


def test_every_decoding_event_is_one_gpu_call_on_the_in_call_client(emulated):
    seen, _ = emulated
    assert seen["kind"] == "call" and seen["client"] == "PageClient" and seen["in_call"] is True
    assert seen["decorated"] == ["_on_gpu"]           # one decorated function: one process per GPU holds the models
    events = {event for event, _ in seen["durations"]}
    assert events == {f"demo.{n}" for n in ("generate_tab.generate_stream", "race_tab.race_stream",
                                            "replay_tab.replay_view", "replay_tab.export_run",
                                            "race_tab.show_race_sample", "lossless_tab.lossless_run")}
    assert all(MIN_GPU_SECONDS <= seconds <= MAX_GPU_SECONDS for _, seconds in seen["durations"])


def test_the_calls_decode_and_draw_in_their_process_and_the_page_never(emulated):
    """Every forward pass and every picture ran in the call's process, forked from the page's
    (here a child kept between calls, as spaces keeps one); the page's own process started
    no session, ran no pass and decoded no picture, held no decoding thread of its own and
    never touched CUDA."""
    seen, operations = emulated
    kinds = {what for _, _, what in operations}
    assert kinds == {"start", "step", "decode"}                # and no CUDA use ("cuda"), in either process
    pids = {int(pid) for pid, _, _ in operations}
    assert seen["page"] not in pids and pids <= set(seen["children"])
    threads = {thread for _, thread, _ in operations}         # the call's thread and those it started
    assert threads <= {"MainThread", "scd-follow", "scd-race-row", "scd-lossless"}
    assert not {"scd-server", "scd-sender", "scd-pictures"} & set(seen["threads"]) and not seen["cuda"]


def test_generate_race_replay_export_and_lossless_all_come_back_whole(emulated):
    seen, _ = emulated
    for name, got in seen["models"].items():
        assert got["problems"] == {}, name
        assert "**done**" in got["status"] and f"**Done** on **{name}**." in got["race"], (name, got)
        assert isinstance(got["decode"], str) and len(got["decode"]) == 32     # a request id, never a decoder
        assert got["replay"][0] >= 96 and all(size > 0 for size in got["export"])
        assert len(got["sample"]) == 4 and all(shape[0] >= 96 for shape in got["sample"])
    assert seen["lossless"].startswith("**Done**")


def test_stop_from_the_page_reaches_a_race_in_the_calls_process(emulated):
    seen, _ = emulated
    assert "**Replay stopped at NFE" in seen["stop"]["status"]
    assert seen["stop"]["seconds"] < 5


def test_updates_cross_a_process_keyed_by_component_id():
    update = {layout.status: "**done**", layout.live_image: None, layout.replay_slider: gr.Slider(maximum=4, value=4)}
    with pytest.raises(Exception, match="pickle"):
        pickle.dumps(update)                                  # the page's components hold the page
    crossed = pickle.loads(pickle.dumps(zerogpu._plain(update)))
    back = zerogpu._blocks(crossed, lambda: layout.demo.blocks)
    assert list(back) == list(update) and back[layout.status] == "**done**"
    assert back[layout.replay_slider].maximum == 4
    assert zerogpu._plain(("a", 1)) == ("a", 1)               # a handler's tuple crosses as it is


def test_stops_are_heard_across_processes_through_their_folder(tmp_path):
    page = runs.Stops(shared=True)
    page.stop("visitor", 2000.0)
    forked = runs.Stops.__new__(runs.Stops)             # another process's copy: its own memory,
    forked._lock, forked._at, forked.folder = page._lock, {}, page.folder   # the same folder
    assert forked.stopped("visitor", 1999.0) and forked.stopped("visitor", 2000.0)
    assert not forked.stopped("visitor", 2001.0) and not forked.stopped("other", 0.0)
    page.forget("visitor")
    assert not forked.stopped("visitor", 1999.0)
    assert not os.listdir(page.folder)
    assert runs.Stops().folder is None                     # off ZeroGPU: memory only


# ----------------------------------------------------------------------------- durations

def test_a_race_asks_for_both_phases_of_every_method_and_its_replay():
    tokens = REGISTRY["texture"].tokens
    fast, slow = zerogpu.race_estimate("texture", 16, 8, 0.0), zerogpu.race_estimate("texture", 16, 8, 0.1)
    assert slow - fast >= int(tokens * 0.1)                   # the replay at 0.1 s per pass, inside the call
    assert zerogpu.race_estimate("texture", 16, 8, 0.02) == slow   # slow motion is shown at 0.1 s at least
    one = zerogpu.race_estimate("janus-pro-7b", 32, 1, 0.0)
    assert zerogpu.race_estimate("janus-pro-7b", 32, 2, 0.0) > one > \
        zerogpu.generate_estimate("janus-pro-7b", "ar", 32, 0.0)   # four methods, not one
    assert zerogpu.generate_estimate("texture", "scd-mc", 16, 0.5) > zerogpu.generate_estimate("texture", "scd-mc", 16, 0.0)


def test_a_race_times_as_many_rounds_as_one_call_holds():
    """The embedded models' races time every method in all the rounds; a large model's in as
    many as fit in one ZeroGPU call, at least one."""
    from scd_core import race
    assert zerogpu.race_rounds("texture", 16, 8, 0.1) == race.TIMING_ROUNDS
    big = zerogpu.race_rounds("janus-pro-1b", 32, 2, 0.0)
    assert 1 <= big < race.TIMING_ROUNDS and zerogpu.race_estimate("janus-pro-1b", 32, 2, 0.0, big) <= MAX_GPU_SECONDS
    assert zerogpu.race_estimate("janus-pro-1b", 32, 2, 0.0, big + 1) > MAX_GPU_SECONDS
    assert zerogpu.race_rounds("lumina-mgpt-7b-512", 32, 2, 0.0) == 1          # none fits: one timing


def test_event_durations_read_the_events_inputs_by_name_and_stay_in_zero_gpu_bounds():
    """A duration reads each input by its name, in whatever order the event gives them (an
    input added to the page shifts none of them)."""
    race = args(model="janus-pro-1b", window=32, samples=2, pace=0.0)
    rounds = zerogpu.race_rounds("janus-pro-1b", 32, 2, 0.0)
    expected = zerogpu.race_estimate("janus-pro-1b", 32, 2, 0.0, rounds)
    assert zerogpu.race_seconds(**race, history=None, ticket=None, request=None) == expected <= MAX_GPU_SECONDS
    assert zerogpu.race_seconds(**dict(reversed(race.items())), added=3.0) == expected
    assert zerogpu.race_seconds(**args(model="emu3-gen", samples=2)) == MAX_GPU_SECONDS
    assert zerogpu.generate_seconds(**args(window=1.5)) == MIN_GPU_SECONDS    # refused before decoding anyway
    assert zerogpu.generate_seconds(**args(model="tiny", pace=2.0)) == \
        zerogpu.generate_estimate("tiny", "scd-mc", 16, 2.0) > zerogpu.generate_seconds(**args(model="tiny"))
    tiny = args(model="tiny", method="ar")
    assert zerogpu.lossless_seconds(**tiny, lossless_samples=1024.0) > zerogpu.lossless_seconds(**tiny, lossless_samples=16.0)


def test_a_run_longer_than_one_call_is_refused_on_zero_gpu_only(monkeypatch):
    slow = args(model="texture", pace=2.0, samples=8, window=16)
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    race = list(race_tab.race_stream(**slow, request=visitor("long")))
    said = race[-1][layout.race_status]
    assert said.startswith("**Not started:** This race would hold the GPU about") and "lower the race samples K" in said
    generate = list(generate_tab.generate_stream(**slow, request=visitor("long")))
    assert "This run would hold the GPU about" in generate[-1][layout.status]
    monkeypatch.delenv("SPACES_ZERO_GPU")
    zerogpu.check_fits(10_000, "This race", "lower K")        # off ZeroGPU there is no such limit
