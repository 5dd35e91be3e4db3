"""The page's configuration, in one place: where it decodes, its queues and sessions, how it is
launched, and the objects every tab shares (the servers, the models, the decode client, the run
control). Made once, when the page is imported (`demo.layout`); a decode worker never imports it."""
from __future__ import annotations

import gradio as gr
import torch
from fastapi.responses import JSONResponse
from gradio.route_utils import FnIndexInferError

from scd_core.models import cache

from demo import backend, models, picture_files, queues, runs, servers, texts, uploads

# Concurrency. Generate requests run side by side: their rows share the forward passes of one
# server per model, which runs one pass at a time. A race (each method timed alone: it holds
# the servers' device lock for its decode), a comparison and an export run one at a time on
# the decode queue, a model load one at a time on its own. A running Generate holds a thread
# while its row waits for passes; the rest of the threads serve Stop and the page's quick
# events. The queues' names and time limits: `demo.runs`.
KIND = backend.backend_kind()         # where Generate and the race decode (SCD_DECODE, docs/app.md)
SERVERS = servers.Servers(max_batch=32, threaded=KIND != "call")
GENERATE = dict(concurrency_limit=SERVERS.max_batch, concurrency_id=runs.GENERATE_QUEUE)
DECODE = dict(concurrency_limit=1, concurrency_id=runs.DECODE_QUEUE)
LOAD = dict(concurrency_limit=1, concurrency_id=runs.LOAD_QUEUE)
# Places on each queue (`demo.queues`): one job per visitor, a few per client address
# (SCD_GENERATE_PLACES, SCD_DECODE_PLACES: a classroom behind one address shares them), and so
# many waiting, each queue its own: races waiting never take Generate's places. The small
# queues (a model's switch, a replayed pass, a race sample) have the default caps. A client's
# address behind proxies: SCD_PROXY_HOPS (docs/deploy.md).
CAPS = {runs.GENERATE_QUEUE: queues.Caps(session=1, client=backend.env_count("SCD_GENERATE_PLACES", 16),
                                            waiting=64),
        runs.DECODE_QUEUE: queues.Caps(session=1, client=backend.env_count("SCD_DECODE_PLACES", 2), waiting=16),
        runs.LOAD_QUEUE: queues.Caps(session=2, client=4, waiting=16)}
SMALL_CAPS = queues.Caps(session=4, client=32, waiting=64)
QUEUE = dict(max_size=None, default_concurrency_limit=1)      # the caps bound every queue
LIMITS = runs.limits()                # each job's time limit (SCD_<JOB>_LIMIT_S)
# Gradio keeps a copy of the page per visitor, with their last run for the replay (0.45-0.66 MB
# measured, docs/app.md), for this many visitors; the one unseen longest is dropped first.
SESSIONS = backend.env_count("SCD_SESSIONS", 128)
THREADS = 2 * SERVERS.max_batch
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
MODELS = models.Models(cache, DEVICE, SERVERS)   # one large model resident at a time
REQUESTS = backend.Requests(backend.make_client(
    KIND, lambda in_call: servers.PageClient(SERVERS, MODELS.get, in_call), models.load_for_worker,
    SERVERS.max_batch))
MODELS.use(REQUESTS.client, downloads_here=KIND == "process")   # it loads and draws the downloaded models
# Each visitor's run, Stops, places on each queue, time limits (`demo.runs`); a ZeroGPU call runs
# in a process of its own. The jobs Gradio's queue holds are read from the page's blocks, once
# they exist (`demo.page` hands them over).
CONTROL = runs.Control(runs.Stops(shared=backend.on_zero_gpu()), REQUESTS,
                       queues.Admissions(CAPS, SMALL_CAPS, hops=queues.proxy_hops()), LIMITS)

# The runs' pictures and files are served from their own folders, never copied into Gradio's
# cache, and swept there by age and count (demo.picture_files). What Gradio's cache holds (the
# visitors' uploads) is swept of what is older than half an hour (SCD_FILES_S), every sixth of
# that, by Gradio and, should its sweep stop, by `picture_files.CacheSweeper` (docs/deploy.md).
gr.set_static_paths(picture_files.roots())
CACHE_SWEEP = (max(10, picture_files.RUN_AGE_S // 6), picture_files.RUN_AGE_S)

WARM_S = 120.0          # the page waits this long at most at its start for its first model's worker
DRAIN_S = 3.0           # a clean stop waits this long at most for the runs in flight to say that they stopped
FLUSH_S = 2.0           # ... then this long at most for Gradio to hand their last updates to their streams
SENT_S = 0.1            # ... and this long for the streams to write them
CLOSE_WORKERS_S = 3.0   # ... and this long for each decode worker to exit before it is terminated


def unknown_route(request, exc) -> JSONResponse:
    """An API call to a route the page does not have (Gradio answers 500): 404."""
    return JSONResponse({"error": "No such API route: see the page's API (docs/deploy.md)."}, status_code=404)


LAUNCH = dict(css=texts.CSS, js=texts.LOAD_JS, theme=gr.themes.Soft(), max_file_size=uploads.MAX_UPLOAD_BYTES,   # tests launch with these too
              max_threads=THREADS, state_session_capacity=SESSIONS,
              app_kwargs={"exception_handlers": {FnIndexInferError: unknown_route}})
