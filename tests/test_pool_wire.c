/*
 * Pool wire protocol (pool/wire.h, pool/PROTOCOL.md R-POOL-*): the grammar
 * on the cluster's header, every message's round trip and its rejections,
 * the MACs against Python's hashlib, frame tags binding direction, place and
 * body, and the receiver over a socketpair in 1-byte pieces, with window
 * data read straight to its place or dropped.
 */
#include "tests/testutil.h"

#include "common/base.h"
#include "pool/wire.h"
#include "selene/selene.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>
#include <xxhash.h>

#define WHY_BYTES 256

static uint8_t body_buf[POOL_CONTROL_BODY_BYTES_MAX];

static void fill_bytes(uint8_t *p, size_t n, uint8_t start)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(start + i);
}

static void hex_to(uint8_t *out, const char *hex, size_t n)
{
	assert_true(sel_hex_decode(out, hex, n));
}

static struct rec_key key_of(uint64_t consumed, uint8_t seed)
{
	struct rec_key k = { .consumed = consumed };

	fill_bytes(k.digest.bytes, REC_DIGEST_BYTES, seed);
	return k;
}

/* Pool frames use the cluster's header with SELP and version 1; SELN fails (R-POOL-2, R-POOL-3). */
static void test_pool_wire_grammar(void **state)
{
	uint8_t header[CLUSTER_FRAME_HEADER_BYTES], tag[POOL_TAG_BYTES], body[32];
	struct cluster_frame_header h;
	char why[WHY_BYTES];

	(void)state;
	fill_bytes(body, sizeof(body), 1);
	pool_frame_build(NULL, POOL_TO_MANAGER, 0, POOL_MSG_HELLO, body, 32, NULL, 0, header, tag);
	assert_memory_equal(header, "SELP", 4);
	assert_int_equal(sel_get_le32(header + 4) & 0xffff, POOL_VERSION);
	assert_int_equal(cluster_frame_header_decode_in(&pool_grammar, header, &h, why,
							sizeof(why)), 0);
	assert_int_equal(h.type, POOL_MSG_HELLO);
	assert_int_equal(h.payload_length, 32);
	/* a pool frame is not a cluster frame, and the reverse */
	assert_int_equal(cluster_frame_header_decode(header, &h, why, sizeof(why)), SEL_EPROTO);
	assert_non_null(strstr(why, "R-WIRE-2"));
	cluster_frame_header_encode(header, CLUSTER_MSG_BYE, 0, NULL, 0);
	assert_int_equal(cluster_frame_header_decode_in(&pool_grammar, header, &h, why,
							sizeof(why)), SEL_EPROTO);
	assert_non_null(strstr(why, "R-WIRE-2"));
	/* an unknown type and a wrong version (R-POOL-3) */
	pool_frame_build(NULL, POOL_TO_MANAGER, 0, POOL_MSG_HELLO, body, 32, NULL, 0, header, tag);
	header[6] = POOL_MSG_TYPE_LAST + 1;
	sel_put_le64(header + 32, 0);
	/* re-seal the header checksum so the type check is reached */
	sel_put_le64(header + 32, XXH3_64bits(header, 32));
	assert_int_equal(cluster_frame_header_decode_in(&pool_grammar, header, &h, why,
							sizeof(why)), SEL_EPROTO);
	assert_non_null(strstr(why, "unknown message type"));
	assert_string_equal(cluster_grammar_msg_name(&pool_grammar, POOL_MSG_CLAIM_WINDOW),
			    "CLAIM_WINDOW");
	/* the numbers between CLAIM_LOCAL and HOLDS are not types (R-POOL-3) */
	for (uint16_t t = POOL_MSG_CLAIM_LOCAL + 1; t < POOL_MSG_HOLDS; t++) {
		header[6] = (uint8_t)t;
		sel_put_le64(header + 32, XXH3_64bits(header, 32));
		assert_int_equal(cluster_frame_header_decode_in(&pool_grammar, header, &h, why,
								sizeof(why)), SEL_EPROTO);
		assert_non_null(strstr(why, "unknown message type"));
		assert_false(pool_type_tagged(t));
		assert_string_equal(cluster_grammar_msg_name(&pool_grammar, t), "unknown");
	}
	assert_string_equal(cluster_grammar_msg_name(&pool_grammar, POOL_MSG_EXPORT), "EXPORT");
	assert_true(pool_type_tagged(POOL_MSG_EXPORT_END));
	/* nor those between EXPORT_END and the RDMA messages */
	for (uint16_t t = POOL_MSG_EXPORT_END + 1; t < POOL_MSG_RDMA_OFFER; t++) {
		header[6] = (uint8_t)t;
		sel_put_le64(header + 32, XXH3_64bits(header, 32));
		assert_int_equal(cluster_frame_header_decode_in(&pool_grammar, header, &h, why,
								sizeof(why)), SEL_EPROTO);
		assert_false(pool_type_tagged(t));
	}
	assert_string_equal(cluster_grammar_msg_name(&pool_grammar, POOL_MSG_RDMA_WINDOW),
			    "RDMA_WINDOW");
}

/* Payload bounds are checked on the header alone (R-POOL-4). */
static void test_pool_wire_bounds(void **state)
{
	uint8_t header[CLUSTER_FRAME_HEADER_BYTES];
	struct cluster_frame_header h;
	char why[WHY_BYTES];

	(void)state;
	for (uint16_t t = 1; t <= POOL_MSG_TYPE_LAST; t++) {
		const struct cluster_msg_info *info = &pool_grammar.types[t];

		if (!info->name)
			continue; /* a gap (R-POOL-3) */
		assert_true(info->bytes_min <= info->bytes_max);
		assert_true(info->bytes_max <= POOL_FRAME_PAYLOAD_BYTES_MAX);
		cluster_frame_header_prefix(&pool_grammar, header, t, 0, info->bytes_max);
		sel_put_le32(header + 8, info->bytes_max + 1);
		sel_put_le64(header + 24, 0);
		sel_put_le64(header + 32, XXH3_64bits(header, 32));
		assert_int_equal(cluster_frame_header_decode_in(&pool_grammar, header, &h, why,
								sizeof(why)), SEL_EPROTO);
		assert_non_null(strstr(why, "R-WIRE-6"));
	}
}

/* MACs and the connection key equal Python hashlib's (R-POOL-10 .. R-POOL-12). */
static void test_pool_wire_mac_vectors(void **state)
{
	uint8_t k[32], sn[32], cn[32], facts[16], prefix[24], mac[32], want[32], kc[32];
	uint8_t tag[16], want_tag[16];

	(void)state;
	fill_bytes(k, 32, 0);
	fill_bytes(sn, 32, 0x40);
	fill_bytes(cn, 32, 0x80);
	fill_bytes(facts, 16, 0xc0);
	fill_bytes(prefix, 24, 0);
	pool_proof_mac(k, sn, cn, mac);
	hex_to(want, "3d56a27600bc04b22d12f42cb497deefb74f39dd62bd0c2d40324237e669026a", 32);
	assert_memory_equal(mac, want, 32);
	pool_welcome_mac(k, cn, sn, facts, sizeof(facts), mac);
	hex_to(want, "6f99121aa110ccecd44c1ba1fc34f12bd717a90373c5df4216e8d02363f76122", 32);
	assert_memory_equal(mac, want, 32);
	pool_connection_key(k, cn, sn, kc);
	hex_to(want, "4579963b9b90fc0116de740244f817121ac79b3f608e0fdb1e6578cd8fa6a6ee", 32);
	assert_memory_equal(kc, want, 32);
	pool_frame_tag(kc, POOL_TO_RANK, prefix, (const uint8_t *)"abc", 3, tag);
	hex_to(want_tag, "a7e7d5595260877e969f93fc56b717b6", 16);
	assert_memory_equal(tag, want_tag, 16);
	/* the direction, the place and the body each change the tag (R-POOL-12) */
	pool_frame_tag(kc, POOL_TO_MANAGER, prefix, (const uint8_t *)"abc", 3, tag);
	assert_false(pool_tag_equal(tag, want_tag));
	prefix[16] = 1; /* another sequence number */
	pool_frame_tag(kc, POOL_TO_RANK, prefix, (const uint8_t *)"abc", 3, tag);
	assert_false(pool_tag_equal(tag, want_tag));
	prefix[16] = 0;
	pool_frame_tag(kc, POOL_TO_RANK, prefix, (const uint8_t *)"abd", 3, tag);
	assert_false(pool_tag_equal(tag, want_tag));
	/* the proof is not the welcome: the domains differ */
	pool_proof_mac(k, cn, sn, mac);
	pool_welcome_mac(k, cn, sn, NULL, 0, want);
	assert_memory_not_equal(mac, want, 32);
}

