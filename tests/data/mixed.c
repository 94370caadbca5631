/*
 * mixed LOW HIGH BLOCK_MS SECONDS: CPU demand that alternates in blocks of BLOCK_MS: LOW busy
 * processes in the even blocks, HIGH in the odd ones (the others sleep through them). Prints
 * the start of block 0 (CLOCK_MONOTONIC, ns), so that each period's truth is known.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

static long long now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv)
{
	int low, high, i;
	long long block, end, t0;

	if (argc != 5) {
		fprintf(stderr, "usage: mixed LOW HIGH BLOCK_MS SECONDS\n");
		return 2;
	}
	low = atoi(argv[1]);
	high = atoi(argv[2]);
	block = atoll(argv[3]) * 1000000LL;
	t0 = now_ns();
	end = t0 + atoll(argv[4]) * 1000000000LL;
	printf("%lld\n", t0);
	fflush(stdout);
	for (i = 0; i < (low > high ? low : high); i++) {
		if (fork() == 0) {
			long long t;

			while ((t = now_ns()) < end) {
				long long k = (t - t0) / block;
				int busy = i < (k % 2 ? high : low);

				if (!busy) {	/* sleep to the next block */
					long long next = t0 + (k + 1) * block;
					struct timespec ts = { next / 1000000000LL, next % 1000000000LL };

					clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
				}
			}
			_exit(0);
		}
	}
	while (wait(NULL) > 0)
		;
	return 0;
}
