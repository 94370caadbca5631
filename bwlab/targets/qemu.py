"""The QEMU target: a scenario inside a guest booted from a built kernel and an initramfs.

The initramfs holds busybox, every program a workload kind runs (with their shared
libraries), the files a scenario's workloads ship, a generic /init and /plan.sh: the
scenario's cases rendered as the portable plan (targets/plan.py). Records come back on the
guest's second serial port (ttyS1 -> a host file), never scraped from the console. The
console (ttyS0) is kept in full and checked for kernel splats.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bwlab import results, workloads
from bwlab.choices import ACCELS
from bwlab.errors import BwlabError
from bwlab.kernel import kselftest, policies
from bwlab.kernel.build import KernelImage
from bwlab.paths import cache_root
from bwlab.progress import console
from bwlab.scenario import RunSpec, Scenario, noise_seconds
from bwlab.targets import base, plan
from bwlab.workloads import programs

QEMU = "qemu-system-x86_64"


def guest_programs() -> tuple[str, ...]:
    """What every guest carries, so that a scenario can use any workload kind."""
    return tuple(sorted({*workloads.all_programs(), *base.LAB_PROGRAMS}))


# Console lines that make a run fail: kernel bugs, warnings, oopses, lockdep, RCU stalls.
SPLAT_PATTERNS = [
    re.compile(p)
    for p in (
        r"\bBUG:",
        r"\bWARNING:",
        r"\bOops\b",
        r"Kernel panic",
        r"general protection fault",
        r"possible circular locking dependency",
        r"inconsistent lock state",
        r"possible recursive locking",
        r"possible irq lock inversion",
        r"suspicious RCU usage",
        r"bad unlock balance",
        r"held lock freed",
        r"DEBUG_LOCKS_WARN_ON",
        r"lock held when returning to user space",
        r"INFO: task \S+ blocked for more than",
        r"soft lockup",
        r"rcu_\w+ (?:self-)?detected stalls?",
        r"rcu: INFO: .*stall",
        r"UBSAN:",
    )
]

INIT = r"""#!/bin/sh
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
mount -t tmpfs tmp /tmp
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
mount -t cgroup2 cgroup2 /sys/fs/cgroup
stty -F /dev/ttyS1 raw -echo 2>/dev/null
exec 3>/dev/ttyS1
echo "BWLAB-HELLO release=$(uname -r) ncpu=$(nproc) slice_us=$(cat /proc/sys/kernel/sched_cfs_bandwidth_slice_us)" >&3
echo "+cpu +cpuset" > /sys/fs/cgroup/cgroup.subtree_control
. /plan.sh
echo "BWLAB-DONE" >&3
sync
reboot -f
"""


def find_splats(console: str) -> list[str]:
    """Console lines that show a kernel bug, warning, oops, lockdep report or RCU stall."""
    return [line.strip() for line in console.splitlines() if any(p.search(line) for p in SPLAT_PATTERNS)]


def shared_libraries(binary: Path) -> list[Path]:
    """The shared libraries `binary` loads, its dynamic loader included (ldd); none for a
    static program ("not a dynamic executable")."""
    proc = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return []
    return [Path(m.group(1)) for line in proc.stdout.splitlines() if (m := re.search(r"(/\S+)\s+\(0x", line))]


def _copy_with_libs(binary: Path, root: Path, dest: str) -> None:
    target = root / dest.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(binary, target)
    for lib in shared_libraries(binary):
        lib_target = root / str(lib).lstrip("/")
        if not lib_target.exists():
            lib_target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(lib.resolve(), lib_target)


def build_initramfs(specs: list[RunSpec], dest: Path, work: Path, features: list[str] | None = None,
                    plan_text: str | None = None, extra: dict[str, Path] | None = None) -> Path:  # fmt: skip
    """A newc cpio (uncompressed) with busybox, the workloads, /init and /plan.sh.

    `plan_text` replaces the plan rendered from `specs`; `extra` adds programs as /bin/NAME."""
    root = work / "root"
    for d in ("bin", "proc", "sys", "dev", "tmp", "lib64"):
        (root / d).mkdir(parents=True, exist_ok=True)
    busybox = programs.resolve("busybox")
    _copy_with_libs(busybox, root, "/bin/busybox")
    applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True,
                             check=True).stdout.split()  # fmt: skip
    for applet in applets:
        link = root / "bin" / applet
        if not link.exists():
            link.symlink_to("busybox")
    for program in guest_programs():
        (root / "bin" / program).unlink(missing_ok=True)
        _copy_with_libs(programs.resolve(program), root, f"/bin/{program}")
    shipped = {name: path for spec in specs for name, path in spec.workload.files.items()}
    for spec in specs:
        program = spec.workload.argv[0]
        if program not in shipped and not (root / plan.program_path(program, "bin").lstrip("/")).exists():
            raise BwlabError(f"case {spec.case}: {program} is not in the guest (list it in the workload's files)")
    for name, path in {**shipped, **(extra or {})}.items():
        (root / "bin" / name).unlink(missing_ok=True)
        _copy_with_libs(path, root, f"/bin/{name}")
    (root / "init").write_text(INIT)
    (root / "init").chmod(0o755)
    text = plan_text if plan_text is not None else plan.render_plan(specs, features, boot_events=boot_events(specs))
    (root / "plan.sh").write_text(text)
    return write_cpio(root, dest)


def write_cpio(root: Path, dest: Path) -> Path:
    """`root`'s tree as a newc cpio archive (what the kernel unpacks as an initramfs)."""
    with dest.open("wb") as out:
        find = subprocess.Popen(["find", "."], cwd=root, stdout=subprocess.PIPE)
        proc = subprocess.run(["cpio", "-o", "-H", "newc", "--quiet"], cwd=root, stdin=find.stdout,
                              stdout=out, stderr=subprocess.PIPE, check=False)  # fmt: skip
        find.wait()
    if proc.returncode != 0 or find.returncode != 0:
        raise BwlabError(f"building the initramfs failed: {proc.stderr.decode(errors='replace').strip()}")
    return dest


