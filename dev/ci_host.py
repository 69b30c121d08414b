"""How fast the host was during a CI run, and where its CPU went (``.ci/run`` prints both).

The suite's wall time follows the host: the same commit has taken 41 and 62 minutes on this machine
type. So that a slow host can be told from a slow suite, ``.ci/run`` brackets the run with:

``start STATE``
    times a fixed pure-Python loop (best of three, lower is faster) and saves it with the kernel's
    CPU counters (``/proc/stat``) in STATE.
``watch OUT``
    samples every process's CPU time (``/proc/<pid>/stat``) once a second until SIGTERM, and writes
    the CPU seconds per kind of process (``airflow scheduler``, ``pytest``, ``pip``, ``postgres``,
    ...) to OUT, with the machine's busy share of each minute (``/proc/stat``): where in the run the
    cores were idle, so work can be moved there. A process that lives less than a second between two
    samples is not seen.
``end STATE [--watch OUT]``
    times the loop again and prints the run's CPU figures: busy and steal share of both cores, and the
    kinds of process that used the most CPU.

    python3 dev/ci_host.py start /tmp/host.json
    python3 dev/ci_host.py watch /tmp/cpu.json & ...; kill %1
    python3 dev/ci_host.py end /tmp/host.json --watch /tmp/cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
from collections import Counter
from pathlib import Path

#: Iterations of the calibration loop: about a second on the CI machine type.
LOOP = 10_000_000
_AIRFLOW = re.compile(r"airflow (celery \w+|db \w+|dags \w+|tasks \w+|[\w-]+)")
_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def loop_seconds(iterations: int = LOOP, repeat: int = 3) -> float:
    """The best of ``repeat`` timings of a fixed integer loop: a figure of the host's single-core speed."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        total = 0
        for i in range(iterations):
            total += i * i
        best = min(best, time.perf_counter() - started)
    return best


def cpu_counters(stat: str) -> dict[str, int]:
    """The machine-wide counters (clock ticks) of the ``cpu`` line of ``/proc/stat``."""
    names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    first = stat.splitlines()[0].split()
    if first[0] != "cpu":
        raise ValueError(f"not a /proc/stat text: {first[:1]}")
    return dict(zip(names, map(int, first[1:9])))


def shares(before: dict[str, int], after: dict[str, int]) -> dict[str, float]:
    """Busy, iowait, steal and idle as fractions of all the CPU time between two ``cpu_counters``."""
    delta = {k: after[k] - before[k] for k in before}
    total = sum(delta.values()) or 1
    idle = delta["idle"] + delta["iowait"]
    return {
        "busy": (total - idle - delta["steal"]) / total,
        "iowait": delta["iowait"] / total,
        "steal": delta["steal"] / total,
        "idle": delta["idle"] / total,
    }


def kind(cmdline: str) -> str:
    """The kind of process a command line (NUL-separated, as in ``/proc/<pid>/cmdline``) is."""
    text = cmdline.replace("\0", " ").strip()
    if not text:
        return "kernel or exited"
    if m := _AIRFLOW.search(text):
        return f"airflow {m.group(1)}"
    for needle, name in (
        ("multiprocessing.spawn", "python (multiprocessing spawn)"),
        ("pytest", "pytest"),
        ("-m pip", "pip"),
        ("pip install", "pip"),
        ("postgres", "postgres"),
        ("redis-server", "redis-server"),
        ("celery", "celery"),
        ("chrom", "chromium"),
        ("pnpm", "node (pnpm)"),
        ("node", "node (pnpm)"),
        ("podman", "podman"),
        ("buildah", "podman"),
        ("conmon", "podman"),
        ("git", "git"),
        ("pstool", "pstool"),
    ):
        if needle in text:
            return name
    return Path(text.split()[0]).name or "other"


