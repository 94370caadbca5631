from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bwlab.errors import BwlabError
from bwlab.kernel import kselftest

TAP = """TAP version 13
1..4
ok 1 test_cpucg_subtree_control
[FAIL] actual=1 expected=2
not ok 2 test_cpucg_max
ok 3 # SKIP test_cpucg_weight_underprovisioned
# 3 of 200 periods throttled
ok 4 test_cpucg_max_demand_equals_quota
# Totals: pass:2 fail:1 xfail:0 xpass:0 skip:1 error:0
"""


def test_parse_tap() -> None:
    tests = kselftest.parse_tap(TAP)
    assert [(t.number, t.name, t.status) for t in tests] == [
        (1, "test_cpucg_subtree_control", "pass"),
        (2, "test_cpucg_max", "fail"),
        (3, "test_cpucg_weight_underprovisioned", "skip"),
        (4, "test_cpucg_max_demand_equals_quota", "pass"),
    ]
    assert kselftest.parse_tap("no tap here\n") == []


def test_printed_by_test_gives_each_test_the_diagnostics_before_its_tap_line() -> None:
    printed = kselftest.printed_by_test(TAP)
    assert printed == {
        "test_cpucg_subtree_control": [],
        "test_cpucg_max": [],  # its [FAIL] line is no "# " diagnostic
        "test_cpucg_weight_underprovisioned": [],
        "test_cpucg_max_demand_equals_quota": ["3 of 200 periods throttled"],
    }


def test_plan_sends_rc_and_output_on_the_results_channel() -> None:
    plan = kselftest.plan([])
    assert "/bin/test_cpu > /tmp/out 2>&1" in plan
    assert plan.index("BWLAB-BEGIN 0 0") < plan.index("BWLAB-SECTION rc") < plan.index("BWLAB-END 0 0")


