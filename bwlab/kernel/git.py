"""A git tree of the kernel source with the series applied: what `base-commit:` names."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from bwlab.errors import BwlabError, last_line
from bwlab.kernel.build import Series, run_logged
from bwlab.kernel.source import KernelSource

GIT_IDENTITY = {"GIT_AUTHOR_NAME": "bwlab", "GIT_AUTHOR_EMAIL": "bwlab@localhost",
                "GIT_COMMITTER_NAME": "bwlab", "GIT_COMMITTER_EMAIL": "bwlab@localhost",
                "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}  # fmt: skip


def git_tree(source: KernelSource, series: Series, dest: Path,
             committer: tuple[str, str] | None = None) -> tuple[str, str]:  # fmt: skip
    """A git repository of the source whose first commit is reproducible (fixed identity, date
    and message: the series' `base-commit:`), tagged v<version>, with the series applied by
    `git am` on branch `bwlab`, committed as `committer` (name, email) if given. Returns (base
    commit, head commit)."""
    if dest.exists():
        raise BwlabError(f"{dest} already exists; remove it or choose another directory")
    if shutil.which("git") is None:
        raise BwlabError("git is not installed (apt-get install git)")
    env = {**os.environ, **GIT_IDENTITY}

    def git(*args: str) -> str:
        # an automatic gc (git am starts one on the tens of thousands of loose objects of the
        # first commit) runs here, not detached in the background after we return
        proc = subprocess.run(["git", "-c", "gc.autoDetach=false", *args], cwd=dest, env=env, capture_output=True,
                              text=True, check=False)  # fmt: skip
        if proc.returncode != 0:
            raise BwlabError(f"git {args[0]} failed: {last_line(proc.stderr)}")
        return proc.stdout.strip()

    log = dest.parent / f"{dest.name}.copy.log"
    dest.parent.mkdir(parents=True, exist_ok=True)
    run_logged(["cp", "-a", str(source.path), str(dest)], log, "copy source tree")
    git("init", "-q")
    git("add", "-A", "-f", ".")
    git("commit", "-q", "-m", f"Linux {source.version}")
    base = git("rev-parse", "HEAD")
    git("tag", f"v{source.version}")
    git("checkout", "-q", "-b", "bwlab")
    if committer is not None:
        env.update({"GIT_COMMITTER_NAME": committer[0], "GIT_COMMITTER_EMAIL": committer[1]})
        env.pop("GIT_COMMITTER_DATE")
    if series.patches:
        git("am", "-q", *map(str, series.patches))
    return base, git("rev-parse", "HEAD")
