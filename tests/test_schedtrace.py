"""The traced ground truth (bwlab/schedtrace.py) and the trace side action: ftrace's text
parsed into each thread's wanting, the detector's precision and recall against it, the plan's
shell for it, and the scenario's rules."""

from __future__ import annotations

import subprocess
from dataclasses import replace

import pytest

from bwlab import schedtrace
from bwlab.errors import BwlabError
from bwlab.scenario import SideAction
from bwlab.targets import base, plan
from tests.test_stats_metrics import SYSBENCH, sampler_text, spec

TIMER = "ffff9a3c81f2a0c8"  # the group's hrtimer (hashed by %p, as 7.x prints it)


def line(t: float, event: str, body: str, task: str = "wakelat", pid: int = 101, cpu: int = 0) -> str:
    return f"{task:>16}-{pid:<7} [{cpu:03d}] d..2. {t:12.6f}: {event}: {body}"


def switch(t: float, pid: int, state: str) -> str:
    return line(t, "sched_switch", f"prev_comm=wakelat prev_pid={pid} prev_prio=120 prev_state={state} ==> "
                "next_comm=swapper/0 next_pid=0 next_prio=120", pid=pid)  # fmt: skip


def expiry(t: float, hrtimer: str = TIMER, function: str = "sched_cfs_period_timer") -> str:
    return line(t, "hrtimer_expire_entry", f"hrtimer={hrtimer} now={int(t * 1e9)} function={function}",
                task="<idle>", pid=0)  # fmt: skip


def ftrace_text(periods: int, wanting: list[tuple[int, float, float]], lost: int = 0) -> str:
    """A trace side action's output: root 100 (marked at 0.0001 s) forks each thread in
    `wanting` (tid, from, to: it wants a CPU from its birth at `from` until it sleeps at `to`),
    the group's period timer expires at 10 ms + 0.5 ms (sampler_text's boundaries), another
    group's at 10 ms + 3 ms, a tick timer every 4 ms, and the end is marked after the last period."""
    out = [f"{schedtrace.FTRACE_HEADER} {lost}", "# tracer: nop", "#",
           line(0.0001, "tracing_mark_write", f"{schedtrace.ROOT_MARK} 100", task="sh", pid=100)]  # fmt: skip
    for tid, a, b in wanting:
        out.append(line(a, "sched_process_fork", f"comm=sh pid=100 child_comm=sh child_pid={tid}", task="sh", pid=100))
        out.append(switch((a + b) / 2, tid, "R+"))  # preempted: still wanting
        out.append(switch(b, tid, "S"))
    for k in range(1, periods + 1):
        out += [expiry(k * 0.010 + 0.0005), expiry(k * 0.010 + 0.003, "ffff9a3c80000000"),
                expiry(k * 0.010 + 0.004, TIMER, "tick_nohz_handler")]  # fmt: skip
    out.append(line(periods * 0.010 + 0.0009, "tracing_mark_write", schedtrace.END_MARK, task="sh", pid=1))
    return "\n".join(out) + "\n"


def test_ftrace_text_becomes_each_threads_wanting() -> None:
    """Members are the marked root and its forks (a task not forked from one is not); a thread
    wants from its birth to its sleep, through a preemption; the period timers are told apart
    by their hrtimer, and a tick is not one."""
    text = ftrace_text(3, [(101, 0.001, 0.015), (102, 0.002, 0.004)])
    text += line(0.005, "sched_waking", "comm=other pid=300 prio=120 target_cpu=001", pid=300) + "\n"
    text += switch(0.009, 300, "S") + "\n"
    trace = schedtrace.parse_ftrace(text)
    assert (trace.start, trace.end, trace.lost) == (0.0001, 0.0309, 0)
    assert trace.wanting == {101: [(0.001, 0.015)], 102: [(0.002, 0.004)]}
    assert sorted(len(v) for v in trace.timers.values()) == [3, 3]
    assert trace.timers[int(TIMER, 16)] == pytest.approx([0.0105, 0.0205, 0.0305])
    assert trace.demand_us(0.0, 0.010, 2) == pytest.approx(9000 + 2000)
    assert trace.demand_us(0.0, 0.010, 1) == pytest.approx(9000)  # one CPU: the overlap counts once
    # woken after a sleep, the thread wants again until it next sleeps
    again = text.replace(f"{schedtrace.END_MARK}", "x") + "\n".join([
        line(0.020, "sched_waking", "comm=wakelat pid=102 prio=120 target_cpu=000", pid=0),
        switch(0.025, 102, "S"),
        line(0.0309, "tracing_mark_write", schedtrace.END_MARK, task="sh", pid=1)]) + "\n"  # fmt: skip
    assert schedtrace.parse_ftrace(again).wanting[102] == [(0.002, 0.004), (0.020, 0.025)]


