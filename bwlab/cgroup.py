"""Host cgroups: v2 when a unified hierarchy offers the cpu controller, v1 otherwise.

Every group bwlab creates is registered until removed, so an error, SIGINT or SIGTERM
anywhere in a run still kills the group's processes and removes its directories.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bwlab.errors import BwlabError
from bwlab.paths import sysctl_path

CGROUP_ROOT = Path("/sys/fs/cgroup")
GROUP_PREFIX = "bwlab-"


def _write(path: Path, value: str) -> None:
    try:
        with path.open("w") as fh:
            fh.write(value)
    except OSError as exc:
        raise BwlabError(f"cannot write {value!r} to {path}: {exc.strerror}") from exc


@dataclass
class Group:
    """A created cgroup: one directory per hierarchy it lives in (one on v2)."""

    name: str
    dirs: list[Path]
    stat_file: Path
    usage_file: Path | None  # v1 cpuacct.usage (ns); None on v2 (usage_usec in cpu.stat)
    bandwidth_file: Path  # file a rewrite writes: cpu.max (v2) or cpu.cfs_quota_us (v1)
    bandwidth_value: str
    leaves: list[Path] = field(default_factory=list)  # the deepest group per hierarchy, if nested

    @property
    def procs_files(self) -> list[Path]:
        return [d / "cgroup.procs" for d in (self.leaves or self.dirs)]

    def read_stat(self) -> str:
        """cpu.stat as text, with v1's cpuacct usage appended as 'cpuacct_usage_ns N'. A group
        removed from under its run (by someone else: bwlab removes its own at the end) is a
        BwlabError, not a traceback."""
        try:
            text = self.stat_file.read_text()
            if self.usage_file is not None:
                text += f"cpuacct_usage_ns {self.usage_file.read_text().strip()}\n"
        except FileNotFoundError as exc:
            raise BwlabError(f"cgroup {Path(exc.filename).parent} was removed while the run used it") from None
        return text

    def subtree(self) -> list[Path]:
        """Every directory of the group, nested ones (a workload may make them) first."""
        found: list[Path] = []
        for top in self.dirs:
            if top.exists():
                nested = [Path(root) for root, _, _ in os.walk(top, topdown=False)]
                found.extend(nested)  # bottom-up: children before their parent
        return found

    def pids(self) -> set[int]:
        pids: set[int] = set()
        for d in self.subtree():
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in (d / "cgroup.procs").read_text().split())
        return pids

    def remove(self, timeout: float = 5.0) -> None:
        """Kill everything inside, then remove the directories, nested ones first."""
        deadline = time.monotonic() + timeout
        while True:
            pids = self.pids()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            leftover = []
            for d in self.subtree():
                try:
                    d.rmdir()
                except FileNotFoundError:
                    pass
                except OSError:
                    leftover.append(d)
            leftover = [d for d in self.dirs if d.exists()] if leftover else []
            if not leftover:
                _LIVE.pop(self.name, None)
                return
            if time.monotonic() > deadline:
                raise BwlabError(f"cannot remove cgroup {leftover[0]}: still busy after {timeout} s")
            self.dirs = leftover
            time.sleep(0.05)


_LIVE: dict[str, Group] = {}


def remove_all() -> None:
    """Remove every group still registered (atexit and signal paths)."""
    for group in list(_LIVE.values()):
        with contextlib.suppress(BwlabError):
            group.remove()


atexit.register(remove_all)


def levels(depth: int) -> list[Path]:
    """The nested groups of a group of this depth, relative to it, top first: ., l2, l2/l3, ..."""
    return [Path(*[f"l{k}" for k in range(2, n + 1)]) for n in range(1, depth + 1)]


class Hierarchy:
    """Where and how groups are made on this machine."""

    def describe(self) -> str:
        raise NotImplementedError

    def create(self, name: str, period_us: int, quota_us: int | None, burst_us: int,
               cpus: str | None, depth: int = 1) -> Group:  # fmt: skip
        """A group with these limits; depth > 1 nests groups l2, l3, ... inside it, each with
        the same limits, and the group's tasks go to the deepest."""
        raise NotImplementedError

    @contextlib.contextmanager
    def group(self, name: str, period_us: int, quota_us: int | None, burst_us: int,
              cpus: str | None, depth: int = 1) -> Iterator[Group]:  # fmt: skip
        grp = self.create(name, period_us, quota_us, burst_us, cpus, depth)
        try:
            yield grp
        finally:
            grp.remove()

    @staticmethod
    def _mkdir(path: Path) -> None:
        try:
            path.mkdir()
        except OSError as exc:
            raise BwlabError(f"cannot create cgroup {path}: {exc.strerror}") from exc


