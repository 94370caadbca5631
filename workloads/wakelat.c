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

struct samples {
	pthread_mutex_t lock;
	int64_t *v;
	long n;
};

struct worker {
	pthread_t tid;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int busy;        /* a request is posted and not finished */
	int64_t posted;  /* when the request was posted (ns) */
	int sleeping;    /* waiting on cond when the request was posted */
	struct msg *msg;
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
static long burn_us = 1000, sleep_us, slice_us;
static double duration_s = 10;
static atomic_int stop;
static atomic_long completed;
static struct samples wake_samples, req_samples;

static void add_sample(struct samples *s, int64_t v)
{
	pthread_mutex_lock(&s->lock);
	if (s->n < MAX_SAMPLES)
		s->v[s->n++] = v;
	pthread_mutex_unlock(&s->lock);
}

/* EEVDF's custom slice (sched_attr.sched_runtime for SCHED_OTHER, Linux 6.12+). */
struct sched_attr_v1 {
	uint32_t size, sched_policy;
	uint64_t sched_flags;
	int32_t sched_nice;
	uint32_t sched_priority;
	uint64_t sched_runtime, sched_deadline, sched_period;
};

static void set_slice(long us)
{
	struct sched_attr_v1 attr = { .size = sizeof(attr), .sched_runtime = (uint64_t)us * 1000 };

	if (syscall(SYS_sched_setattr, 0, &attr, 0) != 0) {
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
		if (woken)
			add_sample(&wake_samples, started - posted);
		burn(burn_us);
		add_sample(&req_samples, now_ns(CLOCK_MONOTONIC) - posted);
		atomic_fetch_add(&completed, 1);
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

static void *msg_main(void *arg)
{
	struct msg *m = arg;
	int64_t interval = rps > 0 ? (int64_t)(1e9 * nmsg * batch / rps) : 0;
	int64_t next = now_ns(CLOCK_MONOTONIC);
	uint64_t rng = (uint64_t)next ^ (uint64_t)(uintptr_t)m;

	if (slice_us > 0)
		set_slice(slice_us);

	while (!atomic_load(&stop)) {
		if (interval > 0) {
			struct timespec ts;

			if (poisson) { /* exponential gaps of mean `interval` */
				double u;

				rng ^= rng << 13;
				rng ^= rng >> 7;
				rng ^= rng << 17;
				u = (double)(rng >> 11) / 9007199254740992.0;
				next += (int64_t)(-(double)interval * log1p(-u));
			} else {
				next += interval;
			}
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
		"usage: wakelat [-m msg_threads] [-t workers_per_msg] [-r rps] [-b batch] [-p] [-c burn_us] [-s sleep_us] [-S slice_us] [-d s]\n"
		"       wakelat --percentiles < numbers\n"
		"  -m  message threads (default 1)\n"
		"  -t  worker threads per message thread (default 4)\n"
		"  -r  requests per second over all message threads; 0: back to back (default 0)\n"
		"  -b  requests posted at once, every batch/rps seconds (default 1)\n"
		"  -p  Poisson arrivals: exponential gaps of the same mean\n"
		"  -c  CPU time each request burns, microseconds of thread CPU time (default 1000)\n"
		"  -s  sleep after each request, microseconds (default 0)\n"
		"  -S  workers ask EEVDF for this slice, microseconds (sched_setattr; default: the kernel's)\n"
		"  -d  run time in seconds (default 10)\n");
}

int main(int argc, char **argv)
{
	struct msg *msgs;
	struct timespec ts;
	int64_t start, elapsed;
	int opt;

	if (argc == 2 && strcmp(argv[1], "--percentiles") == 0)
		return percentiles_from_stdin();
	while ((opt = getopt(argc, argv, "m:t:r:b:pc:s:S:d:h")) != -1) {
		switch (opt) {
		case 'm': nmsg = (int)parse_long("wakelat", optarg, "-m", 1, 64); break;
		case 't': nworkers = (int)parse_long("wakelat", optarg, "-t", 1, 1024); break;
		case 'r': rps = parse_double("wakelat", optarg, "-r", 0, 1e7); break;
		case 'b': batch = (int)parse_long("wakelat", optarg, "-b", 1, 100000); break;
		case 'p': poisson = 1; break;
		case 'c': burn_us = parse_long("wakelat", optarg, "-c", 0, 10000000); break;
		case 's': sleep_us = parse_long("wakelat", optarg, "-s", 0, 10000000); break;
		case 'S': slice_us = parse_long("wakelat", optarg, "-S", 100, 100000); break;
		case 'd': duration_s = parse_double("wakelat", optarg, "-d", 0.01, 86400); break;
		default: usage(); return 2;
		}
	}
	if (optind != argc) {
		usage();
		return 2;
	}
	wake_samples.v = calloc(MAX_SAMPLES, sizeof(int64_t));
	req_samples.v = calloc(MAX_SAMPLES, sizeof(int64_t));
	msgs = calloc((size_t)nmsg, sizeof(*msgs));
	if (!wake_samples.v || !req_samples.v || !msgs) {
		fprintf(stderr, "wakelat: out of memory\n");
		return 1;
	}
	pthread_mutex_init(&wake_samples.lock, NULL);
	pthread_mutex_init(&req_samples.lock, NULL);
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
			pthread_mutex_init(&w->lock, NULL);
			pthread_cond_init(&w->cond, NULL);
			if (pthread_create(&w->tid, NULL, worker_main, w)) {
				fprintf(stderr, "wakelat: cannot create a worker thread\n");
				return 1;
			}
		}
	}
	start = now_ns(CLOCK_MONOTONIC);
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
		for (int j = 0; j < nworkers; j++)
			pthread_join(msgs[i].workers[j].tid, NULL);
	/* JSON: percentiles in microseconds, then the raw wakeup samples (us) for CDF plots */
	printf("{\"msg_threads\": %d, \"workers\": %d, \"target_rps\": %.1f, \"batch\": %d, \"poisson\": %s, \"burn_us\": %ld, "
	       "\"elapsed_s\": %.3f, \"posted\": %ld, \"dropped\": %ld, \"completed\": %ld, "
	       "\"rps\": %.1f, ",
	       nmsg, nmsg * nworkers, rps, batch, poisson ? "true" : "false", burn_us, (double)elapsed / 1e9, posted, dropped,
	       atomic_load(&completed), (double)atomic_load(&completed) * 1e9 / (double)elapsed);
	print_stats("wakeup_us", wake_samples.v, wake_samples.n, 1000);
	printf(", ");
	print_stats("request_us", req_samples.v, req_samples.n, 1000);
	printf(", \"samples_us\": [");
	for (long i = 0; i < wake_samples.n; i++)
		printf("%s%lld", i ? "," : "", (long long)(wake_samples.v[i] / 1000));
	printf("]}\n");
	return 0;
}
