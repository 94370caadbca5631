"""The sched_ext scheduler's build glue without building anything: pahole's wrapper and
version check, the BTF switch of a kernel build, and the scheduler build's refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from bwlab.errors import BwlabError
from bwlab.kernel import pahole, scheduler
from bwlab.paths import SCX_CONFIG


def test_btf_is_asked_by_the_scx_fragment_only() -> None:
    assert pahole.wants_btf(SCX_CONFIG.read_text())
    assert not pahole.wants_btf("CONFIG_DEBUG_INFO_BTF=n\n# CONFIG_DEBUG_INFO_BTF=y\nCONFIG_DEBUG_INFO_BTF_MODULES=y\n")


def test_version_reads_pahole_and_refuses_what_does_not_run(tmp_path: Path) -> None:
    fake = tmp_path / "pahole"
    fake.write_text("#!/bin/sh\necho v1.30\n")
    fake.chmod(0o755)
    assert pahole.version(fake) == (1, 30)
    fake.write_text("#!/bin/sh\necho v1.30; exit 3\n")
    assert pahole.version(fake) is None
    assert pahole.version(tmp_path / "missing") is None


def test_the_wrapper_runs_the_root_through_its_own_loader(tmp_path: Path) -> None:
    text = pahole._wrapper_text(tmp_path)
    assert f'exec "{tmp_path}/lib64/ld-linux-x86-64.so.2" --library-path' in text
    assert f'"{tmp_path}/usr/bin/pahole" "$@"' in text


def test_no_debootstrap_is_one_clear_error(empty_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pahole.shutil, "which", lambda _: None)
    with pytest.raises(BwlabError, match=r"pahole >= 1\.26: debootstrap is not installed"):
        pahole.ensure()


def test_the_scheduler_needs_a_built_sched_ext_kernel(empty_cache: Path) -> None:
    with pytest.raises(BwlabError, match=r"no kernel 7\.3\.4-000000000000 in the cache"):
        scheduler.build("7.3.4-000000000000")
