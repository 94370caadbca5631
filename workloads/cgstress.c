// SPDX-License-Identifier: MIT
/*
 * cgstress - concurrent churn of CPU bandwidth control, for debug kernels.
 *
 * Started inside an (otherwise empty) cgroup G, it moves itself to G/ctl, enables the
 * cpu controller below G and then, until the duration expires, runs at once:
 *   - burners: busy processes, some with short sleeps, in nested groups G/gN[/c]
 *   - a writer: random valid and invalid cpu.max / cpu.max.burst (v1: cpu.cfs_*) writes
 *     to the live groups; every invalid write must fail (EINVAL, ERANGE) and leave the old
 *     value in place (checked by reading the file back); on kernels with latency-aware
 *     groups also cpu.latency_awareness (0/1, and 2/-1/x which must be refused) and reads
 *     of cpu.load_credit, so that LAGS groups are throttled, moved and removed too
 *   - a churner: creates nested groups with quotas, moves burners in while they are
 *     throttled, moves them out again and removes the groups
 *   - a migrator: moves burners between live groups at random
 *   - a hotplugger (-H): takes CPUs 1..N-1 offline and back online
 * Writes a JSON summary to stdout; exits 1 if an invalid write was accepted or changed
 * a value, 2 on bad usage, 3 if the cgroup setup itself failed.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_GROUPS 8
#define MAX_BURNERS 64

static char base[PATH_MAX / 2];
static int v2;
static int nburners = 8;
static pid_t burners[MAX_BURNERS];
static double duration_s = 60;
static int hotplug;
static int has_lags; /* cpu.latency_awareness exists */
static atomic_int stop;

/* live groups: slot i is "gI" (and its child "gI/c") when live[i] is set */
static pthread_mutex_t groups_lock = PTHREAD_MUTEX_INITIALIZER;
static int live[MAX_GROUPS];

static atomic_long n_valid, n_invalid, n_einval, n_violations, n_vanished, n_lags;
static atomic_long n_mkdir, n_rmdir, n_rmdir_busy, n_moves, n_hotplug, n_hotplug_err, n_scaled;

static unsigned int seed_of(int salt)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned int)(ts.tv_nsec ^ (salt * 2654435761u) ^ getpid());
}

static int write_file(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = write(fd, val, strlen(val));
	if (n < 0) {
		int err = errno;

		close(fd);
		return -err;
	}
	close(fd);
	return 0;
}

static int read_file(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	return 0;
}

static void group_path(char *out, size_t len, int slot, int child, const char *file)
{
	snprintf(out, len, "%s/g%d%s%s%s", base, slot, child ? "/c" : "", file ? "/" : "",
		 file ? file : "");
}

/*
 * A live slot, or -1, and whether to use its child. Tasks only go to leaves on v2
 * (no internal processes: gN has the cpu controller enabled for its child).
 */
static int pick_group(unsigned int *seed, int *child, int for_tasks)
{
	int tries, slot = -1;

	pthread_mutex_lock(&groups_lock);
	for (tries = 0; tries < 2 * MAX_GROUPS; tries++) {
		int s = rand_r(seed) % MAX_GROUPS;

		if (live[s]) {
			slot = s;
			break;
		}
	}
	pthread_mutex_unlock(&groups_lock);
	*child = (for_tasks && v2) ? 1 : rand_r(seed) % 2;
	return slot;
}

static void burn(int idx)
{
	unsigned int seed = seed_of(idx);
	volatile unsigned long x = 0;

	for (;;) {
		for (long i = 0; i < 2000000; i++)
			x += i;
		if (idx % 3 == 0)
			usleep(rand_r(&seed) % 3000);
	}
}

static void move_pid(pid_t pid, const char *group_dir)
{
	char path[PATH_MAX], buf[32];

	snprintf(path, sizeof(path), "%s/cgroup.procs", group_dir);
	snprintf(buf, sizeof(buf), "%d", pid);
	if (write_file(path, buf) == 0)
		atomic_fetch_add(&n_moves, 1);
}

/* Random bandwidth values, valid and invalid. */
/*
 * Strings cpu.max must refuse. Note what it accepts: trailing words are ignored
 * ("max 100000 5"), an unparsable period keeps the current one ("100000 abc"), and
 * 18446744073709551615 is U64_MAX, i.e. "max".
 */
