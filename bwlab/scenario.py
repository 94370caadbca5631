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

from bwlab import workloads
from bwlab.errors import BwlabError
from bwlab.paths import SCENARIO_DIR
from bwlab.workloads.base import CGROUP_ARG, REP_ARG, ParamError, Resolved, WorkloadKind, cpu_value

TOP_KEYS = {"name", "description", "repetitions", "duration_s", "cgroup", "sysctl",
            "workload", "side", "probe", "matrix", "case", "target"}  # fmt: skip
# [target] userland: what a lab guest boots the scenario with. "initramfs" (the default: the
# lab's static programs, the measuring instrument) or "host" (this machine's own programs,
# targets/hostroot.py: a dynamic workload runs there; --target guest then runs it as
# --target guest-host). The host, ssh:// machines and the simulator have one userland each.
USERLANDS = ("initramfs", "host")
PROBE_KEYS = {"lock_classes", "noise_s"}
CGROUP_KEYS = {"period_us", "quota_cpus", "burst_us", "burst_cpus", "burst_ticks", "burst_quota_ticks", "cpus", "depth"}
# rewrite: cpu.max written again with its value (cgwrite); sample: the group's counters read
# every interval for the per-period detector (cgsample -> bwlab/periods.py: below_quota_pct);
# trace: the period timer and the group's threads traced (ftrace, bwlab/schedtrace.py), the
# detector's ground truth beside a sample side action (below_recall, below_precision)
SIDE_KEYS: dict[str, set[str]] = {"rewrite": {"enabled", "interval_ms"}, "sample": {"enabled", "interval_ms"},
                                  "trace": {"enabled"}}  # fmt: skip
SIDE_INTERVAL_MS = {"rewrite": 100, "sample": 1, "trace": 1}
SYSCTL_NAME = re.compile(r"^[a-z0-9_]+(\.[a-z0-9_]+)+$")
MIN_QUOTA_US = 1000  # the kernel refuses a smaller cpu.max quota (and period)
MAX_CASES = 10_000  # a matrix larger than this is refused with its size, not expanded


