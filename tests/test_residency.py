"""Large models resident as a deployer expects: at most one per device (or as many as a byte
budget holds), the old one's servers, row decoders and worker processes closed and its memory
returned before the next one loads, idle workers closed after a timeout, a visitor told of a
swap, and no request lost to one (it waits, or is refused with a message).

Stand-ins: "slow-*" models count as large; each is a small toy grid whose forward passes take
at least 30 ms, so that a row can be caught running (`Slow`)."""
from __future__ import annotations

import gc
import json
import os
import threading
import time
import weakref

import pytest

import scd_core
from demo import backend
from demo.models import Models
from demo.servers import PageClient, Servers
from scd_core.client import DecodeError
from scd_core.models.cache import ModelCache, Residency, model_bytes
from scd_core.settings import Settings
from scd_core.workers import ProcessClient

pytestmark = pytest.mark.served

AR = Settings(method="ar", window=1)           # 64 passes of at least 30 ms: about 2 s a row, caught running
QUICK = Settings(method="scd-mc", window=64)   # about 12 passes: a row nothing waits to catch
LOG = "SCD_TEST_RESIDENCY_LOG"
HIDDEN = {"slow-a": 64, "slow-b": 96, "slow-c": 128, "slow-d": 160}   # four sizes


class Slow:
    """toy-grid 8 x 8 whose every forward pass takes at least `pass_s` seconds."""

    def __init__(self, hidden: int, pass_s: float = 0.03) -> None:
        self.inner = scd_core.load_model("toy-grid", grid=(8, 8), vocab_size=64, hidden=hidden)
        self.grid, self.vocab_size, self.pass_s = self.inner.grid, self.inner.vocab_size, pass_s

    def start(self, prompts, cfg_scale):
        session, pass_s = self.inner.start(prompts, cfg_scale), self.pass_s

        class Session:
            first_logits = session.first_logits
            keep_rows, add_rows = staticmethod(session.keep_rows), staticmethod(session.add_rows)

            @staticmethod
            def step(tokens, start):
                time.sleep(pass_s)
                return session.step(tokens, start)
        return Session()

    def decode(self, tokens):
        return self.inner.decode(tokens)


def large(name: str) -> bool:
    return name.startswith("slow")


def load(name: str):
    """A worker's load: the model, and a line in the log naming this process and the other
    workers' processes still alive as it starts loading."""
    path = os.environ.get(LOG)
    if path:
        seen = [json.loads(line) for line in open(path)] if os.path.exists(path) else []
        alive = [s["pid"] for s in seen if s["pid"] != os.getpid() and _alive(s["pid"])]
        with open(path, "a") as f:
            f.write(json.dumps({"pid": os.getpid(), "name": name, "others_alive": alive}) + "\n")
    return Slow(HIDDEN[name]) if large(name) else scd_core.load_model(name)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:                                            # a finished child not yet reaped is gone too
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def run(client, name: str, seed: int = 0):
    """A row of `name` served whole (`QUICK`), its result."""
    row = client.result(client.submit(name, "a cat", seed, QUICK), timeout=120)
    assert not row.cancelled and bool((row.tokens >= 0).all())
    return row


# ------------------------------------------------------------------------------- the rule

def test_one_large_model_per_device_by_default_and_a_byte_budget_keeps_what_fits():
    one = Residency()
    one.loaded("a", "cuda:0", 10)
    one.loaded("b", "cuda:1", 10)
    one.loaded("tiny", "cuda:0", 1, large=False)
    assert one.room_for("c", "cuda:0") == ["a"]                 # the same device's large one; tiny stays
    assert one.room_for("a", "cuda:0") == []

    budget = Residency(budget=25)
    budget.loaded("a", "cuda:0", 10)
    budget.loaded("b", "cuda:0", 10)
    assert budget.room_for("c", "cuda:0") == ["a", "b"]        # never measured: counts as the whole budget
    budget.measured("c", 5)
    assert budget.room_for("c", "cuda:0") == []                # 10 + 10 + 5 fit
    budget.measured("c", 8)
    assert budget.room_for("c", "cuda:0") == ["a"]             # the least recently used goes first
    budget.used("a")
    assert budget.room_for("c", "cuda:0") == ["b"]
    budget.unloaded("b", arriving="c")
    assert budget.why_not_resident("b").arriving == "c" and budget.resident() == {"a": 10}
    with pytest.raises(ValueError, match="budget"):
        Residency(budget=0)


