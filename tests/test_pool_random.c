/*
 * A seeded randomized test of the pool manager (pool/manager.h,
 * pool/PROTOCOL.md) against a model of what each scope should hold. A
 * real manager runs in a thread of this process with a small arena, tiny
 * deadlines (claim setup, export, for some seeds max age) and, for some
 * seeds, a disk tier in a temporary directory (some with a disk limit).
 * Two to four instances of two ranks each, in one or two scopes (the
 * second a different model's namespace with the same keys), speak
 * pool/PROTOCOL.md with pool/wire.h on blocking sockets and do random:
 * puts of records of a few chains (two pairs of histories share a
 * prefix), committed, abandoned, with a corrupt share, or cut off by the
 * instance closing (or rank 1's connection ending alone) mid-put;
 * lookups of a history's points; claims by stream (a random skip; some
 * cut by the instance closing before CLAIMED or mid-stream, some left for
 * their deadline, some pulled by rank 1 on a new connection after its
 * last one ended: R-POOL-110) and same-host claims (CLAIM_LOCAL and places pulls,
 * checked in the mapped arena); announcements and the
 * exports they bring, answered with a put, refused or left unanswered;
 * waits that let deadlines and max age pass; and manager restarts, some
 * stopped with every instance attached and a claim live (what the disk
 * tier kept comes back; without one, nothing does).
 *
 * What it asserts, at every step: a claim's bytes are exactly those of
 * the put the model says committed the record last in that scope (never
 * another record's or scope's, never a failed put's, never partial: a
 * complete stream carries every byte), a lookup's chain is a chain of
 * records committed in the session's scope ending at a candidate, an
 * export is asked only of an instance that announced the key; at quiet
 * points the manager's records and bytes (arena and disk) equal what
 * lookups find, and its puts committed and claims granted since it
 * started what the instances saw; at the end, every record expired
 * (max-age seeds) leaves the arena empty, and no arena file and no
 * descriptor is left.
 *
 * SELENE_POOL_SEED=n replays seed n alone (SELENE_POOL_TRACE=1 prints
 * every event); SELENE_POOL_SEEDS and SELENE_POOL_STEPS change the
 * defaults.
 */
#include "tests/testutil.h"

#include "common/base.h"
#include "common/log.h"
#include "pool/manager.h"
#include "pool/wire.h"
#include "record/format.h"
#include "record/geometry.h"
#include "record/key.h"
#include "selene/selene.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define SIM_WORLD 2u
#define SIM_PAGE_TOKENS 16u
#define SIM_SCOPES_MAX 2u
#define SIM_INSTANCES_MAX 4u
#define SIM_BRANCHES 4u
#define SIM_POINTS 4u
#define SIM_NODES (SIM_BRANCHES * SIM_POINTS)
#define SIM_TOKENS 224u
#define SIM_CLAIMS_MAX 8u         /* claims an instance leaves live at once */
#define SIM_EXPORTS_MAX 16u
#define SIM_DATA_BYTES (256u << 10)
#define SIM_SEEDS_DEFAULT 12u
#define SIM_STEPS_DEFAULT 120u
#define SIM_WHY 256u

/* A history's publication points: tail page counts 2, 4, 2 and 6. */
static const uint32_t sim_points[SIM_POINTS] = { 32, 96, 128, 224 };
static const uint8_t sim_secret[32] = { 7, 7, 7, 1, 2, 3 };

/* One connection of a test rank: blocking, 5 s timeouts. */
struct sim_conn {
	int fd;
	uint8_t kc[32];
	uint64_t seq;
	struct pool_rx rx;
	uint8_t *body;
	struct pool_welcome welcome;
	struct pool_attached attached;
};

struct sim_claim {
	uint64_t id;
};

struct sim_export {
	uint64_t id;
	uint32_t node;
};

struct sim_instance {
	bool open;
	uint32_t scope;
	uint8_t id;                   /* instance id bytes; fresh per open */
	struct sim_conn c[SIM_WORLD];
	uint64_t claims[SIM_CLAIMS_MAX]; /* granted, not ended */
	uint32_t claim_count;
	struct sim_export exports[SIM_EXPORTS_MAX];
	uint32_t export_count;
	bool announced[SIM_NODES];
	uint64_t pulling;             /* the claim rank zero pulls by stream now, 0: none */
};

/* A record of the universe: a point of a history; histories share some. */
struct sim_node {
	struct rec_key key;
	int32_t parent;               /* node index, -1: a root */
	uint32_t first_page_index, tail_page_count;
};

struct sim {
	uint64_t start_ms;
	uint32_t scopes, instances;
	struct pool_manager_config config;
	char *dir;
	struct pool_manager *m;
	pthread_t thread;
	bool running;
	char arena_path[256];
	struct rec_geometry g[SIM_WORLD];
	struct rec_identity ns[SIM_SCOPES_MAX];
	struct sim_node nodes[SIM_NODES];
	uint32_t node_count;
	uint32_t branch_nodes[SIM_BRANCHES][SIM_POINTS];
	uint64_t committed[SIM_SCOPES_MAX][SIM_NODES]; /* payload of the last commit; 0 never */
	bool believed[SIM_SCOPES_MAX][SIM_NODES]; /* held when last seen: guides picks only */
	uint64_t version, request, claim_id;
	/* since the manager started: its counters; claims whose CLAIMED went unread */
	uint64_t started_commits, started_claims, started_unread;
	uint8_t next_instance_id;
	struct sim_instance inst[SIM_INSTANCES_MAX];
	uint8_t *data;                /* a window's data */
	int fds_at_start;
	/* counters, for the summary */
	uint64_t commits, put_failures, claims_granted, claim_bytes, places_checked, lookups,
		hits, exports_seen, exports_answered, restarts, quiet_checks;
	struct tu_seeded run;           /* seed, generator, step and last events */
};

static uint64_t sim_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint32_t sim_below(struct sim *sim, uint32_t n)
{
	return tu_seeded_below(&sim->run, n);
}