def run_plan(tmp_path: Path, cgroup_mode: str | None) -> str:
    """The plan run by sh with a fake test_cpu; what it sends on fd 3."""
    (tmp_path / "test_cpu").write_text("#!/bin/sh\necho 'ok 1 test_cpucg_fake'\n")
    (tmp_path / "test_cpu").chmod(0o755)
    text = kselftest.plan([], bin_dir=str(tmp_path), tmp_dir=str(tmp_path), cgroup_mode=cgroup_mode)
    proc = subprocess.run(["sh", "-c", f"exec 3>{tmp_path}/records; {text}"], capture_output=True, text=True,
                          timeout=30, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return (tmp_path / "records").read_text()


def test_plan_runs_test_cpu(tmp_path: Path) -> None:
    records = run_plan(tmp_path, None)
    assert "BWLAB-SECTION rc\n0\n" in records and "ok 1 test_cpucg_fake" in records


def test_plan_with_a_cgroup_mode_the_kernel_lacks_runs_nothing_and_says_why(tmp_path: Path) -> None:
    if Path(kselftest.CGROUP_MODE_FILE).exists():
        pytest.skip("this kernel has sched/cgroup_mode (the guest tests use it)")
    records = run_plan(tmp_path, "smp")
    assert "BWLAB-SECTION rc\n125\n" in records and "ok 1" not in records
    assert f"BWLAB-SECTION stdout\n{kselftest.SETUP_FAILED}cannot set {kselftest.CGROUP_MODE_FILE} to smp" in records
    stdout = records.split("BWLAB-SECTION stdout\n", 1)[1].split("BWLAB-END", 1)[0]
    why = f"cannot set {kselftest.CGROUP_MODE_FILE} to smp: the kernel has no such file or mode"
    assert kselftest.setup_failure(stdout) == why


def test_a_test_run_is_no_setup_failure(tmp_path: Path) -> None:
    stdout = run_plan(tmp_path, None).split("BWLAB-SECTION stdout\n", 1)[1]
    assert kselftest.setup_failure(stdout) is None


def test_plan_sets_the_cgroup_mode_around_test_cpu_and_puts_the_old_one_back() -> None:
    plan = kselftest.plan([], cgroup_mode="smp")
    assert plan.index("echo smp > /sys/kernel/debug/sched/cgroup_mode") < plan.index("/bin/test_cpu >")
    assert plan.index("/bin/test_cpu >") < plan.index("echo $OLD > /sys/kernel/debug/sched/cgroup_mode")
    with pytest.raises(BwlabError, match="unknown cgroup mode 'fast'"):
        kselftest.plan([], cgroup_mode="fast")


# test_cpu.c's shape where TEST_CPU_ONLY meets it: a static tests[] of T(fn) entries, the
# kselftest TAP calls and cgroup_util's root lookup (here: stubs that print).
FAKE_TEST_CPU = r"""
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cgroup_util.h"
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define KSFT_PASS 0
#define KSFT_FAIL 1
#define KSFT_SKIP 4
static int done;
#define ksft_print_header() printf("TAP version 13\n")
#define ksft_set_plan(n) printf("1..%zu\n", (size_t)(n))
#define ksft_exit_skip(why) exit(4)
#define ksft_test_result_pass(fmt, name) printf("ok %d " fmt, ++done, name)
#define ksft_test_result_skip(fmt, name) printf("ok %d # SKIP " fmt, ++done, name)
#define ksft_test_result_fail(fmt, name) printf("not ok %d " fmt, ++done, name)
#define ksft_finished() exit(0)
static int cg_find_unified_root(char *root, size_t len, bool *nsdelegate)
{ (void)nsdelegate; snprintf(root, len, "/"); return cg_util(); }
static int cg_read_strstr(const char *a, const char *b, const char *c) { (void)a; (void)b; (void)c; return 0; }
static int cg_write(const char *a, const char *b, const char *c) { (void)a; (void)b; (void)c; return 0; }
static int test_a(const char *root) { (void)root; return KSFT_PASS; }
static int test_b(const char *root) { (void)root; return KSFT_FAIL; }
static int test_c(const char *root) { (void)root; return KSFT_SKIP; }
#define T(x) { x, #x }
struct cpucg_test { int (*fn)(const char *root); const char *name; } tests[] = {
	T(test_a),
	T(test_b),
	T(test_c),
};
#undef T
int main(int argc, char *argv[]) { (void)argc; (void)argv; printf("all %zu\n", ARRAY_SIZE(tests)); BODY }
"""


def fake_selftest_tree(root: Path, body: str = "return 0;") -> Path:
    sel = root / kselftest.SELFTEST_DIR
    (sel / "lib" / "include").mkdir(parents=True)
    (sel / "lib" / "include" / "cgroup_util.h").write_text("int cg_util(void);\n")
    (sel / "lib" / "cgroup_util.c").write_text('#include "cgroup_util.h"\nint cg_util(void) { return 0; }\n')
    (sel / "test_cpu.c").write_text(FAKE_TEST_CPU.replace("BODY", body))
    return root


def test_build_test_cpu_static_and_cached(tmp_path: Path, empty_cache: Path) -> None:
    tree = fake_selftest_tree(tmp_path / "linux")
    binary = kselftest.build_test_cpu(tree)
    assert binary.is_file() and binary.is_relative_to(empty_cache)
    assert kselftest.build_test_cpu(tree) == binary  # same sources: cached
    test_cpu = tree / kselftest.SELFTEST_DIR / "test_cpu.c"
    test_cpu.write_text(test_cpu.read_text().replace("return 0; }", "return 1; }"))
    assert kselftest.build_test_cpu(tree) != binary  # changed sources: rebuilt


def test_only_the_named_tests_run_in_test_cpus_order(tmp_path: Path, empty_cache: Path) -> None:
    """TEST_CPU_ONLY around a test_cpu.c of test_cpu's shape: no names is test_cpu itself; names
    run those tests alone, in the table's order, once each, as TAP; an unknown name is exit 2
    and one line before any test runs, and `--only` of it is a one-line BwlabError."""
    binary = kselftest.build_test_cpu(fake_selftest_tree(tmp_path / "linux"))
    assert kselftest.names_of(binary) == ["test_a", "test_b", "test_c"]

    def run(*names: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(binary), *names], capture_output=True, text=True, check=False)

    assert run().stdout == "all 3\n"
    chosen = run("test_c", "test_a", "test_c")
    assert chosen.returncode == 0 and chosen.stdout == "TAP version 13\n1..2\nok 1 test_a\nok 2 # SKIP test_c\n"
    assert [(t.name, t.status) for t in kselftest.parse_tap(chosen.stdout)] == [("test_a", "pass"), ("test_c", "skip")]
    assert run("test_b").stdout.endswith("not ok 1 test_b\n")
    unknown = run("test_a", "test_z")
    assert unknown.returncode == 2 and unknown.stdout == "" and unknown.stderr == "test_cpu: no test test_z\n"
    assert kselftest.only_arguments(binary, ["test_c", "test_a", "test_c"]) == ["test_c", "test_a"]
    assert kselftest.only_arguments(binary, []) == []
    unknown_only = r"^--only test_z: test_cpu has no such test \(it has test_a, test_b, test_c\)$"
    with pytest.raises(BwlabError, match=unknown_only):
        kselftest.only_arguments(binary, ["test_z"])


def test_build_test_cpu_errors(tmp_path: Path, empty_cache: Path) -> None:
    with pytest.raises(BwlabError, match="no such file"):
        kselftest.build_test_cpu(tmp_path)
    tree = fake_selftest_tree(tmp_path / "linux", body="this is not C")
    with pytest.raises(BwlabError, match="building test_cpu failed"):
        kselftest.build_test_cpu(tree)
    (tree / kselftest.SELFTEST_DIR / "test_cpu.c").write_text("int main(void) { return 0; }\n")
    with pytest.raises(BwlabError, match=r"test_cpu\.c: no tests\[\] table of T\(test_\.\.\.\) entries$"):
        kselftest.build_test_cpu(tree)
