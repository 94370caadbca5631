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
 *
 * Each thread also arms a POSIX timer -i us ahead, again and again (CLOCK_MONOTONIC, an
 * hrtimer, signal to the thread itself). The spin loop runs until the interrupt comes, so
 * its last clock read before the signal handler is when the interrupt arrived: how late
 * that is after the expiry is how late a timer interrupt arrives on a busy CPU -- what the
 * CFS period timer and the tick see -- without the wakeup and scheduling delay a sleeping
 * thread would add. Reported as timer lateness samples (us, at most 20000).
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lat.h"

#define MAX_BURSTS (1L << 20)
#define MAX_SAMPLES 20000L /* samples printed (bursts, lateness): all, or this many evenly spread */
#define MAX_LATE (1L << 20)

struct spinner {
	pthread_t tid;
	int64_t wall_ns, charged_ns, uncharged_ns;
	int64_t *bursts; /* ns of uncharged time per burst */
	long nbursts;
	int64_t *late; /* ns each timer interrupt arrived after its expiry */
	long nlate;
};

static int64_t duration_ns, gap_ns, merge_ns, interval_ns;
static long work;
static volatile uint64_t sink;
/*
 * For the signal handler: the calling thread's spinner, its timer's next expiry, and the
 * two clocks as the spin loop last read them.
 */
static __thread struct spinner *self;
static __thread timer_t timer;
static __thread int64_t due;
static __thread volatile int64_t last_w, last_c;

/* Arm this thread's one-shot timer for `due`. */
static int arm(void)
{
	struct itimerspec its = { 0 };

	its.it_value.tv_sec = due / 1000000000;
	its.it_value.tv_nsec = due % 1000000000;
	return timer_settime(timer, TIMER_ABSTIME, &its, NULL);
}

/*
 * The loop spun until the interrupt came, so its last read is when the interrupt arrived.
 * If time went uncharged since (another task ran, or the vCPU was away), the thread was
 * not running when the timer was due: no sample, that delay is not the interrupt's. The
 * timer is one-shot, re-armed here one interval on, so every sample has its own expiry.
 */
static void on_timer(int sig, siginfo_t *info, void *uc)
{
	int64_t w = now_ns(CLOCK_MONOTONIC), c = now_ns(CLOCK_THREAD_CPUTIME_ID);
	int64_t arrived = last_w;

	(void)sig;
	(void)info;
	(void)uc;
	if (!self)
		return;
	if (self->nlate < MAX_LATE && (w - last_w) - (c - last_c) < gap_ns)
		self->late[self->nlate++] = arrived > due ? arrived - due : 0;
	due = w + interval_ns;
	arm();
}

/* This thread's timer, signalling it, first due one interval from now. */
static int start_timer(void)
{
	struct sigevent sev = { 0 };

	sev.sigev_notify = SIGEV_THREAD_ID;
	sev.sigev_signo = SIGRTMIN;
	sev._sigev_un._tid = gettid(); /* sigev_notify_thread_id: glibc 2.35 and later only */
	if (timer_create(CLOCK_MONOTONIC, &sev, &timer))
		return -1;
	due = now_ns(CLOCK_MONOTONIC) + interval_ns;
	return arm();
}

