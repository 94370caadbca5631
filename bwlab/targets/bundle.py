"""Bundles: scenarios as a self-contained directory that runs where nothing can be installed.

`write_bundle()` makes DIR (and DIR.tar.xz); on the machine, as root, `sh DIR/run.sh [OUT]`
needs a POSIX shell, sed, awk, mktemp and setsid (busybox has them all) -- no bwlab, Python,
compiler or network. `ingest()` turns what run.sh wrote into result files, as if the run had
been local (`bwlab ingest OUT`).

A bundle holds the same pieces the ssh:// target sends (targets/ssh.py): its probe, the static
programs, the portable plan (targets/plan.py) and its cleanup. What ssh learns before it
renders the plan -- the CPU count, HZ, the cgroup layout, the run's directory -- a bundle
learns only on the machine, so the plan is rendered ahead for every combination asked for:

    DIR/run.sh (bundle_run.sh), probe.sh, bundle.json (the manifest), names, bin/ (programs),
    scenarios/K/FILE.toml (each scenario file as given, and the files it carries),
    plans/LAYOUT/{cleanup.sh, nN[-hzHZ]/K.sh}: templates with @BWLAB_...@ placeholders

LAYOUT is v2, v1 (cpuacct co-mounted with cpu) or v1-acct (cpuacct apart); `-hzHZ` only where
a scenario's settings depend on HZ (burst_ticks). run.sh probes, picks the template, fills in
the placeholders with sed (the groups' roots, the run's directory /tmp/bwlab-RUN, the programs'
directory), runs each scenario's plan in a session of its own with its records in
OUT/records-K.txt, and cleans up after success, error and SIGINT/SIGTERM/SIGHUP (killing the
plan's process group, removing the run's groups, writing back what the plan changed).
"""

from __future__ import annotations

import json
import shutil
import struct
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bwlab import results, scenario
from bwlab.errors import BwlabError
from bwlab.scenario import RunSpec, Scenario
from bwlab.targets import base, bundle_guest, plan, ssh
from bwlab.workloads import programs as workload_programs

MANIFEST = "bundle.json"
FORMAT = "bwlab-bundle/1"
HZ_CHOICES = (100, 250, 300, 1000)  # x86's CONFIG_HZ choices
DEFAULT_MAX_MIB = 60.0
# the placeholders run.sh fills in (sed), and what with
CPU, ACCT, CPUSET = "@BWLAB_CPU@", "@BWLAB_ACCT@", "@BWLAB_CPUSET@"
RUN_DIR = "/tmp/bwlab-@BWLAB_RUN@"  # the probe's mktemp -d; its random part names the groups
BIN = "@BWLAB_BIN@"
LAYOUTS = {
    "v2": plan.Layout(2, CPU),
    "v1": plan.Layout(1, CPU, None, CPUSET),
    "v1-acct": plan.Layout(1, CPU, ACCT, CPUSET),
}
_PT_INTERP = 3
RUNNER = Path(__file__).with_name("bundle_run.sh")  # run.sh, as it is
GUEST_RUNNER = Path(__file__).with_name("bundle_guests.sh")  # guest/run-guests.sh, as it is


@dataclass(frozen=True)
class Part:
    """One scenario of a bundle: its file, the overrides it was loaded with, and the scenario."""

    file: Path
    overrides: dict[str, Any]
    sc: Scenario


def needs_hz(sc: Scenario, ncpu: int) -> bool:
    """Whether the scenario's settings depend on the kernel's HZ (a burst in ticks): its cases
    resolve differently at the lowest and the highest HZ."""
    return sc.resolve(ncpu, HZ_CHOICES[0]) != sc.resolve(ncpu, HZ_CHOICES[-1])


