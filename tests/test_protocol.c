/*
 * Cluster wire protocol (cluster/protocol.h, PROTOCOL.md R-WIRE-*): the
 * frame header byte for byte, every message's round trip (chunked
 * summaries and agreements of thousands of records, jobs at their maxima),
 * rejection of every malformed frame and payload, streaming over
 * socketpairs in 1-byte pieces and under signals, dead peers, the join
 * MACs, and the cluster.send / cluster.recv failpoints.
 */
#include "tests/testutil.h"

#include "cluster/protocol.h"
#include "common/base.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "selene/selene.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define WHY_BYTES 256
#define SMALL_BYTES 8192u

static int teardown(void **state)
{
	(void)state;
	sel_failpoints_configure(NULL);
	sel_log_set_level(SEL_LOG_INFO);
	return 0;
}

/* A socketpair whose ends give up after timeout_s instead of hanging. */
static void pair_timeout(int sv[2], long timeout_s)
{
	struct timeval tv = { .tv_sec = timeout_s };

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(setsockopt(sv[i], SOL_SOCKET, SO_RCVTIMEO, &tv,
					    sizeof(tv)), 0);
		assert_int_equal(setsockopt(sv[i], SOL_SOCKET, SO_SNDTIMEO, &tv,
					    sizeof(tv)), 0);
	}
}

static void pair(int sv[2])
{
	pair_timeout(sv, 10);
}

static void expect_proto(int ret, const char *why, const char *rule)
{
	if (ret != SEL_EPROTO)
		fail_msg("expected SEL_EPROTO citing %s, got %d (%s)", rule, ret, why);
	if (!strstr(why, rule))
		fail_msg("reason '%s' does not cite %s", why, rule);
}

static void put_bytes(int fd, const void *bytes, size_t len)
{
	assert_int_equal(write(fd, bytes, len), (ssize_t)len);
}

/* A whole frame in memory, header then payload; returns its length. */
static size_t make_frame(uint8_t *out, uint16_t type, uint64_t sequence,
			 const uint8_t *payload, uint32_t length)
{
	cluster_frame_header_encode(out, type, sequence, payload, length);
	if (length)
		memcpy(out + CLUSTER_FRAME_HEADER_BYTES, payload, length);
	return CLUSTER_FRAME_HEADER_BYTES + length;
}

/* Recomputes the header checksum after a deliberate edit (R-WIRE-3). */
static void resign(uint8_t *header)
{
	sel_put_le64(header + CLUSTER_OFF_HEADER_CHECKSUM,
		     XXH3_64bits(header, CLUSTER_OFF_HEADER_CHECKSUM));
}

/*
 * Sends bytes into a fresh socketpair, closes the sending end when asked
 * (else keeps it open, so a reader that waits for more would block), and
 * reads one frame from the other end.
 */
static int read_bytes(const uint8_t *bytes, size_t len, bool close_writer,
		      uint8_t *buf, size_t buf_size, struct cluster_frame_header *h,
		      char *why)
{
	int sv[2], ret;

	pair(sv);
	if (len)
		put_bytes(sv[0], bytes, len);
	if (close_writer)
		close(sv[0]);
	why[0] = '\0';
	ret = cluster_frame_read(sv[1], buf, buf_size, NULL, h, why, WHY_BYTES);
	if (!close_writer)
		close(sv[0]);
	close(sv[1]);
	return ret;
}

/* ---- Sample messages ---- */

static void sample_hello(struct cluster_hello *m)
{
	memset(m, 0, sizeof(*m));
	m->rank = 3;
	m->world_size = 8;
	tu_fill(m->fingerprint.bytes, REC_DIGEST_BYTES, 1);
	tu_fill(m->layout_digest.bytes, REC_DIGEST_BYTES, 2);
	m->has_disk_store = true;
	m->disk_limit_bytes = 5ull << 40;
	tu_fill(m->client_nonce, CLUSTER_NONCE_BYTES, 3);
	m->marked = true;
	m->warm_bytes = 3ull << 33;
	m->warm_policy = 1;
}

/* Record i of a directory: roots and children, rows on odd records. */
static void sample_summary_record(struct cluster_summary_record *r, uint32_t i)
{
	memset(r, 0, sizeof(*r));
	r->key.consumed = 64ull * (i + 2) + i % 64;
	tu_fill(r->key.digest.bytes, REC_DIGEST_BYTES, 100000ull + i);
	if (i % 5 != 0) {
		r->parent.consumed = r->key.consumed - 1 - i % 70;
		tu_fill(r->parent.digest.bytes, REC_DIGEST_BYTES, 200000ull + i);
	}
	r->first_page_index = (uint32_t)(r->parent.consumed / 64);
	r->tail_page_count = (uint32_t)(r->key.consumed / 64 - r->first_page_index);
	tu_fill(r->bucket.bytes, REC_DIGEST_BYTES, 300000ull + i);
	r->row_present = i & 1;
	tu_fill(r->header_digest.bytes, REC_DIGEST_BYTES, 400000ull + i);
}

static void sample_agreement_entry(struct cluster_agreement_entry *e, uint32_t i)
{
	memset(e, 0, sizeof(*e));
	e->key.consumed = 1 + 3ull * i;
	tu_fill(e->key.digest.bytes, REC_DIGEST_BYTES, 500000ull + i);
	e->action = (enum cluster_action)(i % 3);
}

static const struct cluster_chain_record sample_chain[3] = {
	{ .key = { .consumed = 128 }, .first_page_index = 0, .tail_page_count = 2 },
	{ .key = { .consumed = 323 }, .first_page_index = 2, .tail_page_count = 3 },
	{ .key = { .consumed = 384 }, .first_page_index = 5, .tail_page_count = 1 },
};
static const uint32_t sample_page_ids[5] = { 10, 11, 12, 13, 14 };

/* A fetch of the sample chain's 6 pages, skipping 1. */
static void sample_fetch(struct cluster_job *m)
{
	memset(m, 0, sizeof(*m));
	m->job_id = 0x1122334455667788ull;
	m->kind = CLUSTER_JOB_FETCH;
	m->chain = sample_chain;
	m->chain_count = 3;
	m->skip_pages = 1;
	m->state_slot = 7;
	m->page_ids = sample_page_ids;
	m->page_id_count = 5;
}

/* Encodes a valid message of each type into buf; returns its length. */
static int encode_sample(uint16_t type, uint8_t *buf, size_t size)
{
	struct cluster_hello hello;
	struct cluster_challenge challenge;
	struct cluster_proof proof;
	struct cluster_welcome welcome = { .disk_limit_bytes = 1ull << 30 };
	struct cluster_refuse refuse = { .reason = CLUSTER_REFUSE_LAYOUT };
	struct cluster_summary_record records[3];
	struct cluster_agreement_entry entries[3];
	struct cluster_agreed agreed = { .result = 0, .records_kept = 42 };
	struct cluster_job job;
	struct cluster_job_done done = { .job_id = 9, .result = -EIO, .bytes = 4096 };
	struct cluster_heartbeat beat = { .monotonic_ns = 123456789 };

	switch (type) {
	case CLUSTER_MSG_HELLO:
		sample_hello(&hello);
		return cluster_hello_encode(&hello, buf, size);
	case CLUSTER_MSG_CHALLENGE:
		tu_fill(challenge.server_nonce, CLUSTER_NONCE_BYTES, 4);
		return cluster_challenge_encode(&challenge, buf, size);
	case CLUSTER_MSG_PROOF:
		tu_fill(proof.mac, CLUSTER_MAC_BYTES, 5);
		return cluster_proof_encode(&proof, buf, size);
	case CLUSTER_MSG_WELCOME:
		tu_fill(welcome.mac, CLUSTER_MAC_BYTES, 6);
		return cluster_welcome_encode(&welcome, buf, size);
	case CLUSTER_MSG_REFUSE:
		snprintf(refuse.text, sizeof(refuse.text), "layout digest differs: %s", "ab12");
		return cluster_refuse_encode(&refuse, buf, size);
	case CLUSTER_MSG_SUMMARY:
		for (uint32_t i = 0; i < 3; i++)
			sample_summary_record(&records[i], i);
		return cluster_summary_encode(buf, size, 0, true, records, 3);
	case CLUSTER_MSG_AGREEMENT:
		for (uint32_t i = 0; i < 3; i++)
			sample_agreement_entry(&entries[i], i);
		return cluster_agreement_encode(buf, size, 0, true, entries, 3);
	case CLUSTER_MSG_AGREED:
		return cluster_agreed_encode(&agreed, buf, size);
	case CLUSTER_MSG_JOB:
		sample_fetch(&job);
		return cluster_job_encode(&job, buf, size);
	case CLUSTER_MSG_JOB_DONE:
		snprintf(done.reason, sizeof(done.reason), "disk.write: Input/output error");
		return cluster_job_done_encode(&done, buf, size);
	case CLUSTER_MSG_HEARTBEAT:
		return cluster_heartbeat_encode(&beat, buf, size);
	case CLUSTER_MSG_BYE:
		return 0;
	}
	fail_msg("no sample for type %u", type);
	return -1;
}

/* Decodes payload as type with its decoder; views are discarded. */
static int decode_any(uint16_t type, const uint8_t *p, uint32_t len, char *why)
{
	union {
		struct cluster_hello hello;
		struct cluster_challenge challenge;
		struct cluster_proof proof;
		struct cluster_welcome welcome;
		struct cluster_refuse refuse;
		struct cluster_summary_view summary;
		struct cluster_agreement_view agreement;
		struct cluster_agreed agreed;
		struct cluster_job_view job;
		struct cluster_job_done done;
		struct cluster_heartbeat beat;
	} u;

	why[0] = '\0';
	switch (type) {
	case CLUSTER_MSG_HELLO:
		return cluster_hello_decode(p, len, &u.hello, why, WHY_BYTES);
	case CLUSTER_MSG_CHALLENGE:
		return cluster_challenge_decode(p, len, &u.challenge, why, WHY_BYTES);
	case CLUSTER_MSG_PROOF:
		return cluster_proof_decode(p, len, &u.proof, why, WHY_BYTES);
	case CLUSTER_MSG_WELCOME:
		return cluster_welcome_decode(p, len, &u.welcome, why, WHY_BYTES);
	case CLUSTER_MSG_REFUSE:
		return cluster_refuse_decode(p, len, &u.refuse, why, WHY_BYTES);
	case CLUSTER_MSG_SUMMARY:
		return cluster_summary_decode(p, len, &u.summary, why, WHY_BYTES);
	case CLUSTER_MSG_AGREEMENT:
		return cluster_agreement_decode(p, len, &u.agreement, why, WHY_BYTES);
	case CLUSTER_MSG_AGREED:
		return cluster_agreed_decode(p, len, &u.agreed, why, WHY_BYTES);
	case CLUSTER_MSG_JOB:
		return cluster_job_decode(p, len, &u.job, why, WHY_BYTES);
	case CLUSTER_MSG_JOB_DONE:
		return cluster_job_done_decode(p, len, &u.done, why, WHY_BYTES);
	case CLUSTER_MSG_HEARTBEAT:
		return cluster_heartbeat_decode(p, len, &u.beat, why, WHY_BYTES);
	case CLUSTER_MSG_BYE:
		return cluster_bye_decode(p, len, why, WHY_BYTES);
	}
	fail_msg("no decoder for type %u", type);
	return -1;
}

static void assert_summary_record_equal(const struct cluster_summary_record *a,
					const struct cluster_summary_record *b)
{
	assert_true(rec_key_equal(&a->key, &b->key));
	assert_true(rec_key_equal(&a->parent, &b->parent));
	assert_true(rec_digest_equal(&a->bucket, &b->bucket));
	assert_int_equal(a->first_page_index, b->first_page_index);
	assert_int_equal(a->tail_page_count, b->tail_page_count);
	assert_int_equal(a->row_present, b->row_present);
	assert_true(rec_digest_equal(&a->header_digest, &b->header_digest));
}

/* ---- Frame header ---- */