def sample(seen: dict[tuple[str, str], tuple[str, float]], proc: Path = Path("/proc")) -> None:
    """Record, per (pid, start time), the process's kind and CPU seconds so far."""
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_text(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        key = (entry.name, fields[19])
        cpu = (int(fields[11]) + int(fields[12])) / _HZ
        name = kind(cmdline) if cmdline else seen.get(key, ("kernel or exited", 0.0))[0]
        seen[key] = (name, cpu)


def per_kind(first: dict, last: dict) -> Counter:
    """CPU seconds per kind between two samples (a process seen first in ``last`` counts from zero)."""
    totals: Counter = Counter()
    for key, (name, cpu) in last.items():
        totals[name] += max(0.0, cpu - first.get(key, (name, 0.0))[1])
    return totals


def watch(out: Path, interval: float = 1.0, bucket: float = 60.0) -> None:
    """Sample until SIGTERM; write ``{"kinds": {kind: CPU s}, "busy_per_bucket": [share, ...],
    "bucket_seconds": bucket}`` to ``out`` (the last, partial bucket included)."""
    stop = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    first: dict = {}
    sample(first)
    seen = dict(first)
    stat = Path("/proc/stat")
    bucket_start, counters = time.monotonic(), cpu_counters(stat.read_text())
    busy: list[float] = []
    while not stop:
        time.sleep(interval)
        sample(seen)
        if time.monotonic() - bucket_start >= bucket:
            now = cpu_counters(stat.read_text())
            busy.append(round(shares(counters, now)["busy"], 3))
            bucket_start, counters = time.monotonic(), now
    busy.append(round(shares(counters, cpu_counters(stat.read_text()))["busy"], 3))
    result = {"kinds": dict(per_kind(first, seen)), "busy_per_bucket": busy, "bucket_seconds": bucket}
    out.write_text(json.dumps(result, indent=1, sort_keys=True))


def report(state: dict, now: dict, cpu: dict[str, float] | None, top: int = 12,
           busy: list[float] | None = None, bucket: float = 60.0) -> str:
    loops = f"{state['loop']:.2f} s at the start, {now['loop']:.2f} s at the end"
    rows = [f"host: pure-Python loop of {LOOP:,} iterations: {loops} (best of 3; lower is faster)"]
    s = shares(state["counters"], now["counters"])
    minutes = (now["time"] - state["time"]) / 60
    rows.append(
        f"host: over {minutes:.1f} min, {os.cpu_count()} cores were {s['busy']:.0%} busy, "
        f"{s['iowait']:.0%} iowait, {s['steal']:.0%} stolen, {s['idle']:.0%} idle"
    )
    if busy:
        per = "minute" if bucket == 60 else f"{bucket:g} s"
        rows.append(f"host: busy share of both cores in each {per} of the run (%):")
        cells = [f"{round(share * 100):3d}" for share in busy]
        rows += ["  " + " ".join(cells[i : i + 20]) for i in range(0, len(cells), 20)]
    if cpu:
        total = sum(cpu.values()) or 1
        rows.append(f"CPU seconds per kind of process (sampled each second; {total:.0f} s in all):")
        for name, seconds in Counter(cpu).most_common(top):
            rows.append(f"  {seconds:8.0f}  {seconds / total:4.0%}  {name}")
    return "\n".join(rows)


def _now() -> dict:
    return {"time": time.time(), "loop": loop_seconds(), "counters": cpu_counters(Path("/proc/stat").read_text())}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("start").add_argument("state", type=Path)
    watch_cmd = sub.add_parser("watch")
    watch_cmd.add_argument("out", type=Path)
    watch_cmd.add_argument("--bucket", type=float, default=60.0, help="seconds per busy-share figure (default 60)")
    end = sub.add_parser("end")
    end.add_argument("state", type=Path)
    end.add_argument("--watch", type=Path)
    args = parser.parse_args(argv)
    if args.command == "start":
        state = _now()
        args.state.write_text(json.dumps(state))
        print(f"host: pure-Python loop of {LOOP:,} iterations: {state['loop']:.2f} s (best of 3; lower is faster)")
    elif args.command == "watch":
        watch(args.out, bucket=args.bucket)
    else:
        watched = json.loads(args.watch.read_text()) if args.watch and args.watch.exists() else {}
        print(report(json.loads(args.state.read_text()), _now(), watched.get("kinds"),
                     busy=watched.get("busy_per_bucket"), bucket=watched.get("bucket_seconds", 60.0)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
