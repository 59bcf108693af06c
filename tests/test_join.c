/*
 * The join handshake (cluster/join.h) over socketpairs: a good join whose
 * sequences carry on into links; a wrong secret, a malformed or wrong
 * rank, another geometry, a disk store on one side only and an address the
 * rank did not announce, each refused with its reason on both sides; and a
 * rank zero that cannot prove the secret.
 */
#include "tests/testutil.h"

#include "cluster/join.h"
#include "cluster/link.h"
#include "common/base.h"
#include "common/log.h"
#include "record/geometry.h"
#include "selene/selene.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

struct peer_run {
	int fd;
	uint8_t secret[CLUSTER_SECRET_BYTES];
	struct cluster_identity me;
	struct cluster_sequences seq;
	uint64_t limit;
	int result;
	char why[256];
};

static void *peer_main(void *arg)
{
	struct peer_run *p = arg;

	p->result = cluster_join_peer(p->fd, p->secret, &p->me, &p->seq, &p->limit, p->why,
				      sizeof(p->why));
	return NULL;
}

struct fixture {
	struct rec_geometry g;
	struct cluster_join_policy policy;
	uint8_t secret[CLUSTER_SECRET_BYTES];
	struct peer_run peer;
	int fd0;
	pthread_t thread;
	bool allow_address;
};