/* R-WIRE-1, R-WIRE-3, R-WIRE-7: every header field at its offset, byte-exact. */
static void test_protocol_header_layout(void **state)
{
	uint8_t payload[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	uint8_t h[CLUSTER_FRAME_HEADER_BYTES];
	struct cluster_frame_header d;
	char why[WHY_BYTES];

	(void)state;
	cluster_frame_header_encode(h, CLUSTER_MSG_HEARTBEAT, 0x0102030405060708ull,
				    payload, sizeof(payload));
	assert_memory_equal(h, "SELN", 4);
	assert_int_equal(h[4], 6);
	assert_int_equal(h[5], 0);
	assert_int_equal(h[6], CLUSTER_MSG_HEARTBEAT);
	assert_int_equal(h[7], 0);
	assert_int_equal(sel_get_le32(h + 8), 8);
	assert_int_equal(sel_get_le32(h + 12), 0);
	assert_int_equal(sel_get_le64(h + 16), 0x0102030405060708ull);
	assert_int_equal(sel_get_le64(h + 24), XXH3_64bits(payload, 8));
	assert_int_equal(sel_get_le64(h + 32), XXH3_64bits(h, 32));
	assert_int_equal(cluster_frame_header_decode(h, &d, why, sizeof(why)), 0);
	assert_int_equal(d.version, 6);
	assert_int_equal(d.type, CLUSTER_MSG_HEARTBEAT);
	assert_int_equal(d.payload_length, 8);
	assert_int_equal(d.sequence, 0x0102030405060708ull);
	assert_int_equal(cluster_frame_payload_check(&d, payload, why, sizeof(why)), 0);
	/* R-WIRE-7: an empty payload's checksum is XXH3 of nothing. */
	cluster_frame_header_encode(h, CLUSTER_MSG_BYE, 0, NULL, 0);
	assert_int_equal(sel_get_le64(h + 24), 0x2d06800538d394c2ull);
	assert_int_equal(cluster_frame_header_decode(h, &d, why, sizeof(why)), 0);
	assert_int_equal(cluster_frame_payload_check(&d, NULL, why, sizeof(why)), 0);
	assert_string_equal(cluster_msg_name(CLUSTER_MSG_JOB_DONE), "JOB_DONE");
	assert_string_equal(cluster_msg_name(0), "unknown");
}

/* R-WIRE-6: the per-type bounds PROTOCOL.md's table states. */
static void test_protocol_payload_bounds(void **state)
{
	static const uint32_t bounds[][3] = {
		{ CLUSTER_MSG_HELLO, 91, 91 },
		{ CLUSTER_MSG_CHALLENGE, 32, 32 },
		{ CLUSTER_MSG_PROOF, 32, 32 },
		{ CLUSTER_MSG_WELCOME, 40, 40 },
		{ CLUSTER_MSG_REFUSE, 6, 262 },
		{ CLUSTER_MSG_SUMMARY, 9, 16777132 },
		{ CLUSTER_MSG_AGREEMENT, 9, 16777209 },
		{ CLUSTER_MSG_AGREED, 12, 12 },
		{ CLUSTER_MSG_JOB, 9, 4329505 },
		{ CLUSTER_MSG_JOB_DONE, 22, 222 },
		{ CLUSTER_MSG_HEARTBEAT, 8, 8 },
		{ CLUSTER_MSG_BYE, 0, 0 },
	};

	(void)state;
	for (size_t i = 0; i < SEL_ARRAY_SIZE(bounds); i++) {
		assert_int_equal(cluster_payload_bytes_min((uint16_t)bounds[i][0]), bounds[i][1]);
		assert_int_equal(cluster_payload_bytes_max((uint16_t)bounds[i][0]), bounds[i][2]);
		assert_true(bounds[i][2] <= CLUSTER_FRAME_PAYLOAD_BYTES_MAX);
	}
}

/* R-WIRE-2: a frame that does not start with SELN is rejected first. */
static void test_protocol_rejects_bad_magic(void **state)
{
	uint8_t frame[64], buf[64];
	struct cluster_frame_header h;
	char why[WHY_BYTES];
	size_t len = make_frame(frame, CLUSTER_MSG_BYE, 0, NULL, 0);

	(void)state;
	for (int i = 0; i < 4; i++) {
		uint8_t bad[64];

		memcpy(bad, frame, len);
		bad[i] ^= 0x20;
		resign(bad);
		expect_proto(read_bytes(bad, len, false, buf, sizeof(buf), &h, why), why,
			     "R-WIRE-2");
	}
}

/* R-WIRE-4: versions other than 6 are rejected, even when signed. */
static void test_protocol_rejects_wrong_version(void **state)
{
	static const uint16_t versions[] = { 0, 1, 2, 3, 4, 5, 7, 0x0600, 0xffff };
	uint8_t frame[64], buf[64];
	struct cluster_frame_header h;
	char why[WHY_BYTES];
	size_t len = make_frame(frame, CLUSTER_MSG_BYE, 0, NULL, 0);

	(void)state;
	for (size_t i = 0; i < SEL_ARRAY_SIZE(versions); i++) {
		frame[CLUSTER_OFF_VERSION] = (uint8_t)versions[i];
		frame[CLUSTER_OFF_VERSION + 1] = (uint8_t)(versions[i] >> 8);
		resign(frame);
		expect_proto(read_bytes(frame, len, false, buf, sizeof(buf), &h, why), why,
			     "R-WIRE-4");
	}
}

/* R-WIRE-4: unknown message types are rejected, even when signed. */
static void test_protocol_rejects_unknown_type(void **state)
{
	static const uint16_t types[] = { 0, CLUSTER_MSG_TYPE_LAST + 1, 0x100, 0xffff };
	uint8_t frame[64], buf[64];
	struct cluster_frame_header h;
	char why[WHY_BYTES];
	size_t len = make_frame(frame, CLUSTER_MSG_BYE, 0, NULL, 0);

	(void)state;
	for (size_t i = 0; i < SEL_ARRAY_SIZE(types); i++) {
		frame[CLUSTER_OFF_TYPE] = (uint8_t)types[i];
		frame[CLUSTER_OFF_TYPE + 1] = (uint8_t)(types[i] >> 8);
		resign(frame);
		expect_proto(read_bytes(frame, len, false, buf, sizeof(buf), &h, why), why,
			     "R-WIRE-4");
	}
}

/* R-WIRE-5: any bit of the reserved field is rejected, even when signed. */
static void test_protocol_rejects_nonzero_reserved(void **state)
{
	uint8_t frame[64], bad[64], buf[64];
	struct cluster_frame_header h;
	char why[WHY_BYTES];
	size_t len = make_frame(frame, CLUSTER_MSG_BYE, 0, NULL, 0);

	(void)state;
	for (int bit = 0; bit < 32; bit += 7) {
		memcpy(bad, frame, len);
		bad[CLUSTER_OFF_RESERVED + bit / 8] |= (uint8_t)(1u << (bit % 8));
		resign(bad);
		expect_proto(read_bytes(bad, len, false, buf, sizeof(buf), &h, why), why,
			     "R-WIRE-5");
	}
}

/* R-WIRE-3: every flipped bit after the magic fails the header checksum. */
static void test_protocol_rejects_header_checksum(void **state)
{
	uint8_t payload[8] = { 0 }, frame[64], bad[64], buf[64];
	struct cluster_frame_header h;
	char why[WHY_BYTES];
	size_t len = make_frame(frame, CLUSTER_MSG_HEARTBEAT, 5, payload, 8);

	(void)state;
	for (uint32_t bit = 32; bit < 8 * CLUSTER_FRAME_HEADER_BYTES; bit++) {
		memcpy(bad, frame, CLUSTER_FRAME_HEADER_BYTES);
		bad[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		why[0] = '\0';
		expect_proto(cluster_frame_header_decode(bad, &h, why, sizeof(why)), why,
			     "R-WIRE-3");
	}
	/* And on a socket: a flipped length bit never makes the reader wait. */
	memcpy(bad, frame, len);
	bad[CLUSTER_OFF_PAYLOAD_LENGTH + 3] ^= 0x80;
	expect_proto(read_bytes(bad, len, false, buf, sizeof(buf), &h, why), why, "R-WIRE-3");
}

/* R-WIRE-7: a flipped payload bit, or a re-signed wrong checksum, is caught. */
static void test_protocol_rejects_payload_checksum(void **state)
{
	uint8_t payload[SMALL_BYTES], frame[SMALL_BYTES], bad[SMALL_BYTES], buf[SMALL_BYTES];
	struct cluster_frame_header h;
	char why[WHY_BYTES];
	int len = encode_sample(CLUSTER_MSG_HELLO, payload, sizeof(payload));
	size_t total = make_frame(frame, CLUSTER_MSG_HELLO, 0, payload, (uint32_t)len);

	(void)state;
	assert_int_equal(read_bytes(frame, total, false, buf, sizeof(buf), &h, why), 1);
	for (size_t byte = CLUSTER_FRAME_HEADER_BYTES; byte < total; byte += 13) {
		memcpy(bad, frame, total);
		bad[byte] ^= 0x04;
		expect_proto(read_bytes(bad, total, false, buf, sizeof(buf), &h, why), why,
			     "R-WIRE-7");
	}
	memcpy(bad, frame, total);
	bad[CLUSTER_OFF_PAYLOAD_CHECKSUM] ^= 1;
	resign(bad);
	expect_proto(read_bytes(bad, total, false, buf, sizeof(buf), &h, why), why, "R-WIRE-7");
}

/*
 * R-WIRE-6: a length outside its type's bounds is rejected from the header
 * alone; the payload is never sent and the sender stays open, so a reader
 * that tried to read it would block until the socket timeout.
 */
static void test_protocol_rejects_length_before_payload(void **state)
{
	uint8_t frame[CLUSTER_FRAME_HEADER_BYTES], buf[64];
	struct cluster_frame_header h;
	char why[WHY_BYTES];

	(void)state;
	for (uint16_t type = CLUSTER_MSG_TYPE_FIRST; type <= CLUSTER_MSG_TYPE_LAST; type++) {
		uint32_t lengths[3] = { cluster_payload_bytes_max(type) + 1, UINT32_MAX,
					cluster_payload_bytes_min(type) - 1 };
		uint32_t tries = cluster_payload_bytes_min(type) > 0 ? 3 : 2;

		for (uint32_t i = 0; i < tries; i++) {
			struct timespec t0, t1;
			int sv[2], ret;

			cluster_frame_header_encode(frame, CLUSTER_MSG_BYE, 0, NULL, 0);
			frame[CLUSTER_OFF_TYPE] = (uint8_t)type;
			sel_put_le32(frame + CLUSTER_OFF_PAYLOAD_LENGTH, lengths[i]);
			resign(frame);
			pair_timeout(sv, 3);
			put_bytes(sv[0], frame, sizeof(frame));
			clock_gettime(CLOCK_MONOTONIC, &t0);
			why[0] = '\0';
			ret = cluster_frame_read(sv[1], buf, sizeof(buf), NULL, &h, why,
						 sizeof(why));
			clock_gettime(CLOCK_MONOTONIC, &t1);
			expect_proto(ret, why, "R-WIRE-6");
			assert_true(t1.tv_sec - t0.tv_sec < 2);
			close(sv[0]);
			close(sv[1]);
		}
	}
}

/* R-WIRE-6: a payload longer than the reader's buffer is not read at all. */
static void test_protocol_buffer_too_small(void **state)
{
	uint8_t payload[SMALL_BYTES], frame[SMALL_BYTES], buf[SMALL_BYTES];
	struct cluster_frame_header h;
	char why[WHY_BYTES];
	int len = encode_sample(CLUSTER_MSG_HELLO, payload, sizeof(payload));
	size_t total = make_frame(frame, CLUSTER_MSG_HELLO, 0, payload, (uint32_t)len);
	int sv[2];

	(void)state;
	pair(sv);
	put_bytes(sv[0], frame, total);
	assert_int_equal(cluster_frame_read(sv[1], buf, (size_t)len - 1, NULL, &h, why,
					    sizeof(why)), SEL_ETOOBIG);
	assert_non_null(strstr(why, "R-WIRE-6"));
	/* Nothing of the payload was consumed. */
	assert_int_equal(recv(sv[1], buf, sizeof(buf), MSG_DONTWAIT), len);
	close(sv[0]);
	close(sv[1]);
}

/* R-WIRE-9: EOF mid-header and mid-payload is malformed; between frames, 0. */
static void test_protocol_truncated_frames(void **state)
{
	uint8_t payload[SMALL_BYTES], frame[SMALL_BYTES], buf[SMALL_BYTES];
	struct cluster_frame_header h;
	char why[WHY_BYTES];
	int len = encode_sample(CLUSTER_MSG_REFUSE, payload, sizeof(payload));
	size_t total = make_frame(frame, CLUSTER_MSG_REFUSE, 0, payload, (uint32_t)len);

	(void)state;
	assert_int_equal(read_bytes(frame, 0, true, buf, sizeof(buf), &h, why), 0);
	for (size_t cut = 1; cut < total; cut++)
		expect_proto(read_bytes(frame, cut, true, buf, sizeof(buf), &h, why), why,
			     "R-WIRE-9");
	assert_int_equal(read_bytes(frame, total, true, buf, sizeof(buf), &h, why), 1);
	assert_int_equal(h.type, CLUSTER_MSG_REFUSE);
}

/* R-WIRE-8: sequence numbers must run 0, 1, 2, ... when tracked. */
static void test_protocol_sequence(void **state)
{
	uint8_t frame[64], buf[64];
	struct cluster_frame_header h;
	char why[WHY_BYTES];
	uint64_t next = 0, untracked_seq = 0;
	static const uint64_t sent[] = { 0, 1, 3 };
	int sv[2];

	(void)state;
	pair(sv);
	for (size_t i = 0; i < SEL_ARRAY_SIZE(sent); i++)
		put_bytes(sv[0], frame, make_frame(frame, CLUSTER_MSG_BYE, sent[i], NULL, 0));
	assert_int_equal(cluster_frame_read(sv[1], buf, sizeof(buf), &next, &h, why,
					    sizeof(why)), 1);
	assert_int_equal(cluster_frame_read(sv[1], buf, sizeof(buf), &next, &h, why,
					    sizeof(why)), 1);
	assert_int_equal(next, 2);
	expect_proto(cluster_frame_read(sv[1], buf, sizeof(buf), &next, &h, why,
					sizeof(why)), why, "R-WIRE-8");
	/* The writer stamps and advances its own counter. */
	assert_int_equal(cluster_frame_write(sv[0], &untracked_seq, CLUSTER_MSG_BYE,
					     NULL, 0), 0);
	assert_int_equal(untracked_seq, 1);
	assert_int_equal(cluster_frame_read(sv[1], buf, sizeof(buf), NULL, &h, why,
					    sizeof(why)), 1);
	assert_int_equal(h.sequence, 0);
	close(sv[0]);
	close(sv[1]);
}

/* ---- Round trips ---- */

/* R-WIRE-15, R-WIRE-16, R-WIRE-13: the join messages survive a frame trip. */
static void test_protocol_round_trip_join(void **state)
{
	uint8_t payload[SMALL_BYTES], buf[SMALL_BYTES];
	struct cluster_hello hello, hello_out;
	struct cluster_challenge challenge, challenge_out;
	struct cluster_proof proof, proof_out;
	struct cluster_welcome welcome = { .disk_limit_bytes = 77 }, welcome_out;
	struct cluster_refuse refuse = { .reason = CLUSTER_REFUSE_SHUTDOWN }, refuse_out;
	struct cluster_frame_header h;
	char why[WHY_BYTES];
	uint64_t wseq = 0, rseq = 0;
	int sv[2], len;

	(void)state;
	pair(sv);
	sample_hello(&hello);
	len = cluster_hello_encode(&hello, payload, sizeof(payload));
	assert_int_equal(len, CLUSTER_HELLO_BYTES);
	/* Byte-exact offsets of R-WIRE-15. */
	assert_int_equal(sel_get_le32(payload + 0), 3);
	assert_int_equal(sel_get_le32(payload + 4), 8);
	assert_memory_equal(payload + 8, hello.fingerprint.bytes, 16);
	assert_memory_equal(payload + 24, hello.layout_digest.bytes, 16);
	assert_int_equal(payload[40], 1);
	assert_int_equal(sel_get_le64(payload + 41), 5ull << 40);
	assert_memory_equal(payload + 49, hello.client_nonce, 32);
	assert_int_equal(payload[81], 1);
	assert_int_equal(sel_get_le64(payload + 82), 3ull << 33);
	assert_int_equal(cluster_frame_write(sv[0], &wseq, CLUSTER_MSG_HELLO, payload,
					     (uint32_t)len), 0);
	assert_int_equal(cluster_frame_read(sv[1], buf, sizeof(buf), &rseq, &h, why,
					    sizeof(why)), 1);
	assert_int_equal(h.type, CLUSTER_MSG_HELLO);
	assert_int_equal(cluster_hello_decode(buf, h.payload_length, &hello_out, why,
					      sizeof(why)), 0);
	assert_int_equal(hello_out.rank, 3);
	assert_int_equal(hello_out.world_size, 8);
	assert_true(rec_digest_equal(&hello_out.fingerprint, &hello.fingerprint));
	assert_true(rec_digest_equal(&hello_out.layout_digest, &hello.layout_digest));
	assert_true(hello_out.has_disk_store);
	assert_int_equal(hello_out.disk_limit_bytes, 5ull << 40);
	assert_memory_equal(hello_out.client_nonce, hello.client_nonce, 32);
	assert_true(hello_out.marked);
	assert_int_equal(hello_out.warm_bytes, 3ull << 33);
	assert_int_equal(hello_out.warm_policy, 1);
	/* R-WIRE-12: the warm policy is 0 or 1; R-WIRE-15: 0 without a warm tier. */
	assert_int_equal(cluster_hello_encode(&hello, payload, sizeof(payload)),
			 CLUSTER_HELLO_BYTES);
	payload[90] = 2;
	expect_proto(cluster_hello_decode(payload, CLUSTER_HELLO_BYTES, &hello_out, why,
					  sizeof(why)), why, "R-WIRE-12");
	hello.warm_bytes = 0;
	assert_int_equal(cluster_hello_encode(&hello, payload, sizeof(payload)), -EINVAL);
	hello.warm_bytes = 3ull << 33;
	hello.warm_policy = 0;
	/* R-WIRE-15: a warm tier without a disk store is refused both ways. */
	hello.has_disk_store = false;
	hello.disk_limit_bytes = 0;
	hello.marked = false;
	assert_int_equal(cluster_hello_encode(&hello, payload, sizeof(payload)), -EINVAL);
	hello.warm_bytes = 0;
	assert_int_equal(cluster_hello_encode(&hello, payload, sizeof(payload)),
			 CLUSTER_HELLO_BYTES);
	sel_put_le64(payload + 82, 1);
	expect_proto(cluster_hello_decode(payload, CLUSTER_HELLO_BYTES, &hello_out, why,
					  sizeof(why)), why, "R-WIRE-15");
	sample_hello(&hello);

	tu_fill(challenge.server_nonce, 32, 11);
	len = cluster_challenge_encode(&challenge, payload, sizeof(payload));
	assert_int_equal(len, 32);
	assert_int_equal(cluster_frame_write(sv[0], &wseq, CLUSTER_MSG_CHALLENGE, payload,
					     (uint32_t)len), 0);
	assert_int_equal(cluster_frame_read(sv[1], buf, sizeof(buf), &rseq, &h, why,
					    sizeof(why)), 1);
	assert_int_equal(cluster_challenge_decode(buf, h.payload_length, &challenge_out,
						  why, sizeof(why)), 0);
	assert_memory_equal(challenge_out.server_nonce, challenge.server_nonce, 32);

	tu_fill(proof.mac, 32, 12);
	len = cluster_proof_encode(&proof, payload, sizeof(payload));
	assert_int_equal(cluster_proof_decode(payload, (uint32_t)len, &proof_out, why,
					      sizeof(why)), 0);
	assert_memory_equal(proof_out.mac, proof.mac, 32);

	tu_fill(welcome.mac, 32, 13);
	len = cluster_welcome_encode(&welcome, payload, sizeof(payload));
	assert_int_equal(len, 40);
	assert_int_equal(sel_get_le64(payload + 32), 77);
	assert_int_equal(cluster_welcome_decode(payload, (uint32_t)len, &welcome_out, why,
						sizeof(why)), 0);
	assert_memory_equal(welcome_out.mac, welcome.mac, 32);
	assert_int_equal(welcome_out.disk_limit_bytes, 77);

	/* A text of exactly the maximum, and an empty one. */
	memset(refuse.text, '~', CLUSTER_REFUSE_TEXT_BYTES_MAX);
	refuse.text[CLUSTER_REFUSE_TEXT_BYTES_MAX] = '\0';
	len = cluster_refuse_encode(&refuse, payload, sizeof(payload));
	assert_int_equal(len, 6 + CLUSTER_REFUSE_TEXT_BYTES_MAX);
	assert_int_equal(sel_get_le32(payload), CLUSTER_REFUSE_SHUTDOWN);
	assert_int_equal(payload[4] | payload[5] << 8, CLUSTER_REFUSE_TEXT_BYTES_MAX);
	assert_int_equal(cluster_frame_write(sv[0], &wseq, CLUSTER_MSG_REFUSE, payload,
					     (uint32_t)len), 0);
	assert_int_equal(cluster_frame_read(sv[1], buf, sizeof(buf), &rseq, &h, why,
					    sizeof(why)), 1);
	assert_int_equal(cluster_refuse_decode(buf, h.payload_length, &refuse_out, why,
					       sizeof(why)), 0);
	assert_int_equal(refuse_out.reason, CLUSTER_REFUSE_SHUTDOWN);
	assert_string_equal(refuse_out.text, refuse.text);
	refuse.text[0] = '\0';
	len = cluster_refuse_encode(&refuse, payload, sizeof(payload));
	assert_int_equal(len, 6);
	assert_int_equal(cluster_refuse_decode(payload, (uint32_t)len, &refuse_out, why,
					       sizeof(why)), 0);
	assert_string_equal(refuse_out.text, "");
	close(sv[0]);
	close(sv[1]);
}

/* Sends a summary in chunks, with a heartbeat between chunks, then BYE. */
struct summary_sender {
	int fd;
	uint32_t record_count;
	uint32_t chunk_records;
	int result;
};

static void *summary_sender_main(void *arg)
{
	struct summary_sender *s = arg;
	struct cluster_summary_record *records = calloc(s->chunk_records, sizeof(*records));
	uint8_t *buf = malloc(CLUSTER_FRAME_PAYLOAD_BYTES_MAX);
	uint8_t beat_buf[CLUSTER_HEARTBEAT_BYTES];
	struct cluster_heartbeat beat = { .monotonic_ns = 1 };
	uint64_t seq = 0;
	uint32_t chunk = 0, sent = 0;

	SEL_ASSERT(records && buf);
	do {
		uint32_t n = s->record_count - sent < s->chunk_records ?
				     s->record_count - sent : s->chunk_records;
		bool last = sent + n == s->record_count;
		int len;

		for (uint32_t i = 0; i < n; i++)
			sample_summary_record(&records[i], sent + i);
		len = cluster_summary_encode(buf, CLUSTER_FRAME_PAYLOAD_BYTES_MAX, chunk++,
					     last, records, n);
		SEL_ASSERT(len > 0);
		s->result = cluster_frame_write(s->fd, &seq, CLUSTER_MSG_SUMMARY, buf,
						(uint32_t)len);
		if (s->result == 0 && !last) {
			len = cluster_heartbeat_encode(&beat, beat_buf, sizeof(beat_buf));
			s->result = cluster_frame_write(s->fd, &seq, CLUSTER_MSG_HEARTBEAT,
							beat_buf, (uint32_t)len);
		}
		sent += n;
	} while (s->result == 0 && sent < s->record_count);
	if (s->result == 0)
		s->result = cluster_frame_write(s->fd, &seq, CLUSTER_MSG_BYE, NULL, 0);
	free(records);
	free(buf);
	return NULL;
}

/* Receives what summary_sender_main sends and checks every record. */
static void receive_summary(int fd, uint32_t record_count, uint32_t chunks_expected)
{
	uint8_t *buf = malloc(CLUSTER_FRAME_PAYLOAD_BYTES_MAX);
	struct cluster_chunks chunks = { 0 };
	struct cluster_frame_header h;
	struct cluster_summary_view view;
	struct cluster_summary_record got, want;
	char why[WHY_BYTES];
	uint64_t seq = 0;
	uint32_t seen = 0;

	assert_non_null(buf);
	while (!chunks.done) {
		assert_int_equal(cluster_frame_read(fd, buf, CLUSTER_FRAME_PAYLOAD_BYTES_MAX,
						    &seq, &h, why, sizeof(why)), 1);
		if (h.type == CLUSTER_MSG_HEARTBEAT)
			continue;
		assert_int_equal(h.type, CLUSTER_MSG_SUMMARY);
		assert_int_equal(cluster_summary_decode(buf, h.payload_length, &view, why,
							sizeof(why)), 0);
		assert_int_equal(cluster_chunks_accept(&chunks, view.chunk_index, view.last,
						       view.record_count,
						       CLUSTER_SUMMARY_RECORDS_MAX, why,
						       sizeof(why)), 0);
		for (uint32_t i = 0; i < view.record_count; i++, seen++) {
			cluster_summary_view_record(&view, i, &got);
			sample_summary_record(&want, seen);
			assert_summary_record_equal(&got, &want);
		}
	}
	assert_int_equal(seen, record_count);
	assert_int_equal(chunks.next_index, chunks_expected);
	assert_int_equal(chunks.total, record_count);
	assert_int_equal(cluster_frame_read(fd, buf, CLUSTER_FRAME_PAYLOAD_BYTES_MAX, &seq,
					    &h, why, sizeof(why)), 1);
	assert_int_equal(h.type, CLUSTER_MSG_BYE);
	assert_int_equal(cluster_bye_decode(buf, h.payload_length, why, sizeof(why)), 0);
	free(buf);
}

/* R-WIRE-17, R-WIRE-18: 5000 records in 7 chunks, heartbeats between. */
static void test_protocol_round_trip_summary_chunked(void **state)
{
	struct summary_sender s = { .record_count = 5000, .chunk_records = 777 };
	pthread_t thread;
	int sv[2];

	(void)state;
	pair(sv);
	s.fd = sv[0];
	assert_int_equal(pthread_create(&thread, NULL, summary_sender_main, &s), 0);
	receive_summary(sv[1], 5000, 7);
	pthread_join(thread, NULL);
	assert_int_equal(s.result, 0);
	/* An empty directory is one empty, last chunk. */
	s = (struct summary_sender){ .fd = sv[0], .record_count = 0, .chunk_records = 10 };
	assert_int_equal(pthread_create(&thread, NULL, summary_sender_main, &s), 0);
	receive_summary(sv[1], 0, 1);
	pthread_join(thread, NULL);
	assert_int_equal(s.result, 0);
	close(sv[0]);
	close(sv[1]);
}

/* R-WIRE-17: a chunk of the per-frame maximum fits a frame; one more does not. */
static void test_protocol_summary_chunk_at_maximum(void **state)
{
	uint32_t n = CLUSTER_SUMMARY_CHUNK_RECORDS_MAX;
	struct cluster_summary_record *records = calloc(n + 1, sizeof(*records));
	uint8_t *buf = malloc(CLUSTER_FRAME_PAYLOAD_BYTES_MAX);
	uint8_t header[CLUSTER_FRAME_HEADER_BYTES];
	struct cluster_frame_header h;
	struct cluster_summary_view view;
	struct cluster_summary_record got;
	char why[WHY_BYTES];
	int len;

	(void)state;
	assert_non_null(records);
	assert_non_null(buf);
	for (uint32_t i = 0; i <= n; i++)
		sample_summary_record(&records[i], i);
	len = cluster_summary_encode(buf, CLUSTER_FRAME_PAYLOAD_BYTES_MAX, 3, false,
				     records, n);
	assert_int_equal(len, 9 + 89 * n);
	assert_true((uint32_t)len <= CLUSTER_FRAME_PAYLOAD_BYTES_MAX);
	cluster_frame_header_encode(header, CLUSTER_MSG_SUMMARY, 0, buf, (uint32_t)len);
	assert_int_equal(cluster_frame_header_decode(header, &h, why, sizeof(why)), 0);
	assert_int_equal(cluster_summary_decode(buf, (uint32_t)len, &view, why,
						sizeof(why)), 0);
	assert_int_equal(view.chunk_index, 3);
	assert_false(view.last);
	assert_int_equal(view.record_count, n);
	cluster_summary_view_record(&view, n - 1, &got);
	assert_summary_record_equal(&got, &records[n - 1]);
	assert_int_equal(cluster_summary_encode(buf, CLUSTER_FRAME_PAYLOAD_BYTES_MAX, 0,
						true, records, n + 1), SEL_ETOOBIG);
	free(records);
	free(buf);
}

/* R-WIRE-17, R-WIRE-19: 10000 agreement entries in 3 chunks. */
static void test_protocol_round_trip_agreement_chunked(void **state)
{
	uint32_t total = 10000, per_chunk = 4096, sent = 0, chunk = 0, seen = 0;
	struct cluster_agreement_entry *entries = calloc(per_chunk, sizeof(*entries));
	uint8_t *buf = malloc(per_chunk * CLUSTER_AGREEMENT_ENTRY_BYTES + 9);
	struct cluster_chunks chunks = { 0 };
	struct cluster_agreement_view view;
	struct cluster_agreement_entry got, want;
	char why[WHY_BYTES];

	(void)state;
	assert_non_null(entries);
	assert_non_null(buf);
	while (!chunks.done) {
		uint32_t n = total - sent < per_chunk ? total - sent : per_chunk;
		int len;

		for (uint32_t i = 0; i < n; i++)
			sample_agreement_entry(&entries[i], sent + i);
		len = cluster_agreement_encode(buf, per_chunk * CLUSTER_AGREEMENT_ENTRY_BYTES + 9,
					       chunk++, sent + n == total, entries, n);
		assert_int_equal(len, 9 + 25 * n);
		sent += n;
		assert_int_equal(cluster_agreement_decode(buf, (uint32_t)len, &view, why,
							  sizeof(why)), 0);
		assert_int_equal(cluster_chunks_accept(&chunks, view.chunk_index, view.last,
						       view.entry_count,
						       CLUSTER_AGREEMENT_ENTRIES_MAX, why,
						       sizeof(why)), 0);
		for (uint32_t i = 0; i < view.entry_count; i++, seen++) {
			cluster_agreement_view_entry(&view, i, &got);
			sample_agreement_entry(&want, seen);
			assert_true(rec_key_equal(&got.key, &want.key));
			assert_int_equal(got.action, want.action);
		}
	}
	assert_int_equal(seen, total);
	assert_int_equal(chunks.next_index, 3);
	/* Byte-exact: the last entry's action at offset 24 of its 25 bytes. */
	assert_int_equal(buf[9 + 25 * (view.entry_count - 1) + 24], (total - 1) % 3);
	free(entries);
	free(buf);
}

/* R-WIRE-21: store, fetch, truncate and unlink jobs round-trip byte-exact. */
static void test_protocol_round_trip_jobs(void **state)
{
	struct rec_geometry *g = calloc(1, sizeof(*g));
	struct rec_header *rh = calloc(1, sizeof(*rh));
	struct rec_identity ns;
	struct rec_key key = { .consumed = 256 };
	struct rec_digest bucket;
	uint8_t record_header[REC_HEADER_BYTES], payload[SMALL_BYTES];
	uint32_t page_ids[4] = { 40, 41, 7, 9 };
	struct cluster_job job = { 0 };
	struct cluster_job_view view;
	struct cluster_chain_record chain_out;
	char why[WHY_BYTES];
	int len;

	(void)state;
	assert_non_null(g);
	assert_non_null(rh);
	tu_geometry(g, 64, 2, 5000, 7000, 1, 4);
	tu_identities(NULL, &ns);
	tu_fill(key.digest.bytes, 16, 21);
	tu_fill(bucket.bytes, 16, 22);
	assert_int_equal(rec_header_init(rh, g, &ns, &key, NULL, &bucket, 0, 4, 99), 0);
	rec_header_encode(rh, record_header);

	job = (struct cluster_job){ .job_id = 17, .kind = CLUSTER_JOB_STORE,
				    .record_header = record_header, .state_slot = 5,
				    .page_ids = page_ids, .page_id_count = 4, .warm = true };
	len = cluster_job_encode(&job, payload, sizeof(payload));
	assert_int_equal(len, 4114 + 16);
	assert_int_equal(sel_get_le64(payload), 17);
	assert_int_equal(payload[8], CLUSTER_JOB_STORE);
	assert_memory_equal(payload + 9, record_header, REC_HEADER_BYTES);
	assert_int_equal(sel_get_le32(payload + 4105), 5);
	assert_int_equal(sel_get_le32(payload + 4109), 4);
	assert_int_equal(payload[4113], 1); /* warm */
	assert_int_equal(sel_get_le32(payload + 4114 + 8), 7);
	assert_int_equal(cluster_job_decode(payload, (uint32_t)len, &view, why,
					    sizeof(why)), 0);
	assert_int_equal(view.job_id, 17);
	assert_int_equal(view.kind, CLUSTER_JOB_STORE);
	assert_memory_equal(view.record_header, record_header, REC_HEADER_BYTES);
	assert_int_equal(view.state_slot, 5);
	assert_int_equal(view.page_id_count, 4);
	assert_true(view.warm);
	for (uint32_t i = 0; i < 4; i++)
		assert_int_equal(cluster_job_view_page_id(&view, i), page_ids[i]);
	/* R-WIRE-12: warm is an enumeration of 0 .. 3 (R-WIRE-21). */
	payload[4113] = 3;
	assert_int_equal(cluster_job_decode(payload, (uint32_t)len, &view, why,
					    sizeof(why)), 0);
	assert_int_equal(view.warm, 3);
	payload[4113] = 4;
	expect_proto(cluster_job_decode(payload, (uint32_t)len, &view, why, sizeof(why)), why,
		     "R-WIRE-12");
	payload[4113] = 1;
	/* The encoder refuses what the decoder would (R-WIRE-11). */
	job.warm = 4;
	assert_int_equal(cluster_job_encode(&job, payload, sizeof(payload)), -EINVAL);
	job.warm = 1;
	/* The receiver's own check of the opaque header passes (R-REC-*). */
	assert_int_equal(rec_header_decode(view.record_header, rh, why, sizeof(why)), 0);
	assert_int_equal(rh->tail_page_count, view.page_id_count);

	sample_fetch(&job);
	len = cluster_job_encode(&job, payload, sizeof(payload));
	assert_int_equal(len, 26 + 32 * 3 + 4 * 5);
	assert_int_equal(sel_get_le32(payload + 9), 3);
	assert_int_equal(sel_get_le64(payload + 13 + 32), 323);
	assert_int_equal(sel_get_le32(payload + 13 + 32 + 24), 2);
	assert_int_equal(sel_get_le32(payload + 13 + 96), 1);      /* skip */
	assert_int_equal(sel_get_le32(payload + 13 + 96 + 4), 7);  /* slot */
	assert_int_equal(sel_get_le32(payload + 13 + 96 + 8), 5);  /* count */
	assert_int_equal(cluster_job_decode(payload, (uint32_t)len, &view, why,
					    sizeof(why)), 0);
	assert_int_equal(view.kind, CLUSTER_JOB_FETCH);
	assert_int_equal(view.job_id, 0x1122334455667788ull);
	assert_int_equal(view.chain_count, 3);
	assert_int_equal(view.skip_pages, 1);
	assert_int_equal(view.state_slot, 7);
	assert_int_equal(view.page_id_count, 5);
	for (uint32_t i = 0; i < 3; i++) {
		cluster_job_view_chain_record(&view, i, &chain_out);
		assert_true(rec_key_equal(&chain_out.key, &sample_chain[i].key));
		assert_int_equal(chain_out.first_page_index, sample_chain[i].first_page_index);
		assert_int_equal(chain_out.tail_page_count, sample_chain[i].tail_page_count);
	}
	for (uint32_t i = 0; i < 5; i++)
		assert_int_equal(cluster_job_view_page_id(&view, i), sample_page_ids[i]);
	/* The read-through flag travels, and is 0 or 1 (R-WIRE-12). */
	assert_false(view.read_through);
	job.read_through = true;
	len = cluster_job_encode(&job, payload, sizeof(payload));
	assert_int_equal(payload[13 + 96 + 12], 1);
	assert_int_equal(cluster_job_decode(payload, (uint32_t)len, &view, why,
					    sizeof(why)), 0);
	assert_true(view.read_through);
	payload[13 + 96 + 12] = 2;
	expect_proto(cluster_job_decode(payload, (uint32_t)len, &view, why, sizeof(why)), why,
		     "R-WIRE-12");
	job.read_through = false;

	for (int kind = CLUSTER_JOB_TRUNCATE; kind <= CLUSTER_JOB_WARM_DROP; kind++) {
		if (kind == CLUSTER_JOB_NOOP)
			continue;
		job = (struct cluster_job){ .job_id = 99, .kind = (enum cluster_job_kind)kind,
					    .key = key };
		len = cluster_job_encode(&job, payload, sizeof(payload));
		assert_int_equal(len, 33);
		assert_int_equal(sel_get_le64(payload + 9), 256);
		assert_int_equal(cluster_job_decode(payload, (uint32_t)len, &view, why,
						    sizeof(why)), 0);
		assert_int_equal(view.kind, kind);
		assert_true(rec_key_equal(&view.key, &key));
		assert_int_equal(view.page_id_count, 0);
	}

	/* A noop is the 9-byte head alone; a byte more, or kind 6, is refused. */
	job = (struct cluster_job){ .job_id = 77, .kind = CLUSTER_JOB_NOOP };
	len = cluster_job_encode(&job, payload, sizeof(payload));
	assert_int_equal(len, 9);
	assert_int_equal(payload[8], 4);
	assert_int_equal(cluster_job_decode(payload, 9, &view, why, sizeof(why)), 0);
	assert_int_equal(view.kind, CLUSTER_JOB_NOOP);
	assert_int_equal(view.job_id, 77);
	expect_proto(cluster_job_decode(payload, 10, &view, why, sizeof(why)), why,
		     "JOB noop");
	payload[8] = CLUSTER_JOB_KIND_LAST + 1;
	expect_proto(cluster_job_decode(payload, 9, &view, why, sizeof(why)), why,
		     "JOB kind 10 unknown");
	free(g);
	free(rh);
}

/*
 * R-WIRE-21: the pool jobs (version 5). An attach carries a non-zero
 * instance id and a printable, non-empty address; a put its put id, key
 * and share length (at least a header); a claim its claim id and a chain
 * of 33-byte records whose row flag is 0 or 1, under a fetch's rules.
 */
static void test_protocol_job_pool_kinds(void **state)
{
	static const struct cluster_pool_chain_record chain[2] = {
		{ .key = { .consumed = 128 }, .first_page_index = 0, .tail_page_count = 2,
		  .row = false },
		{ .key = { .consumed = 256 }, .first_page_index = 2, .tail_page_count = 2,
		  .row = true },
	};
	static const uint32_t ids[3] = { 7, 8, 9 };
	struct cluster_job job = { .job_id = 41, .kind = CLUSTER_JOB_POOL_ATTACH,
				   .pool_address = "pool.example:7070" };
	struct cluster_pool_chain_record r;
	struct cluster_job_view view;
	uint8_t payload[1024];
	char why[WHY_BYTES], long_address[CLUSTER_JOB_POOL_ADDRESS_BYTES_MAX + 2];
	int len;

	(void)state;
	/* attach */
	assert_int_equal(cluster_job_encode(&job, payload, sizeof(payload)), -EINVAL);
	memset(job.instance_id, 0xab, sizeof(job.instance_id));
	len = cluster_job_encode(&job, payload, sizeof(payload));
	assert_int_equal(len, 9 + 16 + 2 + 17);
	assert_int_equal(payload[8], 6);
	assert_int_equal(payload[9], 0xab);
	assert_int_equal(payload[25], 17);
	assert_memory_equal(payload + 27, "pool.example:7070", 17);
	assert_int_equal(cluster_job_decode(payload, (uint32_t)len, &view, why, sizeof(why)), 0);
	assert_int_equal(view.kind, CLUSTER_JOB_POOL_ATTACH);
	assert_int_equal(view.job_id, 41);
	assert_memory_equal(view.instance_id, job.instance_id, 16);
	assert_string_equal(view.pool_address, "pool.example:7070");
	expect_proto(cluster_job_decode(payload, (uint32_t)len - 1, &view, why, sizeof(why)), why,
		     "R-WIRE-10");
	payload[30] = '\n';
	expect_proto(cluster_job_decode(payload, (uint32_t)len, &view, why, sizeof(why)), why,
		     "R-WIRE-13");
	memset(payload + 9, 0, 16);
	expect_proto(cluster_job_decode(payload, (uint32_t)len, &view, why, sizeof(why)), why,
		     "instance id is all zero");
	job.pool_address = "";
	assert_int_equal(cluster_job_encode(&job, payload, sizeof(payload)), -EINVAL);
	memset(long_address, 'a', sizeof(long_address) - 1);
	long_address[sizeof(long_address) - 1] = '\0';
	job.pool_address = long_address;
	assert_int_equal(cluster_job_encode(&job, payload, sizeof(payload)), SEL_ETOOBIG);

	/* put */
	job = (struct cluster_job){ .job_id = 42, .kind = CLUSTER_JOB_POOL_PUT, .pool_id = 1ull << 40,
				    .key = { .consumed = 256 }, .share_bytes = 4096 + 8192 };
	job.key.digest.bytes[0] = 0x11;
	len = cluster_job_encode(&job, payload, sizeof(payload));
	assert_int_equal(len, 49);
	assert_int_equal(payload[8], 7);
	assert_int_equal(sel_get_le64(payload + 9), 1ull << 40);
	assert_int_equal(sel_get_le64(payload + 17), 256);
	assert_int_equal(sel_get_le64(payload + 41), 4096 + 8192);
	assert_int_equal(cluster_job_decode(payload, (uint32_t)len, &view, why, sizeof(why)), 0);
	assert_int_equal(view.pool_id, 1ull << 40);
	assert_true(rec_key_equal(&view.key, &job.key));
	assert_int_equal(view.share_bytes, 4096 + 8192);
	expect_proto(cluster_job_decode(payload, 50, &view, why, sizeof(why)), why, "R-WIRE-10");
	sel_put_le64(payload + 41, 4095);
	expect_proto(cluster_job_decode(payload, 49, &view, why, sizeof(why)), why,
		     "less than a record header");
	sel_put_le64(payload + 17, 0);
	expect_proto(cluster_job_decode(payload, 49, &view, why, sizeof(why)), why, "R-WIRE-14");
	job.share_bytes = 100;
	assert_int_equal(cluster_job_encode(&job, payload, sizeof(payload)), -EINVAL);

	/* claim: 21 + 33 k + 12 + 4 m */
	job = (struct cluster_job){ .job_id = 43, .kind = CLUSTER_JOB_POOL_CLAIM, .pool_id = 9,
				    .pool_chain = chain, .chain_count = 2, .skip_pages = 1,
				    .state_slot = 3, .page_ids = ids, .page_id_count = 3 };
	len = cluster_job_encode(&job, payload, sizeof(payload));
	assert_int_equal(len, 21 + 33 * 2 + 12 + 4 * 3);
	assert_int_equal(payload[8], 8);
	assert_int_equal(sel_get_le64(payload + 9), 9);
	assert_int_equal(sel_get_le32(payload + 17), 2);
	assert_int_equal(payload[21 + 32], 0);
	assert_int_equal(payload[21 + 33 + 32], 1);
	assert_int_equal(cluster_job_decode(payload, (uint32_t)len, &view, why, sizeof(why)), 0);
	assert_int_equal(view.kind, CLUSTER_JOB_POOL_CLAIM);
	assert_int_equal(view.pool_id, 9);
	assert_int_equal(view.chain_count, 2);
	assert_int_equal(view.skip_pages, 1);
	assert_int_equal(view.state_slot, 3);
	for (uint32_t i = 0; i < 2; i++) {
		cluster_job_view_pool_chain_record(&view, i, &r);
		assert_true(rec_key_equal(&r.key, &chain[i].key));
		assert_int_equal(r.first_page_index, chain[i].first_page_index);
		assert_int_equal(r.tail_page_count, chain[i].tail_page_count);
		assert_int_equal(r.row, chain[i].row);
	}
	for (uint32_t i = 0; i < 3; i++)
		assert_int_equal(cluster_job_view_page_id(&view, i), ids[i]);
	payload[21 + 32] = 2;
	expect_proto(cluster_job_decode(payload, (uint32_t)len, &view, why, sizeof(why)), why,
		     "R-WIRE-12");
	payload[21 + 32] = 0;
	sel_put_le32(payload + 21 + 33 + 24, 3); /* record 1 no longer follows record 0 */
	expect_proto(cluster_job_decode(payload, (uint32_t)len, &view, why, sizeof(why)), why,
		     "does not follow");
	job.page_id_count = 2; /* 4 pages skipping 1 need 3 ids */
	assert_int_equal(cluster_job_encode(&job, payload, sizeof(payload)), -EINVAL);
	job.page_id_count = 3;
	job.chain_count = 0;
	assert_int_equal(cluster_job_encode(&job, payload, sizeof(payload)), -EINVAL);
	expect_proto(cluster_job_decode(payload, 21, &view, why, sizeof(why)), why, "R-WIRE-10");
}

/*
 * R-WIRE-21: the pool export (version 6) carries a put id, a store's record
 * header, a state slot and page ids, its length exact; too many ids are
 * refused on both sides.
 */
static void test_protocol_job_pool_export(void **state)
{
	static const uint32_t ids[3] = { 4, 5, 6 };
	uint8_t header[REC_HEADER_BYTES], *payload = malloc(CLUSTER_JOB_EXPORT_OFF_PAGE_IDS + 64);
	struct cluster_job job = { .job_id = 43, .kind = CLUSTER_JOB_POOL_EXPORT,
				   .pool_id = 1ull << 41, .record_header = header,
				   .state_slot = 2, .page_ids = ids, .page_id_count = 3 };
	struct cluster_job_view view;
	char why[WHY_BYTES];
	int len;

	(void)state;
	assert_non_null(payload);
	for (uint32_t i = 0; i < sizeof(header); i++)
		header[i] = (uint8_t)(i * 7);
	len = cluster_job_encode(&job, payload, CLUSTER_JOB_EXPORT_OFF_PAGE_IDS + 64);
	assert_int_equal(len, 9 + 8 + 4096 + 8 + 12);
	assert_int_equal(payload[8], 9);
	assert_int_equal(sel_get_le64(payload + 9), 1ull << 41);
	assert_memory_equal(payload + 17, header, sizeof(header));
	assert_int_equal(sel_get_le32(payload + 17 + 4096), 2);
	assert_int_equal(sel_get_le32(payload + 17 + 4096 + 4), 3);
	assert_int_equal(cluster_job_decode(payload, (uint32_t)len, &view, why, sizeof(why)), 0);
	assert_int_equal(view.kind, CLUSTER_JOB_POOL_EXPORT);
	assert_int_equal(view.job_id, 43);
	assert_int_equal(view.pool_id, 1ull << 41);
	assert_memory_equal(view.record_header, header, sizeof(header));
	assert_int_equal(view.state_slot, 2);
	assert_int_equal(view.page_id_count, 3);
	for (uint32_t i = 0; i < 3; i++)
		assert_int_equal(cluster_job_view_page_id(&view, i), ids[i]);
	expect_proto(cluster_job_decode(payload, (uint32_t)len - 1, &view, why, sizeof(why)), why,
		     "R-WIRE-10");
	expect_proto(cluster_job_decode(payload, 9 + 8 + 4096, &view, why, sizeof(why)), why,
		     "R-WIRE-10");
	sel_put_le32(payload + 17 + 4096 + 4, CLUSTER_JOB_PAGE_IDS_MAX + 1);
	expect_proto(cluster_job_decode(payload, (uint32_t)len, &view, why, sizeof(why)), why,
		     "R-WIRE-21");
	job.page_id_count = CLUSTER_JOB_PAGE_IDS_MAX + 1;
	assert_int_equal(cluster_job_encode(&job, payload, CLUSTER_JOB_EXPORT_OFF_PAGE_IDS + 64),
			 SEL_ETOOBIG);
	job.page_id_count = 3;
	job.record_header = NULL;
	assert_int_equal(cluster_job_encode(&job, payload, CLUSTER_JOB_EXPORT_OFF_PAGE_IDS + 64),
			 -EINVAL);
	free(payload);
}

/* R-WIRE-21: a pool claim of 4096 records and 2^20 page ids is the JOB maximum. */
static void test_protocol_job_claim_at_maxima(void **state)
{
	uint32_t k = CLUSTER_JOB_CHAIN_RECORDS_MAX, m = CLUSTER_JOB_PAGE_IDS_MAX;
	struct cluster_pool_chain_record *chain = calloc(k, sizeof(*chain));
	uint32_t *ids = calloc(m, sizeof(*ids));
	uint8_t *buf = malloc(CLUSTER_FRAME_PAYLOAD_BYTES_MAX);
	struct cluster_job job = { .job_id = 1, .kind = CLUSTER_JOB_POOL_CLAIM,
				   .pool_chain = chain, .chain_count = k, .page_ids = ids,
				   .page_id_count = m };
	struct cluster_job_view view;
	char why[WHY_BYTES];
	int len;

	(void)state;
	assert_non_null(chain);
	assert_non_null(ids);
	assert_non_null(buf);
	for (uint32_t i = 0; i < k; i++)
		chain[i] = (struct cluster_pool_chain_record){
			.key = { .consumed = 64ull * 256 * (i + 1) }, .first_page_index = 256 * i,
			.tail_page_count = 256, .row = i + 1 == k };
	len = cluster_job_encode(&job, buf, CLUSTER_FRAME_PAYLOAD_BYTES_MAX);
	assert_int_equal(len, 4329505);
	assert_int_equal(len, cluster_payload_bytes_max(CLUSTER_MSG_JOB));
	assert_int_equal(cluster_job_decode(buf, (uint32_t)len, &view, why, sizeof(why)), 0);
	job.chain_count = k + 1;
	assert_int_equal(cluster_job_encode(&job, buf, CLUSTER_FRAME_PAYLOAD_BYTES_MAX),
			 SEL_ETOOBIG);
	free(chain);
	free(ids);
	free(buf);
}

/* R-WIRE-21: a fetch of 4096 records and 2^20 page ids fits a JOB. */
static void test_protocol_job_at_maxima(void **state)
{
	uint32_t k = CLUSTER_JOB_CHAIN_RECORDS_MAX, m = CLUSTER_JOB_PAGE_IDS_MAX;
	struct cluster_chain_record *chain = calloc(k + 1, sizeof(*chain));
	uint32_t *ids = calloc(m + 1, sizeof(*ids));
	uint8_t *buf = malloc(CLUSTER_FRAME_PAYLOAD_BYTES_MAX);
	struct cluster_job job = { .job_id = 1, .kind = CLUSTER_JOB_FETCH };
	struct cluster_job_view view;
	char why[WHY_BYTES];
	int len;

	(void)state;
	assert_non_null(chain);
	assert_non_null(ids);
	assert_non_null(buf);
	for (uint32_t i = 0; i <= k; i++) {
		chain[i].key.consumed = 64ull * 256 * (i + 1);
		chain[i].first_page_index = 256 * i;
		chain[i].tail_page_count = 256;
	}
	for (uint32_t i = 0; i <= m; i++)
		ids[i] = i ^ 0x5a5a;
	job.chain = chain;
	job.chain_count = k;
	job.page_ids = ids;
	job.page_id_count = m;
	len = cluster_job_encode(&job, buf, CLUSTER_FRAME_PAYLOAD_BYTES_MAX);
	assert_int_equal(len, 4325402);
	assert_int_equal(cluster_job_decode(buf, (uint32_t)len, &view, why, sizeof(why)), 0);
	assert_int_equal(cluster_job_view_page_id(&view, m - 1), (m - 1) ^ 0x5a5a);
	/* One more of either is refused by the encoder. */
	job.chain_count = k + 1;
	job.skip_pages = 256;
	assert_int_equal(cluster_job_encode(&job, buf, CLUSTER_FRAME_PAYLOAD_BYTES_MAX),
			 SEL_ETOOBIG);
	job.chain_count = k;
	job.skip_pages = 0;
	job.page_id_count = m + 1;
	assert_int_equal(cluster_job_encode(&job, buf, CLUSTER_FRAME_PAYLOAD_BYTES_MAX),
			 SEL_ETOOBIG);
	/* A store of 2^20 page ids also fits; 2^20 + 1 does not. */
	job = (struct cluster_job){ .kind = CLUSTER_JOB_STORE, .record_header = buf + 8000000,
				    .page_ids = ids, .page_id_count = m };
	memset(buf + 8000000, 0, REC_HEADER_BYTES);
	len = cluster_job_encode(&job, buf, CLUSTER_FRAME_PAYLOAD_BYTES_MAX);
	assert_int_equal(len, 4114 + 4 * m);
	assert_int_equal(cluster_job_decode(buf, (uint32_t)len, &view, why, sizeof(why)), 0);
	job.page_id_count = m + 1;
	assert_int_equal(cluster_job_encode(&job, buf, CLUSTER_FRAME_PAYLOAD_BYTES_MAX),
			 SEL_ETOOBIG);
	free(chain);
	free(ids);
	free(buf);
}

/* R-WIRE-20, R-WIRE-22, R-WIRE-23: AGREED, JOB_DONE, HEARTBEAT and BYE. */
static void test_protocol_round_trip_small(void **state)
{
	uint8_t payload[SMALL_BYTES];
	struct cluster_agreed agreed = { .result = 0, .records_kept = 1234 }, agreed_out;
	struct cluster_job_done done = { .job_id = 77, .result = SEL_ECHECKSUM,
					 .bytes = 1ull << 33 }, done_out;
	struct cluster_heartbeat beat = { .monotonic_ns = 0xfedcba9876543210ull }, beat_out;
	char why[WHY_BYTES];
	int len;

	(void)state;
	len = cluster_agreed_encode(&agreed, payload, sizeof(payload));
	assert_int_equal(len, 12);
	assert_int_equal(cluster_agreed_decode(payload, 12, &agreed_out, why, sizeof(why)), 0);
	assert_int_equal(agreed_out.result, 0);
	assert_int_equal(agreed_out.records_kept, 1234);
	agreed = (struct cluster_agreed){ .result = -ENOSPC };
	len = cluster_agreed_encode(&agreed, payload, sizeof(payload));
	assert_int_equal(sel_get_le32(payload), (uint32_t)-ENOSPC);
	assert_int_equal(cluster_agreed_decode(payload, 12, &agreed_out, why, sizeof(why)), 0);
	assert_int_equal(agreed_out.result, -ENOSPC);

	memset(done.reason, 'x', CLUSTER_JOB_REASON_BYTES_MAX);
	done.reason[CLUSTER_JOB_REASON_BYTES_MAX] = '\0';
	len = cluster_job_done_encode(&done, payload, sizeof(payload));
	assert_int_equal(len, 22 + CLUSTER_JOB_REASON_BYTES_MAX);
	assert_int_equal((int32_t)sel_get_le32(payload + 8), SEL_ECHECKSUM);
	assert_int_equal(sel_get_le64(payload + 12), 1ull << 33);
	assert_int_equal(cluster_job_done_decode(payload, (uint32_t)len, &done_out, why,
						 sizeof(why)), 0);
	assert_int_equal(done_out.job_id, 77);
	assert_int_equal(done_out.result, SEL_ECHECKSUM);
	assert_int_equal(done_out.bytes, 1ull << 33);
	assert_string_equal(done_out.reason, done.reason);

	len = cluster_heartbeat_encode(&beat, payload, sizeof(payload));
	assert_int_equal(len, 8);
	assert_int_equal(cluster_heartbeat_decode(payload, 8, &beat_out, why, sizeof(why)), 0);
	assert_int_equal(beat_out.monotonic_ns, 0xfedcba9876543210ull);
	assert_int_equal(cluster_bye_decode(payload, 0, why, sizeof(why)), 0);
}

/* ---- Malformed payloads ---- */

/* R-WIRE-10: one trailing byte, or one missing, fails every message. */
static void test_protocol_rejects_trailing_bytes(void **state)
{
	uint8_t payload[SMALL_BYTES];
	char why[WHY_BYTES];

	(void)state;
	for (uint16_t type = CLUSTER_MSG_TYPE_FIRST; type <= CLUSTER_MSG_TYPE_LAST; type++) {
		int len = encode_sample(type, payload, sizeof(payload) - 1);

		assert_true(len >= 0);
		payload[len] = 0;
		assert_int_equal(decode_any(type, payload, (uint32_t)len, why), 0);
		expect_proto(decode_any(type, payload, (uint32_t)len + 1, why), why,
			     "R-WIRE-10");
		if (len > 0)
			expect_proto(decode_any(type, payload, (uint32_t)len - 1, why), why,
				     "R-WIRE-10");
	}
}

/* R-WIRE-17, R-WIRE-21, R-WIRE-13, R-WIRE-20: counts past their maxima. */
static void test_protocol_rejects_counts_over_max(void **state)
{
	uint8_t *p = calloc(1, SMALL_BYTES);
	struct cluster_summary_view summary;
	struct cluster_agreement_view agreement;
	struct cluster_job_view job;
	struct cluster_refuse refuse;
	struct cluster_job_done done;
	struct cluster_agreed agreed;
	struct cluster_chunks chunks = { 0 };
	char why[WHY_BYTES];

	(void)state;
	assert_non_null(p);
	/* Chunk counts are checked before they are multiplied. */
	sel_put_le32(p + 5, CLUSTER_SUMMARY_CHUNK_RECORDS_MAX + 1);
	expect_proto(cluster_summary_decode(p, 9, &summary, why, sizeof(why)), why,
		     "R-WIRE-17");
	sel_put_le32(p + 5, UINT32_MAX);
	expect_proto(cluster_summary_decode(p, 9, &summary, why, sizeof(why)), why,
		     "R-WIRE-17");
	sel_put_le32(p + 5, CLUSTER_AGREEMENT_CHUNK_ENTRIES_MAX + 1);
	expect_proto(cluster_agreement_decode(p, 9, &agreement, why, sizeof(why)), why,
		     "R-WIRE-17");
	/* Chunks that add up past the message's maximum. */
	assert_int_equal(cluster_chunks_accept(&chunks, 0, false,
					       CLUSTER_SUMMARY_CHUNK_RECORDS_MAX,
					       CLUSTER_SUMMARY_CHUNK_RECORDS_MAX + 5, why,
					       sizeof(why)), 0);
	expect_proto(cluster_chunks_accept(&chunks, 1, true, 6,
					   CLUSTER_SUMMARY_CHUNK_RECORDS_MAX + 5, why,
					   sizeof(why)), why, "R-WIRE-17");
	/* JOB store and fetch page ids, fetch chains. */
	memset(p, 0, SMALL_BYTES);
	p[8] = CLUSTER_JOB_STORE;
	sel_put_le32(p + 4109, CLUSTER_JOB_PAGE_IDS_MAX + 1);
	expect_proto(cluster_job_decode(p, 4114, &job, why, sizeof(why)), why, "R-WIRE-21");
	sel_put_le32(p + 4109, UINT32_MAX);
	expect_proto(cluster_job_decode(p, 4114, &job, why, sizeof(why)), why, "R-WIRE-21");
	memset(p, 0, SMALL_BYTES);
	p[8] = CLUSTER_JOB_FETCH;
	sel_put_le32(p + 9, 0);
	expect_proto(cluster_job_decode(p, 25, &job, why, sizeof(why)), why, "R-WIRE-21");
	sel_put_le32(p + 9, CLUSTER_JOB_CHAIN_RECORDS_MAX + 1);
	expect_proto(cluster_job_decode(p, 25, &job, why, sizeof(why)), why, "R-WIRE-21");
	sel_put_le32(p + 9, UINT32_MAX);
	expect_proto(cluster_job_decode(p, 25, &job, why, sizeof(why)), why, "R-WIRE-21");
	sel_put_le32(p + 9, 1);
	sel_put_le64(p + 13, 64);
	sel_put_le32(p + 13 + 32 + 8, CLUSTER_JOB_PAGE_IDS_MAX + 1);
	expect_proto(cluster_job_decode(p, 13 + 32 + 13, &job, why, sizeof(why)), why,
		     "R-WIRE-21");
	/* Texts one byte over their maximum. */
	memset(p, 'a', SMALL_BYTES);
	sel_put_le32(p, CLUSTER_REFUSE_AUTH);
	p[4] = (uint8_t)(CLUSTER_REFUSE_TEXT_BYTES_MAX + 1);
	p[5] = (uint8_t)((CLUSTER_REFUSE_TEXT_BYTES_MAX + 1) >> 8);
	expect_proto(cluster_refuse_decode(p, 6 + CLUSTER_REFUSE_TEXT_BYTES_MAX + 1, &refuse,
					   why, sizeof(why)), why, "R-WIRE-13");
	memset(p, 0, 22);
	p[20] = CLUSTER_JOB_REASON_BYTES_MAX + 1;
	expect_proto(cluster_job_done_decode(p, 22 + CLUSTER_JOB_REASON_BYTES_MAX + 1, &done,
					     why, sizeof(why)), why, "R-WIRE-13");
	/* AGREED cannot keep more records than a directory holds. */
	memset(p, 0, 12);
	sel_put_le64(p + 4, (uint64_t)CLUSTER_SUMMARY_RECORDS_MAX + 1);
	expect_proto(cluster_agreed_decode(p, 12, &agreed, why, sizeof(why)), why,
		     "R-WIRE-20");
	free(p);
}

/* R-WIRE-13: control bytes, DEL, NUL and non-ASCII in texts are refused. */
static void test_protocol_rejects_bad_text(void **state)
{
	static const uint8_t bad[] = { 0x00, 0x01, '\n', 0x1f, 0x7f, 0x80, 0xff };
	uint8_t payload[SMALL_BYTES];
	struct cluster_refuse refuse = { .reason = CLUSTER_REFUSE_RANK }, refuse_out;
	struct cluster_job_done done = { .job_id = 1, .result = -EIO }, done_out;
	char why[WHY_BYTES];
	int refuse_len, done_len;

	(void)state;
	snprintf(refuse.text, sizeof(refuse.text), "rank 3 already joined");
	snprintf(done.reason, sizeof(done.reason), "short write");
	for (size_t i = 0; i < SEL_ARRAY_SIZE(bad); i++) {
		refuse_len = cluster_refuse_encode(&refuse, payload, sizeof(payload));
		payload[6 + 4] = bad[i];
		expect_proto(cluster_refuse_decode(payload, (uint32_t)refuse_len, &refuse_out,
						   why, sizeof(why)), why, "R-WIRE-13");
		done_len = cluster_job_done_encode(&done, payload, sizeof(payload));
		payload[22 + 2] = bad[i];
		expect_proto(cluster_job_done_decode(payload, (uint32_t)done_len, &done_out,
						     why, sizeof(why)), why, "R-WIRE-13");
	}
	/* R-WIRE-11: the encoders refuse the same texts. */
	refuse.text[3] = '\t';
	assert_int_equal(cluster_refuse_encode(&refuse, payload, sizeof(payload)), -EINVAL);
	done.reason[0] = (char)0x80;
	assert_int_equal(cluster_job_done_encode(&done, payload, sizeof(payload)), -EINVAL);
	memset(done.reason, 'y', sizeof(done.reason));
	assert_int_equal(cluster_job_done_encode(&done, payload, sizeof(payload)), SEL_ETOOBIG);
	memset(refuse.text, 'y', sizeof(refuse.text));
	assert_int_equal(cluster_refuse_encode(&refuse, payload, sizeof(payload)), SEL_ETOOBIG);
}

/*
 * cluster_text_make_printable turns every byte outside 0x20 .. 0x7e into
 * '?' and leaves the rest: a reason holding a path in UTF-8 or a newline
 * encodes after it, where the encoders refused it (the peer's JOB_DONE was
 * never sent).
 */
static void test_protocol_text_made_printable(void **state)
{
	struct cluster_job_done done = { .job_id = 5, .result = -ENOENT }, done_out;
	struct cluster_refuse refuse = { .reason = CLUSTER_REFUSE_SHUTDOWN }, refuse_out;
	uint8_t payload[SMALL_BYTES];
	char text[64], why[WHY_BYTES];
	int len;

	(void)state;
	snprintf(text, sizeof(text), " plain ~text 0x20..0x7e ");
	assert_int_equal(cluster_text_make_printable(text), 0);
	assert_string_equal(text, " plain ~text 0x20..0x7e ");
	text[0] = '\0';
	assert_int_equal(cluster_text_make_printable(text), 0);
	snprintf(text, sizeof(text), "/data/caf\xc3\xa9:\n\x01\x1f\x7f\x80\xff\tend");
	assert_int_equal(cluster_text_make_printable(text), 9);
	assert_string_equal(text, "/data/caf??:???????end");
	/* the encoders refused the raw text; the made one round-trips */
	snprintf(done.reason, sizeof(done.reason), "open /data/caf\xc3\xa9: no such file");
	assert_int_equal(cluster_job_done_encode(&done, payload, sizeof(payload)), -EINVAL);
	cluster_text_make_printable(done.reason);
	len = cluster_job_done_encode(&done, payload, sizeof(payload));
	assert_true(len > 0);
	assert_int_equal(cluster_job_done_decode(payload, (uint32_t)len, &done_out, why,
						 sizeof(why)), 0);
	assert_string_equal(done_out.reason, "open /data/caf??: no such file");
	snprintf(refuse.text, sizeof(refuse.text), "rank zero stopped:\r\nforged line");
	cluster_text_make_printable(refuse.text);
	len = cluster_refuse_encode(&refuse, payload, sizeof(payload));
	assert_true(len > 0);
	assert_int_equal(cluster_refuse_decode(payload, (uint32_t)len, &refuse_out, why,
					       sizeof(why)), 0);
	assert_string_equal(refuse_out.text, "rank zero stopped:??forged line");
}

/* Encodes the sample of type, lets edit change a byte, expects rule. */
static void expect_edit_rejected(uint16_t type, size_t offset, uint8_t value,
				 const char *rule)
{
	uint8_t payload[SMALL_BYTES];
	char why[WHY_BYTES];
	int len = encode_sample(type, payload, sizeof(payload));

	assert_true(len > 0 && (size_t)len > offset);
	payload[offset] = value;
	expect_proto(decode_any(type, payload, (uint32_t)len, why), why, rule);
}

/*
 * R-WIRE-18: a held record (state 2) is its key alone: it round-trips, and
 * any other field set is refused by the decoder and the encoder.
 */
static void test_protocol_summary_held_record(void **state)
{
	uint8_t p[SMALL_BYTES];
	struct cluster_summary_record r, got;
	struct cluster_summary_view view;
	char why[WHY_BYTES];
	int len;

	(void)state;
	memset(&r, 0, sizeof(r));
	r.key.consumed = 200;
	tu_fill(r.key.digest.bytes, REC_DIGEST_BYTES, 7);
	r.held = true;
	len = cluster_summary_encode(p, sizeof(p), 0, true, &r, 1);
	assert_int_equal(len, 9 + 89);
	assert_int_equal(p[9 + 72], 2);
	assert_int_equal(cluster_summary_decode(p, (uint32_t)len, &view, why, sizeof(why)), 0);
	cluster_summary_view_record(&view, 0, &got);
	assert_true(got.held);
	assert_false(got.row_present);
	assert_true(rec_key_equal(&got.key, &r.key));
	for (size_t offset = 24; offset < 89; offset++) {
		if (offset == 72)
			continue; /* the state byte itself */
		len = cluster_summary_encode(p, sizeof(p), 0, true, &r, 1);
		p[9 + offset] = 1;
		expect_proto(cluster_summary_decode(p, (uint32_t)len, &view, why, sizeof(why)),
			     why, "R-WIRE-18");
	}
	r.tail_page_count = 1;
	assert_int_equal(cluster_summary_encode(p, sizeof(p), 0, true, &r, 1), -EINVAL);
	r.tail_page_count = 0;
	r.row_present = true;
	assert_int_equal(cluster_summary_encode(p, sizeof(p), 0, true, &r, 1), -EINVAL);
}

/* R-WIRE-12, R-WIRE-14, R-WIRE-15, R-WIRE-16: fields outside their values. */
static void test_protocol_rejects_bad_fields(void **state)
{
	uint8_t p[SMALL_BYTES];
	struct cluster_summary_record r;
	struct cluster_summary_view view;
	char why[WHY_BYTES];
	int len;

	(void)state;
	/* Flags and enumerations. */
	expect_edit_rejected(CLUSTER_MSG_HELLO, 40, 2, "R-WIRE-12");
	expect_edit_rejected(CLUSTER_MSG_SUMMARY, 4, 2, "R-WIRE-12");
	expect_edit_rejected(CLUSTER_MSG_SUMMARY, 9 + 72, 3, "R-WIRE-12");
	expect_edit_rejected(CLUSTER_MSG_SUMMARY, 9 + 72, 2, "R-WIRE-18"); /* held, a header */
	expect_edit_rejected(CLUSTER_MSG_AGREEMENT, 4, 0xff, "R-WIRE-12");
	expect_edit_rejected(CLUSTER_MSG_AGREEMENT, 9 + 24, 3, "R-WIRE-19");
	expect_edit_rejected(CLUSTER_MSG_JOB, 8, CLUSTER_JOB_KIND_LAST + 1, "R-WIRE-21");
	expect_edit_rejected(CLUSTER_MSG_REFUSE, 0, 0, "R-WIRE-13");
	expect_edit_rejected(CLUSTER_MSG_REFUSE, 0, CLUSTER_REFUSE_REASON_LAST + 1, "R-WIRE-13");
	/* HELLO: rank, world, disk limit, nonce. */
	expect_edit_rejected(CLUSTER_MSG_HELLO, 0, 0, "R-WIRE-15");  /* rank 0 */
	expect_edit_rejected(CLUSTER_MSG_HELLO, 0, 8, "R-WIRE-15");  /* rank = world */
	expect_edit_rejected(CLUSTER_MSG_HELLO, 4, 1, "R-WIRE-15");  /* world 1 */
	expect_edit_rejected(CLUSTER_MSG_HELLO, 6, 1, "R-WIRE-15");  /* world 65544 */
	expect_edit_rejected(CLUSTER_MSG_HELLO, 40, 0, "R-WIRE-15"); /* limit, no store */
	len = encode_sample(CLUSTER_MSG_HELLO, p, sizeof(p));
	memset(p + 49, 0, 32);
	expect_proto(decode_any(CLUSTER_MSG_HELLO, p, (uint32_t)len, why), why, "R-WIRE-16");
	len = encode_sample(CLUSTER_MSG_CHALLENGE, p, sizeof(p));
	memset(p, 0, 32);
	expect_proto(decode_any(CLUSTER_MSG_CHALLENGE, p, (uint32_t)len, why), why,
		     "R-WIRE-16");
	/* Result codes: positive, past errno, between errno and Selene's band. */
	static const int32_t results[] = { 1, 4096, -4096, -30000, SEL_ERROR_FIRST - 1,
					   INT32_MIN };
	for (size_t i = 0; i < SEL_ARRAY_SIZE(results); i++) {
		len = encode_sample(CLUSTER_MSG_AGREED, p, sizeof(p));
		sel_put_le32(p, (uint32_t)results[i]);
		sel_put_le64(p + 4, 0);
		expect_proto(decode_any(CLUSTER_MSG_AGREED, p, (uint32_t)len, why), why,
			     "R-WIRE-12");
		len = encode_sample(CLUSTER_MSG_JOB_DONE, p, sizeof(p));
		sel_put_le32(p + 8, (uint32_t)results[i]);
		expect_proto(decode_any(CLUSTER_MSG_JOB_DONE, p, (uint32_t)len, why), why,
			     "R-WIRE-12");
	}
	/* AGREED: records kept with a failure. */
	len = encode_sample(CLUSTER_MSG_AGREED, p, sizeof(p));
	sel_put_le32(p, (uint32_t)-EIO);
	expect_proto(decode_any(CLUSTER_MSG_AGREED, p, (uint32_t)len, why), why, "R-WIRE-20");
	/* Keys: consumed 0 or past 2^40 (summary, agreement, job). */
	expect_edit_rejected(CLUSTER_MSG_SUMMARY, 9 + 5, 0x01, "R-WIRE-14");
	len = encode_sample(CLUSTER_MSG_AGREEMENT, p, sizeof(p));
	sel_put_le64(p + 9, 0);
	expect_proto(decode_any(CLUSTER_MSG_AGREEMENT, p, (uint32_t)len, why), why,
		     "R-WIRE-14");
	len = encode_sample(CLUSTER_MSG_JOB, p, sizeof(p));
	sel_put_le64(p + 13, (1ull << 40) + 1);
	expect_proto(decode_any(CLUSTER_MSG_JOB, p, (uint32_t)len, why), why, "R-WIRE-14");
	/*
	 * Parents and pages: a root marker with a digest, a parent as long as
	 * its child, pages past the key. Edited bytes reach the decoder; the
	 * same edit to the struct is refused by the encoder.
	 */
	for (int edit = 0; edit < 3; edit++) {
		static const char *const rules[3] = { "R-WIRE-14", "R-WIRE-14", "R-WIRE-18" };

		sample_summary_record(&r, edit == 0 ? 0 : 1);
		len = cluster_summary_encode(p, sizeof(p), 0, true, &r, 1);
		assert_int_equal(len, 9 + 89);
		if (edit == 0) {
			r.parent.digest.bytes[15] = 1;
			p[9 + 24 + 8 + 15] = 1;
		} else if (edit == 1) {
			r.parent.consumed = r.key.consumed;
			sel_put_le64(p + 9 + 24, r.key.consumed);
		} else {
			r.first_page_index = (uint32_t)r.key.consumed;
			sel_put_le32(p + 9 + 64, r.first_page_index);
		}
		expect_proto(cluster_summary_decode(p, (uint32_t)len, &view, why, sizeof(why)),
			     why, rules[edit]);
		assert_int_equal(cluster_summary_encode(p, sizeof(p), 0, true, &r, 1), -EINVAL);
	}
}

/* R-WIRE-21: a fetch chain must be contiguous, growing, and match its ids. */
static void test_protocol_rejects_bad_fetch(void **state)
{
	struct cluster_chain_record chain[3];
	struct cluster_job job;
	uint8_t p[SMALL_BYTES];
	char why[WHY_BYTES];
	int len;

	(void)state;
	for (int edit = 0; edit < 5; edit++) {
		sample_fetch(&job);
		memcpy(chain, sample_chain, sizeof(chain));
		job.chain = chain;
		if (edit == 0)
			chain[1].first_page_index = 3;           /* a gap */
		if (edit == 1)
			chain[2].key.consumed = chain[1].key.consumed; /* not growing */
		if (edit == 2)
			job.skip_pages = 7;                      /* past P = 6 */
		if (edit == 3)
			job.page_id_count = 4;                   /* not P - skip */
		if (edit == 4)
			chain[0].tail_page_count = CLUSTER_JOB_PAGE_IDS_MAX + 1;
		assert_int_equal(cluster_job_encode(&job, p, sizeof(p)), -EINVAL);
		/* The same edits made to valid bytes reach the decoder. */
		sample_fetch(&job);
		len = cluster_job_encode(&job, p, sizeof(p));
		assert_true(len > 0);
		if (edit == 0)
			sel_put_le32(p + 13 + 32 + 24, 3);
		if (edit == 1)
			sel_put_le64(p + 13 + 64, 323);
		if (edit == 2)
			sel_put_le32(p + 13 + 96, 7);
		if (edit == 3)
			sel_put_le32(p + 13 + 96, 2);
		if (edit == 4)
			sel_put_le32(p + 13 + 28, CLUSTER_JOB_PAGE_IDS_MAX + 1);
		expect_proto(cluster_job_decode(p, (uint32_t)len, &(struct cluster_job_view){ 0 },
						why, sizeof(why)), why, "R-WIRE-21");
	}
}

/* R-WIRE-11: encoders return -ENOSPC for a buffer one byte short. */
static void test_protocol_encoders_enospc(void **state)
{
	uint8_t payload[SMALL_BYTES];

	(void)state;
	for (uint16_t type = CLUSTER_MSG_TYPE_FIRST; type < CLUSTER_MSG_BYE; type++) {
		int len = encode_sample(type, payload, sizeof(payload));

		assert_true(len > 0);
		assert_int_equal(encode_sample(type, payload, (size_t)len - 1), -ENOSPC);
		assert_int_equal(encode_sample(type, payload, 0), -ENOSPC);
	}
}

/* R-WIRE-11: encoders refuse what the decoders would reject. */
static void test_protocol_encoders_enforce_rules(void **state)
{
	uint8_t p[SMALL_BYTES];
	struct cluster_hello hello;
	struct cluster_challenge challenge = { { 0 } };
	struct cluster_agreement_entry entry;
	struct cluster_agreed agreed = { .result = -EIO, .records_kept = 1 };
	struct cluster_job job = { .kind = CLUSTER_JOB_FETCH };
	struct cluster_job_done done = { .result = 2 };
	struct cluster_refuse refuse = { .reason = 0 };

	(void)state;
	sample_hello(&hello);
	hello.rank = 0;
	assert_int_equal(cluster_hello_encode(&hello, p, sizeof(p)), -EINVAL);
	sample_hello(&hello);
	hello.has_disk_store = false;
	assert_int_equal(cluster_hello_encode(&hello, p, sizeof(p)), -EINVAL);
	assert_int_equal(cluster_challenge_encode(&challenge, p, sizeof(p)), -EINVAL);
	sample_agreement_entry(&entry, 1);
	entry.action = (enum cluster_action)3;
	assert_int_equal(cluster_agreement_encode(p, sizeof(p), 0, true, &entry, 1), -EINVAL);
	assert_int_equal(cluster_agreement_encode(p, sizeof(p), 0, true, &entry,
						  CLUSTER_AGREEMENT_CHUNK_ENTRIES_MAX + 1),
			 SEL_ETOOBIG);
	assert_int_equal(cluster_agreed_encode(&agreed, p, sizeof(p)), -EINVAL);
	assert_int_equal(cluster_job_encode(&job, p, sizeof(p)), -EINVAL); /* empty chain */
	job.kind = CLUSTER_JOB_UNLINK;
	assert_int_equal(cluster_job_encode(&job, p, sizeof(p)), -EINVAL); /* key 0 */
	job.kind = (enum cluster_job_kind)9;
	assert_int_equal(cluster_job_encode(&job, p, sizeof(p)), -EINVAL);
	assert_int_equal(cluster_job_done_encode(&done, p, sizeof(p)), -EINVAL);
	assert_int_equal(cluster_refuse_encode(&refuse, p, sizeof(p)), -EINVAL);
}

/* R-WIRE-17: chunks in order, none after the last, indices never wrap. */
static void test_protocol_chunks_order(void **state)
{
	struct cluster_chunks c = { 0 };
	char why[WHY_BYTES];

	(void)state;
	expect_proto(cluster_chunks_accept(&c, 1, false, 5, 100, why, sizeof(why)), why,
		     "R-WIRE-17");
	c = (struct cluster_chunks){ 0 };
	assert_int_equal(cluster_chunks_accept(&c, 0, false, 5, 100, why, sizeof(why)), 0);
	expect_proto(cluster_chunks_accept(&c, 0, false, 5, 100, why, sizeof(why)), why,
		     "R-WIRE-17");
	c = (struct cluster_chunks){ .next_index = 1, .total = 5 };
	assert_int_equal(cluster_chunks_accept(&c, 1, true, 95, 100, why, sizeof(why)), 0);
	assert_true(c.done);
	assert_int_equal(c.total, 100);
	expect_proto(cluster_chunks_accept(&c, 2, false, 0, 100, why, sizeof(why)), why,
		     "R-WIRE-17");
	c = (struct cluster_chunks){ .next_index = UINT32_MAX };
	expect_proto(cluster_chunks_accept(&c, UINT32_MAX, false, 0, 100, why, sizeof(why)),
		     why, "R-WIRE-17");
}

/* ---- Streams ---- */

struct piece_writer {
	int fd;
	const uint8_t *bytes;
	size_t len;
	size_t piece;
	int result;
};

static void *piece_writer_main(void *arg)
{
	struct piece_writer *w = arg;

	for (size_t off = 0; off < w->len;) {
		size_t n = w->len - off < w->piece ? w->len - off : w->piece;
		ssize_t done = write(w->fd, w->bytes + off, n);

		if (done < 0 && errno == EINTR)
			continue;
		if (done <= 0) {
			w->result = -errno;
			break;
		}
		off += (size_t)done;
	}
	close(w->fd);
	return NULL;
}

/* R-WIRE-1, R-WIRE-8, R-WIRE-9: every message type, written 1 byte at a time. */
static void test_protocol_stream_one_byte_writes(void **state)
{
	size_t stream_size = 64 * 1024, len = 0;
	uint8_t *stream = malloc(stream_size), payload[SMALL_BYTES], buf[SMALL_BYTES];
	struct piece_writer w = { .piece = 1 };
	struct cluster_frame_header h;
	char why[WHY_BYTES];
	uint64_t seq = 0;
	pthread_t thread;
	int sv[2];

	(void)state;
	assert_non_null(stream);
	for (int round = 0; round < 2; round++) {
		for (uint16_t type = CLUSTER_MSG_TYPE_FIRST; type <= CLUSTER_MSG_TYPE_LAST;
		     type++) {
			int n = encode_sample(type, payload, sizeof(payload));

			assert_true(n >= 0);
			len += make_frame(stream + len, type, seq++, payload, (uint32_t)n);
		}
	}
	pair(sv);
	w.fd = sv[0];
	w.bytes = stream;
	w.len = len;
	assert_int_equal(pthread_create(&thread, NULL, piece_writer_main, &w), 0);
	seq = 0;
	for (int round = 0; round < 2; round++) {
		for (uint16_t type = CLUSTER_MSG_TYPE_FIRST; type <= CLUSTER_MSG_TYPE_LAST;
		     type++) {
			assert_int_equal(cluster_frame_read(sv[1], buf, sizeof(buf), &seq, &h,
							    why, sizeof(why)), 1);
			assert_int_equal(h.type, type);
			assert_int_equal(decode_any(type, buf, h.payload_length, why), 0);
		}
	}
	assert_int_equal(cluster_frame_read(sv[1], buf, sizeof(buf), &seq, &h, why,
					    sizeof(why)), 0);
	assert_int_equal(seq, 2 * CLUSTER_MSG_TYPE_LAST);
	pthread_join(thread, NULL);
	assert_int_equal(w.result, 0);
	close(sv[1]);
	free(stream);
}

/* Counted by the handler on two threads at once: atomically. */
static uint32_t signals_seen;

static void on_signal(int sig)
{
	(void)sig;
	__atomic_fetch_add(&signals_seen, 1, __ATOMIC_RELAXED);
}

struct frame_reader {
	int fd;
	uint8_t *buf;
	struct cluster_frame_header header;
	char why[WHY_BYTES];
	int result;
};

static void *frame_reader_main(void *arg)
{
	struct frame_reader *r = arg;
	struct timespec pause = { 0, 1000000 };

	/*
	 * Reads only once a signal has landed somewhere: until then the
	 * writer is blocked on a full socket, so however the threads are
	 * scheduled (a loaded machine), signals meet a blocked write and
	 * then the reads. At most 10 s, then it reads anyway.
	 */
	for (int i = 0; i < 10000 && !__atomic_load_n(&signals_seen, __ATOMIC_RELAXED); i++)
		nanosleep(&pause, NULL);
	r->result = cluster_frame_read(r->fd, r->buf, CLUSTER_FRAME_PAYLOAD_BYTES_MAX, NULL,
				       &r->header, r->why, sizeof(r->why));
	return NULL;
}

struct signaler {
	pthread_t targets[2];
	int stop;
};

static void *signaler_main(void *arg)
{
	struct signaler *s = arg;
	struct timespec pause = { .tv_nsec = 50000 };

	while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
		pthread_kill(s->targets[0], SIGUSR1);
		pthread_kill(s->targets[1], SIGUSR1);
		nanosleep(&pause, NULL);
	}
	return NULL;
}

/* R-WIRE-9: reads and writes interrupted by signals (EINTR) carry on. */
static void test_protocol_survives_signals(void **state)
{
	uint32_t count = 10000;
	struct cluster_summary_record *records = calloc(count, sizeof(*records));
	uint8_t *payload = malloc(CLUSTER_FRAME_PAYLOAD_BYTES_MAX);
	struct frame_reader r = { 0 };
	struct signaler s = { 0 };
	struct sigaction sa = { .sa_handler = on_signal }, old;
	pthread_t reader, signaler;
	int small = 4096, sv[2], len;
	uint64_t seq = 0;

	(void)state;
	assert_non_null(records);
	assert_non_null(payload);
	for (uint32_t i = 0; i < count; i++)
		sample_summary_record(&records[i], i);
	len = cluster_summary_encode(payload, CLUSTER_FRAME_PAYLOAD_BYTES_MAX, 0, true,
				     records, count);
	assert_true(len > 0);
	r.buf = malloc(CLUSTER_FRAME_PAYLOAD_BYTES_MAX);
	assert_non_null(r.buf);
	/* No SA_RESTART: blocked read(2) and sendmsg(2) return EINTR. */
	sigemptyset(&sa.sa_mask);
	assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0);
	pair(sv);
	setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
	setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	r.fd = sv[1];
	__atomic_store_n(&signals_seen, 0, __ATOMIC_RELAXED);
	assert_int_equal(pthread_create(&reader, NULL, frame_reader_main, &r), 0);
	s.targets[0] = reader;
	s.targets[1] = pthread_self();
	assert_int_equal(pthread_create(&signaler, NULL, signaler_main, &s), 0);
	assert_int_equal(cluster_frame_write(sv[0], &seq, CLUSTER_MSG_SUMMARY, payload,
					     (uint32_t)len), 0);
	__atomic_store_n(&s.stop, 1, __ATOMIC_RELEASE);
	pthread_join(signaler, NULL);
	pthread_join(reader, NULL);
	assert_int_equal(sigaction(SIGUSR1, &old, NULL), 0);
	if (r.result != 1)
		fail_msg("read returned %d: %s", r.result, r.why);
	assert_int_equal(r.header.payload_length, len);
	assert_memory_equal(r.buf, payload, (size_t)len);
	assert_true(__atomic_load_n(&signals_seen, __ATOMIC_RELAXED) > 0);
	close(sv[0]);
	close(sv[1]);
	free(records);
	free(payload);
	free(r.buf);
}

