"""Decode clients: in this process (LocalClient) and in worker processes (ProcessClient) give
`generate`'s tokens, share passes, cancel, refuse bad requests, and survive a dead worker."""
from __future__ import annotations

import os
import pickle
import signal
import threading
import time

import numpy as np
import pytest
import torch

import scd_core
from scd_core.client import DecodeClient, DecodeError, ModelInfo, pack_record, unpack_record
from scd_core.frames import display_frames
from scd_core.local import LocalClient
from scd_core.settings import Settings
from scd_core.workers import ProcessClient

pytestmark = pytest.mark.served

MODELS = ["tiny", "small-grid"]
PAGE = Settings(method="scd-mc", window=16, top_k=100, cfg_scale=3.0)      # the page's defaults on tiny
GRID = Settings(method="sjd", window=6, top_k=30, cfg_scale=2.0)
AR = Settings(method="ar", window=1)                                     # 64 passes on tiny, 256 on toy-grid
SETTINGS = {"tiny": PAGE, "small-grid": GRID, "toy-grid": GRID}


class OwnDecoders:
    """tiny, whose sessions give each row a decoder of its own (as a video model's rows decode
    after the frames they continued): row b's pictures come out inverted, 255 - pixels."""

    def __init__(self) -> None:
        self.inner = scd_core.load_model("tiny")
        self.grid, self.vocab_size = self.inner.grid, self.inner.vocab_size

    def start(self, prompts, cfg_scale):
        session = self.inner.start(prompts, cfg_scale)
        session.row_decoder = lambda row: self.inverted
        return session

    def decode(self, tokens):
        return self.inner.decode(tokens)

    def inverted(self, tokens):
        return [255 - np.asarray(image.convert("RGB")) for image in self.inner.decode(tokens)]


def load(name: str):
    """The embedded models; "small-grid" is toy-grid at 8 x 8 (quick to decode); "own-decoders":
    `OwnDecoders`."""
    if name == "small-grid":
        return scd_core.load_model("toy-grid", grid=(8, 8), vocab_size=64, hidden=64)
    if name == "own-decoders":
        return OwnDecoders()
    return scd_core.load_model(name)


@pytest.fixture(scope="module")
def models():
    return {name: load(name) for name in MODELS}


@pytest.fixture(scope="module")
def local():
    client = LocalClient(load, max_batch=32)
    yield client
    client.close()


@pytest.fixture(scope="module")
def process():
    client = ProcessClient(models=MODELS, threads=1, load=load)
    yield client
    client.close()


@pytest.fixture(scope="module")
def in_call():
    client = LocalClient(load, max_batch=32, in_call=True)
    yield client
    client.close()


@pytest.fixture(params=["local", "process", "in_call"])
def client(request, local, process, in_call):
    return {"local": local, "process": process, "in_call": in_call}[request.param]