static const char *const invalid_max[] = {
	"\n", "0 100000", "500 100000", "-5 100000", "max 0", "max 500", "1000 2000000",
	"abc", "99999999999999 100000", "max 1000000000",
};

static const char *const invalid_burst[] = { "-1", "abc", "99999999999999999999" };
static const char *const invalid_lags[] = { "2", "-1", "x" };

/*
 * Whether "q2 p2" is "q p" scaled by a power of two: the period timer scales period,
 * quota and burst up when its period is too short to keep up with (pr_warn
 * "period too short, scaling up").
 */
static int scaled_up(const char *before, const char *after)
{
	unsigned long long q, p, q2, p2;

	if (sscanf(before, "%llu %llu", &q, &p) != 2 || sscanf(after, "%llu %llu", &q2, &p2) != 2)
		return 0;
	while (p < p2 && q < q2) {
		p *= 2;
		q *= 2;
	}
	return p == p2 && q == q2;
}

static void *writer(void *arg)
{
	unsigned int seed = seed_of(1);
	char path[PATH_MAX], before[128], after[128], val[64];

	(void)arg;
	while (!atomic_load(&stop)) {
		int child, slot = pick_group(&seed, &child, 0), r = rand_r(&seed) % (has_lags ? 12 : 10), err;
		const char *file;

		if (slot < 0) {
			usleep(1000);
			continue;
		}
		if (r == 10) { /* latency-aware or not, and its load credit */
			group_path(path, sizeof(path), slot, child, "cpu.latency_awareness");
			err = write_file(path, rand_r(&seed) % 2 ? "1" : "0");
			group_path(path, sizeof(path), slot, child, "cpu.load_credit");
			if (err == -ENOENT || err == -ENODEV || read_file(path, after, sizeof(after)) < 0)
				atomic_fetch_add(&n_vanished, 1);
			else
				atomic_fetch_add(&n_lags, 1);
		} else if (r < 6) { /* valid cpu.max / quota */
			long period = 1000 + rand_r(&seed) % 100000;
			long quota = 1000 + rand_r(&seed) % 200000;

			if (v2) {
				file = "cpu.max";
				if (rand_r(&seed) % 8 == 0)
					snprintf(val, sizeof(val), "max %ld", period);
				else
					snprintf(val, sizeof(val), "%ld %ld", quota, period);
			} else {
				file = rand_r(&seed) % 2 ? "cpu.cfs_period_us" : "cpu.cfs_quota_us";
				snprintf(val, sizeof(val), "%ld", file[8] == 'p' ? period : quota);
			}
			group_path(path, sizeof(path), slot, child, file);
			err = write_file(path, val);
			if (err == -ENOENT || err == -ENODEV)
				atomic_fetch_add(&n_vanished, 1);
			else
				atomic_fetch_add(&n_valid, 1); /* EINVAL allowed: burst > quota etc. */
		} else if (r < 7) { /* valid burst */
			file = v2 ? "cpu.max.burst" : "cpu.cfs_burst_us";
			snprintf(val, sizeof(val), "%d", rand_r(&seed) % 50000);
			group_path(path, sizeof(path), slot, child, file);
			err = write_file(path, val);
			atomic_fetch_add(err == -ENOENT || err == -ENODEV ? &n_vanished : &n_valid, 1);
		} else { /* invalid: must be EINVAL and leave the value alone */
			int burst = r == 9;

			if (r == 11) {
				file = "cpu.latency_awareness";
				snprintf(val, sizeof(val), "%s",
					 invalid_lags[rand_r(&seed) % (sizeof(invalid_lags) / sizeof(*invalid_lags))]);
			} else if (burst) {
				file = v2 ? "cpu.max.burst" : "cpu.cfs_burst_us";
				snprintf(val, sizeof(val), "%s",
					 invalid_burst[rand_r(&seed) % (sizeof(invalid_burst) / sizeof(*invalid_burst))]);
			} else if (v2) {
				file = "cpu.max";
				snprintf(val, sizeof(val), "%s",
					 invalid_max[rand_r(&seed) % (sizeof(invalid_max) / sizeof(*invalid_max))]);
			} else {
				file = "cpu.cfs_period_us";
				snprintf(val, sizeof(val), "%s", rand_r(&seed) % 2 ? "500" : "2000000");
			}
			group_path(path, sizeof(path), slot, child, file);
			if (read_file(path, before, sizeof(before)) < 0) {
				atomic_fetch_add(&n_vanished, 1);
				continue;
			}
			err = write_file(path, val);
			if (err == -ENOENT || err == -ENODEV) {
				atomic_fetch_add(&n_vanished, 1);
				continue;
			}
			if (read_file(path, after, sizeof(after)) < 0) {
				/* removed before its value could be checked: not counted */
				atomic_fetch_add(&n_vanished, 1);
				continue;
			}
			atomic_fetch_add(&n_invalid, 1);
			/* kstrto*() report numbers out of range as ERANGE */
			if ((err == -EINVAL || err == -ERANGE) && strcmp(before, after) == 0) {
				atomic_fetch_add(&n_einval, 1);
			} else if ((err == -EINVAL || err == -ERANGE) && scaled_up(before, after)) {
				/* the period timer doubled period and quota meanwhile */
				atomic_fetch_add(&n_einval, 1);
				atomic_fetch_add(&n_scaled, 1);
			} else {
				atomic_fetch_add(&n_violations, 1);
				fprintf(stderr, "cgstress: %s <- '%s': %s, value '%.*s' -> '%.*s'\n", path, val,
					err ? strerror(-err) : "accepted", (int)strcspn(before, "\n"), before,
					(int)strcspn(after, "\n"), after);
			}
		}
		usleep(rand_r(&seed) % 2000);
	}
	return NULL;
}

