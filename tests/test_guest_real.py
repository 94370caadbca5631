"""A real Linux 7.3.4 kernel built from the fetched source, booted under QEMU TCG."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bwlab import results
from bwlab.paths import cache_root
from bwlab.targets import qemu

from conftest import (
    DATA,
    REPO,
    TINY,
    assert_agrees_with_truth,
    assert_truth_knows_known_demand,
    baseline_kernel,
    bwlab,
    interrupt_when,
    pids_with,
    run_in_busybox_root,
    traced_below_quota,
    truth_counts,
)

pytestmark = pytest.mark.guest


@pytest.fixture(scope="module")
def kernel_key() -> str:
    key = baseline_kernel()
    again = bwlab("kernel", "build", "--baseline", timeout=60)  # cached: instant
    assert again.returncode == 0 and again.stdout.split()[0] == key
    return key


def guest_args(kernel_key: str, out: Path) -> list[str]:
    """`bwlab run` arguments for the short 10 ms table2 in a guest of the built kernel."""
    return ["run", str(DATA / "table2-10ms.toml"), "--target", "guest", "--kernel", kernel_key, "--out", str(out)]


def test_guest_throttles_at_10ms_with_clean_console(kernel_key: str, tmp_path: Path) -> None:
    proc = bwlab(*guest_args(kernel_key, tmp_path), timeout=900)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "table2-10ms-guest-baseline.json").read_text())
    meta = doc["meta"]
    assert doc["status"] == "ok" and meta["splats"] == []
    assert meta["kernel_release"].startswith("7.3.4") and meta["guest_ncpu"] == 2 and meta["hz"] == 250
    metrics = doc["cases"][0]["reps"][0]["metrics"]
    noise = [(n["metrics"]["uncharged_pct"], n["metrics"]["timer_late_p50_us"]) for n in meta["noise"]]
    print(f"guest 10 ms: throttled {metrics['throttled_pct']:.1f} % of {metrics['nr_periods']} periods; "
          f"noise (uncharged %, timer late p50 us) {noise}")  # fmt: skip
    assert metrics["nr_periods"] > 200
    assert metrics["throttled_pct"] > 20  # reference: ~48-51 % on 7.3.4 at a 10 ms period
    # the noise probe ran in this boot: TCG, nothing else running, timers seen
    assert len(meta["noise"]) == 2  # before and after the cases
    assert all(p["metrics"]["uncharged_pct"] < 5 and p["metrics"]["timer_late_p50_us"] < 2000 for p in meta["noise"])
    console = Path(meta["console_log"]).read_text()
    assert "Linux version 7.3.4" in console and "BWLAB-" not in console  # results never on the console
    # QEMU's timer thread is at SCHED_FIFO (as root) unless BWLAB_QEMU_FIFO=0
    fifo = qemu.fifo_requested() and os.geteuid() == 0
    if fifo:  # punctual timers: the guest keeps the TSC
        assert "Switched to clocksource tsc" in console and "Switched to clocksource hpet" not in console
    assert meta["qemu_timer_thread"].startswith("SCHED_FIFO 1" if fifo else "normal (")


def test_noise_in_a_guest(kernel_key: str, tmp_path: Path) -> None:
    proc = bwlab("run", "noise", "--target", "guest", "--kernel", kernel_key, "--duration", "3", "--out",
                 str(tmp_path), timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "noise-guest-baseline.json").read_text())
    rep = doc["cases"][0]["reps"][0]
    # TCG has no steal accounting and the guest runs nothing else: a fraction of a percent
    assert 0 <= rep["metrics"]["uncharged_pct"] < 5
    out = json.loads(rep["raw"]["stdout"])
    assert out["threads"] == 2 and len(out["timer_late_us"]) > 1000  # 2 x 3 s of 997 us timers, most seen
    assert rep["metrics"]["timer_late_p50_us"] < 2000


@pytest.mark.untimed
def test_guest_timeout_is_reported(kernel_key: str, tmp_path: Path) -> None:
    # --accel tcg: no KVM probe, whose note (the first auto run on a cold cache) is a second line
    proc = bwlab(*guest_args(kernel_key, tmp_path), "--timeout", "3", "--accel", "tcg", timeout=120)
    assert proc.returncode == 1
    assert "guest timed out after 3 s" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    doc = json.loads((tmp_path / "table2-10ms-guest-baseline.json").read_text())
    assert doc["status"] == "timeout"
    assert Path(doc["meta"]["console_log"]).is_file()
    assert not pids_with("qemu-system", str(tmp_path))


@pytest.mark.untimed
def test_interrupt_kills_guest_and_temp_files(kernel_key: str, tmp_path: Path) -> None:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "bwlab.cli", *guest_args(kernel_key, tmp_path / "out")],
        cwd=REPO,
        env={**os.environ, "TMPDIR": str(tmpdir)},
        stderr=subprocess.PIPE,
    )
    rc, err = interrupt_when(
        proc, lambda: bool(pids_with("qemu-system", str(tmpdir))), "qemu never started", within=60, settle=1
    )
    assert rc == 130, err
    assert not pids_with("qemu-system", str(tmpdir))
    assert list(tmpdir.iterdir()) == []


def _forget_kvm_probe(kernel_key: str) -> None:
    """Make the next --accel auto|kvm run probe again (the memo is per host boot and kernel)."""
    memo = cache_root() / "accel-probe.json"
    if memo.is_file():
        known = json.loads(memo.read_text())
        memo.write_text(json.dumps({k: v for k, v in known.items() if not k.endswith(kernel_key)}))


@pytest.mark.untimed
def test_accel_auto_records_what_it_chose(kernel_key: str, tmp_path: Path) -> None:
    """auto uses KVM where a probe guest reaches /init with it, else TCG, within the probe's
    limit, and says which and why in the result (on the lab's machine KVM guests hang: TCG)."""
    _forget_kvm_probe(kernel_key)
    start = time.monotonic()
    proc = bwlab(*guest_args(kernel_key, tmp_path), "--accel", "auto", "--keep", timeout=900)
    assert proc.returncode == 0, proc.stderr
    (path,) = tmp_path.glob("table2-10ms-guest-baseline*.json")
    meta = json.loads(path.read_text())["meta"]
    if meta["accel"] == "tcg":
        assert meta["accel_reason"].startswith("--accel auto: ")
        assert proc.stderr.count("KVM not used, TCG instead") == 1
        probe = qemu.PROBE_TIMEOUT_S
        assert time.monotonic() - start < probe + 300  # the probe gave up in time, then the TCG run
    else:
        assert meta["accel"] == "kvm" and path.name == "table2-10ms-guest-baseline-kvm.json"
    # --keep: what booted stays, to boot by hand
    assert (tmp_path / "boot" / "table2-10ms-guest-baseline.plan.sh").read_text().count("BWLAB-BEGIN") == 1
    assert (tmp_path / "boot" / "table2-10ms-guest-baseline.initramfs.cpio").stat().st_size > 1_000_000


@pytest.mark.untimed
def test_accel_kvm_fails_clearly_where_kvm_does_not_work(kernel_key: str, tmp_path: Path) -> None:
    _forget_kvm_probe(kernel_key)
    own = tmp_path / "tmp"  # its probe's files, so that another worker's probe is not taken for its own
    own.mkdir()
    start = time.monotonic()
    proc = bwlab(*guest_args(kernel_key, tmp_path), "--accel", "kvm", env={"TMPDIR": str(own)}, timeout=300)
    took = time.monotonic() - start
    if proc.returncode == 0:  # a machine where KVM works
        assert json.loads(next(tmp_path.glob("*.json")).read_text())["meta"]["accel"] == "kvm"
        return
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1
    assert "--accel kvm: " in proc.stderr and "use --accel tcg" in proc.stderr
    assert took < qemu.PROBE_TIMEOUT_S + 60
    assert not pids_with("qemu-system", str(own))


@pytest.mark.untimed
def test_show_command_boots_nothing(kernel_key: str, tmp_path: Path) -> None:
    proc = bwlab(*guest_args(kernel_key, tmp_path), "--accel", "tcg", "--show-command", timeout=120)
    assert proc.returncode == 0, proc.stderr
    cmd = shlex.split(proc.stdout.strip())
    assert cmd[0] == "qemu-system-x86_64" and cmd[1:3] == ["-accel", "tcg,thread=multi"]
    assert Path(cmd[cmd.index("-initrd") + 1]).is_file()
    assert (tmp_path / "boot" / "table2-10ms-guest-baseline.plan.sh").is_file()
    assert not list(tmp_path.glob("*.json"))  # nothing ran


def test_several_scenarios_in_one_boot(kernel_key: str, tmp_path: Path) -> None:
    """QemuTarget.run_all (the quick reproduce plan): one boot, one result per scenario with its
    own records and noise probes; a scenario whose program fails marks only its own result."""
    from bwlab import scenario
    from bwlab.errors import BwlabError
    from bwlab.kernel.build import list_images

    (image,) = [img for img in list_images() if img.key == kernel_key]
    table2 = scenario.load(DATA / "table2-10ms.toml", {"duration_s": 3})
    failing = tmp_path / "fails.toml"  # busybox false: exits 1, which fails the repetition
    failing.write_text('name = "fails"\nrepetitions = 1\nduration_s = 1\n[cgroup]\nperiod_us = 10000\n'
                       'quota_cpus = 1\n[workload]\nkind = "command"\nargv = ["false"]\n')  # fmt: skip
    cglat = scenario.load(scenario.find("cglat"), {"repetitions": 1, "duration_s": 2})
    target = qemu.QemuTarget(image, accel="tcg")
    with pytest.raises(BwlabError, match=r"^fails: .*false exited 1"):
        target.run_all([table2, scenario.load(failing), cglat], tmp_path)
    boots = list((tmp_path / "logs").glob("*.console.log"))
    assert [p.name for p in boots] == ["table2-10ms-and-2-more-guest-baseline.console.log"]
    docs = {p.stem: json.loads(p.read_text()) for p in tmp_path.glob("*.json")}
    assert set(docs) == {"table2-10ms-guest-baseline", "fails-guest-baseline", "cglat-guest-baseline"}
    t2, bad, cg = docs["table2-10ms-guest-baseline"], docs["fails-guest-baseline"], docs["cglat-guest-baseline"]
    assert t2["status"] == "ok" and cg["status"] == "ok" and bad["status"] == "ok"  # the boot itself was fine
    assert t2["cases"][0]["reps"][0]["metrics"]["throttled_pct"] > 20 and len(t2["meta"]["noise"]) == 2
    assert "noise" not in cg["meta"] and len(cg["cases"]) == len(cglat.resolve(2))
    assert all(r["metrics"]["p99_us"] > 0 for c in cg["cases"] for r in c["reps"])
    assert "exited 1" in bad["cases"][0]["reps"][0]["error"]
    assert t2["meta"]["elapsed_s"] == cg["meta"]["elapsed_s"]  # the same boot


def test_the_detector_knows_below_quota_from_over_use_on_v2(kernel_key: str, tmp_path: Path) -> None:
    """The below-quota scenario in a 7.3.4 guest (cgroup v2, cgsample in its busybox): the
    per-period detector calls the throttled periods at demand == quota below quota (>= 95 %)
    and those at twice the quota over-use (>= 95 %), from v2's usage_usec and throttled_usec."""
    proc = bwlab("run", "below-quota", "--target", "guest", "--kernel", kernel_key, "--reps", "1", "--out",
                 str(tmp_path), timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "below-quota-guest-baseline.json").read_text())
    cases = {c["case"]: [r["metrics"] for r in c["reps"]] for c in doc["cases"]}
    for case, want_below in (("demand-eq-quota", True), ("twice-quota", False)):
        for m in cases[case]:
            print(f"guest detector {case}: " + ", ".join(f"{k} {m[k]}" for k in (
                "nr_periods", "sampled_periods", "nr_throttled", "below_quota_share")))  # fmt: skip
            assert m["sampled_periods"] >= 0.9 * m["nr_periods"] - 5, m
            # enough throttled periods for the shares to mean something: 47-49 % at demand ==
            # quota in this machine's guests (2026-11-25), with the group on a CPU of its own;
            # beside the sampler on both, 13-17 % here and 0 of 527 in a CI repetition
            assert m["nr_throttled"] >= 0.2 * m["nr_periods"], m
            share = m["below_quota_share"]
            assert (share >= 0.95) if want_below else (share <= 0.05), (case, m)


