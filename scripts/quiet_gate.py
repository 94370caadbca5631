"""Wait, bounded, until this machine is quiet: the gate between scripts/test.sh's parallel phase
and its one-at-a-time timing tests (issue 54: a CI failure came in the first minute after the
parallel phase). Quiet: the CPUs' busy time (/proc/stat: user, nice, system, irq, softirq,
steal) below QUIET_SHARE of their capacity in QUIET_WINDOWS consecutive one-second windows.
Logs what it saw and goes on after LIMIT_S either way: the tests record their own conditions.

Usage: python scripts/quiet_gate.py [LIMIT_S]
"""

from __future__ import annotations

import os
import sys
import time

QUIET_SHARE = 0.10
QUIET_WINDOWS = 3
LIMIT_S = 60.0


def busy_and_total() -> tuple[int, int]:
    """Ticks busy and in all, over every CPU since boot (/proc/stat's first line)."""
    with open("/proc/stat") as fh:
        fields = [int(f) for f in fh.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    busy = user + nice + system + irq + softirq + steal
    return busy, busy + idle + iowait


def main(argv: list[str]) -> int:
    try:
        limit = float(argv[1]) if len(argv) > 1 else LIMIT_S
    except ValueError:
        print(f"quiet_gate: LIMIT_S must be a number of seconds, not {argv[1]!r}", file=sys.stderr)
        return 2
    start = time.monotonic()
    shares: list[float] = []
    last = busy_and_total()
    while time.monotonic() - start < limit:
        time.sleep(1.0)
        now = busy_and_total()
        total = now[1] - last[1]
        shares.append((now[0] - last[0]) / total if total > 0 else 0.0)
        last = now
        if len(shares) >= QUIET_WINDOWS and max(shares[-QUIET_WINDOWS:]) < QUIET_SHARE:
            print(f"quiet gate: quiet after {time.monotonic() - start:.0f} s on {os.cpu_count()} CPUs "
                  f"(busy share per second: {', '.join(f'{s:.2f}' for s in shares)})")  # fmt: skip
            return 0
    print(f"quiet gate: NOT quiet after {limit:.0f} s, going on "
          f"(busy share per second: {', '.join(f'{s:.2f}' for s in shares)})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
