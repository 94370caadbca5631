"""Scenarios: TOML data describing what to run, validated, expanded into concrete runs.

A scenario names a workload, the cgroup settings it runs under, sysctls, side actions and
a parameter space (a `[matrix]` of dotted keys to value lists and/or explicit `[[case]]`
tables of overrides). CPU-count values may be written relative to the target's CPU count
("ncpu", "ncpu/2", "ncpu*2"), so one file runs unchanged on the host, in a guest of any
size and in the simulator. `resolve()` turns a scenario into `RunSpec`s for one CPU count.
"""

from __future__ import annotations

import copy
import itertools
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bwlab.errors import BwlabError
from bwlab.paths import SCENARIO_DIR

CPU_EXPR = re.compile(r"^ncpu(?:\s*([*/])\s*(\d+(?:\.\d+)?))?$")
FLOOR_EXPR = re.compile(r"^max\(\s*(\d+(?:\.\d+)?)\s*,\s*(.+?)\s*\)$")

TOP_KEYS = {"name", "description", "repetitions", "duration_s", "cgroup", "sysctl",
            "workload", "side", "probe", "matrix", "case"}  # fmt: skip
PROBE_KEYS = {"lock_classes", "noise_s"}
CGROUP_KEYS = {"period_us", "quota_cpus", "burst_us", "burst_cpus", "cpus", "depth"}
FUNCS_KEYS = {"kind", "functions", "load", "zipf", "median_us", "sigma", "on_ms", "off_ms", "workers",
              "latency_awareness"}  # fmt: skip
WORKLOAD_KEYS: dict[str, set[str]] = {
    "sysbench-cpu": {"kind", "threads", "max_prime"},
    "cglat": {"kind", "burners", "sleep_us"},
    "hackbench": {"kind", "groups", "loops", "pipe"},
    "cgstress": {"kind", "burners", "hotplug"},
    "sysbench-threads": {"kind", "threads", "locks", "yields"},
    "wakelat": {"kind", "msg_threads", "workers", "rps", "batch", "poisson", "burn_us", "sleep_us", "slice_us"},
    "funcs": FUNCS_KEYS,
    "noise": {"kind", "threads", "gap_us", "merge_us", "work", "timer_interval_us"},
    # simulator only (until real workloads of these shapes exist in workloads/)
    "onoff": {"kind", "threads", "on_us", "off_us", "dist"},
    "requests": {"kind", "workers", "rps", "service_us", "dist"},
    "trace": {"kind", "file", "repeat"},
}
SIM_ONLY = {"onoff", "requests", "trace"}
# In a workload's argv: the directory of the group it runs in (cpu controller), filled in by
# the runner; funcs makes its per-function child groups there.
CGROUP_ARG = "@CGROUP@"
# ... and the repetition's number (1, 2, ...): funcs' seed, so that repetitions see different
# arrivals while the cases of one repetition see the same ones.
REP_ARG = "@REP@"
DISTS = ("fixed", "exp", "uniform", "lognormal")
SIDE_KEYS: dict[str, set[str]] = {"rewrite": {"enabled", "interval_ms"}}
SYSCTL_NAME = re.compile(r"^[a-z0-9_]+(\.[a-z0-9_]+)+$")


@dataclass(frozen=True)
class Workload:
    kind: str
    argv: tuple[str, ...]  # argv[0] is a logical program name the runner resolves
    # the [workload] table, CPU counts resolved, paths absolute: what the simulator reads
    table: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def require_real(self) -> None:
        if self.kind in SIM_ONLY:
            raise BwlabError(f"workload kind '{self.kind}' runs only in the simulator (--target sim)")

    def args(self, cgroup_dir: str, rep: int) -> list[str]:
        """argv[1:] for one repetition: CGROUP_ARG and REP_ARG filled in."""
        fill = {CGROUP_ARG: cgroup_dir, REP_ARG: str(rep + 1)}
        return [fill.get(a, a) for a in self.argv[1:]]


@dataclass(frozen=True)
class SideAction:
    kind: str
    interval_us: int


