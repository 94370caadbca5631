// SPDX-License-Identifier: MIT
/*
 * funcs - colocated function servers, one process (and optionally one cgroup) per function,
 * after the shape of the Azure Functions 2021 trace (the trace itself is not available here).
 *
 * N functions share an offered load of -l x -c CPUs (CPU-seconds per second). The load is
 * split by popularity, function i (0-based) getting a share proportional to 1 / (i + 1)^z
 * (-z, Zipf; the trace's invocation counts are heavily skewed: a few functions take most of
 * the load, most functions are light). Requests burn a log-normal CPU time (-m median, -s
 * sigma of the underlying normal; the trace's execution times are log-normal-like with a
 * heavy tail), measured in the worker's own CPU time so that a request costs the same on a
 * fast host and under emulation, capped at 100 x the median. Arrivals are bursty: each
 * function alternates exponentially distributed ON (mean -B ms) and OFF (mean -O ms)
 * phases and posts Poisson arrivals only while ON, at the rate that gives its mean load.
 * Each function serves its queue with -w worker threads.
 *
 * With -G DIR (the cgroup funcs runs in, cgroup v2 or the v1 cpu hierarchy), funcs makes one
 * child group DIR/func-i per function and moves function i's server into it (on v2 the
 * controlling process moves to DIR/ctl first, so DIR has no processes of its own); -L 0|1
 * writes each child's cpu.latency_awareness (-L 0 is accepted on kernels without the file).
 *
 * Output (JSON): offered, completed and unfinished requests, throughput, per function its
 * requests, p50/p99 and its group's cpu.load_credit at the end, completion-latency
 * percentiles from arrival to end of service (requests still queued or running at the end
 * count with their time so far, a lower bound), context switches and user/system CPU time of
 * all server threads (getrusage per thread), the machine's context switches and runqueue wait
 * from /proc/schedstat when the kernel has it (CONFIG_SCHEDSTATS), and the latency samples (us).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lat.h"

#define PROG "funcs"
#define MAX_FUNCS 1024
#define MAX_SAMPLES 1000000
#define QUEUE_LEN 65536

/* Shared between the servers (processes) and the parent. */
struct shared {
	atomic_long nsamples;
	atomic_long offered, completed, unfinished, dropped;
	atomic_long nvcsw, nivcsw, utime_us, stime_us;
	int64_t samples[MAX_SAMPLES]; /* completion latency, ns */
	short func[MAX_SAMPLES];      /* ... of a request of this function */
};

struct request {
	int64_t arrival;
	long service_us;
};

/* One function server (a process): a dispatcher and `workers` worker threads. */
struct server {
	int index;
	double rate;      /* mean arrivals per second */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct request queue[QUEUE_LEN];
	long head, tail;  /* queue[head % QUEUE_LEN] .. queue[(tail - 1) % QUEUE_LEN] */
	int stopping;
	uint64_t rng;
};

static int nfuncs = 4, workers = 2, aware = -1;
static long seed = 1;
static double load = 1.0, capacity, zipf = 1.0, median_us = 5000, sigma = 1.0;
static double on_ms = 1000, off_ms = 3000, duration_s = 10;
static const char *cgroup_dir;
static struct shared *shm;
static int64_t t_end;

static double uniform(uint64_t *s) /* (0, 1) */
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return ((double)(*s >> 11) + 0.5) / 9007199254740992.0;
}

static double exponential(uint64_t *s, double mean)
{
	return -mean * log(uniform(s));
}

static long lognormal_us(uint64_t *s)
{
	double z = sqrt(-2.0 * log(uniform(s))) * cos(2.0 * M_PI * uniform(s));
	double v = median_us * exp(sigma * z);

	if (v > 100.0 * median_us)
		v = 100.0 * median_us;
	return v < 1.0 ? 1 : (long)v;
}

static void sleep_until(int64_t t)
{
	struct timespec ts = { .tv_sec = t / 1000000000, .tv_nsec = t % 1000000000 };

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static int my_func; /* the function this server process serves */

static void add_sample(int64_t ns)
{
	long i = atomic_fetch_add(&shm->nsamples, 1);

	if (i < MAX_SAMPLES) {
		shm->samples[i] = ns;
		shm->func[i] = (short)my_func;
	}
}

static void account_thread(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_THREAD, &ru) == 0) {
		atomic_fetch_add(&shm->nvcsw, ru.ru_nvcsw);
		atomic_fetch_add(&shm->nivcsw, ru.ru_nivcsw);
		atomic_fetch_add(&shm->utime_us, ru.ru_utime.tv_sec * 1000000L + ru.ru_utime.tv_usec);
		atomic_fetch_add(&shm->stime_us, ru.ru_stime.tv_sec * 1000000L + ru.ru_stime.tv_usec);
	}
}

