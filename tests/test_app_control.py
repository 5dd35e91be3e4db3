"""The run control through the API, as any client of a public Space can use it: a cancelled
event stops its work (no thread or row left running), one job per visitor on each queue,
bad values refused before the queue with no traceback, an unknown route 404, a Stop's
stamp bounded. The page is served on loopback (`url`, tests/conftest.py) and called with
gradio_client.
"""
from __future__ import annotations

import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from gradio_client import Client
from gradio_client.utils import Status

from bench.page_lifecycle import wait_for
from demo import config, servers
from test_app import args

pytestmark = pytest.mark.served

TINY = dict(model="tiny", prompt="red heart", method="scd-mc", window=16, top_k=100, cfg_scale=3.0, seed=1)
LOSSLESS = dict(model="tiny", prompt="red heart", method="scd-mc", window=16, init="random", temperature=1.0,
                top_k=100, top_p=1.0, cfg=3.0, seed=0, lossless_samples=1024)


def threads(prefix: str) -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(prefix)]


def status_of(job, index: int = 0) -> str:
    outputs = job.outputs()
    return (outputs[-1][index] or "") if outputs else ""


def test_a_cancelled_event_leaves_no_thread_or_row_running(url):
    """Lossless, Generate and a race, each cancelled mid-run by its client (what closing the
    tab does): within 1 s no thread of it and no row of it is left."""
    client = Client(url, verbose=False)
    job = client.submit(**LOSSLESS, api_name="/lossless")
    assert wait_for(lambda: "Decoding" in status_of(job) and threads("scd-lossless"), 60)
    job.cancel()
    assert wait_for(lambda: not threads("scd-lossless"), 1.0), threads("scd-lossless")

    job = client.submit(**args(**TINY, pace=0.5), api_name="/generate")
    assert wait_for(lambda: config.REQUESTS.rows_of("tiny") == 1 and "decoding" in status_of(job, 1), 60)
    job.cancel()
    assert wait_for(lambda: config.REQUESTS.rows_of("tiny") == 0 and not threads("scd-follow"), 1.0)

    job = client.submit(**args(**TINY, samples=4, pace=0.5), api_name="/race")
    assert wait_for(lambda: threads("scd-race-row"), 60)
    job.cancel()
    assert wait_for(lambda: not threads("scd-race-row"), 1.0), threads("scd-race-row")
    assert wait_for(lambda: config.CONTROL.runs.going(client.session_hash) is None, 1.0)
    assert config.CONTROL.admissions.held("decode", session=client.session_hash) == 0   # its place in the queue given back


def test_one_job_per_visitor_on_each_queue_and_others_are_served_meanwhile(url):
    """A second Lossless comparison of one client is refused before the queue with a
    sentence, and so is a race on the same queue; a client's job cancelled while it waits
    (`job.cancel()`) leaves it free at once, twice over; another visitor's Generate runs at once."""
    abuser, other = Client(url, verbose=False), Client(url, verbose=False)
    first = abuser.submit(**LOSSLESS, api_name="/lossless")
    assert wait_for(lambda: "Decoding" in status_of(first), 60)
    for api, inputs in (("/lossless", LOSSLESS), ("/race", args(**TINY, samples=2))):
        with pytest.raises(Exception, match="still waiting in the queue or running"):
            abuser.submit(**inputs, api_name=api).result(timeout=30)
    queued = Client(url, verbose=False)                   # a job cancelled while it waits, as docs/app.md says
    for _ in range(2):
        waiting = queued.submit(**(LOSSLESS | {"lossless_samples": 16}), api_name="/lossless")
        assert wait_for(lambda: waiting.status().code == Status.IN_QUEUE, 30), waiting.status()
        assert config.CONTROL.admissions.held("decode", session=queued.session_hash) == 1
        waiting.cancel()
        assert config.CONTROL.admissions.held("decode", session=queued.session_hash) == 0    # free at once
    t = time.perf_counter()
    done = other.submit(**args(**TINY, pace=0.0), api_name="/generate").result(timeout=60)
    assert "done" in done[1] and time.perf_counter() - t < 30
    abuser.predict(api_name="/stop")
    first.result(timeout=30)
    assert "Stopped" in status_of(first)
    assert wait_for(lambda: config.CONTROL.admissions.held("decode", session=abuser.session_hash) == 0, 5)
    later = abuser.submit(**(LOSSLESS | {"lossless_samples": 16}), api_name="/lossless")   # admitted again
    later.result(timeout=120)
    assert "Done" in status_of(later)


def test_bad_values_are_refused_before_the_queue_and_unknown_routes_are_404(url, capfd):
    """/replay with a non-number (Gradio's slider reads it in the page's validator) and
    /lossless with bad values are refused before the queue with the field's message, and log
    no traceback; an unknown API route is 404; a Stop stamped
    in the far future does not stop the visitor's later runs, and their export then runs
    and gives back its place on the queue."""
    client = Client(url, verbose=False)
    for index, said in (("abc", "Expected a `float`"), (float("inf"), "greater than maximum value")):
        r = httpx.post(f"{url}gradio_api/call/replay", content=f'{{"data": [{json.dumps(index)}, null]}}',
                       headers={"content-type": "application/json"})
        assert r.status_code in (400, 422) and said in r.text, (index, r.status_code, r.text)
    for bad, said in (({"lossless_samples": "many"}, "Samples per method"), ({"lossless_samples": 3}, "16"),
                      ({"model": "janus-pro-1b"}, "model: Model: janus-pro-1b")):
        with pytest.raises(Exception, match=said):
            client.submit(**(LOSSLESS | bad), api_name="/lossless").result(timeout=30)
    assert "Traceback" not in capfd.readouterr().err
    assert httpx.post(f"{url}gradio_api/call/nothing-here", json={"data": []}).status_code == 404
    client.predict(1e308, api_name="/stop")
    done = client.submit(**args(**TINY, pace=0.0), api_name="/generate").result(timeout=60)
    assert "done" in done[1]
    mp4, files = client.submit(api_name="/export").result(timeout=120)     # its last run, exported
    assert mp4.endswith(".mp4") and len(files) == 2
    assert config.CONTROL.admissions.held("decode", session=client.session_hash) == 0