@pytest.mark.parametrize(("text", "error"), [
    ("", "does not start with its header"),
    ("bwlab-ftrace\n", "does not start with its header"),
    ("bwlab-ftrace x\n", "does not start with its header"),
    ("bwlab-ftrace 0 zip\n", "does not start with its header"),
    ("bwlab-ftrace 0\n# tracer: nop\n", "no 'bwlab-root PID' marker"),
    ("bwlab-ftrace 0\n" + line(0.1, "tracing_mark_write", "bwlab-root 100", pid=100) + "\n", "no 'bwlab-end' marker"),
    ("bwlab-ftrace 0\n" + line(0.1, "tracing_mark_write", "bwlab-root 100", pid=100) + "\n"
     + line(0.2, "sched_switch", "prev_comm=a prev_pid=100 prev_state", pid=100) + "\n", "is not as 7.x prints it"),
])  # fmt: skip
def test_a_damaged_trace_is_one_error(text: str, error: str) -> None:
    with pytest.raises(BwlabError, match=error):
        schedtrace.parse_ftrace(text)


def traced_spec(quota: int = 20000):  # type: ignore[no-untyped-def]
    return replace(spec(quota=quota), sides=(SideAction("sample", 1000), SideAction("trace", 1000)))


def test_the_detector_against_the_traced_truth() -> None:
    """sampler_text's group at a 1-CPU quota, 10 ms used and 10 ms stopped in each period
    (the counters: twice the quota, at). Two threads that want a CPU throughout: the truth
    agrees (nothing below). One thread that wants 6 ms of each period, the rest of its
    counted demand being carried debt: the truth says below, the detector missed all of them
    (recall 0; no precision: it called none below). A buffer that dropped events is no truth."""
    sampled = sampler_text(20, 10000, 10000)
    busy = ftrace_text(20, [(101, 0.0002, 0.2009), (102, 0.0002, 0.2009)])
    m = base.sampled_metrics(sampled, traced_spec(10000), busy)
    assert m["traced_below"] == 0 and m["below_both"] == 0 and "below_recall" not in m and "below_precision" not in m
    assert m["traced_timer_hits"] >= 19
    light = ftrace_text(20, [(101 + k, k * 0.010 + 0.0006, k * 0.010 + 0.0066) for k in range(20)])
    m = base.sampled_metrics(sampled, traced_spec(10000), light)
    assert m["traced_below"] >= 18 and m["below_both"] == 0 and m["below_recall"] == 0
    assert m["disagree_near_line"] == 0  # the truth, 6 ms, is far below the 11 ms line
    assert "below_precision" not in m
    # at demand == quota (sampler_text: 19 ms used, 1 ms stopped every other period, both
    # threads wanting throughout): every throttled period is below, called and true
    even = base.sampled_metrics(sampler_text(20, 19000, 1000, every=2), traced_spec(), busy)
    assert even["traced_below"] >= 9 and even["below_recall"] == 1.0 and even["below_precision"] == 1.0
    with pytest.raises(BwlabError, match="dropped 7 events"):
        base.sampled_metrics(sampled, traced_spec(10000), ftrace_text(20, [(101, 0.0002, 0.2)], lost=7))


