"""The static C workloads, built and run for real on the host."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest

from bwlab import tools
from bwlab.stats import percentile


@pytest.fixture(scope="module")
def bindir() -> Path:
    return tools.build_workloads()


def test_workloads_are_static(bindir: Path) -> None:
    for prog in tools.OUR_PROGRAMS:
        out = subprocess.run(["file", "-L", str(bindir / prog)], capture_output=True, text=True).stdout
        assert "statically linked" in out or "static-pie" in out, out


def test_cglat_records_sleeps(bindir: Path) -> None:
    proc = subprocess.run(
        [str(bindir / "cglat"), "-b", "2", "-s", "10000", "-d", "1"], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["burners"] == 2 and doc["count"] == len(doc["samples_us"]) and 20 <= doc["count"] <= 100
    assert all(s >= 10000 for s in doc["samples_us"])  # a 10 ms sleep never takes less than 10 ms
    assert doc["p50_us"] <= doc["p99_us"] <= doc["max_us"]
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


def test_wakelat_bursty_arrivals(bindir: Path) -> None:
    # Poisson arrivals in batches of 4 (the same mean rate, posted 4 at a time), workers with a
    # 100 us EEVDF slice
    args = ["-t", "8", "-r", "400", "-b", "4", "-p", "-c", "100", "-S", "100", "-d", "1"]
    proc = subprocess.run([str(bindir / "wakelat"), *args], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["batch"] == 4 and doc["poisson"] is True
    assert 200 <= doc["completed"] <= 700 and (doc["posted"] + doc["dropped"]) % 4 == 0


@pytest.mark.parametrize("args", [["-r", "abc"], ["-c", "-1"], ["-m", "0"], ["-b", "0"], ["-S", "5"], ["extra"]])
def test_wakelat_rejects_bad_args(bindir: Path, args: list[str]) -> None:
    proc = subprocess.run([str(bindir / "wakelat"), *args], capture_output=True, text=True, timeout=10)
    assert proc.returncode == 2 and proc.stdout == ""
