/*
 * The cluster wire protocol: frame headers, message encoders and decoders,
 * join MACs, and the blocking frame reader and writer (see protocol.h). Each
 * check cites its rule in cluster/PROTOCOL.md. Nothing here allocates, and
 * nothing knows what a link or a socket's peer is.
 */
#include "cluster/protocol.h"

#include "common/base.h"
#include "common/failpoint.h"
#include "selene/selene.h"

#include <blake2.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>
#include <xxhash.h>

#define PROTO_FAIL(why, why_size, ...) \
	sel_fail(SEL_EPROTO, why, why_size, __VA_ARGS__)

static inline uint16_t get_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static inline void put_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

/* ---- Payload bounds per type (R-WIRE-6) ---- */

#define SUMMARY_BYTES_MAX                                  \
	(CLUSTER_CHUNK_HEAD_BYTES +                        \
	 CLUSTER_SUMMARY_CHUNK_RECORDS_MAX * CLUSTER_SUMMARY_RECORD_BYTES)
#define AGREEMENT_BYTES_MAX                                \
	(CLUSTER_CHUNK_HEAD_BYTES +                        \
	 CLUSTER_AGREEMENT_CHUNK_ENTRIES_MAX * CLUSTER_AGREEMENT_ENTRY_BYTES)
#define JOB_STORE_BYTES_MAX \
	(CLUSTER_JOB_STORE_OFF_PAGE_IDS + 4ull * CLUSTER_JOB_PAGE_IDS_MAX)
#define JOB_FETCH_BYTES_MAX                                                   \
	(CLUSTER_JOB_FETCH_OFF_CHAIN +                                        \
	 (uint64_t)CLUSTER_CHAIN_RECORD_BYTES * CLUSTER_JOB_CHAIN_RECORDS_MAX + \
	 CLUSTER_JOB_FETCH_TAIL_OFF_PAGE_IDS + 4ull * CLUSTER_JOB_PAGE_IDS_MAX)
#define JOB_CLAIM_BYTES_MAX                                                        \
	(CLUSTER_JOB_CLAIM_OFF_CHAIN +                                             \
	 (uint64_t)CLUSTER_POOL_CHAIN_RECORD_BYTES * CLUSTER_JOB_CHAIN_RECORDS_MAX + \
	 CLUSTER_JOB_CLAIM_TAIL_OFF_PAGE_IDS + 4ull * CLUSTER_JOB_PAGE_IDS_MAX)
#define JOB_EXPORT_BYTES_MAX \
	(CLUSTER_JOB_EXPORT_OFF_PAGE_IDS + 4ull * CLUSTER_JOB_PAGE_IDS_MAX)
/* The largest job is a pool claim's (R-WIRE-21): above a fetch, a store and an export. */
#define JOB_BYTES_MAX JOB_CLAIM_BYTES_MAX
_Static_assert(JOB_CLAIM_BYTES_MAX > JOB_FETCH_BYTES_MAX &&
		       JOB_CLAIM_BYTES_MAX > JOB_STORE_BYTES_MAX &&
		       JOB_CLAIM_BYTES_MAX > JOB_EXPORT_BYTES_MAX, "the claim is the largest job");
_Static_assert(JOB_EXPORT_BYTES_MAX == 4198425u, "PROTOCOL.md says so");
_Static_assert(JOB_CLAIM_BYTES_MAX == 4329505u, "PROTOCOL.md says so");

_Static_assert(SUMMARY_BYTES_MAX <= CLUSTER_FRAME_PAYLOAD_BYTES_MAX, "summary chunk fits");
_Static_assert(AGREEMENT_BYTES_MAX <= CLUSTER_FRAME_PAYLOAD_BYTES_MAX, "agreement fits");
_Static_assert(JOB_BYTES_MAX <= CLUSTER_FRAME_PAYLOAD_BYTES_MAX, "largest job fits");
_Static_assert(JOB_FETCH_BYTES_MAX == 4325402u, "PROTOCOL.md says so");
_Static_assert(JOB_STORE_BYTES_MAX == 4198418u, "PROTOCOL.md says so");
/* A frame length must also fit the int that encoders return. */
_Static_assert(CLUSTER_FRAME_PAYLOAD_BYTES_MAX <= (uint32_t)INT32_MAX, "int length");

static const struct cluster_msg_info type_table[CLUSTER_MSG_TYPE_LAST + 1] = {
	[CLUSTER_MSG_HELLO] = { "HELLO", CLUSTER_HELLO_BYTES, CLUSTER_HELLO_BYTES },
	[CLUSTER_MSG_CHALLENGE] = { "CHALLENGE", CLUSTER_CHALLENGE_BYTES,
				    CLUSTER_CHALLENGE_BYTES },
	[CLUSTER_MSG_PROOF] = { "PROOF", CLUSTER_PROOF_BYTES, CLUSTER_PROOF_BYTES },
	[CLUSTER_MSG_WELCOME] = { "WELCOME", CLUSTER_WELCOME_BYTES,
				  CLUSTER_WELCOME_BYTES },
	[CLUSTER_MSG_REFUSE] = { "REFUSE", CLUSTER_REFUSE_BYTES_MIN,
				 CLUSTER_REFUSE_BYTES_MIN + CLUSTER_REFUSE_TEXT_BYTES_MAX },
	[CLUSTER_MSG_SUMMARY] = { "SUMMARY", CLUSTER_CHUNK_HEAD_BYTES, SUMMARY_BYTES_MAX },
	[CLUSTER_MSG_AGREEMENT] = { "AGREEMENT", CLUSTER_CHUNK_HEAD_BYTES,
				    AGREEMENT_BYTES_MAX },
	[CLUSTER_MSG_AGREED] = { "AGREED", CLUSTER_AGREED_BYTES, CLUSTER_AGREED_BYTES },
	[CLUSTER_MSG_JOB] = { "JOB", CLUSTER_JOB_OFF_BODY, JOB_BYTES_MAX },
	[CLUSTER_MSG_JOB_DONE] = { "JOB_DONE", CLUSTER_JOB_DONE_BYTES_MIN,
				   CLUSTER_JOB_DONE_BYTES_MIN + CLUSTER_JOB_REASON_BYTES_MAX },
	[CLUSTER_MSG_HEARTBEAT] = { "HEARTBEAT", CLUSTER_HEARTBEAT_BYTES,
				    CLUSTER_HEARTBEAT_BYTES },
	[CLUSTER_MSG_BYE] = { "BYE", 0, 0 },
};

const struct cluster_grammar cluster_wire_grammar = {
	.magic = CLUSTER_MAGIC,
	.version = CLUSTER_VERSION,
	.type_last = CLUSTER_MSG_TYPE_LAST,
	.types = type_table,
};

/* A grammar's table may have gaps (numbers no message has): those are unknown. */
static bool grammar_type_known(const struct cluster_grammar *g, uint32_t type)
{
	/* a grammar's numbers may leave gaps (R-POOL-3): those are not types */
	return type >= 1 && type <= g->type_last && g->types[type].name;
}

static bool type_known(uint32_t type)
{
	return grammar_type_known(&cluster_wire_grammar, type);
}

const char *cluster_grammar_msg_name(const struct cluster_grammar *g, uint32_t type)
{
	return grammar_type_known(g, type) ? g->types[type].name : "unknown";
}

const char *cluster_msg_name(uint32_t type)
{
	return cluster_grammar_msg_name(&cluster_wire_grammar, type);
}

uint32_t cluster_payload_bytes_min(uint16_t type)
{
	SEL_ASSERT(type_known(type));
	return type_table[type].bytes_min;
}

uint32_t cluster_payload_bytes_max(uint16_t type)
{
	SEL_ASSERT(type_known(type));
	return type_table[type].bytes_max;
}

/* ---- Frame header (R-WIRE-1 .. R-WIRE-7) ---- */

void cluster_frame_header_prefix(const struct cluster_grammar *g,
				 uint8_t out[CLUSTER_OFF_PAYLOAD_CHECKSUM], uint16_t type,
				 uint64_t sequence, uint32_t payload_length)
{
	SEL_ASSERT(grammar_type_known(g, type));
	SEL_ASSERT(payload_length >= g->types[type].bytes_min &&
		   payload_length <= g->types[type].bytes_max);
	memcpy(out + CLUSTER_OFF_MAGIC, g->magic, 4);
	put_le16(out + CLUSTER_OFF_VERSION, g->version);
	put_le16(out + CLUSTER_OFF_TYPE, type);
	sel_put_le32(out + CLUSTER_OFF_PAYLOAD_LENGTH, payload_length);
	sel_put_le32(out + CLUSTER_OFF_RESERVED, 0);
	sel_put_le64(out + CLUSTER_OFF_SEQUENCE, sequence);
}

void cluster_frame_header_encode_in(const struct cluster_grammar *g,
				    uint8_t out[CLUSTER_FRAME_HEADER_BYTES], uint16_t type,
				    uint64_t sequence, const uint8_t *payload,
				    uint32_t payload_length)
{
	SEL_ASSERT(payload || payload_length == 0);
	cluster_frame_header_prefix(g, out, type, sequence, payload_length);
	/* R-WIRE-7: the empty payload's checksum is XXH3 of zero bytes. */
	sel_put_le64(out + CLUSTER_OFF_PAYLOAD_CHECKSUM,
		     XXH3_64bits(payload_length ? payload : out, payload_length));
	sel_put_le64(out + CLUSTER_OFF_HEADER_CHECKSUM,
		     XXH3_64bits(out, CLUSTER_OFF_HEADER_CHECKSUM));
}

void cluster_frame_header_encode(uint8_t out[CLUSTER_FRAME_HEADER_BYTES],
				 uint16_t type, uint64_t sequence,
				 const uint8_t *payload, uint32_t payload_length)
{
	cluster_frame_header_encode_in(&cluster_wire_grammar, out, type, sequence, payload,
				       payload_length);
}

