"""The kernel series on a real 7.3.4 tree: it applies with git am, passes checkpatch, and a
patched kernel booted under QEMU TCG behaves as the series claims (A/B in the same run)."""

from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bwlab.kernel import build as kernel_build
from bwlab.kernel import export, kselftest
from bwlab.kernel import source as kernel_source
from bwlab.paths import (
    DEFAULT_SERIES,
    LAGS_SERIES,
    LOCKFREE_SERIES,
    POSTED_SERIES,
    SCENARIO_DIR,
    SLUSH_SERIES,
    cache_root,
)

from conftest import DATA, bwlab, cmdlines_working_in

pytestmark = pytest.mark.guest

SERIES = kernel_build.read_series(DEFAULT_SERIES)  # what the lab builds: all below + the lab's two
POSTED = kernel_build.read_series(POSTED_SERIES)
LAGS = kernel_build.read_series(LAGS_SERIES)
SLUSH = kernel_build.read_series(SLUSH_SERIES)
LOCKFREE = kernel_build.read_series(LOCKFREE_SERIES)


@pytest.fixture(scope="module")
def source() -> kernel_source.KernelSource:
    fetch = bwlab("kernel", "fetch", timeout=1800)
    assert fetch.returncode == 0, fetch.stderr
    src = kernel_source.cached_source()
    assert src is not None
    return src


@pytest.fixture(scope="module")
def baseline_key(source: kernel_source.KernelSource) -> str:
    build = bwlab("kernel", "build", "--baseline", timeout=3600)
    assert build.returncode == 0, build.stderr[-2000:]
    return build.stdout.split()[0]


@pytest.fixture(scope="module")
def patched_key(baseline_key: str) -> str:
    """Built after the baseline, so that a fresh cache builds it from the baseline's objects
    (test_patched_build_starts_from_the_baseline_objects)."""
    build = bwlab("kernel", "build", timeout=3600)
    assert build.returncode == 0, build.stderr[-2000:]
    return build.stdout.split()[0]


@pytest.mark.untimed
def test_series_is_non_empty_and_documented() -> None:
    assert len(POSTED.patches) >= 6
    cover = POSTED_SERIES.parent / "0000-cover-letter.patch"
    assert cover.is_file() and "\nbase-commit: " in cover.read_text()
    assert "*** SUBJECT HERE ***" not in cover.read_text() and "table2" in cover.read_text()
    assert len(cover.read_text().split("\n---\n", 1)[0].splitlines()) <= 120
    for patch in SERIES.patches:
        text = patch.read_text()
        assert "Signed-off-by:" in text, patch.name


@pytest.mark.untimed
def test_posted_series_has_no_switches_and_the_lab_patch_adds_every_one() -> None:
    """The posted patches, LAGS, the slush fund and the lock-free RFC carry no sched_feat; each
    series starts with the one it was written on (LAGS, its own series on v7.3.4, rebased on the
    bandwidth series in kernel/lab/lags/ for the lab), and the lab's series is the last of them,
    lockfree, plus the lab's own patches on top: the first introduces every switch a policy
    writes, the second the late period timer of the lost-refill scenario (its sysctl)."""
    from bwlab.kernel import policies

    for patch in LOCKFREE.patches + LAGS.patches:
        assert "SCHED_FEAT(" not in patch.read_text() and "sched_feat(" not in patch.read_text(), patch.name
    assert all(p.parent == LAGS_SERIES.parent for p in LAGS.patches)
    lab_lags = SLUSH.patches[len(POSTED.patches) : -1]
    assert [p.name for p in lab_lags] == [p.name for p in LAGS.patches]
    assert all(p.parent.name == "lags" and p.parent.parent.name == "lab" for p in lab_lags)
    assert SLUSH.patches[: len(POSTED.patches)] == POSTED.patches
    assert LOCKFREE.patches[: len(SLUSH.patches)] == SLUSH.patches
    assert len(LOCKFREE.patches) == len(SLUSH.patches) + 1
    assert SERIES.patches[: len(LOCKFREE.patches)] == LOCKFREE.patches
    lab, late_timer = SERIES.patches[len(LOCKFREE.patches) :]
    for feat in policies.FEATURES:  # on by default but the paper's slush fund
        assert f"\n+SCHED_FEAT({feat}, {str(feat != 'BW_SLUSH').lower()})" in lab.read_text(), feat
    assert '"sched_bwlab_period_timer_delay_us"' in late_timer.read_text()