@dataclass
class GuestRun:
    output: plan.PlanOutput
    console: Path
    results: Path
    splats: list[str]
    status: str  # "ok", "failed", "timeout"
    elapsed_s: float
    timer_thread: str  # how QEMU's timer thread was scheduled: see prioritize_timers()


# The guest's timers and interrupts are raised by QEMU's main-loop thread, which shares the
# host's CPUs with the busy vCPU threads. At normal priority it waits for the host's next
# tick (4 ms at HZ=250) before it runs, so 2-5 % of guest timer interrupts arrived 0.5-4 ms
# late (p99 3.4 ms measured with the noise probe; a period timer late past a CPU's next tick
# throttles it). At SCHED_FIFO it runs when its timer expires: p99 56-76 us on the same
# machine. SCHED_RESET_ON_FORK: the threads it creates after (vCPUs, workers) stay normal.
# On by default; BWLAB_QEMU_FIFO=0 turns it off (the guest then has the late timers above,
# and the clock the kernel picks for itself, see qemu_command()).
MAIN_LOOP_PRIORITY = 1
FIFO_ENV = "BWLAB_QEMU_FIFO"


def fifo_requested() -> bool:
    """Punctual timers unless BWLAB_QEMU_FIFO=0; any other value than 0/1 is an error."""
    value = os.environ.get(FIFO_ENV, "1")
    if value not in ("0", "1"):
        raise BwlabError(f"{FIFO_ENV}={value!r}: expected 1 (punctual guest timers, the default) or 0")
    return value == "1"


def prioritize_timers(pid: int) -> str:
    """Give QEMU's main-loop thread (the process's first thread) SCHED_FIFO; what was done."""
    try:
        os.sched_setscheduler(pid, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK,
                              os.sched_param(MAIN_LOOP_PRIORITY))  # fmt: skip
    except OSError as exc:
        return f"normal ({exc.strerror}: timers may arrive up to a host tick late)"
    return f"SCHED_FIFO {MAIN_LOOP_PRIORITY}"


def timer_priority_plan() -> tuple[bool, str]:
    """(whether QEMU's main loop will get SCHED_FIFO, what to record if not), decided before
    QEMU starts because the kernel command line depends on it: tried on a stand-in child."""
    if not fifo_requested():
        return False, f"normal ({FIFO_ENV}=0)"
    probe = subprocess.Popen(["sleep", "5"], stdin=subprocess.DEVNULL)
    try:
        done = prioritize_timers(probe.pid)
    finally:
        probe.kill()
        probe.wait()
    return done.startswith("SCHED_FIFO"), done


