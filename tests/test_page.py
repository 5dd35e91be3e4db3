"""The page's own checks, widget numbers, stop stamps and the pace of updates (demo.checks,
demo.models, demo.servers, demo.streaming)."""
from __future__ import annotations

import os
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

import scd_core
from demo import backend, checks, models, run_view, runs, servers, streaming
from scd_core.models import load_model
from scd_core.race import Race
from scd_core.settings import Settings
from fakehub import empty_hub_cache  # noqa: F401  (a fixture)


def settings_of(method, window, init="random", temperature=1, top_k=0, top_p=1, cfg=1, tree=None, model=None):
    """`checks.settings_of` of a decoding event's values, given here in the page's order."""
    return checks.settings_of(dict(method=method, window=window, init=init, temperature=temperature, top_k=top_k,
                                   top_p=top_p, cfg=cfg, tree=tree), model)


def test_widget_numbers_become_ints_only_when_whole():
    assert checks.as_int(16.0) == 16 and isinstance(checks.as_int(16.0), int)
    assert checks.as_int(2.5) == 2.5 and checks.as_int(None) is None
    assert checks.as_float(3) == 3.0 and isinstance(checks.as_float(3), float)


def test_settings_are_checked_by_the_page_naming_its_field_and_range_then_by_the_library():
    shape = checks.shape_of("texture")
    s = checks.race_of(shape, "ocean waves", settings_of("scd-mc", 16.0, "random", 1, 0.0, 1, 1), 4.0)
    assert (s.settings.window, s.settings.top_k, s.seed, s.settings.temperature) == (16, 0, 4, 1.0)
    for window in (1.5, 0, 1):      # 1 is AR's least window, refused: the race runs every method
        with pytest.raises(ValueError, match=r"^Window L: a whole number from 2 to 1,024, got "):
            settings_of("sjd", window, "random", 1, 0, 1, 1)
    with pytest.raises(ValueError, match="^Draft init: .previous frame \\(video\\). needs a video model"):
        settings_of("sjd", 16, "repeat-frame", 1, 0, 1, 1, model=shape)
    checks.race_of(checks.shape_of("tiny-video"), "x",
                   settings_of("sjd", 16, "repeat-frame", 1, 0, 1, 1, model=checks.shape_of("tiny-video")), 0)
    with pytest.raises(ValueError, match="^method must be one of"):    # no field: the library's words
        settings_of("beam", 16, "random", 1, 0, 1, 1)


def test_each_field_range_is_defined_once_and_is_the_librarys():
    """The page's ranges are the library's limits: a value at an end passes both checks, one
    past it is refused by both."""
    from scd_core.settings import Settings
    window = checks.FIELDS["window"]
    for value in (window.low, window.high):
        Settings(method="sjd", window=window.check(value))
    for value in (window.low - 1, window.high + 1):
        with pytest.raises(ValueError):
            Settings(method="sjd", window=value)
        with pytest.raises(ValueError, match="^Window L: "):
            window.check(value)
    cfg = checks.FIELDS["cfg"]
    Settings(cfg_scale=cfg.check(cfg.high))
    with pytest.raises(ValueError):
        Settings(cfg_scale=cfg.high + 1)
    seed = checks.FIELDS["seed"]
    scd_core.decoding.validate_seeds(seed.check(seed.high), checks.MAX_SAMPLES)   # the race's last row fits
    assert seed.high + checks.MAX_SAMPLES <= checks.BROWSER_WHOLE == 2**53 - 1     # and the browser carries it
    assert float(seed.high) == seed.high                # what the page's number field sends for it
    with pytest.raises(ValueError, match="^Seed: a whole number from 0 to 1,000,000,000,000,000, got -1."):
        seed.check(-1)
    temperature = checks.FIELDS["temperature"]
    for value in (0.0, temperature.next_low, 1.0, temperature.high):
        Settings(temperature=temperature.check(value))
    for value in (temperature.next_low / 2, temperature.high * 2, 1e39):
        with pytest.raises(ValueError):
            Settings(temperature=value)
        with pytest.raises(ValueError, match=r"^Temperature: 0 or a number from 1e-30 to 1e\+30 \(0: greedy\), got "):
            temperature.check(value)