static void *spin(void *arg)
{
	struct spinner *s = arg;
	int64_t w0 = now_ns(CLOCK_MONOTONIC), c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
	int64_t w = w0, c = c0, high = 0, burst = 0, last_gap = 0;

	self = s;
	if (interval_ns && start_timer()) {
		perror("noise: timer");
		exit(1);
	}
	for (;;) {
		int64_t lost;
		uint64_t x = (uint64_t)w;

		for (long k = 0; k < work; k++)
			x = x * 6364136223846793005u + 1442695040888963407u;
		sink = x;
		w = now_ns(CLOCK_MONOTONIC);
		c = now_ns(CLOCK_THREAD_CPUTIME_ID);
		last_w = w;
		last_c = c;
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
	self = NULL;
	if (interval_ns)
		timer_delete(timer);
	s->wall_ns = w - w0;
	s->charged_ns = c - c0;
	s->uncharged_ns = s->wall_ns - s->charged_ns;
	return NULL;
}

/* All threads' bursts (or timer lateness samples) in one array; *n: how many. */
static int64_t *gather(const struct spinner *sp, long threads, int late, long *n)
{
	int64_t *all;
	long total = 0;

	for (long i = 0; i < threads; i++)
		total += late ? sp[i].nlate : sp[i].nbursts;
	all = malloc((size_t)(total + 1) * sizeof(*all));
	if (!all) {
		fprintf(stderr, "noise: out of memory\n");
		exit(1);
	}
	*n = 0;
	for (long i = 0; i < threads; i++) {
		long m = late ? sp[i].nlate : sp[i].nbursts;

		memcpy(all + *n, late ? sp[i].late : sp[i].bursts, (size_t)m * sizeof(*all));
		*n += m;
	}
	return all;
}

static void usage(const char *prog)
{
	fprintf(stderr,
		"usage: %s [-t threads] [-d duration_s] [-g gap_us] [-m merge_us]\n"
		"  -t  spinning threads, one per CPU to watch (default 1)\n"
		"  -d  run time in seconds (default 10)\n"
		"  -g  uncharged time in one loop iteration that counts as a gap, us (default 5)\n"
		"  -m  gaps closer than this are one burst, us (default 100)\n"
		"  -w  arithmetic steps between clock reads, to look like a compute loop (default 0)\n"
		"  -i  arm a timer every this many us and record how late it fires, 0: none (default 997)\n",
		prog);
}

int main(int argc, char **argv)
{
	long threads = 1, duration_s = 10, gap_us = 5, merge_us = 100, interval_us = 997, total_bursts = 0;
	long total_late = 0;
	struct sigaction sa = { 0 };
	int64_t wall = 0, charged = 0, uncharged = 0, *all;
	struct spinner *sp;
	const struct long_opt opts[] = {
		{ 't', "-t (threads)", 1, 4096, &threads },
		{ 'd', "-d (duration, s)", 1, 86400, &duration_s },
		{ 'g', "-g (gap, us)", 1, 1000000, &gap_us },
		{ 'm', "-m (merge, us)", 0, 1000000, &merge_us },
		{ 'w', "-w (work per loop)", 0, 1000000, &work },
		{ 'i', "-i (timer interval, us)", 0, 1000000, &interval_us },
	};

	parse_long_opts(argc, argv, "noise", opts, sizeof(opts) / sizeof(opts[0]), usage);
	duration_ns = (int64_t)duration_s * 1000000000;
	gap_ns = (int64_t)gap_us * 1000;
	merge_ns = (int64_t)merge_us * 1000;
	interval_ns = (int64_t)interval_us * 1000;
	sa.sa_sigaction = on_timer;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGRTMIN, &sa, NULL)) {
		perror("noise: sigaction");
		return 1;
	}

	sp = calloc((size_t)threads, sizeof(*sp));
	if (!sp) {
		fprintf(stderr, "noise: out of memory\n");
		return 1;
	}
	for (long i = 0; i < threads; i++) {
		int err;

		sp[i].bursts = malloc(MAX_BURSTS * sizeof(int64_t));
		sp[i].late = malloc(MAX_LATE * sizeof(int64_t));
		if (!sp[i].bursts || !sp[i].late) {
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
	}
	all = gather(sp, threads, 0, &total_bursts);

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
	printf("\"bursts_us\": ");
	print_spread(all, total_bursts, MAX_SAMPLES, 1000.0);
	printf(", ");
	print_stats("burst_us", all, total_bursts, 1000);
	free(all);
	all = gather(sp, threads, 1, &total_late);
	printf(", \"timer_interval_us\": %ld, \"timer_late_us\": ", interval_us);
	print_spread(all, total_late, MAX_SAMPLES, 1000.0);
	printf(", ");
	print_stats("timer_late", all, total_late, 1000);
	printf("}\n");
	for (long i = 0; i < threads; i++) {
		free(sp[i].bursts);
		free(sp[i].late);
	}
	free(all);
	free(sp);
	return 0;
}
