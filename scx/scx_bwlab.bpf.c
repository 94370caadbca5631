/* SPDX-License-Identifier: GPL-2.0 */
/*
 * scx_bwlab: cpu.max enforced by a sched_ext scheduler, without throttling a group whose
 * demand fits its quota.
 *
 * Under sched_ext the kernel's CFS bandwidth code does not run: cpu.max reaches the BPF
 * scheduler through ops.cgroup_init's arguments and ops.cgroup_set_bandwidth (7.3: 6.17 and
 * later), and the scheduler enforces it or nothing does (cpu.stat's throttle counters stay 0).
 *
 * Scheduling. One shared queue of runnable tasks, ordered by virtual time: a task's vtime
 * advances by what it ran scaled by the inverse of its weight, and a task that slept comes
 * back at most one slice behind the queue's front. A task that may run on one CPU only (a
 * per-CPU kthread; any task of a cpuset v2 group whose other CPUs are offline) waits in that
 * CPU's own queue, in the same vtime order, and the CPU runs whichever front comes first: its
 * own queue's or the shared queue's. (These tasks used to go to the CPU's local queue, FIFO:
 * with CPU 1 offline, the pinned tasks of a busy group never let it run dry, the shared queue
 * was never dispatched, and the watchdog ejected the scheduler after 30 s.) "One CPU only" is
 * nr_cpus_allowed == 1: per-CPU kthreads and taskset-pinned tasks, not migrate-disabled ones
 * (the kernel queues those locally itself). Per-CPU kthreads (ksoftirqd, kworkers) thereby
 * lost the FIFO's implicit priority: they wait their vtime turn. Pinned tasks are not ordered
 * by LAGS, and LAGS' preemption does not look at a CPU's pinned queue: a kick to a CPU whose
 * pinned head comes first runs that head, not the latency-aware task. A wakeup that finds an
 * idle CPU goes straight to it. (Weights between cgroups are not compounded as
 * scx_flatcg does: a later step.)
 *
 * Bandwidth. Every cgroup with a quota keeps an account on a grid of its own period (the
 * user's period, not rescaled), started when the quota was set:
 *  - charge: a task's CPU time (p->se.sum_exec_runtime: the clock CFS charges) is charged at
 *    each tick and when the task stops, to its cgroup and to every ancestor with a quota. The
 *    run is cut at every period boundary in it: each period pays for what ran in it and
 *    nothing else. So a group whose threads fill the CPUs its quota buys (demand == quota)
 *    never owes more than its quota in a period, however late a tick or the timer (up to a
 *    tick at HZ=100 late, on every CPU at once: LATE_TICK_NS).
 *  - refill: at each boundary (by the period timer or by a charge that crosses it, whichever
 *    comes first) the account gets the quota plus what the closed period left, at most the
 *    burst (cpu.max.burst); an overrun carries as debt, at most one quota. A charge for
 *    closed periods that comes after their refill (a CPU whose tick came later) first uses
 *    what they left and did not carry; only the rest is debt.
 *  - throttle: an account at or below zero throttles its cgroup, unless the period ends
 *    within END_GRACE_NS (its overrun then is debt, as any). Its tasks are parked on the
 *    cgroup's own queue as they are enqueued or met on the shared queue or a CPU's pinned
 *    queue, and a running one is stopped at its next tick: at most a tick of overrun per CPU,
 *    paid back as debt.
 *  - unthrottle: the period timer (CLOCK_MONOTONIC, absolute expiries on the grid) moves the
 *    parked tasks back to their queues (queue_of()) and kicks idle CPUs.
 * Per cgroup counters (periods, throttled periods and time, bursts, usage) live in the
 * accounts map, which the loader prints: cpu.stat's own stay frozen under sched_ext.
 *
 * LAGS (latency-aware group scheduling, seed 002), on only when the loader names
 * latency-aware cgroups (-l: root's choice; a delegatee cannot opt its groups in, and an
 * opt-in covers the group's whole subtree). Every cgroup's load is the CPU time of its
 * subtree, decaying by half every 2 s (lags_decayed: it always moves, a steady hog's too, and
 * is time, not weight: renice buys no lightness). At dispatch, the first tasks within a slice
 * of the queue's front vtime are walked with the front as the pick; a latency-aware task
 * takes the pick's place when its group is lighter than the pick's where their paths part
 * (the common ancestor's children compared, so spreading load over many groups does not make
 * any of them light; a heavy latency-aware group goes nowhere ahead). A task never runs more
 * than a slice of vtime ahead (a slice x weight / 100 of CPU time): plain groups keep their
 * weight's share. A latency-aware wakeup that finds no idle CPU preempts a run of a group
 * LAGS_MARGIN times heavier where their paths part that has run LAGS_MIN_RUN_NS
 * (hysteresis), one kick a run.
 *
 * Locking: an account's fields are under its bpf_spin_lock, except `throttled`, read without
 * it on the enqueue and dispatch paths: a stale read runs a task a tick too long (its next
 * tick stops it) or parks it just after its group was released (the next expiry releases it:
 * up to a period late; the expiry after a limit is removed releases whatever is left).
 * cpu_ctx (LAGS) is written by its CPU and read by others without a lock: bwlab_running writes
 * depth and path before `started`, and lags_preempt reads `started` first and claims the run
 * by a compare-and-swap on it, so a path read from another run costs at most one wrong kick.
 */
