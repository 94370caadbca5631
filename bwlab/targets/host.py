"""The host target: a scenario's cases on the running kernel (cgroup v1 or v2), each
repetition in a fresh cgroup, its processes and groups removed on error and on SIGINT."""

from __future__ import annotations

import contextlib
import os
import platform
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bwlab import cgroup, results, schedtrace, threads
from bwlab.errors import BwlabError
from bwlab.machine import kernel_hz
from bwlab.paths import sysctl_path
from bwlab.progress import console, run_progress
from bwlab.scenario import RunSpec, Scenario, noise_seconds
from bwlab.targets import base
from bwlab.targets.base import RawRep
from bwlab.workloads import noise, programs
from bwlab.workloads.base import STOP_GRACE_S

# How far past its nominal duration a workload may run before it counts as hung.
GRACE_FACTOR = 3.0
GRACE_SECONDS = 60.0


class Hung(BwlabError):
    """A repetition's workload outlived its time limit and was killed: the result keeps the
    cases before it and goes on with the next case."""


def joiner(procs_files: list[Path], trace: schedtrace.Ftrace | None = None) -> Callable[[], None]:
    """A workload's preexec_fn: the child joins the group's tasks, then is named in the trace."""

    def join() -> None:  # runs in the child between fork and exec
        pid = str(os.getpid())
        for procs in procs_files:
            with procs.open("w") as fh:
                fh.write(pid)
        if trace is not None:  # the workload's first process, named in the trace before it starts
            with contextlib.suppress(OSError):  # else no marker: the trace's parse says so, in one line
                trace.mark_root(int(pid))

    return join


