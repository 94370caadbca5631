// SPDX-License-Identifier: MIT
/*
 * spin - CPU-bound threads that never sleep, with a work rate: sysbench cpu's role, static.
 *
 * Starts -t threads. Each repeats one event until -d seconds of wall time have passed: count
 * the primes below -p by trial division up to the square root (the work sysbench cpu calls an
 * event at --cpu-max-prime, so the rates are of the same order). The clock is read between
 * events only, so an event is never cut short and a thread's last event may end up to one
 * event after the deadline.
 *
 * Output: one JSON object on stdout, {"events": N, "events_per_s": R, "duration_s": S,
 * "threads": T, "per_thread": [...]}, the rate over the wall time from the threads' start to
 * the last one's end. With -g US also "gaps": [[thread, start_us, length_us], ...], every
 * time a thread's two clock reads (one event apart) lay more than US apart (the event and the
 * time the thread was not running: a throttle, a preemption), start_us from the threads' start, at most MAX_GAPS a
 * thread ("gaps_dropped": how many more). A throttle detector that needs no counter of the
 * scheduler's (under sched_ext, cpu.stat's throttle counters stay 0). For machines without sysbench: bwlab bundle carries it (it needs no
 * library), and the `spin-cpu` workload kind runs it on every target.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 4096
#define MAX_GAPS 100000

struct gap {
	int64_t start, length;
};

struct spinner {
	pthread_t tid;
	uint64_t events;
	struct gap *gaps; /* with -g */
	long nr_gaps, dropped;
};

static long max_prime = 20000;
static int64_t deadline_ns, start_ns, gap_ns;
static volatile uint64_t sink;

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* One event: the number of primes in [3, max_prime], by trial division. */
static uint64_t event(void)
{
	uint64_t primes = 0;

	for (long c = 3; c < max_prime; c++) {
		long d;

		for (d = 2; d * d <= c; d++)
			if (c % d == 0)
				break;
		if (d * d > c)
			primes++;
	}
	return primes;
}

static void *spin(void *arg)
{
	struct spinner *s = arg;
	int64_t last = now_ns(), t;

	/* a gap: from one read to the next, one event and whatever kept the thread off its CPU
	 * (a throttle or a preemption lands inside an event far more often than between reads) */
	while ((t = now_ns()) < deadline_ns) {
		if (gap_ns && t - last > gap_ns) {
			if (s->nr_gaps < MAX_GAPS)
				s->gaps[s->nr_gaps++] = (struct gap){ last - start_ns, t - last };
			else
				s->dropped++;
		}
		last = t;
		sink += event();
		s->events++;
	}
	return NULL;
}

static long number(const char *flag, const char *text, long lo, long hi)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(text, &end, 10);
	if (errno || *end || end == text || v < lo || v > hi) {
		fprintf(stderr, "spin: %s %s: expected an integer in %ld..%ld\n", flag, text, lo, hi);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	static struct spinner spinners[MAX_THREADS];
	long threads = 1, seconds = 10;
	uint64_t total = 0;
	int64_t start, end;
	int opt;

	while ((opt = getopt(argc, argv, "t:d:p:g:")) != -1) {
		switch (opt) {
		case 't':
			threads = number("-t", optarg, 1, MAX_THREADS);
			break;
		case 'd':
			seconds = number("-d", optarg, 1, 86400);
			break;
		case 'p':
			max_prime = number("-p", optarg, 3, 10000000);
			break;
		case 'g':
			gap_ns = number("-g", optarg, 1, 10000000) * 1000;
			break;
		default:
			fprintf(stderr, "usage: spin [-t threads] [-d seconds] [-p max_prime] [-g gap_us]\n");
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "spin: unexpected argument %s\n", argv[optind]);
		return 2;
	}
	for (long i = 0; gap_ns && i < threads; i++) {
		spinners[i].gaps = calloc(MAX_GAPS, sizeof(struct gap));
		if (!spinners[i].gaps) {
			fprintf(stderr, "spin: -g: out of memory\n");
			return 1;
		}
	}
	start = start_ns = now_ns();
	deadline_ns = start + seconds * 1000000000LL;
	for (long i = 0; i < threads; i++) {
		int err = pthread_create(&spinners[i].tid, NULL, spin, &spinners[i]);

		if (err) {
			fprintf(stderr, "spin: pthread_create: %s\n", strerror(err));
			return 1;
		}
	}
	for (long i = 0; i < threads; i++) {
		pthread_join(spinners[i].tid, NULL);
		total += spinners[i].events;
	}
	end = now_ns();
	printf("{\"events\": %llu, \"events_per_s\": %.3f, \"duration_s\": %.6f, \"threads\": %ld, \"per_thread\": [",
	       (unsigned long long)total, total / ((end - start) / 1e9), (end - start) / 1e9, threads);
	for (long i = 0; i < threads; i++)
		printf("%s%llu", i ? ", " : "", (unsigned long long)spinners[i].events);
	printf("]");
	if (gap_ns) {
		long dropped = 0, n = 0;

		printf(", \"gaps\": [");
		for (long i = 0; i < threads; i++) {
			dropped += spinners[i].dropped;
			for (long j = 0; j < spinners[i].nr_gaps; j++)
				printf("%s[%ld, %lld, %lld]", n++ ? ", " : "", i,
				       (long long)(spinners[i].gaps[j].start / 1000),
				       (long long)(spinners[i].gaps[j].length / 1000));
		}
		printf("], \"gaps_dropped\": %ld", dropped);
	}
	printf("}\n");
	return 0;
}
