/*
 * Links (cluster/link.h) over socketpairs and loopback TCP: frames both
 * ways in order, heartbeats keeping an idle link alive, a silent peer and a
 * stalled peer found dead, a full queue refusing at once, a closed peer, a
 * malformed frame, sends after close, and TCP options on a TCP link; senders
 * racing on a socket too small for their frames (the direct send's rest
 * queued for the writer) with every frame intact.
 */
#include "tests/testutil.h"

#include "cluster/link.h"
#include "cluster/protocol.h"
#include "common/base.h"
#include "common/limits.h"
#include "common/log.h"
#include "selene/selene.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct inbox {
	pthread_mutex_t lock;
	uint32_t frames;
	uint64_t last_job_id;
	bool ordered;
	int closed;
	int reason;
	char why[256];
};

static void inbox_init(struct inbox *in)
{
	memset(in, 0, sizeof(*in));
	pthread_mutex_init(&in->lock, NULL);
	in->ordered = true;
}

static bool slow_reader; /* the reader pauses now and then */

static void on_frame(void *ctx, uint16_t type, const uint8_t *payload, uint32_t length)
{
	struct inbox *in = ctx;
	struct cluster_job_done done;
	char why[128];

	if (slow_reader && in->frames % 64 == 0)
		usleep(200);
	pthread_mutex_lock(&in->lock);
	if (type == CLUSTER_MSG_JOB_DONE &&
	    cluster_job_done_decode(payload, length, &done, why, sizeof(why)) == 0) {
		if (done.job_id != in->last_job_id + 1)
			in->ordered = false;
		in->last_job_id = done.job_id;
	}
	in->frames++;
	pthread_mutex_unlock(&in->lock);
}

static void on_close(void *ctx, int reason, const char *why)
{
	struct inbox *in = ctx;

	pthread_mutex_lock(&in->lock);
	in->closed++;
	in->reason = reason;
	snprintf(in->why, sizeof(in->why), "%s", why);
	pthread_mutex_unlock(&in->lock);
}

static struct cluster_link *start(int fd, struct inbox *in, uint64_t queue,
				  uint32_t heartbeat_ms, uint32_t silence_ms)
{
	struct cluster_link_options o = {
		.fd = fd, .queue_bytes_max = queue, .heartbeat_ms = heartbeat_ms,
		.silence_timeout_ms = silence_ms, .on_frame = on_frame, .on_close = on_close,
		.ctx = in,
	};
	struct cluster_link *l;

	assert_int_equal(cluster_link_start(&o, &l), 0);
	return l;
}

static int send_done(struct cluster_link *l, uint64_t id)
{
	struct cluster_job_done done = { .job_id = id, .result = 0, .bytes = 4096 };
	uint8_t buf[256];
	int n = cluster_job_done_encode(&done, buf, sizeof(buf));

	assert_true(n > 0);
	return cluster_link_send(l, CLUSTER_MSG_JOB_DONE, buf, (uint32_t)n);
}

/* Waits up to ms for pred on the inbox (lock held while testing). */
#define WAIT_FOR(in, ms, pred)                                              \
	do {                                                                \
		for (int w_ = 0; w_ < (ms); w_++) {                         \
			bool ok_;                                           \
			pthread_mutex_lock(&(in)->lock);                    \
			ok_ = (pred);                                       \
			pthread_mutex_unlock(&(in)->lock);                  \
			if (ok_)                                            \
				break;                                      \
			usleep(1000);                                       \
		}                                                           \
	} while (0)

/* Frames go both ways, in order, and all arrive. */
static void test_link_frames_both_ways(void **state)
{
	struct inbox a, b;
	struct cluster_link *la, *lb;
	int sv[2];

	(void)state;
	inbox_init(&a);
	inbox_init(&b);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	la = start(sv[0], &a, 1 << 20, 0, 5000);
	lb = start(sv[1], &b, 1 << 20, 0, 5000);
	for (uint64_t i = 1; i <= 500; i++) {
		while (send_done(la, i) == SEL_EQUEUEFULL)
			usleep(100);
		while (send_done(lb, i) == SEL_EQUEUEFULL)
			usleep(100);
	}
	WAIT_FOR(&a, 5000, a.frames == 500);
	WAIT_FOR(&b, 5000, b.frames == 500);
	assert_int_equal(a.frames, 500);
	assert_int_equal(b.frames, 500);
	assert_true(a.ordered && b.ordered);
	cluster_link_close(la, 1000);
	cluster_link_close(lb, 1000);
	assert_int_equal(a.closed, 1);
	assert_int_equal(b.closed, 1);
}