/* R-WIRE-9: writing to a closed peer is -EPIPE, without SIGPIPE. */
static void test_protocol_write_to_closed_peer(void **state)
{
	uint8_t payload[CLUSTER_HEARTBEAT_BYTES] = { 0 };
	uint64_t seq = 0;
	int sv[2];

	(void)state;
	pair(sv);
	close(sv[1]);
	assert_int_equal(cluster_frame_write(sv[0], &seq, CLUSTER_MSG_HEARTBEAT, payload,
					     sizeof(payload)), -EPIPE);
	assert_int_equal(seq, 0);
	close(sv[0]);
}

/* R-WIRE-9: a TCP peer that resets the connection gives -ECONNRESET. */
static void test_protocol_reset_by_peer(void **state)
{
	struct sockaddr_in addr = { .sin_family = AF_INET,
				    .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t addr_len = sizeof(addr);
	struct linger reset = { .l_onoff = 1, .l_linger = 0 };
	struct cluster_frame_header h;
	uint8_t buf[64];
	char why[WHY_BYTES];
	int listener, client, server;

	(void)state;
	listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (listener < 0 || bind(listener, (struct sockaddr *)&addr, sizeof(addr)) != 0 ||
	    listen(listener, 1) != 0) {
		if (listener >= 0)
			close(listener);
		print_message("skipped: no TCP on 127.0.0.1 (%s)\n", strerror(errno));
		skip();
	}
	assert_int_equal(getsockname(listener, (struct sockaddr *)&addr, &addr_len), 0);
	client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(client >= 0);
	assert_int_equal(connect(client, (struct sockaddr *)&addr, addr_len), 0);
	server = accept(listener, NULL, NULL);
	assert_true(server >= 0);
	/* SO_LINGER with 0 s makes close() send RST instead of FIN. */
	assert_int_equal(setsockopt(client, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset)), 0);
	close(client);
	assert_int_equal(cluster_frame_read(server, buf, sizeof(buf), NULL, &h, why,
					    sizeof(why)), -ECONNRESET);
	close(server);
	close(listener);
}