static struct pool_welcome sample_welcome(void)
{
	struct pool_welcome w = { .arena_generation = 3, .arena_bytes = 1 << 20,
				  .window_bytes = POOL_WINDOW_BYTES_DEFAULT, .claims_max = 16,
				  .puts_max = 8, .claim_setup_ms = 10000 };

	fill_bytes(w.mac, 32, 9);
	fill_bytes(w.arena_id, 16, 1);
	strcpy(w.name, "pool-a");
	strcpy(w.arena_path, "/dev/shm/selene-pool-a");
	return w;
}

/* WELCOME round trip and its rules: name, arena path, window bytes (R-POOL-13). */
static void test_pool_wire_welcome(void **state)
{
	struct pool_welcome w = sample_welcome(), out, bad;
	uint8_t buf[512];
	char why[WHY_BYTES];
	int n;

	(void)state;
	n = pool_welcome_encode(&w, buf, sizeof(buf));
	assert_int_equal(n, POOL_WELCOME_FIXED_BYTES + 6 + 22);
	assert_int_equal(pool_welcome_decode(buf, (uint32_t)n, &out, why, sizeof(why)), 0);
	assert_memory_equal(&out, &w, offsetof(struct pool_welcome, name));
	assert_string_equal(out.name, "pool-a");
	assert_string_equal(out.arena_path, "/dev/shm/selene-pool-a");
	assert_int_equal(pool_welcome_decode(buf, (uint32_t)n - 1, &out, why, sizeof(why)),
			 SEL_EPROTO);
	buf[n] = 0;
	assert_int_equal(pool_welcome_decode(buf, (uint32_t)n + 1, &out, why, sizeof(why)),
			 SEL_EPROTO);
	assert_non_null(strstr(why, "trailing"));
	bad = w;
	bad.window_bytes = POOL_WINDOW_BYTES_MAX + 1;
	assert_int_equal(pool_welcome_encode(&bad, buf, sizeof(buf)), -EINVAL);
	bad = w;
	strcpy(bad.arena_path, "/tmp/arena");
	assert_int_equal(pool_welcome_encode(&bad, buf, sizeof(buf)), -EINVAL);
	bad = w;
	bad.arena_bytes = 0; /* no arena, but a path */
	assert_int_equal(pool_welcome_encode(&bad, buf, sizeof(buf)), -EINVAL);
	bad.arena_path[0] = '\0';
	assert_true(pool_welcome_encode(&bad, buf, sizeof(buf)) > 0);
	bad = w;
	bad.name[0] = '\0';
	assert_int_equal(pool_welcome_encode(&bad, buf, sizeof(buf)), -EINVAL);
	bad = w;
	memset(bad.arena_id, 0, sizeof(bad.arena_id));
	assert_int_equal(pool_welcome_encode(&bad, buf, sizeof(buf)), -EINVAL);
	assert_int_equal(pool_welcome_encode(&w, buf, 40), -ENOSPC);
	/* a control byte in the name is refused on decode (R-WIRE-13) */
	n = pool_welcome_encode(&w, buf, sizeof(buf));
	buf[POOL_WELCOME_OFF_NAME_LENGTH + 2] = 0x07;
	assert_int_equal(pool_welcome_decode(buf, (uint32_t)n, &out, why, sizeof(why)),
			 SEL_EPROTO);
	assert_non_null(strstr(why, "printable"));
}

/* REFUSE: reasons 1 .. 7 and a printable text (R-POOL-9). */
static void test_pool_wire_refuse(void **state)
{
	struct pool_refuse r = { .reason = POOL_REFUSE_SCOPE }, out;
	uint8_t buf[300];
	char why[WHY_BYTES];
	int n;

	(void)state;
	strcpy(r.text, "layout differs");
	n = pool_refuse_encode(&r, buf, sizeof(buf));
	assert_int_equal(n, 6 + 14);
	assert_int_equal(pool_refuse_decode(buf, (uint32_t)n, &out, why, sizeof(why)), 0);
	assert_int_equal(out.reason, POOL_REFUSE_SCOPE);
	assert_string_equal(out.text, "layout differs");
	assert_string_equal(pool_refuse_reason_name(POOL_REFUSE_AUTH), "auth");
	sel_put_le32(buf, 0);
	assert_int_equal(pool_refuse_decode(buf, (uint32_t)n, &out, why, sizeof(why)),
			 SEL_EPROTO);
	sel_put_le32(buf, POOL_REFUSE_REASON_LAST + 1);
	assert_int_equal(pool_refuse_decode(buf, (uint32_t)n, &out, why, sizeof(why)),
			 SEL_EPROTO);
	r.reason = 0;
	assert_int_equal(pool_refuse_encode(&r, buf, sizeof(buf)), -EINVAL);
}

static void sample_attach(struct pool_attach *a, uint32_t world)
{
	memset(a, 0, sizeof(*a));
	a->rank = world - 1;
	a->world_size = world;
	fill_bytes(a->instance_id, 16, 0x11);
	fill_bytes(a->namespace_id.bytes, 32, 0x22);
	fill_bytes(a->layout_digest.bytes, 16, 0x33);
	a->page_tokens = 16;
	a->plane_count = 2;
	for (uint32_t i = 0; i < world; i++) {
		a->page_bytes[i] = 8192;
		a->row_bytes[i] = 4096;
	}
}

/* ATTACH round trip at 1 and 1024 ranks, its rules, and the scope (R-POOL-14, R-POOL-16). */
static void test_pool_wire_attach_and_scope(void **state)
{
	static struct pool_attach a, out, b;
	static uint8_t buf[POOL_CONTROL_BODY_BYTES_MAX], buf2[POOL_CONTROL_BODY_BYTES_MAX];
	uint8_t s1[32], s2[32];
	char why[WHY_BYTES];
	int n, n2;

	(void)state;
	sample_attach(&a, 1);
	n = pool_attach_encode(&a, buf, sizeof(buf));
	assert_int_equal(n, 84 + 16);
	assert_int_equal(pool_attach_decode(buf, (uint32_t)n, &out, why, sizeof(why)), 0);
	assert_memory_equal(&out, &a, sizeof(a));
	sample_attach(&a, REC_WORLD_SIZE_MAX);
	n = pool_attach_encode(&a, buf, sizeof(buf));
	assert_int_equal(n, 84 + 16 * REC_WORLD_SIZE_MAX);
	assert_int_equal(pool_attach_decode(buf, (uint32_t)n, &out, why, sizeof(why)), 0);
	assert_int_equal(out.row_bytes[REC_WORLD_SIZE_MAX - 1], 4096);
	assert_int_equal(pool_attach_decode(buf, (uint32_t)n - 16, &out, why, sizeof(why)),
			 SEL_EPROTO);
	/* rank out of range, flags, zero instance */
	sample_attach(&a, 2);
	a.rank = 2;
	assert_int_equal(pool_attach_encode(&a, buf, sizeof(buf)), -EINVAL);
	a.rank = 0;
	n = pool_attach_encode(&a, buf, sizeof(buf));
	sel_put_le32(buf + 80, 1);
	assert_int_equal(pool_attach_decode(buf, (uint32_t)n, &out, why, sizeof(why)),
			 SEL_EPROTO);
	sel_put_le32(buf + 80, 0);
	memset(buf + 8, 0, 16);
	assert_int_equal(pool_attach_decode(buf, (uint32_t)n, &out, why, sizeof(why)),
			 SEL_EPROTO);
	/* the scope: ranks of one instance agree; name, layout, sizes each split it */
	sample_attach(&a, 2);
	b = a;
	b.rank = 0;
	memset(b.instance_id, 0x99, 16); /* another instance, same layout */
	n = pool_attach_encode(&a, buf, sizeof(buf));
	n2 = pool_attach_encode(&b, buf2, sizeof(buf2));
	pool_scope_of_attach("p", buf, (uint32_t)n, s1);
	pool_scope_of_attach("p", buf2, (uint32_t)n2, s2);
	assert_memory_equal(s1, s2, 32);
	pool_scope_of_attach("q", buf2, (uint32_t)n2, s2);
	assert_memory_not_equal(s1, s2, 32);
	b.row_bytes[1] = 8192;
	n2 = pool_attach_encode(&b, buf2, sizeof(buf2));
	pool_scope_of_attach("p", buf2, (uint32_t)n2, s2);
	assert_memory_not_equal(s1, s2, 32);
	b = a;
	b.layout_digest.bytes[0] ^= 1;
	n2 = pool_attach_encode(&b, buf2, sizeof(buf2));
	pool_scope_of_attach("p", buf2, (uint32_t)n2, s2);
	assert_memory_not_equal(s1, s2, 32);
}

