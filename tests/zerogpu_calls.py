"""The page's ZeroGPU path on a CPU: the page imported as a ZeroGPU Space imports it, with the
calls of `@spaces.GPU` run as `spaces` 0.51.3 runs them on ZeroGPU, minus the GPU.

What `spaces` does there (spaces/zero/wrappers.py) and what this does alike: a decorated
function's call is scheduled for `duration(*inputs)` seconds, then runs in a child process
forked from the page's, one kept per decorated function and GPU and reused while idle (here:
one idle child reused, another forked when it is busy); the call's inputs go to the child
pickled, and each value it yields comes back pickled (a value that does not pickle fails the
call). What cannot be done without a GPU and a CUDA build of torch: the real scheduling, the
emulation of CUDA in the page's process (`spaces` reads torch.version.cuda and patches
torch._C._cuda_init, which a CPU build has not) and the move of the page's tensors to the
GPU in the child. The real `spaces.GPU` is still called on each function, off ZeroGPU, where
it must hand the function back unchanged.

Run as a script (SCD_DECODE=call; `python tests/zerogpu_calls.py LOG`), it serves Generate,
the race, Stop, replay, export, a race sample and the lossless view on the embedded models
through the page's handlers, with every model operation (start, step, decode) written to LOG
with the process and thread that ran it, and prints one JSON line of what it saw.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import sys
import threading
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # the repository: app, demo, scd_core

import spaces  # noqa: E402

PAGE = os.getpid()
CONTEXT = multiprocessing.get_context("fork")          # as spaces: multiprocessing.get_context('fork')
DECORATED: list[str] = []
DURATIONS: list[tuple[str, int]] = []
CHILDREN: set[int] = set()
_real_gpu = spaces.GPU


class CallProcess:
    """A forked child that runs the calls it is sent, one at a time, as spaces' Worker."""

    def __init__(self, task) -> None:
        self.calls, self.results = CONTEXT.SimpleQueue(), CONTEXT.SimpleQueue()
        self.process = CONTEXT.Process(target=self._serve, args=(task,), daemon=True)
        self.process.start()
        CHILDREN.add(self.process.pid)

    def _serve(self, task) -> None:
        import torch
        torch.set_num_threads(1)
        while True:
            args, kwargs = pickle.loads(self.calls.get())
            try:
                for value in task(*args, **kwargs):
                    self.results.put(("ok", pickle.dumps(value)))     # what does not pickle fails the call
                self.results.put(("end", None))
            except Exception:                                          # noqa: BLE001: told to the page
                self.results.put(("error", traceback.format_exc()))


def emulated(task, duration):
    """`task` (a generator function) as spaces' generator_function_wrapper runs it on ZeroGPU."""
    idle: list[CallProcess] = []
    lock = threading.Lock()

    def handler(*args, **kwargs):
        DURATIONS.append((args[0], duration(*args, **kwargs)))
        payload = pickle.dumps((args, kwargs))
        with lock:
            worker = idle.pop() if idle else None
        worker = worker or CallProcess(task)
        worker.calls.put(payload)
        while True:
            kind, value = worker.results.get()
            if kind == "ok":
                yield pickle.loads(value)
            elif kind == "end":
                break
            else:
                raise RuntimeError(f"the GPU call failed:\n{value}")
        with lock:
            idle.append(worker)
    return handler


def GPU(task=None, *, duration=None, size=None):
    def wrap(fn):
        assert _real_gpu(duration=duration)(fn) is fn          # off ZeroGPU: the function itself
        DECORATED.append(fn.__name__)
        return emulated(fn, duration)
    return wrap(task) if callable(task) else wrap


spaces.GPU = GPU


# --------------------------------------------------------------------- watched models

class Log:
    def __init__(self, path: str) -> None:
        self.path = path

    def write(self, what: str) -> None:
        line = f"{os.getpid()} {threading.current_thread().name} {what}\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


class WatchedSession:
    def __init__(self, session, log: Log) -> None:
        self._session, self._log = session, log
        self.first_logits = session.first_logits

    def step(self, tokens, start):
        self._log.write("step")
        return self._session.step(tokens, start)

    def __getattr__(self, name):
        return getattr(self._session, name)


class Watched:
    """A model whose every start, step and decode is written down (process and thread)."""

    def __init__(self, model, log: Log) -> None:
        self._model, self._log = model, log
        self.grid, self.vocab_size = model.grid, model.vocab_size

    def start(self, prompts, cfg_scale):
        self._log.write("start")
        return WatchedSession(self._model.start(prompts, cfg_scale), self._log)

    def decode(self, tokens):
        self._log.write("decode")
        return self._model.decode(tokens)

    def __getattr__(self, name):
        return getattr(self._model, name)


