// SPDX-License-Identifier: MIT
/*
 * noise - how much of a busy CPU a thread does not get, and in what pieces.
 *
 * Starts N threads that spin reading CLOCK_MONOTONIC and their own thread CPU clock.
 * The thread CPU clock advances with the clock the scheduler charges tasks and CPU
 * bandwidth with (rq_clock_task): time another task ran, or time the hypervisor took
 * the vCPU away (steal time, with paravirt steal accounting), passes on the wall clock
 * but is not charged. Interrupts are charged to the interrupted task unless the kernel
 * has IRQ_TIME_ACCOUNTING, so they count as charged here, as they do for a group's quota.
 *
 * A loop iteration in which at least -g us of wall time went uncharged is a gap; gaps
 * less than -m us apart are one burst. Output: one JSON object on stdout with the
 * uncharged share of the run, per thread and in all; the bursts' sizes (uncharged us,
 * in the order they happened, at most 20000 spread evenly) and their percentiles.
 * bwlab's simulator replays this as the other work on a machine's CPUs (bwlab validate).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lat.h"

#define MAX_BURSTS (1L << 20)
#define MAX_SAMPLES 20000L /* burst sizes printed: all, or this many evenly spread */

struct spinner {
	pthread_t tid;
	int64_t wall_ns, charged_ns, uncharged_ns;
	int64_t *bursts; /* ns of uncharged time per burst */
	long nbursts;
};

static int64_t duration_ns, gap_ns, merge_ns;

static void *spin(void *arg)
{
	struct spinner *s = arg;
	int64_t w0 = now_ns(CLOCK_MONOTONIC), c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
	int64_t w = w0, c = c0, high = 0, burst = 0, last_gap = 0;

	for (;;) {
		int64_t lost;

		w = now_ns(CLOCK_MONOTONIC);
		c = now_ns(CLOCK_THREAD_CPUTIME_ID);
		/*
		 * Uncharged time so far, against its highest value: an interrupt that lands
		 * between the two clock reads is charged (seen by the second read, not the
		 * first) and shows as a dip and an equal rise, which is not a gap.
		 */
		lost = (w - w0) - (c - c0) - high;
		if (lost > 0) {
			high += lost;
			if (lost >= gap_ns) {
				if (burst && w - last_gap > merge_ns && s->nbursts < MAX_BURSTS) {
					s->bursts[s->nbursts++] = burst;
					burst = 0;
				}
				burst += lost;
				last_gap = w;
			}
		}
		if (w - w0 >= duration_ns)
			break;
	}
	if (burst && s->nbursts < MAX_BURSTS)
		s->bursts[s->nbursts++] = burst;
	s->wall_ns = w - w0;
	s->charged_ns = c - c0;
	s->uncharged_ns = s->wall_ns - s->charged_ns;
	return NULL;
}

static void usage(const char *prog)
{
	fprintf(stderr,
		"usage: %s [-t threads] [-d duration_s] [-g gap_us] [-m merge_us]\n"
		"  -t  spinning threads, one per CPU to watch (default 1)\n"
		"  -d  run time in seconds (default 10)\n"
		"  -g  uncharged time in one loop iteration that counts as a gap, us (default 5)\n"
		"  -m  gaps closer than this are one burst, us (default 100)\n",
		prog);
}