#include <scx/common.bpf.h>
#include "scx_bwlab.h"

char _license[] SEC("license") = "GPL";

#define SHARED_DSQ 0
/* | cpu, for the possible CPUs (nr_cpus): that CPU's pinned tasks. Bit 62 is also
 * SCX_DSQ_FLAG_LOCAL_ON's, which means LOCAL_ON only with bit 63 (SCX_DSQ_FLAG_BUILTIN) set;
 * cgroup ids (kn->id: generation << 32 | inode) stay far below it. */
#define PINNED_DSQ_BASE (1ULL << 62)
#define MAX_LEVELS 16 /* cgroup depth walked for quotas */
#define MAX_SCAN 64 /* shared-queue tasks looked at per dispatch */

const volatile u64 slice_ns = 5000000ULL; /* set by the loader */
const volatile u32 nr_cpus = 1; /* set by the loader */
const volatile bool lags_enabled; /* the loader names latency-aware cgroups (-l) */

#define LAGS_WINDOW 8 /* tasks within a slice of the queue's front that LAGS orders */
#define LAGS_MIN_RUN_NS 1000000ULL /* a run is preempted for LAGS after this much of it */
#define LAGS_MARGIN 2 /* ... and only for a group this many times lighter */

static u64 vtime_now;
u64 nr_lags_kicks, nr_lags_picks; /* LAGS' preemptions, and picks ahead of the front */
UEI_DEFINE(uei);

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, u64);
	__type(value, struct account);
} accounts SEC(".maps");

/* The latency-aware cgroups (LAGS), by id: the loader's to write (root's: -l), never a
 * delegatee's. A cgroup's opt-in covers its subtree. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, u64);
	__type(value, u32);
} lags_groups SEC(".maps");

struct task_ctx {
	u64 cgid; /* the task's cgroup (cpu controller) */
	u64 charged; /* sum_exec_runtime charged so far */
	u64 charged_at; /* when, bpf_ktime_get_ns() */
	u64 ran_from; /* sum_exec_runtime when it last started running (vtime) */
	u32 depth; /* levels in path */
	u64 path[MAX_LEVELS]; /* the ids of its cgroup's ancestors (and its own) from level 1 */
};

/* What each CPU runs, for LAGS' wakeup preemption (racy reads from other CPUs: a stale one
 * costs one wrong or missed kick) */
struct cpu_ctx {
	u64 started; /* when the current run began; 0: idle */
	u32 depth; /* its task's cgroup depth (0: a task of the root) */
	u64 path[MAX_LEVELS]; /* and its path, as task_ctx's */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1024);
	__type(key, u32);
	__type(value, struct cpu_ctx);
} cpu_ctxs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_ctx);
} task_ctxs SEC(".maps");

static __always_inline s64 min_s64(s64 a, s64 b)
{
	return a < b ? a : b;
}

#define MAX_ROLLS 8 /* boundaries one charge splits at; more are skipped whole */
#define LATE_TICK_NS 10000000ULL /* a tick at HZ=100: the most a charge comes after its run */

/*
 * The boundary at a->end has passed: count the closed period and refill (lock held). The
 * quota plus what the period left, at most the burst; an overrun carries as debt, at most one
 * quota (a debt of many quotas, the overrun of many CPUs' ticks against a small quota, would
 * hold the group's tasks past the sched_ext watchdog). What the period left and did not carry
 * is kept for charges of its runs that come after this refill (closed_left), up to what late
 * ticks on every CPU can bring.
 */
static __always_inline void roll_one(struct account *a)
{
	s64 carry = min_s64(a->runtime, (s64)a->burst_ns);
	s64 cap = (s64)(nr_cpus * LATE_TICK_NS);

	if (carry < -(s64)a->quota_ns)
		carry = -(s64)a->quota_ns;
	if (a->used || a->throttled)
		a->nr_periods++;
	if (a->used > a->quota_ns) {
		a->nr_bursts++;
		a->burst_time_ns += a->used - a->quota_ns;
	}
	if (a->runtime > carry)
		a->closed_left += a->runtime - carry;
	if (a->closed_left > cap)
		a->closed_left = cap;
	a->runtime = (s64)a->quota_ns + carry;
	a->used = 0;
	a->counted = 0;
	a->start = a->end;
	a->end += a->period_ns;
	if (a->throttled && a->runtime > 0) {
		a->throttled = 0;
		if (a->start > a->throttled_at)
			a->throttled_ns += a->start - a->throttled_at;
	} else if (a->throttled) {
		/* still in debt: this period is throttled from its start */
		a->counted = 1;
		a->nr_throttled++;
	}
}

/* After MAX_ROLLS boundaries in one charge: the periods between were idle, skipped whole. */
static __always_inline void skip_idle(struct account *a, u64 now)
{
	u64 skip;

	if (now < a->end)
		return;
	roll_one(a); /* an idle period: the account is full after it */
	if (now < a->end)
		return;
	skip = (now - a->end) / a->period_ns + 1;
	a->end += skip * a->period_ns;
	a->start = a->end - a->period_ns;
	a->closed_left = 0;
}

