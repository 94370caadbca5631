// SPDX-License-Identifier: MIT
/*
 * cglat - sleep latency under CPU contention (after Uber's cgroup-lat).
 *
 * Starts N CPU burner threads and one thread that sleeps a fixed interval in a loop
 * and records how long each sleep really took. Run it inside a cgroup with a CPU
 * quota and the sleeps that land in a throttled period take until the next refill;
 * run it inside a cpuset of the same size and they do not.
 *
 * Output: one JSON object on stdout with the raw samples (elapsed microseconds per
 * sleep); a text histogram on stderr.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lat.h"

static atomic_int stop;
static volatile uint64_t sink;

static void usage(const char *prog)
{
	fprintf(stderr,
		"usage: %s [-b burners] [-s sleep_us] [-d duration_s]\n"
		"  -b  CPU burner threads (default 32)\n"
		"  -s  sleep interval in microseconds (default 10000)\n"
		"  -d  run time in seconds (default 10)\n",
		prog);
}

static void *burner(void *arg)
{
	uint64_t i = 0;

	(void)arg;
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		for (int k = 0; k < 4096; k++)
			i += (uint64_t)k * 2654435761u;
	}
	sink = i;
	return NULL;
}

static void histogram(const int64_t *sorted, size_t n)
{
	const int buckets = 9;
	int64_t lo, hi, width;
	size_t count[9] = { 0 };

	if (!n)
		return;
	lo = sorted[0];
	hi = sorted[n - 1];
	width = (hi - lo) / buckets + 1;
	for (size_t i = 0; i < n; i++)
		count[(sorted[i] - lo) / width]++;
	for (int b = 0; b < buckets; b++) {
		int64_t from = lo + (int64_t)b * width;

		fprintf(stderr, "%7.1fms-%7.1fms %6.2f%% %zu\n", (double)from / 1000.0,
			(double)(from + width) / 1000.0, 100.0 * (double)count[b] / (double)n, count[b]);
	}
}

int main(int argc, char **argv)
{
	long burners = 32, sleep_us = 10000, duration_s = 10;
	size_t cap, n = 0;
	int64_t *samples, deadline;
	pthread_t *tids;
	struct timespec req;
	const struct long_opt opts[] = {
		{ 'b', "-b (burners)", 0, 4096, &burners },
		{ 's', "-s (sleep interval, us)", 1, 10000000, &sleep_us },
		{ 'd', "-d (duration, s)", 1, 86400, &duration_s },
	};

	parse_long_opts(argc, argv, "cglat", opts, sizeof(opts) / sizeof(opts[0]), usage);

	cap = (size_t)(duration_s * 1000000 / sleep_us) + 16;
	samples = calloc(cap, sizeof(*samples));
	tids = calloc((size_t)burners + 1, sizeof(*tids));
	if (!samples || !tids) {
		fprintf(stderr, "cglat: out of memory\n");
		return 1;
	}
	for (long i = 0; i < burners; i++) {
		int err = pthread_create(&tids[i], NULL, burner, NULL);

		if (err) {
			fprintf(stderr, "cglat: pthread_create: %s\n", strerror(err));
			return 1;
		}
	}

	req.tv_sec = sleep_us / 1000000;
	req.tv_nsec = (sleep_us % 1000000) * 1000;
	deadline = now_ns(CLOCK_MONOTONIC) + (int64_t)duration_s * 1000000000;
	while (n < cap) {
		int64_t t0 = now_ns(CLOCK_MONOTONIC), t1;

		if (t0 >= deadline)
			break;
		while (clock_nanosleep(CLOCK_MONOTONIC, 0, &req, NULL) == EINTR)
			;
		t1 = now_ns(CLOCK_MONOTONIC);
		samples[n++] = (t1 - t0) / 1000;
	}
	atomic_store(&stop, 1);
	for (long i = 0; i < burners; i++)
		pthread_join(tids[i], NULL);

	printf("{\"workload\":\"cglat\",\"burners\":%ld,\"sleep_us\":%ld,\"duration_s\":%ld,"
	       "\"count\":%zu,\"samples_us\":[",
	       burners, sleep_us, duration_s, n);
	for (size_t i = 0; i < n; i++)
		printf("%s%lld", i ? "," : "", (long long)samples[i]);
	printf("]}\n"); /* percentiles are the reader's: bwlab computes them from the samples */
	qsort(samples, n, sizeof(*samples), cmp64);
	histogram(samples, n);
	free(samples);
	free(tids);
	return 0;
}
