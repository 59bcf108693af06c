/*
 * libFuzzer target for the cluster wire protocol (cluster/protocol.c): any
 * bytes, given to the frame header decoder, to every message decoder as a
 * payload, and to the blocking frame reader as a stream; then the same
 * payload inside a correctly signed frame of the type its first byte picks,
 * so the decoders behind the checksums are reached through the reader too.
 * Every payload a decoder accepts must encode back to the same bytes
 * (R-WIRE-11). Build and run with `make fuzz` (clang).
 */
#include "cluster/protocol.h"

#include "common/base.h"
#include "selene/selene.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Room for what a -max_len of up to 1 MiB can hold; past it, no re-encode. */
#define ENTRIES_CAPACITY (1u << 18)
#define READ_BUFFER_BYTES (1u << 20)
#define FRAMES_PER_INPUT_MAX 64

static struct cluster_summary_record summary_records[ENTRIES_CAPACITY];
static struct cluster_agreement_entry agreement_entries[ENTRIES_CAPACITY];
static struct cluster_chain_record chain_records[CLUSTER_JOB_CHAIN_RECORDS_MAX];
static struct cluster_pool_chain_record pool_chain_records[CLUSTER_JOB_CHAIN_RECORDS_MAX];
static uint32_t page_ids[ENTRIES_CAPACITY];
static uint8_t encoded[CLUSTER_FRAME_PAYLOAD_BYTES_MAX];
static uint8_t read_buffer[READ_BUFFER_BYTES];
static uint8_t frame[CLUSTER_FRAME_HEADER_BYTES + READ_BUFFER_BYTES];

/* A decoded payload must encode to exactly the bytes it came from. */
static void expect_same(int len, const uint8_t *payload, uint32_t length)
{
	if (len < 0 || (uint32_t)len != length || memcmp(encoded, payload, length) != 0)
		__builtin_trap();
}

static void reencode_summary(const struct cluster_summary_view *v, const uint8_t *p,
			     uint32_t length)
{
	if (v->record_count > ENTRIES_CAPACITY)
		return;
	for (uint32_t i = 0; i < v->record_count; i++)
		cluster_summary_view_record(v, i, &summary_records[i]);
	expect_same(cluster_summary_encode(encoded, sizeof(encoded), v->chunk_index, v->last,
					   summary_records, v->record_count), p, length);
}

static void reencode_agreement(const struct cluster_agreement_view *v, const uint8_t *p,
			       uint32_t length)
{
	if (v->entry_count > ENTRIES_CAPACITY)
		return;
	for (uint32_t i = 0; i < v->entry_count; i++)
		cluster_agreement_view_entry(v, i, &agreement_entries[i]);
	expect_same(cluster_agreement_encode(encoded, sizeof(encoded), v->chunk_index,
					     v->last, agreement_entries, v->entry_count),
		    p, length);
}

static void reencode_job(const struct cluster_job_view *v, const uint8_t *p,
			 uint32_t length)
{
	struct cluster_job job = {
		.job_id = v->job_id, .kind = v->kind, .record_header = v->record_header,
		.chain = chain_records, .chain_count = v->chain_count,
		.skip_pages = v->skip_pages, .state_slot = v->state_slot,
		.page_ids = page_ids, .page_id_count = v->page_id_count, .key = v->key,
		.warm = v->warm, .read_through = v->read_through,
		.pool_address = v->pool_address, .pool_id = v->pool_id,
		.share_bytes = v->share_bytes, .pool_chain = pool_chain_records,
	};

	memcpy(job.instance_id, v->instance_id, sizeof(job.instance_id));
	if (v->page_id_count > ENTRIES_CAPACITY)
		return;
	for (uint32_t i = 0; i < v->chain_count; i++) {
		if (v->kind == CLUSTER_JOB_POOL_CLAIM)
			cluster_job_view_pool_chain_record(v, i, &pool_chain_records[i]);
		else
			cluster_job_view_chain_record(v, i, &chain_records[i]);
	}
	for (uint32_t i = 0; i < v->page_id_count; i++)
		page_ids[i] = cluster_job_view_page_id(v, i);
	expect_same(cluster_job_encode(&job, encoded, sizeof(encoded)), p, length);
}

