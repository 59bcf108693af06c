/*
 * Hostile connections against a pool manager (pool/PROTOCOL.md R-POOL-6,
 * R-POOL-9, R-POOL-10, R-POOL-14 .. R-POOL-18, the handshake deadline):
 * stranger bytes, a cluster frame, half a handshake, a wrong secret, a
 * wrong or duplicate scope, oversized and out-of-place frames, and a
 * slowloris of trickling connections. For each: no such connection is ever
 * sent WELCOME or anything after it, none holds up an honest rank's open
 * and lookup meanwhile, and the manager goes on serving after it.
 */
#include "tests/testutil.h"

#include "common/base.h"
#include "common/log.h"
#include "pool/manager.h"
#include "pool/wire.h"
#include "record/key.h"
#include "selene/selene.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

/* An honest open and first lookup must finish in this, whatever else connects. */
#define HONEST_MS 2000
/* A hostile connection must be closed by the manager within this. */
#define CLOSED_MS (POOL_HANDSHAKE_MS + 3000)

struct fixture {
	uint8_t secret[POOL_SECRET_BYTES];
	struct pool_manager *manager;
	pthread_t thread;
	uint16_t port;
	struct rec_geometry g;
	struct rec_identity model, ns;
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void *manager_thread(void *arg)
{
	assert_int_equal(pool_manager_run(arg), 0);
	return NULL;
}

/* A manager in this process on 127.0.0.1, a port of its own, 16 MiB of arena. */
static int hostile_manager_start(struct fixture *f, char *why, size_t why_size)
{
	struct pool_manager_config c = {
		.listen = "127.0.0.1:0",
		.name = "hostile",
		.memory_bytes = 16u << 20,
	};
	int ret;

	memcpy(c.secret, f->secret, sizeof(c.secret));
	ret = pool_manager_open(&c, &f->manager, why, why_size);
	if (ret)
		return ret;
	f->port = pool_manager_port(f->manager);
	return -pthread_create(&f->thread, NULL, manager_thread, f->manager);
}

static void hostile_manager_stop(struct fixture *f)
{
	pool_manager_stop(f->manager);
	pthread_join(f->thread, NULL);
	pool_manager_close(f->manager);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char why[256] = "";

	assert_non_null(f);
	assert_int_equal(getrandom(f->secret, sizeof(f->secret), 0), sizeof(f->secret));
	tu_geometry(&f->g, 16, 2, 4096, 4096, 0, 1);
	tu_identities(&f->model, &f->ns);
	if (hostile_manager_start(f, why, sizeof(why)) != 0)
		fail_msg("manager: %s", why);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	hostile_manager_stop(f);
	free(f);
	return 0;
}

/* A TCP connection to the manager, blocking, with receive timeouts of 100 ms. */
static int connect_manager(const struct fixture *f)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(f->port) };
	struct timeval tv = { .tv_usec = 100000 };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;

	assert_true(fd >= 0);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/* Sends what it can; a closed connection is not this helper's failure. */
static void send_bytes(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n <= 0)
			return;
		p += n;
		len -= (size_t)n;
	}
}

/* A frame header of the pool's grammar with any length (no bounds asserted). */
static void raw_header(uint8_t out[CLUSTER_FRAME_HEADER_BYTES], uint16_t type,
		       uint64_t sequence, uint32_t length, const uint8_t *payload)
{
	memset(out, 0, CLUSTER_FRAME_HEADER_BYTES);
	memcpy(out, POOL_MAGIC, 4);
	out[4] = (uint8_t)POOL_VERSION;
	out[6] = (uint8_t)type;
	sel_put_le32(out + 8, length);
	sel_put_le64(out + 16, sequence);
	sel_put_le64(out + 24, payload ? XXH3_64bits(payload, length) : 0);
	sel_put_le64(out + 32, XXH3_64bits(out, 32));
}

/* What a hostile connection was sent before it closed. */
struct seen {
	bool closed;
	bool served;        /* WELCOME, or anything but CHALLENGE and REFUSE */
	uint32_t refuse_reason;
	uint32_t challenges;
	uint8_t server_nonce[POOL_NONCE_BYTES];
};

/*
 * Reads whole frames until the manager closes fd or until_ms passes;
 * stops early after a CHALLENGE when stop_at_challenge (the caller goes on).
 */
