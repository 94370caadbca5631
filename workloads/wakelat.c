// SPDX-License-Identifier: MIT
/*
 * wakelat - wakeup and request latency of a message/worker server (after schbench's design).
 *
 * M message threads each feed T worker threads. A message thread posts requests at a target
 * rate (-r RPS over all message threads, fixed intervals, -b requests at a time for bursty
 * arrivals, -p for Poisson gaps) or back to back (-r 0: a worker's next request is posted as
 * soon as it finishes). A request wakes a sleeping worker, which
 * burns -c microseconds of its own CPU time (measured with CLOCK_THREAD_CPUTIME_ID, so a
 * request costs the same CPU time on a fast host and under emulation), then sleeps -s
 * microseconds and waits for the next request.
 *
 * Wakeup latency: from the message thread's wake to the worker running. At a target rate the
 * message thread's wake is the request's arrival (the expiry of its timer), so the delay of
 * the message thread itself (e.g. a throttled group) counts, as it does for a server whose
 * dispatcher is in the same cgroup; back to back it is the post. Request latency: from the
 * same start to the end of the burn (queueing included). -S applies to message threads too.
 * -w W: requests posted in the first W seconds of the run warm it up and are not counted
 * (as schbench's -w); the achieved rate is over the rest.
 * Each worker keeps its own samples (no lock shared between threads in the measured path: a
 * global mutex per sample would perturb the wakeups it measures); they are merged at the end.
 * Output: one JSON object with nearest-rank percentiles, achieved RPS and the raw samples.
 *
 * wakelat --percentiles reads numbers (one per line) on stdin and prints their percentiles:
 * the same code, testable on its own.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "lat.h"

#define MAX_SAMPLES 2000000

/* One thread's samples: written only by that thread, read after it is joined. */
struct samples {
	int64_t *v;
	long n, cap, max;
};

struct worker {
	pthread_t tid;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int busy;        /* a request is posted and not finished */
	int64_t posted;  /* when the request was posted (ns) */
	int sleeping;    /* waiting on cond when the request was posted */
	struct msg *msg;
	struct samples wake, req; /* this worker's own */
	long completed;           /* requests it finished that were posted after the warm-up */
};

struct msg {
	pthread_t tid;
	pthread_mutex_t lock;
	pthread_cond_t done; /* a worker finished (back-to-back mode) */
	struct worker *workers;
	int nworkers;
	int next;
	long posted, dropped;
};

static int nmsg = 1, nworkers = 4, batch = 1, poisson;
static double rps;
static long burn_us = 1000, sleep_us, slice_us, seed;
static int arrivals_only;
static struct msg *msgs;
static double duration_s = 10, warmup_s;
static int64_t measure_from; /* requests posted before this (ns) warm up and are not counted */
static atomic_int stop;

/* Append without any lock: only the owning thread writes. Keeps the first s->max samples. */
static void add_sample(struct samples *s, int64_t v)
{
	if (s->n == s->cap) {
		long cap = s->cap ? 2 * s->cap : 4096;
		int64_t *grown;

		if (cap > s->max)
			cap = s->max;
		if (s->n == cap)
			return;
		grown = realloc(s->v, (size_t)cap * sizeof(*grown));
		if (!grown)
			return; /* out of memory: keep what there is */
		s->v = grown;
		s->cap = cap;
	}
	s->v[s->n++] = v;
}

/* Every worker's samples of one kind in one array (worker order). */
static int64_t *merge(struct msg *msgs, int which, long *n)
{
	long total = 0, at = 0;
	int64_t *all;

	for (int i = 0; i < nmsg; i++)
		for (int j = 0; j < nworkers; j++)
			total += which ? msgs[i].workers[j].req.n : msgs[i].workers[j].wake.n;
	all = malloc((size_t)(total ? total : 1) * sizeof(*all));
	if (!all) {
		fprintf(stderr, "wakelat: out of memory\n");
		exit(1);
	}
	for (int i = 0; i < nmsg; i++)
		for (int j = 0; j < nworkers; j++) {
			struct samples *s = which ? &msgs[i].workers[j].req : &msgs[i].workers[j].wake;

			memcpy(all + at, s->v, (size_t)s->n * sizeof(*all));
			at += s->n;
		}
	*n = total;
	return all;
}

