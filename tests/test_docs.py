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
# are written with 12, other projects' with 9), not part of a longer word (a range's two ends
# are two). Marked "†": a revision of parked work, one of PARKED, explained by a line of its
# document that begins "† ".
REVISION = re.compile(r"(?<![\w.])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7}(?!\w)(†)?")
# Stops 54-56's commits, whose submission was parked and never landed (their work: 9e30b5d)
PARKED = frozenset("00a5193 05bd90d 21844a2 31f023c 552e112 8be8dc6 92b23fa 9d8a9e6 9e564a6 b6ddea8 ee51d80 efa8d99 "
                   "979cc1c 9f3f85b".split())  # fmt: skip
TOP = ("bwlab", "tests", "benchmarks", "scripts", "kernel", "nri", "scx", "sim", "workloads", "deploy", "docs")
PATH = re.compile(r"(?<![\w./~-])((?:{})/[\w.*/-]*[\w/*])".format("|".join(TOP)))  # a glob too


def _named_revisions() -> dict[str, set[str]]:
    """Every unmarked revision the documents name, with the documents naming it."""
    named: dict[str, set[str]] = {}
    for doc in DOCS:
        text = doc.read_text()
        for match in REVISION.finditer(text):
            rev = match.group(0).removesuffix("†")
            if match.group(1):
                assert rev in PARKED, f"{doc.name} marks {rev} parked: not one of stops 54-56's"
                assert re.search(r"^† ", text, re.MULTILINE), f"{doc.name} marks {rev} parked and has no † note"
                continue
            named.setdefault(rev, set()).add(doc.name)
    return named


def test_every_revision_named_is_in_the_history() -> None:
    if not (ROOT / ".git").exists():
        pytest.fail("not a git checkout: the revisions docs/ names cannot be checked")
    named = _named_revisions()
    assert len(named) > 50  # the record names its revisions; a broken pattern finds none
    history = subprocess.run(["git", "rev-list", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
    prefixes = {line[:7] for line in history.stdout.split()}
    missing = sorted(set(named) - prefixes)
    assert not missing, {rev: sorted(named[rev]) for rev in missing}


# Paths not of this repository that the documents name: the kernel's tree, and the output
# directories burst.md's commands write (sim/n$n-hz$hz)
ELSEWHERE = ("kernel/sched/", "scripts/config", "sim/n*-hz*")


def test_every_path_named_exists() -> None:
    absent: dict[str, str] = {}
    for doc in DOCS:
        text = doc.read_text()
        for match in PATH.finditer(text):
            path = match.group(1).rstrip(".").split("::")[0]
            if path.startswith(ELSEWHERE) or text[match.end() : match.end() + 1] == "$":
                continue  # the kernel's tree, or a shell variable's value (sim/n$n)
            if not ((ROOT / path).exists() or ("*" in path and any(ROOT.glob(path)))):
                absent.setdefault(path, doc.name)
    assert not absent, absent
