"""Guests in bundles: built kernels booted under the QEMU a bundle carries, on a machine where
nothing can be installed (`bwlab bundle ... --kernel KEY [--policy P] [--vcpus N]`).

A bundle with kernels holds, beside the host part (targets/bundle.py):

    guest/qemu/bin/qemu-system-x86_64   this machine's QEMU, and the dynamic loader it names
    guest/qemu/lib/                     every shared library it and its TCG module load
    guest/qemu/modules/                 the accelerator modules (QEMU_MODULE_DIR)
    guest/qemu/share/                   the firmware a PC guest booted with -kernel reads (-L)
    guest/fifo                          SCHED_FIFO for QEMU's main loop (workloads/fifo.c, static)
    guest/kernels/KEY/bzImage           each kernel named
    guest/initramfs.cpio                busybox, every lab program, /init (targets/qemu.py)
    guest/plans/nN/G.cpio               /plan.sh alone, for guest G at N vCPUs
    guest/list                          one line per guest: G KEY HZ LIMIT_S TRACED LABEL

run.sh boots guest G at N vCPUs with `-initrd initramfs.cpio + plans/nN/G.cpio` (the kernel
unpacks concatenated archives in order, so the plan's /plan.sh replaces the empty one), runs
QEMU through the carried loader (`ld.so --library-path lib qemu ...`: the machine's own libc
is never used), KVM when /dev/kvm opens and a guest boots with it, else TCG, and QEMU's main
loop at SCHED_FIFO under TCG as the lab does (targets/qemu.py, prioritize_timers()). Records
come back on the guest's second serial port as in the lab; `ingest()` writes one result per
scenario and guest, labelled as `bwlab run --target guest` labels them.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bwlab import scenario
from bwlab.errors import BwlabError
from bwlab.kernel import build as kernel_build
from bwlab.kernel import policies
from bwlab.scenario import RunSpec, Scenario
from bwlab.targets import base, plan, qemu

# The firmware QEMU reads for `-machine pc -kernel ... -vga none -nic none` (found with
# strace on Debian's QEMU 7.2): SeaBIOS, the option ROM that boots -kernel, and KVM's vAPIC ROM.
FIRMWARE = ("bios-256k.bin", "linuxboot_dma.bin", "kvmvapic.bin")
# Where Debian's QEMU looks for them and for its modules, relative to its binary's directory.
FIRMWARE_DIRS = ("../share/qemu", "../share/seabios", "../lib/ipxe/qemu")
MODULE_DIRS = ("../lib/x86_64-linux-gnu/qemu", "../lib/qemu", "../lib64/qemu")
MODULES = ("accel-tcg-x86_64.so",)


@dataclass(frozen=True)
class Guest:
    """One kernel under one policy (None: the kernel's own defaults, or mainline for a
    baseline)."""

    image: kernel_build.KernelImage
    policy: str | None

    @property
    def label(self) -> str:
        return qemu.guest_label(self.image.variant_name, self.policy, self.image.hz)

    def features(self) -> list[str] | None:
        return policies.feature_writes(self.policy) if self.policy else None


def find_image(key: str) -> kernel_build.KernelImage:
    found = kernel_build.image_by_key(key)
    if found is None:
        raise BwlabError(f"bundle: no built kernel with key {key} (see 'bwlab kernel list')")
    return found


def guests_for(keys: list[str], policy_names: list[str]) -> list[Guest]:
    """Every kernel named, each patched one under every policy named (or its defaults if none);
    a policy with no patched kernel to apply it to is an error."""
    images = [find_image(key) for key in dict.fromkeys(keys)]
    for name in policy_names:
        policies.feature_writes(name)  # an unknown name is a one-line error
    if policy_names and not any(image.patches for image in images):
        raise BwlabError("bundle: --policy needs a patched kernel among --kernel (a baseline has no switches)")
    guests = []
    for image in images:
        named: list[str | None] = [*policy_names] if policy_names and image.patches else [None]
        for policy in named:
            guests.append(Guest(image, policy))
    if len({g.label for g in guests}) != len(guests):
        raise BwlabError("bundle: two kernels of the same kind (baseline/patched, HZ) would share a label")
    return guests


def _find_beside(binary: Path, dirs: tuple[str, ...], name: str) -> Path:
    for rel in dirs:
        path = (binary.parent / rel / name).resolve()
        if path.is_file():
            return path
    raise BwlabError(f"bundle: {name} not found beside {binary} (in {', '.join(dirs)}): "
                     "is QEMU fully installed (apt-get install qemu-system-x86)?")  # fmt: skip


def qemu_files() -> dict[str, Path]:
    """What runs QEMU on a machine without it: bundle path -> file here."""
    found = shutil.which(qemu.QEMU)
    if found is None:
        raise BwlabError(f"bundle: {qemu.QEMU} is not installed here (apt-get install qemu-system-x86)")
    binary = Path(found).resolve()
    files: dict[str, Path] = {f"guest/qemu/bin/{qemu.QEMU}": binary}
    modules = {name: _find_beside(binary, MODULE_DIRS, name) for name in MODULES}
    loaders = []
    for program in (binary, *modules.values()):
        for lib in qemu.shared_libraries(program):
            if lib.name.startswith("ld-linux"):
                loaders.append(lib)
            files[f"guest/qemu/lib/{lib.name}"] = lib.resolve()
    if not loaders:
        raise BwlabError(f"bundle: {binary} names no dynamic loader (ldd): cannot carry it")
    for name, path in modules.items():
        files[f"guest/qemu/modules/{name}"] = path
    for name in FIRMWARE:
        files[f"guest/qemu/share/{name}"] = _find_beside(binary, FIRMWARE_DIRS, name)
    return files


def specs_of(scs: list[Scenario], vcpus: int, guest: Guest) -> list[list[RunSpec]]:
    spec_lists = [sc.resolve(vcpus, guest.image.hz) for sc in scs]
    for specs in spec_lists:
        for spec in specs:
            spec.workload.require_real()
    return spec_lists


def write_guests(out: Path, scs: list[Scenario], guests: list[Guest], vcpus: list[int]) -> dict[str, Any]:
    """The guest part of a bundle in `out`; returns its manifest entry."""
    for name, src in qemu_files().items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, out / name)
        (out / name).chmod(0o755)
    resolved = {(g, n): specs_of(scs, n, guest) for g, guest in enumerate(guests) for n in vcpus}
    every = [s for spec_lists in resolved.values() for specs in spec_lists for s in specs]
    with tempfile.TemporaryDirectory(prefix="bwlab-bundle-") as tmp:
        qemu.build_initramfs(every, out / "guest/initramfs.cpio", Path(tmp), plan_text="")
    lines = []
    entries = []
    for g, guest in enumerate(guests):
        kdir = out / "guest/kernels" / guest.image.key
        if not kdir.is_dir():
            kdir.mkdir(parents=True)
            shutil.copy(guest.image.bzimage, kdir / "bzImage")
        limits = []
        traced = False
        for n in vcpus:
            spec_lists = resolved[(g, n)]
            flat = [s for specs in spec_lists for s in specs]
            traced = traced or qemu.boot_events(flat)
            limits.append(sum(qemu.guest_timeout(specs) for specs in spec_lists)
                          - qemu.BOOT_ALLOWANCE_S * (len(spec_lists) - 1))  # fmt: skip
            with tempfile.TemporaryDirectory(prefix="bwlab-bundle-") as tmp:
                (Path(tmp) / "plan.sh").write_text(plan.render_plans(spec_lists, guest.features(), traced))
                dest = out / f"guest/plans/n{n}/{g}.cpio"
                dest.parent.mkdir(parents=True, exist_ok=True)
                qemu.write_cpio(Path(tmp), dest)
        lines.append(f"{g} {guest.image.key} {guest.image.hz} {max(limits):.0f} {int(traced)} {guest.label}\n")
        entries.append({"label": guest.label, "policy": guest.policy, "kernel": guest.image.metadata()})
    (out / "guest/list").write_text("".join(lines))
    return {"vcpus": vcpus, "guests": entries}


def read_facts(path: Path) -> dict[str, str]:
    """The key=value lines run.sh writes (run.txt, guest-G.txt); {} if there is no file."""
    out: dict[str, str] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep:
                out[key] = value.strip()
    return out


def ingest(out: Path, manifest: dict[str, Any], host: str, results_dir: Path) -> tuple[list[Path], list[str]]:
    """Result files for the guests run.sh booted (one per scenario and guest), and what failed."""
    part = manifest.get("guest") or {}
    scs = [scenario.load(out / e["file"], e.get("overrides") or {}) for e in manifest["scenarios"]]
    written: list[Path] = []
    failures: list[str] = []
    for g, entry in enumerate(part.get("guests", [])):
        run = read_facts(out / f"guest-{g}.txt")
        if not run:
            continue  # not booted (BWLAB_ONLY=host)
        kernel = entry["kernel"]  # KernelImage.metadata()
        vcpus = int(run.get("vcpus", "0"))
        records = out / f"guest-{g}.records.txt"
        console_path = out / f"guest-{g}.console.txt"
        text = records.read_text(errors="replace") if records.is_file() else ""
        outputs = plan.split_scenarios(text, len(scs))
        splats = qemu.find_splats(console_path.read_text(errors="replace") if console_path.is_file() else "")
        label = entry["label"] + ("-kvm" if run.get("accel") == "kvm" else "") + f"-on-{host}"
        image = kernel_build.KernelImage(**{**kernel, "bzimage": Path(kernel["bzimage"]),
                                            "patches": tuple(kernel["patches"])})  # fmt: skip
        accel = qemu.Accel(run.get("accel", "?"), run.get("accel_reason", ""))
        boot = qemu.GuestRun(output=plan.PlanOutput(), console=console_path, results=records, splats=splats,
                             status=run.get("status", ""), elapsed_s=float(run.get("elapsed_s", "0") or 0),
                             timer_thread=run.get("timer_thread", ""))  # fmt: skip
        for sc, output in zip(scs, outputs, strict=True):
            specs = sc.resolve(vcpus, image.hz)
            meta = qemu.guest_meta(label, image, entry["policy"], vcpus, accel, output, boot)
            meta.update({"bundle_host": host, "bundle_revision": manifest.get("bwlab_revision")})
            ok = run.get("status") == "ok" and output.done and not output.errors and not splats
            written.append(base.write_result(results_dir, sc, meta, "ok" if ok else "failed",
                                             base.case_docs(specs, output.records)))  # fmt: skip
            if not ok:
                why = (splats[:1] or output.errors[:1] or [f"QEMU {run.get('status')}, no BWLAB-DONE"])[0]
                failures.append(f"{sc.name} in {label}: {why}")
            elif meta["guest_ncpu"] != vcpus:
                failures.append(f"{sc.name} in {label}: the guest saw {meta['guest_ncpu']} CPUs, expected {vcpus}")
    return written, failures
