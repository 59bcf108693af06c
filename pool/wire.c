/*
 * The pool wire protocol: grammar, MACs and tags, the frame receiver and
 * writer, and every message's encoder and decoder (see wire.h). Each check
 * cites its rule in pool/PROTOCOL.md (or the cluster rule it applies).
 */
#define XXH_STATIC_LINKING_ONLY
#include "pool/wire.h"

#include "common/base.h"
#include "common/failpoint.h"
#include "common/xxh.h"
#include "selene/selene.h"

#include <blake2.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define PROTO_FAIL(why, why_size, ...) sel_fail(SEL_EPROTO, why, why_size, __VA_ARGS__)
#define TAG POOL_TAG_BYTES
#define KEY_MAX_CONSUMED (1ull << 40)
/* An RDMA endpoint's fixed part and one region (pool/RDMA.md, R-RDMA-5). */
#define RDMA_ENDPOINT_FIXED 56u
#define RDMA_ENDPOINT_REGION 24u

static inline uint16_t get_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static inline void put_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

/* ---- Grammar (R-POOL-2 .. R-POOL-4) ---- */

#define WINDOW_MAX_PAYLOAD(head) ((head) + POOL_WINDOW_BYTES_MAX + TAG)

_Static_assert(WINDOW_MAX_PAYLOAD(POOL_CLAIM_WINDOW_HEAD_BYTES) <= POOL_FRAME_PAYLOAD_BYTES_MAX,
	       "a window fits a frame");
_Static_assert(POOL_FRAME_PAYLOAD_BYTES_MAX <= (uint32_t)INT32_MAX, "int length");

static const struct cluster_msg_info pool_types[POOL_MSG_TYPE_LAST + 1] = {
	[POOL_MSG_HELLO] = { "HELLO", POOL_NONCE_BYTES, POOL_NONCE_BYTES },
	[POOL_MSG_CHALLENGE] = { "CHALLENGE", POOL_NONCE_BYTES, POOL_NONCE_BYTES },
	[POOL_MSG_PROOF] = { "PROOF", POOL_MAC_BYTES, POOL_MAC_BYTES },
	[POOL_MSG_WELCOME] = { "WELCOME", POOL_WELCOME_FIXED_BYTES + 1,
			       POOL_WELCOME_FIXED_BYTES + POOL_NAME_BYTES_MAX +
				       POOL_ARENA_PATH_BYTES_MAX },
	[POOL_MSG_REFUSE] = { "REFUSE", POOL_REFUSE_FIXED_BYTES,
			      POOL_REFUSE_FIXED_BYTES + CLUSTER_REFUSE_TEXT_BYTES_MAX + TAG },
	[POOL_MSG_ATTACH] = { "ATTACH", POOL_ATTACH_FIXED_BYTES + POOL_ATTACH_RANK_BYTES + TAG,
			      POOL_ATTACH_FIXED_BYTES +
				      POOL_ATTACH_RANK_BYTES * REC_WORLD_SIZE_MAX + TAG },
	[POOL_MSG_ATTACHED] = { "ATTACHED", POOL_ATTACHED_BYTES + TAG,
				POOL_ATTACHED_BYTES + TAG },
	[POOL_MSG_LOOKUP] = { "LOOKUP", POOL_LOOKUP_FIXED_BYTES + POOL_WIRE_KEY_BYTES + TAG,
			      POOL_LOOKUP_FIXED_BYTES +
				      POOL_WIRE_KEY_BYTES * POOL_LOOKUP_KEYS_MAX + TAG },
	[POOL_MSG_ANSWER] = { "ANSWER", POOL_ANSWER_FIXED_BYTES + TAG,
			      POOL_ANSWER_FIXED_BYTES +
				      POOL_ANSWER_ENTRY_BYTES * POOL_CHAIN_RECORDS_MAX + TAG },
	[POOL_MSG_CLAIM] = { "CLAIM", POOL_CLAIM_BYTES + TAG, POOL_CLAIM_BYTES + TAG },
	[POOL_MSG_CLAIMED] = { "CLAIMED", POOL_CLAIMED_FIXED_BYTES + TAG,
			       POOL_CLAIMED_FIXED_BYTES +
				       POOL_CLAIMED_ENTRY_BYTES * POOL_CHAIN_RECORDS_MAX + TAG },
	[POOL_MSG_CLAIM_PULL] = { "CLAIM_PULL", POOL_CLAIM_PULL_BYTES + TAG,
				  POOL_CLAIM_PULL_BYTES + TAG },
	[POOL_MSG_CLAIM_WINDOW] = { "CLAIM_WINDOW", POOL_CLAIM_WINDOW_HEAD_BYTES + 1 + TAG,
				    WINDOW_MAX_PAYLOAD(POOL_CLAIM_WINDOW_HEAD_BYTES) },
	[POOL_MSG_CLAIM_PLACES] = { "CLAIM_PLACES", POOL_CLAIM_PLACES_FIXED_BYTES + TAG,
				    POOL_CLAIM_PLACES_FIXED_BYTES +
					    POOL_PLACE_BYTES * POOL_CHAIN_RECORDS_MAX + TAG },
	[POOL_MSG_CLAIM_END] = { "CLAIM_END", POOL_CLAIM_END_BYTES + TAG,
				 POOL_CLAIM_END_BYTES + TAG },
	[POOL_MSG_PUT_BEGIN] = { "PUT_BEGIN", POOL_PUT_BEGIN_FIXED_BYTES + 8 + TAG,
				 POOL_PUT_BEGIN_FIXED_BYTES + 8 * REC_WORLD_SIZE_MAX + TAG },
	[POOL_MSG_PUT_READY] = { "PUT_READY", POOL_PUT_READY_BYTES + TAG,
				 POOL_PUT_READY_BYTES + TAG },
	[POOL_MSG_PUT_WINDOW] = { "PUT_WINDOW", POOL_PUT_WINDOW_HEAD_BYTES + 1 + TAG,
				  WINDOW_MAX_PAYLOAD(POOL_PUT_WINDOW_HEAD_BYTES) },
	[POOL_MSG_PUT_END] = { "PUT_END", POOL_PUT_END_BYTES + TAG, POOL_PUT_END_BYTES + TAG },
	[POOL_MSG_HEARTBEAT] = { "HEARTBEAT", POOL_HEARTBEAT_BYTES + TAG,
				 POOL_HEARTBEAT_BYTES + TAG },
	[POOL_MSG_BYE] = { "BYE", TAG, TAG },
	[POOL_MSG_CLAIM_LOCAL] = { "CLAIM_LOCAL", POOL_CLAIM_BYTES + TAG,
				   POOL_CLAIM_BYTES + TAG },
	[POOL_MSG_HOLDS] = { "HOLDS", POOL_HOLDS_FIXED_BYTES + TAG,
			     POOL_HOLDS_FIXED_BYTES + POOL_WIRE_KEY_BYTES * POOL_HOLDS_KEYS_MAX +
				     TAG },
	[POOL_MSG_EXPORT] = { "EXPORT", POOL_EXPORT_BYTES + TAG, POOL_EXPORT_BYTES + TAG },
	[POOL_MSG_EXPORT_END] = { "EXPORT_END", POOL_EXPORT_END_BYTES + TAG,
				  POOL_EXPORT_END_BYTES + TAG },
	[POOL_MSG_RDMA_OFFER] = { "RDMA_OFFER", RDMA_ENDPOINT_FIXED + TAG,
				  RDMA_ENDPOINT_FIXED + TAG },
	[POOL_MSG_RDMA_LEND] = { "RDMA_LEND", RDMA_ENDPOINT_FIXED + RDMA_ENDPOINT_REGION + TAG,
				 POOL_RDMA_ENDPOINT_BYTES_MAX + TAG },
	[POOL_MSG_RDMA_WINDOW] = { "RDMA_WINDOW", POOL_RDMA_WINDOW_BYTES + TAG,
				   POOL_RDMA_WINDOW_BYTES + TAG },
	[POOL_MSG_RDMA_FREE] = { "RDMA_FREE", POOL_RDMA_FREE_FIXED_BYTES + 4 + TAG,
				 POOL_RDMA_FREE_FIXED_BYTES + 4 * POOL_RDMA_SLOTS_MAX + TAG },
};

const struct cluster_grammar pool_grammar = {
	.magic = POOL_MAGIC,
	.version = POOL_VERSION,
	.type_last = POOL_MSG_TYPE_LAST,
	.types = pool_types,
};

_Static_assert(POOL_CONTROL_BODY_BYTES_MAX >= POOL_ATTACH_FIXED_BYTES +
		       POOL_ATTACH_RANK_BYTES * REC_WORLD_SIZE_MAX, "attach fits a body");
_Static_assert(POOL_CONTROL_BODY_BYTES_MAX >= POOL_HOLDS_FIXED_BYTES +
		       POOL_WIRE_KEY_BYTES * POOL_HOLDS_KEYS_MAX, "holds fit a body");
_Static_assert(POOL_CONTROL_BODY_BYTES_MAX >= POOL_LOOKUP_FIXED_BYTES +
		       POOL_WIRE_KEY_BYTES * POOL_LOOKUP_KEYS_MAX, "lookup fits a body");

static const char *const reason_names[POOL_REFUSE_REASON_LAST + 1] = {
	[POOL_REFUSE_PROTOCOL] = "protocol", [POOL_REFUSE_AUTH] = "auth",
	[POOL_REFUSE_SCOPE] = "scope",       [POOL_REFUSE_WORLD] = "world",
	[POOL_REFUSE_BUSY] = "busy",         [POOL_REFUSE_SHUTDOWN] = "shutdown",
	[POOL_REFUSE_DEADLINE] = "deadline",
};

const char *pool_refuse_reason_name(uint32_t reason)
{
	return reason >= 1 && reason <= POOL_REFUSE_REASON_LAST ? reason_names[reason] : "unknown";
}

bool pool_type_tagged(uint16_t type)
{
	return type >= POOL_MSG_REFUSE && type <= POOL_MSG_TYPE_LAST && pool_types[type].name;
}

uint32_t pool_window_head_bytes(uint16_t type)
{
	if (type == POOL_MSG_CLAIM_WINDOW)
		return POOL_CLAIM_WINDOW_HEAD_BYTES;
	if (type == POOL_MSG_PUT_WINDOW)
		return POOL_PUT_WINDOW_HEAD_BYTES;
	return 0;
}

/* ---- MACs, key, tags (R-POOL-10 .. R-POOL-12) ---- */

struct part {
	const void *bytes;
	size_t length;
};