static int make_group(int slot, unsigned int *seed)
{
	char path[PATH_MAX], val[64];

	group_path(path, sizeof(path), slot, 0, NULL);
	if (mkdir(path, 0755) < 0)
		return -1;
	if (v2) {
		group_path(path, sizeof(path), slot, 0, "cgroup.subtree_control");
		write_file(path, "+cpu");
	}
	group_path(path, sizeof(path), slot, 1, NULL);
	mkdir(path, 0755);
	/* small quotas so that the group is throttled while it is moved and removed */
	snprintf(val, sizeof(val), "%d %d", 1000 + rand_r(seed) % 5000, 10000);
	if (v2) {
		group_path(path, sizeof(path), slot, 0, "cpu.max");
		write_file(path, val);
	} else {
		group_path(path, sizeof(path), slot, 0, "cpu.cfs_period_us");
		write_file(path, "10000");
		group_path(path, sizeof(path), slot, 0, "cpu.cfs_quota_us");
		snprintf(val, sizeof(val), "%d", 1000 + rand_r(seed) % 5000);
		write_file(path, val);
	}
	atomic_fetch_add(&n_mkdir, 1);
	return 0;
}

/* Move every task of a group to G/ctl's sibling "idle", then remove it. */
static void drain_and_remove(const char *dir)
{
	char path[PATH_MAX], park[PATH_MAX];
	FILE *f;
	int pid;

	snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
	snprintf(park, sizeof(park), "%s/park", base);
	f = fopen(path, "r");
	if (f) {
		while (fscanf(f, "%d", &pid) == 1)
			move_pid(pid, park);
		fclose(f);
	}
	for (int tries = 0; tries < 50; tries++) {
		if (rmdir(dir) == 0 || errno == ENOENT) {
			atomic_fetch_add(&n_rmdir, 1);
			return;
		}
		atomic_fetch_add(&n_rmdir_busy, 1);
		usleep(1000);
	}
}

static void remove_group(int slot)
{
	char path[PATH_MAX];

	group_path(path, sizeof(path), slot, 1, NULL);
	drain_and_remove(path);
	group_path(path, sizeof(path), slot, 0, NULL);
	drain_and_remove(path);
}

static void *churner(void *arg)
{
	unsigned int seed = seed_of(2);
	char path[PATH_MAX];

	(void)arg;
	while (!atomic_load(&stop)) {
		int slot = rand_r(&seed) % MAX_GROUPS, is_live;

		pthread_mutex_lock(&groups_lock);
		is_live = live[slot];
		live[slot] = 0; /* others stop picking it while it changes */
		pthread_mutex_unlock(&groups_lock);
		if (is_live) {
			remove_group(slot);
		} else if (make_group(slot, &seed) == 0) {
			/* populate it at once: tasks enter a group that throttles */
			for (int i = 0; i < 2; i++) {
				group_path(path, sizeof(path), slot, v2 || i % 2, NULL);
				move_pid(burners[rand_r(&seed) % nburners], path);
			}
			pthread_mutex_lock(&groups_lock);
			live[slot] = 1;
			pthread_mutex_unlock(&groups_lock);
		}
		usleep(5000 + rand_r(&seed) % 20000);
	}
	return NULL;
}

