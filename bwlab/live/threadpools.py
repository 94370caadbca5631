"""What sizes the thread pools of the programs in a group, read from the running processes
(their executable, environment and command line), and what each runs at once under the
group's limit: Go's GOMAXPROCS and the JVM's active processor count.

- Go: GOMAXPROCS from the environment if set. Otherwise Go 1.25 and later take the quota of
  the cgroup the process is in (its own cgroup's, not a parent's: golang/go#81180), rounded
  up and at least 2, at most the CPUs it may run on (runtime/cgroup_linux.go,
  adjustCgroupGOMAXPROCS; containermaxprocs=0 turns that off, in GODEBUG or by default in a
  program whose go.mod says `go 1.24` or earlier: the build info's DefaultGODEBUG, which the
  environment's GODEBUG overrides); earlier versions take
  the CPUs it may run on, however small the quota; a program built with
  go.uber.org/automaxprocs sets it at start to the quota rounded down, at least 1.
- JVM: -XX:ActiveProcessorCount=N if given (command line, JAVA_TOOL_OPTIONS or
  JDK_JAVA_OPTIONS). Otherwise with container support (JDK 10 and later, on unless
  -XX:-UseContainerSupport) the quota rounded up, at most the CPUs it may run on; its GC
  threads and common fork-join pool follow that count. A JVM before JDK 25 (JDK-8349988, since
  backported to some updates) turns container support off where /proc/cgroups lacks a row
  for cpu, cpuacct, cpuset or memory, as on kernels built without their v1 parts (6.12 and
  later: CONFIG_CPUSETS_V1, CONFIG_MEMCG_V1): it then runs on every CPU it may use (seen in a
  v2 guest, JDK 17.0.15: 4 on 4 vCPUs under a 1-CPU quota).

A Go executable carries its version and module list in its .go.buildinfo section (Go 1.18 and
later: a magic, then two length-prefixed strings), which is how the version and automaxprocs
are found without running anything.
"""

from __future__ import annotations

import math
import mmap
import os
import re
from dataclasses import dataclass
from pathlib import Path

GO_MAGIC = b"\xff Go buildinf:"
GO_CONTAINER_AWARE = (1, 25)  # the first Go whose default GOMAXPROCS reads the cgroup's quota
PROC_CGROUPS = Path("/proc/cgroups")
JVM_REQUIRED_ROWS = ("cpu", "cpuacct", "cpuset", "memory")  # what a JVM before JDK-8349988 checks
JDK_READS_V2_ITSELF = 25  # the first JDK with JDK-8349988
# Go's sysmon (runtime/proc.go): a thread of its own, off the Ps, that sleeps 20 us between
# looks at first, doubling after 50 looks with nothing to retake up to 10 ms (its usual pace
# while goroutines run), and blocks until woken while every P is idle. Measured here (host
# 6.18, fanout under GOMAXPROCS=1 at 45 and 60 requests/s, /proc/PID/task/TID/schedstat over
# 9.5 s, 2026-11-29): 858 and 950 wake-ups of 18.9 and 22.4 us on average, every 10-11 ms.
# What a narrowed Go pool keeps beside it (threads.pool_episodes).
GO_SYSMON = (20.0, 10_000.0)  # us of CPU, every us


@dataclass(frozen=True)
class Pool:
    """One program's pool of threads running work at once."""

    pid: int
    exe: str
    runtime: str  # "go" or "jvm"
    version: str | None  # "go1.19.8", "17.0.15"; None if not found
    size: int  # GOMAXPROCS, or the JVM's active processors
    why: str  # what set it

    def advice(self, n: int) -> str:
        """How to make it `n`."""
        if self.runtime == "go":
            return f"GOMAXPROCS={n} in its environment"
        return f"-XX:ActiveProcessorCount={n} (or in JAVA_TOOL_OPTIONS)"

    def describe(self) -> str:
        name = os.path.basename(self.exe)
        return f"{name} (pid {self.pid}, {self.version or self.runtime}) runs {self.size} at once: {self.why}"


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """A uvarint at `at`: (value, offset after it)."""
    value = shift = 0
    while at < len(data):
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            return value, at
        shift += 7
    raise ValueError("truncated varint")


