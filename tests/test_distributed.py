"""Beyond one machine, on Ray (scd_core.distributed): the benchmark's cells on an actor pool
equal the single-process bench's, a cut-short run resumes with only its missing cells, a
failing cell is retried then reported; the Serve decode service gives a seed's tokens on any
replica, cancels, and a replica killed during a burst fails only its own rows, with a reason.

Ray is an optional extra (not in requirements.txt): the Ray tests need it installed; the
tests of the row file and of `import scd_core` run without it."""
from __future__ import annotations

import csv
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import scd_core
from scd_core import bench
from scd_core.client import DecodeError
from scd_core.distributed import cells

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--model", "toy-grid", "--model-arg", "grid=4,6", "--methods", "ar,sjd,scd-mc", "--windows", "4",
         "--seeds", "2", "--max-prompts", "2", "--top-k", "20", "--threads", "1"]


def sha(tokens: torch.Tensor) -> str:
    return hashlib.sha256(tokens.to(torch.int64).numpy().astype("<i8").tobytes()).hexdigest()


def test_import_scd_core_does_not_import_ray():
    code = ("import sys, scd_core, scd_core.bench, scd_core.distributed, scd_core.distributed.cells; "
            "assert 'ray' not in sys.modules, 'ray imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=120)


# ---------------------------------------------------------------- the row file (no Ray)

def _spec() -> cells.Spec:
    return cells.Spec("toy-grid", {"grid": (4, 6)}, scd_core.Settings(top_k=20, window=4))


def test_row_file_drops_a_row_cut_short_and_refuses_another_configuration(tmp_path):
    spec, out = _spec(), tmp_path / "rows.csv"
    model = spec.load()
    grid = cells.grid([type("P", (), {"text": "red apple", "category": ""})()], 2, ["ar", "sjd"], [4], ["random"])
    rows = cells.RowFile(out, spec.config)
    rows.append(cells.attempt(cells.decode, model, spec, grid[0]))
    rows.close()
    with out.open("a") as f:
        f.write(out.read_text().splitlines()[1][:40])            # what a writer killed mid-row leaves
    again = cells.RowFile(out, spec.config)
    assert again.done(grid[0]) and not again.done(grid[1])
    again.append(cells.attempt(cells.decode, model, spec, grid[1]))
    again.close()
    assert [r["seed"] for r in csv.DictReader(out.open())] == ["0", "1"]
    with pytest.raises(ValueError, match="another configuration"):
        cells.RowFile(out, cells.Spec("toy-grid", {"grid": (4, 6)}, scd_core.Settings(top_k=21, window=4)).config)


def test_a_cell_that_raises_is_tried_again_then_written_as_failed():
    spec = _spec()
    cell = cells.grid([type("P", (), {"text": "red apple", "category": ""})()], 1, ["sjd"], [4], ["random"])[0]
    calls = []

    def flaky(model, spec, cell):
        calls.append(cell)
        if len(calls) < 2:
            raise RuntimeError("out of memory")
        return cells.decode(model, spec, cell)

    row = cells.attempt(flaky, spec.load(), spec, cell, retries=2)
    assert row["status"] == "ok" and row["attempts"] == 2 and len(row["tokens_sha256"]) == 64

    def broken(model, spec, cell):
        raise RuntimeError("device lost")

    row = cells.attempt(broken, None, spec, cell, retries=2)
    assert row["status"] == "failed" and row["attempts"] == 3 and row["error"] == "RuntimeError: device lost"


# ---------------------------------------------------------------- on a local Ray cluster

@pytest.fixture(scope="module")
def ray_cluster():
    import ray
    from scd_core.distributed.bench import connect
    assert connect("local", num_cpus=2)
    try:
        yield ray
    finally:
        try:
            from ray import serve
            serve.shutdown()
        finally:
            ray.shutdown()


def _run(argv, **kw):
    from scd_core.distributed import bench as dbench
    return dbench.run(bench.parse_args(argv), **kw)


@pytest.mark.parametrize("argv", [SMALL, ["--model", "tiny", "--methods", "scd-mc", "--seeds", "1",
                                          "--max-prompts", "2", "--threads", "1"]], ids=["toy-grid", "tiny"])
def test_cells_on_two_workers_equal_the_single_process_ones(ray_cluster, tmp_path, argv):
    result = _run(argv + ["--ray", "local", "--workers", "2", "--out", str(tmp_path / "c.csv")])
    assert result["ran"] == len(result["cells"]) and result["failed"] == 0
    args = bench.parse_args(argv)
    spec, grid = __import__("scd_core.distributed.bench", fromlist=["plan"]).plan(args)
    model = spec.load()
    for cell in grid:
        run = scd_core.generate(model, [cell.prompt], seed=cell.seed, settings=cell.settings(spec.base))
        row = result["rows"][cell.key]
        assert (int(row["nfe"]), row["tokens_sha256"]) == (run.nfe, sha(run.tokens)), cell
    single = {(r.method, r.window, r.init): r.nfe for r in bench.benchmark(args)}
    table = {(r.method, r.window, r.init): r.nfe for r in cells.table(grid, result["rows"])}
    assert table == pytest.approx(single)


def test_a_run_cut_short_resumes_with_only_the_missing_cells(ray_cluster, tmp_path):
    out = tmp_path / "c.csv"
    argv = SMALL + ["--ray", "local", "--workers", "2", "--out", str(out)]
    first = _run(argv + ["--max-cells", "5"])
    assert first["ran"] == 5
    written = out.read_text().splitlines()
    second = _run(argv)
    total = len(second["cells"])
    assert (second["skipped"], second["ran"]) == (5, total - 5)
    lines = out.read_text().splitlines()
    assert lines[:6] == written                                  # the first run's rows are kept as they were
    keys = [cells._key(r) for r in csv.DictReader(out.open())]
    assert len(keys) == len(set(keys)) == total and all(r["status"] == "ok" for r in second["rows"].values())
    assert _run(argv)["ran"] == 0


def test_failing_cells_are_retried_and_reported_never_dropped(ray_cluster, tmp_path):
    def decode(model, spec, cell, tries={}):           # one dict per worker
        tries[cell.key] = tries.get(cell.key, 0) + 1
        if cell.seed == 1 and cell.method == "sjd":
            raise RuntimeError(f"no memory for {cell.prompt}")
        if tries[cell.key] == 1:
            raise RuntimeError("transient")
        return cells.decode(model, spec, cell)

    result = _run(SMALL + ["--ray", "local", "--workers", "2", "--out", str(tmp_path / "c.csv")], decode_fn=decode)
    rows = list(csv.DictReader((tmp_path / "c.csv").open()))
    assert len(rows) == len(result["cells"])
    failed = [r for r in rows if r["status"] == "failed"]
    assert len(failed) == result["failed"] == 2                  # sjd x 2 prompts, seed 1
    assert all(r["error"].startswith("RuntimeError: no memory for") and r["attempts"] == "3" for r in failed)
    assert all(r["attempts"] == "2" for r in rows if r["status"] == "ok")


def test_a_killed_benchmark_process_resumes(ray_cluster, tmp_path):
    """The benchmark's own process, on the module's cluster (`--ray ADDRESS`), killed after its
    first row and run again: it runs only the cells it had not written."""
    out = tmp_path / "c.csv"
    address = ray_cluster.get_runtime_context().gcs_address
    argv = [sys.executable, "-m", "scd_core.bench", "--model", "tiny", "--methods", "sjd", "--seeds", "2",
            "--max-prompts", "2", "--threads", "1", "--ray", address, "--workers", "1", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (not out.exists() or len(out.read_text().splitlines()) < 2):
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, 9)                                  # the driver (its actors end with it)
        proc.wait(timeout=30)
    kept = len(list(csv.DictReader(out.open())))
    assert 1 <= kept < 4
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"{4 - kept} cells run, {kept} already written" in done.stderr
    assert "| sjd |" in done.stdout


# ---------------------------------------------------------------- the decode service on Ray Serve

TINY = scd_core.Settings(method="scd-mc", window=16)


@pytest.fixture(scope="module")
def service(ray_cluster):
    from scd_core.distributed.service import RayClient
    client = RayClient("local", "tiny", replicas=2, idle_timeout=60)
    try:
        yield client
    finally:
        client.close()
        from ray import serve
        serve.delete("scd-tiny")


def test_a_seed_gives_the_same_tokens_on_either_replica(service):
    ids = [service.submit("tiny", "red apple", 7, TINY) for _ in range(8)]
    results = [service.result(i, timeout=120) for i in ids]
    assert len({service.replica(i) for i in ids}) == 2
    expected = scd_core.generate(scd_core.load_model("tiny"), ["red apple"], seed=7, settings=TINY)
    for r in results:
        assert torch.equal(r.tokens, expected.tokens[0]) and r.nfe == expected.nfe and not r.cancelled
    assert [rec.nfe for rec in service.records(ids[0])] == list(range(1, expected.nfe + 1))


def test_a_replica_tells_the_model_and_draws_its_rows_for_a_page_that_holds_no_copy(service):
    from scd_core.frames import display_frames
    model = scd_core.load_model("tiny")
    info = service.model_info("tiny")
    assert info.grid == tuple(model.grid) and info.vocab_size == model.vocab_size
    assert info.example_prompts[0] == model.example_prompts[0] and info.default_settings == model.default_settings
    rid = service.submit("tiny", "red apple", 7, TINY)
    last = list(service.records(rid))[-1]
    drawn = service.pictures("tiny", last.canvas, 16, [service.decoder(rid)])
    here = display_frames(model, last.canvas, 16)
    assert len(drawn) == 1 and all(np.array_equal(a, b) for a, b in zip(drawn[0], here[0]))
    with pytest.raises(ValueError, match="canvases"):
        service.pictures("tiny", torch.zeros(1, 5, dtype=torch.long), 16)


def test_cancel_reaches_the_replica_and_the_result_is_partial(service):
    rid = service.submit("tiny", "cat face", 3, TINY.replace(method="ar"))
    first = next(iter(service.records(rid)))
    service.cancel(rid)
    result = service.result(rid, timeout=60)
    assert result.cancelled and 1 <= result.nfe < result.tokens.numel() and (result.tokens == -1).any()
    assert int(first.n_after[0]) >= 1


def test_bad_requests_are_refused_at_submit(service):
    with pytest.raises(ValueError, match="seed"):
        service.submit("tiny", "cat face", -1, TINY)
    with pytest.raises(ValueError, match="repeat-frame"):
        service.submit("tiny", "cat face", 0, TINY.replace(init="repeat-frame"))
    with pytest.raises(ValueError, match="not a request"):
        service.result("nope")


def test_a_replica_killed_in_a_burst_fails_only_its_rows_and_is_replaced(service, ray_cluster):
    ray = ray_cluster
    ids = [service.submit("tiny", p, s, TINY.replace(method="ar")) for s in range(4) for p in ("red apple", "rocket")]
    replicas = {i: service.replica(i) for i in ids}
    for i in ids:                                               # every row has started its passes
        next(iter(service.records(i)))
    victim = replicas[ids[0]]
    ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)
    lost, served = [], []
    for i in ids:
        try:
            served.append(service.result(i, timeout=120))
        except DecodeError as exc:
            assert "replica serving this row stopped" in str(exc)
            lost.append(i)
    assert lost == [i for i in ids if replicas[i] == victim] and len(served) == len(ids) - len(lost) > 0
    later = [service.submit("tiny", "rocket", s, TINY) for s in range(4)]
    assert all(service.result(i, timeout=180).nfe > 0 for i in later)


def test_client_from_env_reads_scd_decode():
    import ray  # noqa: F401
    from scd_core.distributed import service as svc
    assert svc.client_from_env({}) is None
    with pytest.raises(ValueError, match="SCD_DECODE"):
        svc.client_from_env({"SCD_DECODE": "http://localhost:8000"})
    with pytest.raises(ValueError, match="SCD_DECODE_REPLICAS"):
        svc.client_from_env({"SCD_DECODE": "ray://local", "SCD_DECODE_REPLICAS": "two"})
