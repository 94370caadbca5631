"""doctor's fixes, ranked by what its own what-if predicts (whatif.py): each setting the replay
tried, with its predicted throttled periods and stall p99, how to apply it where the group
comes from, and what it costs. A setting predicted to remove less than a quarter of the
throttling (and at least 2 points) is listed as barely helping, never as the fix."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from bwlab.live import diagnose, whatif
from bwlab.live.groups import LiveGroup

# a fix must remove this share of the throttling predicted as it is, and HELP_POINTS at least
HELP_SHARE = 0.25
HELP_POINTS = 2.0


@dataclass(frozen=True)
class Fix:
    setting: str  # the what-if's row
    throttled_pct: float
    stall_p99_us: float | None
    helps: bool  # predicted to remove enough of the throttling to be worth applying
    how: tuple[tuple[str, str], ...]  # (where, command)
    trade: str | None  # what it costs, where it costs something

    def to_json(self) -> dict[str, Any]:
        return {"setting": self.setting, "throttled_pct": round(self.throttled_pct, 2),
                "stall_p99_us": None if self.stall_p99_us is None else round(self.stall_p99_us),
                "helps": self.helps, "how": [{"where": w, "command": c} for w, c in self.how],
                "trade": self.trade}  # fmt: skip


def helps(as_is_pct: float, predicted_pct: float) -> bool:
    cut = as_is_pct - predicted_pct
    return cut >= HELP_POINTS and cut >= HELP_SHARE * as_is_pct


def _period_how(group: LiveGroup, quota_us: int, period_us: int) -> tuple[tuple[str, str], ...]:
    hier = group.hierarchy
    if hier.version == 2:
        raw = f"echo '{quota_us} {period_us}' > {shlex.quote(str(group.dir / 'cpu.max'))}"
    else:
        d = group.dir
        raw = (f"echo {period_us} > {shlex.quote(str(d / 'cpu.cfs_period_us'))}; "
               f"echo {quota_us} > {shlex.quote(str(d / 'cpu.cfs_quota_us'))}")  # fmt: skip
    how = [(f"cgroup v{hier.version}", raw)]
    if group.identity.kind in ("pod", "container") and group.identity.pod_uid:
        how.append(("kubernetes", f"the kubelet's cpuCFSQuotaPeriod: {period_us // 1000}ms (every pod of the node; "
                                  "CustomCPUCFSQuotaPeriod feature gate)"))  # fmt: skip
    return tuple(how)


def rank(group: LiveGroup, diag: diagnose.Diagnosis, facts: diagnose.Facts,
         predictions: list[whatif.Prediction]) -> list[Fix]:  # fmt: skip
    """Every setting the what-if tried on the running kernel but "as it is", best first: those
    that help by their predicted throttled periods, then their stall p99; those that barely help
    after them. (The series' row is a kernel, not a setting: the what-if's table shows it.)"""
    if not predictions:
        return []
    as_is = predictions[0].throttled_pct
    out = []
    for p in predictions[1:]:
        v = p.variant
        how: tuple[tuple[str, str], ...]
        trade: str | None = None
        if v.policy != "mainline":
            continue  # a patched kernel: the what-if's table shows it; no setting applies it
        if v.trace is not None:  # the same work from fewer threads (threads.pool_episodes)
            n = int(v.label.split()[1])
            pools = [pool for pool in facts.pools if pool.size > n]
            how = tuple((f"{pool.runtime} {pool.exe} (pid {pool.pid})", pool.advice(n)) for pool in pools) or (
                ("its program", f"at most {n} threads running at once (its worker pool's size)"),
            )
            beside = ("with each Go program's sysmon beside them; a runtime's other threads"
                      if any(pool.runtime == "go" for pool in pools) else
                      "and nothing beside them, so it is a lower bound: a runtime's own threads")  # fmt: skip
            trade = (f"the same work on {n} thread{'s' if n > 1 else ''}: parts of a request that ran side by "
                     "side wait their turn, so a request can take longer even as throttling falls; the replay runs "
                     f"the work on exactly these threads {beside}, waking on another CPU in a period the pool runs "
                     "through, can throttle it more (docs/live.md)")  # fmt: skip
        elif v.limit.burst_us and v.limit.period_us == group.limit.period_us:
            how = tuple(diag.commands) or tuple(diagnose.commands(group, v.limit.burst_us))
        elif v.limit.quota_us is not None and v.limit.period_us != group.limit.period_us:
            how = _period_how(group, v.limit.quota_us, v.limit.period_us)
            trade = (f"the same share over {v.limit.period_us // 1000} ms: a throttle, when one comes, can stall "
                     "the group for longer")  # fmt: skip
        else:
            continue
        out.append(Fix(v.label, p.throttled_pct, p.stall_p99_us, helps(as_is, p.throttled_pct), how, trade))
    return sorted(out, key=lambda f: (not f.helps, f.throttled_pct, f.stall_p99_us or 0.0))
