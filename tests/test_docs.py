"""The measurement record speaks of what is in the repository: every revision docs/ or the
README names is a commit of this history (or marked as parked work, whose commits never
landed), and every repository path it names exists."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
# A revision of ours: 7 hex digits with a letter and a digit (kernel keys and upstream's commits
# are written with 12, other projects' with 9), not part of a longer word. Marked "†": a
# revision of parked work (the note in each document that has one).
REVISION = re.compile(r"(?<![\w.-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7}(?![\w-])(†)?")
TOP = ("bwlab", "tests", "benchmarks", "scripts", "kernel", "nri", "scx", "sim", "workloads", "deploy", "docs")
PATH = re.compile(r"(?<![\w./~-])((?:{})/[\w.*/-]*[\w/*])".format("|".join(TOP)))  # a glob too


def _named_revisions() -> dict[str, set[str]]:
    named: dict[str, set[str]] = {}
    for doc in DOCS:
        text = doc.read_text()
        for match in REVISION.finditer(text):
            if match.group(1):
                assert "† " in text, f"{doc.name} marks {match.group(0)} parked and has no note saying what that is"
                continue
            named.setdefault(match.group(0), set()).add(doc.name)
    return named


def test_every_revision_named_is_in_the_history() -> None:
    if not (ROOT / ".git").exists():
        pytest.fail("not a git checkout: the revisions docs/ names cannot be checked")
    named = _named_revisions()
    assert len(named) > 50  # the record names its revisions; a broken pattern finds none
    check = subprocess.run(["git", "cat-file", "--batch-check"], cwd=ROOT, capture_output=True, text=True,
                           input="".join(f"{rev}^{{commit}}\n" for rev in named), check=True)  # fmt: skip
    missing = sorted(line.split()[0].removesuffix("^{commit}") for line in check.stdout.splitlines()
                     if line.endswith(" missing"))  # fmt: skip
    assert not missing, {rev: sorted(named[rev]) for rev in missing}


def test_every_path_the_testing_record_names_exists() -> None:
    absent: dict[str, str] = {}
    for doc in (ROOT / "docs" / "testing.md",):
        for match in PATH.finditer(doc.read_text()):
            path = match.group(1).rstrip(".").split("::")[0]
            if not ((ROOT / path).exists() or ("*" in path and any(ROOT.glob(path)))):
                absent.setdefault(path, doc.name)
    assert not absent, absent