/* ---- MACs ---- */

static void fill_range(uint8_t *out, size_t len, uint8_t first)
{
	for (size_t i = 0; i < len; i++)
		out[i] = (uint8_t)(first + i);
}

static void hex_decode_or_fail(uint8_t *out, const char *hex, size_t len)
{
	if (!sel_hex_decode(out, hex, len))
		fail_msg("bad hex %s", hex);
}

/* R-WIRE-16: both MACs equal the vector computed with Python's hashlib. */
static void test_protocol_mac_vector(void **state)
{
	uint8_t secret[32], server[32], client[32], mac[32], want[32];
	struct rec_digest fingerprint;

	(void)state;
	fill_range(secret, 32, 0x00);
	fill_range(server, 32, 0x40);
	fill_range(client, 32, 0x80);
	fill_range(fingerprint.bytes, 16, 0xc0);
	cluster_join_mac(secret, server, client, 3, &fingerprint, mac);
	hex_decode_or_fail(want, "c0f4ba751a799a330ff424a480c28d81"
				 "e49c83bbf651c3a8b2a5f5ad623344eb", 32);
	assert_memory_equal(mac, want, 32);
	cluster_welcome_mac(secret, client, server, 3, mac);
	hex_decode_or_fail(want, "8d675f422ffe75ebd99da67116cad61c"
				 "c437637d9f1443bf2bf51396407ba596", 32);
	assert_memory_equal(mac, want, 32);
}

