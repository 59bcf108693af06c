/*
 * The pool manager (pool/manager.h) on loopback, driven by test ranks that
 * speak pool/PROTOCOL.md with pool/wire.h: two instances of two ranks put
 * and claim records byte-exact (by stream and from the arena), another
 * scope never matches, a wrong secret and garbage are refused, a rank lost
 * mid-put or a corrupt share leaves nothing, max-age expiry, LRU eviction,
 * and a drain on stop.
 */
#include "tests/testutil.h"

#include "common/base.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "pool/client.h"
#include "pool/manager.h"
#include "pool/rdma.h"
#include "pool/wire.h"
#include "record/format.h"
#include "record/geometry.h"
#include "selene/selene.h"
#include "shard/device.h"
#include "shard/pool_share.h"
#include "tests/fake_verbs.h"

#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#define WHY_BYTES 256
#define WORLD 2u
#define PAGE_TOKENS 16u

struct running {
	struct pool_manager *m;
	pthread_t thread;
};

static void *run_thread(void *arg)
{
	return (void *)(intptr_t)pool_manager_run(arg);
}

static const uint8_t secret[32] = { 1, 2, 3, 4, 5, 6, 7, 8, 9 };

static void manager_start_in(struct running *r, uint64_t memory, uint64_t max_age_ms,
			     const char *dir, const char *name)
{
	struct pool_manager_config c = { .listen = "127.0.0.1:0", .name = name,
					 .memory_bytes = memory, .max_age_ms = max_age_ms,
					 .window_bytes = 64 << 10, .dir = dir };
	char why[WHY_BYTES];

	memcpy(c.secret, secret, 32);
	assert_int_equal(pool_manager_open(&c, &r->m, why, sizeof(why)), 0);
	assert_int_equal(pthread_create(&r->thread, NULL, run_thread, r->m), 0);
}

static void manager_start(struct running *r, uint64_t memory, uint64_t max_age_ms)
{
	manager_start_in(r, memory, max_age_ms, NULL, "test-pool");
}

static void manager_stop(struct running *r)
{
	void *ret;

	pool_manager_stop(r->m);
	pthread_join(r->thread, &ret);
	assert_int_equal((intptr_t)ret, 0);
	pool_manager_close(r->m);
}

/* A test rank: one connection, blocking with a 5 s timeout. */
struct trank {
	int fd;
	uint8_t kc[32];
	uint64_t seq;
	struct pool_rx rx;
	uint8_t *body;
	struct pool_welcome welcome;
	struct pool_attached attached;
	struct pool_refuse refused;
};

static struct rec_geometry geometry[WORLD];
static struct rec_identity model, namespace_id;

static void attach_parts(struct pool_attach *a, uint32_t rank, uint8_t instance,
			 uint8_t layout_flip)
{
	memset(a, 0, sizeof(*a));
	a->rank = rank;
	a->world_size = WORLD;
	memset(a->instance_id, instance, 16);
	a->namespace_id = namespace_id;
	a->layout_digest = geometry[0].layout_digest;
	a->layout_digest.bytes[0] ^= layout_flip;
	a->page_tokens = PAGE_TOKENS;
	a->plane_count = geometry[0].page_plane_count;
	for (uint32_t i = 0; i < WORLD; i++) {
		a->page_bytes[i] = geometry[i].page_record_bytes;
		a->row_bytes[i] = geometry[i].row_record_bytes;
	}
}

static int tconnect(uint16_t port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	struct timeval tv = { .tv_sec = 5 };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	return fd;
}

/* Reads one frame; 1, 0 at end of file, or the failure. */
static int trecv(struct trank *t)
{
	char why[WHY_BYTES];
	int ret = pool_rx_read_frame(&t->rx, t->fd, why, sizeof(why));

	if (ret == 1 && t->rx.header.type == POOL_MSG_REFUSE)
		assert_int_equal(pool_refuse_decode(t->rx.body, t->rx.body_length, &t->refused,
						    why, sizeof(why)), 0);
	return ret;
}

static void tsend(struct trank *t, uint16_t type, const uint8_t *body, int length,
		  const uint8_t *data, uint32_t data_length)
{
	assert_true(length >= 0);
	assert_int_equal(pool_frame_write(t->fd, t->kc[0] || t->kc[1] ? t->kc : NULL,
					  POOL_TO_MANAGER, &t->seq, type, body, (uint32_t)length,
					  data, data_length), 0);
}

/*
 * Connects, proves key, attaches. Returns 0, or the REFUSE reason (t->refused)
 * or -1 when the connection just closed.
 */
static int trank_open(struct trank *t, uint16_t port, const uint8_t *key, uint32_t rank,
		      uint8_t instance, uint8_t layout_flip)
{
	static struct pool_attach a;
	uint8_t cn[32], sn[32], mac[32], want[32], buf[POOL_CONTROL_BODY_BYTES_MAX];
	char why[WHY_BYTES];
	int n;

	memset(t, 0, sizeof(*t));
	t->body = tu_alloc(POOL_CONTROL_BODY_BYTES_MAX);
	pool_rx_init(&t->rx, t->body, POOL_CONTROL_BODY_BYTES_MAX, POOL_TO_RANK);
	t->fd = tconnect(port);
	assert_int_equal(cluster_nonce_fill(cn), 0);
	tsend(t, POOL_MSG_HELLO, cn, 32, NULL, 0);
	assert_int_equal(trecv(t), 1);
	assert_int_equal(t->rx.header.type, POOL_MSG_CHALLENGE);
	memcpy(sn, t->body, 32);
	pool_proof_mac(key, sn, cn, mac);
	tsend(t, POOL_MSG_PROOF, mac, 32, NULL, 0);
	n = trecv(t);
	if (n != 1)
		return -1;
	if (t->rx.header.type == POOL_MSG_REFUSE)
		return (int)t->refused.reason;
	assert_int_equal(t->rx.header.type, POOL_MSG_WELCOME);
	assert_int_equal(pool_welcome_decode(t->body, t->rx.body_length, &t->welcome, why,
					     sizeof(why)), 0);
	pool_welcome_mac(key, cn, sn, t->body + 32, t->rx.body_length - 32, want);
	assert_memory_equal(t->welcome.mac, want, 32);
	pool_connection_key(key, cn, sn, t->kc);
	t->rx.key = t->kc;
	attach_parts(&a, rank, instance, layout_flip);
	n = pool_attach_encode(&a, buf, sizeof(buf));
	tsend(t, POOL_MSG_ATTACH, buf, n, NULL, 0);
	n = trecv(t);
	if (n != 1)
		return -1;
	if (t->rx.header.type == POOL_MSG_REFUSE)
		return (int)t->refused.reason;
	assert_int_equal(t->rx.header.type, POOL_MSG_ATTACHED);
	assert_int_equal(pool_attached_decode(t->body, t->rx.body_length, &t->attached, why,
					      sizeof(why)), 0);
	return 0;
}

static void trank_close(struct trank *t)
{
	close(t->fd);
	free(t->body);
}

/* One rank's record image (record/FORMAT.md) of rec. */
struct image {
	uint8_t *bytes;
	uint64_t length;
};

static void image_make(struct image *img, uint32_t rank, const struct tu_record *rec)
{
	const struct rec_geometry *g = &geometry[rank];
	struct rec_header h;
	struct rec_layout l;
	uint64_t seed = rec_checksum_seed(&rec->key);

	assert_int_equal(rec_header_init(&h, g, &namespace_id, &rec->key,
					 rec->has_parent ? &rec->parent : NULL, &rec->key.digest,
					 rec->first_page_index, rec->tail_page_count, 1), 0);
	assert_int_equal(rec_layout_from_header(&h, &l), 0);
	img->length = l.file_length;
	img->bytes = tu_alloc(l.file_length);
	memcpy(img->bytes + l.page_offset, rec->pages, rec->stride * rec->tail_page_count);
	/* every rank's bytes differ */
	for (uint64_t i = 0; i < rec->stride * rec->tail_page_count; i += 4096)
		img->bytes[l.page_offset + i] ^= (uint8_t)rank;
	for (uint32_t j = 0; j < rec->tail_page_count; j++)
		sel_put_le64(img->bytes + l.checksum_offset + 8ull * j,
			     rec_page_checksum(img->bytes + l.page_offset + j * l.page_stride,
					       l.page_stride, seed, rec->first_page_index + j));
	memcpy(img->bytes + l.row_offset, rec->row, rec->row_length);
	img->bytes[l.row_offset] ^= (uint8_t)rank;
	h.row_checksum = rec_row_checksum(img->bytes + l.row_offset, l.row_length, seed);
	rec_header_encode(&h, img->bytes);
}

struct put_case {
	struct tu_record rec;
	struct image img[WORLD];
};

static void case_make(struct put_case *pc, uint64_t history, uint64_t consumed,
		      const struct put_case *parent, uint64_t payload)
{
	tu_record_make(&pc->rec, &geometry[0], history, consumed, parent ? &parent->rec : NULL,
		       payload);
	for (uint32_t r = 0; r < WORLD; r++)
		image_make(&pc->img[r], r, &pc->rec);
}

static void case_free(struct put_case *pc)
{
	for (uint32_t r = 0; r < WORLD; r++)
		free(pc->img[r].bytes);
	tu_record_free(&pc->rec);
}

static uint64_t next_request = 1;

/* PUT_BEGIN on the session; the PUT_READY result and *put_id. */
static int put_begin(struct trank *s, const struct put_case *pc, uint64_t *put_id)
{
	struct pool_put_begin b = { .request_id = next_request++, .key = pc->rec.key,
				    .first_page_index = pc->rec.first_page_index,
				    .tail_page_count = pc->rec.tail_page_count, .row = true,
				    .world_size = WORLD };
	struct pool_put_ready ready;
	uint64_t shares[WORLD];
	uint8_t buf[256];
	char why[WHY_BYTES];

	if (pc->rec.has_parent)
		b.parent = pc->rec.parent;
	for (uint32_t r = 0; r < WORLD; r++)
		shares[r] = pc->img[r].length;
	tsend(s, POOL_MSG_PUT_BEGIN, buf, pool_put_begin_encode(&b, shares, buf, sizeof(buf)),
	      NULL, 0);
	assert_int_equal(trecv(s), 1);
	assert_int_equal(s->rx.header.type, POOL_MSG_PUT_READY);
	assert_int_equal(pool_put_ready_decode(s->body, s->rx.body_length, &ready, why,
					       sizeof(why)), 0);
	assert_int_equal(ready.request_id, b.request_id);
	*put_id = ready.put_id;
	return ready.result;
}

/* Sends a rank's share in windows of 10000 bytes (not page-aligned on purpose). */
static void put_share(struct trank *t, uint64_t put_id, const struct image *img, uint64_t upto)
{
	uint8_t head[POOL_PUT_WINDOW_HEAD_BYTES];

	for (uint64_t off = 0; off < upto;) {
		uint64_t len = upto - off > 10000 ? 10000 : upto - off;
		struct pool_put_window w = { put_id, off };

		pool_put_window_encode(&w, head, sizeof(head));
		tsend(t, POOL_MSG_PUT_WINDOW, head, POOL_PUT_WINDOW_HEAD_BYTES, img->bytes + off,
		      (uint32_t)len);
		off += len;
	}
}

/* Reads a PUT_END; its result. */
static int put_end_read(struct trank *t, uint64_t put_id, bool *commit)
{
	struct pool_put_end e;
	char why[WHY_BYTES];

	assert_int_equal(trecv(t), 1);
	assert_int_equal(t->rx.header.type, POOL_MSG_PUT_END);
	assert_int_equal(pool_put_end_decode(t->body, t->rx.body_length, &e, why, sizeof(why)), 0);
	assert_int_equal(e.put_id, put_id);
	if (commit)
		*commit = e.commit;
	return e.result;
}

/* A whole put by instance ranks[]; the session's outcome. */
static int put_whole(struct trank *ranks, const struct put_case *pc)
{
	struct pool_put_end e = { 0 };
	uint8_t buf[POOL_PUT_END_BYTES];
	uint64_t put_id;
	bool commit;
	int ret = put_begin(&ranks[0], pc, &put_id);

	if (ret)
		return ret;
	for (uint32_t r = 0; r < WORLD; r++) {
		put_share(&ranks[r], put_id, &pc->img[r], pc->img[r].length);
		assert_int_equal(put_end_read(&ranks[r], put_id, NULL), 0);
	}
	e.put_id = put_id;
	e.commit = true;
	tsend(&ranks[0], POOL_MSG_PUT_END, buf, pool_put_end_encode(&e, buf, sizeof(buf)), NULL,
	      0);
	ret = put_end_read(&ranks[0], put_id, &commit);
	assert_true(ret != 0 || commit);
	return ret;
}

/* LOOKUP of keys on the session; the chain's length (0: no match). */
static uint32_t lookup(struct trank *s, const struct rec_key *keys, uint32_t count,
		       struct pool_chain_entry *out)
{
	struct pool_chain_view v;
	uint64_t ticket;
	char why[WHY_BYTES];

	tsend(s, POOL_MSG_LOOKUP, s->body,
	      pool_lookup_encode(42, keys, count, s->body, POOL_CONTROL_BODY_BYTES_MAX), NULL, 0);
	assert_int_equal(trecv(s), 1);
	assert_int_equal(s->rx.header.type, POOL_MSG_ANSWER);
	assert_int_equal(pool_answer_decode(s->body, s->rx.body_length, &ticket, &v, why,
					    sizeof(why)), 0);
	assert_int_equal(ticket, 42);
	for (uint32_t i = 0; i < v.count && out; i++)
		pool_chain_view_entry(&v, i, &out[i]);
	return v.count;
}

static void open_instance(struct trank *ranks, struct running *r, uint8_t id, uint8_t flip)
{
	for (uint32_t k = 0; k < WORLD; k++)
		assert_int_equal(trank_open(&ranks[k], pool_manager_port(r->m), secret, k, id, flip),
				 0);
}

static void close_instance(struct trank *ranks)
{
	for (uint32_t k = 0; k < WORLD; k++)
		trank_close(&ranks[k]);
}

static int setup(void **state)
{
	(void)state;
	for (uint32_t r = 0; r < WORLD; r++)
		tu_geometry(&geometry[r], PAGE_TOKENS, 2, 4096, 8192, r, WORLD);
	tu_identities(&model, &namespace_id);
	sel_log_set_level(SEL_LOG_WARN);
	return 0;
}

/* Reads rank t's stream of a claim and checks every window against img (R-POOL-33). */
static void claim_stream_check(struct trank *t, uint64_t claim_id, struct put_case **chain,
			       uint32_t count, uint32_t skip)
{
	uint8_t buf[POOL_CLAIM_PULL_BYTES];
	struct pool_claim_pull p = { .claim_id = claim_id, .skip_pages = skip };
	uint64_t windows = 0, page_bytes = 0;
	char why[WHY_BYTES];
	static uint8_t data[1 << 20];

	tsend(t, POOL_MSG_CLAIM_PULL, buf, pool_claim_pull_encode(&p, buf, sizeof(buf)), NULL, 0);
	for (;;) {
		struct pool_claim_window w;
		struct rec_header h;
		struct rec_layout l;
		bool eof;
		int ret;

		do
			ret = pool_rx_feed(&t->rx, t->fd, &eof, why, sizeof(why));
		while (ret == POOL_RX_MORE && !eof);
		assert_false(eof);
		if (ret == POOL_RX_FRAME && t->rx.header.type == POOL_MSG_CLAIM_END) {
			struct pool_claim_end e;

			assert_int_equal(pool_claim_end_decode(t->body, t->rx.body_length, &e, why,
							       sizeof(why)), 0);
			assert_int_equal(e.result, 0);
			break;
		}
		assert_int_equal(ret, POOL_RX_HEAD);
		assert_int_equal(t->rx.header.type, POOL_MSG_CLAIM_WINDOW);
		assert_int_equal(pool_claim_window_decode(t->body, t->rx.body_length,
							  t->rx.data_length, &w, why, sizeof(why)),
				 0);
		assert_true(t->rx.data_length <= sizeof(data));
		t->rx.data = data;
		do
			ret = pool_rx_feed(&t->rx, t->fd, &eof, why, sizeof(why));
		while (ret == POOL_RX_MORE && !eof);
		assert_int_equal(ret, POOL_RX_FRAME);
		assert_true(w.chain_index < count);
		assert_int_equal(rec_header_decode(chain[w.chain_index]->img[0].bytes, &h, why,
						   sizeof(why)), 0);
		assert_int_equal(rec_layout_from_header(&h, &l), 0);
		{
			/* the window's bytes are one rank's image's, at its place */
			bool found = false;

			for (uint32_t r = 0; r < WORLD; r++) {
				const uint8_t *base = chain[w.chain_index]->img[r].bytes;
				uint64_t off = w.section == POOL_SECTION_HEADER ? w.first
					       : w.section == POOL_SECTION_CHECKSUMS
						       ? l.checksum_offset + w.first
					       : w.section == POOL_SECTION_PAGES
						       ? l.page_offset + (uint64_t)w.first * l.page_stride
						       : l.row_offset + w.first;

				if (memcmp(base + off, data, t->rx.data_length) == 0)
					found = true;
			}
			assert_true(found);
		}
		if (w.section == POOL_SECTION_PAGES)
			page_bytes += t->rx.data_length;
		windows++;
	}
	assert_true(windows >= 4);
	assert_true(page_bytes > 0);
}