int cluster_frame_header_decode_in(const struct cluster_grammar *g,
				   const uint8_t in[CLUSTER_FRAME_HEADER_BYTES],
				   struct cluster_frame_header *out, char *why,
				   size_t why_size)
{
	uint64_t sum;
	uint32_t reserved;

	if (memcmp(in + CLUSTER_OFF_MAGIC, g->magic, 4) != 0)
		return PROTO_FAIL(why, why_size, "bad magic %02x%02x%02x%02x (R-WIRE-2)",
				  in[0], in[1], in[2], in[3]);
	/* R-WIRE-3: no other field is trusted before the header checksum. */
	sum = XXH3_64bits(in, CLUSTER_OFF_HEADER_CHECKSUM);
	if (sum != sel_get_le64(in + CLUSTER_OFF_HEADER_CHECKSUM))
		return PROTO_FAIL(why, why_size,
				  "header checksum %016" PRIx64 " != %016" PRIx64 " (R-WIRE-3)",
				  sel_get_le64(in + CLUSTER_OFF_HEADER_CHECKSUM), sum);
	out->version = get_le16(in + CLUSTER_OFF_VERSION);
	out->type = get_le16(in + CLUSTER_OFF_TYPE);
	out->payload_length = sel_get_le32(in + CLUSTER_OFF_PAYLOAD_LENGTH);
	out->sequence = sel_get_le64(in + CLUSTER_OFF_SEQUENCE);
	out->payload_checksum = sel_get_le64(in + CLUSTER_OFF_PAYLOAD_CHECKSUM);
	reserved = sel_get_le32(in + CLUSTER_OFF_RESERVED);
	if (out->version != g->version)
		return PROTO_FAIL(why, why_size, "version %u, expected %u (R-WIRE-4)",
				  out->version, g->version);
	if (!grammar_type_known(g, out->type))
		return PROTO_FAIL(why, why_size, "unknown message type %u (R-WIRE-4)",
				  out->type);
	if (reserved != 0)
		return PROTO_FAIL(why, why_size, "reserved field %08" PRIx32 " (R-WIRE-5)",
				  reserved);
	if (out->payload_length < g->types[out->type].bytes_min ||
	    out->payload_length > g->types[out->type].bytes_max)
		return PROTO_FAIL(why, why_size,
				  "%s payload of %" PRIu32 " bytes, allowed %" PRIu32
				  " .. %" PRIu32 " (R-WIRE-6)",
				  g->types[out->type].name, out->payload_length,
				  g->types[out->type].bytes_min,
				  g->types[out->type].bytes_max);
	return 0;
}

int cluster_frame_header_decode(const uint8_t in[CLUSTER_FRAME_HEADER_BYTES],
				struct cluster_frame_header *out, char *why,
				size_t why_size)
{
	return cluster_frame_header_decode_in(&cluster_wire_grammar, in, out, why, why_size);
}

int cluster_frame_payload_check_in(const struct cluster_grammar *g,
				   const struct cluster_frame_header *header,
				   const uint8_t *payload, char *why, size_t why_size)
{
	static const uint8_t empty[1];
	uint64_t sum = XXH3_64bits(header->payload_length ? payload : empty,
				   header->payload_length);

	if (sum != header->payload_checksum)
		return PROTO_FAIL(why, why_size,
				  "%s payload checksum %016" PRIx64 " != %016" PRIx64
				  " (R-WIRE-7)", cluster_grammar_msg_name(g, header->type),
				  header->payload_checksum, sum);
	return 0;
}

int cluster_frame_payload_check(const struct cluster_frame_header *header,
				const uint8_t *payload, char *why, size_t why_size)
{
	return cluster_frame_payload_check_in(&cluster_wire_grammar, header, payload, why,
					      why_size);
}

/* ---- Blocking frame I/O (R-WIRE-8, R-WIRE-9) ---- */

/*
 * After a read or write that a signal interrupted: waits until fd is ready
 * for events again, within what is left of the socket's own timeout
 * (option: SO_RCVTIMEO or SO_SNDTIMEO) counted from since, when the call
 * began to wait. Calling again at once would restart that timeout, and a
 * host taking signals faster than it would never see one. Returns 0 to
 * try again (also for a descriptor without a timeout), or -ETIMEDOUT.
 */
static int wait_after_signal(int fd, short events, int option, uint64_t since)
{
	struct timeval tv = { 0 };
	socklen_t len = sizeof(tv);
	uint64_t timeout_ns;

	if (getsockopt(fd, SOL_SOCKET, option, &tv, &len) != 0)
		return 0; /* not a socket: no timeout to keep */
	timeout_ns = (uint64_t)tv.tv_sec * 1000000000ull + (uint64_t)tv.tv_usec * 1000ull;
	if (timeout_ns == 0)
		return 0;
	for (;;) {
		struct pollfd p = { .fd = fd, .events = events };
		uint64_t waited = sel_monotonic_ns() - since, left_ms;
		int n;

		if (waited >= timeout_ns)
			return -ETIMEDOUT;
		left_ms = (timeout_ns - waited + 999999) / 1000000;
		n = poll(&p, 1, left_ms > 1000 ? 1000 : (int)left_ms);
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return 0; /* let the call itself say what is wrong */
	}
}

/* See protocol.h. */
int cluster_write_all(int fd, struct iovec *iov, int count)
{
	bool is_socket = true;
	uint64_t since = sel_monotonic_ns();

	while (count > 0) {
		struct msghdr msg = { .msg_iov = iov, .msg_iovlen = (size_t)count };
		ssize_t n;

		n = is_socket ? sendmsg(fd, &msg, MSG_NOSIGNAL) : writev(fd, iov, count);
		if (n < 0 && errno == ENOTSOCK && is_socket) {
			is_socket = false;
			continue;
		}
		if (n < 0 && errno == EINTR) {
			int ret = wait_after_signal(fd, POLLOUT, SO_SNDTIMEO, since);

			if (ret)
				return ret;
			continue;
		}
		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
		if (n == 0)
			return -EPIPE;
		since = sel_monotonic_ns(); /* progress: the timeout counts from here */
		while (count > 0 && (size_t)n >= iov->iov_len) {
			n -= (ssize_t)iov->iov_len;
			iov++;
			count--;
		}
		if (count > 0) {
			iov->iov_base = (uint8_t *)iov->iov_base + n;
			iov->iov_len -= (size_t)n;
		}
	}
	return 0;
}

int cluster_frame_write(int fd, uint64_t *next_sequence, uint16_t type,
			const uint8_t *payload, uint32_t payload_length)
{
	uint8_t header[CLUSTER_FRAME_HEADER_BYTES];
	struct iovec iov[2];
	int injected = SEL_FAILPOINT(SEL_FP_CLUSTER_SEND);
	int count = payload_length ? 2 : 1;
	int ret;

	if (injected < 0)
		return injected;
	cluster_frame_header_encode(header, type, *next_sequence, payload,
				    payload_length);
	iov[0] = (struct iovec){ .iov_base = header, .iov_len = sizeof(header) };
	iov[1] = (struct iovec){ .iov_base = (void *)payload, .iov_len = payload_length };
	if (injected == SEL_FAILPOINT_SHORT) {
		/* Half the frame, then a dead link: the reader sees EOF inside it. */
		uint64_t half = (sizeof(header) + (uint64_t)payload_length) / 2;

		if (half <= sizeof(header)) {
			iov[0].iov_len = (size_t)half;
			count = 1;
		} else {
			iov[1].iov_len = (size_t)(half - sizeof(header));
		}
		ret = cluster_write_all(fd, iov, count);
		return ret ? ret : -EPIPE;
	}
	ret = cluster_write_all(fd, iov, count);
	if (ret)
		return ret;
	(*next_sequence)++;
	return 0;
}

/*
 * Reads exactly len bytes, across short reads and EINTR; a signal does not
 * restart the socket's receive timeout. Returns 0, 1 at end of file (*got
 * says how far it came), or a negative errno.
 */
static int read_all(int fd, uint8_t *buf, size_t len, size_t *got)
{
	uint64_t since = sel_monotonic_ns();

	*got = 0;
	while (*got < len) {
		ssize_t n = read(fd, buf + *got, len - *got);

		if (n < 0 && errno == EINTR) {
			int ret = wait_after_signal(fd, POLLIN, SO_RCVTIMEO, since);

			if (ret)
				return ret;
			continue;
		}
		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
		if (n == 0)
			return 1;
		*got += (size_t)n;
		since = sel_monotonic_ns(); /* progress: the timeout counts from here */
	}
	return 0;
}

int cluster_frame_read(int fd, uint8_t *buf, size_t buf_size,
		       uint64_t *next_sequence, struct cluster_frame_header *header,
		       char *why, size_t why_size)
{
	uint8_t raw[CLUSTER_FRAME_HEADER_BYTES];
	int injected = SEL_FAILPOINT(SEL_FP_CLUSTER_RECV);
	size_t got;
	int ret;

	if (injected < 0)
		return sel_fail(injected, why, why_size, "failpoint cluster.recv: %s",
				sel_strerror(injected));
	if (injected == SEL_FAILPOINT_SHORT)
		return PROTO_FAIL(why, why_size,
				  "end of file inside a frame (failpoint cluster.recv) (R-WIRE-9)");
	ret = read_all(fd, raw, sizeof(raw), &got);
	if (ret == 1 && got == 0)
		return sel_fail(0, why, why_size, "end of file between frames");
	if (ret == 1)
		return PROTO_FAIL(why, why_size,
				  "end of file after %zu of %u header bytes (R-WIRE-9)",
				  got, CLUSTER_FRAME_HEADER_BYTES);
	if (ret < 0)
		return sel_fail(ret, why, why_size, "reading a frame header: %s",
				sel_strerror(ret));
	ret = cluster_frame_header_decode(raw, header, why, why_size);
	if (ret)
		return ret;
	if (next_sequence && header->sequence != *next_sequence)
		return PROTO_FAIL(why, why_size,
				  "%s sequence %" PRIu64 ", expected %" PRIu64 " (R-WIRE-8)",
				  cluster_msg_name(header->type), header->sequence,
				  *next_sequence);
	if (header->payload_length > buf_size)
		return sel_fail(SEL_ETOOBIG, why, why_size,
				"%s payload of %" PRIu32 " bytes, buffer holds %zu (R-WIRE-6)",
				cluster_msg_name(header->type), header->payload_length,
				buf_size);
	ret = read_all(fd, buf, header->payload_length, &got);
	if (ret == 1)
		return PROTO_FAIL(why, why_size,
				  "end of file after %zu of %" PRIu32 " %s payload bytes (R-WIRE-9)",
				  got, header->payload_length,
				  cluster_msg_name(header->type));
	if (ret < 0)
		return sel_fail(ret, why, why_size, "reading a %s payload: %s",
				cluster_msg_name(header->type), sel_strerror(ret));
	ret = cluster_frame_payload_check(header, buf, why, why_size);
	if (ret)
		return ret;
	if (next_sequence)
		(*next_sequence)++;
	return 1;
}

/* ---- Field rules shared by messages (R-WIRE-10 .. R-WIRE-14) ---- */

/* R-WIRE-12: 0, a negative errno, or one of Selene's own codes. */
static bool result_valid(int32_t result)
{
	return result == 0 || (result < 0 && result >= -4095) ||
	       sel_is_selene_error(result);
}

/* R-WIRE-13: printable ASCII only; NUL and control bytes are refused. */
static bool text_printable(const uint8_t *text, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (text[i] < 0x20 || text[i] > 0x7e)
			return false;
	return true;
}

size_t cluster_text_make_printable(char *text)
{
	size_t replaced = 0;

	for (unsigned char *c = (unsigned char *)text; *c; c++) {
		if (*c < 0x20 || *c > 0x7e) {
			*c = '?';
			replaced++;
		}
	}
	return replaced;
}