/* R-WIRE-16: a wrong secret, rank, nonce or fingerprint changes the MAC. */
static void test_protocol_mac_binds_inputs(void **state)
{
	uint8_t secret[32], server[32], client[32], good[32], mac[32], other[32];
	struct rec_digest fingerprint;

	(void)state;
	tu_fill(secret, 32, 1);
	tu_fill(server, 32, 2);
	tu_fill(client, 32, 3);
	tu_fill(fingerprint.bytes, 16, 4);
	cluster_join_mac(secret, server, client, 5, &fingerprint, good);
	cluster_join_mac(secret, server, client, 5, &fingerprint, mac);
	assert_true(cluster_mac_equal(good, mac));
	memcpy(other, secret, 32);
	other[31] ^= 1;
	cluster_join_mac(other, server, client, 5, &fingerprint, mac);
	assert_false(cluster_mac_equal(good, mac));
	cluster_join_mac(secret, server, client, 6, &fingerprint, mac);
	assert_false(cluster_mac_equal(good, mac));
	memcpy(other, server, 32);
	other[0] ^= 0x80;
	cluster_join_mac(secret, other, client, 5, &fingerprint, mac);
	assert_false(cluster_mac_equal(good, mac));
	memcpy(other, client, 32);
	other[17] ^= 2;
	cluster_join_mac(secret, server, other, 5, &fingerprint, mac);
	assert_false(cluster_mac_equal(good, mac));
	/* Swapped nonces are a different MAC: each side's nonce has its place. */
	cluster_join_mac(secret, client, server, 5, &fingerprint, mac);
	assert_false(cluster_mac_equal(good, mac));
	fingerprint.bytes[9] ^= 4;
	cluster_join_mac(secret, server, client, 5, &fingerprint, mac);
	assert_false(cluster_mac_equal(good, mac));
	/* The welcome MAC differs from the proof, and binds the same inputs. */
	cluster_welcome_mac(secret, client, server, 5, good);
	cluster_welcome_mac(secret, client, server, 5, mac);
	assert_true(cluster_mac_equal(good, mac));
	cluster_welcome_mac(secret, client, server, 4, mac);
	assert_false(cluster_mac_equal(good, mac));
	memcpy(other, secret, 32);
	other[0] ^= 1;
	cluster_welcome_mac(other, client, server, 5, mac);
	assert_false(cluster_mac_equal(good, mac));
	cluster_welcome_mac(secret, server, client, 5, mac);
	assert_false(cluster_mac_equal(good, mac));
}

