/*
 * A pool client (pool/client.h) against a scripted manager: one that
 * speaks the handshake honestly and then answers with values that decode
 * but are wrong (pool/PROTOCOL.md R-POOL-9, R-POOL-34, R-POOL-51): places
 * past the arena's end or whose offset and length overflow, a REFUSE with a
 * reason no version defines. For each the client must fail the claim or
 * the open with a clear error and never hand out a place it cannot map.
 * And the client's never-waiting calls (the model thread's) allocate
 * nothing after open: a manager that stops reading fills the send queue,
 * which then says SEL_EQUEUEFULL.
 * What it is not: the manager's own tests (test_pool.c, test_pool_hostile.c).
 */
#include "tests/testutil.h"

#include "common/base.h"
#include "common/failpoint.h"
#include "pool/client.h"
#include "pool/wire.h"
#include "record/key.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/*
 * Allocations counted on the thread that sets counting: malloc, calloc and
 * realloc of this program go through here to glibc's own. Sanitizers
 * interpose these themselves, so their builds count nothing (and skip).
 */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define COUNT_ALLOCATIONS 0
#else
#define COUNT_ALLOCATIONS 1
extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_realloc(void *p, size_t size);
static __thread bool counting;
static __thread uint64_t allocations;

void *malloc(size_t size)
{
	allocations += counting;
	return __libc_malloc(size);
}

void *calloc(size_t count, size_t size)
{
	allocations += counting;
	return __libc_calloc(count, size);
}

void *realloc(void *p, size_t size)
{
	allocations += counting;
	return __libc_realloc(p, size);
}
#endif

#define WHY_BYTES 256
/* The arena the scripted manager announces (no file: only its size counts). */
#define FAKE_ARENA_BYTES (64ull << 20)
#define FAKE_NAME "scripted"
#define FAKE_PLACES_MAX 4u

/* What the scripted manager does after accepting one connection. */
struct fake {
	int listen_fd;
	uint16_t port;
	pthread_t thread;
	uint8_t secret[POOL_SECRET_BYTES];
	uint32_t refuse_reason;  /* nonzero: REFUSE this (raw) reason after HELLO */
	struct pool_place places[FAKE_PLACES_MAX]; /* sent for a CLAIM_PULL */
	uint32_t place_count;
	uint32_t pulls;          /* CLAIM_PULLs seen */
	_Atomic bool silent;     /* after the handshake, read nothing until released */
	_Atomic bool released;
	/* HOLDS frames read whole (checksum and tag verified), and those whose
	 * key count or last key were not the ones the test sends next */
	_Atomic uint32_t holds_seen, holds_wrong;
	uint32_t slow_us;        /* a pause after each HOLDS: the queue stays full */
	bool holds_any;          /* HOLDS from several threads: counted, not checked */
	bool close_on_claim;     /* a CLAIM_LOCAL ends the connection, unanswered */
	_Atomic uint32_t claims_seen, holds_at_claim; /* holds_seen when the last came */
	struct rec_geometry g;
	struct rec_identity model, ns;
};

static void fake_send(int fd, const uint8_t *key, uint64_t *seq, uint16_t type,
		      const uint8_t *body, uint32_t length)
{
	assert_int_equal(pool_frame_write(fd, key, POOL_TO_RANK, seq, type, body, length, NULL, 0),
			 0);
}

