// SPDX-License-Identifier: MIT
/*
 * quotaflip - set a busy group's quota to max and back, and count the returns that throttle.
 *
 * Runs inside the group CGROUP_DIR (cgroup v2 cpu.max, or v1 cpu.cfs_quota_us) with one busy
 * thread per online CPU. The group's quota when it starts is the return quota, above what the
 * threads can use (the scenario's: ncpu*1.25). For DURATION_S seconds, again and again:
 *   1. the quota BEFORE_CPUS, a little under what the threads use (the scenario's: ncpu*0.7),
 *      for 4 periods: the pool runs dry around each period's end, where a late period timer
 *      leaves cfs_rqs asking for runtime after the expiry (the first series' early refill);
 *   2. after a pseudo-random part of a period, max, for 3 periods (the period timer runs with
 *      no quota, and stops);
 *   3. the return quota, for 5 periods: the return counts as throttled if nr_throttled grew.
 * A kernel that hands out one quota per period never throttles in step 3: the return quota is
 * more than the threads use. One that loses a refill across the max (the first series' early
 * refill, whose flag a timer run at max left set) leaves the first period after the return
 * without its refill, and the group throttles in the next.
 * The writer (the main thread) runs SCHED_FIFO, which CFS bandwidth does not throttle: its
 * writes land when it asks, not after the group's next refill. It writes the quotas on CPU 0,
 * which starts the period timer there (hrtimers are pinned to the CPU that starts them), and
 * max on CPU 1: a timer late on its CPU (interrupts off) would hold back a wakeup there too.
 * Prints one JSON line: flips, throttled_after (count) and throttled_after_pct.
 *
 *   quotaflip CGROUP_DIR DURATION_S SEED BEFORE_CPUS
 */
#include <pthread.h>
#include <stdatomic.h>

#include "lat.h"

static const char *PROG = "quotaflip";
static atomic_int spin_stop;

static void *spin(void *arg)
{
	volatile unsigned long n = 0;

	(void)arg;
	while (!atomic_load_explicit(&spin_stop, memory_order_relaxed))
		n++;
	return NULL;
}

/* One line of a cgroup file, or the value of `key` in a flat-keyed one (cpu.stat). */
static long read_value(const char *dir, const char *file, const char *key, char *line, size_t len)
{
	char path[4096], name[64];
	long value = -1, v;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	f = fopen(path, "r");
	if (!f)
		die_errno(PROG, "cannot read", path);
	if (!key) {
		if (!fgets(line, (int)len, f))
			die_errno(PROG, "cannot read", path);
		line[strcspn(line, "\n")] = 0;
	} else {
		while (fscanf(f, "%63s %ld", name, &v) == 2)
			if (!strcmp(name, key))
				value = v;
		if (value < 0) {
			fprintf(stderr, "%s: %s has no %s\n", PROG, path, key);
			exit(1);
		}
	}
	fclose(f);
	return value;
}

static void write_value(const char *dir, const char *file, const char *value)
{
	if (write_file(dir, file, value))
		die_errno(PROG, "cannot write", file);
}

static void run_on(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		die_errno(PROG, "cannot move the writer to a CPU:", cpu ? "CPU 1" : "CPU 0");
}

static void sleep_us(long us)
{
	struct timespec t = { us / 1000000, us % 1000000 * 1000 };

	while (!lat_stop && nanosleep(&t, &t) && errno == EINTR)
		;
}

