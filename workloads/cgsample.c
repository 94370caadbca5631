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
 * usage: cgsample CPU_STAT USAGE_FILE|- INTERVAL_US
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

struct sample {
	int64_t t_ns, nr_periods, nr_throttled, throttled_ns, usage_ns, nr_bursts;
};

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
	struct sample *samples;
	struct timespec next;
	char stat[4096], usage[64];
	long interval_us, n = 0;
	int stat_fd, usage_fd = -1;

	if (argc != 4) {
		fprintf(stderr, "usage: cgsample CPU_STAT USAGE_FILE|- INTERVAL_US\n");
		return 2;
	}
	interval_us = parse_long("cgsample", argv[3], "interval", 100, 10000000);
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
	return 0;
}