/* A puts two records; B (another instance, same scope) finds and claims them byte-exact. */
static void test_pool_put_then_claim_byte_exact(void **state)
{
	struct running r;
	struct trank a[WORLD], b[WORLD];
	struct put_case root, child, *chain[2] = { &root, &child };
	struct pool_chain_entry found[4];
	struct rec_key keys[2];
	struct pool_claim q = { .claim_id = 5 };
	struct pool_claimed cd;
	struct pool_chain_view v;
	struct pool_manager_stats st;
	uint8_t buf[POOL_CONTROL_BODY_BYTES_MAX];
	char why[WHY_BYTES];

	(void)state;
	manager_start(&r, 8 << 20, 0);
	case_make(&root, 1, 64, NULL, 10);
	case_make(&child, 1, 160, &root, 11);
	open_instance(a, &r, 0xa, 0);
	assert_int_equal(put_whole(a, &root), 0);
	assert_int_equal(put_whole(a, &child), 0);
	/* the same key again is refused, nothing to do (R-POOL-40) */
	{
		uint64_t id;

		assert_int_equal(put_begin(&a[0], &child, &id), -EEXIST);
	}
	open_instance(b, &r, 0xb, 0);
	assert_int_equal(b[0].attached.scope_records, 2);
	keys[0] = child.rec.key;
	keys[1] = root.rec.key;
	assert_int_equal(lookup(&b[0], keys, 2, found), 2);
	assert_memory_equal(&found[0].key, &root.rec.key, sizeof(root.rec.key));
	assert_memory_equal(&found[1].key, &child.rec.key, sizeof(child.rec.key));
	assert_int_equal(found[1].first_page_index, root.rec.tail_page_count);
	q.key = child.rec.key;
	tsend(&b[0], POOL_MSG_CLAIM, buf, pool_claim_encode(&q, buf, sizeof(buf)), NULL, 0);
	assert_int_equal(trecv(&b[0]), 1);
	assert_int_equal(b[0].rx.header.type, POOL_MSG_CLAIMED);
	assert_int_equal(pool_claimed_decode(b[0].body, b[0].rx.body_length, &cd, &v, why,
					     sizeof(why)), 0);
	assert_int_equal(cd.result, 0);
	assert_int_equal(v.count, 2);
	assert_true(cd.deadline_ms >= POOL_CLAIM_SETUP_MS);
	/* rank 1 by stream, skipping the root's pages; rank 0 all of it */
	claim_stream_check(&b[1], 5, chain, 2, root.rec.tail_page_count);
	claim_stream_check(&b[0], 5, chain, 2, 0);
	/* rank 1 again from the arena, on this host (R-POOL-34, R-POOL-50) */
	{
		struct pool_claim_pull p = { .claim_id = 5, .mode = 1 };
		struct pool_places_view pv;
		struct pool_place pl;
		int fd = open(b[1].welcome.arena_path, O_RDONLY | O_CLOEXEC);
		const uint8_t *arena;

		assert_true(fd >= 0);
		arena = mmap(NULL, b[1].welcome.arena_bytes, PROT_READ, MAP_SHARED, fd, 0);
		assert_true(arena != MAP_FAILED);
		tsend(&b[1], POOL_MSG_CLAIM_PULL, buf, pool_claim_pull_encode(&p, buf, sizeof(buf)),
		      NULL, 0);
		assert_int_equal(trecv(&b[1]), 1);
		assert_int_equal(b[1].rx.header.type, POOL_MSG_CLAIM_PLACES);
		assert_int_equal(pool_claim_places_decode(b[1].body, b[1].rx.body_length, &pv, why,
							  sizeof(why)), 0);
		assert_int_equal(pv.count, 2);
		for (uint32_t i = 0; i < 2; i++) {
			pool_places_view_place(&pv, i, &pl);
			assert_int_equal(pl.bytes, chain[i]->img[1].length);
			assert_memory_equal(arena + pl.offset, chain[i]->img[1].bytes, pl.bytes);
		}
		munmap((void *)arena, b[1].welcome.arena_bytes);
		close(fd);
	}
	{
		struct pool_claim_end e = { .claim_id = 5 };

		tsend(&b[0], POOL_MSG_CLAIM_END, buf, pool_claim_end_encode(&e, buf, sizeof(buf)),
		      NULL, 0);
	}
	/* a claim of a key the pool lacks is refused (R-POOL-31) */
	q.claim_id = 6;
	q.key.consumed = 999;
	tsend(&b[0], POOL_MSG_CLAIM, buf, pool_claim_encode(&q, buf, sizeof(buf)), NULL, 0);
	assert_int_equal(trecv(&b[0]), 1);
	assert_int_equal(pool_claimed_decode(b[0].body, b[0].rx.body_length, &cd, &v, why,
					     sizeof(why)), 0);
	assert_int_equal(cd.result, -ENOENT);
	pool_manager_stats(r.m, &st);
	assert_int_equal(st.records, 2);
	assert_int_equal(st.puts_committed, 2);
	assert_int_equal(st.claims_granted, 1);
	close_instance(a);
	close_instance(b);
	manager_stop(&r);
	case_free(&root);
	case_free(&child);
}

