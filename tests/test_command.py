"""kind = "command": the user's own program under a scenario, on the host and in a guest.

Contract: argv[0] is one of `files` (carried to the target) or a program there; every
repetition has the exit status, elapsed time and cpu.stat deltas; `metrics = "json-last-line"`
adds the numbers of the last output line's JSON object and its samples_us; a non-zero exit
fails the repetition unless check_exit = false. A program still running at the duration (and
its slack) is stopped, on the host and in a plan target's shell: SIGTERM to every task of its
group, SIGKILL after a grace; the repetition counts, with `stopped` 1. One that says it ends by
itself (ends_by_itself = true) and never does is killed at the hang limit, and the error says
what to do.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bwlab import cli, scenario
from bwlab.errors import BwlabError
from bwlab.targets import base, host, plan
from bwlab.targets.base import RawRep
from bwlab.workloads import command
from bwlab.workloads.base import Resolved, stop_time_s

from conftest import baseline_kernel, bwlab, needs_root, pids_with, run_in_busybox_root, steal_ticks, tool_or_skip

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
    before = steal_ticks()
    proc = bwlab("run", str(path), "--target", "host", "--out", str(tmp_path / "out"))
    steal = (steal_ticks() - before) / os.sysconf("SC_CLK_TCK")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "out" / "mine-host.json").read_text())
    for rep in doc["cases"][0]["reps"]:
        m = rep["metrics"]
        assert m["exit_status"] == 0 and m["loops"] > 0 and 1000 <= m["ran_ms"] < 1100
        assert m["cmd_throttled_pct"] == 7  # the program's own number, beside the group's
        print(f"command on the host: {m['nr_periods']:.0f} periods, throttled {m['throttled_pct']:.1f} %, "
              f"{m['cpus_used']:.3f} CPUs, steal {steal:.2f} s")  # fmt: skip
        # The group's own cpu.stat deltas, whatever CPU the machine had to give: about 100
        # periods, throttled in some (half a CPU for a thread that wants a whole one), the
        # percentage of the kernel's own counts, and never more than the quota's half CPU. How
        # many periods throttle depends on the CPU the thread got (on a quiet machine 94-98 %,
        # in CI once 47 %: docs/testing.md), which is not what this test is about.
        assert 80 <= m["nr_periods"] <= 115 and m["nr_throttled"] >= 1 and m["throttled_us"] > 0
        assert m["throttled_pct"] == 100 * m["nr_throttled"] / m["nr_periods"]
        assert 0 < m["cpus_used"] <= 0.55
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


# Never ends by itself: two busy children, one deaf to SIGTERM (only SIGKILL ends it).
FOREVER_SH = """#!/bin/sh
( trap '' TERM; while :; do :; done ) &
while :; do :; done &
wait
"""


def forever_scenario(directory: Path, spin: Path) -> Path:
    """Two cases of one repetition: `ends` (spin, 200 ms) and `forever` (FOREVER_SH)."""
    path = write_scenario(directory, spin, run_ms=200)
    (directory / "forever.sh").write_text(FOREVER_SH)
    (directory / "forever.sh").chmod(0o755)
    path.write_text(path.read_text().replace("repetitions = 2", "repetitions = 1").replace(
        "[workload]", '[[case]]\nname = "ends"\n\n[[case]]\nname = "forever"\n"workload.argv" = ["forever.sh"]\n'
        '"workload.files" = ["forever.sh"]\n"workload.metrics" = "none"\n\n[workload]'))  # fmt: skip
    return path


def assert_stopped_at_the_duration(doc: dict[str, Any]) -> None:
    """`ends` ended by itself (stopped 0); `forever` was stopped (1) after its stop time (2 s for
    duration_s = 1) and well before the hang limit (63 s), its SIGTERM-deaf child killed, and
    it counts: no error, its cpu.stat deltas there."""
    ends, forever = doc["cases"]
    assert ends["reps"][0]["metrics"]["stopped"] == 0 and ends["reps"][0]["metrics"]["exit_status"] == 0
    rep = forever["reps"][0]
    assert "error" not in rep, rep
    m = rep["metrics"]
    assert m["stopped"] == 1 and m["exit_status"] != 0
    assert stop_time_s(1) <= m["wall_s"] < 30 and m["nr_periods"] > 100


def test_the_plan_stops_only_what_does_not_end_by_itself(tmp_path: Path, spin: Path) -> None:
    """The plan targets' shell: a watcher beside a command workload only (not beside a
    built-in one, nor with ends_by_itself = true), valid sh; its `stopped` record is read."""
    specs = scenario.load(forever_scenario(tmp_path, spin)).resolve(2)
    text = plan.render_plan(specs)
    subprocess.run(["sh", "-n"], input=text, text=True, check=True)
    assert text.count("& STOPPER=$!") == 2 and "sleep 2 & SL=$!" in text
    path = tmp_path / "mine.toml"
    path.write_text(path.read_text() + "ends_by_itself = true\n")
    assert "STOPPER" not in plan.render_plan(scenario.load(path).resolve(2))
    assert "STOPPER" not in plan.render_plan(scenario.load(scenario.builtin_path("below-quota")).resolve(2))
    records = "BWLAB-BEGIN 0 0\nBWLAB-SECTION rc\n143\nBWLAB-SECTION stopped\n1\nBWLAB-END 0 0\n"
    assert plan.parse_records(records).records[(0, 0)].stopped  # type: ignore[union-attr]


def test_a_stop_is_no_failure_and_a_stopped_program_without_its_line_says_why(tmp_path: Path, spin: Path) -> None:
    spec = scenario.load(write_scenario(tmp_path, spin)).resolve(2)[0]
    stat = "nr_periods 10\nnr_throttled 5\nthrottled_usec 1000\nusage_usec 50000\n"
    raw = RawRep(stat, stat, 2.0, 143, "spin starting\n", stopped=True)
    why = r"stopped 2 s after it started, at the duration: print the line on SIGTERM, or set ends_by_itself = true"
    with pytest.raises(BwlabError, match=r"spin output is not its JSON document.*" + why):
        base.rep_metrics(spec, raw)
    raw = dataclasses.replace(raw, stdout='{"loops": 3}\n')
    assert base.rep_metrics(spec, raw)[0]["stopped"] == 1
    with pytest.raises(BwlabError, match="spin exited 143"):
        base.rep_metrics(spec, dataclasses.replace(raw, stopped=False))


@pytest.mark.untimed
@needs_root()
def test_a_program_that_never_exits_is_stopped_at_its_duration_on_the_host(tmp_path: Path, spin: Path) -> None:
    path = forever_scenario(tmp_path, spin)
    proc = bwlab("run", str(path), "--target", "host", "--out", str(tmp_path / "out"), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert_stopped_at_the_duration(json.loads((tmp_path / "out" / "mine-host.json").read_text()))
    assert not pids_with(str(tmp_path / "forever.sh"))


@pytest.mark.untimed
@needs_root()
def test_a_program_that_never_exits_is_stopped_at_its_duration_in_a_bundle(tmp_path: Path, spin: Path) -> None:
    """The plan targets' watcher, in busybox's sh, on this host's real cgroups (a bundle)."""
    path = forever_scenario(tmp_path, spin)
    res = bwlab("bundle", str(path), "-o", str(tmp_path / "b"))
    assert res.returncode == 0, res.stderr
    root = tmp_path / "root"
    res = run_in_busybox_root(root, tmp_path / "b", "/bin/sh /b/run.sh /o")
    assert res.returncode == 0, res.stderr
    res = bwlab("ingest", str(root / "o"), "--out", str(tmp_path / "r"))
    assert res.returncode == 0, res.stderr
    assert_stopped_at_the_duration(json.loads(next((tmp_path / "r").glob("mine-bundle-*.json")).read_text()))
    assert not pids_with("/b/bin/forever.sh")