static void set_slice(long us)
{
	if (set_fair_slice(us) != 0) {
		fprintf(stderr, "wakelat: sched_setattr(slice %ld us): %s\n", us, strerror(errno));
		exit(1);
	}
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	if (slice_us > 0)
		set_slice(slice_us);

	for (;;) {
		int64_t posted, started;
		int woken;

		pthread_mutex_lock(&w->lock);
		while (!w->busy && !atomic_load(&stop)) {
			w->sleeping = 1;
			pthread_cond_wait(&w->cond, &w->lock);
		}
		w->sleeping = 0;
		if (!w->busy) {
			pthread_mutex_unlock(&w->lock);
			break;
		}
		posted = w->posted;
		woken = w->busy == 2; /* posted while it slept */
		pthread_mutex_unlock(&w->lock);
		started = now_ns(CLOCK_MONOTONIC);
		if (woken && posted >= measure_from)
			add_sample(&w->wake, started - posted);
		burn(burn_us);
		if (posted >= measure_from) {
			add_sample(&w->req, now_ns(CLOCK_MONOTONIC) - posted);
			w->completed++;
		}
		if (sleep_us > 0)
			usleep((useconds_t)sleep_us);
		pthread_mutex_lock(&w->lock);
		w->busy = 0;
		pthread_mutex_unlock(&w->lock);
		pthread_mutex_lock(&w->msg->lock);
		pthread_cond_signal(&w->msg->done);
		pthread_mutex_unlock(&w->msg->lock);
	}
	return NULL;
}

/* Post to the next idle worker (arrival: when the request arrived, 0: now); 0 if every worker is busy. */
static int post(struct msg *m, int64_t arrival)
{
	for (int k = 0; k < m->nworkers; k++) {
		struct worker *w = &m->workers[(m->next + k) % m->nworkers];

		pthread_mutex_lock(&w->lock);
		if (!w->busy) {
			w->posted = arrival ? arrival : now_ns(CLOCK_MONOTONIC);
			w->busy = w->sleeping ? 2 : 1;
			pthread_cond_signal(&w->cond);
			pthread_mutex_unlock(&w->lock);
			m->next = (m->next + k + 1) % m->nworkers;
			m->posted++;
			return 1;
		}
		pthread_mutex_unlock(&w->lock);
	}
	return 0;
}

/* The gap between message thread i's posts, in ns: `interval`, or with -p exponential gaps of
 * that mean drawn from *rng (xorshift64). */
static int64_t next_gap(uint64_t *rng, int64_t interval)
{
	double u;

	if (!poisson)
		return interval;
	*rng ^= *rng << 13;
	*rng ^= *rng >> 7;
	*rng ^= *rng << 17;
	u = (double)(*rng >> 11) / 9007199254740992.0;
	return (int64_t)(-(double)interval * log1p(-u));
}

/* -R: the same seed, the same gaps (each message thread i its own stream) */
static uint64_t seed_of(int i, int64_t clock)
{
	return seed ? 0x9e3779b97f4a7c15ULL * (uint64_t)(i + 1) ^ (uint64_t)seed * 0xbf58476d1ce4e5b9ULL
		    : (uint64_t)clock ^ (uint64_t)i * 0x9e3779b97f4a7c15ULL;
}

static int64_t post_interval(void)
{
	return rps > 0 ? (int64_t)(1e9 * nmsg * batch / rps) : 0;
}

/* -A: the arrivals a run of -d seconds would post (message thread, ns after the start, one line
 * per request), without running it: with -R what a replay of the run's requests needs. */
static int print_arrivals(void)
{
	int64_t interval = post_interval();

	if (interval <= 0 || !seed) {
		fprintf(stderr, "wakelat: -A needs a rate (-r > 0) and a seed (-R)\n");
		return 2;
	}
	for (int i = 0; i < nmsg; i++) {
		uint64_t rng = seed_of(i, 0);

		for (int64_t t = next_gap(&rng, interval); t < (int64_t)(duration_s * 1e9); t += next_gap(&rng, interval))
			for (int k = 0; k < batch; k++)
				printf("%d %lld\n", i, (long long)t);
	}
	return 0;
}