@dataclass(frozen=True)
class RunSpec:
    """One case of a scenario, resolved for a CPU count: everything a runner needs."""

    scenario: str
    case: str
    params: dict[str, Any]
    ncpu: int
    period_us: int
    quota_us: int | None  # None: unlimited ("max")
    burst_us: int
    cpus: str | None  # cpuset list ("0-1"), None: all CPUs
    sysctls: dict[str, str]
    workload: Workload
    sides: tuple[SideAction, ...]
    duration_s: float
    repetitions: int
    lock_classes: tuple[str, ...] = ()  # /proc/lock_stat classes to count (lockstat kernels)
    # seconds of the `noise` probe (every CPU spinning, no limit) run before and after the
    # cases, in the same boot: the machine as the simulator should see it next to these
    # results; 0: none (see noise_seconds())
    noise_s: int = 0
    # levels of nested groups, each with the same cpu.max; the workload runs in the deepest,
    # cpu.stat is read from the top one
    depth: int = 1

    def settings(self) -> dict[str, Any]:
        return {"period_us": self.period_us, "quota_us": self.quota_us,
                "burst_us": self.burst_us, "cpus": self.cpus, "depth": self.depth, "sysctls": self.sysctls,
                "workload": list(self.workload.argv),
                "sides": [f"{s.kind}@{s.interval_us}us" for s in self.sides]}  # fmt: skip


@dataclass
class Scenario:
    name: str
    path: Path
    text: str
    data: dict[str, Any]
    cases: list[tuple[str, dict[str, Any], dict[str, Any]]] = field(default_factory=list)

    @property
    def description(self) -> str:
        return str(self.data.get("description", ""))

    def total_seconds(self) -> float:
        """Workload time over all cases and repetitions (without setup)."""
        return sum(float(d["duration_s"]) * int(d["repetitions"]) for _, _, d in self.cases)

    def resolve(self, ncpu: int) -> list[RunSpec]:
        return [_resolve_case(self, name, params, data, ncpu) for name, params, data in self.cases]


class ScenarioError(BwlabError):
    pass