static void *worker_main(void *arg)
{
	struct server *sv = arg;

	for (;;) {
		struct request rq;

		pthread_mutex_lock(&sv->lock);
		while (sv->head == sv->tail && !sv->stopping)
			pthread_cond_wait(&sv->cond, &sv->lock);
		if (sv->stopping) {
			pthread_mutex_unlock(&sv->lock);
			break;
		}
		rq = sv->queue[sv->head % QUEUE_LEN];
		sv->head++;
		pthread_mutex_unlock(&sv->lock);

		burn(rq.service_us);
		if (now_ns(CLOCK_MONOTONIC) > t_end) { /* finished after the end: counted as unfinished */
			add_sample(t_end - rq.arrival);
			atomic_fetch_add(&shm->unfinished, 1);
			break;
		}
		add_sample(now_ns(CLOCK_MONOTONIC) - rq.arrival);
		atomic_fetch_add(&shm->completed, 1);
	}
	account_thread();
	return NULL;
}

/* The dispatcher: ON/OFF-modulated Poisson arrivals until t_end. */
static void dispatch(struct server *sv)
{
	double on_rate = sv->rate * (on_ms + off_ms) / on_ms; /* arrivals/s while ON */
	int64_t t = now_ns(CLOCK_MONOTONIC);
	/* start in a random phase, ON with probability on / (on + off) */
	int on = uniform(&sv->rng) < on_ms / (on_ms + off_ms);
	int64_t phase_end = t + (int64_t)(exponential(&sv->rng, on ? on_ms : off_ms) * 1e6);

	while (t < t_end) {
		if (!on) {
			t = phase_end;
			on = 1;
			phase_end = t + (int64_t)(exponential(&sv->rng, on_ms) * 1e6);
			continue;
		}
		t += (int64_t)(exponential(&sv->rng, 1.0 / on_rate) * 1e9);
		if (t >= phase_end) {
			t = phase_end;
			on = 0;
			phase_end = t + (int64_t)(exponential(&sv->rng, off_ms) * 1e6);
			continue;
		}
		if (t >= t_end)
			break;
		sleep_until(t);
		atomic_fetch_add(&shm->offered, 1);
		pthread_mutex_lock(&sv->lock);
		if (sv->tail - sv->head < QUEUE_LEN) {
			sv->queue[sv->tail % QUEUE_LEN] = (struct request){ t, lognormal_us(&sv->rng) };
			sv->tail++;
			pthread_cond_signal(&sv->cond);
		} else {
			atomic_fetch_add(&shm->dropped, 1);
		}
		pthread_mutex_unlock(&sv->lock);
	}
	sleep_until(t_end);
}

static void run_server(int index, double rate)
{
	static struct server sv; /* one per process */
	pthread_t tids[256];
	char pid[32];

	if (cgroup_dir) {
		char dir[4096];

		snprintf(dir, sizeof(dir), "%s/func-%d", cgroup_dir, index);
		snprintf(pid, sizeof(pid), "%d", (int)getpid());
		if (write_file(dir, "cgroup.procs", pid))
			die_errno(PROG, "cannot join", dir);
	}
	my_func = index;
	sv.index = index;
	sv.rate = rate;
	/* the same seed gives the same arrivals and request sizes: variants compare like for like */
	sv.rng = 0x9e3779b97f4a7c15ULL * (uint64_t)(index + 1) ^ (uint64_t)seed * 0xbf58476d1ce4e5b9ULL;
	for (int i = 0; i < 8; i++)
		uniform(&sv.rng);
	pthread_mutex_init(&sv.lock, NULL);
	pthread_cond_init(&sv.cond, NULL);
	for (int i = 0; i < workers; i++)
		if (pthread_create(&tids[i], NULL, worker_main, &sv)) {
			fprintf(stderr, PROG ": cannot create a worker thread\n");
			exit(1);
		}
	dispatch(&sv);
	pthread_mutex_lock(&sv.lock);
	sv.stopping = 1;
	/* requests still queued at the end: their latency so far is a lower bound */
	for (long i = sv.head; i < sv.tail; i++) {
		add_sample(t_end - sv.queue[i % QUEUE_LEN].arrival);
		atomic_fetch_add(&shm->unfinished, 1);
	}
	sv.head = sv.tail;
	pthread_cond_broadcast(&sv.cond);
	pthread_mutex_unlock(&sv.lock);
	for (int i = 0; i < workers; i++)
		pthread_join(tids[i], NULL);
	account_thread(); /* the dispatcher */
	exit(0);
}