@pytest.mark.untimed
def test_series_applies_with_git_am(source: kernel_source.KernelSource, tmp_path: Path) -> None:
    """git am onto the pristine files the series touches (a sparse copy of the 7.3.4 tree)."""
    repo = tmp_path / "linux"
    touched = set().union(*(kernel_build.patched_files(p) for p in SERIES.patches))
    for rel in touched:
        if not (source.path / rel).is_file():  # a file the series creates (0006's settings)
            continue
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source.path / rel, repo / rel)

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
               "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}  # fmt: skip
        return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, env=env, check=False)

    assert git("init", "-q").returncode == 0
    assert git("add", "-A").returncode == 0
    assert git("commit", "-qm", "v7.3.4").returncode == 0
    am = git("am", "-q", *map(str, SERIES.patches))
    assert am.returncode == 0, am.stderr
    assert len(git("log", "--oneline").stdout.splitlines()) == len(SERIES.patches) + 1


@pytest.mark.untimed
def test_checkpatch_strict_is_clean(source: kernel_source.KernelSource) -> None:
    checkpatch = source.path / "scripts" / "checkpatch.pl"
    maintainers = (source.path / "MAINTAINERS").read_text(errors="replace")
    for patch in (*SERIES.patches, *LAGS.patches):  # LAGS' own series on v7.3.4 too
        # the source is a release tarball without history, so a Fixes: id cannot be looked up;
        # "does MAINTAINERS need updating?" only where an entry covers the new file (export's rule)
        ignore = export.checkpatch_ignore(patch.read_text(), maintainers)
        proc = subprocess.run(["perl", str(checkpatch), "--strict", "--no-tree", "--quiet",
                               "--ignore", ignore, str(patch)],
                              cwd=source.path, capture_output=True, text=True, check=False)  # fmt: skip
        assert proc.returncode == 0, f"{patch.name}:\n{proc.stdout[-3000:]}"


def _guest(kernel: str, scenario: Path, out: Path, policy: str | None) -> dict:  # type: ignore[type-arg]
    args = ["run", str(scenario), "--target", "guest", "--kernel", kernel, "--out", str(out)]
    if policy:
        args += ["--policy", policy]
    proc = bwlab(*args, timeout=900)
    assert proc.returncode == 0, proc.stderr
    label = f"guest-patched-{policy}" if policy else "guest-baseline"
    doc = json.loads((out / f"{scenario.stem}-{label}.json").read_text())
    assert doc["status"] == "ok" and doc["meta"]["splats"] == []
    return doc


def test_policies_switch_the_fixes(patched_key: str, tmp_path: Path) -> None:
    """One patched kernel: all fixes on vs all off (mainline) at a 10 ms period, demand == quota."""
    scenario = DATA / "table2-10ms.toml"
    on = _guest(patched_key, scenario, tmp_path, "all")
    off = _guest(patched_key, scenario, tmp_path, "mainline")
    from bwlab.kernel import policies

    # every switch read back as the policy set it: the posted series' on, the slush fund off
    assert on["meta"]["sched_features"] == {f: f != "BW_SLUSH" for f in policies.FEATURES}
    assert not any(off["meta"]["sched_features"].values()) and len(off["meta"]["sched_features"]) == 6
    on_pct = on["cases"][0]["reps"][0]["metrics"]["throttled_pct"]
    off_pct = off["cases"][0]["reps"][0]["metrics"]["throttled_pct"]
    print(f"policies: throttled {off_pct:.1f} % off (mainline), {on_pct:.1f} % on (all)")
    assert off_pct > 20  # mainline behaviour: ~50 %
    # the posted series (v2: no slush fund): 0-2.3 % in 20 runs, 3.4 and 5.8 once each;
    # v1's "all" (the slush fund on) 0-0.3 % (docs/testing.md)
    assert on_pct < 10 and on_pct < off_pct / 5


