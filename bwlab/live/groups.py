"""The machine's CPU-limited cgroups, on cgroup v1 or v2, found by walking the hierarchy that
has the cpu controller: each group's own limit (quota, period, burst), its effective limit
(the tightest of its own and its ancestors': a parent's limit throttles its children), where
its counters are, and who it belongs to (identity.py).

Only reads. Paths are relative to the hierarchy's root ("/kubepods/burstable/pod…/…").
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bwlab import cgroup
from bwlab.errors import BwlabError
from bwlab.live.identity import Identity, identify
from bwlab.periods import Limit


@dataclass(frozen=True)
class Hierarchy:
    """Where cgroup CPU bandwidth lives: v2 (one tree) or v1 (cpu, and cpuacct for usage)."""

    version: int
    cpu: Path
    cpuacct: Path | None = None  # v1 when not co-mounted with cpu

    def describe(self) -> str:
        return f"cgroup v{self.version} at {self.cpu}"


@dataclass(frozen=True)
class LiveGroup:
    """One cgroup as found: its files, its limits, its identity."""

    path: str  # relative to the hierarchy root, starting with "/"
    hierarchy: Hierarchy
    limit: Limit  # its own
    effective: Limit  # the tightest of its own and its ancestors' (by CPUs)
    limited_by: str  # the path whose limit is `effective` (itself or an ancestor)
    identity: Identity

    @property
    def dir(self) -> Path:
        return self.hierarchy.cpu / self.path.lstrip("/")

    @property
    def stat_file(self) -> Path:
        return self.dir / "cpu.stat"

    @property
    def usage_file(self) -> Path | None:
        """v1: cpuacct.usage (ns); v2: None (usage_usec is in cpu.stat)."""
        if self.hierarchy.version == 2:
            return None
        root = self.hierarchy.cpuacct or self.hierarchy.cpu
        return root / self.path.lstrip("/") / "cpuacct.usage"

    def threads(self) -> list[int]:
        """The group's threads, descendants included: what competes for its quota."""
        tids: list[int] = []
        for root, _, files in os.walk(self.dir):
            name = "cgroup.threads" if "cgroup.threads" in files else "tasks"
            try:
                tids += [int(t) for t in Path(root, name).read_text().split()]
            except OSError:
                continue
        return tids

    def processes(self) -> list[tuple[int, float | None]]:
        """The group's processes, descendants included, each with the quota (CPUs) of the
        cgroup it is in itself: what a program that reads its limit sees (Go's GOMAXPROCS)."""
        out: list[tuple[int, float | None]] = []
        for root, _, files in os.walk(self.dir):
            if "cgroup.procs" not in files:
                continue
            try:
                pids = [int(p) for p in Path(root, "cgroup.procs").read_text().split()]
                quota = read_limit(self.hierarchy, root).cpus if pids else None
            except (OSError, BwlabError):
                continue
            out += [(pid, quota) for pid in pids]
        return out

    def allowed_cpus(self, tids: list[int] | None = None) -> list[int]:
        """The CPUs its threads may run on: the union of their affinity masks, which the
        cpuset (of either hierarchy), taskset and a runtime's --cpuset-cpus all narrow. Every
        CPU of the machine when no thread can be asked (none left, or none readable)."""
        cpus: set[int] = set()
        for tid in self.threads() if tids is None else tids:
            with contextlib.suppress(OSError):  # gone, or not ours to ask
                cpus |= os.sched_getaffinity(tid)
        return sorted(cpus) if cpus else list(range(os.cpu_count() or 1))


def cpu_list(cpus: list[int]) -> str:
    """CPU numbers as the kernel writes them (cpuset.cpus, taskset -c): "0-3,6"."""
    out: list[str] = []
    for cpu in sorted(set(cpus)):
        if out and cpu == int(out[-1].rsplit("-", 1)[-1]) + 1:
            out[-1] = f"{out[-1].split('-')[0]}-{cpu}"
        else:
            out.append(str(cpu))
    return ",".join(out)