def test_the_traced_truth_in_a_guest(kernel_key: str, tmp_path: Path) -> None:
    """The trace side action in a 7.3.4 guest (cgroup v2, ftrace from its busybox shell),
    beside the below-quota scenario, whose demand is known: the truth calls the periods at
    demand == quota below quota and those at twice it over-use (>= 95 % each), with the period
    timer found at nearly every sampled boundary and no event dropped."""
    proc = bwlab("run", str(traced_below_quota(tmp_path)), "--target", "guest", "--kernel", kernel_key,
                 "--reps", "1", "--out", str(tmp_path), timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "below-quota-guest-baseline.json").read_text())
    assert doc["meta"]["splats"] == []
    assert_truth_knows_known_demand(doc, detector_too=False)


def test_the_detector_against_traced_bursts_on_v2(kernel_key: str, tmp_path: Path) -> None:
    """The below-quota-bursts scenario in a guest with tracepoints (cgroup v2): each repetition
    of the detector agrees with the traced truth as assert_agrees_with_truth asks, except that
    up to a fifth of its below-quota calls may be wrong (three however few), not a tenth: at
    10 ms, 16 repetitions on 2026-11-25 at 045c01b (docs/results.md, Live tools) had 0-2 wrong calls each
    (0-22 %), 96.6 % right pooled; the rest as asked (over-use called so, half the truly below
    found: 54-100 % per repetition, 89.0 % pooled), and at 100 ms two over-use periods called
    below however few: those 16 repetitions had 0-2 of 1-44 throttled periods, each within
    3 % of the quota of the line."""
    proc = bwlab("run", "below-quota-bursts", "--target", "guest", "--kernel", kernel_key, "--reps", "1",
                 "--duration", "15", "--out", str(tmp_path), timeout=1200)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "below-quota-bursts-guest-baseline.json").read_text())
    assert doc["meta"]["splats"] == []
    for case in doc["cases"]:
        for rep in case["reps"]:
            m = rep["metrics"]
            throttled, truly, called, both = truth_counts(m)
            print(f"{case['case']}: throttled {throttled}, truly below {truly}, called {called}, both {both}, "
                  f"timer hits {m['traced_timer_hits']:.0f} of {m['sampled_periods']:.0f} sampled")  # fmt: skip
            assert_agrees_with_truth(m, case["case"], 0.2, 3, 2)


