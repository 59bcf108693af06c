/*
 * The /metrics server (launch/metrics/http.h) over loopback: the page and
 * the status of every other request (404, 405, 400); a client that connects
 * and says nothing delays a scrape by its request deadline only; a server
 * out of descriptors does not spin on its listener and serves again once
 * descriptors are back; stop returns with a client still connected; signals
 * for the host arriving on the server's thread mid-request are not the
 * request's end; the thread runs SCHED_BATCH at nice 10; a scrape flood is
 * answered 503 past the render rate and served again within it; a
 * connection flood is accepted no faster than the connection rate.
 */
#include "tests/testutil.h"

#include "launch/metrics/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

static const char page[] = "# HELP selene_test A test.\n# TYPE selene_test gauge\nselene_test 1\n";

static int render(void *ctx, char *buf, size_t size)
{
	(void)ctx;
	if (size < sizeof(page))
		return -ENOSPC;
	memcpy(buf, page, sizeof(page));
	return (int)sizeof(page) - 1;
}

static int connect_to(uint16_t port)
{
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons(port) };
	struct timeval tv = { .tv_sec = 10 };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Sends request, reads the whole answer into out (NUL-terminated). */
static void ask(uint16_t port, const char *request, char *out, size_t size)
{
	int fd = connect_to(port);
	size_t used = 0;
	ssize_t n;

	assert_true(fd >= 0);
	assert_int_equal(write(fd, request, strlen(request)), (ssize_t)strlen(request));
	while (used + 1 < size && (n = read(fd, out + used, size - 1 - used)) > 0)
		used += (size_t)n;
	out[used] = '\0';
	close(fd);
}

struct fixture {
	struct launch_metrics_http *server;
	uint16_t port;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char err[256];

	if (launch_metrics_http_start(NULL, 0, render, NULL, &f->server, &f->port, err,
				      sizeof(err)) != 0)
		fail_msg("start: %s", err);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	launch_metrics_http_stop(f->server);
	free(f);
	return 0;
}