def boot_events(specs: list[RunSpec]) -> bool:
    """Whether a boot running `specs` turns the trace side action's events on at boot
    (plan.BOOT_EVENTS_PARAM): whether any of them traces."""
    return any(side.kind == "trace" for spec in specs for side in spec.sides)


def machine_args(accel: str) -> list[str]:
    """QEMU's accelerator and CPU: "kvm" the host's CPU, else TCG (emulation, multi-threaded)."""
    return ["-accel", "kvm", "-cpu", "host"] if accel == "kvm" else ["-accel", "tcg,thread=multi", "-cpu", "max"]


def qemu_command(image: KernelImage, initrd: Path, vcpus: int, console: Path, results: Path,
                 memory: str = "1G", tsc_reliable: bool = False, accel: str = "tcg",
                 traced: bool = False) -> list[str]:  # fmt: skip
    """The QEMU command line. `accel`: "tcg" (emulation, multi-threaded) or "kvm" (the host's
    CPU). tsc_reliable goes with punctual TCG timers (see prioritize_timers()): with late timers
    a stable sched_clock charges a stalled vCPU's whole stall (the unstable one clamps it to a
    tick), and the series' `all` policy throttled 11 % of 10 ms periods in CI instead of ~0.
    `traced`: the trace side action's events on from boot (plan.BOOT_EVENTS_PARAM)."""
    return [
        QEMU, *machine_args(accel), "-smp", str(vcpus), "-m", memory,
        "-nographic", "-no-reboot", "-monitor", "none",
        "-kernel", str(image.bzimage), "-initrd", str(initrd),
        # tsc=reliable: TCG's TSC is the host's, but the clocksource watchdog compares it with
        # the emulated HPET, finds a 0.1 % skew and falls back to HPET: every clock read is
        # then an emulated device access, and sched_clock is marked unstable (clamped to the
        # tick), which real hardware's is not
        "-append", "console=ttyS0 panic=-1 loglevel=7" + (" tsc=reliable" if tsc_reliable else "")
        + (f" {plan.BOOT_EVENTS_PARAM}" if traced else ""),
        "-serial", f"file:{console}", "-serial", f"file:{results}",
    ]  # fmt: skip


def _prepare(image: KernelImage, specs: list[RunSpec], vcpus: int, tmp: Path, console: Path, records: Path,
             label: str, features: list[str] | None, plan_text: str | None, extra: dict[str, Path] | None,
             accel: str, keep: Path | None) -> tuple[list[str], bool, str]:  # fmt: skip
    """The initramfs (in `tmp`, copied with plan.sh to `keep` if given) and the QEMU command
    line; whether QEMU's main loop will get SCHED_FIFO, and what to record of it."""
    if shutil.which(QEMU) is None:
        raise BwlabError(f"{QEMU} is not installed (apt-get install qemu-system-x86)")
    if not image.bzimage.is_file():
        raise BwlabError(f"kernel image {image.bzimage} is missing: run 'bwlab kernel build'")
    initrd = build_initramfs(specs, tmp / "initramfs.cpio", tmp, features, plan_text, extra)
    fifo, timer_thread = timer_priority_plan()
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        initrd = Path(shutil.copy2(initrd, keep / f"{label}.initramfs.cpio"))
        shutil.copy2(tmp / "root" / "plan.sh", keep / f"{label}.plan.sh")
    tsc_reliable = fifo and accel == "tcg"
    cmd = qemu_command(image, initrd, vcpus, console, records, tsc_reliable=tsc_reliable, accel=accel,
                       traced=boot_events(specs))  # fmt: skip
    return cmd, fifo, timer_thread


def show_command(image: KernelImage, specs: list[RunSpec], vcpus: int, log_dir: Path, label: str, keep: Path,
                 features: list[str] | None = None, accel: str = "tcg") -> list[str]:  # fmt: skip
    """The QEMU command line boot() would run, its initramfs and plan.sh kept in `keep`."""
    with tempfile.TemporaryDirectory(prefix="bwlab-guest-") as tmp_name:
        cmd, _, _ = _prepare(image, specs, vcpus, Path(tmp_name), log_dir / f"{label}.console.log",
                             log_dir / f"{label}.results.log", label, features, None, None, accel, keep)  # fmt: skip
    return cmd