/* Make DIR/func-i; on v2 first move this process to DIR/ctl and enable the cpu controller. */
static void make_groups(void)
{
	char dir[4096];

	cg_leave_for_children(PROG, cgroup_dir);
	for (int i = 0; i < nfuncs; i++) {
		snprintf(dir, sizeof(dir), "%s/func-%d", cgroup_dir, i);
		cg_make_child(PROG, dir, aware);
	}
}

/* /proc/schedstat summed over CPUs: context switches, time on CPUs, time waiting on runqueues. */
struct schedstat {
	int ok;
	long long sched_count, rq_cpu_time_ns, run_delay_ns;
};

static struct schedstat read_schedstat(void)
{
	struct schedstat st = { 0 };
	char line[512];
	FILE *f = fopen("/proc/schedstat", "r");

	if (!f)
		return st;
	while (fgets(line, sizeof(line), f)) {
		long long v[9];
		int cpu;

		if (sscanf(line, "cpu%d %lld %lld %lld %lld %lld %lld %lld %lld %lld", &cpu, &v[0], &v[1], &v[2],
			   &v[3], &v[4], &v[5], &v[6], &v[7], &v[8]) == 10) {
			st.ok = 1;
			st.sched_count += v[2];
			st.rq_cpu_time_ns += v[6];
			st.run_delay_ns += v[7];
		}
	}
	fclose(f);
	return st;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: funcs [-n functions] [-l load] [-c cpus] [-z zipf] [-m median_us] [-s sigma]\n"
		"             [-B on_ms] [-O off_ms] [-w workers] [-d s] [-S seed] [-G cgroup_dir [-L 0|1]]\n"
		"  -n  functions, one server process each (default 4)\n"
		"  -l  offered load as a fraction of -c CPUs (default 1.0)\n"
		"  -c  capacity in CPUs (default: the CPUs online)\n"
		"  -z  Zipf exponent of the functions' shares of the load (default 1.0; 0: equal)\n"
		"  -m  median CPU time of a request, us (default 5000)\n"
		"  -s  sigma of the log-normal request CPU time (default 1.0)\n"
		"  -B  mean ON phase, ms (default 1000); -O mean OFF phase, ms (default 3000)\n"
		"  -w  worker threads per function (default 2)\n"
		"  -d  run time in seconds (default 10)\n"
		"  -S  seed of arrivals and request sizes (default 1): the same seed, the same requests\n"
		"  -G  make a child cgroup per function under this cgroup directory\n"
		"  -L  write 0 or 1 to each child's cpu.latency_awareness\n");
}