/* Runs type's decoder on the payload; re-encodes what it accepts. */
static void decode(uint16_t type, const uint8_t *p, uint32_t length)
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
	char why[256];

	switch (type) {
	case CLUSTER_MSG_HELLO:
		if (cluster_hello_decode(p, length, &u.hello, why, sizeof(why)) == 0)
			expect_same(cluster_hello_encode(&u.hello, encoded, sizeof(encoded)),
				    p, length);
		break;
	case CLUSTER_MSG_CHALLENGE:
		if (cluster_challenge_decode(p, length, &u.challenge, why, sizeof(why)) == 0)
			expect_same(cluster_challenge_encode(&u.challenge, encoded,
							     sizeof(encoded)), p, length);
		break;
	case CLUSTER_MSG_PROOF:
		if (cluster_proof_decode(p, length, &u.proof, why, sizeof(why)) == 0)
			expect_same(cluster_proof_encode(&u.proof, encoded, sizeof(encoded)),
				    p, length);
		break;
	case CLUSTER_MSG_WELCOME:
		if (cluster_welcome_decode(p, length, &u.welcome, why, sizeof(why)) == 0)
			expect_same(cluster_welcome_encode(&u.welcome, encoded,
							   sizeof(encoded)), p, length);
		break;
	case CLUSTER_MSG_REFUSE:
		if (cluster_refuse_decode(p, length, &u.refuse, why, sizeof(why)) == 0)
			expect_same(cluster_refuse_encode(&u.refuse, encoded, sizeof(encoded)),
				    p, length);
		break;
	case CLUSTER_MSG_SUMMARY:
		if (cluster_summary_decode(p, length, &u.summary, why, sizeof(why)) == 0)
			reencode_summary(&u.summary, p, length);
		break;
	case CLUSTER_MSG_AGREEMENT:
		if (cluster_agreement_decode(p, length, &u.agreement, why, sizeof(why)) == 0)
			reencode_agreement(&u.agreement, p, length);
		break;
	case CLUSTER_MSG_AGREED:
		if (cluster_agreed_decode(p, length, &u.agreed, why, sizeof(why)) == 0)
			expect_same(cluster_agreed_encode(&u.agreed, encoded, sizeof(encoded)),
				    p, length);
		break;
	case CLUSTER_MSG_JOB:
		if (cluster_job_decode(p, length, &u.job, why, sizeof(why)) == 0)
			reencode_job(&u.job, p, length);
		break;
	case CLUSTER_MSG_JOB_DONE:
		if (cluster_job_done_decode(p, length, &u.done, why, sizeof(why)) == 0)
			expect_same(cluster_job_done_encode(&u.done, encoded, sizeof(encoded)),
				    p, length);
		break;
	case CLUSTER_MSG_HEARTBEAT:
		if (cluster_heartbeat_decode(p, length, &u.beat, why, sizeof(why)) == 0)
			expect_same(cluster_heartbeat_encode(&u.beat, encoded, sizeof(encoded)),
				    p, length);
		break;
	case CLUSTER_MSG_BYE:
		cluster_bye_decode(p, length, why, sizeof(why));
		break;
	}
}

/* One memory file, reused: the reader's fd. */
static int stream_fd(void)
{
	static int fd = -1;

	if (fd < 0)
		fd = memfd_create("fuzz_frame", MFD_CLOEXEC);
	if (fd < 0)
		__builtin_trap();
	return fd;
}

/*
 * Reads frames from bytes through cluster_frame_read, decoding each one it
 * accepts; returns how many it read.
 */
static int read_stream(const uint8_t *bytes, size_t len)
{
	struct cluster_frame_header h;
	uint64_t sequence = 0;
	char why[256];
	int fd = stream_fd(), frames = 0, ret;

	if (ftruncate(fd, 0) != 0 || pwrite(fd, bytes, len, 0) != (ssize_t)len ||
	    lseek(fd, 0, SEEK_SET) != 0)
		__builtin_trap();
	while (frames < FRAMES_PER_INPUT_MAX) {
		ret = cluster_frame_read(fd, read_buffer, sizeof(read_buffer), &sequence, &h,
					 why, sizeof(why));
		if (ret != 1)
			break;
		decode(h.type, read_buffer, h.payload_length);
		frames++;
	}
	return frames;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t header[CLUSTER_FRAME_HEADER_BYTES] = { 0 };
	struct cluster_frame_header h;
	struct cluster_chunks chunks = { 0 };
	char why[256];
	uint32_t length;
	uint16_t type;

	if (size > READ_BUFFER_BYTES)
		return 0;
	memcpy(header, data, size < sizeof(header) ? size : sizeof(header));
	cluster_frame_header_decode(header, &h, why, sizeof(why));
	if (size >= 9)
		cluster_chunks_accept(&chunks, sel_get_le32(data), data[4] & 1,
				      sel_get_le32(data + 5), CLUSTER_SUMMARY_RECORDS_MAX,
				      why, sizeof(why));

	/* The raw bytes as a payload of every type, and as a stream. */
	for (type = CLUSTER_MSG_TYPE_FIRST; type <= CLUSTER_MSG_TYPE_LAST; type++)
		decode(type, data, (uint32_t)size);
	read_stream(data, size);

	/* The rest as the payload of a signed frame of the type byte 0 picks. */
	if (size == 0)
		return 0;
	type = (uint16_t)(CLUSTER_MSG_TYPE_FIRST + data[0] % CLUSTER_MSG_TYPE_LAST);
	length = (uint32_t)(size - 1);
	if (length < cluster_payload_bytes_min(type) || length > cluster_payload_bytes_max(type))
		return 0;
	cluster_frame_header_encode(frame, type, 0, data + 1, length);
	memcpy(frame + CLUSTER_FRAME_HEADER_BYTES, data + 1, length);
	/* A signed frame within its bounds is always read whole. */
	if (read_stream(frame, CLUSTER_FRAME_HEADER_BYTES + length) != 1)
		__builtin_trap();
	return 0;
}
