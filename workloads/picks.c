// SPDX-License-Identifier: MIT
/*
 * picks - the cost of a scheduling decision with many tasks queued on one CPU.
 *
 * -t tasks (processes) spread round-robin over -g child groups of the cgroup -G, plus -P
 * "plain" tasks in one more child group, all pinned to one CPU (-C, default the last one)
 * and always runnable: each calls sched_yield() in a loop, so every call is a pass through
 * schedule() that picks among all of them. The controlling process sleeps on another CPU.
 *
 * -L 0|1 writes each of the -g groups' cpu.latency_awareness (LAGS); the plain group is never
 * latency-aware. A plain task keeps the run queue "mixed", where LAGS only considers eligible
 * tasks: then, as without LAGS, a yield moves the task behind the others and the next one runs,
 * so both variants switch on every yield and differ only in what the pick itself costs.
 *
 * Output (JSON, last line): yields, the CPU time of all tasks (their own clocks, from the
 * common start to the stop), ns of CPU time per yield (a syscall, a pick and usually a
 * context switch), context switches per yield (to check the premise above) and the spread
 * of yields over tasks (min, median, max per task).
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
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

#define PROG "picks"
#define MAX_TASKS 4096
#define MAX_GROUPS 1024

struct task_result {
	int64_t yields, cpu_ns, switches;
};

struct shared {
	atomic_int ready, stop;
	struct task_result task[MAX_TASKS];
};

static struct shared *shm;
static const char *cgroup_dir;
static int ntasks = 64, ngroups = 16, nplain = 1, aware = -1, cpu = -1;
static double duration_s = 5;
static int go_pipe[2]; /* the start: closing the write end wakes every task at once */

static void group_dir(char *buf, size_t len, int group)
{
	if (group < ngroups)
		snprintf(buf, len, "%s/pick-%d", cgroup_dir, group);
	else
		snprintf(buf, len, "%s/plain", cgroup_dir);
}

static void pin(int to)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(to, &set);
	if (sched_setaffinity(0, sizeof(set), &set)) {
		fprintf(stderr, PROG ": cannot pin to CPU %d: %s\n", to, strerror(errno));
		exit(1);
	}
}

/* Task i: join its group, wait for the start, yield until told to stop. */
static void run_task(int i, int group)
{
	struct task_result *r = &shm->task[i];
	struct rusage before, after;
	int64_t t0, yields = 0;

	if (cgroup_dir) {
		char dir[4096], pid[32];

		group_dir(dir, sizeof(dir), group);
		snprintf(pid, sizeof(pid), "%d", (int)getpid());
		if (write_file(dir, "cgroup.procs", pid))
			die_errno(PROG, "cannot join", dir);
	}
	pin(cpu);
	close(go_pipe[1]);
	atomic_fetch_add(&shm->ready, 1);
	{
		/* block until the start (EOF), not poll: a thousand pollers would flood the CPU */
		char c;

		while (read(go_pipe[0], &c, 1) < 0 && errno == EINTR)
			;
	}
	getrusage(RUSAGE_SELF, &before);
	t0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
	while (!atomic_load_explicit(&shm->stop, memory_order_relaxed)) {
		sched_yield();
		yields++;
	}
	r->cpu_ns = now_ns(CLOCK_THREAD_CPUTIME_ID) - t0;
	getrusage(RUSAGE_SELF, &after);
	/* a yield that switches is counted as involuntary */
	r->switches = after.ru_nvcsw - before.ru_nvcsw + after.ru_nivcsw - before.ru_nivcsw;
	r->yields = yields;
	exit(0);
}

/* The groups (on v2 this process first moves to DIR/ctl, so that DIR has no processes). */
static void make_groups(void)
{
	char dir[4096];

	cg_leave_for_children(PROG, cgroup_dir);
	for (int g = 0; g < ngroups + (nplain > 0); g++) {
		group_dir(dir, sizeof(dir), g);
		cg_make_child(PROG, dir, g < ngroups ? aware : -1);
	}
}

static void remove_groups(void)
{
	char dir[4096];

	if (!cgroup_dir)
		return;
	for (int g = 0; g < ngroups + (nplain > 0); g++) {
		group_dir(dir, sizeof(dir), g);
		rmdir(dir); /* empty once the tasks are reaped; whoever made cgroup_dir removes the rest */
	}
}

static void usage(void)
{
	fprintf(stderr,
		"usage: picks [-t tasks] [-g groups] [-P plain] [-C cpu] [-d s] [-G cgroup_dir [-L 0|1]]\n"
		"  -t  yielding tasks spread over the groups (default 64)\n"
		"  -g  child groups of -G for them (default 16)\n"
		"  -P  yielding tasks in one more group that is never latency-aware (default 1)\n"
		"  -C  the CPU all tasks run on (default the last one online)\n"
		"  -d  measured time in seconds (default 5)\n"
		"  -G  make the child groups under this cgroup directory (without it: no groups)\n"
		"  -L  write 0 or 1 to the -g groups' cpu.latency_awareness\n");
}