/*
 * Two linked ends of a socketpair whose buffers hold about 2 KiB, the
 * sending end's queue queue_bytes, and a reader that pauses now and then.
 */
static void start_narrow_pair(struct inbox *a, struct inbox *b, uint64_t queue_bytes,
			      struct cluster_link **la, struct cluster_link **lb)
{
	int sv[2], small = 2048;

	inbox_init(a);
	inbox_init(b);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
	setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	*la = start(sv[0], a, queue_bytes, 0, 5000);
	*lb = start(sv[1], b, 1 << 20, 0, 5000);
	slow_reader = true;
}

struct racer {
	struct cluster_link *link;
	uint32_t frames;
};

static void *racer_main(void *arg)
{
	struct racer *r = arg;
	uint32_t sent = 0;

	while (sent < r->frames) {
		/* frames of 62 to about 200 bytes, so the socket cuts some short */
		struct cluster_job_done done = { .job_id = sent + 1, .result = -5 };
		uint8_t payload[512];
		int n, ret;

		snprintf(done.reason, sizeof(done.reason), "%.*s", (int)(sent % 150),
			 "reason reason reason reason reason reason reason reason reason "
			 "reason reason reason reason reason reason reason reason reason");
		n = cluster_job_done_encode(&done, payload, sizeof(payload));
		assert_true(n > 0);
		ret = cluster_link_send(r->link, CLUSTER_MSG_JOB_DONE, payload, (uint32_t)n);

		if (ret == SEL_EQUEUEFULL) {
			usleep(50);
			continue;
		}
		assert_int_equal(ret, 0);
		sent++;
	}
	return NULL;
}

/*
 * Three threads send at once through a socket whose buffers hold a few
 * frames, to a reader that pauses: direct sends are cut short, their rests
 * queued at the front for the writer, and every frame arrives whole (a torn
 * or reordered frame fails its checksum or sequence and kills the link).
 */
static void test_link_racing_senders_small_socket(void **state)
{
	struct inbox a, b;
	struct cluster_link *la, *lb;
	struct racer racers[3];
	pthread_t threads[3];
	struct cluster_link_stats st;

	(void)state;
	start_narrow_pair(&a, &b, 16 << 10, &la, &lb);
	for (int i = 0; i < 3; i++) {
		racers[i] = (struct racer){ .link = la, .frames = 3000 };
		assert_int_equal(pthread_create(&threads[i], NULL, racer_main, &racers[i]), 0);
	}
	for (int i = 0; i < 3; i++)
		pthread_join(threads[i], NULL);
	WAIT_FOR(&b, 20000, b.frames == 9000 || b.closed);
	slow_reader = false;
	assert_int_equal(b.closed, 0);
	assert_int_equal(b.frames, 9000);
	/* the sender counts a frame once its write returns: after the reader may have it */
	for (int w = 0; w < 5000; w++) {
		cluster_link_stats(la, &st);
		if (st.frames_sent == 9000)
			break;
		usleep(1000);
	}
	assert_int_equal(st.frames_sent, 9000);
	assert_int_equal(st.queued_bytes, 0);
	assert_true(cluster_link_alive(la) && cluster_link_alive(lb));
	cluster_link_close(la, 1000);
	cluster_link_close(lb, 1000);
}

/*
 * A TCP connection on loopback with small buffers: the client's sends
 * (*cli) fill up at once while the server (*srv) does not read.
 */