def test_top_k_is_bounded_by_the_models_vocabulary_once_it_is_known():
    texture = load_model("texture")
    run = dict(method="scd-mc", window=16, init="random", temperature=1.0, top_p=1.0, cfg=1.0, tree=None)
    found = checks.setting_problems(run | {"top_k": 10**9}, texture)
    assert found == {"top_k": f"Top-k: a whole number from 0 to {texture.vocab_size:,}, the model's "
                              f"vocabulary (0: off), got 1,000,000,000."}
    assert checks.setting_problems(run | {"top_k": texture.vocab_size}, texture) == {}
    assert checks.setting_problems(run | {"top_k": 10**9}, checks.shape_of("texture")) == {}   # not loaded yet: said at the run


def test_page_limits_are_its_own():
    with pytest.raises(ValueError, match="please type a prompt"):
        checks.check_prompt("  ")
    assert checks.check_prompt(" red apple ") == "red apple"
    with pytest.raises(ValueError, match=r"^Slow motion: a number from 0 to 2 \(seconds each pass stays on "
                                         r"screen; 0: off, full speed\), got 3."):
        checks.check_pace(checks.MAX_PACE + 1)
    with pytest.raises(ValueError, match="^Race samples K: a whole number from 1 to 16, got 17."):
        checks.check_samples(checks.MAX_SAMPLES + 1)
    assert checks.check_samples(8.0) == 8


def test_stop_reaches_runs_clicked_before_it_and_none_after():
    stops = runs.Stops()
    stops.stop("a", at=2000.0)                    # browser time stamps, in milliseconds
    assert stops.stopped("a", 1000.0) and stops.stopped("a", 2000.0)     # running or waiting
    assert not stops.stopped("a", 2001.0) and not stops.stopped("b", 1000.0)
    stops.stop("a", at=1500.0)                    # an older stamp never undoes a newer stop
    assert stops.stopped("a", 1999.0)
    stamp = stops.stamp(None)                     # no stamp (the API): the server's clock
    assert abs(stamp - time.time() * 1000) < 1000 and stops.stamp(123.0) == 123.0
    stops.stop("idle")
    assert not stops.stopped("idle", stops.stamp(None) + 1)
    stops.forget("a")
    assert not stops.stopped("a", 1000.0)


class FakeClock:
    """A page clock whose sleeps pass at once: time moves only when the code under test sleeps
    (or the test says so), so no assert here depends on how busy the machine is."""

    def __init__(self) -> None:
        self.t = 1000.0

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.t += seconds


def test_pacer_throttles_full_speed_and_paces_slow_motion():
    clock = FakeClock()
    due = servers.Pacer(every=0.05, clock=clock)
    assert due() and not due() and due(force=True)
    clock.t += 0.04
    assert not due()
    clock.t += 0.02
    assert due() and not due()
    slow = servers.Pacer(every=0.01, pace=0.05, clock=clock)
    t = clock.now()
    for _ in range(4):
        assert slow()
    assert clock.now() - t == pytest.approx(0.15)           # the first at once, then 0.05 apart


def test_a_stop_cuts_the_slow_motion_wait_short():
    clock, flag = FakeClock(), {"stop": False}
    slow = servers.Pacer(every=0.01, pace=1.5, stopped=lambda: flag["stop"], clock=clock)
    slow()
    flag["stop"] = True
    t = clock.now()
    slow()
    servers.sleep_until(clock.now() + 5, lambda: flag["stop"], clock)
    assert clock.now() == t                                   # no wait at all
    flag["stop"] = False
    servers.sleep_until(clock.now() + 5, lambda: flag["stop"], clock)
    assert clock.now() == pytest.approx(t + 5)


# ---------------------------------------------------------------------------- serving

def records(n: int) -> list:
    """The records of a row that has ended after `n` passes."""
    return [SimpleNamespace(index=i) for i in range(n)]


@pytest.fixture(scope="module")
def grid():
    return scd_core.load_model("toy-grid", grid=(6, 6), vocab_size=32, hidden=32)


def test_one_server_per_model_closed_once_the_model_is_dropped(grid):
    other = scd_core.load_model("toy-grid", grid=(6, 6), vocab_size=32, hidden=32)
    pool = servers.Servers(max_batch=4)
    first = pool.get(grid)
    assert pool.get(grid) is first and pool.get(other) is not first
    row = pool.submit(grid, Race("a cat", scd_core.Settings(window=4)), "sjd")
    pool.keep([other, None])                       # the cache dropped `grid`
    assert pool.models() == [other]
    assert row.result(timeout=30).tokens.shape == (1, 36)       # what it had, it finishes
    assert pool.get(grid) is not first                          # asked again: a new server