static bool nonce_zero(const uint8_t *nonce)
{
	uint8_t any = 0;

	for (uint32_t i = 0; i < CLUSTER_NONCE_BYTES; i++)
		any |= nonce[i];
	return any == 0;
}

/* R-WIRE-14: a record's key names at least one and at most 2^40 tokens. */
static bool key_valid(const struct rec_key *key)
{
	return key->consumed >= 1 && key->consumed <= REC_CONSUMED_MAX;
}

/* R-WIRE-14: a parent is the root marker or a strictly shorter prefix. */
static bool parent_valid(const struct rec_key *parent, const struct rec_key *key)
{
	if (parent->consumed == 0)
		return rec_digest_is_zero(&parent->digest);
	return parent->consumed < key->consumed;
}

/* R-WIRE-10: the payload is exactly as long as its layout. */
static int check_exact(const char *what, uint32_t length, uint64_t expected,
		       char *why, size_t why_size)
{
	if (length != expected)
		return PROTO_FAIL(why, why_size,
				  "%s payload of %" PRIu32 " bytes, layout needs %" PRIu64
				  " (%s) (R-WIRE-10)", what, length, expected,
				  length > expected ? "trailing bytes" : "short");
	return 0;
}

/* A decoder's entry check: the type's fixed prefix is there (R-WIRE-10). */
static int check_at_least(const char *what, uint32_t length, uint32_t needed,
			  char *why, size_t why_size)
{
	if (length < needed)
		return PROTO_FAIL(why, why_size,
				  "%s payload of %" PRIu32 " bytes, at least %" PRIu32
				  " needed (R-WIRE-10)", what, length, needed);
	return 0;
}

/* ---- HELLO (R-WIRE-15) ---- */

static int hello_check(const struct cluster_hello *m, char *why, size_t why_size)
{
	if (m->world_size < 2 || m->world_size > REC_WORLD_SIZE_MAX)
		return PROTO_FAIL(why, why_size, "HELLO world size %" PRIu32
				  ", allowed 2 .. %u (R-WIRE-15)",
				  m->world_size, REC_WORLD_SIZE_MAX);
	if (m->rank == 0 || m->rank >= m->world_size)
		return PROTO_FAIL(why, why_size, "HELLO rank %" PRIu32
				  " of world %" PRIu32 ": a peer is 1 .. world - 1 (R-WIRE-15)",
				  m->rank, m->world_size);
	if (!m->has_disk_store && m->disk_limit_bytes != 0)
		return PROTO_FAIL(why, why_size, "HELLO disk limit %" PRIu64
				  " without a disk store (R-WIRE-15)", m->disk_limit_bytes);
	if (!m->has_disk_store && m->marked)
		return PROTO_FAIL(why, why_size, "HELLO marked without a disk store (R-WIRE-15)");
	if (!m->has_disk_store && m->warm_bytes != 0)
		return PROTO_FAIL(why, why_size, "HELLO warm tier of %" PRIu64
				  " bytes without a disk store (R-WIRE-15)", m->warm_bytes);
	if (m->warm_policy > 1)
		return PROTO_FAIL(why, why_size, "HELLO warm policy %u (R-WIRE-12)",
				  m->warm_policy);
	if (m->warm_bytes == 0 && m->warm_policy != 0)
		return PROTO_FAIL(why, why_size, "HELLO warm policy %u without a warm tier "
				  "(R-WIRE-15)", m->warm_policy);
	if (nonce_zero(m->client_nonce))
		return PROTO_FAIL(why, why_size, "HELLO client nonce is zero (R-WIRE-16)");
	return 0;
}

int cluster_hello_encode(const struct cluster_hello *m, uint8_t *buf, size_t buf_size)
{
	if (hello_check(m, NULL, 0))
		return -EINVAL;
	if (buf_size < CLUSTER_HELLO_BYTES)
		return -ENOSPC;
	sel_put_le32(buf + CLUSTER_HELLO_OFF_RANK, m->rank);
	sel_put_le32(buf + CLUSTER_HELLO_OFF_WORLD_SIZE, m->world_size);
	memcpy(buf + CLUSTER_HELLO_OFF_FINGERPRINT, m->fingerprint.bytes, REC_DIGEST_BYTES);
	memcpy(buf + CLUSTER_HELLO_OFF_LAYOUT_DIGEST, m->layout_digest.bytes,
	       REC_DIGEST_BYTES);
	buf[CLUSTER_HELLO_OFF_HAS_DISK_STORE] = m->has_disk_store ? 1 : 0;
	sel_put_le64(buf + CLUSTER_HELLO_OFF_DISK_LIMIT, m->disk_limit_bytes);
	memcpy(buf + CLUSTER_HELLO_OFF_CLIENT_NONCE, m->client_nonce, CLUSTER_NONCE_BYTES);
	buf[CLUSTER_HELLO_OFF_MARKED] = m->marked ? 1 : 0;
	sel_put_le64(buf + CLUSTER_HELLO_OFF_WARM, m->warm_bytes);
	buf[CLUSTER_HELLO_OFF_WARM_POLICY] = m->warm_policy;
	return CLUSTER_HELLO_BYTES;
}

int cluster_hello_decode(const uint8_t *p, uint32_t length, struct cluster_hello *out,
			 char *why, size_t why_size)
{
	int ret = check_exact("HELLO", length, CLUSTER_HELLO_BYTES, why, why_size);

	if (ret)
		return ret;
	if (p[CLUSTER_HELLO_OFF_HAS_DISK_STORE] > 1)
		return PROTO_FAIL(why, why_size, "HELLO has_disk_store %u (R-WIRE-12)",
				  p[CLUSTER_HELLO_OFF_HAS_DISK_STORE]);
	if (p[CLUSTER_HELLO_OFF_MARKED] > 1)
		return PROTO_FAIL(why, why_size, "HELLO marked %u (R-WIRE-12)",
				  p[CLUSTER_HELLO_OFF_MARKED]);
	out->rank = sel_get_le32(p + CLUSTER_HELLO_OFF_RANK);
	out->world_size = sel_get_le32(p + CLUSTER_HELLO_OFF_WORLD_SIZE);
	memcpy(out->fingerprint.bytes, p + CLUSTER_HELLO_OFF_FINGERPRINT, REC_DIGEST_BYTES);
	memcpy(out->layout_digest.bytes, p + CLUSTER_HELLO_OFF_LAYOUT_DIGEST,
	       REC_DIGEST_BYTES);
	out->has_disk_store = p[CLUSTER_HELLO_OFF_HAS_DISK_STORE] == 1;
	out->disk_limit_bytes = sel_get_le64(p + CLUSTER_HELLO_OFF_DISK_LIMIT);
	memcpy(out->client_nonce, p + CLUSTER_HELLO_OFF_CLIENT_NONCE, CLUSTER_NONCE_BYTES);
	out->marked = p[CLUSTER_HELLO_OFF_MARKED] == 1;
	out->warm_bytes = sel_get_le64(p + CLUSTER_HELLO_OFF_WARM);
	out->warm_policy = p[CLUSTER_HELLO_OFF_WARM_POLICY];
	return hello_check(out, why, why_size);
}

/* ---- CHALLENGE, PROOF, WELCOME (R-WIRE-16) ---- */

int cluster_challenge_encode(const struct cluster_challenge *m, uint8_t *buf,
			     size_t buf_size)
{
	if (nonce_zero(m->server_nonce))
		return -EINVAL;
	if (buf_size < CLUSTER_CHALLENGE_BYTES)
		return -ENOSPC;
	memcpy(buf + CLUSTER_CHALLENGE_OFF_SERVER_NONCE, m->server_nonce,
	       CLUSTER_NONCE_BYTES);
	return CLUSTER_CHALLENGE_BYTES;
}

int cluster_challenge_decode(const uint8_t *p, uint32_t length,
			     struct cluster_challenge *out, char *why, size_t why_size)
{
	int ret = check_exact("CHALLENGE", length, CLUSTER_CHALLENGE_BYTES, why, why_size);

	if (ret)
		return ret;
	if (nonce_zero(p + CLUSTER_CHALLENGE_OFF_SERVER_NONCE))
		return PROTO_FAIL(why, why_size, "CHALLENGE server nonce is zero (R-WIRE-16)");
	memcpy(out->server_nonce, p + CLUSTER_CHALLENGE_OFF_SERVER_NONCE,
	       CLUSTER_NONCE_BYTES);
	return 0;
}

int cluster_proof_encode(const struct cluster_proof *m, uint8_t *buf, size_t buf_size)
{
	if (buf_size < CLUSTER_PROOF_BYTES)
		return -ENOSPC;
	memcpy(buf + CLUSTER_PROOF_OFF_MAC, m->mac, CLUSTER_MAC_BYTES);
	return CLUSTER_PROOF_BYTES;
}

int cluster_proof_decode(const uint8_t *p, uint32_t length, struct cluster_proof *out,
			 char *why, size_t why_size)
{
	int ret = check_exact("PROOF", length, CLUSTER_PROOF_BYTES, why, why_size);

	if (ret)
		return ret;
	memcpy(out->mac, p + CLUSTER_PROOF_OFF_MAC, CLUSTER_MAC_BYTES);
	return 0;
}

int cluster_welcome_encode(const struct cluster_welcome *m, uint8_t *buf,
			   size_t buf_size)
{
	if (buf_size < CLUSTER_WELCOME_BYTES)
		return -ENOSPC;
	memcpy(buf + CLUSTER_WELCOME_OFF_MAC, m->mac, CLUSTER_MAC_BYTES);
	sel_put_le64(buf + CLUSTER_WELCOME_OFF_DISK_LIMIT, m->disk_limit_bytes);
	return CLUSTER_WELCOME_BYTES;
}

int cluster_welcome_decode(const uint8_t *p, uint32_t length,
			   struct cluster_welcome *out, char *why, size_t why_size)
{
	int ret = check_exact("WELCOME", length, CLUSTER_WELCOME_BYTES, why, why_size);

	if (ret)
		return ret;
	memcpy(out->mac, p + CLUSTER_WELCOME_OFF_MAC, CLUSTER_MAC_BYTES);
	out->disk_limit_bytes = sel_get_le64(p + CLUSTER_WELCOME_OFF_DISK_LIMIT);
	return 0;
}

/* ---- Texts: REFUSE and JOB_DONE (R-WIRE-13) ---- */

/* Encodes u16 length + text at p; the caller checked room and rules. */
static size_t put_text(uint8_t *p, const char *text, size_t len)
{
	put_le16(p, (uint16_t)len);
	memcpy(p + 2, text, len);
	return 2 + len;
}

/*
 * Decodes the u16 length + text that ends a payload at offset; out holds
 * max + 1 bytes and is NUL-terminated.
 */
