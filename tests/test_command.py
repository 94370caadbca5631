"""kind = "command": the user's own program under a scenario, on the host and in a guest.

Contract: argv[0] is one of `files` (carried to the target) or a program there; every
repetition has the exit status, elapsed time and cpu.stat deltas; `metrics = "json-last-line"`
adds the numbers of the last output line's JSON object and its samples_us; a non-zero exit
fails the repetition unless check_exit = false.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from bwlab import scenario
from bwlab.errors import BwlabError
from bwlab.workloads import command
from bwlab.workloads.base import Resolved

from conftest import bwlab, needs_root, tool_or_skip

# Spins on one thread for the given milliseconds of wall time, printing how many loops it
# made and one "latency" sample per 100 ms; exits with the status given as argv[2].
SPIN_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static long ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}
int main(int argc, char **argv) {
	long run = argc > 1 ? atol(argv[1]) : 1000, start = ms(), loops = 0, next = 100;
	int status = argc > 2 ? atoi(argv[2]) : 0;
	printf("spin starting\n[");
	while (ms() - start < run) {
		loops++;
		if (ms() - start >= next) { printf("%s%ld", next > 100 ? "," : "", ms() - start); next += 100; }
	}
	printf("]\n{\"loops\": %ld, \"ran_ms\": %ld, \"throttled_pct\": 7, \"name\": \"spin\", ", loops, ms() - start);
	printf("\"samples_us\": [100, 200]}\n");
	return status;
}
"""

SCENARIO = """
name = "mine"
repetitions = 2
duration_s = 1

[cgroup]
period_us = 10000
quota_cpus = 0.5

[workload]
kind = "command"
argv = ["spin", "{run_ms}", "{status}"]
files = ["spin"]
metrics = "json-last-line"
{extra}
"""


@pytest.fixture(scope="module")
def spin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tool_or_skip("cc")
    work = tmp_path_factory.mktemp("spin")
    (work / "spin.c").write_text(SPIN_C)
    subprocess.run(["cc", "-static", "-O1", "-Wall", "-Wextra", "-Werror", "-o", str(work / "spin"),
                    str(work / "spin.c")], check=True)  # fmt: skip
    return work / "spin"


def write_scenario(directory: Path, spin: Path, run_ms: int = 1000, status: int = 0, extra: str = "") -> Path:
    shutil.copy2(spin, directory / "spin")
    path = directory / "mine.toml"
    path.write_text(SCENARIO.format(run_ms=run_ms, status=status, extra=extra))
    return path


def test_resolves_argv_and_files(tmp_path: Path, spin: Path) -> None:
    sc = scenario.load(write_scenario(tmp_path, spin))
    spec = sc.resolve(2)[0]
    assert spec.workload.argv == ("spin", "1000", "0")
    assert spec.workload.files == {"spin": (tmp_path / "spin").resolve()}
    assert spec.settings()["kind"] == "command"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('argv = ["spin", "1000", "0"]', 'argv = "spin"', r"mine.toml:\d+: \[workload\] argv must be a non-empty list"),
        ('argv = ["spin", "1000", "0"]', "", r"\[workload\] command needs argv"),
        ('metrics = "json-last-line"', 'metrics = "xml"', "metrics must be one of none, json-last-line"),
        ('metrics = "json-last-line"', "check_exit = 1", "check_exit must be true or false"),
        ('metrics = "json-last-line"', "threads = 2", "unknown key 'threads' for workload 'command'"),
    ],
)
def test_bad_tables_name_the_key(tmp_path: Path, spin: Path, old: str, new: str, message: str) -> None:
    path = write_scenario(tmp_path, spin)
    path.write_text(path.read_text().replace(old, new))
    with pytest.raises(BwlabError, match=message):
        scenario.load(path)


def test_placeholders_are_filled_inside_arguments(tmp_path: Path, spin: Path) -> None:
    """@REP@, @CGROUP@ and @DURATION@ wherever they stand in an argument (an `sh -c` string
    too); an unknown @NAME@ is an error naming the known ones."""
    path = write_scenario(tmp_path, spin)
    text = path.read_text().replace(
        'argv = ["spin", "1000", "0"]', 'argv = ["sh", "-c", "echo rep=@REP@ in @CGROUP@/x for @DURATION@ s", "@REP@"]'
    )
    path.write_text(text.replace("duration_s = 1", "duration_s = 2.5"))
    spec = scenario.load(path).resolve(2)[0]
    assert spec.workload.argv[2] == "echo rep=@REP@ in @CGROUP@/x for 3 s"  # whole seconds, rounded up
    assert spec.workload.args("/sys/fs/cgroup/g", 1) == ["-c", "echo rep=2 in /sys/fs/cgroup/g/x for 3 s", "2"]
    path.write_text(text.replace("@DURATION@", "@DURATON@"))
    with pytest.raises(BwlabError, match=r"argv: @DURATON@ is not a placeholder bwlab fills in "
                                         r"\(known: @CGROUP@, @REP@, @DURATION@\)"):  # fmt: skip
        scenario.load(path)