def go_buildinfo(path: str) -> tuple[str, str] | None:
    """(Go version, module info) of a Go executable built by Go 1.18 or later; ("", "") for an
    older Go executable; None if `path` is not a Go executable or cannot be read."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            at = m.find(GO_MAGIC)
            if at < 0:
                return None
            head = m[at : at + 32 + 2 * 65536]
    except (OSError, ValueError):  # unreadable, or empty (mmap of nothing)
        return None
    if len(head) < 32 or not head[15] & 2:  # flags: strings inline (Go 1.18 and later)
        return "", ""
    try:
        n, at = _varint(head, 32)
        version = head[at : at + n].decode(errors="replace")
        n, at = _varint(head, at + n)
        modinfo = head[at : at + n].decode(errors="replace")
    except ValueError:
        return "", ""
    return version, modinfo


def _go_version(version: str) -> tuple[int, int] | None:
    found = re.match(r"go(\d+)\.(\d+)", version)
    return (int(found.group(1)), int(found.group(2))) if found else None


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.decode(errors="replace").partition("=") for item in raw.split(b"\0") if item)
    return {k: v for k, _, v in pairs}


def _cmdline(pid: int) -> list[str]:
    try:
        return [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return []


def _allowed(pid: int) -> int:
    try:
        return len(os.sched_getaffinity(pid))
    except OSError:
        return os.cpu_count() or 1


def _godebug(modinfo: str, env: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(the GODEBUG settings in effect, those of them from the build's DefaultGODEBUG): the
    main module's go line sets the defaults (go.mod `go 1.24` keeps containermaxprocs=0), the
    environment's GODEBUG overrides them."""
    default: dict[str, str] = {}
    for line in modinfo.splitlines():
        if line.startswith("build\tDefaultGODEBUG="):
            default = dict(kv.partition("=")[::2] for kv in line.split("=", 1)[1].split(",") if kv)
    given = dict(kv.partition("=")[::2] for kv in env.get("GODEBUG", "").split(",") if kv)
    return {**default, **given}, {k: v for k, v in default.items() if k not in given}


def go_pool(pid: int, exe: str, info: tuple[str, str], quota_cpus: float | None) -> Pool:
    """A Go program's GOMAXPROCS; `quota_cpus`: the limit of the cgroup it is in (its own)."""
    version, modinfo = info
    env = _environ(pid)
    allowed = _allowed(pid)
    shown = version or "Go before 1.18"
    if (value := env.get("GOMAXPROCS", "")).isdigit() and int(value) > 0:
        return Pool(pid, exe, "go", version or None, int(value), f"GOMAXPROCS={value} in its environment")
    if "\tgo.uber.org/automaxprocs\t" in modinfo and quota_cpus is not None:
        n = min(allowed, max(1, math.floor(quota_cpus)))
        return Pool(pid, exe, "go", version, n, f"automaxprocs: the quota's {quota_cpus:.2f} CPUs rounded down")
    parsed = _go_version(version)
    aware = parsed is not None and parsed >= GO_CONTAINER_AWARE
    godebug, by_default = _godebug(modinfo, env)
    off = godebug.get("containermaxprocs") == "0"
    if aware and not off and quota_cpus is not None:
        n = min(allowed, max(2, math.ceil(quota_cpus)))
        why = f"{shown} sets GOMAXPROCS to its cgroup's {quota_cpus:.2f} CPUs rounded up, at least 2"
        return Pool(pid, exe, "go", version, n, why)
    if aware:
        why = ("no quota on its own cgroup (Go reads no parent's)" if quota_cpus is None
               else "its go.mod's go line before 1.25 (DefaultGODEBUG containermaxprocs=0; GODEBUG="
                    "containermaxprocs=1 or GOMAXPROCS sets it)" if "containermaxprocs" in by_default
               else "containermaxprocs=0 in GODEBUG")  # fmt: skip
        return Pool(pid, exe, "go", version, allowed, f"the {allowed} CPUs it may run on: {why}")
    return Pool(pid, exe, "go", version or None, allowed,
                f"{shown} sets GOMAXPROCS to the {allowed} CPUs it may run on, whatever the quota")  # fmt: skip


