"""bwlab/live without a live machine: identities from the paths runtimes create, discovery on
a fake cgroup tree (v1 and v2), and the period detector on counters whose truth is known.
tests/test_live_real.py runs the same against real cgroups and workloads."""

from __future__ import annotations

import bisect
import dataclasses
import functools
import json
import math
import os
import random
from pathlib import Path
from typing import ClassVar

import matplotlib.colors
import matplotlib.image
import pytest

from bwlab import threads
from bwlab.commands.live import doctor_interval_s
from bwlab.errors import BwlabError
from bwlab.live import diagnose, ebpf, groups, plot, sampler, threadpools
from bwlab.live.groups import Hierarchy
from bwlab.live.identity import identify
from bwlab.periods import Analysis, Limit, Period, Sample, analyze, boundary_intervals, fit_phase
from bwlab.threads import ThreadRecorder

CID = "4f0c1b2a" * 8
UID = "0e1f2a3b-4c5d-6e7f-8091-a2b3c4d5e6f7"


@pytest.mark.parametrize(
    ("path", "kind", "runtime", "qos"),
    [
        (f"/kubepods/burstable/pod{UID}/{CID}", "pod", None, "burstable"),
        (f"/kubepods/pod{UID}/{CID}", "pod", None, "guaranteed"),
        (f"/kubepods/besteffort/pod{UID}", "pod", None, "besteffort"),
        (
            f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice/"
            f"cri-containerd-{CID}.scope",
            "pod",
            "containerd",
            "burstable",
        ),
        (f"/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/crio-{CID}.scope", "pod", "cri-o", "guaranteed"),
        (f"/docker/{CID}", "container", "docker", None),
        (f"/system.slice/docker-{CID}.scope", "container", "docker", None),
        (f"/machine.slice/libpod-{CID}.scope", "container", "podman", None),
        (f"/libpod_parent/libpod-{CID}", "container", "podman", None),
        (f"/system.slice/nerdctl-{CID}.scope", "container", "containerd", None),
        ("/system.slice/nginx.service", "systemd", None, None),
        ("/user.slice/user-1000.slice", "systemd", None, None),
        ("/bwlab-1-2-x", "cgroup", None, None),
    ],
)
def test_identity_from_the_runtimes_layouts(path: str, kind: str, runtime: str | None, qos: str | None) -> None:
    ident = identify(path)
    assert (ident.kind, ident.runtime, ident.qos) == (kind, runtime, qos)
    if kind == "pod":
        assert ident.pod_uid == UID
    if CID in path:
        assert ident.container_id == CID and CID[:12] in ident.describe()
    if kind == "systemd":
        assert ident.unit == path.rsplit("/", 1)[1]


def _v1_tree(root: Path) -> Hierarchy:
    """cpu and cpuacct hierarchies: /kubepods limited to 4 CPUs, a pod under it with 1.5,
    a container in the pod without its own limit, an unlimited system.slice."""
    cpu, acct = root / "cpu", root / "cpuacct"
    tree = {"": (-1, 100000), "kubepods": (400000, 100000), f"kubepods/pod{UID}": (150000, 100000),
            f"kubepods/pod{UID}/{CID}": (-1, 100000), "system.slice": (-1, 100000),
            "system.slice/a.service": (50000, 10000)}  # fmt: skip
    for rel, (quota, period) in tree.items():
        for base in (cpu, acct):
            (base / rel).mkdir(parents=True, exist_ok=True)
        (cpu / rel / "cpu.cfs_quota_us").write_text(f"{quota}\n")
        (cpu / rel / "cpu.cfs_period_us").write_text(f"{period}\n")
        (cpu / rel / "cpu.stat").write_text("nr_periods 0\nnr_throttled 0\nthrottled_time 0\n")
        (acct / rel / "cpuacct.usage").write_text("0\n")
    return Hierarchy(1, cpu, acct)


def test_discovery_finds_limits_and_the_tightest_ancestor(tmp_path: Path) -> None:
    hier = _v1_tree(tmp_path)
    found = {g.path: g for g in groups.discover(hier)}
    assert set(found) == {"/kubepods", f"/kubepods/pod{UID}", "/system.slice/a.service"}
    pod = found[f"/kubepods/pod{UID}"]
    assert pod.limit.cpus == 1.5 and pod.effective.cpus == 1.5 and pod.limited_by == pod.path
    assert pod.identity.kind == "pod" and pod.identity.qos == "guaranteed"
    inherited = {g.path: g for g in groups.discover(hier, include_inherited=True)}
    container = inherited[f"/kubepods/pod{UID}/{CID}"]
    assert container.limit.quota_us is None and container.effective.cpus == 1.5
    assert container.limited_by == f"/kubepods/pod{UID}"  # the parent's limit throttles it
    assert container.usage_file == tmp_path / "cpuacct" / f"kubepods/pod{UID}/{CID}" / "cpuacct.usage"
    assert groups.find(CID[:8], hier).path == container.path
    assert groups.find(UID[:8], hier).path == pod.path  # the pod, not its container
    assert groups.find("/system.slice/a.service", hier).limit == Limit(50000, 10000)
    assert groups.find("a.service", hier).path == "/system.slice/a.service"  # a unit by its name
    with pytest.raises(BwlabError, match=r"no CPU-limited systemd unit 'b\.service'"):
        groups.find("b.service", hier)
    with pytest.raises(BwlabError, match="no CPU-limited container"):
        groups.find("abcdef0123", hier)
    with pytest.raises(BwlabError, match="no cgroup /nope"):
        groups.find("/nope", hier)


def test_v2_limits_and_malformed_files(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "cpu.max").write_text("20000 10000\n")
    (tmp_path / "a" / "cpu.max.burst").write_text("8000\n")
    (tmp_path / "a" / "b" / "cpu.max").write_text("max 100000\n")
    hier = Hierarchy(2, tmp_path)
    (b,) = [g for g in groups.discover(hier, include_inherited=True) if g.path == "/a/b"]
    assert b.effective == Limit(20000, 10000, 8000) and b.usage_file is None
    # a unit in a limited slice whose subtree_control does not give it the cpu controller (as
    # systemd leaves a service with no CPU settings): no cpu.max, limited by the slice
    unit = tmp_path / "a" / "b" / "c.service"
    unit.mkdir()
    (unit / "cgroup.controllers").write_text("memory pids\n")
    found = {g.path: g for g in groups.discover(hier, include_inherited=True)}
    assert found["/a/b/c.service"].limit.quota_us is None and found["/a/b/c.service"].limited_by == "/a"
    assert groups.find("c.service", hier).effective == Limit(20000, 10000, 8000)
    (unit / "cgroup.controllers").write_text("cpu memory pids\n")  # cpu on, yet no cpu.max: said
    with pytest.raises(BwlabError, match=r"cannot read .*c\.service/cpu\.max"):
        groups.discover(hier)
    (unit / "cgroup.controllers").write_text("memory pids\n")
    (tmp_path / "a" / "cpu.max").write_text("lots 10000\n")
    with pytest.raises(BwlabError, match="expected 'QUOTA PERIOD'"):
        groups.discover(hier)


