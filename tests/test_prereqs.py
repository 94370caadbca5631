"""Under CI=true a missing prerequisite of the real tests fails the run at its start, loudly,
instead of skipping the tests that need it (tests/prereqs.py, conftest's pytest_sessionstart)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import prereqs
from conftest import REPO


def _pytest(path_dir: Path, ci: bool) -> subprocess.CompletedProcess[str]:
    """A short pytest run of this repository with PATH = `path_dir` only."""
    env = {**os.environ, "PATH": str(path_dir), "CI": "true" if ci else "false"}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_errors.py"],
                          cwd=REPO, capture_output=True, text=True, env=env, timeout=120)  # fmt: skip


def test_a_tool_hidden_from_path_fails_the_run_under_ci_only(tmp_path: Path) -> None:
    shown = tmp_path / "bin"
    shown.mkdir()
    for tool in prereqs.TOOLS:
        if tool != "bpftrace" and (found := shutil.which(tool)) is not None:
            (shown / tool).symlink_to(found)
    hidden = _pytest(shown, ci=True)
    assert hidden.returncode == 3, hidden.stdout + hidden.stderr
    said = hidden.stdout + hidden.stderr
    assert "CI=true and the real tests' prerequisites are missing" in said and "bpftrace (bpftrace" in said
    assert "passed" not in said  # nothing ran
    assert _pytest(shown, ci=False).returncode == 0  # a developer's run goes on; its real tests skip
