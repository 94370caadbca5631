"""`bwlab exporter`: below-quota throttling of every limited cgroup for Prometheus, served over
HTTP and/or written for node_exporter's textfile collector (bwlab/live/exporter.py)."""

from __future__ import annotations

import argparse
import ipaddress
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server, write_to_textfile

from bwlab.errors import BwlabError
from bwlab.live import diagnose, exporter, groups
from bwlab.paths import EXPORTER_TEXTFILE


def parse_listen(value: str) -> tuple[str, int]:
    """'ADDR:PORT', '[v6]:PORT' or ':PORT' (every address)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise BwlabError(f"--listen {value!r}: expected ADDR:PORT, e.g. 127.0.0.1:9860 or :9860")
    host = host.strip("[]") or "0.0.0.0"
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise BwlabError(f"--listen {value!r}: {host!r} is not an IP address") from None
    return host, int(port)


def cmd_exporter(args: argparse.Namespace) -> int:
    if args.listen is None and args.textfile is None:
        raise BwlabError("exporter needs --listen ADDR:PORT, --textfile DIR or both")
    if not 0.1 <= args.interval <= 3600:
        raise BwlabError(f"--interval {args.interval:g}: expected 0.1..3600 seconds")
    if not 0 <= args.max_hot <= 10000:
        raise BwlabError(f"--max-hot {args.max_hot}: expected 0..10000")
    if not 0 < args.cpu_budget <= 100:
        raise BwlabError(f"--cpu-budget {args.cpu_budget:g}: expected a percentage of one CPU, 0 < PCT <= 100")
    if args.duration is not None and args.duration <= 0:
        raise BwlabError(f"--duration {args.duration:g}: expected a positive number of seconds")
    textfile = None
    if args.textfile is not None:
        directory = Path(args.textfile)
        if not directory.is_dir():
            raise BwlabError(f"--textfile {args.textfile}: not a directory")
        if not os.access(directory, os.W_OK):
            raise BwlabError(f"--textfile {args.textfile}: not writable")
        textfile = directory / EXPORTER_TEXTFILE
    listen = parse_listen(args.listen) if args.listen is not None else None
    root = Path(args.cgroup_root) if args.cgroup_root else None
    if root is not None and not root.is_dir():
        raise BwlabError(f"--cgroup-root {args.cgroup_root}: not a directory")
    hier = groups.hierarchy(root)
    exporter.raise_nofile()

    def log(message: str) -> None:
        print(f"bwlab exporter: {message}", file=sys.stderr, flush=True)

    watcher = exporter.Watcher(hier, args.interval, args.max_hot, diagnose.machine_facts(), log,
                               budget=exporter.CpuBudget(args.cpu_budget / 100))  # fmt: skip
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exporter.BwlabCollector(watcher))
    ProcessCollector(registry=registry)  # process_cpu_seconds_total: what the budget is held to
    if listen is not None:
        try:
            start_http_server(listen[1], addr=listen[0], registry=registry)
        except OSError as exc:
            raise BwlabError(f"--listen {args.listen}: {exc.strerror or exc}") from None
    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    loop = threading.Thread(target=watcher.run, name="bwlab-watcher", daemon=True)
    loop.start()
    where = [f"http://{listen[0]}:{listen[1]}/metrics"] if listen else []
    where += [str(textfile)] if textfile else []
    log(f"watching {hier.describe()} every {args.interval:g} s; metrics at {', '.join(where)}")
    end = None if args.duration is None else time.monotonic() + args.duration
    try:
        while not stopping.is_set() and (end is None or time.monotonic() < end):
            wait = args.interval if end is None else min(args.interval, max(0.0, end - time.monotonic()))
            stopping.wait(wait)
            if textfile is not None:
                write_to_textfile(str(textfile), registry)  # a temporary file renamed over it
    finally:
        watcher.stop()
        loop.join(timeout=10)
    return 0