static void small_tcp_pair(int *lis, int *cli, int *srv)
{
	struct sockaddr_in addr = { .sin_family = AF_INET };
	socklen_t len = sizeof(addr);
	int small = 4096;

	*lis = socket(AF_INET, SOCK_STREAM, 0);
	inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
	assert_int_equal(bind(*lis, (struct sockaddr *)&addr, sizeof(addr)), 0);
	assert_int_equal(listen(*lis, 1), 0);
	assert_int_equal(getsockname(*lis, (struct sockaddr *)&addr, &len), 0);
	*cli = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(*cli, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
	assert_int_equal(connect(*cli, (struct sockaddr *)&addr, sizeof(addr)), 0);
	*srv = accept(*lis, NULL, NULL);
	setsockopt(*srv, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
}

/*
 * A frame to a TCP peer that never reads: the sender's direct write is cut
 * short and the writer blocks on the rest until the silence timeout kills
 * the link. The shutdown that follows fails that write with EPIPE, which must
 * not raise SIGPIPE (R-WIRE-9): the process lives and is told why. The same
 * again through cluster_link_close with a short linger.
 */
static void test_link_stalled_tcp_peer_no_sigpipe(void **state)
{
	static uint8_t big[CLUSTER_DIRECT_PAYLOAD_BYTES_MAX];

	(void)state;
	for (int round = 0; round < 2; round++) {
		int lis, cli, srv;
		struct cluster_link *l;
		struct inbox in;

		inbox_init(&in);
		small_tcp_pair(&lis, &cli, &srv);
		l = start(cli, &in, 16 << 20, 0, round == 0 ? 700 : 60000);
		/* written directly and cut short: the writer blocks on its rest */
		assert_int_equal(cluster_link_send(l, CLUSTER_MSG_JOB, big, sizeof(big)), 0);
		if (round == 0) {
			WAIT_FOR(&in, 5000, in.closed == 1);
			assert_int_equal(in.closed, 1);
			assert_int_equal(in.reason, -ETIMEDOUT);
			cluster_link_close(l, 0);
		} else {
			usleep(200000);
			cluster_link_close(l, 100);
			assert_int_equal(in.closed, 1);
		}
		close(srv);
		close(lis);
	}
}

static void on_usr1(int sig)
{
	(void)sig;
}

/* What the stalled peer of test_link_signals_keep_the_send_timeout does. */
struct stalled_peer {
	int fd;
	bool stop;
};

/*
 * Every 20 ms, SIGUSR1 to every thread of the process but the caller's
 * (which blocks it), so the link's writer is interrupted wherever it waits;
 * and a heartbeat from the peer that never reads, so only the writer's
 * send timeout can find it stalled.
 */
static void *stalled_peer_main(void *arg)
{
	struct stalled_peer *p = arg;
	uint64_t sequence = 0;
	uint8_t beat[CLUSTER_HEARTBEAT_BYTES];
	int n = cluster_heartbeat_encode(&(struct cluster_heartbeat){ .monotonic_ns = 1 }, beat,
					 sizeof(beat));

	assert_true(n > 0);
	while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
		DIR *d = opendir("/proc/self/task");
		struct dirent *t;

		while (d && (t = readdir(d)) != NULL) {
			pid_t tid = (pid_t)atoi(t->d_name);

			if (tid > 0 && tid != (pid_t)syscall(SYS_gettid))
				syscall(SYS_tgkill, getpid(), tid, SIGUSR1);
		}
		if (d)
			closedir(d);
		cluster_frame_write(p->fd, &sequence, CLUSTER_MSG_HEARTBEAT, beat, (uint32_t)n);
		usleep(20000);
	}
	return NULL;
}

/*
 * R-WIRE-9 under signals: the writer finishing the rest of a frame a
 * sender began keeps the socket's send timeout across signals (a handler
 * without SA_RESTART, every 20 ms). Before, each signal restarted the
 * timeout, and a stalled peer was found only once the signals stopped
 * (TCP_USER_TIMEOUT, off here, bounds it on TCP otherwise).
 */
static void test_link_signals_keep_the_send_timeout(void **state)
{
	static uint8_t big[CLUSTER_DIRECT_PAYLOAD_BYTES_MAX];
	int lis, cli, srv;
	struct sigaction sa = { .sa_handler = on_usr1 }, old;
	struct stalled_peer peer = { 0 };
	sigset_t usr1, before;
	struct cluster_link *l;
	pthread_t thread;
	struct inbox in;
	uint64_t t0, waited_ms;

	(void)state;
	inbox_init(&in);
	small_tcp_pair(&lis, &cli, &srv);
	assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0); /* no SA_RESTART */
	l = start(cli, &in, 16 << 20, 0, 700);
	/* the kernel's own bound on unacknowledged data off: the send timeout alone */
	assert_int_equal(setsockopt(cli, IPPROTO_TCP, TCP_USER_TIMEOUT, &(unsigned int){ 0 },
				    sizeof(unsigned int)), 0);
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &usr1, &before);
	peer.fd = srv;
	assert_int_equal(pthread_create(&thread, NULL, stalled_peer_main, &peer), 0);
	t0 = sel_monotonic_ns();
	/* written directly and cut short: the writer blocks on its rest */
	assert_int_equal(cluster_link_send(l, CLUSTER_MSG_JOB, big, sizeof(big)), 0);
	WAIT_FOR(&in, 6000, in.closed == 1);
	waited_ms = (sel_monotonic_ns() - t0) / 1000000;
	__atomic_store_n(&peer.stop, true, __ATOMIC_RELEASE);
	pthread_join(thread, NULL);
	assert_int_equal(in.closed, 1);
	assert_int_equal(in.reason, -ETIMEDOUT);
	print_message("under signals, a 700 ms send timeout closed the link after %llu ms\n",
		      (unsigned long long)waited_ms);
	assert_true(waited_ms < 3000);
	cluster_link_close(l, 0);
	pthread_sigmask(SIG_SETMASK, &before, NULL);
	assert_int_equal(sigaction(SIGUSR1, &old, NULL), 0);
	close(srv);
	close(lis);
}