static void keyed_blake2b(const uint8_t *key, size_t key_length, const struct part *parts,
			  size_t count, uint8_t *out, size_t out_length)
{
	blake2b_state s;
	int ret = key ? blake2b_init_key(&s, out_length, key, key_length)
		      : blake2b_init(&s, out_length);

	SEL_ASSERT(ret == 0);
	for (size_t i = 0; i < count; i++)
		if (parts[i].length)
			blake2b_update(&s, parts[i].bytes, parts[i].length);
	ret = blake2b_final(&s, out, out_length);
	SEL_ASSERT(ret == 0);
}

#define DOMAIN(text) { text, sizeof(text) - 1 }

void pool_proof_mac(const uint8_t secret[POOL_SECRET_BYTES],
		    const uint8_t server_nonce[POOL_NONCE_BYTES],
		    const uint8_t client_nonce[POOL_NONCE_BYTES], uint8_t out[POOL_MAC_BYTES])
{
	const struct part parts[] = { DOMAIN("selene-pool-proof-v1"),
				      { server_nonce, POOL_NONCE_BYTES },
				      { client_nonce, POOL_NONCE_BYTES } };

	keyed_blake2b(secret, POOL_SECRET_BYTES, parts, SEL_ARRAY_SIZE(parts), out,
		      POOL_MAC_BYTES);
}

void pool_welcome_mac(const uint8_t secret[POOL_SECRET_BYTES],
		      const uint8_t client_nonce[POOL_NONCE_BYTES],
		      const uint8_t server_nonce[POOL_NONCE_BYTES], const uint8_t *facts,
		      size_t facts_length, uint8_t out[POOL_MAC_BYTES])
{
	const struct part parts[] = { DOMAIN("selene-pool-welcome-v1"),
				      { client_nonce, POOL_NONCE_BYTES },
				      { server_nonce, POOL_NONCE_BYTES },
				      { facts, facts_length } };

	keyed_blake2b(secret, POOL_SECRET_BYTES, parts, SEL_ARRAY_SIZE(parts), out,
		      POOL_MAC_BYTES);
}

void pool_connection_key(const uint8_t secret[POOL_SECRET_BYTES],
			 const uint8_t client_nonce[POOL_NONCE_BYTES],
			 const uint8_t server_nonce[POOL_NONCE_BYTES], uint8_t out[POOL_KEY_BYTES])
{
	const struct part parts[] = { DOMAIN("selene-pool-connection-v1"),
				      { client_nonce, POOL_NONCE_BYTES },
				      { server_nonce, POOL_NONCE_BYTES } };

	keyed_blake2b(secret, POOL_SECRET_BYTES, parts, SEL_ARRAY_SIZE(parts), out,
		      POOL_KEY_BYTES);
}

void pool_frame_tag(const uint8_t key[POOL_KEY_BYTES], enum pool_direction direction,
		    const uint8_t prefix[CLUSTER_OFF_PAYLOAD_CHECKSUM], const uint8_t *covered,
		    size_t covered_length, uint8_t out[POOL_TAG_BYTES])
{
	uint8_t dir = (uint8_t)direction;
	const struct part parts[] = { DOMAIN("selene-pool-frame-v1"),
				      { &dir, 1 },
				      { prefix, CLUSTER_OFF_PAYLOAD_CHECKSUM },
				      { covered, covered_length } };

	keyed_blake2b(key, POOL_KEY_BYTES, parts, SEL_ARRAY_SIZE(parts), out, POOL_TAG_BYTES);
}

bool pool_tag_equal(const uint8_t a[POOL_TAG_BYTES], const uint8_t b[POOL_TAG_BYTES])
{
	volatile uint8_t diff = 0;

	for (uint32_t i = 0; i < POOL_TAG_BYTES; i++)
		diff |= a[i] ^ b[i];
	return diff == 0;
}

/* ---- Frame building and writing ---- */

void pool_frame_build(const uint8_t *key, enum pool_direction direction, uint64_t sequence,
		      uint16_t type, const uint8_t *body, uint32_t body_length,
		      const uint8_t *data, uint32_t data_length,
		      uint8_t header[CLUSTER_FRAME_HEADER_BYTES], uint8_t tag[POOL_TAG_BYTES])
{
	uint64_t total = (uint64_t)body_length + data_length + (key ? TAG : 0);
	XXH3_state_t st;

	SEL_ASSERT(total <= POOL_FRAME_PAYLOAD_BYTES_MAX);
	SEL_ASSERT(!data_length || pool_window_head_bytes(type) == body_length);
	cluster_frame_header_prefix(&pool_grammar, header, type, sequence, (uint32_t)total);
	if (key)
		pool_frame_tag(key, direction, header, body, body_length, tag);
	XXH3_64bits_reset(&st);
	if (body_length)
		sel_xxh3_update(&st, body, body_length);
	if (data_length)
		sel_xxh3_update(&st, data, data_length);
	if (key)
		sel_xxh3_update(&st, tag, TAG);
	sel_put_le64(header + CLUSTER_OFF_PAYLOAD_CHECKSUM, XXH3_64bits_digest(&st));
	sel_put_le64(header + CLUSTER_OFF_HEADER_CHECKSUM,
		     XXH3_64bits(header, CLUSTER_OFF_HEADER_CHECKSUM));
}

int pool_frame_write(int fd, const uint8_t *key, enum pool_direction direction,
		     uint64_t *sequence, uint16_t type, const uint8_t *body,
		     uint32_t body_length, const uint8_t *data, uint32_t data_length)
{
	uint8_t header[CLUSTER_FRAME_HEADER_BYTES], tag[TAG];
	struct iovec iov[4];
	int count = 0, ret;

	pool_frame_build(key, direction, *sequence, type, body, body_length, data, data_length,
			 header, tag);
	iov[count++] = (struct iovec){ header, sizeof(header) };
	if (body_length)
		iov[count++] = (struct iovec){ (void *)body, body_length };
	if (data_length)
		iov[count++] = (struct iovec){ (void *)data, data_length };
	if (key)
		iov[count++] = (struct iovec){ tag, TAG };
	ret = cluster_write_all(fd, iov, count);
	if (ret)
		return ret;
	(*sequence)++;
	return 0;
}

/* ---- The frame receiver ---- */

void pool_rx_init(struct pool_rx *rx, uint8_t *body, uint32_t body_size,
		  enum pool_direction direction)
{
	memset(rx, 0, sizeof(*rx));
	rx->body = body;
	rx->body_size = body_size;
	rx->direction = direction;
}

/* Where the bytes at frame offset done go, and how many are wanted there. */
static uint8_t *rx_target(struct pool_rx *rx, size_t *want)
{
	uint64_t at = rx->done;

	if (at < CLUSTER_FRAME_HEADER_BYTES) {
		*want = CLUSTER_FRAME_HEADER_BYTES - at;
		return rx->raw + at;
	}
	at -= CLUSTER_FRAME_HEADER_BYTES;
	if (at < rx->body_length) {
		*want = rx->body_length - at;
		return rx->body + at;
	}
	at -= rx->body_length;
	if (at < rx->data_length) {
		*want = rx->data_length - at;
		if (rx->data)
			return rx->data + at;
		/* dropped: into the body buffer past the head, a piece at a time */
		if (*want > rx->body_size - rx->body_length)
			*want = rx->body_size - rx->body_length;
		return rx->body + rx->body_length;
	}
	at -= rx->data_length;
	*want = TAG - at;
	return rx->tag + at;
}

static int rx_header(struct pool_rx *rx, char *why, size_t why_size)
{
	struct cluster_frame_header *h = &rx->header;
	uint32_t head, tag = rx->key ? TAG : 0;
	int ret = cluster_frame_header_decode_in(&pool_grammar, rx->raw, h, why, why_size);

	if (ret)
		return ret;
	if (h->sequence != rx->next_sequence)
		return PROTO_FAIL(why, why_size, "%s sequence %" PRIu64 ", expected %" PRIu64
				  " (R-POOL-5)", pool_types[h->type].name, h->sequence,
				  rx->next_sequence);
	if (rx->key && !pool_type_tagged(h->type))
		return PROTO_FAIL(why, why_size, "%s after WELCOME (R-POOL-6)",
				  pool_types[h->type].name);
	if (!rx->key && h->type > POOL_MSG_REFUSE)
		return PROTO_FAIL(why, why_size, "%s before WELCOME (R-POOL-6)",
				  pool_types[h->type].name);
	if (h->payload_length < tag)
		return PROTO_FAIL(why, why_size, "%s payload of %" PRIu32 " bytes has no tag "
				  "(R-POOL-12)", pool_types[h->type].name, h->payload_length);
	head = pool_window_head_bytes(h->type);
	if (head) {
		if (h->payload_length < head + 1 + tag)
			return PROTO_FAIL(why, why_size, "%s without data (R-POOL-33, R-POOL-41)",
					  pool_types[h->type].name);
		rx->body_length = head;
		rx->data_length = h->payload_length - head - tag;
	} else {
		rx->body_length = h->payload_length - tag;
		rx->data_length = 0;
	}
	if (rx->body_length > rx->body_size)
		return sel_fail(SEL_ETOOBIG, why, why_size, "%s body of %" PRIu32 " bytes, "
				"buffer holds %" PRIu32, pool_types[h->type].name,
				rx->body_length, rx->body_size);
	rx->data = NULL;
	return 0;
}

/*
 * R-WIRE-7 and R-POOL-12 on a whole frame. The checksum state took every
 * payload byte as it was read (dropped window data included).
 */
static int rx_verify(struct pool_rx *rx, XXH3_state_t *st, char *why, size_t why_size)
{
	uint8_t want[TAG];

	if (XXH3_64bits_digest(st) != rx->header.payload_checksum)
		return PROTO_FAIL(why, why_size, "%s payload checksum mismatch (R-WIRE-7)",
				  pool_types[rx->header.type].name);
	if (!rx->key)
		return 0;
	pool_frame_tag(rx->key, rx->direction, rx->raw, rx->body, rx->body_length, want);
	if (!pool_tag_equal(want, rx->tag))
		return sel_fail(-EACCES, why, why_size, "%s tag does not verify (R-POOL-12)",
				pool_types[rx->header.type].name);
	return 0;
}

static XXH3_state_t *rx_state(struct pool_rx *rx)
{
	_Static_assert(sizeof(((struct pool_rx *)0)->xxh) >= sizeof(XXH3_state_t),
		       "the receiver holds an XXH3 state");
	return (XXH3_state_t *)(void *)rx->xxh;
}

/* The next byte read is a window's data. */
static bool at_data(const struct pool_rx *rx)
{
	uint64_t at = rx->done;

	return at >= CLUSTER_FRAME_HEADER_BYTES + rx->body_length &&
	       at - CLUSTER_FRAME_HEADER_BYTES - rx->body_length < rx->data_length;
}

/*
 * Takes up to want bytes for to: from what was read ahead, or with one
 * read, into ahead where fewer than its size are wanted (so a small frame,
 * and those that came with it, take one read) and straight to to
 * otherwise. Returns as read(2).
 */