int main(int argc, char **argv)
{
	int total, opt, failed = 0, ncpu = get_nprocs();
	int64_t yields = 0, cpu_ns = 0, switches = 0, per_task[MAX_TASKS];
	struct timespec step = { .tv_sec = 0, .tv_nsec = 10000000 };
	static pid_t pids[MAX_TASKS];
	int64_t t_end;

	while ((opt = getopt(argc, argv, "t:g:P:C:d:G:L:h")) != -1) {
		switch (opt) {
		case 't': ntasks = (int)parse_long(PROG, optarg, "-t", 1, MAX_TASKS - 16); break;
		case 'g': ngroups = (int)parse_long(PROG, optarg, "-g", 1, MAX_GROUPS); break;
		case 'P': nplain = (int)parse_long(PROG, optarg, "-P", 0, 16); break;
		case 'C': cpu = (int)parse_long(PROG, optarg, "-C", 0, ncpu - 1); break;
		case 'd': duration_s = parse_double(PROG, optarg, "-d", 0.1, 86400); break;
		case 'G': cgroup_dir = optarg; break;
		case 'L': aware = (int)parse_long(PROG, optarg, "-L", 0, 1); break;
		default: usage(); return 2;
		}
	}
	if (optind != argc || (aware >= 0 && !cgroup_dir)) {
		usage();
		return 2;
	}
	if (cpu < 0)
		cpu = ncpu - 1;
	total = ntasks + nplain;
	shm = mmap(NULL, sizeof(*shm), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (shm == MAP_FAILED) {
		fprintf(stderr, PROG ": cannot map shared memory: %s\n", strerror(errno));
		return 1;
	}
	stop_on_signals();
	if (cgroup_dir)
		make_groups();
	if (ncpu > 1)
		pin(cpu ? 0 : 1); /* out of the way of the measured CPU */

	if (pipe(go_pipe)) {
		fprintf(stderr, PROG ": pipe: %s\n", strerror(errno));
		return 1;
	}
	for (int i = 0; i < total; i++) {
		pids[i] = fork();
		if (pids[i] < 0) {
			fprintf(stderr, PROG ": fork: %s\n", strerror(errno));
			total = i;
			failed = 1;
			break;
		}
		if (pids[i] == 0)
			run_task(i, i < ntasks ? i % ngroups : ngroups);
	}
	while (!failed && !lat_stop && atomic_load(&shm->ready) < total) {
		int status;

		if (waitpid(-1, &status, WNOHANG) > 0)
			failed = 1; /* a task died before the start (it said why) */
		nanosleep(&step, NULL);
	}
	if (failed || lat_stop)
		atomic_store(&shm->stop, 1);
	close(go_pipe[1]); /* the start */
	t_end = now_ns(CLOCK_MONOTONIC) + (int64_t)(duration_s * 1e9);
	while (!failed && !lat_stop && now_ns(CLOCK_MONOTONIC) < t_end)
		nanosleep(&step, NULL);
	atomic_store(&shm->stop, 1);
	for (int i = 0; i < total; i++) {
		int status;

		if (waitpid(pids[i], &status, 0) == pids[i] && (!WIFEXITED(status) || WEXITSTATUS(status)))
			failed = 1;
	}
	remove_groups();
	if (lat_stop) {
		fprintf(stderr, PROG ": interrupted\n");
		return 1;
	}
	if (failed) {
		fprintf(stderr, PROG ": a task failed\n");
		return 1;
	}
	for (int i = 0; i < total; i++) {
		yields += shm->task[i].yields;
		cpu_ns += shm->task[i].cpu_ns;
		switches += shm->task[i].switches;
		per_task[i] = shm->task[i].yields;
	}
	qsort(per_task, (size_t)total, sizeof(per_task[0]), cmp64);
	printf("{\"workload\": \"picks\", \"tasks\": %d, \"groups\": %d, \"plain\": %d, \"latency_awareness\": %d, "
	       "\"cpu\": %d, \"duration_s\": %g, \"yields\": %lld, \"cpu_s\": %.4f, \"ns_per_yield\": %.1f, "
	       "\"switches_per_yield\": %.4f, \"yields_per_task\": {\"min\": %lld, \"median\": %lld, \"max\": %lld}}\n",
	       ntasks, ngroups, nplain, aware, cpu, duration_s, (long long)yields, cpu_ns / 1e9,
	       yields ? (double)cpu_ns / (double)yields : 0.0, yields ? (double)switches / (double)yields : 0.0,
	       (long long)per_task[0], (long long)per_task[total / 2], (long long)per_task[total - 1]);
	return 0;
}
