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
};

#endif /* __SCX_BWLAB_H */