static int get_text(const char *what, const uint8_t *p, uint32_t length,
		    uint32_t offset, uint32_t max, char *out, char *why,
		    size_t why_size)
{
	uint16_t len = get_le16(p + offset);
	int ret;

	if (len > max)
		return PROTO_FAIL(why, why_size, "%s text of %u bytes, at most %" PRIu32
				  " (R-WIRE-13)", what, len, max);
	ret = check_exact(what, length, (uint64_t)offset + 2 + len, why, why_size);
	if (ret)
		return ret;
	if (!text_printable(p + offset + 2, len))
		return PROTO_FAIL(why, why_size,
				  "%s text holds a byte that is not printable ASCII (R-WIRE-13)",
				  what);
	memcpy(out, p + offset + 2, len);
	out[len] = '\0';
	return 0;
}

/* An encoder's check of a NUL-terminated text: SEL_ETOOBIG, -EINVAL or 0. */
static int text_check(const char *text, size_t max, size_t *len)
{
	*len = strnlen(text, max + 1);
	if (*len > max)
		return SEL_ETOOBIG;
	if (!text_printable((const uint8_t *)text, *len))
		return -EINVAL;
	return 0;
}

int cluster_refuse_encode(const struct cluster_refuse *m, uint8_t *buf, size_t buf_size)
{
	size_t len;
	int ret = text_check(m->text, CLUSTER_REFUSE_TEXT_BYTES_MAX, &len);

	if (ret)
		return ret;
	if (m->reason < CLUSTER_REFUSE_REASON_FIRST || m->reason > CLUSTER_REFUSE_REASON_LAST)
		return -EINVAL;
	if (buf_size < CLUSTER_REFUSE_BYTES_MIN + len)
		return -ENOSPC;
	sel_put_le32(buf + CLUSTER_REFUSE_OFF_REASON, m->reason);
	return (int)(CLUSTER_REFUSE_OFF_TEXT_LENGTH +
		     put_text(buf + CLUSTER_REFUSE_OFF_TEXT_LENGTH, m->text, len));
}

int cluster_refuse_decode(const uint8_t *p, uint32_t length, struct cluster_refuse *out,
			  char *why, size_t why_size)
{
	int ret = check_at_least("REFUSE", length, CLUSTER_REFUSE_BYTES_MIN, why, why_size);

	if (ret)
		return ret;
	out->reason = sel_get_le32(p + CLUSTER_REFUSE_OFF_REASON);
	if (out->reason < CLUSTER_REFUSE_REASON_FIRST ||
	    out->reason > CLUSTER_REFUSE_REASON_LAST)
		return PROTO_FAIL(why, why_size, "REFUSE reason %" PRIu32 " unknown (R-WIRE-13)",
				  out->reason);
	return get_text("REFUSE", p, length, CLUSTER_REFUSE_OFF_TEXT_LENGTH,
			CLUSTER_REFUSE_TEXT_BYTES_MAX, out->text, why, why_size);
}

/* ---- Chunked messages: SUMMARY and AGREEMENT (R-WIRE-17) ---- */

static void put_chunk_head(uint8_t *p, uint32_t chunk_index, bool last, uint32_t count)
{
	sel_put_le32(p + CLUSTER_CHUNK_OFF_INDEX, chunk_index);
	p[CLUSTER_CHUNK_OFF_LAST] = last ? 1 : 0;
	sel_put_le32(p + CLUSTER_CHUNK_OFF_COUNT, count);
}

/*
 * Decodes a chunk head and checks the count against its maximum before it
 * is multiplied, then the payload's length against the entries it implies.
 */
static int get_chunk_head(const char *what, const uint8_t *p, uint32_t length,
			  uint32_t entry_bytes, uint32_t count_max,
			  uint32_t *chunk_index, bool *last, uint32_t *count,
			  char *why, size_t why_size)
{
	int ret = check_at_least(what, length, CLUSTER_CHUNK_HEAD_BYTES, why, why_size);

	if (ret)
		return ret;
	if (p[CLUSTER_CHUNK_OFF_LAST] > 1)
		return PROTO_FAIL(why, why_size, "%s last flag %u (R-WIRE-12)", what,
				  p[CLUSTER_CHUNK_OFF_LAST]);
	*chunk_index = sel_get_le32(p + CLUSTER_CHUNK_OFF_INDEX);
	*last = p[CLUSTER_CHUNK_OFF_LAST] == 1;
	*count = sel_get_le32(p + CLUSTER_CHUNK_OFF_COUNT);
	if (*count > count_max)
		return PROTO_FAIL(why, why_size, "%s chunk of %" PRIu32
				  " entries, at most %" PRIu32 " (R-WIRE-17)",
				  what, *count, count_max);
	return check_exact(what, length,
			   CLUSTER_CHUNK_HEAD_BYTES + (uint64_t)*count * entry_bytes,
			   why, why_size);
}

int cluster_chunks_accept(struct cluster_chunks *c, uint32_t chunk_index, bool last,
			  uint32_t count, uint64_t total_max, char *why, size_t why_size)
{
	if (c->done)
		return PROTO_FAIL(why, why_size, "chunk %" PRIu32
				  " after the last one (R-WIRE-17)", chunk_index);
	if (chunk_index != c->next_index)
		return PROTO_FAIL(why, why_size, "chunk %" PRIu32 ", expected %" PRIu32
				  " (R-WIRE-17)", chunk_index, c->next_index);
	if (count > total_max - c->total)
		return PROTO_FAIL(why, why_size, "chunks add up past %" PRIu64
				  " entries (R-WIRE-17)", total_max);
	/* No message needs 2^32 chunks: an index that would wrap is a lie. */
	if (chunk_index == UINT32_MAX && !last)
		return PROTO_FAIL(why, why_size, "chunk index wraps (R-WIRE-17)");
	c->total += count;
	c->next_index++;
	c->done = last;
	return 0;
}

/* ---- SUMMARY (R-WIRE-18) ---- */

/* R-WIRE-18: a held record says its key and nothing else. */
static bool summary_held_bare(const struct cluster_summary_record *r)
{
	static const struct rec_digest zero;

	return r->parent.consumed == 0 && rec_digest_equal(&r->parent.digest, &zero) &&
	       rec_digest_equal(&r->bucket, &zero) && r->first_page_index == 0 &&
	       r->tail_page_count == 0 && !r->row_present &&
	       rec_digest_equal(&r->header_digest, &zero);
}

static int summary_record_check(const struct cluster_summary_record *r, uint32_t index,
				char *why, size_t why_size)
{
	if (!key_valid(&r->key))
		return PROTO_FAIL(why, why_size, "SUMMARY record %" PRIu32 " key consumed %"
				  PRIu64 " (R-WIRE-14)", index, r->key.consumed);
	if (r->held && !summary_held_bare(r))
		return PROTO_FAIL(why, why_size, "SUMMARY record %" PRIu32 " is held but "
				  "has fields other than its key (R-WIRE-18)", index);
	if (!parent_valid(&r->parent, &r->key))
		return PROTO_FAIL(why, why_size, "SUMMARY record %" PRIu32 " parent consumed %"
				  PRIu64 " of key %" PRIu64 " (R-WIRE-14)", index,
				  r->parent.consumed, r->key.consumed);
	if (r->tail_page_count > REC_RECORD_PAGES_MAX ||
	    (uint64_t)r->first_page_index + r->tail_page_count > r->key.consumed)
		return PROTO_FAIL(why, why_size, "SUMMARY record %" PRIu32 " pages %" PRIu32
				  " + %" PRIu32 " past its key (R-WIRE-18)", index,
				  r->first_page_index, r->tail_page_count);
	return 0;
}

static void put_summary_record(uint8_t *p, const struct cluster_summary_record *r)
{
	rec_key_put(p + CLUSTER_SREC_OFF_KEY, &r->key);
	rec_key_put(p + CLUSTER_SREC_OFF_PARENT, &r->parent);
	memcpy(p + CLUSTER_SREC_OFF_BUCKET, r->bucket.bytes, REC_DIGEST_BYTES);
	sel_put_le32(p + CLUSTER_SREC_OFF_FIRST_PAGE, r->first_page_index);
	sel_put_le32(p + CLUSTER_SREC_OFF_TAIL_PAGES, r->tail_page_count);
	p[CLUSTER_SREC_OFF_STATE] = r->held ? CLUSTER_SUMMARY_HELD :
					      r->row_present ? CLUSTER_SUMMARY_WITH_ROW :
							       CLUSTER_SUMMARY_PAGE_ONLY;
	memcpy(p + CLUSTER_SREC_OFF_HEADER_DIGEST, r->header_digest.bytes,
	       REC_DIGEST_BYTES);
}

static void get_summary_record(const uint8_t *p, struct cluster_summary_record *r)
{
	rec_key_get(p + CLUSTER_SREC_OFF_KEY, &r->key);
	rec_key_get(p + CLUSTER_SREC_OFF_PARENT, &r->parent);
	memcpy(r->bucket.bytes, p + CLUSTER_SREC_OFF_BUCKET, REC_DIGEST_BYTES);
	r->first_page_index = sel_get_le32(p + CLUSTER_SREC_OFF_FIRST_PAGE);
	r->tail_page_count = sel_get_le32(p + CLUSTER_SREC_OFF_TAIL_PAGES);
	r->row_present = p[CLUSTER_SREC_OFF_STATE] == CLUSTER_SUMMARY_WITH_ROW;
	r->held = p[CLUSTER_SREC_OFF_STATE] == CLUSTER_SUMMARY_HELD;
	memcpy(r->header_digest.bytes, p + CLUSTER_SREC_OFF_HEADER_DIGEST,
	       REC_DIGEST_BYTES);
}

int cluster_summary_encode(uint8_t *buf, size_t buf_size, uint32_t chunk_index,
			   bool last, const struct cluster_summary_record *records,
			   uint32_t record_count)
{
	uint64_t length = CLUSTER_CHUNK_HEAD_BYTES +
			  (uint64_t)record_count * CLUSTER_SUMMARY_RECORD_BYTES;

	if (record_count > CLUSTER_SUMMARY_CHUNK_RECORDS_MAX)
		return SEL_ETOOBIG;
	for (uint32_t i = 0; i < record_count; i++)
		if (summary_record_check(&records[i], i, NULL, 0))
			return -EINVAL;
	if (buf_size < length)
		return -ENOSPC;
	put_chunk_head(buf, chunk_index, last, record_count);
	for (uint32_t i = 0; i < record_count; i++)
		put_summary_record(buf + CLUSTER_CHUNK_HEAD_BYTES +
					   (size_t)i * CLUSTER_SUMMARY_RECORD_BYTES,
				   &records[i]);
	return (int)length;
}

int cluster_summary_decode(const uint8_t *p, uint32_t length,
			   struct cluster_summary_view *out, char *why, size_t why_size)
{
	int ret = get_chunk_head("SUMMARY", p, length, CLUSTER_SUMMARY_RECORD_BYTES,
				 CLUSTER_SUMMARY_CHUNK_RECORDS_MAX, &out->chunk_index,
				 &out->last, &out->record_count, why, why_size);

