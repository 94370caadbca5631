/* SPDX-License-Identifier: GPL-2.0 */
/* scx_bwlab: what the scheduler and its loader share. */
#ifndef __SCX_BWLAB_H
#define __SCX_BWLAB_H

#define NO_LIMIT ((__u64)~0ULL) /* RUNTIME_INF: cpu.max "max" */

/* A cgroup's bandwidth account (scx_bwlab.bpf.c says how it is kept), keyed by cgroup id. */
struct account {
	struct bpf_spin_lock lock;
	struct bpf_timer timer;
	__u64 cgid;
	__u64 period_ns;
	__u64 quota_ns; /* NO_LIMIT: none */
	__u64 burst_ns;
	__s64 runtime; /* left in the current period */
	__u64 start; /* the current period is [start, end) */
	__u64 end;
	__s64 closed_left; /* what the closed period left and did not carry */
	__u64 used; /* charged to the current period */
	__u64 throttled_at;
	__u32 throttled;
	__u32 counted; /* this period is in nr_throttled */
	/* counters, as cpu.stat names them */
	__u64 nr_periods;
	__u64 nr_throttled;
	__u64 throttled_ns;
	__u64 nr_bursts;
	__u64 burst_time_ns; /* run over the quota, on burst */
	__u64 usage_ns;
	/* LAGS: the CPU time of the cgroup and its descendants, decaying (lags_decayed) */
	__u64 load_ns;
	__u64 load_at; /* when load_ns was last brought up to date */
};

/*
 * LAGS' credit: CPU time that halves every LAGS_HALF_LIFE_MS (about 4 s of history weigh
 * three quarters of it), brought from `at` to `now`: whole half lives by shifts, the rest by
 * 2^-x ~ 1 - x/2 (within 6 %). In milliseconds of the fraction so that nothing overflows.
 */
#define LAGS_HALF_LIFE_MS 2000ULL

static inline __u64 lags_decayed(__u64 load, __u64 at, __u64 now)
{
	__u64 dt_ms = now > at ? (now - at) / 1000000ULL : 0;
	__u64 halves = dt_ms / LAGS_HALF_LIFE_MS;

	if (halves >= 64)
		return 0;
	load >>= halves;
	dt_ms -= halves * LAGS_HALF_LIFE_MS;
	return load - load / 2 / LAGS_HALF_LIFE_MS * dt_ms;
}

#endif /* __SCX_BWLAB_H */