def check_static(name: str, path: Path) -> None:
    """A one-line error unless `path` runs without a dynamic loader: a static ELF program, or a
    script for /bin/sh."""
    with path.open("rb") as fh:
        head = fh.read(64)
        if head.startswith(b"#!"):
            line = (head + fh.read(200)).split(b"\n")[0].decode(errors="replace")
            if line.split()[0] == "#!/bin/sh":
                return
            raise BwlabError(f"bundle: {name} is a script for {line[2:].strip()}, which the target may lack "
                             "(a bundle carries static programs and /bin/sh scripts)")  # fmt: skip
        if not head.startswith(b"\x7fELF") or head[4] != 2:
            raise BwlabError(f"bundle: {name} ({path}) is not a 64-bit ELF program nor a /bin/sh script")
        phoff = struct.unpack_from("<Q", head, 0x20)[0]
        phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
        fh.seek(phoff)
        table = fh.read(phentsize * phnum)
    for i in range(phnum):
        if struct.unpack_from("<I", table, i * phentsize)[0] == _PT_INTERP:
            raise BwlabError(f"bundle: {name} ({path}) is dynamically linked; a bundle carries static programs "
                             "only (the target may lack its libraries): build it with -static")  # fmt: skip


def _scenario_files(part: Part, specs: list[RunSpec]) -> dict[str, Path]:
    """The files a scenario carries, by their path relative to its folder (so that the copy
    beside the copied TOML resolves as the original did); one outside that folder is an error."""
    root = part.file.parent.resolve()
    out: dict[str, Path] = {}
    for spec in specs:
        for path in spec.workload.files.values():
            real = path.resolve()
            if not real.is_relative_to(root):
                raise BwlabError(f"bundle: {part.sc.name} carries {path}, outside its scenario's folder {root}; "
                                 "put the file beside the scenario")  # fmt: skip
            out[str(real.relative_to(root))] = real
    return out


def render(parts: list[Part], ncpus: list[int],
           hzs: list[int]) -> tuple[dict[str, str], dict[str, Path], dict[str, Any]]:  # fmt: skip
    """Every template and script (name -> text), the programs (bin/NAME -> path) and the
    manifest, for these CPU counts and HZ values."""
    texts: dict[str, str] = {"probe.sh": ssh.PROBE.lstrip()}
    programs: dict[str, Path] = {}
    plans: list[str] = []
    cpuset = False
    for ncpu in ncpus:
        for k, part in enumerate(parts):
            for hz in hzs if needs_hz(part.sc, ncpu) else [None]:
                specs = part.sc.resolve(ncpu, hz)
                for spec in specs:
                    spec.workload.require_real()
                cpuset = cpuset or any(s.cpus is not None for s in specs)
                programs.update(ssh.programs_for(specs))
                key = f"n{ncpu}" if hz is None else f"n{ncpu}-hz{hz}"
                for lname, layout in LAYOUTS.items():
                    prefix = ssh.Machine({}, layout, RUN_DIR).group_prefix
                    text = plan.render_plan(specs, None, layout, BIN, RUN_DIR, prefix, restore=True)
                    texts[f"plans/{lname}/{key}/{k}.sh"] = text
                plans.append(f"{key}/{k}")
    for name, path in programs.items():
        check_static(name.removeprefix("bin/"), path)
    for lname, layout in LAYOUTS.items():
        machine = ssh.Machine({}, layout, RUN_DIR)
        texts[f"plans/{lname}/cleanup.sh"] = ssh.cleaner(machine)
    manifest = {
        "format": FORMAT,
        "bwlab_revision": results.git_revision(),
        "scenarios": [
            {"name": p.sc.name, "file": f"scenarios/{k}/{p.file.name}", "overrides": p.overrides}
            for k, p in enumerate(parts)
        ],
        "ncpus": ncpus,
        "hzs": hzs,
        "plans": sorted(set(plans)),
        "cpuset": cpuset,
    }
    texts["run.sh"] = RUNNER.read_text()
    texts["names"] = "".join(f"{p.sc.name}\n" for p in parts)
    if cpuset:
        texts["needs-cpuset"] = ""
    return texts, programs, manifest


def load_parts(names: list[str], overrides: dict[str, Any]) -> list[Part]:
    parts = []
    for name in names:
        path = scenario.find(name)
        parts.append(Part(path, overrides, scenario.load(path, overrides)))
    if len({p.sc.name for p in parts}) != len(parts):
        raise BwlabError("bundle: a scenario named twice")
    return parts


