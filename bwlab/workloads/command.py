"""command: the user's own program (a reproducer, a service, fibtest) under a scenario.

    [workload]
    kind = "command"
    argv = ["fibtest", "-t", "2", "-d", "5"]   # argv[0]: one of `files`, or a program on the target
    files = ["fibtest"]                         # relative to the scenario file; carried to the target
    metrics = "json-last-line"                  # optional: numbers of the last output line's JSON object
    check_exit = true                           # optional: false records a non-zero exit, not a failure
    ends_by_itself = false                      # optional: true: never stopped at the duration

`@CGROUP@` in argv is the group the program runs in, `@REP@` the repetition (1, 2, ...) and
`@DURATION@` the scenario's duration in whole seconds, wherever they stand in an argument (so
`sh -c "... @REP@ ..."` works); any other `@NAME@` is an error.
A program still running at the scenario's duration (and a slack: base.stop_time_s) is stopped:
SIGTERM to every task in its group, SIGKILL STOP_GRACE_S later, and the repetition records
`stopped` 1 and counts (its exit status is then no failure). With `ends_by_itself = true` it
is never stopped; one that outlives the target's hang limit fails its case.
Every repetition has the exit status, the elapsed time and the cpu.stat deltas; with
`metrics = "json-last-line"` also every top-level number of that JSON object (and a
`samples_us` list becomes the repetition's latency samples). A guest carries each of
`files` as /bin/NAME; static binaries and scripts for busybox sh run there as they are.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bwlab.errors import BwlabError
from bwlab.workloads.base import (
    CGROUP_ARG,
    COMMON_METRICS,
    REP_ARG,
    Param,
    ParamError,
    Resolved,
    WorkloadKind,
    duration_arg,
    json_doc,
    stop_time_s,
)

METRICS = ("none", "json-last-line")
DURATION_ARG = "@DURATION@"
PLACEHOLDERS = (CGROUP_ARG, REP_ARG, DURATION_ARG)
PLACEHOLDER = re.compile(r"@[A-Z][A-Z_]*@")


class Command(WorkloadKind):
    name = "command"
    description = "your own program: argv, files to carry, optional JSON metrics"
    params = {"argv": Param("strings", required=True, help="the command; argv[0] is a program or one of files"),
              "files": Param("paths", help="files carried to the target, relative to the scenario"),
              "metrics": Param("choice", "none", choices=METRICS, help="json-last-line: numbers of its last line"),
              "check_exit": Param("bool", True, help="false: a non-zero exit is recorded, not a failure"),
              "ends_by_itself": Param("bool", False, help="true: never stopped at the duration (it ends)")}  # fmt: skip

    def check(self, table: Mapping[str, Any]) -> None:
        for arg in table.get("argv", []):
            for name in PLACEHOLDER.findall(str(arg)):
                if name not in PLACEHOLDERS:
                    raise ParamError("argv", f"[workload] argv: {name} is not a placeholder bwlab fills in "
                                     f"(known: {', '.join(PLACEHOLDERS)})")  # fmt: skip
        names = [Path(f).name for f in table.get("files", [])]
        if len(set(names)) != len(names):
            raise ParamError("files", "[workload] files: two files with one name (the target carries them by name)")

    def argv(self, w: Resolved, ncpu: int, duration_s: float) -> tuple[str, ...]:
        return tuple(str(a).replace(DURATION_ARG, duration_arg(duration_s)) for a in w["argv"])

    def files(self, w: Resolved) -> dict[str, Path]:
        out = {}
        for name in w.get("files", []):
            path = Path(name)
            if not path.is_file():
                raise BwlabError(f"[workload] files: {path} does not exist")
            out[path.name] = path
        return out

    def exit_is_failure(self, w: Resolved, rc: int) -> bool:
        return bool(w["check_exit"]) and rc != 0

    def stop_after_s(self, w: Resolved, duration_s: float) -> float | None:
        return None if w["ends_by_itself"] else stop_time_s(duration_s)

    def parse(self, stdout: str, w: Resolved) -> tuple[dict[str, float], list[int]]:
        if w["metrics"] != "json-last-line":
            return {}, []
        program = Path(w["argv"][0]).name
        doc = json_doc(stdout, program)
        # a number named like one every repetition has (throttled_pct, ...) is kept as cmd_NAME
        common = {m.key for m in COMMON_METRICS}
        out = {(f"cmd_{k}" if k in common else k): float(v) for k, v in doc.items()
               if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)}  # fmt: skip
        samples = doc.get("samples_us", [])
        if not isinstance(samples, list) or not all(isinstance(s, int | float) for s in samples):
            raise BwlabError(f"{program}: samples_us must be a list of numbers (microseconds)")
        return out, [int(s) for s in samples]

    def dynamic_metrics(self) -> bool:
        return True


KIND = Command()