def test_follow_ends_at_a_stop_even_while_the_device_is_busy(grid):
    pool, flag = servers.Servers(), threading.Event()
    client = servers.PageClient(pool, lambda name: grid)
    with pool.device_lock:                         # a race holds the device: no pass runs
        rid = client.submit("grid", "a cat", 0, scd_core.Settings(window=4, method="sjd"))
        threading.Timer(0.1, flag.set).start()
        t = time.perf_counter()
        assert list(servers.follow(client, rid, flag.is_set)) == []
        assert time.perf_counter() - t < 1
    row = client.result(rid, timeout=30)  # it joined at the next boundary, and left at the one after
    assert row.cancelled and row.nfe <= 2 and int((row.tokens >= 0).sum()) < 36


def test_slow_motion_shows_every_pass_and_a_stop_keeps_what_is_shown():
    clock, seen = FakeClock(), []
    t = clock.now()
    for record, picture, _ in servers.shown(records(5), 0.05, lambda: len(seen) >= 3, clock=clock):
        assert picture
        seen.append(record)
    assert [r.index for r in seen] == [0, 1, 2]
    assert clock.now() - t == pytest.approx(2 * max(0.05, servers.IMAGE_EVERY))
    assert [r.index for r, _, _ in servers.shown(records(5), 0.05, lambda: False, clock=clock)] == \
        [0, 1, 2, 3, 4]


def test_a_wait_for_other_rows_ends_when_they_end_at_its_limit_or_at_a_stop():
    clock = FakeClock()
    ends = clock.now() + 1.0
    assert 1.0 <= servers.wait_while(lambda: clock.now() < ends, 5.0, clock=clock) <= 1.05   # a step at most
    assert servers.wait_while(lambda: True, 5.0, clock=clock) == pytest.approx(5.0)    # never longer
    stop = clock.now() + 0.5
    assert 0.5 <= servers.wait_while(lambda: True, 5.0, lambda: clock.now() >= stop, clock=clock) <= 0.55
    assert servers.wait_while(lambda: False, 5.0, clock=clock) == 0                 # none: no wait


def test_a_replay_lasts_its_pace_and_skips_ahead_at_most_one_tick_per_interval():
    clock = FakeClock()
    t = clock.now()
    ticks = list(servers.replay_ticks(10, 0.01, 0.05, lambda: False, clock))
    assert len(ticks) == 3 and ticks[0] == 1 and ticks[-1] == 10 and ticks == sorted(set(ticks))
    assert clock.now() - t == pytest.approx(0.15)    # ticks 0.05 s apart, the last one shown as long


def test_full_speed_shares_the_live_updates_among_the_rows_of_a_pass():
    clock = FakeClock()
    assert servers.Pacer(0.01, clock=clock)(share=32)
    assert not servers.Pacer(0.01, wait_first=True, clock=clock)(share=32)
    busy = servers.Pacer(0.01, clock=clock)
    busy(share=32)
    clock.t += 0.05
    assert servers.Pacer(0.01, wait_first=True, clock=clock)(share=1) is False
    assert not busy(share=32) and busy(share=1)                 # 0.05 s: past 0.01 s, not 0.32 s
    assert [p for _, p, _ in servers.shown(records(40), 0.0, lambda: False, lambda r: 32, clock=clock)] == \
        [False] * 40


def test_in_full_repeats_what_each_output_got_last_and_leaves_out_the_others():
    updates = [{"status": "a"}, {"image": 1}, {"status": "b", "chart": None}, {}]
    assert list(streaming.in_full(updates, ["image", "status", "chart", "table"])) == [
        {"status": "a"}, {"image": 1, "status": "a"}, {"image": 1, "status": "b", "chart": None},
        {"image": 1, "status": "b", "chart": None}]


def test_counts_from_the_environment_are_checked_and_named(monkeypatch):
    monkeypatch.delenv("SCD_SESSIONS", raising=False)
    assert backend.env_count("SCD_SESSIONS", 256) == 256
    monkeypatch.setenv("SCD_SESSIONS", "40")
    assert backend.env_count("SCD_SESSIONS", 256) == 40
    for bad in ("0", "-3", "many", "2.5"):
        monkeypatch.setenv("SCD_SESSIONS", bad)
        with pytest.raises(ValueError, match="SCD_SESSIONS"):
            backend.env_count("SCD_SESSIONS", 256)


