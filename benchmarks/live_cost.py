"""What bwlab's live tools cost the machine they watch (issue: < 1 % of a CPU to watch 100
limited groups with `top` at its defaults, < 3 % for `doctor`'s high-resolution sampling of one
group).

`doctor` runs at its defaults (counters read every fiftieth of the period, 1-10 ms) on an idle
group (100 ms period: every 2 ms), on one running wakelat's bursts (the `burst` scenario's
shape: 30 workers, quota 1.75 CPUs per 100 ms; every 2 ms, its threads every 10 ms and at each
boundary), the same group read every 1 ms and with --sparse (counters read only around the
boundaries and at the threads' steps), and on bursts at a 10 ms period (16 workers, 1 CPU: every
1 ms, its threads at each boundary).

Each tool runs twice, short and long, as a child process; its CPU time (user + system, from
the kernel's accounting of the child) is read after it exits, and the difference between the
long and the short run, divided by the difference in watched seconds, is what watching costs
per second: Python's start-up and the imports cancel out. Run as root on a quiet machine:

    .venv/bin/python benchmarks/live_cost.py [--groups 100] [--seconds 20]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

from bwlab import cgroup
from bwlab.commands.live import doctor_interval_s
from bwlab.workloads import programs


def cpu_seconds(argv: list[str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed: {proc.stderr.strip()[-300:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def cost(make_argv: object, short: float, long: float) -> float:
    """CPU share (%) of one CPU per watched second: (long - short) / (seconds apart)."""
    assert callable(make_argv)
    c_short, _ = cpu_seconds(make_argv(short))
    c_long, _ = cpu_seconds(make_argv(long))
    return 100 * (c_long - c_short) / (long - short)


@contextlib.contextmanager
def bursts(period_us: int, quota_us: int, workers: int, rps: float) -> Iterator[str]:
    """A group running wakelat's bursts (requests of 50 ms); yields its path for bwlab."""
    hier = cgroup.detect()
    with hier.group(cgroup.unique_name("costbusy"), period_us, quota_us, 0, None) as grp:
        argv = [str(programs.resolve("wakelat")), "-m", "1", "-t", str(workers), "-r", f"{rps:g}", "-p",
                "-c", "50000", "-S", "100", "-d", "3600"]  # fmt: skip

        def join() -> None:
            for procs in grp.procs_files:
                procs.write_text(str(os.getpid()))

        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, preexec_fn=join, start_new_session=True)
        try:
            time.sleep(1)  # its threads started
            yield "/" + grp.name
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    bwlab = [sys.executable, "-m", "bwlab.cli"]
    hier = cgroup.detect()
    made = [hier.create(cgroup.unique_name(f"cost{i}"), 100000, 50000, 0, None) for i in range(args.groups)]
    try:
        target = "/" + made[0].name
        top = cost(lambda s: [*bwlab, "top", "--interval", "2", "--iterations", str(max(1, round(s / 2)))],
                   2.0, args.seconds)  # fmt: skip

        def watching(path: str, *extra: str) -> float:
            return cost(lambda s: [*bwlab, "doctor", path, "--seconds", str(s), "--no-predict", *extra], 1.0,
                        args.seconds)  # fmt: skip

        doctor = watching(target)
        with bursts(100000, 175000, 30, 25) as busy:
            doctor_busy = watching(busy)
            every_ms = watching(busy, "--interval-ms", "1")
            sparse_busy = watching(busy, "--sparse")
        with bursts(10000, 10000, 16, 8) as short:
            short_busy = watching(short)
    finally:
        for grp in made:
            grp.remove()
    print(f"machine: {os.uname().release}, {os.cpu_count()} CPUs, {hier.describe()}")
    print(f"top, {args.groups} limited groups, every 2 s: {top:.2f} % of one CPU")
    slow, fast = doctor_interval_s(100000) * 1000, doctor_interval_s(10000) * 1000
    print(f"doctor, one idle group (100 ms period), every {slow:g} ms: {doctor:.2f} % of one CPU")
    print(f"doctor, a group of 30 threads in bursts (100 ms period), every {slow:g} ms: {doctor_busy:.2f} % of one CPU")
    print(f"doctor --interval-ms 1, the same group: {every_ms:.2f} % of one CPU")
    print(f"doctor --sparse (around the boundaries), the same group: {sparse_busy:.2f} % of one CPU")
    print(f"doctor, a group of 16 threads in bursts (10 ms period), every {fast:g} ms: {short_busy:.2f} % of one CPU")


if __name__ == "__main__":
    main()
