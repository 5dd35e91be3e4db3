"""The decode service on Ray Serve: `scd_core.serve.Server`s on replicas, and `RayClient`,
the decode client interface (`scd_core.client`) against them.

Each replica of an application (one per model) holds one model copy and one `Server`, so
the rows it serves share forward passes; on a GPU cluster a replica takes a GPU
(`gpus_per_replica=1`), on CPUs one core with one torch thread. Replicas are a fixed number,
or autoscaled by the rows in flight per replica (`autoscale=(min, max)`,
`target_ongoing_requests`). A row is one streaming call: the replica Serve routes it to
decodes it and streams its records, then its result, so the records come from the replica
that holds the row; `cancel` cancels that call, which reaches the same replica, and the row
leaves its batch at the next pass boundary. A row's tokens depend only on its model, prompt,
seed and settings, so any replica gives the same picture.

A front end never loads the model: `model_info` asks a replica what it must know of it, and
`pictures` has a replica decode token canvases into small frames (`scd_core.frames`). A row
whose decoder is its own (a video row's, which knows the frames it continued) is drawn with
it by the replica that decoded the row; Serve may route a `pictures` call to another replica
of the same model, which draws such a row with the model's own decoder. With one replica per
model (the default) every row is drawn with its own.

Every wait is bounded: a replica that dies ends its own rows' records and results with a
`DecodeError` saying so (Serve starts a new replica; the other rows are not touched), and a
row without a record for `idle_timeout` seconds fails the same way.

    SCD_DECODE=ray://local          a cluster started in this process
    SCD_DECODE=ray://HOST:10001     a running cluster, through Ray Client
    SCD_DECODE_REPLICAS=2           replicas per model (or "1-4": autoscaled between the two)
    SCD_DECODE_GPUS=1               GPUs per replica (default 0: one CPU core each)
"""
from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import ray
import torch
from ray import serve

import scd_core
from scd_core.client import DecodeError, DecoderBook, Frames, ModelInfo, RowResult, pack_record, unpack_record
from scd_core.chain import Plan
from scd_core.decoding import validate_seeds
from scd_core.distributed.bench import connect
from scd_core.serve import Server
from scd_core.settings import Settings
from scd_core.trace import Iteration

ENV = "SCD_DECODE"
DEFAULT_IDLE_TIMEOUT = 120.0      # seconds without a record before a row is given up
START_TIMEOUT = 300.0             # seconds for a model's replicas to come up
GATHER = 0.02                     # seconds of a row's passes a replica sends as one streamed item


@serve.deployment(max_ongoing_requests=32)
class DecodeReplica:
    """One model copy and its Server; `decode` streams one row."""

    def __init__(self, model: str, load_kwargs: dict, threads: int, max_batch: int) -> None:
        torch.set_num_threads(threads)
        self.model = scd_core.load_model(model, **load_kwargs)
        self.server = Server(self.model, max_batch=max_batch)
        self.name = ray.get_runtime_context().get_actor_name()
        self.running: dict[str, object] = {}          # row id -> its Request, while it runs
        self.decoders = DecoderBook(running=lambda rid: getattr(self.running.get(rid), "decode", None))
        self.model_name = model

    def shape(self) -> dict:
        return {"grid": tuple(int(g) for g in self.model.grid), "vocab_size": int(self.model.vocab_size)}

    def info(self) -> ModelInfo:
        return ModelInfo.of(self.model_name, self.model)

    def pictures(self, canvases, size, requests, clip: bool) -> Frames:
        """`DecodeClient.pictures` on this replica (its rows' own decoders, else the model's)."""
        with self.server.device_lock:
            return self.decoders.pictures(self.model, torch.from_numpy(canvases), size, requests, clip)

    async def decode(self, prompt: str, seed: int, settings: Settings, row: str | None = None):
        """("replica", actor name), then ("records", [packed record, ...], [rows in each one's
        pass]) about every GATHER seconds (`scd_core.client.pack_record`: what each pass
        changed), then ("result", RowResult) or ("error", message)."""
        yield ("replica", self.name)
        loop, items = asyncio.get_running_loop(), asyncio.Queue()

        def put(*item) -> None:                       # on the server's thread
            try:
                loop.call_soon_threadsafe(items.put_nowait, item)
            except RuntimeError:                      # the loop is closed: the replica is stopping
                pass
        try:
            request = self.server.submit(prompt, seed, settings, on_record=lambda record: put("record", record))
        except ValueError as exc:
            yield ("error", f"{exc}")
            return
        if row is not None:
            self.running[row] = request
        request.future.add_done_callback(lambda future: put("end", future.exception()))
        try:
            while True:
                gathered = [await items.get()]
                await asyncio.sleep(GATHER)           # the passes of a moment in one item, not one per pass
                while not items.empty():
                    gathered.append(items.get_nowait())
                records = [value for kind, value in gathered if kind == "record"]
                if records:
                    yield ("records", [pack_record(r) for r in records],
                           [request.batch_sizes[r.index] for r in records])
                ends = [value for kind, value in gathered if kind == "end"]
                if ends and ends[0] is not None:
                    yield ("error", f"its batch failed on the replica ({type(ends[0]).__name__}: {ends[0]})")
                    return
                if ends:
                    run = request.result(timeout=0)
                    yield ("result", RowResult(run.tokens[0], run.nfe, run.wall_time, run.step_time,
                                               tuple(request.batch_sizes)))
                    return
        finally:
            request.cancel()          # cancelled by the client (or gone): it leaves at the next pass boundary
            if row is not None:
                self.decoders.ended(row, request.decode, self.model)
                self.running.pop(row, None)


