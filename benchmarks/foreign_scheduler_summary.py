"""The table of benchmarks/foreign_scheduler.sh: per scheduler, case and repetition, usage per
quota and what the threads themselves saw of being held (spin -g's gaps), beside CFS's own
count of throttled periods.

A gap is any time a thread was off its CPU over the threshold: a throttle, or the scheduler
running something else (its preemptions, the guest's own work, a TCG vCPU's stall). The
measures: gaps of 1 ms or more per period, and the CPU time all gaps took per period (at twice
the quota: half of the CPUs' time, whatever the scheduler; at demand == quota: the scheduler's
throttles plus its noise floor, which an unthrottled run shows). Under CFS, cpu.stat's
nr_throttled per period sits beside them; under sched_ext only the gaps exist. Reads
"foreign {json}" lines on stdin."""

from __future__ import annotations

import json
import sys

LONG_US = 1000


def main() -> int:
    for line in sys.stdin:
        if not line.startswith("foreign "):
            continue
        d = json.loads(line.removeprefix("foreign "))
        if "period_us" not in d:
            print(f"scheduler: {d.get('ops') or 'CFS'} ({d.get('state')})")
            continue
        spin = d.get("spin") or {}
        gaps = [length for *_, length in spin.get("gaps", [])]
        periods = d["wall_s"] * 1e6 / d["period_us"]
        long = sum(1 for g in gaps if g >= LONG_US)
        print(f"{d['period_us'] // 1000:>4} ms {d['load']:<16} rep {d['rep']}: usage/quota {d['usage_per_quota']:.4f}; "
              f"gaps >= 1 ms {long} in {periods:.0f} periods ({long / periods:.2f} a period), "
              f"{sum(gaps) / 1000 / periods:.2f} CPU-ms a period in gaps; "
              f"cpu.stat nr_throttled {100 * d['cfs_nr_throttled'] / periods:.1f} %; state {d['state']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