def test_a_quota_set_to_max_and_back_loses_no_refill(patched_key: str, tmp_path: Path) -> None:
    """Issue 34's lost refill: the lost-refill scenario (quotaflip: a busy thread per CPU; the
    quota a little under what they use, then max, then 1.25 x what they use, again and again;
    the lab's sysctl holding each period timer 4 ms before its refill) throttles after no
    return. The first series throttled after a share of them (docs/testing.md, lost refill)."""
    doc = _guest(patched_key, SCENARIO_DIR / "lost-refill.toml", tmp_path, "all")
    metrics = doc["cases"][0]["reps"][0]["metrics"]
    print(f"lost refill: throttled after {metrics['throttled_after']:.0f} of {metrics['flips']:.0f} returns")
    assert metrics["flips"] >= 30
    # v1's lost refill: 3-12 returns of ~150 a 20 s run; the posted series 0 of 4553 in 40 runs
    # (2026-11-27), then 1 in CI and 0-4 a run in 20 right after it (2026-11-28, cause not
    # proven): at most 5 % of returns (docs/testing.md). Separates only v1's worst runs now.
    assert metrics["throttled_after"] <= 0.05 * metrics["flips"]


def test_identical_rewrites_hand_out_nothing(patched_key: str, tmp_path: Path) -> None:
    """demand == 2 x quota, cpu.max rewritten every 50 ms: usage stays at the quota with no-op
    updates and exceeds it without them."""
    scenario = DATA / "rewrite-2x.toml"
    on = _guest(patched_key, scenario, tmp_path, "all")["cases"][0]["reps"][0]["metrics"]
    off = _guest(patched_key, scenario, tmp_path, "mainline")["cases"][0]["reps"][0]["metrics"]
    assert on["rewrites"] > 50 and off["rewrites"] > 50 and on["rewrite_errors"] == 0
    assert on["usage_per_quota"] <= 1.02
    assert off["usage_per_quota"] > on["usage_per_quota"] + 0.03


class Selftests(dict[str, str]):
    """test_cpu's results by test name (pass, fail, skip), and what each test printed."""

    def __init__(self, doc: dict[str, Any]) -> None:
        super().__init__({t["name"]: t["status"] for t in doc["tests"]})
        self.said = {name: " ".join(lines) for name, lines in kselftest.printed_by_test(doc["output"]).items()}

    def why(self, name: str) -> str:
        return f"{name}: {self.get(name)} ({self.said.get(name, 'printed nothing')})"


def _kselftest(kernel: str, out: Path, *args: str) -> Selftests:
    proc = bwlab("kselftest", "--kernel", kernel, "--out", str(out), "--expect-fail", *args, timeout=900)
    assert proc.returncode == 0, proc.stderr
    (doc_path,) = out.glob("kselftest-*.json")
    doc = json.loads(doc_path.read_text())
    assert doc["meta"]["splats"] == []
    assert doc["meta"]["cgroup_mode"] == (args[1] if args[:1] == ("--cgroup-mode",) else None)
    chosen = [a for flag, a in itertools.pairwise(args) if flag == "--only"]
    assert sorted(t["name"] for t in doc["tests"]) == sorted(chosen)  # those, and only those, ran
    return Selftests(doc)


def only(*names: str) -> tuple[str, ...]:
    return tuple(arg for name in names for arg in ("--only", name))


def _usage(tests: Selftests, name: str) -> int:
    """The usage (us) a max_kernel_time test printed."""
    match = re.search(r"usage (\d+) usec of a quota", tests.said.get(name, ""))
    assert match, tests.why(name)
    return int(match.group(1))