static void *msg_main(void *arg)
{
	struct msg *m = arg;
	int64_t interval = post_interval();
	int64_t next = now_ns(CLOCK_MONOTONIC);
	uint64_t rng = seed_of((int)(m - msgs), next);

	if (slice_us > 0)
		set_slice(slice_us);

	while (!atomic_load(&stop)) {
		if (interval > 0) {
			struct timespec ts;

			next += next_gap(&rng, interval);
			ts.tv_sec = next / 1000000000;
			ts.tv_nsec = next % 1000000000;
			while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
				;
			for (int k = 0; k < batch; k++)
				if (!post(m, next))
					m->dropped++; /* every worker busy: the server is saturated */
		} else {
			while (post(m, 0))
				;
			pthread_mutex_lock(&m->lock);
			if (!atomic_load(&stop)) {
				struct timespec ts;
				int64_t t = now_ns(CLOCK_REALTIME) + 10000000;

				ts.tv_sec = t / 1000000000;
				ts.tv_nsec = t % 1000000000;
				pthread_cond_timedwait(&m->done, &m->lock, &ts);
			}
			pthread_mutex_unlock(&m->lock);
		}
	}
	return NULL;
}

static int percentiles_from_stdin(void)
{
	static int64_t v[MAX_SAMPLES];
	long n = 0;
	char line[64];

	while (fgets(line, sizeof(line), stdin)) {
		if (line[0] == '\n')
			continue;
		if (n == MAX_SAMPLES) {
			fprintf(stderr, "wakelat: more than %d values\n", MAX_SAMPLES);
			return 2;
		}
		line[strcspn(line, "\n")] = 0;
		v[n++] = parse_long("wakelat", line, "a value", LONG_MIN / 2, LONG_MAX / 2);
	}
	printf("{");
	print_stats("values", v, n, 1);
	printf("}\n");
	return 0;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: wakelat [-m msg_threads] [-t workers_per_msg] [-r rps] [-b batch] [-p] [-R seed] [-c burn_us] [-s sleep_us]\n"
		"               [-S slice_us] [-w warmup_s] [-d s] [-A]\n"
		"       wakelat --percentiles < numbers\n"
		"  -m  message threads (default 1)\n"
		"  -t  worker threads per message thread (default 4)\n"
		"  -r  requests per second over all message threads; 0: back to back (default 0)\n"
		"  -b  requests posted at once, every batch/rps seconds (default 1)\n"
		"  -p  Poisson arrivals: exponential gaps of the same mean\n"
		"  -c  CPU time each request burns, microseconds of thread CPU time (default 1000)\n"
		"  -s  sleep after each request, microseconds (default 0)\n"
		"  -S  workers ask EEVDF for this slice, microseconds (sched_setattr; default: the kernel's)\n"
		"  -R  seed of the Poisson gaps (default: from the clock): the same seed, the same arrivals\n"
		"  -w  seconds at the start whose requests are not counted (warm-up, default 0; less than -d)\n"
		"  -d  run time in seconds, the warm-up included (default 10)\n"
		"  -A  print the arrivals of such a run (message thread, ns after the start) and exit\n");
}