def main(log_path: str) -> dict:
    import torch

    from demo import config, generate_tab, layout, lossless_tab, model_notes, model_switch, race_tab, race_view, replay_tab, runs, stopping
    from demo.inputs import problems as input_problems
    from types import SimpleNamespace

    torch.set_num_threads(1)
    log, seen = Log(log_path), {"threads": set(), "cuda": False}
    lazy_init = torch.cuda._lazy_init

    def cuda_init():                                  # every CUDA use starts here (it raises on this CPU build)
        log.write("cuda")
        return lazy_init()
    torch.cuda._lazy_init = cuda_init
    config.CONTROL.stops = runs.Stops(shared=True)           # as on ZeroGPU (SPACES_ZERO_GPU set)
    for name in ("texture", "tiny", "tiny-video"):
        config.MODELS.put(name, Watched(config.MODELS.get(name), log))

    def watch() -> None:                             # the page's threads while the calls run
        while not stop_watching.is_set():
            seen["threads"] |= {t.name for t in threading.enumerate()}
            seen["cuda"] |= torch.cuda.is_initialized()
            time.sleep(0.01)
    stop_watching = threading.Event()
    watcher = threading.Thread(target=watch, name="watcher", daemon=True)
    watcher.start()

    visitor = SimpleNamespace(session_hash="visitor")
    inputs = dict(texture=(16, "random"), tiny=(16, "random"), **{"tiny-video": (32, "repeat-frame")})
    out: dict = {"models": {}}
    for name, (window, init) in inputs.items():
        prompt = config.MODELS.examples(name)[0]
        values = model_notes.defaults(name)[0] | dict(model=name, method="scd-mc", window=window, init=init, seed=0,
                                              prompt=prompt, pace=0.0, samples=2)    # by name, as the page's
        problems = input_problems(values)
        generated = list(generate_tab.generate_stream(**values, request=visitor))
        last = next(u[layout.last_run] for u in reversed(generated) if layout.last_run in u)
        status = next(u[layout.status] for u in reversed(generated) if layout.status in u)
        raced = list(race_tab.race_stream(**values, request=visitor))
        race_status = next(u[layout.race_status] for u in reversed(raced) if layout.race_status in u)
        state = next(u[layout.race_state] for u in reversed(raced) if layout.race_state in u)
        replay = replay_tab.replay_view(3, last)
        mp4, files = replay_tab.export_run(last)
        sample = race_tab.show_race_sample(2, state)
        out["models"][name] = {
            "problems": problems, "status": status, "race": race_status,
            "decode": last["decode"], "replay": list(replay[0].shape), "export": [os.path.getsize(f) for f in files],
            "sample": [list(v.shape) for v in sample.values()]}
        model_switch.on_model_change(name)
        model_notes.prompt_words(name, prompt)
        generate_tab.check_generate(**values, marked=[])     # the quick check of a click

    tiny = dict(model="tiny", method="scd-mc", window=16, init="random", temperature=1.0, top_k=100, top_p=1.0,
                cfg=3.0, seed=0, prompt="red heart")
    lossless = list(lossless_tab.lossless_run(**tiny, lossless_samples=16, request=visitor))
    out["lossless"] = next(u[layout.loss_status] for u in reversed(lossless) if layout.loss_status in u)

    updates: list = []                               # a slow race, stopped from the page's process in its replay
    slow = tiny | dict(pace=2.0, samples=2)
    replaying = threading.Event()

    def race_slowly() -> None:
        for update in race_tab.race_stream(**slow, ticket=time.time() * 1000, request=SimpleNamespace(session_hash="stopper")):
            updates.append(update)
            if race_view.REPLAYING in str(update.get(layout.race_status, "")):
                replaying.set()
    runner = threading.Thread(target=race_slowly)
    runner.start()
    assert replaying.wait(timeout=300), "the slow race never reached its replay"
    clicked = time.time()
    stopping.stop(time.time() * 1000, request=SimpleNamespace(session_hash="stopper"))
    runner.join(timeout=120)
    out["stop"] = {"seconds": time.time() - clicked,
                   "status": next(u[layout.race_status] for u in reversed(updates) if layout.race_status in u)}

    stop_watching.set()
    watcher.join()
    out |= {"page": PAGE, "children": sorted(CHILDREN), "decorated": DECORATED,
            "durations": DURATIONS, "threads": sorted(seen["threads"]), "cuda": seen["cuda"],
            "kind": config.KIND, "client": type(config.REQUESTS.client).__name__,
            "in_call": getattr(config.REQUESTS.client, "in_call", None)}
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1]), default=str))