/*
 * A throttle this close to the period's end is not worth it: the tasks would be parked until
 * the boundary, less than this plus the timer's lateness, and the group runs on and pays the
 * overrun (at most this per CPU) as debt. It is what a group at demand == quota meets: its
 * runtime reaches zero at the very end of a period, after a period that ended a little over
 * (the 10 ms table2 row under the scheduler, 2026-11-28: one throttle in 608 periods, 860 us
 * long). 1 ms, at most a tenth of the period.
 */
#define END_GRACE_NS 1000000ULL

static __always_inline void debit(struct account *a, u64 ns, u64 now)
{
	u64 grace = a->period_ns / 10 < END_GRACE_NS ? a->period_ns / 10 : END_GRACE_NS;

	a->runtime -= (s64)ns;
	a->used += ns;
	a->usage_ns += ns;
	if (a->runtime <= 0 && !a->throttled && now + grace < a->end) {
		a->throttled = 1;
		a->throttled_at = now;
		if (!a->counted) {
			a->counted = 1;
			a->nr_throttled++;
		}
	}
}

/*
 * Charge `delta` ns of CPU time, run over [from, now] (the task on its CPU all along), to an
 * account: its LAGS load, and where it has a quota its runtime; whether it is throttled
 * after. The run is cut at every boundary in it: each part is charged to the period it ran in.
 */
static bool charge_account(struct account *a, u64 delta, u64 from, u64 now)
{
	bool throttled;
	int i;

	bpf_spin_lock(&a->lock);
	if (lags_enabled) {
		a->load_ns = lags_decayed(a->load_ns, a->load_at, now) + delta;
		a->load_at = now;
	}
	if (a->quota_ns == NO_LIMIT || !a->period_ns) {
		bpf_spin_unlock(&a->lock);
		return false;
	}
	/* boundaries the timer has not reached: the part before each is that period's, and
	 * the period ran to its end unstopped: no throttle is counted at its close */
	for (i = 0; i < MAX_ROLLS; i++) {
		u64 after, before;

		if (now < a->end)
			break;
		after = now - a->end;
		before = delta > after ? delta - after : 0;
		a->runtime -= (s64)before;
		a->used += before;
		a->usage_ns += before;
		delta -= before;
		roll_one(a);
	}
	skip_idle(a, now);
	if (from < a->start) {
		/* began before the last boundary, charged after its refill: the part before it
		 * comes out of what the closed periods left; only the rest is debt */
		u64 after = now > a->start ? now - a->start : 0;
		u64 before = delta > after ? delta - after : 0;
		u64 take = before < (u64)a->closed_left ? before : (u64)a->closed_left;

		a->closed_left -= (s64)take;
		a->usage_ns += before;
		a->runtime -= (s64)(before - take);
		delta -= before;
	}
	debit(a, delta, now);
	throttled = a->throttled;
	bpf_spin_unlock(&a->lock);
	return throttled;
}

/*
 * The cgroup whose quota holds a task of `cgrp` back (the outermost throttled one with a
 * quota on its path from the root), or 0.
 */
/* The id of `cgrp`'s ancestor at `lvl` (its own at its level), or 0 past it. */
static u64 ancestor_id(struct cgroup *cgrp, u32 lvl)
{
	struct cgroup *anc;
	u64 id;

	if (lvl > cgrp->level)
		return 0;
	anc = bpf_cgroup_ancestor(cgrp, lvl);
	if (!anc)
		return 0;
	id = anc->kn->id;
	bpf_cgroup_release(anc);
	return id;
}

static u64 throttled_on_path(struct cgroup *cgrp)
{
	u32 lvl;

	bpf_for(lvl, 1, MAX_LEVELS) {
		u64 id = ancestor_id(cgrp, lvl);
		struct account *a;

		if (!id)
			break;
		a = bpf_map_lookup_elem(&accounts, &id);
		if (a && READ_ONCE(a->throttled))
			return id;
	}
	return 0;
}

static u64 throttled_for_task(struct task_struct *p)
{
	struct cgroup *cgrp = scx_bpf_task_cgroup(p);
	u64 id;

	if (!cgrp)
		return 0;
	id = throttled_on_path(cgrp);
	bpf_cgroup_release(cgrp);
	return id;
}

static u64 throttled_for_cgid(u64 cgid)
{
	struct cgroup *cgrp = bpf_cgroup_from_id(cgid);
	u64 id;

	if (!cgrp)
		return 0;
	id = throttled_on_path(cgrp);
	bpf_cgroup_release(cgrp);
	return id;
}

/* Charge what p ran since it was last charged; whether a quota on its path is exhausted. */
static bool charge(struct task_struct *p, struct task_ctx *tctx)
{
	u64 now = bpf_ktime_get_ns();
	u64 sum = p->se.sum_exec_runtime;
	u64 delta = sum > tctx->charged ? sum - tctx->charged : 0;
	u64 from = tctx->charged_at;
	struct cgroup *cgrp;
	bool throttled = false;
	u32 lvl;

	tctx->charged = sum;
	tctx->charged_at = now;
	if (!delta)
		return false;
	cgrp = scx_bpf_task_cgroup(p);
	if (!cgrp)
		return false;
	bpf_for(lvl, 1, MAX_LEVELS) {
		u64 id = ancestor_id(cgrp, lvl);
		struct account *a;

		if (!id)
			break;
		a = bpf_map_lookup_elem(&accounts, &id);
		if (a && charge_account(a, delta, from, now))
			throttled = true;
	}
	bpf_cgroup_release(cgrp);
	return throttled;
}