def test_a_rep_with_a_trace_keeps_neither_output_whole() -> None:
    raw = base.RawRep("nr_periods 0\nnr_throttled 0\nusage_usec 0\n", "nr_periods 20\nnr_throttled 10\nusage_usec 1\n",
                      0.2, 0, SYSBENCH, sides=[sampler_text(20, 19000, 1000, every=2),
                                         ftrace_text(20, [(101, 0.0002, 0.2009), (102, 0.0002, 0.2009)])])  # fmt: skip
    s = traced_spec()
    m, _ = base.rep_metrics(s, raw)
    assert m["below_recall"] == 1.0
    kept = base.case_docs([s], {(0, 0): raw})[0]["reps"][0]["raw"]["sides"]
    assert kept[0].startswith("cgsample 1000 (") and kept[1].startswith("bwlab-ftrace 0 (") and "left out" in kept[1]


def test_the_plan_traces_the_workload_in_an_instance_of_its_own() -> None:
    """The plan makes a tracefs instance per repetition, mounts tracefs only if it is not,
    names the workload's first process in the trace before it execs, stops and writes the
    output after it, removes the instance; it kills only the side actions that are processes.
    The whole is valid shell."""
    text = plan.render_plan([traced_spec()])
    inst = f"{schedtrace.TRACEFS}/instances/bwlab-0-0"
    assert f"mkdir {inst} ||" in text and f"echo mono > {inst}/trace_clock" in text
    for event in schedtrace.FTRACE_EVENTS:
        assert f"echo 1 > {inst}/events/{event}/enable" in text and f"echo 0 > {inst}/events/{event}/enable" in text
    assert f'echo "bwlab-root $$" > {inst}/trace_marker' in text
    assert text.index(f"echo 1 > {inst}/tracing_on") < text.index("BWLAB-BEGIN 0 0") < text.index("bwlab-end")
    assert text.index("RC=$?") < text.index(f"echo bwlab-end > {inst}/trace_marker") < text.index("BWLAB-END 0 0")
    assert "kill $SIDE0" in text and "kill $SIDE1" not in text and f"rmdir {inst}" in text
    assert "BWLAB-SECTION side1' >&3; cat /tmp/side1" in text
    subprocess.run(["sh", "-n"], input=text, text=True, check=True)


