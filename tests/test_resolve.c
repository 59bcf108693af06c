/*
 * Resolving within a deadline (cluster/resolve.h): numeric addresses at
 * once, names on a helper thread, a resolver that never answers given up
 * at the deadline (its helper finishing later on its own), temporary
 * failures retried until the deadline, and hard failures named.
 */
#include "tests/testutil.h"

#include "cluster/resolve.h"
#include "common/base.h"
#include "common/failpoint.h"
#include "selene/selene.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MS 1000000ull

static int teardown(void **state)
{
	(void)state;
	sel_failpoints_configure(NULL);
	return 0;
}

static uint16_t port_of(const struct addrinfo *ai)
{
	if (ai->ai_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)ai->ai_addr)->sin_port);
	return ntohs(((const struct sockaddr_in6 *)ai->ai_addr)->sin6_port);
}

/* Addresses need no resolver: answered on the caller, even with no helper. */
static void test_resolve_numeric_addresses(void **state)
{
	struct addrinfo *ai = NULL;
	char err[256] = "";

	(void)state;
	assert_int_equal(sel_failpoints_configure("thread.start=return(EAGAIN)"), 0);
	assert_int_equal(cluster_resolve("127.0.0.1", "4711", 0, &ai, err, sizeof(err)), 0);
	assert_int_equal(ai->ai_family, AF_INET);
	assert_int_equal(ai->ai_socktype, SOCK_STREAM);
	assert_int_equal(port_of(ai), 4711);
	freeaddrinfo(ai);
	assert_int_equal(cluster_resolve("198.18.0.2", "1", 0, &ai, err, sizeof(err)), 0);
	freeaddrinfo(ai);
	assert_int_equal(sel_failpoint_fired(SEL_FP_THREAD_START), 0);
}

/* A name (localhost, from /etc/hosts) resolves on the helper. */
static void test_resolve_name_on_helper(void **state)
{
	struct addrinfo *ai = NULL;
	char err[256] = "";

	(void)state;
	assert_int_equal(sel_failpoints_configure("peer.resolve=print"), 0);
	if (cluster_resolve("localhost", "4712", sel_monotonic_ns() + 10000 * MS, &ai, err,
			    sizeof(err)) != 0)
		fail_msg("%s", err);
	assert_int_equal(port_of(ai), 4712);
	freeaddrinfo(ai);
	assert_int_equal(sel_failpoint_fired(SEL_FP_PEER_RESOLVE), 1);
}

/*
 * A resolver that does not answer (the helper stalls 1.5 s) is given up at
 * the deadline, 200 ms; the helper then finishes on its own and frees its
 * answer (the sanitizers see any touch of freed memory or a leak).
 */
static void test_resolve_gives_up_at_the_deadline(void **state)
{
	struct addrinfo *ai = (struct addrinfo *)&ai;
	char err[256] = "";
	uint64_t t0 = sel_monotonic_ns(), took;

	(void)state;
	assert_int_equal(sel_failpoints_configure("peer.resolve=1*sleep(1500)"), 0);
	assert_int_equal(cluster_resolve("localhost", "1", t0 + 200 * MS, &ai, err, sizeof(err)),
			 -ETIMEDOUT);
	took = sel_monotonic_ns() - t0;
	assert_null(ai);
	assert_non_null(strstr(err, "cannot resolve localhost: no answer"));
	print_message("gave up after %llu ms\n", (unsigned long long)(took / MS));
	assert_true(took >= 200 * MS && took < 1000 * MS);
	/* the next call is not held up by the stalled helper */
	assert_int_equal(cluster_resolve("localhost", "1", sel_monotonic_ns() + 10000 * MS, &ai,
					 err, sizeof(err)), 0);
	freeaddrinfo(ai);
	usleep(1600 * 1000); /* the stalled helper ends and frees */
}

/* Temporary failures (EAI_AGAIN) are tried again; then the name resolves. */
static void test_resolve_retries_temporary_failures(void **state)
{
	struct addrinfo *ai = NULL;
	char err[256] = "";
	uint64_t t0 = sel_monotonic_ns();

	(void)state;
	assert_int_equal(sel_failpoints_configure("peer.resolve=2*return(EAGAIN)"), 0);
	if (cluster_resolve("localhost", "1", t0 + 10000 * MS, &ai, err, sizeof(err)) != 0)
		fail_msg("%s", err);
	freeaddrinfo(ai);
	assert_int_equal(sel_failpoint_evaluations(SEL_FP_PEER_RESOLVE), 3);
	assert_true(sel_monotonic_ns() - t0 >= 2 * CLUSTER_RESOLVE_RETRY_MS * MS);
}