def boot(image: KernelImage, specs: list[RunSpec], vcpus: int, log_dir: Path, label: str,
         timeout_s: float, features: list[str] | None = None, plan_text: str | None = None,
         extra: dict[str, Path] | None = None, accel: str = "tcg", keep: Path | None = None) -> GuestRun:  # fmt: skip
    """Boot the guest, run the plan, return what came back. Kills QEMU on timeout/interrupt.

    `keep`: a directory where the initramfs and plan.sh stay (to boot by hand)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    console = log_dir / f"{label}.console.log"
    records = log_dir / f"{label}.results.log"
    with tempfile.TemporaryDirectory(prefix="bwlab-guest-") as tmp_name:
        cmd, fifo, timer_thread = _prepare(image, specs, vcpus, Path(tmp_name), console, records, label, features,
                                           plan_text, extra, accel, keep)  # fmt: skip
        start = time.monotonic()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, start_new_session=True)  # fmt: skip
        if fifo:
            timer_thread = prioritize_timers(proc.pid)
        status = "ok"
        try:
            _, err = proc.communicate(timeout=timeout_s)
            if proc.returncode != 0:
                raise BwlabError(f"qemu exited {proc.returncode}: {err.decode(errors='replace').strip()[:300]}")
        except subprocess.TimeoutExpired:
            status = "timeout"
        finally:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        elapsed = time.monotonic() - start
    console_text = console.read_text(errors="replace") if console.exists() else ""
    output = plan.parse_records(records.read_text(errors="replace") if records.exists() else "")
    splats = find_splats(console_text)
    if status == "ok" and (splats or not output.done or output.errors):
        status = "failed"
    return GuestRun(output=output, console=console, results=records, splats=splats,
                    status=status, elapsed_s=elapsed, timer_thread=timer_thread)  # fmt: skip


def guest_meta(label: str, image: KernelImage, policy: str | None, vcpus: int, accel: Accel,
               output: plan.PlanOutput, run: GuestRun) -> dict[str, Any]:  # fmt: skip
    """A guest result's meta: the kernel booted, what the guest said of itself, the boot's
    accelerator, console and timer thread (the lab's runs and a bundle's guests alike)."""
    hello = output.hello
    meta = results.base_meta("guest", label)
    meta.update({
        "policy": policy,
        "sched_features": policies.parse_features(output.features),
        "kernel_release": hello.get("release"),
        "kernel_key": image.key,
        "source_version": image.version,
        "source_origin": image.origin,
        "series_hash": image.series_digest,
        "patches": list(image.patches),
        "config_hash": image.config_digest,
        "hz": image.hz,
        "vcpus": vcpus,
        "accel": accel.name,
        "accel_reason": accel.reason,
        "guest_ncpu": int(hello["ncpu"]) if hello.get("ncpu", "").isdigit() else None,
        "slice_us": int(hello["slice_us"]) if hello.get("slice_us", "").isdigit() else None,
        "cgroup": "cgroup v2 at /sys/fs/cgroup (guest)",
        "console_log": str(run.console),
        "splats": run.splats[:20],
        "elapsed_s": round(run.elapsed_s, 1),
        "qemu_timer_thread": run.timer_thread,
    })  # fmt: skip
    if output.noise:
        meta["noise"] = base.machine_noise(output.noise)
    return meta


# ---- accelerator choice ------------------------------------------------------------------
# A probe guest (the lab's initramfs with an empty plan) must reach /init within this many
# seconds under KVM; on a machine where KVM guests hang, --accel auto falls back to TCG after
# it. A TCG guest reaches /init in ~2 s here, a KVM guest in well under 1 s.
PROBE_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class Accel:
    name: str  # "kvm" or "tcg"
    reason: str  # why: what was asked for, or what the probe found


def kvm_device_problem(path: str = "/dev/kvm") -> str | None:
    """Why /dev/kvm cannot be used, or None if it opens for reading and writing."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    os.close(fd)
    return None


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def probe_kvm(image: KernelImage) -> tuple[str | None, bool]:
    """Boot `image` under KVM with an empty plan: (None if it reached /init within
    PROBE_TIMEOUT_S, else what happened; whether the probe ran now). Remembered per host boot
    and kernel, so that a second run does not probe again: ~/.cache/bwlab/accel-probe.json."""
    memo = cache_root() / "accel-probe.json"
    key = f"{_boot_id()} {image.key}"
    try:
        known = json.loads(memo.read_text())
    except (OSError, ValueError):
        known = {}
    if isinstance(known, dict) and key in known:
        found = known[key]
        return (None if found is None else f"{' '.join(str(found).split())} (probed earlier in this host boot)"), False
    with tempfile.TemporaryDirectory(prefix="bwlab-probe-") as tmp:
        try:
            run = boot(image, [], 1, Path(tmp), "kvm-probe", PROBE_TIMEOUT_S, plan_text="", accel="kvm")
        except BwlabError as exc:  # QEMU refused or crashed (e.g. a host CPU it cannot set up)
            problem: str | None = f"a KVM guest failed to start ({(str(exc).splitlines() or ['?'])[0][:200]})"
        else:
            problem = None if run.output.hello else (
                f"a KVM guest did not reach /init within {PROBE_TIMEOUT_S:g} s" if run.status == "timeout"
                else f"a KVM guest failed before /init ({run.status})")  # fmt: skip
    if isinstance(known, dict):
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp_memo = memo.with_suffix(".tmp")
        tmp_memo.write_text(json.dumps({**known, key: problem}))
        tmp_memo.replace(memo)
    return problem, True


