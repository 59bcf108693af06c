/*
 * libFuzzer target for the pool wire protocol (pool/wire.c): any bytes,
 * given to every message decoder as a body, and to the frame receiver as a
 * stream both before WELCOME (untagged) and after (tagged with a fixed
 * key); then the same bytes as the body of a correctly built, tagged frame
 * of the type byte 0 picks, which the receiver must read whole (numbers
 * no message has are skipped). Every body
 * a decoder accepts must encode back to the same bytes (R-WIRE-11).
 * Build and run with `make fuzz` (clang).
 */
#include "pool/wire.h"

#include "common/base.h"
#include "selene/selene.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FRAMES_PER_INPUT_MAX 64
#define INPUT_BYTES_MAX (1u << 20)

static uint8_t body[POOL_CONTROL_BODY_BYTES_MAX];
static uint8_t encoded[POOL_CONTROL_BODY_BYTES_MAX];
static uint8_t window_data[POOL_WINDOW_BYTES_MAX];
static uint8_t frame[CLUSTER_FRAME_HEADER_BYTES + INPUT_BYTES_MAX + POOL_TAG_BYTES];
static struct pool_chain_entry chain[POOL_CHAIN_RECORDS_MAX];
static struct rec_key keys[POOL_LOOKUP_KEYS_MAX];
static struct pool_place places[POOL_CHAIN_RECORDS_MAX];
static uint64_t shares[REC_WORLD_SIZE_MAX];
static uint32_t slots[POOL_RDMA_SLOTS_MAX];
static struct pool_attach attach;
static const uint8_t key[POOL_KEY_BYTES] = { 1, 2, 3 };

static void expect_same(int len, const uint8_t *p, uint32_t length)
{
	if (len < 0 || (uint32_t)len != length || memcmp(encoded, p, length) != 0)
		__builtin_trap();
}

