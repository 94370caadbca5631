"""Host-userland guests: a lab kernel booted with this machine's own root filesystem.

QEMU shares the host's / read-only over virtio 9p; the guest's PID 1 (hostroot_init.sh, run
from that share) puts a tmpfs overlay over it, mounts cgroup2 with every controller, and runs
one command with the host's programs unchanged: Python and bwlab's .venv, sysbench, bpftrace,
Go binaries, a JRE, Prometheus. A second, writable 9p share (a temporary directory here) carries
the command, its working directory and environment in, and its stdout, stderr (files the guest
writes through pipes, copied here as they grow) and exit status out.

The initramfs guests (targets/qemu.py) stay the measuring instrument: this one is for programs
that need a full userland (the live tools on real cgroup v2, any dynamic program).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import termios
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from bwlab import paths, results, scenario
from bwlab.errors import BwlabError
from bwlab.kernel import layout, policies
from bwlab.kernel.build import KernelImage
from bwlab.progress import console
from bwlab.scenario import Scenario
from bwlab.targets import qemu

INIT = Path(__file__).with_name("hostroot_init.sh")
SHARE_TAG = "bwlab-exec"
# --init systemd: this machine's systemd as PID 1, the command its service (hostroot_init.sh)
SYSTEMD = "/lib/systemd/systemd"
# What the guest's command inherits from here (the rest of this environment stays here)
PASSED_ENV = ("PATH", "TERM", "LANG", "LC_ALL", "TZ", "SHELL", "CI", "BWLAB_CACHE", "PYTHONPATH", "GOPATH", "JAVA_HOME")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The guest mounts its own filesystems here: a working directory under them would not exist
GUEST_MOUNTS = ("/run", "/proc", "/sys", "/dev")
PR_SET_PDEATHSIG = 1


class Timeout(BwlabError):
    """The command outlived its --timeout; QEMU was stopped."""


@dataclass
class ExecResult:
    status: int  # the command's exit status in the guest
    started_s: float  # guest uptime when the command started (boot to command, guest side)
    elapsed_s: float  # QEMU's whole run here, boot to power-off
    timer_thread: str  # QEMU's main loop: SCHED_FIFO or why not


def kernel_args(fifo: bool, interactive: bool) -> str:
    """The guest kernel's command line: root is the host's / over 9p, PID 1 is INIT."""
    return " ".join([
        "console=ttyS0", "panic=-1", "loglevel=4" if not interactive else "quiet",
        "root=/dev/root", "rootfstype=9p", "ro", f"init={INIT}",
        "rootflags=trans=virtio,version=9p2000.L,msize=262144,cache=loose,access=any",
        *(["tsc=reliable"] if fifo else []),
    ])  # fmt: skip


def nic_args(forwards: Sequence[tuple[int, int]]) -> list[str]:
    """No network card, or one on QEMU's user network (the guest 10.0.2.15, the gateway
    10.0.2.2; hostroot_init.sh sets it up) with each (port here, port there) forwarded from
    this machine's loopback only."""
    if not forwards:
        return ["-nic", "none"]
    rules = "".join(f",hostfwd=tcp:127.0.0.1:{here}-:{there}" for here, there in forwards)
    return ["-nic", f"user,model=virtio-net-pci,ipv6=off{rules}"]


def parse_forwards(items: Sequence[str]) -> list[tuple[int, int]]:
    """PORT:GUESTPORT pairs (--forward), each a one-line error if malformed."""
    pairs = []
    for item in items:
        here, sep, there = item.partition(":")
        ports = [int(p) for p in (here, there) if p.isascii() and p.isdigit() and 0 < int(p) < 65536]
        if not sep or len(ports) != 2:
            raise BwlabError(f"--forward {item!r}: expected PORT:GUESTPORT, each a TCP port from 1 to 65535")
        pairs.append((ports[0], ports[1]))
    return pairs


def qemu_command(image: KernelImage, work: Path, vcpus: int, memory: str, fifo: bool, accel: str,
                 interactive: bool, forwards: Sequence[tuple[int, int]] = ()) -> list[str]:  # fmt: skip
    """QEMU for a guest whose share is work/share; its console in work/console (`exec`) or on
    this terminal (`shell`, where Ctrl-A X stops QEMU)."""
    serial = ["-serial", "mon:stdio"] if interactive else ["-serial", f"file:{work / 'console'}"]
    return [
        qemu.QEMU, *qemu.machine_args(accel), "-smp", str(vcpus), "-m", memory,
        "-nographic", "-no-reboot", "-monitor", "none", "-vga", "none", *nic_args(forwards),
        "-kernel", str(image.bzimage), "-append", kernel_args(fifo, interactive),
        "-fsdev", "local,id=root,path=/,security_model=none,readonly=on,multidevs=remap",
        "-device", "virtio-9p-pci,fsdev=root,mount_tag=/dev/root",
        "-fsdev", f"local,id=exec,path={work / 'share'},security_model=none,multidevs=remap",
        "-device", f"virtio-9p-pci,fsdev=exec,mount_tag={SHARE_TAG}",
        *serial,
    ]  # fmt: skip