def test_the_cache_keeps_large_models_within_the_byte_budget():
    loads: list[str] = []

    def loader(name, **kwargs):
        loads.append(name)
        return Slow(HIDDEN[name])
    size = {name: model_bytes(Slow(h)) for name, h in HIDDEN.items()}
    cache = ModelCache(loader, large=large, residency=Residency(budget=size["slow-a"] + size["slow-b"] + 1000))
    a = weakref.ref(cache.get("slow-a"))
    cache.get("slow-b")                                         # b never measured: a goes
    gc.collect()
    assert a() is None and cache.names() == ["slow-b"]
    cache.get("slow-a")                                         # now measured: both fit
    assert sorted(cache.names()) == ["slow-a", "slow-b"]
    assert cache.residency.resident() == {"slow-b": size["slow-b"], "slow-a": size["slow-a"]}
    cache.get("slow-c")                                         # never measured: both go
    assert cache.names() == ["slow-c"] and loads == ["slow-a", "slow-b", "slow-a", "slow-c"]


def test_the_pages_memory_settings_are_read_once_with_their_names_in_errors():
    assert backend.memory({}) == backend.Memory(None, 600)
    assert backend.memory({"SCD_GPU_BYTES": "40GB", "SCD_IDLE_S": "0"}) == backend.Memory(40 * 10**9, None)
    assert backend.memory({"SCD_GPU_BYTES": "1.5GiB", "SCD_IDLE_S": "30"}).gpu_bytes == int(1.5 * 2**30)
    for env, name in (({"SCD_GPU_BYTES": "lots"}, "SCD_GPU_BYTES"), ({"SCD_GPU_BYTES": "0"}, "SCD_GPU_BYTES"),
                      ({"SCD_IDLE_S": "-1"}, "SCD_IDLE_S"), ({"SCD_IDLE_S": "1.5"}, "SCD_IDLE_S")):
        with pytest.raises(ValueError, match=name):
            backend.memory(env)
    client = backend.make_client("process", None, load, 8, {"SCD_GPU_BYTES": "2GB", "SCD_IDLE_S": "45"})
    try:
        assert client.residency.budget == 2 * 10**9 and client.idle_timeout == 45
    finally:
        client.close()


# --------------------------------------------------------------------- worker processes

@pytest.fixture
def logged(tmp_path, monkeypatch):
    path = tmp_path / "loads.jsonl"
    monkeypatch.setenv(LOG, str(path))
    return lambda: [json.loads(line) for line in path.read_text().splitlines()]


def test_the_old_worker_is_gone_before_the_next_large_model_loads(logged):
    client = ProcessClient(load=load, large=large, residency=Residency(quiet_s=0.1))
    try:
        for name in ("slow-a", "slow-b", "slow-a", "tiny", "slow-b"):
            run(client, name)
            workers = client.pids()
            assert len([p for p in workers if p != client.pid("tiny")]) == 1, workers   # one large worker
        loads = logged()
        assert [s["name"] for s in loads] == ["slow-a", "slow-b", "slow-a", "tiny", "slow-b"]
        large_pids = {s["pid"] for s in loads if large(s["name"])}
        for s in loads:                                         # no other large worker alive at a large load
            assert not large(s["name"]) or not set(s["others_alive"]) & large_pids - {s["pid"]}, s
        assert client.pid("tiny") is not None                   # a small model's worker stays
        assert client.residency.why_not_resident("slow-a").arriving == "slow-b"
        pids = client.pids()
    finally:
        client.close()
    assert not any(_alive(p) for p in pids) and client.pids() == []   # no worker left behind


