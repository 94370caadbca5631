// SPDX-License-Identifier: MIT
/*
 * fifo - give a running process SCHED_FIFO with SCHED_RESET_ON_FORK: what the lab does for
 * QEMU's main loop (bwlab/targets/qemu.py, prioritize_timers()), for a bundle's guests on a
 * machine without util-linux's chrt (busybox's has no --reset-on-fork).
 *
 * Usage: fifo PID [PRIORITY]   (priority 1 by default)
 *
 * Only the thread whose id is PID changes (the process's first thread: QEMU's main loop);
 * threads it creates afterwards start at SCHED_OTHER (reset-on-fork), so the vCPU threads
 * never run at real-time priority. Exit 0 when done; otherwise 1 and one line on stderr
 * saying why (e.g. "Operation not permitted": no CAP_SYS_NICE, or a cgroup without real-time
 * runtime), so that the caller can record it.
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SCHED_RESET_ON_FORK
#define SCHED_RESET_ON_FORK 0x40000000
#endif

static long number(const char *text, const char *what, long lo, long hi)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(text, &end, 10);
	if (errno || *end || end == text || v < lo || v > hi) {
		fprintf(stderr, "fifo: %s %s: expected a number in %ld..%ld\n", what, text, lo, hi);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	struct sched_param param;
	long pid;

	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: fifo PID [PRIORITY]\n");
		return 2;
	}
	pid = number(argv[1], "PID", 1, INT_MAX);
	param.sched_priority = argc == 3 ? (int)number(argv[2], "priority", 1, 99) : 1;
	if (sched_setscheduler((pid_t)pid, SCHED_FIFO | SCHED_RESET_ON_FORK, &param)) {
		fprintf(stderr, "fifo: sched_setscheduler(%ld, SCHED_FIFO): %s\n", pid, strerror(errno));
		return 1;
	}
	return 0;
}