/* The task's cgroup and the ids of its ancestors, for LAGS' comparisons. */
static void set_path(struct task_ctx *tctx, struct cgroup *cgrp)
{
	u32 lvl;

	tctx->cgid = cgrp->kn->id;
	tctx->depth = 0;
	bpf_for(lvl, 1, MAX_LEVELS) {
		u64 id = ancestor_id(cgrp, lvl);

		if (!id)
			break;
		tctx->path[lvl - 1] = id;
		tctx->depth = lvl;
	}
}

/* Whether a latency-aware cgroup holds the task (itself or an ancestor opted in). */
static bool is_la(struct task_ctx *tctx)
{
	u32 i;

	bpf_for(i, 0, MAX_LEVELS) {
		if (i >= tctx->depth || i >= MAX_LEVELS)
			break;
		if (bpf_map_lookup_elem(&lags_groups, &tctx->path[i]))
			return true;
	}
	return false;
}

/* A cgroup's LAGS load now (read without its lock: a torn pair misweighs one pick). */
static u64 load_of(u64 cgid, u64 now)
{
	struct account *a = bpf_map_lookup_elem(&accounts, &cgid);

	return a ? lags_decayed(READ_ONCE(a->load_ns), READ_ONCE(a->load_at), now) : 0;
}

/*
 * A dispatch's LAGS pick so far, per CPU: what the walk of the shared queue carries from one
 * task to the next lives here, not on the stack, so that the verifier sees every iteration
 * alike (counters and a pointer on the stack made it walk each of 64 iterations apart: too
 * large).
 */
struct pick {
	u64 front; /* the vtime of the first task that may run here */
	s32 best; /* the pid of the task picked so far; 0: none */
	u32 seen; /* tasks looked at within the window */
	u32 scanned; /* tasks looked at */
	u32 ahead; /* the pick is not the front: LAGS moved a task ahead */
	u32 best_depth;
	u64 best_path[MAX_LEVELS];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct pick);
} picks SEC(".maps");

/*
 * Whether a task's group is lighter than the pick's, compared where their paths part: the
 * loads of the common ancestor's two children, each the whole subtree's. So load spread over
 * many groups, or many tasks, weighs as much as in one; and CPU time, not weight, is the
 * measure (renice buys nothing). Not lighter where one path holds the other.
 */
static bool lighter(struct task_ctx *a, struct pick *pk, u64 now)
{
	u32 i;

	bpf_for(i, 0, MAX_LEVELS) {
		if (i >= a->depth || i >= pk->best_depth || i >= MAX_LEVELS)
			break;
		if (a->path[i] == pk->best_path[i])
			continue;
		return load_of(a->path[i], now) < load_of(pk->best_path[i], now);
	}
	return false;
}

/*
 * Whether the run on a CPU is of a group LAGS_MARGIN times heavier than the waking task's,
 * compared where their paths part, as lighter() does (0 against 0 is not heavier). Never where
 * one path holds the other: the root's own tasks (depth 0) and the waker's own group or its
 * ancestors are not preempted for it.
 */
static bool much_heavier(struct task_ctx *a, struct cpu_ctx *c, u64 now)
{
	u32 depth = READ_ONCE(c->depth), i;

	bpf_for(i, 0, MAX_LEVELS) {
		u64 theirs;

		if (i >= a->depth || i >= depth || i >= MAX_LEVELS)
			break;
		theirs = READ_ONCE(c->path[i]);
		if (theirs == a->path[i])
			continue;
		return load_of(theirs, now) > LAGS_MARGIN * load_of(a->path[i], now);
	}
	return false;
}

/*
 * A latency-aware task waits and no CPU is idle: preempt one that runs a task of a group
 * LAGS_MARGIN times heavier where their paths part (much_heavier()), once that run has had
 * LAGS_MIN_RUN_NS (the hysteresis: no ping-pong between groups of about the same load, no run
 * cut to nothing). (Until 2026-11-29 the top-level groups were compared: functions under one
 * case group never preempted each other, the colocation table of docs/scx.md.)
 */
