"""doctor's kprobes (bwlab/live/kstate.py) and the layout they read (bwlab/kernel/layout.py):
the program's text, the record parsed from bpftrace's maps, each throttle's cause."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bwlab.errors import BwlabError
from bwlab.kernel import layout
from bwlab.live import ebpf, kstate

FIELDS = {"tg_cfs_bandwidth": 408, "tg_cfs_rq": 256, "cfs_b_quota": 16, "cfs_b_runtime": 24,
          "cfs_b_period_timer": 64, "cfs_rq_runtime_remaining": 368, "cfs_rq_h_nr_queued": 260,
          "rq_cpu": 2984}  # fmt: skip
LAYOUT = kstate.Layout(FIELDS, 0xFFFFFFFF817D2A80)


def test_the_program_reads_every_cpus_runtime_through_the_per_cpu_offsets() -> None:
    text = kstate.script(LAYOUT, 3)
    assert text.count("kprobe:") == 2
    for cpu in range(3):  # __per_cpu_offset[cpu], then runtime_remaining in that CPU's cfs_rq
        assert f"$c = $pc + *(uint64*)({0xFFFFFFFF817D2A80 + 8 * cpu:#x}); $v = *(int64*)($c + 368);" in text
        assert f"if ($cpu == {cpu}) {{ $own = $v; }}" in text
    assert text.count("*(uint32*)($c + 260) == 0") == 3  # stranded: only where none of its tasks is queued
    assert "$tg + 472" in text  # the period timer: the key the tracepoints' timer events have
    assert "*(int32*)(arg1 + 2984)" in text  # rq->cpu: the CPU throttled
    assert "(int64)" not in text  # bpftrace 0.17 without BTF has no such cast
    whole = ebpf.script([5], 0xFFFFFFFF81086C63, text, ebpf.NO_BTF_TYPES)
    assert whole.startswith("#define s8 signed char\n") and "#define pid_t int\n" in whole
    assert whole.index("kprobe:tg_throttle_down") < whole.index("END {")


def test_the_record_is_by_period_timer_and_in_time_order() -> None:
    text = "\n".join([
        "@k[1, 9]: (2000000000, -131941395332608, 1, 0, -2000000, 6000000, 0)",
        "@k[0, 4]: (1500000000, -131941395332608, 0, 0, -100, 0, -3)",
        "@r[0, 2]: (1000000000, -131941395332608, 5, 7, -4000000, 50000000)",
        "@k[0, 5]: (1600000000, 4096, 0, 0, -1, 0, 0)",
        "@n[0]: 6",
    ])  # fmt: skip
    rec = kstate.parse(text)
    timer = -131941395332608 % (1 << 64)
    assert [t.t for t in rec.throttles[timer]] == [1.5, 2.0]
    assert rec.throttles[timer][1] == kstate.Throttle(2.0, 1, 0, -2000000, 6000000)
    assert rec.refills[timer] == [kstate.Refill(1.0, 5, 7, 4000000, 50000000)]
    assert list(rec.throttles[4096]) == [kstate.Throttle(1.6, 0, 0, -1, 0)]


def test_causes_from_the_state() -> None:
    """Quota 10 ms per 100 ms: the floor is 0.2 ms. A throttle past the period's end is the
    timer's; runtime held elsewhere that covers the debt is stranded; a period that began
    paying debt is the tick's; else the group ran its quota."""
    on_time = kstate.Refill(1.0, 0, 0, 3_000_000, 10_000_000)
    no_debt = kstate.Refill(1.0, 0, 0, 100_000, 10_000_000)
    th = kstate.Throttle(1.05, 0, 0, -500_000, 0)
    assert kstate.cause(th, on_time, 10000, 100000) == "debt"
    assert kstate.cause(th, no_debt, 10000, 100000) == "over-use"
    assert kstate.cause(th, None, 10000, 100000) == "over-use"
    held = kstate.Throttle(1.05, 0, 0, -500_000, 600_000)
    assert kstate.cause(held, on_time, 10000, 100000) == "stranded"
    assert kstate.cause(kstate.Throttle(1.05, 0, 0, -500_000, 400_000), no_debt, 10000, 100000) == "over-use"
    assert kstate.cause(kstate.Throttle(1.0, 0, 0, 0, 100_000), no_debt, 10000, 100000) == "over-use"  # < floor
    late = kstate.Throttle(1.1011, 0, 0, -500_000, 600_000)
    assert kstate.cause(late, on_time, 10000, 100000) == "late-timer"
    assert kstate.cause(kstate.Throttle(1.1009, 0, 0, -1, 0), no_debt, 10000, 100000) == "over-use"


def test_each_throttle_is_weighed_against_the_refill_before_it_and_each_period_by_the_one_in_force_at_its_end() -> None:
    refills = [kstate.Refill(1.0, 0, 0, 0, 10_000_000), kstate.Refill(1.1, 0, 0, 5_000_000, 10_000_000)]
    throttles = [kstate.Throttle(t, 0, 0, -1, 0) for t in (0.95, 1.05, 1.15, 1.16)]
    throttles[3] = kstate.Throttle(1.16, 1, 0, -1, 9_000_000)  # another CPU held runtime
    got = kstate.classify(throttles, refills, 10000, 100000)
    assert [t.cause for t in got] == ["over-use", "over-use", "debt", "stranded"]
    spans = [(0.9, 1.0, 0, ""), (1.0, 1.1, 2, "at"), (1.1, 1.2, 1, "below"), (1.2, 1.3, 1, "below")]
    zero = dict.fromkeys((*kstate.CAUSES, "unseen"), 0)
    assert kstate.by_period(got, spans) == {
        "uncounted": {**zero, "over-use": 1},  # in a period the counters did not count
        "at": {**zero, "over-use": 2},  # weighed as the counters weigh it
        "below": {**zero, "stranded": 2},  # the last before each end: still in force at 1.3
    }
    assert kstate.by_period([], [(1.0, 1.1, 1, "at")]) == {"at": {**zero, "unseen": 1}}