def write_bundle(parts: list[Part], ncpus: list[int], hzs: list[int], out: Path,
                 max_mib: float = DEFAULT_MAX_MIB, guests: list[bundle_guest.Guest] | None = None,
                 vcpus: list[int] | None = None) -> Path:  # fmt: skip
    """DIR and DIR.tar.xz; returns the archive. An error (and nothing left) if the archive is
    larger than `max_mib`. `guests`: kernels to boot there too, with `vcpus` (default `ncpus`)."""
    if out.exists() and any(out.iterdir()):
        raise BwlabError(f"bundle: {out} exists and is not empty")
    texts, programs, manifest = render(parts, ncpus, hzs)
    if guests:
        fifo = workload_programs.resolve("fifo")
        check_static("fifo", fifo)
        programs["guest/fifo"] = fifo
        texts["guest/run-guests.sh"] = GUEST_RUNNER.read_text()
        texts["guest/traced-append"] = plan.BOOT_EVENTS_PARAM + "\n"
    archive = out.parent / f"{out.name}.tar.xz"
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, text in texts.items():
            path = out / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        if guests:
            manifest["guest"] = bundle_guest.write_guests(out, [p.sc for p in parts], guests, vcpus or ncpus)
        (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        (out / "bin").mkdir()
        for name, src in programs.items():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, out / name)
            (out / name).chmod(0o755)
        for k, part in enumerate(parts):
            folder = out / "scenarios" / str(k)
            folder.mkdir(parents=True)
            shutil.copy(part.file, folder / part.file.name)
            for rel, src in _scenario_files(part, part.sc.resolve(ncpus[0], hzs[0])).items():
                (folder / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(src, folder / rel)
        (out / "run.sh").chmod(0o755)
        with tarfile.open(archive, "w:xz", preset=1) as tar:  # 3x as fast as 6, 11 % larger with guests
            tar.add(out, arcname=out.name)
        size = archive.stat().st_size / 2**20
        if size > max_mib:
            raise BwlabError(f"bundle: {archive} is {size:.1f} MiB, over the {max_mib:g} MiB limit (--max-mib)")
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        archive.unlink(missing_ok=True)
        raise
    return archive


def ingest(out: Path, results_dir: Path) -> list[Path]:
    """Result files for what a bundle's run.sh wrote in `out`, one per scenario."""
    manifest_path = out / MANIFEST
    if not (out / "probe.txt").is_file():
        raise BwlabError(f"ingest: {out} has no probe.txt: not the output of a bundle's run.sh")
    if not manifest_path.is_file():
        raise BwlabError(f"ingest: {out} has no {MANIFEST}: the run did not finish (run.sh copies it last)")
    try:
        manifest = json.loads(manifest_path.read_text())
    except json.JSONDecodeError as exc:
        raise BwlabError(f"ingest: {manifest_path}: not JSON ({exc})") from None
    if manifest.get("format") != FORMAT:
        raise BwlabError(f"ingest: {manifest_path}: format {manifest.get('format')!r}, expected {FORMAT!r}")
    machine = ssh.parse_probe(str(out), (out / "probe.txt").read_text())
    run = bundle_guest.read_facts(out / "run.txt")
    hz = int(run["hz"]) if run.get("hz", "").isdigit() else None
    label = "bundle-" + "".join(c if c.isalnum() or c in "._-" else "_" for c in machine.facts.get("hostname", "x"))
    written: list[Path] = []
    for k, entry in enumerate(manifest["scenarios"] if run.get("host", "1") == "1" else []):
        sc = scenario.load(out / entry["file"], entry.get("overrides") or {})
        specs = sc.resolve(machine.ncpu, hz)
        records = out / f"records-{k}.txt"
        output = plan.parse_records(records.read_text(errors="replace") if records.is_file() else "")
        meta = ssh.machine_meta("bundle", label, machine, hz, output)
        meta.update({"bundle_revision": manifest.get("bwlab_revision"), "layout": run.get("layout")})
        starts, ends = run.get("start", "").split(), run.get("end", "").split()
        if starts and ends:
            meta["elapsed_s"] = round(float(ends[0]) - float(starts[0]), 1)
        cases = base.case_docs(specs, output.records)
        status = "ok" if output.done and not output.errors else "failed"
        written.append(base.write_result(results_dir, sc, meta, status, cases))
        if output.errors:
            raise BwlabError(f"ingest: {sc.name}: the plan reported: {output.errors[0]}")
    guests, failures = bundle_guest.ingest(out, manifest, label.removeprefix("bundle-"), results_dir)
    written += guests
    if failures:
        raise BwlabError(f"ingest: {failures[0]}" + (f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""))
    return written