int main(int argc, char **argv)
{
	char quota[64], before_quota[64], unlimited[64], line[128];
	long duration_s, seed, period_us, q, q_before, i, done = 0, throttled = 0;
	double before_cpus;
	int64_t end;
	const char *dir, *file;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	pthread_t *threads;
	unsigned long rnd;
	int v2;

	if (argc != 5) {
		fprintf(stderr, "usage: %s CGROUP_DIR DURATION_S SEED BEFORE_CPUS\n", PROG);
		return 2;
	}
	dir = argv[1];
	duration_s = parse_long(PROG, argv[2], "duration", 1, 86400);
	seed = parse_long(PROG, argv[3], "seed", 0, 1L << 30);
	before_cpus = parse_double(PROG, argv[4], "before_cpus", 0.01, 4096);
	rnd = (unsigned long)seed * 2654435761UL + 1;

	snprintf(line, sizeof(line), "%s/cpu.max", dir);
	v2 = access(line, F_OK) == 0;
	if (v2) {
		file = "cpu.max";
		read_value(dir, file, NULL, line, sizeof(line));
		if (sscanf(line, "%ld %ld", &q, &period_us) != 2) {
			fprintf(stderr, "%s: %s/cpu.max is '%s': the group needs a quota\n", PROG, dir, line);
			return 1;
		}
		q_before = (long)(before_cpus * (double)period_us);
		snprintf(quota, sizeof(quota), "%ld %ld", q, period_us);
		snprintf(before_quota, sizeof(before_quota), "%ld %ld", q_before, period_us);
		snprintf(unlimited, sizeof(unlimited), "max %ld", period_us);
	} else {
		file = "cpu.cfs_quota_us";
		q = atol((read_value(dir, file, NULL, line, sizeof(line)), line));
		period_us = atol((read_value(dir, "cpu.cfs_period_us", NULL, line, sizeof(line)), line));
		if (q <= 0) {
			fprintf(stderr, "%s: %s/%s is %ld: the group needs a quota\n", PROG, dir, file, q);
			return 1;
		}
		q_before = (long)(before_cpus * (double)period_us);
		snprintf(quota, sizeof(quota), "%ld", q);
		snprintf(before_quota, sizeof(before_quota), "%ld", q_before);
		snprintf(unlimited, sizeof(unlimited), "-1");
	}

	if (ncpu < 2) {
		fprintf(stderr, "%s: needs 2 CPUs or more (the writer beside the period timer's CPU)\n", PROG);
		return 1;
	}
	if (q_before < 1000 || q_before >= q) {
		fprintf(stderr, "%s: %.2f CPUs before each flip must be a quota of 1 ms or more below the group's (%ld us)\n",
			PROG, before_cpus, q);
		return 1;
	}

	stop_on_signals();
	threads = calloc((size_t)ncpu, sizeof(*threads));
	if (!threads)
		die_errno(PROG, "cannot allocate", "threads");
	for (i = 0; i < ncpu; i++)
		if (pthread_create(&threads[i], NULL, spin, NULL)) {
			fprintf(stderr, "%s: cannot start a busy thread\n", PROG);
			return 1;
		}
	{	/* after the busy threads start: they would inherit it */
		struct sched_param sp = { .sched_priority = 1 };

		if (sched_setscheduler(0, SCHED_FIFO, &sp))
			die_errno(PROG, "cannot run the writer at", "SCHED_FIFO");
	}
	sleep_us(5 * period_us); /* the busy threads spread over the CPUs */

	end = now_ns(CLOCK_MONOTONIC) + duration_s * 1000000000LL;
	while (!lat_stop && now_ns(CLOCK_MONOTONIC) < end) {
		long before;

		run_on(0);
		write_value(dir, file, before_quota);
		sleep_us(4 * period_us);
		run_on(1);
		rnd = rnd * 6364136223846793005UL + 1442695040888963407UL;
		sleep_us((long)((rnd >> 33) % (unsigned long)period_us));
		write_value(dir, file, unlimited);
		sleep_us(3 * period_us);
		run_on(0);
		before = read_value(dir, "cpu.stat", "nr_throttled", line, sizeof(line));
		write_value(dir, file, quota);
		sleep_us(5 * period_us);
		if (lat_stop)
			break;
		throttled += read_value(dir, "cpu.stat", "nr_throttled", line, sizeof(line)) > before;
		done++;
	}
	write_value(dir, file, quota); /* a stop between the two writes leaves no max behind */

	atomic_store(&spin_stop, 1);
	for (i = 0; i < ncpu; i++)
		pthread_join(threads[i], NULL);
	free(threads);
	printf("{\"flips\":%ld,\"throttled_after\":%ld,\"throttled_after_pct\":%.1f}\n", done, throttled,
	       done ? 100.0 * (double)throttled / (double)done : 0.0);
	return 0;
}
