/* SPDX-License-Identifier: GPL-2.0 */
/*
 * scx_bwlab's loader: checks that the kernel hands cpu.max to sched_ext schedulers, loads
 * the scheduler, and writes each cgroup's bandwidth counters (cpu.stat's, which stay frozen
 * under sched_ext) as JSON until stopped. Stopped (SIGINT, SIGTERM) or ejected, every task
 * goes back to CFS, whose bandwidth control applies the same cpu.max again.
 */
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <bpf/bpf.h>
#include <scx/common.h>
#include "scx_bwlab.h"
#include "scx_bwlab.bpf.skel.h"

static const char help_fmt[] =
	"scx_bwlab: cpu.max enforced without throttling a group whose demand fits its quota.\n"
	"\n"
	"Usage: %s [-s SLICE_US] [-o FILE] [-i MS] [-l CGROUP]... [-v]\n"
	"\n"
	"  -s SLICE_US  slice of each run, 100..100000 us (default 5000)\n"
	"  -o FILE      write the cgroups' counters there (JSON), every interval and at exit, and\n"
	"               to FILE.now at once on SIGUSR1 (default: standard output at exit only)\n"
	"  -i MS        the interval of -o, 10..60000 ms (default 1000)\n"
	"  -l CGROUP    a latency-aware cgroup (LAGS), its path absolute or under /sys/fs/cgroup;\n"
	"               up to 64; one not made yet is marked within an interval of its mkdir\n"
	"  -v           libbpf's messages (the verifier's log of a refused load)\n"
	"  -h           this help\n";

#define MAX_LAGS 64
#define CGROUP2_MAGIC 0x63677270 /* CGROUP2_SUPER_MAGIC */

static bool verbose, exit_req, quiet_load;
static const char *lags_paths[MAX_LAGS];
static int nr_lags;

static int libbpf_print_fn(enum libbpf_print_level level, const char *format, va_list args)
{
	if ((level == LIBBPF_DEBUG && !verbose) || quiet_load)
		return 0;
	return vfprintf(stderr, format, args);
}

/* /sys/kernel/sched_ext/state's word (and the ops loaded, if any) for a message */
static const char *sched_ext_state(char *buf, size_t len)
{
	FILE *f = fopen("/sys/kernel/sched_ext/state", "r");
	char ops[32] = "";

	if (!f || !fgets(buf, len, f))
		snprintf(buf, len, "unknown");
	if (f)
		fclose(f);
	buf[strcspn(buf, "\n")] = 0;
	f = fopen("/sys/kernel/sched_ext/root/ops", "r");
	if (f && fgets(ops, sizeof(ops), f)) {
		ops[strcspn(ops, "\n")] = 0;
		snprintf(buf + strlen(buf), len - strlen(buf), ", %s loaded", ops);
	}
	if (f)
		fclose(f);
	return buf;
}

/* A -l path: absolute, or under /sys/fs/cgroup. */
static const char *path_of(const char *arg, char *buf, size_t len)
{
	snprintf(buf, len, "%s%s", arg[0] == '/' ? "" : "/sys/fs/cgroup/", arg);
	return buf;
}

/* A number in [lo, hi] from an option's text, or exit with a one-line error. */
static unsigned long number(const char *opt, const char *text, unsigned long lo, unsigned long hi)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(text, &end, 10);
	if (errno || end == text || *end || text[0] == '-' || v < lo || v > hi) {
		fprintf(stderr, "scx_bwlab: %s %s: expected a whole number in %lu..%lu\n", opt, text, lo, hi);
		exit(2);
	}
	return v;
}

/*
 * Keep the scheduler's lags_groups map (fd) to the cgroups the -l paths name now, by id (on
 * cgroup v2 the directory's inode number): a path made later is marked once made, one made
 * again as another cgroup moves its mark. fd -1, before loading: check them (the root, or a
 * path that is not a cgroup v2 directory, is an error: exit 2; one not made yet is said).
 */
