// SPDX-License-Identifier: MIT
/*
 * cgsample - a cgroup's CPU bandwidth counters, read on a fixed schedule until told to stop.
 *
 * The lab's `sample` side action: what bwlab's per-period detector (bwlab/periods.py) needs,
 * on any machine that runs the plan (a guest's busybox has no Python). Each tick reads
 * cpu.stat (v2: usage_usec, throttled_usec; v1: throttled_time in ns) and, on v1,
 * cpuacct.usage (ns), both kept open and read with pread, on an absolute CLOCK_MONOTONIC
 * schedule so that a late read does not shift the ones after it. Samples are kept in memory
 * and printed when SIGTERM or SIGINT arrives (printing as it goes would wake a reader on
 * every tick): a header line `cgsample INTERVAL_US`, then one line per sample,
 * `T_NS NR_PERIODS NR_THROTTLED THROTTLED_NS USAGE_NS NR_BURSTS` (T_NS on CLOCK_MONOTONIC).
 *
 * With a threads file (v2's cgroup.threads, v1's tasks) it also steps the group's threads as
 * doctor does (bwlab/threads.py's Stepper): at the first sample, at the first sample
 * after a period boundary (nr_periods moved) and every STEP_US, it reads each thread's
 * /proc/TID/schedstat (ns on a CPU, ns waiting for one; kept open, pread), the thread list
 * read again at every step until a second after its first thread, then every second. Each step is
 * a line after the samples, `s T_NS THROTTLED_NS LISTED_NS TID RUN_NS WAIT_NS LATE_NS ...` (T_NS:
 * its sample's; LISTED_NS: when the thread list was last read, at or before T_NS, so that a
 * thread first seen there was born after the read before; LATE_NS: how long after T_NS that
 * thread was read). Why each read is timed: the sampler is preempted among the group's threads
 * on their CPU, and a TCG guest's step of 17 threads took 6.3 ms of wall time; read as at T_NS,
 * a thread that ran until 4.5 ms after it showed nothing wanted in the step after, and its
 * period was called below quota.
 *
 * It runs with EEVDF's shortest slice where the kernel has custom slices (6.12 and later).
 *
 * usage: cgsample CPU_STAT USAGE_FILE|- INTERVAL_US [THREADS_FILE STEP_US]
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lat.h"

#define MAX_SAMPLES 2000000 /* 33 minutes at 1 ms */
#define MAX_THREADS 4096
#define FOLLOW_NS 1000000000LL /* the thread list read again */
#define SHORT_SLICE_US 100 /* the least EEVDF allows */

static int read_at(int fd, char *buf, size_t size);

struct sample {
	int64_t t_ns, nr_periods, nr_throttled, throttled_ns, usage_ns, nr_bursts;
};

/* One thread's reading at a step; a step is a run of them after its header. */
struct reading {
	int64_t tid, run_ns, wait_ns, late_ns;
};

struct steps {
	struct reading *r; /* per step: a header {-1, t_ns, throttled_ns, listed_ns}, then its threads */
	long n, cap;
	int tids[MAX_THREADS], fds[MAX_THREADS], nthreads;
};

static int push(struct steps *st, int64_t a, int64_t b, int64_t c, int64_t d)
{
	if (st->n == st->cap) {
		long cap = st->cap ? 2 * st->cap : 65536;
		struct reading *r = realloc(st->r, sizeof(*r) * cap);

		if (!r)
			return -1;
		st->r = r;
		st->cap = cap;
	}
	st->r[st->n++] = (struct reading){ a, b, c, d };
	return 0;
}

/* Read the thread list again (opened each time: v1 keeps a pidlist per open file, and a
 * pread of a kept one returned the list as it was when opened) and open the schedstat of
 * threads not yet known. */
static void follow(struct steps *st, const char *list)
{
	static char buf[65536];
	int fd = open(list, O_RDONLY | O_CLOEXEC);
	ssize_t len = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);

	if (fd >= 0)
		close(fd);
	if (len <= 0)
		return;
	buf[len] = '\0';
	for (char *p = buf; *p && st->nthreads < MAX_THREADS;) {
		char path[64];
		int tid = (int)strtol(p, &p, 10), known = 0;

		while (*p == '\n')
			p++;
		if (tid <= 0)
			break;
		for (int i = 0; i < st->nthreads && !known; i++)
			known = st->tids[i] == tid;
		if (known)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/schedstat", tid);
		st->fds[st->nthreads] = open(path, O_RDONLY | O_CLOEXEC);
		st->tids[st->nthreads++] = tid;
	}
}

/* One step: every live thread's run and wait; a thread whose file fails has exited. */
static int step(struct steps *st, int64_t t_ns, int64_t throttled_ns, int64_t listed_ns)
{
	if (push(st, -1, t_ns, throttled_ns, listed_ns))
		return -1;
	for (int i = 0; i < st->nthreads; i++) {
		char buf[128];
		long long run, wait;

		if (st->fds[i] < 0)
			continue;
		if (read_at(st->fds[i], buf, sizeof(buf)) || sscanf(buf, "%lld %lld", &run, &wait) != 2) {
			close(st->fds[i]);
			st->fds[i] = -1;
			continue;
		}
		if (push(st, st->tids[i], run, wait, now_ns(CLOCK_MONOTONIC) - t_ns))
			return -1;
	}
	return 0;
}

/* The value of `key` in cpu.stat's "key value" lines, or -1. */
static int64_t stat_value(const char *text, const char *key)
{
	size_t len = strlen(key);

	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (strncmp(p, key, len) == 0 && p[len] == ' ')
			return strtoll(p + len + 1, NULL, 10);
	return -1;
}

