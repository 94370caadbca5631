"""Host-userland guests (bwlab/targets/hostroot.py): what the host hands the guest, checked here
without a guest (the share's env and command files run by the host's own /bin/sh, the kernel
command line, bad input); the guest itself in test_hostroot_real.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bwlab import scenario
from bwlab.errors import BwlabError
from bwlab.kernel.build import KernelImage
from bwlab.targets import hostroot

from conftest import bwlab


def test_kernel_args_boot_the_hosts_root_read_only_into_the_init() -> None:
    args = hostroot.kernel_args(fifo=True, interactive=False).split()
    assert "root=/dev/root" in args and "rootfstype=9p" in args and "ro" in args
    assert f"init={hostroot.INIT}" in args and "tsc=reliable" in args
    assert "tsc=reliable" not in hostroot.kernel_args(fifo=False, interactive=False).split()
    assert hostroot.INIT.is_file() and hostroot.INIT.stat().st_mode & 0o111  # the kernel execs it


@pytest.mark.parametrize("item", ["NOEQUALS", "=x", "1A=x", "A-B=x", "A B=x", "\u00c9=x", "A\u00b2=x"])
def test_a_malformed_env_is_an_error(item: str) -> None:
    with pytest.raises(BwlabError, match="expected NAME=VALUE"):
        hostroot.parse_env([item])


def test_the_share_carries_argv_cwd_and_env_through_sh_unchanged(tmp_path: Path) -> None:
    """What the guest's init does with the share (`. env; cd "$BWLAB_CWD"; . command`), done by
    this host's /bin/sh: arguments and values with spaces, quotes and $ arrive as given."""
    share = tmp_path / "share"
    share.mkdir()
    odd = "a b 'c' \"d\" $HOME `x` \\ ;"
    env = hostroot.parse_env([f"ODD={odd}", "EMPTY="])
    argv = ["/bin/sh", "-c", 'printf "%s|" "$@" "$ODD" "$EMPTY" "$(pwd)"', "sh", odd, ""]
    hostroot.write_share(share, argv, str(tmp_path), env, ["BW_SLUSH", "NO_BW_CLIP_SLICE"], False)
    script = f'. {share}/env; cd "$BWLAB_CWD" || exit 126; . {share}/command'
    # the init's own line, as it stands there (escaped in its double quotes)
    assert '. $X/env; cd \\"\\$BWLAB_CWD\\" || exit 126; . $X/command' in hostroot.INIT.read_text()
    got = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, check=True, env={})
    assert got.stdout == f"{odd}||{odd}||{tmp_path}|"
    assert (share / "features").read_text().split() == ["BW_SLUSH", "NO_BW_CLIP_SLICE"]
    assert not (share / "interactive").exists()


def test_env_may_set_what_the_guest_sets_by_default(tmp_path: Path) -> None:
    hostroot.write_share(tmp_path, ["true"], "/", {"HOME": "/x", "BWLAB_CWD": "/ignored"}, None, False)
    text = (tmp_path / "env").read_text()
    assert "export HOME=/x\n" in text and text.endswith("export BWLAB_CWD=/\n")  # the cwd is bwlab's


@pytest.mark.parametrize("cwd", ["/run", "/run/user/0", "/proc/1", "/sys", "/dev/shm"])
def test_a_working_directory_the_guest_remounts_is_an_error(tmp_path: Path, cwd: str) -> None:
    with pytest.raises(BwlabError, match="mounts afresh"):
        hostroot.check_paths(tmp_path, cwd)
    hostroot.check_paths(tmp_path, "/running")  # a prefix of a name is not the directory


def test_a_comma_in_the_temporary_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(BwlabError, match="comma"):
        hostroot.check_paths(tmp_path / "a,b", "/")


@pytest.mark.parametrize("item", ["2222", "2222:", ":22", "0:22", "2222:65536", "a:22", "22:\u0662\u0662", "1:2:3"])
def test_a_malformed_forward_is_an_error(item: str) -> None:
    with pytest.raises(BwlabError, match="expected PORT:GUESTPORT"):
        hostroot.parse_forwards([item])