def _java_flag(args: list[str], name: str) -> str | None:
    """The last -XX:NAME=VALUE (or -XX:+NAME / -XX:-NAME as "+" / "-") among `args`."""
    found = None
    for arg in args:
        if arg.startswith(f"-XX:{name}="):
            found = arg.split("=", 1)[1]
        elif arg in (f"-XX:+{name}", f"-XX:-{name}"):
            found = arg[4]
    return found


def jvm_pool(pid: int, exe: str, quota_cpus: float | None) -> Pool:
    """A JVM's active processor count."""
    env = _environ(pid)
    # the options a JVM reads from its environment come before its command line's
    args = " ".join([env.get("JAVA_TOOL_OPTIONS", ""), env.get("JDK_JAVA_OPTIONS", "")]).split() + _cmdline(pid)
    allowed = _allowed(pid)
    version = None
    try:  # JAVA_HOME/release as the process sees it (a container's JVM is in its own filesystem)
        release = Path(f"/proc/{pid}/root{Path(exe).parent.parent}/release").read_text()
        if found := re.search(r'^JAVA_VERSION="([^"]+)"', release, re.M):
            version = found.group(1)
    except OSError:
        pass
    if (count := _java_flag(args, "ActiveProcessorCount")) is not None and count.isdigit():
        return Pool(pid, exe, "jvm", version, int(count), f"-XX:ActiveProcessorCount={count}")
    major = _jdk_major(version)
    old_jdk = major is None or major < JDK_READS_V2_ITSELF
    if quota_cpus is not None and old_jdk and (missing := _proc_cgroups_missing()):  # read for those only
        return Pool(pid, exe, "jvm", version, allowed,
                    f"the {allowed} CPUs it may run on: container support off, /proc/cgroups has no "
                    f"{'/'.join(missing)} row (a kernel without their v1 parts), which a JDK before 25 "
                    "without the JDK-8349988 backport takes for disabled controllers")  # fmt: skip
    if quota_cpus is not None and _java_flag(args, "UseContainerSupport") != "-":
        n = min(allowed, max(1, math.ceil(quota_cpus)))
        return Pool(pid, exe, "jvm", version, n, f"container support: the quota's {quota_cpus:.2f} CPUs rounded up")
    return Pool(pid, exe, "jvm", version, allowed, f"the {allowed} CPUs it may run on")


def _jdk_major(version: str | None) -> int | None:
    """17 of "17.0.15", 8 of "1.8.0_482"; None if unknown."""
    parts = re.findall(r"\d+", version or "")
    if not parts:
        return None
    return int(parts[1]) if parts[0] == "1" and len(parts) > 1 else int(parts[0])


def _proc_cgroups_missing() -> list[str]:
    """Of the rows a JVM before JDK-8349988 needs in /proc/cgroups, those missing."""
    try:
        rows = {line.split()[0] for line in PROC_CGROUPS.read_text().splitlines() if line and line[0] != "#"}
    except OSError:
        return []
    return [name for name in JVM_REQUIRED_ROWS if name not in rows]


def of_process(pid: int, quota_cpus: float | None,
               seen: dict[str, tuple[str, str] | None] | None = None) -> Pool | None:  # fmt: skip
    """The pool of process `pid` if it is a Go program or a JVM; None otherwise, or if it
    cannot be read (gone, or another user's without root). `seen`: executables already read
    (a server's many processes share one)."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe").removesuffix(" (deleted)")
    except OSError:
        return None
    if os.path.basename(exe) == "java":
        return jvm_pool(pid, exe, quota_cpus)
    seen = {} if seen is None else seen
    if exe not in seen:
        seen[exe] = go_buildinfo(f"/proc/{pid}/exe")  # the running file, even if replaced since
    info = seen[exe]
    return go_pool(pid, exe, info, quota_cpus) if info is not None else None


def in_group(processes: list[tuple[int, float | None]], most: int = 32) -> list[Pool]:
    """The pools of these (pid, quota of the cgroup it is in) processes, the first `most`."""
    seen: dict[str, tuple[str, str] | None] = {}
    pools = [of_process(pid, quota, seen) for pid, quota in processes[:most]]
    return [p for p in pools if p is not None]