def hierarchy(root: Path | None = None) -> Hierarchy:
    """The hierarchy the host target makes its groups in (cgroup.detect(): v2 when it offers
    the cpu controller, else v1's cpu hierarchy), with where v1 keeps usage; `root`: where the
    cgroup filesystems are mounted, if not /sys/fs/cgroup (a container given the host's)."""
    found = cgroup.detect(root) if root is not None else cgroup.detect()
    if isinstance(found, cgroup.CgroupV2):
        return Hierarchy(2, found.root)
    assert isinstance(found, cgroup.CgroupV1)
    if (found.cpu / "cpuacct.usage").is_file():  # cpu,cpuacct co-mounted
        return Hierarchy(1, found.cpu)
    if found.cpuacct is None:
        raise BwlabError("cgroup v1 without a cpuacct hierarchy: a group's usage cannot be read")
    return Hierarchy(1, found.cpu, found.cpuacct)


def _read(path: str) -> str:
    """A control file's text (os.open/os.read: the exporter walks every group every 30 s, and
    pathlib's read_text cost three times as much)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            data = os.read(fd, 4096)
        finally:
            os.close(fd)
    except OSError as exc:
        raise BwlabError(f"cannot read {path}: {exc.strerror}") from exc
    return data.decode(errors="replace").strip()


def _controllers(directory: str) -> list[str]:
    """The v2 controllers on for a group (its cgroup.controllers); none if it cannot be read."""
    try:
        return _read(directory + "/cgroup.controllers").split()
    except BwlabError:
        return []


def _burst(path: str) -> int:
    """The burst file's value; 0 where the kernel has none (before 5.14)."""
    try:
        text = _read(path)
    except BwlabError:
        if not os.path.exists(path):
            return 0
        raise
    if not text.isdigit():
        raise BwlabError(f"{path}: expected a number, got {text!r}")
    return int(text)


def read_limit(hier: Hierarchy, directory: Path | str) -> Limit:
    """The group's own quota, period and burst (the burst is not read, 0, for a group without
    a quota: it has no meaning there)."""
    d = os.fspath(directory)
    if hier.version == 2:
        if d == os.fspath(hier.cpu):
            return Limit(None, 100000)  # the root has no cpu.max
        try:
            text = _read(d + "/cpu.max")
        except BwlabError:
            # the parent's cgroup.subtree_control does not give it the cpu controller (systemd
            # enables it only down to the units with CPU settings): no limit of its own. Not
            # where cpu is on and cpu.max missing all the same (no CFS bandwidth): that says so
            if not os.path.exists(d + "/cpu.max") and "cpu" not in _controllers(d):
                return Limit(None, 100000)
            raise
        match = re.fullmatch(r"(max|\d+) (\d+)", text)
        if not match:
            raise BwlabError(f"{d}/cpu.max: expected 'QUOTA PERIOD', got {text!r}")
        if match.group(1) == "max":
            return Limit(None, int(match.group(2)))
        return Limit(int(match.group(1)), int(match.group(2)), _burst(d + "/cpu.max.burst"))
    quota_text, period_text = _read(d + "/cpu.cfs_quota_us"), _read(d + "/cpu.cfs_period_us")
    if not re.fullmatch(r"-?\d+", quota_text) or not period_text.isdigit():
        raise BwlabError(f"{d}: malformed cpu.cfs_quota_us/cpu.cfs_period_us: {quota_text!r} {period_text!r}")
    quota = int(quota_text)
    if quota < 0:
        return Limit(None, int(period_text))
    return Limit(quota, int(period_text), _burst(d + "/cpu.cfs_burst_us"))


def tighter(a: Limit, b: Limit) -> bool:
    """a limits more CPUs than b does not, i.e. a is the tighter one."""
    return a.cpus is not None and (b.cpus is None or a.cpus < b.cpus)


def _walk(hier: Hierarchy) -> Iterator[tuple[str, Limit, Limit, str]]:
    """(path, own limit, effective limit, where the effective one is set) for every group,
    parents before children."""
    effective: dict[str, tuple[Limit, str]] = {}
    base = os.fspath(hier.cpu).rstrip("/")
    for root, dirs, _ in os.walk(base):
        dirs.sort()
        rel = root[len(base) :] or "/"
        try:
            own = read_limit(hier, root)
        except BwlabError:
            if not os.path.isdir(root):  # removed while walking
                dirs.clear()
                continue
            raise
        parent = (rel.rsplit("/", 1)[0] or "/") if rel != "/" else None
        inherited = effective.get(parent) if parent is not None else None
        if inherited is not None and not tighter(own, inherited[0]):
            eff = inherited
        else:
            eff = (own, rel)
        effective[rel] = eff
        yield rel, own, eff[0], eff[1]