int main(int argc, char **argv)
{
	double shares[MAX_FUNCS], total = 0, mean_us;
	struct schedstat before, after;
	pid_t pids[MAX_FUNCS];
	int opt, failed = 0;
	long n;

	capacity = get_nprocs();
	while ((opt = getopt(argc, argv, "n:l:c:z:m:s:B:O:w:d:G:L:S:h")) != -1) {
		switch (opt) {
		case 'n': nfuncs = (int)parse_long(PROG, optarg, "-n", 1, MAX_FUNCS); break;
		case 'l': load = parse_double(PROG, optarg, "-l", 0.001, 100); break;
		case 'c': capacity = parse_double(PROG, optarg, "-c", 0.01, 4096); break;
		case 'z': zipf = parse_double(PROG, optarg, "-z", 0, 10); break;
		case 'm': median_us = parse_double(PROG, optarg, "-m", 1, 1e7); break;
		case 's': sigma = parse_double(PROG, optarg, "-s", 0, 5); break;
		case 'B': on_ms = parse_double(PROG, optarg, "-B", 1, 1e7); break;
		case 'O': off_ms = parse_double(PROG, optarg, "-O", 0, 1e7); break;
		case 'w': workers = (int)parse_long(PROG, optarg, "-w", 1, 256); break;
		case 'd': duration_s = parse_double(PROG, optarg, "-d", 0.01, 86400); break;
		case 'G': cgroup_dir = optarg; break;
		case 'L': aware = (int)parse_long(PROG, optarg, "-L", 0, 1); break;
		case 'S': seed = parse_long(PROG, optarg, "-S", 1, 1000000000); break;
		default: usage(); return 2;
		}
	}
	if (optind != argc || (aware >= 0 && !cgroup_dir)) {
		usage();
		return 2;
	}
	shm = mmap(NULL, sizeof(*shm), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (shm == MAP_FAILED) {
		fprintf(stderr, PROG ": cannot map shared memory: %s\n", strerror(errno));
		return 1;
	}
	if (cgroup_dir)
		make_groups();

	/* mean of the capped log-normal ~ median * exp(sigma^2 / 2) (the cap is far in the tail) */
	mean_us = median_us * exp(sigma * sigma / 2);
	for (int i = 0; i < nfuncs; i++) {
		shares[i] = 1.0 / pow(i + 1, zipf);
		total += shares[i];
	}
	before = read_schedstat();
	t_end = now_ns(CLOCK_MONOTONIC) + (int64_t)(duration_s * 1e9);
	for (int i = 0; i < nfuncs; i++) {
		double rate = load * capacity * shares[i] / total / (mean_us / 1e6);

		pids[i] = fork();
		if (pids[i] < 0) {
			fprintf(stderr, PROG ": fork: %s\n", strerror(errno));
			for (int j = 0; j < i; j++)
				kill(pids[j], SIGKILL);
			return 1;
		}
		if (pids[i] == 0)
			run_server(i, rate);
	}
	for (int i = 0; i < nfuncs; i++) {
		int status;

		if (waitpid(pids[i], &status, 0) != pids[i] || !WIFEXITED(status) || WEXITSTATUS(status))
			failed++;
	}
	after = read_schedstat();
	if (failed) {
		fprintf(stderr, PROG ": %d function server(s) failed\n", failed);
		return 1;
	}
	n = atomic_load(&shm->nsamples);
	if (n > MAX_SAMPLES)
		n = MAX_SAMPLES;
	printf("{\"workload\": \"funcs\", \"functions\": %d, \"load\": %g, \"capacity_cpus\": %g, \"zipf\": %g, "
	       "\"median_us\": %g, \"sigma\": %g, \"on_ms\": %g, \"off_ms\": %g, \"workers\": %d, "
	       "\"latency_awareness\": %d, \"seed\": %ld, \"duration_s\": %g, \"offered\": %ld, \"completed\": %ld, "
	       "\"unfinished\": %ld, \"dropped\": %ld, \"throughput_rps\": %.2f, \"nvcsw\": %ld, \"nivcsw\": %ld, "
	       "\"utime_s\": %.3f, \"stime_s\": %.3f, ",
	       nfuncs, load, capacity, zipf, median_us, sigma, on_ms, off_ms, workers, aware, seed, duration_s,
	       atomic_load(&shm->offered), atomic_load(&shm->completed), atomic_load(&shm->unfinished),
	       atomic_load(&shm->dropped), (double)atomic_load(&shm->completed) / duration_s,
	       atomic_load(&shm->nvcsw), atomic_load(&shm->nivcsw), (double)atomic_load(&shm->utime_us) / 1e6,
	       (double)atomic_load(&shm->stime_us) / 1e6);
	/* sched_count needs kernel.sched_schedstats=1; run_delay (SCHED_INFO) is always kept */
	if (before.ok && after.ok)
		printf("\"schedstat\": {\"sched_count\": %lld, \"rq_cpu_time_s\": %.3f, \"run_delay_s\": %.3f}, ",
		       after.sched_count - before.sched_count, (after.rq_cpu_time_ns - before.rq_cpu_time_ns) / 1e9,
		       (after.run_delay_ns - before.run_delay_ns) / 1e9);
	/* per function: requests, median and p99 latency, and the group's load credit if any */
	printf("\"per_function\": [");
	{
		int64_t *v = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));

		for (int f = 0; f < nfuncs && v; f++) {
			long k = 0;
			char path[4096], buf[64] = "";
			long credit = -1;

			for (long i = 0; i < n; i++)
				if (shm->func[i] == f)
					v[k++] = shm->samples[i];
			qsort(v, (size_t)k, sizeof(*v), cmp64);
			if (cgroup_dir) {
				FILE *cf;

				snprintf(path, sizeof(path), "%s/func-%d/cpu.load_credit", cgroup_dir, f);
				cf = fopen(path, "r");
				if (cf && fgets(buf, sizeof(buf), cf))
					credit = atol(buf);
				if (cf)
					fclose(cf);
			}
			printf("%s{\"requests\": %ld, \"p50_us\": %.0f, \"p99_us\": %.0f, \"load_credit\": %ld}",
			       f ? ", " : "", k, k ? (double)percentile(v, k, 50) / 1000 : 0.0,
			       k ? (double)percentile(v, k, 99) / 1000 : 0.0, credit);
		}
		free(v);
	}
	printf("], ");
	print_stats("latency_us", shm->samples, n, 1000);
	printf(", \"samples_us\": [");
	for (long i = 0; i < n; i++)
		printf("%s%lld", i ? "," : "", (long long)(shm->samples[i] / 1000));
	printf("]}\n");
	if (cgroup_dir)
		for (int i = 0; i < nfuncs; i++) {
			char dir[4096];

			snprintf(dir, sizeof(dir), "%s/func-%d", cgroup_dir, i);
			rmdir(dir); /* empty now; whoever made cgroup_dir removes the rest */
		}
	return 0;
}