static void test_metrics_http_answers(void **state)
{
	struct fixture *f = *state;
	char out[4096];

	ask(f->port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", out, sizeof(out));
	assert_non_null(strstr(out, "200"));
	assert_non_null(strstr(out, "text/plain"));
	assert_non_null(strstr(out, "selene_test 1\n"));
	ask(f->port, "GET /elsewhere HTTP/1.1\r\n\r\n", out, sizeof(out));
	assert_non_null(strstr(out, "404"));
	ask(f->port, "POST /metrics HTTP/1.1\r\n\r\n", out, sizeof(out));
	assert_non_null(strstr(out, "405"));
	ask(f->port, "\x01\x02 nonsense\r\n\r\n", out, sizeof(out));
	assert_non_null(strstr(out, "400"));
}

/* Seconds a scrape took, after the silent clients had 100 ms to be accepted. */
static double timed_scrape(uint16_t port)
{
	struct timeval t0, t1;
	char out[4096];

	usleep(100 * 1000);
	gettimeofday(&t0, NULL);
	ask(port, "GET /metrics HTTP/1.0\r\n\r\n", out, sizeof(out));
	gettimeofday(&t1, NULL);
	assert_non_null(strstr(out, "selene_test 1\n"));
	return (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_usec - t0.tv_usec) / 1e6;
}

/* A silent client delays a scrape no longer than its request deadline. */
static void test_metrics_http_silent_client(void **state)
{
	struct fixture *f = *state;
	int silent = connect_to(f->port);
	double waited;

	assert_true(silent >= 0);
	waited = timed_scrape(f->port);
	printf("a scrape behind a silent client: %.2f s\n", waited);
	assert_true(waited < LAUNCH_METRICS_REQUEST_TIMEOUT_MS / 1000.0 + 5.0);
	close(silent);
}

/*
 * Many silent clients, more than the server reads at once: a scrape is
 * answered within one request deadline (one at a time, 20 of them would
 * hold it for 40 s), and the server still answers afterwards.
 */
static void test_metrics_http_many_silent_clients(void **state)
{
	struct fixture *f = *state;
	int silent[20];
	char out[4096];
	double waited;

	for (int i = 0; i < 20; i++) {
		silent[i] = connect_to(f->port);
		assert_true(silent[i] >= 0);
	}
	waited = timed_scrape(f->port);
	printf("a scrape behind 20 silent clients: %.2f s\n", waited);
	assert_true(waited < LAUNCH_METRICS_REQUEST_TIMEOUT_MS / 1000.0);
	for (int i = 0; i < 20; i++)
		close(silent[i]);
	ask(f->port, "GET / HTTP/1.0\r\n\r\n", out, sizeof(out));
	assert_non_null(strstr(out, "selene_test 1\n"));
}

/*
 * Out of descriptors with a connection waiting: the server backs off
 * instead of spinning on a readable listener (this process, asleep
 * otherwise, uses a small part of a second of CPU), and answers once
 * descriptors are back.
 */
static void test_metrics_http_out_of_descriptors(void **state)
{
	struct fixture *f = *state;
	struct rlimit saved;
	char out[4096];
	double cpu;
	pid_t child;
	int lowest, go[2];

	/* The child connects only once this process is out of descriptors. */
	assert_int_equal(pipe(go), 0);
	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		char c;
		int fd;

		close(go[1]);
		if (read(go[0], &c, 1) != 1)
			_exit(1);
		fd = connect_to(f->port);
		(void)fd;
		sleep(2);
		_exit(0);
	}
	close(go[0]);
	lowest = dup(0);
	assert_true(lowest >= 0);
	close(lowest);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &saved), 0);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &(struct rlimit){ (rlim_t)lowest,
								    saved.rlim_max }), 0);
	assert_int_equal(write(go[1], "x", 1), 1);
	usleep(200 * 1000); /* the connection waits on the listener */
	cpu = tu_cpu_seconds(RUSAGE_SELF);
	sleep(1);
	cpu = tu_cpu_seconds(RUSAGE_SELF) - cpu;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &saved), 0);
	close(go[1]);
	waitpid(child, NULL, 0);
	printf("CPU over 1 s out of descriptors: %.3f s\n", cpu);
	assert_true(cpu < 0.3);
	ask(f->port, "GET /metrics HTTP/1.0\r\n\r\n", out, sizeof(out));
	assert_non_null(strstr(out, "selene_test 1\n"));
}

/* Stop returns while a client is connected and silent. */
static void test_metrics_http_stop_with_client(void **state)
{
	struct fixture *f = *state;
	int silent = connect_to(f->port);

	assert_true(silent >= 0);
	usleep(100 * 1000);
	launch_metrics_http_stop(f->server);
	f->server = NULL;
	close(silent);
}

static void on_signal(int sig)
{
	(void)sig;
}

/*
 * A request arriving in pieces while the host's signals (no SA_RESTART)
 * keep interrupting the server thread's poll and recv: it is answered.
 * The test thread blocks the signal, so the server thread takes each one.
 */
static void test_metrics_http_signals_mid_request(void **state)
{
	static const char *pieces[] = { "GET /met", "rics HTTP/1.1\r\n", "Host: x\r\n", "\r\n" };
	struct fixture *f = *state;
	struct sigaction sa = { .sa_handler = on_signal };
	sigset_t usr1, old;
	char out[4096];
	size_t used = 0;
	ssize_t n;
	int fd;

	sigemptyset(&sa.sa_mask);
	assert_int_equal(sigaction(SIGUSR1, &sa, NULL), 0);
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	assert_int_equal(pthread_sigmask(SIG_BLOCK, &usr1, &old), 0);
	fd = connect_to(f->port);
	assert_true(fd >= 0);
	for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++) {
		assert_int_equal(send(fd, pieces[i], strlen(pieces[i]), MSG_NOSIGNAL),
				 (ssize_t)strlen(pieces[i]));
		for (int k = 0; k < 20; k++) {
			kill(getpid(), SIGUSR1);
			usleep(5000);
		}
	}
	while (used + 1 < sizeof(out) && (n = read(fd, out + used, sizeof(out) - 1 - used)) > 0)
		used += (size_t)n;
	out[used] = '\0';
	close(fd);
	assert_int_equal(pthread_sigmask(SIG_SETMASK, &old, NULL), 0);
	assert_non_null(strstr(out, "200"));
	assert_non_null(strstr(out, "selene_test 1\n"));
}