def test_a_byte_budget_lets_two_workers_share_the_device(logged):
    size = {name: model_bytes(Slow(h)) for name, h in HIDDEN.items()}
    budget = Residency(budget=size["slow-a"] + size["slow-b"] + 1000, quiet_s=0.1)
    client = ProcessClient(load=load, large=large, residency=budget)
    try:
        run(client, "slow-a")
        run(client, "slow-b")                                  # b never measured here: a goes
        assert client.pid("slow-a") is None
        run(client, "slow-a")                                  # both measured, both fit
        assert client.pid("slow-a") and client.pid("slow-b")
        assert budget.resident() == {"slow-b": size["slow-b"], "slow-a": size["slow-a"]}   # measured in the workers
        budget.measured("slow-c", size["slow-c"])              # as if loaded before: c and a fit, not b
        budget.budget = size["slow-a"] + size["slow-c"] + 1000
        run(client, "slow-c")
        assert client.pid("slow-b") is None and client.pid("slow-a") and client.pid("slow-c")
    finally:
        client.close()


def test_an_idle_worker_is_closed_after_the_timeout_and_a_busy_one_is_not(logged):
    """No pause in the test's own thread (a loaded machine may stall it for a second) can close
    the worker early: the long row is its first request, in flight from the submit on. The
    reaper's thread drops the worker, then records why: both are waited for."""
    client = ProcessClient(load=load, large=large, idle_timeout=1.0)
    try:
        long = client.submit("slow-a", "a cat", 1, AR)          # the worker started, its row queued
        pid, started = client.pid("slow-a"), time.monotonic()
        assert client.result(long, timeout=120).nfe == 64      # about 2 s: longer than the timeout
        assert time.monotonic() - started > 1.0
        assert client.pid("slow-a") == pid and _alive(pid)     # not closed while it ran

        def closed():
            return client.pid("slow-a") is None and not _alive(pid) and client.residency.why_not_resident("slow-a")
        deadline = time.monotonic() + 30
        while not closed() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert client.pid("slow-a") is None and not _alive(pid)       # closed, its process gone
        why = client.residency.why_not_resident("slow-a")
        assert why is not None and why.idle_s == 1.0 and why.arriving is None
        run(client, "slow-a")                                  # the next request starts it again
    finally:
        client.close()


def test_a_swap_waits_for_the_old_models_rows_and_loses_no_request(logged):
    client = ProcessClient(load=load, large=large, residency=Residency(quiet_s=0.2))
    try:
        run(client, "slow-a")
        running = [client.submit("slow-a", "a cat", seed, AR) for seed in range(3)]
        next(iter(client.records(running[0])))                 # a's rows are decoding
        results: dict = {}
        swap = threading.Thread(target=lambda: results.update(b=run(client, "slow-b")))
        swap.start()
        deadline = time.monotonic() + 30
        while client.residency.swap is None and time.monotonic() < deadline:
            time.sleep(0.01)
        said = client.residency.swap
        assert said.leaving == ("slow-a",) and said.arriving == "slow-b"
        late = threading.Thread(target=lambda: results.update(a=run(client, "slow-a", seed=5)))
        late.start()                                           # a new row of a, during the swap: it waits
        for request in running:                                # a's rows end whole
            row = client.result(request, timeout=120)
            assert row.nfe == 64 and not row.cancelled
        swap.join(180)
        late.join(180)
        assert sorted(results) == ["a", "b"]                   # both served, in turn
        loads = logged()
        assert [s["name"] for s in loads] == ["slow-a", "slow-b", "slow-a"]
        assert all(not s["others_alive"] for s in loads)
    finally:
        client.close()


def test_a_model_still_in_use_after_the_drain_stays_and_the_newcomer_is_told_why(logged):
    client = ProcessClient(load=load, large=large, residency=Residency(drain_s=0.5, quiet_s=0.1))
    try:
        run(client, "slow-a")
        busy = client.submit("slow-a", "a cat", 0, AR)
        next(iter(client.records(busy)))
        with pytest.raises(DecodeError, match="slow-b could not be loaded: slow-a is still in use here"):
            client.submit("slow-b", "a cat", 0, AR)
        assert client.result(busy, timeout=120).nfe == 64      # the running row was not touched
        assert client.pid("slow-b") is None and client.is_resident("slow-a")
        run(client, "slow-b")                                  # once it is free, b loads
    finally:
        client.close()


