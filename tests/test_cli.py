"""Bad input gets one line on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations

from pathlib import Path

from conftest import DATA, bwlab


def one_line_error(proc) -> str:  # type: ignore[no-untyped-def]
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_malformed_scenario(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text((DATA / "throttle-host.toml").read_text().replace("period_us", "period"))
    line = one_line_error(bwlab("run", str(bad), "--target", "host"))
    assert f"{bad}:" in line and "unknown key 'period'" in line


def test_unknown_target() -> None:
    proc = bwlab("run", "table2", "--target", "moon")
    assert proc.returncode == 2
    assert "'moon': expected host, guest, guest-host, sim or ssh://" in one_line_error(proc)


def test_unknown_scenario() -> None:
    assert "unknown scenario 'nope'" in one_line_error(bwlab("run", "nope"))


def test_missing_kernel_source(tmp_path: Path) -> None:
    line = one_line_error(bwlab("run", "table2", "--target", "guest", env={"BWLAB_CACHE": str(tmp_path)}))
    assert "kernel source not fetched" in line


def test_kernel_release_errors(tmp_path: Path) -> None:
    """--release 6.12: a baseline only (the series is against 7.3.4), not with --kernel-src, and
    said how to fetch when it is not; an unknown release is argparse's one line."""
    env = {"BWLAB_CACHE": str(tmp_path)}
    line = one_line_error(bwlab("kernel", "build", "--release", "6.12", env=env))
    assert line == "bwlab: error: --release 6.12 builds only with --baseline: the series is against 7.3.4", line
    line = one_line_error(bwlab("kernel", "build", "--release", "6.12", "--kernel-src", str(tmp_path), env=env))
    assert "--kernel-src and --release: name one source" in line
    line = one_line_error(bwlab("kernel", "build", "--release", "6.12", "--baseline", env=env))
    assert "kernel source not fetched: run 'bwlab kernel fetch --release 6.12'" in line
    proc = bwlab("kernel", "fetch", "--release", "5.4", env=env)
    assert proc.returncode == 2 and "invalid choice: '5.4'" in one_line_error(proc)


def test_missing_kernel_tree(tmp_path: Path) -> None:
    line = one_line_error(bwlab("kernel", "build", "--kernel-src", str(tmp_path / "none")))
    assert "no such directory" in line


def test_kernel_not_built(tmp_path: Path) -> None:
    tree = tmp_path / "linux"
    (tree / "kernel" / "sched").mkdir(parents=True)
    (tree / "kernel" / "sched" / "fair.c").write_text("")
    (tree / "Makefile").write_text("VERSION = 7\nPATCHLEVEL = 3\nSUBLEVEL = 4\n")
    line = one_line_error(
        bwlab(
            "run",
            "table2",
            "--target",
            "guest",
            "--kernel-src",
            str(tree),
            env={"BWLAB_CACHE": str(tmp_path / "cache")},
        )
    )
    assert "is not built" in line


def test_unknown_kernel_key(tmp_path: Path) -> None:
    line = one_line_error(
        bwlab("run", "table2", "--target", "guest", "--kernel", "nope", env={"BWLAB_CACHE": str(tmp_path)})
    )
    assert "no built kernel with key nope" in line


def test_report_on_missing_dir(tmp_path: Path) -> None:
    assert "no such results directory" in one_line_error(bwlab("report", str(tmp_path / "none")))


def test_check_lists_cases() -> None:
    proc = bwlab("check", "table2", "--ncpu", "4", env={"COLUMNS": ""})  # xdist's workers set COLUMNS=80
    assert proc.returncode == 0
    row = next(line for line in proc.stdout.splitlines() if "table2/10ms " in line)
    # one row per case, unwrapped when piped: period, quota, repetitions x seconds, the command
    assert "10000 us" in row and "40000 us" in row and " x " in row and "sysbench" in row, proc.stdout


def test_workloads_lists_every_kind_with_its_parameters() -> None:
    from bwlab import workloads

    proc = bwlab("workloads")
    assert proc.returncode == 0, proc.stderr
    for name, kind in workloads.kinds().items():
        assert f"\n{name}" in "\n" + proc.stdout
        for key in kind.params:
            assert f"    {key} " in proc.stdout
    assert "onoff (simulator only)" in proc.stdout and "argv               strings  required" in proc.stdout


def test_reproduce_full_or_quick() -> None:
    proc = bwlab("reproduce", "--full", "--quick")
    assert (
        proc.returncode == 1
        and proc.stderr == "bwlab: error: --full and --quick: choose one (without --full the run is the quick one)\n"
    )


def test_a_mistyped_verb_or_choice_says_what_was_meant() -> None:
    proc = bwlab("doctr", "/")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "invalid choice: 'doctr': did you mean 'doctor'?" in proc.stderr
    proc = bwlab("run", "table2", "--target", "sim", "--policy", "al")
    assert "invalid choice: 'al': did you mean 'all'?" in proc.stderr
    proc = bwlab("zzzz")  # nothing close: the plain list
    assert proc.returncode == 2 and "did you mean" not in proc.stderr and "choose from" in proc.stderr


def test_the_top_level_help_is_for_users() -> None:
    proc = bwlab("--help")
    assert proc.returncode == 0 and "Parsing only" not in proc.stdout and "doctor" in proc.stdout


def test_every_verb_names_a_command_function_and_parsing_imports_none() -> None:
    """Each verb's Command names a function of its bwlab.commands module (a misspelling would
    surface only when the verb runs), and building the parser imports no command module."""
    import argparse
    import subprocess
    import sys

    from bwlab import cli

    def leaves(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            return [parser]
        return [leaf for sub in subs for child in sub.choices.values() for leaf in leaves(child)]

    commands = [p.get_default("func") for p in leaves(cli.build_parser())]
    assert len(commands) >= 20 and all(isinstance(c, cli.Command) for c in commands), commands
    for c in commands:
        assert callable(c.resolve()), (c.module, c.name)
    code = ("import sys; from bwlab import cli; cli.build_parser(); "
            "print(sorted(m for m in sys.modules if m.startswith('bwlab.commands.')))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
