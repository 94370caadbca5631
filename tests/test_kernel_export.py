"""`bwlab kernel export` pieces on text: identity, cover letter, maintainers (the real export
on a 7.3.4 tree is in test_series_real.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bwlab.errors import BwlabError
from bwlab.kernel import build as kernel_build
from bwlab.kernel import export
from bwlab.paths import DEFAULT_SERIES as LAB_SERIES
from bwlab.paths import LAGS_SERIES, POSTED_SERIES

PATCH = f"""From 0123 Mon Sep 17 00:00:00 2001
From: {export.PLACEHOLDER}
Date: Mon, 23 Nov 2026 10:00:00 +0000
Subject: [PATCH 1/2] sched/fair: Do a thing

Text that names Bwlab Developers in passing.

Signed-off-by: {export.PLACEHOLDER}
---
 kernel/sched/fair.c | 1 +
"""


def test_personalize_puts_the_user_in_from_and_signed_off_by_only() -> None:
    out = export.personalize(PATCH, "Ada Lovelace", "ada@example.org")
    assert "From: Ada Lovelace <ada@example.org>\n" in out
    assert "Signed-off-by: Ada Lovelace <ada@example.org>\n" in out
    assert export.PLACEHOLDER not in out and "names Bwlab Developers in passing" in out


def test_personalize_refuses_a_patch_without_the_placeholder_sign_off() -> None:
    with pytest.raises(BwlabError, match="no 'Signed-off-by"):
        export.personalize(PATCH.replace(f"Signed-off-by: {export.PLACEHOLDER}", ""), "A", "a@b")


def test_every_shipped_patch_carries_the_placeholder_once_as_author() -> None:
    for patch in kernel_build.read_series(POSTED_SERIES).patches:
        text = patch.read_text()
        assert text.count(f"From: {export.PLACEHOLDER}\n") == 1, patch.name
        export.personalize(text, "A B", "a@b.c")  # does not raise


def test_read_cover_of_the_shipped_cover_letter() -> None:
    cover = export.read_cover(POSTED_SERIES.parent / export.COVER)
    assert cover.prefix == "RFC PATCH v2"
    assert cover.subject.startswith("sched/fair: ") and "\n" not in cover.subject
    assert cover.blurb.startswith("A group whose demand equals its CPU quota")
    assert "Bwlab Developers (" not in cover.blurb and "base-commit" not in cover.blurb


@pytest.mark.parametrize(("text", "error"), [
    ("From: x\n\nno subject\n", "no 'Subject"),
    ("Subject: [PATCH 0/2] x\n\nText but no shortlog\n", "no shortlog"),
    ("Subject: [PATCH 0/2] x\n\nA (2):\n  one\n", "text is empty"),
])  # fmt: skip
def test_read_cover_refuses_what_it_cannot_use(tmp_path: Path, text: str, error: str) -> None:
    (tmp_path / "c.patch").write_text(text)
    with pytest.raises(BwlabError, match=error):
        export.read_cover(tmp_path / "c.patch")


def test_parse_maintainers_sends_to_maintainers_and_copies_the_rest() -> None:
    out = """Ingo Molnar <mingo@redhat.com> (maintainer:SCHEDULER)