/* LOOKUP keys are 1 .. 4096, valid, strictly shorter each (R-POOL-20). */
static void test_pool_wire_lookup(void **state)
{
	static struct rec_key keys[POOL_LOOKUP_KEYS_MAX];
	static uint8_t buf[POOL_CONTROL_BODY_BYTES_MAX];
	struct pool_lookup_view v;
	struct rec_key k;
	char why[WHY_BYTES];
	int n;

	(void)state;
	for (uint32_t i = 0; i < POOL_LOOKUP_KEYS_MAX; i++)
		keys[i] = key_of(100000 - i, (uint8_t)i);
	n = pool_lookup_encode(7, keys, POOL_LOOKUP_KEYS_MAX, buf, sizeof(buf));
	assert_int_equal(n, 12 + 24 * POOL_LOOKUP_KEYS_MAX);
	assert_int_equal(pool_lookup_decode(buf, (uint32_t)n, &v, why, sizeof(why)), 0);
	assert_int_equal(v.ticket, 7);
	pool_lookup_view_key(&v, 4095, &k);
	assert_memory_equal(&k, &keys[4095], sizeof(k));
	assert_int_equal(pool_lookup_encode(7, keys, POOL_LOOKUP_KEYS_MAX + 1, buf, sizeof(buf)),
			 SEL_ETOOBIG);
	assert_int_equal(pool_lookup_encode(0, keys, 1, buf, sizeof(buf)), -EINVAL);
	keys[1].consumed = keys[0].consumed; /* not shorter */
	assert_int_equal(pool_lookup_encode(1, keys, 2, buf, sizeof(buf)), -EINVAL);
	n = pool_lookup_encode(1, keys, 1, buf, sizeof(buf));
	assert_int_equal(n, 36);
	/* hand-made: an equal second key, a zero key, a count of 0 */
	memcpy(buf + 36, buf + 12, 24);
	sel_put_le32(buf + 8, 2);
	assert_int_equal(pool_lookup_decode(buf, 60, &v, why, sizeof(why)), SEL_EPROTO);
	assert_non_null(strstr(why, "R-POOL-20"));
	sel_put_le64(buf + 12, 0);
	sel_put_le32(buf + 8, 1);
	assert_int_equal(pool_lookup_decode(buf, 36, &v, why, sizeof(why)), SEL_EPROTO);
	sel_put_le32(buf + 8, 0);
	assert_int_equal(pool_lookup_decode(buf, 12, &v, why, sizeof(why)), SEL_EPROTO);
}

static void sample_chain(struct pool_chain_entry *c, uint32_t count)
{
	uint32_t first = 0;

	for (uint32_t i = 0; i < count; i++) {
		c[i].key = key_of(64 * (i + 1), (uint8_t)i);
		c[i].first_page_index = first;
		c[i].tail_page_count = 4;
		c[i].row = i + 1 == count;
		c[i].stamp = 100 + i;
		c[i].place = (struct pool_place){ .offset = 4096ull * (i + 1), .bytes = 8192 };
		first += 4;
	}
}

/* ANSWER and CLAIMED chains: root first, pages contiguous, ending with a row (R-POOL-21, R-POOL-31). */
static void test_pool_wire_chains(void **state)
{
	static struct pool_chain_entry chain[POOL_CHAIN_RECORDS_MAX];
	static uint8_t buf[POOL_CONTROL_BODY_BYTES_MAX];
	struct pool_chain_view v;
	struct pool_chain_entry e;
	struct pool_claimed cd = { .claim_id = 5, .result = 0, .deadline_ms = 10100 }, cout;
	uint64_t ticket;
	char why[WHY_BYTES];
	int n;

	(void)state;
	sample_chain(chain, POOL_CHAIN_RECORDS_MAX);
	n = pool_answer_encode(3, chain, POOL_CHAIN_RECORDS_MAX, buf, sizeof(buf));
	assert_int_equal(n, 12 + 57 * POOL_CHAIN_RECORDS_MAX);
	assert_int_equal(pool_answer_decode(buf, (uint32_t)n, &ticket, &v, why, sizeof(why)), 0);
	pool_chain_view_entry(&v, POOL_CHAIN_RECORDS_MAX - 1, &e);
	assert_memory_equal(&e.key, &chain[POOL_CHAIN_RECORDS_MAX - 1].key, sizeof(e.key));
	assert_true(e.row);
	/* an empty answer: no match */
	n = pool_answer_encode(3, NULL, 0, buf, sizeof(buf));
	assert_int_equal(pool_answer_decode(buf, (uint32_t)n, &ticket, &v, why, sizeof(why)), 0);
	assert_int_equal(v.count, 0);
	/* a gap in pages, a page-only end, a key not longer */
	sample_chain(chain, 3);
	chain[1].first_page_index = 5;
	assert_int_equal(pool_answer_encode(3, chain, 3, buf, sizeof(buf)), -EINVAL);
	sample_chain(chain, 3);
	chain[2].row = false;
	assert_int_equal(pool_answer_encode(3, chain, 3, buf, sizeof(buf)), -EINVAL);
	sample_chain(chain, 3);
	n = pool_answer_encode(3, chain, 3, buf, sizeof(buf));
	buf[12 + 57 + 32] = 2; /* row flag */
	assert_int_equal(pool_answer_decode(buf, (uint32_t)n, &ticket, &v, why, sizeof(why)),
			 SEL_EPROTO);
	n = pool_answer_encode(3, chain, 3, buf, sizeof(buf));
	sel_put_le64(buf + 12 + 57, 64); /* second key no longer than the first */
	assert_int_equal(pool_answer_decode(buf, (uint32_t)n, &ticket, &v, why, sizeof(why)),
			 SEL_EPROTO);
	/* CLAIMED: a chain with result 0, none with a refusal */
	n = pool_claimed_encode(&cd, chain, 3, buf, sizeof(buf));
	assert_int_equal(pool_claimed_decode(buf, (uint32_t)n, &cout, &v, why, sizeof(why)), 0);
	assert_int_equal(cout.deadline_ms, 10100);
	assert_int_equal(v.count, 3);
	cd.result = -ENOENT;
	assert_int_equal(pool_claimed_encode(&cd, chain, 3, buf, sizeof(buf)), -EINVAL);
	n = pool_claimed_encode(&cd, NULL, 0, buf, sizeof(buf));
	assert_int_equal(pool_claimed_decode(buf, (uint32_t)n, &cout, &v, why, sizeof(why)), 0);
	assert_int_equal(cout.result, -ENOENT);
	sel_put_le32(buf + 8, (uint32_t)-5000); /* not an errno, not SEL_E* */
	assert_int_equal(pool_claimed_decode(buf, (uint32_t)n, &cout, &v, why, sizeof(why)),
			 SEL_EPROTO);
}