/* R-WIRE-16: nonces are fresh and never zero. */
static void test_protocol_nonces(void **state)
{
	uint8_t a[32], b[32], zero[32] = { 0 };

	(void)state;
	assert_int_equal(cluster_nonce_fill(a), 0);
	assert_int_equal(cluster_nonce_fill(b), 0);
	assert_memory_not_equal(a, b, 32);
	assert_memory_not_equal(a, zero, 32);
}

/* Signals target every 20 ms for at most 8 s; sends BYE on bye_fd at 100 ms. */
struct signal_storm {
	pthread_t target, thread;
	bool stop; /* atomic */
	int bye_fd; /* -1: none */
};

static void *signal_storm_main(void *arg)
{
	struct signal_storm *s = arg;
	uint64_t t0 = sel_monotonic_ns(), sequence = 0;

	while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE) &&
	       sel_monotonic_ns() - t0 < 8000000000ull) {
		pthread_kill(s->target, SIGUSR1);
		if (s->bye_fd >= 0 && sel_monotonic_ns() - t0 > 100000000ull) {
			cluster_frame_write(s->bye_fd, &sequence, CLUSTER_MSG_BYE, NULL, 0);
			s->bye_fd = -1;
		}
		usleep(20000);
	}
	return NULL;
}

static void signal_storm_start(struct signal_storm *s, int bye_fd)
{
	*s = (struct signal_storm){ .target = pthread_self(), .bye_fd = bye_fd };
	assert_int_equal(pthread_create(&s->thread, NULL, signal_storm_main, s), 0);
}

