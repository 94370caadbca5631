"""trace (simulator only): threads replaying run/sleep intervals from a JSON-lines file."""

from __future__ import annotations

import json
from pathlib import Path

from bwlab.errors import BwlabError
from bwlab.workloads.base import Param, Resolved, SimModel, WorkloadKind


def read_trace(path: Path) -> list[list[tuple[int, int]]]:
    """A JSON-lines trace: one {"run_us": R, "sleep_us": S, "thread": N} per line, per thread
    in order; (run, sleep) in ns per thread. Errors name the file, line and field."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise BwlabError(f"{path}: trace is not UTF-8 text") from None
    except OSError as exc:
        raise BwlabError(f"{path}: cannot read trace: {exc.strerror}") from exc
    threads: dict[int, list[tuple[int, int]]] = {}
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BwlabError(f"{path}:{lineno}: not a JSON object: {exc.msg}") from None
        if not isinstance(rec, dict):
            raise BwlabError(f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}")
        unknown = set(rec) - {"run_us", "sleep_us", "thread"}
        if unknown:
            raise BwlabError(f"{path}:{lineno}: unknown field '{sorted(unknown)[0]}' (known: run_us, sleep_us, thread)")
        vals = {}
        for key in ("run_us", "sleep_us"):
            val = rec.get(key, 0)
            if isinstance(val, bool) or not isinstance(val, int | float) or not 0 <= val <= 3.6e9:
                raise BwlabError(f"{path}:{lineno}: {key} must be a number of microseconds >= 0, got {val!r}")
            vals[key] = round(val * 1000)
        if vals["run_us"] == 0 and vals["sleep_us"] == 0:
            raise BwlabError(f"{path}:{lineno}: run_us and sleep_us are both 0")
        thread = rec.get("thread", 0)
        if isinstance(thread, bool) or not isinstance(thread, int) or not 0 <= thread < 4096:
            raise BwlabError(f"{path}:{lineno}: thread must be an integer in 0..4095, got {thread!r}")
        threads.setdefault(thread, []).append((vals["run_us"], vals["sleep_us"]))
    if not threads:
        raise BwlabError(f"{path}: trace has no intervals")
    return [threads[k] for k in sorted(threads)]


class Trace(WorkloadKind):
    name = "trace"
    description = "replay run/sleep intervals from a JSON-lines file (simulator only)"
    params = {"file": Param("path", required=True, help="JSON lines: run_us, sleep_us, thread"),
              "repeat": Param("bool", True),
              "paced": Param("bool", False, help="each interval due at its recorded time (work on its own clock): "
                                                 "a delayed run shortens the sleep after it")}  # fmt: skip
    runs_on_real = False

    def sim_model(self, w: Resolved, cpus: list[int]) -> SimModel:
        traces = read_trace(Path(str(w["file"])))
        return SimModel([{"type": "trace", "intervals": tr, "repeat": bool(w["repeat"]),
                         "paced": bool(w["paced"])} for tr in traces])  # fmt: skip


KIND = Trace()