/*
 * A queue that holds one small frame but not a frame with its header: a
 * direct send cut short must not need more room than the queue has, so
 * such frames always go through the queue, and every one arrives.
 */
static void test_link_tiny_queue(void **state)
{
	struct inbox a, b;
	struct cluster_link *la, *lb;

	(void)state;
	start_narrow_pair(&a, &b, 32, &la, &lb);
	for (uint64_t i = 1; i <= 2000; i++)
		while (send_done(la, i) == SEL_EQUEUEFULL)
			usleep(20);
	WAIT_FOR(&b, 20000, b.frames == 2000 || b.closed);
	slow_reader = false;
	assert_int_equal(b.frames, 2000);
	assert_true(b.ordered);
	cluster_link_close(la, 1000);
	cluster_link_close(lb, 1000);
}

/* Heartbeats keep an idle link alive past its silence timeout. */
static void test_link_heartbeats(void **state)
{
	struct inbox a, b;
	struct cluster_link *la, *lb;
	struct cluster_link_stats st;
	int sv[2];

	(void)state;
	inbox_init(&a);
	inbox_init(&b);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	la = start(sv[0], &a, 1 << 16, 50, 400);
	lb = start(sv[1], &b, 1 << 16, 50, 400);
	usleep(1200 * 1000);
	assert_true(cluster_link_alive(la) && cluster_link_alive(lb));
	cluster_link_stats(la, &st);
	assert_true(st.heartbeats_sent >= 5);
	assert_int_equal(a.frames, 0); /* heartbeats are not delivered */
	cluster_link_close(la, 0);
	cluster_link_close(lb, 0);
}

/* A peer that says nothing is found dead after the silence timeout. */
static void test_link_silent_peer(void **state)
{
	struct inbox a;
	struct cluster_link *la;
	int sv[2];

	(void)state;
	inbox_init(&a);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	la = start(sv[0], &a, 1 << 16, 0, 300);
	WAIT_FOR(&a, 5000, a.closed == 1);
	assert_int_equal(a.closed, 1);
	assert_int_equal(a.reason, -ETIMEDOUT);
	assert_false(cluster_link_alive(la));
	assert_int_equal(send_done(la, 1), SEL_ESTOPPED);
	cluster_link_close(la, 0);
	assert_int_equal(a.closed, 1); /* once */
	close(sv[1]);
}

/*
 * A peer that stops reading: the queue fills and sends fail at once; the
 * stalled send then kills the link.
 */
static void test_link_stalled_peer_fills_queue(void **state)
{
	static uint8_t big[1 << 20], header[4096];
	static uint32_t ids[200000];
	struct cluster_job job = { .job_id = 1, .kind = CLUSTER_JOB_STORE,
				   .record_header = header, .page_ids = ids,
				   .page_id_count = 200000 };
	struct inbox a;
	struct cluster_link *la;
	int sv[2], refused = 0, n;

	(void)state;
	inbox_init(&a);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	la = start(sv[0], &a, 4 << 20, 0, 500);
	n = cluster_job_encode(&job, big, sizeof(big));
	assert_true(n > 0);
	for (int i = 0; i < 1000 && !refused; i++) {
		int ret = cluster_link_send(la, CLUSTER_MSG_JOB, big, (uint32_t)n);

		/*
		 * Full, or (a slow run, e.g. under TSan) already dead of the
		 * silence: either way the sender is answered, never blocked.
		 */
		if (ret == SEL_EQUEUEFULL || ret == SEL_ESTOPPED)
			refused = 1;
		else
			assert_int_equal(ret, 0);
	}
	assert_true(refused);
	WAIT_FOR(&a, 5000, a.closed == 1);
	assert_int_equal(a.reason, -ETIMEDOUT);
	cluster_link_close(la, 0);
	close(sv[1]);
}

/* The peer closing between frames is a clean end; garbage is a protocol error. */
static void test_link_peer_close_and_garbage(void **state)
{
	struct inbox a, b;
	struct cluster_link *la, *lb;
	int sv[2];

	(void)state;
	inbox_init(&a);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	la = start(sv[0], &a, 1 << 16, 0, 5000);
	close(sv[1]);
	WAIT_FOR(&a, 5000, a.closed == 1);
	assert_int_equal(a.reason, 0);
	assert_non_null(strstr(a.why, "closed"));
	cluster_link_close(la, 0);

	inbox_init(&b);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	lb = start(sv[0], &b, 1 << 16, 0, 5000);
	assert_int_equal(write(sv[1], "GARBAGE GARBAGE GARBAGE GARBAGE GARBAGE!!", 41), 41);
	WAIT_FOR(&b, 5000, b.closed == 1);
	assert_int_equal(b.reason, SEL_EPROTO);
	cluster_link_close(lb, 0);
	close(sv[1]);
}