static void read_frames(int fd, uint64_t until_ms, bool stop_at_challenge, struct seen *s)
{
	static uint8_t payload[POOL_CONTROL_BODY_BYTES_MAX + POOL_TAG_BYTES];
	uint8_t header[CLUSTER_FRAME_HEADER_BYTES];
	size_t got = 0, want = sizeof(header);
	struct cluster_frame_header h;
	bool in_payload = false;
	char why[256];

	while (now_ms() < until_ms) {
		uint8_t *dst = in_payload ? payload : header;
		ssize_t n = recv(fd, dst + got, want - got, 0);

		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
			       errno != EINTR)) {
			s->closed = true;
			return;
		}
		if (n < 0)
			continue;
		got += (size_t)n;
		if (got < want)
			continue;
		if (!in_payload) {
			assert_int_equal(cluster_frame_header_decode_in(&pool_grammar, header, &h,
									why, sizeof(why)),
					 0);
			assert_true(h.payload_length <= sizeof(payload));
			in_payload = true;
			got = 0;
			want = h.payload_length;
			if (want > 0)
				continue;
		}
		if (h.type == POOL_MSG_REFUSE) {
			s->refuse_reason = sel_get_le32(payload);
		} else if (h.type == POOL_MSG_CHALLENGE) {
			s->challenges++;
			memcpy(s->server_nonce, payload, POOL_NONCE_BYTES);
			if (stop_at_challenge)
				return;
		} else {
			s->served = true;
		}
		in_payload = false;
		got = 0;
		want = sizeof(header);
	}
}

/* The manager closes fd within CLOSED_MS, having served it nothing. */
static void expect_refused(int fd, struct seen *s)
{
	read_frames(fd, now_ms() + CLOSED_MS, false, s);
	assert_true(s->closed);
	assert_false(s->served);
	close(fd);
}

/* An honest rank speaking the wire (pool/wire.h), as a client would. */
struct honest {
	int fd;
	uint8_t kc[POOL_KEY_BYTES];
	uint64_t seq;
	struct pool_rx rx;
	uint8_t *body;
	struct pool_refuse refused;
};

static void honest_send(struct honest *h, uint16_t type, const uint8_t *body, int length)
{
	assert_true(length >= 0);
	assert_int_equal(pool_frame_write(h->fd, h->kc[0] || h->kc[1] ? h->kc : NULL,
					  POOL_TO_MANAGER, &h->seq, type, body, (uint32_t)length,
					  NULL, 0),
			 0);
}

/* One frame within the socket's timeout; a REFUSE is decoded into h->refused. */
static int honest_recv(struct honest *h)
{
	char why[256];
	int ret;

	ret = pool_rx_read_frame(&h->rx, h->fd, why, sizeof(why));
	if (ret == 1 && h->rx.header.type == POOL_MSG_REFUSE)
		assert_int_equal(pool_refuse_decode(h->rx.body, h->rx.body_length, &h->refused,
						    why, sizeof(why)),
				 0);
	return ret;
}

static void attach_parts(const struct fixture *f, struct pool_attach *a)
{
	memset(a, 0, sizeof(*a));
	a->rank = 0;
	a->world_size = 1;
	assert_int_equal(getrandom(a->instance_id, sizeof(a->instance_id), 0),
			 sizeof(a->instance_id));
	a->instance_id[0] |= 1;
	a->namespace_id = f->ns;
	a->layout_digest = f->g.layout_digest;
	a->page_tokens = f->g.page_tokens;
	a->plane_count = f->g.page_plane_count;
	a->page_bytes[0] = f->g.page_record_bytes;
	a->row_bytes[0] = f->g.row_record_bytes;
}

/*
 * Connects, proves secret and attaches with a (NULL: the fixture's own
 * parts). Returns 0, the REFUSE reason, or -1 when the manager closed.
 */