# ------------------------------------------------------------------ in the page's process

class Page:
    """The page's models, servers and in-process decode client on a cache of stand-ins; the
    loader notes, at each load, which earlier models are still alive or have a server."""

    def __init__(self, drain_s: float = 60.0) -> None:
        self.loads: list[tuple[str, list[str], int]] = []
        self.made: dict[str, list[weakref.ref]] = {}
        self.servers = Servers(max_batch=8)
        self.cache = ModelCache(self.loader, large=large, residency=Residency(drain_s=drain_s, quiet_s=0.1))
        self.models = Models(self.cache, "cpu", self.servers)
        self.client = PageClient(self.servers, self.models.get)
        self.models.use(self.client, downloads_here=False)

    def loader(self, name: str, **kwargs):
        gc.collect()
        alive = [n for n, refs in self.made.items() if any(r() is not None for r in refs)]
        self.loads.append((name, alive, len(self.servers.models())))
        model = Slow(HIDDEN[name]) if large(name) else scd_core.load_model(name)
        self.made.setdefault(name, []).append(weakref.ref(model))
        return model


def test_in_the_page_the_old_models_server_and_decoders_go_before_the_next_load():
    page = Page()
    try:
        for name in ("slow-a", "slow-b", "slow-a"):
            run(page.client, name)
        assert [(name, alive) for name, alive, _ in page.loads] == [("slow-a", []), ("slow-b", []), ("slow-a", [])]
        assert [servers for _, _, servers in page.loads] == [0, 0, 0]   # no server left of the model before
        assert page.cache.names() == ["slow-a"] and len(page.servers.models()) == 1
        assert page.models.swap_note("slow-b") == ("**Loading slow-b:** it was unloaded to make room for "
                                                   "slow-a; your run starts once it is loaded again.")
        assert page.models.swap_note("slow-a") is None
    finally:
        page.client.close()


def test_in_the_page_a_swap_is_said_and_every_row_is_served():
    page = Page()
    try:
        run(page.client, "slow-a")
        running = [page.client.submit("slow-a", "a cat", seed, AR) for seed in range(2)]
        next(iter(page.client.records(running[0])))
        results: dict = {}
        swap = threading.Thread(target=lambda: results.update(b=run(page.client, "slow-b")))
        swap.start()
        deadline = time.monotonic() + 30
        while page.cache.residency.swap is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert page.models.swap_note("slow-a").startswith("**Waiting:** slow-a is being unloaded to make room "
                                                          "for slow-b (one large model at a time")
        assert page.models.swap_note("slow-b").startswith("**Waiting:** slow-a is being unloaded to make room "
                                                          "for slow-b (its runs finish first)")
        late = threading.Thread(target=lambda: results.update(a=run(page.client, "slow-a", seed=5)))
        late.start()
        for request in running:
            row = page.client.result(request, timeout=120)
            assert row.nfe == 64 and not row.cancelled
        swap.join(120)
        late.join(120)
        assert sorted(results) == ["a", "b"]
        assert [name for name, _, _ in page.loads] == ["slow-a", "slow-b", "slow-a"]
        assert all(not alive for _, alive, _ in page.loads)
    finally:
        page.client.close()


def test_in_the_page_a_model_busy_past_the_drain_stays_and_the_newcomer_is_told_why():
    page = Page(drain_s=0.3)
    try:
        run(page.client, "slow-a")
        busy = page.client.submit("slow-a", "a cat", 0, AR)
        next(iter(page.client.records(busy)))
        with pytest.raises(DecodeError, match="slow-b could not be loaded: slow-a is still in use here"):
            page.client.submit("slow-b", "a cat", 0, AR)
        assert page.client.result(busy, timeout=120).nfe == 64
        assert page.cache.names() == ["slow-a"] and page.models.resident("slow-a")
        run(page.client, "slow-a", seed=3)                     # it still serves
    finally:
        page.client.close()