/* ANSWER's places and stamps, CLAIMED's stamps: carried, and bad ones refused both ways (R-POOL-22, R-POOL-36). */
static void test_pool_wire_chain_stamps(void **state)
{
	static struct pool_chain_entry chain[4];
	static uint8_t buf[POOL_CONTROL_BODY_BYTES_MAX];
	const struct cluster_msg_info *answer = &pool_grammar.types[POOL_MSG_ANSWER];
	const struct cluster_msg_info *claimed = &pool_grammar.types[POOL_MSG_CLAIMED];
	struct pool_claimed cd = { .claim_id = 5, .deadline_ms = 100 }, cout;
	struct pool_chain_view v;
	struct pool_chain_entry e;
	const struct pool_place bad[] = {
		{ .offset = 0, .bytes = 8192 },            /* inside the arena header */
		{ .offset = 4096 + 512, .bytes = 8192 },   /* not 4096-aligned */
		{ .offset = 8192, .bytes = 0 },            /* empty */
		{ .offset = 8192, .bytes = UINT64_MAX - 4095 }, /* its end overflows */
	};
	uint64_t ticket;
	char why[WHY_BYTES];
	int n;

	(void)state;
	assert_int_equal(answer->bytes_max, 12 + 57 * POOL_CHAIN_RECORDS_MAX + 16);
	assert_int_equal(claimed->bytes_max, 20 + 41 * POOL_CHAIN_RECORDS_MAX + 16);
	/* ANSWER: the place and stamp of each entry; a disk-tier record has neither */
	sample_chain(chain, 3);
	chain[1].stamp = 0;
	chain[1].place = (struct pool_place){ 0, 0 };
	n = pool_answer_encode(3, chain, 3, buf, sizeof(buf));
	assert_int_equal(n, 12 + 57 * 3);
	assert_int_equal(sel_get_le64(buf + 12 + 33), 4096);
	assert_int_equal(sel_get_le64(buf + 12 + 41), 8192);
	assert_int_equal(sel_get_le64(buf + 12 + 49), 100);
	assert_int_equal(pool_answer_decode(buf, (uint32_t)n, &ticket, &v, why, sizeof(why)), 0);
	for (uint32_t i = 0; i < 3; i++) {
		pool_chain_view_entry(&v, i, &e);
		assert_int_equal(e.stamp, chain[i].stamp);
		assert_int_equal(e.place.offset, chain[i].place.offset);
		assert_int_equal(e.place.bytes, chain[i].place.bytes);
	}
	/* a place without a stamp, or a stamp without a place */
	chain[1].place = (struct pool_place){ 8192, 8192 };
	assert_int_equal(pool_answer_encode(3, chain, 3, buf, sizeof(buf)), -EINVAL);
	sample_chain(chain, 3);
	n = pool_answer_encode(3, chain, 3, buf, sizeof(buf));
	sel_put_le64(buf + 12 + 57 + 49, 0); /* entry 1's stamp 0, its place kept */
	assert_int_equal(pool_answer_decode(buf, (uint32_t)n, &ticket, &v, why, sizeof(why)),
			 SEL_EPROTO);
	assert_non_null(strstr(why, "R-POOL-22"));
	for (uint32_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		sample_chain(chain, 3);
		chain[2].place = bad[k];
		assert_int_equal(pool_answer_encode(3, chain, 3, buf, sizeof(buf)), -EINVAL);
		chain[2].place = (struct pool_place){ 8192, 8192 };
		n = pool_answer_encode(3, chain, 3, buf, sizeof(buf));
		assert_true(n > 0);
		sel_put_le64(buf + 12 + 2 * 57 + 33, bad[k].offset);
		sel_put_le64(buf + 12 + 2 * 57 + 41, bad[k].bytes);
		assert_int_equal(pool_answer_decode(buf, (uint32_t)n, &ticket, &v, why,
						    sizeof(why)), SEL_EPROTO);
	}
	/* CLAIMED: a stamp per entry, never 0; no place travels */
	sample_chain(chain, 3);
	n = pool_claimed_encode(&cd, chain, 3, buf, sizeof(buf));
	assert_int_equal(n, 20 + 41 * 3);
	assert_int_equal(pool_claimed_decode(buf, (uint32_t)n, &cout, &v, why, sizeof(why)), 0);
	for (uint32_t i = 0; i < 3; i++) {
		pool_chain_view_entry(&v, i, &e);
		assert_int_equal(e.stamp, 100 + i);
		assert_int_equal(e.place.offset, 0);
		assert_int_equal(e.place.bytes, 0);
	}
	chain[0].stamp = 0;
	assert_int_equal(pool_claimed_encode(&cd, chain, 3, buf, sizeof(buf)), -EINVAL);
	sel_put_le64(buf + 20 + 33, 0);
	assert_int_equal(pool_claimed_decode(buf, (uint32_t)n, &cout, &v, why, sizeof(why)),
			 SEL_EPROTO);
	assert_non_null(strstr(why, "R-POOL-36"));
}

/* CLAIM_LOCAL is type 22, a session request as long as CLAIM, tagged (R-POOL-51). */
static void test_pool_wire_claim_local(void **state)
{
	const struct cluster_msg_info *local = &pool_grammar.types[POOL_MSG_CLAIM_LOCAL];
	const struct cluster_msg_info *claim = &pool_grammar.types[POOL_MSG_CLAIM];

	(void)state;
	assert_int_equal(POOL_MSG_CLAIM_LOCAL, 22);
	assert_string_equal(cluster_grammar_msg_name(&pool_grammar, POOL_MSG_CLAIM_LOCAL),
			    "CLAIM_LOCAL");
	assert_int_equal(local->bytes_min, POOL_CLAIM_BYTES + POOL_TAG_BYTES);
	assert_int_equal(local->bytes_max, claim->bytes_max);
	assert_true(pool_type_tagged(POOL_MSG_CLAIM_LOCAL));
	assert_int_equal(pool_window_head_bytes(POOL_MSG_CLAIM_LOCAL), 0);
}

/* Claims: CLAIM, CLAIM_PULL, windows, places, ends (R-POOL-30 .. R-POOL-35). */
static void test_pool_wire_claim_messages(void **state)
{
	struct pool_claim c = { .claim_id = 9, .key = key_of(128, 1) }, cout;
	struct pool_claim_pull p = { .claim_id = 9, .skip_pages = 3, .mode = 1 }, pout;
	struct pool_claim_window w = { .claim_id = 9, .chain_index = 2,
				       .section = POOL_SECTION_PAGES, .first = 4, .count = 2 },
				 wout;
	struct pool_place places[2] = { { 4096, 8192 }, { 16384, 4096 } }, pl;
	struct pool_places_view pv;
	struct pool_claim_end e = { .claim_id = 9, .result = -ETIMEDOUT }, eout;
	uint8_t buf[256];
	char why[WHY_BYTES];
	int n;

	(void)state;
	n = pool_claim_encode(&c, buf, sizeof(buf));
	assert_int_equal(pool_claim_decode(buf, (uint32_t)n, &cout, why, sizeof(why)), 0);
	assert_memory_equal(&cout, &c, sizeof(c));
	c.claim_id = 0;
	assert_int_equal(pool_claim_encode(&c, buf, sizeof(buf)), -EINVAL);
	n = pool_claim_pull_encode(&p, buf, sizeof(buf));
	assert_int_equal(pool_claim_pull_decode(buf, (uint32_t)n, &pout, why, sizeof(why)), 0);
	assert_int_equal(pout.skip_pages, 3);
	buf[12] = POOL_PULL_RDMA; /* R-POOL-93 */
	assert_int_equal(pool_claim_pull_decode(buf, (uint32_t)n, &pout, why, sizeof(why)), 0);
	assert_int_equal(pout.mode, POOL_PULL_RDMA);
	buf[12] = 3;
	assert_int_equal(pool_claim_pull_decode(buf, (uint32_t)n, &pout, why, sizeof(why)),
			 SEL_EPROTO);
	n = pool_claim_window_encode(&w, 2 * 8192, buf, sizeof(buf));
	assert_int_equal(n, POOL_CLAIM_WINDOW_HEAD_BYTES);
	assert_int_equal(pool_claim_window_decode(buf, (uint32_t)n, 2 * 8192, &wout, why,
						  sizeof(why)), 0);
	assert_int_equal(wout.first, 4);
	/* pages: data a whole multiple of count; other sections: count is the bytes */
	assert_int_equal(pool_claim_window_decode(buf, (uint32_t)n, 8193, &wout, why,
						  sizeof(why)), SEL_EPROTO);
	w.section = POOL_SECTION_ROW;
	w.count = 100;
	assert_int_equal(pool_claim_window_encode(&w, 99, buf, sizeof(buf)), -EINVAL);
	w.section = 4;
	assert_int_equal(pool_claim_window_encode(&w, 100, buf, sizeof(buf)), -EINVAL);
	n = pool_claim_places_encode(9, places, 2, buf, sizeof(buf));
	assert_int_equal(pool_claim_places_decode(buf, (uint32_t)n, &pv, why, sizeof(why)), 0);
	pool_places_view_place(&pv, 1, &pl);
	assert_int_equal(pl.offset, 16384);
	sel_put_le64(buf + 12, 4097); /* not 4096-aligned */
	assert_int_equal(pool_claim_places_decode(buf, (uint32_t)n, &pv, why, sizeof(why)),
			 SEL_EPROTO);
	n = pool_claim_end_encode(&e, buf, sizeof(buf));
	assert_int_equal(pool_claim_end_decode(buf, (uint32_t)n, &eout, why, sizeof(why)), 0);
	assert_int_equal(eout.result, -ETIMEDOUT);
}