static ssize_t rx_read(struct pool_rx *rx, int fd, uint8_t *to, size_t want)
{
	size_t n;
	ssize_t got;

	if (rx->ahead_at == rx->ahead_end && want >= sizeof(rx->ahead)) {
		got = read(fd, to, want);
		rx->reads += got > 0;
		return got;
	}
	if (rx->ahead_at == rx->ahead_end) {
		got = read(fd, rx->ahead, sizeof(rx->ahead));
		if (got <= 0)
			return got;
		rx->reads++;
		rx->ahead_at = 0;
		rx->ahead_end = (uint32_t)got;
	}
	n = rx->ahead_end - rx->ahead_at;
	if (n > want)
		n = want;
	memcpy(to, rx->ahead + rx->ahead_at, n);
	rx->ahead_at += (uint32_t)n;
	return (ssize_t)n;
}

int pool_rx_feed(struct pool_rx *rx, int fd, bool *eof, char *why, size_t why_size)
{
	XXH3_state_t *st = rx_state(rx);

	*eof = false;
	for (;;) {
		uint64_t payload_at;
		size_t want;
		uint8_t *to;
		ssize_t n;
		int ret;

		if (rx->done == CLUSTER_FRAME_HEADER_BYTES + rx->header.payload_length &&
		    rx->done >= CLUSTER_FRAME_HEADER_BYTES) {
			ret = rx_verify(rx, st, why, why_size);
			if (ret)
				return ret;
			rx->done = 0;
			rx->head_given = false;
			rx->next_sequence++;
			rx->frames++;
			return POOL_RX_FRAME;
		}
		payload_at = rx->done >= CLUSTER_FRAME_HEADER_BYTES
				     ? rx->done - CLUSTER_FRAME_HEADER_BYTES : 0;
		if (rx->data_length && !rx->head_given && rx->done >= CLUSTER_FRAME_HEADER_BYTES &&
		    payload_at == rx->body_length) {
			rx->head_given = true;
			return POOL_RX_HEAD;
		}
		to = rx_target(rx, &want);
		if (rx->data && at_data(rx))
			SEL_FAILPOINT(SEL_FP_POOL_RX_DATA);
		n = rx_read(rx, fd, to, want);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return POOL_RX_MORE;
		if (n < 0)
			return sel_fail(-errno, why, why_size, "reading a pool frame: %s",
					strerror(errno));
		if (n == 0) {
			if (rx->done == 0) {
				*eof = true;
				return 0;
			}
			return PROTO_FAIL(why, why_size, "end of file inside a frame (R-WIRE-9)");
		}
		if (rx->done >= CLUSTER_FRAME_HEADER_BYTES)
			sel_xxh3_update(st, to, (size_t)n);
		rx->done += (uint64_t)n;
		if (rx->done == CLUSTER_FRAME_HEADER_BYTES) {
			ret = rx_header(rx, why, why_size);
			if (ret)
				return ret;
			XXH3_64bits_reset(st);
		}
	}
}

int pool_rx_read_frame(struct pool_rx *rx, int fd, char *why, size_t why_size)
{
	for (;;) {
		bool eof;
		int ret = pool_rx_feed(rx, fd, &eof, why, why_size);

		if (ret == POOL_RX_FRAME)
			return 1;
		if (ret < 0)
			return ret;
		if (eof)
			return sel_fail(0, why, why_size, "end of file between frames");
		if (ret == POOL_RX_HEAD)
			return PROTO_FAIL(why, why_size, "%s out of place (R-POOL-6)",
					  pool_types[rx->header.type].name);
		/* POOL_RX_MORE on a blocking fd: its receive timeout expired */
		return sel_fail(-ETIMEDOUT, why, why_size, "timed out reading a pool frame");
	}
}

/* ---- Field rules (R-POOL-7) ---- */

static int check_length(const char *what, uint32_t length, uint64_t expected, char *why,
			size_t why_size)
{
	if (length != expected)
		return PROTO_FAIL(why, why_size, "%s body of %" PRIu32 " bytes, its layout has %"
				  PRIu64 " (R-WIRE-10)", what, length, expected);
	return 0;
}

static bool bytes_zero(const uint8_t *p, size_t n)
{
	uint8_t any = 0;

	for (size_t i = 0; i < n; i++)
		any |= p[i];
	return any == 0;
}

static bool result_valid(int32_t result)
{
	return result == 0 || (result >= -4095 && result <= -1) ||
	       (result >= SEL_ERROR_FIRST && result <= SEL_ERROR_LAST);
}

/*
 * CLAIMED, CLAIM_END, EXPORT_END, PUT_READY and PUT_END open with the same
 * head: a u64 id at offset 0 that is never 0 and an i32 result at offset 8
 * (R-WIRE-12). id_result_check checks a decoded head; its messages name the
 * message what, the id id_name and the rule id_rule that a zero id breaks.
 */
static int id_result_check(const char *what, const char *id_name, const char *id_rule,
			   uint64_t id, int32_t result, char *why, size_t why_size)
{
	if (id == 0)
		return PROTO_FAIL(why, why_size, "%s %s 0 (%s)", what, id_name, id_rule);
	if (!result_valid(result))
		return PROTO_FAIL(why, why_size, "%s result %" PRId32 " (R-WIRE-12)", what,
				  result);
	return 0;
}

/*
 * Writes the head into a message of bytes bytes and returns bytes; -EINVAL
 * for a zero id or a result outside R-WIRE-12, -ENOSPC when buf_size is less
 * than bytes. The caller writes what follows offset 12.
 */
static int id_result_encode(uint64_t id, int32_t result, size_t bytes, uint8_t *buf,
			    size_t buf_size)
{
	if (id == 0 || !result_valid(result))
		return -EINVAL;
	if (buf_size < bytes)
		return -ENOSPC;
	sel_put_le64(buf, id);
	sel_put_le32(buf + 8, (uint32_t)result);
	return (int)bytes;
}

/* Checks that a body is exactly bytes long, then reads and checks its head. */
static int id_result_decode(const char *what, const char *id_name, const char *id_rule,
			    const uint8_t *body, uint32_t length, uint32_t bytes, uint64_t *id,
			    int32_t *result, char *why, size_t why_size)
{
	int ret = check_length(what, length, bytes, why, why_size);

	if (ret)
		return ret;
	*id = sel_get_le64(body);
	*result = (int32_t)sel_get_le32(body + 8);
	return id_result_check(what, id_name, id_rule, *id, *result, why, why_size);
}

static bool text_printable(const uint8_t *text, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (text[i] < 0x20 || text[i] > 0x7e)
			return false;
	return true;
}

static bool key_valid(const struct rec_key *k)
{
	return k->consumed >= 1 && k->consumed <= KEY_MAX_CONSUMED;
}

static bool root_marker(const struct rec_key *k)
{
	return k->consumed == 0 && bytes_zero(k->digest.bytes, REC_DIGEST_BYTES);
}

static bool parent_valid(const struct rec_key *parent, const struct rec_key *key)
{
	return root_marker(parent) || (parent->consumed >= 1 && parent->consumed < key->consumed);
}

static void put_key(uint8_t *p, const struct rec_key *k)
{
	sel_put_le64(p, k->consumed);
	memcpy(p + 8, k->digest.bytes, REC_DIGEST_BYTES);
}

static void get_key(const uint8_t *p, struct rec_key *k)
{
	k->consumed = sel_get_le64(p);
	memcpy(k->digest.bytes, p + 8, REC_DIGEST_BYTES);
}

static size_t put_text(uint8_t *p, const char *text, size_t len)
{
	put_le16(p, (uint16_t)len);
	memcpy(p + 2, text, len);
	return 2 + len;
}

/* A text at p (u16 n, n bytes) within end; 0 and its length, or SEL_EPROTO. */
static int get_text(const char *what, const uint8_t *p, const uint8_t *end, size_t min,
		    size_t max, char *out, size_t *used, char *why, size_t why_size)
{
	size_t n;

	if (end - p < 2)
		return PROTO_FAIL(why, why_size, "%s cut short (R-WIRE-10)", what);
	n = get_le16(p);
	if (n < min || n > max)
		return PROTO_FAIL(why, why_size, "%s of %zu bytes, allowed %zu .. %zu (R-WIRE-13)",
				  what, n, min, max);
	if ((size_t)(end - p - 2) < n)
		return PROTO_FAIL(why, why_size, "%s cut short (R-WIRE-10)", what);
	if (!text_printable(p + 2, n))
		return PROTO_FAIL(why, why_size, "%s is not printable ASCII (R-WIRE-13)", what);
	memcpy(out, p + 2, n);
	out[n] = '\0';
	*used = 2 + n;
	return 0;
}

/* ---- HELLO, CHALLENGE, PROOF ---- */

int pool_bytes32_encode(const uint8_t in[32], uint8_t *buf, size_t buf_size)
{
	if (buf_size < 32)
		return -ENOSPC;
	if (bytes_zero(in, 32))
		return -EINVAL;
	memcpy(buf, in, 32);
	return 32;
}

int pool_nonce_decode(uint16_t type, const uint8_t *body, uint32_t length, uint8_t out[32],
		      char *why, size_t why_size)
{
	const char *name = cluster_grammar_msg_name(&pool_grammar, type);
	int ret = check_length(name, length, 32, why, why_size);

	if (ret)
		return ret;
	if (bytes_zero(body, 32))
		return PROTO_FAIL(why, why_size, "%s is all zero (R-POOL-10)", name);
	memcpy(out, body, 32);
	return 0;
}

/* ---- WELCOME (R-POOL-13) ---- */

static int welcome_check(const struct pool_welcome *m, size_t name_len, size_t path_len,
			 char *why, size_t why_size)
{
	if (bytes_zero(m->arena_id, POOL_ARENA_ID_BYTES))
		return PROTO_FAIL(why, why_size, "WELCOME arena id is zero (R-POOL-13)");
	if (m->arena_generation == 0)
		return PROTO_FAIL(why, why_size, "WELCOME arena generation 0 (R-POOL-13)");
	if (m->window_bytes < POOL_WINDOW_BYTES_MIN || m->window_bytes > POOL_WINDOW_BYTES_MAX)
		return PROTO_FAIL(why, why_size, "WELCOME window bytes %" PRIu32 " (R-POOL-13)",
				  m->window_bytes);
	if (m->claims_max < 1 || m->claims_max > POOL_CLAIMS_MAX || m->puts_max < 1 ||
	    m->puts_max > POOL_PUTS_MAX)
		return PROTO_FAIL(why, why_size, "WELCOME claims max %" PRIu32 " or puts max %"
				  PRIu32 " out of range (R-POOL-13)", m->claims_max, m->puts_max);
	if (name_len < 1 || name_len > POOL_NAME_BYTES_MAX)
		return PROTO_FAIL(why, why_size, "WELCOME name of %zu bytes (R-POOL-13)", name_len);
	if ((m->arena_bytes == 0) != (path_len == 0))
		return PROTO_FAIL(why, why_size, "WELCOME arena of %" PRIu64 " bytes with a path "
				  "of %zu (R-POOL-13)", m->arena_bytes, path_len);
	if (path_len && (path_len > POOL_ARENA_PATH_BYTES_MAX ||
			 strncmp(m->arena_path, "/dev/shm/", 9) != 0 || path_len <= 9))
		return PROTO_FAIL(why, why_size, "WELCOME arena path is not a file under "
				  "/dev/shm (R-POOL-13)");
	if (m->arena_bytes && m->arena_bytes <= POOL_ARENA_HEADER_BYTES)
		return PROTO_FAIL(why, why_size, "WELCOME arena of %" PRIu64 " bytes (R-POOL-50)",
				  m->arena_bytes);
	return 0;
}