def test_forwards_give_a_card_on_the_user_network_reached_from_loopback_only() -> None:
    assert hostroot.nic_args([]) == ["-nic", "none"]
    pairs = hostroot.parse_forwards(["2222:22", "8080:80"])
    assert pairs == [(2222, 22), (8080, 80)]
    assert hostroot.nic_args(pairs) == [
        "-nic", "user,model=virtio-net-pci,ipv6=off,hostfwd=tcp:127.0.0.1:2222-:22,hostfwd=tcp:127.0.0.1:8080-:80"
    ]  # fmt: skip


def test_bad_input_is_one_line() -> None:
    res = bwlab("guest", "exec", "--kernel", "7.3.4-000000000000", "--", "true")
    assert res.returncode == 1 and res.stderr.count("\n") == 1 and "no built kernel" in res.stderr, res.stderr
    res = bwlab("guest", "exec", "--kernel", "7.3.4-000000000000")
    assert res.returncode == 2 and "CMD" in res.stderr, res.stderr
    res = bwlab("guest", "exec", "--kernel", "x", "--env", "1=2", "--", "true")
    assert res.returncode == 1 and res.stderr.count("\n") == 1 and "expected NAME=VALUE" in res.stderr, res.stderr
    res = bwlab("guest", "exec", "--kernel", "x", "--forward", "22", "--", "true")
    assert res.returncode == 1 and res.stderr.count("\n") == 1 and "PORT:GUESTPORT" in res.stderr, res.stderr
    res = bwlab("guest", "shell", "--kernel", "x")  # stdin is not a terminal here
    assert res.returncode == 1 and "terminal" in res.stderr, res.stderr


def _image(tmp_path: Path, patches: tuple[str, ...] = ()) -> KernelImage:
    return KernelImage(key="k", bzimage=tmp_path / "bzImage", version="7.3.4", release="7.3.4-k", origin="",
                       series_digest="", patches=patches, config_digest="", hz=250, build_seconds=0.0)  # fmt: skip


def test_guest_host_runs_this_bwlab_on_the_scenario_and_hands_back_its_result(tmp_path: Path) -> None:
    """`--target guest-host`: the guest runs this bwlab's host target on the scenario's file,
    with --reps and --duration only where they were given here; the script around it prints
    the result file however the run ended, and keeps its exit status."""
    target = hostroot.HostUserlandTarget(_image(tmp_path))
    assert target.label == "guest-baseline-userland"
    path = scenario.builtin_path("table2")
    argv = target.inner_argv(scenario.load(path))
    assert argv[:2] == ["sh", "-c"] and argv[4:] == [sys.executable, "-m", "bwlab.cli", "run", str(path.resolve()),
                                                     "--target", "host"]  # fmt: skip
    argv = target.inner_argv(scenario.load(path, {"repetitions": 1, "duration_s": 2.5}))
    assert argv[-4:] == ["--reps", "1", "--duration", "2.5"]
    fake = tmp_path / "fake-bwlab"  # writes a result where --out says, and fails
    fake.write_text('#!/bin/sh\nfor a; do o=$a; done\necho partial > "$o/table2-host.json"\necho said >&2\nexit 3\n')
    fake.chmod(0o755)
    scratch = tmp_path / "tmp"  # where the script's mktemp makes its directory
    scratch.mkdir()
    res = subprocess.run([*argv[:4], str(fake), *argv[7:]], capture_output=True, text=True,
                         env={**os.environ, "TMPDIR": str(scratch)})  # fmt: skip
    assert (res.returncode, res.stdout, res.stderr) == (3, "partial\n", "said\n")
    assert not list(scratch.iterdir())  # the result's directory removed
    with pytest.raises(BwlabError, match="needs a patched kernel"):
        hostroot.HostUserlandTarget(_image(tmp_path), policy="all")
    assert hostroot.HostUserlandTarget(_image(tmp_path, ("0001.patch",)), policy="all").label == (
        "guest-patched-all-userland"
    )


def test_guest_host_bad_input_is_one_line() -> None:
    res = bwlab("run", "table2", "--target", "guest-host", "--kernel", "7.3.4-000000000000")
    assert res.returncode == 1 and res.stderr.count("\n") == 1 and "no built kernel" in res.stderr, res.stderr
    res = bwlab("run", "table2", "--target", "guest-host", "--keep")
    assert res.returncode == 1 and "--target guest only" in res.stderr, res.stderr
    res = bwlab("run", "table2", "--target", "host", "--accel", "tcg")
    assert res.returncode == 1 and "guest-host" in res.stderr, res.stderr
