"""Bundles (bwlab bundle, bwlab ingest): scenarios carried to a machine without bwlab.

Contracts: a bundle holds a plan for every CPU count, HZ and cgroup layout asked for, each
valid POSIX shell with only run.sh's placeholders left; it carries static programs only; bad
input (a dynamic program, an archive over the size limit, a machine without cgroup CPU control,
a read-only cgroupfs, a CPU count or HZ it was not made for, not root) is one line and a
non-zero exit, with nothing left behind. On this host's real cgroups (and in a clean root of
busybox alone) run.sh's records ingest into results of the same shape as `bwlab run`'s, and an
interrupted run leaves no group, process or directory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from bwlab import results
from bwlab.errors import BwlabError
from bwlab.targets import bundle
from bwlab.workloads import programs

from conftest import TINY, bwlab, interrupt_when, needs_root, pids_with, run_in_busybox_root

PLACEHOLDERS = {"@BWLAB_CPU@", "@BWLAB_ACCT@", "@BWLAB_CPUSET@", "@BWLAB_RUN@", "@BWLAB_BIN@"}


def tiny(tmp_path: Path, text: str = TINY) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(text)
    return path


def make(tmp_path: Path, *args: str, scenario: Path | None = None) -> Path:
    out = tmp_path / "b"
    res = bwlab("bundle", str(scenario or tiny(tmp_path)), "-o", str(out), *args)
    assert res.returncode == 0, res.stderr
    return out


def test_a_bundle_has_a_plan_for_every_cpu_count_hz_and_layout(tmp_path: Path) -> None:
    out = make(tmp_path, "--ncpu", "2", "--ncpu", "16", "--hz", "250", "--hz", "1000")
    assert (tmp_path / "b.tar.xz").is_file()
    manifest = json.loads((out / "bundle.json").read_text())
    assert manifest["ncpus"] == [2, 16] and manifest["hzs"] == [250, 1000]
    assert manifest["scenarios"] == [{"name": "tiny", "file": "scenarios/0/tiny.toml", "overrides": {}}]
    for layout in ("v2", "v1", "v1-acct"):
        for key in ("n2-hz250", "n2-hz1000", "n16-hz250", "n16-hz1000"):
            text = (out / "plans" / layout / key / "0.sh").read_text()
            assert set(re.findall(r"@BWLAB_\w+@", text)) <= PLACEHOLDERS, (layout, key)
            subprocess.run(["sh", "-n", str(out / "plans" / layout / key / "0.sh")], check=True)
        subprocess.run(["sh", "-n", str(out / "plans" / layout / "cleanup.sh")], check=True)
    # a burst of one tick per CPU: 4 ms x 16 at HZ=250, 1 ms x 2 at HZ=1000, as resolved for each
    assert "cpu.max.burst" in (out / "plans/v2/n16-hz250/0.sh").read_text()
    assert "echo 64000 > " in (out / "plans/v2/n16-hz250/0.sh").read_text()
    assert "echo 2000 > " in (out / "plans/v1/n2-hz1000/0.sh").read_text()
    subprocess.run(["sh", "-n", str(out / "run.sh")], check=True)
    assert sorted(p.name for p in (out / "bin").iterdir()) == ["cgsample", "cgwrite", "noise", "spin"]


def test_a_scenario_without_ticks_has_one_plan_per_cpu_count(tmp_path: Path) -> None:
    out = make(tmp_path, "--ncpu", "4", scenario=tiny(tmp_path, TINY.replace('"cgroup.burst_ticks" = 1', "")))
    assert sorted(p.name for p in (out / "plans/v2").iterdir()) == ["cleanup.sh", "n4"]


def test_only_static_programs_and_sh_scripts_travel(tmp_path: Path) -> None:
    bundle.check_static("spin", programs.resolve("spin"))
    script = tmp_path / "s.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    bundle.check_static("s.sh", script)
    with pytest.raises(BwlabError, match="dynamically linked"):
        bundle.check_static("ls", Path(shutil.which("ls") or "/bin/ls"))
    script.write_text("#!/usr/bin/env python3\n")
    with pytest.raises(BwlabError, match="script for /usr/bin/env python3"):
        bundle.check_static("s.sh", script)


def test_a_dynamic_program_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    shutil.copy(shutil.which("ls") or "/bin/ls", tmp_path / "myls")
    scen = tiny(tmp_path, TINY.replace('kind = "spin-cpu"\nthreads = "ncpu"\nmax_prime = 2000',
                                       'kind = "command"\nargv = ["myls"]\nfiles = ["myls"]'))  # fmt: skip
    res = bwlab("bundle", str(scen), "-o", str(tmp_path / "b"))
    assert res.returncode == 1
    assert res.stderr.count("\n") == 1 and "myls" in res.stderr and "dynamically linked" in res.stderr
    assert not (tmp_path / "b").exists() and not (tmp_path / "b.tar.xz").exists()


def test_an_archive_over_the_limit_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    res = bwlab("bundle", str(tiny(tmp_path)), "-o", str(tmp_path / "b"), "--max-mib", "0.01")
    assert res.returncode == 1 and res.stderr.count("\n") == 1 and "over the 0.01 MiB limit" in res.stderr
    assert not (tmp_path / "b").exists() and not (tmp_path / "b.tar.xz").exists()


def fake_probe(out: Path, facts: str) -> Path:
    """run.sh with a probe that reports `facts` and makes its directory as the real one does;
    the file that will name that directory (other tests make and remove /tmp/bwlab-* beside
    this one in the parallel run: one failed comparing the whole of /tmp, 2026-11-26)."""
    made = out.parent / "probe-made"
    (out / "probe.sh").write_text(f"cat <<'EOF'\n{facts}EOF\nd=$(mktemp -d /tmp/bwlab-XXXXXX)\n"
                                  f"echo \"$d\" > {made}\necho \"dir=$d\"\n")  # fmt: skip
    return made


def probe_left_nothing(made: Path) -> bool:
    """The probe did not run (run.sh stopped before it), or the directory it made is gone."""
    return not made.is_file() or not Path(made.read_text().strip()).exists()


@pytest.mark.parametrize(
    ("facts", "message"),
    [
        ("euid=1000\nncpu=2\nhz=250\nv2=/sys/fs/cgroup\n", "run me as root (uid 1000)"),
        ("euid=0\nncpu=2\nhz=250\n", "no cgroup CPU bandwidth control here"),
        ("euid=0\nncpu=2\nhz=250\nv1mount=/sys/fs/cgroup/cpu rw,cpu\n", "cgroup v1 without cpuacct"),
        ("euid=0\nncpu=2\nhz=250\nv2=/proc/sys\n", "cannot make a group in /proc/sys (a read-only cgroupfs"),
        ("euid=0\nncpu=3\nhz=250\nv2=@TMP@\n", "made for 2 CPUs; this machine has 3"),
        ("euid=0\nncpu=2\nhz=123\nv2=@TMP@\n", "HZ (123) is not one the bundle was made for"),
    ],
)
def test_a_machine_it_cannot_run_on_is_one_line(tmp_path: Path, facts: str, message: str) -> None:
    out = make(tmp_path, "--ncpu", "2")
    groups = tmp_path / "cgroupfs"
    groups.mkdir()
    made = fake_probe(out, facts.replace("@TMP@", str(groups)))
    res = subprocess.run(["sh", str(out / "run.sh"), str(tmp_path / "o")], capture_output=True, text=True)
    assert res.returncode == 1, res.stderr
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("bwlab bundle: ") and message in res.stderr
    assert probe_left_nothing(made)
    assert list(groups.iterdir()) == []


@pytest.mark.parametrize(
    ("env", "guests", "message"),
    [
        ({"BWLAB_ONLY": "guests"}, False, "BWLAB_ONLY=guests: this bundle carries no guests (bwlab bundle --kernel"),
        ({"BWLAB_ONLY": "both"}, False, "BWLAB_ONLY=both: expected host or guests"),
        ({"BWLAB_ONLY": "guests"}, True, "the guests were made for 7 vCPUs, not 2: BWLAB_VCPUS=N sh run.sh"),
        ({"BWLAB_ONLY": "guests", "BWLAB_VCPUS": "5"}, True, "made for 7 vCPUs, not 5"),
    ],
)
def test_guests_it_cannot_boot_are_one_line(tmp_path: Path, env: dict[str, str], guests: bool, message: str) -> None:
    """run.sh's checks of its guest part, on a host bundle given a (fake) guest list for 7 vCPUs."""
    out = make(tmp_path, "--ncpu", "2")
    made = fake_probe(out, "euid=0\nncpu=2\nhz=250\n")  # no cgroups: the guest part needs none
    if guests:
        (out / "guest/plans/n7").mkdir(parents=True)
        (out / "guest/list").write_text("0 7.3.4-x 250 100 0 guest-baseline\n")
    res = subprocess.run(["sh", str(out / "run.sh"), str(tmp_path / "o")], capture_output=True, text=True,
                         env={**os.environ, **env})  # fmt: skip
    assert res.returncode == 1, res.stderr
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("bwlab bundle: ") and message in res.stderr
    assert probe_left_nothing(made)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--kernel", "7.3.4-nosuch"], "bundle: no built kernel with key 7.3.4-nosuch (see 'bwlab kernel list')"),
        (["--policy", "all"], "--policy applies to guests: name a patched kernel with --kernel KEY"),
        (["--vcpus", "65"], "--vcpus must be in 1..64"),
    ],
)
def test_bad_guest_options_are_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    res = bwlab("bundle", str(tiny(tmp_path)), "-o", str(tmp_path / "b"), *args)
    assert res.returncode == 1 and res.stderr.count("\n") == 1 and message in res.stderr, res.stderr
    assert not (tmp_path / "b").exists()