int pool_welcome_encode(const struct pool_welcome *m, uint8_t *buf, size_t buf_size)
{
	size_t name_len = strnlen(m->name, sizeof(m->name));
	size_t path_len = strnlen(m->arena_path, sizeof(m->arena_path));
	size_t length = POOL_WELCOME_FIXED_BYTES + name_len + path_len;
	uint8_t *p;

	if (name_len > POOL_NAME_BYTES_MAX || path_len > POOL_ARENA_PATH_BYTES_MAX)
		return SEL_ETOOBIG;
	if (welcome_check(m, name_len, path_len, NULL, 0) ||
	    !text_printable((const uint8_t *)m->name, name_len) ||
	    !text_printable((const uint8_t *)m->arena_path, path_len))
		return -EINVAL;
	if (buf_size < length)
		return -ENOSPC;
	memcpy(buf, m->mac, POOL_MAC_BYTES);
	memcpy(buf + 32, m->arena_id, POOL_ARENA_ID_BYTES);
	sel_put_le64(buf + 48, m->arena_generation);
	sel_put_le64(buf + 56, m->arena_bytes);
	sel_put_le32(buf + 64, m->window_bytes);
	sel_put_le32(buf + 68, m->claims_max);
	sel_put_le32(buf + 72, m->puts_max);
	sel_put_le32(buf + 76, m->claim_setup_ms);
	p = buf + POOL_WELCOME_OFF_NAME_LENGTH;
	p += put_text(p, m->name, name_len);
	p += put_text(p, m->arena_path, path_len);
	SEL_ASSERT((size_t)(p - buf) == length);
	return (int)length;
}

int pool_welcome_decode(const uint8_t *body, uint32_t length, struct pool_welcome *out,
			char *why, size_t why_size)
{
	const uint8_t *p = body + POOL_WELCOME_OFF_NAME_LENGTH, *end = body + length;
	size_t used;
	int ret;

	memset(out, 0, sizeof(*out));
	if (length < POOL_WELCOME_FIXED_BYTES)
		return PROTO_FAIL(why, why_size, "WELCOME body of %" PRIu32 " bytes (R-WIRE-10)",
				  length);
	memcpy(out->mac, body, POOL_MAC_BYTES);
	memcpy(out->arena_id, body + 32, POOL_ARENA_ID_BYTES);
	out->arena_generation = sel_get_le64(body + 48);
	out->arena_bytes = sel_get_le64(body + 56);
	out->window_bytes = sel_get_le32(body + 64);
	out->claims_max = sel_get_le32(body + 68);
	out->puts_max = sel_get_le32(body + 72);
	out->claim_setup_ms = sel_get_le32(body + 76);
	ret = get_text("WELCOME name", p, end, 1, POOL_NAME_BYTES_MAX, out->name, &used, why,
		       why_size);
	if (ret)
		return ret;
	p += used;
	ret = get_text("WELCOME arena path", p, end, 0, POOL_ARENA_PATH_BYTES_MAX,
		       out->arena_path, &used, why, why_size);
	if (ret)
		return ret;
	p += used;
	if (p != end)
		return PROTO_FAIL(why, why_size, "WELCOME has %zu trailing bytes (R-WIRE-10)",
				  (size_t)(end - p));
	return welcome_check(out, strlen(out->name), strlen(out->arena_path), why, why_size);
}

/* ---- REFUSE (R-POOL-9) ---- */

int pool_refuse_encode(const struct pool_refuse *m, uint8_t *buf, size_t buf_size)
{
	size_t len = strnlen(m->text, sizeof(m->text));

	if (len > CLUSTER_REFUSE_TEXT_BYTES_MAX)
		return SEL_ETOOBIG;
	if (m->reason < 1 || m->reason > POOL_REFUSE_REASON_LAST ||
	    !text_printable((const uint8_t *)m->text, len))
		return -EINVAL;
	if (buf_size < POOL_REFUSE_FIXED_BYTES + len)
		return -ENOSPC;
	sel_put_le32(buf, m->reason);
	put_text(buf + 4, m->text, len);
	return (int)(POOL_REFUSE_FIXED_BYTES + len);
}

int pool_refuse_decode(const uint8_t *body, uint32_t length, struct pool_refuse *out,
		       char *why, size_t why_size)
{
	size_t used;
	int ret;

	if (length < POOL_REFUSE_FIXED_BYTES)
		return PROTO_FAIL(why, why_size, "REFUSE body of %" PRIu32 " bytes (R-WIRE-10)",
				  length);
	out->reason = sel_get_le32(body);
	if (out->reason < 1 || out->reason > POOL_REFUSE_REASON_LAST)
		return PROTO_FAIL(why, why_size, "REFUSE reason %" PRIu32 " (R-POOL-9)",
				  out->reason);
	ret = get_text("REFUSE text", body + 4, body + length, 0, CLUSTER_REFUSE_TEXT_BYTES_MAX,
		       out->text, &used, why, why_size);
	if (ret)
		return ret;
	return check_length("REFUSE", length, 4 + used, why, why_size);
}

/* ---- ATTACH, ATTACHED (R-POOL-14 .. R-POOL-17) ---- */

static int attach_check(const struct pool_attach *m, char *why, size_t why_size)
{
	if (m->world_size < 1 || m->world_size > REC_WORLD_SIZE_MAX)
		return PROTO_FAIL(why, why_size, "ATTACH world size %" PRIu32 " (R-POOL-14)",
				  m->world_size);
	if (m->rank >= m->world_size)
		return PROTO_FAIL(why, why_size, "ATTACH rank %" PRIu32 " of %" PRIu32
				  " (R-POOL-14)", m->rank, m->world_size);
	if (bytes_zero(m->instance_id, POOL_INSTANCE_ID_BYTES))
		return PROTO_FAIL(why, why_size, "ATTACH instance id is zero (R-POOL-14)");
	if (m->page_tokens < 1 || m->page_tokens > 65536)
		return PROTO_FAIL(why, why_size, "ATTACH page tokens %" PRIu32 " (R-POOL-14)",
				  m->page_tokens);
	if (m->plane_count < 1 || m->plane_count > 479)
		return PROTO_FAIL(why, why_size, "ATTACH plane count %" PRIu32 " (R-POOL-14)",
				  m->plane_count);
	return 0;
}

int pool_attach_encode(const struct pool_attach *m, uint8_t *buf, size_t buf_size)
{
	size_t length;

	if (m->world_size > REC_WORLD_SIZE_MAX)
		return SEL_ETOOBIG;
	if (attach_check(m, NULL, 0))
		return -EINVAL;
	length = POOL_ATTACH_FIXED_BYTES + (size_t)POOL_ATTACH_RANK_BYTES * m->world_size;
	if (buf_size < length)
		return -ENOSPC;
	sel_put_le32(buf, m->rank);
	sel_put_le32(buf + 4, m->world_size);
	memcpy(buf + 8, m->instance_id, POOL_INSTANCE_ID_BYTES);
	memcpy(buf + 24, m->namespace_id.bytes, REC_IDENTITY_BYTES);
	memcpy(buf + 56, m->layout_digest.bytes, REC_DIGEST_BYTES);
	sel_put_le32(buf + 72, m->page_tokens);
	sel_put_le32(buf + 76, m->plane_count);
	sel_put_le32(buf + 80, 0);
	for (uint32_t i = 0; i < m->world_size; i++) {
		sel_put_le64(buf + POOL_ATTACH_FIXED_BYTES + 16 * i, m->page_bytes[i]);
		sel_put_le64(buf + POOL_ATTACH_FIXED_BYTES + 16 * i + 8, m->row_bytes[i]);
	}
	return (int)length;
}

int pool_attach_decode(const uint8_t *body, uint32_t length, struct pool_attach *out,
		       char *why, size_t why_size)
{
	int ret;

	if (length < POOL_ATTACH_FIXED_BYTES)
		return PROTO_FAIL(why, why_size, "ATTACH body of %" PRIu32 " bytes (R-WIRE-10)",
				  length);
	out->rank = sel_get_le32(body);
	out->world_size = sel_get_le32(body + 4);
	memcpy(out->instance_id, body + 8, POOL_INSTANCE_ID_BYTES);
	memcpy(out->namespace_id.bytes, body + 24, REC_IDENTITY_BYTES);
	memcpy(out->layout_digest.bytes, body + 56, REC_DIGEST_BYTES);
	out->page_tokens = sel_get_le32(body + 72);
	out->plane_count = sel_get_le32(body + 76);
	if (sel_get_le32(body + 80) != 0)
		return PROTO_FAIL(why, why_size, "ATTACH flags %08" PRIx32 " (R-POOL-14)",
				  sel_get_le32(body + 80));
	ret = attach_check(out, why, why_size);
	if (ret)
		return ret;
	ret = check_length("ATTACH", length,
			   POOL_ATTACH_FIXED_BYTES + (uint64_t)POOL_ATTACH_RANK_BYTES * out->world_size,
			   why, why_size);
	if (ret)
		return ret;
	for (uint32_t i = 0; i < out->world_size; i++) {
		out->page_bytes[i] = sel_get_le64(body + POOL_ATTACH_FIXED_BYTES + 16 * i);
		out->row_bytes[i] = sel_get_le64(body + POOL_ATTACH_FIXED_BYTES + 16 * i + 8);
	}
	return 0;
}

void pool_scope_of_attach(const char *name, const uint8_t *attach_body, uint32_t length,
			  uint8_t out[POOL_SCOPE_BYTES])
{
	size_t name_len = strlen(name);
	uint8_t name_length[2];
	const struct part parts[] = { DOMAIN("selene-pool-scope-v1"),
				      { name_length, 2 },
				      { name, name_len },
				      { attach_body + 4, 4 },
				      { attach_body + 24, length - 24 } };

	SEL_ASSERT(name_len <= POOL_NAME_BYTES_MAX && length >= POOL_ATTACH_FIXED_BYTES);
	put_le16(name_length, (uint16_t)name_len);
	keyed_blake2b(NULL, 0, parts, SEL_ARRAY_SIZE(parts), out, POOL_SCOPE_BYTES);
}

