"""What `bwlab exporter` costs at 1,000 and 10,000 cgroups (issue: <= 1 % of one CPU and
<= 1 s per scrape at 1,000; 10,000 as measured).

For each size: that many real cgroups (half of them with a CPU limit of 0.5 CPU per 100 ms),
`--tasks` of them with a sleeping process in it, and `--throttling` of the limited ones with
a busy process that its limit of 0.1 CPU throttles (so the exporter has hot groups to sample at period
resolution, as a node would). The exporter runs at its defaults and is scraped every 15 s, as
Prometheus would, for `--seconds`; its CPU time is read from /proc/PID/stat before the first
and after the last scrape (its start-up and first walk excluded), and each scrape is timed.
Run as root on a quiet machine:

    .venv/bin/python benchmarks/exporter_load.py [--sizes 1000,10000] [--seconds 300]

The "counted" column is the share of the busy groups' throttled periods (their nr_throttled,
what cAdvisor counts) that the exporter counted, and in brackets the share it classified period
by period: under its CPU budget the throttling groups take turns at period resolution, and
between turns their periods are classified as windows of the kernel's counters.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from bwlab import cgroup

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def groups(n: int, tasks: int, throttling: int) -> Iterator[list[Path]]:
    """Yields the cpu directories of the throttling groups."""
    hier = cgroup.detect()
    assert isinstance(hier, cgroup.CgroupV1 | cgroup.CgroupV2)
    roots = [hier.cpu, hier.cpuacct] if isinstance(hier, cgroup.CgroupV1) else [hier.root]
    base = cgroup.unique_name("load")
    dirs: list[list[Path]] = []
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for root in roots:
            if root is not None:
                (root / base).mkdir()
        if isinstance(hier, cgroup.CgroupV2):  # the cpu controller for the groups below base
            for d in (hier.root, hier.root / base):
                (d / "cgroup.subtree_control").write_text("+cpu")
        for i in range(n):
            made = []
            for root in roots:
                if root is None:
                    continue
                d = root / base / f"g{i}"
                d.mkdir()
                made.append(d)
            dirs.append(made)
            if i % 2 == 0:  # limited: 0.5 CPU per 100 ms; the busy ones 0.1 CPU (their load is not ours)
                quota = 10000 if i < 2 * throttling else 50000
                cpu = made[0]
                if (cpu / "cpu.max").exists():
                    (cpu / "cpu.max").write_text(f"{quota} 100000")
                else:
                    (cpu / "cpu.cfs_quota_us").write_text(str(quota))
        for i in range(tasks):
            busy = i < throttling
            argv = ["sh", "-c", "while :; do :; done"] if busy else ["sleep", "3600"]
            index = 2 * i  # limited groups

            def join(index: int = index) -> None:
                for d in dirs[index]:
                    (d / "cgroup.procs").write_text(str(os.getpid()))

            procs.append(subprocess.Popen(argv, preexec_fn=join))
        yield [dirs[2 * i][0] for i in range(min(throttling, tasks))]
    finally:
        for p in procs:
            p.kill()
            p.wait()
        for made in reversed(dirs):
            for d in made:
                with contextlib.suppress(OSError):
                    d.rmdir()
        for root in roots:
            if root is not None:
                with contextlib.suppress(OSError):
                    (root / base).rmdir()


def nr_throttled(dirs: list[Path]) -> int:
    """What cAdvisor counts: every throttled period of these groups."""
    total = 0
    for d in dirs:
        for line in (d / "cpu.stat").read_text().splitlines():
            key, value = line.split()
            total += int(value) if key == "nr_throttled" else 0
    return total


def summed(body: bytes, family: str) -> float:
    """A counter family's samples summed (both verdicts, every group)."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in body.decode().splitlines()
               if line.startswith(family + "{"))  # fmt: skip


def classified(body: bytes) -> tuple[float, float]:
    """Throttled periods the exporter counted: all of them, and those it classified period by
    period (the rest were classified as windows of the kernel's counters)."""
    every = summed(body, "bwlab_throttled_periods_total")
    return every, every - summed(body, "bwlab_estimated_throttled_periods_total")


def measure(n: int, tasks: int, throttling: int, seconds: float, extra: list[str]) -> str:
    with groups(n, tasks, throttling) as busy:
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "bwlab.cli", "exporter", "--listen", f"127.0.0.1:{port}",
                                 *extra], stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}/metrics"
            for _ in range(300):
                with contextlib.suppress(OSError):
                    urllib.request.urlopen(url, timeout=60).read()
                    break
                time.sleep(0.2)
            time.sleep(10)  # the first walk and the first hot groups
            scrapes, sizes = [], []
            first = urllib.request.urlopen(url, timeout=60).read()
            kernel0, ours0 = nr_throttled(busy), classified(first)
            cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
            while time.monotonic() - t0 < seconds:
                start = time.monotonic()
                body = urllib.request.urlopen(url, timeout=60).read()
                scrapes.append(time.monotonic() - start)
                sizes.append(len(body))
                time.sleep(max(0.0, 15 - (time.monotonic() - start)))
            cpu1, t1 = cpu_seconds(proc.pid), time.monotonic()
            kernel1, ours1 = nr_throttled(busy), classified(body)
            hot = [line for line in body.decode().splitlines() if line.startswith("bwlab_hot_cgroups ")]
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    share = 100 * (cpu1 - cpu0) / (t1 - t0)
    span = kernel1 - kernel0
    covered = (f"{100 * (ours1[0] - ours0[0]) / span:.0f} % ({100 * (ours1[1] - ours0[1]) / span:.0f} %)"
               if span > 0 else "-")  # fmt: skip
    return (f"| {n} | {n // 2} | {tasks} | {throttling} | {hot[0].split()[1] if hot else '?'} | {covered} | "
            f"{share:.2f} % | "
            f"{statistics.median(scrapes) * 1000:.0f} ms (max {max(scrapes) * 1000:.0f}) | "
            f"{statistics.median(sizes) / 1024:.0f} KiB |")  # fmt: skip


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # the groups and their processes are removed on the way out


def main() -> None:
    signal.signal(signal.SIGTERM, _exit)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--throttling", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--exporter-args", default="", help="more arguments for bwlab exporter, e.g. '--cpu-budget 5'")
    args = parser.parse_args()
    print(f"machine: {os.uname().release}, {os.cpu_count()} CPUs; scraped every 15 s for {args.seconds:g} s")
    print(f"exporter arguments: {args.exporter_args or '(defaults)'}")
    print(
        "| cgroups | limited | with tasks | throttling | hot at the end | throttled periods counted (per period) | "
        "exporter CPU (of one) | scrape | exposition |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for n in (int(s) for s in args.sizes.split(",")):
        print(
            measure(n, min(args.tasks, n // 2), args.throttling, args.seconds, args.exporter_args.split()), flush=True
        )


if __name__ == "__main__":
    main()