static void signal_storm_stop(struct signal_storm *s)
{
	__atomic_store_n(&s->stop, true, __ATOMIC_RELEASE);
	pthread_join(s->thread, NULL);
}

/*
 * A host taking signals (a handler without SA_RESTART, every 20 ms) while
 * a frame is read or written: an interrupted read or write goes on, and
 * the socket's 500 ms timeout still ends a wait for a peer that sends or
 * reads nothing. Before, each EINTR called again with the whole timeout
 * anew, and the wait lasted as long as the signals (8 s here).
 */
static void test_protocol_signals_keep_the_socket_timeout(void **state)
{
	struct sigaction action = { .sa_handler = on_signal }, saved;
	struct timeval tv = { .tv_usec = 500000 };
	struct cluster_frame_header h;
	struct signal_storm s;
	uint8_t buf[SMALL_BYTES], *big;
	size_t big_bytes = 256u << 10;
	uint64_t sequence = 0, t0, read_ms, write_ms;
	char why[WHY_BYTES];
	int sv[2], small = 4096, ret;

	(void)state;
	sigemptyset(&action.sa_mask);
	assert_int_equal(sigaction(SIGUSR1, &action, &saved), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)), 0);
	assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);

	/* a frame that comes while signals arrive is read whole (a timeout of
	 * 5 s: a slow machine may start the storm late) */
	tv.tv_sec = 5;
	tv.tv_usec = 0;
	assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	signal_storm_start(&s, sv[1]);
	ret = cluster_frame_read(sv[0], buf, sizeof(buf), &sequence, &h, why, sizeof(why));
	signal_storm_stop(&s);
	assert_int_equal(ret, 1);
	assert_int_equal(h.type, CLUSTER_MSG_BYE);
	tv.tv_sec = 0;
	tv.tv_usec = 500000;
	assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);

	/* nothing comes: the read ends at the socket's timeout */
	t0 = sel_monotonic_ns();
	signal_storm_start(&s, -1);
	ret = cluster_frame_read(sv[0], buf, sizeof(buf), &sequence, &h, why, sizeof(why));
	signal_storm_stop(&s);
	read_ms = (sel_monotonic_ns() - t0) / 1000000;
	assert_int_equal(ret, -ETIMEDOUT);

	/* nobody reads: the write ends at the socket's timeout */
	big = calloc(1, big_bytes);
	assert_non_null(big);
	t0 = sel_monotonic_ns();
	signal_storm_start(&s, -1);
	ret = cluster_frame_write(sv[0], &sequence, CLUSTER_MSG_SUMMARY, big, (uint32_t)big_bytes);
	signal_storm_stop(&s);
	write_ms = (sel_monotonic_ns() - t0) / 1000000;
	free(big);
	close(sv[0]);
	close(sv[1]);
	assert_int_equal(sigaction(SIGUSR1, &saved, NULL), 0);
	print_message("under signals, a 500 ms timeout ended a read after %llu ms, a write "
		      "after %llu ms\n", (unsigned long long)read_ms,
		      (unsigned long long)write_ms);
	assert_int_equal(ret, -ETIMEDOUT);
	assert_true(read_ms < 4000);
	assert_true(write_ms < 4000);
}

