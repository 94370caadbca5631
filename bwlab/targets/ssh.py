"""The ssh:// target: a scenario on another machine, on the kernel its owner booted there.

Uses the system OpenSSH client (and so the user's ssh config, keys and agent), never a
password prompt (BatchMode). One run is four connections:
1. probe: the machine (kernel, CPUs, HZ, root?, cgroup v2 or v1 and where) and a fresh
   directory D = /tmp/bwlab-XXXXXX for this run;
2. copy: a tar of the programs (our static workloads, and any tool a kind runs), plan.sh,
   run.sh and cleanup.sh into D; programs whose shared libraries the remote lacks are an error;
3. run: D/run.sh runs the portable plan (targets/plan.py) with its records on stdout, which
   are streamed back and parsed as a guest's are; its groups are bwlab-RUN-CASE-REP;
4. cleanup: D/cleanup.sh kills what the run left, removes its groups in every hierarchy,
   writes back what the plan changed (restore.sh) and removes D, and says what it could not.
Cleanup runs after success, error and SIGINT. If bwlab dies without it, the ssh client dies
with it (PR_SET_PDEATHSIG), the remote sees its stdin end, and run.sh's watchdog runs
cleanup.sh there.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import os
import re
import shlex
import signal
import subprocess
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bwlab import results
from bwlab.errors import BwlabError, last_line
from bwlab.kernel import kselftest, policies
from bwlab.progress import console, run_progress
from bwlab.scenario import RunSpec, Scenario, noise_seconds
from bwlab.targets import base, plan
from bwlab.workloads import programs

# ssh://[user@]host[:port]: host is a name, an IPv4 address or [an IPv6 address]
URL = re.compile(r"^ssh://(?:(?P<user>[A-Za-z0-9_][A-Za-z0-9._-]*)@)?(?P<host>[A-Za-z0-9_][A-Za-z0-9._-]*|\[[0-9A-Fa-f:.]+\])"
                 r"(?::(?P<port>[0-9]{1,5}))?/?$")  # fmt: skip
CONNECT_TIMEOUT_S = 10
# How long a probe, copy or cleanup may take (a run's own limit comes from its plan).
STEP_TIMEOUT_S = 120.0
GROUP_TAG = "bwlab-"

PROBE = r"""
echo "release=$(uname -r)"
echo "hostname=$(uname -n)"
echo "ncpu=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN)"
echo "euid=$(id -u)"
echo "slice_us=$(cat /proc/sys/kernel/sched_cfs_bandwidth_slice_us 2>/dev/null)"
config() { zcat /proc/config.gz 2>/dev/null || cat "/boot/config-$(uname -r)" 2>/dev/null; }
echo "hz=$(config | sed -n 's/^CONFIG_HZ=//p')"
for d in /sys/fs/cgroup /sys/fs/cgroup/unified; do
  if grep -qw cpu "$d/cgroup.controllers" 2>/dev/null; then echo "v2=$d"; break; fi
done
awk '$3 == "cgroup" { print $2, $4 }' /proc/mounts 2>/dev/null | while read -r path opts; do
  [ -f "$path/cgroup.procs" ] && echo "v1mount=$path $opts"