@dataclass(frozen=True)
class Workload:
    """A case's workload, resolved for one CPU count."""

    kind: str
    argv: tuple[str, ...]  # argv[0] is a logical program name, or one of `files`
    resolved: Resolved = field(default_factory=lambda: Resolved("", {}), compare=False, hash=False)
    files: dict[str, Path] = field(default_factory=dict, compare=False, hash=False)

    @property
    def plugin(self) -> WorkloadKind:
        return workloads.get(self.kind)

    def require_real(self) -> None:
        if not self.plugin.runs_on_real:
            raise BwlabError(f"workload kind '{self.kind}' runs only in the simulator (--target sim)")

    def args(self, cgroup_dir: str, rep: int) -> list[str]:
        """argv[1:] for one repetition: CGROUP_ARG and REP_ARG filled in, wherever they stand in
        an argument (`sh -c "... @REP@ ..."` too)."""
        out = []
        for arg in self.argv[1:]:
            out.append(arg.replace(CGROUP_ARG, cgroup_dir).replace(REP_ARG, str(rep + 1)))
        return out


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

    @property
    def cpu_ids(self) -> list[int]:
        """The CPUs the case runs on: `cpus` ("0" or "0-N", as resolving writes it), else all."""
        if self.cpus is None:
            return list(range(self.ncpu))
        lo, _, hi = self.cpus.partition("-")
        return list(range(int(lo), int(hi or lo) + 1))

    def settings(self) -> dict[str, Any]:
        return {"period_us": self.period_us, "quota_us": self.quota_us,
                "burst_us": self.burst_us, "cpus": self.cpus, "depth": self.depth, "sysctls": self.sysctls,
                "kind": self.workload.kind, "workload": list(self.workload.argv),
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

    @property
    def userland(self) -> str:
        """What a lab guest boots it with: "initramfs" or "host" ([target] userland)."""
        return str(self.data.get("target", {}).get("userland", "initramfs"))

    def resolve(self, ncpu: int, hz: int | None = None) -> list[RunSpec]:
        """Every case for a target of `ncpu` CPUs; `hz` (the target kernel's CONFIG_HZ) is
        needed only by cases that give their burst in ticks."""
        return [_resolve_case(self, name, params, data, ncpu, hz) for name, params, data in self.cases]


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
    line = 0
    if key and section not in (None, "matrix", "case"):
        # a value set by a [matrix] list or a [[case]] as a dotted key ("cgroup.period_us" = ...)
        # overrides the section's own: that line first
        line = _line_of(text, f"{section}.{key}", "matrix") or _line_of(text, f"{section}.{key}", "case")
    if not line and (key or section):
        line = _line_of(text, key, section)
    where = f"{sc_path}:{line}" if line else str(sc_path)
    return ScenarioError(f"{where}: {message}")


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
    bursts = [k for k in ("burst_us", "burst_cpus", "burst_ticks", "burst_quota_ticks") if k in cg]
    if len(bursts) > 1:
        raise _err(p, t, f"[cgroup] {' and '.join(bursts)} are ways to say one thing: give one{ctx}",
                   bursts[-1], "cgroup")  # fmt: skip
    if "burst_cpus" in cg and cg["burst_cpus"] != 0:
        need_cpu("cgroup", "burst_cpus", cg["burst_cpus"], "0")
    for key in ("burst_ticks", "burst_quota_ticks"):
        if key in cg:
            need_int("cgroup", key, cg[key], 0, 1000)
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
    if kind not in workloads.kinds():
        raise _err(p, t, f"unknown workload kind {kind!r} (known: {', '.join(sorted(workloads.kinds()))})",
                   "kind", "workload")  # fmt: skip
    plugin = workloads.get(kind)
    for key in wl:
        if key != "kind" and key not in plugin.params:
            raise _err(p, t, f"unknown key '{key}' for workload {kind!r} "
                       f"(known: {', '.join(sorted(plugin.params))})", key, "workload")  # fmt: skip
    try:
        for key, param in plugin.params.items():
            if key in wl:
                param.check(key, wl[key])
        for key, param in plugin.params.items():
            if param.required and key not in wl:
                raise ParamError(key, f"[workload] {kind} needs {key}")
        plugin.check(wl)
    except ParamError as exc:
        raise _err(p, t, f"{exc}{ctx}", exc.key, "workload") from None
    probe = need_table("probe", PROBE_KEYS)
    classes = probe.get("lock_classes", [])
    if not isinstance(classes, list) or not all(isinstance(c, str) and c.strip() for c in classes):
        raise _err(p, t, "[probe] lock_classes must be a list of lock class names", "lock_classes", "probe")
    if "noise_s" in probe:
        need_int("probe", "noise_s", probe["noise_s"], 0, 600)

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
        need_int(f"side.{sname}", "interval_ms", sval.get("interval_ms", SIDE_INTERVAL_MS[sname]), 1, 60000)


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
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{path}: not UTF-8 text (byte {exc.start}): a scenario is a TOML file") from None
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
    target = data.get("target", {})
    if not isinstance(target, dict):
        raise _err(path, text, "target must be a table ([target] userland = ...)", "target")
    for key, value in target.items():
        if key != "userland":
            raise _err(path, text, f"unknown key '{key}' in [target] (known: userland)", key, "target")
        if value not in USERLANDS:
            raise _err(path, text, f"[target] userland must be one of {', '.join(USERLANDS)}, got {value!r}",
                       key, "target")  # fmt: skip
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

    size = len(explicit) * math.prod(len(v) for v in matrix.values())
    if size > MAX_CASES:
        raise _err(path, text, f"the matrix and cases make {size:,} cases; at most {MAX_CASES:,} are allowed",
                   "", "matrix")  # fmt: skip
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


def check_bandwidth(where: str, quota_from: str, quota_us: int | None, burst_us: int) -> None:
    """Raise what the kernel would refuse: a quota below its 1 ms minimum (`quota_from` says
    where the quota came from), a burst above the quota or without one."""
    if quota_us is not None and quota_us < MIN_QUOTA_US:
        raise BwlabError(
            f"{where}: {quota_from} is a quota of {quota_us} us; the kernel's minimum is {MIN_QUOTA_US} us"
        )
    if burst_us and quota_us is None:
        raise BwlabError(f"{where}: a burst ({burst_us} us) needs a quota (quota_cpus is 'max')")
    if quota_us is not None and burst_us > quota_us:
        raise BwlabError(f"{where}: burst {burst_us} us is above the quota {quota_us} us (the kernel refuses it)")


def tick_burst_us(ticks: int, hz: int, cpus: int, quota_us: int) -> int:
    """`ticks` ticks of a HZ kernel on each of `cpus` CPUs, at most the quota: the debt a group
    can carry into the next period is about one tick per CPU it runs on (a throttle is noticed
    at the tick), and the kernel refuses a burst above the quota. `burst_ticks` counts the
    group's CPUs (its cpuset); `burst_quota_ticks` the CPUs its quota buys, rounded up
    (DIV_ROUND_UP(quota, period)): the size of the series' default burst (0004), which a small
    group on a large machine cannot turn into a whole extra quota."""
    return min(ticks * cpus * 1_000_000 // hz, quota_us)


def _resolve_case(sc: Scenario, case: str, params: dict[str, Any], data: dict[str, Any], ncpu: int,
                  hz: int | None) -> RunSpec:  # fmt: skip
    where = f"{sc.path}: case {case}"
    cg = data.get("cgroup", {})
    period = int(cg.get("period_us", 100000))
    quota_expr = cg.get("quota_cpus", "max")
    quota = None if quota_expr == "max" else round(cpu_value(quota_expr, ncpu, "quota_cpus") * period)
    cpus_expr = cg.get("cpus", "all")
    cpus = None
    count = ncpu
    if cpus_expr != "all":
        count = max(1, math.floor(cpu_value(cpus_expr, ncpu, "cpus")))
        if count > ncpu:
            raise BwlabError(f"{where}: cpus={cpus_expr!r} is {count} CPUs, target has {ncpu}")
        cpus = None if count == ncpu else ("0" if count == 1 else f"0-{count - 1}")
    burst = int(cg.get("burst_us", 0))
    if cg.get("burst_cpus", 0) != 0:
        burst = round(cpu_value(cg["burst_cpus"], ncpu, "burst_cpus") * period)
    # at most one of the two (_check_types): ticks on each of the group's CPUs, or of its quota's
    for key in ("burst_ticks", "burst_quota_ticks"):
        if cg.get(key, 0) == 0:
            continue
        if hz is None:
            raise BwlabError(f"{where}: {key} needs the target kernel's HZ, which is not known here")
        if quota is None:
            raise BwlabError(f"{where}: a burst ({cg[key]} ticks) needs a quota (quota_cpus is 'max')")
        burst = tick_burst_us(int(cg[key]), hz, count if key == "burst_ticks" else -(-quota // period), quota)
    check_bandwidth(where, f"quota_cpus={quota_expr!r} at a {period} us period", quota, burst)
    duration = float(data["duration_s"])
    wl = data["workload"]
    plugin = workloads.get(wl["kind"])
    values: dict[str, Any] = {}
    for key, param in plugin.params.items():
        value = wl.get(key, param.default)
        if value is not None:
            values[key] = param.resolve(key, value, ncpu, sc.path.parent)
    resolved = Resolved(kind=plugin.name, values=values)
    argv = plugin.argv(resolved, ncpu, duration) if plugin.runs_on_real else (plugin.name,)
    sides = tuple(
        SideAction(kind=name, interval_us=int(s.get("interval_ms", SIDE_INTERVAL_MS[name])) * 1000)
        for name, s in sorted(data.get("side", {}).items())
        if s.get("enabled", True)
    )
    for kind in ("rewrite", "sample", "trace"):
        if any(s.kind == kind for s in sides) and quota is None:
            raise BwlabError(f"{where}: side.{kind} needs a quota (quota_cpus is 'max')")
    if any(s.kind == "trace" for s in sides) and not any(s.kind == "sample" for s in sides):
        raise BwlabError(f"{where}: side.trace is the truth for side.sample's detector: add [side.sample]")
    return RunSpec(
        scenario=sc.name, case=case, params=params, ncpu=ncpu, period_us=period, quota_us=quota,
        burst_us=burst, cpus=cpus,
        sysctls={k: str(v) for k, v in data.get("sysctl", {}).items()},
        workload=Workload(kind=plugin.name, argv=argv, resolved=resolved, files=plugin.files(resolved)),
        sides=sides, duration_s=duration, repetitions=int(data["repetitions"]),
        lock_classes=tuple(data.get("probe", {}).get("lock_classes", [])), depth=int(cg.get("depth", 1)),
        noise_s=int(data.get("probe", {}).get("noise_s", 0)),
    )  # fmt: skip