/* The manager's side of R-POOL-10 .. R-POOL-17 on fd; false after a REFUSE. */
static bool fake_handshake(struct fake *f, int fd, struct pool_rx *rx, uint64_t *seq,
			   uint8_t kc[POOL_KEY_BYTES])
{
	static uint8_t buf[POOL_CONTROL_BODY_BYTES_MAX];
	uint8_t cn[POOL_NONCE_BYTES], sn[POOL_NONCE_BYTES];
	struct pool_welcome w = { .arena_generation = 1, .arena_bytes = FAKE_ARENA_BYTES,
				  .window_bytes = 1u << 20, .claims_max = 4, .puts_max = 4,
				  .claim_setup_ms = 10000 };
	struct pool_attached at = { 0 };
	char why[WHY_BYTES];
	int n;

	assert_int_equal(pool_rx_read_frame(rx, fd, why, sizeof(why)), 1);
	assert_int_equal(rx->header.type, POOL_MSG_HELLO);
	memcpy(cn, rx->body, POOL_NONCE_BYTES);
	if (f->refuse_reason) {
		/* raw bytes: the encoder would not write an unknown reason */
		sel_put_le32(buf, f->refuse_reason);
		buf[4] = 3; /* u16 text length, little-endian */
		buf[5] = 0;
		memcpy(buf + 6, "odd", 3);
		fake_send(fd, NULL, seq, POOL_MSG_REFUSE, buf, 9);
		return false;
	}
	assert_int_equal(cluster_nonce_fill(sn), 0);
	fake_send(fd, NULL, seq, POOL_MSG_CHALLENGE, sn, POOL_NONCE_BYTES);
	assert_int_equal(pool_rx_read_frame(rx, fd, why, sizeof(why)), 1);
	assert_int_equal(rx->header.type, POOL_MSG_PROOF);
	memset(w.arena_id, 0x5a, sizeof(w.arena_id));
	snprintf(w.name, sizeof(w.name), "%s", FAKE_NAME);
	snprintf(w.arena_path, sizeof(w.arena_path), "/dev/shm/selene-test-scripted-none");
	n = pool_welcome_encode(&w, buf, sizeof(buf));
	assert_true(n > 0);
	pool_welcome_mac(f->secret, cn, sn, buf + POOL_MAC_BYTES, (size_t)n - POOL_MAC_BYTES, buf);
	fake_send(fd, NULL, seq, POOL_MSG_WELCOME, buf, (uint32_t)n);
	pool_connection_key(f->secret, cn, sn, kc);
	rx->key = kc;
	assert_int_equal(pool_rx_read_frame(rx, fd, why, sizeof(why)), 1);
	assert_int_equal(rx->header.type, POOL_MSG_ATTACH);
	pool_scope_of_attach(FAKE_NAME, rx->body, rx->body_length, at.scope);
	n = pool_attached_encode(&at, buf, sizeof(buf));
	assert_true(n > 0);
	fake_send(fd, kc, seq, POOL_MSG_ATTACHED, buf, (uint32_t)n);
	return true;
}

/* The one-record chain the scripted manager grants, and the client pulls. */
static struct pool_chain_entry fake_chain(void)
{
	struct pool_chain_entry e = { .tail_page_count = 1, .row = true, .stamp = 1 };

	e.key.consumed = 16;
	tu_fill(e.key.digest.bytes, sizeof(e.key.digest.bytes), 9);
	return e;
}

/* R-POOL-51: grants a CLAIM_LOCAL, its places the next frame. */
static void fake_local_grant(struct fake *f, int fd, struct pool_rx *rx, uint64_t *seq,
			     const uint8_t *kc)
{
	static uint8_t buf[POOL_CONTROL_BODY_BYTES_MAX];
	struct pool_chain_entry e = fake_chain();
	struct pool_claim q;
	struct pool_claimed cd = { .result = 0, .deadline_ms = 10000 };
	char why[WHY_BYTES];
	int n;

	assert_int_equal(pool_claim_decode(rx->body, rx->body_length, &q, why, sizeof(why)), 0);
	cd.claim_id = q.claim_id;
	n = pool_claimed_encode(&cd, &e, 1, buf, sizeof(buf));
	assert_true(n > 0);
	fake_send(fd, kc, seq, POOL_MSG_CLAIMED, buf, (uint32_t)n);
	n = pool_claim_places_encode(q.claim_id, f->places, f->place_count, buf, sizeof(buf));
	assert_true(n > 0);
	fake_send(fd, kc, seq, POOL_MSG_CLAIM_PLACES, buf, (uint32_t)n);
}

/* The key count of the test's HOLDS frame i, 1 .. 1024 keys (29 bytes .. 24 KiB). */
static uint32_t holds_count_of(uint32_t i)
{
	return 1 + (i * 389u) % 1024u;
}

