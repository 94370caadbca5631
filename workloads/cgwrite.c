// SPDX-License-Identifier: MIT
/*
 * cgwrite - rewrite one cgroup file with the same value at a fixed interval.
 *
 * A cheap writer for the rewrite-storm scenario: the file is opened once and each
 * tick is one write() on an absolute-deadline clock_nanosleep, so the writer costs
 * next to no CPU (a forking shell loop would steal CPU and hide the effect).
 * Runs until SIGTERM/SIGINT or the optional count, then prints a JSON summary.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lat.h"

int main(int argc, char **argv)
{
	long interval_us, count = 0, writes = 0, errors = 0;
	struct timespec next;
	const char *value;
	size_t len;
	int fd;

	if (argc < 4 || argc > 5) {
		fprintf(stderr, "usage: %s FILE VALUE INTERVAL_US [COUNT]\n", argv[0]);
		return 2;
	}
	value = argv[2];
	len = strlen(value);
	interval_us = parse_long("cgwrite", argv[3], "interval", 1, 60000000);
	if (argc == 5)
		count = parse_long("cgwrite", argv[4], "count", 1, 1000000000);

	fd = open(argv[1], O_WRONLY);
	if (fd < 0) {
		fprintf(stderr, "cgwrite: open %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	stop_on_signals();

	clock_gettime(CLOCK_MONOTONIC, &next);
	while (!lat_stop && (!count || writes + errors < count)) {
		timespec_add_us(&next, interval_us);
		if (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR)
			continue;
		if (pwrite(fd, value, len, 0) == (ssize_t)len)
			writes++;
		else
			errors++;
	}
	close(fd);
	printf("{\"writer\":\"cgwrite\",\"writes\":%ld,\"errors\":%ld}\n", writes, errors);
	return errors ? 1 : 0;
}