_CHOSEN: dict[tuple[str, str], Accel] = {}
_SAID: set[str] = set()  # fallback reasons already printed by this process


def choose_accel(requested: str, image: KernelImage) -> Accel:
    """kvm or tcg for `requested` ("auto", "kvm", "tcg"); once per process and kernel, saying
    once why auto fell back to TCG. --accel kvm where KVM does not work is an error."""
    if requested not in ACCELS:
        raise BwlabError(f"--accel {requested!r}: expected one of {', '.join(ACCELS)}")
    if requested == "tcg":
        return Accel("tcg", "asked for (--accel tcg)")
    key = (requested, image.key)
    if key in _CHOSEN:
        return _CHOSEN[key]
    problem, fresh = kvm_device_problem(), True
    if problem is None:
        problem, fresh = probe_kvm(image)
    if problem is None:
        chosen = Accel("kvm", f"--accel {requested}: a KVM guest reached /init")
    elif requested == "kvm":
        raise BwlabError(f"--accel kvm: {problem}; use --accel tcg (or auto)")
    else:
        chosen = Accel("tcg", f"--accel auto: {problem}")
        if fresh and problem not in _SAID:  # said once; later runs find it in the result's meta
            _SAID.add(problem)
            console.print(f"[yellow]note[/yellow]: KVM not used, TCG instead: {problem}", soft_wrap=True)
    _CHOSEN[key] = chosen
    return chosen


# What guest_timeout() allows for booting, once per boot.
BOOT_ALLOWANCE_S = 120.0


def guest_timeout(specs: list[RunSpec]) -> float:
    """Boot, per-repetition setup under emulation, and 1.5x the nominal workload time."""
    reps = sum(s.repetitions for s in specs)
    work = sum(s.duration_s * s.repetitions for s in specs) + 2 * noise_seconds(specs)
    return BOOT_ALLOWANCE_S + 1.5 * work + 15.0 * reps


def guest_label(variant: str, policy: str | None, hz: int = 250) -> str:
    """'guest-baseline', 'guest-patched-slush', 'guest-patched-all-hz1000'."""
    label = f"guest-{variant}" + (f"-{policy}" if policy else "")
    return label + (f"-hz{hz}" if hz != 250 else "")