def application(model: str, *, replicas: int = 1, autoscale: tuple[int, int] | None = None,
                target_ongoing_requests: int = 16, max_batch: int = 32, threads: int = 1,
                gpus_per_replica: float = 0, load_kwargs: dict | None = None):
    """The Serve application of one model: fixed `replicas`, or autoscaled in `autoscale`."""
    resources = {"num_cpus": 1, **({"num_gpus": gpus_per_replica} if gpus_per_replica else {})}
    options = dict(ray_actor_options=resources, max_ongoing_requests=max_batch)
    if autoscale:
        low, high = autoscale
        options["autoscaling_config"] = {"min_replicas": low, "max_replicas": high, "initial_replicas": low,
                                         "target_ongoing_requests": target_ongoing_requests}
    else:
        options["num_replicas"] = replicas
    return DecodeReplica.options(**options).bind(model, load_kwargs or {}, threads, max_batch)


@dataclass
class _Row:
    stream: object
    submitted: float = field(default_factory=time.monotonic)
    replica: str | None = None
    records: list = field(default_factory=list)
    batch_sizes: list = field(default_factory=list)
    result: RowResult | None = None
    error: DecodeError | None = None
    cancelled: bool = False
    size: int = 0                                             # tokens in the grid
    tokens: torch.Tensor | None = None                        # [1, size] the canvas its records read
    last: float = field(default_factory=time.monotonic)       # when the last item came
    changed: threading.Condition = field(default_factory=threading.Condition)

    @property
    def ended(self) -> bool:
        return self.result is not None or self.error is not None