def _line_of(text: str, key: str, section: str | None = None) -> int:
    """Best-effort line number of `key = ...` (inside [section] when given), else 0."""
    in_section = section is None
    key_re = re.compile(rf'^\s*"?{re.escape(key)}"?\s*=')
    for lineno, line in enumerate(text.splitlines(), 1):
        header = re.match(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?", line)
        if header:
            in_section = section is None or header.group(1) == section
            if section is not None and header.group(1) == section and key == "":
                return lineno
            continue
        if in_section and key_re.match(line):
            return lineno
    return 0


def _err(sc_path: Path, text: str, message: str, key: str = "", section: str | None = None) -> ScenarioError:
    line = _line_of(text, key, section) if key or section else 0
    where = f"{sc_path}:{line}" if line else str(sc_path)
    return ScenarioError(f"{where}: {message}")


def cpu_value(value: Any, ncpu: int, what: str) -> float:
    """Evaluate a CPU-count expression: a number, 'ncpu', 'ncpu/K', 'ncpu*K' or 'max(N, expr)'."""
    if isinstance(value, bool):
        raise BwlabError(f"{what}: expected a CPU count, got {value!r}")
    if isinstance(value, int | float):
        if value <= 0:
            raise BwlabError(f"{what}: must be positive, got {value}")
        return float(value)
    if isinstance(value, str):
        floor = FLOOR_EXPR.match(value.strip())
        if floor:
            return max(float(floor.group(1)), cpu_value(floor.group(2), ncpu, what))
        match = CPU_EXPR.match(value.strip())
        if match:
            op, num = match.groups()
            if op is None:
                return float(ncpu)
            factor = float(num)
            if factor == 0:
                raise BwlabError(f"{what}: division by zero in {value!r}")
            return ncpu * factor if op == "*" else ncpu / factor
    raise BwlabError(f"{what}: expected a number, 'ncpu', 'ncpu/K', 'ncpu*K' or 'max(N, ...)', got {value!r}")


def _check_types(sc: Scenario, data: dict[str, Any], case: str) -> None:
    """Validate one (merged) case. Raises ScenarioError naming the key and line."""
    p, t = sc.path, sc.text
    ctx = f" (case {case})" if case else ""

    def need_int(section: str, key: str, val: Any, lo: int, hi: int) -> None:
        if isinstance(val, bool) or not isinstance(val, int) or not lo <= val <= hi:
            raise _err(p, t, f"[{section}] {key} must be an integer in {lo}..{hi}, got {val!r}{ctx}",
                       key, section)  # fmt: skip

    def need_cpu(section: str, key: str, val: Any, special: str) -> None:
        if val == special:
            return
        try:
            cpu_value(val, 1, key)
        except BwlabError as exc:
            raise _err(p, t, f"[{section}] {exc} (or {special!r}){ctx}", key, section) from None

    reps = data.get("repetitions")
    if isinstance(reps, bool) or not isinstance(reps, int) or not 1 <= reps <= 1000:
        raise _err(p, t, f"repetitions must be an integer in 1..1000, got {reps!r}{ctx}", "repetitions")
    dur = data.get("duration_s")
    if isinstance(dur, bool) or not isinstance(dur, int | float) or not 0 < dur <= 3600:
        raise _err(p, t, f"duration_s must be a number in (0, 3600], got {dur!r}{ctx}", "duration_s")

    def need_table(section: str, known: set[str]) -> dict[str, Any]:
        table = data.get(section, {})
        if not isinstance(table, dict):
            raise _err(p, t, f"{section} must be a table", section)
        for key in table:
            if key not in known:
                raise _err(p, t, f"unknown key '{key}' in [{section}] (known: {', '.join(sorted(known))})",
                           key, section)  # fmt: skip
        return table

    cg = need_table("cgroup", CGROUP_KEYS)
    need_int("cgroup", "period_us", cg.get("period_us", 100000), 1000, 1000000)
    need_int("cgroup", "burst_us", cg.get("burst_us", 0), 0, 10**9)
    need_int("cgroup", "depth", cg.get("depth", 1), 1, 8)
    need_cpu("cgroup", "quota_cpus", cg.get("quota_cpus", "max"), "max")
    if "burst_cpus" in cg:
        if "burst_us" in cg:
            raise _err(p, t, f"[cgroup] burst_us and burst_cpus are two ways to say one thing: give one{ctx}",
                       "burst_cpus", "cgroup")  # fmt: skip
        if cg["burst_cpus"] != 0:
            need_cpu("cgroup", "burst_cpus", cg["burst_cpus"], "0")
    need_cpu("cgroup", "cpus", cg.get("cpus", "all"), "all")

    sysctl = data.get("sysctl", {})
    if not isinstance(sysctl, dict):
        raise _err(p, t, "sysctl must be a table", "sysctl")
    for key, val in sysctl.items():
        if not SYSCTL_NAME.match(key):
            raise _err(p, t, f"[sysctl] '{key}' is not a sysctl name like kernel.foo_bar", key, "sysctl")
        if isinstance(val, bool) or not isinstance(val, int | str):
            raise _err(p, t, f"[sysctl] {key} must be an integer or string, got {val!r}", key, "sysctl")

    wl = data.get("workload")
    if not isinstance(wl, dict) or "kind" not in wl:
        raise _err(p, t, "missing [workload] table with a 'kind'", "", "workload")
    kind = wl["kind"]
    if kind not in WORKLOAD_KEYS:
        raise _err(p, t, f"unknown workload kind {kind!r} (known: {', '.join(sorted(WORKLOAD_KEYS))})",
                   "kind", "workload")  # fmt: skip
    for key in wl:
        if key not in WORKLOAD_KEYS[kind]:
            raise _err(p, t, f"unknown key '{key}' for workload {kind!r} "
                       f"(known: {', '.join(sorted(WORKLOAD_KEYS[kind]))})", key, "workload")  # fmt: skip
    for key in ("threads", "burners", "groups", "workers", "functions"):
        if key in wl:
            need_cpu("workload", key, wl[key], "")
    for key, flo, fhi in (("load", 0.001, 100.0), ("zipf", 0.0, 10.0), ("median_us", 1.0, 1e7),
                          ("sigma", 0.0, 5.0), ("on_ms", 1.0, 1e7), ("off_ms", 0.0, 1e7)):  # fmt: skip
        val = wl.get(key, flo)
        if isinstance(val, bool) or not isinstance(val, int | float) or not flo <= val <= fhi:
            raise _err(p, t, f"[workload] {key} must be a number in {flo:g}..{fhi:g}, got {val!r}{ctx}",
                       key, "workload")  # fmt: skip
    if "latency_awareness" in wl:
        need_int("workload", "latency_awareness", wl["latency_awareness"], 0, 1)
    probe = need_table("probe", PROBE_KEYS)
    classes = probe.get("lock_classes", [])
    if not isinstance(classes, list) or not all(isinstance(c, str) and c.strip() for c in classes):
        raise _err(p, t, "[probe] lock_classes must be a list of lock class names", "lock_classes", "probe")
    if "noise_s" in probe:
        need_int("probe", "noise_s", probe["noise_s"], 0, 600)
    for key, lo, hi in (("max_prime", 3, 10**7), ("sleep_us", 1, 10**7), ("loops", 1, 10**7),
                        ("locks", 1, 10**6), ("yields", 1, 10**7), ("msg_threads", 1, 64),
                        ("batch", 1, 10**5), ("burn_us", 0, 10**7), ("slice_us", 100, 10**5)):  # fmt: skip
        if key in wl:
            need_int("workload", key, wl[key], lo, hi)
    if isinstance(wl.get("rps"), str):
        need_cpu("workload", "rps", wl["rps"], "")
    for key in ("on_us", "off_us", "service_us", "rps"):
        val = wl.get(key, 1)
        if key == "rps" and isinstance(val, str):
            continue
        if isinstance(val, bool) or not isinstance(val, int | float) or not 0 < val <= 10**9:
            raise _err(p, t, f"[workload] {key} must be a positive number, got {val!r}{ctx}", key, "workload")
    if wl.get("dist", "exp") not in DISTS:
        raise _err(p, t, f"[workload] dist must be one of {', '.join(DISTS)}, got {wl['dist']!r}{ctx}",
                   "dist", "workload")  # fmt: skip
    if kind == "trace" and not (isinstance(wl.get("file"), str) and wl["file"]):
        raise _err(p, t, f'[workload] a trace needs file = "PATH.jsonl"{ctx}', "file", "workload")
    for key in ("hotplug", "repeat", "poisson", "pipe"):
        if not isinstance(wl.get(key, False), bool):
            raise _err(p, t, f"[workload] {key} must be true or false, got {wl[key]!r}{ctx}", key, "workload")
    if not isinstance(wl.get("hotplug", False), bool):
        raise _err(p, t, f"[workload] hotplug must be true or false, got {wl['hotplug']!r}{ctx}", "hotplug", "workload")

    sides = data.get("side", {})
    if not isinstance(sides, dict):
        raise _err(p, t, "side must be a table of tables, e.g. [side.rewrite]", "side")
    for sname, sval in sides.items():
        if sname not in SIDE_KEYS:
            raise _err(p, t, f"unknown side action '{sname}' (known: {', '.join(SIDE_KEYS)})",
                       "", f"side.{sname}")  # fmt: skip
        if not isinstance(sval, dict):
            raise _err(p, t, f"side.{sname} must be a table", sname, "side")
        for key in sval:
            if key not in SIDE_KEYS[sname]:
                raise _err(p, t, f"unknown key '{key}' in [side.{sname}] "
                           f"(known: {', '.join(sorted(SIDE_KEYS[sname]))})", key, f"side.{sname}")  # fmt: skip
        if not isinstance(sval.get("enabled", True), bool):
            raise _err(p, t, f"[side.{sname}] enabled must be true or false", "enabled", f"side.{sname}")
        need_int(f"side.{sname}", "interval_ms", sval.get("interval_ms", 100), 1, 60000)


def _set_path(data: dict[str, Any], dotted: str) -> tuple[dict[str, Any], str]:
    """The table and key a dotted override path addresses ('sysctl.' keeps the dots)."""
    section, _, rest = dotted.partition(".")
    if section in ("repetitions", "duration_s") and not rest:
        return data, section
    if not rest or section not in ("cgroup", "sysctl", "workload", "side"):
        raise BwlabError(f"'{dotted}' does not address a setting (use cgroup.X, sysctl.NAME, "
                         "workload.X, side.NAME.X, repetitions or duration_s)")  # fmt: skip
    table = data.setdefault(section, {})
    if section == "side":
        name, _, key = rest.partition(".")
        if not key:
            raise BwlabError(f"'{dotted}': expected side.NAME.KEY")
        return table.setdefault(name, {}), key
    return table, rest


def _label(dotted: str, value: Any) -> str:
    """A short case label for one matrix value: 'rewrite=on', 'slice_us=1000'."""
    parts = dotted.split(".")
    if isinstance(value, bool):
        return f"{parts[-2] if len(parts) > 1 else parts[-1]}={'on' if value else 'off'}"
    leaf = parts[-1].removeprefix("sched_cfs_bandwidth_")
    return f"{leaf}={value}".replace(" ", "")


def load(path: Path, overrides: dict[str, Any] | None = None) -> Scenario:
    """Read, validate and expand a scenario file. Errors name the file, line and key.

    `overrides` replaces top-level settings (repetitions, duration_s) for quick runs, and
    "section.key" entries (e.g. "workload.loops") replace a key of a table."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read scenario: {exc.strerror}") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{path}: invalid TOML: {exc}") from exc
    for key in data:
        if key not in TOP_KEYS:
            raise _err(path, text, f"unknown top-level key '{key}' (known: {', '.join(sorted(TOP_KEYS))})", key)
    name = data.get("name")
    if not isinstance(name, str) or not re.match(r"^[a-z0-9][a-z0-9_-]*$", name):
        raise _err(path, text, f"name must be a lowercase identifier, got {name!r}", "name")
    for key, value in (overrides or {}).items():
        section, dot, sub = key.partition(".")
        if dot:
            if not isinstance(data.get(section, {}), dict):
                raise ScenarioError(f"{path}: override {key}: {section} is not a table")
            data[section] = {**data.get(section, {}), sub: value}
        else:
            data[key] = value
    data.setdefault("repetitions", 3)
    data.setdefault("duration_s", 10)
    sc = Scenario(name=name, path=path, text=text, data=data)

    matrix = data.get("matrix", {})
    if not isinstance(matrix, dict):
        raise _err(path, text, "matrix must be a table of key = [values]", "matrix")
    for key, values in matrix.items():
        if not isinstance(values, list) or not values:
            raise _err(path, text, f"[matrix] {key} must be a non-empty list", key, "matrix")
    explicit = data.get("case", [{}])
    if not isinstance(explicit, list) or not all(isinstance(c, dict) for c in explicit):
        raise _err(path, text, "case must be an array of tables ([[case]])", "", "case")

    base = {k: v for k, v in data.items() if k not in ("matrix", "case")}
    keys = list(matrix)
    seen: set[str] = set()
    for combo in itertools.product(*(matrix[k] for k in keys)):
        for case in explicit:
            merged = copy.deepcopy(base)
            params: dict[str, Any] = {}
            case_name = case.get("name")
            if case_name is not None and not isinstance(case_name, str):
                raise _err(path, text, "[[case]] name must be a string", "name", "case")
            assignments = [(k, v) for k, v in case.items() if k != "name"] + list(zip(keys, combo, strict=True))
            for dotted, value in assignments:
                try:
                    table, leaf = _set_path(merged, dotted)
                except BwlabError as exc:
                    raise _err(path, text, str(exc), dotted) from None
                table[leaf] = value
                params[dotted] = value
            parts = [case_name, *(_label(k, v) for k, v in zip(keys, combo, strict=True))]
            label = "-".join(p for p in parts if p) or "default"
            if label in seen:
                raise _err(path, text, f"two cases are both named '{label}'", "name", "case")
            seen.add(label)
            _check_types(sc, merged, label)
            sc.cases.append((label, params, merged))
    return sc


def builtin_path(name: str) -> Path:
    return SCENARIO_DIR / f"{name}.toml"


def builtin_names() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.toml"))


def find(name_or_path: str) -> Path:
    """A scenario file by path, or a built-in scenario by name."""
    candidate = Path(name_or_path)
    if candidate.suffix == ".toml" or "/" in name_or_path:
        if not candidate.is_file():
            raise ScenarioError(f"scenario file {candidate}: no such file")
        return candidate
    builtin = builtin_path(name_or_path)
    if not builtin.is_file():
        raise ScenarioError(f"unknown scenario '{name_or_path}' (built in: {', '.join(builtin_names())})")
    return builtin


def noise_seconds(specs: list[RunSpec]) -> int:
    """How long the noise probe runs before and after a run of these cases ([probe] noise_s is
    the scenario's, the same in every case)."""
    return max((s.noise_s for s in specs), default=0)


def _cpuset(count: int, ncpu: int) -> str:
    return "0" if count == 1 else f"0-{count - 1}"


def _resolve_case(sc: Scenario, case: str, params: dict[str, Any], data: dict[str, Any], ncpu: int) -> RunSpec:
    cg = data.get("cgroup", {})
    period = int(cg.get("period_us", 100000))
    quota_expr = cg.get("quota_cpus", "max")
    quota = None if quota_expr == "max" else max(1000, round(cpu_value(quota_expr, ncpu, "quota_cpus") * period))
    burst = int(cg.get("burst_us", 0))
    if cg.get("burst_cpus", 0) != 0:
        burst = round(cpu_value(cg["burst_cpus"], ncpu, "burst_cpus") * period)
    cpus_expr = cg.get("cpus", "all")
    cpus = None
    if cpus_expr != "all":
        count = max(1, math.floor(cpu_value(cpus_expr, ncpu, "cpus")))
        if count > ncpu:
            raise BwlabError(f"{sc.path}: case {case}: cpus={cpus_expr!r} is {count} CPUs, target has {ncpu}")
        cpus = None if count == ncpu else _cpuset(count, ncpu)
    duration = float(data["duration_s"])
    wl = data["workload"]
    kind = wl["kind"]
    dur_arg = str(max(1, math.ceil(duration)))
    if kind == "sysbench-cpu":
        threads = max(1, round(cpu_value(wl.get("threads", "ncpu"), ncpu, "threads")))
        argv: tuple[str, ...] = ("sysbench", "cpu", f"--threads={threads}",
                                 f"--cpu-max-prime={wl.get('max_prime', 20000)}",
                                 f"--time={dur_arg}", "--events=0", "run")  # fmt: skip
    elif kind == "cglat":
        burners = max(1, round(cpu_value(wl.get("burners", 32), ncpu, "burners")))
        argv = ("cglat", "-b", str(burners), "-s", str(wl.get("sleep_us", 10000)), "-d", dur_arg)
    elif kind == "sysbench-threads":
        threads = max(1, round(cpu_value(wl.get("threads", "ncpu*4"), ncpu, "threads")))
        argv = ("sysbench", "threads", f"--threads={threads}", f"--thread-locks={wl.get('locks', 8)}",
                f"--thread-yields={wl.get('yields', 1000)}", f"--time={dur_arg}", "--events=0", "run")  # fmt: skip
    elif kind == "wakelat":
        workers = max(1, round(cpu_value(wl.get("workers", "ncpu*2"), ncpu, "workers")))
        msgs = int(wl.get("msg_threads", 1))
        rps = cpu_value(wl["rps"], ncpu, "rps") if "rps" in wl else 0
        argv = ("wakelat", "-m", str(msgs), "-t", str(max(1, workers // msgs)), "-r", f"{rps:g}",
                "-b", str(wl.get("batch", 1)), *(("-p",) if wl.get("poisson") else ()),
                "-c", str(wl.get("burn_us", 1000)), "-s", str(wl.get("sleep_us", 0)),
                *(("-S", str(wl["slice_us"])) if "slice_us" in wl else ()), "-d", dur_arg)  # fmt: skip
    elif kind == "cgstress":
        burners = max(1, min(64, round(cpu_value(wl.get("burners", "ncpu*4"), ncpu, "burners"))))
        argv = ("cgstress", "-d", dur_arg, "-b", str(burners), *(("-H",) if wl.get("hotplug") else ()))
    elif kind == "hackbench":
        groups = max(1, round(cpu_value(wl.get("groups", "ncpu"), ncpu, "groups")))
        # pipes by default: the lab's guest kernels are built without networking (no socketpair)
        argv = ("hackbench", *(("-p",) if wl.get("pipe", True) else ()), "-g", str(groups), "-l",
                str(wl.get("loops", 1000)))  # fmt: skip
    elif kind == "funcs":
        funcs = max(1, round(cpu_value(wl.get("functions", "ncpu*4"), ncpu, "functions")))
        opts = [("-l", "load", 1.0), ("-z", "zipf", 1.0), ("-m", "median_us", 5000), ("-s", "sigma", 1.0),
                ("-B", "on_ms", 1000), ("-O", "off_ms", 3000)]  # fmt: skip
        workers = max(1, round(cpu_value(wl.get("workers", 2), ncpu, "workers")))
        argv = ("funcs", "-n", str(funcs), "-c", str(ncpu), "-w", str(workers), "-d", dur_arg,
                *(a for flag, key, default in opts for a in (flag, f"{float(wl.get(key, default)):g}")),
                "-S", REP_ARG, "-G", CGROUP_ARG,
                *(("-L", str(wl["latency_awareness"])) if "latency_awareness" in wl else ()))  # fmt: skip
    elif kind == "noise":
        threads = max(1, round(cpu_value(wl.get("threads", "ncpu"), ncpu, "threads")))
        argv = ("noise", "-t", str(threads), "-d", dur_arg, "-g", str(int(wl.get("gap_us", 5))),
                "-m", str(int(wl.get("merge_us", 100))), "-w", str(int(wl.get("work", 0))),
                "-i", str(int(wl.get("timer_interval_us", 997))))  # fmt: skip
    else:  # simulator only
        argv = (kind,)
    table = dict(wl)
    for key in ("threads", "burners", "groups", "workers", "functions"):
        if key in table:
            table[key] = max(1, round(cpu_value(table[key], ncpu, key)))
    if "rps" in table:
        table["rps"] = cpu_value(table["rps"], ncpu, "rps")
    if "file" in table:
        table["file"] = str((sc.path.parent / table["file"]).resolve())
    sides = tuple(
        SideAction(kind=name, interval_us=int(s.get("interval_ms", 100)) * 1000)
        for name, s in sorted(data.get("side", {}).items())
        if s.get("enabled", True)
    )
    if any(s.kind == "rewrite" for s in sides) and quota is None:
        raise BwlabError(f"{sc.path}: case {case}: side.rewrite needs a quota (quota_cpus is 'max')")
    return RunSpec(
        scenario=sc.name, case=case, params=params, ncpu=ncpu, period_us=period, quota_us=quota,
        burst_us=burst, cpus=cpus,
        sysctls={k: str(v) for k, v in data.get("sysctl", {}).items()},
        workload=Workload(kind=kind, argv=argv, table=table), sides=sides, duration_s=duration,
        repetitions=int(data["repetitions"]),
        lock_classes=tuple(data.get("probe", {}).get("lock_classes", [])), depth=int(cg.get("depth", 1)),
        noise_s=int(data.get("probe", {}).get("noise_s", 0)),
    )  # fmt: skip