@pytest.mark.untimed  # the files' rules, no share or time in it
def test_lags_alone_on_v7_3_4_builds_and_its_files_work(baseline_key: str, tmp_path: Path) -> None:
    """LAGS' own series (nothing of the bandwidth series under it) builds on v7.3.4, from the
    baseline's objects, and its cgroup interface works in a guest: the files test of test_cpu
    (built, as every kselftest here, from the lab's series, whose LAGS tests are kernel/lags/
    0003's lines: test_kernel_export.py::test_the_lab_kernels_lags_is_the_posted_lags_rebased).
    Its timed tests (credit, fair shares) run on the lab kernel."""
    build = bwlab("kernel", "build", "--series", str(LAGS_SERIES), timeout=3600)
    assert build.returncode == 0, build.stderr[-2000:]
    tests = _kselftest(build.stdout.split()[0], tmp_path, *only("test_cpucg_latency_awareness_files"))
    assert tests["test_cpucg_latency_awareness_files"] == "pass", tests.why("test_cpucg_latency_awareness_files")


def test_kselftests_fail_on_baseline_and_pass_on_patched(baseline_key: str, patched_key: str,
                                                         tmp_path: Path) -> None:  # fmt: skip
    # 7.3's default sched/cgroup_mode (concur) weighs a group by its runnable tasks, which
    # upstream's nested_weight_overprovisioned does not expect (docs/series.md): it fails there
    # on 7.3.4 and passes under smp, where the patched kernel runs. (7.3.4 stays in its default:
    # under smp its kernel_time loss came out at 89.8 and 93.2 % of the quota, around the
    # test's 90 %, against 78.8 % in the default.)
    names = ("test_cpucg_max_demand_equals_quota", "test_cpucg_max_rewrite", "test_cpucg_max_kernel_time")
    bound = ("test_cpucg_max_overdelivery",)  # the per-period bound: holds patched (and on 7.3.4)
    lags = ("test_cpucg_latency_awareness_files", "test_cpucg_load_credit", "test_cpucg_latency_awareness_fair_share",
            "test_cpucg_latency_awareness_fair_share_bursty")  # fmt: skip
    nested = "test_cpucg_nested_weight_overprovisioned"
    # Only the tests asserted below run (--only): the weight tests not asserted hog the CPUs for
    # 10 s each, and upstream's max and max_nested fail under TCG on both kernels (docs/testing.md)
    base = _kselftest(baseline_key, tmp_path / "base", *only(*names, *lags))
    smp = ("--cgroup-mode", "smp", *only("test_cpucg_subtree_control", nested, *names, *bound, *lags))
    patched = _kselftest(patched_key, tmp_path / "patched", *smp)
    # One boot of each kernel, asserted as it came (no second boot on failure): 20 patched boots
    # of this selection in a row passed every test (docs/testing.md, test_series_real
    # kselftests; benchmarks/kselftest_boots.sh). What each test printed, for a failure's reader:
    for name in (*names, *bound, *lags, nested):
        print(f"kselftest patched {patched.why(name)}; 7.3.4 {base.why(name) if name in base else '-'}")
    for name in names:
        assert patched[name] == "pass", patched.why(name)
        if name != "test_cpucg_max_kernel_time":
            assert base[name] == "fail", base.why(name)
    # v7.3.4 loses a varying part of the quota to aborted unthrottles (82.4, 90.1 and 96.2 % in
    # three boots on 2026-11-24; 78.8-93.2 % before): its test passes in some boots, the CI run
    # of 7ce01a1 among them (docs/series.md). Asserted: it ran less of its quota than the series.
    kernel_time = "test_cpucg_max_kernel_time"
    assert _usage(base, kernel_time) < _usage(patched, kernel_time), (base.why(kernel_time), patched.why(kernel_time))
    for name in lags:  # latency-aware groups: absent on 7.3.4 (the tests skip), working patched
        assert base[name] == "skip", base.why(name)
        assert patched[name] == "pass", patched.why(name)
    assert patched["test_cpucg_subtree_control"] == "pass"
    # Asserted under the series in smp only. 7.3.4 in its default mode failed it in every boot on
    # the lab's machine (the top leaf at 0.33 of the CPU against 0.5 +- 15 %: docs/series.md) but
    # passed once in CI (2026-11-25, run of 1f172fe): concur's split follows PELT's runnable
    # estimate, which a busy machine moves, so its result there says nothing either way and is
    # not asserted (an assertion of "pass or fail" could not fail; docs/testing.md).
    assert patched[nested] == "pass", patched.why(nested)
    assert patched["test_cpucg_max_overdelivery"] == "pass", patched.why("test_cpucg_max_overdelivery")


