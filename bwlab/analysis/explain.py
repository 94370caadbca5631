"""`bwlab sim explain`: the accounting events of a short window of one simulated repetition,
as text and as a Fig. 4-style plot (global pool, each CPU's local pool, throttled spans)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from bwlab.errors import BwlabError
from bwlab.scenario import RunSpec
from bwlab.targets import sim


def explain(spec: RunSpec, target: sim.SimTarget, from_ms: float, to_ms: float,
            png: Path | None) -> tuple[list[str], dict[str, Any]]:  # fmt: skip
    """The accounting events of one repetition in [from_ms, to_ms]: text lines and the output."""
    if not 0 <= from_ms < to_ms:
        raise BwlabError(f"explain: need 0 <= --from-ms < --to-ms, got {from_ms} .. {to_ms}")
    if to_ms - from_ms > 10_000:
        raise BwlabError("explain: a window of at most 10 s (it lists every tick)")
    cfg = sim.config(spec, dataclasses.replace(target), 0, periods=True, events=(from_ms, to_ms))
    cfg["duration_ns"] = max(cfg["duration_ns"], round(to_ms * 1e6) + 1)
    out = sim.simulate_many([cfg], 1)[0]
    ms = 1e6
    lines = [f"{'t ms':>9} {'cpu':>4} {'event':11} {'amount':>9} {'local':>9} {'pool':>9}   (ms)"]
    for e in out["events"]:
        if e["group"] != 0:
            continue
        cpu = "-" if e["cpu"] < 0 else str(e["cpu"])
        local = "" if e["cpu"] < 0 else f"{e['local_ns'] / ms:9.3f}"
        amount = "" if e["kind"] == "tick" else f"{e['amount_ns'] / ms:9.3f}"
        lines.append(f"{e['t_ns'] / ms:9.3f} {cpu:>4} {e['kind']:11} {amount:>9} {local:>9} {e['pool_ns'] / ms:9.3f}")
    if png is not None:
        plot_explain(out, spec, target, from_ms, to_ms, png)
    return lines, out


def plot_explain(out: dict[str, Any], spec: RunSpec, target: sim.SimTarget, from_ms: float, to_ms: float,
                 png: Path) -> Path:  # fmt: skip
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    events = [e for e in out["events"] if e["group"] == 0]
    ncpu = spec.ncpu
    fig, axes = plt.subplots(ncpu + 1, 1, figsize=(11, 1.9 * (ncpu + 1)), sharex=True)
    ms = 1e6
    # global pool: its level after every event
    pool_t = [e["t_ns"] / ms for e in events if e["kind"] != "tick"]
    pool_v = [e["pool_ns"] / ms for e in events if e["kind"] != "tick"]
    ax = axes[0]
    ax.step(pool_t, pool_v, where="post", color="tab:blue")
    for e in events:
        if e["kind"] in ("refill", "write"):
            ax.axvline(e["t_ns"] / ms, color="grey", lw=0.8, ls="--")
    ax.set_ylabel("global pool\n(ms)")
    slice_ms = int(spec.sysctls.get(sim.SLICE_SYSCTL, "5000")) / 1000
    ax.set_title(f"{spec.scenario}/{spec.case}: period {spec.period_us / 1000:g} ms, quota "
                 f"{(spec.quota_us or 0) / 1000:g} ms, slice {slice_ms:g} ms,"
                 f" HZ={target.hz}, policy {target.policy} (simulated)", fontsize=9)  # fmt: skip
    for c in range(ncpu):
        ax = axes[c + 1]
        mine = [e for e in events if e["cpu"] == c]
        # the local pool as accounted: it changes only at ticks, acquisitions and returns
        t = [e["t_ns"] / ms for e in mine]
        v = [e["local_ns"] / ms for e in mine]
        ax.step(t, v, where="post", color="tab:green")
        ax.axhline(0, color="black", lw=0.6)
        for e in mine:
            x = e["t_ns"] / ms
            if e["kind"] == "tick":
                ax.axvline(x, color="lightgrey", lw=0.6, zorder=0)
            if e["kind"] == "abort":
                ax.plot([x], [e["local_ns"] / ms], marker="x", color="tab:red", ms=8)
            if e["kind"] == "acquire" and e["local_ns"] - e["amount_ns"] < 0:
                debt = (e["local_ns"] - e["amount_ns"]) / ms
                ax.plot([x, x], [debt, 0], color="tab:orange", lw=3)
        start = None
        for e in mine:
            if e["kind"] == "throttle":
                start = e["t_ns"] / ms
            elif e["kind"] == "unthrottle" and start is not None:
                ax.axvspan(start, e["t_ns"] / ms, color="tab:red", alpha=0.3)
                start = None
        if start is not None:
            ax.axvspan(start, to_ms, color="tab:red", alpha=0.3)
        ax.set_ylabel(f"CPU {c} local\n(ms)")
    axes[-1].set_xlabel("time (ms); red: throttled (x: unthrottle aborted), orange: debt paid at an acquisition, "
                        "dashed: refills")  # fmt: skip
    axes[-1].set_xlim(from_ms, to_ms)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png