/* HOLDS, EXPORT, EXPORT_END round trip and reject what R-POOL-70 .. R-POOL-75 forbid. */
static void test_pool_wire_holders_and_exports(void **state)
{
	struct rec_key keys[3] = { key_of(64, 1), key_of(640, 2), key_of(128, 3) }, k;
	struct pool_export x = { .export_id = 5, .deadline_ms = POOL_EXPORT_MS,
				 .key = key_of(320, 4) }, xout;
	struct pool_export_end e = { .export_id = 5, .result = -ENOENT }, eout;
	struct pool_holds_view v;
	uint8_t *buf = body_buf;
	char why[WHY_BYTES];
	int n;

	(void)state;
	/* any order of keys: a set, not a chain */
	n = pool_holds_encode(POOL_HOLDS_ADD, keys, 3, buf, sizeof(body_buf));
	assert_int_equal(n, POOL_HOLDS_FIXED_BYTES + 3 * POOL_WIRE_KEY_BYTES);
	assert_int_equal(pool_holds_decode(buf, (uint32_t)n, &v, why, sizeof(why)), 0);
	assert_int_equal(v.op, POOL_HOLDS_ADD);
	assert_int_equal(v.key_count, 3);
	pool_holds_view_key(&v, 2, &k);
	assert_true(rec_key_equal(&k, &keys[2]));
	/* a length other than the count's */
	assert_int_equal(pool_holds_decode(buf, (uint32_t)n - 1, &v, why, sizeof(why)),
			 SEL_EPROTO);
	assert_non_null(strstr(why, "R-WIRE-10"));
	/* an unknown op */
	buf[4] = 3;
	assert_int_equal(pool_holds_decode(buf, (uint32_t)n, &v, why, sizeof(why)), SEL_EPROTO);
	assert_non_null(strstr(why, "R-POOL-70"));
	/* a key of no token */
	buf[4] = POOL_HOLDS_WITHDRAW;
	sel_put_le64(buf + POOL_HOLDS_FIXED_BYTES, 0);
	assert_int_equal(pool_holds_decode(buf, (uint32_t)n, &v, why, sizeof(why)), SEL_EPROTO);
	assert_non_null(strstr(why, "R-WIRE-14"));
	/* reset carries no key, and only reset carries none */
	n = pool_holds_encode(POOL_HOLDS_RESET, NULL, 0, buf, sizeof(body_buf));
	assert_int_equal(n, POOL_HOLDS_FIXED_BYTES);
	assert_int_equal(pool_holds_decode(buf, (uint32_t)n, &v, why, sizeof(why)), 0);
	assert_int_equal(v.op, POOL_HOLDS_RESET);
	buf[4] = POOL_HOLDS_ADD;
	assert_int_equal(pool_holds_decode(buf, (uint32_t)n, &v, why, sizeof(why)), SEL_EPROTO);
	assert_int_equal(pool_holds_encode(POOL_HOLDS_ADD, keys, 0, buf, sizeof(body_buf)),
			 -EINVAL);
	assert_int_equal(pool_holds_encode(POOL_HOLDS_RESET, keys, 1, buf, sizeof(body_buf)),
			 -EINVAL);
	assert_int_equal(pool_holds_encode(POOL_HOLDS_ADD, keys, POOL_HOLDS_KEYS_MAX + 1, buf,
					   sizeof(body_buf)), SEL_ETOOBIG);
	sel_put_le32(buf, POOL_HOLDS_KEYS_MAX + 1);
	assert_int_equal(pool_holds_decode(buf, POOL_HOLDS_FIXED_BYTES, &v, why, sizeof(why)),
			 SEL_EPROTO);
	assert_non_null(strstr(why, "at most"));

	n = pool_export_encode(&x, buf, sizeof(body_buf));
	assert_int_equal(n, POOL_EXPORT_BYTES);
	assert_int_equal(pool_export_decode(buf, (uint32_t)n, &xout, why, sizeof(why)), 0);
	assert_int_equal(xout.export_id, 5);
	assert_int_equal(xout.deadline_ms, POOL_EXPORT_MS);
	assert_true(rec_key_equal(&xout.key, &x.key));
	sel_put_le32(buf + 8, 0);
	assert_int_equal(pool_export_decode(buf, (uint32_t)n, &xout, why, sizeof(why)),
			 SEL_EPROTO);
	assert_non_null(strstr(why, "R-POOL-74"));
	x.export_id = 0;
	assert_int_equal(pool_export_encode(&x, buf, sizeof(body_buf)), -EINVAL);

	n = pool_export_end_encode(&e, buf, sizeof(body_buf));
	assert_int_equal(n, POOL_EXPORT_END_BYTES);
	assert_int_equal(pool_export_end_decode(buf, (uint32_t)n, &eout, why, sizeof(why)), 0);
	assert_int_equal(eout.result, -ENOENT);
	sel_put_le32(buf + 8, (uint32_t)INT32_MIN);
	assert_int_equal(pool_export_end_decode(buf, (uint32_t)n, &eout, why, sizeof(why)),
			 SEL_EPROTO);
	assert_non_null(strstr(why, "R-WIRE-12"));
	assert_int_equal(pool_export_end_decode(buf, (uint32_t)n + 1, &eout, why, sizeof(why)),
			 SEL_EPROTO);
}

/* Puts: PUT_BEGIN, PUT_READY, PUT_WINDOW, PUT_END (R-POOL-40 .. R-POOL-42). */
static void rdma_endpoint_make(struct pool_rdma_endpoint *e, bool lender)
{
	memset(e, 0, sizeof(*e));
	e->qp_num = 0x1234;
	e->psn = 0x55aa;
	e->ethernet = true;
	e->mtu_bytes = 4096;
	e->gid[10] = 0xff;
	e->gid[11] = 0xff;
	e->gid[15] = 7;
	if (!lender)
		return;
	e->slot_bytes = 1u << 20;
	e->slot_count = 4;
	e->region_count = 1;
	e->regions[0] = (struct pool_rdma_region){ 0x7f0000000000ull, 4u << 20, 0x8000abcd };
}

/* RDMA_OFFER carries a writer's endpoint and RDMA_LEND a lender's, each refused in the other's place (R-POOL-91, R-POOL-92). */
static void test_pool_wire_rdma_endpoints(void **state)
{
	struct pool_rdma_endpoint w, l, out;
	uint8_t buf[POOL_RDMA_ENDPOINT_BYTES_MAX];
	char why[WHY_BYTES];
	int n;

	(void)state;
	rdma_endpoint_make(&w, false);
	rdma_endpoint_make(&l, true);
	n = pool_rdma_offer_encode(&w, buf, sizeof(buf));
	assert_int_equal(n, 56);
	assert_int_equal(pool_rdma_offer_decode(buf, (uint32_t)n, &out, why, sizeof(why)), 0);
	assert_int_equal(out.qp_num, 0x1234);
	assert_int_equal(out.slot_count, 0);
	/* a writer's endpoint is no lend */
	assert_int_equal(pool_rdma_lend_decode(buf, (uint32_t)n, &out, why, sizeof(why)),
			 SEL_EPROTO);
	assert_non_null(strstr(why, "R-POOL-92"));
	assert_int_equal(pool_rdma_lend_encode(&w, buf, sizeof(buf)), -EINVAL);
	n = pool_rdma_lend_encode(&l, buf, sizeof(buf));
	assert_int_equal(n, 56 + 24);
	assert_int_equal(pool_rdma_lend_decode(buf, (uint32_t)n, &out, why, sizeof(why)), 0);
	assert_int_equal(out.slot_count, 4);
	assert_int_equal(out.regions[0].rkey, 0x8000abcd);
	assert_int_equal(pool_rdma_offer_decode(buf, (uint32_t)n, &out, why, sizeof(why)),
			 SEL_EPROTO);
	assert_non_null(strstr(why, "R-POOL-91"));
	assert_int_equal(pool_rdma_offer_encode(&l, buf, sizeof(buf)), -EINVAL);
	/* R-RDMA-6 applies inside: regions that do not hold the slots */
	n = pool_rdma_lend_encode(&l, buf, sizeof(buf));
	sel_put_le64(buf + 56 + 8, 3u << 20);
	assert_int_equal(pool_rdma_lend_decode(buf, (uint32_t)n, &out, why, sizeof(why)),
			 SEL_EPROTO);
	assert_non_null(strstr(why, "regions"));
	assert_int_equal(pool_rdma_lend_encode(&l, buf, 60), -ENOSPC);
}