def same_record(a, b) -> None:
    """Two records of one row agree field for field (the times aside: they are measured)."""
    assert (a.index, a.method, a.nfe) == (b.index, b.method, b.nfe)
    for name in ("n_before", "n_after", "start", "window_tokens", "num_accepted", "accept_prob", "p_draft", "q_draft",
                 "resampled", "drafts_after", "tokens_after"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.shape == y.shape, name
        torch.testing.assert_close(x, y, rtol=0, atol=0, equal_nan=True, msg=name)


def test_every_client_follows_the_interface(local, process, in_call):
    assert all(isinstance(c, DecodeClient) for c in (local, process, in_call))


@pytest.mark.parametrize("name", MODELS)
def test_rows_give_generates_tokens_and_nfe_and_share_passes(client, models, name):
    settings, prompts = SETTINGS[name], ["a cat", "a dog", "a red apple", "a boat"]
    requests = [client.submit(name, prompt, seed, settings) for seed, prompt in enumerate(prompts)]
    results = [client.result(r, timeout=60) for r in requests]
    for seed, (prompt, row) in enumerate(zip(prompts, results)):
        alone = scd_core.generate(models[name], [prompt], seed=seed, settings=settings)
        assert torch.equal(row.tokens, alone.tokens[0]), (prompt, seed)
        assert row.nfe == alone.nfe and not row.cancelled
        assert len(row.batch_sizes) == row.nfe
    assert max(max(row.batch_sizes) for row in results) > 1                     # passes were shared


def test_records_crossing_the_process_boundary_equal_the_in_process_ones(local, process, models):
    for name, seed in (("tiny", 7), ("small-grid", 2)):
        settings = SETTINGS[name]
        here, there = local.submit(name, "a cat", seed, settings), process.submit(name, "a cat", seed, settings)
        ours, theirs = list(local.records(here)), list(process.records(there))
        alone = scd_core.generate(models[name], ["a cat"], seed=seed, settings=settings).iterations
        assert len(ours) == len(theirs) == len(alone)
        for a, b, c in zip(ours, theirs, alone):
            same_record(a, b)
            same_record(b, c)
        assert list(process.records(there))[-1].nfe == len(theirs)               # records replay from the first


def test_a_record_crosses_as_what_its_pass_changed():
    run = scd_core.generate(load("toy-grid"), ["a cat"], seed=1, settings=GRID)
    tokens = torch.full((1, run.num_tokens), -1, dtype=torch.long)
    for record in run.iterations:
        packed = pack_record(record)
        assert len(pickle.dumps(packed)) < len(pickle.dumps(record)) / 4          # no [1, N] canvas in it
        same_record(unpack_record(pickle.loads(pickle.dumps(packed)), tokens), record)


def test_cancel_stops_a_row_within_a_pass_or_two_and_keeps_it_partial(client, models):
    full = scd_core.generate(models["tiny"], ["a tree"], seed=4, settings=AR)
    request = client.submit("tiny", "a tree", 4, AR)
    records, seen_at_cancel, cancelled_at = [], None, None
    for record in client.records(request):
        records.append(record)
        if len(records) == 3:
            client.cancel(request)
            seen_at_cancel, cancelled_at = len(records), time.perf_counter()
    row = client.result(request, timeout=10)
    assert time.perf_counter() - cancelled_at < 2.0
    # in this process the consumer reads a pass or two behind the decoder, and the pass under way
    # ends; a worker's records arrive gathered (workers.GATHER s of passes in one message), so
    # there the row only has to end well before its grid is complete
    if isinstance(client, LocalClient):
        assert seen_at_cancel <= len(records) <= seen_at_cancel + 3
    assert row.cancelled and row.nfe == len(records) < full.nfe
    n = int(records[-1].n_after[0])
    assert torch.equal(row.tokens[:n], full.tokens[0, :n]) and bool((row.tokens[n:] == -1).all())
    client.cancel(request)                                                        # an ended row: nothing happens
    assert client.result(request).cancelled


@pytest.mark.parametrize("change, argument", [
    (dict(prompt=3), "prompts"), (dict(seed=-1), "seed"), (dict(seed=True), "seed"),
    (dict(settings="scd-mc"), "settings"), (dict(model="no-such-model"), "model"),
    (dict(settings=Settings(init="repeat-frame")), "init")])
def test_a_bad_request_raises_a_value_error_naming_the_argument(client, change, argument):
    request = dict(model="tiny", prompt="a cat", seed=0, settings=PAGE) | change
    with pytest.raises(ValueError, match=argument):
        client.submit(**request)


def test_an_unknown_request_id_is_a_value_error(client):
    for call in (client.records, client.cancel, client.result):
        with pytest.raises(ValueError, match="request"):
            call("0" * 32)


def test_a_killed_worker_fails_only_its_own_rows_and_is_restarted(models):
    threads_before = torch.get_num_threads()
    client = ProcessClient(models=["tiny", "toy-grid"], threads=2)
    try:
        warm = [client.submit(name, "warm", 0, SETTINGS[name]) for name in ("tiny", "toy-grid")]
        for request in warm:                                                      # both workers up
            client.result(request, timeout=120)
        other = client.submit("toy-grid", "a boat", 3, AR)                       # 256 passes
        doomed = [client.submit("tiny", "a cat", seed, AR) for seed in range(6)]
        for request in doomed:
            next(iter(client.records(request)))                                   # each has started
        in_flight = [r for r in doomed if _running(client, r)]
        assert in_flight, "the rows ended before the worker could be killed"
        assert _running(client, other)
        dead = client.pid("tiny")
        os.kill(dead, signal.SIGKILL)
        killed_at = time.perf_counter()
        for request in in_flight:
            with pytest.raises(DecodeError, match="the decoding worker for tiny stopped unexpectedly"):
                client.result(request, timeout=5)
            with pytest.raises(DecodeError, match="stopped unexpectedly"):
                list(client.records(request))
        assert time.perf_counter() - killed_at < 5
        row = client.result(other, timeout=60)                                    # untouched by the kill
        assert row.nfe == 256 and not row.cancelled and bool((row.tokens >= 0).all())
        again = client.result(client.submit("tiny", "a cat", 5, PAGE), timeout=120)  # a new worker
        assert client.pid("tiny") not in (None, dead)
        assert torch.equal(again.tokens, scd_core.generate(models["tiny"], ["a cat"], seed=5,
                                                           settings=PAGE).tokens[0])
        idle = client.pid("tiny")                                                 # killed while idle: the next
        os.kill(idle, signal.SIGKILL)                                             # row goes to a new worker
        once = client.result(client.submit("tiny", "a cat", 5, PAGE), timeout=120)
        assert torch.equal(once.tokens, again.tokens) and client.pid("tiny") not in (None, idle, dead)
        assert client.worker_threads("tiny") == client.worker_threads("toy-grid") == 2
        assert torch.get_num_threads() == threads_before != 2                     # the workers' threads are theirs
        pids = [client.pid(name) for name in ("tiny", "toy-grid")]
    finally:
        client.close()
    for pid in pids:                                                              # no orphan workers
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_close_cancels_running_rows_and_refuses_new_ones():
    client = ProcessClient()                                                  # any name load_model knows
    with pytest.raises(ValueError, match="model: unknown model 'no-such-model'"):
        client.submit("no-such-model", "a cat", 0, AR)                        # its worker's load refused it
    request = client.submit("toy-grid", "a cat", 0, AR)                        # 256 passes
    next(iter(client.records(request)))
    closer = threading.Thread(target=client.close)
    closer.start()
    closer.join(30)
    assert not closer.is_alive()
    row = client.result(request, timeout=0)
    assert row.cancelled and row.nfe < 256
    with pytest.raises(DecodeError, match="closed"):
        client.submit("toy-grid", "a cat", 0, AR)


def _running(client, request) -> bool:
    try:
        client.result(request, timeout=0)
    except TimeoutError:
        return True
    return False


# ----------------------------------------------------------------- decoding inside the call

def test_an_in_call_client_runs_the_passes_in_the_readers_thread_and_starts_none(models):
    client = LocalClient(load, in_call=True)
    threads = {t.ident for t in threading.enumerate()}
    requests = [client.submit("tiny", "a cat", seed, PAGE) for seed in range(3)]
    assert {t.ident for t in threading.enumerate()} == threads              # submitting runs nothing
    rows = [client.result(r, timeout=60) for r in requests]                 # waiting runs the passes, here
    assert {t.ident for t in threading.enumerate()} == threads
    for seed, row in enumerate(rows):
        assert torch.equal(row.tokens, scd_core.generate(models["tiny"], ["a cat"], seed=seed,
                                                         settings=PAGE).tokens[0])
    assert rows[0].batch_sizes[0] == 3                                      # the three started in one pass
    late = client.submit("tiny", "a dog", 0, AR)
    with pytest.raises(TimeoutError):
        client.result(late, timeout=0.05)                                   # runs passes for 0.05 s, no more
    assert not client.result(late, timeout=60).cancelled
    client.close()


# --------------------------------------------------------------- what a front end is told

@pytest.mark.parametrize("name", ["tiny", "small-grid"])
def test_model_info_and_pictures_come_from_where_the_model_is(client, models, name):
    model = models[name]
    assert client.model_info(name) == ModelInfo.of(name, model)
    request = client.submit(name, "a cat", 2, SETTINGS[name])
    last = list(client.records(request))[-1]
    mid = last.canvas.clone()
    mid[:, mid.shape[1] // 2:] = -1                                          # half empty, as mid-run
    canvases = torch.cat([last.canvas, mid])
    for size in (None, 16, 320):
        drawn = client.pictures(name, canvases, size, [client.decoder(request), None])
        here = display_frames(model, canvases, size)
        assert len(drawn) == 2 and all(np.array_equal(a, b) for d, h in zip(drawn, here) for a, b in zip(d, h))


@pytest.mark.parametrize("bad, argument", [
    (dict(canvases=torch.zeros(1, 5, dtype=torch.long)), "canvases: expected 64 tokens"),
    (dict(canvases=torch.full((1, 64), 512)), "canvases: tokens must lie in"),
    (dict(canvases=torch.zeros(1, 64)), "canvases: expected a LongTensor"),
    (dict(size=0), "size"), (dict(requests=["a", "b"]), "requests: expected one per canvas"),
    (dict(model="no-such-model"), "model")])
def test_bad_pictures_requests_are_value_errors_naming_the_argument(client, bad, argument):
    ask = dict(model="tiny", canvases=torch.zeros(1, 64, dtype=torch.long), size=16, requests=None) | bad
    with pytest.raises(ValueError, match=argument):
        client.pictures(ask["model"], ask["canvases"], ask["size"], ask["requests"])


@pytest.mark.parametrize("kind", ["local", "process"])
def test_a_rows_own_decoder_draws_its_pictures_also_after_its_end(kind):
    client = LocalClient(load) if kind == "local" else ProcessClient(models=["own-decoders"], load=load)
    try:
        request = client.submit("own-decoders", "a cat", 1, PAGE)
        canvas = list(client.records(request))[-1].canvas
        client.result(request, timeout=60)
        getattr(client, "release")(request)                                   # forgotten as a row; its decoder kept
        own, plain = client.pictures("own-decoders", torch.cat([canvas, canvas]), None,
                                     [client.decoder(request), "0" * 32])   # an unknown row: the model's own
        assert np.array_equal(own[0], 255 - plain[0])
    finally:
        client.close()