@pytest.mark.untimed
@needs_root()
def test_a_hung_program_keeps_the_cases_before_it_and_says_what_to_do(
    tmp_path: Path, spin: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A program that says it ends by itself and never does is killed at its limit (3 x
    duration + 60 s); the result keeps the case that finished, the hung case's other
    repetitions are not run, and the one-line error says how to make it end. The CLI runs in
    this process with the 60 s at 4 (it held a worker of the parallel run for 63 s)."""
    monkeypatch.setattr(host, "GRACE_SECONDS", 4.0)
    path = write_scenario(tmp_path, spin, run_ms=200)
    path.write_text(path.read_text().replace("[workload]", '[[case]]\nname = "ends"\n\n[[case]]\nname = "hangs"\n'
                                             '"workload.argv" = ["sh", "-c", "while :; do sleep 1; done"]\n'
                                             '"workload.metrics" = "none"\n"workload.ends_by_itself" = true\n\n'
                                             '[workload]'))  # fmt: skip
    on_sigterm = signal.getsignal(signal.SIGTERM)
    try:
        rc = cli.main(["run", str(path), "--target", "host", "--out", str(tmp_path / "out")])
    finally:
        signal.signal(signal.SIGTERM, on_sigterm)
    stderr = capsys.readouterr().err
    assert rc == 1 and len(stderr.strip().splitlines()) == 1, stderr
    assert "sh hung in case hangs: still running 7 s after it started (duration_s = 1), killed" in stderr
    assert "It has ends_by_itself = true: remove that line to stop it at the duration" in stderr
    assert not pids_with("while :; do sleep 1; done")
    doc = json.loads((tmp_path / "out" / "mine-host.json").read_text())
    ends, hangs = doc["cases"]
    assert [r["metrics"]["exit_status"] for r in ends["reps"]] == [0, 0]
    assert "hung in case hangs" in hangs["reps"][0]["error"]
    assert hangs["reps"][1]["error"] == "not run: repetition 1 of this case hung"


@pytest.mark.guest
def test_in_a_guest(tmp_path: Path, spin: Path) -> None:
    key = baseline_kernel()  # cached after the first time
    path = write_scenario(tmp_path, spin, run_ms=1000)
    proc = bwlab("run", str(path), "--target", "guest", "--kernel", key, "--out", str(tmp_path / "out"), timeout=900)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "out" / "mine-guest-baseline.json").read_text())
    assert doc["meta"]["kernel_release"].startswith("7.3.4")
    for rep in doc["cases"][0]["reps"]:
        m = rep["metrics"]
        assert m["exit_status"] == 0 and m["loops"] > 0 and m["nr_periods"] >= 80 and m["throttled_pct"] > 50
    assert os.path.exists(doc["meta"]["console_log"])
