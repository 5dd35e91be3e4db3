"""A process as Linux's /proc tells it: its memory, threads, descriptors, CPU time and children.
Every reader gives zeros (or nothing) once the process is gone."""
from __future__ import annotations

import os
from pathlib import Path


def status(pid: int) -> dict[str, int]:
    """/proc/PID/status's numbers: memory fields in kB (VmRSS, RssAnon, VmHWM, ...), Threads."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except (FileNotFoundError, ProcessLookupError):
        return {}
    out = {}
    for line in lines:
        key, _, value = line.partition(":")
        if value.split() and value.split()[0].isdigit():
            out[key] = int(value.split()[0])
    return out


def rss_bytes(pid: int) -> int:
    """The resident set."""
    return status(pid).get("VmRSS", 0) * 1024


def memory_kb(pid: int) -> tuple[int, int, int]:
    """(RSS, its anonymous part, PSS) in kB. A file mapped by two processes (safetensors weights
    read in place) counts in each one's RSS but once in their summed PSS."""
    st = status(pid)
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="utf-8") as f:
            pss = next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
    except (FileNotFoundError, ProcessLookupError, StopIteration):
        return 0, 0, 0
    return st.get("VmRSS", 0), st.get("RssAnon", 0), pss


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def descendants(pid: int) -> list[int]:
    """The processes `pid` started, and theirs (every thread's children)."""
    out, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except (FileNotFoundError, ProcessLookupError):
            continue
        for task in tasks:
            try:
                kids = [int(c) for c in Path(f"/proc/{parent}/task/{task}/children").read_text().split()]
            except (FileNotFoundError, ProcessLookupError):
                continue
            kids = [k for k in kids if k not in out]
            out += kids
            todo += kids
    return out


def spawned_workers(pid: int) -> set[int]:
    """The running worker processes `pid` started with multiprocessing's spawn (the decode
    workers; not its resource tracker)."""
    out = set()
    for child in descendants(pid):
        try:
            spawned = b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if spawned and alive(child):
            out.add(child)
    return out


def cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds used so far by `pid` (`page`), by the processes it started (`workers`), and
    by this process (`visitors`: the measuring one)."""
    import resource

    tick = os.sysconf("SC_CLK_TCK")

    def used(p: int) -> float:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            return 0.0
        return (int(fields[11]) + int(fields[12])) / tick

    me = resource.getrusage(resource.RUSAGE_SELF)
    return {"page": used(pid), "workers": sum(used(k) for k in descendants(pid)),
            "visitors": me.ru_utime + me.ru_stime}
