"""The kernel's cgroup CPU selftest (tools/testing/selftests/cgroup/test_cpu), run in a guest.

test_cpu is built statically from a kernel tree with the series applied (so the series' own
tests are in it) and run by a target (QemuTarget.run_kselftest) on any kernel: the new tests
must fail on the baseline kernel and pass on the patched one; the upstream ones must pass on
both.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bwlab.choices import CGROUP_MODES
from bwlab.errors import BwlabError
from bwlab.kernel import build as kernel_build
from bwlab.kernel.build import Series
from bwlab.kernel.source import KernelSource
from bwlab.paths import DEFAULT_SERIES, TEST_CPU_ONLY, cache_root

SELFTEST_DIR = "tools/testing/selftests/cgroup"
NAMES_FILE = "tests"  # beside a built test_cpu: its tests' names, one a line
_TABLE_ENTRY = re.compile(r"^\s*T\((test_\w+)\),", re.MULTILINE)  # test_cpu.c's tests[] entries
TAP_LINE = re.compile(r"^(ok|not ok) (\d+) (?:- )?(# SKIP )?(\S+)(.*)$", re.IGNORECASE)


@dataclass(frozen=True)
class TestResult:
    number: int
    name: str
    status: str  # "pass", "fail", "skip"


def series_tree(source: KernelSource, series: Series) -> Path:
    """A hard-link copy of the source with the series applied, kept in the cache."""
    work = cache_root() / "kselftest" / f"tree-{source.version}-{series.source_digest}"
    src = work / "src"
    if (work / "ready").is_file():
        return src
    work.mkdir(parents=True, exist_ok=True)
    variant = kernel_build.Variant(source, series, kernel_build.default_fragments(), 250)
    kernel_build.prepare_tree(variant, work, work / "prepare.log")
    (work / "ready").write_text("ok\n")
    return src


def series_test_cpu(source: KernelSource) -> Path:
    """test_cpu built from `source` with the default series (and so its tests) applied."""
    return build_test_cpu(series_tree(source, kernel_build.read_series(DEFAULT_SERIES)))


def build_test_cpu(tree: Path) -> Path:
    """Compile test_cpu statically from `tree`, through TEST_CPU_ONLY (test_cpu that runs the
    tests its arguments name); cached by the sources' contents, with the names of its tests
    beside it (names_of)."""
    sel = tree / SELFTEST_DIR
    sources = [sel / "test_cpu.c", sel / "lib" / "cgroup_util.c"]
    for src in sources:
        if not src.is_file():
            raise BwlabError(f"{src}: no such file (is {tree} a kernel tree with selftests?)")
    names = _TABLE_ENTRY.findall(sources[0].read_text())
    if not names:
        raise BwlabError(f"{sources[0]}: no tests[] table of T(test_...) entries")
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in [TEST_CPU_ONLY, *sources])).hexdigest()[:12]
    out = cache_root() / "kselftest" / digest / "test_cpu"
    if out.is_file() and (out.parent / NAMES_FILE).is_file():
        return out
    if shutil.which("cc") is None:
        raise BwlabError("building test_cpu needs a C compiler (apt-get install build-essential)")
    out.parent.mkdir(parents=True, exist_ok=True)
    # -Wall as the selftests' Makefile builds test_cpu: its code is the kernel's, not ours
    cmd = ["cc", "-static", "-O2", "-Wall", "-pthread", f"-I{sel}", f"-I{sel / 'lib' / 'include'}",
           f"-I{tree / 'tools/testing/selftests'}", "-o", str(out), str(TEST_CPU_ONLY), str(sources[1])]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        first = (proc.stderr.strip().splitlines() or ["no output"])[0]
        raise BwlabError(f"building test_cpu failed: {first}")
    (out.parent / NAMES_FILE).write_text("".join(f"{n}\n" for n in names))
    return out


def names_of(test_cpu: Path) -> list[str]:
    """The tests a build_test_cpu binary has, in the order it runs them."""
    return (test_cpu.parent / NAMES_FILE).read_text().split()


def only_arguments(test_cpu: Path, only: list[str]) -> list[str]:
    """test_cpu's arguments for `only` (every test when empty): each name one it has."""
    names = names_of(test_cpu)
    unknown = [n for n in only if n not in names]
    if unknown:
        raise BwlabError(f"--only {unknown[0]}: test_cpu has no such test (it has {', '.join(names)})")
    return list(dict.fromkeys(only))