static void lags_preempt(struct task_struct *p, struct task_ctx *tctx)
{
	u64 now = bpf_ktime_get_ns();
	u32 cpu;

	bpf_for(cpu, 0, nr_cpus) {
		struct cpu_ctx *c = bpf_map_lookup_elem(&cpu_ctxs, &cpu);
		u64 started;

		if (!c || !bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
			continue;
		started = READ_ONCE(c->started);
		/* signed: another CPU may have written `started` after `now` was read */
		if (!started || (s64)(now - started) < (s64)LAGS_MIN_RUN_NS)
			continue;
		if (!much_heavier(tctx, c, now))
			continue;
		/* claim the run: wakeups that come before that CPU reschedules pick other CPUs */
		if (__sync_val_compare_and_swap(&c->started, started, 0) != started)
			continue;
		scx_bpf_kick_cpu(cpu, SCX_KICK_PREEMPT);
		__sync_fetch_and_add(&nr_lags_kicks, 1);
		return;
	}
}

static void kick_idle_cpus(void)
{
	s32 cpu;

	bpf_for(cpu, 0, nr_cpus)
		scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
}

static u64 pinned_dsq(s32 cpu)
{
	return PINNED_DSQ_BASE | (u64)cpu;
}

/* Where a runnable task that is not throttled waits: its CPU's own queue if it may run there
 * only, else the shared one. */
static u64 queue_of(struct task_struct *p)
{
	return p->nr_cpus_allowed == 1 ? pinned_dsq(scx_bpf_task_cpu(p)) : SHARED_DSQ;
}

/* Parked tasks of `cgid` back to their queues (from a context without an rq lock). */
static void release_parked(u64 cgid)
{
	struct task_struct *p;

	if (scx_bpf_dsq_nr_queued(cgid) <= 0)
		return;
	bpf_for_each(scx_dsq, p, cgid, 0)
		scx_bpf_dsq_move_vtime(BPF_FOR_EACH_ITER, p, queue_of(p), 0);
	kick_idle_cpus();
}

static int period_timer_fn(void *map, u64 *key, struct account *a)
{
	u64 now = bpf_ktime_get_ns();
	bool limited, throttled;
	long err;
	u64 next;
	int i;

	bpf_spin_lock(&a->lock);
	limited = a->quota_ns != NO_LIMIT && a->period_ns;
	for (i = 0; limited && i < MAX_ROLLS && now >= a->end; i++)
		roll_one(a);
	if (limited)
		skip_idle(a, now);
	throttled = limited && a->throttled;
	next = a->end;
	bpf_spin_unlock(&a->lock);
	/* also without a limit (its last expiry): a task an enqueue parked while the limit was
	 * being removed comes back */
	if (!throttled)
		release_parked(*key);
	if (!limited)
		return 0;
	err = bpf_timer_start(&a->timer, next, BPF_F_TIMER_ABS);
	/* -EINVAL, -ENOENT: the account is being freed (its cgroup removed): nothing to re-arm */
	if (err && err != -EINVAL && err != -ENOENT)
		scx_bpf_error("cannot re-arm the period timer of cgroup %llu (%ld)", *key, err);
	return 0;
}

/* A quota (or none) set on an account: a fresh grid from now (lock not held). */
static void set_limit(struct account *a, u64 period_us, u64 quota_us, u64 burst_us)
{
	u64 now = bpf_ktime_get_ns();
	bool limited = quota_us != NO_LIMIT && period_us;

	bpf_spin_lock(&a->lock);
	if (a->throttled && now > a->throttled_at)
		a->throttled_ns += now - a->throttled_at;
	a->throttled = 0;
	a->counted = 0;
	a->period_ns = period_us * 1000;
	a->quota_ns = limited ? quota_us * 1000 : NO_LIMIT;
	a->burst_ns = burst_us * 1000;
	a->runtime = limited ? (s64)a->quota_ns : 0;
	a->closed_left = 0;
	a->used = 0;
	a->start = now;
	a->end = now + (a->period_ns ? a->period_ns : 100000000ULL);
	bpf_spin_unlock(&a->lock);
	/* Without a limit the timer fires once more and does not re-arm: a task an enqueue parked
	 * while the limit was being removed is released then (a cancel would also drop the timer's
	 * callback, bpf_timer_cancel, and no start would work again). A timer that does not start
	 * would strand parked tasks: the scheduler exits instead (every task back to CFS). */
	if (bpf_timer_start(&a->timer, a->end, BPF_F_TIMER_ABS))
		scx_bpf_error("cannot start the period timer of cgroup %llu", a->cgid);
}

s32 BPF_STRUCT_OPS(bwlab_select_cpu, struct task_struct *p, s32 prev_cpu, u64 wake_flags)
{
	bool is_idle = false;
	s32 cpu;

	cpu = scx_bpf_select_cpu_dfl(p, prev_cpu, wake_flags, &is_idle);
	if (is_idle && !throttled_for_task(p))
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, slice_ns, 0);
	return cpu;
}

void BPF_STRUCT_OPS(bwlab_enqueue, struct task_struct *p, u64 enq_flags)
{
	u64 vtime = p->scx.dsq_vtime;
	u64 park = 0;
	s32 cpu;

	/* an exiting task is never held: it frees what it holds */
	if (!(p->flags & PF_EXITING))
		park = throttled_for_task(p);
	if (park) {
		scx_bpf_dsq_insert(p, park, slice_ns, enq_flags);
		return;
	}
	/* the last runnable task of its CPU (SCX_OPS_ENQ_LAST), not throttled: it runs on; in the
	 * shared queue its CPU would go idle until something kicked it */
	if (enq_flags & SCX_ENQ_LAST) {
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, slice_ns, enq_flags);
		return;
	}
	if (time_before(vtime, vtime_now - slice_ns))
		vtime = vtime_now - slice_ns;
	/* a task that can run on one CPU only waits in that CPU's queue, in vtime order with
	 * the shared queue (bwlab_dispatch) */
	if (p->nr_cpus_allowed == 1) {
		cpu = scx_bpf_task_cpu(p);
		scx_bpf_dsq_insert_vtime(p, pinned_dsq(cpu), slice_ns, vtime, enq_flags);
		scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
		return;
	}
	scx_bpf_dsq_insert_vtime(p, SHARED_DSQ, slice_ns, vtime, enq_flags);
	/* an idle CPU that may run it takes it now, not at its next wakeup */
	cpu = scx_bpf_pick_idle_cpu(p->cpus_ptr, 0);
	if (cpu >= 0) {
		scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
	} else if (lags_enabled && (enq_flags & SCX_ENQ_WAKEUP)) {
		struct task_ctx *tctx = bpf_task_storage_get(&task_ctxs, p, 0, 0);

		if (tctx && is_la(tctx))
			lags_preempt(p, tctx);
	}
}