done
for tool in tar setsid ldd; do echo "have_$tool=$(command -v $tool)"; done
echo "dir=$(mktemp -d /tmp/bwlab-XXXXXX)"
"""


@dataclass(frozen=True)
class Remote:
    """A machine reached with `ssh [-F config] [-p port] [user@]host`."""

    host: str
    user: str | None = None
    port: int | None = None
    config: str | None = None  # an ssh_config file instead of the user's (-F)

    @classmethod
    def parse(cls, url: str, config: str | None = None) -> Remote:
        match = URL.match(url)
        if not match:
            raise BwlabError(f"--target {url!r}: expected ssh://[user@]host[:port]")
        port = int(match["port"]) if match["port"] else None
        if port is not None and not 1 <= port <= 65535:
            raise BwlabError(f"--target {url!r}: port {port} is not in 1..65535")
        if config is not None and not Path(config).is_file():
            raise BwlabError(f"--ssh-config {config}: no such file")
        return cls(match["host"].strip("[]"), match["user"], port, config)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"ssh://{self.user + '@' if self.user else ''}{host}{':' + str(self.port) if self.port else ''}"

    def argv(self, command: str) -> list[str]:
        """The ssh command line that runs `command` (a shell command line) there."""
        opts = ["-T", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}",
                "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=6", "-o", "LogLevel=ERROR"]  # fmt: skip
        if self.config:
            opts += ["-F", self.config]
        if self.port:
            opts += ["-p", str(self.port)]
        return ["ssh", *opts, "--", f"{self.user}@{self.host}" if self.user else self.host, command]

    def run(self, command: str, stdin: bytes = b"", timeout: float = STEP_TIMEOUT_S) -> str:
        """Run `command` there and return its stdout; an ssh failure or a non-zero exit is a
        one-line error (ssh's own message: refused, unreachable, host key)."""
        try:
            proc = subprocess.run(self.argv(command), input=stdin, capture_output=True, timeout=timeout,
                                  check=False, preexec_fn=_die_with_parent)  # fmt: skip
        except subprocess.TimeoutExpired:
            raise BwlabError(f"{self.url}: no answer within {timeout:.0f} s") from None
        except FileNotFoundError:
            raise BwlabError("the ssh:// target needs the OpenSSH client (apt-get install openssh-client)") from None
        if proc.returncode != 0:
            raise BwlabError(f"{self.url}: {_last_line(proc.stderr) or f'exit status {proc.returncode}'}")
        return proc.stdout.decode(errors="replace")


def _last_line(data: bytes) -> str:
    lines = [line.strip() for line in data.decode(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else ""


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the ssh child, before exec: get SIGTERM when bwlab dies, so that a killed bwlab
    closes the connection (the remote watchdog then cleans up)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass(frozen=True)
class Machine:
    """What the probe found."""

    facts: dict[str, str]
    layout: plan.Layout
    dir: str  # this run's directory there

    @property
    def ncpu(self) -> int:
        return int(self.facts["ncpu"])

    @property
    def group_prefix(self) -> str:
        """bwlab-<the run directory's random part>-: this run's groups, and only they."""
        return f"{GROUP_TAG}{os.path.basename(self.dir).split('-')[-1]}-"


def parse_probe(where: str, text: str) -> Machine:
    """The probe's key=value lines as a Machine, or a one-line error saying what is missing
    (each begins with `where`: the machine's URL, or a bundle's output)."""
    facts: dict[str, str] = {}
    mounts: list[tuple[str, set[str]]] = []
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if key == "v1mount":
            path, _, opts = value.partition(" ")
            mounts.append((path, set(opts.split(","))))
        else:
            facts[key] = value.strip()
    if not facts.get("dir", "").startswith("/tmp/bwlab-"):
        raise BwlabError(f"{where}: cannot make a directory in /tmp there (mktemp -d)")
    if not facts.get("ncpu", "").isdigit():
        raise BwlabError(f"{where}: cannot count the CPUs there (nproc)")
    if not facts.get("have_tar"):
        raise BwlabError(f"{where}: tar is not installed there (bwlab copies its programs with it)")
    if facts.get("euid") != "0":
        raise BwlabError(f"{where}: logged in as uid {facts.get('euid', '?')}; bwlab makes cgroups there and "
                         "needs root (ssh://root@host)")  # fmt: skip
    if facts.get("v2"):
        layout = plan.Layout(2, facts["v2"])
    else:
        cpu = next((p for p, o in mounts if "cpu" in o), None)
        if cpu is None:
            raise BwlabError(f"{where}: no cgroup CPU bandwidth control there (no cpu controller in cgroup v2 "
                             "nor a v1 cpu hierarchy in /proc/mounts)")  # fmt: skip
        acct = next((p for p, o in mounts if "cpuacct" in o), None)
        cpuset = next((p for p, o in mounts if "cpuset" in o), None)
        if acct is None:
            raise BwlabError(f"{where}: cgroup v1 without cpuacct there: bwlab cannot measure a group's usage")
        layout = plan.Layout(1, cpu, None if acct == cpu else acct, cpuset)
    return Machine(facts, layout, facts["dir"])


def runner(machine: Machine, enable_cpuset: bool) -> str:
    """run.sh: the plan with its records on stdout and its own output in D/plan.log. A
    watchdog reads stdin: when the connection ends before the plan does, it runs cleanup.sh
    in a session of its own (the cleanup kills this script's process group)."""
    d = machine.dir
    lines = [
        "#!/bin/sh",
        f"D={d}",
        "echo $$ > $D/pid",
        "exec 4<&0 </dev/null",
        "( while read -r _; do :; done <&4; "
        "if command -v setsid >/dev/null; then exec setsid sh $D/cleanup.sh; fi; exec sh $D/cleanup.sh "
        ") >/dev/null 2>&1 &",
        "WATCH=$!",
        "exec 4<&-",
        "exec 3>&1 >$D/plan.log 2>&1",  # the machine's facts came with the probe: no BWLAB-HELLO
    ]
    if machine.layout.version == 2:
        ctl = "+cpu" + (" +cpuset" if enable_cpuset else "")
        lines.append(f"echo {shlex.quote(ctl)} > {machine.layout.cpu}/cgroup.subtree_control || "
                     f"echo 'BWLAB-ERROR cannot enable {ctl} in {machine.layout.cpu}' >&3")  # fmt: skip
    lines += [". $D/plan.sh", "echo BWLAB-DONE >&3", "kill $WATCH 2>/dev/null", "exit 0"]
    return "\n".join(lines) + "\n"


def cleaner(machine: Machine) -> str:
    """cleanup.sh: kill the runner's process group and whatever is in this run's groups, remove
    the groups (deepest first, retrying while tasks exit), run restore.sh, remove D; print
    BWLAB-CLEAN or BWLAB-LEFT and what stayed. One at a time (a directory beside D as the
    lock, waited for up to 30 s): on an interrupt bwlab's cleanup and the watchdog's both run,
    and one restore.sh must not undo what the other is undoing."""
    d, prefix = machine.dir, machine.group_prefix
    roots = " ".join(machine.layout.roots())
    return "\n".join([
        "#!/bin/sh",
        f"D={d}",
        "n=0; until mkdir $D.cleaning 2>/dev/null; do n=$((n + 1)); [ $n -ge 120 ] && break; sleep 0.25; done",
        'PG=$(cat $D/pid 2>/dev/null)',
        # no "--": dash's kill (Debian's sh) takes it for a PID ("Illegal number: -") and killed
        # nothing; the plan then ran on until its next record hit the closed connection
        '[ -n "$PG" ] && kill -KILL -"$PG" 2>/dev/null',
        "for try in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do",
        '  LEFT=""',
        f"  for g in $(for r in {roots}; do ls -d $r/{prefix}* 2>/dev/null; done); do",
        '    for p in $(find "$g" -name cgroup.procs -exec cat {} + 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done',
        '    find "$g" -depth -type d -exec rmdir {} \\; 2>/dev/null',
        '    [ -d "$g" ] && LEFT="$LEFT $g"',
        "  done",
        '  [ -z "$LEFT" ] && break',
        "  sleep 0.25",
        "done",
        "[ -f $D/restore.sh ] && sh $D/restore.sh 2>/dev/null",
        "rm -rf $D",
        "rmdir $D.cleaning 2>/dev/null",
        'if [ -n "$LEFT" ]; then echo "BWLAB-LEFT$LEFT"; else echo BWLAB-CLEAN; fi',
    ]) + "\n"  # fmt: skip


def _bundle(files: dict[str, Path], texts: dict[str, str]) -> bytes:
    """A tar of `files` (programs, as bin/NAME, mode 755) and `texts` (scripts)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, path in files.items():
            info = tar.gettarinfo(str(path), arcname=name)
            info.mode, info.uid, info.gid, info.uname, info.gname = 0o755, 0, 0, "root", "root"
            with path.open("rb") as fh:
                tar.addfile(info, fh)
        for name, text in texts.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def programs_for(specs: list[RunSpec]) -> dict[str, Path]:
    """bin/NAME -> local path: what the plan runs (each kind's programs, a workload's files,
    the rewrite writer and the noise probe)."""
    names = {*base.LAB_PROGRAMS, *(p for s in specs for p in s.workload.plugin.programs)}
    found = {f"bin/{n}": programs.resolve(n) for n in sorted(names)}
    for spec in specs:
        for name, path in spec.workload.files.items():
            found[f"bin/{name}"] = path
        argv0 = spec.workload.argv[0]
        if not argv0.startswith("/") and f"bin/{argv0}" not in found:
            found[f"bin/{argv0}"] = programs.resolve(argv0)
    return found


def missing_libraries(remote: Remote, machine: Machine) -> None:
    """A one-line error if a copied program needs a shared library the remote lacks (checked
    with the remote's ldd when it has one; static programs need none)."""
    if not machine.facts.get("have_ldd"):
        return
    out = remote.run(f"cd {machine.dir}/bin && for p in *; do ldd \"$p\" 2>/dev/null | "
                     "sed -n \"s|^[[:space:]]*\\([^ ]*\\) => not found.*|$p \\1|p\"; done")  # fmt: skip
    missing = [line.split() for line in out.splitlines() if len(line.split()) == 2]
    if missing:
        libs = ", ".join(sorted({lib for _, lib in missing}))
        progs = ", ".join(sorted({prog for prog, _ in missing}))
        raise BwlabError(f"{remote.url}: {progs} needs {libs}, which the remote does not have "
                         "(install it there, or run a static build)")  # fmt: skip


@dataclass
class Streamed:
    """What came back from run.sh."""

    text: str
    status: str  # "ok", "failed" (ssh or the script failed), "timeout"
    error: str
    elapsed_s: float


def stream(remote: Remote, command: str, log: Path, timeout_s: float,
           on_line: Callable[[str], None]) -> Streamed:  # fmt: skip
    """Run `command` there, pass each stdout line to `on_line` and append it to `log`; kill the
    connection at `timeout_s`. stdin stays open (the remote watchdog waits for it to end)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with tempfile.TemporaryFile() as err, log.open("w") as out:
        proc = subprocess.Popen(remote.argv(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                start_new_session=True, preexec_fn=_die_with_parent)  # fmt: skip
        timed_out = threading.Event()

        def expire() -> None:
            timed_out.set()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)

        timer = threading.Timer(timeout_s, expire)
        timer.start()
        lines: list[str] = []
        try:
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = raw.decode(errors="replace").rstrip("\n")
                lines.append(line)
                out.write(line + "\n")
                out.flush()
                on_line(line)
            proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            with contextlib.suppress(OSError):
                if proc.stdin is not None:
                    proc.stdin.close()
        err.seek(0)
        message = _last_line(err.read())
    status = "timeout" if timed_out.is_set() else ("ok" if proc.returncode == 0 else "failed")
    return Streamed("\n".join(lines) + "\n", status, message, time.monotonic() - start)


@dataclass(frozen=True)
class SshTarget:
    """A machine over SSH, as root, on the kernel it runs."""

    remote: Remote
    policy: str | None = None  # the series' sched_feat switches, if the remote kernel has them
    timeout_s: float | None = None

    @property
    def label(self) -> str:
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", self.remote.host)
        return f"ssh-{name}" + (f"-{self.policy}" if self.policy else "")

    def _probe(self) -> Machine:
        """What the machine is; the directory the probe made is removed if it is unusable."""
        text = self.remote.run("sh -s", PROBE.encode())
        try:
            return parse_probe(self.remote.url, text)
        except BwlabError:
            made = re.search(r"^dir=(/tmp/bwlab-\w+)$", text, re.MULTILINE)
            if made:
                with contextlib.suppress(BwlabError):
                    self.remote.run(f"rm -rf {made.group(1)}")
            raise

    def _session(self, machine: Machine, specs: list[RunSpec], plan_text: str, extra: dict[str, Path],
                 log: Path, limit: float, on_line: Callable[[str], None]) -> Streamed:  # fmt: skip
        """Copy, run and clean up; cleanup also on error and SIGINT, and its leftovers said."""
        try:
            files = {**programs_for(specs), **{f"bin/{n}": p for n, p in extra.items()}}
            enable_cpuset = any(s.cpus is not None for s in specs)
            bundle = _bundle(files, {"plan.sh": plan_text, "run.sh": runner(machine, enable_cpuset),
                                     "cleanup.sh": cleaner(machine)})  # fmt: skip
            self.remote.run(f"tar -xf - -C {machine.dir}", bundle)
            missing_libraries(self.remote, machine)
            return stream(self.remote, f"exec sh {machine.dir}/run.sh", log, limit, on_line)
        finally:
            _cleanup(self.remote, machine)

    def run(self, sc: Scenario, out_dir: Path) -> Path:
        machine = self._probe()
        hz_text = machine.facts.get("hz", "")
        hz = int(hz_text) if hz_text.isdigit() else None  # the remote kernel's, if it publishes its config
        try:
            specs = sc.resolve(machine.ncpu, hz)
            for spec in specs:
                spec.workload.require_real()
            features = policies.feature_writes(self.policy) if self.policy else None
            text = plan.render_plan(specs, features, machine.layout, f"{machine.dir}/bin", machine.dir,
                                    machine.group_prefix, restore=True)  # fmt: skip
        except BaseException:
            _cleanup(self.remote, machine)
            raise
        limit = self.timeout_s if self.timeout_s is not None else _run_timeout(specs)
        total = sum(s.repetitions for s in specs)
        with run_progress() as progress:
            task = progress.add_task(f"{sc.name} on {self.remote.url}", total=total)

            def on_line(line: str) -> None:
                if line.startswith("BWLAB-BEGIN "):
                    _, ci, rep = [*line.split(), "0", "0"][:3]
                    if ci.isdigit() and int(ci) < len(specs):
                        progress.update(task, description=f"{sc.name} {self.label} {specs[int(ci)].case} rep "
                                                          f"{int(rep) + 1 if rep.isdigit() else rep}")  # fmt: skip
                elif line.startswith("BWLAB-END "):
                    progress.advance(task)

            run = self._session(machine, specs, text, {}, out_dir / "logs" / f"{sc.name}-{self.label}.results.log",
                                limit, on_line)  # fmt: skip
        output = plan.parse_records(run.text)
        meta = machine_meta("ssh", self.label, machine, hz, output)
        meta.update({"remote": self.remote.url, "policy": self.policy, "elapsed_s": round(run.elapsed_s, 1)})
        cases = base.case_docs(specs, output.records)
        complete = output.done and not output.errors
        status = "failed" if run.status == "ok" and not complete else run.status
        path = base.write_result(out_dir, sc, meta, status, cases)
        if run.status == "timeout":
            raise BwlabError(f"{self.remote.url}: the run took longer than {limit:.0f} s and was stopped")
        if status != "ok":
            why = (output.errors[:1] or ([run.error] if run.error else []) or ["results incomplete (no BWLAB-DONE)"])[0]
            raise BwlabError(f"{self.remote.url}: run failed: {why}")
        base.check_run(cases, meta, path)
        return path

    def run_kselftest(self, test_cpu: Path, out_dir: Path, timeout_s: float = 900.0, cgroup_mode: str | None = None,
                      only: Sequence[str] = ()) -> tuple[Path, list[kselftest.TestResult]]:  # fmt: skip
        """test_cpu there (with that sched/cgroup_mode; `only` those tests, checked by
        kselftest.only_arguments): write kselftest-LABEL.json; return it and the test results."""
        machine = self._probe()
        text = kselftest.plan(only, bin_dir=f"{machine.dir}/bin", tmp_dir=machine.dir,
                              cgroup_mode=cgroup_mode)  # fmt: skip
        log = out_dir / "logs" / f"kselftest-{self.label}.results.log"
        run = self._session(machine, [], text, {"test_cpu": test_cpu}, log, timeout_s, lambda _: None)
        meta = results.base_meta("ssh", self.label)
        meta.update({"remote": self.remote.url, "kernel_release": machine.facts.get("release"),
                     "vcpus": machine.ncpu, "cgroup": machine.layout.describe(),
                     "elapsed_s": round(run.elapsed_s, 1), "cgroup_mode": cgroup_mode, "only": list(only)})  # fmt: skip
        record = plan.parse_records(run.text).records.get((0, 0))
        path, stdout, tests = base.write_kselftest(out_dir, meta, run.status, record)
        if run.status != "ok":
            raise BwlabError(f"{self.remote.url}: test_cpu did not finish ({run.error or run.status})")
        why = kselftest.setup_failure(stdout)
        if why is not None:
            raise BwlabError(f"{self.remote.url}: {why}")
        if not tests:
            skipped = re.search(r"^1\.\.0 # SKIP (.*)$", stdout, re.MULTILINE)
            if skipped:  # test_cpu needs the cpu controller in cgroup v2
                raise BwlabError(
                    f"{self.remote.url}: test_cpu skipped every test: {skipped.group(1).strip()} "
                    f"(it needs the cpu controller in cgroup v2; there: {machine.layout.describe()})"
                )
            last = last_line(stdout)
            raise BwlabError(f"{self.remote.url}: test_cpu produced no TAP results: {last}")
        return path, tests


def machine_meta(target: str, label: str, machine: Machine, hz: int | None,
                 output: plan.PlanOutput) -> dict[str, Any]:  # fmt: skip
    """A result's meta for a plan run on a probed machine (over ssh, or from a bundle): the
    kernel it runs, as the probe found it, and the noise probes the plan ran."""
    meta = results.base_meta(target, label)
    slice_us = machine.facts.get("slice_us", "")
    meta.update({
        "remote_hostname": machine.facts.get("hostname"),
        "sched_features": policies.parse_features(output.features),
        "kernel_release": machine.facts.get("release"),
        "source_version": (machine.facts.get("release") or "").split("-")[0] or None,
        "series_hash": None,
        "config_hash": None,
        "hz": hz,
        "vcpus": machine.ncpu,
        "slice_us": int(slice_us) if slice_us.isdigit() else None,
        "cgroup": machine.layout.describe(),
    })  # fmt: skip
    if output.noise:
        meta["noise"] = base.machine_noise(output.noise)
    return meta


def _run_timeout(specs: list[RunSpec]) -> float:
    """1.5x the nominal workload time, and setup per repetition, on a machine at full speed."""
    work = sum(s.duration_s * s.repetitions for s in specs) + 2 * noise_seconds(specs)
    return 60.0 + 1.5 * work + 5.0 * sum(s.repetitions for s in specs)


def _cleanup(remote: Remote, machine: Machine) -> None:
    """cleanup.sh there (or, if the copy never happened, remove D); an error if groups stay."""
    script = f"if [ -f {machine.dir}/cleanup.sh ]; then sh {machine.dir}/cleanup.sh; else rm -rf {machine.dir}; " \
             "echo BWLAB-CLEAN; fi"  # fmt: skip
    try:
        out = remote.run(script, timeout=60)
    except BwlabError as exc:
        console.print(f"[yellow]warning[/yellow]: cleanup on {remote.url} failed: {exc}", soft_wrap=True)
        return
    left = [line for line in out.splitlines() if line.startswith("BWLAB-LEFT")]
    if left:
        console.print(f"[yellow]warning[/yellow]: {remote.url}: cgroups left:{left[0][len('BWLAB-LEFT'):]}",
                      soft_wrap=True)  # fmt: skip