static void decode(uint16_t type, const uint8_t *p, uint32_t n)
{
	char why[256];
	uint8_t nonce[32];

	switch (type) {
	case POOL_MSG_HELLO:
	case POOL_MSG_CHALLENGE:
	case POOL_MSG_PROOF:
		if (!pool_nonce_decode(type, p, n, nonce, why, sizeof(why)))
			expect_same(pool_bytes32_encode(nonce, encoded, sizeof(encoded)), p, n);
		return;
	case POOL_MSG_WELCOME: {
		struct pool_welcome w;

		if (!pool_welcome_decode(p, n, &w, why, sizeof(why)))
			expect_same(pool_welcome_encode(&w, encoded, sizeof(encoded)), p, n);
		return;
	}
	case POOL_MSG_REFUSE: {
		struct pool_refuse r;

		if (!pool_refuse_decode(p, n, &r, why, sizeof(why)))
			expect_same(pool_refuse_encode(&r, encoded, sizeof(encoded)), p, n);
		return;
	}
	case POOL_MSG_ATTACH:
		if (!pool_attach_decode(p, n, &attach, why, sizeof(why)))
			expect_same(pool_attach_encode(&attach, encoded, sizeof(encoded)), p, n);
		return;
	case POOL_MSG_ATTACHED: {
		struct pool_attached a;

		if (!pool_attached_decode(p, n, &a, why, sizeof(why)))
			expect_same(pool_attached_encode(&a, encoded, sizeof(encoded)), p, n);
		return;
	}
	case POOL_MSG_LOOKUP: {
		struct pool_lookup_view v;

		if (pool_lookup_decode(p, n, &v, why, sizeof(why)))
			return;
		for (uint32_t i = 0; i < v.key_count; i++)
			pool_lookup_view_key(&v, i, &keys[i]);
		expect_same(pool_lookup_encode(v.ticket, keys, v.key_count, encoded, sizeof(encoded)),
			    p, n);
		return;
	}
	case POOL_MSG_ANSWER: {
		struct pool_chain_view v;
		uint64_t ticket;

		if (pool_answer_decode(p, n, &ticket, &v, why, sizeof(why)))
			return;
		for (uint32_t i = 0; i < v.count; i++)
			pool_chain_view_entry(&v, i, &chain[i]);
		expect_same(pool_answer_encode(ticket, chain, v.count, encoded, sizeof(encoded)), p,
			    n);
		return;
	}
	case POOL_MSG_CLAIM:
	case POOL_MSG_CLAIM_LOCAL: {
		struct pool_claim c;

		if (!pool_claim_decode(p, n, &c, why, sizeof(why)))
			expect_same(pool_claim_encode(&c, encoded, sizeof(encoded)), p, n);
		return;
	}
	case POOL_MSG_CLAIMED: {
		struct pool_claimed c;
		struct pool_chain_view v;

		if (pool_claimed_decode(p, n, &c, &v, why, sizeof(why)))
			return;
		for (uint32_t i = 0; i < v.count; i++)
			pool_chain_view_entry(&v, i, &chain[i]);
		expect_same(pool_claimed_encode(&c, chain, v.count, encoded, sizeof(encoded)), p, n);
		return;
	}
	case POOL_MSG_CLAIM_PULL: {
		struct pool_claim_pull c;

		if (!pool_claim_pull_decode(p, n, &c, why, sizeof(why)))
			expect_same(pool_claim_pull_encode(&c, encoded, sizeof(encoded)), p, n);
		return;
	}
	case POOL_MSG_CLAIM_WINDOW: {
		struct pool_claim_window w;
		uint32_t head = n < POOL_CLAIM_WINDOW_HEAD_BYTES ? n : POOL_CLAIM_WINDOW_HEAD_BYTES;

		if (!pool_claim_window_decode(p, head, n - head, &w, why, sizeof(why)))
			expect_same(pool_claim_window_encode(&w, n - head, encoded, sizeof(encoded)), p,
				    head);
		return;
	}
	case POOL_MSG_CLAIM_PLACES: {
		struct pool_places_view v;

		if (pool_claim_places_decode(p, n, &v, why, sizeof(why)))
			return;
		for (uint32_t i = 0; i < v.count; i++)
			pool_places_view_place(&v, i, &places[i]);
		expect_same(pool_claim_places_encode(v.claim_id, places, v.count, encoded,
						     sizeof(encoded)), p, n);
		return;
	}
	case POOL_MSG_CLAIM_END: {
		struct pool_claim_end e;

		if (!pool_claim_end_decode(p, n, &e, why, sizeof(why)))
			expect_same(pool_claim_end_encode(&e, encoded, sizeof(encoded)), p, n);
		return;
	}
	case POOL_MSG_PUT_BEGIN: {
		struct pool_put_begin b;

		if (pool_put_begin_decode(p, n, &b, why, sizeof(why)))
			return;
		for (uint32_t i = 0; i < b.world_size; i++)
			shares[i] = pool_put_begin_share_bytes(&b, i);
		expect_same(pool_put_begin_encode(&b, shares, encoded, sizeof(encoded)), p, n);
		return;
	}
	case POOL_MSG_PUT_READY: {
		struct pool_put_ready r;

		if (!pool_put_ready_decode(p, n, &r, why, sizeof(why)))
			expect_same(pool_put_ready_encode(&r, encoded, sizeof(encoded)), p, n);
		return;
	}
	case POOL_MSG_PUT_WINDOW: {
		struct pool_put_window w;
		uint32_t head = n < POOL_PUT_WINDOW_HEAD_BYTES ? n : POOL_PUT_WINDOW_HEAD_BYTES;

		if (!pool_put_window_decode(p, head, n - head, &w, why, sizeof(why)))
			expect_same(pool_put_window_encode(&w, encoded, sizeof(encoded)), p, head);
		return;
	}
	case POOL_MSG_PUT_END: {
		struct pool_put_end e;

		if (!pool_put_end_decode(p, n, &e, why, sizeof(why)))
			expect_same(pool_put_end_encode(&e, encoded, sizeof(encoded)), p, n);
		return;
	}
	case POOL_MSG_HEARTBEAT: {
		uint64_t ns;

		if (!pool_heartbeat_decode(p, n, &ns, why, sizeof(why)))
			expect_same(pool_heartbeat_encode(ns, encoded, sizeof(encoded)), p, n);
		return;
	}
	case POOL_MSG_BYE:
		pool_bye_decode(p, n, why, sizeof(why));
		return;
	case POOL_MSG_HOLDS: {
		struct pool_holds_view v;

		if (pool_holds_decode(p, n, &v, why, sizeof(why)))
			return;
		for (uint32_t i = 0; i < v.key_count; i++)
			pool_holds_view_key(&v, i, &keys[i]);
		expect_same(pool_holds_encode((enum pool_holds_op)v.op, keys, v.key_count, encoded,
					      sizeof(encoded)), p, n);
		return;
	}
	case POOL_MSG_EXPORT: {
		struct pool_export e;

		if (!pool_export_decode(p, n, &e, why, sizeof(why)))
			expect_same(pool_export_encode(&e, encoded, sizeof(encoded)), p, n);
		return;
	}
	case POOL_MSG_EXPORT_END: {
		struct pool_export_end e;

		if (!pool_export_end_decode(p, n, &e, why, sizeof(why)))
			expect_same(pool_export_end_encode(&e, encoded, sizeof(encoded)), p, n);
		return;
	}
	case POOL_MSG_RDMA_OFFER: {
		struct pool_rdma_endpoint e;

		if (!pool_rdma_offer_decode(p, n, &e, why, sizeof(why)))
			expect_same(pool_rdma_offer_encode(&e, encoded, sizeof(encoded)), p, n);
		return;
	}
	case POOL_MSG_RDMA_LEND: {
		struct pool_rdma_endpoint e;

		if (!pool_rdma_lend_decode(p, n, &e, why, sizeof(why)))
			expect_same(pool_rdma_lend_encode(&e, encoded, sizeof(encoded)), p, n);
		return;
	}
	case POOL_MSG_RDMA_WINDOW: {
		struct pool_rdma_window w;

		if (!pool_rdma_window_decode(p, n, &w, why, sizeof(why)))
			expect_same(pool_rdma_window_encode(&w, encoded, sizeof(encoded)), p, n);
		return;
	}
	case POOL_MSG_RDMA_FREE: {
		const uint8_t *view;
		uint32_t count;

		if (pool_rdma_free_decode(p, n, &count, &view, why, sizeof(why)))
			return;
		for (uint32_t i = 0; i < count; i++)
			slots[i] = sel_get_le32(view + 4 * i);
		expect_same(pool_rdma_free_encode(slots, count, encoded, sizeof(encoded)), p, n);
		return;
	}
	}
}