static void *migrator(void *arg)
{
	unsigned int seed = seed_of(3);
	char path[PATH_MAX];

	(void)arg;
	while (!atomic_load(&stop)) {
		int child, slot = pick_group(&seed, &child, 1);

		if (slot >= 0) {
			group_path(path, sizeof(path), slot, child, NULL);
			move_pid(burners[rand_r(&seed) % nburners], path);
		}
		usleep(rand_r(&seed) % 3000);
	}
	return NULL;
}

static void *hotplugger(void *arg)
{
	unsigned int seed = seed_of(4);
	long ncpu = sysconf(_SC_NPROCESSORS_CONF);
	char path[PATH_MAX];

	(void)arg;
	while (!atomic_load(&stop) && ncpu > 1) {
		int cpu = 1 + rand_r(&seed) % (ncpu - 1);

		snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/online", cpu);
		if (write_file(path, "0") == 0) {
			atomic_fetch_add(&n_hotplug, 1);
			usleep(50000 + rand_r(&seed) % 200000);
			if (write_file(path, "1") != 0)
				atomic_fetch_add(&n_hotplug_err, 1);
		} else {
			atomic_fetch_add(&n_hotplug_err, 1);
		}
		usleep(100000 + rand_r(&seed) % 200000);
	}
	/* leave every CPU online */
	for (int cpu = 1; cpu < ncpu; cpu++) {
		snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/online", cpu);
		write_file(path, "1");
	}
	return NULL;
}

static int has_token(char *list, const char *token)
{
	char *save;

	for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
		if (strcmp(tok, token) == 0)
			return 1;
	return 0;
}

/*
 * The cgroup this process runs in, as a directory: the v1 hierarchy with the cpu
 * controller if there is one, else the v2 hierarchy (from /proc/self/cgroup and the
 * mount points in /proc/self/mountinfo).
 */
static int find_own_cgroup(void)
{
	char line[4096], rel[PATH_MAX] = "", mnt[PATH_MAX] = "";
	int found_v1 = 0;
	FILE *f = fopen("/proc/self/cgroup", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		char *ctrl = strchr(line, ':'), *path = ctrl ? strchr(ctrl + 1, ':') : NULL;

		if (!path)
			continue;
		*path++ = '\0';
		path[strcspn(path, "\n")] = '\0';
		ctrl++;
		if (*ctrl == '\0' && !found_v1) {
			snprintf(rel, sizeof(rel), "%s", path);
		} else {
			if (has_token(ctrl, "cpu")) {
				snprintf(rel, sizeof(rel), "%s", path);
				found_v1 = 1;
			}
		}
	}
	fclose(f);
	f = fopen("/proc/self/mountinfo", "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		char point[PATH_MAX], *sep = strstr(line, " - ");
		char fstype[64] = "", opts[1024] = "";

		if (!sep || sscanf(line, "%*s %*s %*s %*s %4095s", point) != 1 ||
		    sscanf(sep + 3, "%63s %*s %1023s", fstype, opts) < 1)
			continue;
		if (found_v1 ? strcmp(fstype, "cgroup") == 0 && has_token(opts, "cpu")
			     : strcmp(fstype, "cgroup2") == 0) {
			snprintf(mnt, sizeof(mnt), "%s", point);
			break;
		}
	}
	fclose(f);
	if (!mnt[0] || !rel[0])
		return -1;
	snprintf(base, sizeof(base), "%s%s", mnt, strcmp(rel, "/") ? rel : "");
	return 0;
}