class CgroupV2(Hierarchy):
    def __init__(self, root: Path) -> None:
        self.root = root

    def describe(self) -> str:
        return f"cgroup v2 at {self.root}"

    def _enable(self, controller: str) -> None:
        ctl = self.root / "cgroup.subtree_control"
        if controller not in ctl.read_text().split():
            _write(ctl, f"+{controller}")

    def create(self, name: str, period_us: int, quota_us: int | None, burst_us: int,
               cpus: str | None, depth: int = 1) -> Group:  # fmt: skip
        self._enable("cpu")
        if cpus is not None:
            self._enable("cpuset")
        path = self.root / name
        value = f"{quota_us if quota_us is not None else 'max'} {period_us}"
        grp = Group(name=name, dirs=[path], stat_file=path / "cpu.stat", usage_file=None,
                    bandwidth_file=path / "cpu.max", bandwidth_value=value)  # fmt: skip
        _LIVE[name] = grp
        rels = levels(depth)
        for i, rel in enumerate(rels):
            if i:  # the parent hands the controllers down
                _write(path / rels[i - 1] / "cgroup.subtree_control", "+cpu" + (" +cpuset" if cpus is not None else ""))
            level = path / rel
            self._mkdir(level)
            _write(level / "cpu.max", value)
            if burst_us:
                _write(level / "cpu.max.burst", str(burst_us))
            if cpus is not None:
                _write(level / "cpuset.cpus", cpus)
        grp.leaves = [path / rels[-1]]
        return grp


class CgroupV1(Hierarchy):
    def __init__(self, cpu: Path, cpuacct: Path | None, cpuset: Path | None) -> None:
        self.cpu, self.cpuacct, self.cpuset = cpu, cpuacct, cpuset

    def describe(self) -> str:
        return f"cgroup v1 at {self.cpu}"

    def create(self, name: str, period_us: int, quota_us: int | None, burst_us: int,
               cpus: str | None, depth: int = 1) -> Group:  # fmt: skip
        cpu_dir = self.cpu / name
        dirs = [cpu_dir]
        usage: Path | None = None
        if (self.cpu / "cpuacct.usage").exists():  # cpu,cpuacct co-mounted
            usage = cpu_dir / "cpuacct.usage"
        elif self.cpuacct is not None:
            dirs.append(self.cpuacct / name)
            usage = self.cpuacct / name / "cpuacct.usage"
        if cpus is not None:
            if self.cpuset is None:
                raise BwlabError("a cpuset was asked for but no v1 cpuset hierarchy is mounted")
            dirs.append(self.cpuset / name)
        quota = str(quota_us) if quota_us is not None else "-1"
        grp = Group(name=name, dirs=[], stat_file=cpu_dir / "cpu.stat", usage_file=usage,
                    bandwidth_file=cpu_dir / "cpu.cfs_quota_us", bandwidth_value=quota)  # fmt: skip
        _LIVE[name] = grp
        for d in dirs:
            self._mkdir(d)
            grp.dirs.insert(0, d)  # remove in reverse order of creation
        rels = levels(depth)
        for i, rel in enumerate(rels):
            if i:
                for d in dirs:
                    self._mkdir(d / rel)
            level = cpu_dir / rel
            _write(level / "cpu.cfs_period_us", str(period_us))
            _write(level / "cpu.cfs_quota_us", quota)
            if burst_us:
                _write(level / "cpu.cfs_burst_us", str(burst_us))
            if cpus is not None and self.cpuset is not None:
                cs = self.cpuset / name / rel
                _write(cs / "cpuset.cpus", cpus)
                _write(cs / "cpuset.mems", (self.cpuset / "cpuset.mems").read_text().strip())
        grp.leaves = [d / rels[-1] for d in dirs]
        return grp


def detect(root: Path = CGROUP_ROOT) -> Hierarchy:
    """v2 if a unified hierarchy has the cpu controller, else v1's cpu hierarchy."""
    for cand in (root, root / "unified"):
        ctrl = cand / "cgroup.controllers"
        if ctrl.is_file() and "cpu" in ctrl.read_text().split():
            return CgroupV2(cand)
    for name in ("cpu", "cpu,cpuacct"):
        cpu = root / name
        if (cpu / "cpu.cfs_quota_us").is_file():
            cpuacct = root / "cpuacct"
            cpuset = root / "cpuset"
            return CgroupV1(cpu, cpuacct if (cpuacct / "cpuacct.usage").is_file() else None,
                            cpuset if (cpuset / "cpuset.cpus").is_file() else None)  # fmt: skip
    raise BwlabError(f"no cgroup cpu controller with bandwidth control under {root}")


def unique_name(label: str) -> str:
    """bwlab-<pid>-<ns>-<label>: unique per process and call, safe as a directory name."""
    safe = re.sub(r"[^A-Za-z0-9_.=-]", "_", label)[:60]
    return f"{GROUP_PREFIX}{os.getpid()}-{time.monotonic_ns() % 10**9}-{safe}"


@contextlib.contextmanager
def sysctls(values: dict[str, str]) -> Iterator[None]:
    """Set sysctls for the block and restore the previous values after."""
    saved: list[tuple[Path, str]] = []
    try:
        for name, value in values.items():
            path = sysctl_path(name)
            if not path.is_file():
                raise BwlabError(f"sysctl {name} does not exist on this kernel ({path})")
            old = path.read_text().strip()
            _write(path, value)
            saved.append((path, old))
        yield
    finally:
        for path, old in reversed(saved):
            with contextlib.suppress(BwlabError):
                _write(path, old)