def test_a_loaded_models_own_window_reaches_the_page():
    """A model's `default_settings` window (Lumina-mGPT's is 64) is the page's starting window."""
    from scd_core.models.cache import ModelCache

    pool = servers.Servers(max_batch=2)
    page_models = models.Models(ModelCache(), "cpu", pool)
    grid = scd_core.load_model("toy-grid")
    grid.default_settings = {"window": 24, "top_k": 7}
    page_models.put("janus-pro-1b", grid)              # a model with weights, now loaded
    d, s, ok = page_models.defaults("janus-pro-1b")
    assert ok and d["window"] == 24 and s["top_k"] == 7


def test_the_decode_backend_is_read_from_scd_decode_and_a_bad_value_is_named():
    assert backend.backend_kind({}) == "process" and backend.backend_kind({"SCD_DECODE": " "}) == "process"
    assert backend.backend_kind({"SCD_DECODE": "local"}) == "local"
    assert backend.backend_kind({"SCD_DECODE": "ray://10.0.0.2:10001"}) == "ray"
    assert backend.backend_kind({"SCD_DECODE": "ray://local"}) == "ray"
    for bad in ("ray://", "processes", "http://host:1"):
        with pytest.raises(ValueError, match="SCD_DECODE"):
            backend.backend_kind({"SCD_DECODE": bad})


# ------------------------------------------------------------------- what a model reads

def test_the_library_reports_the_prompt_words_a_model_ignores():
    import warnings

    from scd_core import prompts

    tiny, texture = load_model("tiny"), load_model("texture")
    assert prompts.unknown_words(tiny, "red heart 🦄 foo") == ["🦄", "foo"]
    assert prompts.unknown_words(tiny, "the red, hearts!") == []     # stop words, punctuation, plurals
    assert prompts.unknown_words(texture, "ocean zebra waves") == ["zebra"]
    assert prompts.unknown_words(load_model("toy", vocab_size=3, grid=(2, 2)), "anything") is None
    assert prompts.reads_nothing(tiny, "🦄 🦄") and not prompts.reads_nothing(tiny, "red 🦄")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prompts.warn_unknown(tiny, ["red heart", "🦄"])
    assert [str(w.message) for w in caught] == [
        "prompts: prompt 1 has words the model does not know, ignored: 🦄; it knows none, so the "
        "sample is unconditioned"]
    assert all(issubclass(w.category, prompts.UnknownWordsWarning) for w in caught)


def test_the_prompt_length_limit_is_the_librarys_and_names_prompts():
    from scd_core import prompts

    prompts.check_prompt_length(["x" * prompts.MAX_PROMPT_CHARS])
    with pytest.raises(ValueError, match=r"^prompts: prompt 1 is 501 characters long; the limit is 500"):
        prompts.check_prompt_length(["ok", "x" * 501])
    assert checks.MAX_PROMPT_CHARS is prompts.MAX_PROMPT_CHARS      # the page's is the library's


def test_a_slow_motion_faster_than_the_page_shows_is_said():
    fastest = servers.IMAGE_EVERY
    assert servers.shown_pace(fastest / 5) == fastest and servers.shown_pace(0) == 0
    assert servers.shown_pace(2 * fastest) == 2 * fastest
    raised = f"slow motion: 0.02 s asked, each pass shown {fastest:g} s at least (0 turns it off: full speed)"
    assert run_view.pace_note(0.02, servers.shown_pace(0.02)) == raised     # as it runs, and after
    assert run_view.pace_note(0.02, servers.shown_pace(0.02), running=False) == raised
    assert run_view.pace_note(0.5, 0.5) == "slow motion: 0.5 s a pass (0 turns it off: full speed)"   # as it runs
    assert run_view.pace_note(0.5, 0.5, running=False) == "" == run_view.pace_note(0, 0)      # after: nothing new
    assert "fastest" not in raised                                  # 0, full speed, is faster