Peter Zijlstra <peterz@infradead.org> (maintainer:SCHEDULER)
Ben Segall <bsegall@google.com> (reviewer:SCHEDULER)
"Michal Koutný" <mkoutny@suse.com> (maintainer:CONTROL GROUP (CGROUP))
linux-kernel@vger.kernel.org (open list)
Peter Zijlstra <peterz@infradead.org> (maintainer:PERFORMANCE EVENTS SUBSYSTEM)
noise without a role
"""
    to, cc = export.parse_maintainers(out)
    assert to == ("Ingo Molnar <mingo@redhat.com>", "Peter Zijlstra <peterz@infradead.org>",
                  '"Michal Koutný" <mkoutny@suse.com>')  # fmt: skip
    assert cc == ("Ben Segall <bsegall@google.com>", "linux-kernel@vger.kernel.org")


MAINTAINERS = "CONTROL GROUP\nF:\tkernel/cgroup/\nF:\ttools/testing/selftests/cgroup/\nF:\tinclude/linux/cgroup*.h\n"
ADDS_A_FILE = """diff --git a/tools/testing/selftests/cgroup/settings b/tools/testing/selftests/cgroup/settings
new file mode 100644
diff --git a/kernel/sched/fair.c b/kernel/sched/fair.c
index 1..2 100644
"""


def test_a_new_file_that_maintainers_covers_needs_no_maintainers_change() -> None:
    assert export.added_or_deleted(ADDS_A_FILE) == ["tools/testing/selftests/cgroup/settings"]
    assert export.covered_by_maintainers(["tools/testing/selftests/cgroup/settings"], MAINTAINERS)
    assert export.covered_by_maintainers(["include/linux/cgroup-defs.h"], MAINTAINERS)  # a glob
    # not covered: a new directory; below a glob's directory (its * stays in one); no files
    assert not export.covered_by_maintainers(["tools/testing/selftests/sched_bw/test.c"], MAINTAINERS)
    assert not export.covered_by_maintainers(["include/linux/cgroup/x.h", "kernel/cgroup/a.c"], MAINTAINERS)
    assert not export.covered_by_maintainers([], MAINTAINERS)
    gone = "diff --git a/kernel/cgroup/old.c b/kernel/cgroup/old.c\ndeleted file mode 100644\n"
    assert export.added_or_deleted(gone) == ["kernel/cgroup/old.c"]
    assert export.added_or_deleted("diff --git a/x b/x\nindex 1..2 100644\n") == []


def test_fill_cover_keeps_git_shortlog_and_adds_the_compare_table() -> None:
    generated = "Subject: [RFC PATCH 0/2] *** SUBJECT HERE ***\n\n*** BLURB HERE ***\n\nA (2):\n  x\n"
    cover = export.Cover(prefix="RFC PATCH", subject="sched: Subject", blurb="The text.")
    out = export.fill_cover(generated, cover, "table2: a -> b\n  10ms ...\n")
    assert out.startswith("Subject: [RFC PATCH 0/2] sched: Subject\n\nThe text.\n\nMeasured in one run")
    assert "table2: a -> b\n  10ms ...\n\nA (2):\n" in out
    with pytest.raises(BwlabError, match="no cover letter template"):
        export.fill_cover("Subject: x\n", cover, None)


def test_git_identity_comes_from_git_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "gitconfig"
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.chdir(tmp_path)  # not inside a repository with its own user.*
    with pytest.raises(BwlabError, match=r"git config user\.name is not set"):
        export.git_identity()
    subprocess.run(["git", "config", "--global", "user.name", "Ada Lovelace"], check=True)
    with pytest.raises(BwlabError, match=r"git config user\.email is not set"):
        export.git_identity()
    subprocess.run(["git", "config", "--global", "user.email", "ada@example.org"], check=True)
    assert export.git_identity() == ("Ada Lovelace", "ada@example.org")
    subprocess.run(["git", "config", "--global", "user.email", "nobody"], check=True)
    with pytest.raises(BwlabError, match="not a name and an email"):
        export.git_identity()


def test_own_patches_of_the_shipped_series() -> None:
    posted = kernel_build.read_series(POSTED_SERIES)
    assert export.own_patches(posted) == len(posted.patches)
    lags = kernel_build.read_series(LAGS_SERIES)  # its own base: v7.3.4, nothing under it
    assert export.own_patches(lags) == 3 and len(lags.patches) == 3


def test_the_lab_kernels_lags_is_the_posted_lags_rebased() -> None:
    """kernel/lab/lags/ (LAGS on the bandwidth series, what the lab kernel builds) and
    kernel/lags/ (LAGS on v7.3.4) change the same lines: only their context and line numbers
    differ. An edit to one without the other fails here."""
    lab = kernel_build.read_series(LAB_SERIES)
    rebased = [p for p in lab.patches if p.parent.name == "lags"]
    posted = kernel_build.read_series(LAGS_SERIES).patches
    assert [p.name for p in rebased] == [p.name for p in posted]

    def changed(patch: Path) -> list[str]:
        diff = patch.read_text().split("\n---\n", 1)[1]
        lines = diff.splitlines()
        return [s for s in lines if s.startswith("diff --git") or (s[:1] in "+-" and not s.startswith(("+++", "---")))]

    for a, b in zip(rebased, posted, strict=True):
        assert changed(a) == changed(b), a.name


def test_own_patches_wants_prerequisites_first_and_a_patch_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    pa, pb = tmp_path / "a" / "1.patch", tmp_path / "b" / "2.patch"
    series = tmp_path / "b" / "series"
    with pytest.raises(BwlabError, match="listed after this series' own"):
        export.own_patches(kernel_build.Series(series, (pb, pa)))
    with pytest.raises(BwlabError, match="no patch of its own"):
        export.own_patches(kernel_build.Series(series, (pa,)))
    assert export.own_patches(kernel_build.Series(series, (pa, pb))) == 1


def test_read_cover_of_the_lags_cover_letter() -> None:
    cover = export.read_cover(LAGS_SERIES.parent / export.COVER)
    assert cover.prefix == "RFC PATCH" and cover.subject.startswith("sched/fair: ")
    assert "prerequisite-patch-id:" not in cover.blurb and "base-commit" not in cover.blurb
    assert len(cover.blurb.splitlines()) <= 120


def test_a_tree_cloned_from_the_cached_base_has_the_base_commit_of_a_fresh_one(tmp_path: Path,
                                                                               empty_cache: Path) -> None:  # fmt: skip
    """kernel/git.py: a fetched source is committed once into the cache and trees are clones of
    it; the base commit (what the cover letter's base-commit names) is the one committing the
    tree afresh gives, and the series applies on it as before."""
    from bwlab.kernel import git as kernel_git
    from bwlab.kernel.source import KernelSource

    tree = tmp_path / "src"
    (tree / "kernel/sched").mkdir(parents=True)
    (tree / "kernel/sched/fair.c").write_text("int x;\n")
    (tree / "scripts").mkdir()
    (tree / "scripts/run.sh").write_text("#!/bin/sh\n")
    (tree / "scripts/run.sh").chmod(0o755)
    (tree / ".gitignore").write_text("*.sh\n")  # ignored files are committed too (-f)
    patch = tmp_path / "0001.patch"
    patch.write_text(PATCH.replace(export.PLACEHOLDER, "A <a@b>").split("---\n")[0] + "---\n"
                     " kernel/sched/fair.c | 1 +\n 1 file changed, 1 insertion(+)\n\n"
                     "diff --git a/kernel/sched/fair.c b/kernel/sched/fair.c\n--- a/kernel/sched/fair.c\n"
                     "+++ b/kernel/sched/fair.c\n@@ -1 +1,2 @@\n int x;\n+int y;\n-- \n2.39.5\n")  # fmt: skip
    series = kernel_build.Series(path=None, patches=(patch,))
    fresh = kernel_git.git_tree(KernelSource(tree, "7.3.4", "user:src"), series, tmp_path / "fresh")
    cached_source = KernelSource(tree, "7.3.4", "debian:linux-source-7.3=7.3.4-1")
    first = kernel_git.git_tree(cached_source, series, tmp_path / "first")
    second = kernel_git.git_tree(cached_source, series, tmp_path / "second")
    assert fresh == first == second
    assert len(list((empty_cache / "git").glob("7.3.4-*.git"))) == 1
    assert (tmp_path / "second/scripts/run.sh").stat().st_mode & 0o111
    assert (tmp_path / "second/kernel/sched/fair.c").read_text() == "int x;\nint y;\n"