/*
 * Move the task `pid` (picked by an earlier walk) from the shared queue to this CPU's, if it is
 * still there and may still run here (it may have left and come back with other CPUs since:
 * moving it here then would be an error that ejects the scheduler).
 */
static bool take(s32 cpu, s32 pid)
{
	struct task_struct *p;
	u32 scanned = 0;

	bpf_for_each(scx_dsq, p, SHARED_DSQ, 0) {
		if (p->pid == pid)
			return bpf_cpumask_test_cpu(cpu, p->cpus_ptr) &&
			       scx_bpf_dsq_move(BPF_FOR_EACH_ITER, p, SCX_DSQ_LOCAL, 0);
		if (++scanned >= MAX_SCAN)
			break;
	}
	return false;
}

/*
 * A task met on a walk of a queue: to the queue of the throttled cgroup that holds it back, if
 * one does (an exiting task never: it frees what it holds). Whether one did.
 */
static __always_inline bool park_if_throttled(struct bpf_iter_scx_dsq *it, struct task_struct *p,
					      struct task_ctx *tctx)
{
	u64 park = tctx && !(p->flags & PF_EXITING) ? throttled_for_cgid(tctx->cgid) : 0;

	if (!park)
		return false;
	scx_bpf_dsq_move(it, p, park, 0);
	return true;
}

/* The first task of this CPU's pinned queue to the CPU's local queue: whatever heads it now,
 * which after dispatch's walk may be a newer task or one whose group was throttled since (it
 * runs until its next tick stops it). */
static bool take_pinned(u64 dsq)
{
	struct task_struct *p;

	bpf_for_each(scx_dsq, p, dsq, 0)
		return scx_bpf_dsq_move(BPF_FOR_EACH_ITER, p, SCX_DSQ_LOCAL, 0);
	return false;
}

void BPF_STRUCT_OPS(bwlab_dispatch, s32 cpu, struct task_struct *prev)
{
	u64 now = bpf_ktime_get_ns(), mine = pinned_dsq(cpu), pinned_vtime = 0;
	bool parked = false, pinned = false;
	struct task_struct *p;
	struct pick *pk;
	u32 zero = 0;

	pk = bpf_map_lookup_elem(&picks, &zero);
	if (!pk)
		return;
	pk->best = 0;
	pk->seen = 0;
	pk->scanned = 0;
	pk->ahead = 0;

	/* this CPU's pinned tasks: those of throttled cgroups are parked, one whose affinity
	 * grew since goes to the shared queue; the first left competes with the shared queue's
	 * front by vtime */
	bpf_for_each(scx_dsq, p, mine, 0) {
		if (park_if_throttled(BPF_FOR_EACH_ITER, p, bpf_task_storage_get(&task_ctxs, p, 0, 0))) {
			parked = true;
			continue;
		}
		if (p->nr_cpus_allowed != 1) {
			scx_bpf_dsq_move_vtime(BPF_FOR_EACH_ITER, p, SHARED_DSQ, 0);
			continue;
		}
		pinned = true;
		pinned_vtime = p->scx.dsq_vtime;
		break;
	}

	/* the first task of the shared queue that may run here; tasks of throttled cgroups met
	 * on the way are parked. With LAGS: of the first LAGS_WINDOW tasks within a slice of the
	 * front's vtime, a latency-aware one whose group is lighter than the pick's so far
	 * (lighter()) takes its place; vtime order otherwise. A task runs ahead of its vtime by at
	 * most a slice, so plain groups keep their weight's share. */
	bpf_for_each(scx_dsq, p, SHARED_DSQ, 0) {
		struct task_ctx *tctx = bpf_task_storage_get(&task_ctxs, p, 0, 0);
		bool la;

		/* not counted: a throttled group's many tasks must not hide the others */
		if (park_if_throttled(BPF_FOR_EACH_ITER, p, tctx)) {
			parked = true;
			continue;
		}
		if (!lags_enabled) {
			if (bpf_cpumask_test_cpu(cpu, p->cpus_ptr)) {
				if (pinned && !time_before(p->scx.dsq_vtime, pinned_vtime))
					break;
				if (scx_bpf_dsq_move(BPF_FOR_EACH_ITER, p, SCX_DSQ_LOCAL, 0))
					return;
			}
		} else if (bpf_cpumask_test_cpu(cpu, p->cpus_ptr)) {
			if (!pk->seen)
				pk->front = p->scx.dsq_vtime;
			else if (time_after(p->scx.dsq_vtime, pk->front + slice_ns))
				break;
			la = tctx && is_la(tctx);
			if (!pk->seen || (la && tctx && lighter(tctx, pk, now))) {
				pk->ahead = pk->seen > 0;
				pk->best = p->pid;
				pk->best_depth = 0;
				if (tctx) {
					pk->best_depth = tctx->depth;
					__builtin_memcpy(pk->best_path, tctx->path, sizeof(pk->best_path));
				}
			}
			if (++pk->seen >= LAGS_WINDOW)
				break;
		}
		if (++pk->scanned >= MAX_SCAN)
			break;
	}
	/* a pinned task not after the shared queue's front runs first, as in the walk without
	 * LAGS (LAGS orders the shared queue only) */
	if (pinned && (!pk->seen || !time_after(pinned_vtime, pk->front)) && take_pinned(mine))
		return;
	if (pk->seen && take(cpu, pk->best)) {
		if (pk->ahead)
			__sync_fetch_and_add(&nr_lags_picks, 1);
		return;
	}
	/* nothing moved here, and the kernel retries a dispatch only after one that did: look
	 * again (the tasks this one parked are out of the way; LAGS' pick was taken by another
	 * CPU) */
	if ((parked || pk->seen || pinned) &&
	    (scx_bpf_dsq_nr_queued(SHARED_DSQ) > 0 || scx_bpf_dsq_nr_queued(mine) > 0))
		scx_bpf_kick_cpu(cpu, 0);
}