int pool_attached_encode(const struct pool_attached *m, uint8_t *buf, size_t buf_size)
{
	if (buf_size < POOL_ATTACHED_BYTES)
		return -ENOSPC;
	memcpy(buf, m->scope, POOL_SCOPE_BYTES);
	sel_put_le64(buf + 32, m->scope_records);
	return POOL_ATTACHED_BYTES;
}

int pool_attached_decode(const uint8_t *body, uint32_t length, struct pool_attached *out,
			 char *why, size_t why_size)
{
	int ret = check_length("ATTACHED", length, POOL_ATTACHED_BYTES, why, why_size);

	if (ret)
		return ret;
	memcpy(out->scope, body, POOL_SCOPE_BYTES);
	out->scope_records = sel_get_le64(body + 32);
	return 0;
}

/* ---- Key lists: LOOKUP, HOLDS (R-POOL-20, R-POOL-70) ---- */

/*
 * Whether count keys are each valid (R-WIRE-14) and, where descending,
 * each shorter than the one before (R-POOL-20).
 */
static bool keys_valid(const struct rec_key *keys, uint32_t count, bool descending)
{
	for (uint32_t i = 0; i < count; i++)
		if (!key_valid(&keys[i]) ||
		    (descending && i && keys[i].consumed >= keys[i - 1].consumed))
			return false;
	return true;
}

static void keys_put(uint8_t *p, const struct rec_key *keys, uint32_t count)
{
	for (uint32_t i = 0; i < count; i++)
		put_key(p + POOL_WIRE_KEY_BYTES * i, &keys[i]);
}

/*
 * Checks that a body of length bytes is its fixed bytes and then count
 * keys, and that the keys at keys pass what keys_valid asks; what names
 * the message in errors.
 */
static int keys_get(const char *what, uint32_t length, uint32_t fixed, const uint8_t *keys,
		    uint32_t count, bool descending, char *why, size_t why_size)
{
	struct rec_key prev = { 0 }, key;
	int ret = check_length(what, length, fixed + (uint64_t)POOL_WIRE_KEY_BYTES * count, why,
			       why_size);

	if (ret)
		return ret;
	for (uint32_t i = 0; i < count; i++) {
		get_key(keys + POOL_WIRE_KEY_BYTES * i, &key);
		if (!key_valid(&key))
			return PROTO_FAIL(why, why_size, "%s key %" PRIu32 " consumes %" PRIu64
					  " (R-WIRE-14)", what, i, key.consumed);
		if (descending && i && key.consumed >= prev.consumed)
			return PROTO_FAIL(why, why_size, "%s key %" PRIu32 " is not shorter "
					  "than the one before (R-POOL-20)", what, i);
		prev = key;
	}
	return 0;
}

/* ---- LOOKUP (R-POOL-20) ---- */

int pool_lookup_encode(uint64_t ticket, const struct rec_key *keys, uint32_t key_count,
		       uint8_t *buf, size_t buf_size)
{
	size_t length = POOL_LOOKUP_FIXED_BYTES + (size_t)POOL_WIRE_KEY_BYTES * key_count;

	if (key_count > POOL_LOOKUP_KEYS_MAX)
		return SEL_ETOOBIG;
	if (ticket == 0 || key_count == 0 || !keys_valid(keys, key_count, true))
		return -EINVAL;
	if (buf_size < length)
		return -ENOSPC;
	sel_put_le64(buf, ticket);
	sel_put_le32(buf + 8, key_count);
	keys_put(buf + POOL_LOOKUP_FIXED_BYTES, keys, key_count);
	return (int)length;
}

int pool_lookup_decode(const uint8_t *body, uint32_t length, struct pool_lookup_view *out,
		       char *why, size_t why_size)
{
	if (length < POOL_LOOKUP_FIXED_BYTES)
		return PROTO_FAIL(why, why_size, "LOOKUP body of %" PRIu32 " bytes (R-WIRE-10)",
				  length);
	out->ticket = sel_get_le64(body);
	out->key_count = sel_get_le32(body + 8);
	out->keys = body + POOL_LOOKUP_FIXED_BYTES;
	if (out->ticket == 0)
		return PROTO_FAIL(why, why_size, "LOOKUP ticket 0 (R-POOL-8)");
	if (out->key_count < 1 || out->key_count > POOL_LOOKUP_KEYS_MAX)
		return PROTO_FAIL(why, why_size, "LOOKUP of %" PRIu32 " keys, allowed 1 .. %u "
				  "(R-POOL-20)", out->key_count, POOL_LOOKUP_KEYS_MAX);
	return keys_get("LOOKUP", length, POOL_LOOKUP_FIXED_BYTES, out->keys, out->key_count,
			true, why, why_size);
}

void pool_lookup_view_key(const struct pool_lookup_view *v, uint32_t index, struct rec_key *out)
{
	SEL_ASSERT(index < v->key_count);
	get_key(v->keys + POOL_WIRE_KEY_BYTES * index, out);
}

/* ---- Chains: ANSWER, CLAIMED (R-POOL-21, R-POOL-31) ---- */

/*
 * An entry's stamp and place (R-POOL-22, R-POOL-36): ANSWER's place is a
 * 4096-aligned range past the arena header whose end does not overflow,
 * given exactly when the stamp is not 0; CLAIMED's stamp is never 0 (a
 * pinned record lies in the arena), and CLAIMED carries no place (its
 * encoder ignores the entry's).
 */
static int stamp_check(const char *what, const struct pool_chain_entry *e, bool answer,
		       char *why, size_t why_size)
{
	const struct pool_place *pl = &e->place;

	if (!answer) {
		if (e->stamp == 0)
			return PROTO_FAIL(why, why_size, "%s chain record with stamp 0 (R-POOL-36)",
					  what);
		return 0;
	}
	if (e->stamp == 0 ? pl->offset || pl->bytes :
			    pl->offset < POOL_ARENA_HEADER_BYTES || pl->offset % 4096 ||
				    pl->bytes == 0 || pl->bytes > UINT64_MAX - pl->offset)
		return PROTO_FAIL(why, why_size, "%s chain record with stamp %" PRIu64 " at %"
				  PRIu64 " (%" PRIu64 " bytes) (R-POOL-22)", what, e->stamp,
				  pl->offset, pl->bytes);
	return 0;
}

static int chain_check(const char *what, const struct pool_chain_entry *e,
		       const struct pool_chain_entry *prev, bool last, bool answer, char *why,
		       size_t why_size)
{
	uint32_t first = prev ? prev->first_page_index + prev->tail_page_count : 0;

	if (!key_valid(&e->key) || (prev && e->key.consumed <= prev->key.consumed))
		return PROTO_FAIL(why, why_size, "%s chain key consumes %" PRIu64 " (R-POOL-21)",
				  what, e->key.consumed);
	if (e->tail_page_count > REC_RECORD_PAGES_MAX || e->first_page_index != first)
		return PROTO_FAIL(why, why_size, "%s chain record at page %" PRIu32 " with %"
				  PRIu32 " pages, expected first page %" PRIu32 " (R-POOL-21)",
				  what, e->first_page_index, e->tail_page_count, first);
	if (last && !e->row)
		return PROTO_FAIL(why, why_size, "%s chain ends in a page-only record "
				  "(R-POOL-21)", what);
	return stamp_check(what, e, answer, why, why_size);
}

static void put_chain_entry(uint8_t *p, const struct pool_chain_entry *e, bool answer)
{
	put_key(p, &e->key);
	sel_put_le32(p + 24, e->first_page_index);
	sel_put_le32(p + 28, e->tail_page_count);
	p[32] = e->row ? 1 : 0;
	if (answer) {
		sel_put_le64(p + 33, e->place.offset);
		sel_put_le64(p + 41, e->place.bytes);
		sel_put_le64(p + 49, e->stamp);
	} else {
		sel_put_le64(p + 33, e->stamp);
	}
}

static int chain_encode(const char *what, const struct pool_chain_entry *chain,
			uint32_t count, bool answer, uint8_t *p)
{
	uint32_t size = answer ? POOL_ANSWER_ENTRY_BYTES : POOL_CLAIMED_ENTRY_BYTES;

	for (uint32_t i = 0; i < count; i++) {
		if (chain_check(what, &chain[i], i ? &chain[i - 1] : NULL, i + 1 == count, answer,
				NULL, 0))
			return -EINVAL;
		put_chain_entry(p + (size_t)size * i, &chain[i], answer);
	}
	return 0;
}

static int chain_decode(const char *what, const uint8_t *p, uint32_t count, bool answer,
			struct pool_chain_view *out, char *why, size_t why_size)
{
	struct pool_chain_entry prev, e;

	out->count = count;
	out->entry_bytes = answer ? POOL_ANSWER_ENTRY_BYTES : POOL_CLAIMED_ENTRY_BYTES;
	out->entries = p;
	for (uint32_t i = 0; i < count; i++) {
		const uint8_t *q = p + (size_t)out->entry_bytes * i;
		int ret;

		if (q[32] > 1)
			return PROTO_FAIL(why, why_size, "%s chain row flag %u (R-POOL-7)", what,
					  q[32]);
		pool_chain_view_entry(out, i, &e);
		ret = chain_check(what, &e, i ? &prev : NULL, i + 1 == count, answer, why,
				  why_size);
		if (ret)
			return ret;
		prev = e;
	}
	return 0;
}

void pool_chain_view_entry(const struct pool_chain_view *v, uint32_t index,
			   struct pool_chain_entry *out)
{
	const uint8_t *p;

	SEL_ASSERT(index < v->count);
	p = v->entries + (size_t)v->entry_bytes * index;
	memset(out, 0, sizeof(*out));
	get_key(p, &out->key);
	out->first_page_index = sel_get_le32(p + 24);
	out->tail_page_count = sel_get_le32(p + 28);
	out->row = p[32] == 1;
	if (v->entry_bytes == POOL_ANSWER_ENTRY_BYTES) {
		out->place.offset = sel_get_le64(p + 33);
		out->place.bytes = sel_get_le64(p + 41);
		out->stamp = sel_get_le64(p + 49);
	} else {
		out->stamp = sel_get_le64(p + 33);
	}
}

int pool_answer_encode(uint64_t ticket, const struct pool_chain_entry *chain,
		       uint32_t count, uint8_t *buf, size_t buf_size)
{
	size_t length = POOL_ANSWER_FIXED_BYTES + (size_t)POOL_ANSWER_ENTRY_BYTES * count;

	if (count > POOL_CHAIN_RECORDS_MAX)
		return SEL_ETOOBIG;
	if (ticket == 0)
		return -EINVAL;
	if (buf_size < length)
		return -ENOSPC;
	sel_put_le64(buf, ticket);
	sel_put_le32(buf + 8, count);
	if (chain_encode("ANSWER", chain, count, true, buf + POOL_ANSWER_FIXED_BYTES))
		return -EINVAL;
	return (int)length;
}