def test_pictures_go_to_gradio_as_files_written_once(tmp_path):
    import gradio as gr
    import numpy as np
    from PIL import Image

    from demo import picture_files, streaming

    files = picture_files.PictureFiles(tmp_path, keep=2)
    a, b, c = (np.full((4, 4, 3), v, dtype=np.uint8) for v in (10, 20, 30))
    first = files.path_of(a)
    inode = os.stat(first).st_ino
    assert files.path_of(a.copy()) == first and os.stat(first).st_ino == inode   # not rewritten
    assert np.array_equal(np.asarray(Image.open(first)), a)
    files.path_of(b), files.path_of(c)
    assert not os.path.exists(first) and len(list(tmp_path.glob("*.png"))) == 2  # the newest kept
    assert not list(tmp_path.glob(".picture-*"))                                  # no half-written file left

    image, text = gr.Image(), gr.Markdown()
    updates = list(streaming.in_full([{image: a, text: "x"}, {text: "y"}], [image, text]))
    assert isinstance(updates[0][image], str) and updates[1][image] is updates[0][image]
    assert updates[1][text] == "y"


def test_times_name_the_threads_of_the_process_that_decodes(monkeypatch):
    """A race or run timed in a worker names the worker's torch threads, not the page's."""
    monkeypatch.setattr(models.torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(models.torch, "get_num_threads", lambda: 2)
    worker = SimpleNamespace(worker_threads=lambda name: {"texture": 1}.get(name))
    assert models.decoding_device(worker, "texture") == "CPU (1 thread)"
    assert models.decoding_device(worker, "tiny") == "CPU (2 threads)"        # no worker yet: this process
    assert models.decoding_device(SimpleNamespace(), "texture") == "CPU (2 threads)"   # decodes here


def test_the_model_list_says_a_download_only_where_the_hub_can_be_reached(empty_hub_cache, monkeypatch):
    """A model still to download is listed with its size where the Hub answers; where it
    cannot be reached, the list says so, as the model's note does once picked."""
    from scd_core.models.status import model_status
    monkeypatch.delenv("HF_HUB_OFFLINE")                  # an empty cache, downloads allowed
    name = next(n for n in models.listed_models() if model_status(n).state == "downloadable")
    monkeypatch.setattr(models, "hub_reachable", lambda: True)
    assert models.model_label(name) == f"{name} · {model_status(name).download_gb:.1f} GB download"
    assert models.unavailable(name) is None
    monkeypatch.setattr(models, "hub_reachable", lambda: False)
    assert models.model_label(name) == f"{name} · no network here"
    assert models.unavailable(name).startswith("no network here: download it beforehand with `hf download ")
    assert models.model_label("texture") == "texture · embedded"


def test_the_hub_probe_asks_the_endpoint_once_a_minute(monkeypatch):
    calls = []

    def connect(address, timeout):
        calls.append(address)
        raise OSError("refused")

    monkeypatch.setattr(models.socket, "create_connection", connect)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(models, "_PROBED", {})
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    assert not models.hub_reachable() and not models.hub_reachable()
    assert calls == [("127.0.0.1", 9)]


def test_scd_compile_turns_the_pages_runs_compiled(monkeypatch):
    """SCD_COMPILE (read once, at import) reaches every run's Settings; a bad value names it."""
    assert settings_of("sjd", 8, "random", 1, 0, 1, 1).compile is False
    monkeypatch.setattr(checks, "COMPILE", True)
    assert settings_of("sjd", 8, "random", 1, 0, 1, 1).compile is True
    for raw, want in (("1", True), ("yes", True), ("0", False), ("", False)):
        monkeypatch.setenv("SCD_COMPILE", raw)
        assert backend.env_flag("SCD_COMPILE") is want
    monkeypatch.setenv("SCD_COMPILE", "maybe")
    with pytest.raises(ValueError, match="SCD_COMPILE"):
        backend.env_flag("SCD_COMPILE")


def test_the_hub_probe_answers_within_its_timeout_when_finding_the_hub_hangs(monkeypatch):
    """A name lookup that never answers (no resolver, no network) is bounded too: the model
    list and a model's note never wait longer than the probe's timeout for it."""
    monkeypatch.setattr(models, "PROBE_TIMEOUT_S", 0.2)
    monkeypatch.setattr(models, "_PROBED", {})
    def hangs(*args, **kwargs):
        time.sleep(3)
        raise OSError("no answer")

    monkeypatch.setattr(models.socket, "create_connection", hangs)
    started = time.monotonic()
    assert models.hub_reachable() is False
    assert time.monotonic() - started < 1.0


def test_lossless_progress_counts_the_batches_compare_asks_about():
    """`scd_core.lossless.compare` calls its `on_batch` once before each batch, AR's then the
    method's: the progress the Lossless tab shows counts on it, and tells each method's time
    left from that method's own batches."""
    from demo import lossless as view
    from scd_core import lossless as stats
    clock = iter(range(1000))
    progress = view.Progress(8, 4, "scd-mc", clock=lambda: float(next(clock)))
    texture = load_model("texture")
    stats.compare(texture, "ocean waves", Settings(method="scd-mc", window=8), "scd-mc", 8, batch=4,
                  on_batch=progress.ask)
    assert len(progress.asks) == 4 and progress.done() == (8, 4)   # the last batch ends after the last ask
    said = progress.said()
    assert "**AR** 8 of 8 samples · **SCD maximal coupling** 4 of 8" in said and "s left" in said
    fresh = view.Progress(8, 4, "scd-mc", clock=lambda: 0.0)
    assert "the time left comes with AR's first 4" in fresh.said()


# ------------------------------------------------------------- a visitor's text, as text

HOSTILE = ['<img src=x onerror="window.hit=1">', "**giant** _slanted_ [link](http://example.com)",
           "<script>window.hit=1</script> after", "# heading `code` $$x^2$$ | a | b |", "1. list\nx & y"]


def rendered_text(markdown: str) -> tuple[str, set[str]]:
    """`markdown` rendered as CommonMark: its text and the HTML tags it made."""
    import html
    import re

    from markdown_it import MarkdownIt

    out = MarkdownIt("commonmark").enable("table").render(markdown)
    tags = set(re.findall(r"<(\w+)", out))
    return html.unescape(re.sub(r"<[^>]+>", "", out)).strip(), tags


@pytest.mark.parametrize("prompt", HOSTILE)
def test_a_prompt_is_shown_as_text_wherever_the_page_echoes_it(prompt):
    from demo import race_view, texts
    from scd_core import prompts

    said = " ".join(prompt.split())                     # line breaks shown as spaces
    text, tags = rendered_text(texts.as_text(prompt))
    assert text == said and tags <= {"p", "span"}       # the empty spans split "$$" (Gradio's LaTeX)
    tiny = load_model("tiny")
    for note in (texts.prompt_words_note(tiny, "tiny", f"red {prompt}"),       # under the prompt box
                 texts.prompt_note(tiny, f"red {prompt}"),                     # the run's summary
                 checks.switched("tiny", {"prompt": prompt}, {"prompt": "red"}, {"prompt": "blue"},
                                 tiny)[1]):                                    # kept on a model switch
        text, tags = rendered_text(note)
        assert tags <= {"p", "span", "strong"} and "giant" not in text.replace("**giant**", ""), note
        assert not ({"img", "script", "a", "em", "h1", "code", "table", "ol"} & tags), note
    ignored = " ".join(prompts.unknown_words(tiny, prompt))
    assert ignored and ignored in rendered_text(texts.prompt_words_note(tiny, "tiny", prompt))[0]
    race = Race(prompt, Settings(), 0)                  # the race's benchmark commands, as code
    text, tags = rendered_text(race_view.bench_markdown("tiny", race, 2))
    assert tags == {"p", "pre", "code"} and "printf" in text and prompt.split("\n")[0] in text


def test_values_a_visitor_sends_are_quoted_as_text_in_the_pages_messages():
    found = checks.problems(None, {**dict.fromkeys(checks.INPUTS), "model": "<img src=x>"})
    text, tags = rendered_text(found["model"])
    assert "'<img src=x>'" in text and tags == {"p"}
    with pytest.raises(ValueError) as caught:
        checks.check_tree("<b>wide</b>")
    assert rendered_text(str(caught.value)) == (f"Draft tree: unknown draft tree '<b>wide</b>'; choose one of "
                                               f"{', '.join(checks.TREE_CHOICES)}.", {"p"})


def test_the_page_never_logs_a_visitors_prompt():
    """The words a model ignores are said beside the prompt box; the library's warning, which
    quotes them, is not shown (nor logged) in the page's processes (its own, and the decoding
    workers, which import `demo.models` to load their model). In a process of its own: pytest
    puts back the filters each test module set when imported."""
    import subprocess
    import sys

    code = ("import warnings, demo.models; from scd_core.models import load_model; "
            "from scd_core.prompts import warn_unknown; warn_unknown(load_model('tiny'), ['red qqq']); "
            "warnings.warn('a warning of another kind')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONWARNINGS": ""})
    assert done.returncode == 0, done.stderr
    assert "a warning of another kind" in done.stderr and "qqq" not in done.stderr


