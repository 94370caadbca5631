"""Result files: one JSON document per scenario run, with metadata to reproduce it."""

from __future__ import annotations

import datetime as dt
import json
import platform
import subprocess
from pathlib import Path
from typing import Any

from bwlab.errors import BwlabError
from bwlab.paths import REPO_ROOT

SCHEMA = "bwlab-result/1"


def git_revision() -> str:
    """Short HEAD of the bwlab checkout, with -dirty for uncommitted changes."""
    try:
        rev = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return rev + ("-dirty" if dirty else "")


def base_meta(target: str, label: str) -> dict[str, Any]:
    return {
        "target": target,
        "label": label,
        "bwlab_revision": git_revision(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host_kernel": platform.release(),
    }


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    tmp.replace(path)
    return path


def load(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise BwlabError(f"{path}: not a readable result file: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise BwlabError(f"{path}: not a bwlab result (schema {SCHEMA})")
    return doc


def load_dir(directory: Path) -> list[dict[str, Any]]:
    if not directory.is_dir():
        raise BwlabError(f"{directory}: no such results directory")
    docs = [load(p) for p in sorted(directory.glob("*.json"))]
    if not docs:
        raise BwlabError(f"{directory}: no result files (*.json)")
    return docs
