// SPDX-License-Identifier: GPL-2.0
/*
 * test_cpu, running only the tests named on its command line.
 *
 * The kernel's tools/testing/selftests/cgroup/test_cpu.c is compiled into this file as it is,
 * its main() renamed: this main() runs the named tests from its tests[] table, in the table's
 * order, with test_cpu's own root setup and TAP output. With no names it is test_cpu. A name
 * the table lacks is an error before any test runs: exit 2 and one line on stderr.
 *
 * Why: four of test_cpu's tests hog the CPUs for 10 s each; a caller that asserts three
 * others (bwlab kselftest --only) need not wait 40 s for results it reads nothing from.
 */
#define main test_cpu_main
#include "test_cpu.c"
#undef main

int main(int argc, char *argv[])
{
	bool chosen[ARRAY_SIZE(tests)] = { false };
	char root[PATH_MAX];
	size_t i, count = 0;
	int arg;

	if (argc < 2)
		return test_cpu_main(argc, argv);
	for (arg = 1; arg < argc; arg++) {
		for (i = 0; i < ARRAY_SIZE(tests); i++)
			if (!strcmp(argv[arg], tests[i].name))
				break;
		if (i == ARRAY_SIZE(tests)) {
			fprintf(stderr, "test_cpu: no test %s\n", argv[arg]);
			return 2;
		}
		if (!chosen[i])
			count++;
		chosen[i] = true;
	}

	ksft_print_header();
	if (cg_find_unified_root(root, sizeof(root), NULL))
		ksft_exit_skip("cgroup v2 isn't mounted\n");
	if (cg_read_strstr(root, "cgroup.subtree_control", "cpu"))
		if (cg_write(root, "cgroup.subtree_control", "+cpu"))
			ksft_exit_skip("Failed to set cpu controller\n");

	ksft_set_plan(count);
	for (i = 0; i < ARRAY_SIZE(tests); i++) {
		if (!chosen[i])
			continue;
		switch (tests[i].fn(root)) {
		case KSFT_PASS:
			ksft_test_result_pass("%s\n", tests[i].name);
			break;
		case KSFT_SKIP:
			ksft_test_result_skip("%s\n", tests[i].name);
			break;
		default:
			ksft_test_result_fail("%s\n", tests[i].name);
			break;
		}
	}
	ksft_finished();
}