	if (ret)
		return ret;
	out->records = p + CLUSTER_CHUNK_HEAD_BYTES;
	for (uint32_t i = 0; i < out->record_count; i++) {
		const uint8_t *r = out->records + (size_t)i * CLUSTER_SUMMARY_RECORD_BYTES;
		struct cluster_summary_record record;

		if (r[CLUSTER_SREC_OFF_STATE] > CLUSTER_SUMMARY_HELD)
			return PROTO_FAIL(why, why_size, "SUMMARY record %" PRIu32
					  " state %u (R-WIRE-12, R-WIRE-18)", i,
					  r[CLUSTER_SREC_OFF_STATE]);
		get_summary_record(r, &record);
		ret = summary_record_check(&record, i, why, why_size);
		if (ret)
			return ret;
	}
	return 0;
}

void cluster_summary_view_record(const struct cluster_summary_view *view,
				 uint32_t index, struct cluster_summary_record *out)
{
	SEL_ASSERT(index < view->record_count);
	get_summary_record(view->records + (size_t)index * CLUSTER_SUMMARY_RECORD_BYTES,
			   out);
}

/* ---- AGREEMENT (R-WIRE-19) ---- */

int cluster_agreement_encode(uint8_t *buf, size_t buf_size, uint32_t chunk_index,
			     bool last, const struct cluster_agreement_entry *entries,
			     uint32_t entry_count)
{
	uint64_t length = CLUSTER_CHUNK_HEAD_BYTES +
			  (uint64_t)entry_count * CLUSTER_AGREEMENT_ENTRY_BYTES;

	if (entry_count > CLUSTER_AGREEMENT_CHUNK_ENTRIES_MAX)
		return SEL_ETOOBIG;
	for (uint32_t i = 0; i < entry_count; i++)
		if (!key_valid(&entries[i].key) ||
		    (uint32_t)entries[i].action > CLUSTER_ACTION_LAST)
			return -EINVAL;
	if (buf_size < length)
		return -ENOSPC;
	put_chunk_head(buf, chunk_index, last, entry_count);
	for (uint32_t i = 0; i < entry_count; i++) {
		uint8_t *e = buf + CLUSTER_CHUNK_HEAD_BYTES +
			     (size_t)i * CLUSTER_AGREEMENT_ENTRY_BYTES;

		rec_key_put(e + CLUSTER_AENT_OFF_KEY, &entries[i].key);
		e[CLUSTER_AENT_OFF_ACTION] = (uint8_t)entries[i].action;
	}
	return (int)length;
}

int cluster_agreement_decode(const uint8_t *p, uint32_t length,
			     struct cluster_agreement_view *out, char *why,
			     size_t why_size)
{
	int ret = get_chunk_head("AGREEMENT", p, length, CLUSTER_AGREEMENT_ENTRY_BYTES,
				 CLUSTER_AGREEMENT_CHUNK_ENTRIES_MAX, &out->chunk_index,
				 &out->last, &out->entry_count, why, why_size);

	if (ret)
		return ret;
	out->entries = p + CLUSTER_CHUNK_HEAD_BYTES;
	for (uint32_t i = 0; i < out->entry_count; i++) {
		const uint8_t *e = out->entries + (size_t)i * CLUSTER_AGREEMENT_ENTRY_BYTES;
		struct rec_key key;

		rec_key_get(e + CLUSTER_AENT_OFF_KEY, &key);
		if (!key_valid(&key))
			return PROTO_FAIL(why, why_size, "AGREEMENT entry %" PRIu32
					  " key consumed %" PRIu64 " (R-WIRE-14)", i,
					  key.consumed);
		if (e[CLUSTER_AENT_OFF_ACTION] > CLUSTER_ACTION_LAST)
			return PROTO_FAIL(why, why_size, "AGREEMENT entry %" PRIu32
					  " action %u (R-WIRE-19)", i,
					  e[CLUSTER_AENT_OFF_ACTION]);
	}
	return 0;
}

void cluster_agreement_view_entry(const struct cluster_agreement_view *view,
				  uint32_t index, struct cluster_agreement_entry *out)
{
	const uint8_t *e;

	SEL_ASSERT(index < view->entry_count);
	e = view->entries + (size_t)index * CLUSTER_AGREEMENT_ENTRY_BYTES;
	rec_key_get(e + CLUSTER_AENT_OFF_KEY, &out->key);
	out->action = (enum cluster_action)e[CLUSTER_AENT_OFF_ACTION];
}

/* ---- AGREED (R-WIRE-20) ---- */

static int agreed_check(const struct cluster_agreed *m, char *why, size_t why_size)
{
	if (!result_valid(m->result))
		return PROTO_FAIL(why, why_size, "AGREED result %" PRId32 " (R-WIRE-12)",
				  m->result);
	if (m->records_kept > CLUSTER_SUMMARY_RECORDS_MAX ||
	    (m->result != 0 && m->records_kept != 0))
		return PROTO_FAIL(why, why_size, "AGREED %" PRIu64 " records kept with result %"
				  PRId32 " (R-WIRE-20)", m->records_kept, m->result);
	return 0;
}

int cluster_agreed_encode(const struct cluster_agreed *m, uint8_t *buf, size_t buf_size)
{
	if (agreed_check(m, NULL, 0))
		return -EINVAL;
	if (buf_size < CLUSTER_AGREED_BYTES)
		return -ENOSPC;
	sel_put_le32(buf + CLUSTER_AGREED_OFF_RESULT, (uint32_t)m->result);
	sel_put_le64(buf + CLUSTER_AGREED_OFF_RECORDS_KEPT, m->records_kept);
	return CLUSTER_AGREED_BYTES;
}

int cluster_agreed_decode(const uint8_t *p, uint32_t length, struct cluster_agreed *out,
			  char *why, size_t why_size)
{
	int ret = check_exact("AGREED", length, CLUSTER_AGREED_BYTES, why, why_size);

	if (ret)
		return ret;
	out->result = (int32_t)sel_get_le32(p + CLUSTER_AGREED_OFF_RESULT);
	out->records_kept = sel_get_le64(p + CLUSTER_AGREED_OFF_RECORDS_KEPT);
	return agreed_check(out, why, why_size);
}

/* ---- JOB (R-WIRE-21) ---- */

/*
 * R-WIRE-21: a fetch chain is contiguous and its keys grow, as the shard
 * engine requires; the page ids are exactly the chain's pages after skip.
 */
static int chain_check(const struct cluster_chain_record *r, uint32_t index,
		       const struct cluster_chain_record *previous, uint64_t *pages,
		       char *why, size_t why_size)
{
	if (!key_valid(&r->key))
		return PROTO_FAIL(why, why_size, "JOB chain record %" PRIu32
				  " key consumed %" PRIu64 " (R-WIRE-14)", index,
				  r->key.consumed);
	if (r->tail_page_count > REC_RECORD_PAGES_MAX)
		return PROTO_FAIL(why, why_size, "JOB chain record %" PRIu32 " holds %" PRIu32
				  " pages, at most %u (R-WIRE-21)", index,
				  r->tail_page_count, REC_RECORD_PAGES_MAX);
	if (previous && (r->key.consumed <= previous->key.consumed ||
			 r->first_page_index != (uint64_t)previous->first_page_index +
							previous->tail_page_count))
		return PROTO_FAIL(why, why_size, "JOB chain record %" PRIu32
				  " does not follow record %" PRIu32 " (R-WIRE-21)",
				  index, index - 1);
	*pages += r->tail_page_count;
	return 0;
}

static int fetch_pages_check(uint64_t pages, uint32_t skip_pages,
			     uint32_t page_id_count, char *why, size_t why_size)
{
	if (skip_pages > pages || pages - skip_pages != page_id_count)
		return PROTO_FAIL(why, why_size, "JOB fetch of %" PRIu64 " pages skipping %"
				  PRIu32 " names %" PRIu32 " page ids (R-WIRE-21)",
				  pages, skip_pages, page_id_count);
	return 0;
}

static bool instance_id_zero(const uint8_t id[16])
{
	uint8_t any = 0;

	for (uint32_t i = 0; i < 16; i++)
		any |= id[i];
	return any == 0;
}

/* R-WIRE-21: a pool attach names an instance (not all zero) and a printable address. */
static int pool_attach_check(const struct cluster_job *m)
{
	size_t len;
	int ret;

	if (!m->pool_address || instance_id_zero(m->instance_id))
		return -EINVAL;
	ret = text_check(m->pool_address, CLUSTER_JOB_POOL_ADDRESS_BYTES_MAX, &len);
	return ret ? ret : len == 0 ? -EINVAL : 0;
}

static void pool_chain_as_chain(const struct cluster_pool_chain_record *in,
				struct cluster_chain_record *out)
{
	*out = (struct cluster_chain_record){ .key = in->key,
					      .first_page_index = in->first_page_index,
					      .tail_page_count = in->tail_page_count };
}

/* R-WIRE-21: a pool claim's chain follows a fetch's rules. */
static int pool_claim_check(const struct cluster_job *m)
{
	struct cluster_chain_record record, previous;
	uint64_t pages = 0;

	if (m->page_id_count > CLUSTER_JOB_PAGE_IDS_MAX ||
	    m->chain_count > CLUSTER_JOB_CHAIN_RECORDS_MAX)
		return SEL_ETOOBIG;
	if (m->chain_count == 0 || !m->pool_chain || (!m->page_ids && m->page_id_count))
		return -EINVAL;
	for (uint32_t i = 0; i < m->chain_count; i++) {
		pool_chain_as_chain(&m->pool_chain[i], &record);
		if (chain_check(&record, i, i ? &previous : NULL, &pages, NULL, 0))
			return -EINVAL;
		previous = record;
	}
	return fetch_pages_check(pages, m->skip_pages, m->page_id_count, NULL, 0) ? -EINVAL : 0;
}