def test_run_folders_and_picture_files_are_swept_by_count_and_age(tmp_path):
    """A run's files go to a folder of their own, the newest `keep` kept, none older than
    `max_age_s`; picture files the same, by when they were last handed out."""
    from demo.picture_files import PictureFiles, RunFolders
    now = [0.0]
    (tmp_path / "runs").mkdir()
    folders = RunFolders(tmp_path / "runs", keep=3, max_age_s=10, clock=lambda: now[0])
    made = [folders.new_folder() for _ in range(4)]
    assert [os.path.isdir(f) for f in made] == [False, True, True, True] and folders.folders() == 3
    now[0] = 11.0
    last = folders.new_folder()
    assert folders.folders() == 1 and os.listdir(tmp_path / "runs") == [os.path.basename(last)]
    pictures = PictureFiles(tmp_path / "pictures", keep=3, max_age_s=10, clock=lambda: now[0])
    (tmp_path / "pictures").mkdir()
    paths = [pictures.path_of(np.full((2, 2), v, np.uint8)) for v in range(4)]
    assert [os.path.exists(p) for p in paths] == [False, True, True, True]
    now[0] = 15.0
    assert pictures.path_of(np.full((2, 2), 3, np.uint8)) == paths[3]        # handed out again: kept
    now[0] = 22.0
    fresh = pictures.path_of(np.full((2, 2), 9, np.uint8))
    assert sorted(os.listdir(tmp_path / "pictures")) == sorted(os.path.basename(p) for p in (paths[3], fresh))