void BPF_STRUCT_OPS(bwlab_running, struct task_struct *p)
{
	struct task_ctx *tctx = bpf_task_storage_get(&task_ctxs, p, 0, 0);

	if (tctx) {
		tctx->charged = p->se.sum_exec_runtime;
		tctx->charged_at = bpf_ktime_get_ns();
		tctx->ran_from = tctx->charged;
	}
	/* racy across CPUs, as scx_simple's: an error is small and passes */
	if (time_before(vtime_now, p->scx.dsq_vtime))
		vtime_now = p->scx.dsq_vtime;
	if (lags_enabled) {
		u32 cpu = scx_bpf_task_cpu(p);
		struct cpu_ctx *c = bpf_map_lookup_elem(&cpu_ctxs, &cpu);

		if (c) {
			c->depth = tctx ? tctx->depth : 0;
			if (tctx)
				__builtin_memcpy(c->path, tctx->path, sizeof(c->path));
			c->started = bpf_ktime_get_ns();
		}
	}
}

void BPF_STRUCT_OPS(bwlab_tick, struct task_struct *p)
{
	struct task_ctx *tctx = bpf_task_storage_get(&task_ctxs, p, 0, 0);

	if (tctx && charge(p, tctx) && !(p->flags & PF_EXITING))
		scx_bpf_task_set_slice(p, 0); /* throttled: off the CPU, parked at enqueue */
}

void BPF_STRUCT_OPS(bwlab_stopping, struct task_struct *p, bool runnable)
{
	struct task_ctx *tctx = bpf_task_storage_get(&task_ctxs, p, 0, 0);
	u64 ran;

	if (lags_enabled) {
		u32 cpu = scx_bpf_task_cpu(p);
		struct cpu_ctx *c = bpf_map_lookup_elem(&cpu_ctxs, &cpu);

		if (c)
			c->started = 0;
	}
	if (!tctx)
		return;
	charge(p, tctx);
	ran = p->se.sum_exec_runtime - tctx->ran_from;
	scx_bpf_task_set_dsq_vtime(p, p->scx.dsq_vtime + scale_by_task_weight_inverse(p, ran));
}

void BPF_STRUCT_OPS(bwlab_enable, struct task_struct *p)
{
	scx_bpf_task_set_dsq_vtime(p, vtime_now);
}

s32 BPF_STRUCT_OPS(bwlab_init_task, struct task_struct *p, struct scx_init_task_args *args)
{
	struct task_ctx *tctx;
	struct cgroup *cgrp;

	tctx = bpf_task_storage_get(&task_ctxs, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!tctx)
		return -ENOMEM;
	/* args->cgroup is not a trusted pointer (bpf_cgroup_ancestor() refuses it): by its id */
	cgrp = args->cgroup ? bpf_cgroup_from_id(args->cgroup->kn->id) : NULL;
	if (cgrp) {
		set_path(tctx, cgrp);
		bpf_cgroup_release(cgrp);
	}
	tctx->charged = p->se.sum_exec_runtime;
	tctx->charged_at = bpf_ktime_get_ns();
	tctx->ran_from = tctx->charged;
	return 0;
}

void BPF_STRUCT_OPS(bwlab_cgroup_move, struct task_struct *p, struct cgroup *from, struct cgroup *to)
{
	struct task_ctx *tctx = bpf_task_storage_get(&task_ctxs, p, 0, 0);

	if (tctx)
		set_path(tctx, to);
}