static int job_check(const struct cluster_job *m)
{
	const struct cluster_chain_record *previous = NULL;
	uint64_t pages = 0;

	switch (m->kind) {
	case CLUSTER_JOB_STORE:
		if (m->page_id_count > CLUSTER_JOB_PAGE_IDS_MAX)
			return SEL_ETOOBIG;
		/* The decoder refuses any other warm (R-WIRE-12): never send one. */
		if (m->warm > CLUSTER_JOB_STORE_WARM_LAST)
			return -EINVAL;
		return m->record_header && (m->page_ids || !m->page_id_count) ? 0 : -EINVAL;
	case CLUSTER_JOB_FETCH:
		if (m->page_id_count > CLUSTER_JOB_PAGE_IDS_MAX ||
		    m->chain_count > CLUSTER_JOB_CHAIN_RECORDS_MAX)
			return SEL_ETOOBIG;
		if (m->chain_count == 0 || (!m->page_ids && m->page_id_count))
			return -EINVAL;
		for (uint32_t i = 0; i < m->chain_count; i++) {
			if (chain_check(&m->chain[i], i, previous, &pages, NULL, 0))
				return -EINVAL;
			previous = &m->chain[i];
		}
		return fetch_pages_check(pages, m->skip_pages, m->page_id_count, NULL, 0) ?
			       -EINVAL : 0;
	case CLUSTER_JOB_TRUNCATE:
	case CLUSTER_JOB_UNLINK:
	case CLUSTER_JOB_WARM_DROP:
		return key_valid(&m->key) ? 0 : -EINVAL;
	case CLUSTER_JOB_NOOP:
		return 0;
	case CLUSTER_JOB_POOL_ATTACH:
		return pool_attach_check(m);
	case CLUSTER_JOB_POOL_PUT:
		return key_valid(&m->key) && m->share_bytes >= REC_HEADER_BYTES ? 0 : -EINVAL;
	case CLUSTER_JOB_POOL_CLAIM:
		return pool_claim_check(m);
	case CLUSTER_JOB_POOL_EXPORT:
		if (m->page_id_count > CLUSTER_JOB_PAGE_IDS_MAX)
			return SEL_ETOOBIG;
		return m->record_header && (m->page_ids || !m->page_id_count) ? 0 : -EINVAL;
	}
	return -EINVAL;
}

static uint64_t job_length(const struct cluster_job *m)
{
	switch (m->kind) {
	case CLUSTER_JOB_STORE:
		return CLUSTER_JOB_STORE_OFF_PAGE_IDS + 4ull * m->page_id_count;
	case CLUSTER_JOB_FETCH:
		return CLUSTER_JOB_FETCH_OFF_CHAIN +
		       (uint64_t)CLUSTER_CHAIN_RECORD_BYTES * m->chain_count +
		       CLUSTER_JOB_FETCH_TAIL_OFF_PAGE_IDS + 4ull * m->page_id_count;
	case CLUSTER_JOB_TRUNCATE:
	case CLUSTER_JOB_UNLINK:
	case CLUSTER_JOB_WARM_DROP:
		break;
	case CLUSTER_JOB_NOOP:
		return CLUSTER_JOB_OFF_BODY;
	case CLUSTER_JOB_POOL_ATTACH:
		return CLUSTER_JOB_ATTACH_BYTES_MIN + strlen(m->pool_address);
	case CLUSTER_JOB_POOL_PUT:
		return CLUSTER_JOB_PUT_BYTES;
	case CLUSTER_JOB_POOL_EXPORT:
		return CLUSTER_JOB_EXPORT_OFF_PAGE_IDS + 4ull * m->page_id_count;
	case CLUSTER_JOB_POOL_CLAIM:
		return CLUSTER_JOB_CLAIM_OFF_CHAIN +
		       (uint64_t)CLUSTER_POOL_CHAIN_RECORD_BYTES * m->chain_count +
		       CLUSTER_JOB_CLAIM_TAIL_OFF_PAGE_IDS + 4ull * m->page_id_count;
	}
	return CLUSTER_JOB_KEY_BYTES;
}

/*
 * Store, fetch, pool claim and pool export jobs end with the same tail: a
 * u32 state slot, a u32 page id count right after it, and the page ids at
 * ids (a store and a fetch put a flag byte between, which the caller
 * writes). page_ids_put writes it from m; page_id_count_get and
 * page_ids_get read it back (R-WIRE-21).
 */
_Static_assert(CLUSTER_JOB_STORE_OFF_PAGE_ID_COUNT == CLUSTER_JOB_STORE_OFF_STATE_SLOT + 4 &&
		       CLUSTER_JOB_FETCH_TAIL_OFF_PAGE_ID_COUNT ==
			       CLUSTER_JOB_FETCH_TAIL_OFF_STATE_SLOT + 4 &&
		       CLUSTER_JOB_CLAIM_TAIL_OFF_PAGE_ID_COUNT ==
			       CLUSTER_JOB_CLAIM_TAIL_OFF_STATE_SLOT + 4 &&
		       CLUSTER_JOB_EXPORT_OFF_PAGE_ID_COUNT ==
			       CLUSTER_JOB_EXPORT_OFF_STATE_SLOT + 4,
	       "a page id count follows its state slot");

static void page_ids_put(uint8_t *slot, uint8_t *ids, const struct cluster_job *m)
{
	sel_put_le32(slot, m->state_slot);
	sel_put_le32(slot + 4, m->page_id_count);
	for (uint32_t i = 0; i < m->page_id_count; i++)
		sel_put_le32(ids + 4 * (size_t)i, m->page_ids[i]);
}

/* Reads the state slot and the page id count at slot; what names the job in errors. */
static int page_id_count_get(const char *what, const uint8_t *slot, struct cluster_job_view *out,
			     char *why, size_t why_size)
{
	out->state_slot = sel_get_le32(slot);
	out->page_id_count = sel_get_le32(slot + 4);
	if (out->page_id_count > CLUSTER_JOB_PAGE_IDS_MAX)
		return PROTO_FAIL(why, why_size, "%s of %" PRIu32 " page ids, at most %u "
				  "(R-WIRE-21)", what, out->page_id_count,
				  CLUSTER_JOB_PAGE_IDS_MAX);
	return 0;
}

/* Points out->page_ids at offset ids_offset of body p and checks that the body ends with them. */
static int page_ids_get(const char *what, const uint8_t *p, uint32_t length, uint64_t ids_offset,
			struct cluster_job_view *out, char *why, size_t why_size)
{
	out->page_ids = p + ids_offset;
	return check_exact(what, length, ids_offset + 4ull * out->page_id_count, why, why_size);
}

static void pool_claim_encode(const struct cluster_job *m, uint8_t *buf)
{
	uint8_t *p = buf + CLUSTER_JOB_CLAIM_OFF_CHAIN;

	sel_put_le64(buf + CLUSTER_JOB_CLAIM_OFF_CLAIM_ID, m->pool_id);
	sel_put_le32(buf + CLUSTER_JOB_CLAIM_OFF_CHAIN_COUNT, m->chain_count);
	for (uint32_t i = 0; i < m->chain_count; i++, p += CLUSTER_POOL_CHAIN_RECORD_BYTES) {
		rec_key_put(p + CLUSTER_CHAIN_OFF_KEY, &m->pool_chain[i].key);
		sel_put_le32(p + CLUSTER_CHAIN_OFF_FIRST_PAGE, m->pool_chain[i].first_page_index);
		sel_put_le32(p + CLUSTER_CHAIN_OFF_TAIL_PAGES, m->pool_chain[i].tail_page_count);
		p[CLUSTER_POOL_CHAIN_OFF_ROW] = m->pool_chain[i].row ? 1 : 0;
	}
	sel_put_le32(p + CLUSTER_JOB_CLAIM_TAIL_OFF_SKIP_PAGES, m->skip_pages);
	page_ids_put(p + CLUSTER_JOB_CLAIM_TAIL_OFF_STATE_SLOT,
		     p + CLUSTER_JOB_CLAIM_TAIL_OFF_PAGE_IDS, m);
}

int cluster_job_encode(const struct cluster_job *m, uint8_t *buf, size_t buf_size)
{
	int ret = job_check(m);
	uint64_t length;
	uint8_t *p;

	if (ret)
		return ret;
	length = job_length(m);
	SEL_ASSERT(length <= JOB_BYTES_MAX);
	if (buf_size < length)
		return -ENOSPC;
	sel_put_le64(buf + CLUSTER_JOB_OFF_JOB_ID, m->job_id);
	buf[CLUSTER_JOB_OFF_KIND] = (uint8_t)m->kind;
	switch (m->kind) {
	case CLUSTER_JOB_STORE:
		memcpy(buf + CLUSTER_JOB_STORE_OFF_HEADER, m->record_header, REC_HEADER_BYTES);
		page_ids_put(buf + CLUSTER_JOB_STORE_OFF_STATE_SLOT,
			     buf + CLUSTER_JOB_STORE_OFF_PAGE_IDS, m);
		buf[CLUSTER_JOB_STORE_OFF_WARM] = m->warm;
		break;
	case CLUSTER_JOB_FETCH:
		sel_put_le32(buf + CLUSTER_JOB_FETCH_OFF_CHAIN_COUNT, m->chain_count);
		p = buf + CLUSTER_JOB_FETCH_OFF_CHAIN;
		for (uint32_t i = 0; i < m->chain_count; i++, p += CLUSTER_CHAIN_RECORD_BYTES) {
			rec_key_put(p + CLUSTER_CHAIN_OFF_KEY, &m->chain[i].key);
			sel_put_le32(p + CLUSTER_CHAIN_OFF_FIRST_PAGE,
				     m->chain[i].first_page_index);
			sel_put_le32(p + CLUSTER_CHAIN_OFF_TAIL_PAGES,
				     m->chain[i].tail_page_count);
		}
		sel_put_le32(p + CLUSTER_JOB_FETCH_TAIL_OFF_SKIP_PAGES, m->skip_pages);
		page_ids_put(p + CLUSTER_JOB_FETCH_TAIL_OFF_STATE_SLOT,
			     p + CLUSTER_JOB_FETCH_TAIL_OFF_PAGE_IDS, m);
		p[CLUSTER_JOB_FETCH_TAIL_OFF_READ_THROUGH] = m->read_through ? 1 : 0;
		break;
	case CLUSTER_JOB_TRUNCATE:
	case CLUSTER_JOB_UNLINK:
	case CLUSTER_JOB_WARM_DROP:
		rec_key_put(buf + CLUSTER_JOB_KEY_OFF_KEY, &m->key);
		break;
	case CLUSTER_JOB_NOOP:
		break;
	case CLUSTER_JOB_POOL_ATTACH:
		memcpy(buf + CLUSTER_JOB_ATTACH_OFF_INSTANCE_ID, m->instance_id, 16);
		put_text(buf + CLUSTER_JOB_ATTACH_OFF_ADDRESS, m->pool_address,
			 strlen(m->pool_address));
		break;
	case CLUSTER_JOB_POOL_PUT:
		sel_put_le64(buf + CLUSTER_JOB_PUT_OFF_PUT_ID, m->pool_id);
		rec_key_put(buf + CLUSTER_JOB_PUT_OFF_KEY, &m->key);
		sel_put_le64(buf + CLUSTER_JOB_PUT_OFF_SHARE_BYTES, m->share_bytes);
		break;
	case CLUSTER_JOB_POOL_CLAIM:
		pool_claim_encode(m, buf);
		break;
	case CLUSTER_JOB_POOL_EXPORT:
		sel_put_le64(buf + CLUSTER_JOB_EXPORT_OFF_PUT_ID, m->pool_id);
		memcpy(buf + CLUSTER_JOB_EXPORT_OFF_HEADER, m->record_header, REC_HEADER_BYTES);
		page_ids_put(buf + CLUSTER_JOB_EXPORT_OFF_STATE_SLOT,
			     buf + CLUSTER_JOB_EXPORT_OFF_PAGE_IDS, m);
		break;
	}
	return (int)length;
}