@pytest.mark.untimed
def test_lags_exports_as_its_own_series_on_v7_3_4(source: kernel_source.KernelSource, tmp_path: Path) -> None:
    """LAGS is posted as its own series on v7.3.4 alone: its 3 patches and cover letter,
    base-commit v7.3.4, no prerequisite (nothing of the bandwidth series under it); `git am` of
    them on v7.3.4 gives the exported tree."""
    config = tmp_path / "gitconfig"
    config.write_text("[user]\n\tname = Ada Lovelace\n\temail = ada@example.org\n")
    env = {"GIT_CONFIG_GLOBAL": str(config), "GIT_CONFIG_NOSYSTEM": "1"}
    out, tree = tmp_path / "out", tmp_path / "linux"
    proc = bwlab("kernel", "export", str(out), "--series", str(LAGS_SERIES), "--keep-tree", str(tree), env=env,
                 timeout=1800)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    own = len(LAGS.patches)
    assert own == 3 and "prerequisite" not in proc.stdout
    files = sorted(out.glob("*.patch"))
    assert len(files) == own + 1
    cover = files[0].read_text()
    assert f"Subject: [RFC PATCH 0/{own}] " in cover and "*** " not in cover
    assert "\nbase-commit: b68665838251cfaba94c4e611c3093150d6aec4a\n" in cover
    assert "prerequisite-patch-id" not in cover

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", *args], cwd=tree, capture_output=True, text=True, check=False,
                              env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **env})  # fmt: skip

    assert git("checkout", "-q", "-b", "check", "v7.3.4").returncode == 0
    am = git("am", "-q", *map(str, files[1:]))
    assert am.returncode == 0, am.stderr
    assert git("diff", "--quiet", "bwlab", "check").returncode == 0


@pytest.mark.untimed
def test_git_tree_reproduces_base_commit(source: kernel_source.KernelSource, tmp_path: Path) -> None:
    """`bwlab kernel git` recreates the series' base-commit and applies it with git am."""
    proc = bwlab("kernel", "git", str(tmp_path / "linux"), timeout=1800)
    assert proc.returncode == 0, proc.stderr
    base = proc.stdout.split()[1]
    assert f"\nbase-commit: {base}\n" in (POSTED_SERIES.parent / "0000-cover-letter.patch").read_text()
    log = subprocess.run(["git", "log", "--format=%s", f"v{source.version}..bwlab"], cwd=tmp_path / "linux",
                         capture_output=True, text=True, check=True).stdout.splitlines()  # fmt: skip
    assert len(log) == len(SERIES.patches)
    # nothing keeps working in the tree after the command (git am's automatic gc ran in it)
    left = cmdlines_working_in(tmp_path / "linux")
    assert not left, left
    again = bwlab("kernel", "git", str(tmp_path / "linux"))
    assert again.returncode == 1 and "already exists" in again.stderr


def kernel_objects_compiled(build_log: str) -> set[str]:
    """The objects of the kernel tree that a build's log says it compiled (kbuild's `  CC`
    lines; the host tool objtool, built under an absolute output path, left out)."""
    lines = (line.split() for line in build_log.splitlines())
    return {f[1] for f in lines if len(f) == 2 and f[0] == "CC" and not f[1].startswith("/")}