int pool_answer_decode(const uint8_t *body, uint32_t length, uint64_t *ticket,
		       struct pool_chain_view *chain, char *why, size_t why_size)
{
	uint32_t count;
	int ret;

	if (length < POOL_ANSWER_FIXED_BYTES)
		return PROTO_FAIL(why, why_size, "ANSWER body of %" PRIu32 " bytes (R-WIRE-10)",
				  length);
	*ticket = sel_get_le64(body);
	count = sel_get_le32(body + 8);
	if (*ticket == 0)
		return PROTO_FAIL(why, why_size, "ANSWER ticket 0 (R-POOL-8)");
	if (count > POOL_CHAIN_RECORDS_MAX)
		return PROTO_FAIL(why, why_size, "ANSWER chain of %" PRIu32 " records (R-POOL-21)",
				  count);
	ret = check_length("ANSWER", length,
			   POOL_ANSWER_FIXED_BYTES + (uint64_t)POOL_ANSWER_ENTRY_BYTES * count, why,
			   why_size);
	if (ret)
		return ret;
	return chain_decode("ANSWER", body + POOL_ANSWER_FIXED_BYTES, count, true, chain, why,
			    why_size);
}

/* ---- CLAIM, CLAIMED (R-POOL-30, R-POOL-31) ---- */

int pool_claim_encode(const struct pool_claim *m, uint8_t *buf, size_t buf_size)
{
	if (m->claim_id == 0 || !key_valid(&m->key))
		return -EINVAL;
	if (buf_size < POOL_CLAIM_BYTES)
		return -ENOSPC;
	sel_put_le64(buf, m->claim_id);
	put_key(buf + 8, &m->key);
	return POOL_CLAIM_BYTES;
}

int pool_claim_decode(const uint8_t *body, uint32_t length, struct pool_claim *out,
		      char *why, size_t why_size)
{
	int ret = check_length("CLAIM", length, POOL_CLAIM_BYTES, why, why_size);

	if (ret)
		return ret;
	out->claim_id = sel_get_le64(body);
	get_key(body + 8, &out->key);
	if (out->claim_id == 0)
		return PROTO_FAIL(why, why_size, "CLAIM id 0 (R-POOL-8)");
	if (!key_valid(&out->key))
		return PROTO_FAIL(why, why_size, "CLAIM key consumes %" PRIu64 " (R-WIRE-14)",
				  out->key.consumed);
	return 0;
}

int pool_claimed_encode(const struct pool_claimed *m, const struct pool_chain_entry *chain,
			uint32_t count, uint8_t *buf, size_t buf_size)
{
	size_t length = POOL_CLAIMED_FIXED_BYTES + (size_t)POOL_CLAIMED_ENTRY_BYTES * count;
	int ret;

	if (count > POOL_CHAIN_RECORDS_MAX)
		return SEL_ETOOBIG;
	if ((m->result == 0) != (count > 0))
		return -EINVAL;
	ret = id_result_encode(m->claim_id, m->result, length, buf, buf_size);
	if (ret < 0)
		return ret;
	sel_put_le32(buf + 12, m->deadline_ms);
	sel_put_le32(buf + 16, count);
	if (chain_encode("CLAIMED", chain, count, false, buf + POOL_CLAIMED_FIXED_BYTES))
		return -EINVAL;
	return ret;
}

int pool_claimed_decode(const uint8_t *body, uint32_t length, struct pool_claimed *out,
			struct pool_chain_view *chain, char *why, size_t why_size)
{
	uint32_t count;
	int ret;

	if (length < POOL_CLAIMED_FIXED_BYTES)
		return PROTO_FAIL(why, why_size, "CLAIMED body of %" PRIu32 " bytes (R-WIRE-10)",
				  length);
	out->claim_id = sel_get_le64(body);
	out->result = (int32_t)sel_get_le32(body + 8);
	out->deadline_ms = sel_get_le32(body + 12);
	count = sel_get_le32(body + 16);
	ret = id_result_check("CLAIMED", "id", "R-POOL-8", out->claim_id, out->result, why,
			      why_size);
	if (ret)
		return ret;
	if (count > POOL_CHAIN_RECORDS_MAX || (out->result == 0) != (count > 0))
		return PROTO_FAIL(why, why_size, "CLAIMED chain of %" PRIu32 " records with "
				  "result %" PRId32 " (R-POOL-31)", count, out->result);
	ret = check_length("CLAIMED", length,
			   POOL_CLAIMED_FIXED_BYTES + (uint64_t)POOL_CLAIMED_ENTRY_BYTES * count, why,
			   why_size);
	if (ret)
		return ret;
	return chain_decode("CLAIMED", body + POOL_CLAIMED_FIXED_BYTES, count, false, chain,
			    why, why_size);
}

/* ---- CLAIM_PULL, CLAIM_WINDOW, CLAIM_PLACES, CLAIM_END ---- */

int pool_claim_pull_encode(const struct pool_claim_pull *m, uint8_t *buf, size_t buf_size)
{
	if (m->claim_id == 0 || m->mode > POOL_PULL_RDMA)
		return -EINVAL;
	if (buf_size < POOL_CLAIM_PULL_BYTES)
		return -ENOSPC;
	sel_put_le64(buf, m->claim_id);
	sel_put_le32(buf + 8, m->skip_pages);
	buf[12] = m->mode;
	return POOL_CLAIM_PULL_BYTES;
}

int pool_claim_pull_decode(const uint8_t *body, uint32_t length, struct pool_claim_pull *out,
			   char *why, size_t why_size)
{
	int ret = check_length("CLAIM_PULL", length, POOL_CLAIM_PULL_BYTES, why, why_size);

	if (ret)
		return ret;
	out->claim_id = sel_get_le64(body);
	out->skip_pages = sel_get_le32(body + 8);
	out->mode = body[12];
	if (out->claim_id == 0)
		return PROTO_FAIL(why, why_size, "CLAIM_PULL id 0 (R-POOL-8)");
	if (out->mode > POOL_PULL_RDMA)
		return PROTO_FAIL(why, why_size, "CLAIM_PULL mode %u (R-POOL-32, R-POOL-93)",
				  out->mode);
	return 0;
}

static int claim_window_check(const struct pool_claim_window *m, uint32_t data_length,
			      char *why, size_t why_size)
{
	if (m->claim_id == 0)
		return PROTO_FAIL(why, why_size, "CLAIM_WINDOW id 0 (R-POOL-8)");
	if (m->chain_index >= POOL_CHAIN_RECORDS_MAX || m->section > POOL_SECTION_ROW)
		return PROTO_FAIL(why, why_size, "CLAIM_WINDOW record %" PRIu32 " section %u "
				  "(R-POOL-33)", m->chain_index, m->section);
	if (data_length == 0 || data_length > POOL_WINDOW_BYTES_MAX)
		return PROTO_FAIL(why, why_size, "CLAIM_WINDOW of %" PRIu32 " data bytes "
				  "(R-POOL-33)", data_length);
	if (m->section == POOL_SECTION_PAGES ? m->count == 0 || data_length % m->count != 0
					      : m->count != data_length)
		return PROTO_FAIL(why, why_size, "CLAIM_WINDOW count %" PRIu32 " with %" PRIu32
				  " data bytes (R-POOL-33)", m->count, data_length);
	return 0;
}

int pool_claim_window_encode(const struct pool_claim_window *m, uint32_t data_length,
			     uint8_t *buf, size_t buf_size)
{
	if (claim_window_check(m, data_length, NULL, 0))
		return -EINVAL;
	if (buf_size < POOL_CLAIM_WINDOW_HEAD_BYTES)
		return -ENOSPC;
	sel_put_le64(buf, m->claim_id);
	sel_put_le32(buf + 8, m->chain_index);
	buf[12] = m->section;
	sel_put_le32(buf + 13, m->first);
	sel_put_le32(buf + 17, m->count);
	return POOL_CLAIM_WINDOW_HEAD_BYTES;
}

/* Reads the head pool_claim_window_encode writes; CLAIM_WINDOW and RDMA_WINDOW open with it. */
static void claim_window_get(const uint8_t *head, struct pool_claim_window *out)
{
	out->claim_id = sel_get_le64(head);
	out->chain_index = sel_get_le32(head + 8);
	out->section = head[12];
	out->first = sel_get_le32(head + 13);
	out->count = sel_get_le32(head + 17);
}

int pool_claim_window_decode(const uint8_t *head, uint32_t head_length,
			     uint32_t data_length, struct pool_claim_window *out, char *why,
			     size_t why_size)
{
	int ret = check_length("CLAIM_WINDOW head", head_length, POOL_CLAIM_WINDOW_HEAD_BYTES,
			       why, why_size);

	if (ret)
		return ret;
	claim_window_get(head, out);
	return claim_window_check(out, data_length, why, why_size);
}

/* ---- RDMA_OFFER, RDMA_LEND, RDMA_WINDOW, RDMA_FREE (R-POOL-90 ..) ---- */

static int rdma_endpoint_encode(const struct pool_rdma_endpoint *e, bool lender, uint8_t *buf,
				size_t buf_size)
{
	if ((e->slot_count > 0) != lender)
		return -EINVAL;
	if (buf_size < RDMA_ENDPOINT_FIXED + (size_t)RDMA_ENDPOINT_REGION * e->region_count)
		return -ENOSPC;
	return pool_rdma_endpoint_encode(e, buf, buf_size);
}

static int rdma_endpoint_decode(const char *name, const uint8_t *body, uint32_t length,
				bool lender, struct pool_rdma_endpoint *out, char *why,
				size_t why_size)
{
	char reason[256];

	if (pool_rdma_endpoint_decode(body, length, out, reason, sizeof(reason)))
		return PROTO_FAIL(why, why_size, "%s: %s (R-POOL-%s)", name, reason,
				  lender ? "92" : "91");
	if ((out->slot_count > 0) != lender)
		return PROTO_FAIL(why, why_size, "%s carries a %s endpoint (R-POOL-%s)", name,
				  lender ? "writer's" : "lender's", lender ? "92" : "91");
	return 0;
}

int pool_rdma_offer_encode(const struct pool_rdma_endpoint *writer, uint8_t *buf,
			   size_t buf_size)
{
	return rdma_endpoint_encode(writer, false, buf, buf_size);
}

int pool_rdma_offer_decode(const uint8_t *body, uint32_t length,
			   struct pool_rdma_endpoint *out, char *why, size_t why_size)
{
	return rdma_endpoint_decode("RDMA_OFFER", body, length, false, out, why, why_size);
}

