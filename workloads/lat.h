/* SPDX-License-Identifier: MIT */
/*
 * lat.h - what the workloads (wakelat, funcs, cglat, noise) share: clocks, a CPU burn measured
 * in the thread's own CPU time, nearest-rank percentiles and their JSON, argument parsing
 * (one value, or a table of integer options), making and joining child cgroups (funcs, picks),
 * the stop flag and deadline step of the tools that run until told to stop (cgwrite,
 * cgsample, picks), and EEVDF's custom slice (wakelat, cgsample).
 * Header-only: each workload is one static binary built from one .c file.
 */
#ifndef BWLAB_LAT_H
#define BWLAB_LAT_H

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static const double LAT_PCTS[] = { 50, 75, 90, 95, 99, 99.5, 99.9 };
#define LAT_NPCTS (sizeof(LAT_PCTS) / sizeof(LAT_PCTS[0]))

/* Set by SIGTERM and SIGINT once stop_on_signals() ran. The handler is installed without
 * SA_RESTART: a sleep returns EINTR and its loop sees the flag at once. */
static volatile sig_atomic_t lat_stop;

static inline void lat_on_stop_signal(int sig)
{
	(void)sig;
	lat_stop = 1;
}

static inline void stop_on_signals(void)
{
	struct sigaction sa = { .sa_handler = lat_on_stop_signal };

	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
}

/* Moves an absolute deadline `us` microseconds on (a schedule that a late wakeup does not
 * shift). */
/* EEVDF's custom slice: sched_attr.sched_runtime for SCHED_OTHER (Linux 6.12 and later), the
 * calling thread's nice kept. -1 (errno set) where the kernel has none, or for a thread of
 * another policy (batch, idle, real-time: left as it was run). */
struct sched_attr_v1 {
	uint32_t size, sched_policy;
	uint64_t sched_flags;
	int32_t sched_nice;
	uint32_t sched_priority;
	uint64_t sched_runtime, sched_deadline, sched_period;
};

static inline int set_fair_slice(long us)
{
	struct sched_attr_v1 attr = { .size = sizeof(attr), .sched_runtime = (uint64_t)us * 1000 };

	if (sched_getscheduler(0) != SCHED_OTHER) {
		errno = EINVAL;
		return -1;
	}
	errno = 0;
	attr.sched_nice = getpriority(PRIO_PROCESS, 0);
	if (errno)
		return -1;
	return (int)syscall(SYS_sched_setattr, 0, &attr, 0);
}

static inline void timespec_add_us(struct timespec *t, long us)
{
	t->tv_nsec += (us % 1000000) * 1000;
	t->tv_sec += us / 1000000 + t->tv_nsec / 1000000000;
	t->tv_nsec %= 1000000000;
}

static inline int64_t now_ns(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

/* Nearest rank: the smallest value with at least p % of the samples at or below it. */
static inline int64_t percentile(const int64_t *sorted, long n, double p)
{
	double x = p / 100.0 * (double)n;
	long rank = (long)x;

	if ((double)rank < x) /* ceil without libm */
		rank++;

	if (rank < 1)
		rank = 1;
	if (rank > n)
		rank = n;
	return sorted[rank - 1];
}

/* "name": {"n": N, "p50": ..., "p99_9": ..., "max": ...} of v (sorted here), divided by div. */
static inline void print_stats(const char *name, int64_t *v, long n, int div)
{
	qsort(v, (size_t)n, sizeof(*v), cmp64);
	printf("\"%s\": {\"n\": %ld", name, n);
	for (size_t i = 0; i < LAT_NPCTS && n > 0; i++) {
		char key[16];

		snprintf(key, sizeof(key), "p%g", LAT_PCTS[i]);
		for (char *c = key; *c; c++)
			if (*c == '.')
				*c = '_';
		printf(", \"%s\": %.3f", key, (double)percentile(v, n, LAT_PCTS[i]) / div);
	}
	if (n > 0)
		printf(", \"max\": %.3f", (double)v[n - 1] / div);
	printf("}");
}

/*
 * Burn `us` microseconds of this thread's CPU time (the same work on a fast host and under TCG).
 * The thread CPU clock is a system call, not vDSO: read it about every 100 us, not in a tight
 * loop, so that the burn is user time and the threads' system time stays the kernel's own.
 */
static inline void burn(long us)
{
	int64_t now = now_ns(CLOCK_THREAD_CPUTIME_ID), end = now + us * 1000, last;
	volatile uint64_t x = 1;
	long batch = 64;

	while (now < end) {
		for (long i = 0; i < batch; i++)
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		last = now;
		now = now_ns(CLOCK_THREAD_CPUTIME_ID);
		if (now - last < 100000 && batch < (1L << 24))
			batch *= 2;
	}
}

static inline long parse_long(const char *prog, const char *arg, const char *what, long min, long max)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(arg, &end, 10);
	if (errno || *end || end == arg || v < min || v > max) {
		fprintf(stderr, "%s: %s must be an integer in %ld..%ld, got '%s'\n", prog, what, min, max, arg);
		exit(2);
	}
	return v;
}

