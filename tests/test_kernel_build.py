from __future__ import annotations

from pathlib import Path

import pytest

from bwlab.errors import BwlabError
from bwlab.kernel import build as kernel_build
from bwlab.kernel import source as kernel_source

from conftest import bwlab

PATCH = """From 1 Mon Sep 17 00:00:00 2001
Subject: [PATCH] x
---
 kernel/sched/fair.c | 1 +
--- a/kernel/sched/fair.c
+++ b/kernel/sched/fair.c
@@ -1 +1,2 @@
 a
+b
"""


def fake_tree(root: Path, sub: int = 4) -> Path:
    (root / "kernel" / "sched").mkdir(parents=True)
    (root / "kernel" / "sched" / "fair.c").write_text("a\n")
    (root / "Makefile").write_text(f"# SPDX\nVERSION = 7\nPATCHLEVEL = 3\nSUBLEVEL = {sub}\nEXTRAVERSION =\n")
    return root


def variant(
    tmp_path: Path, series: kernel_build.Series, hz: int = 250, frag: str = "CONFIG_X=y\n"
) -> kernel_build.Variant:
    tree = tmp_path / "src"
    if not tree.exists():
        fake_tree(tree)
    f = tmp_path / "lab.config"
    f.write_text(frag)
    return kernel_build.Variant(kernel_source.user_source(tree), series, (f,), hz)


def series_with(tmp_path: Path, text: str) -> kernel_build.Series:
    d = tmp_path / "patches"
    d.mkdir(exist_ok=True)
    (d / "0001-x.patch").write_text(text)
    (d / "series").write_text("# comment\n0001-x.patch\n\n")
    return kernel_build.read_series(d / "series")


def test_cache_key_tracks_inputs(tmp_path: Path) -> None:
    empty = kernel_build.read_series(None)
    base = variant(tmp_path, empty).key
    assert base == variant(tmp_path, empty).key  # same inputs, same key
    assert base.startswith("7.3.4-")
    assert variant(tmp_path, empty, hz=1000).key != base
    assert variant(tmp_path, empty, frag="CONFIG_X=n\n").key != base
    one = variant(tmp_path, series_with(tmp_path, PATCH)).key
    assert one != base
    assert variant(tmp_path, series_with(tmp_path, PATCH + "\n")).key != one  # patch content counts
    reworded = PATCH.replace("Subject: [PATCH] x", "Subject: [PATCH] x\n\nA longer changelog.")
    assert variant(tmp_path, series_with(tmp_path, reworded)).key == one  # changelogs do not


def test_flavor_names_extra_fragments(tmp_path: Path) -> None:
    from bwlab.paths import LAB_CONFIG

    src = kernel_source.user_source(fake_tree(tmp_path / "src"))
    empty = kernel_build.read_series(None)
    debug = tmp_path / "debug.config"
    debug.write_text("CONFIG_KCSAN=y\n")
    assert kernel_build.Variant(src, empty, (LAB_CONFIG,), 250).flavor == ""
    assert kernel_build.Variant(src, empty, (LAB_CONFIG, debug), 250).flavor == "debug"


def test_series_errors(tmp_path: Path) -> None:
    with pytest.raises(BwlabError, match="no such file"):
        kernel_build.read_series(tmp_path / "series")
    (tmp_path / "series").write_text("missing.patch\n")
    with pytest.raises(BwlabError, match=r"series:1: patch missing\.patch not found"):
        kernel_build.read_series(tmp_path / "series")


def test_shipped_series_parses() -> None:
    from bwlab.paths import DEFAULT_SERIES

    series = kernel_build.read_series(DEFAULT_SERIES)
    assert all(p.is_file() for p in series.patches)


def test_patched_files() -> None:
    assert kernel_build.patched_files_text(PATCH) == {"kernel/sched/fair.c"}


def test_hz_fragment() -> None:
    text = kernel_build.hz_fragment(1000)
    assert "CONFIG_HZ_1000=y" in text and "CONFIG_HZ_250=n" in text and "CONFIG_HZ=1000" in text
    with pytest.raises(BwlabError, match="unsupported"):
        kernel_build.hz_fragment(123)


def test_prepare_tree_leaves_pristine_source(tmp_path: Path, empty_cache: Path) -> None:
    v = variant(tmp_path, series_with(tmp_path, PATCH))
    work = tmp_path / "work"
    work.mkdir()
    src = kernel_build.prepare_tree(v, work, work / "log")
    assert (src / "kernel/sched/fair.c").read_text() == "a\nb\n"
    assert (tmp_path / "src/kernel/sched/fair.c").read_text() == "a\n"
    assert (src / "Makefile").stat().st_ino == (tmp_path / "src/Makefile").stat().st_ino  # shared, not copied


def test_bad_patch_fails_with_log(tmp_path: Path, empty_cache: Path) -> None:
    v = variant(tmp_path, series_with(tmp_path, PATCH.replace(" a\n+b", " zzz\n+b")))
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(BwlabError, match=r"apply 0001-x\.patch failed .*full log"):
        kernel_build.prepare_tree(v, work, work / "log")
    assert (tmp_path / "src/kernel/sched/fair.c").read_text() == "a\n"


def test_user_source_errors(tmp_path: Path) -> None:
    with pytest.raises(BwlabError, match="no such directory"):
        kernel_source.user_source(tmp_path / "nope")
    with pytest.raises(BwlabError, match="not a kernel source tree"):
        kernel_source.user_source(tmp_path)
    assert kernel_source.user_source(fake_tree(tmp_path / "k", sub=9)).version == "7.3.9"