/* HOLDS frame number holds_seen must be the one the test sent as that number. */
static void fake_holds_check(struct fake *f, const struct pool_rx *rx)
{
	struct pool_holds_view v;
	struct rec_key last;
	char why[WHY_BYTES];
	uint32_t i = f->holds_seen;

	if (pool_holds_decode(rx->body, rx->body_length, &v, why, sizeof(why)) ||
	    v.key_count != holds_count_of(i)) {
		f->holds_wrong++;
	} else {
		pool_holds_view_key(&v, v.key_count - 1, &last);
		if (last.consumed != 16ull * (1024u - (v.key_count - 1)))
			f->holds_wrong++;
	}
	f->holds_seen++;
}

/* Serves one connection: the handshake, then places for every CLAIM_PULL. */
static void *fake_thread(void *arg)
{
	static uint8_t body[POOL_CONTROL_BODY_BYTES_MAX], buf[POOL_CONTROL_BODY_BYTES_MAX];
	struct fake *f = arg;
	struct timeval tv = { .tv_sec = 5 };
	uint8_t kc[POOL_KEY_BYTES];
	struct pool_rx rx;
	uint64_t seq = 0;
	char why[WHY_BYTES];
	int fd = accept4(f->listen_fd, NULL, NULL, SOCK_CLOEXEC);

	assert_true(fd >= 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	pool_rx_init(&rx, body, sizeof(body), POOL_TO_MANAGER);
	if (!fake_handshake(f, fd, &rx, &seq, kc))
		goto out_close;
	for (;;) {
		struct pool_claim_pull pull;
		int n;

		while (f->silent && !f->released)
			usleep(1000);
		if (pool_rx_read_frame(&rx, fd, why, sizeof(why)) != 1)
			break;
		if (rx.header.type == POOL_MSG_BYE)
			break;
		if (rx.header.type == POOL_MSG_HOLDS) {
			if (f->holds_any)
				f->holds_seen++;
			else
				fake_holds_check(f, &rx);
			if (f->slow_us)
				usleep(f->slow_us);
			continue;
		}
		if (rx.header.type == POOL_MSG_CLAIM_LOCAL) {
			f->holds_at_claim = f->holds_seen;
			f->claims_seen++;
			if (f->close_on_claim)
				break;
			fake_local_grant(f, fd, &rx, &seq, kc);
			continue;
		}
		if (rx.header.type != POOL_MSG_CLAIM_PULL)
			continue;
		assert_int_equal(pool_claim_pull_decode(rx.body, rx.body_length, &pull, why,
							sizeof(why)),
				 0);
		f->pulls++;
		n = pool_claim_places_encode(pull.claim_id, f->places, f->place_count, buf,
					     sizeof(buf));
		assert_true(n > 0);
		fake_send(fd, kc, &seq, POOL_MSG_CLAIM_PLACES, buf, (uint32_t)n);
	}
out_close:
	close(fd);
	return NULL;
}

static void fake_start(struct fake *f)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	f->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(f->listen_fd >= 0);
	assert_int_equal(bind(f->listen_fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(f->listen_fd, 4), 0);
	assert_int_equal(getsockname(f->listen_fd, (struct sockaddr *)&a, &len), 0);
	f->port = ntohs(a.sin_port);
	assert_int_equal(pthread_create(&f->thread, NULL, fake_thread, f), 0);
}

static void fake_stop(struct fake *f)
{
	pthread_join(f->thread, NULL);
	close(f->listen_fd);
}

static int setup(void **state)
{
	struct fake *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	memset(f->secret, 0x33, sizeof(f->secret));
	tu_geometry(&f->g, 16, 2, 4096, 4096, 0, 1);
	tu_identities(&f->model, &f->ns);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	free(*state);
	return 0;
}

/* Opens rank zero of a one-rank instance on the scripted manager. */
static int client_open(struct fake *f, struct pool_client **out, char *why)
{
	static uint64_t page_bytes[1], row_bytes[1];
	char address[64];
	struct pool_client_config cfg = { .address = address, .secret = f->secret, .rank = 0,
					  .geometry = &f->g, .deadline_ms = 5000, .rdma_off = true };

	snprintf(address, sizeof(address), "127.0.0.1:%u", f->port);
	memset(cfg.instance_id, 0x1c, sizeof(cfg.instance_id));
	page_bytes[0] = f->g.page_record_bytes;
	row_bytes[0] = f->g.row_record_bytes;
	cfg.scope = (struct pool_scope_parts){ .world_size = 1, .namespace_id = f->ns,
					       .layout_digest = f->g.layout_digest,
					       .page_tokens = f->g.page_tokens,
					       .plane_count = f->g.page_plane_count,
					       .page_bytes = page_bytes, .row_bytes = row_bytes };
	return pool_client_open(&cfg, out, why, WHY_BYTES);
}

/* Starts f and opens a client to it whose claims are CLAIM_LOCAL; the client. */
static struct pool_client *local_client_open(struct fake *f, char *why)
{
	struct pool_client *c = NULL;

	fake_start(f);
	assert_int_equal(client_open(f, &c, why), 0);
	pool_client_claim_local(c, true);
	return c;
}

/* A places pull of a one-record chain: what pool_share_places returns. */
static int pull_places(struct pool_client *c, struct pool_place *got)
{
	struct pool_chain_entry e = fake_chain();
	int ret;

	assert_int_equal(pool_share_pull(c, 41, &e, 1, 0, true), 0);
	ret = pool_share_places(c, 41, got, 1, 5000);
	assert_int_equal(pool_share_end(c, 41), 0);
	return ret;
}

/* R-POOL-34: a place whose offset plus length wraps past 2^64 is refused, never handed out. */
static void test_pool_client_places_overflow_refused(void **state)
{
	struct fake *f = *state;
	struct pool_client *c = NULL;
	struct pool_place got = { 0 };
	char why[WHY_BYTES] = "";

	f->places[0] = (struct pool_place){ .offset = UINT64_MAX - 4095, .bytes = 8192 };
	f->place_count = 1;
	fake_start(f);
	assert_int_equal(client_open(f, &c, why), 0);
	assert_int_equal(pull_places(c, &got), SEL_EPROTO);
	assert_int_equal(f->pulls, 1);
	assert_int_equal(got.bytes, 0);
	pool_client_close(c);
	fake_stop(f);
}

/* R-POOL-34: a place that starts inside the arena and overlaps its end is refused. */
static void test_pool_client_places_past_arena_refused(void **state)
{
	struct fake *f = *state;
	struct pool_client *c = NULL;
	struct pool_place got = { 0 };
	char why[WHY_BYTES] = "";

	f->places[0] = (struct pool_place){ .offset = FAKE_ARENA_BYTES - 4096, .bytes = 8192 };
	f->place_count = 1;
	fake_start(f);
	assert_int_equal(client_open(f, &c, why), 0);
	assert_int_equal(pull_places(c, &got), SEL_EPROTO);
	assert_int_equal(got.bytes, 0);
	pool_client_close(c);
	fake_stop(f);
}

/* R-POOL-34: a place wholly inside the arena is handed out as sent. */
static void test_pool_client_places_inside_arena_given(void **state)
{
	struct fake *f = *state;
	struct pool_client *c = NULL;
	struct pool_place got = { 0 };
	char why[WHY_BYTES] = "";

	f->places[0] = (struct pool_place){ .offset = FAKE_ARENA_BYTES - 8192, .bytes = 8192 };
	f->place_count = 1;
	fake_start(f);
	assert_int_equal(client_open(f, &c, why), 0);
	assert_int_equal(pull_places(c, &got), 0);
	assert_int_equal(got.offset, FAKE_ARENA_BYTES - 8192);
	assert_int_equal(got.bytes, 8192);
	pool_client_close(c);
	fake_stop(f);
}

/* R-POOL-51, R-POOL-34: a local grant whose place overlaps the arena's end fails when pulled; nothing is asked of the manager. */
static void test_pool_client_local_grant_past_arena_refused(void **state)
{
	struct fake *f = *state;
	struct pool_chain_entry e = fake_chain(), got_chain[1];
	struct pool_claim_grant grant;
	struct pool_client *c = NULL;
	struct pool_place got = { 0 };
	char why[WHY_BYTES] = "";
	uint64_t id;
	uint32_t count = 0;
	int ret = 0;

	f->places[0] = (struct pool_place){ .offset = FAKE_ARENA_BYTES - 4096,
					    .bytes = UINT64_MAX - 8191 };
	f->place_count = 1;
	c = local_client_open(f, why);
	assert_int_equal(pool_claim_begin(c, &e.key, &id), 0);
	for (int i = 0; i < 5000 && ret == 0; i++) {
		ret = pool_claim_poll(c, id, &grant, got_chain, 1, &count);
		if (!ret)
			usleep(1000);
	}
	assert_int_equal(ret, 1);
	assert_int_equal(count, 1);
	assert_int_equal(pool_share_pull(c, id, &e, 1, 0, true), 0);
	assert_int_equal(pool_share_places(c, id, &got, 1, 5000), SEL_EPROTO);
	assert_int_equal(got.bytes, 0);
	assert_int_equal(pool_share_end(c, id), 0);
	assert_int_equal(pool_claim_end(c, id, SEL_EPROTO), 0);
	assert_int_equal(f->pulls, 0);
	pool_client_close(c);
	fake_stop(f);
}

#define KEYS 1024u

/* keys[KEYS], each distinct, longest first (a LOOKUP's order, R-POOL-20). */
static void keys_fill(struct rec_key *keys)
{
	for (uint32_t i = 0; i < KEYS; i++) {
		memset(&keys[i], 0, sizeof(keys[i]));
		keys[i].consumed = 16ull * (KEYS - i);
		tu_fill(keys[i].digest.bytes, sizeof(keys[i].digest.bytes), i);
	}
}

/* A granted local claim's times: each hop stamped, in the order the grant went. */
static void test_pool_client_claim_times_in_order(void **state)
{
	struct fake *f = *state;
	struct pool_chain_entry e = fake_chain(), got_chain[1];
	struct pool_claim_grant grant;
	struct pool_claim_times t = { 0 };
	struct pool_client *c = NULL;
	char why[WHY_BYTES] = "";
	uint64_t id, before;
	uint32_t count = 0;
	int ret = 0;

	f->places[0] = (struct pool_place){ .offset = 8192, .bytes = 8192 };
	f->place_count = 1;
	c = local_client_open(f, why);
	before = sel_monotonic_ns();
	assert_int_equal(pool_claim_begin(c, &e.key, &id), 0);
	for (int i = 0; i < 5000 && ret == 0; i++) {
		ret = pool_claim_poll(c, id, &grant, got_chain, 1, &count);
		if (!ret)
			usleep(1000);
	}
	assert_int_equal(ret, 1);
	assert_int_equal(pool_claim_times(c, id, &t), 0);
	assert_true(before <= t.queued_ns);
	assert_true(t.queued_ns <= t.written_ns);
	assert_true(t.written_ns <= t.claimed_ns);
	assert_true(t.woken_ns && t.woken_ns <= t.claimed_ns);
	assert_true(t.claimed_ns <= t.answered_ns && t.answered_ns <= sel_monotonic_ns());
	assert_int_equal(pool_claim_end(c, id, 0), 0);
	assert_int_equal(pool_claim_times(c, id, &t), -ENOENT);
	pool_client_close(c);
	fake_stop(f);
}

/* Polls a claim until it answers (1, or its failure); 0 after 5 s. */
static int claim_wait(struct pool_client *c, uint64_t id)
{
	struct pool_chain_entry chain[1];
	struct pool_claim_grant grant;
	uint32_t count = 0;
	int ret = 0;

	for (int i = 0; i < 50000 && ret == 0; i++) {
		ret = pool_claim_poll(c, id, &grant, chain, 1, &count);
		if (!ret)
			usleep(100);
	}
	return ret;
}

/* A request on an empty output is written by the caller itself, and granted. */
static void test_pool_client_request_written_by_caller(void **state)
{
	struct fake *f = *state;
	struct pool_chain_entry e = fake_chain();
	struct pool_claim_times t = { 0 };
	struct pool_client *c = NULL;
	char why[WHY_BYTES] = "";
	uint64_t id;

	f->places[0] = (struct pool_place){ .offset = 8192, .bytes = 8192 };
	f->place_count = 1;
	c = local_client_open(f, why);
	assert_int_equal(pool_claim_begin(c, &e.key, &id), 0);
	/* written before the call returned: no I/O thread in between */
	assert_int_equal(pool_claim_times(c, id, &t), 0);
	assert_true(t.written_ns != 0);
	assert_true(t.by_caller);
	assert_int_equal(claim_wait(c, id), 1);
	assert_int_equal(pool_claim_end(c, id, 0), 0);
	pool_client_close(c);
	fake_stop(f);
}

/*
 * A request queued behind frames the I/O thread still writes goes after
 * them, never ahead (the manager's reader checks every frame's sequence
 * number and tag). The manager reads nothing until the send queue is
 * full, so the claim is queued behind every HOLDS sent, and it reaches
 * the manager after the last of them.
 */
static void test_pool_client_request_behind_queue_keeps_order(void **state)
{
	struct fake *f = *state;
	static struct rec_key keys[KEYS];
	struct pool_chain_entry e = fake_chain();
	struct pool_claim_times t = { 0 };
	struct pool_client *c = NULL;
	char why[WHY_BYTES] = "";
	uint32_t sent = 0;
	uint64_t id;
	int ret;

	keys_fill(keys);
	f->silent = true;
	f->places[0] = (struct pool_place){ .offset = 8192, .bytes = 8192 };
	f->place_count = 1;
	c = local_client_open(f, why);
	while (sent < 100000 &&
	       (ret = pool_holds_send(c, POOL_HOLDS_ADD, keys, holds_count_of(sent))) == 0)
		sent++;
	assert_int_equal(ret, SEL_EQUEUEFULL);
	assert_int_equal(pool_claim_begin(c, &e.key, &id), 0);
	assert_int_equal(pool_claim_times(c, id, &t), 0);
	assert_false(t.by_caller); /* the queue was not empty: the I/O thread writes it */
	f->released = true;
	assert_int_equal(claim_wait(c, id), 1);
	assert_int_equal(f->holds_at_claim, sent);
	assert_int_equal(f->holds_wrong, 0);
	assert_int_equal(pool_claim_times(c, id, &t), 0);
	assert_false(t.by_caller);
	assert_int_equal(pool_claim_end(c, id, 0), 0);
	assert_int_equal(pool_client_status(c, why, sizeof(why)), 0);
	pool_client_close(c);
	fake_stop(f);
}

/*
 * A caller's own write that fails (failpoint pool.tx, as a lost
 * connection's) poisons the connection: the claim answers the failure,
 * the status says why, later calls fail at once, close is clean.
 */
static void test_pool_client_caller_write_fails_claim(void **state)
{
	struct fake *f = *state;
	struct pool_chain_entry e = fake_chain();
	struct pool_client *c = NULL;
	char why[WHY_BYTES] = "";
	uint64_t id, ticket;
	int ret;

	c = local_client_open(f, why);
	assert_int_equal(sel_failpoints_configure("pool.tx=1*return(EPIPE)"), 0);
	ret = pool_claim_begin(c, &e.key, &id);
	assert_int_equal(sel_failpoints_configure(NULL), 0);
	assert_int_equal(ret, 0); /* queued; its write failed */
	assert_int_equal(claim_wait(c, id), -EPIPE);
	assert_int_equal(pool_client_status(c, why, sizeof(why)), -EPIPE);
	assert_non_null(strstr(why, "writing to the manager"));
	assert_int_equal(pool_lookup_begin(c, &e.key, 1, &ticket), -EPIPE);
	assert_int_equal(f->claims_seen, 0);
	pool_client_close(c);
	fake_stop(f);
}

/* A manager that ends the connection on a claim: the claim fails (no hang), and so does the next. */
static void test_pool_client_connection_lost_during_claim(void **state)
{
	struct fake *f = *state;
	struct pool_chain_entry e = fake_chain();
	struct pool_client *c = NULL;
	char why[WHY_BYTES] = "";
	uint64_t id;
	int ret;

	f->close_on_claim = true;
	c = local_client_open(f, why);
	assert_int_equal(pool_claim_begin(c, &e.key, &id), 0);
	ret = claim_wait(c, id);
	assert_true(ret < 0);
	assert_true(pool_client_status(c, why, sizeof(why)) < 0);
	print_message("the claim: %s (%s)\n", sel_strerror(ret), why);
	assert_true(pool_claim_begin(c, &e.key, &id) < 0);
	assert_int_equal(f->claims_seen, 1);
	pool_client_close(c);
	fake_stop(f);
}

#define RACERS 4u
#define RACER_ROUNDS 300u

struct racer {
	struct pool_client *c;
	uint32_t index;
	uint32_t granted, holds_sent;
};

/* One caller: a claim (begin, poll, end) and a HOLDS each round, beside the others. */
static void *racer_main(void *arg)
{
	static struct rec_key keys[RACERS][4];
	struct racer *r = arg;
	struct pool_chain_entry e = fake_chain();

	for (uint32_t k = 0; k < 4; k++) {
		keys[r->index][k].consumed = 16 * (k + 1);
		tu_fill(keys[r->index][k].digest.bytes, sizeof(keys[r->index][k].digest.bytes),
			r->index * 4 + k);
	}
	for (uint32_t i = 0; i < RACER_ROUNDS; i++) {
		uint64_t id;

		if (pool_holds_send(r->c, POOL_HOLDS_ADD, keys[r->index], 1 + i % 4) == 0)
			r->holds_sent++;
		if (pool_claim_begin(r->c, &e.key, &id) != 0)
			continue;
		if (claim_wait(r->c, id) == 1)
			r->granted++;
		pool_claim_end(r->c, id, 0);
	}
	return NULL;
}

/*
 * Callers racing each other and the I/O thread (requests written by
 * whichever holds the lock with the output empty, the rest by the I/O
 * thread, the grants read meanwhile): every frame reaches the manager
 * whole and in sequence, every claim is granted.
 */
static void test_pool_client_requests_race_io_thread(void **state)
{
	struct fake *f = *state;
	struct racer racers[RACERS];
	pthread_t threads[RACERS];
	struct pool_client *c = NULL;
	char why[WHY_BYTES] = "";
	uint32_t holds = 0, granted = 0;

	f->holds_any = true;
	f->places[0] = (struct pool_place){ .offset = 8192, .bytes = 8192 };
	f->place_count = 1;
	c = local_client_open(f, why);
	for (uint32_t i = 0; i < RACERS; i++) {
		racers[i] = (struct racer){ .c = c, .index = i };
		assert_int_equal(pthread_create(&threads[i], NULL, racer_main, &racers[i]), 0);
	}
	for (uint32_t i = 0; i < RACERS; i++) {
		pthread_join(threads[i], NULL);
		holds += racers[i].holds_sent;
		granted += racers[i].granted;
	}
	for (int i = 0; i < 5000 && f->holds_seen < holds; i++)
		usleep(1000);
	assert_int_equal(pool_client_status(c, why, sizeof(why)), 0);
	assert_int_equal(granted, RACERS * RACER_ROUNDS);
	assert_int_equal(holds, RACERS * RACER_ROUNDS);
	assert_int_equal(f->holds_seen, holds);
	assert_int_equal(f->claims_seen, RACERS * RACER_ROUNDS);
	pool_client_close(c);
	fake_stop(f);
}

/* R-POOL-9: a REFUSE with a reason no version defines fails the open with a reason, no crash. */
static void test_pool_client_unknown_refuse_reason(void **state)
{
	struct fake *f = *state;
	struct pool_client *c = NULL;
	char why[WHY_BYTES] = "";

	f->refuse_reason = 99;
	fake_start(f);
	assert_int_equal(client_open(f, &c, why), SEL_EPROTO);
	assert_null(c);
	assert_non_null(strstr(why, "REFUSE reason 99"));
	fake_stop(f);
}

/*
 * The session's never-waiting calls (lookups, holds, claims, puts begun,
 * export answers: the model thread's) allocate nothing once the client is
 * open; their frames go to a send queue allocated at open.
 */
static void test_pool_client_never_waiting_calls_allocate_nothing(void **state)
{
	struct fake *f = *state;
	static struct rec_key keys[KEYS];
	struct pool_client *c = NULL;
	uint64_t share_bytes[1] = { 1u << 20 }, id;
	struct pool_put_spec put = { .tail_page_count = 1, .row = true,
				     .share_bytes = share_bytes };
	char why[WHY_BYTES] = "";
	uint64_t counted;

	if (!COUNT_ALLOCATIONS) {
		print_message("skipped: allocations are not counted under a sanitizer\n");
		skip();
	}
	keys_fill(keys);
	fake_start(f);
	assert_int_equal(client_open(f, &c, why), 0);
#if COUNT_ALLOCATIONS
	counting = true;
#endif
	for (uint32_t i = 0; i < 200; i++) {
		uint64_t ticket;

		assert_int_equal(pool_lookup_begin(c, keys, 256, &ticket), 0);
		pool_lookup_cancel(c, ticket);
		assert_int_equal(pool_holds_send(c, POOL_HOLDS_ADD, keys, 1 + i % KEYS), 0);
		assert_int_equal(pool_export_end(c, 1 + i, -ENOENT), 0);
	}
	assert_int_equal(pool_claim_begin(c, &keys[0], &id), 0);
	put.key = keys[KEYS - 1]; /* one page of 16 tokens */
	assert_int_equal(pool_put_begin(c, &put, &id), 0);
#if COUNT_ALLOCATIONS
	counting = false;
	counted = allocations;
#else
	counted = 0;
#endif
	pool_client_close(c);
	fake_stop(f);
	if (counted)
		fail_msg("%" PRIu64 " allocations in never-waiting calls after open", counted);
}

/* A manager that reads nothing fills the send queue: calls say SEL_EQUEUEFULL, the connection stays up. */
static void test_pool_client_full_queue_refuses(void **state)
{
	struct fake *f = *state;
	static struct rec_key keys[KEYS];
	struct pool_client *c = NULL;
	char why[WHY_BYTES] = "";
	uint32_t sent = 0;
	int ret = 0;

	keys_fill(keys);
	f->silent = true;
	fake_start(f);
	assert_int_equal(client_open(f, &c, why), 0);
	/* 24 KiB a frame: the socket's buffers take some, the queue 4 MiB */
	while (sent < 100000 && (ret = pool_holds_send(c, POOL_HOLDS_ADD, keys, KEYS)) == 0)
		sent++;
	assert_int_equal(ret, SEL_EQUEUEFULL);
	assert_true(sent >= 100);
	assert_int_equal(pool_client_status(c, why, sizeof(why)), 0);
	/* an export's answer is not bounded so: the ring's reserve takes it */
	assert_int_equal(pool_export_end(c, 1, -ENOENT), 0);
	f->released = true;
	pool_client_close(c);
	fake_stop(f);
}

/*
 * 3000 HOLDS frames of 29 bytes to 24 KiB (about 37 MiB) pass through the
 * send queue's ring, which wraps several times: each arrives whole, in
 * order, with its checksum and tag (the reader verifies both) and its own
 * keys. The reader pauses after each, so the queue stays full and its
 * ring's ends move round; a full queue is waited out and retried, as a
 * caller does.
 */
static void test_pool_client_queue_ring_wraps_intact(void **state)
{
	struct fake *f = *state;
	static struct rec_key keys[KEYS];
	struct pool_client *c = NULL;
	char why[WHY_BYTES] = "";
	uint32_t full = 0;

	keys_fill(keys);
	f->slow_us = 50;
	fake_start(f);
	assert_int_equal(client_open(f, &c, why), 0);
	for (uint32_t i = 0; i < 3000; i++) {
		int ret;

		while ((ret = pool_holds_send(c, POOL_HOLDS_ADD, keys, holds_count_of(i))) ==
		       SEL_EQUEUEFULL) {
			full++;
			usleep(200);
		}
		assert_int_equal(ret, 0);
	}
	for (int i = 0; i < 10000 && f->holds_seen < 3000; i++)
		usleep(1000);
	print_message("3000 frames through the ring, SEL_EQUEUEFULL %u times\n", full);
	assert_int_equal(f->holds_seen, 3000);
	assert_int_equal(f->holds_wrong, 0);
	assert_int_equal(pool_client_status(c, why, sizeof(why)), 0);
	pool_client_close(c);
	fake_stop(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_pool_client_places_overflow_refused, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_client_places_past_arena_refused, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_client_places_inside_arena_given, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_client_local_grant_past_arena_refused,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_client_claim_times_in_order, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_client_request_written_by_caller, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_client_request_behind_queue_keeps_order,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_client_caller_write_fails_claim, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_client_connection_lost_during_claim,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_client_requests_race_io_thread, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_client_unknown_refuse_reason, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_client_never_waiting_calls_allocate_nothing,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_client_full_queue_refuses, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_client_queue_ring_wraps_intact, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