/* RDMA_WINDOW names a slot and the window's head, length and xxh3; RDMA_FREE lists slots (R-POOL-94, R-POOL-95). */
static void test_pool_wire_rdma_windows(void **state)
{
	struct pool_rdma_window x = { .w = { .claim_id = 9, .chain_index = 1,
					     .section = POOL_SECTION_PAGES, .first = 2,
					     .count = 3 },
				      .slot = 5, .data_length = 3 * 8192,
				      .data_xxh3 = 0x0123456789abcdefull },
				out;
	uint32_t slots[3] = { 0, 7, POOL_RDMA_SLOTS_MAX - 1 }, count;
	const uint8_t *view;
	uint8_t buf[64];
	char why[WHY_BYTES];
	int n;

	(void)state;
	n = pool_rdma_window_encode(&x, buf, sizeof(buf));
	assert_int_equal(n, POOL_RDMA_WINDOW_BYTES);
	assert_int_equal(pool_rdma_window_decode(buf, (uint32_t)n, &out, why, sizeof(why)), 0);
	assert_int_equal(out.w.claim_id, 9);
	assert_int_equal(out.w.chain_index, 1);
	assert_int_equal(out.w.section, POOL_SECTION_PAGES);
	assert_int_equal(out.w.first, 2);
	assert_int_equal(out.w.count, 3);
	assert_int_equal(out.slot, 5);
	assert_int_equal(out.data_length, 3 * 8192);
	assert_int_equal(out.data_xxh3, 0x0123456789abcdefull);
	/* the head's rules are CLAIM_WINDOW's (R-POOL-33) */
	sel_put_le32(buf + 25, 3 * 8192 + 1);
	assert_int_equal(pool_rdma_window_decode(buf, (uint32_t)n, &out, why, sizeof(why)),
			 SEL_EPROTO);
	sel_put_le32(buf + 25, 0);
	assert_int_equal(pool_rdma_window_decode(buf, (uint32_t)n, &out, why, sizeof(why)),
			 SEL_EPROTO);
	sel_put_le32(buf + 25, 3 * 8192);
	sel_put_le32(buf + 21, POOL_RDMA_SLOTS_MAX);
	assert_int_equal(pool_rdma_window_decode(buf, (uint32_t)n, &out, why, sizeof(why)),
			 SEL_EPROTO);
	assert_non_null(strstr(why, "R-POOL-94"));
	assert_int_equal(pool_rdma_window_decode(buf, (uint32_t)n - 1, &out, why, sizeof(why)),
			 SEL_EPROTO);
	x.w.claim_id = 0;
	assert_int_equal(pool_rdma_window_encode(&x, buf, sizeof(buf)), -EINVAL);
	/* RDMA_FREE */
	n = pool_rdma_free_encode(slots, 3, buf, sizeof(buf));
	assert_int_equal(n, 4 + 12);
	assert_int_equal(pool_rdma_free_decode(buf, (uint32_t)n, &count, &view, why, sizeof(why)),
			 0);
	assert_int_equal(count, 3);
	assert_int_equal(sel_get_le32(view + 4), 7);
	assert_int_equal(pool_rdma_free_decode(buf, (uint32_t)n - 4, &count, &view, why,
					       sizeof(why)), SEL_EPROTO);
	sel_put_le32(buf + 8, POOL_RDMA_SLOTS_MAX);
	assert_int_equal(pool_rdma_free_decode(buf, (uint32_t)n, &count, &view, why, sizeof(why)),
			 SEL_EPROTO);
	sel_put_le32(buf, 0);
	assert_int_equal(pool_rdma_free_decode(buf, 4, &count, &view, why, sizeof(why)),
			 SEL_EPROTO);
	assert_int_equal(pool_rdma_free_encode(slots, 0, buf, sizeof(buf)), -EINVAL);
	slots[0] = POOL_RDMA_SLOTS_MAX;
	assert_int_equal(pool_rdma_free_encode(slots, 3, buf, sizeof(buf)), -EINVAL);
}

/* Puts: PUT_BEGIN, PUT_READY, PUT_WINDOW, PUT_END (R-POOL-40 .. R-POOL-42). */
static void test_pool_wire_put_messages(void **state)
{
	uint64_t shares[3] = { 20480, 20480, 24576 };
	struct pool_put_begin b = { .request_id = 4, .key = key_of(128, 2),
				    .parent = key_of(64, 1), .first_page_index = 4,
				    .tail_page_count = 4, .row = true, .world_size = 3 }, bout;
	struct pool_put_ready r = { .request_id = 4, .result = 0, .put_id = 77 }, rout;
	struct pool_put_window w = { .put_id = 77, .offset = 4096 }, wout;
	struct pool_put_end e = { .put_id = 77, .result = SEL_ECHECKSUM, .commit = false }, eout;
	uint8_t buf[256];
	char why[WHY_BYTES];
	int n;

	(void)state;
	n = pool_put_begin_encode(&b, shares, buf, sizeof(buf));
	assert_int_equal(n, 65 + 24);
	assert_int_equal(pool_put_begin_decode(buf, (uint32_t)n, &bout, why, sizeof(why)), 0);
	assert_int_equal(bout.world_size, 3);
	assert_int_equal(pool_put_begin_share_bytes(&bout, 2), 24576);
	assert_int_equal(pool_put_begin_decode(buf, (uint32_t)n - 4, &bout, why, sizeof(why)),
			 SEL_EPROTO);
	b.parent = key_of(128, 1); /* a parent no shorter than the key */
	assert_int_equal(pool_put_begin_encode(&b, shares, buf, sizeof(buf)), -EINVAL);
	b.parent = (struct rec_key){ 0 }; /* the root marker */
	assert_true(pool_put_begin_encode(&b, shares, buf, sizeof(buf)) > 0);
	n = pool_put_ready_encode(&r, buf, sizeof(buf));
	assert_int_equal(pool_put_ready_decode(buf, (uint32_t)n, &rout, why, sizeof(why)), 0);
	assert_int_equal(rout.put_id, 77);
	r.result = -EEXIST; /* a refusal carries no put id */
	assert_int_equal(pool_put_ready_encode(&r, buf, sizeof(buf)), -EINVAL);
	r.put_id = 0;
	assert_true(pool_put_ready_encode(&r, buf, sizeof(buf)) > 0);
	n = pool_put_window_encode(&w, buf, sizeof(buf));
	assert_int_equal(pool_put_window_decode(buf, (uint32_t)n, 100, &wout, why, sizeof(why)),
			 0);
	assert_int_equal(wout.offset, 4096);
	sel_put_le64(buf + 8, UINT64_MAX - 10);
	assert_int_equal(pool_put_window_decode(buf, (uint32_t)n, 100, &wout, why, sizeof(why)),
			 SEL_EPROTO);
	n = pool_put_end_encode(&e, buf, sizeof(buf));
	assert_int_equal(pool_put_end_decode(buf, (uint32_t)n, &eout, why, sizeof(why)), 0);
	assert_int_equal(eout.result, SEL_ECHECKSUM);
	buf[12] = 3;
	assert_int_equal(pool_put_end_decode(buf, (uint32_t)n, &eout, why, sizeof(why)),
			 SEL_EPROTO);
}

struct pair {
	int fd[2];
};

static void pair_open(struct pair *p)
{
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p->fd), 0);
}

static void pair_close(struct pair *p)
{
	close(p->fd[0]);
	close(p->fd[1]);
}

struct bytewise {
	int fd;
	uint8_t bytes[8192];
	size_t length;
};

static void *bytewise_writer(void *arg)
{
	struct bytewise *b = arg;

	for (size_t i = 0; i < b->length; i++)
		if (write(b->fd, b->bytes + i, 1) != 1)
			break;
	return NULL;
}

/*
 * Writes a frame to fd one byte at a time from a thread (a socketpair's
 * buffer holds few 1-byte writes, so the reader must run meanwhile).
 */