def test_patched_build_starts_from_the_baseline_objects(baseline_key: str, patched_key: str) -> None:
    """The run's own kernels (the cache this suite builds in, baseline first): the baseline
    from scratch, the patched kernel from the baseline's objects (same .config), compiling only
    what the series' files reach (not a timing bound: a count of the objects each build's log
    says it compiled, the host tools' objtool left out); the cache key does not depend on how it
    was built (the key is the one a from-scratch build gives: kernel/build.py keys by source,
    series and config only). That the incrementally built kernel runs the series is
    test_policies_switch_the_fixes, which boots it.
    A cache whose patched kernel was built before its baseline fails here: `bwlab kernel clean
    --all` and build again."""
    kernels = cache_root() / "kernels"
    base_meta = json.loads((kernels / baseline_key / "meta.json").read_text())
    meta = json.loads((kernels / patched_key / "meta.json").read_text())
    assert base_meta["incremental_from"] == "" and meta["incremental_from"] == baseline_key, meta
    compiled = {key: kernel_objects_compiled((kernels / key / "build.log").read_text())
                for key in (baseline_key, patched_key)}  # fmt: skip
    print(
        f"patched build: {len(compiled[patched_key])} of the baseline's {len(compiled[baseline_key])} objects"
        f" compiled again, {meta['build_seconds']:.0f} s against {base_meta['build_seconds']:.0f} s"
    )
    assert "kernel/sched/fair.o" in compiled[patched_key], sorted(compiled[patched_key])  # the series is in fair.c
    assert len(compiled[patched_key]) <= 0.05 * len(compiled[baseline_key]), sorted(compiled[patched_key])
    assert "incremental build from" in (kernels / patched_key / "build.log").read_text()
    assert (kernels / patched_key / "config").read_text() == (kernels / baseline_key / "config").read_text()


@pytest.mark.untimed
def test_export_is_format_patch_output_in_the_users_name_that_applies_on_the_base_commit(
    source: kernel_source.KernelSource, tmp_path: Path
) -> None:
    """`bwlab kernel export`: the posted series in the user's git identity, with cover letter,
    base-commit and To/Cc, checkpatch-clean; `git am` of it onto the recreated base commit gives
    the tree the series gives."""
    config = tmp_path / "gitconfig"
    config.write_text("[user]\n\tname = Ada Lovelace\n\temail = ada@example.org\n")
    env = {"GIT_CONFIG_GLOBAL": str(config), "GIT_CONFIG_NOSYSTEM": "1"}
    out, tree = tmp_path / "out", tmp_path / "linux"
    proc = bwlab("kernel", "export", str(out), "--keep-tree", str(tree), env=env, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "patches clean" in proc.stdout
    files = sorted(out.glob("*.patch"))
    assert len(files) == len(POSTED.patches) + 1 and files[0].name == "0000-cover-letter.patch"
    cover = files[0].read_text()
    assert "\nbase-commit: b68665838251cfaba94c4e611c3093150d6aec4a\n" in cover
    assert f"Subject: [RFC PATCH v2 0/{len(POSTED.patches)}] " in cover and "*** " not in cover
    assert "Ada Lovelace (" in cover  # git's shortlog, by the user
    for f in files:
        text = f.read_text()
        assert "bwlab.invalid" not in text, f.name
        assert "From: Ada Lovelace <ada@example.org>" in text, f.name
        assert "peterz@infradead.org" in text and "linux-kernel@vger.kernel.org" in text, f.name
    for f in files[1:]:
        assert "Signed-off-by: Ada Lovelace <ada@example.org>" in f.read_text(), f.name

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", *args], cwd=tree, capture_output=True, text=True, check=False,
                              env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **env})  # fmt: skip

    assert git("checkout", "-q", "-b", "check", "b68665838251cfaba94c4e611c3093150d6aec4a").returncode == 0
    am = git("am", "-q", *map(str, files[1:]))
    assert am.returncode == 0, am.stderr
    assert git("diff", "--quiet", "bwlab", "check").returncode == 0
    assert len(git("log", "--oneline", "v7.3.4..check").stdout.splitlines()) == len(POSTED.patches)
    again = bwlab("kernel", "export", str(out), env=env)
    assert again.returncode == 1 and "not empty" in again.stderr and "Traceback" not in again.stderr
