/*
 * Failpoints (common/failpoint.h): the configuration grammar, term chains
 * with counts, errno names, rejection of malformed and unknown entries,
 * and the counters a test reads to know a point fired.
 */
#include "tests/testutil.h"

#include "common/failpoint.h"
#include "common/log.h"
#include "selene/selene.h"
#include "selene/store.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int teardown(void **state)
{
	(void)state;
	sel_failpoints_configure(NULL);
	sel_log_set_level(SEL_LOG_INFO);
	return 0;
}

/* With nothing configured, no point fires and nothing is counted. */
static void test_failpoint_off_by_default(void **state)
{
	(void)state;
	for (int i = 0; i < SEL_FAILPOINT_COUNT; i++)
		assert_int_equal(SEL_FAILPOINT((enum sel_failpoint)i), 0);
	assert_int_equal(sel_failpoint_fired(SEL_FP_DISK_WRITE), 0);
}

/* "3*off->return(EIO)": three passes, then EIO forever. */
static void test_failpoint_counted_chain(void **state)
{
	(void)state;
	assert_int_equal(sel_failpoints_configure("disk.write=3*off->return(EIO)"), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(SEL_FAILPOINT(SEL_FP_DISK_WRITE), 0);
	for (int i = 0; i < 5; i++)
		assert_int_equal(SEL_FAILPOINT(SEL_FP_DISK_WRITE), -EIO);
	assert_int_equal(sel_failpoint_evaluations(SEL_FP_DISK_WRITE), 8);
	assert_int_equal(sel_failpoint_fired(SEL_FP_DISK_WRITE), 5);
	/* other points stay off */
	assert_int_equal(SEL_FAILPOINT(SEL_FP_DISK_READ), 0);
}

/* After the last counted term a point is off again. */
static void test_failpoint_counted_then_off(void **state)
{
	(void)state;
	assert_int_equal(sel_failpoints_configure(
				 "disk.read=2*return(ENOSPC);disk.unlink=1*short"), 0);
	assert_int_equal(SEL_FAILPOINT(SEL_FP_DISK_READ), -ENOSPC);
	assert_int_equal(SEL_FAILPOINT(SEL_FP_DISK_READ), -ENOSPC);
	assert_int_equal(SEL_FAILPOINT(SEL_FP_DISK_READ), 0);
	assert_int_equal(SEL_FAILPOINT(SEL_FP_DISK_UNLINK), SEL_FAILPOINT_SHORT);
	assert_int_equal(SEL_FAILPOINT(SEL_FP_DISK_UNLINK), 0);
}

/* return alone is EIO; numbers and names both work; sleep and print pass. */
static void test_failpoint_actions(void **state)
{
	(void)state;
	assert_int_equal(sel_failpoints_configure(
				 "disk.open=return;disk.rename=return(28);"
				 "disk.truncate=return(-13);disk.fallocate=sleep(1);"
				 "disk.fdatasync=print"), 0);
	assert_int_equal(SEL_FAILPOINT(SEL_FP_DISK_OPEN), -EIO);
	assert_int_equal(SEL_FAILPOINT(SEL_FP_DISK_RENAME), -ENOSPC);
	assert_int_equal(SEL_FAILPOINT(SEL_FP_DISK_TRUNCATE), -EACCES);
	assert_int_equal(SEL_FAILPOINT(SEL_FP_DISK_FALLOCATE), 0);
	sel_log_set_level(SEL_LOG_ERROR);
	assert_int_equal(SEL_FAILPOINT(SEL_FP_DISK_FDATASYNC), 0);
	assert_int_equal(sel_failpoint_fired(SEL_FP_DISK_FALLOCATE), 1);
	assert_int_equal(sel_failpoint_fired(SEL_FP_DISK_FDATASYNC), 1);
}

/* Malformed or unknown entries are refused and the old config stays. */
static void test_failpoint_rejects_malformed(void **state)
{
	static const char *const bad[] = {
		"disk.write",            "nosuch.point=return",  "disk.write=",
		"disk.write=explode",    "disk.write=return(EWHAT)", "disk.write=0*off",
		"disk.write=x*off",      "disk.write=sleep",     "disk.write=sleep(-1)",
		"disk.write=return(EIO", "disk.write=off(1)",    "disk.write=kill(9)",
		"disk.write=-1*off",     "disk.write=print(x)",  "disk.write=off->",
		"disk.write=1*off->1*off->1*off->1*off->1*off->1*off->1*off->1*off->off",
		"disk.write=99999999999999999999999*return", /* past 2^64 */
		/* digits only in arguments: no blanks or plus signs */
		"disk.write=return( +5)", "disk.write=return( 5)", "disk.write=sleep( +5)",
		"disk.write=sleep(+5)",
	};

	(void)state;
	assert_int_equal(sel_failpoints_configure("disk.read=return(EIO)"), 0);
	sel_log_set_level(SEL_LOG_ERROR + 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (sel_failpoints_configure(bad[i]) != SEL_EFAILPOINT)
			fail_msg("accepted '%s'", bad[i]);
	assert_int_equal(SEL_FAILPOINT(SEL_FP_DISK_READ), -EIO);
	/* a negative errno and plain digits still parse */
	assert_int_equal(sel_failpoints_configure("disk.write=return(-5)->sleep(5)"), 0);
	assert_int_equal(sel_failpoints_configure(""), 0);
	assert_int_equal(SEL_FAILPOINT(SEL_FP_DISK_READ), 0);
}

/* Every point has a unique dotted name, a description, and a lookup. */
static void test_failpoint_registry(void **state)
{
	(void)state;
	for (int i = 0; i < SEL_FAILPOINT_COUNT; i++) {
		const char *name = sel_failpoint_name((enum sel_failpoint)i);

		assert_non_null(strchr(name, '.'));
		assert_true(strlen(sel_failpoint_doc((enum sel_failpoint)i)) > 10);
		assert_int_equal(sel_failpoint_lookup(name), i);
	}
	assert_int_equal(sel_failpoint_lookup("record.nothing"), -1);
}

/* kill ends the process with SIGKILL at the point. */
static void test_failpoint_kill(void **state)
{
	pid_t pid;
	int status;

	(void)state;
	pid = fork();
	if (pid == 0) {
		sel_log_set_level(SEL_LOG_ERROR);
		tu_failpoints_may_kill();
		sel_failpoints_configure("record.after_rename=1*kill");
		SEL_FAILPOINT(SEL_FP_RECORD_AFTER_RENAME);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

/* kill and abort are refused unless the host installed what ends the process
 * and SELENE_FAILPOINTS_ALLOW_FATAL=1 is set. */
static void test_failpoint_fatal_needs_permission(void **state)
{
	(void)state;
	sel_log_set_level(SEL_LOG_ERROR + 0);
	setenv("SELENE_FAILPOINTS_ALLOW_FATAL", "1", 1); /* no hook: still refused */
	assert_int_equal(sel_failpoints_configure("disk.write=kill"), SEL_EFAILPOINT);
	tu_failpoints_may_kill();
	unsetenv("SELENE_FAILPOINTS_ALLOW_FATAL");
	assert_int_equal(sel_failpoints_configure("disk.write=kill"), SEL_EFAILPOINT);
	assert_int_equal(sel_failpoints_configure("disk.write=1*off->abort"), SEL_EFAILPOINT);
	setenv("SELENE_FAILPOINTS_ALLOW_FATAL", "yes", 1);
	assert_int_equal(sel_failpoints_configure("disk.write=kill"), SEL_EFAILPOINT);
	setenv("SELENE_FAILPOINTS_ALLOW_FATAL", "1", 1);
	assert_int_equal(sel_failpoints_configure("disk.write=1*off->abort"), 0);
	unsetenv("SELENE_FAILPOINTS_ALLOW_FATAL");
	assert_int_equal(SEL_FAILPOINT(SEL_FP_DISK_WRITE), 0);
}

/* Runs fn in a child with SELENE_FAILPOINTS=value; returns its exit status. */
static int in_child_with_env(const char *value, int (*fn)(void))
{
	pid_t pid = fork();
	int status;

	assert_true(pid >= 0);
	if (pid == 0) {
		setenv("SELENE_FAILPOINTS", value, 1);
		_exit(fn());
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	return WEXITSTATUS(status);
}

/* 0 when open refuses with SEL_EFAILPOINT and names the bad part. */
static int store_open_refuses(void)
{
	struct sel_store_config c = { .dir = "/nonexistent", .page_tokens = 64 };
	char err[256] = "";
	sel_store *s = NULL;

	if (sel_store_open(&c, &s, err, sizeof(err)) != SEL_EFAILPOINT || s)
		return 1;
	if (!strstr(err, "SELENE_FAILPOINTS") || !strstr(err, "explode"))
		return 2;
	/* Every later open answers the same, never a crash. */
	if (sel_store_open(&c, &s, err, sizeof(err)) != SEL_EFAILPOINT)
		return 3;
	return 0;
}

/* The same through the peer's start. */
static int peer_start_refuses(void)
{
	struct sel_cluster cl = { .rank = 1, .world_size = 2, .coordinator_host = "127.0.0.1",
				  .coordinator_port = 1, .listen_fd = -1 };
	struct sel_store_config c = { .dir = "/nonexistent", .page_tokens = 64,
				      .disk_limit_bytes = 1 << 20, .cluster = &cl };
	char err[256] = "";
	sel_peer *p = NULL;

	if (sel_peer_start(&c, &p, err, sizeof(err)) != SEL_EFAILPOINT || p)
		return 1;
	return strstr(err, "explode") ? 0 : 2;
}

/* A fatal action in the environment is refused at open without permission. */
static int store_open_refuses_fatal(void)
{
	struct sel_store_config c = { .dir = "/nonexistent", .page_tokens = 64 };
	char err[256] = "";
	sel_store *s = NULL;

	unsetenv("SELENE_FAILPOINTS_ALLOW_FATAL");
	if (sel_store_open(&c, &s, err, sizeof(err)) != SEL_EFAILPOINT)
		return 1;
	return strstr(err, "SELENE_FAILPOINTS_ALLOW_FATAL") ? 0 : 2;
}

/*
 * A malformed SELENE_FAILPOINTS is an error of sel_store_open and
 * sel_peer_start, naming the bad part; it never ends the process.
 */
static void test_failpoint_env_malformed_fails_open(void **state)
{
	(void)state;
	sel_log_set_level(SEL_LOG_ERROR + 0);
	assert_int_equal(in_child_with_env("disk.write=explode", store_open_refuses), 0);
	assert_int_equal(in_child_with_env("disk.write=explode", peer_start_refuses), 0);
	assert_int_equal(in_child_with_env("record.after_rename=1*kill",
					   store_open_refuses_fatal), 0);
}

/*
 * A program linking the library starts with a malformed SELENE_FAILPOINTS
 * (no constructor exits before main): selene --version prints and exits 0.
 */
static void test_failpoint_env_malformed_spares_main(void **state)
{
	const char *program = getenv("SELENE_PROGRAM");
	pid_t pid;
	int status;

	(void)state;
	if (!program)
		skip();
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		dup2(null, STDOUT_FILENO);
		dup2(null, STDERR_FILENO);
		setenv("SELENE_FAILPOINTS", "disk.write=explode", 1);
		execl(program, program, "--version", (char *)NULL);
		_exit(127);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_failpoint_off_by_default, teardown),
		cmocka_unit_test_teardown(test_failpoint_counted_chain, teardown),
		cmocka_unit_test_teardown(test_failpoint_counted_then_off, teardown),
		cmocka_unit_test_teardown(test_failpoint_actions, teardown),
		cmocka_unit_test_teardown(test_failpoint_rejects_malformed, teardown),
		cmocka_unit_test_teardown(test_failpoint_registry, teardown),
		cmocka_unit_test_teardown(test_failpoint_kill, teardown),
		cmocka_unit_test_teardown(test_failpoint_fatal_needs_permission, teardown),
		cmocka_unit_test_teardown(test_failpoint_env_malformed_fails_open, teardown),
		cmocka_unit_test_teardown(test_failpoint_env_malformed_spares_main, teardown),
	};

	return cmocka_run_group_tests_name("failpoint", tests, NULL, NULL);
}