/* Where the render ran: its thread's nice value and policy. */
struct render_seen {
	int nice;
	int policy;
};

static int render_noting(void *ctx, char *buf, size_t size)
{
	struct render_seen *seen = ctx;

	errno = 0;
	seen->nice = getpriority(PRIO_PROCESS, (id_t)gettid());
	seen->policy = sched_getscheduler(0);
	return render(NULL, buf, size);
}

/*
 * The server's thread runs below the model's, as Selene's background
 * threads: SCHED_BATCH at nice 10 (skipped where this process already runs
 * above nice 10: a thread cannot go back).
 */
static void test_metrics_http_priority(void **state)
{
	struct launch_metrics_http *server;
	struct render_seen seen = { .nice = -100, .policy = -1 };
	char err[256], out[4096];
	uint16_t port;

	(void)state;
	if (getpriority(PRIO_PROCESS, (id_t)gettid()) > 10)
		skip();
	if (launch_metrics_http_start(NULL, 0, render_noting, &seen, &server, &port, err,
				      sizeof(err)) != 0)
		fail_msg("start: %s", err);
	ask(port, "GET /metrics HTTP/1.0\r\n\r\n", out, sizeof(out));
	launch_metrics_http_stop(server);
	assert_non_null(strstr(out, "selene_test 1\n"));
	assert_int_equal(seen.nice, 10);
	assert_int_equal(seen.policy, SCHED_BATCH);
}

static double seconds_since(const struct timeval *t0)
{
	struct timeval t1;

	gettimeofday(&t1, NULL);
	return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_usec - t0->tv_usec) / 1e6;
}

/*
 * A scrape flood: three times the render rate back to back gets 200 for
 * at most the bucket and what refills meanwhile, 503 with Retry-After for
 * the rest, each counted; a second later the page is served again and
 * says how many were refused; scrapes paced within the rate all get 200.
 */
static void test_metrics_http_render_rate(void **state)
{
	const uint32_t rate = LAUNCH_METRICS_RENDERS_PER_SECOND_MAX;
	struct fixture *f = *state;
	struct launch_metrics_http_counts counts;
	uint32_t ok = 0, refused = 0;
	char out[4096], line[128];
	struct timeval t0;
	double took;

	gettimeofday(&t0, NULL);
	for (uint32_t i = 0; i < 3 * rate; i++) {
		ask(f->port, "GET /metrics HTTP/1.0\r\n\r\n", out, sizeof(out));
		if (strstr(out, "HTTP/1.0 200 OK")) {
			ok++;
		} else {
			if (!strstr(out, "HTTP/1.0 503 Service Unavailable") ||
			    !strstr(out, "Retry-After: 1\r\n"))
				fail_msg("neither 200 nor 503: %s", out);
			refused++;
		}
	}
	took = seconds_since(&t0);
	printf("%u scrapes back to back in %.3f s: %u served, %u refused\n", 3 * rate,
	       took, ok, refused);
	assert_true(ok >= rate);
	assert_true(ok <= rate + (uint32_t)(took * rate) + 1);
	if (took < 1.5) /* else a loaded machine paced them itself */
		assert_true(refused >= 1);
	launch_metrics_http_counts(f->server, &counts);
	assert_int_equal(counts.rendered, ok);
	assert_int_equal(counts.refused, refused);

	usleep(1100 * 1000); /* the bucket is full again */
	ask(f->port, "GET /metrics HTTP/1.0\r\n\r\n", out, sizeof(out));
	assert_non_null(strstr(out, "selene_test 1\n"));
	snprintf(line, sizeof(line), "\nselene_metrics_http_refused_total %u\n", refused);
	assert_non_null(strstr(out, line));

	/* twice the bucket, paced a little slower than the rate: every one served */
	usleep(1100 * 1000);
	for (uint32_t i = 0; i < 2 * rate; i++) {
		ask(f->port, "GET /metrics HTTP/1.0\r\n\r\n", out, sizeof(out));
		if (!strstr(out, "HTTP/1.0 200 OK"))
			fail_msg("scrape %u within the rate: %s", i, out);
		usleep(1200 * 1000 / rate);
	}
	launch_metrics_http_counts(f->server, &counts);
	assert_int_equal(counts.refused, refused);
}