static bool allow(void *ctx, uint32_t rank, const struct sockaddr *addr, socklen_t len)
{
	(void)rank;
	(void)addr;
	(void)len;
	return *(bool *)ctx;
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	int sv[2];
	struct timeval tv = { .tv_sec = 5 };

	tu_geometry(&f->g, 64, 2, 4096, 4096, 2, 4);
	memset(f->secret, 0x5e, sizeof(f->secret));
	f->allow_address = true;
	f->policy = (struct cluster_join_policy){ .world_size = 4,
						  .layout_digest = f->g.layout_digest,
						  .has_disk_store = true,
						  .address_allowed = allow,
						  .ctx = &f->allow_address };
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(sv[1], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	f->fd0 = sv[0];
	f->peer.fd = sv[1];
	memcpy(f->peer.secret, f->secret, sizeof(f->secret));
	f->peer.me = (struct cluster_identity){ .rank = 2, .world_size = 4,
						.fingerprint = f->g.fingerprint,
						.layout_digest = f->g.layout_digest,
						.has_disk_store = true,
						.disk_limit_bytes = 1000 };
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	if (f->fd0 >= 0)
		close(f->fd0);
	if (f->peer.fd >= 0)
		close(f->peer.fd);
	free(f);
	return 0;
}

/* Runs both sides; returns rank zero's accept result (why in why). */
static int run_join(struct fixture *f, char *why, size_t why_size, bool welcome)
{
	struct cluster_joiner joiner;
	int ret;

	assert_int_equal(pthread_create(&f->thread, NULL, peer_main, &f->peer), 0);
	ret = cluster_join_accept(f->fd0, f->secret, &f->policy, &joiner, why, why_size);
	if (ret == 0 && welcome)
		assert_int_equal(cluster_join_welcome(f->fd0, f->secret, &joiner, 750), 0);
	if (ret != 0 || welcome) {
		pthread_join(f->thread, NULL);
	} else {
		/* leave the peer waiting; close to release it */
		shutdown(f->fd0, SHUT_RDWR);
		pthread_join(f->thread, NULL);
	}
	return ret;
}

struct got {
	pthread_mutex_t lock;
	uint32_t frames;
};

static void got_frame(void *ctx, uint16_t type, const uint8_t *payload, uint32_t length)
{
	struct got *g = ctx;

	(void)type;
	(void)payload;
	(void)length;
	pthread_mutex_lock(&g->lock);
	g->frames++;
	pthread_mutex_unlock(&g->lock);
}

/* The count under its lock: the link's reader thread writes it. */
static uint32_t got_frames(struct got *g)
{
	uint32_t n;

	pthread_mutex_lock(&g->lock);
	n = g->frames;
	pthread_mutex_unlock(&g->lock);
	return n;
}

/* A good join: the agreed limit arrives, and links carry on the sequences. */
static void test_join_good(void **state)
{
	struct fixture *f = *state;
	struct cluster_joiner joiner;
	struct got got = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct cluster_link *l0, *l1;
	char why[256] = "";
	uint8_t hb[8] = { 0 };

	assert_int_equal(pthread_create(&f->thread, NULL, peer_main, &f->peer), 0);
	assert_int_equal(cluster_join_accept(f->fd0, f->secret, &f->policy, &joiner, why,
					     sizeof(why)), 0);
	assert_int_equal(joiner.hello.rank, 2);
	assert_int_equal(joiner.hello.disk_limit_bytes, 1000);
	assert_int_equal(cluster_join_welcome(f->fd0, f->secret, &joiner, 750), 0);
	pthread_join(f->thread, NULL);
	assert_int_equal(f->peer.result, 0);
	assert_int_equal(f->peer.limit, 750);
	/* the handshake's frame numbers carry on into the links */
	assert_int_equal(cluster_link_start(&(struct cluster_link_options){
				.fd = f->fd0, .queue_bytes_max = 1 << 16,
				.silence_timeout_ms = 5000, .send_sequence = joiner.seq.send,
				.recv_sequence = joiner.seq.recv, .on_frame = got_frame,
				.ctx = &got }, &l0), 0);
	assert_int_equal(cluster_link_start(&(struct cluster_link_options){
				.fd = f->peer.fd, .queue_bytes_max = 1 << 16,
				.silence_timeout_ms = 5000, .send_sequence = f->peer.seq.send,
				.recv_sequence = f->peer.seq.recv }, &l1), 0);
	f->fd0 = f->peer.fd = -1;
	assert_int_equal(cluster_link_send(l1, CLUSTER_MSG_HEARTBEAT, hb, 8), 0);
	assert_int_equal(cluster_link_send(l1, CLUSTER_MSG_BYE, NULL, 0), 0);
	for (int i = 0; i < 5000 && got_frames(&got) < 1; i++)
		usleep(1000);
	assert_int_equal(got_frames(&got), 1); /* the BYE; heartbeats are not delivered */
	assert_true(cluster_link_alive(l0));
	cluster_link_close(l0, 100);
	cluster_link_close(l1, 100);
}

/* Each refusal names its reason on both sides. */
static void expect_refused(struct fixture *f, int rank_zero_err, const char *needle)
{
	char why[256] = "";
	int ret = run_join(f, why, sizeof(why), true);

	if (ret != rank_zero_err || !strstr(why, needle))
		fail_msg("rank zero: %d '%s' (wanted %d, '%s')", ret, why, rank_zero_err, needle);
	if (f->peer.result == 0 || !strstr(f->peer.why, needle))
		fail_msg("peer: %d '%s' (wanted '%s')", f->peer.result, f->peer.why, needle);
}

/* A wrong secret. */
static void test_join_wrong_secret(void **state)
{
	struct fixture *f = *state;

	f->peer.secret[3] ^= 1;
	expect_refused(f, -EACCES, "did not prove it holds the launch secret");
	assert_int_equal(f->peer.result, -EACCES);
}

/* A rank outside rank zero's world is refused with the sizes. */
static void test_join_wrong_rank(void **state)
{
	struct fixture *f = *state;

	f->peer.me.rank = 7;
	f->peer.me.world_size = 8;
	expect_refused(f, SEL_EMISMATCH, "rank 7 of a world of 8, but the world has 4 ranks");
}

/* A peer cannot even send a HELLO for a rank outside its own world. */
static void test_join_rank_outside_own_world(void **state)
{
	struct fixture *f = *state;
	uint64_t limit;

	f->peer.me.rank = 7;
	assert_int_equal(cluster_join_peer(f->peer.fd, f->secret, &f->peer.me, &f->peer.seq,
					   &limit, f->peer.why, sizeof(f->peer.why)), -EINVAL);
}

static void test_join_fingerprint_of_another_rank(void **state)
{
	struct fixture *f = *state;

	f->peer.me.rank = 3; /* still rank 2's fingerprint */
	expect_refused(f, SEL_EMISMATCH, "shard fingerprint is not its rank's");
	assert_int_equal(f->peer.result, SEL_EMISMATCH);
}

/* A different geometry fails the join. */
static void test_join_different_geometry(void **state)
{
	struct fixture *f = *state;
	struct rec_geometry other;

	tu_geometry(&other, 64, 2, 4096, 8192, 2, 4);
	f->peer.me.layout_digest = other.layout_digest;
	f->peer.me.fingerprint = other.fingerprint;
	expect_refused(f, SEL_EMISMATCH, "different cache geometry");
}

/* A disk store on one side only. */
static void test_join_disk_store_mismatch(void **state)
{
	struct fixture *f = *state;

	f->peer.me.has_disk_store = false;
	expect_refused(f, SEL_EMISMATCH, "has no disk store");
}

/* R-WIRE-15: a warm tier unlike rank zero's is refused (reason 10). */
static void test_join_warm_size_mismatch(void **state)
{
	struct fixture *f = *state;

	f->policy.warm_bytes = 1u << 20;
	f->peer.me.warm_bytes = 2u << 20;
	expect_refused(f, SEL_EMISMATCH, "has a warm tier of 2097152 bytes");
}

/* R-WIRE-15: with a warm tier, a warm policy unlike rank zero's too. */
static void test_join_warm_policy_mismatch(void **state)
{
	struct fixture *f = *state;

	f->policy.warm_bytes = 1u << 20;
	f->peer.me.warm_bytes = 1u << 20;
	f->peer.me.warm_policy = 1;
	expect_refused(f, SEL_EMISMATCH, "has the warm policy write-behind");
}

/* An address the rank did not announce. */
static void test_join_wrong_address(void **state)
{
	struct fixture *f = *state;

	f->allow_address = false;
	expect_refused(f, -EACCES, "address it did not announce");
}

/* A rank zero without the secret cannot fool a peer. */
static void test_join_impostor_rank_zero(void **state)
{
	struct fixture *f = *state;
	struct cluster_joiner joiner;
	uint8_t wrong[CLUSTER_SECRET_BYTES];
	char why[256];

	memset(wrong, 0x77, sizeof(wrong));
	assert_int_equal(pthread_create(&f->thread, NULL, peer_main, &f->peer), 0);
	/* it cannot even verify the proof; suppose it skips that and welcomes */
	assert_int_equal(cluster_join_accept(f->fd0, wrong, &f->policy, &joiner, why,
					     sizeof(why)), -EACCES);
	pthread_join(f->thread, NULL);
	assert_int_equal(f->peer.result, -EACCES);
}

/*
 * A connection reset mid-join is an error whose reason is written, never
 * the caller's buffer as it was (it went into rank zero's messages).
 */
static void test_join_reset_says_why(void **state)
{
	struct sockaddr_in addr = { .sin_family = AF_INET };
	struct linger hard = { .l_onoff = 1, .l_linger = 0 };
	socklen_t len = sizeof(addr);
	struct cluster_frame_in in = { 0 };
	uint64_t seq = 0;
	char why[200];
	int listener, client, server, ret;

	(void)state;
	listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
	assert_int_equal(bind(listener, (struct sockaddr *)&addr, sizeof(addr)), 0);
	assert_int_equal(listen(listener, 1), 0);
	assert_int_equal(getsockname(listener, (struct sockaddr *)&addr, &len), 0);
	client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(connect(client, (struct sockaddr *)&addr, sizeof(addr)), 0);
	server = accept(listener, NULL, NULL);
	assert_true(server >= 0);
	assert_int_equal(write(client, "\x01\x02", 2), 2); /* half a header */
	assert_int_equal(setsockopt(client, SOL_SOCKET, SO_LINGER, &hard, sizeof(hard)), 0);
	close(client); /* RST */
	memset(why, 'X', sizeof(why));
	why[sizeof(why) - 1] = '\0';
	for (int i = 0; i < 1000; i++) {
		ret = cluster_frame_in_read(server, &in, &seq, why, sizeof(why));
		if (ret != 0)
			break;
		usleep(1000);
	}
	assert_int_equal(ret, -ECONNRESET);
	if (!strstr(why, "reset"))
		fail_msg("why: %s", why);
	close(server);
	close(listener);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_join_good, setup, teardown),
		cmocka_unit_test_setup_teardown(test_join_wrong_secret, setup, teardown),
		cmocka_unit_test_setup_teardown(test_join_wrong_rank, setup, teardown),
		cmocka_unit_test_setup_teardown(test_join_rank_outside_own_world, setup, teardown),
		cmocka_unit_test_setup_teardown(test_join_fingerprint_of_another_rank, setup, teardown),
		cmocka_unit_test_setup_teardown(test_join_different_geometry, setup, teardown),
		cmocka_unit_test_setup_teardown(test_join_disk_store_mismatch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_join_warm_size_mismatch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_join_warm_policy_mismatch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_join_wrong_address, setup, teardown),
		cmocka_unit_test_setup_teardown(test_join_impostor_rank_zero, setup, teardown),
		cmocka_unit_test(test_join_reset_says_why),
	};

	sel_log_set_level(SEL_LOG_ERROR);
	return cmocka_run_group_tests_name("join", tests, NULL, NULL);
}