static pthread_t write_bytewise(struct bytewise *b, int fd, const uint8_t *key, uint64_t seq,
				uint16_t type, const uint8_t *body, uint32_t body_length,
				const uint8_t *data, uint32_t data_length)
{
	uint8_t header[CLUSTER_FRAME_HEADER_BYTES], tag[POOL_TAG_BYTES];
	pthread_t t;

	pool_frame_build(key, POOL_TO_RANK, seq, type, body, body_length, data, data_length,
			 header, tag);
	b->fd = fd;
	b->length = 0;
	memcpy(b->bytes, header, sizeof(header));
	b->length += sizeof(header);
	memcpy(b->bytes + b->length, body, body_length);
	b->length += body_length;
	if (data_length)
		memcpy(b->bytes + b->length, data, data_length);
	b->length += data_length;
	if (key)
		memcpy(b->bytes + b->length, tag, POOL_TAG_BYTES);
	b->length += key ? POOL_TAG_BYTES : 0;
	assert_int_equal(pthread_create(&t, NULL, bytewise_writer, b), 0);
	return t;
}

/* Feeds rx until an event (a blocking fd: each read takes what has come). */
static int feed_until(struct pool_rx *rx, int fd, char *why)
{
	for (;;) {
		bool eof;
		int ret = pool_rx_feed(rx, fd, &eof, why, WHY_BYTES);

		if (ret != POOL_RX_MORE || eof)
			return ret;
	}
}

/* The receiver reads control frames and windows in 1-byte pieces; data goes to its place (R-POOL-12, R-POOL-33). */
static void test_pool_wire_receiver_pieces(void **state)
{
	uint8_t kc[32], body[64], head[POOL_CLAIM_WINDOW_HEAD_BYTES];
	static uint8_t data[5000], dest[5000];
	struct pool_claim_window w = { .claim_id = 1, .chain_index = 0,
				       .section = POOL_SECTION_HEADER, .first = 0, .count = 4096 };
	struct pool_rx rx;
	struct pair p;
	char why[WHY_BYTES];
	int n;

	(void)state;
	fill_bytes(kc, 32, 5);
	tu_fill(data, sizeof(data), 3);
	static struct bytewise b;
	pthread_t t;

	pair_open(&p);
	pool_rx_init(&rx, body_buf, sizeof(body_buf), POOL_TO_RANK);
	rx.key = kc;
	n = pool_heartbeat_encode(12345, body, sizeof(body));
	t = write_bytewise(&b, p.fd[0], kc, 0, POOL_MSG_HEARTBEAT, body, (uint32_t)n, NULL, 0);
	assert_int_equal(feed_until(&rx, p.fd[1], why), POOL_RX_FRAME);
	pthread_join(t, NULL);
	assert_int_equal(rx.header.type, POOL_MSG_HEARTBEAT);
	assert_int_equal(rx.body_length, 8);
	assert_int_equal(sel_get_le64(rx.body), 12345);
	/* a window: the head first, then its data straight into dest */
	n = pool_claim_window_encode(&w, 4096, head, sizeof(head));
	t = write_bytewise(&b, p.fd[0], kc, 1, POOL_MSG_CLAIM_WINDOW, head, (uint32_t)n, data,
			   4096);
	assert_int_equal(feed_until(&rx, p.fd[1], why), POOL_RX_HEAD);
	assert_int_equal(rx.data_length, 4096);
	rx.data = dest;
	assert_int_equal(feed_until(&rx, p.fd[1], why), POOL_RX_FRAME);
	pthread_join(t, NULL);
	assert_memory_equal(dest, data, 4096);
	/* a window dropped: data is read and discarded, the tag still checked */
	t = write_bytewise(&b, p.fd[0], kc, 2, POOL_MSG_CLAIM_WINDOW, head, (uint32_t)n, data,
			   4096);
	assert_int_equal(feed_until(&rx, p.fd[1], why), POOL_RX_HEAD);
	assert_int_equal(feed_until(&rx, p.fd[1], why), POOL_RX_FRAME);
	pthread_join(t, NULL);
	assert_int_equal(rx.frames, 3);
	/* end of file between frames */
	close(p.fd[0]);
	{
		bool eof = false;

		assert_int_equal(pool_rx_feed(&rx, p.fd[1], &eof, why, sizeof(why)), 0);
		assert_true(eof);
	}
	close(p.fd[1]);
}

/* Bytes the socket holds that no read took yet. */
static int socket_unread(int fd)
{
	int n = -1;

	assert_int_equal(ioctl(fd, FIONREAD, &n), 0);
	return n;
}

/* A grant's CLAIMED and places come in with one read; a window's head and first bytes with one more (R-POOL-12, R-POOL-33). */
static void test_pool_wire_receiver_reads_ahead(void **state)
{
	uint8_t kc[32], body[256], head[POOL_CLAIM_WINDOW_HEAD_BYTES];
	static uint8_t data[64 << 10], dest[64 << 10];
	struct pool_chain_entry entry = { .key = { .consumed = 64 }, .tail_page_count = 4,
					  .row = true, .stamp = 1 };
	struct pool_claimed claimed = { .claim_id = 9, .deadline_ms = 100 };
	struct pool_place place = { .offset = 4096, .bytes = 8192 };
	struct pool_claim_window w = { .claim_id = 9, .section = POOL_SECTION_PAGES,
				       .count = 1 };
	struct pool_claimed got;
	struct pool_chain_view chain;
	struct pool_places_view places;
	struct pool_rx rx;
	struct pair p;
	uint64_t seq = 0;
	char why[WHY_BYTES];
	bool eof;
	int n;

	(void)state;
	fill_bytes(kc, 32, 7);
	tu_fill(data, sizeof(data), 4);
	pair_open(&p);
	assert_int_equal(fcntl(p.fd[1], F_SETFL, O_NONBLOCK), 0);
	pool_rx_init(&rx, body_buf, sizeof(body_buf), POOL_TO_RANK);
	rx.key = kc;
	n = pool_claimed_encode(&claimed, &entry, 1, body, sizeof(body));
	assert_int_equal(pool_frame_write(p.fd[0], kc, POOL_TO_RANK, &seq, POOL_MSG_CLAIMED,
					  body, (uint32_t)n, NULL, 0), 0);
	n = pool_claim_places_encode(9, &place, 1, body, sizeof(body));
	assert_int_equal(pool_frame_write(p.fd[0], kc, POOL_TO_RANK, &seq,
					  POOL_MSG_CLAIM_PLACES, body, (uint32_t)n, NULL, 0), 0);
	/* CLAIMED: one read took it and the places behind it */
	assert_int_equal(pool_rx_feed(&rx, p.fd[1], &eof, why, sizeof(why)), POOL_RX_FRAME);
	assert_int_equal(rx.header.type, POOL_MSG_CLAIMED);
	assert_int_equal(pool_claimed_decode(rx.body, rx.body_length, &got, &chain, why,
					     sizeof(why)), 0);
	assert_int_equal(got.claim_id, 9);
	assert_int_equal(rx.reads, 1);
	assert_int_equal(socket_unread(p.fd[1]), 0);
	assert_true(pool_rx_buffered(&rx));
	/* the places: from what was read ahead, no second read */
	assert_int_equal(pool_rx_feed(&rx, p.fd[1], &eof, why, sizeof(why)), POOL_RX_FRAME);
	assert_int_equal(rx.header.type, POOL_MSG_CLAIM_PLACES);
	assert_int_equal(pool_claim_places_decode(rx.body, rx.body_length, &places, why,
						  sizeof(why)), 0);
	assert_int_equal(places.claim_id, 9);
	assert_int_equal(rx.reads, 1);
	assert_false(pool_rx_buffered(&rx));
	assert_int_equal(pool_rx_feed(&rx, p.fd[1], &eof, why, sizeof(why)), POOL_RX_MORE);
	assert_false(eof);
	/* a window of 64 KiB then a heartbeat: the head and its first bytes in one read */
	n = pool_claim_window_encode(&w, sizeof(data), head, sizeof(head));
	assert_int_equal(pool_frame_write(p.fd[0], kc, POOL_TO_RANK, &seq,
					  POOL_MSG_CLAIM_WINDOW, head, (uint32_t)n, data,
					  sizeof(data)), 0);
	n = pool_heartbeat_encode(77, body, sizeof(body));
	assert_int_equal(pool_frame_write(p.fd[0], kc, POOL_TO_RANK, &seq, POOL_MSG_HEARTBEAT,
					  body, (uint32_t)n, NULL, 0), 0);
	assert_int_equal(pool_rx_feed(&rx, p.fd[1], &eof, why, sizeof(why)), POOL_RX_HEAD);
	assert_int_equal(rx.reads, 2);
	assert_true(pool_rx_buffered(&rx));
	rx.data = dest;
	assert_int_equal(pool_rx_feed(&rx, p.fd[1], &eof, why, sizeof(why)), POOL_RX_FRAME);
	assert_memory_equal(dest, data, sizeof(data));
	assert_int_equal(pool_rx_feed(&rx, p.fd[1], &eof, why, sizeof(why)), POOL_RX_FRAME);
	assert_int_equal(rx.header.type, POOL_MSG_HEARTBEAT);
	assert_int_equal(sel_get_le64(rx.body), 77);
	assert_int_equal(rx.frames, 4);
	assert_int_equal(pool_rx_feed(&rx, p.fd[1], &eof, why, sizeof(why)), POOL_RX_MORE);
	close(p.fd[0]);
	close(p.fd[1]);
}