# 7.3's /sys/kernel/debug/sched/cgroup_mode: how a group's weight is split over CPUs ("concur",
# the default, scales it by min(runnable tasks, CPUs); "smp" is the classic split of tg->shares).
CGROUP_MODE_FILE = "/sys/kernel/debug/sched/cgroup_mode"
SETUP_FAILED = "bwlab: "  # how the plan's own failure starts the output


def plan(args: Sequence[str], bin_dir: str = "/bin", tmp_dir: str = "/tmp", cgroup_mode: str | None = None) -> str:
    """Plan shell: run test_cpu from `bin_dir`, send its TAP output and exit code as records
    on fd 3 (see targets/plan.py). With `cgroup_mode`, test_cpu runs with that
    /sys/kernel/debug/sched/cgroup_mode and the old one is put back after; a kernel without
    the file gets no test run and an output that starts with SETUP_FAILED."""
    argv = " ".join(shlex.quote(a) for a in [f"{bin_dir}/test_cpu", *args])
    run = [f"{argv} > {tmp_dir}/out 2>&1", "RC=$?"]
    if cgroup_mode is not None:
        if cgroup_mode not in CGROUP_MODES:
            raise BwlabError(f"unknown cgroup mode {cgroup_mode!r} (known: {', '.join(CGROUP_MODES)})")
        m = CGROUP_MODE_FILE
        run = [f"OLD=$(sed -n 's/.*(\\(.*\\)).*/\\1/p' {m} 2>/dev/null)",
               f"if [ -n \"$OLD\" ] && echo {cgroup_mode} > {m} 2>/dev/null; then",
               *(f"  {line}" for line in run),
               f"  echo $OLD > {m}",
               "else",
               f"  echo '{SETUP_FAILED}cannot set {m} to {cgroup_mode}: the kernel has no such file or mode' "
               f"> {tmp_dir}/out",
               "  RC=125",
               "fi"]  # fmt: skip
    return "\n".join([
        "set +e",
        *run,
        "echo 'BWLAB-BEGIN 0 0' >&3",
        "echo 'BWLAB-SECTION rc' >&3; echo $RC >&3",
        f"echo 'BWLAB-SECTION stdout' >&3; cat {tmp_dir}/out >&3",
        "echo 'BWLAB-END 0 0' >&3",
    ]) + "\n"  # fmt: skip


def setup_failure(stdout: str) -> str | None:
    """Why the plan itself failed (no test ran), from its output; None if it did not."""
    if not stdout.startswith(SETUP_FAILED):
        return None
    return stdout.strip().splitlines()[0].removeprefix(SETUP_FAILED)


def printed_by_test(text: str) -> dict[str, list[str]]:
    """What each test printed (its "# " diagnostic lines, ksft_print_msg's) before its TAP line,
    by test name."""
    printed: dict[str, list[str]] = {}
    lines: list[str] = []
    for line in text.splitlines():
        match = TAP_LINE.match(line.strip())
        if match:
            printed[match.group(4)], lines = lines, []
        elif line.startswith("# "):
            lines.append(line[2:].strip())
    return printed


def parse_tap(text: str) -> list[TestResult]:
    tests = []
    for line in text.splitlines():
        match = TAP_LINE.match(line.strip())
        if match:
            ok, number, skip, name, rest = match.groups()
            skipped = skip is not None or "# SKIP" in rest.upper()
            status = "skip" if skipped else ("pass" if ok == "ok" else "fail")
            tests.append(TestResult(int(number), name, status))
    return tests