def parse_env(items: list[str]) -> dict[str, str]:
    """NAME=VALUE pairs (--env), each a one-line error if malformed."""
    env = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not ENV_NAME.fullmatch(name):
            raise BwlabError(f"--env {item!r}: expected NAME=VALUE, NAME of ASCII letters, digits and _")
        env[name] = value
    return env


def check_paths(share: Path, cwd: str) -> None:
    """What QEMU's options and the kernel's command line cannot carry, as one-line errors."""
    if "," in str(share):
        raise BwlabError(f"guest exec: the temporary directory {share} has a comma, which QEMU's options cannot "
                         f"carry: set TMPDIR to a path without one")  # fmt: skip
    if any(c.isspace() for c in str(INIT)) or not os.access(INIT, os.X_OK):
        raise BwlabError(f"guest exec: {INIT} must be executable and its path free of spaces (the kernel's init=)")
    if any(cwd == m or cwd.startswith(m + "/") for m in GUEST_MOUNTS):
        raise BwlabError(f"guest exec: the working directory {cwd} is under {', '.join(GUEST_MOUNTS)}, which the "
                         f"guest mounts afresh: run from another directory")  # fmt: skip


def write_share(share: Path, argv: list[str], cwd: str, env: dict[str, str], features: list[str] | None,
                interactive: bool) -> None:  # fmt: skip
    passed = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
    passed.update({"HOME": "/root", "USER": "root", "LOGNAME": "root"})
    if interactive and sys.stdin.isatty():
        size = os.get_terminal_size(sys.stdin.fileno())
        passed.update({"LINES": str(size.lines), "COLUMNS": str(size.columns)})
    passed.update(env)
    passed["BWLAB_CWD"] = cwd
    (share / "env").write_text("".join(f"export {k}={shlex.quote(v)}\n" for k, v in passed.items()))
    (share / "command").write_text(f"exec {shlex.join(argv)}\n")
    if features:
        (share / "features").write_text("\n".join(features) + "\n")
    if interactive:
        (share / "interactive").write_text("")


class _Tail:
    """Copies what a file in the share gains to a stream, as it arrives."""

    def __init__(self, path: Path, sink: BinaryIO) -> None:
        self.path, self.sink, self.offset = path, sink, 0

    def pump(self) -> None:
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return
        if data:
            self.offset += len(data)
            self.sink.write(data)
            self.sink.flush()