static int read_at(int fd, char *buf, size_t size)
{
	ssize_t n = pread(fd, buf, size - 1, 0);

	if (n < 0)
		return -1;
	buf[n] = '\0';
	return 0;
}

int main(int argc, char **argv)
{
	static struct steps st;
	struct sample *samples;
	struct timespec next;
	char stat[4096], usage[64];
	long interval_us, step_us = 0, n = 0;
	int stat_fd, usage_fd = -1;
	const char *list = NULL;
	int64_t last_step = -1, last_follow = 0, first_seen = -1;

	if (argc != 4 && argc != 6) {
		fprintf(stderr, "usage: cgsample CPU_STAT USAGE_FILE|- INTERVAL_US [THREADS_FILE STEP_US]\n");
		return 2;
	}
	interval_us = parse_long("cgsample", argv[3], "interval", 100, 10000000);
	if (argc == 6) {
		step_us = parse_long("cgsample", argv[5], "step", 100, 10000000);
		if (access(argv[4], R_OK)) {
			fprintf(stderr, "cgsample: %s: %s\n", argv[4], strerror(errno));
			return 1;
		}
		list = argv[4];
	}
	stat_fd = open(argv[1], O_RDONLY | O_CLOEXEC);
	if (stat_fd < 0) {
		fprintf(stderr, "cgsample: %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	if (strcmp(argv[2], "-") != 0) {
		usage_fd = open(argv[2], O_RDONLY | O_CLOEXEC);
		if (usage_fd < 0) {
			fprintf(stderr, "cgsample: %s: %s\n", argv[2], strerror(errno));
			return 1;
		}
	}
	samples = malloc(sizeof(*samples) * MAX_SAMPLES);
	if (!samples) {
		fprintf(stderr, "cgsample: out of memory\n");
		return 1;
	}
	stop_on_signals();
	/* the shortest fair slice (doctor's sampler.prompt, and why): woken while the group's
	 * threads hold every CPU, a sampler with the default slice waits up to a tick, and the
	 * boundary's reads and thread step come that late. An older kernel samples without. */
	set_fair_slice(SHORT_SLICE_US);
	clock_gettime(CLOCK_MONOTONIC, &next);
	while (!lat_stop && n < MAX_SAMPLES) {
		struct sample *s = &samples[n];
		struct timespec now;
		int64_t usage_us;

		clock_gettime(CLOCK_MONOTONIC, &now);
		if (read_at(stat_fd, stat, sizeof(stat)) || (usage_fd >= 0 && read_at(usage_fd, usage, sizeof(usage)))) {
			fprintf(stderr, "cgsample: read: %s (group removed?)\n", strerror(errno));
			break;
		}
		s->t_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
		s->nr_periods = stat_value(stat, "nr_periods");
		s->nr_throttled = stat_value(stat, "nr_throttled");
		s->nr_bursts = stat_value(stat, "nr_bursts");
		s->throttled_ns = stat_value(stat, "throttled_time");
		if (s->throttled_ns < 0) {
			int64_t us = stat_value(stat, "throttled_usec");

			s->throttled_ns = us < 0 ? -1 : us * 1000;
		}
		usage_us = stat_value(stat, "usage_usec");
		s->usage_ns = usage_fd >= 0 ? strtoll(usage, NULL, 10) : (usage_us < 0 ? -1 : usage_us * 1000);
		if (s->nr_periods < 0 || s->nr_throttled < 0 || s->throttled_ns < 0 || s->usage_ns < 0) {
			fprintf(stderr, "cgsample: %s has no bandwidth counters (nr_periods, nr_throttled, throttled time, "
				"usage)\n", argv[1]);
			return 1;
		}
		if (list) {
			/* like Stepper.feed: the first read, the first after a boundary, every step
			 * (half a read early rather than a read late) */
			int boundary = n > 0 && s->nr_periods != samples[n - 1].nr_periods;

			if (last_step < 0 || boundary || s->t_ns - last_step >= (step_us - interval_us / 2) * 1000) {
				/* every step until a second after the first thread appeared (the workload
				 * starts after the sampler and starts its threads then), every second after */
				if (!st.nthreads || s->t_ns - first_seen < FOLLOW_NS || s->t_ns - last_follow >= FOLLOW_NS) {
					follow(&st, list);
					last_follow = s->t_ns;
					if (st.nthreads && first_seen < 0)
						first_seen = s->t_ns;
				}
				if (step(&st, s->t_ns, s->throttled_ns, last_follow)) {
					fprintf(stderr, "cgsample: out of memory for the threads' steps\n");
					return 1;
				}
				last_step = s->t_ns;
			}
		}
		n++;
		timespec_add_us(&next, interval_us);
		while (!lat_stop && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR)
			;
	}
	printf("cgsample %ld\n", interval_us);
	for (long i = 0; i < n; i++) {
		const struct sample *s = &samples[i];

		printf("%lld %lld %lld %lld %lld %lld\n", (long long)s->t_ns, (long long)s->nr_periods,
		       (long long)s->nr_throttled, (long long)s->throttled_ns, (long long)s->usage_ns,
		       (long long)(s->nr_bursts < 0 ? 0 : s->nr_bursts));
	}
	for (long i = 0; i < st.n; i++) {
		const struct reading *r = &st.r[i];

		if (r->tid < 0)
			printf("%ss %lld %lld %lld", i ? "\n" : "", (long long)r->run_ns, (long long)r->wait_ns,
			       (long long)r->late_ns);
		else
			printf(" %lld %lld %lld %lld", (long long)r->tid, (long long)r->run_ns, (long long)r->wait_ns,
			       (long long)r->late_ns);
	}
	if (st.n)
		printf("\n");
	return 0;
}