static int honest_open(const struct fixture *f, struct honest *h, const uint8_t *secret,
		       const struct pool_attach *a)
{
	static uint8_t buf[POOL_CONTROL_BODY_BYTES_MAX];
	struct pool_attach own;
	struct pool_welcome welcome;
	uint8_t cn[POOL_NONCE_BYTES], sn[POOL_NONCE_BYTES], mac[POOL_MAC_BYTES];
	struct timeval tv = { .tv_sec = HONEST_MS / 1000 };
	char why[256];
	int n;

	memset(h, 0, sizeof(*h));
	h->body = tu_alloc(POOL_CONTROL_BODY_BYTES_MAX);
	pool_rx_init(&h->rx, h->body, POOL_CONTROL_BODY_BYTES_MAX, POOL_TO_RANK);
	h->fd = connect_manager(f);
	setsockopt(h->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	assert_int_equal(cluster_nonce_fill(cn), 0);
	honest_send(h, POOL_MSG_HELLO, cn, POOL_NONCE_BYTES);
	assert_int_equal(honest_recv(h), 1);
	assert_int_equal(h->rx.header.type, POOL_MSG_CHALLENGE);
	memcpy(sn, h->body, POOL_NONCE_BYTES);
	pool_proof_mac(secret, sn, cn, mac);
	honest_send(h, POOL_MSG_PROOF, mac, POOL_MAC_BYTES);
	if (honest_recv(h) != 1)
		return -1;
	if (h->rx.header.type == POOL_MSG_REFUSE)
		return (int)h->refused.reason;
	assert_int_equal(h->rx.header.type, POOL_MSG_WELCOME);
	assert_int_equal(pool_welcome_decode(h->body, h->rx.body_length, &welcome, why,
					     sizeof(why)),
			 0);
	pool_connection_key(secret, cn, sn, h->kc);
	h->rx.key = h->kc;
	if (!a) {
		attach_parts(f, &own);
		a = &own;
	}
	n = pool_attach_encode(a, buf, sizeof(buf));
	honest_send(h, POOL_MSG_ATTACH, buf, n);
	if (honest_recv(h) != 1)
		return -1;
	if (h->rx.header.type == POOL_MSG_REFUSE)
		return (int)h->refused.reason;
	assert_int_equal(h->rx.header.type, POOL_MSG_ATTACHED);
	return 0;
}

static void honest_close(struct honest *h)
{
	close(h->fd);
	free(h->body);
}

/* An honest rank opens, attaches and has a lookup answered within HONEST_MS. */
static void honest_rank_served(const struct fixture *f)
{
	struct pool_chain_view chain;
	struct honest h;
	struct rec_key key;
	uint64_t ticket = 0, start = now_ms();
	char why[256];

	assert_int_equal(honest_open(f, &h, f->secret, NULL), 0);
	memset(&key, 0, sizeof(key));
	key.consumed = 64;
	tu_fill(key.digest.bytes, sizeof(key.digest.bytes), 5);
	honest_send(&h, POOL_MSG_LOOKUP, h.body,
		    pool_lookup_encode(7, &key, 1, h.body, POOL_CONTROL_BODY_BYTES_MAX));
	assert_int_equal(honest_recv(&h), 1);
	assert_int_equal(h.rx.header.type, POOL_MSG_ANSWER);
	assert_int_equal(pool_answer_decode(h.body, h.rx.body_length, &ticket, &chain, why,
					    sizeof(why)),
			 0);
	assert_int_equal(ticket, 7);
	assert_int_equal(chain.count, 0);
	if (now_ms() - start >= HONEST_MS)
		fail_msg("an honest open and lookup took %" PRIu64 " ms", now_ms() - start);
	honest_close(&h);
}

/* Stranger bytes and a cluster frame on the pool port: closed, never served. */
static void test_pool_hostile_stranger_bytes(void **state)
{
	struct fixture *f = *state;
	static const size_t lengths[] = { 1, 39, 40, 41, 100, 4096, 65536 };
	uint8_t junk[65536];
	int fds[SEL_ARRAY_SIZE(lengths) + 1];
	struct pool_manager_stats st;

	for (size_t i = 0; i < SEL_ARRAY_SIZE(lengths); i++) {
		tu_fill(junk, sizeof(junk), 100 + i);
		fds[i] = connect_manager(f);
		send_bytes(fds[i], junk, lengths[i]);
	}
	/* A cluster link's frame (magic SELN): refused at its magic, R-POOL-2. */
	fds[SEL_ARRAY_SIZE(lengths)] = connect_manager(f);
	raw_header(junk, 1, 0, 32, junk + 64);
	memcpy(junk, "SELN", 4);
	send_bytes(fds[SEL_ARRAY_SIZE(lengths)], junk, 40 + 32);
	honest_rank_served(f);
	for (size_t i = 0; i < SEL_ARRAY_SIZE(fds); i++) {
		struct seen s = { 0 };

		expect_refused(fds[i], &s);
	}
	honest_rank_served(f);
	pool_manager_stats(f->manager, &st);
	assert_true(st.refused >= SEL_ARRAY_SIZE(fds));
	assert_int_equal(st.connections, SEL_ARRAY_SIZE(fds) + 2);
}

/* Half a handshake (HELLO, then silence; a header cut short) holds up no one, and ends at the deadline. */
static void test_pool_hostile_half_handshake(void **state)
{
	struct fixture *f = *state;
	uint8_t nonce[POOL_NONCE_BYTES], header[CLUSTER_FRAME_HEADER_BYTES], tag[POOL_TAG_BYTES];
	struct seen s = { 0 }, cut = { 0 };
	int hello = connect_manager(f), partial = connect_manager(f);

	assert_int_equal(getrandom(nonce, sizeof(nonce), 0), sizeof(nonce));
	nonce[0] |= 1;
	pool_frame_build(NULL, POOL_TO_MANAGER, 0, POOL_MSG_HELLO, nonce, sizeof(nonce), NULL, 0,
			 header, tag);
	send_bytes(hello, header, sizeof(header));
	send_bytes(hello, nonce, sizeof(nonce));
	read_frames(hello, now_ms() + HONEST_MS, true, &s);
	assert_int_equal(s.challenges, 1);
	send_bytes(partial, header, 20);

	honest_rank_served(f);
	expect_refused(hello, &s);
	expect_refused(partial, &cut);
	honest_rank_served(f);
}

/* A wrong secret is refused (auth) at PROOF, never WELCOMEd, and honest ranks go on. */
static void test_pool_hostile_wrong_secret(void **state)
{
	struct fixture *f = *state;
	uint8_t other[POOL_SECRET_BYTES];
	struct honest h;
	struct seen s = { 0 };

	memcpy(other, f->secret, sizeof(other));
	other[7] ^= 0x20;
	assert_int_equal(honest_open(f, &h, other, NULL), POOL_REFUSE_AUTH);
	expect_refused(dup(h.fd), &s);
	honest_close(&h);
	honest_rank_served(f);
}

/* Scope parts the manager must refuse (R-POOL-15): never ATTACHED, never served. */
static void test_pool_hostile_wrong_scope(void **state)
{
	struct fixture *f = *state;
	struct pool_attach a;
	struct honest h;

	attach_parts(f, &a);
	a.page_bytes[0] = 4096 + 1000; /* not a multiple of 4096 */
	assert_int_equal(honest_open(f, &h, f->secret, &a), POOL_REFUSE_SCOPE);
	honest_close(&h);
	attach_parts(f, &a);
	a.row_bytes[0] = 0;
	assert_int_equal(honest_open(f, &h, f->secret, &a), POOL_REFUSE_SCOPE);
	honest_close(&h);
	attach_parts(f, &a);
	a.page_bytes[0] = 1ull << 40; /* larger than a window */
	assert_int_equal(honest_open(f, &h, f->secret, &a), POOL_REFUSE_SCOPE);
	honest_close(&h);
	honest_rank_served(f);
}

/*
 * R-POOL-40: a put's deadline is the claim setup plus its bytes at 8 MiB/s.
 * A share of 18446749696 bytes (1099 pages of 16 MiB and a row of 8572928
 * bytes), just past 2^64 / 10^9, has about 2199 s; a manager whose
 * arithmetic wraps gives it the setup alone and fails it with -ETIMEDOUT.
 * The arena is a sparse file: nothing of it is written.
 */
static void test_pool_hostile_huge_put_deadline(void **state)
{
	const struct fixture *f = *state;
	const uint32_t pages = 1099, page_bytes = 16u << 20, row_bytes = 8572928;
	struct pool_manager_config c = { .listen = "127.0.0.1:0", .name = "hostile",
					 .memory_bytes = 18447000000ull,
					 .window_bytes = 16u << 20, .claim_setup_ms = 200 };
	struct fixture big = *f;
	struct pool_put_begin b = { .request_id = 1, .tail_page_count = pages, .row = true,
				    .world_size = 1 };
	struct pool_put_ready ready;
	struct pool_attach a;
	struct honest h;
	uint64_t share = REC_HEADER_BYTES + sel_align_up(8ull * pages, 4096) +
			 (uint64_t)pages * page_bytes + row_bytes;
	uint8_t buf[256];
	char why[256];
	int ret;

	assert_int_equal(share, 18446749696ull);
	assert_true(share > UINT64_MAX / 1000000000ull);
	memcpy(c.secret, f->secret, sizeof(c.secret));
	ret = pool_manager_open(&c, &big.manager, why, sizeof(why));
	if (ret) {
		print_message("skipped: a sparse arena of 18.4 GB: %s\n", why);
		skip();
	}
	big.port = pool_manager_port(big.manager);
	assert_int_equal(pthread_create(&big.thread, NULL, manager_thread, big.manager), 0);
	attach_parts(&big, &a);
	a.page_bytes[0] = page_bytes;
	a.row_bytes[0] = row_bytes;
	assert_int_equal(honest_open(&big, &h, big.secret, &a), 0);
	b.key.consumed = (uint64_t)pages * big.g.page_tokens;
	tu_fill(b.key.digest.bytes, sizeof(b.key.digest.bytes), 3);
	honest_send(&h, POOL_MSG_PUT_BEGIN, buf, pool_put_begin_encode(&b, &share, buf, sizeof(buf)));
	assert_int_equal(honest_recv(&h), 1);
	assert_int_equal(h.rx.header.type, POOL_MSG_PUT_READY);
	assert_int_equal(pool_put_ready_decode(h.body, h.rx.body_length, &ready, why, sizeof(why)),
			 0);
	assert_int_equal(ready.result, 0);
	/* well past the setup's 200 ms: the put is still open, nothing ended it */
	usleep(1000000);
	honest_send(&h, POOL_MSG_LOOKUP, h.body,
		    pool_lookup_encode(7, &b.key, 1, h.body, POOL_CONTROL_BODY_BYTES_MAX));
	assert_int_equal(honest_recv(&h), 1);
	if (h.rx.header.type == POOL_MSG_PUT_END) {
		struct pool_put_end e;

		assert_int_equal(pool_put_end_decode(h.body, h.rx.body_length, &e, why,
						     sizeof(why)), 0);
		fail_msg("the put ended after 1 s with %d: its deadline wrapped", e.result);
	}
	assert_int_equal(h.rx.header.type, POOL_MSG_ANSWER);
	honest_close(&h);
	pool_manager_stop(big.manager);
	pthread_join(big.thread, NULL);
	pool_manager_close(big.manager);
}

/* A header claiming a huge payload, or a frame out of place, ends that connection only. */
static void test_pool_hostile_oversized_frame(void **state)
{
	struct fixture *f = *state;
	uint8_t header[CLUSTER_FRAME_HEADER_BYTES], body[64] = { 1 };
	int fds[4];

	fds[0] = connect_manager(f);
	raw_header(header, POOL_MSG_HELLO, 0, 1u << 30, NULL);
	send_bytes(fds[0], header, sizeof(header));
	fds[1] = connect_manager(f);
	raw_header(header, POOL_MSG_PUT_WINDOW, 0, POOL_FRAME_PAYLOAD_BYTES_MAX + 1, NULL);
	send_bytes(fds[1], header, sizeof(header));
	/* Well formed but out of place: a window before any handshake. */
	fds[2] = connect_manager(f);
	raw_header(header, POOL_MSG_PUT_WINDOW, 0, 16 + 1 + 16, body);
	send_bytes(fds[2], header, sizeof(header));
	send_bytes(fds[2], body, 16 + 1 + 16);
	/* An unknown type. */
	fds[3] = connect_manager(f);
	raw_header(header, POOL_MSG_TYPE_LAST + 1, 0, 32, body);
	send_bytes(fds[3], header, sizeof(header));
	send_bytes(fds[3], body, 32);
	honest_rank_served(f);
	for (size_t i = 0; i < SEL_ARRAY_SIZE(fds); i++) {
		struct seen s = { 0 };

		expect_refused(fds[i], &s);
	}
	honest_rank_served(f);
}

/* Sends a keyed frame on h, its tag flipped when flip is set; the sequence moves on. */
static void keyed_frame(struct honest *h, uint16_t type, const uint8_t *body, uint32_t length,
			const uint8_t *data, uint32_t data_length, bool flip)
{
	uint8_t header[CLUSTER_FRAME_HEADER_BYTES], tag[POOL_TAG_BYTES];

	pool_frame_build(h->kc, POOL_TO_MANAGER, h->seq++, type, body, length, data, data_length,
			 header, tag);
	if (flip) {
		/* As a forger would: the checksums (not secret) made right again,
		 * so that only the tag is wrong. */
		XXH3_state_t *x = XXH3_createState();

		tag[3] ^= 0x10;
		XXH3_64bits_reset(x);
		XXH3_64bits_update(x, body, length);
		XXH3_64bits_update(x, data, data_length);
		XXH3_64bits_update(x, tag, sizeof(tag));
		sel_put_le64(header + 24, XXH3_64bits_digest(x));
		sel_put_le64(header + 32, XXH3_64bits(header, 32));
		XXH3_freeState(x);
	}
	send_bytes(h->fd, header, sizeof(header));
	send_bytes(h->fd, body, length);
	if (data_length)
		send_bytes(h->fd, data, data_length);
	send_bytes(h->fd, tag, sizeof(tag));
}

/* After WELCOME, the connection is refused and closed; the manager answers nothing else. */
static void expect_ended(struct honest *h, uint32_t reason)
{
	struct seen s = { 0 };

	h->refused.reason = 0;
	if (honest_recv(h) == 1) {
		assert_int_equal(h->rx.header.type, POOL_MSG_REFUSE);
		assert_int_equal(h->refused.reason, reason);
	}
	read_frames(dup(h->fd), now_ms() + CLOSED_MS, false, &s);
	assert_true(s.closed);
	honest_close(h);
}

/*
 * R-POOL-6, R-POOL-12: a rank that proved the secret and then sends a
 * frame whose tag fails (an injected or altered frame), a frame replayed
 * with an old sequence number, a LOOKUP that breaks R-POOL-20, or a window
 * of a put the manager never gave, loses that connection only: another
 * instance's session is answered before and after, and never sees a frame
 * of the other's.
 */
static void test_pool_hostile_after_welcome(void **state)
{
	struct fixture *f = *state;
	uint8_t body[64], header[CLUSTER_FRAME_HEADER_BYTES], tag[POOL_TAG_BYTES];
	struct pool_manager_stats before, after;
	struct rec_key keys[2];
	struct honest h;
	int n;

	memset(keys, 0, sizeof(keys));
	keys[0].consumed = 128;
	keys[1].consumed = 64;
	pool_manager_stats(f->manager, &before);

	/* An altered tag: refused (auth). */
	assert_int_equal(honest_open(f, &h, f->secret, NULL), 0);
	n = pool_lookup_encode(1, keys, 2, body, sizeof(body));
	assert_true(n > 0);
	keyed_frame(&h, POOL_MSG_LOOKUP, body, (uint32_t)n, NULL, 0, true);
	expect_ended(&h, POOL_REFUSE_AUTH);
	honest_rank_served(f);

	/* A replay: the same frame, its sequence number used already. */
	assert_int_equal(honest_open(f, &h, f->secret, NULL), 0);
	pool_frame_build(h.kc, POOL_TO_MANAGER, h.seq, POOL_MSG_LOOKUP, body, (uint32_t)n, NULL, 0,
			 header, tag);
	for (int i = 0; i < 2; i++) {
		send_bytes(h.fd, header, sizeof(header));
		send_bytes(h.fd, body, (size_t)n);
		send_bytes(h.fd, tag, sizeof(tag));
	}
	assert_int_equal(honest_recv(&h), 1);
	assert_int_equal(h.rx.header.type, POOL_MSG_ANSWER); /* the first is served */
	read_frames(dup(h.fd), now_ms() + CLOSED_MS, false, &(struct seen){ 0 });
	honest_close(&h);
	honest_rank_served(f);

	/* Keys not longest first (R-POOL-20): refused (protocol). */
	assert_int_equal(honest_open(f, &h, f->secret, NULL), 0);
	sel_put_le64(body, 2);
	sel_put_le32(body + 8, 2);
	rec_key_put(body + 12, &keys[1]);
	rec_key_put(body + 12 + REC_KEY_BYTES, &keys[0]);
	keyed_frame(&h, POOL_MSG_LOOKUP, body, 12 + 2 * REC_KEY_BYTES, NULL, 0, false);
	expect_ended(&h, POOL_REFUSE_PROTOCOL);
	honest_rank_served(f);

	/* A window of a put never given: the connection ends (R-POOL-41). */
	assert_int_equal(honest_open(f, &h, f->secret, NULL), 0);
	{
		struct pool_put_window w = { .put_id = 0x5eed, .offset = 0 };
		uint8_t head[POOL_PUT_WINDOW_HEAD_BYTES], data[4096] = { 7 };

		pool_put_window_encode(&w, head, sizeof(head));
		keyed_frame(&h, POOL_MSG_PUT_WINDOW, head, sizeof(head), data, sizeof(data), false);
	}
	expect_ended(&h, POOL_REFUSE_PROTOCOL);
	honest_rank_served(f);

	pool_manager_stats(f->manager, &after);
	assert_true(after.auth_failures >= before.auth_failures + 1);
	assert_int_equal(after.records, 0);
}

#define SLOWLORIS_CONNECTIONS 48

/* 48 connections trickling a HELLO a byte at a time: honest ranks are served meanwhile, and each is dropped by its deadline. */
static void test_pool_hostile_slowloris(void **state)
{
	struct fixture *f = *state;
	uint8_t frame[CLUSTER_FRAME_HEADER_BYTES + POOL_NONCE_BYTES], tag[POOL_TAG_BYTES];
	int fds[SLOWLORIS_CONNECTIONS];
	struct seen seen[SLOWLORIS_CONNECTIONS];
	uint64_t start = now_ms();
	uint32_t sent = 0, closed = 0;

	memset(seen, 0, sizeof(seen));
	memset(frame + CLUSTER_FRAME_HEADER_BYTES, 0x5a, POOL_NONCE_BYTES);
	pool_frame_build(NULL, POOL_TO_MANAGER, 0, POOL_MSG_HELLO,
			 frame + CLUSTER_FRAME_HEADER_BYTES, POOL_NONCE_BYTES, NULL, 0, frame, tag);
	for (int i = 0; i < SLOWLORIS_CONNECTIONS; i++)
		fds[i] = connect_manager(f);
	/* One byte per connection every 250 ms: a whole HELLO would take 18 s. */
	while (now_ms() < start + CLOSED_MS && closed < SLOWLORIS_CONNECTIONS) {
		for (int i = 0; i < SLOWLORIS_CONNECTIONS; i++) {
			struct pollfd p = { .fd = fds[i], .events = POLLIN };

			if (seen[i].closed)
				continue;
			if (poll(&p, 1, 0) == 1) {
				read_frames(fds[i], now_ms() + 100, false, &seen[i]);
				assert_false(seen[i].served);
				if (seen[i].closed) {
					closed++;
					continue;
				}
			}
			if (sent < sizeof(frame))
				send_bytes(fds[i], frame + sent, 1);
		}
		sent++;
		if (sent == 4)
			honest_rank_served(f);
		usleep(250000);
	}
	assert_int_equal(closed, SLOWLORIS_CONNECTIONS);
	for (int i = 0; i < SLOWLORIS_CONNECTIONS; i++)
		close(fds[i]);
	honest_rank_served(f);
}

/* A rank that sends lookups and never reads the answers is stopped being read (R-POOL-8); others go on. */
static void test_pool_hostile_unread_answers(void **state)
{
	enum { FRAMES = 300000 };
	const struct fixture *f = *state;
	const size_t frame = CLUSTER_FRAME_HEADER_BYTES + POOL_LOOKUP_FIXED_BYTES +
			     POOL_WIRE_KEY_BYTES + POOL_TAG_BYTES;
	uint8_t *frames = tu_alloc((size_t)FRAMES * frame);
	size_t sent = 0, total = (size_t)FRAMES * frame;
	struct honest h;
	struct rec_key key;
	int small = 4096;

	assert_int_equal(honest_open(f, &h, f->secret, NULL), 0);
	setsockopt(h.fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	memset(&key, 0, sizeof(key));
	key.consumed = 64;
	tu_fill(key.digest.bytes, sizeof(key.digest.bytes), 9);
	for (size_t i = 0; i < FRAMES; i++) {
		uint8_t *p = frames + i * frame;
		uint32_t n = (uint32_t)pool_lookup_encode(i + 1, &key, 1,
							  p + CLUSTER_FRAME_HEADER_BYTES,
							  frame - CLUSTER_FRAME_HEADER_BYTES);

		assert_int_equal(CLUSTER_FRAME_HEADER_BYTES + n + POOL_TAG_BYTES, frame);
		pool_frame_build(h.kc, POOL_TO_MANAGER, h.seq++, POOL_MSG_LOOKUP,
				 p + CLUSTER_FRAME_HEADER_BYTES, n, NULL, 0, p,
				 p + CLUSTER_FRAME_HEADER_BYTES + n);
	}
	while (sent < total) {
		ssize_t n = send(h.fd, frames + sent, total - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
		struct pollfd pfd = { .fd = h.fd, .events = POLLOUT };

		if (n > 0) {
			sent += (size_t)n;
			continue;
		}
		assert_true(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
		if (poll(&pfd, 1, 2000) == 0)
			break; /* the manager stopped reading this rank */
	}
	if (sent == total)
		fail_msg("the manager read all %zu bytes of lookups whose answers went unread",
			 total);
	honest_rank_served(f);
	honest_close(&h);
	free(frames);
}

/* Takes the answers h's socket holds, checking their tickets run on from *next; false at end of file. */
static bool answers_take(struct honest *h, uint64_t *next)
{
	char why[256];

	for (;;) {
		struct pool_chain_view chain;
		uint64_t ticket = 0;
		bool eof = false;
		int ret = pool_rx_feed(&h->rx, h->fd, &eof, why, sizeof(why));

		if (eof)
			return false;
		if (ret == POOL_RX_MORE)
			return true;
		if (ret != POOL_RX_FRAME)
			fail_msg("after %" PRIu64 " answers: %s", *next - 1, why);
		assert_int_equal(h->rx.header.type, POOL_MSG_ANSWER);
		assert_int_equal(pool_answer_decode(h->body, h->rx.body_length, &ticket, &chain,
						    why, sizeof(why)), 0);
		assert_int_equal(ticket, *next);
		(*next)++;
	}
}

/*
 * A rank that reads its answers late (the manager stopped reading it,
 * R-POOL-8) gets every one, in order, once it reads: the frames the
 * manager had read ahead are served when its output drains.
 */
static void test_pool_hostile_late_reader_answered(void **state)
{
	enum { FRAMES = 400000 };
	const struct fixture *f = *state;
	const size_t frame = CLUSTER_FRAME_HEADER_BYTES + POOL_LOOKUP_FIXED_BYTES +
			     POOL_WIRE_KEY_BYTES + POOL_TAG_BYTES;
	uint8_t *frames = tu_alloc((size_t)FRAMES * frame);
	size_t sent = 0, total = (size_t)FRAMES * frame;
	uint64_t next = 1;
	struct honest h;
	struct rec_key key;

	assert_int_equal(honest_open(f, &h, f->secret, NULL), 0);
	assert_int_equal(fcntl(h.fd, F_SETFL, O_NONBLOCK), 0);
	memset(&key, 0, sizeof(key));
	key.consumed = 64;
	tu_fill(key.digest.bytes, sizeof(key.digest.bytes), 9);
	for (size_t i = 0; i < FRAMES; i++) {
		uint8_t *p = frames + i * frame;
		uint32_t n = (uint32_t)pool_lookup_encode(i + 1, &key, 1,
							  p + CLUSTER_FRAME_HEADER_BYTES,
							  frame - CLUSTER_FRAME_HEADER_BYTES);

		pool_frame_build(h.kc, POOL_TO_MANAGER, h.seq++, POOL_MSG_LOOKUP,
				 p + CLUSTER_FRAME_HEADER_BYTES, n, NULL, 0, p,
				 p + CLUSTER_FRAME_HEADER_BYTES + n);
	}
	/* sent without reading, until the manager stops reading this rank */
	while (sent < total) {
		ssize_t n = send(h.fd, frames + sent, total - sent, MSG_NOSIGNAL);
		struct pollfd pfd = { .fd = h.fd, .events = POLLOUT };

		if (n > 0) {
			sent += (size_t)n;
			continue;
		}
		assert_true(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
		if (poll(&pfd, 1, 500) == 0)
			break;
	}
	assert_true(sent < total);
	/* then read: every lookup is answered, the rest sent as room comes */
	while (next <= FRAMES) {
		struct pollfd pfd = { .fd = h.fd,
				      .events = (short)(POLLIN | (sent < total ? POLLOUT : 0)) };

		assert_true(answers_take(&h, &next));
		if (next > FRAMES)
			break;
		if (poll(&pfd, 1, HONEST_MS) == 0)
			fail_msg("%" PRIu64 " of %d lookups answered, then nothing for %d ms",
				 next - 1, FRAMES, HONEST_MS);
		if (sent < total && (pfd.revents & POLLOUT)) {
			ssize_t n = send(h.fd, frames + sent, total - sent, MSG_NOSIGNAL);

			if (n > 0)
				sent += (size_t)n;
		}
	}
	honest_close(&h);
	free(frames);
}

#define CROWD_CONNECTIONS 1000
#define CROWD_LOOKUPS 200

/*
 * The ms CROWD_LOOKUPS lookups of h take, one after another: the least of
 * CROWD_RUNS runs, so that a run another process's burst slowed does not
 * count (the machine running the tests may be loaded).
 */
#define CROWD_RUNS 5
static double lookups_ms(struct honest *h)
{
	struct rec_key key;
	double best = 1e9;

	memset(&key, 0, sizeof(key));
	key.consumed = 64;
	tu_fill(key.digest.bytes, sizeof(key.digest.bytes), 5);
	for (int run = 0; run < CROWD_RUNS; run++) {
		uint64_t start = sel_monotonic_ns();
		double ms;

		for (int i = 0; i < CROWD_LOOKUPS; i++) {
			honest_send(h, POOL_MSG_LOOKUP, h->body,
				    pool_lookup_encode(7, &key, 1, h->body,
						       POOL_CONTROL_BODY_BYTES_MAX));
			assert_int_equal(honest_recv(h), 1);
			assert_int_equal(h->rx.header.type, POOL_MSG_ANSWER);
		}
		ms = (double)(sel_monotonic_ns() - start) / 1e6;
		if (ms < best)
			best = ms;
	}
	return best;
}

/*
 * 1000 connections that stay silent in their handshake cost the loop
 * nothing it waits on (epoll reports what is ready) and no scan per ready
 * one: an honest rank's lookups among them take at most 4 times as long
 * as alone, plus 20 ms of slack for a loaded machine (each the best of
 * CROWD_RUNS runs). poll(2) over the crowd took 11 times as long.
 */
static void test_pool_hostile_idle_crowd(void **state)
{
	struct fixture *f = *state;
	static int fds[CROWD_CONNECTIONS];
	struct pool_manager_stats st;
	double alone_ms, crowd_ms;
	struct honest h;

	assert_int_equal(honest_open(f, &h, f->secret, NULL), 0);
	alone_ms = lookups_ms(&h);
	for (int i = 0; i < CROWD_CONNECTIONS; i++)
		fds[i] = connect_manager(f);
	for (int i = 0; i < 2000; i++) {
		pool_manager_stats(f->manager, &st);
		if (st.connections >= CROWD_CONNECTIONS + 1)
			break;
		usleep(1000);
	}
	assert_true(st.connections >= CROWD_CONNECTIONS + 1);
	crowd_ms = lookups_ms(&h);
	print_message("%d lookups: %.2f ms alone, %.2f ms among %d idle connections\n",
		      CROWD_LOOKUPS, alone_ms, crowd_ms, CROWD_CONNECTIONS);
	for (int i = 0; i < CROWD_CONNECTIONS; i++)
		close(fds[i]);
	honest_close(&h);
	if (crowd_ms > 4 * alone_ms + 20)
		fail_msg("lookups took %.1fx as long among idle connections", crowd_ms / alone_ms);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_pool_hostile_stranger_bytes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_hostile_half_handshake, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_hostile_wrong_secret, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_hostile_wrong_scope, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_hostile_huge_put_deadline, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_hostile_oversized_frame, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_hostile_after_welcome, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_hostile_slowloris, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_hostile_unread_answers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_hostile_late_reader_answered, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_hostile_idle_crowd, setup, teardown),
	};

	sel_log_set_level(SEL_LOG_ERROR); /* each refusal is a warning, expected here */
	return cmocka_run_group_tests_name("pool_hostile", tests, NULL, NULL);
}