class RayClient:
    """The decode client interface against Ray Serve (see the module docstring).

    `address`: "local" (a cluster started here, shut down by `close`) or what `ray.init` takes
    ("auto", "ray://HOST:10001"); in a process already connected to Ray, that connection."""

    def __init__(self, address: str = "local", model: str = "tiny", *, replicas: int = 1,
                 autoscale: tuple[int, int] | None = None, max_batch: int = 32, threads: int = 1,
                 gpus_per_replica: float = 0, idle_timeout: float = DEFAULT_IDLE_TIMEOUT, **load_kwargs) -> None:
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
            raise ValueError(f"replicas must be a positive integer, got {replicas!r}")
        self.options = dict(replicas=replicas, autoscale=autoscale, max_batch=max_batch, threads=threads,
                            gpus_per_replica=gpus_per_replica)
        self.idle_timeout, self.load_kwargs = idle_timeout, load_kwargs
        self._owned = connect(address, num_cpus=max(2, autoscale[1] if autoscale else replicas))
        self._apps: dict[str, tuple[object, dict]] = {}
        self._rows: dict[str, _Row] = {}
        self._lock = threading.Lock()
        self._app(model)

    def _app(self, model: str):
        """The handle and shape of a model's application, deployed on first use."""
        with self._lock:
            if model not in self._apps:
                if not isinstance(model, str) or not model:
                    raise ValueError(f"model must be a model name, got {model!r}")
                name = "scd-" + model.replace("/", "_")
                try:
                    handle = serve.get_app_handle(name)
                except Exception:                     # noqa: BLE001 - not deployed yet
                    serve.start(proxy_location="Disabled")
                    handle = serve.run(application(model, load_kwargs=self.load_kwargs, **self.options), name=name,
                                       route_prefix=None, blocking=False)
                shape = handle.shape.remote().result(timeout_s=START_TIMEOUT)
                self._apps[model] = (handle, shape)
            return self._apps[model]

    def submit(self, model: str, prompt: str, seed: int, settings: Settings) -> str:
        handle, shape = self._app(model)
        if not isinstance(prompt, str):
            raise ValueError(f"prompt must be a string, got {type(prompt).__name__}")
        if not isinstance(settings, Settings):
            raise ValueError(f"settings must be a scd_core.Settings, got {type(settings).__name__}")
        validate_seeds(seed, 1)
        Plan.of(settings, _Shape(**shape))            # what depends on the model (a video grid, ...)
        rid = uuid.uuid4().hex
        row = _Row(handle.options(stream=True).decode.remote(prompt, seed, settings, rid))
        row.size = torch.Size(shape["grid"]).numel()
        row.tokens = torch.full((1, row.size), -1, dtype=torch.long)   # the row's canvas, rebuilt from its records
        self._rows[rid] = row
        threading.Thread(target=self._read, args=(row,), name=f"scd-ray-{rid[:8]}", daemon=True).start()
        return rid

    def _read(self, row: _Row) -> None:
        """Take the row's stream into `row` (one thread per row)."""
        try:
            for item in row.stream:
                with row.changed:
                    row.last = time.monotonic()
                    if item[0] == "replica":
                        row.replica = item[1]
                    elif item[0] == "records":
                        for packed, batch in zip(item[1], item[2]):
                            row.records.append(unpack_record(packed, row.tokens))
                            row.batch_sizes.append(batch)
                    elif item[0] == "result":
                        row.result = item[1]
                    else:
                        row.error = DecodeError(f"the row could not be decoded: {item[1]}")
                    row.changed.notify_all()
            if not row.ended:
                self._end(row, DecodeError("the decode service ended the row without its result"))
        except Exception as exc:                      # noqa: BLE001 - cancelled, or its replica died
            if row.cancelled:
                self._end(row, None)
            else:
                self._end(row, DecodeError(f"the decode replica serving this row stopped before its end "
                                           f"({type(exc).__name__}); submit it again"))

    def _end(self, row: _Row, error: DecodeError | None) -> None:
        with row.changed:
            if not row.ended:
                row.error = error
                if error is None:                     # cancelled: the records so far
                    row.result = self._partial(row)
            row.changed.notify_all()

    def _partial(self, row: _Row) -> RowResult:
        if not row.records:
            return RowResult(torch.full((row.size,), -1, dtype=torch.long), 0, 0.0, 0.0, (), cancelled=True)
        last = row.records[-1]
        return RowResult(last.tokens_after[0].clone(), len(row.records), last.wall_time, last.step_time,
                         tuple(row.batch_sizes), cancelled=True)

    def _row(self, request: str) -> _Row:
        row = self._rows.get(request)
        if row is None:
            raise ValueError(f"request {request!r} is not a request of this client")
        return row

    def _wait(self, row: _Row, ready, deadline: float | None) -> None:
        """Wait until ready(); a row idle for idle_timeout fails, a deadline raises TimeoutError."""
        with row.changed:
            while not ready():
                now = time.monotonic()
                if now - row.last > self.idle_timeout:
                    row.stream.cancel()
                    row.error = DecodeError(f"the decode service sent nothing for this row in "
                                            f"{self.idle_timeout:g} s; submit it again")
                    row.changed.notify_all()
                    return
                if deadline is not None and now >= deadline:
                    raise TimeoutError("the request did not finish in time")
                row.changed.wait(timeout=min(1.0, self.idle_timeout, *(() if deadline is None else (deadline - now,))))

    def records(self, request: str) -> Iterator[Iteration]:
        row, i = self._row(request), 0
        while True:
            self._wait(row, lambda: len(row.records) > i or row.ended, None)
            if len(row.records) > i:
                i += 1
                yield row.records[i - 1]
            elif row.error is not None:
                raise row.error
            else:
                return

    def cancel(self, request: str) -> None:
        row = self._row(request)
        with row.changed:
            if row.ended:
                return
            row.cancelled = True
        row.stream.cancel()

    def result(self, request: str, timeout: float | None = None) -> RowResult:
        row = self._row(request)
        self._wait(row, lambda: row.ended, None if timeout is None else time.monotonic() + timeout)
        if row.error is not None:
            raise row.error
        return row.result

    def replica(self, request: str, timeout: float = 60.0) -> str:
        """The name of the replica actor serving the request (once Serve has routed it)."""
        row = self._row(request)
        self._wait(row, lambda: row.replica is not None or row.ended, time.monotonic() + timeout)
        return row.replica

    def model_info(self, model: str) -> ModelInfo:
        """What a front end must know of the model, from a replica (deployed if needed)."""
        handle, _ = self._app(model)
        return handle.info.remote().result(timeout_s=START_TIMEOUT)

    def pictures(self, model: str, canvases: torch.LongTensor, size: int | None = None,
                 requests: Sequence[str | None] | None = None, clip: bool = False) -> Frames:
        """Canvases of `model` decoded on a replica (module docstring: which decoder)."""
        if not isinstance(canvases, torch.Tensor) or canvases.dtype != torch.long or canvases.dim() != 2:
            raise ValueError(f"canvases: expected a LongTensor [rows, tokens], got "
                             f"{getattr(canvases, 'dtype', type(canvases).__name__)}")
        handle, _ = self._app(model)
        requests = None if requests is None else [r if isinstance(r, str) else None for r in requests]
        try:
            return handle.pictures.remote(canvases.numpy(), size, requests, bool(clip)).result(
                timeout_s=self.idle_timeout)
        except ValueError:
            raise
        except Exception as exc:                      # noqa: BLE001 - the replica's refusal or loss
            cause = getattr(exc, "cause", None)
            if isinstance(cause, ValueError):
                raise cause from None
            raise DecodeError(f"the decode service could not draw this picture ({type(exc).__name__}); "
                              "please try again") from exc

    def decoder(self, request: str) -> str:
        """How `pictures` names the row's own decoder (kept on its replica): its request id."""
        return request

    def forget(self, request: str) -> None:
        """Drop an ended request's records (a long-running client calls this once it has its result)."""
        if self._row(request).ended:
            del self._rows[request]

    def close(self) -> None:
        for request, row in list(self._rows.items()):
            if not row.ended:
                self.cancel(request)
        if self._owned:
            serve.shutdown()
            ray.shutdown()
            self._owned = False


@dataclass(frozen=True)
class _Shape:
    grid: tuple
    vocab_size: int


def client_from_env(environ=os.environ, model: str = "tiny") -> RayClient | None:
    """The RayClient that SCD_DECODE names (`ray://local`, `ray://HOST:PORT`), or None when it is
    unset or empty (the page then decodes in its own process)."""
    value = (environ.get(ENV) or "").strip()
    if not value:
        return None
    if not value.startswith("ray://") or value == "ray://":
        raise ValueError(f"{ENV} must be ray://local or ray://HOST:PORT, got {value!r}")
    address = "local" if value == "ray://local" else value
    replicas = (environ.get("SCD_DECODE_REPLICAS") or "1").strip()
    gpus = float(environ.get("SCD_DECODE_GPUS") or 0)
    low, sep, high = replicas.partition("-")
    try:
        autoscale = (int(low), int(high)) if sep else None
        count = int(low)
    except ValueError:
        raise ValueError(f"SCD_DECODE_REPLICAS must be N or MIN-MAX, got {replicas!r}") from None
    return RayClient(address, model, replicas=count, autoscale=autoscale, gpus_per_replica=gpus)