static void mark_lags(int fd)
{
	static __u64 marked[MAX_LAGS]; /* what each path named at the last pass; 0: nothing */
	char path[4096], parent[4200];
	struct statfs fs;
	struct stat st;
	__u32 one = 1;
	__u64 id;
	int i;

	for (i = 0; i < nr_lags; i++) {
		bool found = !stat(path_of(lags_paths[i], path, sizeof(path)), &st);

		id = found && S_ISDIR(st.st_mode) && !statfs(path, &fs) && fs.f_type == CGROUP2_MAGIC ? st.st_ino : 0;
		if (fd < 0) {
			snprintf(parent, sizeof(parent), "%s/..", path);
			if (!found) {
				fprintf(stderr, "scx_bwlab: -l %s: no such cgroup yet (marked once made)\n", lags_paths[i]);
			} else if (!id) {
				fprintf(stderr, "scx_bwlab: -l %s: not a cgroup v2 directory\n", lags_paths[i]);
				exit(2);
			} else if (statfs(parent, &fs) || fs.f_type != CGROUP2_MAGIC) {
				fprintf(stderr, "scx_bwlab: -l %s: the root cgroup cannot be latency-aware\n", lags_paths[i]);
				exit(2);
			}
			continue;
		}
		if (id == marked[i])
			continue;
		if (marked[i])
			bpf_map_delete_elem(fd, &marked[i]);
		marked[i] = 0;
		if (id && bpf_map_update_elem(fd, &id, &one, BPF_ANY))
			fprintf(stderr, "scx_bwlab: -l %s: cannot mark it: %s\n", lags_paths[i], strerror(errno));
		else
			marked[i] = id;
	}
}

static void write_account(FILE *f, const struct account *a, bool first, bool la, __u64 now)
{
	fprintf(f, "%s\n    {\"cgid\": %" PRIu64 ", \"period_us\": %" PRIu64 ", \"quota_us\": ", first ? "" : ",",
		(uint64_t)a->cgid, (uint64_t)(a->period_ns / 1000));
	if (a->quota_ns == NO_LIMIT)
		fprintf(f, "null");
	else
		fprintf(f, "%" PRIu64, (uint64_t)(a->quota_ns / 1000));
	fprintf(f,
		", \"burst_us\": %" PRIu64 ", \"nr_periods\": %" PRIu64 ", \"nr_throttled\": %" PRIu64
		", \"throttled_usec\": %" PRIu64 ", \"nr_bursts\": %" PRIu64 ", \"burst_usec\": %" PRIu64
		", \"usage_usec\": %" PRIu64 ", \"throttled\": %s, \"lags\": %s, \"load_usec\": %" PRIu64 "}",
		(uint64_t)(a->burst_ns / 1000), (uint64_t)a->nr_periods, (uint64_t)a->nr_throttled,
		(uint64_t)(a->throttled_ns / 1000), (uint64_t)a->nr_bursts, (uint64_t)(a->burst_time_ns / 1000),
		(uint64_t)(a->usage_ns / 1000), a->throttled ? "true" : "false", la ? "true" : "false",
		(uint64_t)(lags_decayed(a->load_ns, a->load_at, now) / 1000));
}

/* Every cgroup that has or had a quota, or a LAGS load, as JSON. */
static void write_stats(const struct scx_bwlab *skel, int fd, int lags_fd, FILE *f, const char *state)
{
	__u64 key, next, *prev = NULL, now_ns;
	struct account a;
	bool first = true;
	struct timespec now;
	__u32 flag;

	clock_gettime(CLOCK_MONOTONIC, &now); /* bpf_ktime_get_ns()'s clock */
	now_ns = (__u64)now.tv_sec * 1000000000ULL + now.tv_nsec;
	fprintf(f, "{\"scheduler\": \"bwlab\", \"state\": \"%s\", \"monotonic_s\": %.6f, ", state,
		now.tv_sec + now.tv_nsec / 1e9);
	fprintf(f, "\"lags_kicks\": %" PRIu64 ", \"lags_picks\": %" PRIu64 ", \"cpus_online\": %" PRIu64
		", \"cpus_offline\": %" PRIu64 ", \"cgroups\": [", (uint64_t)skel->bss->nr_lags_kicks,
		(uint64_t)skel->bss->nr_lags_picks, (uint64_t)skel->bss->nr_cpu_online,
		(uint64_t)skel->bss->nr_cpu_offline);
	while (bpf_map_get_next_key(fd, prev, &next) == 0) {
		key = next;
		prev = &key;
		if (bpf_map_lookup_elem(fd, &key, &a))
			continue; /* removed since */
		if (a.quota_ns == NO_LIMIT && !a.usage_ns && !a.nr_periods && !a.load_ns)
			continue;
		write_account(f, &a, first, !bpf_map_lookup_elem(lags_fd, &key, &flag), now_ns);
		first = false;
	}
	fprintf(f, "%s]}\n", first ? "" : "\n  ");
}