/*
 * A connection flood: more than the connection rate in one go (held by
 * the kernel's backlog, a second's worth) are all answered, but the server
 * accepts no more than the rate in the first second (its listener paused),
 * so the last is answered no sooner than a second after the first. Skipped where
 * net.core.somaxconn caps the backlog below the flood.
 */
static void test_metrics_http_connection_rate(void **state)
{
	enum { FLOOD = LAUNCH_METRICS_CONNECTIONS_PER_SECOND_MAX + 50 };
	struct fixture *f = *state;
	struct launch_metrics_http_counts counts;
	static int fds[FLOOD];
	const char request[] = "GET /elsewhere HTTP/1.0\r\n\r\n";
	struct timeval t0;
	char out[1024];
	double took;

	FILE *somaxconn = fopen("/proc/sys/net/core/somaxconn", "r");
	int backlog = 0;

	if (somaxconn) {
		if (fscanf(somaxconn, "%d", &backlog) != 1)
			backlog = 0;
		fclose(somaxconn);
	}
	if (backlog < FLOOD) {
		printf("net.core.somaxconn %d holds fewer than %d connections\n", backlog, FLOOD);
		skip();
	}
	gettimeofday(&t0, NULL);
	for (int i = 0; i < FLOOD; i++) {
		fds[i] = connect_to(f->port);
		assert_true(fds[i] >= 0);
		assert_int_equal(write(fds[i], request, sizeof(request) - 1),
				 (ssize_t)sizeof(request) - 1);
	}
	for (int i = 0; i < FLOOD; i++) {
		size_t used = 0;
		ssize_t n;

		while (used + 1 < sizeof(out) &&
		       (n = read(fds[i], out + used, sizeof(out) - 1 - used)) > 0)
			used += (size_t)n;
		out[used] = '\0';
		close(fds[i]);
		if (!strstr(out, "404"))
			fail_msg("connection %d: %s", i, out);
	}
	took = seconds_since(&t0);
	launch_metrics_http_counts(f->server, &counts);
	printf("%d connections answered in %.3f s, the listener paused %llu time%s\n", FLOOD,
	       took, (unsigned long long)counts.paused, counts.paused == 1 ? "" : "s");
	/* the bound itself; the pause is seen where the server outpaced it */
	assert_true(took >= 0.9);
	if (counts.paused == 0)
		printf("the server accepted fewer than %u a second on its own\n",
		       LAUNCH_METRICS_CONNECTIONS_PER_SECOND_MAX);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_metrics_http_answers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_metrics_http_signals_mid_request, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_metrics_http_silent_client, setup, teardown),
		cmocka_unit_test_setup_teardown(test_metrics_http_many_silent_clients, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_metrics_http_out_of_descriptors, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_metrics_http_stop_with_client, setup,
						teardown),
		cmocka_unit_test(test_metrics_http_priority),
		cmocka_unit_test_setup_teardown(test_metrics_http_render_rate, setup, teardown),
		cmocka_unit_test_setup_teardown(test_metrics_http_connection_rate, setup,
						teardown),
	};

	return cmocka_run_group_tests_name("metrics_http", tests, NULL, NULL);
}
