/*
 * Failpoints (common/failpoint.h): the configuration grammar, term chains
 * with counts, errno names, rejection of malformed and unknown entries,
 * and the counters a test reads to know a point fired.
 */
#include "tests/testutil.h"

#include "common/failpoint.h"
#include "common/log.h"
#include "selene/selene.h"

#include <errno.h>
#include <signal.h>
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
	};

	(void)state;
	assert_int_equal(sel_failpoints_configure("disk.read=return(EIO)"), 0);
	sel_log_set_level(SEL_LOG_ERROR + 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (sel_failpoints_configure(bad[i]) != SEL_EFAILPOINT)
			fail_msg("accepted '%s'", bad[i]);
	assert_int_equal(SEL_FAILPOINT(SEL_FP_DISK_READ), -EIO);
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
		sel_failpoints_configure("record.after_rename=1*kill");
		SEL_FAILPOINT(SEL_FP_RECORD_AFTER_RENAME);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
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
	};

	return cmocka_run_group_tests_name("failpoint", tests, NULL, NULL);
}