/* The stats to `path`, whole or not at all: written beside it, then renamed over it. */
static int save_stats(const struct scx_bwlab *skel, int fd, int lags_fd, const char *path, const char *state)
{
	char tmp[4096];
	FILE *f;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	f = fopen(tmp, "w");
	if (!f)
		return -errno;
	write_stats(skel, fd, lags_fd, f, state);
	if (ferror(f) | fclose(f) || rename(tmp, path)) {
		int err = -errno;

		unlink(tmp);
		return err;
	}
	return 0;
}

int main(int argc, char **argv)
{
	unsigned long slice_us = 5000, interval_ms = 1000;
	const char *out = NULL;
	bool ejected, failed = false;
	struct scx_bwlab *skel;
	struct bpf_link *link;
	struct bpf_program *prog;
	char msg[128], state[64];
	struct timespec pause;
	char now_path[4096];
	sigset_t sigs;
	int sig;
	__u64 ecode;
	int opt, fd, lags_fd, err, ncpus;

	while ((opt = getopt(argc, argv, ":s:o:i:l:vh")) != -1) {
		switch (opt) {
		case 's':
			slice_us = number("-s", optarg, 100, 100000);
			break;
		case 'o':
			out = optarg;
			break;
		case 'i':
			interval_ms = number("-i", optarg, 10, 60000);
			break;
		case 'l':
			if (nr_lags == MAX_LAGS) {
				fprintf(stderr, "scx_bwlab: -l: at most %d cgroups\n", MAX_LAGS);
				return 2;
			}
			lags_paths[nr_lags++] = optarg;
			break;
		case 'v':
			verbose = true;
			break;
		case 'h':
			printf(help_fmt, basename(argv[0]));
			return 0;
		case ':':
			fprintf(stderr, "scx_bwlab: -%c needs a value (-h: usage)\n", optopt);
			return 2;
		default:
			fprintf(stderr, "scx_bwlab: unknown option -%c (-h: usage)\n", optopt);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "scx_bwlab: unexpected argument %s (-h: usage)\n", argv[optind]);
		return 2;
	}
	if (out && snprintf(now_path, sizeof(now_path), "%s.now", out) >= (int)sizeof(now_path)) {
		fprintf(stderr, "scx_bwlab: -o %s: path too long\n", out);
		return 2;
	}
	mark_lags(-1); /* bad input first, before what the machine lacks */
	if (access("/sys/kernel/sched_ext/state", R_OK)) {
		fprintf(stderr, "scx_bwlab: this kernel has no sched_ext (CONFIG_SCHED_CLASS_EXT)\n");
		return 1;
	}
	/* Before opening: SCX_OPS_OPEN drops an op the kernel lacks with only a warning, and a
	 * scheduler without the bandwidth op leaves cpu.max unenforced for every task it takes.
	 * No partial mode either (SCX_OPS_SWITCH_PARTIAL): a SCHED_EXT task of a limited group
	 * would run unlimited all the same, and the kernels without the op (6.12-6.16) lack the
	 * kfuncs this scheduler calls (scx_bpf_dsq_insert is 6.13's; tests/test_scx_real.py). */
	if (!__COMPAT_struct_has_field("sched_ext_ops", "cgroup_set_bandwidth")) {
		fprintf(stderr, "scx_bwlab: this kernel does not hand cpu.max to sched_ext schedulers "
				"(no sched_ext_ops.cgroup_set_bandwidth, added in 6.17): tasks of groups "
				"with a cpu.max would run unlimited; refusing\n");
		return 1;
	}

	libbpf_set_print(libbpf_print_fn);
	/* taken by sigtimedwait() in the loop, never by a handler: a SIGUSR1 that comes between
	 * a check and a sleep cannot be lost */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGUSR1);
	sigprocmask(SIG_BLOCK, &sigs, NULL);

	ncpus = libbpf_num_possible_cpus();
	if (ncpus <= 0) {
		fprintf(stderr, "scx_bwlab: cannot count the possible CPUs (%d)\n", ncpus);
		return 1;
	}
	skel = SCX_OPS_OPEN(bwlab_ops, scx_bwlab);
	skel->rodata->slice_ns = slice_us * 1000;
	skel->rodata->nr_cpus = ncpus;
	skel->rodata->lags_enabled = nr_lags > 0;
	/* SCX_OPS_LOAD, but a refusal is one line (the verifier's log with -v), not an SCX_BUG */
	UEI_SET_SIZE(skel, bwlab_ops, uei);
	quiet_load = !verbose;
	err = scx_bwlab__load(skel);
	quiet_load = false;
	if (err) {
		libbpf_strerror(err, msg, sizeof(msg));
		if (err == -EPERM)
			fprintf(stderr, "scx_bwlab: loading BPF programs needs root (CAP_BPF, CAP_SYS_ADMIN): %s\n", msg);
		else
			fprintf(stderr, "scx_bwlab: the kernel refused the scheduler's BPF programs (%s): they are "
					"built for 7.3's sched_ext%s\n", msg, verbose ? "" : " (-v: the verifier's log)");
		scx_bwlab__destroy(skel);
		return 1;
	}
	bpf_object__for_each_program(prog, skel->obj)
		if (bpf_program__type(prog) != BPF_PROG_TYPE_STRUCT_OPS)
			__scx_ops_assoc_prog(prog, skel->maps.bwlab_ops, "bwlab_ops");
	lags_fd = bpf_map__fd(skel->maps.lags_groups);
	mark_lags(lags_fd); /* before any task is scheduled */
	/* SCX_OPS_ATTACH, but a refusal is one line: another sched_ext scheduler is loaded, or
	 * the last one is still leaving (EEXIST, EBUSY), or ops.init failed */
	__SCX_OPS_DISABLE_AUTOATTACH(skel, bwlab_ops);
	quiet_load = !verbose;
	err = scx_bwlab__attach(skel);
	link = err ? NULL : bpf_map__attach_struct_ops(skel->maps.bwlab_ops);
	err = err ?: (link ? 0 : -errno);
	quiet_load = false;
	if (err) {
		libbpf_strerror(err, msg, sizeof(msg));
		fprintf(stderr, "scx_bwlab: the kernel did not enable the scheduler (%s; sched_ext state: %s)\n", msg,
			sched_ext_state(state, sizeof(state)));
		scx_bwlab__destroy(skel);
		return 1;
	}
	fd = bpf_map__fd(skel->maps.accounts);
	fprintf(stderr, "scx_bwlab: loaded (slice %lu us)\n", slice_us);

	pause.tv_sec = interval_ms / 1000;
	pause.tv_nsec = (interval_ms % 1000) * 1000000L;
	while (!UEI_EXITED(skel, uei)) {
		mark_lags(lags_fd);
		if (out && (err = save_stats(skel, fd, lags_fd, out, "running"))) {
			fprintf(stderr, "scx_bwlab: cannot write %s: %s\n", out, strerror(-err));
			failed = exit_req = true;
			break;
		}
		sig = sigtimedwait(&sigs, NULL, &pause);
		if (sig == SIGINT || sig == SIGTERM) {
			exit_req = true;
			break;
		}
		/* SIGUSR1: a reader wants the counters now. They go to FILE.now, which it removed
		 * before asking: a write to FILE under way then could not answer it. -l groups made
		 * since are marked first: a reader that made one and asked before starting its tasks
		 * (bwlab's plan) starts them in a marked group. */
		if (sig == SIGUSR1)
			mark_lags(lags_fd);
		if (sig == SIGUSR1 && out && (err = save_stats(skel, fd, lags_fd, now_path, "running"))) {
			fprintf(stderr, "scx_bwlab: cannot write %s: %s\n", now_path, strerror(-err));
			failed = exit_req = true;
			break;
		}
	}

	ejected = !exit_req; /* the scheduler left by itself */
	/* the counters as the scheduler leaves (before the link goes: the maps are its) */
	if (out) {
		err = save_stats(skel, fd, lags_fd, out, "stopped");
		if (err) {
			fprintf(stderr, "scx_bwlab: cannot write %s: %s\n", out, strerror(-err));
			failed = true;
		}
	} else {
		write_stats(skel, fd, lags_fd, stdout, "stopped");
	}
	bpf_link__destroy(link);
	ecode = UEI_REPORT(skel, uei);
	scx_bwlab__destroy(skel);
	/* stopped by a signal: 0; ejected (an error, the watchdog, sysrq-S) or stats not written: 1 */
	(void)ecode;
	return ejected || failed ? 1 : 0;
}