def test_missing_file_is_one_line(tmp_path: Path, spin: Path) -> None:
    path = write_scenario(tmp_path, spin)
    (tmp_path / "spin").unlink()
    with pytest.raises(BwlabError, match=r"files: .*spin does not exist"):
        scenario.load(path).resolve(2)


def test_json_last_line_metrics() -> None:
    w = Resolved("command", {"argv": ["x"], "metrics": "json-last-line", "check_exit": True})
    out, samples = command.KIND.parse('hello\n{"ops": 12, "rate": 1.5, "ok": true, "throttled_pct": 3}\n', w)
    # numbers only; a name every repetition has is kept apart
    assert out == {"ops": 12.0, "rate": 1.5, "cmd_throttled_pct": 3.0} and samples == []
    with pytest.raises(BwlabError, match="x output is not its JSON document"):
        command.KIND.parse("no json here\n", w)
    assert command.KIND.parse("anything", Resolved("command", {"argv": ["x"], "metrics": "none"})) == ({}, [])


@needs_root()
def test_on_the_host(tmp_path: Path, spin: Path) -> None:
    path = write_scenario(tmp_path, spin, run_ms=1000)
    proc = bwlab("run", str(path), "--target", "host", "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "out" / "mine-host.json").read_text())
    for rep in doc["cases"][0]["reps"]:
        m = rep["metrics"]
        assert m["exit_status"] == 0 and m["loops"] > 0 and 1000 <= m["ran_ms"] < 1100
        assert m["cmd_throttled_pct"] == 7  # the program's own number, beside the group's
        # half a CPU at a 10 ms period, one spinning thread: throttled in most periods
        assert m["nr_periods"] >= 80 and m["throttled_pct"] > 50
        assert 0.4 < m["cpus_used"] <= 0.55
        assert rep["samples_us"] == [100, 200]
    assert "mine" in (tmp_path / "out" / "report.md").read_text()


@needs_root()
def test_exit_status_fails_or_is_recorded(tmp_path: Path, spin: Path) -> None:
    path = write_scenario(tmp_path, spin, run_ms=200, status=3)
    proc = bwlab("run", str(path), "--target", "host", "--out", str(tmp_path / "a"))
    assert proc.returncode == 1
    assert [line for line in proc.stderr.splitlines() if line.strip()] == [proc.stderr.strip()]
    assert "spin exited 3" in proc.stderr
    path.write_text(path.read_text() + "check_exit = false\n")
    proc = bwlab("run", str(path), "--target", "host", "--out", str(tmp_path / "b"))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "b" / "mine-host.json").read_text())
    assert [r["metrics"]["exit_status"] for r in doc["cases"][0]["reps"]] == [3, 3]


@pytest.mark.untimed
@needs_root()
def test_a_hung_program_keeps_the_cases_before_it_and_says_what_to_do(tmp_path: Path, spin: Path) -> None:
    """A program that never exits is killed at its limit (3 x duration + 60 s); the result
    keeps the case that finished, the hung case's other repetitions are not run, and the
    one-line error says how to make it end (timeout @DURATION@)."""
    path = write_scenario(tmp_path, spin, run_ms=200)
    path.write_text(path.read_text().replace("[workload]", '[[case]]\nname = "ends"\n\n[[case]]\nname = "hangs"\n'
                                             '"workload.argv" = ["sh", "-c", "while :; do :; done"]\n'
                                             '"workload.metrics" = "none"\n\n[workload]'))  # fmt: skip
    proc = bwlab("run", str(path), "--target", "host", "--out", str(tmp_path / "out"), timeout=300)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "sh hung in case hangs: still running 63 s after it started (duration_s = 1), killed" in proc.stderr
    assert 'argv = ["timeout", "@DURATION@", ...] ends it at the duration' in proc.stderr
    doc = json.loads((tmp_path / "out" / "mine-host.json").read_text())
    ends, hangs = doc["cases"]
    assert [r["metrics"]["exit_status"] for r in ends["reps"]] == [0, 0]
    assert "hung in case hangs" in hangs["reps"][0]["error"]
    assert hangs["reps"][1]["error"] == "not run: repetition 1 of this case hung"


@pytest.mark.guest
def test_in_a_guest(tmp_path: Path, spin: Path) -> None:
    fetch = bwlab("kernel", "fetch", timeout=1800)  # cached after the first time
    assert fetch.returncode == 0, fetch.stderr
    build = bwlab("kernel", "build", "--baseline", timeout=3600)
    assert build.returncode == 0, build.stderr[-2000:]
    key = build.stdout.split()[0]
    path = write_scenario(tmp_path, spin, run_ms=1000)
    proc = bwlab("run", str(path), "--target", "guest", "--kernel", key, "--out", str(tmp_path / "out"), timeout=900)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "out" / "mine-guest-baseline.json").read_text())
    assert doc["meta"]["kernel_release"].startswith("7.3.4")
    for rep in doc["cases"][0]["reps"]:
        m = rep["metrics"]
        assert m["exit_status"] == 0 and m["loops"] > 0 and m["nr_periods"] >= 80 and m["throttled_pct"] > 50
    assert os.path.exists(doc["meta"]["console_log"])