int main(int argc, char **argv)
{
	struct timespec ts;
	int64_t start, elapsed;
	long completed = 0, kept_wake, kept_req;
	int64_t *wake, *req;
	int opt;

	if (argc == 2 && strcmp(argv[1], "--percentiles") == 0)
		return percentiles_from_stdin();
	while ((opt = getopt(argc, argv, "m:t:r:b:pc:s:S:R:w:d:Ah")) != -1) {
		switch (opt) {
		case 'm': nmsg = (int)parse_long("wakelat", optarg, "-m", 1, 64); break;
		case 't': nworkers = (int)parse_long("wakelat", optarg, "-t", 1, 1024); break;
		case 'r': rps = parse_double("wakelat", optarg, "-r", 0, 1e7); break;
		case 'b': batch = (int)parse_long("wakelat", optarg, "-b", 1, 100000); break;
		case 'p': poisson = 1; break;
		case 'c': burn_us = parse_long("wakelat", optarg, "-c", 0, 10000000); break;
		case 's': sleep_us = parse_long("wakelat", optarg, "-s", 0, 10000000); break;
		case 'S': slice_us = parse_long("wakelat", optarg, "-S", 100, 100000); break;
		case 'R': seed = parse_long("wakelat", optarg, "-R", 1, 1000000000); break;
		case 'w': warmup_s = parse_double("wakelat", optarg, "-w", 0, 86400); break;
		case 'd': duration_s = parse_double("wakelat", optarg, "-d", 0.01, 86400); break;
		case 'A': arrivals_only = 1; break;
		default: usage(); return 2;
		}
	}
	if (optind != argc) {
		usage();
		return 2;
	}
	if (arrivals_only)
		return print_arrivals();
	if (warmup_s >= duration_s) {
		fprintf(stderr, "wakelat: -w %g must be less than -d %g (the warm-up is part of the run)\n", warmup_s,
			duration_s);
		return 2;
	}
	msgs = calloc((size_t)nmsg, sizeof(*msgs));
	if (!msgs) {
		fprintf(stderr, "wakelat: out of memory\n");
		return 1;
	}
	/* the samples kept in all, at most MAX_SAMPLES of each kind, shared out among workers */
	long per_worker = MAX_SAMPLES / (nmsg * nworkers);
	for (int i = 0; i < nmsg; i++) {
		struct msg *m = &msgs[i];

		pthread_mutex_init(&m->lock, NULL);
		pthread_cond_init(&m->done, NULL);
		m->nworkers = nworkers;
		m->workers = calloc((size_t)nworkers, sizeof(struct worker));
		if (!m->workers) {
			fprintf(stderr, "wakelat: out of memory\n");
			return 1;
		}
		for (int j = 0; j < nworkers; j++) {
			struct worker *w = &m->workers[j];

			w->msg = m;
			w->wake.max = w->req.max = per_worker;
			pthread_mutex_init(&w->lock, NULL);
			pthread_cond_init(&w->cond, NULL);
			if (pthread_create(&w->tid, NULL, worker_main, w)) {
				fprintf(stderr, "wakelat: cannot create a worker thread\n");
				return 1;
			}
		}
	}
	start = now_ns(CLOCK_MONOTONIC);
	measure_from = start + (int64_t)(warmup_s * 1e9);
	for (int i = 0; i < nmsg; i++)
		if (pthread_create(&msgs[i].tid, NULL, msg_main, &msgs[i])) {
			fprintf(stderr, "wakelat: cannot create a message thread\n");
			return 1;
		}
	ts.tv_sec = (time_t)duration_s;
	ts.tv_nsec = (long)((duration_s - (double)ts.tv_sec) * 1e9);
	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
	atomic_store(&stop, 1);
	elapsed = now_ns(CLOCK_MONOTONIC) - start;
	long posted = 0, dropped = 0;

	for (int i = 0; i < nmsg; i++) {
		pthread_join(msgs[i].tid, NULL);
		posted += msgs[i].posted;
		dropped += msgs[i].dropped;
		for (int j = 0; j < nworkers; j++) {
			struct worker *w = &msgs[i].workers[j];

			pthread_mutex_lock(&w->lock);
			pthread_cond_signal(&w->cond);
			pthread_mutex_unlock(&w->lock);
		}
	}
	for (int i = 0; i < nmsg; i++)
		for (int j = 0; j < nworkers; j++) {
			pthread_join(msgs[i].workers[j].tid, NULL);
			completed += msgs[i].workers[j].completed;
		}
	wake = merge(msgs, 0, &kept_wake);
	req = merge(msgs, 1, &kept_req);
	/* JSON: percentiles in microseconds, then the raw wakeup samples (us) for CDF plots */
	printf("{\"msg_threads\": %d, \"workers\": %d, \"target_rps\": %.1f, \"batch\": %d, \"poisson\": %s, \"burn_us\": %ld, "
	       "\"elapsed_s\": %.3f, \"warmup_s\": %g, \"posted\": %ld, \"dropped\": %ld, \"completed\": %ld, "
	       "\"rps\": %.1f, ",
	       nmsg, nmsg * nworkers, rps, batch, poisson ? "true" : "false", burn_us, (double)elapsed / 1e9, warmup_s,
	       posted, dropped, completed, (double)completed * 1e9 / ((double)elapsed - warmup_s * 1e9));
	print_stats("wakeup_us", wake, kept_wake, 1000);
	printf(", ");
	print_stats("request_us", req, kept_req, 1000);
	printf(", \"samples_us\": [");
	for (long i = 0; i < kept_wake; i++)
		printf("%s%lld", i ? "," : "", (long long)(wake[i] / 1000));
	printf("]}\n");
	return 0;
}
