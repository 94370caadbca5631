"""Host-userland guests: a lab kernel booted with this machine's own root filesystem.

QEMU shares the host's / read-only over virtio 9p; the guest's PID 1 (hostroot_init.sh, run
from that share) puts a tmpfs overlay over it, mounts cgroup2 with every controller, and runs
one command with the host's programs unchanged: Python and bwlab's .venv, sysbench, bpftrace,
Go binaries, a JRE, Prometheus. A second, writable 9p share (a temporary directory here) carries
the command, its working directory and environment in, and its exit status out; the command's
stdout and stderr come back on serial ports 2 and 3, copied here as they arrive.

The initramfs guests (targets/qemu.py) stay the measuring instrument: this one is for programs
that need a full userland (the live tools on real cgroup v2, any dynamic program).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from bwlab.errors import BwlabError
from bwlab.kernel import policies
from bwlab.kernel.build import KernelImage
from bwlab.targets import qemu

INIT = Path(__file__).with_name("hostroot_init.sh")
SHARE_TAG = "bwlab-exec"
# What the guest's command inherits from here (the rest of this environment stays here)
PASSED_ENV = ("PATH", "TERM", "LANG", "LC_ALL", "TZ", "CI", "BWLAB_CACHE", "PYTHONPATH", "GOPATH", "JAVA_HOME")
ENV_NAME = "BWLAB_[A-Z_]+ or another name of letters, digits and _"


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


def qemu_command(image: KernelImage, share: Path, vcpus: int, memory: str, fifo: bool, accel: str,
                 interactive: bool) -> list[str]:  # fmt: skip
    machine = ["-accel", "kvm", "-cpu", "host"] if accel == "kvm" else ["-accel", "tcg,thread=multi", "-cpu", "max"]
    if interactive:
        serial = ["-serial", "mon:stdio"]
    else:
        serial = [arg for name in ("console", "stdout", "stderr") for arg in ("-serial", f"file:{share / name}")]
    return [
        qemu.QEMU, *machine, "-smp", str(vcpus), "-m", memory,
        "-nographic", "-no-reboot", "-monitor", "none", "-vga", "none", "-nic", "none",
        "-kernel", str(image.bzimage), "-append", kernel_args(fifo, interactive),
        "-fsdev", "local,id=root,path=/,security_model=none,readonly=on,multidevs=remap",
        "-device", "virtio-9p-pci,fsdev=root,mount_tag=/dev/root",
        "-fsdev", f"local,id=exec,path={share},security_model=none,multidevs=remap",
        "-device", f"virtio-9p-pci,fsdev=exec,mount_tag={SHARE_TAG}",
        *serial,
    ]  # fmt: skip


def parse_env(items: list[str]) -> dict[str, str]:
    """NAME=VALUE pairs (--env), each a one-line error if malformed."""
    env = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not (name[0].isalpha() or name[0] == "_") or not name.replace("_", "a").isalnum():
            raise BwlabError(f"--env {item!r}: expected NAME=VALUE ({ENV_NAME})")
        env[name] = value
    return env


def write_share(share: Path, argv: list[str], cwd: str, env: dict[str, str], features: list[str] | None,
                interactive: bool) -> None:  # fmt: skip
    passed = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
    passed.update(HOME="/root", USER="root", LOGNAME="root", BWLAB_CWD=cwd, **env)
    (share / "env").write_text("".join(f"export {k}={shlex.quote(v)}\n" for k, v in passed.items()))
    (share / "command").write_text(f"exec {shlex.join(argv)}\n")
    if features:
        (share / "features").write_text("\n".join(features) + "\n")
    if interactive:
        (share / "interactive").write_text("")


class _Tail:
    """Copies what a serial port's file gains to a stream, as it arrives."""

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


def run(image: KernelImage, argv: list[str], vcpus: int = 2, policy: str | None = None, accel: str = "tcg",
        memory: str = "2G", env: dict[str, str] | None = None, cwd: str | None = None,
        timeout_s: float | None = None, interactive: bool = False,
        stdout: BinaryIO | None = None, stderr: BinaryIO | None = None) -> ExecResult:  # fmt: skip
    """Boot `image` with the host's userland and run `argv` in it (or a shell if `interactive`);
    the command's exit status. QEMU is killed and the share removed on timeout or interrupt."""
    if shutil.which(qemu.QEMU) is None:
        raise BwlabError(f"{qemu.QEMU} is not installed (apt-get install qemu-system-x86)")
    if not image.bzimage.is_file():
        raise BwlabError(f"kernel image {image.bzimage} is missing: run 'bwlab kernel build'")
    if not interactive and not argv:
        raise BwlabError("guest exec: no command (bwlab guest exec --kernel KEY -- CMD [ARG...])")
    if policy and not image.patches:
        raise BwlabError(f"--policy {policy} needs a patched kernel; kernel {image.key} has no patches")
    features = policies.feature_writes(policy) if policy else None
    if not Path("/bin/busybox").is_file():
        raise BwlabError("guest exec needs /bin/busybox (apt-get install busybox-static; scripts/setup.sh does)")
    out = stdout or sys.stdout.buffer
    err = stderr or sys.stderr.buffer
    with tempfile.TemporaryDirectory(prefix="bwlab-exec-") as tmp_name:
        share = Path(tmp_name)
        write_share(share, argv, cwd or os.getcwd(), env or {}, features, interactive)
        fifo, timer_thread = qemu.timer_priority_plan()
        fifo = fifo and accel == "tcg"
        cmd = qemu_command(image, share, vcpus, memory, fifo, accel, interactive)
        tails = [] if interactive else [_Tail(share / "stdout", out), _Tail(share / "stderr", err)]
        start = time.monotonic()
        proc = subprocess.Popen(cmd, stdin=None if interactive else subprocess.DEVNULL,
                                stdout=None if interactive else subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=not interactive)  # fmt: skip
        try:
            if fifo:
                timer_thread = qemu.prioritize_timers(proc.pid)
            while proc.poll() is None:
                for tail in tails:
                    tail.pump()
                if timeout_s is not None and time.monotonic() - start > timeout_s:
                    raise Timeout(f"guest exec: the command did not finish within {timeout_s:g} s; "
                                     f"QEMU stopped")  # fmt: skip
                time.sleep(0.05)
        finally:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    if interactive:  # QEMU shares this terminal's session: only it is stopped
                        proc.kill()
                    else:
                        os.killpg(proc.pid, signal.SIGKILL)
            _, qemu_err = proc.communicate()
        for tail in tails:
            tail.pump()
        elapsed = time.monotonic() - start
        status_file = share / "status"
        if not status_file.is_file():
            console_tail = ""
            if (share / "console").is_file():
                last = (share / "console").read_text(errors="replace").strip().splitlines()[-6:]
                console_tail = "; console: " + " | ".join(last)
            problem = qemu_err.decode(errors="replace").strip().splitlines()[-1:] if proc.returncode else []
            raise BwlabError(f"guest exec: the guest ended without running the command to its end"
                             f"{' (qemu: ' + problem[0] + ')' if problem else ''}{console_tail}")  # fmt: skip
        started = (share / "started").read_text().strip() if (share / "started").is_file() else "nan"
        return ExecResult(status=int(status_file.read_text().strip() or "1"), started_s=float(started),
                          elapsed_s=elapsed, timer_thread=timer_thread)  # fmt: skip