static int stream_fd(void)
{
	static int fd = -1;

	if (fd < 0)
		fd = memfd_create("fuzz_pool", MFD_CLOEXEC);
	if (fd < 0)
		__builtin_trap();
	return fd;
}

/* Reads frames from bytes through the receiver, keyed or not; how many. */
static int read_stream(const uint8_t *bytes, size_t len, bool keyed)
{
	struct pool_rx rx;
	char why[256];
	int fd = stream_fd(), frames = 0;

	if (ftruncate(fd, 0) != 0 || pwrite(fd, bytes, len, 0) != (ssize_t)len ||
	    lseek(fd, 0, SEEK_SET) != 0)
		__builtin_trap();
	pool_rx_init(&rx, body, sizeof(body), POOL_TO_MANAGER);
	rx.key = keyed ? key : NULL;
	while (frames < FRAMES_PER_INPUT_MAX) {
		bool eof;
		int ret = pool_rx_feed(&rx, fd, &eof, why, sizeof(why));

		if (ret < 0 || eof || ret == POOL_RX_MORE)
			break;
		if (ret == POOL_RX_HEAD) {
			rx.data = rx.data_length <= sizeof(window_data) ? window_data : NULL;
			continue;
		}
		decode(rx.header.type, rx.body, rx.body_length);
		frames++;
	}
	return frames;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t tag[POOL_TAG_BYTES];
	uint16_t tagged[POOL_MSG_TYPE_LAST + 1];
	uint32_t length, tagged_count = 0;
	uint16_t type;

	if (size > INPUT_BYTES_MAX)
		return 0;
	for (type = 1; type <= POOL_MSG_TYPE_LAST; type++) {
		decode(type, data, (uint32_t)size);
		if (pool_type_tagged(type))
			tagged[tagged_count++] = type;
	}
	read_stream(data, size, false);
	read_stream(data, size, true);
	if (size == 0)
		return 0;
	/* the rest as the body of a tagged frame of the type byte 0 picks */
	type = tagged[data[0] % tagged_count]; /* the numbers have gaps (R-POOL-3) */
	length = (uint32_t)(size - 1);
	if (pool_window_head_bytes(type)) {
		uint32_t head = pool_window_head_bytes(type);

		if (length <= head || length + POOL_TAG_BYTES > pool_grammar.types[type].bytes_max)
			return 0;
		pool_frame_build(key, POOL_TO_MANAGER, 0, type, data + 1, head, data + 1 + head,
				 length - head, frame, tag);
	} else {
		if (length + POOL_TAG_BYTES < pool_grammar.types[type].bytes_min ||
		    length + POOL_TAG_BYTES > pool_grammar.types[type].bytes_max)
			return 0;
		pool_frame_build(key, POOL_TO_MANAGER, 0, type, data + 1, length, NULL, 0, frame,
				 tag);
	}
	memcpy(frame + CLUSTER_FRAME_HEADER_BYTES, data + 1, length);
	memcpy(frame + CLUSTER_FRAME_HEADER_BYTES + length, tag, POOL_TAG_BYTES);
	/* a well-built frame within its bounds is always read whole */
	if (read_stream(frame, CLUSTER_FRAME_HEADER_BYTES + length + POOL_TAG_BYTES, true) != 1)
		__builtin_trap();
	return 0;
}