class Asked(SimpleNamespace):
    """An HTTP request as the page reads it: the socket's address and the headers."""

    def __init__(self, host: str, forwarded: tuple[str, ...] = ()) -> None:
        headers = SimpleNamespace(getlist=lambda name: list(forwarded) if name == "x-forwarded-for" else [])
        super().__init__(client=SimpleNamespace(host=host), headers=headers)


def test_a_clients_address_is_the_one_its_trusted_proxies_saw():
    """With no proxy the socket's address; behind N proxies the address the farthest one was
    connected from (X-Forwarded-For's N-th entry from the right), whatever the client wrote
    to the left of it; a port dropped; SCD_PROXY_HOPS read as a whole number, 1 on a Space."""
    from demo.queues import client_address, proxy_hops
    spoofed = Asked("10.0.0.7", ("6.6.6.6, 203.0.113.9",))
    assert client_address(spoofed, 0) == "10.0.0.7"
    assert client_address(spoofed, 1) == "203.0.113.9" and client_address(spoofed, 2) == "6.6.6.6"
    assert client_address(Asked("10.0.0.7", ("6.6.6.6", "203.0.113.9:4431")), 1) == "203.0.113.9"
    assert client_address(Asked("10.0.0.7", ("[2001:db8::1]:443",)), 1) == "2001:db8::1"
    assert client_address(Asked("10.0.0.7"), 1) == "10.0.0.7"                       # no header: the socket
    assert client_address(Asked("10.0.0.7", ("203.0.113.9",)), 3) == "203.0.113.9"   # fewer hops than said
    assert proxy_hops({}) == 0 and proxy_hops({"SPACE_ID": "u/s"}) == 1 and proxy_hops({"SCD_PROXY_HOPS": "2"}) == 2
    with pytest.raises(ValueError, match="SCD_PROXY_HOPS"):
        proxy_hops({"SCD_PROXY_HOPS": "-1"})