def test_a_layout_file_must_describe_the_running_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BWLAB_KERNEL_LAYOUT", raising=False)
    assert kstate.layout_here() is None  # none named: tracepoints only
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    monkeypatch.setenv("BWLAB_KERNEL_LAYOUT", str(bad))
    with pytest.raises(BwlabError, match="unreadable"):
        kstate.layout_here()
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"kernel_key": "7.3.4-x", "fields": FIELDS,
                                 "symbols": {s: "ffffffff00000000" for s in layout.SYMBOLS}}))  # fmt: skip
    monkeypatch.setenv("BWLAB_KERNEL_LAYOUT", str(other))
    if os.path.exists("/sys/kernel/debug/kprobes") or os.path.exists("/sys/kernel/tracing/kprobe_events"):
        with pytest.raises(BwlabError, match=r"describes kernel 7\.3\.4-x, not the one running"):
            kstate.layout_here()
    else:  # this host: no kprobes, so no layout is used whatever the file says
        assert kstate.layout_here() is None


def test_the_layout_is_compiled_with_kbuilds_own_command(tmp_path: Path) -> None:
    cmd = tmp_path / ".fair.o.cmd"
    cmd.write_text(
        "savedcmd_kernel/sched/fair.o := gcc -Wp,-MMD,kernel/sched/.fair.o.d -nostdinc -I../include "
        "-DKBUILD_BASENAME='\"fair\"' -c -o kernel/sched/fair.o ../kernel/sched/fair.c\n\nsource_x := y\n"
    )
    argv = layout.compile_command(cmd, Path("/t/l.c"), Path("/t/l.s"))
    assert argv == ["gcc", "-nostdinc", "-I../include", "-DKBUILD_BASENAME=\"fair\"", "-I../kernel/sched", "-S", "-o",
                    "/t/l.s", "/t/l.c"]  # fmt: skip
    assert '#include "sched.h"' in layout.source() and "offsetof(struct cfs_rq, runtime_remaining)" in layout.source()
    asm = "".join(f'\t.ascii "->bwlab {name} {i}"\n' for i, name in enumerate(layout.FIELDS))
    assert layout.parse(asm) == {name: i for i, name in enumerate(layout.FIELDS)}
    with pytest.raises(BwlabError, match="lacks rq_cpu"):
        layout.parse(asm.replace("rq_cpu", "rq_xxx"))
    no_c = tmp_path / "no-c.cmd"
    no_c.write_text("savedcmd_x := gcc -o x x.c\n")
    with pytest.raises(BwlabError, match="no -c"):
        layout.compile_command(no_c, Path("a.c"), Path("a.s"))


def test_a_layout_that_reads_another_quota_is_not_trusted() -> None:
    assert kstate.layout_problem([50000], 50000) is None
    assert kstate.layout_problem([], 50000) is None  # no refill: nothing read either
    assert kstate.layout_problem([20000, 50000], 50000) is None  # the quota changed while watched
    said = kstate.layout_problem([7], 50000)
    assert said is not None and "(7 us) is not the group's (50000 us)" in said


def test_a_kernel_of_another_release_has_no_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fields are 7.3's (6.12 has no cfs_rq.h_nr_queued): another release's guest boots
    without a layout file, its build tree (with bandwidth control) never compiled against
    them (the 6.12 sched_ext safety test); a 7.3 kernel's tree with the same files is."""
    from bwlab.kernel import build as kernel_build

    monkeypatch.setenv("BWLAB_CACHE", str(tmp_path / "cache"))
    compiled: list[list[str]] = []

    def compile_it(cmd: list[str], **kwargs: object) -> object:
        compiled.append(cmd)
        raise RuntimeError("compiled")

    monkeypatch.setattr(layout.subprocess, "run", compile_it)
    for key, version in (("6.12.117-bb9f7853629d", "6.12.117"), ("7.3.4-a1ba6066e59b", "7.3.4")):
        out = kernel_build.builds_dir() / key / "src" / "out"
        (out / "kernel" / "sched").mkdir(parents=True)
        (out / "kernel" / "sched" / ".fair.o.cmd").write_text(
            "cmd_kernel/sched/fair.o := gcc -O2 -c -o fair.o fair.c\n"
        )
        (out / ".config").write_text("CONFIG_CFS_BANDWIDTH=y\n")
        image = kernel_build.KernelImage(key=key, bzimage=tmp_path / key / "bzImage", version=version,
                                         release=version, origin="test", series_digest="", patches=(),
                                         config_digest="", hz=250, build_seconds=0.0)  # fmt: skip
        if version.startswith("6.12"):
            assert layout.ensure(image) is None and not compiled
        else:
            with pytest.raises(RuntimeError, match="compiled"):
                layout.ensure(image)
            assert len(compiled) == 1