static void get_chain_record(const uint8_t *p, struct cluster_chain_record *out)
{
	rec_key_get(p + CLUSTER_CHAIN_OFF_KEY, &out->key);
	out->first_page_index = sel_get_le32(p + CLUSTER_CHAIN_OFF_FIRST_PAGE);
	out->tail_page_count = sel_get_le32(p + CLUSTER_CHAIN_OFF_TAIL_PAGES);
}

static int job_store_decode(const uint8_t *p, uint32_t length,
			    struct cluster_job_view *out, char *why, size_t why_size)
{
	int ret = check_at_least("JOB store", length, CLUSTER_JOB_STORE_OFF_PAGE_IDS,
				 why, why_size);

	if (ret)
		return ret;
	out->record_header = p + CLUSTER_JOB_STORE_OFF_HEADER;
	ret = page_id_count_get("JOB store", p + CLUSTER_JOB_STORE_OFF_STATE_SLOT, out, why,
				why_size);
	if (ret)
		return ret;
	if (p[CLUSTER_JOB_STORE_OFF_WARM] > CLUSTER_JOB_STORE_WARM_LAST)
		return PROTO_FAIL(why, why_size, "JOB store warm %u, 0 .. 3 (R-WIRE-12)",
				  p[CLUSTER_JOB_STORE_OFF_WARM]);
	out->warm = p[CLUSTER_JOB_STORE_OFF_WARM];
	return page_ids_get("JOB store", p, length, CLUSTER_JOB_STORE_OFF_PAGE_IDS, out, why,
			    why_size);
}

/*
 * Fetch and pool claim jobs carry a chain: a u32 record count at count_off,
 * then that many records of record_bytes from chain_off, then a tail of at
 * least tail_min bytes. Reads and bounds the count (R-WIRE-21), sets
 * *tail_offset to where the tail starts and checks the body reaches past
 * tail_min; what names the job in errors.
 */
static int chain_count_get(const char *what, const uint8_t *p, uint32_t length,
			   uint32_t count_off, uint32_t chain_off, uint32_t record_bytes,
			   uint32_t tail_min, struct cluster_job_view *out, uint64_t *tail_offset,
			   char *why, size_t why_size)
{
	out->chain_count = sel_get_le32(p + count_off);
	if (out->chain_count == 0 || out->chain_count > CLUSTER_JOB_CHAIN_RECORDS_MAX)
		return PROTO_FAIL(why, why_size, "%s chain of %" PRIu32
				  " records, allowed 1 .. %u (R-WIRE-21)", what,
				  out->chain_count, CLUSTER_JOB_CHAIN_RECORDS_MAX);
	*tail_offset = chain_off + (uint64_t)record_bytes * out->chain_count;
	return check_at_least(what, length, (uint32_t)*tail_offset + tail_min, why, why_size);
}

static int job_fetch_decode(const uint8_t *p, uint32_t length,
			    struct cluster_job_view *out, char *why, size_t why_size)
{
	struct cluster_chain_record record, previous;
	const uint8_t *tail;
	uint64_t pages = 0, tail_offset;
	int ret = check_at_least("JOB fetch", length, CLUSTER_JOB_FETCH_OFF_CHAIN,
				 why, why_size);

	if (ret)
		return ret;
	ret = chain_count_get("JOB fetch", p, length, CLUSTER_JOB_FETCH_OFF_CHAIN_COUNT,
			      CLUSTER_JOB_FETCH_OFF_CHAIN, CLUSTER_CHAIN_RECORD_BYTES,
			      CLUSTER_JOB_FETCH_TAIL_OFF_PAGE_IDS, out, &tail_offset, why,
			      why_size);
	if (ret)
		return ret;
	out->chain = p + CLUSTER_JOB_FETCH_OFF_CHAIN;
	tail = p + tail_offset;
	out->skip_pages = sel_get_le32(tail + CLUSTER_JOB_FETCH_TAIL_OFF_SKIP_PAGES);
	ret = page_id_count_get("JOB fetch", tail + CLUSTER_JOB_FETCH_TAIL_OFF_STATE_SLOT, out,
				why, why_size);
	if (ret)
		return ret;
	if (tail[CLUSTER_JOB_FETCH_TAIL_OFF_READ_THROUGH] > 1)
		return PROTO_FAIL(why, why_size, "JOB fetch read-through %u (R-WIRE-12)",
				  tail[CLUSTER_JOB_FETCH_TAIL_OFF_READ_THROUGH]);
	out->read_through = tail[CLUSTER_JOB_FETCH_TAIL_OFF_READ_THROUGH] == 1;
	ret = page_ids_get("JOB fetch", p, length,
			   tail_offset + CLUSTER_JOB_FETCH_TAIL_OFF_PAGE_IDS, out, why, why_size);
	if (ret)
		return ret;
	for (uint32_t i = 0; i < out->chain_count; i++) {
		get_chain_record(out->chain + (size_t)i * CLUSTER_CHAIN_RECORD_BYTES, &record);
		ret = chain_check(&record, i, i ? &previous : NULL, &pages, why, why_size);
		if (ret)
			return ret;
		previous = record;
	}
	return fetch_pages_check(pages, out->skip_pages, out->page_id_count, why, why_size);
}

static int job_attach_decode(const uint8_t *p, uint32_t length,
			     struct cluster_job_view *out, char *why, size_t why_size)
{
	int ret = check_at_least("JOB pool attach", length, CLUSTER_JOB_ATTACH_BYTES_MIN, why,
				 why_size);

	if (ret)
		return ret;
	memcpy(out->instance_id, p + CLUSTER_JOB_ATTACH_OFF_INSTANCE_ID, 16);
	if (instance_id_zero(out->instance_id))
		return PROTO_FAIL(why, why_size, "JOB pool attach instance id is all zero "
				  "(R-WIRE-21)");
	ret = get_text("JOB pool attach", p, length, CLUSTER_JOB_ATTACH_OFF_ADDRESS,
		       CLUSTER_JOB_POOL_ADDRESS_BYTES_MAX, out->pool_address, why, why_size);
	if (ret)
		return ret;
	if (!out->pool_address[0])
		return PROTO_FAIL(why, why_size, "JOB pool attach address is empty (R-WIRE-21)");
	return 0;
}

static int job_put_decode(const uint8_t *p, uint32_t length, struct cluster_job_view *out,
			  char *why, size_t why_size)
{
	int ret = check_exact("JOB pool put", length, CLUSTER_JOB_PUT_BYTES, why, why_size);

	if (ret)
		return ret;
	out->pool_id = sel_get_le64(p + CLUSTER_JOB_PUT_OFF_PUT_ID);
	rec_key_get(p + CLUSTER_JOB_PUT_OFF_KEY, &out->key);
	out->share_bytes = sel_get_le64(p + CLUSTER_JOB_PUT_OFF_SHARE_BYTES);
	if (!key_valid(&out->key))
		return PROTO_FAIL(why, why_size, "JOB pool put key consumed %" PRIu64
				  " (R-WIRE-14)", out->key.consumed);
	if (out->share_bytes < REC_HEADER_BYTES)
		return PROTO_FAIL(why, why_size, "JOB pool put share of %" PRIu64 " bytes, "
				  "less than a record header (R-WIRE-21)", out->share_bytes);
	return 0;
}

static int job_export_decode(const uint8_t *p, uint32_t length,
			     struct cluster_job_view *out, char *why, size_t why_size)
{
	int ret = check_at_least("JOB pool export", length, CLUSTER_JOB_EXPORT_OFF_PAGE_IDS,
				 why, why_size);

	if (ret)
		return ret;
	out->pool_id = sel_get_le64(p + CLUSTER_JOB_EXPORT_OFF_PUT_ID);
	out->record_header = p + CLUSTER_JOB_EXPORT_OFF_HEADER;
	ret = page_id_count_get("JOB pool export", p + CLUSTER_JOB_EXPORT_OFF_STATE_SLOT, out,
				why, why_size);
	if (ret)
		return ret;
	return page_ids_get("JOB pool export", p, length, CLUSTER_JOB_EXPORT_OFF_PAGE_IDS, out,
			    why, why_size);
}

static int job_claim_decode(const uint8_t *p, uint32_t length, struct cluster_job_view *out,
			    char *why, size_t why_size)
{
	struct cluster_pool_chain_record record;
	struct cluster_chain_record as_chain, previous;
	const uint8_t *tail;
	uint64_t pages = 0, tail_offset;
	int ret = check_at_least("JOB pool claim", length, CLUSTER_JOB_CLAIM_OFF_CHAIN, why,
				 why_size);

	if (ret)
		return ret;
	out->pool_id = sel_get_le64(p + CLUSTER_JOB_CLAIM_OFF_CLAIM_ID);
	ret = chain_count_get("JOB pool claim", p, length, CLUSTER_JOB_CLAIM_OFF_CHAIN_COUNT,
			      CLUSTER_JOB_CLAIM_OFF_CHAIN, CLUSTER_POOL_CHAIN_RECORD_BYTES,
			      CLUSTER_JOB_CLAIM_TAIL_OFF_PAGE_IDS, out, &tail_offset, why,
			      why_size);
	if (ret)
		return ret;
	out->pool_chain = p + CLUSTER_JOB_CLAIM_OFF_CHAIN;
	tail = p + tail_offset;
	out->skip_pages = sel_get_le32(tail + CLUSTER_JOB_CLAIM_TAIL_OFF_SKIP_PAGES);
	ret = page_id_count_get("JOB pool claim", tail + CLUSTER_JOB_CLAIM_TAIL_OFF_STATE_SLOT,
				out, why, why_size);
	if (ret)
		return ret;
	ret = page_ids_get("JOB pool claim", p, length,
			   tail_offset + CLUSTER_JOB_CLAIM_TAIL_OFF_PAGE_IDS, out, why, why_size);
	if (ret)
		return ret;
	for (uint32_t i = 0; i < out->chain_count; i++) {
		const uint8_t *r = out->pool_chain + (size_t)i * CLUSTER_POOL_CHAIN_RECORD_BYTES;

		if (r[CLUSTER_POOL_CHAIN_OFF_ROW] > 1)
			return PROTO_FAIL(why, why_size, "JOB pool claim chain record %" PRIu32
					  " row %u (R-WIRE-12)", i, r[CLUSTER_POOL_CHAIN_OFF_ROW]);
		cluster_job_view_pool_chain_record(out, i, &record);
		pool_chain_as_chain(&record, &as_chain);
		ret = chain_check(&as_chain, i, i ? &previous : NULL, &pages, why, why_size);
		if (ret)
			return ret;
		previous = as_chain;
	}
	return fetch_pages_check(pages, out->skip_pages, out->page_id_count, why, why_size);
}

