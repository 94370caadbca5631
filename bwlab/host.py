"""Run a scenario's cases on the running kernel, each repetition in a fresh cgroup."""

from __future__ import annotations

import contextlib
import gzip
import os
import platform
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bwlab import cgroup, tools
from bwlab.errors import BwlabError
from bwlab.metrics import RawRep
from bwlab.scenario import RunSpec

# How far past its nominal duration a workload may run before it counts as hung.
GRACE_FACTOR = 3.0
GRACE_SECONDS = 60.0


def _joiner(procs_files: list[Path]) -> Callable[[], None]:
    def join() -> None:  # runs in the child between fork and exec
        pid = str(os.getpid())
        for procs in procs_files:
            with procs.open("w") as fh:
                fh.write(pid)

    return join


def _kill_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def run_rep(hier: cgroup.Hierarchy, spec: RunSpec, rep: int) -> RawRep:
    """One repetition: fresh group, side actions, workload inside, cpu.stat before/after."""
    program = str(tools.resolve(spec.workload.argv[0]))
    writer = tools.resolve("cgwrite") if spec.sides else None
    name = cgroup.unique_name(f"{spec.scenario}-{spec.case}-r{rep}")
    sides: list[subprocess.Popen[bytes]] = []
    with (
        cgroup.sysctls(spec.sysctls),
        hier.group(name, spec.period_us, spec.quota_us, spec.burst_us, spec.cpus, spec.depth) as grp,
        tempfile.TemporaryDirectory(prefix="bwlab-") as tmp_name,
    ):
        tmp = Path(tmp_name)
        argv = [program, *spec.workload.args(str(grp.leaves[0]), rep)]
        try:
            for i, side in enumerate(spec.sides):
                if side.kind != "rewrite" or writer is None:
                    raise BwlabError(f"side action {side.kind!r} is not supported on the host")
                with (tmp / f"side{i}").open("wb") as out:
                    sides.append(subprocess.Popen(
                        [str(writer), str(grp.bandwidth_file), grp.bandwidth_value,
                         str(side.interval_us)],
                        stdout=out, stderr=subprocess.STDOUT, start_new_session=True))  # fmt: skip
            before = grp.read_stat()
            start = time.monotonic()
            with (tmp / "stdout").open("wb") as out, (tmp / "stderr").open("wb") as err:
                proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                        preexec_fn=_joiner(grp.procs_files),
                                        start_new_session=True)  # fmt: skip
            try:
                rc = proc.wait(timeout=spec.duration_s * GRACE_FACTOR + GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                raise BwlabError(f"{argv[0]} hung in case {spec.case} (killed)") from None
            finally:
                _kill_group(proc)
            wall = time.monotonic() - start
            after = grp.read_stat()
        finally:
            for side_proc in sides:
                _kill_group(side_proc, signal.SIGTERM)
        return RawRep(
            stat_before=before,
            stat_after=after,
            wall_s=wall,
            rc=rc,
            stdout=(tmp / "stdout").read_text(errors="replace"),
            stderr="\n".join((tmp / "stderr").read_text(errors="replace").splitlines()[-20:]),
            sides=[(tmp / f"side{i}").read_text(errors="replace") for i in range(len(sides))],
        )


def kernel_hz() -> int | None:
    """CONFIG_HZ of the running kernel, from its config if one is published."""
    candidates = [Path("/proc/config.gz"), Path(f"/boot/config-{platform.release()}")]
    for path in candidates:
        try:
            text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
        except OSError:
            continue
        match = re.search(r"^CONFIG_HZ=(\d+)", text, re.MULTILINE)
        if match:
            return int(match.group(1))
    return None


def run_noise(seconds: int, ncpu: int) -> str:
    """The noise probe on every CPU, outside any group, for `seconds`: its output."""
    program = str(tools.resolve("noise"))
    try:
        proc = subprocess.run([program, "-t", str(ncpu), "-d", str(seconds)], capture_output=True, text=True,
                              timeout=seconds + 60)  # fmt: skip
    except subprocess.TimeoutExpired:
        return "noise: timed out\n"
    return proc.stdout + proc.stderr
