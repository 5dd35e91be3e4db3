"""The race's two times against the benchmark's, for the same settings, side by side.

    python -m bench race-timing                      # texture, "ocean waves", K = 8, L = 16
    python -m bench race-timing --model tiny --prompt "red heart" --top-k 100 --cfg-scale 3

The race (`scd_core.race.decode_rows`) decodes on a `scd_core.workers.ProcessClient`, the
page's default decode client (one worker process, `--threads` torch threads): per method ONE
image alone (seed s; its engine seconds) and then K rows together (images per second, first
submit to last image). The benchmark (`python -m scd_core.bench`, in this process with the
same thread count) times `--seeds 1` (one image: wall_s) and `--seeds 1 --batch K` (K /
wall_s), and `--seeds K` gives the per-sample NFE. Rounds alternate race and bench; the
table gives medians over the rounds. NFE must agree exactly; times within noise. The last
lines state, from these measurements, which method gives one image soonest and which the
most images per second.
"""
from __future__ import annotations

import argparse
import statistics
import sys

import torch

from scd_core import bench, race
from scd_core.settings import METHODS, Settings
from scd_core.workers import ProcessClient


def bench_rows(model: str, prompt_file: str, settings: Settings, seeds: int, batch: int,
               methods: list[str]) -> dict[str, "bench.Row"]:
    argv = ["--model", model, "--prompts", prompt_file, "--seeds", str(seeds), "--batch", str(batch),
            "--methods", ",".join(methods), "--windows", str(settings.window), "--inits", settings.init,
            "--temperature", f"{settings.temperature:g}", "--top-k", str(settings.top_k),
            "--top-p", f"{settings.top_p:g}", "--cfg-scale", f"{settings.cfg_scale:g}"]
    return {r.method: r for r in bench.benchmark(bench.parse_args(argv))}


def race_times(client, model: str, s: race.Race, samples: int, methods: list[str]) -> dict:
    out = {}
    for m in methods:
        one = list(race.decode_rows(client, model, s, m, [s.seed]))[-1]
        batch = list(race.decode_rows(client, model, s, m, range(s.seed, s.seed + samples)))[-1]
        out[m] = (race.timing_of(one, batch), [x.nfe for x in batch.samples()])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="texture")
    ap.add_argument("--prompt", default="ocean waves")
    ap.add_argument("--samples", type=int, default=8, help="K")
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--cfg-scale", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--methods", default=",".join(METHODS))
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    methods = a.methods.split(",")
    settings = Settings(window=a.window, temperature=a.temperature, top_k=a.top_k, top_p=a.top_p,
                        cfg_scale=a.cfg_scale)
    s = race.Race(a.prompt, settings, seed=0)
    prompt_file = "/tmp/race_timing_prompt.txt"
    with open(prompt_file, "w", encoding="utf-8") as f:
        f.write(a.prompt + "\n")
    client = ProcessClient(threads=a.threads)
    try:
        race.warm_up(client, a.model, s)                          # the worker loads and warms up
        per_sample = bench_rows(a.model, prompt_file, settings, a.samples, 1, methods)
        rounds = []
        for r in range(a.rounds):
            timed = race_times(client, a.model, s, a.samples, methods)
            one = bench_rows(a.model, prompt_file, settings, 1, 1, methods)
            batch = bench_rows(a.model, prompt_file, settings, 1, a.samples, methods)
            rounds.append((timed, one, batch))
            print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    finally:
        client.close()
    med = statistics.median
    print(f"# {a.model}, {a.prompt!r}, K = {a.samples}, {settings}, {a.threads} thread(s), "
          f"medians of {a.rounds} rounds")
    print("| method | NFE one image: race / bench | mean NFE of K: race / bench | one image s: race / bench "
          "| images/s (batch of K): race / bench |")
    print("|---|---|---|---|---|")
    latency, throughput = {}, {}
    for m in methods:
        t0, nfe = rounds[0][0][m]
        bench_one_nfe = rounds[0][1][m].nfe
        lat_race = med(x[0][m][0].latency for x in rounds)
        lat_bench = med(x[1][m].wall_s for x in rounds)
        tp_race = med(x[0][m][0].throughput for x in rounds)
        tp_bench = med(a.samples / x[2][m].wall_s for x in rounds)
        latency[m], throughput[m] = lat_race, tp_race
        print(f"| {m} | {t0.latency_nfe} / {bench_one_nfe:g} | {statistics.fmean(nfe):.3f} / "
              f"{per_sample[m].nfe:.3f} | {lat_race:.3f} / {lat_bench:.3f} | {tp_race:.2f} / {tp_bench:.2f} |")
        assert t0.latency_nfe == bench_one_nfe and abs(statistics.fmean(nfe) - per_sample[m].nfe) < 1e-9, m
    fast, many = min(latency, key=latency.get), max(throughput, key=throughput.get)
    print(f"\nOne image soonest: {fast} ({latency[fast]:.3f} s); the most images per second in a batch "
          f"of {a.samples}: {many} ({throughput[many]:.2f}/s).")
    if "scd-mc" in latency and "ar" in latency:
        verdict = "beats" if latency["scd-mc"] < latency["ar"] else "does not beat"
        print(f"SCD-MC's one-image latency {verdict} AR's: {latency['scd-mc']:.3f} s against "
              f"{latency['ar']:.3f} s ({latency['ar'] / latency['scd-mc']:.2f}x).")
    return 0