/* ---- Failpoints ---- */

/* cluster.send and cluster.recv make a frame fail, or break off half-way. */
static void test_protocol_failpoints(void **state)
{
	uint8_t payload[SMALL_BYTES], buf[SMALL_BYTES];
	struct cluster_frame_header h;
	char why[WHY_BYTES], config[64];
	uint64_t seq = 0;
	int sv[2], len;

	(void)state;
	sel_log_set_level(SEL_LOG_ERROR);
	assert_int_equal(sel_failpoint_lookup("cluster.send"), SEL_FP_CLUSTER_SEND);
	assert_int_equal(sel_failpoint_lookup("cluster.recv"), SEL_FP_CLUSTER_RECV);
	len = encode_sample(CLUSTER_MSG_HELLO, payload, sizeof(payload));
	pair(sv);
	/* An injected send error writes nothing and does not advance. */
	snprintf(config, sizeof(config), "cluster.send=1*return(%d)", ECONNRESET);
	assert_int_equal(sel_failpoints_configure(config), 0);
	assert_int_equal(cluster_frame_write(sv[0], &seq, CLUSTER_MSG_HELLO, payload,
					     (uint32_t)len), -ECONNRESET);
	assert_int_equal(seq, 0);
	assert_int_equal(recv(sv[1], buf, sizeof(buf), MSG_DONTWAIT), -1);
	assert_int_equal(errno, EAGAIN);
	assert_int_equal(sel_failpoint_fired(SEL_FP_CLUSTER_SEND), 1);
	/* Then the point is off: the next frame goes through. */
	assert_int_equal(cluster_frame_write(sv[0], &seq, CLUSTER_MSG_HELLO, payload,
					     (uint32_t)len), 0);
	/* An injected receive error reads nothing: the frame is still there. */
	assert_int_equal(sel_failpoints_configure("cluster.recv=1*return(EIO)"), 0);
	assert_int_equal(cluster_frame_read(sv[1], buf, sizeof(buf), NULL, &h, why,
					    sizeof(why)), -EIO);
	assert_non_null(strstr(why, "cluster.recv"));
	assert_int_equal(cluster_frame_read(sv[1], buf, sizeof(buf), NULL, &h, why,
					    sizeof(why)), 1);
	assert_int_equal(sel_failpoint_fired(SEL_FP_CLUSTER_RECV), 1);
	/* recv "short": as if the peer died inside the frame. */
	assert_int_equal(sel_failpoints_configure("cluster.recv=short"), 0);
	expect_proto(cluster_frame_read(sv[1], buf, sizeof(buf), NULL, &h, why, sizeof(why)),
		     why, "R-WIRE-9");
	/* send "short": half a frame, -EPIPE; the reader sees EOF inside it. */
	assert_int_equal(sel_failpoints_configure("cluster.send=short"), 0);
	assert_int_equal(cluster_frame_write(sv[0], &seq, CLUSTER_MSG_HELLO, payload,
					     (uint32_t)len), -EPIPE);
	assert_int_equal(sel_failpoints_configure(NULL), 0);
	close(sv[0]);
	expect_proto(cluster_frame_read(sv[1], buf, sizeof(buf), NULL, &h, why, sizeof(why)),
		     why, "R-WIRE-9");
	assert_non_null(strstr(why, "payload"));
	close(sv[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_protocol_header_layout),
		cmocka_unit_test(test_protocol_payload_bounds),
		cmocka_unit_test(test_protocol_rejects_bad_magic),
		cmocka_unit_test(test_protocol_rejects_wrong_version),
		cmocka_unit_test(test_protocol_job_pool_kinds),
		cmocka_unit_test(test_protocol_job_pool_export),
		cmocka_unit_test(test_protocol_job_claim_at_maxima),
		cmocka_unit_test(test_protocol_rejects_unknown_type),
		cmocka_unit_test(test_protocol_rejects_nonzero_reserved),
		cmocka_unit_test(test_protocol_rejects_header_checksum),
		cmocka_unit_test(test_protocol_rejects_payload_checksum),
		cmocka_unit_test(test_protocol_rejects_length_before_payload),
		cmocka_unit_test(test_protocol_buffer_too_small),
		cmocka_unit_test(test_protocol_truncated_frames),
		cmocka_unit_test(test_protocol_sequence),
		cmocka_unit_test(test_protocol_round_trip_join),
		cmocka_unit_test(test_protocol_round_trip_summary_chunked),
		cmocka_unit_test(test_protocol_summary_chunk_at_maximum),
		cmocka_unit_test(test_protocol_summary_held_record),
		cmocka_unit_test(test_protocol_round_trip_agreement_chunked),
		cmocka_unit_test(test_protocol_round_trip_jobs),
		cmocka_unit_test(test_protocol_job_at_maxima),
		cmocka_unit_test(test_protocol_round_trip_small),
		cmocka_unit_test(test_protocol_rejects_trailing_bytes),
		cmocka_unit_test(test_protocol_rejects_counts_over_max),
		cmocka_unit_test(test_protocol_rejects_bad_text),
		cmocka_unit_test(test_protocol_text_made_printable),
		cmocka_unit_test(test_protocol_signals_keep_the_socket_timeout),
		cmocka_unit_test(test_protocol_rejects_bad_fields),
		cmocka_unit_test(test_protocol_rejects_bad_fetch),
		cmocka_unit_test(test_protocol_encoders_enospc),
		cmocka_unit_test(test_protocol_encoders_enforce_rules),
		cmocka_unit_test(test_protocol_chunks_order),
		cmocka_unit_test(test_protocol_stream_one_byte_writes),
		cmocka_unit_test(test_protocol_survives_signals),
		cmocka_unit_test(test_protocol_write_to_closed_peer),
		cmocka_unit_test(test_protocol_reset_by_peer),
		cmocka_unit_test(test_protocol_mac_vector),
		cmocka_unit_test(test_protocol_mac_binds_inputs),
		cmocka_unit_test(test_protocol_nonces),
		cmocka_unit_test_teardown(test_protocol_failpoints, teardown),
	};

	return cmocka_run_group_tests_name("protocol", tests, NULL, NULL);
}