@dataclass(frozen=True)
class QemuTarget:
    """A guest of `vcpus` CPUs running a built kernel, under a bandwidth policy if patched."""

    image: KernelImage
    vcpus: int = 2
    policy: str | None = None  # the series' sched_feat switches (kernel/policies.py)
    timeout_s: float | None = None  # default: guest_timeout() of the plan
    accel: str = "auto"  # "auto", "kvm" or "tcg": see choose_accel()
    keep: bool = False  # keep the initramfs and plan.sh in OUT/boot/ (to boot by hand)
    scheduler: Path | None = None  # a sched_ext scheduler's loader (bwlab/kernel/scheduler.py)

    def __post_init__(self) -> None:
        if self.policy and not self.image.patches:
            raise BwlabError(f"--policy {self.policy} needs a patched kernel; kernel {self.image.key} has no patches")
        if not 1 <= self.vcpus <= 64:
            raise BwlabError(f"--vcpus must be in 1..64, got {self.vcpus}")
        if self.accel not in ACCELS:
            raise BwlabError(f"--accel {self.accel!r}: expected one of {', '.join(ACCELS)}")

    @property
    def label(self) -> str:
        label = guest_label(self.image.variant_name, self.policy, self.image.hz)
        return label + (f"-{self.scheduler.name}" if self.scheduler else "")

    def _specs(self, sc: Scenario) -> list[RunSpec]:
        if sc.userland == "host":  # reproduce and bundles come here too, not through bwlab run
            raise BwlabError(f"{sc.name} asks for this machine's userland ([target] userland = \"host\"): run "
                             "it with bwlab run --target guest or guest-host, not in the initramfs guest")  # fmt: skip
        specs = sc.resolve(self.vcpus, self.image.hz)
        for spec in specs:
            spec.workload.require_real()
        return specs

    def _features(self) -> list[str] | None:
        """The sched/features writes of the policy (patched kernels), None without one."""
        return policies.feature_writes(self.policy) if self.policy else None

    def run(self, sc: Scenario, out_dir: Path) -> Path:
        """All cases in one boot."""
        return self.run_all([sc], out_dir)[0]

    def run_all(self, scs: list[Scenario], out_dir: Path) -> list[Path]:
        """Several scenarios in one boot (a boot and an initramfs per scenario cost ~3 s under
        TCG), one result file each, in order; each keeps its own noise probes. Every result is
        written before the first failure is raised."""
        image, vcpus, label = self.image, self.vcpus, self.label
        spec_lists = [self._specs(sc) for sc in scs]
        all_specs = [spec for specs in spec_lists for spec in specs]
        limit = self.timeout_s if self.timeout_s is not None else (
            sum(guest_timeout(specs) for specs in spec_lists) - BOOT_ALLOWANCE_S * (len(scs) - 1))  # fmt: skip
        accel = choose_accel(self.accel, image)
        if accel.name == "kvm":  # not the same machine as a TCG guest: its own result file
            label += "-kvm"
        keep = out_dir / "boot" if self.keep else None
        name = scs[0].name if len(scs) == 1 else f"{scs[0].name}-and-{len(scs) - 1}-more"
        sched = self.scheduler.name if self.scheduler else None
        if len(scs) > 1:
            text = plan.render_plans(spec_lists, self._features(), boot_events(all_specs), sched)
        else:
            text = plan.render_plan(spec_lists[0], self._features(), boot_events=boot_events(all_specs),
                                    scheduler=sched)  # fmt: skip
        what = scs[0].name if len(scs) == 1 else ", ".join(sc.name for sc in scs)
        with console.status(f"{what} in {label} ({vcpus} vCPUs, {accel.name}, kernel {image.key}, "
                            f"limit {limit:.0f} s)"):  # fmt: skip
            run = boot(image, all_specs, vcpus, out_dir / "logs", f"{name}-{label}", limit,
                       features=self._features(), plan_text=text, accel=accel.name, keep=keep,
                       extra={self.scheduler.name: self.scheduler} if self.scheduler else None)  # fmt: skip
        if fifo_requested() and not run.timer_thread.startswith("SCHED_FIFO"):
            console.print(f"[yellow]note[/yellow]: QEMU's timer thread ran at {run.timer_thread}")
        records = run.results.read_text(errors="replace") if run.results.exists() else ""
        outputs = [run.output] if len(scs) == 1 else plan.split_scenarios(records, len(scs))
        paths: list[Path] = []
        failures: list[str] = []
        for sc, specs, output in zip(scs, spec_lists, outputs, strict=True):
            meta = self._meta(label, accel, run, output)
            if self.scheduler:  # the recorded commands keep -L; these cases had the loader's -l
                meta["scheduler"]["latency_aware_cases"] = plan.lags_cases(specs)
            cases = base.case_docs(specs, output.records)
            status = run.status
            if status == "failed" and not run.splats and output.done and not output.errors:
                status = "ok"  # another scenario of the boot failed, not this one
            path = base.write_result(out_dir, sc, meta, status, cases)
            paths.append(path)
            try:
                if run.status == "timeout":
                    raise BwlabError(f"guest timed out after {limit:.0f} s and was killed; console: {run.console}")
                if status != "ok":
                    why = (run.splats[:1] or output.errors[:1] or ["results incomplete (no BWLAB-DONE)"])[0]
                    raise BwlabError(f"guest run failed: {why}; console: {run.console}")
                if meta["guest_ncpu"] != vcpus:
                    raise BwlabError(f"guest saw {meta['guest_ncpu']} CPUs, expected {vcpus}; console: {run.console}")
                base.check_run(cases, meta, path)
            except BwlabError as exc:
                failures.append(f"{sc.name}: {exc}" if len(scs) > 1 else str(exc))
        if failures:
            raise BwlabError(failures[0] + (f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""))
        return paths

    def _meta(self, label: str, accel: Accel, run: GuestRun, output: plan.PlanOutput) -> dict[str, Any]:
        meta = guest_meta(label, self.image, self.policy, self.vcpus, accel, output, run)
        if self.scheduler:  # the loader asked for, and the ops the kernel said it ran
            meta["scheduler"] = {"loader": self.scheduler.name, "ops": output.scheduler}
        return meta

    def command(self, sc: Scenario, out_dir: Path) -> list[str]:
        """The QEMU command line of this run, its initramfs and plan.sh kept in OUT/boot/: to
        boot by hand (virtme-ng's --show-command). Nothing runs; only auto probes KVM."""
        specs = self._specs(sc)
        accel = choose_accel(self.accel, self.image).name if self.accel == "auto" else self.accel
        return show_command(self.image, specs, self.vcpus, out_dir / "logs", f"{sc.name}-{self.label}",
                            out_dir / "boot", self._features(), accel)  # fmt: skip

    def run_kselftest(self, test_cpu: Path, out_dir: Path, timeout_s: float = 900.0, cgroup_mode: str | None = None,
                      only: Sequence[str] = ()) -> tuple[Path, list[kselftest.TestResult]]:  # fmt: skip
        """Boot, run test_cpu (with that sched/cgroup_mode; `only` those tests, checked by
        kselftest.only_arguments), write kselftest-LABEL.json; return it and the test results."""
        label = guest_label(self.image.variant_name, None, self.image.hz)
        accel = choose_accel(self.accel, self.image)
        run = boot(self.image, [], self.vcpus, out_dir / "logs", f"kselftest-{label}", timeout_s,
                   plan_text=kselftest.plan(only, cgroup_mode=cgroup_mode), extra={"test_cpu": test_cpu},
                   accel=accel.name)  # fmt: skip
        meta = results.base_meta("guest", label)
        meta.update({"kernel_key": self.image.key, "kernel_release": run.output.hello.get("release"),
                     "hz": self.image.hz, "vcpus": self.vcpus, "accel": accel.name,
                     "accel_reason": accel.reason, "patches": list(self.image.patches),
                     "console_log": str(run.console), "splats": run.splats[:20],
                     "elapsed_s": round(run.elapsed_s, 1), "qemu_timer_thread": run.timer_thread,
                     "cgroup_mode": cgroup_mode, "only": list(only)})  # fmt: skip
        path, stdout, tests = base.write_kselftest(out_dir, meta, run.status, run.output.records.get((0, 0)))
        why = kselftest.setup_failure(stdout)
        if why is not None:
            raise BwlabError(f"{kselftest.SETUP_FAILED}{why}")
        if run.status == "timeout":
            raise BwlabError(f"guest timed out after {timeout_s:.0f} s; console: {run.console}")
        if run.splats:
            raise BwlabError(f"kernel splat during test_cpu: {run.splats[0]}; console: {run.console}")
        if not tests:
            raise BwlabError(f"test_cpu produced no TAP results; console: {run.console}")
        return path, tests