def test_a_guests_plan_never_turns_an_event_on_or_off(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """In a guest the events are on from boot (the kernel's command line, before SMP): turning
    one on or off patches the running kernel's text, and a TCG guest that did it per repetition
    died of a stale breakpoint ("Oops: int3", 3 of 4 boots toggling them 300 times beside
    scheduling loops here). The plan uses the top-level buffer: it checks the events are on,
    stops it, sets it up, empties it and starts it around each repetition, and never writes an
    event's enable file nor makes an instance. The QEMU command line turns them on only for
    scenarios that trace. Run on a fake tracefs, the start reports an event that is off."""
    from bwlab.targets import qemu

    traced = traced_spec()
    text = plan.render_plan([traced, traced], boot_events=True)
    tr = str(schedtrace.TRACEFS)
    assert "/enable" not in text.replace("$e/enable", "") and "instances/bwlab" not in text
    assert text.count(f"echo > {tr}/trace; echo 1 > {tr}/tracing_on") == 2
    assert text.index(f"echo 0 > {tr}/tracing_on") < text.index("BWLAB-BEGIN 0 0")
    assert f"echo bwlab-end > {tr}/trace_marker" in text and f'echo "bwlab-root $$" > {tr}/trace_marker' in text
    subprocess.run(["sh", "-n"], input=text, text=True, check=True)
    assert plan.BOOT_EVENTS_PARAM == ("trace_event=sched:sched_switch,sched:sched_waking,"
                                      "sched:sched_process_fork,timer:hrtimer_expire_entry")  # fmt: skip
    assert qemu.boot_events([traced]) and not qemu.boot_events([spec(quota=20000)])
    image = qemu.KernelImage(key="k", bzimage=tmp_path / "bzImage", version="7.3.4", release="7.3.4-k", origin="",
                             series_digest="", patches=(), config_digest="", hz=250, build_seconds=0.0)  # fmt: skip
    cmd = qemu.qemu_command(image, tmp_path / "i", 2, tmp_path / "c", tmp_path / "r", traced=True)
    assert cmd[cmd.index("-append") + 1].endswith(" " + plan.BOOT_EVENTS_PARAM)
    assert plan.BOOT_EVENTS_PARAM not in " ".join(qemu.qemu_command(image, tmp_path / "i", 2, tmp_path / "c",
                                                                     tmp_path / "r"))  # fmt: skip
    fake = tmp_path / "tracing"
    for event in schedtrace.FTRACE_EVENTS:
        (fake / "events" / event).mkdir(parents=True)
        (fake / "events" / event / "enable").write_text("0" if "fork" in event else "1")
    (fake / "instances").mkdir()
    monkeypatch.setattr(schedtrace, "TRACEFS", fake)  # mounted already: the start mounts nothing
    start = "\n".join(plan.trace_start(str(fake), str(tmp_path / "mounted"), boot_events=True))
    run = subprocess.run(["sh", "-c", f"exec 3>&1; {start}"], capture_output=True, text=True, check=False)
    errors = [ln for ln in run.stdout.splitlines() if ln.startswith("BWLAB-ERROR")]
    assert errors == ["BWLAB-ERROR trace side: event sched/sched_process_fork not on since boot "
                      "(a kernel without tracing?)"]  # fmt: skip
    assert (fake / "tracing_on").read_text() == "1\n" and (fake / "trace_clock").read_text() == "mono\n"
    assert not (tmp_path / "mounted").exists()


def test_a_trace_side_needs_a_sample_side(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from bwlab import scenario

    body = ('name = "t"\ndescription = "d"\nrepetitions = 1\nduration_s = 1\n[cgroup]\nperiod_us = 10000\n'
            'quota_cpus = 1\n[workload]\nkind = "sysbench-cpu"\n[[case]]\nname = "c"\n')  # fmt: skip
    (tmp_path / "a.toml").write_text(body + "[side.trace]\n")
    with pytest.raises(BwlabError, match=r"side.trace is the truth for side.sample's detector"):
        scenario.load(tmp_path / "a.toml").resolve(2, 250)
    (tmp_path / "b.toml").write_text(body + "[side.sample]\n[side.trace]\ninterval_ms = 2\n")
    with pytest.raises(BwlabError, match=r"unknown key 'interval_ms'"):
        scenario.load(tmp_path / "b.toml")
    (tmp_path / "c.toml").write_text(body + "[side.sample]\n[side.trace]\n")
    (resolved,) = scenario.load(tmp_path / "c.toml").resolve(2, 250)
    assert [s.kind for s in resolved.sides] == ["sample", "trace"]


def test_a_plan_cut_short_on_a_machine_undoes_its_trace(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Where the machine outlives the plan (ssh), the trace's undo goes to restore.sh before
    tracing starts; run on a fake tracefs after the plan stopped mid-trace, it turns the
    events off and removes the instance, and unmounts only what the plan mounted."""
    text = plan.render_plan([traced_spec()], tmp_dir=str(tmp_path), restore=True)
    inst = f"{schedtrace.TRACEFS}/instances/bwlab-0-0"
    (undo,) = [ln for ln in text.splitlines() if ln.endswith(f">> {tmp_path}/restore.sh") and inst in ln]
    assert text.index(undo) < text.index(f"echo 1 > {inst}/tracing_on")
    subprocess.run(["sh", "-c", undo], check=True)
    script = (tmp_path / "restore.sh").read_text()
    fake = tmp_path / "tracing"
    for event in schedtrace.FTRACE_EVENTS:
        (fake / "instances" / "bwlab-0-0" / "events" / event).mkdir(parents=True)
    local = script.replace(str(schedtrace.TRACEFS), str(fake)).replace("rmdir", "rm -r")
    local = local.replace("umount", "echo umount")
    run = subprocess.run(["sh", "-c", local], capture_output=True, text=True, check=True)
    assert not (fake / "instances" / "bwlab-0-0").exists() and "umount" not in run.stdout
    (tmp_path / "tracefs").touch()  # the plan had mounted it
    for event in schedtrace.FTRACE_EVENTS:
        (fake / "instances" / "bwlab-0-0" / "events" / event).mkdir(parents=True)
    run = subprocess.run(["sh", "-c", local], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == f"umount {fake}" and not (tmp_path / "tracefs").exists()


def with_steps(sampled: str, tids: int, share: float) -> str:
    """sampler_text's output with cgsample's thread steps added: every 10 ms at 1 ms past the
    boundary (where sampler_text's counters move), `tids` threads each on a CPU or waiting for
    one `share` of the time."""
    lines = sampled.strip().splitlines()
    samples = [ln.split() for ln in lines[1:]]
    steps = []
    for k, fields in enumerate(samples):
        t_ns, throttled_ns = int(fields[0]), int(fields[3])
        if t_ns % 10_000_000 != 1_000_000:
            continue
        done = round(k * 1_000_000 * share)  # ns each thread has wanted so far
        steps.append(" ".join(["s", str(t_ns), str(throttled_ns), str(t_ns)]
                              + [f"{200 + i} {done // 2} {done - done // 2} 0" for i in range(tids)]))  # fmt: skip
    return "\n".join(lines + steps) + "\n"


def test_cgsamples_thread_steps_are_doctors_estimate() -> None:
    """The counters of a group at a 1-CPU quota that ran 10 ms and sat throttled 1 ms in each
    period come to 11 ms, on its line: below quota. cgsample's steps say two threads wanted a
    CPU throughout (20 ms a period): over-use, as doctor would call it. With one thread
    wanting half the time, the counters decide again. A damaged step is one error."""
    sampled = sampler_text(20, 10000, 1000)
    assert base.sampled_metrics(sampled, spec(quota=10000))["below_quota_share"] >= 0.9  # all but the first
    interval_s, samples, steps = base.parse_sampler(with_steps(sampled, 2, 1.0))
    assert interval_s == 0.001 and len(samples) == 201 and len(steps) == 20
    assert steps[1][0] == 0.011 and steps[1][2] == {
        200: (5_500_000, 5_500_000, 0.011),
        201: (5_500_000, 5_500_000, 0.011),
    }
    assert base.sampled_metrics(with_steps(sampled, 2, 1.0), spec(quota=10000))["below_quota_share"] == 0.0
    assert base.sampled_metrics(with_steps(sampled, 1, 0.5), spec(quota=10000))["below_quota_share"] >= 0.9
    for bad in ("s 1 2", "s 1", "s 1 2 3 4 5 6", "s 1 2 3 4 5 6 x"):
        with pytest.raises(BwlabError, match="step on line 3 is not 's T THROTTLED"):
            base.parse_sampler(f"cgsample 1000\n1 2 3 4 5 6\n{bad}\n")


def test_the_plans_trace_output_is_compressed_and_parsed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """trace_stop's shell on a fake instance (its trace, a CPU's stats with dropped events):
    the output is gzip'd in base64 where the machine has both (as this one does), and
    parse_ftrace reads it back whole; a damaged one is one error."""
    inst = tmp_path / "instances" / "bwlab-0-0"
    (inst / "per_cpu" / "cpu0").mkdir(parents=True)
    (inst / "per_cpu" / "cpu1").mkdir(parents=True)
    (inst / "per_cpu" / "cpu0" / "stats").write_text("entries: 9\noverrun: 3\ncommit overrun: 0\n")
    (inst / "per_cpu" / "cpu1" / "stats").write_text("entries: 9\noverrun: 4\ncommit overrun: 0\n")
    text = ftrace_text(3, [(101, 0.001, 0.015)])
    (inst / "trace").write_text("\n".join(text.splitlines()[1:]).replace(schedtrace.END_MARK, "x") + "\n")
    out = tmp_path / "side1"
    shell = "\n".join(plan.trace_stop(str(inst), str(out), str(tmp_path / "mounted")))
    shell = shell.replace(f"rmdir {inst}", "true")  # the fake's files stay
    subprocess.run(["sh", "-c", shell], check=True)
    output = out.read_text()
    assert output.startswith(f"{schedtrace.FTRACE_HEADER} 7 gzip\n") and "sched_switch" not in output
    assert (inst / "trace_marker").read_text() == f"{schedtrace.END_MARK}\n"  # the fake keeps what was written
    (inst / "trace").write_text((inst / "trace").read_text() + line(0.0309, "tracing_mark_write", "bwlab-end") + "\n")
    subprocess.run(["sh", "-c", shell], check=True)
    trace = schedtrace.parse_ftrace(out.read_text())
    assert trace.lost == 7 and trace.wanting == {101: [(0.001, 0.015)]} and trace.end == 0.0309
    for damaged in ("bm90IGd6aXA=", "gzip: stdin: file size changed while zipping"):  # not gzip; a message
        with pytest.raises(BwlabError, match="compressed trace is damaged"):
            schedtrace.parse_ftrace(f"{schedtrace.FTRACE_HEADER} 0 gzip\n{damaged}\n")


def test_a_wakeup_timed_before_the_sleep_it_ends_keeps_the_thread_wanting() -> None:
    """A TCG guest's CPUs' clocks differ by microseconds: a thread's wakeup, traced on one CPU,
    can sort before the switch out asleep it ends, traced on another. A wakeup is traced only
    for a sleeping thread and makes it runnable, so one seen while the thread wanted a CPU,
    then a sleep, is that: it wants a CPU throughout. A sleep with no such wakeup ends its
    wanting, and a thread switched in wants a CPU again even with no wakeup seen."""
    events: list[schedtrace.Event] = [
        (1.0, "w", (7,)), (1.1, "s", (7, 0)), (1.2, "w", (7,)), (1.21, "s", (7, 1)), (1.5, "s", (7, 1)),
        (2.0, "w", (8,)), (2.1, "w", (8,)), (2.2, "s", (8, 0)), (2.5, "s", (8, 1)),  # a wakeup then a preemption
        (3.0, "i", (8,)), (3.4, "s", (8, 1)),
    ]  # fmt: skip
    trace = schedtrace.build(events, 0.5, 4.0, {})
    assert trace.wanting == {7: [(1.0, 1.5)], 8: [(2.0, 2.5), (3.0, 3.4)]}


def test_a_thread_woken_twice_that_sleeps_again_wants_no_cpu_while_it_sleeps() -> None:
    """A thread woken twice (the second wakeup while it ran, as a wait in a loop has it) and
    then switched out asleep: its next event, a wakeup, says it slept from that switch out (on
    this host's wakelat workers, taken as the clock skew above, such a thread wanted a CPU for
    1.1 s while it slept, and put two quotas in a period its group ran one thread through).
    One with no event after such a sleep slept to the end; one switched in next (ftrace) was
    the clock skew's, and wanted a CPU throughout."""
    events: list[schedtrace.Event] = [
        (1.0, "w", (7,)), (1.00005, "w", (7,)), (1.00006, "s", (7, 1)),  # woken twice, asleep
        (1.2, "w", (7,)), (1.20002, "s", (7, 1)),  # an ordinary wakeup and sleep
        (1.5, "w", (7,)), (1.50005, "w", (7,)), (1.50006, "s", (7, 1)),  # woken twice again
        (2.0, "w", (7,)), (2.1, "s", (7, 0)), (2.3, "s", (7, 1)),  # preempted, then asleep
        (3.0, "w", (8,)), (3.1, "w", (8,)), (3.2, "s", (8, 1)),  # no event after: asleep
        (3.5, "w", (9,)), (3.6, "w", (9,)), (3.61, "s", (9, 1)), (3.62, "i", (9,)), (3.7, "s", (9, 1)),  # skew
    ]  # fmt: skip
    trace = schedtrace.build(events, 0.5, 4.0, {})
    assert trace.wanting == {7: [(1.0, 1.00006), (1.2, 1.20002), (1.5, 1.50006), (2.0, 2.3)], 8: [(3.0, 3.2)],
                             9: [(3.5, 3.7)]}  # fmt: skip
