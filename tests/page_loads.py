"""One copy of a downloaded model per machine: the page with worker-process decoding, counting
every model load in every process.

Run as a script (`python tests/page_loads.py LOG MODEL`, with HF_ENDPOINT naming a fake Hub
that serves MODEL, tests/fakehub.py), it picks MODEL on the page (its download), then runs
Generate, a race, a replayed pass, an export and a race sample through the page's handlers
on a `ProcessClient` whose worker loads with `counting_load`; the page's own model cache
loads through the same count. Each load is a line "pid name" in LOG. Only then does it load
MODEL itself, to check that the pictures the worker drew are those a copy in the page draws.
It prints one JSON line of what it saw.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # the repository: app, demo, scd_core


def note_load(name: str) -> None:
    with open(os.environ["SCD_LOAD_LOG"], "a", encoding="utf-8") as f:
        f.write(f"{os.getpid()} {name}\n")


def counting_load(name: str):
    """The worker's load (the page's, `demo.models.load_for_worker`), counted."""
    from demo.models import load_for_worker

    note_load(name)
    return load_for_worker(name)


def main(name: str) -> dict:
    from types import SimpleNamespace

    import numpy as np
    import torch

    from demo import checks, config, generate_tab, layout, model_notes, race_tab, replay_tab
    import scd_core
    from demo import backend, pictures
    from scd_core.workers import ProcessClient

    torch.set_num_threads(1)
    held = config.MODELS.cache._default                 # the page's model cache (scd_core.models.cache)
    loader = held._loader

    def page_load(model_name, **kwargs):
        note_load(model_name)
        return loader(model_name, **kwargs)
    held._loader = page_load
    config.REQUESTS.client.close()
    client = ProcessClient(threads=1, load=counting_load)
    config.REQUESTS = backend.Requests(client)
    config.MODELS.use(client, downloads_here=True)

    heard: list = []
    note = config.MODELS.load_note(name, lambda done, total, repo: heard.append((done, total, repo)))
    prompt = config.MODELS.examples(name)[0]
    values = model_notes.defaults(name)[0] | dict(model=name, method="scd-mc", seed=3, prompt=prompt, pace=0.0, samples=2)
    visitor = SimpleNamespace(session_hash="visitor")
    generated = list(generate_tab.generate_stream(**values, request=visitor))
    last = next(u[layout.last_run] for u in reversed(generated) if layout.last_run in u)
    status = next(u[layout.status] for u in reversed(generated) if layout.status in u)
    shown = next(u[layout.live_image] for u in reversed(generated) if layout.live_image in u)
    raced = list(race_tab.race_stream(**values, request=visitor))
    race_status = next(u[layout.race_status] for u in reversed(raced) if layout.race_status in u)
    state = next(u[layout.race_state] for u in reversed(raced) if layout.race_state in u)
    replay = replay_tab.replay_view(len(last["iterations"]) - 1, last)
    mp4, files = replay_tab.export_run(last)
    sample = race_tab.show_race_sample(2, state)
    worker = client.pid(name)
    loads = [line.split() for line in Path(os.environ["SCD_LOAD_LOG"]).read_text().splitlines()]

    # only now a copy in this process: the worker's pictures are the ones it draws
    own = scd_core.load_model(name)
    settings = checks.settings_of(values)
    run = scd_core.generate(own, [prompt], seed=3, settings=settings)
    here = pictures.render_iteration(own, run.iterations[-1])
    from PIL import Image
    page = np.asarray(Image.open(shown).convert("RGB")) if isinstance(shown, str) else shown
    client.close()
    return {"page": os.getpid(), "worker": worker, "loads": loads, "note": note, "heard": len(heard),
            "status": status, "race": race_status, "replay": list(replay[0].shape),
            "export": [os.path.getsize(f) for f in files], "sample": [list(v.shape) for v in sample.values()],
            "same_picture": bool(np.array_equal(page, here)), "nfe": run.nfe}


if __name__ == "__main__":
    os.environ["SCD_LOAD_LOG"] = sys.argv[1]
    print("RESULT " + json.dumps(main(sys.argv[2]), default=str))