int cluster_job_decode(const uint8_t *p, uint32_t length, struct cluster_job_view *out,
		       char *why, size_t why_size)
{
	int ret = check_at_least("JOB", length, CLUSTER_JOB_OFF_BODY, why, why_size);

	if (ret)
		return ret;
	memset(out, 0, sizeof(*out));
	out->job_id = sel_get_le64(p + CLUSTER_JOB_OFF_JOB_ID);
	switch (p[CLUSTER_JOB_OFF_KIND]) {
	case CLUSTER_JOB_STORE:
		out->kind = CLUSTER_JOB_STORE;
		return job_store_decode(p, length, out, why, why_size);
	case CLUSTER_JOB_FETCH:
		out->kind = CLUSTER_JOB_FETCH;
		return job_fetch_decode(p, length, out, why, why_size);
	case CLUSTER_JOB_TRUNCATE:
	case CLUSTER_JOB_UNLINK:
	case CLUSTER_JOB_WARM_DROP:
		out->kind = (enum cluster_job_kind)p[CLUSTER_JOB_OFF_KIND];
		ret = check_exact("JOB", length, CLUSTER_JOB_KEY_BYTES, why, why_size);
		if (ret)
			return ret;
		rec_key_get(p + CLUSTER_JOB_KEY_OFF_KEY, &out->key);
		if (!key_valid(&out->key))
			return PROTO_FAIL(why, why_size, "JOB key consumed %" PRIu64
					  " (R-WIRE-14)", out->key.consumed);
		return 0;
	case CLUSTER_JOB_NOOP:
		out->kind = CLUSTER_JOB_NOOP;
		return check_exact("JOB noop", length, CLUSTER_JOB_OFF_BODY, why, why_size);
	case CLUSTER_JOB_POOL_ATTACH:
		out->kind = CLUSTER_JOB_POOL_ATTACH;
		return job_attach_decode(p, length, out, why, why_size);
	case CLUSTER_JOB_POOL_PUT:
		out->kind = CLUSTER_JOB_POOL_PUT;
		return job_put_decode(p, length, out, why, why_size);
	case CLUSTER_JOB_POOL_CLAIM:
		out->kind = CLUSTER_JOB_POOL_CLAIM;
		return job_claim_decode(p, length, out, why, why_size);
	case CLUSTER_JOB_POOL_EXPORT:
		out->kind = CLUSTER_JOB_POOL_EXPORT;
		return job_export_decode(p, length, out, why, why_size);
	}
	return PROTO_FAIL(why, why_size, "JOB kind %u unknown (R-WIRE-21)",
			  p[CLUSTER_JOB_OFF_KIND]);
}

uint32_t cluster_job_view_page_id(const struct cluster_job_view *view, uint32_t index)
{
	SEL_ASSERT(index < view->page_id_count);
	return sel_get_le32(view->page_ids + 4 * (size_t)index);
}

void cluster_job_view_chain_record(const struct cluster_job_view *view, uint32_t index,
				   struct cluster_chain_record *out)
{
	SEL_ASSERT(index < view->chain_count);
	get_chain_record(view->chain + (size_t)index * CLUSTER_CHAIN_RECORD_BYTES, out);
}

void cluster_job_view_pool_chain_record(const struct cluster_job_view *view, uint32_t index,
					struct cluster_pool_chain_record *out)
{
	const uint8_t *p;

	SEL_ASSERT(view->kind == CLUSTER_JOB_POOL_CLAIM && index < view->chain_count);
	p = view->pool_chain + (size_t)index * CLUSTER_POOL_CHAIN_RECORD_BYTES;
	rec_key_get(p + CLUSTER_CHAIN_OFF_KEY, &out->key);
	out->first_page_index = sel_get_le32(p + CLUSTER_CHAIN_OFF_FIRST_PAGE);
	out->tail_page_count = sel_get_le32(p + CLUSTER_CHAIN_OFF_TAIL_PAGES);
	out->row = p[CLUSTER_POOL_CHAIN_OFF_ROW] != 0;
}

/* ---- JOB_DONE (R-WIRE-22) ---- */

int cluster_job_done_encode(const struct cluster_job_done *m, uint8_t *buf,
			    size_t buf_size)
{
	size_t len;
	int ret = text_check(m->reason, CLUSTER_JOB_REASON_BYTES_MAX, &len);

	if (ret)
		return ret;
	if (!result_valid(m->result))
		return -EINVAL;
	if (buf_size < CLUSTER_JOB_DONE_BYTES_MIN + len)
		return -ENOSPC;
	sel_put_le64(buf + CLUSTER_JOB_DONE_OFF_JOB_ID, m->job_id);
	sel_put_le32(buf + CLUSTER_JOB_DONE_OFF_RESULT, (uint32_t)m->result);
	sel_put_le64(buf + CLUSTER_JOB_DONE_OFF_BYTES, m->bytes);
	return (int)(CLUSTER_JOB_DONE_OFF_REASON_LENGTH +
		     put_text(buf + CLUSTER_JOB_DONE_OFF_REASON_LENGTH, m->reason, len));
}

int cluster_job_done_decode(const uint8_t *p, uint32_t length,
			    struct cluster_job_done *out, char *why, size_t why_size)
{
	int ret = check_at_least("JOB_DONE", length, CLUSTER_JOB_DONE_BYTES_MIN, why,
				 why_size);

	if (ret)
		return ret;
	out->job_id = sel_get_le64(p + CLUSTER_JOB_DONE_OFF_JOB_ID);
	out->result = (int32_t)sel_get_le32(p + CLUSTER_JOB_DONE_OFF_RESULT);
	out->bytes = sel_get_le64(p + CLUSTER_JOB_DONE_OFF_BYTES);
	if (!result_valid(out->result))
		return PROTO_FAIL(why, why_size, "JOB_DONE result %" PRId32 " (R-WIRE-12)",
				  out->result);
	return get_text("JOB_DONE", p, length, CLUSTER_JOB_DONE_OFF_REASON_LENGTH,
			CLUSTER_JOB_REASON_BYTES_MAX, out->reason, why, why_size);
}

/* ---- HEARTBEAT and BYE (R-WIRE-23) ---- */

int cluster_heartbeat_encode(const struct cluster_heartbeat *m, uint8_t *buf,
			     size_t buf_size)
{
	if (buf_size < CLUSTER_HEARTBEAT_BYTES)
		return -ENOSPC;
	sel_put_le64(buf + CLUSTER_HEARTBEAT_OFF_MONOTONIC_NS, m->monotonic_ns);
	return CLUSTER_HEARTBEAT_BYTES;
}

int cluster_heartbeat_decode(const uint8_t *p, uint32_t length,
			     struct cluster_heartbeat *out, char *why, size_t why_size)
{
	int ret = check_exact("HEARTBEAT", length, CLUSTER_HEARTBEAT_BYTES, why, why_size);

	if (ret)
		return ret;
	out->monotonic_ns = sel_get_le64(p + CLUSTER_HEARTBEAT_OFF_MONOTONIC_NS);
	return 0;
}

int cluster_bye_decode(const uint8_t *p, uint32_t length, char *why, size_t why_size)
{
	(void)p;
	return check_exact("BYE", length, 0, why, why_size);
}

/* ---- Join MACs (R-WIRE-16) ---- */

#define JOIN_DOMAIN "selene-join-v1"
#define WELCOME_DOMAIN "selene-welcome-v1"

void cluster_join_mac(const uint8_t secret[CLUSTER_SECRET_BYTES],
		      const uint8_t server_nonce[CLUSTER_NONCE_BYTES],
		      const uint8_t client_nonce[CLUSTER_NONCE_BYTES], uint32_t rank,
		      const struct rec_digest *fingerprint,
		      uint8_t out[CLUSTER_MAC_BYTES])
{
	uint8_t in[sizeof(JOIN_DOMAIN) - 1 + 2 * CLUSTER_NONCE_BYTES + 4 + REC_DIGEST_BYTES];
	uint8_t *p = in;
	int ret;

	memcpy(p, JOIN_DOMAIN, sizeof(JOIN_DOMAIN) - 1);
	p += sizeof(JOIN_DOMAIN) - 1;
	memcpy(p, server_nonce, CLUSTER_NONCE_BYTES);
	p += CLUSTER_NONCE_BYTES;
	memcpy(p, client_nonce, CLUSTER_NONCE_BYTES);
	p += CLUSTER_NONCE_BYTES;
	sel_put_le32(p, rank);
	p += 4;
	memcpy(p, fingerprint->bytes, REC_DIGEST_BYTES);
	p += REC_DIGEST_BYTES;
	SEL_ASSERT(p == in + sizeof(in));
	ret = blake2b(out, in, secret, CLUSTER_MAC_BYTES, sizeof(in), CLUSTER_SECRET_BYTES);
	SEL_ASSERT(ret == 0);
}

void cluster_welcome_mac(const uint8_t secret[CLUSTER_SECRET_BYTES],
			 const uint8_t client_nonce[CLUSTER_NONCE_BYTES],
			 const uint8_t server_nonce[CLUSTER_NONCE_BYTES],
			 uint32_t rank, uint8_t out[CLUSTER_MAC_BYTES])
{
	uint8_t in[sizeof(WELCOME_DOMAIN) - 1 + 2 * CLUSTER_NONCE_BYTES + 4];
	uint8_t *p = in;
	int ret;

	memcpy(p, WELCOME_DOMAIN, sizeof(WELCOME_DOMAIN) - 1);
	p += sizeof(WELCOME_DOMAIN) - 1;
	memcpy(p, client_nonce, CLUSTER_NONCE_BYTES);
	p += CLUSTER_NONCE_BYTES;
	memcpy(p, server_nonce, CLUSTER_NONCE_BYTES);
	p += CLUSTER_NONCE_BYTES;
	sel_put_le32(p, rank);
	p += 4;
	SEL_ASSERT(p == in + sizeof(in));
	ret = blake2b(out, in, secret, CLUSTER_MAC_BYTES, sizeof(in), CLUSTER_SECRET_BYTES);
	SEL_ASSERT(ret == 0);
}

bool cluster_mac_equal(const uint8_t a[CLUSTER_MAC_BYTES],
		       const uint8_t b[CLUSTER_MAC_BYTES])
{
	volatile uint8_t diff = 0;

	for (uint32_t i = 0; i < CLUSTER_MAC_BYTES; i++)
		diff |= a[i] ^ b[i];
	return diff == 0;
}

int cluster_nonce_fill(uint8_t out[CLUSTER_NONCE_BYTES])
{
	size_t got = 0;

	while (got < CLUSTER_NONCE_BYTES) {
		ssize_t n = getrandom(out + got, CLUSTER_NONCE_BYTES - got, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		got += (size_t)n;
	}
	/* R-WIRE-16: an all-zero nonce is refused; 2^-256 is not worth a loop. */
	return nonce_zero(out) ? -EAGAIN : 0;
}
