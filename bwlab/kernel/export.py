"""`bwlab kernel export`: the series as a maintainer receives it.

The repository keeps a neutral placeholder identity in every patch. Export applies the series,
rewritten in the user's own git identity (author and Signed-off-by), onto the reproducible base
commit, then lets `git format-patch` write it out with a cover letter (our subject and text,
git's shortlog and diffstat), `base-commit:`, To/Cc from the tree's get_maintainer.pl, and
runs checkpatch.pl --strict on every patch. Optionally the cover letter gets a table printed by
`bwlab compare` of two result files, measured in one run.

A series that lists another series' patches first (a series written on the bandwidth series) is
posted as its own patches on top of those: they are applied, but only the series' own patches
are written, with `prerequisite-patch-id:` lines for the others after `base-commit:`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from bwlab.errors import BwlabError, last_line
from bwlab.kernel.build import Series
from bwlab.kernel.git import git_tree
from bwlab.kernel.source import KernelSource

PLACEHOLDER = "Bwlab Developers <dev@bwlab.invalid>"
COVER = "0000-cover-letter.patch"
# a Fixes: or commit reference cannot be looked up in a tree made from a release tarball
CHECKPATCH_IGNORE = "UNKNOWN_COMMIT_ID"
# checkpatch asks "does MAINTAINERS need updating?" of every patch that adds or deletes a file,
# whether or not an entry already covers it; ignored only where one does (covered_by_maintainers)
FILE_PATH_CHANGES = "FILE_PATH_CHANGES"


def added_or_deleted(patch: str) -> list[str]:
    """The files a patch adds or deletes (git's "new file mode" / "deleted file mode")."""
    found = []
    current = ""
    for line in patch.splitlines():
        if line.startswith("diff --git a/"):
            current = line.split(" b/", 1)[-1]
        elif line.startswith(("new file mode", "deleted file mode")) and current:
            found.append(current)
    return found


def checkpatch_ignore(patch: str, maintainers: str) -> str:
    """checkpatch's --ignore for a patch: UNKNOWN_COMMIT_ID always; FILE_PATH_CHANGES too when
    every file it adds or deletes is covered by a MAINTAINERS entry already."""
    if covered_by_maintainers(added_or_deleted(patch), maintainers):
        return f"{CHECKPATCH_IGNORE},{FILE_PATH_CHANGES}"
    return CHECKPATCH_IGNORE


def covered_by_maintainers(paths: list[str], maintainers: str) -> bool:
    """Whether some MAINTAINERS `F:` pattern covers each path: as MAINTAINERS says, a directory
    pattern ("dir/") everything below it, any other a glob whose wildcards stay within one
    directory ("dir/*" the files in dir, not below). False for no paths."""
    if not paths:  # most patches: no need to read MAINTAINERS' ~25000 patterns
        return False
    patterns = [line[2:].strip() for line in maintainers.splitlines() if line.startswith("F:")]
    dirs = tuple(p for p in patterns if p.endswith("/"))
    globs = [re.compile(re.escape(p).replace(r"\*", "[^/]*").replace(r"\?", "[^/]")) for p in patterns
             if not p.endswith("/")]  # fmt: skip
    return all(path.startswith(dirs) or any(g.fullmatch(path) for g in globs) for path in paths)


@dataclass(frozen=True)
class Cover:
    """What our cover letter says: the subject prefix ("RFC PATCH"), the subject and the text."""

    prefix: str
    subject: str
    blurb: str


@dataclass(frozen=True)
class Exported:
    files: tuple[Path, ...]  # cover letter first
    base: str
    prerequisites: int  # patches of another series applied first and not written
    to: tuple[str, ...]
    cc: tuple[str, ...]
    checkpatch: dict[str, str]  # patch file name -> findings (empty if clean)


def git_identity(cwd: Path | None = None) -> tuple[str, str]:
    """The user's (name, email) from git config; the patches go out in their name."""
    values = []
    for key in ("user.name", "user.email"):
        proc = subprocess.run(["git", "config", "--get", key], cwd=cwd, capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not proc.stdout.strip():
            raise BwlabError(f"git config {key} is not set: the series is exported in your name "
                             f"(git config --global {key} ...)")  # fmt: skip
        values.append(proc.stdout.strip())
    if "<" in values[0] or ">" in values[0] or "@" not in values[1]:
        raise BwlabError(f"git identity {values[0]!r} <{values[1]}> is not a name and an email address")
    return values[0], values[1]


def personalize(text: str, name: str, email: str) -> str:
    """The patch with the placeholder identity replaced in From: and Signed-off-by:."""
    if f"Signed-off-by: {PLACEHOLDER}" not in text:
        raise BwlabError(f"patch has no 'Signed-off-by: {PLACEHOLDER}' to put your name in")
    who = f"{name} <{email}>"
    text = re.sub(rf"^From: {re.escape(PLACEHOLDER)}$", f"From: {who}", text, count=1, flags=re.M)
    return re.sub(rf"^Signed-off-by: {re.escape(PLACEHOLDER)}$", f"Signed-off-by: {who}", text, flags=re.M)


def read_cover(path: Path) -> Cover:
    """Subject and text of a cover letter in `git format-patch --cover-letter` form: the text
    runs from the blank line after the headers to the shortlog ("Author (N):")."""
    if not path.is_file():
        raise BwlabError(f"cover letter {path}: no such file")
    text = path.read_text()
    head, sep, body = text.partition("\n\n")
    subject = re.search(r"^Subject: \[([^\]]+?)(?: \d+/\d+)?\] (.+(?:\n .+)*)$", head, re.M)
    if not sep or subject is None:
        raise BwlabError(f"cover letter {path}: no 'Subject: [PATCH 0/N] ...' header")
    shortlog = re.search(r"^\S.* \(\d+\):$", body, re.M)
    if shortlog is None:
        raise BwlabError(f"cover letter {path}: no shortlog ('Name (N):') after the text")
    blurb = body[: shortlog.start()].strip("\n")
    if not blurb:
        raise BwlabError(f"cover letter {path}: the text is empty")
    return Cover(prefix=subject.group(1), subject=" ".join(subject.group(2).split()), blurb=blurb)


def parse_maintainers(output: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """get_maintainer.pl's output (with role statistics) as (To: maintainers, Cc: the rest)."""
    to: list[str] = []
    cc: list[str] = []
    for line in output.splitlines():
        m = re.match(r"^(.+?) \((.+)\)$", line.strip())
        if m is None:
            continue
        (to if m.group(2).startswith("maintainer:") else cc).append(m.group(1))
    return tuple(dict.fromkeys(to)), tuple(a for a in dict.fromkeys(cc) if a not in to)


def fill_cover(generated: str, cover: Cover, extra: str | None) -> str:
    """git format-patch's cover letter with our subject and text (and a compare table)."""
    if "*** SUBJECT HERE ***" not in generated or "*** BLURB HERE ***" not in generated:
        raise BwlabError("git format-patch wrote no cover letter template")
    blurb = cover.blurb
    if extra:
        blurb += "\n\nMeasured in one run (bwlab compare):\n\n" + extra.rstrip("\n")
    return generated.replace("*** SUBJECT HERE ***", cover.subject).replace("*** BLURB HERE ***", blurb)


def own_patches(series: Series) -> int:
    """How many of the series' patches are its own: those in its directory, after any listed
    from another series (its prerequisites), which must all come first."""
    assert series.path is not None
    home = series.path.parent.resolve()
    own = [p.parent.resolve() == home for p in series.patches]
    first = own.index(True) if True in own else len(own)
    if not all(own[first:]):
        late = series.patches[first + own[first:].index(False)]
        raise BwlabError(f"{series.path}: {late} is another series' patch listed after this series' own; "
                         "list prerequisites first")  # fmt: skip
    if first == len(own):
        raise BwlabError(f"{series.path}: no patch of its own (all are in other directories)")
    return len(own) - first


def export(source: KernelSource, series: Series, dest: Path, identity: tuple[str, str],
           compare_table: str | None = None, keep_tree: Path | None = None) -> Exported:  # fmt: skip
    """Write the series to `dest` as format-patch output in the user's name (see module doc)."""
    if series.path is None or not series.patches:
        raise BwlabError("nothing to export: the series is empty")
    cover = read_cover(series.path.parent / COVER)
    count = own_patches(series)
    if dest.exists() and any(dest.iterdir()):
        raise BwlabError(f"{dest} is not empty; choose an empty or new directory")
    name, email = identity
    with tempfile.TemporaryDirectory(prefix="bwlab-export-") as tmp:
        work = Path(tmp)
        mine = []
        for i, patch in enumerate(series.patches, 1):
            out = work / "in" / f"{i:04d}-{patch.name}"
            out.parent.mkdir(exist_ok=True)
            out.write_text(personalize(patch.read_text(), name, email))
            mine.append(out)
        tree = keep_tree if keep_tree is not None else work / "linux"
        base, _ = git_tree(source, replace(series, patches=tuple(mine)), tree, committer=identity)
        maint = subprocess.run(["perl", "scripts/get_maintainer.pl", "--no-git", "--no-git-fallback",
                                *map(str, mine[-count:])], cwd=tree, capture_output=True, text=True,
                               check=False)  # fmt: skip
        if maint.returncode != 0:
            raise BwlabError(f"get_maintainer.pl failed: {last_line(maint.stderr)}")
        to, cc = parse_maintainers(maint.stdout)
        dest.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}
        cmd = ["git", "format-patch", "-q", "--cover-letter", f"--base=v{source.version}",
               f"--subject-prefix={cover.prefix}",
               *[f"--to={a}" for a in to], *[f"--cc={a}" for a in cc],
               "-o", str(dest.absolute()), f"bwlab~{count}..bwlab"]  # fmt: skip
        proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise BwlabError(f"git format-patch failed: {last_line(proc.stderr)}")
        files = sorted(dest.glob("*.patch"))
        cover_file = files[0]
        cover_file.write_text(fill_cover(cover_file.read_text(), cover, compare_table))
        findings: dict[str, str] = {}
        maintainers = (tree / "MAINTAINERS").read_text(errors="replace")
        for f in files[1:]:
            text = f.read_text()
            check = subprocess.run(["perl", "scripts/checkpatch.pl", "--strict", "--no-tree", "--quiet",
                                    "--ignore", checkpatch_ignore(text, maintainers), "-"], cwd=tree, input=text,
                                   capture_output=True, text=True, check=False)  # fmt: skip
            findings[f.name] = check.stdout.strip() if check.returncode != 0 else ""
        if keep_tree is None:
            shutil.rmtree(tree)
    return Exported(files=tuple(files), base=base, prerequisites=len(mine) - count, to=to, cc=cc, checkpatch=findings)