static void sim_trace(struct sim *sim, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void sim_trace(struct sim *sim, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	tu_seeded_vtrace(&sim->run, fmt, ap);
	va_end(ap);
}

/* A violation: the last events, the seed to replay, and the test fails. */
#define SIM_CHECK(sim, cond, ...)                                                          \
	do {                                                                               \
		if (!(cond))                                                               \
			sim_fail(sim, __LINE__, #cond, __VA_ARGS__);                       \
	} while (0)

static void sim_fail(struct sim *sim, int line, const char *cond, const char *fmt, ...)
	__attribute__((format(printf, 4, 5), noreturn));

/* After a failure: no connection, manager, arena file or directory left. */
static void sim_teardown(struct sim *sim)
{
	for (uint32_t i = 0; i < SIM_INSTANCES_MAX; i++)
		for (uint32_t r = 0; r < SIM_WORLD && sim->inst[i].open; r++)
			if (sim->inst[i].c[r].fd >= 0)
				close(sim->inst[i].c[r].fd);
	if (sim->running) {
		sim->running = false;
		pool_manager_stop(sim->m);
		pthread_join(sim->thread, NULL);
		pool_manager_close(sim->m);
	}
	if (sim->dir)
		tu_remove_tree(sim->dir);
	sim->dir = NULL;
}

static void sim_fail(struct sim *sim, int line, const char *cond, const char *fmt, ...)
{
	char what[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	sim_trace(sim, "FAIL %s", what);
	if (!sim->run.trace_all)
		tu_seeded_dump(&sim->run);
	tu_seeded_catch_aborts(NULL);
	sim_teardown(sim);
	fail_msg("test_pool_random: seed %llu failed at step %llu (line %d, %s): %s (replay: "
		 "SELENE_POOL_SEED=%llu SELENE_POOL_TRACE=1)", (unsigned long long)sim->run.seed,
		 (unsigned long long)sim->run.step, line, cond, what, (unsigned long long)sim->run.seed);
	abort(); /* fail_msg does not return */
}

static int fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* ---- the universe of records ---- */

static int32_t node_of(const struct sim *sim, const struct rec_key *key)
{
	for (uint32_t i = 0; i < sim->node_count; i++)
		if (sim->nodes[i].key.consumed == key->consumed &&
		    memcmp(sim->nodes[i].key.digest.bytes, key->digest.bytes, REC_DIGEST_BYTES) == 0)
			return (int32_t)i;
	return -1;
}

/*
 * Four histories: 1 is 0 up to token 96 (it shares 0's first two points),
 * 3 is 2 up to token 32 (its first); each point a node, shared ones once.
 */
static void universe_make(struct sim *sim)
{
	static uint32_t tokens[SIM_BRANCHES][SIM_TOKENS];
	struct rec_identity model;

	tu_identities(&model, NULL);
	tu_tokens(tokens[0], SIM_TOKENS, sim->run.seed * 4 + 1);
	tu_tokens(tokens[1], SIM_TOKENS, sim->run.seed * 4 + 2);
	memcpy(tokens[1], tokens[0], 96 * sizeof(uint32_t));
	tu_tokens(tokens[2], SIM_TOKENS, sim->run.seed * 4 + 3);
	tu_tokens(tokens[3], SIM_TOKENS, sim->run.seed * 4 + 4);
	memcpy(tokens[3], tokens[2], 32 * sizeof(uint32_t));
	sim->node_count = 0;
	for (uint32_t b = 0; b < SIM_BRANCHES; b++) {
		struct rec_history h;

		SEL_ASSERT(rec_history_init(&h, &model, tokens[b], SIM_TOKENS) == 0);
		for (uint32_t k = 0; k < SIM_POINTS; k++) {
			struct rec_key key;
			int32_t at;

			rec_history_key_at(&h, sim_points[k], &key);
			at = node_of(sim, &key);
			if (at < 0) {
				struct sim_node *n = &sim->nodes[sim->node_count];

				n->key = key;
				n->parent = k ? (int32_t)sim->branch_nodes[b][k - 1] : -1;
				n->first_page_index = k ? sim_points[k - 1] / SIM_PAGE_TOKENS : 0;
				n->tail_page_count = sim_points[k] / SIM_PAGE_TOKENS -
						     n->first_page_index;
				at = (int32_t)sim->node_count++;
			}
			sim->branch_nodes[b][k] = (uint32_t)at;
		}
		rec_history_free(&h);
	}
}

/* Rank r's share image of node in scope with payload (record/FORMAT.md). */
struct image {
	uint8_t *bytes;
	uint64_t length;
	struct rec_layout l;
};

static void image_make(struct sim *sim, struct image *img, uint32_t scope, uint32_t node,
		       uint64_t payload, uint32_t rank)
{
	const struct sim_node *n = &sim->nodes[node];
	const struct rec_geometry *g = &sim->g[rank];
	uint64_t seed = rec_checksum_seed(&n->key);
	struct rec_header h;

	SEL_ASSERT(rec_header_init(&h, g, &sim->ns[scope], &n->key,
				   n->parent >= 0 ? &sim->nodes[n->parent].key : NULL,
				   &n->key.digest, n->first_page_index, n->tail_page_count,
				   1) == 0);
	SEL_ASSERT(rec_layout_from_header(&h, &img->l) == 0);
	img->length = img->l.file_length;
	img->bytes = tu_alloc(img->length);
	tu_fill(img->bytes + img->l.page_offset, (size_t)n->tail_page_count * img->l.page_stride,
		payload * 31 + rank);
	for (uint32_t j = 0; j < n->tail_page_count; j++)
		sel_put_le64(img->bytes + img->l.checksum_offset + 8ull * j,
			     rec_page_checksum(img->bytes + img->l.page_offset +
						       (uint64_t)j * img->l.page_stride,
					       img->l.page_stride, seed, n->first_page_index + j));
	tu_fill(img->bytes + img->l.row_offset, img->l.row_length, payload * 31 + rank + 7);
	h.row_checksum = rec_row_checksum(img->bytes + img->l.row_offset, img->l.row_length, seed);
	rec_header_encode(&h, img->bytes);
}

static void image_free(struct image *img)
{
	free(img->bytes);
	img->bytes = NULL;
}

static uint64_t node_bytes(struct sim *sim, uint32_t node)
{
	uint64_t bytes = 0;

	for (uint32_t r = 0; r < SIM_WORLD; r++) {
		struct image img;

		image_make(sim, &img, 0, node, 1, r);
		bytes += img.length;
		image_free(&img);
	}
	return bytes;
}

/* ---- connections ---- */

static void conn_send(struct sim *sim, struct sim_conn *c, uint16_t type, const uint8_t *body,
		      int length, const uint8_t *data, uint32_t data_length)
{
	int ret;

	SIM_CHECK(sim, length >= 0, "encoding a frame of type %u: %d", type, length);
	ret = pool_frame_write(c->fd, c->kc[0] || c->kc[1] ? c->kc : NULL, POOL_TO_MANAGER,
			       &c->seq, type, body, (uint32_t)length, data, data_length);
	SIM_CHECK(sim, ret == 0, "writing a frame of type %u: %s", type, strerror(-ret));
}

/* The next whole frame (a window's data in sim->data); 0 at end of file. */
static int conn_next(struct sim *sim, struct sim_conn *c)
{
	char why[SIM_WHY];
	bool eof = false;
	int ret;

	for (;;) {
		ret = pool_rx_feed(&c->rx, c->fd, &eof, why, sizeof(why));
		if (ret == POOL_RX_MORE && eof)
			return 0;
		SIM_CHECK(sim, ret >= 0, "reading a frame: %s", why);
		if (ret == POOL_RX_HEAD) {
			SIM_CHECK(sim, c->rx.data_length <= SIM_DATA_BYTES, "a window of %u bytes",
				  c->rx.data_length);
			c->rx.data = sim->data;
		}
		if (ret == POOL_RX_FRAME)
			return 1;
	}
}

static void conn_close(struct sim_conn *c)
{
	close(c->fd);
	free(c->body);
	c->body = NULL;
	c->fd = -1;
}

/* Connects, proves the secret, attaches; -EAGAIN when rank r's place is still taken. */
static int conn_open(struct sim *sim, struct sim_conn *c, uint32_t rank, uint32_t scope,
		     uint8_t instance)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_port = htons(pool_manager_port(sim->m)) };
	struct timeval tv = { .tv_sec = 5 };
	struct pool_attach a = { .rank = rank, .world_size = SIM_WORLD };
	uint8_t cn[32], sn[32], mac[32], want[32], buf[512];
	char why[SIM_WHY];
	int one = 1;

	memset(c, 0, sizeof(*c));
	c->body = tu_alloc(POOL_CONTROL_BODY_BYTES_MAX);
	pool_rx_init(&c->rx, c->body, POOL_CONTROL_BODY_BYTES_MAX, POOL_TO_RANK);
	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	SIM_CHECK(sim, c->fd >= 0, "socket: %s", strerror(errno));
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	SIM_CHECK(sim, connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect: %s",
		  strerror(errno));
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	SEL_ASSERT(cluster_nonce_fill(cn) == 0);
	conn_send(sim, c, POOL_MSG_HELLO, cn, 32, NULL, 0);
	SIM_CHECK(sim, conn_next(sim, c) == 1 && c->rx.header.type == POOL_MSG_CHALLENGE,
		  "no CHALLENGE");
	memcpy(sn, c->body, 32);
	pool_proof_mac(sim_secret, sn, cn, mac);
	conn_send(sim, c, POOL_MSG_PROOF, mac, 32, NULL, 0);
	SIM_CHECK(sim, conn_next(sim, c) == 1 && c->rx.header.type == POOL_MSG_WELCOME,
		  "no WELCOME");
	SIM_CHECK(sim, pool_welcome_decode(c->body, c->rx.body_length, &c->welcome, why,
					   sizeof(why)) == 0, "WELCOME: %s", why);
	pool_welcome_mac(sim_secret, cn, sn, c->body + 32, c->rx.body_length - 32, want);
	SIM_CHECK(sim, memcmp(c->welcome.mac, want, 32) == 0, "WELCOME's MAC");
	pool_connection_key(sim_secret, cn, sn, c->kc);
	c->rx.key = c->kc;
	memset(a.instance_id, instance, 16);
	a.namespace_id = sim->ns[scope];
	a.layout_digest = sim->g[0].layout_digest;
	a.page_tokens = SIM_PAGE_TOKENS;
	a.plane_count = sim->g[0].page_plane_count;
	for (uint32_t i = 0; i < SIM_WORLD; i++) {
		a.page_bytes[i] = sim->g[i].page_record_bytes;
		a.row_bytes[i] = sim->g[i].row_record_bytes;
	}
	conn_send(sim, c, POOL_MSG_ATTACH, buf, pool_attach_encode(&a, buf, sizeof(buf)), NULL, 0);
	SIM_CHECK(sim, conn_next(sim, c) == 1, "no answer to ATTACH");
	if (c->rx.header.type == POOL_MSG_REFUSE && rank != 0) {
		struct pool_refuse refused;

		/* the manager has not seen this rank's last connection close yet */
		SIM_CHECK(sim, pool_refuse_decode(c->body, c->rx.body_length, &refused, why,
						  sizeof(why)) == 0 &&
			       refused.reason == POOL_REFUSE_WORLD,
			  "ATTACH refused: %s", why);
		conn_close(c);
		return -EAGAIN;
	}
	SIM_CHECK(sim, c->rx.header.type == POOL_MSG_ATTACHED, "no ATTACHED (type %u)",
		  c->rx.header.type);
	SIM_CHECK(sim, pool_attached_decode(c->body, c->rx.body_length, &c->attached, why,
					    sizeof(why)) == 0, "ATTACHED: %s", why);
	return 0;
}

/* Rank r of an attached instance attaches again on a new connection (R-POOL-110). */
static void conn_reattach(struct sim *sim, struct sim_conn *c, uint32_t rank, uint32_t scope,
			  uint8_t instance)
{
	for (uint32_t k = 0; k < 2000; k++) {
		if (conn_open(sim, c, rank, scope, instance) == 0)
			return;
		usleep(1000);
	}
	SIM_CHECK(sim, false, "rank %u never attached again", rank);
}

/* ---- instances ---- */

static void claim_forget(struct sim_instance *in, uint64_t id)
{
	for (uint32_t i = 0; i < in->claim_count; i++)
		if (in->claims[i] == id) {
			in->claims[i] = in->claims[--in->claim_count];
			return;
		}
}

/*
 * Takes a frame that may come on a session at any time: an EXPORT (kept
 * for later), a HEARTBEAT, a claim's CLAIM_END at its deadline. True when
 * the frame was one of those.
 */
static bool session_async(struct sim *sim, uint32_t i, struct sim_conn *c)
{
	struct sim_instance *in = &sim->inst[i];
	char why[SIM_WHY];

	if (c->rx.header.type == POOL_MSG_HEARTBEAT)
		return true;
	if (c->rx.header.type == POOL_MSG_EXPORT) {
		struct pool_export x;
		int32_t node;

		SIM_CHECK(sim, c == &in->c[0], "EXPORT off the session");
		SIM_CHECK(sim, pool_export_decode(c->body, c->rx.body_length, &x, why,
						  sizeof(why)) == 0, "EXPORT: %s", why);
		node = node_of(sim, &x.key);
		SIM_CHECK(sim, node >= 0 && in->announced[node],
			  "instance %u asked to export key %llu it never announced", i,
			  (unsigned long long)x.key.consumed);
		sim_trace(sim, "inst %u: EXPORT %llu of node %d", i,
			  (unsigned long long)x.export_id, node);
		sim->exports_seen++;
		if (in->export_count < SIM_EXPORTS_MAX)
			in->exports[in->export_count++] =
				(struct sim_export){ x.export_id, (uint32_t)node };
		return true;
	}
	if (c->rx.header.type == POOL_MSG_CLAIM_END && c == &in->c[0]) {
		struct pool_claim_end e;
		bool live = false;

		SIM_CHECK(sim, pool_claim_end_decode(c->body, c->rx.body_length, &e, why,
						     sizeof(why)) == 0, "CLAIM_END: %s", why);
		if (e.claim_id == in->pulling)
			return false; /* the end of rank zero's stream: the puller's */
		for (uint32_t k = 0; k < in->claim_count; k++)
			live |= in->claims[k] == e.claim_id;
		/* a claim's deadline; or one that came after the session ended it */
		SIM_CHECK(sim, e.result == -ETIMEDOUT || (!live && e.result == -ENOENT),
			  "the session's claim %llu ended with %d", (unsigned long long)e.claim_id,
			  e.result);
		sim_trace(sim, "inst %u: claim %llu ended by the manager (%d)", i,
			  (unsigned long long)e.claim_id, e.result);
		claim_forget(in, e.claim_id);
		return true;
	}
	return false;
}

/* The next frame on rank r of instance i that is not an async one; its type. */
static uint16_t inst_next(struct sim *sim, uint32_t i, uint32_t r)
{
	struct sim_conn *c = &sim->inst[i].c[r];

	for (;;) {
		SIM_CHECK(sim, conn_next(sim, c) == 1, "instance %u rank %u: the manager closed", i,
			  r);
		if (c->rx.header.type == POOL_MSG_PUT_END && r != 0) {
			struct pool_put_end e;
			char why[SIM_WHY];

			/* a rank hears the end of a put its share had begun: the caller's or old */
			SIM_CHECK(sim, pool_put_end_decode(c->body, c->rx.body_length, &e, why,
							   sizeof(why)) == 0, "PUT_END: %s", why);
			return POOL_MSG_PUT_END;
		}
		if (!session_async(sim, i, c))
			return c->rx.header.type;
	}
}

static void inst_open(struct sim *sim, uint32_t i, uint32_t scope)
{
	struct sim_instance *in = &sim->inst[i];

	memset(in, 0, sizeof(*in));
	in->scope = scope;
	in->id = ++sim->next_instance_id;
	for (uint32_t r = 0; r < SIM_WORLD; r++)
		SIM_CHECK(sim, conn_open(sim, &in->c[r], r, scope, in->id) == 0, "rank %u refused", r);
	in->open = true;
	sim_trace(sim, "inst %u: open, scope %u, id %u, scope records %llu", i, scope, in->id,
		  (unsigned long long)in->c[0].attached.scope_records);
}

static void inst_close(struct sim *sim, uint32_t i)
{
	struct sim_instance *in = &sim->inst[i];

	for (uint32_t r = 0; r < SIM_WORLD; r++)
		conn_close(&in->c[r]);
	in->open = false;
	sim_trace(sim, "inst %u: closed", i);
}

/* ---- puts ---- */

enum put_how { PUT_COMMIT, PUT_ABANDON, PUT_CORRUPT, PUT_CUT, PUT_CUT_RANK };

static const char *const put_how_name[] = { "commit", "abandon", "corrupt", "cut",
					    "cut rank 1" };

/* Sends rank r's share up to upto bytes, in windows of 20000 bytes. */
static void share_send(struct sim *sim, struct sim_conn *c, uint64_t put_id,
		       const struct image *img, uint64_t upto)
{
	uint8_t head[POOL_PUT_WINDOW_HEAD_BYTES];

	for (uint64_t off = 0; off < upto;) {
		uint64_t len = upto - off > 20000 ? 20000 : upto - off;
		struct pool_put_window w = { put_id, off };

		pool_put_window_encode(&w, head, sizeof(head));
		conn_send(sim, c, POOL_MSG_PUT_WINDOW, head, POOL_PUT_WINDOW_HEAD_BYTES,
			  img->bytes + off, (uint32_t)len);
		off += len;
	}
}

/* The PUT_END of put_id on rank r: its result (others of old puts skipped). */
static int put_end_wait(struct sim *sim, uint32_t i, uint32_t r, uint64_t put_id, bool *commit)
{
	struct sim_conn *c = &sim->inst[i].c[r];

	for (;;) {
		struct pool_put_end e;
		char why[SIM_WHY];
		uint16_t type = inst_next(sim, i, r);

		SIM_CHECK(sim, type == POOL_MSG_PUT_END, "rank %u waits for PUT_END, got type %u",
			  r, type);
		SIM_CHECK(sim, pool_put_end_decode(c->body, c->rx.body_length, &e, why,
						   sizeof(why)) == 0, "PUT_END: %s", why);
		if (e.put_id != put_id)
			continue;
		if (commit)
			*commit = e.commit;
		return e.result;
	}
}

/*
 * Instance i puts node with a fresh payload, as how says. The model learns
 * a commit; any other end must leave the key as it was.
 */
static void do_put(struct sim *sim, uint32_t i, uint32_t node, enum put_how how)
{
	struct sim_instance *in = &sim->inst[i];
	const struct sim_node *n = &sim->nodes[node];
	uint64_t payload = ++sim->version, shares[SIM_WORLD], put_id;
	struct pool_put_begin b = { .request_id = ++sim->request, .key = n->key,
				    .first_page_index = n->first_page_index,
				    .tail_page_count = n->tail_page_count, .row = true,
				    .world_size = SIM_WORLD };
	struct pool_put_ready ready;
	struct image img[SIM_WORLD];
	uint8_t buf[256];
	char why[SIM_WHY];
	uint32_t bad_rank = sim_below(sim, SIM_WORLD);
	bool commit = false;
	int ret;

	if (n->parent >= 0)
		b.parent = sim->nodes[n->parent].key;
	for (uint32_t r = 0; r < SIM_WORLD; r++) {
		image_make(sim, &img[r], in->scope, node, payload, r);
		shares[r] = img[r].length;
	}
	conn_send(sim, &in->c[0], POOL_MSG_PUT_BEGIN, buf,
		  pool_put_begin_encode(&b, shares, buf, sizeof(buf)), NULL, 0);
	SIM_CHECK(sim, inst_next(sim, i, 0) == POOL_MSG_PUT_READY, "no PUT_READY");
	SIM_CHECK(sim, pool_put_ready_decode(in->c[0].body, in->c[0].rx.body_length, &ready, why,
					     sizeof(why)) == 0, "PUT_READY: %s", why);
	SIM_CHECK(sim, ready.request_id == b.request_id, "PUT_READY of another request");
	put_id = ready.put_id;
	sim_trace(sim, "inst %u: put node %u (%s) payload %llu: ready %d", i, node,
		  put_how_name[how], (unsigned long long)payload, ready.result);
	if (ready.result) {
		/* -EEXIST only for a key committed in this scope */
		SIM_CHECK(sim, ready.result != -EEXIST || sim->committed[in->scope][node],
			  "PUT_READY -EEXIST for node %u never committed in scope %u", node,
			  in->scope);
		SIM_CHECK(sim, ready.result == -EEXIST || ready.result == -ENOENT ||
			       ready.result == -ENOSPC || ready.result == SEL_EQUEUEFULL,
			  "PUT_READY result %d", ready.result);
		SIM_CHECK(sim, ready.result != -ENOENT || n->parent >= 0,
			  "PUT_READY -ENOENT for a root");
		sim->believed[in->scope][node] = ready.result == -EEXIST;
		if (ready.result == -ENOENT)
			sim->believed[in->scope][n->parent] = false;
		goto done;
	}
	if (how == PUT_CUT) {
		struct pool_manager_stats st;
		uint64_t failed;

		pool_manager_stats(sim->m, &st);
		failed = st.puts_failed;
		share_send(sim, &in->c[bad_rank], put_id, &img[bad_rank],
			   sim_below(sim, (uint32_t)img[bad_rank].length));
		inst_close(sim, i);
		/*
		 * The put fails with its session (R-POOL-43). Wait for it: while
		 * it is open, a PUT_BEGIN of its key is answered -EEXIST.
		 */
		for (uint32_t k = 0; k < 2000 && st.puts_failed == failed; k++) {
			usleep(1000);
			pool_manager_stats(sim->m, &st);
		}
		SIM_CHECK(sim, st.puts_failed > failed, "a put whose session closed never failed");
		inst_open(sim, i, in->scope);
		sim->put_failures++;
		goto done;
	}
	if (how == PUT_CUT_RANK) {
		/* rank 1's connection ends mid-share: the put fails, rank 1 attaches again */
		share_send(sim, &in->c[1], put_id, &img[1], sim_below(sim, (uint32_t)img[1].length));
		conn_close(&in->c[1]);
		ret = put_end_wait(sim, i, 0, put_id, &commit);
		SIM_CHECK(sim, (ret == -ECONNRESET || ret == -ETIMEDOUT) && !commit,
			  "a put whose rank 1 left: %d", ret);
		conn_reattach(sim, &in->c[1], 1, in->scope, in->id);
		sim_trace(sim, "inst %u: rank 1 attached again", i);
		sim->put_failures++;
		goto done;
	}
	if (how == PUT_CORRUPT) {
		/* a byte of a page (or the row), after the header */
		uint64_t at = img[bad_rank].l.page_offset +
			      sim_below(sim, (uint32_t)(img[bad_rank].length -
							img[bad_rank].l.page_offset));

		img[bad_rank].bytes[at] ^= 0x40;
	}
	for (uint32_t r = 0; r < SIM_WORLD; r++) {
		share_send(sim, &in->c[r], put_id, &img[r], img[r].length);
		ret = put_end_wait(sim, i, r, put_id, r == 0 ? &commit : NULL);
		if (how == PUT_CORRUPT && r == bad_rank) {
			SIM_CHECK(sim, ret == SEL_ECHECKSUM, "a corrupt share of rank %u: %d", r,
				  ret);
			if (r != 0) /* the session hears the put's outcome */
				ret = put_end_wait(sim, i, 0, put_id, &commit);
			SIM_CHECK(sim, ret == SEL_ECHECKSUM && !commit,
				  "the outcome of a corrupt put: %d", ret);
			sim->put_failures++;
			goto done;
		}
		if (r == 0 && ret != 0) {
			/* the put failed already: its deadline, on a slow machine */
			SIM_CHECK(sim, ret == -ETIMEDOUT, "rank 0's share: %d", ret);
			sim->put_failures++;
			goto done;
		}
		if (ret) {
			SIM_CHECK(sim, ret == -ETIMEDOUT, "rank %u's share: %d", r, ret);
			ret = put_end_wait(sim, i, 0, put_id, &commit);
			SIM_CHECK(sim, ret == -ETIMEDOUT && !commit, "the outcome: %d", ret);
			sim->put_failures++;
			goto done;
		}
	}
	{
		struct pool_put_end e = { .put_id = put_id, .commit = how == PUT_COMMIT };

		conn_send(sim, &in->c[0], POOL_MSG_PUT_END, buf,
			  pool_put_end_encode(&e, buf, sizeof(buf)), NULL, 0);
	}
	ret = put_end_wait(sim, i, 0, put_id, &commit);
	sim_trace(sim, "inst %u: put node %u outcome %d", i, node, ret);
	if (how == PUT_ABANDON) {
		SIM_CHECK(sim, ret == -ECANCELED || ret == -ETIMEDOUT, "an abandoned put: %d", ret);
		sim->put_failures++;
	} else if (ret == 0) {
		SIM_CHECK(sim, commit, "outcome 0 without commit");
		sim->committed[in->scope][node] = payload;
		sim->believed[in->scope][node] = true;
		sim->commits++;
		sim->started_commits++;
	} else {
		SIM_CHECK(sim, ret == -ETIMEDOUT, "a whole put's outcome: %d", ret);
		sim->put_failures++;
	}
done:
	for (uint32_t r = 0; r < SIM_WORLD; r++)
		image_free(&img[r]);
}

/* ---- lookups ---- */

/*
 * A LOOKUP of keys on instance i's session; the chain answered, checked:
 * records committed in the scope, each the parent's child, ending at a
 * candidate with its row.
 */
static uint32_t do_lookup(struct sim *sim, uint32_t i, const struct rec_key *keys,
			  uint32_t count, uint32_t *chain)
{
	struct sim_instance *in = &sim->inst[i];
	struct pool_chain_view v;
	uint64_t ticket = ++sim->request;
	uint8_t buf[1024];
	char why[SIM_WHY];
	bool candidate = false;

	conn_send(sim, &in->c[0], POOL_MSG_LOOKUP, buf,
		  pool_lookup_encode(ticket, keys, count, buf, sizeof(buf)), NULL, 0);
	SIM_CHECK(sim, inst_next(sim, i, 0) == POOL_MSG_ANSWER, "no ANSWER");
	SIM_CHECK(sim, pool_answer_decode(in->c[0].body, in->c[0].rx.body_length, &ticket, &v,
					  why, sizeof(why)) == 0, "ANSWER: %s", why);
	sim->lookups++;
	for (uint32_t k = 0; k < v.count; k++) {
		struct pool_chain_entry e;
		int32_t node;

		pool_chain_view_entry(&v, k, &e);
		node = node_of(sim, &e.key);
		SIM_CHECK(sim, node >= 0, "ANSWER entry %u: a key of no record", k);
		SIM_CHECK(sim, sim->committed[in->scope][node] != 0,
			  "ANSWER lists node %d, never committed in scope %u", node, in->scope);
		SIM_CHECK(sim, k == 0 ? sim->nodes[node].parent < 0
				      : sim->nodes[node].parent == (int32_t)chain[k - 1],
			  "ANSWER entry %u (node %d) does not extend the entry before", k, node);
		SIM_CHECK(sim, e.first_page_index == sim->nodes[node].first_page_index &&
			       e.tail_page_count == sim->nodes[node].tail_page_count,
			  "ANSWER entry %u's pages", k);
		chain[k] = (uint32_t)node;
		sim->believed[in->scope][node] = true;
		if (k + 1 == v.count) {
			SIM_CHECK(sim, e.row, "the answer's last entry without its row");
			for (uint32_t q = 0; q < count; q++)
				candidate |= node == node_of(sim, &keys[q]);
			SIM_CHECK(sim, candidate, "the answer ends at node %d, not a candidate",
				  node);
		}
	}
	sim->hits += v.count > 0;
	return v.count;
}

/* Whether node's chain is whole in the scope of instance i now. */
static bool held(struct sim *sim, uint32_t i, uint32_t node)
{
	uint32_t chain[SIM_POINTS];
	bool yes = do_lookup(sim, i, &sim->nodes[node].key, 1, chain) > 0;

	sim->believed[sim->inst[i].scope][node] = yes;
	return yes;
}

/* ---- claims ---- */

/* CLAIM (or CLAIM_LOCAL) of node on instance i: CLAIMED's result and chain. */
static int claim_begin(struct sim *sim, uint32_t i, uint32_t node, bool local, uint64_t *id,
		       uint32_t *chain, uint32_t *count)
{
	struct sim_instance *in = &sim->inst[i];
	struct pool_claim q = { .claim_id = ++sim->claim_id, .key = sim->nodes[node].key };
	struct pool_claimed cd;
	struct pool_chain_view v;
	uint8_t buf[64];
	char why[SIM_WHY];

	conn_send(sim, &in->c[0], local ? POOL_MSG_CLAIM_LOCAL : POOL_MSG_CLAIM, buf,
		  pool_claim_encode(&q, buf, sizeof(buf)), NULL, 0);
	SIM_CHECK(sim, inst_next(sim, i, 0) == POOL_MSG_CLAIMED, "no CLAIMED (type %u)",
		  in->c[0].rx.header.type);
	SIM_CHECK(sim, pool_claimed_decode(in->c[0].body, in->c[0].rx.body_length, &cd, &v, why,
					   sizeof(why)) == 0, "CLAIMED: %s", why);
	SIM_CHECK(sim, cd.claim_id == q.claim_id, "CLAIMED of another claim");
	*id = q.claim_id;
	*count = 0;
	sim_trace(sim, "inst %u: claim %llu of node %u%s: %d, %u records", i,
		  (unsigned long long)q.claim_id, node, local ? " (local)" : "", cd.result, v.count);
	if (cd.result) {
		SIM_CHECK(sim, cd.result == -ENOENT || cd.result == -ENOSPC ||
			       cd.result == SEL_EQUEUEFULL, "CLAIMED result %d", cd.result);
		return cd.result;
	}
	SIM_CHECK(sim, v.count >= 1 && v.count <= SIM_POINTS, "CLAIMED with %u records", v.count);
	for (uint32_t k = 0; k < v.count; k++) {
		struct pool_chain_entry e;
		int32_t n;

		pool_chain_view_entry(&v, k, &e);
		n = node_of(sim, &e.key);
		SIM_CHECK(sim, n >= 0 && sim->committed[in->scope][n] != 0,
			  "CLAIMED lists a record never committed in scope %u", in->scope);
		chain[k] = (uint32_t)n;
	}
	SIM_CHECK(sim, chain[v.count - 1] == node, "CLAIMED's chain ends elsewhere");
	*count = v.count;
	if (in->claim_count < SIM_CLAIMS_MAX)
		in->claims[in->claim_count++] = q.claim_id;
	sim->claims_granted++;
	sim->started_claims++;
	return 0;
}

static void claim_end_send(struct sim *sim, uint32_t i, uint64_t id)
{
	struct pool_claim_end e = { .claim_id = id };
	uint8_t buf[POOL_CLAIM_END_BYTES];

	conn_send(sim, &sim->inst[i].c[0], POOL_MSG_CLAIM_END, buf,
		  pool_claim_end_encode(&e, buf, sizeof(buf)), NULL, 0);
	claim_forget(&sim->inst[i], id);
}

/* Places of rank r for chain: each the share image the model says, in the arena. */
static void places_check(struct sim *sim, uint32_t i, uint32_t r, const uint8_t *body,
			 uint32_t length, uint64_t id, const uint32_t *chain, uint32_t count)
{
	struct sim_instance *in = &sim->inst[i];
	struct pool_places_view pv;
	char why[SIM_WHY];
	const uint8_t *arena;
	uint64_t arena_bytes = in->c[0].welcome.arena_bytes;
	int fd = open(in->c[0].welcome.arena_path, O_RDONLY | O_CLOEXEC);

	SIM_CHECK(sim, pool_claim_places_decode(body, length, &pv, why, sizeof(why)) == 0,
		  "CLAIM_PLACES: %s", why);
	SIM_CHECK(sim, pv.claim_id == id && pv.count == count, "CLAIM_PLACES of %u records",
		  pv.count);
	SIM_CHECK(sim, fd >= 0, "the arena %s: %s", in->c[0].welcome.arena_path, strerror(errno));
	arena = mmap(NULL, arena_bytes, PROT_READ, MAP_SHARED, fd, 0);
	SIM_CHECK(sim, arena != MAP_FAILED, "mapping the arena: %s", strerror(errno));
	for (uint32_t k = 0; k < count; k++) {
		struct pool_place pl;
		struct image img;

		pool_places_view_place(&pv, k, &pl);
		image_make(sim, &img, in->scope, chain[k], sim->committed[in->scope][chain[k]], r);
		SIM_CHECK(sim, pl.bytes == img.length && pl.offset % 4096 == 0 &&
			       pl.offset + pl.bytes <= arena_bytes,
			  "place %u of rank %u: %llu bytes at %llu", k, r,
			  (unsigned long long)pl.bytes, (unsigned long long)pl.offset);
		SIM_CHECK(sim, memcmp(arena + pl.offset, img.bytes, img.length) == 0,
			  "rank %u's share of node %u in the arena is not payload %llu's", r,
			  chain[k], (unsigned long long)sim->committed[in->scope][chain[k]]);
		image_free(&img);
		sim->places_checked++;
	}
	munmap((void *)arena, arena_bytes);
	close(fd);
}

/*
 * Rank r of instance i pulls claim id by stream, skipping skip pages, and
 * checks every window against the model's image; stops after max windows
 * (then the stream is left). The stream's CLAIM_END result, or 1 when left.
 */
static int stream_pull(struct sim *sim, uint32_t i, uint32_t r, uint64_t id,
		       const uint32_t *chain, uint32_t count, uint32_t skip, uint32_t max)
{
	struct sim_instance *in = &sim->inst[i];
	struct sim_conn *c = &in->c[r];
	struct pool_claim_pull p = { .claim_id = id, .skip_pages = skip };
	uint8_t buf[POOL_CLAIM_PULL_BYTES];
	struct image img[SIM_POINTS] = { 0 };
	uint64_t got = 0, want = 0;
	char why[SIM_WHY];
	uint32_t windows = 0, last_index = 0;
	int result = 1;

	for (uint32_t k = 0; k < count; k++) {
		const struct sim_node *n = &sim->nodes[chain[k]];
		uint32_t end = n->first_page_index + n->tail_page_count;

		image_make(sim, &img[k], in->scope, chain[k], sim->committed[in->scope][chain[k]],
			   r);
		if (end > skip || k + 1 == count) {
			uint32_t from = skip > n->first_page_index ? skip - n->first_page_index : 0;

			if (from > n->tail_page_count)
				from = n->tail_page_count;
			want += REC_HEADER_BYTES + 8ull * n->tail_page_count +
				(uint64_t)(n->tail_page_count - from) * img[k].l.page_stride;
			if (k + 1 == count)
				want += img[k].l.row_length;
		}
	}
	conn_send(sim, c, POOL_MSG_CLAIM_PULL, buf, pool_claim_pull_encode(&p, buf, sizeof(buf)),
		  NULL, 0);
	if (r == 0)
		in->pulling = id;
	while (windows < max) {
		struct pool_claim_window w;
		uint16_t type = inst_next(sim, i, r);
		uint64_t off;
		const struct image *im;

		if (type == POOL_MSG_CLAIM_END) {
			struct pool_claim_end e;

			SIM_CHECK(sim, pool_claim_end_decode(c->body, c->rx.body_length, &e, why,
							     sizeof(why)) == 0, "CLAIM_END: %s", why);
			SIM_CHECK(sim, e.claim_id == id, "CLAIM_END of claim %llu, pulling %llu",
				  (unsigned long long)e.claim_id, (unsigned long long)id);
			SIM_CHECK(sim, e.result == 0 || e.result == -ETIMEDOUT || e.result == -ENOENT,
				  "a stream ended with %d", e.result);
			SIM_CHECK(sim, e.result != 0 || got == want,
				  "a complete stream of rank %u carried %llu bytes of %llu", r,
				  (unsigned long long)got, (unsigned long long)want);
			result = e.result;
			break;
		}
		SIM_CHECK(sim, type == POOL_MSG_CLAIM_WINDOW, "rank %u pulls, got type %u", r, type);
		SIM_CHECK(sim, pool_claim_window_decode(c->body, c->rx.body_length,
							c->rx.data_length, &w, why,
							sizeof(why)) == 0, "CLAIM_WINDOW: %s", why);
		SIM_CHECK(sim, w.claim_id == id && w.chain_index < count && w.chain_index >= last_index,
			  "CLAIM_WINDOW of claim %llu record %u", (unsigned long long)w.claim_id,
			  w.chain_index);
		last_index = w.chain_index;
		im = &img[w.chain_index];
		off = w.section == POOL_SECTION_HEADER	  ? w.first
		      : w.section == POOL_SECTION_CHECKSUMS ? im->l.checksum_offset + w.first
		      : w.section == POOL_SECTION_PAGES
			      ? im->l.page_offset + (uint64_t)w.first * im->l.page_stride
			      : im->l.row_offset + w.first;
		SIM_CHECK(sim, off + c->rx.data_length <= im->length,
			  "a window past its record's image");
		SIM_CHECK(sim, memcmp(im->bytes + off, sim->data, c->rx.data_length) == 0,
			  "rank %u's window (record %u node %u, section %u, first %u, %u bytes) is "
			  "not payload %llu's", r, w.chain_index, chain[w.chain_index], w.section,
			  w.first, c->rx.data_length,
			  (unsigned long long)sim->committed[in->scope][chain[w.chain_index]]);
		got += c->rx.data_length;
		sim->claim_bytes += c->rx.data_length;
		windows++;
	}
	in->pulling = 0;
	for (uint32_t k = 0; k < count; k++)
		image_free(&img[k]);
	return result;
}

/* Instance i claims node (stream or local), checks bytes, ends or leaves it. */
static void do_claim(struct sim *sim, uint32_t i, uint32_t node)
{
	struct sim_instance *in = &sim->inst[i];
	uint32_t chain[SIM_POINTS], count, pick = sim_below(sim, 10), pages;
	bool local = pick >= 7;
	uint64_t id;
	int ret;

	if (pick == 2) {
		/* closed before CLAIMED came (it may wait for a load from disk) */
		struct pool_claim q = { .claim_id = ++sim->claim_id, .key = sim->nodes[node].key };
		uint8_t buf[64];

		conn_send(sim, &in->c[0], POOL_MSG_CLAIM, buf, pool_claim_encode(&q, buf, sizeof(buf)),
			  NULL, 0);
		sim_trace(sim, "inst %u: claim %llu of node %u, closed at once", i,
			  (unsigned long long)q.claim_id, node);
		sim->started_unread++;
		inst_close(sim, i);
		inst_open(sim, i, in->scope);
		return;
	}
	if (claim_begin(sim, i, node, local, &id, chain, &count))
		return;
	pages = sim->nodes[node].first_page_index + sim->nodes[node].tail_page_count;
	if (local) {
		/* the grant's places come next on the session; rank 1 pulls its own */
		SIM_CHECK(sim, inst_next(sim, i, 0) == POOL_MSG_CLAIM_PLACES,
			  "a local grant without its places");
		places_check(sim, i, 0, in->c[0].body, in->c[0].rx.body_length, id, chain, count);
		{
			struct pool_claim_pull p = { .claim_id = id, .mode = POOL_PULL_PLACES };
			uint8_t buf[POOL_CLAIM_PULL_BYTES];

			conn_send(sim, &in->c[1], POOL_MSG_CLAIM_PULL, buf,
				  pool_claim_pull_encode(&p, buf, sizeof(buf)), NULL, 0);
		}
		SIM_CHECK(sim, inst_next(sim, i, 1) == POOL_MSG_CLAIM_PLACES,
			  "rank 1's places pull unanswered");
		places_check(sim, i, 1, in->c[1].body, in->c[1].rx.body_length, id, chain, count);
		claim_end_send(sim, i, id);
		return;
	}
	if (pick == 0) {
		/* closed mid-claim: rank 1 took a window or two */
		stream_pull(sim, i, 1, id, chain, count, 0, 1 + sim_below(sim, 2));
		inst_close(sim, i);
		inst_open(sim, i, in->scope);
		return;
	}
	if (pick == 3) {
		/* rank 1's connection ends and attaches again; the claim stays live (R-POOL-110) */
		stream_pull(sim, i, 1, id, chain, count, 0, sim_below(sim, 2));
		conn_close(&in->c[1]);
		conn_reattach(sim, &in->c[1], 1, in->scope, in->id);
		sim_trace(sim, "inst %u: rank 1 attached again with claim %llu live", i,
			  (unsigned long long)id);
	}
	for (uint32_t r = 0; r < SIM_WORLD; r++) {
		ret = stream_pull(sim, i, r, id, chain, count, sim_below(sim, pages + 1), UINT32_MAX);
		SIM_CHECK(sim, pick != 3 || r != 1 || ret == 0 || ret == -ETIMEDOUT,
			  "rank 1 attached again pulls a live claim: %d", ret);
	}
	if (pick == 1) {
		sim_trace(sim, "inst %u: claim %llu left for its deadline", i,
			  (unsigned long long)id);
		return;
	}
	claim_end_send(sim, i, id);
}

/* ---- holders and exports ---- */

static void do_holds(struct sim *sim, uint32_t i)
{
	struct sim_instance *in = &sim->inst[i];
	uint32_t node = sim_below(sim, sim->node_count);
	uint8_t buf[256];

	in->announced[node] = true;
	conn_send(sim, &in->c[0], POOL_MSG_HOLDS, buf,
		  pool_holds_encode(POOL_HOLDS_ADD, &sim->nodes[node].key, 1, buf, sizeof(buf)),
		  NULL, 0);
	sim_trace(sim, "inst %u: announces node %u", i, node);
}

/* Instance i answers its exports: each put, refused or left unanswered. */
static void do_exports(struct sim *sim, uint32_t i)
{
	struct sim_instance *in = &sim->inst[i];

	while (in->open && in->export_count) {
		struct sim_export x = in->exports[--in->export_count];
		struct pool_export_end e = { .export_id = x.id };
		uint32_t pick = sim_below(sim, 3), chain[SIM_POINTS], n = 0;
		uint8_t buf[POOL_EXPORT_END_BYTES];

		if (pick == 2) {
			sim_trace(sim, "inst %u: export %llu left unanswered", i,
				  (unsigned long long)x.id);
			continue;
		}
		if (pick == 0) {
			/* the chain, root first */
			for (int32_t q = (int32_t)x.node; q >= 0; q = sim->nodes[q].parent)
				chain[n++] = (uint32_t)q;
			while (n && in->open)
				do_put(sim, i, chain[--n], PUT_COMMIT);
			if (!in->open)
				return;
			sim->exports_answered++;
		} else {
			/*
			 * Refused. The key stays in announced: a refusal that comes
			 * after the export's deadline is ignored (R-POOL-75), so the
			 * manager may ask for the key again.
			 */
			e.result = -ENOENT;
		}
		conn_send(sim, &in->c[0], POOL_MSG_EXPORT_END, buf,
			  pool_export_end_encode(&e, buf, sizeof(buf)), NULL, 0);
		sim_trace(sim, "inst %u: export %llu ends %d", i, (unsigned long long)x.id,
			  e.result);
	}
}

/* ---- the manager ---- */

static void *sim_run_thread(void *arg)
{
	return (void *)(intptr_t)pool_manager_run(arg);
}

static void manager_start(struct sim *sim)
{
	char why[SIM_WHY];
	int ret = pool_manager_open(&sim->config, &sim->m, why, sizeof(why));

	SIM_CHECK(sim, ret == 0, "pool_manager_open: %s", why);
	snprintf(sim->arena_path, sizeof(sim->arena_path), "%s", pool_manager_arena_path(sim->m));
	SEL_ASSERT(pthread_create(&sim->thread, NULL, sim_run_thread, sim->m) == 0);
	sim->running = true;
	sim->started_commits = sim->started_claims = sim->started_unread = 0;
}

static void manager_stop(struct sim *sim)
{
	void *ret;

	pool_manager_stop(sim->m);
	pthread_join(sim->thread, &ret);
	SIM_CHECK(sim, (intptr_t)ret == 0, "pool_manager_run returned %d", (int)(intptr_t)ret);
	pool_manager_close(sim->m);
	sim->m = NULL;
	sim->running = false;
	SIM_CHECK(sim, access(sim->arena_path, F_OK) != 0, "the arena %s stayed", sim->arena_path);
}

/* Ends every claim left live, on every open instance. */
static void claims_end_all(struct sim *sim)
{
	for (uint32_t i = 0; i < sim->instances; i++)
		while (sim->inst[i].open && sim->inst[i].claim_count)
			claim_end_send(sim, i, sim->inst[i].claims[0]);
}

/*
 * At a quiet point (no claim live, no put open): which records each scope
 * holds (held_out, by lookups), and the manager's counters agree with
 * them: records, and the bytes of the arena and the disk tier together.
 */
static void quiet_check(struct sim *sim, bool held_out[SIM_SCOPES_MAX][SIM_NODES])
{
	struct pool_manager_stats st = { 0 };
	uint64_t records = 0, bytes = 0;

	claims_end_all(sim);
	for (uint32_t tries = 0; tries < 200; tries++) {
		records = 0;
		bytes = 0;
		for (uint32_t s = 0; s < sim->scopes; s++) {
			uint32_t i = s; /* instance s is of scope s, and open here */

			SEL_ASSERT(sim->inst[i].open && sim->inst[i].scope == s);
			for (uint32_t n = 0; n < sim->node_count; n++) {
				held_out[s][n] = held(sim, i, n);
				if (held_out[s][n]) {
					records++;
					bytes += node_bytes(sim, n);
				}
			}
		}
		pool_manager_stats(sim->m, &st);
		if (st.records == records && st.arena_used_bytes + st.disk_used_bytes == bytes &&
		    st.disk_queued == 0)
			break;
		usleep(10 * 1000);
	}
	sim_trace(sim, "quiet: %llu records of %llu bytes; manager: %llu records, arena %llu, "
		  "disk %llu, queued %llu", (unsigned long long)records, (unsigned long long)bytes,
		  (unsigned long long)st.records, (unsigned long long)st.arena_used_bytes,
		  (unsigned long long)st.disk_used_bytes, (unsigned long long)st.disk_queued);
	SIM_CHECK(sim, st.records == records, "the manager counts %llu records, lookups find %llu",
		  (unsigned long long)st.records, (unsigned long long)records);
	SIM_CHECK(sim, st.arena_used_bytes + st.disk_used_bytes == bytes,
		  "the manager holds %llu + %llu bytes, the records found take %llu",
		  (unsigned long long)st.arena_used_bytes, (unsigned long long)st.disk_used_bytes,
		  (unsigned long long)bytes);
	SIM_CHECK(sim, st.puts_committed == sim->started_commits &&
		       st.claims_granted >= sim->started_claims &&
		       st.claims_granted <= sim->started_claims + sim->started_unread,
		  "the manager counts %llu puts committed and %llu claims granted, the instances "
		  "%llu and %llu", (unsigned long long)st.puts_committed,
		  (unsigned long long)st.claims_granted, (unsigned long long)sim->started_commits,
		  (unsigned long long)sim->started_claims);
	sim->quiet_checks++;
}

/* Stops the manager and starts it again on the same name and directory. */
static void do_restart(struct sim *sim)
{
	static bool before[SIM_SCOPES_MAX][SIM_NODES], after[SIM_SCOPES_MAX][SIM_NODES];
	bool exact = sim->config.dir && !sim->config.disk_limit_bytes && !sim->config.max_age_ms;

	bool connected = sim_below(sim, 2);

	quiet_check(sim, before);
	if (connected) {
		/* stopped with every instance attached and a claim live: it drains (R-POOL-45) */
		for (uint32_t n = 0; n < sim->node_count; n++) {
			uint32_t chain[SIM_POINTS], count;
			uint64_t id;

			if (before[0][n] && claim_begin(sim, 0, n, false, &id, chain, &count) == 0)
				break;
		}
		sim_trace(sim, "stop with every instance attached");
		manager_stop(sim);
	}
	for (uint32_t i = 0; i < sim->instances; i++)
		if (sim->inst[i].open)
			inst_close(sim, i);
	if (!connected)
		manager_stop(sim);
	manager_start(sim);
	sim->restarts++;
	for (uint32_t i = 0; i < sim->instances; i++)
		inst_open(sim, i, sim->inst[i].scope);
	sim_trace(sim, "restart%s", exact ? ": what was held must come back" : "");
	quiet_check(sim, after);
	for (uint32_t s = 0; s < sim->scopes; s++)
		for (uint32_t n = 0; n < sim->node_count; n++) {
			SIM_CHECK(sim, !after[s][n] || (sim->config.dir && before[s][n]),
				  "node %u of scope %u held after the restart, not before", n, s);
			SIM_CHECK(sim, !exact || after[s][n] == before[s][n],
				  "node %u of scope %u held before the restart, not after", n, s);
		}
}

/* ---- one seed ---- */

static void sim_open(struct sim *sim, uint64_t seed)
{
	struct rec_identity model_b;

	sim->start_ms = sim_now_ms();
	tu_seeded_init(&sim->run, "test_pool_random", "SELENE_POOL_SEED", "SELENE_POOL_TRACE", seed);
	sim->fds_at_start = fd_count();
	sim->data = tu_alloc(SIM_DATA_BYTES);
	for (uint32_t r = 0; r < SIM_WORLD; r++)
		tu_geometry(&sim->g[r], SIM_PAGE_TOKENS, 2, 16384, 8192, r, SIM_WORLD);
	tu_identities(NULL, &sim->ns[0]);
	rec_model_identity_from_name(&model_b, "test-model-b");
	rec_namespace_identity(&sim->ns[1], &model_b, REC_STATE_ORDINARY);
	universe_make(sim);
	sim->scopes = 1 + (uint32_t)(seed % 2);
	sim->instances = 2 + (uint32_t)((seed / 2) % 3);
	sim->config = (struct pool_manager_config){
		.listen = "127.0.0.1:0", .name = "test-pool-random",
		.memory_bytes = (1024u + 256u * (uint32_t)(seed % 3)) << 10,
		.max_age_ms = seed % 4 == 1 ? 250 : 0, .window_bytes = 64 << 10,
		.claim_setup_ms = 150, .export_ms = 150,
	};
	memcpy(sim->config.secret, sim_secret, 32);
	if (seed % 3 == 0) {
		sim->dir = tu_make_temp_dir("pool-random");
		sim->config.dir = sim->dir;
		sim->config.disk_limit_bytes = seed % 2 ? 1536u << 10 : 0;
	}
	sim_trace(sim, "seed %llu: %u scopes, %u instances, arena %llu KiB, max age %llu ms, "
		  "disk %s, limit %llu KiB", (unsigned long long)seed, sim->scopes, sim->instances,
		  (unsigned long long)(sim->config.memory_bytes >> 10),
		  (unsigned long long)sim->config.max_age_ms, sim->dir ? "yes" : "no",
		  (unsigned long long)(sim->config.disk_limit_bytes >> 10));
	manager_start(sim);
	for (uint32_t i = 0; i < sim->instances; i++)
		inst_open(sim, i, i % sim->scopes);
}

static void sim_close(struct sim *sim)
{
	static bool last[SIM_SCOPES_MAX][SIM_NODES];

	quiet_check(sim, last);
	if (sim->config.max_age_ms) {
		/* every record expires: the arena is empty */
		struct pool_manager_stats st;

		usleep((useconds_t)(2 * sim->config.max_age_ms + 100) * 1000);
		quiet_check(sim, last);
		pool_manager_stats(sim->m, &st);
		SIM_CHECK(sim, st.records == 0 && st.arena_used_bytes == 0,
			  "past max age, %llu records and %llu arena bytes stay",
			  (unsigned long long)st.records, (unsigned long long)st.arena_used_bytes);
	}
	for (uint32_t i = 0; i < sim->instances; i++)
		if (sim->inst[i].open)
			inst_close(sim, i);
	manager_stop(sim);
	if (sim->dir) {
		tu_remove_tree(sim->dir);
		sim->dir = NULL;
	}
	free(sim->data);
	SIM_CHECK(sim, fd_count() == sim->fds_at_start, "%d descriptors open, %d at the start",
		  fd_count(), sim->fds_at_start);
}

/* Any node; or, for a put, mostly the first of a history not held when last seen. */
static uint32_t pick_node(struct sim *sim, uint32_t scope, bool put)
{
	uint32_t b = sim_below(sim, SIM_BRANCHES), k = sim_below(sim, SIM_POINTS);

	if (put && sim_below(sim, 4)) {
		for (k = 0; k < SIM_POINTS - 1; k++)
			if (!sim->believed[scope][sim->branch_nodes[b][k]])
				break;
	}
	return sim->branch_nodes[b][k];
}

static void sim_step(struct sim *sim)
{
	uint32_t pick = sim_below(sim, 100), i = sim_below(sim, sim->instances);
	struct sim_instance *in = &sim->inst[i];

	if (pick < 30) {
		uint32_t how = sim_below(sim, 20);

		do_put(sim, i, pick_node(sim, in->scope, true),
		       how < 14   ? PUT_COMMIT
		       : how < 16 ? PUT_ABANDON
		       : how < 18 ? PUT_CORRUPT
		       : how < 19 ? PUT_CUT
				  : PUT_CUT_RANK);
	} else if (pick < 50) {
		uint32_t b = sim_below(sim, SIM_BRANCHES), chain[SIM_POINTS], n;
		struct rec_key keys[SIM_POINTS];

		for (uint32_t k = 0; k < SIM_POINTS; k++)
			keys[k] = sim->nodes[sim->branch_nodes[b][SIM_POINTS - 1 - k]].key;
		n = do_lookup(sim, i, keys, SIM_POINTS, chain);
		sim_trace(sim, "inst %u: lookup of history %u: %u records", i, b, n);
		if (n && sim_below(sim, 2))
			do_claim(sim, i, chain[n - 1]); /* what a lookup lists is claimable */
	} else if (pick < 72) {
		do_claim(sim, i, pick_node(sim, in->scope, false));
	} else if (pick < 79) {
		do_holds(sim, i);
	} else if (pick < 86) {
		for (uint32_t k = 0; k < sim->instances; k++)
			do_exports(sim, k);
	} else if (pick < 90) {
		uint32_t ms = 10 + sim_below(sim, 160);

		sim_trace(sim, "wait %u ms", ms);
		usleep(ms * 1000);
	} else if (pick < 97) {
		static bool ignored[SIM_SCOPES_MAX][SIM_NODES];

		quiet_check(sim, ignored);
	} else if (pick < 98 && in->open) {
		inst_close(sim, i);
		inst_open(sim, i, in->scope);
	} else {
		do_restart(sim);
	}
}

static uint64_t env_u64(const char *name, uint64_t fallback)
{
	const char *v = getenv(name);

	return v && *v ? strtoull(v, NULL, 10) : fallback;
}

/* Seeds of random puts, claims, exports, closes and restarts: every byte and count as modelled. */
static void test_pool_random_model(void **state)
{
	uint64_t seeds = env_u64("SELENE_POOL_SEEDS", SIM_SEEDS_DEFAULT);
	uint64_t steps = env_u64("SELENE_POOL_STEPS", SIM_STEPS_DEFAULT);
	uint64_t first = 1, start = sim_now_ms();
	struct sim total = { 0 };

	(void)state;
	if (getenv("SELENE_POOL_SEED") && *getenv("SELENE_POOL_SEED")) {
		first = env_u64("SELENE_POOL_SEED", 1);
		seeds = 1;
	}
	signal(SIGPIPE, SIG_IGN);
	for (uint64_t seed = first; seed < first + seeds; seed++) {
		struct sim *sim = calloc(1, sizeof(*sim));

		assert_non_null(sim);
		tu_seeded_catch_aborts(&sim->run);
		sim_open(sim, seed);
		for (sim->run.step = 1; sim->run.step <= steps; sim->run.step++)
			sim_step(sim);
		sim_close(sim);
		tu_seeded_catch_aborts(NULL);
		total.commits += sim->commits;
		total.put_failures += sim->put_failures;
		total.claims_granted += sim->claims_granted;
		total.claim_bytes += sim->claim_bytes;
		total.places_checked += sim->places_checked;
		total.lookups += sim->lookups;
		total.hits += sim->hits;
		total.exports_seen += sim->exports_seen;
		total.exports_answered += sim->exports_answered;
		total.restarts += sim->restarts;
		total.quiet_checks += sim->quiet_checks;
		free(sim);
	}
	fprintf(stderr, "test_pool_random: %llu seeds x %llu steps in %llu ms: %llu puts committed, "
		"%llu failed or cut; %llu claims granted (%llu stream bytes, %llu places checked); "
		"%llu lookups (%llu hits); %llu exports asked, %llu answered with a put; %llu "
		"restarts; %llu quiet checks\n", (unsigned long long)seeds,
		(unsigned long long)steps, (unsigned long long)(sim_now_ms() - start),
		(unsigned long long)total.commits, (unsigned long long)total.put_failures,
		(unsigned long long)total.claims_granted, (unsigned long long)total.claim_bytes,
		(unsigned long long)total.places_checked, (unsigned long long)total.lookups,
		(unsigned long long)total.hits, (unsigned long long)total.exports_seen,
		(unsigned long long)total.exports_answered, (unsigned long long)total.restarts,
		(unsigned long long)total.quiet_checks);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pool_random_model),
	};

	sel_log_set_level(SEL_LOG_ERROR);
	return cmocka_run_group_tests_name("pool_random", tests, NULL, NULL);
}