int main(int argc, char **argv)
{
	long threads = 1, duration_s = 10, gap_us = 5, merge_us = 100, total_bursts = 0;
	int64_t wall = 0, charged = 0, uncharged = 0, *all;
	struct spinner *sp;
	int opt;

	while ((opt = getopt(argc, argv, "t:d:g:m:h")) != -1) {
		switch (opt) {
		case 't':
			threads = parse_long("noise", optarg, "-t (threads)", 1, 4096);
			break;
		case 'd':
			duration_s = parse_long("noise", optarg, "-d (duration, s)", 1, 86400);
			break;
		case 'g':
			gap_us = parse_long("noise", optarg, "-g (gap, us)", 1, 1000000);
			break;
		case 'm':
			merge_us = parse_long("noise", optarg, "-m (merge, us)", 0, 1000000);
			break;
		default:
			usage(argv[0]);
			return opt == 'h' ? 0 : 2;
		}
	}
	if (optind != argc) {
		usage(argv[0]);
		return 2;
	}
	duration_ns = (int64_t)duration_s * 1000000000;
	gap_ns = (int64_t)gap_us * 1000;
	merge_ns = (int64_t)merge_us * 1000;

	sp = calloc((size_t)threads, sizeof(*sp));
	if (!sp) {
		fprintf(stderr, "noise: out of memory\n");
		return 1;
	}
	for (long i = 0; i < threads; i++) {
		int err;

		sp[i].bursts = malloc(MAX_BURSTS * sizeof(int64_t));
		if (!sp[i].bursts) {
			fprintf(stderr, "noise: out of memory\n");
			return 1;
		}
		err = pthread_create(&sp[i].tid, NULL, spin, &sp[i]);
		if (err) {
			fprintf(stderr, "noise: pthread_create: %s\n", strerror(err));
			return 1;
		}
	}
	for (long i = 0; i < threads; i++) {
		pthread_join(sp[i].tid, NULL);
		wall += sp[i].wall_ns;
		charged += sp[i].charged_ns;
		uncharged += sp[i].uncharged_ns;
		total_bursts += sp[i].nbursts;
	}
	all = malloc((size_t)(total_bursts + 1) * sizeof(*all));
	if (!all) {
		fprintf(stderr, "noise: out of memory\n");
		return 1;
	}
	total_bursts = 0;
	for (long i = 0; i < threads; i++) {
		memcpy(all + total_bursts, sp[i].bursts, (size_t)sp[i].nbursts * sizeof(*all));
		total_bursts += sp[i].nbursts;
	}

	printf("{\"workload\": \"noise\", \"threads\": %ld, \"duration_s\": %ld, \"gap_us\": %ld, "
	       "\"merge_us\": %ld, \"wall_us\": %lld, \"charged_us\": %lld, \"uncharged_us\": %lld, ",
	       threads, duration_s, gap_us, merge_us, (long long)(wall / 1000), (long long)(charged / 1000),
	       (long long)(uncharged / 1000));
	printf("\"uncharged_pct\": %.4f, \"per_thread\": [", wall > 0 ? 100.0 * (double)uncharged / (double)wall : 0.0);
	for (long i = 0; i < threads; i++) {
		int64_t in_bursts = 0;

		for (long k = 0; k < sp[i].nbursts; k++)
			in_bursts += sp[i].bursts[k];
		printf("%s{\"wall_us\": %lld, \"charged_us\": %lld, \"uncharged_us\": %lld, \"bursts\": %ld, "
		       "\"in_bursts_us\": %lld}",
		       i ? ", " : "", (long long)(sp[i].wall_ns / 1000), (long long)(sp[i].charged_ns / 1000),
		       (long long)(sp[i].uncharged_ns / 1000), sp[i].nbursts, (long long)(in_bursts / 1000));
	}
	printf("], ");
	{
		int64_t sum = 0;

		for (long k = 0; k < total_bursts; k++)
			sum += all[k];
		printf("\"burst_mean_us\": %.3f, ", total_bursts ? (double)sum / (double)total_bursts / 1000.0 : 0.0);
	}
	printf("\"bursts_us\": [");
	for (long k = 0, n = total_bursts < MAX_SAMPLES ? total_bursts : MAX_SAMPLES; k < n; k++)
		printf("%s%lld", k ? "," : "", (long long)(all[k * total_bursts / n] / 1000));
	printf("], ");
	print_stats("burst_us", all, total_bursts, 1000);
	printf("}\n");
	for (long i = 0; i < threads; i++)
		free(sp[i].bursts);
	free(all);
	free(sp);
	return 0;
}
