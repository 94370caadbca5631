"""How often bpftrace loses the stop doctor --ebpf sends, and whether telling it again helps.

    python3 benchmarks/bpftrace_stop.py once 60     # SIGINT alone, as bwlab did until 2026-11-27
    python3 benchmarks/bpftrace_stop.py resend 100  # SIGTERM again every 0.5 s until it prints

Root, bpftrace. Each stop: doctor's own tracer (bwlab.live.ebpf.Tracer) for one busy thread
more than the machine has CPUs (a group using every CPU and doctor's sampler beside it; with
as many as CPUs, 0 of 60 were lost here), attached, traced for 0.5 s, then stopped; a stop
not followed by the maps within 5 s is counted lost (Tracer.stop's error; bpftrace killed).
`once` never tells it again. bpftrace 0.17 reads its stop flag only when epoll_wait fails with EINTR, and
epoll_wait that has timed out returns 0 with the signal pending: a stop that comes while
bpftrace waits for a CPU after its 100 ms timeout is lost (ebpf.Tracer.stop).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bwlab.errors import BwlabError
from bwlab.live import ebpf


def one_stop(tids: list[int]) -> float | None:
    """Seconds from the stop to bpftrace's exit with its maps printed, or None if lost."""
    tracer = ebpf.Tracer(tids)
    try:
        tracer.wait_attached()
        time.sleep(0.5)
        stopped = time.monotonic()
        tracer.stop()
        return time.monotonic() - stopped
    except BwlabError as err:
        if "had not printed its trace" not in str(err):
            sys.exit(f"bpftrace_stop: {err}")
        return None
    finally:
        tracer.close()


def main() -> None:
    if len(sys.argv) != 3 or sys.argv[1] not in ("once", "resend") or not sys.argv[2].isdigit():
        sys.exit("usage: bpftrace_stop.py once|resend STOPS")
    ebpf.STOP_TIMEOUT_S = 5.0
    if sys.argv[1] == "once":
        ebpf.RESIGNAL_S = 2 * ebpf.STOP_TIMEOUT_S  # never told again: SIGINT alone
    hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range((os.cpu_count() or 1) + 1)]
    try:
        took = [one_stop([h.pid for h in hogs]) for _ in range(int(sys.argv[2]))]
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    done = [t for t in took if t is not None]
    span = f"; the others ended {min(done):.2f}-{max(done):.2f} s after the stop" if done else ""
    print(f"{sys.argv[1]}: {len(took) - len(done)} of {len(took)} stops lost{span}")


if __name__ == "__main__":
    main()