def _die_with_parent() -> None:
    """In QEMU's child before exec: killed if bwlab dies without cleaning up (SIGKILL, a crash)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _stop(proc: subprocess.Popen[bytes], interactive: bool) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        if interactive:  # QEMU shares this terminal's session: only it is stopped, and may restore it
            proc.terminate()
            try:
                proc.wait(5)
                return
            except subprocess.TimeoutExpired:
                proc.kill()
        else:
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def run(image: KernelImage, argv: list[str], vcpus: int = 2, policy: str | None = None, accel: str = "tcg",
        memory: str = "2G", env: dict[str, str] | None = None, cwd: str | None = None,
        timeout_s: float | None = None, interactive: bool = False, init: str = "sh",
        stdout: BinaryIO | None = None, stderr: BinaryIO | None = None,
        forwards: Sequence[tuple[int, int]] = ()) -> ExecResult:  # fmt: skip
    """Boot `image` with the host's userland and run `argv` in it (or a shell if `interactive`);
    the command's exit status. `forwards`: a network card, and these ports of this machine's
    loopback forwarded to the guest's (nic_args). QEMU is killed and the temporary files removed on timeout or
    interrupt (and QEMU if this process is killed)."""
    if shutil.which(qemu.QEMU) is None:
        raise BwlabError(f"{qemu.QEMU} is not installed (apt-get install qemu-system-x86)")
    if not image.bzimage.is_file():
        raise BwlabError(f"kernel image {image.bzimage} is missing: run 'bwlab kernel build'")
    if not interactive and not argv:
        raise BwlabError("guest exec: no command (bwlab guest exec --kernel KEY -- CMD [ARG...])")
    if timeout_s is not None and not (math.isfinite(timeout_s) and timeout_s > 0):
        raise BwlabError(f"guest exec: --timeout {timeout_s}: expected a positive number of seconds")
    if policy and not image.patches:
        raise BwlabError(f"--policy {policy} needs a patched kernel; kernel {image.key} has no patches")
    features = policies.feature_writes(policy) if policy else None
    if init == "systemd" and not Path(SYSTEMD).is_file():
        raise BwlabError(f"guest exec --init systemd: {SYSTEMD} is missing (apt-get install systemd)")
    if not Path("/bin/busybox").is_file():
        raise BwlabError("guest exec needs /bin/busybox (apt-get install busybox-static; scripts/setup.sh does)")
    workdir = cwd or os.getcwd()
    out = stdout or sys.stdout.buffer
    err = stderr or sys.stderr.buffer
    with tempfile.TemporaryDirectory(prefix="bwlab-exec-") as tmp_name:
        work = Path(tmp_name)
        share = work / "share"
        share.mkdir()
        check_paths(share, workdir)
        passed = dict(env or {})
        described = layout.ensure(image)  # for doctor --ebpf's kprobes (bwlab/live/kstate.py)
        if described is not None:
            passed.setdefault(layout.ENV, str(described))
        write_share(share, argv, workdir, passed, features, interactive)
        if init == "systemd":
            (share / "systemd").write_text(SYSTEMD)  # what stage 2 execs
        if forwards:
            (share / "forward").write_text("".join(f"{here}:{there}\n" for here, there in forwards))
        fifo, timer_thread = qemu.timer_priority_plan() if accel == "tcg" else (False, "KVM (the host's timers)")
        cmd = qemu_command(image, work, vcpus, memory, fifo, accel, interactive, forwards)
        tails = [] if interactive else [_Tail(share / "stdout", out), _Tail(share / "stderr", err)]
        saved = termios.tcgetattr(sys.stdin.fileno()) if interactive and sys.stdin.isatty() else None
        start = time.monotonic()
        with (work / "qemu.err").open("wb") as qemu_err:
            proc = subprocess.Popen(cmd, stdin=None if interactive else subprocess.DEVNULL,
                                    stdout=None if interactive else subprocess.DEVNULL, stderr=qemu_err,
                                    start_new_session=not interactive, preexec_fn=_die_with_parent)  # fmt: skip
            try:
                if fifo:
                    timer_thread = qemu.prioritize_timers(proc.pid)
                while proc.poll() is None:
                    for tail in tails:
                        tail.pump()
                    if timeout_s is not None and time.monotonic() - start > timeout_s:
                        raise Timeout(f"guest exec: the command did not finish within {timeout_s:g} s; QEMU stopped")
                    time.sleep(0.05)
            finally:
                _stop(proc, interactive)
                if saved is not None:  # QEMU killed before it could restore the terminal
                    termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, saved)
                for tail in tails:
                    tail.pump()
        elapsed = time.monotonic() - start
        if (share / "failed").is_file():
            raise BwlabError(f"guest exec: in the guest, {(share / 'failed').read_text().strip()}")
        status_file = share / "status"
        if not status_file.is_file():
            if interactive:  # Ctrl-A X: QEMU stopped by the user
                return ExecResult(status=0, started_s=math.nan, elapsed_s=elapsed, timer_thread=timer_thread)
            console_tail = ""
            if (work / "console").is_file():
                last = (work / "console").read_text(errors="replace").strip().splitlines()[-6:]
                console_tail = "; console: " + " | ".join(last)
            problem = (work / "qemu.err").read_text(errors="replace").strip().splitlines()[-1:]
            qemu_said = f" (qemu: {problem[0]})" if problem and proc.returncode else ""
            raise BwlabError(f"guest exec: the guest ended without running the command to its end{qemu_said}"
                             f"{console_tail}")  # fmt: skip
        started = (share / "started").read_text().strip() if (share / "started").is_file() else "nan"
        return ExecResult(status=int(status_file.read_text().strip() or "1"), started_s=float(started),
                          elapsed_s=elapsed, timer_thread=timer_thread)  # fmt: skip


@dataclass(frozen=True)
class HostUserlandTarget:
    """`bwlab run --target guest-host`: a scenario on a lab kernel with this machine's userland.
    bwlab's own host target (targets/host.py) runs inside the guest, so any program a scenario
    names (a dynamic binary, a Go program, a JVM, a script) is a workload there, on the guest
    kernel's real cgroup v2; the initramfs guest (targets/qemu.py) carries static programs
    only. The result is the host target's, printed by the guest (which writes nothing here),
    its metadata then made this guest's: target, label, kernel key and hashes, policy, how the
    guest ran (the initramfs guest's keys). What the run said in the guest is kept in
    OUT/logs."""

    image: KernelImage
    vcpus: int = 2
    policy: str | None = None
    timeout_s: float | None = None  # default: what the initramfs guest allows the same plan
    accel: str = "auto"  # "auto", "kvm" or "tcg": qemu.choose_accel()

    def __post_init__(self) -> None:
        if self.policy and not self.image.patches:
            raise BwlabError(f"--policy {self.policy} needs a patched kernel; kernel {self.image.key} has no patches")
        if not 1 <= self.vcpus <= 64:
            raise BwlabError(f"--vcpus must be in 1..64, got {self.vcpus}")

    @property
    def label(self) -> str:
        """The initramfs guest's label and `-userland`: 'guest-baseline-userland'."""
        return qemu.guest_label(self.image.variant_name, self.policy, self.image.hz) + "-userland"

    def inner_argv(self, sc: Scenario) -> list[str]:
        """The command the guest runs: this bwlab's own entry point on the scenario's file, with
        the --reps and --duration given here (the file's values otherwise), into a directory of
        the guest's; then the result file to stdout (the guest writes nothing to the host: its
        answers come back through the exec share), whatever the run's exit status; the directory
        is removed."""
        # this very bwlab (the guest has the same files, working directory and PYTHONPATH)
        argv = [sys.executable, "-m", "bwlab.cli", "run", str(sc.path.resolve()), "--target", "host"]
        written = scenario.load(sc.path).data
        for key, flag in (("repetitions", "--reps"), ("duration_s", "--duration")):
            if sc.data.get(key) != written.get(key):
                argv += [flag, str(sc.data[key])]
        script = (
            'o=$(mktemp -d) || exit 1; "$@" --out "$o" >&2; s=$?; cat "$o"/'
            + shlex.quote(f"{sc.name}-host.json")
            + '; rm -rf "$o"; exit $s'
        )
        return ["sh", "-c", script, "sh", *argv]

    def run(self, sc: Scenario, out_dir: Path) -> Path:
        specs = sc.resolve(self.vcpus, self.image.hz)
        for spec in specs:
            spec.workload.require_real()
        limit = self.timeout_s if self.timeout_s is not None else qemu.guest_timeout(specs)
        accel = qemu.choose_accel(self.accel, self.image).name
        label = self.label + ("-kvm" if accel == "kvm" else "")  # not the same machine as a TCG guest
        argv = self.inner_argv(sc)
        logs = out_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log = logs / f"{sc.name}-{label}.log"  # what the run said in the guest (its progress, errors)
        # the lab's cache (built workloads, kernels) as here, whatever HOME the guest has
        env = {"BWLAB_CACHE": str(paths.cache_root())}
        with tempfile.TemporaryDirectory(prefix="bwlab-guesthost-") as tmp_name:
            tmp = Path(tmp_name)
            status = f"{sc.name} in {label} ({self.vcpus} vCPUs, {accel}, kernel {self.image.key}, limit {limit:.0f} s)"
            with (tmp / "stdout").open("wb") as out, log.open("wb") as err, console.status(status):
                done = run(self.image, argv, vcpus=self.vcpus, policy=self.policy, accel=accel, env=env,
                           timeout_s=limit, stdout=out, stderr=err)  # fmt: skip
            text = (tmp / "stdout").read_text(errors="replace")
        said = log.read_text(errors="replace").strip().splitlines()
        try:
            doc = json.loads(text)
        except json.JSONDecodeError:
            last = said[-1] if said else f"exit status {done.status}"
            raise BwlabError(f"guest-host: the run in the guest wrote no result: {last}") from None
        result = results.Result.from_json(doc, f"{sc.name} from the guest")
        meta = result.meta
        meta.target, meta.label, meta.accel, meta.policy = "guest-host", label, accel, self.policy
        meta.host_kernel = os.uname().release
        meta.hz = meta.hz or self.image.hz  # as built, where the guest could not read it
        meta.extra.update({
            "kernel_key": self.image.key, "source_version": self.image.version,
            "source_origin": self.image.origin, "series_hash": self.image.series_digest,
            "patches": list(self.image.patches), "config_hash": self.image.config_digest,
            "userland": "host", "boot_to_command_s": done.started_s, "qemu_timer_thread": done.timer_thread,
            "elapsed_s": done.elapsed_s, "log": str(log),
        })  # fmt: skip
        path = results.write(out_dir / f"{sc.name}-{label}.json", result)
        if done.status != 0:
            raise BwlabError(f"{path}: the run in the guest failed (exit status {done.status})"
                             + (f": {said[-1]}" if said else ""))  # fmt: skip
        return path