/* Over TCP the link sets TCP_NODELAY and TCP_USER_TIMEOUT. */
static void test_link_tcp_options(void **state)
{
	struct sockaddr_in addr = { .sin_family = AF_INET };
	socklen_t len = sizeof(addr);
	struct inbox a, b;
	struct cluster_link *la, *lb;
	int listener, client, server, nodelay = 0;
	unsigned int user_timeout = 0;
	socklen_t optlen = sizeof(nodelay);

	(void)state;
	inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
	listener = socket(AF_INET, SOCK_STREAM, 0);
	if (listener < 0 || bind(listener, (struct sockaddr *)&addr, sizeof(addr)) != 0) {
		fprintf(stderr, "skip: no loopback TCP (%s)\n", strerror(errno));
		skip();
	}
	assert_int_equal(listen(listener, 1), 0);
	assert_int_equal(getsockname(listener, (struct sockaddr *)&addr, &len), 0);
	client = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(connect(client, (struct sockaddr *)&addr, sizeof(addr)), 0);
	server = accept(listener, NULL, NULL);
	assert_true(server >= 0);
	inbox_init(&a);
	inbox_init(&b);
	la = start(client, &a, 1 << 16, 100, 2000);
	lb = start(server, &b, 1 << 16, 100, 2000);
	assert_int_equal(getsockopt(client, IPPROTO_TCP, TCP_NODELAY, &nodelay, &optlen), 0);
	assert_true(nodelay);
	optlen = sizeof(user_timeout);
	assert_int_equal(getsockopt(client, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout,
				    &optlen), 0);
	assert_int_equal(user_timeout, 2000);
	assert_int_equal(send_done(la, 1), 0);
	WAIT_FOR(&b, 5000, b.frames == 1);
	assert_int_equal(b.frames, 1);
	cluster_link_close(la, 1000);
	cluster_link_close(lb, 1000);
	close(listener);
}

static int int_option(int fd, int level, int name)
{
	int value = -1;
	socklen_t len = sizeof(value);

	assert_int_equal(getsockopt(fd, level, name, &value, &len), 0);
	return value;
}

/*
 * Keepalive from a silence timeout (what a diskless peer's wait for rank
 * zero's BYE uses): on TCP, probes after a third of 9 s idle, every third,
 * given up at 9 s; on a socket that is not TCP, nothing fails.
 */
static void test_link_socket_keepalive(void **state)
{
	int lis, cli, srv, pair[2];

	(void)state;
	small_tcp_pair(&lis, &cli, &srv);
	assert_int_equal(int_option(cli, SOL_SOCKET, SO_KEEPALIVE), 0);
	cluster_socket_keepalive(cli, 9000);
	assert_int_equal(int_option(cli, SOL_SOCKET, SO_KEEPALIVE), 1);
	assert_int_equal(int_option(cli, IPPROTO_TCP, TCP_KEEPIDLE), 4);
	assert_int_equal(int_option(cli, IPPROTO_TCP, TCP_KEEPINTVL), 4);
	assert_int_equal(int_option(cli, IPPROTO_TCP, TCP_USER_TIMEOUT), 9000);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
	cluster_socket_keepalive(pair[0], 9000);
	assert_int_equal(write(pair[0], "x", 1), 1);
	close(pair[0]);
	close(pair[1]);
	close(cli);
	close(srv);
	close(lis);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_link_frames_both_ways),
		cmocka_unit_test(test_link_racing_senders_small_socket),
		cmocka_unit_test(test_link_stalled_tcp_peer_no_sigpipe),
		cmocka_unit_test(test_link_signals_keep_the_send_timeout),
		cmocka_unit_test(test_link_tiny_queue),
		cmocka_unit_test(test_link_heartbeats),
		cmocka_unit_test(test_link_silent_peer),
		cmocka_unit_test(test_link_stalled_peer_fills_queue),
		cmocka_unit_test(test_link_peer_close_and_garbage),
		cmocka_unit_test(test_link_tcp_options),
		cmocka_unit_test(test_link_socket_keepalive),
	};

	sel_log_set_level(SEL_LOG_ERROR);
	return cmocka_run_group_tests_name("link", tests, NULL, NULL);
}