/* A granted CLAIM_LOCAL's CLAIMED is followed by the session rank's places; a refused one's is not (R-POOL-51). */
static void test_pool_local_claim_grant_brings_places(void **state)
{
	struct running r;
	struct trank a[WORLD], b[WORLD];
	struct put_case root, child, *chain[2] = { &root, &child };
	struct pool_claim q = { .claim_id = 7 };
	struct pool_claimed cd;
	struct pool_chain_view v;
	struct pool_places_view pv;
	struct pool_place pl;
	uint8_t buf[POOL_CONTROL_BODY_BYTES_MAX];
	char why[WHY_BYTES];
	const uint8_t *arena;
	int fd;

	(void)state;
	manager_start(&r, 8 << 20, 0);
	case_make(&root, 1, 64, NULL, 20);
	case_make(&child, 1, 160, &root, 21);
	open_instance(a, &r, 0xa, 0);
	assert_int_equal(put_whole(a, &root), 0);
	assert_int_equal(put_whole(a, &child), 0);
	open_instance(b, &r, 0xb, 0);
	/* a key the pool lacks: CLAIMED refuses, and no places follow */
	q.key = child.rec.key;
	q.key.consumed = 999;
	tsend(&b[0], POOL_MSG_CLAIM_LOCAL, buf, pool_claim_encode(&q, buf, sizeof(buf)), NULL, 0);
	q.claim_id = 8;
	q.key = child.rec.key;
	tsend(&b[0], POOL_MSG_CLAIM_LOCAL, buf, pool_claim_encode(&q, buf, sizeof(buf)), NULL, 0);
	assert_int_equal(trecv(&b[0]), 1);
	assert_int_equal(b[0].rx.header.type, POOL_MSG_CLAIMED);
	assert_int_equal(pool_claimed_decode(b[0].body, b[0].rx.body_length, &cd, &v, why,
					     sizeof(why)), 0);
	assert_int_equal(cd.claim_id, 7);
	assert_int_equal(cd.result, -ENOENT);
	/* the chain: CLAIMED, then at once the places of rank 0's shares */
	assert_int_equal(trecv(&b[0]), 1);
	assert_int_equal(b[0].rx.header.type, POOL_MSG_CLAIMED);
	assert_int_equal(pool_claimed_decode(b[0].body, b[0].rx.body_length, &cd, &v, why,
					     sizeof(why)), 0);
	assert_int_equal(cd.claim_id, 8);
	assert_int_equal(cd.result, 0);
	assert_int_equal(v.count, 2);
	assert_int_equal(trecv(&b[0]), 1);
	assert_int_equal(b[0].rx.header.type, POOL_MSG_CLAIM_PLACES);
	assert_int_equal(pool_claim_places_decode(b[0].body, b[0].rx.body_length, &pv, why,
						  sizeof(why)), 0);
	assert_int_equal(pv.claim_id, 8);
	assert_int_equal(pv.count, 2);
	fd = open(b[0].welcome.arena_path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	arena = mmap(NULL, b[0].welcome.arena_bytes, PROT_READ, MAP_SHARED, fd, 0);
	assert_true(arena != MAP_FAILED);
	for (uint32_t i = 0; i < 2; i++) {
		pool_places_view_place(&pv, i, &pl);
		assert_int_equal(pl.bytes, chain[i]->img[0].length);
		assert_memory_equal(arena + pl.offset, chain[i]->img[0].bytes, pl.bytes);
	}
	munmap((void *)arena, b[0].welcome.arena_bytes);
	close(fd);
	/* rank 1 still pulls its own places (R-POOL-32) */
	{
		struct pool_claim_pull p = { .claim_id = 8, .mode = 1 };

		tsend(&b[1], POOL_MSG_CLAIM_PULL, buf, pool_claim_pull_encode(&p, buf, sizeof(buf)),
		      NULL, 0);
		assert_int_equal(trecv(&b[1]), 1);
		assert_int_equal(b[1].rx.header.type, POOL_MSG_CLAIM_PLACES);
	}
	/* CLAIM_LOCAL is the session's: on rank 1's connection it ends it (R-POOL-1) */
	q.claim_id = 9;
	tsend(&b[1], POOL_MSG_CLAIM_LOCAL, buf, pool_claim_encode(&q, buf, sizeof(buf)), NULL, 0);
	assert_int_equal(trecv(&b[1]), 1);
	assert_int_equal(b[1].rx.header.type, POOL_MSG_REFUSE);
	assert_int_equal(b[1].refused.reason, POOL_REFUSE_PROTOCOL);
	close_instance(a);
	close_instance(b);
	manager_stop(&r);
	case_free(&root);
	case_free(&child);
}

/* With every connection taken by strangers mid-handshake, a real rank still gets in: the oldest stranger makes room. */
static void test_pool_strangers_make_room(void **state)
{
	struct pool_manager_config c = { .listen = "127.0.0.1:0", .name = "test-pool",
					 .memory_bytes = 1 << 20, .connections_max = 4 };
	struct running r;
	struct trank t;
	struct pool_manager_stats st;
	char why[WHY_BYTES];
	int idle[4];

	(void)state;
	memcpy(c.secret, secret, 32);
	assert_int_equal(pool_manager_open(&c, &r.m, why, sizeof(why)), 0);
	assert_int_equal(pthread_create(&r.thread, NULL, run_thread, r.m), 0);
	for (int i = 0; i < 4; i++)
		idle[i] = tconnect(pool_manager_port(r.m)); /* connect, say nothing */
	usleep(200 * 1000);
	assert_int_equal(trank_open(&t, pool_manager_port(r.m), secret, 0, 0xa, 0), 0);
	pool_manager_stats(r.m, &st);
	assert_true(st.refused >= 1);
	for (int i = 0; i < 4; i++)
		close(idle[i]);
	/* full of served connections: a new one hears REFUSE busy at once (R-POOL-9) */
	{
		struct trank more[3], extra = { 0 };

		for (uint32_t k = 0; k < 3; k++)
			assert_int_equal(trank_open(&more[k], pool_manager_port(r.m), secret,
						    k % WORLD, (uint8_t)(0xc + k / WORLD), 0), 0);
		extra.body = tu_alloc(POOL_CONTROL_BODY_BYTES_MAX);
		pool_rx_init(&extra.rx, extra.body, POOL_CONTROL_BODY_BYTES_MAX, POOL_TO_RANK);
		extra.fd = tconnect(pool_manager_port(r.m));
		assert_int_equal(trecv(&extra), 1);
		assert_int_equal(extra.rx.header.type, POOL_MSG_REFUSE);
		assert_int_equal(extra.refused.reason, POOL_REFUSE_BUSY);
		trank_close(&extra);
		for (uint32_t k = 0; k < 3; k++)
			trank_close(&more[k]);
	}
	trank_close(&t);
	manager_stop(&r);
}

/*
 * A manager removes the arenas that managers of its name left when they
 * were killed (their pid no longer runs), and no other file: not one of a
 * manager that runs, nor one of another name.
 */
static void test_pool_stale_arenas_removed(void **state)
{
	char dead[128], alive[128], other[128];
	struct running r;
	pid_t gone = fork();
	int fd;

	(void)state;
	assert_true(gone >= 0);
	if (gone == 0)
		_exit(0);
	assert_int_equal(waitpid(gone, NULL, 0), gone);
	snprintf(dead, sizeof(dead), "/dev/shm/selene-pool-test-stale-%d-0", (int)gone);
	snprintf(alive, sizeof(alive), "/dev/shm/selene-pool-test-stale-%d-0", (int)getppid());
	snprintf(other, sizeof(other), "/dev/shm/selene-pool-test-stale-x-%d-0", (int)gone);
	fd = open(dead, O_CREAT | O_WRONLY, 0600);
	assert_true(fd >= 0);
	close(fd);
	fd = open(alive, O_CREAT | O_WRONLY, 0600);
	assert_true(fd >= 0);
	close(fd);
	fd = open(other, O_CREAT | O_WRONLY, 0600);
	assert_true(fd >= 0);
	close(fd);
	manager_start_in(&r, 1 << 20, 0, NULL, "test-stale");
	assert_int_equal(access(dead, F_OK), -1);
	assert_int_equal(access(alive, F_OK), 0);
	assert_int_equal(access(other, F_OK), 0);
	manager_stop(&r);
	unlink(alive);
	unlink(other);
}

/* Another layout's scope never matches, even with the same keys (R-POOL-16). */
static void test_pool_other_scope_never_matches(void **state)
{
	struct running r;
	struct trank a[WORLD], c[WORLD];
	struct put_case root;

	(void)state;
	manager_start(&r, 8 << 20, 0);
	case_make(&root, 2, 64, NULL, 20);
	open_instance(a, &r, 0xa, 0);
	assert_int_equal(put_whole(a, &root), 0);
	open_instance(c, &r, 0xc, 1);
	assert_int_equal(c[0].attached.scope_records, 0);
	assert_memory_not_equal(a[0].attached.scope, c[0].attached.scope, 32);
	assert_int_equal(lookup(&c[0], &root.rec.key, 1, NULL), 0);
	assert_int_equal(lookup(&a[0], &root.rec.key, 1, NULL), 1);
	close_instance(a);
	close_instance(c);
	manager_stop(&r);
	case_free(&root);
}

/* HOLDS of op with keys on s (R-POOL-70). */
static void holds(struct trank *s, enum pool_holds_op op, const struct rec_key *keys,
		  uint32_t count)
{
	tsend(s, POOL_MSG_HOLDS, s->body,
	      pool_holds_encode(op, keys, count, s->body, POOL_CONTROL_BODY_BYTES_MAX), NULL, 0);
}

/* Reads the EXPORT the holder's session is asked; its id, after checking its key and deadline. */
static uint64_t export_read(struct trank *s, const struct rec_key *key, uint32_t deadline_ms)
{
	struct pool_export x;
	char why[WHY_BYTES];

	assert_int_equal(trecv(s), 1);
	assert_int_equal(s->rx.header.type, POOL_MSG_EXPORT);
	assert_int_equal(pool_export_decode(s->body, s->rx.body_length, &x, why, sizeof(why)), 0);
	if (!rec_key_equal(&x.key, key))
		fail_msg("EXPORT of key %llu, expected %llu", (unsigned long long)x.key.consumed,
			 (unsigned long long)key->consumed);
	assert_int_equal(x.deadline_ms, deadline_ms);
	return x.export_id;
}

static void export_end_send(struct trank *s, uint64_t id, int result)
{
	struct pool_export_end e = { .export_id = id, .result = result };
	uint8_t buf[POOL_EXPORT_END_BYTES];

	tsend(s, POOL_MSG_EXPORT_END, buf, pool_export_end_encode(&e, buf, sizeof(buf)), NULL, 0);
}

/* Waits until the manager's stats satisfy want (the loop is another thread). */
static void stats_wait(struct running *r, struct pool_manager_stats *st,
		       bool (*want)(const struct pool_manager_stats *))
{
	for (int i = 0; i < 5000; i++) {
		pool_manager_stats(r->m, st);
		if (want(st))
			return;
		usleep(1000);
	}
	fail_msg("the manager's counters never reached what the test waits for");
}

static bool holds_3(const struct pool_manager_stats *st) { return st->holds == 3; }
static bool holds_2(const struct pool_manager_stats *st) { return st->holds == 2; }
static bool holds_1(const struct pool_manager_stats *st) { return st->holds == 1; }
static bool holds_0(const struct pool_manager_stats *st) { return st->holds == 0; }
static bool completed_1(const struct pool_manager_stats *st) { return st->exports_completed == 1; }
static bool refused_1(const struct pool_manager_stats *st) { return st->exports_refused == 1; }

/*
 * Holders and exports (R-POOL-70 .. R-POOL-76): A announces what it holds;
 * B's lookup that misses the manager's records is answered at once (0)
 * and makes the manager ask A, once; A puts the record and ends the export,
 * after which B finds it. A holder that lost a record refuses and its
 * announcement goes; an instance of another scope, and B itself, trigger
 * nothing; HOLDS off the session is refused; a session's end forgets its
 * announcements.
 */
static void test_pool_exports_asked_of_holders(void **state)
{
	struct running r;
	struct trank a[WORLD], b[WORLD], c[WORLD];
	struct pool_manager_stats st;
	struct put_case root, child;
	struct rec_key both[2];
	uint64_t id;

	(void)state;
	manager_start(&r, 8 << 20, 0);
	case_make(&root, 7, 64, NULL, 20);
	case_make(&child, 7, 128, &root, 21);
	both[0] = child.rec.key;
	both[1] = root.rec.key;
	open_instance(a, &r, 0xa, 0);
	open_instance(b, &r, 0xb, 0);
	open_instance(c, &r, 0xc, 1);
	holds(&a[0], POOL_HOLDS_ADD, both, 2);
	holds(&a[0], POOL_HOLDS_ADD, both, 2); /* again: changes nothing */
	stats_wait(&r, &st, holds_2);
	/* another scope, and the holder itself, ask nothing of A */
	assert_int_equal(lookup(&c[0], both, 2, NULL), 0);
	assert_int_equal(lookup(&a[0], both, 2, NULL), 0);
	pool_manager_stats(r.m, &st);
	assert_int_equal(st.exports_requested, 0);
	/* B misses: answered 0 at once; A is asked for the longest key, once */
	assert_int_equal(lookup(&b[0], both, 2, NULL), 0);
	id = export_read(&a[0], &child.rec.key, POOL_EXPORT_MS);
	assert_int_equal(lookup(&b[0], both, 2, NULL), 0);
	pool_manager_stats(r.m, &st);
	assert_int_equal(st.exports_requested, 1);
	/* A puts the chain through the ordinary put path, then ends the export */
	assert_int_equal(put_whole(a, &root), 0);
	assert_int_equal(put_whole(a, &child), 0);
	export_end_send(&a[0], id, 0);
	stats_wait(&r, &st, completed_1);
	assert_int_equal(st.exports_refused + st.exports_failed, 0);
	assert_int_equal(lookup(&b[0], both, 2, NULL), 2);
	/* a key the manager holds itself is never asked of a holder */
	assert_int_equal(st.exports_requested, 1);
	/* A lost a longer record it announced: it refuses, and its announcement goes */
	{
		struct put_case grand;
		struct rec_key three[3];

		case_make(&grand, 7, 192, &child, 22);
		three[0] = grand.rec.key;
		three[1] = child.rec.key;
		three[2] = root.rec.key;
		holds(&a[0], POOL_HOLDS_ADD, three, 1);
		stats_wait(&r, &st, holds_3);
		assert_int_equal(lookup(&b[0], three, 3, NULL), 2); /* what it holds, now */
		id = export_read(&a[0], &grand.rec.key, POOL_EXPORT_MS);
		export_end_send(&a[0], id, -ENOENT);
		stats_wait(&r, &st, refused_1);
		assert_int_equal(st.holds, 2);
		assert_int_equal(lookup(&b[0], three, 3, NULL), 2);
		pool_manager_stats(r.m, &st);
		assert_int_equal(st.exports_requested, 2);
		case_free(&grand);
	}
	/* withdraw, then reset */
	holds(&a[0], POOL_HOLDS_WITHDRAW, &root.rec.key, 1);
	stats_wait(&r, &st, holds_1);
	holds(&a[0], POOL_HOLDS_RESET, NULL, 0);
	stats_wait(&r, &st, holds_0);
	/* a session's end forgets what it announced */
	holds(&a[0], POOL_HOLDS_ADD, both, 2);
	stats_wait(&r, &st, holds_2);
	/* HOLDS off the session is refused (R-POOL-76) */
	holds(&a[1], POOL_HOLDS_ADD, both, 1);
	assert_int_equal(trecv(&a[1]), 1);
	assert_int_equal(a[1].rx.header.type, POOL_MSG_REFUSE);
	assert_int_equal(a[1].refused.reason, POOL_REFUSE_PROTOCOL);
	close_instance(a);
	stats_wait(&r, &st, holds_0);
	close_instance(b);
	close_instance(c);
	manager_stop(&r);
	case_free(&child);
	case_free(&root);
}

static bool holds_5(const struct pool_manager_stats *st) { return st->holds == 5; }
static bool failed_4(const struct pool_manager_stats *st) { return st->exports_failed == 4; }

/* PUT_BEGIN of a root record of T pages with the given share lengths; PUT_READY's result. */
static int put_begin_raw(struct trank *s, const struct rec_key *key, uint32_t tail_page_count,
			 const uint64_t *shares, uint64_t *put_id)
{
	struct pool_put_begin b = { .request_id = next_request++, .key = *key,
				    .tail_page_count = tail_page_count, .row = true,
				    .world_size = WORLD };
	struct pool_put_ready ready;
	uint8_t buf[256];
	char why[WHY_BYTES];

	tsend(s, POOL_MSG_PUT_BEGIN, buf, pool_put_begin_encode(&b, shares, buf, sizeof(buf)),
	      NULL, 0);
	assert_int_equal(trecv(s), 1);
	assert_int_equal(s->rx.header.type, POOL_MSG_PUT_READY);
	assert_int_equal(pool_put_ready_decode(s->body, s->rx.body_length, &ready, why,
					       sizeof(why)), 0);
	assert_int_equal(ready.request_id, b.request_id);
	*put_id = ready.put_id;
	return ready.result;
}

/*
 * R-POOL-73 .. R-POOL-75, R-POOL-40: exports the holder never answers are
 * forgotten at their deadline and counted failed, and free the holder's
 * places for new ones (POOL_EXPORTS_LIVE_MAX are live at most); a late
 * answer is ignored. The record the holder then puts is larger than the
 * whole arena: refused (-ENOSPC) at once, evicting nothing; share lengths
 * no record of the scope has are refused (-EINVAL).
 */
static void test_pool_export_unanswered_forgotten(void **state)
{
	struct pool_manager_config c = { .listen = "127.0.0.1:0", .name = "test-pool",
					 .memory_bytes = 8 << 20, .window_bytes = 64 << 10,
					 .export_ms = 300 };
	struct running r;
	struct trank a[WORLD], b[WORLD];
	struct pool_manager_stats st;
	struct put_case root;
	struct rec_key keys[POOL_EXPORTS_LIVE_MAX + 1], big = { 0 };
	uint64_t ids[POOL_EXPORTS_LIVE_MAX], id, put_id = 1, shares[WORLD];
	uint32_t tail = 4096;
	char why[WHY_BYTES];

	(void)state;
	memcpy(c.secret, secret, 32);
	assert_int_equal(pool_manager_open(&c, &r.m, why, sizeof(why)), 0);
	assert_int_equal(pthread_create(&r.thread, NULL, run_thread, r.m), 0);
	for (uint32_t i = 0; i <= POOL_EXPORTS_LIVE_MAX; i++) {
		memset(&keys[i], 0, sizeof(keys[i]));
		keys[i].consumed = 64;
		tu_fill(keys[i].digest.bytes, sizeof(keys[i].digest.bytes), 30 + i);
	}
	open_instance(a, &r, 0xa, 0);
	open_instance(b, &r, 0xb, 0);
	holds(&a[0], POOL_HOLDS_ADD, keys, POOL_EXPORTS_LIVE_MAX + 1);
	stats_wait(&r, &st, holds_5);
	/* B misses each key; A is asked for the first four, the fifth waits */
	for (uint32_t i = 0; i <= POOL_EXPORTS_LIVE_MAX; i++)
		assert_int_equal(lookup(&b[0], &keys[i], 1, NULL), 0);
	for (uint32_t i = 0; i < POOL_EXPORTS_LIVE_MAX; i++)
		ids[i] = export_read(&a[0], &keys[i], 300);
	pool_manager_stats(r.m, &st);
	assert_int_equal(st.exports_requested, POOL_EXPORTS_LIVE_MAX);
	/* A answers none: each is forgotten at 300 ms and counted failed */
	stats_wait(&r, &st, failed_4);
	assert_int_equal(st.exports_completed + st.exports_refused, 0);
	/* a late answer is ignored, and A's session stays served */
	export_end_send(&a[0], ids[0], 0);
	assert_int_equal(lookup(&a[0], keys, 1, NULL), 0);
	pool_manager_stats(r.m, &st);
	assert_int_equal(st.exports_completed, 0);
	/* A's places are free: the fifth key is asked now, under a new id */
	assert_int_equal(lookup(&b[0], &keys[POOL_EXPORTS_LIVE_MAX], 1, NULL), 0);
	id = export_read(&a[0], &keys[POOL_EXPORTS_LIVE_MAX], 300);
	for (uint32_t i = 0; i < POOL_EXPORTS_LIVE_MAX; i++)
		assert_true(id != ids[i]);
	/* A holds one record; the export's record is larger than the arena */
	case_make(&root, 7, 64, NULL, 20);
	assert_int_equal(put_whole(a, &root), 0);
	big.consumed = (uint64_t)tail * PAGE_TOKENS;
	tu_fill(big.digest.bytes, sizeof(big.digest.bytes), 77);
	for (uint32_t k = 0; k < WORLD; k++)
		shares[k] = REC_HEADER_BYTES + sel_align_up(8ull * tail, 4096) +
			    (uint64_t)tail * geometry[k].page_record_bytes +
			    geometry[k].row_record_bytes;
	assert_true(shares[0] > (8u << 20));
	assert_int_equal(put_begin_raw(&a[0], &big, tail, shares, &put_id), -ENOSPC);
	assert_int_equal(put_id, 0);
	/* lengths of no record of the scope, one that would overflow a sum */
	shares[1] = UINT64_MAX;
	assert_int_equal(put_begin_raw(&a[0], &big, tail, shares, &put_id), -EINVAL);
	export_end_send(&a[0], id, -ENOSPC);
	/* nothing was evicted for them: B still finds A's record */
	assert_int_equal(lookup(&b[0], &root.rec.key, 1, NULL), 1);
	pool_manager_stats(r.m, &st);
	assert_int_equal(st.evicted, 0);
	assert_int_equal(st.records, 1);
	close_instance(a);
	close_instance(b);
	manager_stop(&r);
	case_free(&root);
}

/* A wrong secret is refused (auth), garbage and a non-session LOOKUP end only that connection (R-POOL-6, R-POOL-10). */
static void test_pool_strangers_refused(void **state)
{
	struct running r;
	struct trank t, a[WORLD];
	struct pool_manager_stats st;
	uint8_t wrong[32] = { 9 };
	struct rec_key k = { .consumed = 64 };
	int fd;

	(void)state;
	manager_start(&r, 8 << 20, 0);
	assert_int_equal(trank_open(&t, pool_manager_port(r.m), wrong, 0, 0xa, 0),
			 POOL_REFUSE_AUTH);
	assert_non_null(strstr(t.refused.text, "R-POOL-10"));
	assert_int_equal(trecv(&t), 0); /* then the manager closes */
	trank_close(&t);
	/* garbage bytes: the manager closes, and is still serving */
	fd = tconnect(pool_manager_port(r.m));
	assert_int_equal(write(fd, "GET / HTTP/1.0\r\n\r\n0123456789012345678901234567890", 50),
			 50);
	{
		char c;

		while (read(fd, &c, 1) > 0)
			;
	}
	close(fd);
	/* a LOOKUP on a rank that is not the session is refused (R-POOL-1) */
	open_instance(a, &r, 0xa, 0);
	tsend(&a[1], POOL_MSG_LOOKUP, a[1].body,
	      pool_lookup_encode(1, &k, 1, a[1].body, POOL_CONTROL_BODY_BYTES_MAX), NULL, 0);
	assert_int_equal(trecv(&a[1]), 1);
	assert_int_equal(a[1].rx.header.type, POOL_MSG_REFUSE);
	assert_int_equal(a[1].refused.reason, POOL_REFUSE_PROTOCOL);
	/* the session is unharmed */
	assert_int_equal(lookup(&a[0], &k, 1, NULL), 0);
	/* a second connection for a live rank is refused (R-POOL-18) */
	assert_int_equal(trank_open(&t, pool_manager_port(r.m), secret, 0, 0xa, 0),
			 POOL_REFUSE_WORLD);
	trank_close(&t);
	pool_manager_stats(r.m, &st);
	assert_true(st.auth_failures >= 1);
	assert_true(st.refused >= 3);
	close_instance(a);
	manager_stop(&r);
}

/* A rank lost mid-put, or a share failing its checksum, leaves nothing (R-POOL-41, R-POOL-43). */
static void test_pool_failed_puts_leave_nothing(void **state)
{
	struct running r;
	struct trank a[WORLD], b[WORLD];
	struct put_case root;
	struct pool_manager_stats st;
	uint64_t put_id;

	(void)state;
	manager_start(&r, 8 << 20, 0);
	case_make(&root, 3, 64, NULL, 30);
	open_instance(a, &r, 0xa, 0);
	assert_int_equal(put_begin(&a[0], &root, &put_id), 0);
	put_share(&a[0], put_id, &root.img[0], root.img[0].length);
	assert_int_equal(put_end_read(&a[0], put_id, NULL), 0);
	put_share(&a[1], put_id, &root.img[1], root.img[1].length / 2);
	trank_close(&a[1]); /* killed mid-put */
	assert_int_equal(put_end_read(&a[0], put_id, NULL), -ECONNRESET);
	open_instance(b, &r, 0xb, 0);
	assert_int_equal(lookup(&b[0], &root.rec.key, 1, NULL), 0);
	pool_manager_stats(r.m, &st);
	assert_int_equal(st.records, 0);
	assert_int_equal(st.arena_used_bytes, 0);
	/* a flipped page byte: the share fails its checksum, the put ends */
	root.img[1].bytes[root.img[1].length - 8192 - 4096 + 7] ^= 1;
	assert_int_equal(put_begin(&b[0], &root, &put_id), 0);
	put_share(&b[1], put_id, &root.img[1], root.img[1].length);
	assert_int_equal(put_end_read(&b[1], put_id, NULL), SEL_ECHECKSUM);
	assert_int_equal(put_end_read(&b[0], put_id, NULL), SEL_ECHECKSUM);
	assert_int_equal(lookup(&b[0], &root.rec.key, 1, NULL), 0);
	pool_manager_stats(r.m, &st);
	assert_int_equal(st.records, 0);
	assert_int_equal(st.arena_used_bytes, 0);
	trank_close(&a[0]);
	close_instance(b);
	manager_stop(&r);
	case_free(&root);
}

/* Records expire after max-age; LRU evicts the oldest leaf when the arena is full. */
static bool expired_1(const struct pool_manager_stats *st) { return st->expired == 1; }

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Thousands expired at once: a sweep drops at most 64, looks at one more, a max age apart (R-POOL-44). */
static void test_pool_expiry_sweep_bounded(void **state)
{
	enum { COUNT = 2048, AGE_MS = 600 };
	struct running r;
	struct trank a[WORLD];
	struct pool_manager_stats before, after;
	uint64_t t0, window_ms, sweeps;

	(void)state;
	manager_start(&r, 128 << 20, AGE_MS);
	open_instance(a, &r, 0xa, 0);
	for (uint32_t k = 0; k < WORLD; k++) {
		int one = 1; /* no Nagle wait between a window's pieces */

		setsockopt(a[k].fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	t0 = now_ms();
	for (uint32_t i = 0; i < COUNT; i++) {
		struct put_case pc;

		case_make(&pc, 5000 + i, 8, NULL, i); /* a row and no page: small */
		assert_int_equal(put_whole(a, &pc), 0);
		case_free(&pc);
	}
	print_message("%u puts in %" PRIu64 " ms\n", COUNT, now_ms() - t0);
	/* every record expired; the sweeps meanwhile dropped at most 64 each */
	usleep((AGE_MS + 50) * 1000);
	t0 = now_ms();
	pool_manager_stats(r.m, &before);
	assert_true(before.expired <= POOL_EXPIRE_SWEEP_MAX * before.expire_sweeps);
	usleep(3 * AGE_MS * 1000);
	pool_manager_stats(r.m, &after);
	window_ms = now_ms() - t0;
	sweeps = after.expire_sweeps - before.expire_sweeps;
	/* sweeps came a max age apart at most, and each dropped 64 of the thousands */
	assert_true(sweeps >= 1);
	assert_true(sweeps <= window_ms / AGE_MS + 1);
	/* (thousands still there for them: the puts took far less than 64 max ages) */
	assert_true(before.records >= POOL_EXPIRE_SWEEP_MAX * sweeps);
	assert_int_equal(after.expired - before.expired, POOL_EXPIRE_SWEEP_MAX * sweeps);
	assert_int_equal(after.records, COUNT - after.expired);
	/* each looked at what it dropped and the one past (no restart from the head) */
	assert_true(after.expire_examined <= (POOL_EXPIRE_SWEEP_MAX + 1) * after.expire_sweeps);
	assert_int_equal(after.expire_examined - before.expire_examined,
			 POOL_EXPIRE_SWEEP_MAX * sweeps);
	close_instance(a);
	manager_stop(&r);
}

/* A burst of frames walks the deadlines when one is due, not once a frame (POOL_LOOP_TICK_MS). */
static void test_pool_burst_walks_deadlines_rarely(void **state)
{
	enum { LOOKUPS = 2000 };
	struct running r;
	struct trank a[WORLD];
	struct put_case pc;
	struct pool_manager_stats before, after;
	uint64_t t0, elapsed_ms, walks;

	(void)state;
	manager_start(&r, 8 << 20, 0);
	open_instance(a, &r, 0xa, 0);
	for (uint32_t k = 0; k < WORLD; k++) {
		int one = 1;

		setsockopt(a[k].fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	case_make(&pc, 300, 64, NULL, 3);
	assert_int_equal(put_whole(a, &pc), 0);
	pool_manager_stats(r.m, &before);
	t0 = now_ms();
	/* one turn of the loop each: a frame in, its answer out */
	for (uint32_t i = 0; i < LOOKUPS; i++)
		assert_int_equal(lookup(&a[0], &pc.rec.key, 1, NULL), 1);
	elapsed_ms = now_ms() - t0;
	pool_manager_stats(r.m, &after);
	walks = after.timer_walks - before.timer_walks;
	print_message("%u lookups in %" PRIu64 " ms: %" PRIu64 " walks of the deadlines\n",
		      LOOKUPS, elapsed_ms, walks);
	assert_int_equal(after.lookups - before.lookups, LOOKUPS);
	/* nothing due: a walk a tick at most, not one a frame */
	assert_true(walks <= elapsed_ms / POOL_LOOP_TICK_MS + 2);
	close_instance(a);
	manager_stop(&r);
	case_free(&pc);
}

static void test_pool_expiry_and_lru(void **state)
{
	struct running r;
	struct trank a[WORLD];
	struct put_case cases[12];
	struct pool_manager_stats st;
	uint32_t held = 0;

	(void)state;
	manager_start(&r, 1 << 20, 300);
	open_instance(a, &r, 0xa, 0);
	case_make(&cases[0], 100, 64, NULL, 1);
	case_make(&cases[1], 100, 128, &cases[0], 2);
	assert_int_equal(put_whole(a, &cases[0]), 0);
	assert_int_equal(lookup(&a[0], &cases[0].rec.key, 1, NULL), 1);
	/* an abandoned put of a child leaves its parent unpinned */
	{
		struct pool_put_end e = { .commit = false };
		uint8_t buf[POOL_PUT_END_BYTES];

		assert_int_equal(put_begin(&a[0], &cases[1], &e.put_id), 0);
		tsend(&a[0], POOL_MSG_PUT_END, buf, pool_put_end_encode(&e, buf, sizeof(buf)),
		      NULL, 0);
		assert_int_equal(put_end_read(&a[0], e.put_id, NULL), -ECANCELED);
	}
	/* expired at 300 ms, dropped by the next sweep (one a max age, R-POOL-44) */
	stats_wait(&r, &st, expired_1);
	assert_int_equal(lookup(&a[0], &cases[0].rec.key, 1, NULL), 0);
	pool_manager_stats(r.m, &st);
	assert_int_equal(st.expired, 1);
	assert_int_equal(st.arena_used_bytes, 0);
	close_instance(a);
	manager_stop(&r);
	case_free(&cases[0]);
	case_free(&cases[1]);

	manager_start(&r, 1 << 20, 0); /* about 6 of these 160 KiB records */
	open_instance(a, &r, 0xa, 0);
	for (uint32_t i = 0; i < 12; i++) {
		case_make(&cases[i], 200 + i, 128, NULL, i);
		assert_int_equal(put_whole(a, &cases[i]), 0);
	}
	for (uint32_t i = 0; i < 12; i++)
		held += lookup(&a[0], &cases[i].rec.key, 1, NULL) ? 1 : 0;
	pool_manager_stats(r.m, &st);
	assert_true(st.evicted > 0);
	assert_int_equal(held, 12 - st.evicted);
	assert_int_equal(lookup(&a[0], &cases[0].rec.key, 1, NULL), 0);
	assert_int_equal(lookup(&a[0], &cases[11].rec.key, 1, NULL), 1);
	/* a record larger than the whole arena is refused without evicting anything */
	{
		struct pool_put_begin big = { .request_id = 99, .key = { .consumed = 16000 },
					      .tail_page_count = 1000, .row = true,
					      .world_size = WORLD };
		struct pool_put_ready ready;
		uint64_t sizes[WORLD];
		uint8_t buf[256];
		char why[WHY_BYTES];
		uint64_t evicted = st.evicted;

		for (uint32_t k = 0; k < WORLD; k++)
			sizes[k] = 4096 + sel_align_up(8 * 1000, 4096) +
				   1000 * geometry[k].page_record_bytes + geometry[k].row_record_bytes;
		tsend(&a[0], POOL_MSG_PUT_BEGIN, buf,
		      pool_put_begin_encode(&big, sizes, buf, sizeof(buf)), NULL, 0);
		assert_int_equal(trecv(&a[0]), 1);
		assert_int_equal(pool_put_ready_decode(a[0].body, a[0].rx.body_length, &ready, why,
						       sizeof(why)), 0);
		assert_int_equal(ready.result, -ENOSPC);
		pool_manager_stats(r.m, &st);
		assert_int_equal(st.evicted, evicted);
		assert_int_equal(lookup(&a[0], &cases[11].rec.key, 1, NULL), 1);
	}
	close_instance(a);
	manager_stop(&r);
	for (uint32_t i = 0; i < 12; i++)
		case_free(&cases[i]);
}

/* Stop drains: attached ranks get BYE, the loop returns (R-POOL-45). */
static void test_pool_stop_says_bye(void **state)
{
	struct running r;
	struct trank a[WORLD];
	void *ret;

	(void)state;
	manager_start(&r, 1 << 20, 0);
	open_instance(a, &r, 0xa, 0);
	pool_manager_stop(r.m);
	pthread_join(r.thread, &ret);
	assert_int_equal((intptr_t)ret, 0);
	assert_int_equal(trecv(&a[0]), 1);
	assert_int_equal(a[0].rx.header.type, POOL_MSG_BYE);
	pool_manager_close(r.m);
	close_instance(a);
}

/* HEARTBEATs the session heard while a claim waited for its CLAIMED (R-POOL-31). */
static uint32_t claim_heartbeats;

/* Claims key's chain on the session; CLAIMED's result. */
static int claim(struct trank *s, uint64_t id, const struct rec_key *key)
{
	struct pool_claim q = { .claim_id = id, .key = *key };
	struct pool_claimed cd;
	struct pool_chain_view v;
	uint8_t buf[64];
	char why[WHY_BYTES];

	tsend(s, POOL_MSG_CLAIM, buf, pool_claim_encode(&q, buf, sizeof(buf)), NULL, 0);
	do {
		assert_int_equal(trecv(s), 1);
		claim_heartbeats += s->rx.header.type == POOL_MSG_HEARTBEAT;
	} while (s->rx.header.type == POOL_MSG_HEARTBEAT);
	assert_int_equal(s->rx.header.type, POOL_MSG_CLAIMED);
	assert_int_equal(pool_claimed_decode(s->body, s->rx.body_length, &cd, &v, why,
					     sizeof(why)), 0);
	return cd.result;
}

/* Claims key on the session as claim() does; the result, and the key of the chain's last record. */
static int claim_last_key(struct trank *s, uint64_t id, const struct rec_key *key,
			  struct rec_key *last)
{
	struct pool_claim q = { .claim_id = id, .key = *key };
	struct pool_claimed cd;
	struct pool_chain_view v;
	struct pool_chain_entry e;
	uint8_t buf[64];
	char why[WHY_BYTES];

	tsend(s, POOL_MSG_CLAIM, buf, pool_claim_encode(&q, buf, sizeof(buf)), NULL, 0);
	assert_int_equal(trecv(s), 1);
	assert_int_equal(s->rx.header.type, POOL_MSG_CLAIMED);
	assert_int_equal(pool_claimed_decode(s->body, s->rx.body_length, &cd, &v, why,
					     sizeof(why)), 0);
	assert_int_equal(cd.claim_id, id);
	if (cd.result == 0) {
		assert_int_equal(v.count, 1);
		pool_chain_view_entry(&v, 0, &e);
		*last = e.key;
	}
	return cd.result;
}

/* Record i of test_pool_many_live_ids_resolve: a root, with a page where i % 128 == 0. */
static void many_case(struct put_case *pc, uint32_t i)
{
	case_make(pc, 9000 + i, i % 128 == 0 ? PAGE_TOKENS : 8, NULL, i);
}

/* A claim id of instance inst: sparse, and the same ids for both instances. */
static uint64_t many_claim_id(uint32_t i)
{
	return 0x5e1e000000000000ull + (uint64_t)i * 0x10001ull;
}

/* A thousand live puts and claims each: every frame finds its own by id (puts, claims per instance). */
static void test_pool_many_live_ids_resolve(void **state)
{
	enum { COUNT = 1000 };
	struct running r;
	struct trank a[WORLD], b[WORLD];
	struct pool_manager_stats st;
	uint64_t *put_ids = tu_alloc(COUNT * sizeof(uint64_t));
	uint8_t buf[POOL_PUT_END_BYTES];

	(void)state;
	manager_start(&r, 64 << 20, 0);
	open_instance(a, &r, 0xa, 0);
	open_instance(b, &r, 0xb, 0);
	for (uint32_t k = 0; k < WORLD; k++) {
		int one = 1;

		setsockopt(a[k].fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		setsockopt(b[k].fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	/* A opens every put before any byte is sent */
	for (uint32_t i = 0; i < COUNT; i++) {
		struct put_case pc;

		many_case(&pc, i);
		assert_int_equal(put_begin(&a[0], &pc, &put_ids[i]), 0);
		/* a key being put is -EEXIST for another instance meanwhile */
		if (i % 100 == 7) {
			uint64_t none;

			assert_int_equal(put_begin(&b[0], &pc, &none), -EEXIST);
		}
		case_free(&pc);
	}
	/* the shares go in another order than the puts opened: each lands in its own put */
	for (uint32_t n = 0; n < COUNT; n++) {
		uint32_t i = (n * 389u) % COUNT; /* 389 is prime to 1000: a permutation */
		struct pool_put_end e = { .put_id = put_ids[i], .commit = true };
		struct put_case pc;
		bool commit;

		many_case(&pc, i);
		for (uint32_t k = 0; k < WORLD; k++) {
			put_share(&a[k], put_ids[i], &pc.img[k], pc.img[k].length);
			assert_int_equal(put_end_read(&a[k], put_ids[i], NULL), 0);
		}
		tsend(&a[0], POOL_MSG_PUT_END, buf, pool_put_end_encode(&e, buf, sizeof(buf)),
		      NULL, 0);
		assert_int_equal(put_end_read(&a[0], put_ids[i], &commit), 0);
		assert_true(commit);
		case_free(&pc);
	}
	pool_manager_stats(r.m, &st);
	assert_int_equal(st.puts_committed, COUNT);
	assert_int_equal(st.puts_failed, 0);
	/* B and A claim every record under the same sparse ids, B in reverse */
	for (uint32_t i = 0; i < COUNT; i++) {
		struct put_case pc, pd;
		struct rec_key got;

		many_case(&pc, i);
		many_case(&pd, COUNT - 1 - i);
		assert_int_equal(claim_last_key(&a[0], many_claim_id(i), &pc.rec.key, &got), 0);
		assert_memory_equal(&got, &pc.rec.key, sizeof(got));
		assert_int_equal(claim_last_key(&b[0], many_claim_id(i), &pd.rec.key, &got), 0);
		assert_memory_equal(&got, &pd.rec.key, sizeof(got));
		case_free(&pc);
		case_free(&pd);
	}
	/* B ends its even ids: those are free again for B, the odd ones and A's all live */
	for (uint32_t i = 0; i < COUNT; i += 2) {
		struct pool_claim_end e = { .claim_id = many_claim_id(i) };

		tsend(&b[0], POOL_MSG_CLAIM_END, buf, pool_claim_end_encode(&e, buf, sizeof(buf)),
		      NULL, 0);
	}
	for (uint32_t i = 0; i < 8; i++) {
		struct put_case pc;
		struct rec_key got;

		many_case(&pc, i);
		assert_int_equal(claim_last_key(&b[0], many_claim_id(i), &pc.rec.key, &got),
				 i % 2 ? -EEXIST : 0);
		assert_int_equal(claim_last_key(&a[0], many_claim_id(i), &pc.rec.key, &got),
				 -EEXIST);
		case_free(&pc);
	}
	/* A's rank 1 pulls A's claims of the records with a page: the bytes of each one's own */
	for (uint32_t i = 0; i < COUNT; i += 128) {
		struct put_case pc, *chain[1] = { &pc };

		many_case(&pc, i);
		claim_stream_check(&a[1], many_claim_id(i), chain, 1, 0);
		case_free(&pc);
	}
	close_instance(a);
	close_instance(b);
	manager_stop(&r);
	free(put_ids);
}

/* A claimed chain never expires; once ended, one sweep drops it leaf first, parents with it (R-POOL-44). */
static void test_pool_expiry_chain_in_one_sweep(void **state)
{
	struct running r;
	struct trank a[WORLD];
	struct put_case c[3];
	struct pool_manager_stats st;
	struct pool_claim_end e = { .claim_id = 1 };
	uint8_t buf[POOL_CLAIM_END_BYTES];

	(void)state;
	manager_start(&r, 4 << 20, 300);
	open_instance(a, &r, 0xa, 0);
	for (uint32_t i = 0; i < 3; i++) {
		case_make(&c[i], 400, 64 * (i + 1), i ? &c[i - 1] : NULL, i + 1);
		assert_int_equal(put_whole(a, &c[i]), 0);
	}
	assert_int_equal(claim(&a[0], 1, &c[2].rec.key), 0);
	/* two max ages and more: the claim's pins keep every record */
	usleep(800 * 1000);
	pool_manager_stats(r.m, &st);
	assert_int_equal(st.expired, 0);
	assert_int_equal(st.records, 3);
	assert_true(st.expire_sweeps >= 2);
	tsend(&a[0], POOL_MSG_CLAIM_END, buf, pool_claim_end_encode(&e, buf, sizeof(buf)), NULL,
	      0);
	/* the first sweep that drops anything drops the whole chain */
	for (int i = 0; i < 5000 && st.expired == 0; i++) {
		usleep(1000);
		pool_manager_stats(r.m, &st);
	}
	assert_int_equal(st.expired, 3);
	assert_int_equal(st.records, 0);
	assert_int_equal(lookup(&a[0], &c[0].rec.key, 1, NULL), 0);
	close_instance(a);
	manager_stop(&r);
	for (uint32_t i = 0; i < 3; i++)
		case_free(&c[i]);
}

/* A window half read when its put fails never lands in arena bytes given to another put (R-POOL-43). */
static void test_pool_failed_put_window_goes_nowhere(void **state)
{
	struct running r;
	struct trank a[WORLD], b[WORLD];
	struct put_case p, q, *one[1] = { &q };
	uint8_t header[CLUSTER_FRAME_HEADER_BYTES], tag[POOL_TAG_BYTES];
	uint8_t head[POOL_PUT_WINDOW_HEAD_BYTES];
	struct pool_put_window w;
	uint64_t p_id, q_id = 0;
	const uint32_t data_len = 8192;

	(void)state;
	manager_start(&r, 1 << 20, 0);
	case_make(&p, 20, 64, NULL, 5);
	case_make(&q, 21, 64, NULL, 6);
	open_instance(a, &r, 0xa, 0);
	open_instance(b, &r, 0xb, 0);
	assert_int_equal(put_begin(&a[0], &p, &p_id), 0);
	/* rank 1 of A: its first window's header, head and half its data */
	w = (struct pool_put_window){ p_id, 0 };
	pool_put_window_encode(&w, head, sizeof(head));
	pool_frame_build(a[1].kc, POOL_TO_MANAGER, a[1].seq, POOL_MSG_PUT_WINDOW, head,
			 sizeof(head), p.img[1].bytes, data_len, header, tag);
	assert_int_equal(write(a[1].fd, header, sizeof(header)), (ssize_t)sizeof(header));
	assert_int_equal(write(a[1].fd, head, sizeof(head)), (ssize_t)sizeof(head));
	assert_int_equal(write(a[1].fd, p.img[1].bytes, data_len / 2), (ssize_t)data_len / 2);
	usleep(100 * 1000);
	/* rank 0 of A sends a share that fails: the put ends, its arena bytes are free */
	p.img[0].bytes[8192 + 5] ^= 1;
	put_share(&a[0], p_id, &p.img[0], p.img[0].length);
	assert_int_equal(put_end_read(&a[0], p_id, NULL), SEL_ECHECKSUM);
	/* B puts a record of the same size: first fit gives it the same bytes */
	assert_int_equal(put_whole(b, &q), 0);
	(void)q_id;
	/* A's rank 1 finishes its window: it must go nowhere */
	assert_int_equal(write(a[1].fd, p.img[1].bytes + data_len / 2, data_len / 2),
			 (ssize_t)data_len / 2);
	assert_int_equal(write(a[1].fd, tag, sizeof(tag)), (ssize_t)sizeof(tag));
	a[1].seq++;
	usleep(100 * 1000);
	/* B's record is intact in the arena (places) and by stream */
	{
		struct pool_claim_pull pull = { .claim_id = 7, .mode = 1 };
		struct pool_places_view pv;
		struct pool_place pl;
		uint8_t buf[64];
		char why[WHY_BYTES];
		int fd = open(b[1].welcome.arena_path, O_RDONLY | O_CLOEXEC);
		const uint8_t *arena = mmap(NULL, b[1].welcome.arena_bytes, PROT_READ, MAP_SHARED,
					    fd, 0);

		assert_true(arena != MAP_FAILED);
		assert_int_equal(claim(&b[0], 7, &q.rec.key), 0);
		tsend(&b[1], POOL_MSG_CLAIM_PULL, buf,
		      pool_claim_pull_encode(&pull, buf, sizeof(buf)), NULL, 0);
		assert_int_equal(trecv(&b[1]), 1);
		assert_int_equal(pool_claim_places_decode(b[1].body, b[1].rx.body_length, &pv, why,
							  sizeof(why)), 0);
		pool_places_view_place(&pv, 0, &pl);
		assert_memory_equal(arena + pl.offset, q.img[1].bytes, q.img[1].length);
		munmap((void *)arena, b[1].welcome.arena_bytes);
		close(fd);
	}
	claim_stream_check(&b[1], 7, one, 1, 0);
	close_instance(a);
	close_instance(b);
	manager_stop(&r);
	case_free(&p);
	case_free(&q);
}

/* A drain refuses newcomers and new work, serves live claims until they end, then says BYE (R-POOL-45). */
static void test_pool_drain_waits_for_claims(void **state)
{
	struct running r;
	struct trank a[WORLD], extra = { 0 };
	struct put_case root;
	struct pool_claim_end e = { .claim_id = 4 };
	uint8_t buf[64];
	void *ret;

	(void)state;
	manager_start(&r, 1 << 20, 0);
	case_make(&root, 50, 64, NULL, 1);
	open_instance(a, &r, 0xa, 0);
	assert_int_equal(put_whole(a, &root), 0);
	assert_int_equal(claim(&a[0], 4, &root.rec.key), 0);
	pool_manager_stop(r.m);
	usleep(200 * 1000);
	extra.body = tu_alloc(POOL_CONTROL_BODY_BYTES_MAX);
	pool_rx_init(&extra.rx, extra.body, POOL_CONTROL_BODY_BYTES_MAX, POOL_TO_RANK);
	extra.fd = tconnect(pool_manager_port(r.m));
	assert_int_equal(trecv(&extra), 1);
	assert_int_equal(extra.refused.reason, POOL_REFUSE_SHUTDOWN);
	trank_close(&extra);
	assert_int_equal(lookup(&a[0], &root.rec.key, 1, NULL), 0); /* no new work */
	assert_int_equal(claim(&a[0], 5, &root.rec.key), -ESHUTDOWN);
	/* the live claim is still served */
	{
		struct put_case *one[1] = { &root };

		claim_stream_check(&a[1], 4, one, 1, 0);
	}
	tsend(&a[0], POOL_MSG_CLAIM_END, buf, pool_claim_end_encode(&e, buf, sizeof(buf)), NULL, 0);
	pthread_join(r.thread, &ret);
	assert_int_equal((intptr_t)ret, 0);
	assert_int_equal(trecv(&a[0]), 1);
	assert_int_equal(a[0].rx.header.type, POOL_MSG_BYE);
	pool_manager_close(r.m);
	close_instance(a);
	case_free(&root);
}

/* The arena spills to the disk tier and claims bring records back; a restart finds them, a renamed pool does not, a corrupt file is dropped. */
static void test_pool_disk_tier_and_restart(void **state)
{
	struct running r;
	struct trank a[WORLD];
	static struct put_case cases[12];
	struct put_case *one[1];
	struct pool_manager_stats st;
	char *dir = tu_make_temp_dir("pool-disk"), path[512], hex[65], name[REC_FILE_NAME_BYTES];

	(void)state;
	manager_start_in(&r, 1 << 20, 0, dir, "test-pool"); /* about 6 of these records */
	open_instance(a, &r, 0xa, 0);
	for (uint32_t i = 0; i < 12; i++) {
		case_make(&cases[i], 300 + i, 128, NULL, 40 + i);
		assert_int_equal(put_whole(a, &cases[i]), 0);
	}
	pool_manager_stats(r.m, &st);
	assert_true(st.spilled >= 6);
	assert_int_equal(st.evicted, 0);
	for (uint32_t i = 0; i < 12; i++)
		assert_int_equal(lookup(&a[0], &cases[i].rec.key, 1, NULL), 1);
	/* the oldest lies on disk: a claim brings it back, byte-exact */
	one[0] = &cases[0];
	assert_int_equal(claim(&a[0], 1, &cases[0].rec.key), 0);
	claim_stream_check(&a[1], 1, one, 1, 0);
	pool_manager_stats(r.m, &st);
	assert_true(st.loaded >= 1);
	sel_hex_encode(hex, a[0].attached.scope, 32);
	close_instance(a);
	manager_stop(&r); /* what the arena held moves to disk */

	/* a restart on the same directory finds every record */
	manager_start_in(&r, 1 << 20, 0, dir, "test-pool");
	open_instance(a, &r, 0xa, 0);
	assert_int_equal(a[0].attached.scope_records, 12);
	one[0] = &cases[11];
	assert_int_equal(claim(&a[0], 2, &cases[11].rec.key), 0);
	claim_stream_check(&a[1], 2, one, 1, 0);
	/* a share file with a flipped byte: the claim fails, the record goes */
	rec_file_name(name, &cases[5].rec.key);
	snprintf(path, sizeof(path), "%s/%s/1/%s", dir, hex, name);
	tu_flip_bit(path, 4096 * 3 + 100);
	assert_int_equal(claim(&a[0], 3, &cases[5].rec.key), -ENOENT);
	assert_int_equal(lookup(&a[0], &cases[5].rec.key, 1, NULL), 0);
	pool_manager_stats(r.m, &st);
	assert_int_equal(st.disk_failures, 1);
	close_instance(a);
	manager_stop(&r);

	/* another name on the same directory starts cold (R-POOL-16) */
	manager_start_in(&r, 1 << 20, 0, dir, "other-pool");
	open_instance(a, &r, 0xa, 0);
	assert_int_equal(a[0].attached.scope_records, 0);
	close_instance(a);
	manager_stop(&r);
	for (uint32_t i = 0; i < 12; i++)
		case_free(&cases[i]);
	tu_remove_tree(dir);
}

/* A restart on a disk tier whose scope's directories hold no record finds none and serves on. */
static void test_pool_disk_restart_empty_scope(void **state)
{
	struct running r;
	struct trank a[WORLD];
	struct put_case root;
	char *dir = tu_make_temp_dir("pool-disk-empty");

	(void)state;
	manager_start_in(&r, 1 << 20, 0, dir, "test-pool");
	open_instance(a, &r, 0xa, 0); /* the scope's directories, nothing in them */
	close_instance(a);
	manager_stop(&r);
	manager_start_in(&r, 1 << 20, 0, dir, "test-pool");
	open_instance(a, &r, 0xa, 0);
	assert_int_equal(a[0].attached.scope_records, 0);
	case_make(&root, 9, 64, NULL, 20);
	assert_int_equal(put_whole(a, &root), 0);
	assert_int_equal(lookup(&a[0], &root.rec.key, 1, NULL), 1);
	close_instance(a);
	manager_stop(&r);
	case_free(&root);
	tu_remove_tree(dir);
}

static void manager_start_limited(struct running *r, const char *dir, uint64_t disk_limit)
{
	struct pool_manager_config c = { .listen = "127.0.0.1:0", .name = "test-pool",
					 .memory_bytes = 1 << 20, .window_bytes = 64 << 10,
					 .dir = dir, .disk_limit_bytes = disk_limit };
	char why[WHY_BYTES];

	memcpy(c.secret, secret, 32);
	assert_int_equal(pool_manager_open(&c, &r->m, why, sizeof(why)), 0);
	assert_int_equal(pthread_create(&r->thread, NULL, run_thread, r->m), 0);
}

/* Bytes of every rank's share of pc: what it takes on disk. */
static uint64_t case_bytes(const struct put_case *pc)
{
	uint64_t bytes = 0;

	for (uint32_t i = 0; i < WORLD; i++)
		bytes += pc->img[i].length;
	return bytes;
}

/*
 * The disk tier keeps to its limit: spills past it delete the least
 * recently used records on disk (counted), the newest stay claimable, and
 * a restart under a smaller limit deletes the oldest it found.
 */
static void test_pool_disk_limit_evicts_lru(void **state)
{
	struct running r;
	struct trank a[WORLD];
	static struct put_case cases[12];
	struct put_case *one[1];
	struct pool_manager_stats st;
	char *dir = tu_make_temp_dir("pool-disk-limit");
	uint64_t each, limit;
	uint32_t found;

	(void)state;
	for (uint32_t i = 0; i < 12; i++)
		case_make(&cases[i], 300 + i, 128, NULL, 40 + i);
	each = case_bytes(&cases[0]);
	limit = 3 * each + each / 2; /* three records on disk */
	manager_start_limited(&r, dir, limit);
	open_instance(a, &r, 0xa, 0);
	for (uint32_t i = 0; i < 12; i++)
		assert_int_equal(put_whole(a, &cases[i]), 0);
	pool_manager_stats(r.m, &st);
	assert_true(st.spilled >= 6);
	assert_true(st.disk_used_bytes <= limit);
	assert_int_equal(st.disk_used_bytes, 3 * each);
	assert_int_equal(st.disk_evicted, st.spilled - 3);
	/* the oldest left the disk; the newest is held */
	assert_int_equal(lookup(&a[0], &cases[0].rec.key, 1, NULL), 0);
	assert_int_equal(lookup(&a[0], &cases[11].rec.key, 1, NULL), 1);
	/* the most recent on disk comes back, byte-exact */
	for (uint32_t i = 11; i-- > 0;)
		if (lookup(&a[0], &cases[i].rec.key, 1, NULL) == 1 &&
		    lookup(&a[0], &cases[i - 1].rec.key, 1, NULL) == 0) {
			one[0] = &cases[i];
			assert_int_equal(claim(&a[0], 1, &cases[i].rec.key), 0);
			claim_stream_check(&a[1], 1, one, 1, 0);
			break;
		}
	close_instance(a);
	manager_stop(&r); /* the arena's records spill, past the limit: the oldest go */
	/* a smaller limit: the scan keeps two (found in no order of use: any two) */
	manager_start_limited(&r, dir, 2 * each);
	pool_manager_stats(r.m, &st);
	assert_true(st.disk_used_bytes <= 2 * each);
	assert_int_equal(st.records, 2);
	open_instance(a, &r, 0xa, 0);
	assert_int_equal(a[0].attached.scope_records, 2);
	found = 0;
	for (uint32_t i = 0; i < 12; i++)
		found += (uint32_t)lookup(&a[0], &cases[i].rec.key, 1, NULL);
	assert_int_equal(found, 2);
	close_instance(a);
	manager_stop(&r);
	for (uint32_t i = 0; i < 12; i++)
		case_free(&cases[i]);
	tu_remove_tree(dir);
}

/* Polls until the disk thread holds no job (each answered by the loop), 10 s at most. */
static void disk_settle(struct running *r)
{
	struct pool_manager_stats st;

	for (int i = 0; i < 10000; i++) {
		pool_manager_stats(r->m, &st);
		if (st.disk_queued == 0)
			return;
		usleep(1000);
	}
	fail_msg("the disk thread still holds %llu jobs", (unsigned long long)st.disk_queued);
}

/*
 * Puts cases into the instance at ranks, one after another, each let to
 * settle, until one of them spilled to disk (14 at most: a 1 MiB arena
 * holds about 6); returns how many it put, *st the stats after the last.
 */
static uint32_t put_until_spilled(struct trank *ranks, struct running *r,
				  const struct put_case *cases, struct pool_manager_stats *st)
{
	uint32_t used = 0;

	do {
		assert_true(used < 14);
		assert_int_equal(put_whole(ranks, &cases[used++]), 0);
		disk_settle(r);
		pool_manager_stats(r->m, st);
	} while (st->spilled == 0);
	return used;
}

/*
 * A spill syncs each share file before its rename and the rank's
 * directory after (two syncs a share); a sync that fails spills nothing,
 * and the record is dropped as without a disk tier.
 */
static void test_pool_disk_spill_syncs(void **state)
{
	struct running r;
	struct trank a[WORLD];
	static struct put_case cases[8];
	struct pool_manager_stats st;
	char *dir = tu_make_temp_dir("pool-disk-sync");
	uint64_t before;

	(void)state;
	for (uint32_t i = 0; i < 8; i++)
		case_make(&cases[i], 500 + i, 128, NULL, 60 + i);
	assert_int_equal(sel_failpoints_configure("pool.disk_sync=off"), 0);
	manager_start_limited(&r, dir, 0);
	open_instance(a, &r, 0xa, 0);
	before = sel_failpoint_evaluations(SEL_FP_POOL_DISK_SYNC);
	for (uint32_t i = 0; i < 8; i++)
		assert_int_equal(put_whole(a, &cases[i]), 0);
	disk_settle(&r);
	pool_manager_stats(r.m, &st);
	assert_true(st.spilled >= 1);
	assert_int_equal(sel_failpoint_evaluations(SEL_FP_POOL_DISK_SYNC) - before,
			 2 * WORLD * st.spilled);
	close_instance(a);
	manager_stop(&r);
	tu_remove_tree(dir);
	/*
	 * Every record's sync fails (the scope's three, its file and the two
	 * directories, pass): nothing reaches the disk, the arena drops instead.
	 */
	dir = tu_make_temp_dir("pool-disk-sync");
	assert_int_equal(sel_failpoints_configure("pool.disk_sync=3*off->return(EIO)"), 0);
	manager_start_limited(&r, dir, 0);
	open_instance(a, &r, 0xb, 0);
	for (uint32_t i = 0; i < 8; i++)
		assert_int_equal(put_whole(a, &cases[i]), 0);
	disk_settle(&r);
	pool_manager_stats(r.m, &st);
	assert_int_equal(st.spilled, 0);
	assert_int_equal(st.disk_used_bytes, 0);
	assert_true(st.evicted >= 1);
	assert_true(sel_failpoint_fired(SEL_FP_POOL_DISK_SYNC) >= 1);
	close_instance(a);
	manager_stop(&r);
	assert_int_equal(sel_failpoints_configure(""), 0);
	for (uint32_t i = 0; i < 8; i++)
		case_free(&cases[i]);
	tu_remove_tree(dir);
}

/* Milliseconds since start_ns. */
static uint64_t ms_since(uint64_t start_ns)
{
	return (sel_monotonic_ns() - start_ns) / 1000000u;
}

/* SELENE_TEST_TIME_SCALE (make check-tsan sets it): how much slower this build runs. */
static uint32_t time_scale(void)
{
	const char *env = getenv("SELENE_TEST_TIME_SCALE");
	int scale = env ? atoi(env) : 1;

	return scale >= 1 ? (uint32_t)scale : 1;
}

/*
 * The disk tier's I/O runs on a thread of its own: while a spill's write
 * is held there (failpoint pool.disk_io sleeping 2.5 s, twice; at most a
 * third of the claim setup time each on a slow build), the put
 * that needed its room is answered, and so are another instance's
 * handshake, ATTACH and LOOKUP, each before that write is done (the disk
 * thread still holds it: an order, not a time, so a loaded machine does
 * not fail it), and a claim of the record on disk is answered once its
 * load ran (behind the writes), byte-exact.
 */
static void test_pool_disk_thread_keeps_loop_answering(void **state)
{
	struct running r;
	struct trank a[WORLD], b[WORLD];
	static struct put_case cases[16];
	struct put_case *one[1] = { &cases[0] };
	struct pool_manager_stats st;
	char *dir = tu_make_temp_dir("pool-disk-thread");
	char config[64];
	uint32_t used, hold_ms;
	uint64_t start, ms;

	(void)state;
	for (uint32_t i = 0; i < 16; i++)
		case_make(&cases[i], 700 + i, 128, NULL, 90 + i);
	manager_start_in(&r, 1 << 20, 0, dir, "test-pool");
	open_instance(a, &r, 0xa, 0);
	/* fill the arena until a put spilled: the next one needs a spill too */
	used = put_until_spilled(a, &r, cases, &st);
	/*
	 * Held long enough that the answers come first on a slow build too,
	 * yet both holds end well inside the claim's setup time
	 * (POOL_CLAIM_SETUP_MS) that the load below waits behind them.
	 */
	hold_ms = 2500 * time_scale();
	if (hold_ms > POOL_CLAIM_SETUP_MS / 3)
		hold_ms = POOL_CLAIM_SETUP_MS / 3;
	snprintf(config, sizeof(config), "pool.disk_io=2*sleep(%u)->off", hold_ms);
	assert_int_equal(sel_failpoints_configure(config), 0);
	start = sel_monotonic_ns();
	assert_int_equal(put_whole(a, &cases[used++]), 0);
	ms = ms_since(start);
	pool_manager_stats(r.m, &st);
	print_message("put needing a spill answered in %llu ms, %llu disk jobs held\n",
		      (unsigned long long)ms, (unsigned long long)st.disk_queued);
	if (st.disk_queued == 0)
		fail_msg("the put was answered after its spill's write (%llu ms)",
			 (unsigned long long)ms);
	assert_true(st.spilled >= 2);
	start = sel_monotonic_ns();
	open_instance(b, &r, 0xb, 0);
	assert_int_equal(lookup(&b[0], &cases[used - 1].rec.key, 1, NULL), 1);
	ms = ms_since(start);
	pool_manager_stats(r.m, &st);
	print_message("handshake, attach and lookup in %llu ms, %llu disk jobs held\n",
		      (unsigned long long)ms, (unsigned long long)st.disk_queued);
	if (st.disk_queued == 0)
		fail_msg("another instance was answered after the write (%llu ms)",
			 (unsigned long long)ms);
	/*
	 * The oldest went to disk first: its claim waits for the load (behind
	 * the held write and the spill that makes its room), hearing a
	 * HEARTBEAT each second meanwhile, not for the loop.
	 */
	claim_heartbeats = 0;
	assert_int_equal(claim(&a[0], 1, &cases[0].rec.key), 0);
	assert_true(claim_heartbeats >= 1);
	claim_stream_check(&a[1], 1, one, 1, 0);
	assert_int_equal(sel_failpoints_configure(""), 0);
	disk_settle(&r);
	pool_manager_stats(r.m, &st);
	assert_true(st.loaded >= 1);
	assert_int_equal(st.disk_failures, 0);
	close_instance(b);
	close_instance(a);
	manager_stop(&r);
	for (uint32_t i = 0; i < 16; i++)
		case_free(&cases[i]);
	tu_remove_tree(dir);
}

/*
 * A manager closed while the disk thread still loads a record (its claim
 * timed out first: claim setup 200 ms, the load held 1 s by failpoint
 * pool.disk_io) takes that load's result on the closing thread and
 * deletes the loaded record's files there, not in a queue nobody runs.
 */
static void test_pool_disk_close_takes_late_load(void **state)
{
	struct running r;
	struct trank a[WORLD];
	static struct put_case cases[16];
	struct pool_manager_config c = { .listen = "127.0.0.1:0", .name = "test-pool",
					 .memory_bytes = 1 << 20, .window_bytes = 64 << 10,
					 .claim_setup_ms = 200 };
	struct pool_manager_stats st;
	char *dir = tu_make_temp_dir("pool-disk-close");
	char why[WHY_BYTES];

	(void)state;
	for (uint32_t i = 0; i < 16; i++)
		case_make(&cases[i], 800 + i, 128, NULL, 110 + i);
	c.dir = dir;
	memcpy(c.secret, secret, 32);
	assert_int_equal(pool_manager_open(&c, &r.m, why, sizeof(why)), 0);
	assert_int_equal(pthread_create(&r.thread, NULL, run_thread, r.m), 0);
	open_instance(a, &r, 0xa, 0);
	put_until_spilled(a, &r, cases, &st);
	/* the oldest is on disk: its load is held past the claim's deadline */
	assert_int_equal(sel_failpoints_configure("pool.disk_io=1*sleep(1000)->off"), 0);
	assert_int_equal(claim(&a[0], 1, &cases[0].rec.key), -ENOENT);
	pool_manager_stats(r.m, &st);
	assert_true(st.disk_queued >= 1); /* the load still runs */
	close_instance(a);
	manager_stop(&r);
	assert_int_equal(sel_failpoints_configure(""), 0);
	for (uint32_t i = 0; i < 16; i++)
		case_free(&cases[i]);
	tu_remove_tree(dir);
}

/*
 * A spill whose write fails while a claim pins its record (the claim's
 * load queued behind the write, which waits behind a spill held 2 s by
 * failpoint pool.disk_io) is counted as a failed spill, not as an
 * eviction: the record stays until its load fails on the missing files
 * (a disk failure), and the claim is answered -ENOENT.
 */
static void test_pool_disk_spill_fails_pinned(void **state)
{
	struct running r;
	struct trank a[WORLD];
	static struct put_case cases[16];
	struct pool_manager_stats st;
	char *dir = tu_make_temp_dir("pool-disk-spill-fails");
	char config[96];
	uint32_t used;
	uint64_t evicted;

	(void)state;
	for (uint32_t i = 0; i < 16; i++)
		case_make(&cases[i], 900 + i, 128, NULL, 130 + i);
	manager_start_in(&r, 1 << 20, 0, dir, "test-pool");
	open_instance(a, &r, 0xa, 0);
	used = put_until_spilled(a, &r, cases, &st);
	evicted = st.evicted;
	/* cases[1]'s spill is held, cases[2]'s fails: a claim of it comes meanwhile */
	snprintf(config, sizeof(config), "pool.disk_io=1*sleep(%u)->1*return(EIO)->off",
		 2000 * time_scale());
	assert_int_equal(sel_failpoints_configure(config), 0);
	assert_int_equal(put_whole(a, &cases[used++]), 0);
	assert_int_equal(put_whole(a, &cases[used++]), 0);
	assert_int_equal(claim(&a[0], 1, &cases[2].rec.key), -ENOENT);
	disk_settle(&r);
	assert_int_equal(sel_failpoints_configure(""), 0);
	pool_manager_stats(r.m, &st);
	assert_int_equal(st.spill_failures, 1);
	assert_int_equal(st.disk_failures, 1);
	assert_int_equal(st.evicted, evicted);
	assert_int_equal(lookup(&a[0], &cases[2].rec.key, 1, NULL), 0);
	close_instance(a);
	manager_stop(&r);
	for (uint32_t i = 0; i < 16; i++)
		case_free(&cases[i]);
	tu_remove_tree(dir);
}

/* ---- Through pool/client.h ---- */

static uint64_t page_bytes_of[WORLD], row_bytes_of[WORLD];

static int client_open(struct running *r, uint32_t rank, uint8_t instance, const uint8_t *key,
		       struct pool_client **out, char *why)
{
	char address[64];
	struct pool_client_config cfg = { .address = address, .secret = key, .rank = rank,
					  .geometry = &geometry[rank], .deadline_ms = 5000 };

	snprintf(address, sizeof(address), "127.0.0.1:%u", pool_manager_port(r->m));
	memset(cfg.instance_id, instance, sizeof(cfg.instance_id));
	for (uint32_t i = 0; i < WORLD; i++) {
		page_bytes_of[i] = geometry[i].page_record_bytes;
		row_bytes_of[i] = geometry[i].row_record_bytes;
	}
	cfg.scope = (struct pool_scope_parts){ .world_size = WORLD, .namespace_id = namespace_id,
					       .layout_digest = geometry[0].layout_digest,
					       .page_tokens = PAGE_TOKENS,
					       .plane_count = geometry[0].page_plane_count,
					       .page_bytes = page_bytes_of, .row_bytes = row_bytes_of };
	return pool_client_open(&cfg, out, why, WHY_BYTES);
}

struct rank_job {
	struct pool_client *c;
	uint32_t rank;
	uint64_t id; /* put id, or claim id */
	struct put_case **chain;
	uint32_t count;
	struct pool_chain_entry entries[4];
	uint32_t windows, verified_bytes;
	int result;
};

static void *put_share_thread(void *arg)
{
	struct rank_job *j = arg;
	const struct image *img = &j->chain[0]->img[j->rank];

	/* in two pieces, to cross a window boundary the caller chose */
	j->result = pool_put_window(j->c, j->id, 0, img->bytes, img->length / 3, 5000);
	if (!j->result)
		j->result = pool_put_window(j->c, j->id, img->length / 3,
					    img->bytes + img->length / 3,
					    img->length - img->length / 3, 5000);
	if (!j->result)
		j->result = pool_put_share_wait(j->c, j->id, 5000);
	return NULL;
}

static int check_window(void *ctx, const struct pool_window *w)
{
	struct rank_job *j = ctx;
	const struct image *img = &j->chain[w->chain_index]->img[j->rank];
	struct rec_header h;
	struct rec_layout l;
	uint64_t off;
	char why[WHY_BYTES];

	assert_int_equal(rec_header_decode(img->bytes, &h, why, sizeof(why)), 0);
	assert_int_equal(rec_layout_from_header(&h, &l), 0);
	off = w->section == POOL_SECTION_HEADER	     ? w->first
	      : w->section == POOL_SECTION_CHECKSUMS ? l.checksum_offset + w->first
	      : w->section == POOL_SECTION_PAGES     ? l.page_offset + (uint64_t)w->first * l.page_stride
						     : l.row_offset;
	/* byte-exact against this rank's own image (R-POOL-33) */
	assert_memory_equal(w->data, img->bytes + off, w->bytes);
	j->windows++;
	j->verified_bytes += (uint32_t)w->bytes;
	return 0;
}

static void *claim_share_thread(void *arg)
{
	struct rank_job *j = arg;
	size_t slot_bytes = pool_client_slot_bytes(j->c);
	void *slots[2] = { tu_alloc(slot_bytes), tu_alloc(slot_bytes) };

	j->result = pool_share_claim(j->c, j->id, j->entries, j->count, 0, slots, 2, slot_bytes,
				     check_window, j, 10000);
	free(slots[0]);
	free(slots[1]);
	return NULL;
}

/* Polls a never-waiting call until it answers or 5 s pass. */
#define POLL_UNTIL(expr, result)                                   \
	do {                                                       \
		for (int tries_ = 0; tries_ < 5000; tries_++) {    \
			(result) = (expr);                         \
			if ((result) != 0)                         \
				break;                             \
			usleep(1000);                              \
		}                                                  \
	} while (0)

/* Instance A puts root through its clients, each rank's share on its own thread. */
static void put_root(struct pool_client **a, struct put_case *root)
{
	struct put_case *chain[1] = { root };
	struct pool_put_spec spec = { 0 };
	struct rank_job jobs[WORLD];
	pthread_t threads[WORLD];
	uint64_t request, put_id = 0, shares[WORLD];
	int ret;

	spec.key = root->rec.key;
	spec.tail_page_count = root->rec.tail_page_count;
	spec.row = true;
	for (uint32_t k = 0; k < WORLD; k++)
		shares[k] = root->img[k].length;
	spec.share_bytes = shares;
	assert_int_equal(pool_put_begin(a[0], &spec, &request), 0);
	POLL_UNTIL(pool_put_poll(a[0], request, &put_id), ret);
	assert_int_equal(ret, 1);
	for (uint32_t k = 0; k < WORLD; k++) {
		jobs[k] = (struct rank_job){ .c = a[k], .rank = k, .id = put_id, .chain = chain };
		assert_int_equal(pthread_create(&threads[k], NULL, put_share_thread, &jobs[k]), 0);
	}
	for (uint32_t k = 0; k < WORLD; k++) {
		pthread_join(threads[k], NULL);
		assert_int_equal(jobs[k].result, 0);
	}
	assert_int_equal(pool_put_commit(a[0], put_id, true), 0);
	POLL_UNTIL(pool_put_outcome(a[0], put_id), ret);
	assert_int_equal(ret, 1);
}

/* Two instances of two ranks, each rank on its own thread, put and claim byte-exact through the client; a wrong secret and a stopped manager fail cleanly. */
static void test_pool_client_end_to_end(void **state)
{
	struct running r;
	struct pool_client *a[WORLD], *b[WORLD], *x;
	struct put_case root, *chain[1] = { &root };
	struct rank_job jobs[WORLD];
	pthread_t threads[WORLD];
	uint64_t ticket, claim_id;
	struct pool_chain_entry found[4];
	struct pool_claim_grant grant;
	uint32_t count = 0;
	uint8_t wrong[32] = { 7 };
	char why[WHY_BYTES];
	int ret;

	(void)state;
	manager_start(&r, 8 << 20, 0);
	case_make(&root, 9, 96, NULL, 90);
	for (uint32_t k = 0; k < WORLD; k++) {
		assert_int_equal(client_open(&r, k, 0xa, secret, &a[k], why), 0);
		assert_int_equal(client_open(&r, k, 0xb, secret, &b[k], why), 0);
	}
	assert_string_equal(pool_client_facts(a[0])->name, "test-pool");
	assert_true(pool_client_facts(a[0])->arena_bytes > 0);
	/* the put: the session opens it, every rank sends its share, the session commits */
	put_root(a, &root);
	/* B looks up and claims; each rank streams its share on its own thread */
	assert_int_equal(pool_lookup_begin(b[0], &root.rec.key, 1, &ticket), 0);
	POLL_UNTIL(pool_lookup_poll(b[0], ticket, found, 4, &count), ret);
	assert_int_equal(ret, 1);
	assert_int_equal(count, 1);
	assert_true(pool_client_rtt_us(b[0]) > 0);
	assert_int_equal(pool_claim_begin(b[0], &root.rec.key, &claim_id), 0);
	POLL_UNTIL(pool_claim_poll(b[0], claim_id, &grant, found, 4, &count), ret);
	assert_int_equal(ret, 1);
	for (uint32_t k = 0; k < WORLD; k++) {
		jobs[k] = (struct rank_job){ .c = b[k], .rank = k, .id = claim_id, .chain = chain,
					     .count = count };
		memcpy(jobs[k].entries, found, sizeof(found));
		assert_int_equal(pthread_create(&threads[k], NULL, claim_share_thread, &jobs[k]), 0);
	}
	for (uint32_t k = 0; k < WORLD; k++) {
		pthread_join(threads[k], NULL);
		assert_int_equal(jobs[k].result, 0);
		assert_true(jobs[k].windows >= 4);
		/* every byte but the checksum segment's padding (R-POOL-33) */
		assert_int_equal(jobs[k].verified_bytes,
				 root.img[k].length - 4096 + 8 * root.rec.tail_page_count);
	}
	/* rank 1 from the arena, on this host */
	{
		const uint8_t *arena;
		uint64_t bytes;
		struct pool_place place;

		assert_int_equal(pool_arena_map(b[1], &arena, &bytes, why, sizeof(why)), 0);
		assert_int_equal(pool_share_pull(b[1], claim_id, found, count, 0, true), 0);
		assert_int_equal(pool_share_places(b[1], claim_id, &place, 1, 5000), 0);
		assert_int_equal(place.bytes, root.img[1].length);
		assert_memory_equal(arena + place.offset, root.img[1].bytes, place.bytes);
		assert_int_equal(pool_share_end(b[1], claim_id), 0);
	}
	assert_int_equal(pool_claim_end(b[0], claim_id, 0), 0);
	/* a wrong secret: refused, and said so */
	assert_int_equal(client_open(&r, 0, 0xc, wrong, &x, why), -EACCES);
	assert_non_null(strstr(why, "auth"));
	/* the manager stops: every client learns it */
	manager_stop(&r);
	for (uint32_t k = 0; k < WORLD; k++) {
		POLL_UNTIL(pool_client_status(a[k], why, sizeof(why)), ret);
		assert_true(ret < 0);
	}
	assert_int_equal(pool_lookup_begin(a[0], &root.rec.key, 1, &ticket), ret);
	/* a restarted manager: a new connection attaches; its arena starts empty */
	manager_start(&r, 8 << 20, 0);
	assert_int_equal(client_open(&r, 0, 0xa, secret, &x, why), 0);
	assert_int_equal(pool_client_facts(x)->scope_records, 0);
	/*
	 * a put window that cannot leave in time poisons the connection, so the
	 * caller's buffer is never read after the call returns
	 */
	assert_int_equal(pool_put_window(x, 1, 0, root.img[0].bytes, root.img[0].length, 0),
			 -ETIMEDOUT);
	assert_int_equal(pool_client_status(x, why, sizeof(why)), -ETIMEDOUT);
	pool_client_close(x);
	for (uint32_t k = 0; k < WORLD; k++) {
		pool_client_close(a[k]);
		pool_client_close(b[k]);
	}
	manager_stop(&r);
	case_free(&root);
}

/* ---- Same-host claims whose copies start before the grant (R-POOL-22) ---- */

#define OVERLAP_TOKENS 512u /* 32 pages: one record's two shares fill half of a 1 MiB arena */

/* Rank zero of instance B as a same-host claimer: its arena, a host device, a share. */
struct overlap {
	struct pool_client *c;
	const uint8_t *arena;
	uint64_t arena_bytes;
	struct shard_device *device;
	uint8_t *planes[2], *rows;
	struct shard_planes bases;
	struct shard_pool_share share;
	uint32_t page_ids[64];
	struct pool_chain_entry answer[4], grant_chain[4];
	struct shard_pool_record records[4], granted[4];
	struct shard_pool_early early[4];
	uint64_t stamps[4];
	struct pool_place places[4];
	struct shard_pool_place granted_places[4];
	uint32_t count;
	char why[WHY_BYTES];
};

static void overlap_open(struct overlap *o, struct running *r)
{
	const struct rec_geometry *g = &geometry[0];

	memset(o, 0, sizeof(*o));
	assert_int_equal(client_open(r, 0, 0xb, secret, &o->c, o->why), 0);
	assert_int_equal(pool_arena_map(o->c, &o->arena, &o->arena_bytes, o->why,
					sizeof(o->why)), 0);
	pool_client_claim_local(o->c, true);
	assert_int_equal(shard_device_open_host(&o->device), 0);
	for (uint32_t p = 0; p < g->page_plane_count; p++) {
		o->planes[p] = tu_alloc(g->page_planes[p].unit_bytes * g->page_count);
		o->bases.page_base[p] = (uintptr_t)o->planes[p];
	}
	o->rows = tu_alloc(g->row_plane.unit_bytes * g->row_count);
	o->bases.row_base = (uintptr_t)o->rows;
	assert_int_equal(shard_pool_share_init(&o->share, g, &namespace_id, &o->bases,
					       o->device), 0);
	for (uint32_t i = 0; i < 64; i++)
		o->page_ids[i] = i;
}

static void overlap_close(struct overlap *o)
{
	shard_pool_share_destroy(&o->share);
	for (uint32_t p = 0; p < 2; p++)
		free(o->planes[p]);
	free(o->rows);
	o->device->ops->close(o->device);
	pool_client_close(o->c);
}

/* The lookup: the answer's chain, the session rank's places and the stamps. */
static void overlap_lookup(struct overlap *o, const struct put_case *pc)
{
	uint64_t ticket;
	int ret;

	assert_int_equal(pool_lookup_begin(o->c, &pc->rec.key, 1, &ticket), 0);
	POLL_UNTIL(pool_lookup_poll(o->c, ticket, o->answer, 4, &o->count), ret);
	assert_int_equal(ret, 1);
	assert_int_equal(o->count, 1);
	for (uint32_t i = 0; i < o->count; i++) {
		o->records[i] = (struct shard_pool_record){
			.key = o->answer[i].key, .first_page_index = o->answer[i].first_page_index,
			.tail_page_count = o->answer[i].tail_page_count, .row = o->answer[i].row };
		o->early[i] = (struct shard_pool_early){ .offset = o->answer[i].place.offset,
							 .bytes = o->answer[i].place.bytes,
							 .stamp = o->answer[i].stamp };
	}
}

/* The claim's copies begun and issued from the answer's places, before any grant. */
static void overlap_early(struct overlap *o, const struct put_case *pc)
{
	assert_int_equal(shard_pool_share_begin(&o->share, o->records, o->count, 0, o->page_ids,
						pc->rec.tail_page_count, 0, o->why,
						sizeof(o->why)), 0);
	assert_int_equal(shard_pool_share_early(&o->share, o->arena, o->arena_bytes, o->early,
						o->count), 0);
}

/* The claim: CLAIM_LOCAL, the grant's stamps and places, the records copied again where they changed, the end. */
static int overlap_claim(struct overlap *o, const struct put_case *pc, uint64_t *bytes)
{
	struct pool_claim_grant grant;
	uint64_t claim_id = 0;
	uint32_t count = 0;
	int ret, finished;

	assert_int_equal(pool_claim_begin(o->c, &pc->rec.key, &claim_id), 0);
	POLL_UNTIL(pool_claim_poll(o->c, claim_id, &grant, o->grant_chain, 4, &count), ret);
	if (ret == 1) {
		ret = pool_share_pull(o->c, claim_id, o->grant_chain, count, 0, true);
		if (!ret)
			ret = pool_share_places(o->c, claim_id, o->places, count, 5000);
		for (uint32_t i = 0; !ret && i < count; i++) {
			o->granted[i] = (struct shard_pool_record){
				.key = o->grant_chain[i].key,
				.first_page_index = o->grant_chain[i].first_page_index,
				.tail_page_count = o->grant_chain[i].tail_page_count,
				.row = o->grant_chain[i].row };
			o->stamps[i] = o->grant_chain[i].stamp;
			o->granted_places[i] = (struct shard_pool_place){ o->places[i].offset,
									  o->places[i].bytes };
		}
		if (!ret)
			ret = shard_pool_share_granted(&o->share, o->arena, o->arena_bytes, o->early,
						       o->granted, o->stamps, o->granted_places,
						       count, o->why, sizeof(o->why));
		pool_share_end(o->c, claim_id);
		pool_claim_end(o->c, claim_id, ret);
	}
	/* a refused claim: its destination is discarded, nothing is reported */
	finished = shard_pool_share_finish(&o->share, bytes, ret ? NULL : o->why,
					   ret ? 0 : sizeof(o->why));
	return ret ? ret : finished;
}

/* The device holds rank zero's pages and row of pc (page j at id j, the row in slot 0). */
static bool overlap_device_holds(const struct overlap *o, const struct put_case *pc)
{
	const struct rec_geometry *g = &geometry[0];
	const uint8_t *img = pc->img[0].bytes;
	struct rec_header h;
	struct rec_layout l;
	uint64_t plane_offset = 0;
	char why[WHY_BYTES];

	assert_int_equal(rec_header_decode(img, &h, why, sizeof(why)), 0);
	assert_int_equal(rec_layout_from_header(&h, &l), 0);
	for (uint32_t p = 0; p < g->page_plane_count; p++) {
		uint64_t unit = g->page_planes[p].unit_bytes;

		for (uint32_t j = 0; j < pc->rec.tail_page_count; j++)
			if (memcmp(o->planes[p] + unit * j,
				   img + l.page_offset + l.page_stride * j + plane_offset, unit))
				return false;
		plane_offset += sel_align_up(unit, 4096);
	}
	return memcmp(o->rows, img + l.row_offset, g->row_plane.unit_bytes) == 0;
}

/* The bytes a claim of pc copies once: its pages' units and the row's. */
static uint64_t overlap_payload(const struct put_case *pc)
{
	const struct rec_geometry *g = &geometry[0];

	return (uint64_t)pc->rec.tail_page_count * g->page_planes[0].unit_bytes *
		       g->page_plane_count + g->row_plane.unit_bytes;
}

/* One record put by an instance of WORLD ranks, and an overlap claimant beside them. */
struct overlap_one {
	struct running r;
	struct pool_client *a[WORLD];
	struct put_case k1;
	struct overlap o;
};

/* The manager (8 MiB), the record (seed) put, looked up and copied early from its answer. */
static void overlap_one_start(struct overlap_one *t, uint32_t seed)
{
	char why[WHY_BYTES];

	manager_start(&t->r, 8 << 20, 0);
	case_make(&t->k1, seed, OVERLAP_TOKENS, NULL, seed);
	for (uint32_t k = 0; k < WORLD; k++)
		assert_int_equal(client_open(&t->r, k, 0xa, secret, &t->a[k], why), 0);
	put_root(t->a, &t->k1);
	overlap_open(&t->o, &t->r);
	overlap_lookup(&t->o, &t->k1);
	overlap_early(&t->o, &t->k1);
	assert_true(t->o.early[0].issued);
}

static void overlap_one_stop(struct overlap_one *t)
{
	overlap_close(&t->o);
	for (uint32_t k = 0; k < WORLD; k++)
		pool_client_close(t->a[k]);
	manager_stop(&t->r);
	case_free(&t->k1);
}

/* A same-host claim whose stamps match copies each record once, from the answer's places, before the grant: nothing is copied again. */
static void test_pool_overlap_fast_path_copies_once(void **state)
{
	static struct overlap_one t;
	uint64_t bytes = 0;

	(void)state;
	overlap_one_start(&t, 41);
	assert_true(t.o.answer[0].stamp != 0);
	/* the early copies landed before any grant (the host device copies at once) */
	assert_true(overlap_device_holds(&t.o, &t.k1));
	assert_int_equal(overlap_claim(&t.o, &t.k1, &bytes), 0);
	assert_int_equal(t.o.stamps[0], t.o.answer[0].stamp);
	assert_int_equal(t.o.share.records_early, 1);
	assert_int_equal(t.o.share.records_redone, 0);
	assert_int_equal(t.o.share.records_waited, 0);
	assert_int_equal(bytes, overlap_payload(&t.k1));
	assert_true(overlap_device_holds(&t.o, &t.k1));
	overlap_one_stop(&t);
}

/*
 * R-POOL-36: equal stamps mean the image lay at the answer's place until
 * the pin, so the grant names that place; a grant that names another with
 * the same stamp (a manager's fault) keeps nothing copied early: the
 * record is copied again from the granted place.
 */
static void test_pool_overlap_moved_place_redone(void **state)
{
	static struct overlap_one t;
	uint64_t bytes = 0;

	(void)state;
	overlap_one_start(&t, 44);
	t.o.early[0].offset += 4096; /* as if the answer had named another place */
	assert_int_equal(overlap_claim(&t.o, &t.k1, &bytes), 0);
	assert_int_equal(t.o.stamps[0], t.o.answer[0].stamp);
	assert_int_equal(t.o.share.records_early, 0);
	assert_int_equal(t.o.share.records_redone, 1);
	assert_true(overlap_device_holds(&t.o, &t.k1));
	overlap_one_stop(&t);
}

/* A record evicted between lookup and claim, its range reused (a 1 MiB arena holds one): copied again from its new place, or never from the other record's bytes and refused. */
static void test_pool_overlap_stale_place_redone_or_refused(void **state)
{
	struct running r;
	struct pool_client *a[WORLD];
	struct put_case k1, k2, k3;
	struct overlap o;
	uint64_t bytes = 0, stale;
	char why[WHY_BYTES];

	(void)state;
	manager_start(&r, 1 << 20, 0);
	case_make(&k1, 51, OVERLAP_TOKENS, NULL, 51);
	case_make(&k2, 52, OVERLAP_TOKENS, NULL, 52);
	case_make(&k3, 53, OVERLAP_TOKENS, NULL, 53);
	for (uint32_t k = 0; k < WORLD; k++)
		assert_int_equal(client_open(&r, k, 0xa, secret, &a[k], why), 0);
	put_root(a, &k1);
	overlap_open(&o, &r);

	/* copied early from a live image; then evicted by k2, put back: another stamp */
	overlap_lookup(&o, &k1);
	overlap_early(&o, &k1);
	assert_true(o.early[0].issued);
	stale = o.answer[0].stamp;
	put_root(a, &k2);
	assert_int_not_equal(memcmp(o.arena + o.early[0].offset, k1.img[0].bytes, 4096), 0);
	put_root(a, &k1);
	/* what the early copies delivered counts for nothing once the stamp differs */
	memset(o.planes[0], 0xee, 4096);
	memset(o.rows, 0xee, 64);
	assert_int_equal(overlap_claim(&o, &k1, &bytes), 0);
	assert_int_not_equal(o.stamps[0], stale);
	assert_int_equal(o.share.records_early, 0);
	assert_int_equal(o.share.records_redone, 1);
	assert_true(overlap_device_holds(&o, &k1));
	assert_int_equal(bytes, 2 * overlap_payload(&k1));

	/* the range holds k2's share when the copies would start: none starts, the claim fails */
	memset(o.planes[0], 0, 4096 * 64);
	overlap_lookup(&o, &k1);
	/* other puts until one takes k1's range (a freed range keeps its bytes until then) */
	for (uint32_t i = 0; i < 4 && memcmp(o.arena + o.answer[0].place.offset,
					      k1.img[0].bytes, 4096) == 0; i++)
		put_root(a, i % 2 ? &k3 : &k2);
	assert_int_not_equal(memcmp(o.arena + o.answer[0].place.offset, k1.img[0].bytes, 4096),
			     0);
	overlap_early(&o, &k1);
	assert_false(o.early[0].issued);
	assert_int_equal(overlap_claim(&o, &k1, &bytes), -ENOENT);
	assert_int_equal(bytes, 0);
	for (uint32_t b = 0; b < 4096 * 64; b++)
		assert_int_equal(o.planes[0][b], 0);
	overlap_close(&o);
	for (uint32_t k = 0; k < WORLD; k++)
		pool_client_close(a[k]);
	manager_stop(&r);
	case_free(&k1);
	case_free(&k2);
	case_free(&k3);
}

/* A record on the manager's disk tier is answered with stamp 0 and no place: its copies wait for the grant. */
static void test_pool_overlap_disk_tier_waits_for_grant(void **state)
{
	struct running r;
	struct pool_client *a[WORLD];
	struct put_case k1;
	struct overlap o;
	uint64_t bytes = 0;
	char *dir = tu_make_temp_dir("pool-overlap"), why[WHY_BYTES];

	(void)state;
	manager_start_in(&r, 1 << 20, 0, dir, "test-pool");
	case_make(&k1, 61, OVERLAP_TOKENS, NULL, 61);
	for (uint32_t k = 0; k < WORLD; k++)
		assert_int_equal(client_open(&r, k, 0xa, secret, &a[k], why), 0);
	put_root(a, &k1);
	for (uint32_t k = 0; k < WORLD; k++)
		pool_client_close(a[k]);
	manager_stop(&r); /* what the arena held moves to disk */
	manager_start_in(&r, 1 << 20, 0, dir, "test-pool");
	overlap_open(&o, &r);
	overlap_lookup(&o, &k1);
	overlap_early(&o, &k1);
	assert_int_equal(o.answer[0].stamp, 0);
	assert_int_equal(o.answer[0].place.offset, 0);
	assert_int_equal(o.answer[0].place.bytes, 0);
	assert_false(o.early[0].issued);
	assert_int_equal(overlap_claim(&o, &k1, &bytes), 0);
	assert_true(o.stamps[0] != 0);
	assert_int_equal(o.share.records_waited, 1);
	assert_int_equal(o.share.records_early + o.share.records_redone, 0);
	assert_int_equal(bytes, overlap_payload(&k1));
	assert_true(overlap_device_holds(&o, &k1));
	overlap_close(&o);
	manager_stop(&r);
	case_free(&k1);
	tu_remove_tree(dir);
}

/*
 * A share ended mid-stream hands its slots back at once: the I/O thread,
 * which reads the socket without the client's lock, never writes a slot
 * after pool_share_end returns, and the connection serves the next claim.
 */
static void test_pool_share_end_mid_stream_returns_slots(void **state)
{
	struct running r;
	struct pool_client *a[WORLD];
	struct put_case root, *chain[1] = { &root };
	struct rank_job jobs[WORLD];
	uint64_t claim_id;
	struct pool_chain_entry found[4];
	struct pool_claim_grant grant;
	uint32_t count = 0;
	char why[WHY_BYTES];
	int ret;

	(void)state;
	manager_start(&r, 8 << 20, 0);
	case_make(&root, 11, 96, NULL, 91);
	for (uint32_t k = 0; k < WORLD; k++)
		assert_int_equal(client_open(&r, k, 0xd, secret, &a[k], why), 0);
	put_root(a, &root);
	/*
	 * rank 1 ends its share after 0, 1, 2 ... windows, at varying moments,
	 * while each read of window data takes 3 ms (the I/O thread holds a
	 * slot's address in a read without the lock)
	 */
	assert_int_equal(sel_failpoints_configure("pool.rx_data=sleep(3)"), 0);
	for (uint32_t round = 0; round < 12; round++) {
		size_t slot_bytes = pool_client_slot_bytes(a[1]);
		uint8_t *slots[2] = { tu_alloc(slot_bytes), tu_alloc(slot_bytes) };
		struct pool_window w;

		assert_int_equal(pool_claim_begin(a[0], &root.rec.key, &claim_id), 0);
		POLL_UNTIL(pool_claim_poll(a[0], claim_id, &grant, found, 4, &count), ret);
		assert_int_equal(ret, 1);
		assert_int_equal(pool_share_pull(a[1], claim_id, found, count, 0, false), 0);
		for (uint32_t i = 0; i < 2; i++)
			assert_int_equal(pool_share_post(a[1], claim_id, slots[i], slot_bytes,
							 slots[i]), 0);
		for (uint32_t taken = 0; taken < round % 5; taken++) {
			ret = pool_share_next(a[1], claim_id, &w, 5000);
			if (ret != 1)
				break;
			assert_int_equal(pool_share_post(a[1], claim_id, (void *)w.data, slot_bytes,
							 w.slot_ctx), 0);
		}
		usleep(500 * (round % 4));
		assert_int_equal(pool_share_end(a[1], claim_id), 0);
		/* the slots are the caller's again: nothing writes them any more */
		memset(slots[0], 0x5a, slot_bytes);
		memset(slots[1], 0x5a, slot_bytes);
		usleep(10000);
		for (uint32_t i = 0; i < 2; i++)
			for (size_t b = 0; b < slot_bytes; b++)
				if (slots[i][b] != 0x5a)
					fail_msg("slot %u written at %zu after pool_share_end", i, b);
		free(slots[0]);
		free(slots[1]);
		assert_int_equal(pool_claim_end(a[0], claim_id, 0), 0);
	}
	assert_true(sel_failpoint_fired(SEL_FP_POOL_RX_DATA) >= 1);
	assert_int_equal(sel_failpoints_configure(NULL), 0);
	/* the connection carries a whole claim afterwards, byte-exact */
	assert_int_equal(pool_claim_begin(a[0], &root.rec.key, &claim_id), 0);
	POLL_UNTIL(pool_claim_poll(a[0], claim_id, &grant, found, 4, &count), ret);
	assert_int_equal(ret, 1);
	jobs[1] = (struct rank_job){ .c = a[1], .rank = 1, .id = claim_id, .chain = chain,
				     .count = count };
	memcpy(jobs[1].entries, found, sizeof(found));
	claim_share_thread(&jobs[1]);
	assert_int_equal(jobs[1].result, 0);
	assert_int_equal(jobs[1].verified_bytes,
			 root.img[1].length - 4096 + 8 * root.rec.tail_page_count);
	assert_int_equal(pool_claim_end(a[0], claim_id, 0), 0);
	for (uint32_t k = 0; k < WORLD; k++)
		pool_client_close(a[k]);
	manager_stop(&r);
	case_free(&root);
}

/* ---- RDMA claims on the fake verbs device (R-POOL-90 ..) ---- */

#ifdef SEL_HAVE_VERBS_H
struct rdma_log {
	pthread_mutex_t lock;
	int warnings;
	char first[512];
};

static struct rdma_log rdma_log = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Counts "RDMA is off" warnings, from the manager's and the clients' threads. */
static void rdma_log_line(enum sel_log_level level, const char *message, void *user)
{
	struct rdma_log *lg = user;

	if (level != SEL_LOG_WARN || !strstr(message, "RDMA is off"))
		return;
	pthread_mutex_lock(&lg->lock);
	if (lg->warnings++ == 0)
		snprintf(lg->first, sizeof(lg->first), "%s", message);
	pthread_mutex_unlock(&lg->lock);
}

static int rdma_warnings(char *first, size_t size)
{
	int n;

	pthread_mutex_lock(&rdma_log.lock);
	n = rdma_log.warnings;
	snprintf(first, size, "%s", rdma_log.first);
	pthread_mutex_unlock(&rdma_log.lock);
	return n;
}

/* A fake device in place of libibverbs, the warning counter reset; false (skip) where memlock is too small. */
static bool rdma_begin(void)
{
	if (pool_rdma_memlock_bytes() < POOL_RDMA_CLIENT_SLOTS_DEFAULT * (64u << 10)) {
		print_message("skipped: RLIMIT_MEMLOCK is below 4 slots of 64 KiB\n");
		return false;
	}
	fake_verbs_install();
	pthread_mutex_lock(&rdma_log.lock);
	rdma_log.warnings = 0;
	rdma_log.first[0] = '\0';
	pthread_mutex_unlock(&rdma_log.lock);
	sel_log_set_callback(rdma_log_line, &rdma_log);
	return true;
}

static void rdma_end(void)
{
	sel_log_set_callback(NULL, NULL);
	assert_int_equal(fake_verbs_remove(), 0); /* every queue pair and region was freed */
}

/* A manager of 8 MiB, RDMA claims offered when asked, its loop run by run. */
static void manager_start_rdma_on(struct running *r, bool rdma, const char *device,
				  void *(*run)(void *))
{
	struct pool_manager_config c = { .listen = "127.0.0.1:0", .name = "test-pool",
					 .memory_bytes = 8 << 20, .window_bytes = 64 << 10,
					 .rdma = rdma, .rdma_device = device };
	char why[WHY_BYTES];

	memcpy(c.secret, secret, 32);
	assert_int_equal(pool_manager_open(&c, &r->m, why, sizeof(why)), 0);
	assert_int_equal(pthread_create(&r->thread, NULL, run, r->m), 0);
}

static void manager_start_rdma(struct running *r, bool rdma, const char *device)
{
	manager_start_rdma_on(r, rdma, device, run_thread);
}

static void client_open_rdma(struct running *r, uint32_t rank, uint8_t instance,
			     const char *device, struct pool_client **out)
{
	char address[64], why[WHY_BYTES];
	struct pool_client_config cfg = { .address = address, .secret = secret, .rank = rank,
					  .geometry = &geometry[rank], .deadline_ms = 5000,
					  .rdma_device = device };

	snprintf(address, sizeof(address), "127.0.0.1:%u", pool_manager_port(r->m));
	memset(cfg.instance_id, instance, sizeof(cfg.instance_id));
	for (uint32_t i = 0; i < WORLD; i++) {
		page_bytes_of[i] = geometry[i].page_record_bytes;
		row_bytes_of[i] = geometry[i].row_record_bytes;
	}
	cfg.scope = (struct pool_scope_parts){ .world_size = WORLD, .namespace_id = namespace_id,
					       .layout_digest = geometry[0].layout_digest,
					       .page_tokens = PAGE_TOKENS,
					       .plane_count = geometry[0].page_plane_count,
					       .page_bytes = page_bytes_of, .row_bytes = row_bytes_of };
	assert_int_equal(pool_client_open(&cfg, out, why, WHY_BYTES), 0);
}

/* Instances A (0xa) and B (0xb): a client per rank each, lending on device (NULL: any). */
static void rdma_clients_open(struct running *r, const char *device, struct pool_client **a,
			      struct pool_client **b)
{
	for (uint32_t k = 0; k < WORLD; k++) {
		client_open_rdma(r, k, 0xa, device, &a[k]);
		client_open_rdma(r, k, 0xb, device, &b[k]);
	}
}

/* Asserts each rank's client of an instance comes to lend its slots (RDMA active). */
static void rdma_wait_active(struct pool_client **c)
{
	bool active;

	for (uint32_t k = 0; k < WORLD; k++) {
		POLL_UNTIL(pool_client_rdma_active(c[k]), active);
		assert_true(active);
	}
}

/* Closes A's and B's clients, stops the manager, frees root and removes the fake device. */
static void rdma_finish(struct running *r, struct pool_client **a, struct pool_client **b,
			struct put_case *root)
{
	for (uint32_t k = 0; k < WORLD; k++) {
		pool_client_close(a[k]);
		pool_client_close(b[k]);
	}
	manager_stop(r);
	case_free(root);
	rdma_end();
}


/* Instance B claims root, each rank on its own thread; jobs[k] says how each went. */
static void rdma_claim(struct pool_client **b, struct put_case *root, struct put_case **chain,
		       struct rank_job *jobs)
{
	struct pool_chain_entry found[4];
	struct pool_claim_grant grant;
	pthread_t threads[WORLD];
	uint64_t claim_id;
	uint32_t count = 0;
	int ret;

	assert_int_equal(pool_claim_begin(b[0], &root->rec.key, &claim_id), 0);
	POLL_UNTIL(pool_claim_poll(b[0], claim_id, &grant, found, 4, &count), ret);
	assert_int_equal(ret, 1);
	for (uint32_t k = 0; k < WORLD; k++) {
		jobs[k] = (struct rank_job){ .c = b[k], .rank = k, .id = claim_id, .chain = chain,
					     .count = count };
		memcpy(jobs[k].entries, found, sizeof(found));
		assert_int_equal(pthread_create(&threads[k], NULL, claim_share_thread, &jobs[k]), 0);
	}
	for (uint32_t k = 0; k < WORLD; k++)
		pthread_join(threads[k], NULL);
	assert_int_equal(pool_claim_end(b[0], claim_id, 0), 0);
}

static uint32_t whole_share(const struct put_case *root, uint32_t k)
{
	/* every byte but the checksum segment's padding (R-POOL-33) */
	return (uint32_t)(root->img[k].length - 4096 + 8 * root->rec.tail_page_count);
}

/*
 * The RDMA-wait tests' claim, on the running manager r: A puts a root of
 * 96 pages, B claims it by RDMA with the fake device holding every
 * completion 100 ms, and the claim must be byte-exact and the loop must
 * not spin (at most one completion poll per 100 us for each of the two
 * connections, and a wake per frame). Stops the manager; returns how long
 * the claim took, in microseconds.
 */
static uint64_t rdma_claim_held(struct running *r)
{
	struct pool_client *a[WORLD], *b[WORLD];
	struct put_case root, *chain[1] = { &root };
	struct rank_job jobs[WORLD];
	uint64_t polls, start, elapsed_us, bound;

	case_make(&root, 9, 96, NULL, 90);
	rdma_clients_open(r, NULL, a, b);
	rdma_wait_active(a);
	rdma_wait_active(b);
	put_root(a, &root);
	fake_verbs_delay_completions(100);
	polls = fake_verbs_polls();
	start = sel_monotonic_ns();
	rdma_claim(b, &root, chain, jobs);
	elapsed_us = (sel_monotonic_ns() - start) / 1000u;
	polls = fake_verbs_polls() - polls;
	fake_verbs_delay_completions(0);
	for (uint32_t k = 0; k < WORLD; k++) {
		assert_int_equal(jobs[k].result, 0);
		assert_int_equal(jobs[k].verified_bytes, whole_share(&root, k));
	}
	bound = 2 * (elapsed_us / 100u) + 2000u;
	print_message("%llu completion polls in %llu ms (at most %llu)\n",
		      (unsigned long long)polls, (unsigned long long)(elapsed_us / 1000u),
		      (unsigned long long)bound);
	if (polls > bound)
		fail_msg("the manager polled %llu times in %llu ms: it spins",
			 (unsigned long long)polls, (unsigned long long)(elapsed_us / 1000u));
	rdma_finish(r, a, b, &root); /* the loop's result: 0 */
	return elapsed_us;
}
#endif

/* R-POOL-91 .. R-POOL-96: with --rdma and a device on both ends, every rank's claim windows arrive by RDMA WRITEs into its lent slots, byte-exact. */
static void test_pool_rdma_claim_byte_exact(void **state)
{
#ifdef SEL_HAVE_VERBS_H
	struct running r;
	struct pool_client *a[WORLD], *b[WORLD];
	struct put_case root, *chain[1] = { &root };
	struct pool_manager_stats st;
	struct rank_job jobs[WORLD];
	char first[512];

	(void)state;
	if (!rdma_begin())
		skip();
	manager_start_rdma(&r, true, NULL);
	case_make(&root, 9, 96, NULL, 90);
	rdma_clients_open(&r, NULL, a, b);
	rdma_wait_active(a);
	rdma_wait_active(b);
	/*
	 * verbs objects: the manager's arena registered once (context, domain,
	 * region) and a completion queue and queue pair per connection; each
	 * client its own five
	 */
	assert_int_equal(fake_verbs_live(), 3 + 2 * 2 * WORLD + 5 * 2 * WORLD);
	put_root(a, &root);
	pool_manager_stats(r.m, &st);
	assert_int_equal(st.rdma_windows, 0); /* puts stay on TCP */
	rdma_claim(b, &root, chain, jobs);
	for (uint32_t k = 0; k < WORLD; k++) {
		assert_int_equal(jobs[k].result, 0);
		assert_true(jobs[k].windows >= 4);
		assert_int_equal(jobs[k].verified_bytes, whole_share(&root, k));
	}
	pool_manager_stats(r.m, &st);
	assert_int_equal(st.rdma_connections, 2 * WORLD);
	assert_int_equal(st.rdma_windows, jobs[0].windows + jobs[1].windows);
	assert_int_equal(st.rdma_failures, 0);
	assert_int_equal(fake_verbs_writes(), (int)st.rdma_windows);
	/* a second claim on the same slots, byte-exact again */
	rdma_claim(b, &root, chain, jobs);
	for (uint32_t k = 0; k < WORLD; k++) {
		assert_int_equal(jobs[k].result, 0);
		assert_int_equal(jobs[k].verified_bytes, whole_share(&root, k));
	}
	/*
	 * one posted slot, taken late: the manager fills every lent slot and
	 * says CLAIM_END while windows still wait for the caller's slot; each
	 * is delivered before the end (R-POOL-96)
	 */
	{
		struct pool_chain_entry found[4];
		struct pool_claim_grant grant;
		struct rank_job j = { .c = b[1], .rank = 1, .chain = chain };
		size_t slot_bytes = pool_client_slot_bytes(b[1]);
		uint8_t *slot = tu_alloc(slot_bytes);
		uint32_t count = 0;
		uint64_t claim_id;
		struct pool_window w;
		int ret;

		assert_int_equal(pool_claim_begin(b[0], &root.rec.key, &claim_id), 0);
		POLL_UNTIL(pool_claim_poll(b[0], claim_id, &grant, found, 4, &count), ret);
		assert_int_equal(ret, 1);
		assert_int_equal(pool_share_pull(b[1], claim_id, found, count, 0, false), 0);
		assert_int_equal(pool_share_post(b[1], claim_id, slot, slot_bytes, NULL), 0);
		usleep(300 * 1000);
		while ((ret = pool_share_next(b[1], claim_id, &w, 5000)) == 1) {
			check_window(&j, &w);
			assert_int_equal(pool_share_post(b[1], claim_id, slot, slot_bytes, NULL),
					 0);
		}
		assert_int_equal(ret, 0);
		assert_int_equal(j.windows, jobs[1].windows);
		assert_int_equal(j.verified_bytes, whole_share(&root, 1));
		assert_int_equal(pool_share_end(b[1], claim_id), 0);
		assert_int_equal(pool_claim_end(b[0], claim_id, 0), 0);
		free(slot);
	}
	assert_int_equal(rdma_warnings(first, sizeof(first)), 0);
	rdma_finish(&r, a, b, &root);
#else
	(void)state;
	print_message("skipped: built without infiniband/verbs.h (no fake device)\n");
	skip();
#endif
}

/*
 * While RDMA WRITEs are in flight (completions held 100 ms by the fake
 * device) the manager's loop polls their completions at most once per
 * RDMA_POLL_US (100 us) per connection, sleeping between, instead of
 * spinning; the claim is byte-exact as ever.
 */
static void test_pool_rdma_waits_without_spinning(void **state)
{
#ifdef SEL_HAVE_VERBS_H
	struct running r;

	(void)state;
	if (!rdma_begin())
		skip();
	manager_start_rdma(&r, true, NULL);
	/* the completions were held: the claim waited for them */
	assert_true(rdma_claim_held(&r) >= 100000u);
#else
	(void)state;
	print_message("skipped: built without infiniband/verbs.h (no fake device)\n");
	skip();
#endif
}

#ifdef SEL_HAVE_VERBS_H
/* 1: epoll_pwait2 is ENOSYS on the manager's thread; -1: no seccomp to make it so. */
static _Atomic int pwait2_blocked;

/*
 * The manager's loop on a thread where epoll_pwait2 fails with ENOSYS
 * (seccomp, this thread only), as on kernels before 5.11.
 */
static void *run_thread_without_pwait2(void *arg)
{
	struct sock_filter code[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_epoll_pwait2, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = sizeof(code) / sizeof(code[0]), .filter = code };
	bool on = prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
		  syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) == 0;

	on = on && syscall(__NR_epoll_pwait2, -1, NULL, 1, NULL, NULL, 0) < 0 &&
	     errno == ENOSYS;
	atomic_store(&pwait2_blocked, on ? 1 : -1);
	return (void *)(intptr_t)pool_manager_run(arg);
}
#endif

/*
 * Where the kernel has no epoll_pwait2, the loop waits for RDMA
 * completions in ppoll on its epoll set instead: the claim is byte-exact,
 * the loop does not spin, and it does not end with -ENOSYS.
 */
static void test_pool_rdma_waits_without_epoll_pwait2(void **state)
{
#ifdef SEL_HAVE_VERBS_H
	struct running r;

	(void)state;
	if (!rdma_begin())
		skip();
	atomic_store(&pwait2_blocked, 0);
	manager_start_rdma_on(&r, true, NULL, run_thread_without_pwait2);
	while (atomic_load(&pwait2_blocked) == 0)
		usleep(1000);
	if (atomic_load(&pwait2_blocked) < 0) {
		manager_stop(&r);
		print_message("skipped: no seccomp filter on this thread\n");
		skip();
	}
	rdma_claim_held(&r); /* the loop's result: 0, not -ENOSYS */
#else
	(void)state;
	print_message("skipped: built without infiniband/verbs.h (no fake device)\n");
	skip();
#endif
}

#ifdef SEL_HAVE_VERBS_H
/* A failed WRITE, by its completion (post_fails false) or its post, on the third window. */
static void rdma_failed_write(bool post_fails)
{
	struct running r;
	struct pool_client *a[WORLD], *b[WORLD];
	struct put_case root, *chain[1] = { &root };
	struct pool_manager_stats st;
	struct rank_job jobs[WORLD];
	char first[512];
	uint64_t windows;
	int failed = 0;

	if (!rdma_begin())
		skip();
	manager_start_rdma(&r, true, NULL);
	case_make(&root, 9, 96, NULL, 90);
	rdma_clients_open(&r, NULL, a, b);
	rdma_wait_active(b);
	put_root(a, &root);
	if (post_fails)
		fake_verbs_post_fail_at(3); /* the third post fails */
	else
		fake_verbs_fail_write_at(3); /* the third WRITE half lands, then fails */
	rdma_claim(b, &root, chain, jobs);
	for (uint32_t k = 0; k < WORLD; k++) {
		if (jobs[k].result == -EIO)
			failed++;
		else
			assert_int_equal(jobs[k].result, 0);
	}
	assert_int_equal(failed, 1);
	pool_manager_stats(r.m, &st);
	assert_int_equal(st.rdma_failures, 1);
	windows = st.rdma_windows;
	/* the next claim: every rank by TCP, byte-exact, no more WRITEs */
	rdma_claim(b, &root, chain, jobs);
	for (uint32_t k = 0; k < WORLD; k++) {
		assert_int_equal(jobs[k].result, 0);
		assert_int_equal(jobs[k].verified_bytes, whole_share(&root, k));
	}
	pool_manager_stats(r.m, &st);
	assert_int_equal(st.rdma_windows, windows);
	/* said once by the manager and once by the rank that lost its claim */
	assert_int_equal(rdma_warnings(first, sizeof(first)), 2);
	assert_non_null(strstr(first, "claims use the TCP stream"));
	rdma_finish(&r, a, b, &root);
}
#endif

/* R-POOL-97: a WRITE that fails midway (its completion, or its post) ends that claim on its rank (the rank recomputes), says why once, and the next claim streams by TCP byte-exact. */
static void test_pool_rdma_failed_write_falls_back(void **state)
{
	(void)state;
#ifdef SEL_HAVE_VERBS_H
	rdma_failed_write(false);
	rdma_failed_write(true);
#else
	print_message("skipped: built without infiniband/verbs.h (no fake device)\n");
	skip();
#endif
}

/* R-POOL-90, R-POOL-92: without a device at the instance it lends nothing (one warning); without one at the manager, or without --rdma, nothing is offered; claims stream byte-exact. */
static void test_pool_rdma_no_device_streams(void **state)
{
#ifdef SEL_HAVE_VERBS_H
	(void)state;
	/* 0: no device at the instance; 1: none at the manager; 2: a manager without --rdma */
	for (int i = 0; i < 3; i++) {
		struct running r;
		struct pool_client *a[WORLD], *b[WORLD];
		struct put_case root, *chain[1] = { &root };
		struct pool_manager_stats st;
		struct rank_job jobs[WORLD];
		char first[512];

		if (!rdma_begin())
			skip();
		/* a device name no host has stands for "no device" at that end */
		manager_start_rdma(&r, i != 2, i == 1 ? "mlx5_9" : NULL);
		case_make(&root, 9, 96, NULL, 90);
		rdma_clients_open(&r, i == 0 ? "mlx5_9" : NULL, a, b);
		put_root(a, &root);
		rdma_claim(b, &root, chain, jobs);
		for (uint32_t k = 0; k < WORLD; k++) {
			assert_int_equal(jobs[k].result, 0);
			assert_int_equal(jobs[k].verified_bytes, whole_share(&root, k));
			assert_false(pool_client_rdma_active(b[k]));
		}
		pool_manager_stats(r.m, &st);
		assert_int_equal(st.rdma_connections, 0); /* no RDMA_LEND arrived */
		assert_int_equal(st.rdma_windows, 0);
		assert_int_equal(fake_verbs_writes(), 0);
		if (i == 0) {
			/* offered: each client said once why it lends nothing */
			assert_int_equal(rdma_warnings(first, sizeof(first)), 2 * WORLD);
			assert_non_null(strstr(first, "mlx5_9"));
		} else if (i == 1) {
			/* the manager said once; no offer, so the clients said nothing */
			assert_int_equal(rdma_warnings(first, sizeof(first)), 1);
			assert_non_null(strstr(first, "mlx5_9"));
		} else {
			/* never offered: no queue pair, region or context was made anywhere */
			assert_int_equal(fake_verbs_live(), 0);
			assert_int_equal(rdma_warnings(first, sizeof(first)), 0);
		}
		rdma_finish(&r, a, b, &root);
	}
#else
	(void)state;
	print_message("skipped: built without infiniband/verbs.h (no fake device)\n");
	skip();
#endif
}

/* R-POOL-92, R-POOL-95: RDMA_LEND without an offer, twice, or of slots too small for a window, and RDMA_FREE of a slot the rank does not hold, end only that connection. */
static void test_pool_rdma_out_of_place_refused(void **state)
{
#ifdef SEL_HAVE_VERBS_H
	struct pool_rdma_endpoint lend = { .qp_num = 0x99, .psn = 1, .ethernet = true,
					   .mtu_bytes = 4096, .slot_bytes = 64u << 10,
					   .slot_count = 2, .region_count = 1 };
	struct pool_rdma_endpoint offer;
	struct running r;
	struct trank t;
	uint8_t buf[POOL_RDMA_ENDPOINT_BYTES_MAX];
	uint32_t slot = 0;
	char why[WHY_BYTES];
	int n;

	(void)state;
	if (!rdma_begin())
		skip();
	lend.gid[10] = lend.gid[11] = 0xff;
	lend.gid[15] = 3;
	lend.regions[0] = (struct pool_rdma_region){ 0x10000, 128u << 10, 0x80000001 };
	/* a manager without --rdma offers nothing, and a lend is out of place */
	manager_start_rdma(&r, false, NULL);
	assert_int_equal(trank_open(&t, pool_manager_port(r.m), secret, 0, 0xa, 0), 0);
	n = pool_rdma_lend_encode(&lend, buf, sizeof(buf));
	tsend(&t, POOL_MSG_RDMA_LEND, buf, n, NULL, 0);
	assert_int_equal(trecv(&t), 1);
	assert_int_equal(t.rx.header.type, POOL_MSG_REFUSE);
	assert_int_equal(t.refused.reason, POOL_REFUSE_PROTOCOL);
	assert_non_null(strstr(t.refused.text, "without an RDMA_OFFER"));
	trank_close(&t);
	manager_stop(&r);
	/* with --rdma: the offer follows ATTACHED */
	manager_start_rdma(&r, true, NULL);
	assert_int_equal(trank_open(&t, pool_manager_port(r.m), secret, 0, 0xb, 0), 0);
	assert_int_equal(trecv(&t), 1);
	assert_int_equal(t.rx.header.type, POOL_MSG_RDMA_OFFER);
	assert_int_equal(pool_rdma_offer_decode(t.body, t.rx.body_length, &offer, why,
						sizeof(why)), 0);
	/* a slot the rank does not hold */
	n = pool_rdma_free_encode(&slot, 1, buf, sizeof(buf));
	tsend(&t, POOL_MSG_RDMA_FREE, buf, n, NULL, 0);
	assert_int_equal(trecv(&t), 1);
	assert_int_equal(t.refused.reason, POOL_REFUSE_PROTOCOL);
	assert_non_null(strstr(t.refused.text, "R-POOL-95"));
	trank_close(&t);
	/* slots that hold no window */
	assert_int_equal(trank_open(&t, pool_manager_port(r.m), secret, 0, 0xc, 0), 0);
	assert_int_equal(trecv(&t), 1);
	assert_int_equal(t.rx.header.type, POOL_MSG_RDMA_OFFER);
	lend.slot_bytes = 4096;
	lend.regions[0].bytes = 8192;
	n = pool_rdma_lend_encode(&lend, buf, sizeof(buf));
	tsend(&t, POOL_MSG_RDMA_LEND, buf, n, NULL, 0);
	assert_int_equal(trecv(&t), 1);
	assert_int_equal(t.refused.reason, POOL_REFUSE_PROTOCOL);
	assert_non_null(strstr(t.refused.text, "R-POOL-92"));
	trank_close(&t);
	/* a lend, then a second one */
	assert_int_equal(trank_open(&t, pool_manager_port(r.m), secret, 0, 0xd, 0), 0);
	assert_int_equal(trecv(&t), 1);
	lend.slot_bytes = 64u << 10;
	lend.regions[0].bytes = 128u << 10;
	n = pool_rdma_lend_encode(&lend, buf, sizeof(buf));
	tsend(&t, POOL_MSG_RDMA_LEND, buf, n, NULL, 0);
	tsend(&t, POOL_MSG_RDMA_LEND, buf, n, NULL, 0);
	assert_int_equal(trecv(&t), 1);
	assert_int_equal(t.refused.reason, POOL_REFUSE_PROTOCOL);
	assert_non_null(strstr(t.refused.text, "sent twice"));
	trank_close(&t);
	manager_stop(&r);
	rdma_end();
#else
	(void)state;
	print_message("skipped: built without infiniband/verbs.h (no fake device)\n");
	skip();
#endif
}

/* R-POOL-96: a window whose lent slot holds other bytes than the manager wrote is never delivered: that rank's claim fails, the other's is byte-exact, RDMA stays on. */
static void test_pool_rdma_corrupt_slot_never_delivered(void **state)
{
#ifdef SEL_HAVE_VERBS_H
	struct running r;
	struct pool_client *a[WORLD], *b[WORLD];
	struct put_case root, *chain[1] = { &root };
	struct pool_manager_stats st;
	struct rank_job jobs[WORLD];
	char first[512];
	int failed = 0;

	(void)state;
	if (!rdma_begin())
		skip();
	manager_start_rdma(&r, true, NULL);
	case_make(&root, 9, 96, NULL, 90);
	rdma_clients_open(&r, NULL, a, b);
	rdma_wait_active(b);
	put_root(a, &root);
	fake_verbs_corrupt_at(3);
	/* check_window asserts every delivered byte against the image */
	rdma_claim(b, &root, chain, jobs);
	for (uint32_t k = 0; k < WORLD; k++) {
		if (jobs[k].result == SEL_ECHECKSUM)
			failed++;
		else
			assert_int_equal(jobs[k].result, 0);
	}
	assert_int_equal(failed, 1);
	/* not a failed transfer: RDMA stays on, and the next claim is whole */
	rdma_claim(b, &root, chain, jobs);
	for (uint32_t k = 0; k < WORLD; k++) {
		assert_int_equal(jobs[k].result, 0);
		assert_int_equal(jobs[k].verified_bytes, whole_share(&root, k));
		assert_true(pool_client_rdma_active(b[k]));
	}
	pool_manager_stats(r.m, &st);
	assert_int_equal(st.rdma_failures, 0);
	assert_int_equal(rdma_warnings(first, sizeof(first)), 0);
	rdma_finish(&r, a, b, &root);
#else
	(void)state;
	print_message("skipped: built without infiniband/verbs.h (no fake device)\n");
	skip();
#endif
}

/* R-POOL-90, R-POOL-92 under RLIMIT_MEMLOCK: a manager whose arena it cannot hold says so once and offers nothing; a rank lends as many slots as it holds. */
static void test_pool_rdma_memlock(void **state)
{
#ifdef SEL_HAVE_VERBS_H
	struct running r;
	struct pool_client *a[WORLD], *b[WORLD];
	struct put_case root, *chain[1] = { &root };
	struct pool_manager_stats st;
	struct rank_job jobs[WORLD];
	struct rlimit saved, low;
	char first[512];

	(void)state;
	if (!rdma_begin())
		skip();
	assert_int_equal(getrlimit(RLIMIT_MEMLOCK, &saved), 0);
	low = saved;
	/* the manager's 8 MiB arena does not fit */
	low.rlim_cur = 1u << 20;
	assert_int_equal(setrlimit(RLIMIT_MEMLOCK, &low), 0);
	manager_start_rdma(&r, true, NULL);
	assert_int_equal(setrlimit(RLIMIT_MEMLOCK, &saved), 0);
	assert_int_equal(rdma_warnings(first, sizeof(first)), 1);
	assert_non_null(strstr(first, "RLIMIT_MEMLOCK"));
	client_open_rdma(&r, 0, 0xa, NULL, &a[0]);
	usleep(100 * 1000);
	assert_false(pool_client_rdma_active(a[0]));
	assert_int_equal(fake_verbs_live(), 0); /* nothing registered, nothing offered */
	pool_client_close(a[0]);
	manager_stop(&r);
	rdma_end();
	/* the ranks hold two slots' worth of 64 KiB (of the four asked for) */
	assert_true(rdma_begin());
	manager_start_rdma(&r, true, NULL);
	low.rlim_cur = 2 * (64u << 10);
	assert_int_equal(setrlimit(RLIMIT_MEMLOCK, &low), 0);
	case_make(&root, 9, 96, NULL, 90);
	rdma_clients_open(&r, NULL, a, b);
	rdma_wait_active(b);
	assert_int_equal(setrlimit(RLIMIT_MEMLOCK, &saved), 0);
	put_root(a, &root);
	rdma_claim(b, &root, chain, jobs);
	for (uint32_t k = 0; k < WORLD; k++) {
		assert_int_equal(jobs[k].result, 0);
		assert_int_equal(jobs[k].verified_bytes, whole_share(&root, k));
	}
	pool_manager_stats(r.m, &st);
	assert_int_equal(st.rdma_windows, jobs[0].windows + jobs[1].windows);
	assert_int_equal(rdma_warnings(first, sizeof(first)), 0);
	rdma_finish(&r, a, b, &root);
#else
	(void)state;
	print_message("skipped: built without infiniband/verbs.h (no fake device)\n");
	skip();
#endif
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pool_put_then_claim_byte_exact),
		cmocka_unit_test(test_pool_local_claim_grant_brings_places),
		cmocka_unit_test(test_pool_overlap_fast_path_copies_once),
		cmocka_unit_test(test_pool_overlap_stale_place_redone_or_refused),
		cmocka_unit_test(test_pool_overlap_moved_place_redone),
		cmocka_unit_test(test_pool_overlap_disk_tier_waits_for_grant),
		cmocka_unit_test(test_pool_other_scope_never_matches),
		cmocka_unit_test(test_pool_strangers_refused),
		cmocka_unit_test(test_pool_strangers_make_room),
		cmocka_unit_test(test_pool_stale_arenas_removed),
		cmocka_unit_test(test_pool_failed_puts_leave_nothing),
		cmocka_unit_test(test_pool_failed_put_window_goes_nowhere),
		cmocka_unit_test(test_pool_expiry_and_lru),
		cmocka_unit_test(test_pool_expiry_sweep_bounded),
		cmocka_unit_test(test_pool_expiry_chain_in_one_sweep),
		cmocka_unit_test(test_pool_burst_walks_deadlines_rarely),
		cmocka_unit_test(test_pool_many_live_ids_resolve),
		cmocka_unit_test(test_pool_stop_says_bye),
		cmocka_unit_test(test_pool_drain_waits_for_claims),
		cmocka_unit_test(test_pool_client_end_to_end),
		cmocka_unit_test(test_pool_exports_asked_of_holders),
		cmocka_unit_test(test_pool_export_unanswered_forgotten),
		cmocka_unit_test(test_pool_share_end_mid_stream_returns_slots),
		cmocka_unit_test(test_pool_disk_tier_and_restart),
		cmocka_unit_test(test_pool_disk_restart_empty_scope),
		cmocka_unit_test(test_pool_rdma_claim_byte_exact),
		cmocka_unit_test(test_pool_rdma_waits_without_spinning),
		cmocka_unit_test(test_pool_rdma_waits_without_epoll_pwait2),
		cmocka_unit_test(test_pool_rdma_failed_write_falls_back),
		cmocka_unit_test(test_pool_rdma_no_device_streams),
		cmocka_unit_test(test_pool_rdma_corrupt_slot_never_delivered),
		cmocka_unit_test(test_pool_rdma_out_of_place_refused),
		cmocka_unit_test(test_pool_rdma_memlock),
		cmocka_unit_test(test_pool_disk_limit_evicts_lru),
		cmocka_unit_test(test_pool_disk_spill_syncs),
		cmocka_unit_test(test_pool_disk_thread_keeps_loop_answering),
		cmocka_unit_test(test_pool_disk_close_takes_late_load),
		cmocka_unit_test(test_pool_disk_spill_fails_pinned),
	};

	return cmocka_run_group_tests_name("pool", tests, setup, NULL);
}