def guest_bundle(kernel_key: str, tmp_path: Path, *args: str) -> Path:
    scen = tmp_path / "tiny.toml"
    scen.write_text(TINY.replace("duration_s = 1", "duration_s = 2"))
    out = tmp_path / "b"
    res = bwlab("bundle", str(scen), "--ncpu", "2", "--kernel", kernel_key, "-o", str(out), *args, timeout=600)
    assert res.returncode == 0, res.stderr
    return out


@pytest.mark.untimed
def test_a_guest_bundle_runs_in_a_root_of_busybox_alone(kernel_key: str, tmp_path: Path) -> None:
    """Portability of guests: in a root of busybox alone, the bundle's own QEMU (its loader,
    libraries, TCG module and firmware) boots the kernel, and the records ingest into results
    of the same shape as `bwlab run --target guest`'s, on the same accelerator."""
    out = guest_bundle(kernel_key, tmp_path)
    assert (tmp_path / "b.tar.xz").stat().st_size < 60 * 2**20  # one kernel; two: docs/results.md
    root = tmp_path / "root"
    # started in a cpu group without RT runtime (CONFIG_RT_GROUP_SCHED: a new group's
    # cpu.rt_runtime_us is 0), as on the borrowed 16-core machine: SCHED_FIFO is refused there,
    # so QEMU must run from the root group to get the punctual timers the lab's guests have
    norr = Path("/sys/fs/cgroup/cpu") / f"bwlab-test-nort-{os.getpid()}"
    norr.mkdir()
    try:
        assert (norr / "cpu.rt_runtime_us").read_text().strip() == "0"
        res = run_in_busybox_root(root, out, f"echo $$ > /sys/fs/cgroup/cpu/{norr.name}/cgroup.procs && "
                                  "/bin/sh /b/run.sh /o", env={"BWLAB_ONLY": "guests"}, timeout=300)  # fmt: skip
        assert (norr / "cgroup.procs").read_text() == ""
    finally:
        norr.rmdir()
    assert res.returncode == 0, res.stderr
    assert "qemu_cgroup=the root group of /sys/fs/cgroup/cpu" in (root / "o/guest-0.txt").read_text()
    assert not pids_with(str(root)) and os.listdir(root / "tmp") == []
    assert not (root / "o/records-0.txt").exists()  # BWLAB_ONLY=guests: the host part did not run
    res = bwlab("ingest", str(root / "o"), "--out", str(tmp_path / "r"))
    assert res.returncode == 0, res.stderr
    (path,) = (tmp_path / "r").glob("tiny-guest-baseline*.json")
    got = results.load(path)
    res = bwlab("run", str(tmp_path / "tiny.toml"), "--target", "guest", "--kernel", kernel_key, "--out",
                str(tmp_path / "g"), timeout=600)  # fmt: skip
    assert res.returncode == 0, res.stderr
    (path,) = (tmp_path / "g").glob("tiny-guest-baseline*.json")
    ran = results.load(path)
    assert got.status == ran.status == "ok"
    for key in ("vcpus", "hz", "kernel_release", "kernel_key", "guest_ncpu", "accel", "qemu_timer_thread"):
        assert got.meta.get(key) == ran.meta.get(key), key
    assert got.meta.get("kernel_release", "").startswith("7.3.4") and got.meta.get("splats") == []
    assert [c.case for c in got.cases] == [c.case for c in ran.cases]
    for g, r in zip(got.cases, ran.cases, strict=True):
        assert g.settings == r.settings
        assert sorted(g.reps[0].metrics) == sorted(r.reps[0].metrics), g.case
    # the case ran under its quota: a check that it ran, not of how long. This test runs in the
    # parallel run, where the other worker's load takes a TCG guest's count of 10 ms periods in
    # 2 s from ~200 down (148 in the CI of 5b519d9); the guest's periods under load-free timing
    # are test_guest_throttles_at_10ms_with_clean_console's (docs/testing.md, guest bundle)
    print(f"guest bundle: {got.cases[1].reps[0].metrics['nr_periods']:.0f} periods in the 2 s case at 10 ms")
    assert got.cases[1].reps[0].metrics["nr_periods"] > 0


@pytest.mark.untimed
def test_an_interrupted_guest_bundle_leaves_nothing(kernel_key: str, tmp_path: Path) -> None:
    out = guest_bundle(kernel_key, tmp_path, "--duration", "30")
    proc = subprocess.Popen(["sh", str(out / "run.sh"), str(tmp_path / "o")], stderr=subprocess.PIPE,
                            env={**os.environ, "BWLAB_ONLY": "guests"}, start_new_session=True)  # fmt: skip
    qemu_in = str(out / "guest/qemu")
    rc, err = interrupt_when(proc, lambda: bool(pids_with(qemu_in)), "the bundle's QEMU never started", 60, 3)
    assert rc == 130, err
    assert "interrupted" in err
    assert not pids_with(qemu_in) and not pids_with(str(out))
    run_dir = next(x for x in (tmp_path / "o/probe.txt").read_text().splitlines() if x.startswith("dir="))[4:]
    assert run_dir.startswith("/tmp/bwlab-") and not Path(run_dir).exists()
