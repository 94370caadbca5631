"""Under CI=true a missing prerequisite of the real tests fails the run at its start, loudly,
instead of skipping the tests that need it (tests/prereqs.py, conftest's pytest_sessionstart)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import prereqs
from conftest import REPO, lacking


def _path_without(tool: str, into: Path) -> Path:
    """A folder of links to every program on this PATH but `tool`: the machine without it, its
    package still installed (so that setup.sh installs nothing)."""
    into.mkdir()
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(folder):
            continue
        for entry in os.scandir(folder):
            link = into / entry.name
            if entry.name != tool and not link.exists() and os.access(entry.path, os.X_OK):
                link.symlink_to(entry.path)
    return into


def _pytest(path_dir: Path, ci: bool) -> subprocess.CompletedProcess[str]:
    """A short pytest run of this repository with PATH = `path_dir` only."""
    env = {**os.environ, "PATH": str(path_dir), "CI": "true" if ci else "false"}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_errors.py"],
                          cwd=REPO, capture_output=True, text=True, env=env, timeout=120)  # fmt: skip


def test_a_tool_hidden_from_path_fails_the_run_under_ci_only(tmp_path: Path) -> None:
    shown = _path_without("bpftrace", tmp_path / "bin")
    hidden = _pytest(shown, ci=True)
    assert hidden.returncode == 3, hidden.stdout + hidden.stderr
    said = hidden.stdout + hidden.stderr
    assert "CI=true and the real tests' prerequisites are missing" in said and "bpftrace (bpftrace" in said
    assert "passed" not in said  # nothing ran
    assert _pytest(shown, ci=False).returncode == 0  # a developer's run goes on; its real tests skip


def test_the_readmes_test_command_fails_loudly_on_a_missing_tool(tmp_path: Path) -> None:
    """`bash scripts/test.sh`, as the README says (no CI variable set by the caller), on a
    machine without bpftrace: the run fails at its start, names bpftrace and its package, and
    runs no test. (Started with a test file, so that it stops after setup and pytest.)"""
    others = [m for m in prereqs.missing() if not m.startswith("bpftrace")]
    if others:  # setup.sh would install them (apt, a Go build) inside this test: not here
        lacking(f"the machine lacks more than bpftrace: {'; '.join(others)}")
    shown = _path_without("bpftrace", tmp_path / "bin")
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_CURRENT_TEST")}
    # the nested run as a worker: its session end must not sweep the other workers' groups
    env["PYTEST_XDIST_WORKER"] = os.environ.get("PYTEST_XDIST_WORKER", "nested")
    proc = subprocess.run(["bash", "scripts/test.sh", "-p", "no:cacheprovider", "tests/test_errors.py"], cwd=REPO,
                          capture_output=True, text=True, env={**env, "PATH": str(shown)}, timeout=300)  # fmt: skip
    said = proc.stdout + proc.stderr
    assert proc.returncode == 3, said[-3000:]
    assert "prerequisites are missing" in said, said[-3000:]
    assert "bpftrace (bpftrace (scripts/setup.sh --tests))" in said, said[-3000:]
    assert "passed" not in said  # nothing ran