/* A wrong tag, a wrong sequence, a flipped payload byte and a half frame each fail (R-POOL-5, R-POOL-12, R-WIRE-7, R-WIRE-9). */
static void test_pool_wire_receiver_rejects(void **state)
{
	uint8_t kc[32], other[32], body[8], header[CLUSTER_FRAME_HEADER_BYTES], tag[16];
	struct pool_rx rx;
	struct pair p;
	char why[WHY_BYTES];

	(void)state;
	fill_bytes(kc, 32, 5);
	fill_bytes(other, 32, 6);
	pool_heartbeat_encode(1, body, sizeof(body));
	/* a frame tagged with another connection's key */
	pair_open(&p);
	pool_rx_init(&rx, body_buf, sizeof(body_buf), POOL_TO_RANK);
	rx.key = kc;
	assert_int_equal(pool_frame_write(p.fd[0], other, POOL_TO_RANK, &(uint64_t){ 0 },
					  POOL_MSG_HEARTBEAT, body, 8, NULL, 0), 0);
	assert_int_equal(pool_rx_read_frame(&rx, p.fd[1], why, sizeof(why)), -EACCES);
	assert_non_null(strstr(why, "R-POOL-12"));
	pair_close(&p);
	/* a frame of the other direction: its tag is not this direction's */
	pair_open(&p);
	pool_rx_init(&rx, body_buf, sizeof(body_buf), POOL_TO_RANK);
	rx.key = kc;
	assert_int_equal(pool_frame_write(p.fd[0], kc, POOL_TO_MANAGER, &(uint64_t){ 0 },
					  POOL_MSG_HEARTBEAT, body, 8, NULL, 0), 0);
	assert_int_equal(pool_rx_read_frame(&rx, p.fd[1], why, sizeof(why)), -EACCES);
	pair_close(&p);
	/* a skipped sequence number */
	pair_open(&p);
	pool_rx_init(&rx, body_buf, sizeof(body_buf), POOL_TO_RANK);
	rx.key = kc;
	assert_int_equal(pool_frame_write(p.fd[0], kc, POOL_TO_RANK, &(uint64_t){ 1 },
					  POOL_MSG_HEARTBEAT, body, 8, NULL, 0), 0);
	assert_int_equal(pool_rx_read_frame(&rx, p.fd[1], why, sizeof(why)), SEL_EPROTO);
	assert_non_null(strstr(why, "R-POOL-5"));
	pair_close(&p);
	/* a flipped payload byte fails the checksum before the tag */
	pair_open(&p);
	pool_rx_init(&rx, body_buf, sizeof(body_buf), POOL_TO_RANK);
	rx.key = kc;
	pool_frame_build(kc, POOL_TO_RANK, 0, POOL_MSG_HEARTBEAT, body, 8, NULL, 0, header, tag);
	body[0] ^= 1;
	assert_int_equal(write(p.fd[0], header, sizeof(header)), (ssize_t)sizeof(header));
	assert_int_equal(write(p.fd[0], body, 8), 8);
	assert_int_equal(write(p.fd[0], tag, 16), 16);
	assert_int_equal(pool_rx_read_frame(&rx, p.fd[1], why, sizeof(why)), SEL_EPROTO);
	assert_non_null(strstr(why, "R-WIRE-7"));
	pair_close(&p);
	/* a tagged type before WELCOME, and an untagged one after (R-POOL-6) */
	pair_open(&p);
	pool_rx_init(&rx, body_buf, sizeof(body_buf), POOL_TO_RANK);
	assert_int_equal(pool_frame_write(p.fd[0], kc, POOL_TO_RANK, &(uint64_t){ 0 },
					  POOL_MSG_HEARTBEAT, body, 8, NULL, 0), 0);
	assert_int_equal(pool_rx_read_frame(&rx, p.fd[1], why, sizeof(why)), SEL_EPROTO);
	assert_non_null(strstr(why, "before WELCOME"));
	pair_close(&p);
	pair_open(&p);
	pool_rx_init(&rx, body_buf, sizeof(body_buf), POOL_TO_RANK);
	rx.key = kc;
	fill_bytes(tag, 16, 1);
	assert_int_equal(pool_frame_write(p.fd[0], NULL, POOL_TO_RANK, &(uint64_t){ 0 },
					  POOL_MSG_CHALLENGE, (uint8_t[32]){ 1 }, 32, NULL, 0), 0);
	assert_int_equal(pool_rx_read_frame(&rx, p.fd[1], why, sizeof(why)), SEL_EPROTO);
	assert_non_null(strstr(why, "after WELCOME"));
	pair_close(&p);
	/* half a frame, then end of file */
	pair_open(&p);
	pool_rx_init(&rx, body_buf, sizeof(body_buf), POOL_TO_RANK);
	rx.key = kc;
	pool_frame_build(kc, POOL_TO_RANK, 0, POOL_MSG_HEARTBEAT, body, 8, NULL, 0, header, tag);
	assert_int_equal(write(p.fd[0], header, 20), 20);
	close(p.fd[0]);
	assert_int_equal(pool_rx_read_frame(&rx, p.fd[1], why, sizeof(why)), SEL_EPROTO);
	assert_non_null(strstr(why, "R-WIRE-9"));
	close(p.fd[1]);
}

/* The arena header round trip; anything else is not an arena (R-POOL-50). */
static void test_pool_wire_arena_header(void **state)
{
	static uint8_t hdr[POOL_ARENA_HEADER_BYTES];
	uint8_t id[16], got[16];
	uint64_t gen, bytes;
	char why[WHY_BYTES];

	(void)state;
	fill_bytes(id, 16, 7);
	pool_arena_header_encode(hdr, id, 5, 1 << 30);
	assert_int_equal(pool_arena_header_decode(hdr, got, &gen, &bytes, why, sizeof(why)), 0);
	assert_memory_equal(got, id, 16);
	assert_int_equal(gen, 5);
	assert_int_equal(bytes, 1 << 30);
	hdr[100] = 1;
	assert_int_equal(pool_arena_header_decode(hdr, got, &gen, &bytes, why, sizeof(why)),
			 SEL_EMISMATCH);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pool_wire_grammar),
		cmocka_unit_test(test_pool_wire_bounds),
		cmocka_unit_test(test_pool_wire_mac_vectors),
		cmocka_unit_test(test_pool_wire_welcome),
		cmocka_unit_test(test_pool_wire_refuse),
		cmocka_unit_test(test_pool_wire_attach_and_scope),
		cmocka_unit_test(test_pool_wire_lookup),
		cmocka_unit_test(test_pool_wire_chains),
		cmocka_unit_test(test_pool_wire_chain_stamps),
		cmocka_unit_test(test_pool_wire_claim_local),
		cmocka_unit_test(test_pool_wire_claim_messages),
		cmocka_unit_test(test_pool_wire_rdma_endpoints),
		cmocka_unit_test(test_pool_wire_rdma_windows),
		cmocka_unit_test(test_pool_wire_put_messages),
		cmocka_unit_test(test_pool_wire_holders_and_exports),
		cmocka_unit_test(test_pool_wire_receiver_pieces),
		cmocka_unit_test(test_pool_wire_receiver_reads_ahead),
		cmocka_unit_test(test_pool_wire_receiver_rejects),
		cmocka_unit_test(test_pool_wire_arena_header),
	};

	return cmocka_run_group_tests_name("pool_wire", tests, NULL, NULL);
}