def kill_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    """`sig` to the process group a workload started (start_new_session), then reaped."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def run_rep(hier: cgroup.Hierarchy, spec: RunSpec, rep: int) -> RawRep:
    """One repetition: fresh group, side actions, workload inside, cpu.stat before/after."""
    argv0 = spec.workload.argv[0]
    program = str(spec.workload.files.get(argv0) or programs.resolve(argv0))
    writer = programs.resolve("cgwrite") if any(s.kind == "rewrite" for s in spec.sides) else None
    sampler = programs.resolve("cgsample") if any(s.kind == "sample" for s in spec.sides) else None
    name = cgroup.unique_name(f"{spec.scenario}-{spec.case}-r{rep}")
    sides: list[subprocess.Popen[bytes]] = []
    traced = next((i for i, s in enumerate(spec.sides) if s.kind == "trace"), None)
    with (
        cgroup.sysctls(spec.sysctls),
        hier.group(name, spec.period_us, spec.quota_us, spec.burst_us, spec.cpus, spec.depth) as grp,
        tempfile.TemporaryDirectory(prefix="bwlab-") as tmp_name,
        schedtrace.Ftrace(name) if traced is not None else contextlib.nullcontext() as trace,
    ):
        tmp = Path(tmp_name)
        argv = [program, *spec.workload.args(str(grp.leaves[0]), rep)]
        try:
            for i, side in enumerate(spec.sides):
                if side.kind == "trace":
                    continue  # on already, for the workload's lifetime
                if side.kind == "rewrite" and writer is not None:
                    argv_side = [str(writer), str(grp.bandwidth_file), grp.bandwidth_value, str(side.interval_us)]
                elif side.kind == "sample" and sampler is not None:
                    leaf = grp.leaves[0]  # its tasks' group, in the cpu hierarchy
                    listing = leaf / ("tasks" if (leaf / "tasks").is_file() else "cgroup.threads")
                    argv_side = [str(sampler), str(grp.stat_file), str(grp.usage_file or "-"), str(side.interval_us),
                                 str(listing), str(round(threads.STEP_S * 1e6))]  # fmt: skip
                else:
                    raise BwlabError(f"side action {side.kind!r} is not supported on the host")
                with (tmp / f"side{i}").open("wb") as out:
                    sides.append(subprocess.Popen(argv_side, stdout=out, stderr=subprocess.STDOUT,
                                                  start_new_session=True))  # fmt: skip
            before = grp.read_stat()
            start = time.monotonic()
            with (tmp / "stdout").open("wb") as out, (tmp / "stderr").open("wb") as err:
                proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                        preexec_fn=joiner(grp.procs_files, trace),
                                        start_new_session=True)  # fmt: skip
            stop_s = spec.workload.plugin.stop_after_s(spec.workload.resolved, spec.duration_s)
            limit = spec.duration_s * GRACE_FACTOR + GRACE_SECONDS
            stopped = False
            try:
                if stop_s is not None:
                    stopped = _stop_at(proc, grp, stop_s)
                rc = proc.wait(timeout=limit - (time.monotonic() - start))
            except subprocess.TimeoutExpired:
                raise Hung(_hung_message(Path(argv[0]).name, spec, limit, stop_s is not None)) from None
            finally:
                kill_group(proc)
            wall = time.monotonic() - start
            rc = 128 - rc if rc < 0 else rc  # killed by a signal: as a shell says it (the plan targets' RC)
            after = grp.read_stat()
            if trace is not None:
                (tmp / f"side{traced}").write_text(trace.text())
        finally:
            for side_proc in sides:
                kill_group(side_proc, signal.SIGTERM)
        return RawRep(
            stat_before=before,
            stat_after=after,
            wall_s=wall,
            rc=rc,
            stdout=(tmp / "stdout").read_text(errors="replace"),
            stderr="\n".join((tmp / "stderr").read_text(errors="replace").splitlines()[-20:]),
            sides=[(tmp / f"side{i}").read_text(errors="replace") for i in range(len(spec.sides))],
            stopped=stopped,
        )


def _stop_at(proc: subprocess.Popen[bytes], grp: cgroup.Group, stop_s: float) -> bool:
    """Wait for the workload until `stop_s` after its start; if it still runs, SIGTERM every
    task of its group (a program's children too, whatever session they made), and SIGKILL
    what is left STOP_GRACE_S later. True if it had to be stopped."""
    try:
        proc.wait(timeout=stop_s)
        return False
    except subprocess.TimeoutExpired:
        pass
    for sig in (signal.SIGTERM, signal.SIGKILL):
        # the group's tasks; the workload's own pid only while it is not reaped (never a reused one)
        for pid in grp.pids() | ({proc.pid} if proc.poll() is None else set()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + STOP_GRACE_S  # every task gets its grace, not the first alone
        while (proc.poll() is None or grp.pids()) and time.monotonic() < deadline:
            time.sleep(0.05)
        if proc.poll() is not None and not grp.pids():
            break
    return True


def _hung_message(program: str, spec: RunSpec, limit: float, stoppable: bool) -> str:
    """What a hung repetition's error says: what happened, and how to make the program end."""
    head = (f"{program} hung in case {spec.case}: still running {limit:.0f} s after it started "
            f"(duration_s = {spec.duration_s:g}), killed.")  # fmt: skip
    if stoppable:  # it outlived its own stop: a task that ignores SIGKILL (in the kernel, D state)
        return f"{head} Its group's tasks survived SIGKILL at the duration: a task stuck in the kernel?"
    if spec.workload.kind == "command":
        return (
            f"{head} It has ends_by_itself = true: remove that line to stop it at the duration, or end it "
            'yourself: argv = ["timeout", "@DURATION@", ...] (with check_exit = false: timeout exits 124)'
        )
    return f"{head} A built-in workload ends by itself: is the machine overloaded?"


def run_noise(seconds: int, ncpu: int) -> str:
    """The noise probe on every CPU, outside any group, for `seconds`: its output."""
    program = str(programs.resolve("noise"))
    try:
        proc = subprocess.run([program, *noise.probe_argv(seconds, str(ncpu))[1:]], capture_output=True,
                              text=True, timeout=seconds + 60)  # fmt: skip
    except subprocess.TimeoutExpired:
        return "noise: timed out\n"
    return proc.stdout + proc.stderr


class HostTarget:
    """The running kernel, as root."""

    label = "host"

    def run(self, sc: Scenario, out_dir: Path) -> Path:
        if os.geteuid() != 0:
            raise BwlabError("the host target needs root (it creates cgroups)")
        hier = cgroup.detect()
        ncpu = len(os.sched_getaffinity(0))
        specs = sc.resolve(ncpu, kernel_hz())
        for spec in specs:
            spec.workload.require_real()
        raws: dict[tuple[int, int], RawRep | str] = {}
        noise_s = noise_seconds(specs)
        outputs: list[str] = []

        def probe() -> None:
            if noise_s:
                with console.status(f"noise probe, {noise_s} s"):
                    outputs.append(run_noise(noise_s, ncpu))

        probe()
        with run_progress() as progress:
            task = progress.add_task(f"{sc.name} on host", total=sum(s.repetitions for s in specs))
            for ci, spec in enumerate(specs):
                for rep in range(spec.repetitions):
                    progress.update(task, description=f"{sc.name} host {spec.case} rep {rep + 1}")
                    try:
                        raws[(ci, rep)] = run_rep(hier, spec, rep)
                    except Hung as exc:  # the case's other repetitions would hang too: the next case
                        raws[(ci, rep)] = str(exc)
                        for later in range(rep + 1, spec.repetitions):
                            raws[(ci, later)] = f"not run: repetition {rep + 1} of this case hung"
                        progress.advance(task, spec.repetitions - rep)
                        break
                    progress.advance(task)
        probe()
        meta = results.base_meta("host", self.label)
        slice_file = sysctl_path("kernel.sched_cfs_bandwidth_slice_us")
        meta.update({
            "kernel_release": platform.release(),
            "source_version": platform.release().split("-")[0],
            "series_hash": None,
            "config_hash": None,
            "hz": kernel_hz(),
            "vcpus": ncpu,
            "slice_us": int(slice_file.read_text()) if slice_file.is_file() else None,
            "cgroup": hier.describe(),
        })  # fmt: skip
        if outputs:
            meta["noise"] = base.machine_noise(outputs)
        cases = base.case_docs(specs, raws)
        path = base.write_result(out_dir, sc, meta, "ok", cases)
        base.check_run(cases, meta, path)
        return path