def _synthetic(demand: list[float], quota_us: int, period_us: int, interval_s: float,
               seed: int = 1, counted_after_s: float = 0.0) -> list[Sample]:  # fmt: skip
    """Counters of a group whose demand in period k is demand[k] x quota, served as the
    kernel would at best: up to the quota, the rest throttled (time = unmet demand), with
    the counters stepping at each boundary (the throttle counters `counted_after_s` later);
    sampled every `interval_s` from a random phase."""
    rng = random.Random(seed)
    period_s = period_us / 1e6
    t0 = rng.random() * period_s + 1.0
    bounds = [t0 + k * period_s for k in range(len(demand) + 1)]
    samples = []
    t = bounds[0] - interval_s * rng.random()
    while t < bounds[-1]:
        k = max(0, min(len(demand) - 1, int((t - t0) // period_s)))
        done = [min(d, 1.0) * quota_us for d in demand]
        usage = sum(done[:k]) + done[k] * max(0.0, min(1.0, (t - bounds[k]) / period_s))
        ended = sum(1 for b in bounds[1:] if b <= t)
        counted = sum(1 for b in bounds[1:] if b + counted_after_s <= t)
        throttled = sum(1 for d in demand[:counted] if d > 0.9)
        throttled_us = sum(max(0.0, d - 0.9) * quota_us for d in demand[:counted] if d > 0.9)
        samples.append(Sample(t, ended, throttled, throttled_us, usage))
        t += interval_s * (1 + 0.2 * (rng.random() - 0.5))  # a sampler is not exact either
    return samples


def test_detector_separates_below_quota_from_over_use() -> None:
    """Periods at 0.95 x quota that are throttled anyway (below) and periods at 2 x quota
    (at), sampled every 1 ms at a 10 ms period: every verdict right, boundaries placed to
    within the sampling jitter."""
    demand = [0.95, 2.0, 0.5, 0.95, 2.0] * 40
    samples = _synthetic(demand, 10000, 10000, 0.001)  # a 1-CPU quota, the group on 2 CPUs
    analysis = analyze(samples, Limit(10000, 10000), 0.001, cpus=2)
    assert analysis.phase_window_us is not None and analysis.phase_window_us < 400
    truth = {"below": sum(1 for d in demand[1:-1] if 0.9 < d <= 1), "at": sum(1 for d in demand[1:-1] if d > 1)}
    assert abs(analysis.below - truth["below"]) <= 1 and abs(analysis.at - truth["at"]) <= 1
    assert all(p.periods == 1 for p in analysis.periods)
    assert all(p.error_us < 1000 for p in analysis.periods)


def test_periods_near_the_line_are_counted() -> None:
    """Demand at 1.0 x quota is estimated at 1.1 x here (the synthetic counters' throttled time
    runs from 0.9 x): on the line, so counted near it; 0.95 x (estimated 1.0 x) and 2 x are not."""
    demand = [1.0, 0.5, 0.95, 0.5, 2.0, 0.5] * 20
    analysis = analyze(_synthetic(demand, 10000, 10000, 0.001), Limit(10000, 10000), 0.001, cpus=2)
    on_line = sum(1 for d in demand[1:-1] if d == 1.0)
    assert abs(analysis.near_line - on_line) <= 1, (analysis.near_line, on_line)
    assert all(p.line_us == pytest.approx(11000, rel=0.05) for p in analysis.periods if p.throttled)


def test_throttles_counted_after_the_boundary_belong_to_the_period_before() -> None:
    """A runqueue on another CPU than the timer's is unthrottled, and its throttled time
    counted, up to a tick after the boundary: counters 3 ms late at a 10 ms period give the
    same verdicts as punctual ones."""
    demand = [0.95, 2.0, 0.5, 0.95, 2.0] * 40
    punctual = analyze(_synthetic(demand, 10000, 10000, 0.001), Limit(10000, 10000), 0.001, cpus=2)
    late = analyze(_synthetic(demand, 10000, 10000, 0.001, counted_after_s=0.003), Limit(10000, 10000), 0.001,
                   cpus=2)  # fmt: skip
    assert late.below == punctual.below > 50 and late.at == punctual.at > 50
    assert [p.verdict for p in late.periods] == [p.verdict for p in punctual.periods]


def test_nr_periods_is_read_from_the_raw_text() -> None:
    assert sampler.nr_periods(b"nr_periods 12\nnr_throttled 3\nthrottled_time 5\n") == 12  # v1
    assert sampler.nr_periods(b"usage_usec 9\nuser_usec 1\nsystem_usec 8\nnr_periods 7\nnr_throttled 0\n") == 7
    assert sampler.nr_periods(b"nr_periods 41") == 41
    assert sampler.nr_periods(b"usage_usec 9\n") is None  # no bandwidth control
    assert sampler.nr_periods(b"nr_periods x\n") is None


def test_recorder_follows_new_threads_and_keeps_one_interval_per_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """Thread 2 starts after two steps and thread 1 exits after three: both have an interval
    (and a spent entry) for every step, asleep where not read. Wanting is run plus run delay,
    each thread at most the step, the group at most its CPUs."""
    # (run ns, wait ns) per thread at each read, 5 ms apart
    reads = [{1: (0, 0)}, {1: (4_000_000, 1_000_000)}, {1: (9_000_000, 1_000_000), 2: (0, 0)},
             {1: (10_000_000, 5_000_000), 2: (5_000_000, 0)}, {2: (10_000_000, 0)}]  # fmt: skip
    at = {"i": 0}
    monkeypatch.setattr(threads, "read_schedstat", lambda tid, fds=None: reads[at["i"]].get(tid))
    rec = ThreadRecorder([1], ncpu=1)
    for i in range(len(reads)):
        at["i"] = i
        if i == 2:
            rec.follow([1, 2])
        rec.step(i * 0.005, 0.0)
    assert rec.tids == [1, 2] and len(rec.steps) == 4
    assert all(len(rec.intervals[t]) == 4 and len(rec.spent[t]) == 4 for t in (1, 2))
    assert [round(r) for r, _ in rec.intervals[2]] == [0, 0, 5000, 5000]
    assert [round(r) for r, _ in rec.intervals[1]][3] == 0  # exited
    # the first step: 4 + 1 ms of 5; the third: thread 1 wanted 1 + 4 ms, thread 2 5 ms: 2 CPUs, capped at 1
    assert [round(w, 3) for _, _, w in rec.steps] == [1.0, 1.0, 1.0, 1.0]
    rec2 = ThreadRecorder([1], ncpu=2)
    at["i"] = 0
    rec2.step(0.0, 0.0)
    at["i"] = 1
    rec2.step(0.005, 0.0)
    assert rec2.steps[0][2] == pytest.approx(1.0)  # 5 ms wanted of 5, not 5 + a throttled share
    assert rec2.wanted_us(0.0, 0.005) == pytest.approx(5000)


@pytest.mark.parametrize(("period_ms", "step_ms"), [(10, 5), (100, 10), (50, 10)])
def test_schedule_reads_each_boundary_closely_and_little_else(period_ms: int, step_ms: int) -> None:
    """A period timer at phase 3.3 ms, every tenth expiry 0.48 ms late (seen on this host),
    stopped for 1 s (an idle group: restarted on the same phase), then moved to another phase
    (the quota rewritten); reads come up to 50 us late. Once the phase is known, each boundary
    lies between two reads at most a read's interval (and the lateness) apart; it is known
    again by the third boundary after the restart and after the move; between boundaries the
    reads come at the steps, so a period has 2 + period / step reads, not period / 1 ms."""
    period, step, interval = period_ms / 1000, step_ms / 1000, 0.001
    rng = random.Random(1)
    phase, idle, moved_at, moved_phase, end = 0.0033, (3.0, 4.0), 6.0, 0.0071, 9.0
    expiries = []
    k = 0
    while (b := phase + k * period) < end:
        if not idle[0] <= b < idle[1]:
            expiries.append(b + (0.00048 if k % 10 == 9 else 0.0) if b < moved_at else None)
        k += 1
    expiries = [e for e in expiries if e is not None]
    k = 0
    while (b := moved_phase + k * period) < end:
        if b >= moved_at:
            expiries.append(b)
        k += 1
    expiries.sort()
    sched = sampler.Schedule.of(interval, period, step)
    assert sched is not None
    reads = []
    t = 0.0
    while t < end:
        reads.append(t)
        due = sched.after(t, bisect.bisect_right(expiries, t))
        t = max(due, t + 1e-6) + rng.uniform(0, 50e-6)
    # the boundaries that must be read closely: not the first two, nor two after the restart or the move
    skip = set(expiries[:2])
    for start in (idle[1], moved_at):
        skip |= set([e for e in expiries if e >= start][:2])
    for e in expiries:
        if e in skip or e > reads[-1]:
            continue
        i = bisect.bisect_left(reads, e)
        assert reads[i] - reads[i - 1] <= interval + 0.0006, (e, reads[i - 1], reads[i])
    busy = [r for r in reads if 1.0 <= r < 3.0]  # locked, the timer running
    per_period = len(busy) / (2.0 / period)
    assert per_period <= 2 + period / step + 0.2, per_period
    idle_reads = [r for r in reads if idle[0] + 0.1 <= r < idle[1]]
    assert len(idle_reads) <= 1.0 / step + 1  # no boundary to find: a read per step


def _slice_and_nice() -> tuple[str | None, int]:
    text = Path("/proc/thread-self/sched").read_text()
    found = [line.split()[-1] for line in text.splitlines() if line.startswith("se.slice")]
    return (found[0] if found else None), os.getpriority(os.PRIO_PROCESS, 0)


def test_prompt_gives_the_thread_the_short_slice_then_its_own_back() -> None:
    """Inside prompt() the calling thread has a 100 us slice where the kernel has slices (it
    says whether), its nice kept; after it, the slice it had."""
    before = _slice_and_nice()
    with sampler.prompt() as short:
        inside = _slice_and_nice()
        if short:
            assert inside == (str(sampler.SHORT_SLICE_NS), before[1])
        else:
            assert inside == before
    assert _slice_and_nice() == before


def test_stepper_steps_on_its_rhythm_and_at_each_boundary() -> None:
    """Reads 1 ms apart, steps every 5 ms: a step at the first read, 5 ms after the last step,
    and at the first read after nr_periods moved (which restarts the rhythm); the thread list
    is read again at the first step 10 ms after it was last read (the recorder was given it at
    the start), a failed read (the group gone) skipped."""
    stepped: list[float] = []
    listed: list[float] = []  # the step each follow() came before
    calls = {"n": 0}

    class Rec(ThreadRecorder):
        def step(self, t: float, throttled_us: float) -> None:
            stepped.append(round(t * 1000))

        def follow(self, tids: list[int], since: float | None = None) -> None:
            listed.append(len(stepped))

    def list_threads() -> list[int]:
        calls["n"] += 1
        if calls["n"] == 1:
            raise BwlabError("gone")
        return [1]

    rec = Rec([1])
    stepper = threads.Stepper.of(rec, list_threads, 0.001, 0.005)
    assert (stepper.step_s, stepper.slack_s, stepper.follow_s) == (0.005, 0.0005, threads.FOLLOW_S)
    stepper.follow_s = 0.010
    nr = [0] * 7 + [1] * 10 + [2] * 9  # boundaries at samples 7 and 17
    for i, n in enumerate(nr):
        stepper.feed(i / 1000, n, functools.partial(Sample, i / 1000, n, 0, 0.0, 0.0))
    assert stepped == [0, 5, 7, 12, 17, 22]
    assert rec.boundaries == pytest.approx([0.0065, 0.0165])  # half a sample before the one after
    assert calls["n"] == 2 and listed == [5]  # before the steps at 12 (failed: skipped) and 22


def test_threads_taken_off_a_throttled_runqueue_still_want_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two threads on two CPUs run 5 ms, then 2 ms each and are throttled for 3 ms each,
    off their runqueues (no run delay); the 6 ms is counted at the next read. The second step
    wanted both CPUs: what they ran plus the throttled time reached back from its count."""
    reads = [{1: (0, 0), 2: (0, 0)}, {1: (5_000_000, 0), 2: (5_000_000, 0)},
             {1: (7_000_000, 0), 2: (7_000_000, 0)}]  # fmt: skip
    at = {"i": 0}
    monkeypatch.setattr(threads, "read_schedstat", lambda tid, fds=None: reads[at["i"]].get(tid))
    rec = ThreadRecorder([1, 2], ncpu=2)
    for i, throttled_us in enumerate([0.0, 0.0, 6000.0]):
        at["i"] = i
        rec.step(i * 0.005, throttled_us)
    assert [round(w, 3) for _, _, w in rec.steps] == [2.0, 0.8]  # run plus run delay alone
    assert [round(w, 3) for _, _, w in rec.wanting()] == [2.0, 2.0]
    assert rec.wanted_us(0.005, 0.010) == pytest.approx(10000)
    assert rec.wanted_us(0.0, 0.0075) == pytest.approx(15000)  # a step is taken as even: 2 CPUs throughout
    assert rec.wanted_cpus(0.006, 0.007) == pytest.approx(2.0)


def test_a_thread_read_late_is_counted_as_it_stood_at_its_steps_time() -> None:
    """Steps at 0, 10 and 20 ms, one CPU. Thread 1 is read on time; thread 2, on the CPU or
    waiting for it throughout, is read 6 ms late at the second step (16 ms: 16 ms run and
    wait) and on time at the third: at 10 ms it had wanted 10 ms (between its reads at 0
    and 16 ms), and 10 ms more by 20 ms. Read as at the step's time, its second step would
    have wanted 16 ms of 10 (capped: 1.0) and its third 4 ms (0.4)."""
    ms = 1_000_000
    rec = ThreadRecorder([1, 2], ncpu=1)
    rec.step(0.0, 0.0, {1: (0, 0, 0.0), 2: (0, 0, 0.0)})
    rec.step(0.010, 0.0, {1: (4 * ms, ms, 0.010), 2: (8 * ms, 8 * ms, 0.016)})
    rec.step(0.020, 0.0, {1: (5 * ms, ms, 0.020), 2: (10 * ms, 10 * ms, 0.020)})
    assert [(r, w) for _, _, r, w in rec.spent[2]] == [(5000.0, 5000.0), (5000.0, 5000.0)]
    assert [(r, w) for _, _, r, w in rec.spent[1]] == [(4000.0, 1000.0), (1000.0, 0.0)]
    # a thread first read late (it appeared in the list then) is taken as read
    rec.follow([3])
    rec.step(0.030, 0.0, {1: (5 * ms, ms, 0.030), 2: (10 * ms, 10 * ms, 0.030), 3: (7 * ms, 0, 0.033)})
    rec.step(0.040, 0.0, {1: (5 * ms, ms, 0.040), 2: (10 * ms, 10 * ms, 0.040), 3: (9 * ms, 0, 0.040)})
    assert [(r, w) for _, _, r, w in rec.spent[3]][-1] == (2000.0, 0.0)


def test_a_late_read_is_split_by_what_the_thread_wanted_before() -> None:
    """Two threads, each read on time at 0 and 10 ms and 6 ms late (at 26 ms) at the step of
    20 ms. Thread 1 wanted a CPU through 0-10 ms and 12 ms more by 26: it most likely went on
    wanting, then stopped, so 10 ms of it (all there was room for) fall before 20 ms, not
    12 x 10/16. Thread 2 wanted nothing in 0-10 ms and 3 ms by 26: it most likely began
    late, so all 3 ms fall after 20 ms."""
    ms = 1_000_000
    rec = ThreadRecorder([1, 2], ncpu=2)
    rec.step(0.0, 0.0, {1: (0, 0, 0.0), 2: (0, 0, 0.0)})
    rec.step(0.010, 0.0, {1: (10 * ms, 0, 0.010), 2: (0, 0, 0.010)})
    rec.step(0.020, 0.0, {1: (22 * ms, 0, 0.026), 2: (3 * ms, 0, 0.026)})
    rec.step(0.030, 0.0, {1: (22 * ms, 0, 0.030), 2: (3 * ms, 0, 0.030)})
    assert [r for _, _, r, _ in rec.spent[1]] == [10000.0, 10000.0, 2000.0]
    assert [r for _, _, r, _ in rec.spent[2]] == [0.0, 0.0, 3000.0]
    rec.step(0.040, 0.0, {1: (22 * ms, 0, 0.040)})  # thread 2 exited: its last read is forgotten
    assert set(rec.read) == {1}


def test_a_thread_born_since_the_lists_last_read_is_counted_from_its_birth() -> None:
    """One CPU, steps every 10 ms, the list read at each. Thread 2, first listed at 20 ms
    (born after the read at 10 ms), has run 6 ms and waited 3 ms: that is what it wanted in
    the step that found it. Thread 3, listed then too, has run 500 ms: more than it could
    have since 10 ms, so it moved in from elsewhere, and its first read only reads it. The
    initial thread 1 is read as usual."""
    ms = 1_000_000
    rec = ThreadRecorder([1], ncpu=1)
    rec.step(0.0, 0.0, {1: (0, 0, 0.0)})
    rec.step(0.010, 0.0, {1: (ms, 0, 0.010)})
    rec.follow([1, 2, 3], since=0.010)
    assert rec.born == {2: 0.010, 3: 0.010}
    rec.step(0.020, 0.0, {1: (ms, 0, 0.020), 2: (6 * ms, 3 * ms, 0.020), 3: (500 * ms, 0, 0.020)})
    assert [(r, w) for _, _, r, w in rec.spent[2]] == [(0.0, 0.0), (6000.0, 3000.0)]
    assert [(r, w) for _, _, r, w in rec.spent[3]] == [(0.0, 0.0), (0.0, 0.0)]
    assert [round(w, 2) for _, _, w in rec.steps] == [0.1, 0.9]
    assert rec.born == {}  # read once: from now on as any other
    # without `since` (the list read at the start), a new thread is only read
    rec.follow([4])
    rec.step(0.030, 0.0, {1: (ms, 0, 0.030), 2: (6 * ms, 3 * ms, 0.030), 4: (2 * ms, 0, 0.030)})
    assert [(r, w) for _, _, r, w in rec.spent[4]][-1] == (0.0, 0.0)


def test_throttled_time_counted_after_a_boundary_is_reached_back_from_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two threads on two CPUs run 5 ms, then 2 ms each before the boundary at 10 ms, off their
    runqueues (throttled) for the last 3 ms; a remote runqueue's throttled time (6 ms on both)
    is counted at 12 ms, a step after the boundary: it was wanted before the boundary, not
    after it. Without the boundary it is reached back from the step's end (the old weighing)."""
    reads = [{1: (0, 0), 2: (0, 0)}, {1: (5_000_000, 0), 2: (5_000_000, 0)},
             {1: (7_000_000, 0), 2: (7_000_000, 0)}, {1: (9_000_000, 0), 2: (9_000_000, 0)}]  # fmt: skip
    at = {"i": 0}
    monkeypatch.setattr(threads, "read_schedstat", lambda tid, fds=None: reads[at["i"]].get(tid))
    # without: the 3 ms per CPU reached back from 12 ms covers 1 ms of the second step
    for boundary, expected in ((True, [2.0, 2.0, 2.0]), (False, [2.0, 1.2, 2.0])):
        rec = ThreadRecorder([1, 2], ncpu=2)
        for i, (t, throttled_us) in enumerate([(0.0, 0.0), (0.005, 0.0), (0.010, 0.0), (0.012, 6000.0)]):
            at["i"] = i
            if boundary and i == 2:
                rec.boundaries.append(0.010)
            rec.step(t, throttled_us)
        assert [round(w, 2) for _, _, w in rec.wanting()] == expected, boundary


def test_a_run_delay_counted_late_is_spread_back_over_the_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """Thread 1 (of one CPU) runs the first 4 ms of the first 10 ms step, is taken off its
    throttled runqueue for 30 ms (no run delay meanwhile), and runs the last 6 ms of the fourth
    step: its schedstat counts the 30 ms of delay there at once. The steps it waited through
    wanted the CPU: 6 ms more of the first (it waited from 4 ms), all of the second and third
    — not the fourth alone, capped at its length. Thread 2 sleeps throughout and gets none of
    it; the step after is not touched."""
    reads = [{1: (0, 0), 2: (0, 0)}, {1: (4_000_000, 0), 2: (0, 0)}, {1: (4_000_000, 0), 2: (0, 0)},
             {1: (4_000_000, 0), 2: (0, 0)}, {1: (10_000_000, 30_000_000), 2: (0, 0)},
             {1: (10_000_000, 30_000_000), 2: (0, 0)}]  # fmt: skip
    at = {"i": 0}
    monkeypatch.setattr(threads, "read_schedstat", lambda tid, fds=None: reads[at["i"]].get(tid))
    rec = ThreadRecorder([1, 2], ncpu=1)
    for i in range(len(reads)):
        at["i"] = i
        rec.step(i * 0.010, 0.0)
    assert [round(w, 3) for _, _, w in rec.steps] == [1.0, 1.0, 1.0, 1.0, 0.0]
    assert rec.wanted_us(0.0, 0.040) == pytest.approx(40000)
    assert rec.spread == {1: pytest.approx({0: 6000.0, 1: 10000.0, 2: 10000.0})}
    # what the replay is given is unchanged: the steps' own run and wait
    assert [(r, w) for _, _, r, w in rec.spent[1]] == [(4000.0, 0.0), (0.0, 0.0), (0.0, 0.0), (6000.0, 30000.0),
                                                        (0.0, 0.0)]  # fmt: skip
    rec.forget_before(0.015)
    assert rec.spread == {1: pytest.approx({1: 10000.0, 2: 10000.0})} and len(rec.wanted_sum) == len(rec.steps) == 4


def test_phase_fit_needs_agreement() -> None:
    assert fit_phase([(0.0101, 0.0112), (0.0201, 0.0213), (0.0299, 0.0311)], 0.01) is not None
    scattered = [(0.0101, 0.0102), (0.0254, 0.0255), (0.0377, 0.0378), (0.0461, 0.0462)]
    assert fit_phase(scattered, 0.01) is None  # no phase in more than half: the timer moved
    assert fit_phase([(0.0, 0.5)], 0.01) is None  # sampled more coarsely than the period


def test_coarse_sampling_still_classifies_windows() -> None:
    """Sampled every 35 ms at a 10 ms period: windows of 3-4 periods, still classified."""
    samples = _synthetic([2.0] * 100, 10000, 10000, 0.035)
    analysis = analyze(samples, Limit(10000, 10000), 0.035, cpus=2)
    assert analysis.periods and all(p.periods >= 3 for p in analysis.periods)
    assert analysis.at == analysis.throttled and analysis.below == 0


def test_throttled_time_is_capped_by_what_the_cpus_could_run() -> None:
    """A group whose two threads have two CPUs and a 2-CPU quota cannot demand more than its
    quota, however much throttled time its runqueues report (they overlap a boundary)."""
    demand = [1.0] * 100
    samples = _synthetic(demand, 20000, 10000, 0.001)
    inflated = [Sample(s.t, s.nr_periods, s.nr_throttled, s.throttled_us * 1.5 + 2000 * s.nr_throttled, s.usage_us)
                for s in samples]  # fmt: skip
    analysis = analyze(inflated, Limit(20000, 10000), 0.001, cpus=2)
    assert analysis.throttled > 90 and analysis.below == analysis.throttled
    assert analyze(inflated, Limit(20000, 10000), 0.001, cpus=4).at > 0  # with 4 CPUs it could have


def test_sampler_reads_a_tree_and_says_what_is_wrong(tmp_path: Path) -> None:
    """Counters from a fake v1 group; a malformed cpu.stat, a group removed: one-line errors."""
    from bwlab.live.sampler import Reader, sample

    hier = _v1_tree(tmp_path)
    group = groups.find("/system.slice/a.service", hier)
    (group.dir / "cpu.stat").write_text("nr_periods 10\nnr_throttled 4\nthrottled_time 3000000\n")
    assert group.usage_file is not None
    group.usage_file.write_text("5000000\n")
    reader = Reader(group)
    s = reader.read()
    assert (s.nr_periods, s.nr_throttled, s.throttled_us, s.usage_us) == (10, 4, 3000.0, 5000.0)
    # the same cpu.stat text is parsed once (v1's changes only at boundaries), usage every read
    group.usage_file.write_text("7000000\n")
    assert reader.read().usage_us == 7000.0
    (group.dir / "cpu.stat").write_text("nr_periods 11\nnr_throttled 5\nthrottled_time 4000000\n")
    s = reader.read()
    assert (s.nr_periods, s.nr_throttled, s.throttled_us, s.usage_us) == (11, 5, 4000.0, 7000.0)
    reader.close()
    assert len(sample(group, 0.05, 0.01)) >= 5
    # v1's cpuacct mounted apart: a group made in cpu alone has no usage there
    (tmp_path / "cpuacct" / "system.slice" / "a.service" / "cpuacct.usage").unlink()
    (tmp_path / "cpuacct" / "system.slice" / "a.service").rmdir()
    with pytest.raises(BwlabError, match=r"no group in the cpuacct hierarchy \(.*cpuacct/system\.slice/a\.service\)"):
        Reader(group)
    (tmp_path / "cpuacct" / "system.slice" / "a.service").mkdir()
    group.usage_file.write_text("7000000\n")
    (group.dir / "cpu.stat").write_text("nr_periods ten\n")
    with pytest.raises(BwlabError, match="not 'key integer'"):
        Reader(group).read()
    (group.dir / "cpu.stat").unlink()
    with pytest.raises(BwlabError, match=r"has no cpu\.stat"):
        Reader(group)
    with pytest.raises(BwlabError, match="at most"):
        sample(group, 0.01, 0.05)


def test_trace_parse_demand_and_lateness() -> None:
    """bpftrace's map dump, out of order: a thread that wanted a CPU from the start until it
    slept at 1.004 s, one woken at 1.002 s and preempted (still wanting) until the end; the
    timer of another group is told apart by its address. A thread's first event decides its
    state at the start, not /proc's: 13, not shown runnable (throttled), was switched out
    first: wanting from the start; 14, shown runnable, was woken first: asleep until then; 15,
    no event, as /proc said."""
    text = "\n".join([
        "Attaching 4 probes...",
        "@s[0, 8]: (1006000000, 13, 1)",  # tid 13 switched out asleep, its first event
        "@w[1, 9]: (1007000000, 14)",  # tid 14 woken, its first event
        "@s[1, 10]: (1008000000, 14, 1)",
        "@s[1, 7]: (1004000000, 11, 1)",  # tid 11 switched out asleep (S)
        "@w[0, 3]: (1002000000, 12)",  # tid 12 woken
        "@s[0, 4]: (1003000000, 12, 256)",  # tid 12 preempted (TASK_REPORT_MAX): still wants
        "@p[0, 1]: (1000000000, 4096)",
        "@p[1, 2]: (1010000500, 4096)",
        "@p[0, 5]: (1005000000, 8192)",
        "@x[0, 1]: 3",
    ])  # fmt: skip
    trace = ebpf.parse(text, 1.0, 1.010, {11: True, 12: False, 13: False, 14: True, 15: True})
    assert trace.timers == {4096: [1.0, 1.0100005], 8192: [1.005]}
    assert trace.wanting == {11: [(1.0, 1.004)], 12: [(1.002, 1.010)], 13: [(1.0, 1.006)], 14: [(1.007, 1.008)],
                             15: [(1.0, 1.010)]}  # fmt: skip
    del trace.wanting[13], trace.wanting[14], trace.wanting[15]
    assert trace.demand_us(1.0, 1.010, cpus=2) == pytest.approx(4000 + 8000)
    assert trace.demand_us(1.0, 1.010, cpus=1) == pytest.approx(4000 + 6000)  # overlap 1.002-1.004 counts once
    assert trace.timer_of([(0.9995, 1.0003), (1.0095, 1.0102)]) == [1.0, 1.0100005]
    assert trace.lateness_us([1.0, 1.0100005, 1.02], 0.01) == pytest.approx([0.0, 0.5, 0.0], abs=1e-6)


def test_script_filters_the_threads_and_the_timer() -> None:
    text = ebpf.script([5, 7], 0xFFFFFFFF813C4EF0)
    assert "@t[5] = 1; @t[7] = 1;" in text and "(uint64)0xffffffff813c4ef0" in text
    assert "printf" not in text  # events stay in maps until the end: no wakeup per event
    assert "sched_process_fork / @t[args->parent_pid] /" in text  # threads the members start


def test_exact_boundaries_and_demand_decide_when_traced() -> None:
    """Traced boundaries replace the estimated ones (error 0) and the traced demand decides;
    polling's own verdict is kept beside it."""
    demand = [2.0] * 30
    samples = _synthetic(demand, 10000, 10000, 0.001)
    edges = [b for _, b in boundary_intervals(samples)]
    expiries = [b - 0.0002 for b in edges]  # each boundary 0.2 ms before the sample that saw it
    analysis = analyze(samples, Limit(10000, 10000), 0.001, cpus=2, boundaries=expiries,
                       demand=lambda a, b: 0.5 * (b - a) * 1e6)  # fmt: skip
    assert analysis.exact and all(p.error_us == 0 for p in analysis.periods)
    assert [round(p.start, 6) for p in analysis.periods] == [round(t, 6) for t in expiries[:-1]]
    throttled = [p for p in analysis.periods if p.throttled]
    assert throttled and all(p.verdict == "below" and p.estimated == "at" for p in throttled)


def test_an_expiry_at_the_edge_of_a_read_is_its_boundary() -> None:
    """The two races of a read with the period timer: the timer fires on the reading CPU
    between the clock's read and the file's (its expiry after the sample's time, before the
    read's end), or just before a read that does not see it yet (its expiry a little before
    the time of the read that missed it). Both are traced boundaries, not estimates."""
    samples = _synthetic([2.0] * 30, 10000, 10000, 0.001)
    samples = [dataclasses.replace(s, read_end=s.t + 0.00003) for s in samples]
    edges = boundary_intervals(samples)
    expiries = [b - 0.0002 for _, b in edges]
    expiries[3] = edges[3][1] - 0.00001  # after the read began (the sample's time), before it ended
    expiries[6] = edges[6][0] - 0.00001  # 10 us before the read that missed it
    analysis = analyze(samples, Limit(10000, 10000), 0.001, cpus=2, boundaries=expiries,
                       demand=lambda a, b: 0.5 * (b - a) * 1e6)  # fmt: skip
    assert all(p.error_us == 0 for p in analysis.periods)
    assert [round(p.start, 6) for p in analysis.periods] == [round(t, 6) for t in expiries[:-1]]
    # a read's time alone misses the first: the boundary then estimated (fitted phase)
    bare = [dataclasses.replace(s, read_end=None) for s in samples]
    estimated = analyze(bare, Limit(10000, 10000), 0.001, cpus=2, boundaries=expiries,
                        demand=lambda a, b: 0.5 * (b - a) * 1e6)  # fmt: skip
    assert [i for i, p in enumerate(estimated.periods) if p.error_us] == [2, 3]


def test_threads_wanting_more_than_the_counters_show_is_at_quota() -> None:
    """Usage at the quota with little throttled time (many threads: the counters miss what
    they were stopped from running) but threads that wanted both CPUs: over-use."""
    demand = [0.95] * 50
    samples = _synthetic(demand, 10000, 10000, 0.001)
    plain = analyze(samples, Limit(10000, 10000), 0.001, cpus=2)
    assert plain.throttled and plain.below == plain.throttled
    wanting = analyze(samples, Limit(10000, 10000), 0.001, cpus=2, wanted_us=lambda a, b: 2 * (b - a) * 1e6)
    assert wanting.at == wanting.throttled


def test_a_pool_takes_the_episodes_in_the_order_they_were_due(tmp_path: Path) -> None:
    """Three threads' episodes done by one thread, then two: the pool's threads take each
    episode at its due time or when they are free (a queue), all the work and no more, over
    the recording's span; helpers wake on their cadence beside the pool, one half a cadence
    in, two a third and two thirds; in the trace a pool thread that got no work is left out
    and the helper takes its place on the next CPU."""
    from bwlab.threads import pool_episodes

    # 10 ms due at 0, 6 ms due at 2 ms, 4 ms due at 30 ms; all end at 40 ms
    eps = {1: [(10000.0, 30000.0)], 2: [(0.0, 2000.0), (6000.0, 32000.0)], 3: [(0.0, 30000.0), (4000.0, 6000.0)]}
    one = pool_episodes(eps, 1)
    assert one == {0: [(10000.0, 0.0), (6000.0, 14000.0), (4000.0, 6000.0)]}  # B waits for A
    two = pool_episodes(eps, 2)
    assert two == {0: [(10000.0, 30000.0)], 1: [(0.0, 2000.0), (6000.0, 22000.0), (4000.0, 6000.0)]}
    for pool in (one, two):
        assert sum(w for ivs in pool.values() for w, _ in ivs) == 20000
        assert all(sum(w + s for w, s in ivs) == 40000 for ivs in pool.values())
    sysmon = (20.0, 10000.0)
    helped = pool_episodes(eps, 1, (sysmon,))
    assert helped[0] == one[0] and helped[1] == [(0.0, 5000.0)] + [(20.0, 9980.0)] * 3
    twice = pool_episodes(eps, 1, (sysmon, sysmon))
    assert [ivs[0][1] for ivs in (twice[1], twice[2])] == [10000 / 3, 20000 / 3]
    assert pool_episodes({1: [(0.0, 5000.0)]}, 1) == {0: [(0.0, 5000.0)]}  # nothing ran: a sleeper
    idle = pool_episodes({1: [(10000.0, 30000.0)]}, 2, (sysmon,))  # one episode for two threads
    lines = ThreadRecorder([]).write_trace(tmp_path / "pool.jsonl", idle).read_text().splitlines()
    written = sorted({(json.loads(line)["thread"], json.loads(line)["run_us"]) for line in lines})
    assert written == [(0, 10000), (1, 0), (1, 20)]


def test_a_trace_leaves_out_the_threads_that_did_no_work(tmp_path: Path) -> None:
    """The simulator puts thread i on CPU i mod CPUs: a thread that only slept is left out of
    the trace, so it does not put the busy ones after it on one CPU; the rest keep their
    thread ID order."""
    rec = ThreadRecorder([])
    path = rec.write_trace(tmp_path / "t.jsonl", {5: [(9000.0, 1000.0)], 7: [(0.0, 10000.0)],
                                                   9: [(9000.0, 1000.0)], 3: [(100.0, 9900.0)]})  # fmt: skip
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(line["thread"], line["run_us"]) for line in lines] == [(0, 100), (1, 9000), (2, 9000)]


def test_episodes_are_due_when_the_work_began_and_span_the_throttled_time() -> None:
    """Thread 1 wakes 4 ms into the first step, waits 1 ms, runs 5 ms, 1 ms in the second step,
    is throttled (neither running nor waiting) for the third, which the group's throttled time
    covers, runs 5 ms more and sleeps: one episode of 11 ms due at 4 ms. Thread 2 runs 2 ms at
    the end of the first step, sleeps through steps the group was not throttled in, runs 3 ms at
    the end of the fourth: two episodes."""
    rec = ThreadRecorder([1, 2], ncpu=2)
    steps = [(i * 0.01, (i + 1) * 0.01) for i in range(6)]
    rec.spent = {1: [(a, b, r, w) for (a, b), (r, w) in zip(steps, [(5000, 1000), (1000, 0), (0, 0), (5000, 0),
                                                                    (0, 0), (0, 0)], strict=True)],
                 2: [(a, b, r, w) for (a, b), (r, w) in zip(steps, [(2000, 0), (0, 0), (0, 0), (3000, 0),
                                                                    (0, 0), (0, 0)], strict=True)]}  # fmt: skip
    rec.throttled = [(0.03, 0.04, 20000.0)]  # counted at step 3's unthrottle: 10 ms on each of 2 CPUs
    eps = rec.episodes()
    assert [(round(r), round(s)) for r, s in eps[1]] == [(0, 4000), (11000, 45000)]
    # thread 2: step 0's 2 ms began at 8 ms (it ends with the step); step 1 is idle and not
    # throttled (the throttled time reaches back from 30 ms by 10 ms, to 20 ms), so it slept
    assert [(round(r), round(s)) for r, s in eps[2]] == [(0, 8000), (2000, 27000), (3000, 20000)]


def test_episodes_of_a_thread_that_never_sleeps_are_one_run() -> None:
    """A CPU-bound thread, throttled for the third step: one episode, its work what it ran."""
    rec = ThreadRecorder([1], ncpu=1)
    rec.spent = {1: [(i * 0.01, (i + 1) * 0.01, 0.0 if i == 2 else 10000.0, 0.0) for i in range(4)]}
    rec.throttled = [(0.03, 0.04, 10000.0)]
    assert rec.episodes() == {1: [(30000.0, 10000.0)]}


def test_doctor_samples_a_fiftieth_of_the_period_within_1_to_10_ms() -> None:
    """The default interval keeps the reads per period (hence the attribution error against the
    quota) the same at any period, between a 1 ms floor and a 10 ms ceiling."""
    assert [doctor_interval_s(p) for p in (1_000, 10_000, 50_000, 100_000, 250_000, 1_000_000)] == pytest.approx(
        [0.001, 0.001, 0.001, 0.002, 0.005, 0.010])  # fmt: skip


def _throttled(below: int, at: int, quota_us: int, period_us: int) -> Analysis:
    """An analysis of `below` unnecessary and `at` over-used throttled periods, then ten idle."""
    ps = [Period(i * 0.01, (i + 1) * 0.01, 1, quota_us, 1, 1000.0, 0.0, "below" if i < below else "at")
          for i in range(below + at)]  # fmt: skip
    ps += [Period(1 + i * 0.01, 1 + (i + 1) * 0.01, 1, 0.0, 0, 0.0, 0.0, "") for i in range(10)]
    return Analysis(Limit(quota_us, period_us), 0.001, ps)


@pytest.mark.parametrize(
    ("quota_cpus", "allowed", "threads", "expect", "pinned"),
    [
        (2.0, (0, 1), 2, "quota-covers-cpus", None),  # sysbench at demand == quota on this host
        (1.0, (3,), 4, "quota-covers-cpus", None),  # a cpuset of one CPU under a 1-CPU quota
        (1.0, (0, 1, 2, 3), 1, "cpuset", "0"),  # a whole-CPU quota on four CPUs
        (2.0, (4, 5, 6, 7), 8, "cpuset", "4-5"),
        (1.5, (0, 1, 2, 3), 1, None, None),  # not whole: no cpuset bounds it the same
    ],
)
def test_the_cpus_a_group_may_use_decide_its_causes(tmp_path: Path, quota_cpus: float, allowed: tuple[int, ...],
                                                     threads: int, expect: str | None,
                                                     pinned: str | None) -> None:  # fmt: skip
    """Contract: a quota of at least the CPUs the group's threads may run on caps nothing and
    is named, with the commands that drop it; a whole-CPU quota on more CPUs than it has is
    named with the commands that pin it to that many of them and drop the quota; neither for a
    fractional quota; the threads' cause counts only the threads that can run at once."""
    period = 10000
    quota = round(quota_cpus * period)
    for v, hier in ((1, Hierarchy(1, tmp_path / "cpu")), (2, Hierarchy(2, tmp_path / "v2"))):
        (hier.cpu / "g").mkdir(parents=True)
        if v == 2:
            (hier.cpu / "g" / "cpuset.cpus").write_text("\n")
        group = groups.LiveGroup("/g", hier, Limit(quota, period), Limit(quota, period), "/g", identify("/g"))
        facts = diagnose.Facts(ncpu=8, hz=250, slice_us=5000, threads=threads, mean_cpus=1.0, allowed=allowed)
        diag = diagnose.diagnose(group, _throttled(20, 0, quota, period), facts)
        keys = {c.key for c in diag.causes}
        assert keys & {"quota-covers-cpus", "cpuset"} == ({expect} if expect else set()), keys
        assert ("threads" in keys) == (min(threads, len(allowed)) > math.ceil(quota_cpus)), keys
        raw = dict(diag.alternatives).get(f"cgroup v{v}", "")
        if expect is None:
            assert not diag.alternatives
            continue
        assert raw.endswith("cpu.cfs_quota_us" if v == 1 else "cpu.max"), raw
        assert raw.startswith("echo -1 >" if v == 1 and pinned is None else "echo max >" if pinned is None else "")
        if pinned is not None:  # v2: the group's own cpuset; v1: the threads' affinity
            assert (f"echo {pinned} > {hier.cpu / 'g' / 'cpuset.cpus'}" if v == 2
                    else f"taskset -a -c -p {pinned} $p") in raw, raw  # fmt: skip
        assert diag.burst_us is not None  # the burst stays the fix bwlab writes


def test_a_parents_quota_or_over_use_gets_no_alternative(tmp_path: Path) -> None:
    """A parent's quota is shared with siblings, and a group that wanted more than its quota
    would be bounded lower by a cpuset: neither is offered one."""
    hier = Hierarchy(1, tmp_path)
    child = groups.LiveGroup("/p/c", hier, Limit(None, 10000), Limit(10000, 10000), "/p", identify("/p/c"))
    facts = diagnose.Facts(ncpu=4, hz=250, slice_us=5000, threads=1, mean_cpus=1.0, allowed=(0, 1, 2, 3))
    assert not diagnose.diagnose(child, _throttled(20, 0, 10000, 10000), facts).alternatives
    own = groups.LiveGroup("/g", hier, Limit(10000, 10000), Limit(10000, 10000), "/g", identify("/g"))
    assert not diagnose.diagnose(own, _throttled(1, 19, 10000, 10000), facts).alternatives


def test_allowed_cpus_are_the_threads_affinity_and_listed_as_the_kernel_does() -> None:
    me = groups.LiveGroup("/", Hierarchy(1, Path("/nonexistent")), Limit(None, 100000), Limit(None, 100000), "/",
                          identify("/"))  # fmt: skip
    assert me.allowed_cpus([os.getpid()]) == sorted(os.sched_getaffinity(0))
    assert me.allowed_cpus([2**22 + 7]) == list(range(os.cpu_count() or 1))  # no such thread: every CPU
    assert groups.cpu_list([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8" and groups.cpu_list([3]) == "3"


def test_a_burst_smaller_than_needed_is_named() -> None:
    """Contract: a group throttled below quota through a burst smaller than the one recommended
    is told so; with the recommended burst or none, not."""
    hier = Hierarchy(1, Path("/nonexistent"))
    facts = diagnose.Facts(ncpu=2, hz=250, slice_us=5000, threads=2, mean_cpus=2.0, allowed=(0, 1))
    for burst, named in ((0, False), (4000, True), (8000, False)):
        lim = Limit(20000, 10000, burst)
        group = groups.LiveGroup("/g", hier, lim, lim, "/g", identify("/g"))
        diag = diagnose.diagnose(group, _throttled(20, 0, 20000, 10000), facts)
        assert diag.burst_us == 8000  # one 4 ms tick per CPU
        assert ("burst-too-small" in {c.key for c in diag.causes}) == named, (burst, diag.causes)


def _uvarint(n: int) -> bytes:
    out = b""
    while n >= 0x80:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n])


def test_go_buildinfo_gives_the_version_and_modules(tmp_path: Path) -> None:
    mod = "path\texample.com/srv\ndep\tgo.uber.org/automaxprocs\tv1.6.0\th1:x=\n" * 3  # > 127: a 2-byte length
    exe = tmp_path / "srv"
    exe.write_bytes(b"\x7fELF" + b"\0" * 4000 + threadpools.GO_MAGIC + bytes([8, 2]) + b"\0" * 16
                    + _uvarint(8) + b"go1.25.4" + _uvarint(len(mod)) + mod.encode() + b"\0" * 64)  # fmt: skip
    assert threadpools.go_buildinfo(str(exe)) == ("go1.25.4", mod)
    old = tmp_path / "old"  # Go 1.17 and earlier: pointers, not inline strings
    old.write_bytes(b"\x7fELF" + threadpools.GO_MAGIC + bytes([8, 0]) + b"\0" * 64)
    assert threadpools.go_buildinfo(str(old)) == ("", "")
    (tmp_path / "c").write_bytes(b"\x7fELF not go")
    assert threadpools.go_buildinfo(str(tmp_path / "c")) is None
    assert threadpools.go_buildinfo(str(tmp_path / "missing")) is None


# what `go version -m` shows of a Go 1.26 program whose go.mod says `go 1.24`
OLD_GO_MOD = "build\tDefaultGODEBUG=containermaxprocs=0,decoratemappings=0,updatemaxprocs=0"


@pytest.mark.parametrize(
    ("version", "modinfo", "env", "allowed", "quota", "size"),
    [
        ("go1.19.8", "", {}, 8, 1.0, 8),  # before 1.25: the CPUs, whatever the quota
        ("go1.25.0", "", {}, 8, 2.5, 3),  # 1.25: the quota rounded up
        ("go1.25.0", "", {}, 8, 0.5, 2),  # ... at least 2
        ("go1.26.1", "", {}, 2, 3.5, 2),  # ... at most the CPUs it may run on
        ("go1.25.0", "", {}, 8, None, 8),  # no quota on its own cgroup
        ("go1.25.0", "", {"GODEBUG": "containermaxprocs=0"}, 8, 1.0, 8),
        ("go1.26.8", f"{OLD_GO_MOD}\n", {}, 8, 1.0, 8),  # go.mod `go 1.24`: off by default
        ("go1.26.8", f"{OLD_GO_MOD}\n", {"GODEBUG": "containermaxprocs=1"}, 8, 1.0, 2),  # ... on again
        ("go1.25.0", "", {"GOMAXPROCS": "3"}, 8, 1.0, 3),  # the environment first
        ("go1.22.1", "dep\tgo.uber.org/automaxprocs\tv1.6.0\n", {}, 8, 2.5, 2),  # automaxprocs: rounded down
        ("go1.22.1", "dep\tgo.uber.org/automaxprocs\tv1.6.0\n", {}, 8, 0.5, 1),  # ... at least 1
    ],
)
def test_gomaxprocs_as_each_go_picks_it(monkeypatch: pytest.MonkeyPatch, version: str, modinfo: str,
                                        env: dict[str, str], allowed: int, quota: float | None,
                                        size: int) -> None:  # fmt: skip
    monkeypatch.setattr(threadpools, "_environ", lambda pid: env)
    monkeypatch.setattr(threadpools, "_allowed", lambda pid: allowed)
    pool = threadpools.go_pool(7, "/srv", (version, modinfo), quota)
    assert pool.runtime == "go" and pool.size == size, pool
    assert pool.advice(2) == "GOMAXPROCS=2 in its environment"


@pytest.mark.parametrize(
    ("env", "args", "quota", "size"),
    [
        ({}, ["java", "-jar", "x.jar"], 1.5, 2),  # container support: the quota rounded up
        ({}, ["java", "-XX:-UseContainerSupport", "Main"], 1.5, 8),
        ({"JAVA_TOOL_OPTIONS": "-XX:ActiveProcessorCount=3"}, ["java", "Main"], 1.5, 3),
        ({"JAVA_TOOL_OPTIONS": "-XX:ActiveProcessorCount=3"}, ["java", "-XX:ActiveProcessorCount=5", "M"], 1.5, 5),
        ({}, ["java", "Main"], None, 8),
    ],
)
def test_the_jvms_active_processors(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], args: list[str],
                                    quota: float | None, size: int, tmp_path: Path) -> None:  # fmt: skip
    (tmp_path / "cgroups").write_text(PROC_CGROUPS_V1)
    monkeypatch.setattr(threadpools, "PROC_CGROUPS", tmp_path / "cgroups")
    monkeypatch.setattr(threadpools, "_environ", lambda pid: env)
    monkeypatch.setattr(threadpools, "_cmdline", lambda pid: args)
    monkeypatch.setattr(threadpools, "_allowed", lambda pid: 8)
    pool = threadpools.jvm_pool(7, "/nonexistent/bin/java", quota)
    assert pool.runtime == "jvm" and pool.size == size and pool.version is None, pool


# /proc/cgroups with every row (a kernel with the v1 parts), and without cpuset and memory's (7.3
# without CONFIG_CPUSETS_V1 and CONFIG_MEMCG_V1: the lab's guests)
PROC_CGROUPS_V1 = "#subsys_name\thierarchy\tnum_cgroups\tenabled\n" + "".join(
    f"{name}\t0\t1\t1\n" for name in ("cpuset", "cpu", "cpuacct", "memory", "pids")
)
PROC_CGROUPS_V2_ONLY = "".join(line + "\n" for line in PROC_CGROUPS_V1.splitlines() if "cpuset" not in line
                               and "memory" not in line)  # fmt: skip


@pytest.mark.parametrize(
    ("version", "args", "size"),
    [
        ("17.0.15", ["java", "Main"], 8),  # container support off: every CPU it may use
        ("1.8.0_482", ["java", "Main"], 8),
        ("25.0.1", ["java", "Main"], 2),  # JDK-8349988: reads cgroup.controllers itself
        ("17.0.15", ["java", "-XX:ActiveProcessorCount=2", "Main"], 2),  # the flag still works
    ],
)
def test_an_older_jvm_ignores_the_quota_without_v1_rows(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                        version: str, args: list[str], size: int) -> None:  # fmt: skip
    """A JVM before JDK-8349988 takes /proc/cgroups without a cpuset or memory row for disabled
    controllers and turns container support off (JDK 17.0.15 in a v2 guest said 4 on 4 vCPUs
    under a 1-CPU quota: test_hostroot_real.py)."""
    (tmp_path / "cgroups").write_text(PROC_CGROUPS_V2_ONLY)
    (tmp_path / "jdk" / "bin").mkdir(parents=True)
    (tmp_path / "jdk" / "release").write_text(f'JAVA_VERSION="{version}"\n')
    monkeypatch.setattr(threadpools, "PROC_CGROUPS", tmp_path / "cgroups")
    monkeypatch.setattr(threadpools, "_environ", lambda pid: {})
    monkeypatch.setattr(threadpools, "_cmdline", lambda pid: args)
    monkeypatch.setattr(threadpools, "_allowed", lambda pid: 8)
    pool = threadpools.jvm_pool(os.getpid(), str(tmp_path / "jdk" / "bin" / "java"), 1.5)
    assert pool.version == version and pool.size == size, pool
    if size == 8:
        assert "cpuset/memory row" in pool.why and "JDK-8349988" in pool.why, pool.why


def test_the_threads_cause_says_what_sizes_a_wide_pool() -> None:
    hier = Hierarchy(1, Path("/nonexistent"))
    group = groups.LiveGroup("/g", hier, Limit(10000, 10000), Limit(10000, 10000), "/g", identify("/g"))
    wide = threadpools.Pool(42, "/usr/bin/srv", "go", "go1.19.8", 4, "the 4 CPUs it may run on")
    narrow = threadpools.Pool(43, "/usr/bin/tool", "go", "go1.25.0", 1, "GOMAXPROCS=1 in its environment")
    facts = diagnose.Facts(ncpu=4, hz=250, slice_us=5000, threads=6, mean_cpus=1.0, allowed=(0, 1, 2, 3),
                           pools=(wide, narrow))  # fmt: skip
    cause = {c.key: c for c in diagnose.diagnose(group, _throttled(20, 0, 10000, 10000), facts).causes}["threads"]
    assert "srv (pid 42, go1.19.8) runs 4 at once" in cause.evidence and "GOMAXPROCS=1 in its" in cause.evidence
    assert "tool" not in cause.evidence  # already as narrow as the quota


def test_the_replay_agrees_within_the_issues_tolerance() -> None:
    from bwlab.live import whatif

    assert whatif.agrees(100, 80) and not whatif.agrees(100, 79)  # 20 % of what was measured
    assert whatif.agrees(10, 13) and not whatif.agrees(10, 14)  # or 3 points below 15 %
    assert whatif.agrees(50, 60) and not whatif.agrees(50, 39) and whatif.agrees(0, 3) and not whatif.agrees(0, 4)


def test_processes_come_with_the_quota_of_the_cgroup_they_are_in(tmp_path: Path) -> None:
    """What Go reads: the limit of the process's own cgroup, not the group doctor was given."""
    hier = _v1_tree(tmp_path)
    pod = groups.find(f"/kubepods/pod{UID}", hier)
    (tmp_path / "cpu" / f"kubepods/pod{UID}" / "cgroup.procs").write_text("11\n")
    (tmp_path / "cpu" / f"kubepods/pod{UID}/{CID}" / "cgroup.procs").write_text("12\n13\n")
    assert sorted(pod.processes()) == [(11, 1.5), (12, None), (13, None)]  # the container has no quota of its own


class FakeTracer:
    """ebpf.Tracer's shape, for start_tracing: records what it traced and whether it closed."""

    made: ClassVar[list[FakeTracer]] = []

    def __init__(self, tids: list[int]) -> None:
        self.tids, self.closed = list(tids), False
        FakeTracer.made.append(self)

    def wait_attached(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def test_a_thread_born_while_bpftrace_attaches_is_traced(monkeypatch: pytest.MonkeyPatch) -> None:
    """The group's threads are read again once bpftrace is attached; a thread born between the
    first read and the attach (it would be missing from the trace) gets bpftrace started again
    with it; threads that keep coming are one line after three tries."""
    monkeypatch.setattr(ebpf, "Tracer", FakeTracer)
    FakeTracer.made = []
    reads = iter([[10, 11, 12], [10, 11, 12]])
    tracer = ebpf.start_tracing([10], lambda: next(reads))
    assert [t.tids for t in FakeTracer.made] == [[10], [10, 11, 12]]
    assert FakeTracer.made[0].closed and not FakeTracer.made[1].closed and tracer is FakeTracer.made[1]
    FakeTracer.made = []
    count = iter(range(2, 100))
    with pytest.raises(BwlabError, match="threads kept changing while bpftrace attached"):
        ebpf.start_tracing([0], lambda: list(range(next(count))))
    assert len(FakeTracer.made) == 3 and all(t.closed for t in FakeTracer.made)


def _watched(n: int) -> Analysis:
    """`n` periods of 10 ms under a 5 ms quota: the first half throttled below quota in every
    other period, the second half throttled at quota in every period."""
    ps = []
    for i in range(n):
        over = i >= n // 2
        hit = 1 if over or i % 2 else 0
        verdict = ("at" if over else "below") if hit else ""
        ps.append(Period(i * 0.01, (i + 1) * 0.01, 1, 5000 if hit else 4000, hit, 3000.0 * hit, 50, verdict))
    return Analysis(Limit(5000, 10000), 0.001, ps)


@pytest.mark.parametrize("n", [100, 10_000])
def test_the_timeline_bins_periods_and_shows_every_layer(tmp_path: Path, n: int) -> None:
    """doctor --png at 100 and 10,000 periods: at most MAX_BINS bins holding every period once,
    and each layer (usage, throttled time, below quota, at quota) covers a large area of the
    picture (thousands of pixels of its colour: the legend's patches are tens)."""
    analysis = _watched(n)
    chunks = plot.bins(analysis.periods)
    assert len(chunks) <= plot.MAX_BINS and [p for c in chunks for p in c] == analysis.periods
    image = matplotlib.image.imread(plot.timeline(analysis, "test", tmp_path / "t.png"))
    rgb = image[:, :, :3].reshape(-1, 3)
    grey = 0.75 * matplotlib.colors.to_rgb(plot.THROTTLED)[0] + 0.25  # alpha 0.75 over white
    for name, colour in (("usage", plot.USAGE), ("throttled time", (grey,) * 3), ("below", plot.BELOW),
                         ("at", plot.AT)):  # fmt: skip
        target = matplotlib.colors.to_rgb(colour)
        near = int((abs(rgb - target).max(axis=1) < 0.03).sum())
        assert near > 5000, (name, near)


def test_a_systemd_unit_is_told_how_to_keep_its_burst(tmp_path: Path) -> None:
    """systemd has no burst option: the unit's line names the agent that keeps one (by the
    unit's name) and, only below systemd's default period of 100 ms, a longer period."""
    hier = _v1_tree(tmp_path)
    unit = groups.find("a.service", hier)  # 50 ms per 10 ms
    (line,) = [c for runtime, c in diagnose.commands(unit, 4000) if runtime == "systemd"]
    assert "bwlab tune --watch a.service --burst 4000" in line and "CPUQuotaPeriodSec=100ms" in line, line
    (tmp_path / "cpu" / "system.slice" / "a.service" / "cpu.cfs_period_us").write_text("100000\n")
    (line,) = [c for runtime, c in diagnose.commands(groups.find("a.service", hier), 4000) if runtime == "systemd"]
    assert "CPUQuotaPeriodSec" not in line, line


def test_tune_names_the_quota_floor_a_burst_sets_and_who_it_binds() -> None:
    from bwlab.live import tune

    hier = Hierarchy(1, Path("/nonexistent"))
    plain = groups.LiveGroup("/g", hier, Limit(20000, 10000), Limit(20000, 10000), "/g", identify("/g"))
    assert tune.quota_floor(plain, 0) is None  # no burst, no floor
    said = tune.quota_floor(plain, 8000)
    assert said is not None and "refuses a quota below 8000 us for /g" in said and "bwlab tune /g --burst 0" in said
    path = "/kubepods/burstable/pod0b5e/" + "a" * 64
    ctr = groups.LiveGroup(path, hier, Limit(20000, 10000), Limit(20000, 10000), path, identify(path))
    said = tune.quota_floor(ctr, 8000)
    assert said is not None and "container runtime" in said and "bwlab-nri" in said, said


def test_a_burst_clamped_to_the_quota_is_said_with_what_would_cover_the_rest() -> None:
    hier = Hierarchy(1, Path("/nonexistent"))
    facts = diagnose.Facts(ncpu=8, hz=250, slice_us=5000, threads=8, mean_cpus=1.0)
    # 3 CPUs of quota at a 10 ms period, 8 threads on 8 CPUs: 3 ticks, 12 ms, fit under the 30 ms quota
    wide = groups.LiveGroup("/w", hier, Limit(30000, 10000), Limit(30000, 10000), "/w", identify("/w"))
    assert diagnose.burst_clamp(wide, facts) is None and diagnose.recommended_burst(wide, facts) == 12000
    # 0.2 CPU at 10 ms: a 4 ms tick is twice the 2 ms quota
    small = groups.LiveGroup("/s", hier, Limit(2000, 10000), Limit(2000, 10000), "/s", identify("/s"))
    said = diagnose.burst_clamp(small, facts)
    assert diagnose.recommended_burst(small, facts) == 2000
    assert said is not None and "4000 us, above the quota 2000 us" in said and "covers 50 % of it" in said, said
    assert "a period of 20 ms" in said and "cpuset" not in said and "series" in said, said
    cause = {c.key for c in diagnose.diagnose(small, _throttled(20, 0, 2000, 10000), facts).causes}
    assert "burst-clamped" in cause


def test_fixes_are_ranked_by_predicted_effect_and_what_barely_helps_is_never_the_fix() -> None:
    """The issue's Go service: 53 % as it is, 47 % with a burst, 0.8 % on one thread."""
    from bwlab.live import fixes, whatif

    hier = Hierarchy(2, Path("/sys/fs/cgroup"))
    lim = Limit(100000, 100000)
    group = groups.LiveGroup("/svc", hier, lim, lim, "/svc", identify("/svc"))
    pool = threadpools.Pool(42, "/usr/bin/srv", "go", "go1.24.1", 2, "the 2 CPUs it may run on")
    facts = diagnose.Facts(ncpu=2, hz=250, slice_us=5000, threads=8, mean_cpus=0.9, pools=(pool,))
    diag = diagnose.Diagnosis("below-quota", "")
    rows = [(whatif.Variant("as it is", lim), 53.0),
            (whatif.Variant("burst 8000 us", Limit(100000, 100000, 8000)), 47.0),
            (whatif.Variant("the series (policy all)", lim, "all"), 0.0),
            (whatif.Variant("threads 1 (not 8)", lim, trace=Path("pool1.jsonl")), 0.8)]  # fmt: skip
    predictions = [whatif.Prediction(v, pct, 0.5, 5, 2000.0) for v, pct in rows]
    ranked = fixes.rank(group, diag, facts, predictions)
    assert [f.setting for f in ranked] == ["threads 1 (not 8)", "burst 8000 us"]  # the series: a kernel
    assert [f.helps for f in ranked] == [True, False]  # 53 -> 47: less than a quarter of it
    threads = ranked[0]
    assert threads.how == (("go /usr/bin/srv (pid 42)", "GOMAXPROCS=1 in its environment"),)
    assert threads.trade is not None and "a request can take longer" in threads.trade
    burst = ranked[1]
    assert any("bwlab tune /svc --burst 8000" in c for _, c in burst.how)  # how, even where it barely helps
    assert fixes.helps(10.0, 7.5) and not fixes.helps(10.0, 8.5) and not fixes.helps(3.0, 1.5)