int pool_rdma_lend_encode(const struct pool_rdma_endpoint *lender, uint8_t *buf,
			  size_t buf_size)
{
	return rdma_endpoint_encode(lender, true, buf, buf_size);
}

int pool_rdma_lend_decode(const uint8_t *body, uint32_t length,
			  struct pool_rdma_endpoint *out, char *why, size_t why_size)
{
	return rdma_endpoint_decode("RDMA_LEND", body, length, true, out, why, why_size);
}

static int rdma_window_check(const struct pool_rdma_window *m, char *why, size_t why_size)
{
	int ret = claim_window_check(&m->w, m->data_length, why, why_size);

	if (ret)
		return ret;
	if (m->slot >= POOL_RDMA_SLOTS_MAX)
		return PROTO_FAIL(why, why_size, "RDMA_WINDOW slot %" PRIu32 " (R-POOL-94)",
				  m->slot);
	return 0;
}

int pool_rdma_window_encode(const struct pool_rdma_window *m, uint8_t *buf, size_t buf_size)
{
	if (rdma_window_check(m, NULL, 0))
		return -EINVAL;
	if (buf_size < POOL_RDMA_WINDOW_BYTES)
		return -ENOSPC;
	pool_claim_window_encode(&m->w, m->data_length, buf, buf_size);
	sel_put_le32(buf + POOL_CLAIM_WINDOW_HEAD_BYTES, m->slot);
	sel_put_le32(buf + POOL_CLAIM_WINDOW_HEAD_BYTES + 4, m->data_length);
	sel_put_le64(buf + POOL_CLAIM_WINDOW_HEAD_BYTES + 8, m->data_xxh3);
	return POOL_RDMA_WINDOW_BYTES;
}

int pool_rdma_window_decode(const uint8_t *body, uint32_t length, struct pool_rdma_window *out,
			    char *why, size_t why_size)
{
	int ret = check_length("RDMA_WINDOW", length, POOL_RDMA_WINDOW_BYTES, why, why_size);

	if (ret)
		return ret;
	claim_window_get(body, &out->w);
	out->slot = sel_get_le32(body + POOL_CLAIM_WINDOW_HEAD_BYTES);
	out->data_length = sel_get_le32(body + POOL_CLAIM_WINDOW_HEAD_BYTES + 4);
	out->data_xxh3 = sel_get_le64(body + POOL_CLAIM_WINDOW_HEAD_BYTES + 8);
	return rdma_window_check(out, why, why_size);
}

int pool_rdma_free_encode(const uint32_t *slots, uint32_t count, uint8_t *buf, size_t buf_size)
{
	size_t length = POOL_RDMA_FREE_FIXED_BYTES + 4ull * count;

	if (count == 0 || count > POOL_RDMA_SLOTS_MAX)
		return -EINVAL;
	for (uint32_t i = 0; i < count; i++)
		if (slots[i] >= POOL_RDMA_SLOTS_MAX)
			return -EINVAL;
	if (buf_size < length)
		return -ENOSPC;
	sel_put_le32(buf, count);
	for (uint32_t i = 0; i < count; i++)
		sel_put_le32(buf + POOL_RDMA_FREE_FIXED_BYTES + 4 * i, slots[i]);
	return (int)length;
}

int pool_rdma_free_decode(const uint8_t *body, uint32_t length, uint32_t *count,
			  const uint8_t **slots, char *why, size_t why_size)
{
	uint32_t n;
	int ret;

	if (length < POOL_RDMA_FREE_FIXED_BYTES)
		return PROTO_FAIL(why, why_size, "RDMA_FREE of %" PRIu32 " bytes (R-POOL-95)",
				  length);
	n = sel_get_le32(body);
	if (n == 0 || n > POOL_RDMA_SLOTS_MAX)
		return PROTO_FAIL(why, why_size, "RDMA_FREE of %" PRIu32 " slots (R-POOL-95)", n);
	ret = check_length("RDMA_FREE", length, POOL_RDMA_FREE_FIXED_BYTES + 4ull * n, why,
			   why_size);
	if (ret)
		return ret;
	for (uint32_t i = 0; i < n; i++)
		if (sel_get_le32(body + POOL_RDMA_FREE_FIXED_BYTES + 4 * i) >= POOL_RDMA_SLOTS_MAX)
			return PROTO_FAIL(why, why_size, "RDMA_FREE slot %" PRIu32 " (R-POOL-95)",
					  sel_get_le32(body + POOL_RDMA_FREE_FIXED_BYTES + 4 * i));
	*count = n;
	*slots = body + POOL_RDMA_FREE_FIXED_BYTES;
	return 0;
}

int pool_claim_places_encode(uint64_t claim_id, const struct pool_place *places,
			     uint32_t count, uint8_t *buf, size_t buf_size)
{
	size_t length = POOL_CLAIM_PLACES_FIXED_BYTES + (size_t)POOL_PLACE_BYTES * count;

	if (count > POOL_CHAIN_RECORDS_MAX)
		return SEL_ETOOBIG;
	if (claim_id == 0)
		return -EINVAL;
	for (uint32_t i = 0; i < count; i++)
		if (!sel_is_aligned(places[i].offset, 4096) || places[i].bytes == 0)
			return -EINVAL;
	if (buf_size < length)
		return -ENOSPC;
	sel_put_le64(buf, claim_id);
	sel_put_le32(buf + 8, count);
	for (uint32_t i = 0; i < count; i++) {
		sel_put_le64(buf + 12 + 16 * i, places[i].offset);
		sel_put_le64(buf + 12 + 16 * i + 8, places[i].bytes);
	}
	return (int)length;
}

int pool_claim_places_decode(const uint8_t *body, uint32_t length,
			     struct pool_places_view *out, char *why, size_t why_size)
{
	int ret;

	if (length < POOL_CLAIM_PLACES_FIXED_BYTES)
		return PROTO_FAIL(why, why_size, "CLAIM_PLACES body of %" PRIu32 " bytes "
				  "(R-WIRE-10)", length);
	out->claim_id = sel_get_le64(body);
	out->count = sel_get_le32(body + 8);
	out->places = body + POOL_CLAIM_PLACES_FIXED_BYTES;
	if (out->claim_id == 0)
		return PROTO_FAIL(why, why_size, "CLAIM_PLACES id 0 (R-POOL-8)");
	if (out->count > POOL_CHAIN_RECORDS_MAX)
		return PROTO_FAIL(why, why_size, "CLAIM_PLACES of %" PRIu32 " records (R-POOL-34)",
				  out->count);
	ret = check_length("CLAIM_PLACES", length,
			   POOL_CLAIM_PLACES_FIXED_BYTES + (uint64_t)POOL_PLACE_BYTES * out->count,
			   why, why_size);
	if (ret)
		return ret;
	for (uint32_t i = 0; i < out->count; i++) {
		struct pool_place p;

		pool_places_view_place(out, i, &p);
		if (!sel_is_aligned(p.offset, 4096) || p.bytes == 0)
			return PROTO_FAIL(why, why_size, "CLAIM_PLACES place %" PRIu32 " at %" PRIu64
					  " of %" PRIu64 " bytes (R-POOL-34)", i, p.offset, p.bytes);
	}
	return 0;
}

void pool_places_view_place(const struct pool_places_view *v, uint32_t index,
			    struct pool_place *out)
{
	SEL_ASSERT(index < v->count);
	out->offset = sel_get_le64(v->places + 16 * index);
	out->bytes = sel_get_le64(v->places + 16 * index + 8);
}

int pool_claim_end_encode(const struct pool_claim_end *m, uint8_t *buf, size_t buf_size)
{
	return id_result_encode(m->claim_id, m->result, POOL_CLAIM_END_BYTES, buf, buf_size);
}

int pool_claim_end_decode(const uint8_t *body, uint32_t length, struct pool_claim_end *out,
			  char *why, size_t why_size)
{
	return id_result_decode("CLAIM_END", "id", "R-POOL-8", body, length, POOL_CLAIM_END_BYTES,
				&out->claim_id, &out->result, why, why_size);
}

/* ---- Holders and exports (R-POOL-70, R-POOL-74, R-POOL-75) ---- */

int pool_holds_encode(enum pool_holds_op op, const struct rec_key *keys, uint32_t key_count,
		      uint8_t *buf, size_t buf_size)
{
	size_t length = POOL_HOLDS_FIXED_BYTES + (size_t)POOL_WIRE_KEY_BYTES * key_count;

	if (key_count > POOL_HOLDS_KEYS_MAX)
		return SEL_ETOOBIG;
	if (op > POOL_HOLDS_RESET || (op == POOL_HOLDS_RESET) != (key_count == 0) ||
	    !keys_valid(keys, key_count, false))
		return -EINVAL;
	if (buf_size < length)
		return -ENOSPC;
	sel_put_le32(buf, key_count);
	buf[4] = (uint8_t)op;
	keys_put(buf + POOL_HOLDS_FIXED_BYTES, keys, key_count);
	return (int)length;
}

int pool_holds_decode(const uint8_t *body, uint32_t length, struct pool_holds_view *out,
		      char *why, size_t why_size)
{
	if (length < POOL_HOLDS_FIXED_BYTES)
		return PROTO_FAIL(why, why_size, "HOLDS body of %" PRIu32 " bytes (R-WIRE-10)",
				  length);
	out->key_count = sel_get_le32(body);
	out->op = body[4];
	out->keys = body + POOL_HOLDS_FIXED_BYTES;
	if (out->op > POOL_HOLDS_RESET)
		return PROTO_FAIL(why, why_size, "HOLDS op %u (R-POOL-70)", out->op);
	if (out->key_count > POOL_HOLDS_KEYS_MAX)
		return PROTO_FAIL(why, why_size, "HOLDS of %" PRIu32 " keys, at most %u "
				  "(R-POOL-70)", out->key_count, POOL_HOLDS_KEYS_MAX);
	if ((out->op == POOL_HOLDS_RESET) != (out->key_count == 0))
		return PROTO_FAIL(why, why_size, "HOLDS op %u with %" PRIu32 " keys (R-POOL-70)",
				  out->op, out->key_count);
	return keys_get("HOLDS", length, POOL_HOLDS_FIXED_BYTES, out->keys, out->key_count,
			false, why, why_size);
}

void pool_holds_view_key(const struct pool_holds_view *v, uint32_t index, struct rec_key *out)
{
	SEL_ASSERT(index < v->key_count);
	get_key(v->keys + POOL_WIRE_KEY_BYTES * index, out);
}

int pool_export_encode(const struct pool_export *m, uint8_t *buf, size_t buf_size)
{
	if (m->export_id == 0 || m->deadline_ms == 0 || !key_valid(&m->key))
		return -EINVAL;
	if (buf_size < POOL_EXPORT_BYTES)
		return -ENOSPC;
	sel_put_le64(buf, m->export_id);
	sel_put_le32(buf + 8, m->deadline_ms);
	put_key(buf + 12, &m->key);
	return POOL_EXPORT_BYTES;
}