static int setup(void)
{
	char path[PATH_MAX], self[32];

	if (find_own_cgroup() < 0) {
		errno = ENOENT;
		return -1;
	}
	snprintf(path, sizeof(path), "%s/cpu.max", base);
	v2 = access(path, F_OK) == 0;
	snprintf(path, sizeof(path), "%s/cpu.latency_awareness", base);
	has_lags = access(path, F_OK) == 0;
	snprintf(path, sizeof(path), "%s/ctl", base);
	if (mkdir(path, 0755) < 0 && errno != EEXIST)
		return -1;
	snprintf(self, sizeof(self), "%d", getpid());
	snprintf(path, sizeof(path), "%s/ctl/cgroup.procs", base);
	if (write_file(path, self) < 0)
		return -1;
	snprintf(path, sizeof(path), "%s/park", base);
	if (mkdir(path, 0755) < 0 && errno != EEXIST)
		return -1;
	if (v2) {
		snprintf(path, sizeof(path), "%s/cgroup.subtree_control", base);
		if (write_file(path, "+cpu") < 0)
			return -1;
	}
	return 0;
}

static void teardown(void)
{
	char path[PATH_MAX];

	for (int slot = 0; slot < MAX_GROUPS; slot++) {
		group_path(path, sizeof(path), slot, 0, NULL);
		if (access(path, F_OK) == 0)
			remove_group(slot);
	}
	for (int i = 0; i < nburners; i++) {
		kill(burners[i], SIGKILL);
		waitpid(burners[i], NULL, 0);
	}
	snprintf(path, sizeof(path), "%s/park", base);
	rmdir(path);
}

int main(int argc, char **argv)
{
	pthread_t threads[4];
	int opt, nthreads = 0;
	char *end;

	while ((opt = getopt(argc, argv, "d:b:H")) != -1) {
		switch (opt) {
		case 'd':
			duration_s = strtod(optarg, &end);
			if (*end || duration_s <= 0 || duration_s > 86400) {
				fprintf(stderr, "cgstress: invalid duration '%s'\n", optarg);
				return 2;
			}
			break;
		case 'b':
			nburners = (int)strtol(optarg, &end, 10);
			if (*end || nburners < 1 || nburners > MAX_BURNERS) {
				fprintf(stderr, "cgstress: burners must be 1..%d\n", MAX_BURNERS);
				return 2;
			}
			break;
		case 'H':
			hotplug = 1;
			break;
		default:
			fprintf(stderr, "usage: %s [-d seconds] [-b burners] [-H] (run inside a cgroup)\n",
				argv[0]);
			return 2;
		}
	}
	if (setup() < 0) {
		fprintf(stderr, "cgstress: cgroup setup below %s failed: %s\n", base, strerror(errno));
		return 3;
	}
	for (int i = 0; i < nburners; i++) {
		char park[PATH_MAX];

		burners[i] = fork();
		if (burners[i] == 0)
			burn(i);
		snprintf(park, sizeof(park), "%s/park", base);
		move_pid(burners[i], park);
	}
	pthread_create(&threads[nthreads++], NULL, writer, NULL);
	pthread_create(&threads[nthreads++], NULL, churner, NULL);
	pthread_create(&threads[nthreads++], NULL, migrator, NULL);
	if (hotplug)
		pthread_create(&threads[nthreads++], NULL, hotplugger, NULL);

	usleep((useconds_t)(duration_s * 1e6));
	atomic_store(&stop, 1);
	for (int i = 0; i < nthreads; i++)
		pthread_join(threads[i], NULL);
	teardown();

	printf("{\"cgroup\": \"%s\", \"v2\": %s, \"duration_s\": %.1f, \"burners\": %d, "
	       "\"valid_writes\": %ld, \"invalid_writes\": %ld, \"einval_kept\": %ld, "
	       "\"violations\": %ld, \"vanished\": %ld, \"mkdir\": %ld, \"rmdir\": %ld, "
	       "\"rmdir_busy\": %ld, \"moves\": %ld, \"hotplug\": %ld, \"hotplug_errors\": %ld, "
	       "\"scaled_by_timer\": %ld, \"lags_writes\": %ld}\n",
	       base, v2 ? "true" : "false", duration_s, nburners, atomic_load(&n_valid),
	       atomic_load(&n_invalid), atomic_load(&n_einval), atomic_load(&n_violations),
	       atomic_load(&n_vanished), atomic_load(&n_mkdir), atomic_load(&n_rmdir),
	       atomic_load(&n_rmdir_busy), atomic_load(&n_moves), atomic_load(&n_hotplug),
	       atomic_load(&n_hotplug_err), atomic_load(&n_scaled), atomic_load(&n_lags));
	return atomic_load(&n_violations) ? 1 : 0;
}