def test_ingest_says_what_is_missing(tmp_path: Path) -> None:
    res = bwlab("ingest", str(tmp_path))
    assert res.returncode == 1 and "no probe.txt: not the output of a bundle's run.sh" in res.stderr
    (tmp_path / "probe.txt").write_text("ncpu=2\n")
    res = bwlab("ingest", str(tmp_path))
    assert res.returncode == 1 and "no bundle.json: the run did not finish" in res.stderr


def run_id(o: Path) -> str:
    """The random part of the run's directory (/tmp/bwlab-XXXXXX), which names its groups."""
    line = next(x for x in (o / "probe.txt").read_text().splitlines() if x.startswith("dir="))
    return line.removeprefix("dir=/tmp/bwlab-")


def groups_of(o: Path) -> list[Path]:
    """The groups of the run that wrote `o`, in every hierarchy (these tests run beside others)."""
    roots = [Path("/sys/fs/cgroup") / n for n in ("cpu", "cpuacct", "cpuset", "unified")] + [Path("/sys/fs/cgroup")]
    return [g for r in roots if r.is_dir() for g in r.glob(f"bwlab-{run_id(o)}*") if g.is_dir()]


@pytest.mark.untimed
@needs_root()
def test_a_bundle_on_this_host_ingests_like_a_run(tmp_path: Path) -> None:
    out = make(tmp_path)
    res = subprocess.run(["sh", str(out / "run.sh"), str(tmp_path / "o")], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert groups_of(tmp_path / "o") == [] and not pids_with(str(out / "bin"))
    assert (tmp_path / "o/cleanup.txt").read_text().strip() == "BWLAB-CLEAN"
    res = bwlab("ingest", str(tmp_path / "o"), "--out", str(tmp_path / "r"))
    assert res.returncode == 0, res.stderr
    got = results.load(next((tmp_path / "r").glob("tiny-bundle-*.json")))
    res = bwlab("run", str(tiny(tmp_path)), "--target", "host", "--out", str(tmp_path / "h"))
    assert res.returncode == 0, res.stderr
    ran = results.load(tmp_path / "h/tiny-host.json")
    assert got.status == ran.status == "ok"
    assert got.meta.vcpus == ran.meta.vcpus and got.meta.hz == ran.meta.hz
    assert got.meta.kernel_release == ran.meta.kernel_release == os.uname().release
    assert [c.case for c in got.cases] == [c.case for c in ran.cases]
    for g, r in zip(got.cases, ran.cases, strict=True):
        assert g.settings == r.settings
        assert sorted(g.reps[0].metrics) == sorted(r.reps[0].metrics), g.case
    limited = got.cases[1].reps[0].metrics
    assert limited["nr_periods"] >= 80 and limited["events_per_s"] > 0


@pytest.mark.untimed
@needs_root()
def test_an_interrupted_bundle_leaves_nothing(tmp_path: Path) -> None:
    out = make(tmp_path, "--duration", "30")
    proc = subprocess.Popen(["sh", str(out / "run.sh"), str(tmp_path / "o")], stderr=subprocess.PIPE,
                            start_new_session=True)  # fmt: skip
    rc, err = interrupt_when(proc, lambda: bool(pids_with(str(out / "bin/spin"))), "spin never started", 60, 0.5)
    assert rc == 130, err
    assert "interrupted" in err
    assert groups_of(tmp_path / "o") == []
    assert not pids_with(str(out / "bin"))
    assert not Path(f"/tmp/bwlab-{run_id(tmp_path / 'o')}").exists()


@pytest.mark.untimed
@needs_root()
def test_a_bundle_runs_in_a_root_of_busybox_alone(tmp_path: Path) -> None:
    """Portability: a root with busybox and nothing else, the host's /sys, /proc and /dev
    mounted into it in a mount namespace of its own."""
    out = make(tmp_path)
    root = tmp_path / "root"
    res = run_in_busybox_root(root, out, "/bin/sh /b/run.sh /o")
    assert res.returncode == 0, res.stderr
    assert groups_of(root / "o") == []
    assert not list((root / "bin").glob("python*")) and sorted(os.listdir(root)) == ["b", "bin", "dev", "o", "proc",
                                                                                      "sys", "tmp"]  # fmt: skip
    res = bwlab("ingest", str(root / "o"), "--out", str(tmp_path / "r"))
    assert res.returncode == 0, res.stderr
    got = results.load(next((tmp_path / "r").glob("tiny-bundle-*.json")))
    assert got.status == "ok" and [c.case for c in got.cases] == ["unlimited", "10ms-1tick"]
    print(f"host bundle: {got.cases[1].reps[0].metrics['nr_periods']:.0f} periods in the 1 s case at 10 ms")
    assert got.cases[1].reps[0].metrics["nr_periods"] >= 80