int pool_export_decode(const uint8_t *body, uint32_t length, struct pool_export *out,
		       char *why, size_t why_size)
{
	int ret = check_length("EXPORT", length, POOL_EXPORT_BYTES, why, why_size);

	if (ret)
		return ret;
	out->export_id = sel_get_le64(body);
	out->deadline_ms = sel_get_le32(body + 8);
	get_key(body + 12, &out->key);
	if (out->export_id == 0)
		return PROTO_FAIL(why, why_size, "EXPORT id 0 (R-POOL-74)");
	if (out->deadline_ms == 0)
		return PROTO_FAIL(why, why_size, "EXPORT deadline 0 ms (R-POOL-74)");
	if (!key_valid(&out->key))
		return PROTO_FAIL(why, why_size, "EXPORT key consumes %" PRIu64 " (R-WIRE-14)",
				  out->key.consumed);
	return 0;
}

int pool_export_end_encode(const struct pool_export_end *m, uint8_t *buf, size_t buf_size)
{
	return id_result_encode(m->export_id, m->result, POOL_EXPORT_END_BYTES, buf, buf_size);
}

int pool_export_end_decode(const uint8_t *body, uint32_t length, struct pool_export_end *out,
			   char *why, size_t why_size)
{
	return id_result_decode("EXPORT_END", "id", "R-POOL-75", body, length,
				POOL_EXPORT_END_BYTES, &out->export_id, &out->result, why,
				why_size);
}

/* ---- Puts (R-POOL-40 .. R-POOL-42) ---- */

static int put_begin_check(const struct pool_put_begin *m, char *why, size_t why_size)
{
	if (m->request_id == 0)
		return PROTO_FAIL(why, why_size, "PUT_BEGIN request id 0 (R-POOL-8)");
	if (!key_valid(&m->key) || !parent_valid(&m->parent, &m->key))
		return PROTO_FAIL(why, why_size, "PUT_BEGIN key %" PRIu64 " with parent %" PRIu64
				  " (R-WIRE-14)", m->key.consumed, m->parent.consumed);
	if (m->tail_page_count > REC_RECORD_PAGES_MAX)
		return PROTO_FAIL(why, why_size, "PUT_BEGIN of %" PRIu32 " pages (R-POOL-40)",
				  m->tail_page_count);
	if (m->world_size < 1 || m->world_size > REC_WORLD_SIZE_MAX)
		return PROTO_FAIL(why, why_size, "PUT_BEGIN for %" PRIu32 " ranks (R-POOL-40)",
				  m->world_size);
	return 0;
}

int pool_put_begin_encode(const struct pool_put_begin *m, const uint64_t *shares,
			  uint8_t *buf, size_t buf_size)
{
	size_t length;

	if (m->world_size > REC_WORLD_SIZE_MAX)
		return SEL_ETOOBIG;
	if (put_begin_check(m, NULL, 0))
		return -EINVAL;
	length = POOL_PUT_BEGIN_FIXED_BYTES + 8 * (size_t)m->world_size;
	if (buf_size < length)
		return -ENOSPC;
	sel_put_le64(buf, m->request_id);
	put_key(buf + 8, &m->key);
	put_key(buf + 32, &m->parent);
	sel_put_le32(buf + 56, m->first_page_index);
	sel_put_le32(buf + 60, m->tail_page_count);
	buf[64] = m->row ? 1 : 0;
	for (uint32_t i = 0; i < m->world_size; i++)
		sel_put_le64(buf + POOL_PUT_BEGIN_FIXED_BYTES + 8 * i, shares[i]);
	return (int)length;
}

int pool_put_begin_decode(const uint8_t *body, uint32_t length, struct pool_put_begin *out,
			  char *why, size_t why_size)
{
	if (length < POOL_PUT_BEGIN_FIXED_BYTES || (length - POOL_PUT_BEGIN_FIXED_BYTES) % 8)
		return PROTO_FAIL(why, why_size, "PUT_BEGIN body of %" PRIu32 " bytes "
				  "(R-WIRE-10)", length);
	out->request_id = sel_get_le64(body);
	get_key(body + 8, &out->key);
	get_key(body + 32, &out->parent);
	out->first_page_index = sel_get_le32(body + 56);
	out->tail_page_count = sel_get_le32(body + 60);
	if (body[64] > 1)
		return PROTO_FAIL(why, why_size, "PUT_BEGIN row flag %u (R-POOL-7)", body[64]);
	out->row = body[64] == 1;
	out->world_size = (length - POOL_PUT_BEGIN_FIXED_BYTES) / 8;
	out->share_bytes = body + POOL_PUT_BEGIN_FIXED_BYTES;
	return put_begin_check(out, why, why_size);
}

uint64_t pool_put_begin_share_bytes(const struct pool_put_begin *m, uint32_t rank)
{
	SEL_ASSERT(rank < m->world_size);
	return sel_get_le64(m->share_bytes + 8 * rank);
}

int pool_put_ready_encode(const struct pool_put_ready *m, uint8_t *buf, size_t buf_size)
{
	int ret;

	if ((m->result == 0) != (m->put_id != 0))
		return -EINVAL;
	ret = id_result_encode(m->request_id, m->result, POOL_PUT_READY_BYTES, buf, buf_size);
	if (ret < 0)
		return ret;
	sel_put_le64(buf + 12, m->put_id);
	return ret;
}

int pool_put_ready_decode(const uint8_t *body, uint32_t length, struct pool_put_ready *out,
			  char *why, size_t why_size)
{
	int ret = id_result_decode("PUT_READY", "request id", "R-POOL-8", body, length,
				   POOL_PUT_READY_BYTES, &out->request_id, &out->result, why,
				   why_size);

	if (ret)
		return ret;
	out->put_id = sel_get_le64(body + 12);
	if ((out->result == 0) != (out->put_id != 0))
		return PROTO_FAIL(why, why_size, "PUT_READY put id %" PRIu64 " with result %"
				  PRId32 " (R-POOL-40)", out->put_id, out->result);
	return 0;
}

int pool_put_window_encode(const struct pool_put_window *m, uint8_t *buf, size_t buf_size)
{
	if (m->put_id == 0)
		return -EINVAL;
	if (buf_size < POOL_PUT_WINDOW_HEAD_BYTES)
		return -ENOSPC;
	sel_put_le64(buf, m->put_id);
	sel_put_le64(buf + 8, m->offset);
	return POOL_PUT_WINDOW_HEAD_BYTES;
}

int pool_put_window_decode(const uint8_t *head, uint32_t head_length, uint32_t data_length,
			   struct pool_put_window *out, char *why, size_t why_size)
{
	int ret = check_length("PUT_WINDOW head", head_length, POOL_PUT_WINDOW_HEAD_BYTES, why,
			       why_size);

	if (ret)
		return ret;
	out->put_id = sel_get_le64(head);
	out->offset = sel_get_le64(head + 8);
	if (out->put_id == 0)
		return PROTO_FAIL(why, why_size, "PUT_WINDOW put id 0 (R-POOL-8)");
	if (data_length == 0 || data_length > POOL_WINDOW_BYTES_MAX)
		return PROTO_FAIL(why, why_size, "PUT_WINDOW of %" PRIu32 " data bytes "
				  "(R-POOL-41)", data_length);
	if (out->offset > UINT64_MAX - data_length)
		return PROTO_FAIL(why, why_size, "PUT_WINDOW offset %" PRIu64 " overflows "
				  "(R-POOL-41)", out->offset);
	return 0;
}

int pool_put_end_encode(const struct pool_put_end *m, uint8_t *buf, size_t buf_size)
{
	int ret = id_result_encode(m->put_id, m->result, POOL_PUT_END_BYTES, buf, buf_size);

	if (ret < 0)
		return ret;
	buf[12] = m->commit ? 1 : 0;
	return ret;
}

int pool_put_end_decode(const uint8_t *body, uint32_t length, struct pool_put_end *out,
			char *why, size_t why_size)
{
	int ret = id_result_decode("PUT_END", "put id", "R-POOL-8", body, length,
				   POOL_PUT_END_BYTES, &out->put_id, &out->result, why, why_size);

	if (ret)
		return ret;
	if (body[12] > 1)
		return PROTO_FAIL(why, why_size, "PUT_END commit flag %u (R-POOL-7)", body[12]);
	out->commit = body[12] == 1;
	return 0;
}

/* ---- HEARTBEAT, BYE ---- */

int pool_heartbeat_encode(uint64_t monotonic_ns, uint8_t *buf, size_t buf_size)
{
	if (buf_size < POOL_HEARTBEAT_BYTES)
		return -ENOSPC;
	sel_put_le64(buf, monotonic_ns);
	return POOL_HEARTBEAT_BYTES;
}

int pool_heartbeat_decode(const uint8_t *body, uint32_t length, uint64_t *monotonic_ns,
			  char *why, size_t why_size)
{
	int ret = check_length("HEARTBEAT", length, POOL_HEARTBEAT_BYTES, why, why_size);

	if (ret)
		return ret;
	*monotonic_ns = sel_get_le64(body);
	return 0;
}

int pool_bye_decode(const uint8_t *body, uint32_t length, char *why, size_t why_size)
{
	(void)body;
	return check_length("BYE", length, 0, why, why_size);
}

/* ---- The arena header (R-POOL-50) ---- */

void pool_arena_header_encode(uint8_t out[POOL_ARENA_HEADER_BYTES],
			      const uint8_t id[POOL_ARENA_ID_BYTES], uint64_t generation,
			      uint64_t bytes)
{
	memset(out, 0, POOL_ARENA_HEADER_BYTES);
	memcpy(out, POOL_ARENA_MAGIC, 8);
	sel_put_le32(out + 8, 1);
	memcpy(out + 16, id, POOL_ARENA_ID_BYTES);
	sel_put_le64(out + 32, generation);
	sel_put_le64(out + 40, bytes);
}

int pool_arena_header_decode(const uint8_t in[POOL_ARENA_HEADER_BYTES],
			     uint8_t id[POOL_ARENA_ID_BYTES], uint64_t *generation,
			     uint64_t *bytes, char *why, size_t why_size)
{
	if (memcmp(in, POOL_ARENA_MAGIC, 8) != 0 || sel_get_le32(in + 8) != 1 ||
	    sel_get_le32(in + 12) != 0 || !bytes_zero(in + 48, POOL_ARENA_HEADER_BYTES - 48))
		return sel_fail(SEL_EMISMATCH, why, why_size,
				"not a pool arena header (R-POOL-50)");
	memcpy(id, in + 16, POOL_ARENA_ID_BYTES);
	*generation = sel_get_le64(in + 32);
	*bytes = sel_get_le64(in + 40);
	return 0;
}