def discover(hier: Hierarchy | None = None, include_inherited: bool = False) -> list[LiveGroup]:
    """Every group with its own CPU limit (and, with `include_inherited`, every group under a
    limited ancestor), parents first."""
    hier = hier or hierarchy()
    found = []
    for rel, own, eff, where in _walk(hier):
        if own.quota_us is not None or (include_inherited and eff.quota_us is not None):
            found.append(LiveGroup(rel, hier, own, eff, where, identify(rel)))
    return found


def group_at(path: str, hier: Hierarchy | None = None) -> LiveGroup:
    """The group at `path` (relative to the hierarchy root, or absolute under it)."""
    hier = hier or hierarchy()
    raw = Path(path)
    if raw.is_absolute() and raw.is_relative_to(hier.cpu):
        rel = "/" + str(raw.relative_to(hier.cpu)).strip(".").strip("/")
    else:
        rel = "/" + path.strip("/")
    rel = rel.rstrip("/") or "/"
    if not (hier.cpu / rel.lstrip("/")).is_dir():
        raise BwlabError(f"no cgroup {rel} in {hier.describe()}")
    for candidate, own, eff, where in _walk_to(hier, rel):
        if candidate == rel:
            return LiveGroup(rel, hier, own, eff, where, identify(rel))
    raise BwlabError(f"no cgroup {rel} in {hier.describe()}")  # pragma: no cover - removed meanwhile


def _walk_to(hier: Hierarchy, rel: str) -> Iterator[tuple[str, Limit, Limit, str]]:
    """_walk() restricted to the ancestors of `rel` and `rel` itself (no full walk)."""
    parts = [p for p in rel.strip("/").split("/") if p]
    eff: tuple[Limit, str] | None = None
    for n in range(len(parts) + 1):
        sub = "/" + "/".join(parts[:n]) if n else "/"
        own = read_limit(hier, hier.cpu / sub.lstrip("/"))
        if eff is None or tighter(own, eff[0]):
            eff = (own, sub)
        yield sub, own, eff[0], eff[1]


def group_of_pid(pid: int, hier: Hierarchy | None = None) -> LiveGroup:
    """The cpu cgroup process `pid` is in, from /proc/PID/cgroup."""
    hier = hier or hierarchy()
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except FileNotFoundError:
        raise BwlabError(f"no process {pid}") from None
    except OSError as exc:
        raise BwlabError(f"cannot read /proc/{pid}/cgroup: {exc.strerror}") from exc
    for line in lines:
        _, controllers, path = line.split(":", 2)
        names = controllers.split(",")
        if (hier.version == 2 and controllers == "") or (hier.version == 1 and "cpu" in names):
            return group_at(path, hier)
    raise BwlabError(f"process {pid} is in no {hier.describe()} group")


def find(target: str, hier: Hierarchy | None = None) -> LiveGroup:
    """A group named on the command line: a cgroup path, a PID, a systemd unit (a service,
    scope or slice, by its full name), or a container ID (a prefix of at least 6 hex digits) or
    pod UID found in the limited groups' paths."""
    hier = hier or hierarchy()
    if target.isdigit():
        return group_of_pid(int(target), hier)
    if "/" in target:
        return group_at(target, hier)
    if re.search(r"\.(service|scope|slice)$", target):
        # the same name may be in several slices (user units, nested slices)
        units = [g for g in discover(hier, include_inherited=True) if g.identity.unit == target]
        return _only(target, units, f"no CPU-limited systemd unit {target!r}, nor one under a limited slice")
    if re.fullmatch(r"[0-9a-f][0-9a-f_-]{5,}", target):
        matches = [g for g in discover(hier, include_inherited=True)
                   if (g.identity.container_id or "").startswith(target)
                   or (g.identity.pod_uid or "").startswith(target.replace("_", "-"))]  # fmt: skip
        # a pod's own group, not its containers', when a pod UID was given
        pods = [g for g in matches if g.identity.container_id is None]
        return _only(target, pods or matches, f"no CPU-limited container or pod {target!r}")
    return group_at(target, hier)


def _only(target: str, found: list[LiveGroup], none: str) -> LiveGroup:
    """The one group `target` names, or a one-line error: several (the first three), or `none`."""
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        raise BwlabError(f"{target!r} matches {len(found)} groups: {', '.join(g.path for g in found[:3])}")
    raise BwlabError(f"{none} (bwlab top lists them)")
