"""How often bpftrace loses the stop doctor --ebpf sends, and whether telling it again helps.

    python3 benchmarks/bpftrace_stop.py once 60     # SIGINT alone, as bwlab did until 2026-11-27
    python3 benchmarks/bpftrace_stop.py resend 100  # SIGTERM again every 0.5 s until it prints

Root, bpftrace, tracefs mounted. Each stop: bpftrace with doctor's program (bwlab.live.ebpf)
for one busy thread more than the machine has CPUs (a group using every CPU and doctor's
sampler beside it; with as many as CPUs, 0 of 60 were lost here), started, attached (its attached line), traced
for 0.5 s, then stopped; a stop not followed by the maps within 5 s is counted lost and
bpftrace killed. bpftrace 0.17 reads its stop flag only when epoll_wait fails with EINTR, and
epoll_wait that has timed out returns 0 with the signal pending: a stop that comes while
bpftrace waits for a CPU after its 100 ms timeout is lost (ebpf.Tracer.stop).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bwlab.live import ebpf
from bwlab.schedtrace import period_timer_address


def one_stop(tids: list[int], resend: bool) -> float | None:
    """Seconds from the stop to bpftrace's exit with its maps printed, or None if lost."""
    work = Path(tempfile.mkdtemp(prefix="bwlab-bpftrace-stop-"))
    try:
        program, out, log = work / "p.bt", work / "events", work / "log"
        program.write_text(ebpf.script(tids, period_timer_address()))
        env = dict(os.environ, BPFTRACE_MAP_KEYS_MAX=str(ebpf.MAX_EVENTS), **{ebpf.ATTACHED: "1"})
        with log.open("w") as log_file:
            proc = subprocess.Popen(["bpftrace", "-o", str(out), str(program)], stdout=log_file,
                                    stderr=subprocess.STDOUT, env=env)  # fmt: skip
        try:
            while ebpf.ATTACHED not in log.read_text():
                if proc.poll() is not None:
                    sys.exit(f"bpftrace exited ({proc.returncode}): {log.read_text().strip()}")
                time.sleep(0.01)
            time.sleep(0.5)
            printed = out.stat().st_size
            stopped = time.monotonic()
            proc.send_signal(signal.SIGINT)
            while time.monotonic() < stopped + 5:
                try:
                    proc.wait(timeout=ebpf.RESIGNAL_S)
                    return time.monotonic() - stopped if "@s[" in out.read_text() else None
                except subprocess.TimeoutExpired:
                    if resend and out.stat().st_size == printed:
                        proc.send_signal(signal.SIGTERM)
            return None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    finally:
        shutil.rmtree(work)


def main() -> None:
    if len(sys.argv) != 3 or sys.argv[1] not in ("once", "resend") or not sys.argv[2].isdigit():
        sys.exit("usage: bpftrace_stop.py once|resend STOPS")
    hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range((os.cpu_count() or 1) + 1)]
    try:
        took = [one_stop([h.pid for h in hogs], sys.argv[1] == "resend") for _ in range(int(sys.argv[2]))]
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    done = [t for t in took if t is not None]
    span = f"; the others ended {min(done):.2f}-{max(done):.2f} s after the stop" if done else ""
    print(f"{sys.argv[1]}: {len(took) - len(done)} of {len(took)} stops lost{span}")


if __name__ == "__main__":
    main()