s32 BPF_STRUCT_OPS_SLEEPABLE(bwlab_cgroup_init, struct cgroup *cgrp, struct scx_cgroup_init_args *args)
{
	struct account init = {}, *a;
	u64 cgid = cgrp->kn->id;
	s32 ret;

	ret = scx_bpf_create_dsq(cgid, -1); /* where its tasks wait while it is throttled */
	if (ret) {
		scx_bpf_error("cannot create the DSQ of cgroup %llu (%d)", cgid, ret);
		return ret;
	}
	init.cgid = cgid;
	init.quota_ns = NO_LIMIT;
	ret = bpf_map_update_elem(&accounts, &cgid, &init, BPF_NOEXIST);
	if (ret)
		goto err;
	a = bpf_map_lookup_elem(&accounts, &cgid);
	if (!a) {
		ret = -ENOENT;
		goto err;
	}
	ret = bpf_timer_init(&a->timer, &accounts, CLOCK_MONOTONIC);
	if (ret)
		goto err_del;
	ret = bpf_timer_set_callback(&a->timer, period_timer_fn);
	if (ret)
		goto err_del;
	if (bpf_core_field_exists(args->bw_quota_us))
		set_limit(a, args->bw_period_us, args->bw_quota_us, args->bw_burst_us);
	return 0;
err_del:
	bpf_map_delete_elem(&accounts, &cgid);
err:
	scx_bpf_destroy_dsq(cgid);
	return ret;
}

void BPF_STRUCT_OPS(bwlab_cgroup_exit, struct cgroup *cgrp)
{
	u64 cgid = cgrp->kn->id;

	bpf_map_delete_elem(&accounts, &cgid); /* cancels its timer */
	scx_bpf_destroy_dsq(cgid);
}

void BPF_STRUCT_OPS(bwlab_cgroup_set_bandwidth, struct cgroup *cgrp, u64 period_us, u64 quota_us, u64 burst_us)
{
	u64 cgid = cgrp->kn->id;
	struct account *a = bpf_map_lookup_elem(&accounts, &cgid);

	if (!a)
		return;
	set_limit(a, period_us, quota_us, burst_us);
	release_parked(cgid); /* a fresh period, or no limit: nothing waits */
}

s32 BPF_STRUCT_OPS_SLEEPABLE(bwlab_init)
{
	s32 ret = scx_bpf_create_dsq(SHARED_DSQ, -1);
	u32 cpu;

	if (ret) {
		scx_bpf_error("cannot create the shared DSQ (%d)", ret);
		return ret;
	}
	bpf_for(cpu, 0, nr_cpus) {
		ret = scx_bpf_create_dsq(pinned_dsq(cpu), -1);
		if (ret) {
			scx_bpf_error("cannot create the pinned DSQ of CPU %u (%d)", cpu, ret);
			return ret;
		}
	}
	return 0;
}

/*
 * CPU hotplug. Without these ops the kernel ejects the scheduler at every CPU going on or
 * offline (SCX_ECODE_RSN_HOTPLUG). Nothing here is per CPU that a hotplug leaves wrong: a
 * dying CPU's tasks, in any queue (its pinned one included, which nothing refills once the
 * CPU is offline: ops.enqueue is skipped then), are moved to its local queue by the kernel
 * (rq_offline_scx(); without it they would be stranded there) and come back through
 * ops.enqueue on another CPU (a running one charged at ops.stopping first); a task that loses
 * its other CPUs (cpuset v2) waits in the pinned queue of the CPU it has left; the period
 * timers are hrtimers the kernel migrates, and `picks` is scratch of one dispatch. Counted
 * only.
 */
u64 nr_cpu_online, nr_cpu_offline;

void BPF_STRUCT_OPS(bwlab_cpu_online, s32 cpu)
{
	__sync_fetch_and_add(&nr_cpu_online, 1);
}

void BPF_STRUCT_OPS(bwlab_cpu_offline, s32 cpu)
{
	__sync_fetch_and_add(&nr_cpu_offline, 1);
}

void BPF_STRUCT_OPS(bwlab_exit, struct scx_exit_info *ei)
{
	UEI_RECORD(uei, ei);
}

SCX_OPS_DEFINE(bwlab_ops,
	       .select_cpu = (void *)bwlab_select_cpu,
	       .enqueue = (void *)bwlab_enqueue,
	       .dispatch = (void *)bwlab_dispatch,
	       .running = (void *)bwlab_running,
	       .tick = (void *)bwlab_tick,
	       .stopping = (void *)bwlab_stopping,
	       .enable = (void *)bwlab_enable,
	       .init_task = (void *)bwlab_init_task,
	       .cgroup_init = (void *)bwlab_cgroup_init,
	       .cgroup_exit = (void *)bwlab_cgroup_exit,
	       .cgroup_move = (void *)bwlab_cgroup_move,
	       .cgroup_set_bandwidth = (void *)bwlab_cgroup_set_bandwidth,
	       .cpu_online = (void *)bwlab_cpu_online,
	       .cpu_offline = (void *)bwlab_cpu_offline,
	       .init = (void *)bwlab_init,
	       .exit = (void *)bwlab_exit,
	       /* prev with nothing else to run comes back through enqueue (else the kernel
		* refills its slice, throttled or not); exiting tasks too */
	       .flags = SCX_OPS_ENQ_LAST | SCX_OPS_ENQ_EXITING,
	       .name = "bwlab");