def join_payload(client: Client, api_name: str, **inputs) -> dict:
    """The body a client sends to join the queue for `api_name` with these inputs (gradio_client's own)."""
    from gradio_client.utils import construct_args
    index = client._infer_fn_index(api_name, None)
    endpoint = client.endpoints[index]
    return {"data": list(endpoint.insert_empty_state(*construct_args(endpoint.parameters_info, (), inputs))),
            "fn_index": index}


def test_one_address_holds_few_places_however_many_sessions_it_uses(url):
    """64 sessions of one address ask for slow races at once: two are admitted (one runs, one
    waits), the rest are refused before the queue, naming the cap, and so is a call with no
    session from that address; meanwhile another address's Generate is served. The waiting
    one, cancelled as a client cancels, gives its place back at once. Every queued event of
    the page is admitted within its queue's caps (none escapes them; a visitor leaving is
    Gradio's own call)."""
    from demo import page
    unchecked = [fn.name for fn in page.demo.fns.values() if fn.queue and fn.validator is None
                 and fn.targets != [(None, "unload")]]                     # Gradio calls that one itself
    assert not unchecked, unchecked
    abuser = {"X-Forwarded-For": "203.0.113.9"}
    payload = join_payload(Client(url, verbose=False), "/race", **args(**TINY, samples=16, pace=2.0))
    sessions = [uuid.uuid4().hex for _ in range(64)]
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda s: httpx.post(f"{url}gradio_api/queue/join", json=payload | {"session_hash": s},
                                                     headers=abuser, timeout=60), sessions))
    admitted = [(s, a.json()["event_id"]) for s, a in zip(sessions, answers) if a.status_code == 200]
    assert len(admitted) == config.CAPS["decode"].client == 2, [a.text for a in answers][:3]
    assert all(a.status_code == 422 and "at most 2 per address" in a.text for a in answers if a.status_code != 200)
    anonymous = httpx.post(f"{url}gradio_api/call/race", json={"data": payload["data"]}, headers=abuser, timeout=60)
    assert anonymous.status_code == 422 and "at most 2 per address" in anonymous.text
    t = time.perf_counter()
    other = Client(url, verbose=False, headers={"X-Forwarded-For": "198.51.100.4"})
    assert "done" in other.submit(**args(**TINY, pace=0.0), api_name="/generate").result(timeout=60)[1]
    assert time.perf_counter() - t < 60
    assert wait_for(lambda: config.CONTROL.runs.all(), 30)                   # one of the two races runs
    running = {key for key, _ in config.CONTROL.runs.all()}
    (waiting, event), = [(s, e) for s, e in admitted if s not in running]
    httpx.post(f"{url}gradio_api/cancel", json={"session_hash": waiting, "event_id": event,
                                                "fn_index": payload["fn_index"]}, timeout=30)
    assert config.CONTROL.admissions.held("decode", client="203.0.113.9") == 1  # at once
    for s, e in admitted:
        if s in running:
            httpx.post(f"{url}gradio_api/cancel", json={"session_hash": s, "event_id": e,
                                                        "fn_index": payload["fn_index"]}, timeout=30)
    assert wait_for(lambda: config.CONTROL.admissions.held("decode") == 0 and not config.CONTROL.runs.all(), 10)


def test_a_run_stops_at_its_time_limit_and_a_race_replays_within_it(url, monkeypatch):
    """A Generate in slow motion longer than its limit stops at it, its status saying why; a race
    whose replay would pass its limit replays faster, says so, and ends within it (each run's
    time from its start to its end on the page)."""
    monkeypatch.setitem(config.CONTROL.limits, "generate", 3)
    monkeypatch.setitem(config.CONTROL.limits, "race", 12)
    monkeypatch.setattr(servers, "REPLAY_MARGIN_S", 2.0)
    client = Client(url, verbose=False)

    def run_for(api: str, limit: float, **inputs) -> tuple[str, float]:
        job = client.submit(**inputs, api_name=api)
        assert wait_for(lambda: config.CONTROL.runs.going(client.session_hash) is not None, 60)
        run = config.CONTROL.runs.going(client.session_hash)
        assert run.quiet.wait(limit + 60)
        ran = time.monotonic() - (run.deadline - limit)
        job.result(timeout=60)
        return status_of(job, 1 if api == "/generate" else 0), ran

    said, ran = run_for("/generate", 3, **args(**TINY, pace=2.0))          # 64 passes at most, 2 s each
    assert "Generate may run 3 s at most" in said and ran < 3 + 2, (ran, said)
    said, ran = run_for("/race", 12, **args(**TINY, samples=1, pace=2.0))   # AR's replay alone: 128 s
    assert ran < 12 + 3, (ran, said)
    assert ("so that the race ends within the page's 12 s limit" in said and "Done" in said) or \
        "a race may run 12 s at most" in said, said
