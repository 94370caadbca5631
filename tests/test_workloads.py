"""The static C workloads, built and run for real on the host."""

from __future__ import annotations

import itertools
import json
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from bwlab.errors import BwlabError
from bwlab.stats import percentile
from bwlab.workloads import programs, wakelat

# Tests whose counts and rates need the CPUs to themselves: run with the real tests, one at a
# time, never beside a parallel worker (scripts/test.sh).
timing = pytest.mark.real


@pytest.fixture(scope="module")
def bindir() -> Path:
    return programs.build_workloads()


def test_workloads_are_static(bindir: Path) -> None:
    for prog in programs.ours():
        out = subprocess.run(["file", "-L", str(bindir / prog)], capture_output=True, text=True).stdout
        assert "statically linked" in out or "static-pie" in out, out


@timing
def test_cglat_records_sleeps(bindir: Path) -> None:
    proc = subprocess.run(
        [str(bindir / "cglat"), "-b", "2", "-s", "10000", "-d", "1"], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["burners"] == 2 and doc["count"] == len(doc["samples_us"]) and 20 <= doc["count"] <= 100
    assert all(s >= 10000 for s in doc["samples_us"])  # a 10 ms sleep never takes less than 10 ms
    assert set(doc) == {"workload", "burners", "sleep_us", "duration_s", "count", "samples_us"}
    assert "ms-" in proc.stderr  # text histogram


@pytest.mark.parametrize("args", [["-b", "-1"], ["-s", "0"], ["-d", "x"], ["extra"]])
def test_cglat_rejects_bad_args(bindir: Path, args: list[str]) -> None:
    proc = subprocess.run([str(bindir / "cglat"), *args], capture_output=True, text=True, timeout=10)
    assert proc.returncode == 2 and proc.stdout == ""


def test_cgwrite_rewrites_same_value(bindir: Path, tmp_path: Path) -> None:
    target = tmp_path / "cpu.max"
    target.write_text("")
    proc = subprocess.run(
        [str(bindir / "cgwrite"), str(target), "20000 10000", "1000", "5"], capture_output=True, text=True, timeout=10
    )
    assert proc.returncode == 0
    assert json.loads(proc.stdout) == {"writer": "cgwrite", "writes": 5, "errors": 0}
    assert target.read_text() == "20000 10000"


def test_cgwrite_missing_file(bindir: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(bindir / "cgwrite"), str(tmp_path / "nope"), "1", "1000"], capture_output=True, text=True, timeout=10
    )
    assert proc.returncode == 1 and "nope" in proc.stderr


def test_wakelat_percentiles_are_nearest_rank(bindir: Path) -> None:
    # the percentile code wakelat reports with, against bwlab.stats.percentile (nearest rank)
    rng = random.Random(7)
    for n in (1, 2, 5, 10, 999, 1000, 1001):
        values = [rng.randrange(-1000, 100000) for _ in range(n)]
        proc = subprocess.run([str(bindir / "wakelat"), "--percentiles"], input="\n".join(map(str, values)) + "\n",
                              capture_output=True, text=True, timeout=10)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        got = json.loads(proc.stdout)["values"]
        assert got["n"] == n and got["max"] == max(values)
        for p in (50, 75, 90, 95, 99, 99.5, 99.9):
            assert got[f"p{str(p).replace('.', '_')}"] == percentile(values, p), (n, p)
    proc = subprocess.run([str(bindir / "wakelat"), "--percentiles"], input="12\nx\n", capture_output=True,
                          text=True, timeout=10)  # fmt: skip
    assert proc.returncode == 2 and "got 'x'" in proc.stderr