static inline double parse_double(const char *prog, const char *arg, const char *what, double min, double max)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(arg, &end);
	if (errno || *end || end == arg || !(v >= min && v <= max)) {
		fprintf(stderr, "%s: %s must be a number in %g..%g, got '%s'\n", prog, what, min, max, arg);
		exit(2);
	}
	return v;
}

/* An integer option: its letter, what it is (for errors), its range, where it goes. */
struct long_opt {
	char flag;
	const char *what;
	long min, max;
	long *value;
};

/*
 * Parse argv for programs whose options are all integers (plus -h): each bad value is a
 * one-line error and exit 2; an unknown option or a stray argument prints the usage, exit 2;
 * -h prints it, exit 0.
 */
static inline void parse_long_opts(int argc, char **argv, const char *prog, const struct long_opt *opts,
				   size_t nopts, void (*usage)(const char *))
{
	char spec[128];
	size_t len = 0;
	int opt;

	for (size_t i = 0; i < nopts && len + 3 < sizeof(spec); i++) {
		spec[len++] = opts[i].flag;
		spec[len++] = ':';
	}
	spec[len++] = 'h';
	spec[len] = '\0';
	while ((opt = getopt(argc, argv, spec)) != -1) {
		size_t i = 0;

		while (i < nopts && opts[i].flag != opt)
			i++;
		if (i == nopts) {
			usage(argv[0]);
			exit(opt == 'h' ? 0 : 2);
		}
		*opts[i].value = parse_long(prog, optarg, opts[i].what, opts[i].min, opts[i].max);
	}
	if (optind != argc) {
		usage(argv[0]);
		exit(2);
	}
}

/* A JSON array of up to `max` of v[0..n), evenly spread, each divided by div (%.1f). */
static inline void print_spread(const int64_t *v, long n, long max, double div)
{
	long k, m = n < max ? n : max;

	printf("[");
	for (k = 0; k < m; k++)
		printf("%s%.1f", k ? "," : "", (double)v[k * n / m] / div);
	printf("]");
}

/* Write `value` to dir/file in one write(); 0 or -1 (errno set). */
static inline int write_file(const char *dir, const char *file, const char *value)
{
	char path[4096];
	int fd, ok;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, file) >= sizeof(path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	fd = open(path, O_WRONLY);
	if (fd < 0)
		return -1;
	ok = write(fd, value, strlen(value)) == (ssize_t)strlen(value);
	close(fd);
	return ok ? 0 : -1;
}

static inline void die_errno(const char *prog, const char *what, const char *path)
{
	fprintf(stderr, "%s: %s %s: %s\n", prog, what, path, strerror(errno));
	exit(1);
}

/*
 * Before making child groups of `cgroup_dir` (cgroup v2 or the v1 cpu hierarchy): on v2 move
 * this process to cgroup_dir/ctl, so that cgroup_dir has no processes of its own, and enable
 * the cpu controller for its children.
 */
static inline void cg_leave_for_children(const char *prog, const char *cgroup_dir)
{
	char dir[4096], pid[32];

	snprintf(dir, sizeof(dir), "%s/cgroup.subtree_control", cgroup_dir);
	if (access(dir, F_OK) != 0)
		return; /* v1 */
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	snprintf(dir, sizeof(dir), "%s/ctl", cgroup_dir);
	if (mkdir(dir, 0755) && errno != EEXIST)
		die_errno(prog, "cannot create", dir);
	if (write_file(dir, "cgroup.procs", pid))
		die_errno(prog, "cannot join", dir);
	if (write_file(cgroup_dir, "cgroup.subtree_control", "+cpu"))
		die_errno(prog, "cannot enable the cpu controller in", cgroup_dir);
}

/* Make the child group `dir`; aware 0 or 1 writes its cpu.latency_awareness (-1: leave it). */
static inline void cg_make_child(const char *prog, const char *dir, int aware)
{
	if (mkdir(dir, 0755) && errno != EEXIST)
		die_errno(prog, "cannot create", dir);
	if (aware >= 0 && write_file(dir, "cpu.latency_awareness", aware ? "1" : "0") &&
	    (aware || errno != ENOENT)) /* 0 is every kernel's behaviour: accepted without the file */
		die_errno(prog, "cannot write cpu.latency_awareness in", dir);
}

#endif /* BWLAB_LAT_H */