/* ...until the deadline, which is then reported with the last failure. */
static void test_resolve_temporary_failures_until_the_deadline(void **state)
{
	struct addrinfo *ai = NULL;
	char err[256] = "";
	uint64_t t0 = sel_monotonic_ns(), took;

	(void)state;
	assert_int_equal(sel_failpoints_configure("peer.resolve=return(EAGAIN)"), 0);
	assert_int_equal(cluster_resolve("localhost", "1", t0 + 350 * MS, &ai, err, sizeof(err)),
			 -ETIMEDOUT);
	took = sel_monotonic_ns() - t0;
	assert_non_null(strstr(err, "still at the deadline"));
	assert_non_null(strstr(err, gai_strerror(EAI_AGAIN)));
	assert_true(took >= 350 * MS && took < 1500 * MS);
	/* without a deadline a temporary failure is answered at once */
	assert_int_equal(cluster_resolve("localhost", "1", 0, &ai, err, sizeof(err)),
			 -EHOSTUNREACH);
	assert_non_null(strstr(err, gai_strerror(EAI_AGAIN)));
}

/* A hard failure, a refused helper and an overlong name, each named. */
static void test_resolve_failures_named(void **state)
{
	struct addrinfo *ai = NULL;
	char err[256] = "", name[NI_MAXHOST + 8];

	(void)state;
	assert_int_equal(sel_failpoints_configure("peer.resolve=return(EIO)"), 0);
	assert_int_equal(cluster_resolve("localhost", "1", sel_monotonic_ns() + 1000 * MS, &ai,
					 err, sizeof(err)), -EHOSTUNREACH);
	assert_non_null(strstr(err, "cannot resolve localhost"));
	assert_int_equal(sel_failpoints_configure("thread.start=return(EAGAIN)"), 0);
	assert_int_equal(cluster_resolve("localhost", "1", sel_monotonic_ns() + 1000 * MS, &ai,
					 err, sizeof(err)), -EAGAIN);
	assert_non_null(strstr(err, "on a helper thread"));
	assert_int_equal(sel_failpoints_configure(NULL), 0);
	memset(name, 'a', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	assert_int_equal(cluster_resolve(name, "1", 0, &ai, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "the host name is longer than"));
	assert_int_equal(cluster_resolve("localhost", name, 0, &ai, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "the port"));
	assert_null(ai);
	/* a deadline already past: no helper is started */
	assert_int_equal(sel_failpoints_configure("thread.start=return(EAGAIN)"), 0);
	assert_int_equal(cluster_resolve("localhost", "1", sel_monotonic_ns() - 1, &ai, err,
					 sizeof(err)), -ETIMEDOUT);
	assert_int_equal(sel_failpoint_evaluations(SEL_FP_THREAD_START), 0);
}

/*
 * A name no resolver knows, with whatever name servers this machine has
 * (none reachable on a test machine): the answer comes by the deadline.
 */
static void test_resolve_unknown_name_within_the_deadline(void **state)
{
	struct addrinfo *ai = NULL;
	char err[256] = "";
	uint64_t t0 = sel_monotonic_ns(), took;
	int ret;

	(void)state;
	ret = cluster_resolve("no-such-host.invalid", "1", t0 + 1500 * MS, &ai, err,
			      sizeof(err));
	took = sel_monotonic_ns() - t0;
	print_message("%s after %llu ms\n", err, (unsigned long long)(took / MS));
	assert_true(ret == -EHOSTUNREACH || ret == -ETIMEDOUT);
	assert_non_null(strstr(err, "cannot resolve no-such-host.invalid"));
	assert_true(took < 2500 * MS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_resolve_numeric_addresses, teardown),
		cmocka_unit_test_teardown(test_resolve_name_on_helper, teardown),
		cmocka_unit_test_teardown(test_resolve_gives_up_at_the_deadline, teardown),
		cmocka_unit_test_teardown(test_resolve_retries_temporary_failures, teardown),
		cmocka_unit_test_teardown(test_resolve_temporary_failures_until_the_deadline,
					  teardown),
		cmocka_unit_test_teardown(test_resolve_failures_named, teardown),
		cmocka_unit_test_teardown(test_resolve_unknown_name_within_the_deadline,
					  teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