@timing
def test_wakelat_serves_requests_at_the_rate(bindir: Path) -> None:
    proc = subprocess.run([str(bindir / "wakelat"), "-m", "1", "-t", "2", "-r", "200", "-c", "500", "-d", "1"],
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert 150 <= doc["completed"] <= 210 and 150 <= doc["rps"] <= 210
    wake, req = doc["wakeup_us"], doc["request_us"]
    assert wake["n"] == len(doc["samples_us"]) > 100
    assert wake["p50"] <= wake["p99"] <= wake["max"]
    # each request burns 500 us of its thread's CPU time: it cannot finish sooner
    assert req["p50"] >= 500
    assert req["n"] == doc["completed"]


@timing
def test_wakelat_bursty_arrivals(bindir: Path) -> None:
    # Poisson arrivals in batches of 4 (the same mean rate, posted 4 at a time), workers with a
    # 100 us EEVDF slice
    args = ["-t", "8", "-r", "400", "-b", "4", "-p", "-c", "100", "-S", "100", "-d", "1"]
    proc = subprocess.run([str(bindir / "wakelat"), *args], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["batch"] == 4 and doc["poisson"] is True
    assert 200 <= doc["completed"] <= 700 and (doc["posted"] + doc["dropped"]) % 4 == 0


@timing
def test_wakelat_warm_up_is_not_counted(bindir: Path) -> None:
    """-w 0.5 of -d 1.5 at 200 requests/s: about 300 posted, about 200 counted; every counted
    request has its sample (kept per worker, merged at the end: 2 message threads x 3 workers)."""
    args = ["-m", "2", "-t", "3", "-r", "200", "-c", "300", "-w", "0.5", "-d", "1.5"]
    proc = subprocess.run([str(bindir / "wakelat"), *args], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["warmup_s"] == 0.5 and 250 <= doc["posted"] <= 310
    assert 150 <= doc["completed"] <= 210 and 150 <= doc["rps"] <= 210  # over the 1 s after the warm-up
    assert doc["request_us"]["n"] == doc["completed"] and doc["wakeup_us"]["n"] == len(doc["samples_us"])
    assert doc["posted"] - doc["completed"] >= 80  # the warm-up's requests are left out


@pytest.mark.parametrize(
    "args",
    [["-r", "abc"], ["-c", "-1"], ["-m", "0"], ["-b", "0"], ["-S", "5"], ["extra"], ["-w", "2", "-d", "1"]],
)
def test_wakelat_rejects_bad_args(bindir: Path, args: list[str]) -> None:
    proc = subprocess.run([str(bindir / "wakelat"), *args], capture_output=True, text=True, timeout=10)
    assert proc.returncode == 2 and proc.stdout == ""


def run_funcs(bindir: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(bindir / "funcs"), *args], capture_output=True, text=True, timeout=timeout)


@timing
def test_funcs_offers_the_load(bindir: Path) -> None:
    # 4 functions sharing 0.5 CPU of load, 2 ms median requests, bursts of 200 ms ON / 200 ms OFF
    proc = run_funcs(bindir, "-n", "4", "-l", "0.5", "-c", "1", "-m", "2000", "-s", "0.5", "-B", "200",
                     "-O", "200", "-d", "3")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    mean_ms = 2 * 2.718281828 ** (0.5**2 / 2)  # log-normal mean
    expected = 0.5 * 3 / (mean_ms / 1000)  # requests in 3 s at half a CPU
    assert 0.5 * expected <= doc["offered"] <= 1.6 * expected, (doc["offered"], expected)
    assert doc["completed"] + doc["unfinished"] + doc["dropped"] == doc["offered"]
    lat = doc["latency_us"]
    assert lat["n"] == len(doc["samples_us"]) == doc["completed"] + doc["unfinished"]
    assert lat["p50"] <= lat["p99"] <= lat["max"]
    assert lat["p50"] >= 2000 * 0.5  # at least the burn of a typical request
    assert doc["utime_s"] + doc["stime_s"] >= 0.5 * 0.5 * 3  # the servers did burn the load
    assert doc["nvcsw"] > 0 and doc["latency_awareness"] == -1


def fake_groups(root: Path, n: int, aware_file: bool = True) -> None:
    """What a cgroup directory holds for funcs: cgroup.procs (and cpu.latency_awareness)."""
    for i in range(n):
        (root / f"func-{i}").mkdir()
        (root / f"func-{i}" / "cgroup.procs").write_text("")
        if aware_file:
            (root / f"func-{i}" / "cpu.latency_awareness").write_text("0")


def test_funcs_makes_a_group_per_function(bindir: Path, tmp_path: Path) -> None:
    # a fake cgroup v1 directory (no cgroup.subtree_control): funcs moves each function's
    # server into func-i and writes its cpu.latency_awareness
    fake_groups(tmp_path, 3)
    proc = run_funcs(bindir, "-n", "3", "-l", "0.2", "-c", "1", "-m", "1000", "-d", "1", "-G", str(tmp_path),
                     "-L", "1")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    pids = set()
    for i in range(3):
        group = tmp_path / f"func-{i}"
        assert (group / "cpu.latency_awareness").read_text() == "1"
        pids.add(int((group / "cgroup.procs").read_text()))
    assert len(pids) == 3  # one server process per function
    assert json.loads(proc.stdout)["latency_awareness"] == 1


def test_funcs_latency_awareness_on_a_kernel_without_it(bindir: Path, tmp_path: Path) -> None:
    fake_groups(tmp_path, 1, aware_file=False)
    args = ["-n", "1", "-l", "0.1", "-c", "1", "-d", "0.5", "-G", str(tmp_path)]
    proc = run_funcs(bindir, *args, "-L", "1")
    assert proc.returncode == 1 and "cpu.latency_awareness" in proc.stderr and proc.stdout == ""
    proc = run_funcs(bindir, *args, "-L", "0")  # 0 is what such a kernel does anyway
    assert proc.returncode == 0, proc.stderr
    proc = run_funcs(bindir, "-n", "2", "-d", "0.5", "-G", str(tmp_path))  # func-1 cannot be joined
    assert proc.returncode == 1 and "func-1" in proc.stderr


@pytest.mark.parametrize("args", [["-n", "0"], ["-l", "x"], ["-s", "9"], ["-L", "1"], ["-w", "0"], ["extra"]])
def test_funcs_rejects_bad_args(bindir: Path, args: list[str]) -> None:
    proc = run_funcs(bindir, *args, timeout=10)
    assert proc.returncode == 2 and proc.stdout == ""


@timing
def test_noise_accounts_for_every_microsecond(bindir: Path) -> None:
    proc = subprocess.run([str(bindir / "noise"), "-t", "2", "-d", "1"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["threads"] == 2 and len(doc["per_thread"]) == 2
    for t in doc["per_thread"]:
        assert 1_000_000 <= t["wall_us"] < 1_100_000
        assert abs(t["charged_us"] + t["uncharged_us"] - t["wall_us"]) <= 1  # each rounded down to us
        # how much other work there is depends on the machine (and on other tests' leftovers)
        assert 0 <= t["uncharged_us"] <= t["wall_us"]
        # the bursts are uncharged time: never more than there was (rounding: 1 us per burst)
        assert t["in_bursts_us"] <= t["uncharged_us"] + t["bursts"]
    assert abs(doc["uncharged_us"] - sum(t["uncharged_us"] for t in doc["per_thread"])) <= 2
    assert abs(doc["uncharged_pct"] - 100 * doc["uncharged_us"] / doc["wall_us"]) < 0.01
    assert len(doc["bursts_us"]) == min(20000, doc["burst_us"]["n"])
    assert all(b >= 5 for b in doc["bursts_us"])  # a burst holds at least one 5 us gap
    # a timer every 997 us per thread: about 1000 expiries each, less those it was not running for
    assert 1500 <= doc["timer_late"]["n"] <= 2010 and len(doc["timer_late_us"]) == doc["timer_late"]["n"]
    assert all(0 <= t < 1_000_000 for t in doc["timer_late_us"])


@timing
def test_noise_timer_interval(bindir: Path) -> None:
    def late(*args: str) -> dict[str, float]:
        proc = subprocess.run([str(bindir / "noise"), "-d", "1", *args], capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)["timer_late"]  # type: ignore[no-any-return]

    assert late("-i", "0") == {"n": 0}  # no timer
    assert 1500 <= late("-i", "500", "-w", "100")["n"] <= 2010  # twice as many, with work between reads


def stopped_for(argv: list[str], at_s: float, hold_s: float) -> Any:
    """A program's JSON output after it was stopped (SIGSTOP) `at_s` after its start and
    continued `hold_s` later."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    time.sleep(at_s)
    proc.send_signal(signal.SIGSTOP)
    time.sleep(hold_s)
    proc.send_signal(signal.SIGCONT)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    return json.loads(out)


@timing
def test_noise_counts_a_stopped_thread_as_uncharged(bindir: Path) -> None:
    # SIGSTOP for ~0.3 s: wall time passes, the threads are not charged: one big burst each
    doc = stopped_for([str(bindir / "noise"), "-t", "1", "-d", "2"], 0.5, 0.3)
    assert 250_000 <= doc["uncharged_us"] <= doc["wall_us"]
    assert doc["burst_us"]["max"] >= 250_000


@pytest.mark.parametrize("args", [["-t", "0"], ["-d", "x"], ["-g", "0"], ["-m", "-1"], ["-i", "-5"], ["-w", "x"],
                                  ["extra"]])  # fmt: skip
def test_noise_rejects_bad_args(bindir: Path, args: list[str]) -> None:
    proc = subprocess.run([str(bindir / "noise"), *args], capture_output=True, text=True, timeout=10)
    assert proc.returncode == 2 and proc.stdout == ""


def run_picks(bindir: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(bindir / "picks"), *args], capture_output=True, text=True, timeout=timeout)


@timing
def test_picks_yields_on_one_cpu(bindir: Path) -> None:
    # 8 yielding tasks and one plain one, no groups: every yield passes through a pick and,
    # with nine tasks runnable on one CPU, nearly every one switches
    proc = run_picks(bindir, "-t", "8", "-P", "1", "-d", "1")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["tasks"] == 8 and doc["plain"] == 1 and doc["latency_awareness"] == -1
    assert doc["yields"] > 1000 and doc["yields_per_task"]["min"] > 0
    assert doc["yields_per_task"]["min"] <= doc["yields_per_task"]["median"] <= doc["yields_per_task"]["max"]
    # the tasks share one CPU: their CPU time is about the measured second, not two
    assert 0.7 <= doc["cpu_s"] <= 1.3, doc["cpu_s"]
    assert abs(doc["ns_per_yield"] - 1e9 * doc["cpu_s"] / doc["yields"]) < 1.0
    assert doc["switches_per_yield"] > 0.5


@timing
def test_picks_puts_tasks_in_groups(bindir: Path, tmp_path: Path) -> None:
    # a fake cgroup v1 directory: 4 groups pick-0..3 that take 1 and a plain group that does not
    for name in ("pick-0", "pick-1", "pick-2", "pick-3", "plain"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "cgroup.procs").write_text("")
        if name != "plain":
            (tmp_path / name / "cpu.latency_awareness").write_text("0")
    proc = run_picks(bindir, "-t", "8", "-g", "4", "-d", "0.5", "-G", str(tmp_path), "-L", "1")
    assert proc.returncode == 0, proc.stderr
    for i in range(4):
        group = tmp_path / f"pick-{i}"
        assert (group / "cpu.latency_awareness").read_text() == "1"
        assert int((group / "cgroup.procs").read_text()) > 0  # a task joined it
    assert not (tmp_path / "plain" / "cpu.latency_awareness").exists()
    assert int((tmp_path / "plain" / "cgroup.procs").read_text()) > 0


def test_picks_latency_awareness_on_a_kernel_without_it(bindir: Path, tmp_path: Path) -> None:
    proc = run_picks(bindir, "-t", "2", "-g", "1", "-d", "0.2", "-G", str(tmp_path), "-L", "1")
    assert proc.returncode == 1 and "cpu.latency_awareness" in proc.stderr and proc.stdout == ""
    for name in ("pick-0", "plain"):  # the failed run made them, without cgroup.procs
        (tmp_path / name).mkdir(exist_ok=True)
        (tmp_path / name / "cgroup.procs").write_text("")
    proc = run_picks(bindir, "-t", "2", "-g", "1", "-d", "0.2", "-G", str(tmp_path), "-L", "0")
    assert proc.returncode == 0, proc.stderr  # 0 is what such a kernel does anyway
    (tmp_path / "plain" / "cgroup.procs").unlink()  # a group that cannot be joined: a clear error
    proc = run_picks(bindir, "-t", "2", "-g", "1", "-d", "5", "-G", str(tmp_path), timeout=20)
    assert proc.returncode == 1 and "cannot join" in proc.stderr and "plain" in proc.stderr


@pytest.mark.parametrize("args", [["-t", "0"], ["-g", "x"], ["-P", "99"], ["-L", "1"], ["-C", "999"], ["extra"]])
def test_picks_rejects_bad_args(bindir: Path, args: list[str]) -> None:
    proc = run_picks(bindir, *args, timeout=10)
    assert proc.returncode == 2 and proc.stdout == ""


def test_picks_output_that_is_not_its_document_is_an_error() -> None:
    from bwlab.workloads import get
    from bwlab.workloads.base import Resolved

    with pytest.raises(BwlabError, match="picks output"):
        get("picks").parse('{"ns_per_yield": 1}\n', Resolved("picks", {}))


@timing
def test_wakelat_seeded_arrivals_repeat(bindir: Path) -> None:
    # Poisson gaps from -R: the same seed posts the same requests in the same second (give or
    # take the one due as the run ends: a run here once posted one more), other seeds (almost surely) a
    # different number
    def posted(seed: int) -> int:
        proc = subprocess.run([str(bindir / "wakelat"), "-m", "1", "-t", "2", "-r", "200", "-p", "-c", "10",
                               "-R", str(seed), "-d", "1"], capture_output=True, text=True, timeout=30)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        return int(json.loads(proc.stdout.strip().splitlines()[-1])["posted"])

    first = posted(5)
    assert abs(posted(5) - first) <= 1 and 120 < first < 280
    assert any(abs(posted(seed) - first) > 1 for seed in (6, 7, 8, 9))
    proc = subprocess.run([str(bindir / "wakelat"), "-R", "0"], capture_output=True, text=True, timeout=10)
    assert proc.returncode == 2 and proc.stdout == ""


@timing
def test_wakelat_prints_the_arrivals_a_seeded_run_posts(bindir: Path) -> None:
    """-A prints a seeded run's arrivals without running it: as many as the run posts in the
    same time (give or take the one at the end), the same for the same seed, and a paced trace
    of them holds each request once."""
    args = [str(bindir / "wakelat"), "-m", "1", "-t", "4", "-r", "200", "-p", "-c", "10", "-R", "5", "-d", "1"]
    printed = subprocess.run([*args, "-A"], capture_output=True, text=True, timeout=30, check=True).stdout
    times = [int(line.split()[1]) for line in printed.splitlines()]
    assert times == sorted(times) and 0 < times[0] and times[-1] < 1e9
    assert printed == subprocess.run([*args, "-A"], capture_output=True, text=True, timeout=30, check=True).stdout
    run = subprocess.run(args, capture_output=True, text=True, timeout=30, check=True)
    assert abs(int(json.loads(run.stdout.strip().splitlines()[-1])["posted"]) - len(times)) <= 1
    trace = wakelat.requests_trace(printed, 4, 10, skip_s=0.5)
    later = [t for t in times if t >= 0.5e9]
    assert sum(1 for line in trace if line["run_us"] == 10) == len(later)
    assert {line["thread"] for line in trace} == {0, 1, 2, 3}
    thread0 = [line for line in trace if line["thread"] == 0]
    assert thread0[0] == {"run_us": 0, "sleep_us": round(later[0] / 1000 - 0.5e6), "thread": 0}
    unseeded = subprocess.run([*args[:-4], "-A"], capture_output=True, text=True, timeout=30)
    assert unseeded.returncode == 2 and "-A needs a rate (-r > 0) and a seed (-R)" in unseeded.stderr
    with pytest.raises(BwlabError, match="line 1: expected 'MSG NS'"):
        wakelat.requests_trace("x y\n", 4, 10)


@timing
def test_cgsample_reads_v1_and_v2_counters_until_stopped(bindir: Path, tmp_path: Path) -> None:
    """cgsample on counter files made here (the lab's real tests run it beside real groups):
    v2's cpu.stat (usage_usec, throttled_usec) and v1's (throttled_time ns) with cpuacct.usage,
    one sample a millisecond until SIGTERM, then its header and the samples in ns."""
    v2 = tmp_path / "v2.stat"
    v2.write_text("usage_usec 1500\nuser_usec 1000\nnr_periods 7\nnr_throttled 3\nthrottled_usec 250\nnr_bursts 1\n")
    v1, usage = tmp_path / "v1.stat", tmp_path / "cpuacct.usage"
    v1.write_text("nr_periods 9\nnr_throttled 4\nthrottled_time 123456\n")
    usage.write_text("987654321\n")
    cases = [(v2, "-", (7, 3, 250_000, 1_500_000, 1)), (v1, str(usage), (9, 4, 123456, 987654321, 0))]
    for stat, usage_arg, expected in cases:
        proc = subprocess.Popen([str(bindir / "cgsample"), str(stat), usage_arg, "1000"], stdout=subprocess.PIPE,
                                text=True)  # fmt: skip
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=10)
        assert proc.returncode == 0
        lines = out.splitlines()
        assert lines[0] == "cgsample 1000" and 100 <= len(lines) - 1 <= 260, len(lines)
        rows = [tuple(map(int, line.split())) for line in lines[1:]]
        assert all(row[1:] == expected for row in rows)
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(rows)]
        assert sorted(gaps)[len(gaps) // 2] == pytest.approx(1_000_000, rel=0.2)  # the median step: 1 ms
    (tmp_path / "none.stat").write_text("usage_usec 5\n")
    bad = [
        ([str(tmp_path / "missing"), "-", "1000"], "No such file"),
        ([str(tmp_path / "none.stat"), "-", "1000"], "has no bandwidth counters"),
        ([str(v2), "-", "10"], "interval must be an integer in 100..10000000, got '10'"),
    ]
    for args, message in bad:
        proc2 = subprocess.run([str(bindir / "cgsample"), *args], capture_output=True, text=True, timeout=10)
        assert proc2.returncode in (1, 2) and message in proc2.stderr and proc2.stdout == "", proc2.stderr


def test_spin_reports_the_time_it_was_stopped_as_a_gap(bindir: Path) -> None:
    """spin -g: a thread held off its CPU (here SIGSTOP, SIGCONT 200 ms later, 0.3 s in) reports
    the hold as a gap: 200 ms less the few ms the stop takes to reach a running thread (196.5
    here), so >= 150 ms; and only gaps over -g's threshold."""
    res = stopped_for([str(bindir / "spin"), "-t", "2", "-d", "2", "-p", "300", "-g", "50000"], 0.3, 0.2)
    assert res["gaps_dropped"] == 0 and len(res["per_thread"]) == 2
    held = [(t, start, length) for t, start, length in res["gaps"] if length >= 150_000]
    assert {t for t, *_ in held} == {0, 1}, res["gaps"]  # both threads were held
    assert all(0 <= start <= 2_000_000 for _, start, _ in held), held
    assert all(length >= 50_000 for *_, length in res["gaps"])  # only gaps over -g's 50 ms


@pytest.mark.parametrize("args", [["-g", "0"], ["-g", "x"], ["extra"], ["-t", "0"]])
def test_spin_rejects_bad_args(bindir: Path, args: list[str]) -> None:
    proc = subprocess.run([str(bindir / "spin"), *args], capture_output=True, text=True, timeout=10)
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1, proc