def test_archive_uri_skips_security(tmp_path: Path) -> None:
    f = tmp_path / "debian.sources"
    f.write_text(
        "Types: deb\nURIs: http://sec.example/x\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://main.example/debian\nSuites: bookworm bookworm-updates\n"
    )
    assert kernel_source.read_archive_uri(f) == "http://main.example/debian"
    f.write_text("Types: deb\n")
    with pytest.raises(BwlabError, match="no non-security"):
        kernel_source.read_archive_uri(f)


def test_missing_kernel_source_is_reported(empty_cache: Path) -> None:
    assert kernel_source.cached_source() is None


GIT_PATCH = """From 1 Mon Sep 17 00:00:00 2001
Subject: [PATCH] y
---
diff --git a/kernel/sched/fair.c b/kernel/sched/fair.c
--- a/kernel/sched/fair.c
+++ b/kernel/sched/fair.c
@@ -1 +1,2 @@
 a
+b
diff --git a/tools/testing/selftests/cgroup/test_cpu.c b/tools/testing/selftests/cgroup/test_cpu.c
--- a/tools/testing/selftests/cgroup/test_cpu.c
+++ b/tools/testing/selftests/cgroup/test_cpu.c
@@ -1 +1,2 @@
 x
+y
"""


def test_selftest_and_doc_changes_do_not_change_the_kernel_key(tmp_path: Path) -> None:
    one = variant(tmp_path, series_with(tmp_path, GIT_PATCH)).key
    tools_changed = GIT_PATCH.replace("+y", "+z")
    assert variant(tmp_path, series_with(tmp_path, tools_changed)).key == one
    # ...but the tree test_cpu is built from follows them
    assert series_with(tmp_path, tools_changed).source_digest != series_with(tmp_path, GIT_PATCH).source_digest
    code_changed = GIT_PATCH.replace("+b", "+c")
    assert variant(tmp_path, series_with(tmp_path, code_changed)).key != one
    head, tools = GIT_PATCH.index("diff --git a/kernel"), GIT_PATCH.index("diff --git a/tools")
    only_tools = GIT_PATCH[:head] + GIT_PATCH[tools:]
    assert kernel_build.patch_code(only_tools.encode()) == b""


def test_format_patch_trailers_do_not_change_the_kernel_key(tmp_path: Path) -> None:
    one = variant(tmp_path, series_with(tmp_path, GIT_PATCH)).key
    trailed = GIT_PATCH + "\nbase-commit: " + "b" * 40 + "\n-- \n2.39.5\n"
    assert variant(tmp_path, series_with(tmp_path, trailed)).key == one


def test_a_stale_cache_entry_is_one_line(empty_cache: Path) -> None:
    entry = kernel_build.images_dir() / "7.3.4-0123456789ab"
    entry.mkdir(parents=True)
    (entry / "bzImage").write_bytes(b"x")
    (entry / "meta.json").write_text('{"key": "7.3.4-0123456789ab", "bzimage": "/gone", "old_field": 1}')
    with pytest.raises(BwlabError, match=r"meta.json: stale or damaged kernel cache entry .*kernel clean --all"):
        kernel_build.list_images()
    proc = bwlab("kernel", "list", env={"BWLAB_CACHE": str(empty_cache)})
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and "stale or damaged" in proc.stderr


def test_a_relative_series_path_names_its_patches_absolutely(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    series_with(tmp_path, PATCH)
    monkeypatch.chdir(tmp_path)
    series = kernel_build.read_series(Path("patches/series"))
    # the build applies them from inside its own tree: a path relative to here would not be found
    assert all(p.is_absolute() and p.is_file() for p in series.patches)


def test_two_fetches_at_once_fetch_once(empty_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite's parallel workers may both need the source on a cold cache: the second waits
    for the first (a lock file) and takes its tree instead of fetching over it."""
    import threading
    import time

    done: list[kernel_source.KernelSource] = []
    fetched: list[float] = []

    def slow_fetch(rel: kernel_source.Release) -> kernel_source.KernelSource:
        assert rel.name == "7.3"
        fetched.append(time.monotonic())
        time.sleep(0.3)
        done.append(kernel_source.KernelSource(path=empty_cache / "src", version="7.3.4", origin="test"))
        return done[0]

    monkeypatch.setattr(kernel_source, "_fetch", slow_fetch)
    monkeypatch.setattr(kernel_source, "cached_source", lambda release: done[0] if done else None)
    got: list[kernel_source.KernelSource] = []
    workers = [threading.Thread(target=lambda: got.append(kernel_source.fetch())) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(10)
    assert len(fetched) == 1 and len(got) == 2 and got[0] == got[1]


def test_releases_accept_their_versions() -> None:
    """7.3 is the series' base exactly; 6.12 any stable update trixie carries (the archive keeps
    only its newest)."""
    assert kernel_source.release_of("7.3").accepts("7.3.4")
    assert not kernel_source.release_of("7.3").accepts("7.3.5")
    assert kernel_source.release_of("6.12").accepts("6.12.117")
    assert not kernel_source.release_of("6.12").accepts("6.13.1")
    with pytest.raises(BwlabError, match=r"unknown kernel release '5\.4'"):
        kernel_source.release_of("5.4")