def test_places_are_held_while_gradio_holds_the_job_within_each_queues_caps():
    """A place per admitted request, matched to Gradio's job by its request: one per visitor and
    a few per client (many sessions of one address, and calls with no session, are one
    client), so many waiting per queue, each queue apart; given back when the job ends or is
    cancelled while it waits (at once), never made (after `join_s`), or stopped while it waits."""
    from demo.queues import Admissions, Caps, Job
    now, jobs = [0.0], []
    places = Admissions({"decode": Caps(session=1, client=2, waiting=2)}, Caps(session=9, client=9, waiting=9),
                        lambda: jobs, hops=1, clock=lambda: now[0], join_s=5.0)

    def asked(session, address, queue="decode"):
        request = SimpleNamespace(session_hash=session, request=Asked("10.0.0.7", (address,)))
        return request, places.admit(request, queue)

    a1, ok = asked("a1", "203.0.113.9")
    assert ok is None and asked("a1", "203.0.113.9")[1] == "session"
    jobs.append(Job(a1.request, "decode", waiting=False))                 # Gradio made it; it runs
    a2, ok = asked("a2", "203.0.113.9")
    assert ok is None and places.held("decode", client="203.0.113.9") == 2
    for session in ("a3", "a4", None, ""):                               # more sessions, or none: the same client
        assert asked(session, "203.0.113.9")[1] == "client"
    assert asked("a5", "203.0.113.9", "generate")[1] is None              # another queue, its own caps
    b, ok = asked("b", "198.51.100.4")
    assert ok is None and asked("c", "192.0.2.1")[1] == "waiting"          # a2 and b wait (not yet seen)
    jobs.append(Job(a2.request, "decode", waiting=True))
    now[0] = 6.0                                                          # b never joined: its place goes
    assert places.held("decode", session="b") == 0 and places.held("decode", session="a2") == 1
    jobs.remove(jobs[-1])                                                 # a2 cancelled while it waited
    assert places.held("decode", client="203.0.113.9") == 1 and asked("a6", "203.0.113.9")[1] is None
    jobs.append(Job(places._places[-1].request, "decode", waiting=True))
    places.release_waiting("a6")                                          # a6's Stop: its waiting place goes
    assert places.held("decode", session="a6") == 0 and places.held("decode", session="a1") == 1
    places.release_waiting("a1")                                          # a running job keeps its place
    assert places.held("decode", session="a1") == 1
    jobs.clear()                                                          # it ended
    assert places.held("decode") == 0 and places.held("generate") == 0   # a5 never joined either
    assert places.admit(None, "decode") is None and places.held("decode") == 0   # a call from outside Gradio


def test_the_cache_sweeper_sweeps_again_after_a_pass_that_failed():
    """Gradio's own sweep of its cache ends at its first failed pass; this one logs it and
    sweeps again on the next round, with the age it was given."""
    from demo.picture_files import CacheSweeper

    ages, notes = [], []

    def sweep(age):
        ages.append(age)
        if len(ages) == 1:
            raise RuntimeError("Set changed size during iteration")

    sweeper = CacheSweeper(sweep, every_s=0.01, age_s=7.0, log=notes.append).start()
    deadline = time.monotonic() + 10
    while sweeper.passes < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    sweeper.stop.set()
    sweeper.thread.join(5)
    assert sweeper.failed == 1 and sweeper.passes >= 2 and set(ages) == {7.0}
    assert len(notes) == 1 and "Set changed size" in notes[0] and not sweeper.thread.is_alive()


def test_lossless_samples_are_sized_per_model_and_estimated_before_a_comparison():
    """Each embedded model's samples per method by default: the most (a multiple of 16, at most
    256) whose comparison the estimate puts within a minute; the estimate said in words, nothing
    for a model or a number the tab refuses."""
    from demo import lossless
    for name in ("texture", "tiny", "tiny-64", "tiny-video"):
        n = lossless.default_samples(name)
        assert lossless.MIN_SAMPLES <= n <= lossless.DEFAULT_SAMPLES and n % 16 == 0
        assert lossless.estimate_s(name, n) <= lossless.TARGET_S
        assert n == lossless.DEFAULT_SAMPLES or lossless.estimate_s(name, n + 16) > lossless.TARGET_S
    assert lossless.default_samples("tiny-video") < lossless.default_samples("tiny-64") < lossless.default_samples("tiny")
    said = lossless.estimate_note("tiny-64", 128)
    assert "128 samples of each method on **tiny-64**" in said and f"about {lossless.estimate_s('tiny-64', 128):.0f} s" in said
    assert lossless.estimate_note("janus-pro-1b", 128) == lossless.estimate_note("tiny", 3) == ""
