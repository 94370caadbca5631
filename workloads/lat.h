/* SPDX-License-Identifier: MIT */
/*
 * lat.h - what the latency workloads (wakelat, funcs) share: clocks, a CPU burn measured in
 * the thread's own CPU time, nearest-rank percentiles and their JSON, argument parsing.
 * Header-only: each workload is one static binary built from one .c file.
 */
#ifndef BWLAB_LAT_H
#define BWLAB_LAT_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static const double LAT_PCTS[] = { 50, 75, 90, 95, 99, 99.5, 99.9 };
#define LAT_NPCTS (sizeof(LAT_PCTS) / sizeof(LAT_PCTS[0]))

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

#endif /* BWLAB_LAT_H */
