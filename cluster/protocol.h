/*
 * The wire protocol of cluster links (cluster/PROTOCOL.md, rules R-WIRE-*):
 * the 40-byte frame header, every message's payload layout with its encoder
 * and decoder, the join MACs, and blocking helpers that write and read one
 * whole frame on a file descriptor.
 *
 * This is bytes and validation only: no sockets are made here, no threads,
 * no link state beyond a caller's sequence counters, and nothing is
 * allocated. Decoders never copy arrays: a decoded SUMMARY, AGREEMENT or JOB
 * is a view whose arrays point into the payload buffer (valid while that
 * buffer is), read through the accessors below; every count and every entry
 * was validated by the decoder, so the accessors cannot fail.
 */
#ifndef SELENE_CLUSTER_PROTOCOL_H
#define SELENE_CLUSTER_PROTOCOL_H

#include "common/limits.h"
#include "record/key.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define CLUSTER_MAGIC "SELN"
#define CLUSTER_VERSION 6u

/* Frame header offsets (R-WIRE-1). */
enum cluster_header_offset {
	CLUSTER_OFF_MAGIC = 0,
	CLUSTER_OFF_VERSION = 4,
	CLUSTER_OFF_TYPE = 6,
	CLUSTER_OFF_PAYLOAD_LENGTH = 8,
	CLUSTER_OFF_RESERVED = 12,
	CLUSTER_OFF_SEQUENCE = 16,
	CLUSTER_OFF_PAYLOAD_CHECKSUM = 24,
	CLUSTER_OFF_HEADER_CHECKSUM = 32,
	CLUSTER_FRAME_HEADER_BYTES = 40,
};

_Static_assert(CLUSTER_OFF_VERSION == CLUSTER_OFF_MAGIC + 4, "header fields");
_Static_assert(CLUSTER_OFF_TYPE == CLUSTER_OFF_VERSION + 2, "header fields");
_Static_assert(CLUSTER_OFF_PAYLOAD_LENGTH == CLUSTER_OFF_TYPE + 2, "header fields");
_Static_assert(CLUSTER_OFF_RESERVED == CLUSTER_OFF_PAYLOAD_LENGTH + 4, "header fields");
_Static_assert(CLUSTER_OFF_SEQUENCE == CLUSTER_OFF_RESERVED + 4, "header fields");
_Static_assert(CLUSTER_OFF_PAYLOAD_CHECKSUM == CLUSTER_OFF_SEQUENCE + 8, "header fields");
_Static_assert(CLUSTER_OFF_HEADER_CHECKSUM == CLUSTER_OFF_PAYLOAD_CHECKSUM + 8,
	       "header fields");
_Static_assert(CLUSTER_FRAME_HEADER_BYTES == CLUSTER_OFF_HEADER_CHECKSUM + 8,
	       "header size");

/* Message types (R-WIRE-4); 0 is never sent. */
enum cluster_msg_type {
	CLUSTER_MSG_HELLO = 1,      /* peer -> rank zero */
	CLUSTER_MSG_CHALLENGE = 2,  /* rank zero -> peer */
	CLUSTER_MSG_PROOF = 3,      /* peer -> rank zero */
	CLUSTER_MSG_WELCOME = 4,    /* rank zero -> peer */
	CLUSTER_MSG_REFUSE = 5,     /* either way */
	CLUSTER_MSG_SUMMARY = 6,    /* peer -> rank zero, chunked */
	CLUSTER_MSG_AGREEMENT = 7,  /* rank zero -> peer, chunked */
	CLUSTER_MSG_AGREED = 8,     /* peer -> rank zero */
	CLUSTER_MSG_JOB = 9,        /* rank zero -> peer */
	CLUSTER_MSG_JOB_DONE = 10,  /* peer -> rank zero */
	CLUSTER_MSG_HEARTBEAT = 11, /* either way */
	CLUSTER_MSG_BYE = 12,       /* either way */
	CLUSTER_MSG_TYPE_FIRST = CLUSTER_MSG_HELLO,
	CLUSTER_MSG_TYPE_LAST = CLUSTER_MSG_BYE,
};

#define CLUSTER_NONCE_BYTES 32u
#define CLUSTER_MAC_BYTES 32u
#define CLUSTER_SECRET_BYTES 32u
/* A key on the wire: u64 consumed, 16-byte digest (R-WIRE-14). */
#define CLUSTER_KEY_BYTES 24u

/* Fixed payload sizes and offsets, one enum per message (PROTOCOL.md). */
enum cluster_hello_offset {
	CLUSTER_HELLO_OFF_RANK = 0,
	CLUSTER_HELLO_OFF_WORLD_SIZE = 4,
	CLUSTER_HELLO_OFF_FINGERPRINT = 8,
	CLUSTER_HELLO_OFF_LAYOUT_DIGEST = 24,
	CLUSTER_HELLO_OFF_HAS_DISK_STORE = 40,
	CLUSTER_HELLO_OFF_DISK_LIMIT = 41,
	CLUSTER_HELLO_OFF_CLIENT_NONCE = 49,
	CLUSTER_HELLO_OFF_MARKED = 81,
	CLUSTER_HELLO_OFF_WARM = 82,
	CLUSTER_HELLO_OFF_WARM_POLICY = 90,
	CLUSTER_HELLO_BYTES = 91,
};
_Static_assert(CLUSTER_HELLO_OFF_LAYOUT_DIGEST ==
		       CLUSTER_HELLO_OFF_FINGERPRINT + REC_DIGEST_BYTES, "hello");
_Static_assert(CLUSTER_HELLO_OFF_HAS_DISK_STORE ==
		       CLUSTER_HELLO_OFF_LAYOUT_DIGEST + REC_DIGEST_BYTES, "hello");
_Static_assert(CLUSTER_HELLO_OFF_MARKED ==
		       CLUSTER_HELLO_OFF_CLIENT_NONCE + CLUSTER_NONCE_BYTES, "hello");
_Static_assert(CLUSTER_HELLO_OFF_WARM == CLUSTER_HELLO_OFF_MARKED + 1, "hello");
_Static_assert(CLUSTER_HELLO_OFF_WARM_POLICY == CLUSTER_HELLO_OFF_WARM + 8, "hello");
_Static_assert(CLUSTER_HELLO_BYTES == CLUSTER_HELLO_OFF_WARM_POLICY + 1, "hello");

enum cluster_challenge_offset {
	CLUSTER_CHALLENGE_OFF_SERVER_NONCE = 0,
	CLUSTER_CHALLENGE_BYTES = 32,
};
_Static_assert(CLUSTER_CHALLENGE_BYTES == CLUSTER_NONCE_BYTES, "challenge");

enum cluster_proof_offset {
	CLUSTER_PROOF_OFF_MAC = 0,
	CLUSTER_PROOF_BYTES = 32,
};
_Static_assert(CLUSTER_PROOF_BYTES == CLUSTER_MAC_BYTES, "proof");

enum cluster_welcome_offset {
	CLUSTER_WELCOME_OFF_MAC = 0,
	CLUSTER_WELCOME_OFF_DISK_LIMIT = 32,
	CLUSTER_WELCOME_BYTES = 40,
};
_Static_assert(CLUSTER_WELCOME_OFF_DISK_LIMIT == CLUSTER_MAC_BYTES, "welcome");

enum cluster_refuse_offset {
	CLUSTER_REFUSE_OFF_REASON = 0,
	CLUSTER_REFUSE_OFF_TEXT_LENGTH = 4,
	CLUSTER_REFUSE_OFF_TEXT = 6,
	CLUSTER_REFUSE_BYTES_MIN = 6,
};

/* SUMMARY and AGREEMENT share a 9-byte chunk head (R-WIRE-17). */
enum cluster_chunk_offset {
	CLUSTER_CHUNK_OFF_INDEX = 0,
	CLUSTER_CHUNK_OFF_LAST = 4,
	CLUSTER_CHUNK_OFF_COUNT = 5,
	CLUSTER_CHUNK_HEAD_BYTES = 9,
};

/* One summary record, at its offset inside the record (R-WIRE-18). */
enum cluster_summary_record_offset {
	CLUSTER_SREC_OFF_KEY = 0,
	CLUSTER_SREC_OFF_PARENT = 24,
	CLUSTER_SREC_OFF_BUCKET = 48,
	CLUSTER_SREC_OFF_FIRST_PAGE = 64,
	CLUSTER_SREC_OFF_TAIL_PAGES = 68,
	CLUSTER_SREC_OFF_STATE = 72,
	CLUSTER_SREC_OFF_HEADER_DIGEST = 73,
	CLUSTER_SUMMARY_RECORD_BYTES = 89,
};
_Static_assert(CLUSTER_SREC_OFF_PARENT == CLUSTER_SREC_OFF_KEY + CLUSTER_KEY_BYTES,
	       "summary record");
_Static_assert(CLUSTER_SREC_OFF_BUCKET == CLUSTER_SREC_OFF_PARENT + CLUSTER_KEY_BYTES,
	       "summary record");
_Static_assert(CLUSTER_SREC_OFF_FIRST_PAGE == CLUSTER_SREC_OFF_BUCKET + REC_DIGEST_BYTES,
	       "summary record");
_Static_assert(CLUSTER_SUMMARY_RECORD_BYTES ==
		       CLUSTER_SREC_OFF_HEADER_DIGEST + REC_DIGEST_BYTES, "summary record");

/* One agreement entry: key, then u8 action (R-WIRE-19). */
enum cluster_agreement_entry_offset {
	CLUSTER_AENT_OFF_KEY = 0,
	CLUSTER_AENT_OFF_ACTION = 24,
	CLUSTER_AGREEMENT_ENTRY_BYTES = 25,
};

/* Records one SUMMARY frame, and entries one AGREEMENT frame, can carry. */
#define CLUSTER_SUMMARY_CHUNK_RECORDS_MAX                                 \
	((CLUSTER_FRAME_PAYLOAD_BYTES_MAX - CLUSTER_CHUNK_HEAD_BYTES) /   \
	 CLUSTER_SUMMARY_RECORD_BYTES)
#define CLUSTER_AGREEMENT_CHUNK_ENTRIES_MAX                               \
	((CLUSTER_FRAME_PAYLOAD_BYTES_MAX - CLUSTER_CHUNK_HEAD_BYTES) /   \
	 CLUSTER_AGREEMENT_ENTRY_BYTES)
_Static_assert(CLUSTER_SUMMARY_CHUNK_RECORDS_MAX == 188507u, "PROTOCOL.md says so");
_Static_assert(CLUSTER_AGREEMENT_CHUNK_ENTRIES_MAX == 671088u, "PROTOCOL.md says so");

enum cluster_agreed_offset {
	CLUSTER_AGREED_OFF_RESULT = 0,
	CLUSTER_AGREED_OFF_RECORDS_KEPT = 4,
	CLUSTER_AGREED_BYTES = 12,
};

/* JOB: a 9-byte head, then the kind's body (R-WIRE-21). */
enum cluster_job_offset {
	CLUSTER_JOB_OFF_JOB_ID = 0,
	CLUSTER_JOB_OFF_KIND = 8,
	CLUSTER_JOB_OFF_BODY = 9,
	/* store: record header, state slot, page id count, page ids */
	CLUSTER_JOB_STORE_OFF_HEADER = 9,
	CLUSTER_JOB_STORE_OFF_STATE_SLOT = 9 + 4096,
	CLUSTER_JOB_STORE_OFF_PAGE_ID_COUNT = 9 + 4096 + 4,
	CLUSTER_JOB_STORE_OFF_WARM = 9 + 4096 + 8,
	CLUSTER_JOB_STORE_OFF_PAGE_IDS = 9 + 4096 + 9,
	/* fetch: chain count, chain, then (relative to the chain's end) the tail */
	CLUSTER_JOB_FETCH_OFF_CHAIN_COUNT = 9,
	CLUSTER_JOB_FETCH_OFF_CHAIN = 13,
	CLUSTER_JOB_FETCH_TAIL_OFF_SKIP_PAGES = 0,
	CLUSTER_JOB_FETCH_TAIL_OFF_STATE_SLOT = 4,
	CLUSTER_JOB_FETCH_TAIL_OFF_PAGE_ID_COUNT = 8,
	CLUSTER_JOB_FETCH_TAIL_OFF_READ_THROUGH = 12,
	CLUSTER_JOB_FETCH_TAIL_OFF_PAGE_IDS = 13,
	/* truncate, unlink, warm drop: the key */
	CLUSTER_JOB_KEY_OFF_KEY = 9,
	CLUSTER_JOB_KEY_BYTES = 9 + 24,
	/* pool attach: instance id, then the manager's address as a text */
	CLUSTER_JOB_ATTACH_OFF_INSTANCE_ID = 9,
	CLUSTER_JOB_ATTACH_OFF_ADDRESS = 9 + 16,
	CLUSTER_JOB_ATTACH_BYTES_MIN = 9 + 16 + 2,
	/* pool put: put id, key, share bytes */
	CLUSTER_JOB_PUT_OFF_PUT_ID = 9,
	CLUSTER_JOB_PUT_OFF_KEY = 9 + 8,
	CLUSTER_JOB_PUT_OFF_SHARE_BYTES = 9 + 8 + 24,
	CLUSTER_JOB_PUT_BYTES = 9 + 8 + 24 + 8,
	/* pool claim: claim id, chain count, pool chain, then the fetch's tail */
	CLUSTER_JOB_CLAIM_OFF_CLAIM_ID = 9,
	CLUSTER_JOB_CLAIM_OFF_CHAIN_COUNT = 9 + 8,
	CLUSTER_JOB_CLAIM_OFF_CHAIN = 9 + 8 + 4,
	CLUSTER_JOB_CLAIM_TAIL_OFF_SKIP_PAGES = 0,
	CLUSTER_JOB_CLAIM_TAIL_OFF_STATE_SLOT = 4,
	CLUSTER_JOB_CLAIM_TAIL_OFF_PAGE_ID_COUNT = 8,
	CLUSTER_JOB_CLAIM_TAIL_OFF_PAGE_IDS = 12,
	/* pool export: put id, then a store's record header, state slot, page ids */
	CLUSTER_JOB_EXPORT_OFF_PUT_ID = 9,
	CLUSTER_JOB_EXPORT_OFF_HEADER = 9 + 8,
	CLUSTER_JOB_EXPORT_OFF_STATE_SLOT = 9 + 8 + 4096,
	CLUSTER_JOB_EXPORT_OFF_PAGE_ID_COUNT = 9 + 8 + 4096 + 4,
	CLUSTER_JOB_EXPORT_OFF_PAGE_IDS = 9 + 8 + 4096 + 8,
	/* one pool chain record: a chain record, then u8 row */
	CLUSTER_POOL_CHAIN_OFF_ROW = 32,
	CLUSTER_POOL_CHAIN_RECORD_BYTES = 33,
	/* one chain record: key, u32 first page index, u32 tail page count */
	CLUSTER_CHAIN_OFF_KEY = 0,
	CLUSTER_CHAIN_OFF_FIRST_PAGE = 24,
	CLUSTER_CHAIN_OFF_TAIL_PAGES = 28,
	CLUSTER_CHAIN_RECORD_BYTES = 32,
};
_Static_assert(CLUSTER_JOB_STORE_OFF_STATE_SLOT ==
		       CLUSTER_JOB_STORE_OFF_HEADER + REC_HEADER_BYTES, "job store");
_Static_assert(CLUSTER_JOB_KEY_BYTES == CLUSTER_JOB_KEY_OFF_KEY + CLUSTER_KEY_BYTES,
	       "job key");
_Static_assert(CLUSTER_CHAIN_OFF_FIRST_PAGE == CLUSTER_KEY_BYTES, "chain record");
_Static_assert(CLUSTER_POOL_CHAIN_OFF_ROW == CLUSTER_CHAIN_RECORD_BYTES, "pool chain record");
_Static_assert(CLUSTER_JOB_PUT_OFF_SHARE_BYTES == CLUSTER_JOB_PUT_OFF_KEY + CLUSTER_KEY_BYTES,
	       "job put");

enum cluster_job_done_offset {
	CLUSTER_JOB_DONE_OFF_JOB_ID = 0,
	CLUSTER_JOB_DONE_OFF_RESULT = 8,
	CLUSTER_JOB_DONE_OFF_BYTES = 12,
	CLUSTER_JOB_DONE_OFF_REASON_LENGTH = 20,
	CLUSTER_JOB_DONE_OFF_REASON = 22,
	CLUSTER_JOB_DONE_BYTES_MIN = 22,
};

enum cluster_heartbeat_offset {
	CLUSTER_HEARTBEAT_OFF_MONOTONIC_NS = 0,
	CLUSTER_HEARTBEAT_BYTES = 8,
};

/* A decoded frame header. */
struct cluster_frame_header {
	uint16_t version;
	uint16_t type;
	uint32_t payload_length;
	uint64_t sequence;
	uint64_t payload_checksum;
};

/*
 * A frame grammar: R-WIRE-1's header with a protocol's own magic, version
 * and type table. The cluster links have one (cluster_wire_grammar), the
 * pool connections another (pool/wire.h, R-POOL-2); one header parser
 * serves both.
 */
struct cluster_msg_info {
	const char *name;
	uint32_t bytes_min;
	uint32_t bytes_max;
};

struct cluster_grammar {
	char magic[4];
	uint16_t version;
	uint16_t type_last; /* types are 1 .. type_last */
	const struct cluster_msg_info *types; /* type_last + 1 entries; [0] unused */
};

extern const struct cluster_grammar cluster_wire_grammar;

/* A type's name in g ("HELLO"), or "unknown"; a static string. */
const char *cluster_grammar_msg_name(const struct cluster_grammar *g, uint32_t type);

/*
 * Header bytes 0 .. 23 of a frame of g (magic .. sequence), what the pool's
 * frame tags cover (R-POOL-12). The type must be known and the length within
 * its bounds (asserted).
 */
void cluster_frame_header_prefix(const struct cluster_grammar *g,
				 uint8_t out[CLUSTER_OFF_PAYLOAD_CHECKSUM], uint16_t type,
				 uint64_t sequence, uint32_t payload_length);

/* cluster_frame_header_encode, _decode and _payload_check in grammar g. */
void cluster_frame_header_encode_in(const struct cluster_grammar *g,
				    uint8_t out[CLUSTER_FRAME_HEADER_BYTES], uint16_t type,
				    uint64_t sequence, const uint8_t *payload,
				    uint32_t payload_length);
int cluster_frame_header_decode_in(const struct cluster_grammar *g,
				   const uint8_t in[CLUSTER_FRAME_HEADER_BYTES],
				   struct cluster_frame_header *out, char *why,
				   size_t why_size);
int cluster_frame_payload_check_in(const struct cluster_grammar *g,
				   const struct cluster_frame_header *header,
				   const uint8_t *payload, char *why, size_t why_size);

/* The name of a message type ("HELLO"), or "unknown"; a static string. */
const char *cluster_msg_name(uint32_t type);

/*
 * R-WIRE-6: the smallest and largest payload a type allows (equal for fixed
 * layouts). The type must be known (asserted).
 */
uint32_t cluster_payload_bytes_min(uint16_t type);
uint32_t cluster_payload_bytes_max(uint16_t type);

/*
 * Encodes the 40-byte header of a frame carrying payload (payload_length
 * bytes; NULL when 0) into out: magic, version, checksums. The type must be
 * known and the length within its bounds (asserted).
 */
void cluster_frame_header_encode(uint8_t out[CLUSTER_FRAME_HEADER_BYTES],
				 uint16_t type, uint64_t sequence,
				 const uint8_t *payload, uint32_t payload_length);

/*
 * Decodes and validates a frame header in the order of R-WIRE-2 .. R-WIRE-6:
 * magic, header checksum, version, type, reserved, payload length within
 * the type's bounds. Returns 0 or SEL_EPROTO with the reason (citing its
 * rule) in why.
 */
int cluster_frame_header_decode(const uint8_t in[CLUSTER_FRAME_HEADER_BYTES],
				struct cluster_frame_header *out, char *why,
				size_t why_size);

/* R-WIRE-7: checks payload against the header's checksum; 0 or SEL_EPROTO. */
int cluster_frame_payload_check(const struct cluster_frame_header *header,
				const uint8_t *payload, char *why, size_t why_size);

/*
 * Writes every byte of iov[0, count) (which it advances) to a blocking fd,
 * across short writes and EINTR; a signal does not restart the socket's
 * send timeout (SO_SNDTIMEO counts from the last byte written). sendmsg
 * with MSG_NOSIGNAL turns a closed socket into -EPIPE instead of SIGPIPE;
 * a pipe or file falls back to writev. Returns 0, -ETIMEDOUT when the send
 * timeout expired, or another negative errno.
 */
int cluster_write_all(int fd, struct iovec *iov, int count);

/*
 * Writes one frame (header and payload) to a blocking fd, across short
 * writes and EINTR (a signal does not restart SO_SNDTIMEO: it counts from
 * the last byte written), without raising SIGPIPE on a socket. Stamps it with
 * *next_sequence and, once the whole frame is written, increments it
 * (R-WIRE-8). payload is the output of the type's encoder; its length must
 * be within the type's bounds (asserted). Evaluates failpoint cluster.send
 * once per frame: an error is returned before any byte is written; "short"
 * writes half the frame and returns -EPIPE.
 * Returns 0, -ETIMEDOUT when SO_SNDTIMEO expired, or another negative errno
 * (-EPIPE, -ECONNRESET, ...): after any error the link is unusable
 * (R-WIRE-9).
 */
int cluster_frame_write(int fd, uint64_t *next_sequence, uint16_t type,
			const uint8_t *payload, uint32_t payload_length);

/*
 * Reads one frame from a blocking fd, across short reads and EINTR (a
 * signal does not restart SO_RCVTIMEO: it counts from the last byte read,
 * or the call): the header into *header, the payload into buf[0, header->payload_length).
 * Validates the header (cluster_frame_header_decode) before reading one
 * payload byte, then the payload checksum. When next_sequence is not NULL,
 * the frame's sequence must equal it (R-WIRE-8), and it is incremented.
 * buf (buf_size bytes, caller-owned) should hold CLUSTER_FRAME_PAYLOAD_BYTES_MAX
 * for a link that may receive any message. Evaluates failpoint cluster.recv
 * once per frame: an error is returned before anything is read; "short"
 * reads nothing and reports EOF mid-frame.
 * Returns 1 when a frame was read; 0 at end of file before its first byte
 * (the peer closed between frames); SEL_EPROTO for a malformed frame,
 * including end of file inside one; SEL_ETOOBIG when a valid header
 * announces a payload longer than buf_size (nothing of it read);
 * -ETIMEDOUT when SO_RCVTIMEO expired; another negative errno
 * (-ECONNRESET, ...) from read(2). why gets the reason of every failure.
 * After any failure the link is unusable (R-WIRE-9).
 */
int cluster_frame_read(int fd, uint8_t *buf, size_t buf_size,
		       uint64_t *next_sequence, struct cluster_frame_header *header,
		       char *why, size_t why_size);

/*
 * Messages. Every encoder writes the payload into buf and returns its
 * length, or -ENOSPC when buf_size is too small, SEL_ETOOBIG when a count or
 * text is over its maximum, -EINVAL when a field breaks another rule: an
 * encoder produces only what its decoder accepts (R-WIRE-11). Every decoder
 * takes a payload that cluster_frame_read returned and returns 0 or
 * SEL_EPROTO with the reason in why (R-WIRE-10 .. R-WIRE-23).
 */

/* HELLO (R-WIRE-15): a peer announces itself. */
struct cluster_hello {
	uint32_t rank;       /* 1 .. world_size - 1 */
	uint32_t world_size; /* 2 .. REC_WORLD_SIZE_MAX */
	struct rec_digest fingerprint;
	struct rec_digest layout_digest;
	bool has_disk_store;
	uint64_t disk_limit_bytes; /* 0 without a disk store */
	uint8_t client_nonce[CLUSTER_NONCE_BYTES];
	bool marked; /* its record directory holds a cluster marker */
	uint64_t warm_bytes; /* its warm tier (0: none; only with a disk store) */
	uint8_t warm_policy; /* enum sel_warm_policy; 0 without a warm tier */
};

int cluster_hello_encode(const struct cluster_hello *msg, uint8_t *buf,
			 size_t buf_size);
int cluster_hello_decode(const uint8_t *payload, uint32_t length,
			 struct cluster_hello *out, char *why, size_t why_size);

/* CHALLENGE (R-WIRE-16): rank zero's fresh nonce. */
struct cluster_challenge {
	uint8_t server_nonce[CLUSTER_NONCE_BYTES];
};

int cluster_challenge_encode(const struct cluster_challenge *msg, uint8_t *buf,
			     size_t buf_size);
int cluster_challenge_decode(const uint8_t *payload, uint32_t length,
			     struct cluster_challenge *out, char *why,
			     size_t why_size);

/* PROOF (R-WIRE-16): the peer's join MAC (cluster_join_mac). */
struct cluster_proof {
	uint8_t mac[CLUSTER_MAC_BYTES];
};

int cluster_proof_encode(const struct cluster_proof *msg, uint8_t *buf,
			 size_t buf_size);
int cluster_proof_decode(const uint8_t *payload, uint32_t length,
			 struct cluster_proof *out, char *why, size_t why_size);

/* WELCOME (R-WIRE-16): rank zero's MAC and the agreed disk limit. */
struct cluster_welcome {
	uint8_t mac[CLUSTER_MAC_BYTES];
	uint64_t disk_limit_bytes;
};

int cluster_welcome_encode(const struct cluster_welcome *msg, uint8_t *buf,
			   size_t buf_size);
int cluster_welcome_decode(const uint8_t *payload, uint32_t length,
			   struct cluster_welcome *out, char *why,
			   size_t why_size);

/* Why a join or a link was refused (R-WIRE-13). */
enum cluster_refuse_reason {
	CLUSTER_REFUSE_PROTOCOL = 1,    /* a message out of place */
	CLUSTER_REFUSE_AUTH = 2,        /* a MAC did not verify */
	CLUSTER_REFUSE_RANK = 3,        /* rank out of range or already joined */
	CLUSTER_REFUSE_ADDRESS = 4,     /* not an address the rank announced */
	CLUSTER_REFUSE_WORLD = 5,       /* world size differs */
	CLUSTER_REFUSE_LAYOUT = 6,      /* layout digest differs */
	CLUSTER_REFUSE_FINGERPRINT = 7, /* fingerprint not R-KEY-4's */
	CLUSTER_REFUSE_DISK_STORE = 8,  /* disk store on some ranks only */
	CLUSTER_REFUSE_SHUTDOWN = 9,    /* the sender is stopping */
	CLUSTER_REFUSE_WARM = 10,       /* warm tier size or policy differs */
	CLUSTER_REFUSE_REASON_FIRST = CLUSTER_REFUSE_PROTOCOL,
	CLUSTER_REFUSE_REASON_LAST = CLUSTER_REFUSE_WARM,
};

/*
 * Makes a NUL-terminated text printable ASCII in place (R-WIRE-13): every
 * byte outside 0x20 .. 0x7e becomes '?'. For a text a rank sends but did
 * not compose itself (a path, another layer's reason): the encoders refuse
 * anything else. Returns how many bytes it replaced.
 */
size_t cluster_text_make_printable(char *text);

/*
 * REFUSE (R-WIRE-13): text is NUL-terminated, printable ASCII; encode takes
 * its strlen, which must not exceed CLUSTER_REFUSE_TEXT_BYTES_MAX.
 */
struct cluster_refuse {
	uint32_t reason; /* enum cluster_refuse_reason */
	char text[CLUSTER_REFUSE_TEXT_BYTES_MAX + 1];
};

int cluster_refuse_encode(const struct cluster_refuse *msg, uint8_t *buf,
			  size_t buf_size);
int cluster_refuse_decode(const uint8_t *payload, uint32_t length,
			  struct cluster_refuse *out, char *why, size_t why_size);

/* A SUMMARY record's state byte (R-WIRE-18). */
enum cluster_summary_state {
	CLUSTER_SUMMARY_PAGE_ONLY = 0, /* summarised, its row dropped */
	CLUSTER_SUMMARY_WITH_ROW = 1,  /* summarised, with its row */
	CLUSTER_SUMMARY_HELD = 2,      /* held, not summarised: its key alone */
};

/* One record of a peer's scan, as SUMMARY carries it (R-WIRE-18). */
struct cluster_summary_record {
	struct rec_key key;
	struct rec_key parent; /* consumed 0 and zero digest: a root record */
	struct rec_digest bucket;
	uint32_t first_page_index;
	uint32_t tail_page_count;
	bool row_present;
	struct rec_digest header_digest; /* header agreement digest */
	/*
	 * The peer holds a file of this key that it did not summarise (its
	 * scan could not read it, or one it depends on: R-DIR-7): every other
	 * field is zero, and no rank may delete the key (R-WIRE-18).
	 */
	bool held;
};

/* A decoded SUMMARY chunk; records point into the payload. */
struct cluster_summary_view {
	uint32_t chunk_index;
	bool last;
	uint32_t record_count;
	const uint8_t *records; /* record_count * CLUSTER_SUMMARY_RECORD_BYTES */
};

/*
 * SUMMARY (R-WIRE-17, R-WIRE-18): one chunk of record_count records
 * (at most CLUSTER_SUMMARY_CHUNK_RECORDS_MAX; records may be NULL when 0).
 */
int cluster_summary_encode(uint8_t *buf, size_t buf_size, uint32_t chunk_index,
			   bool last, const struct cluster_summary_record *records,
			   uint32_t record_count);
int cluster_summary_decode(const uint8_t *payload, uint32_t length,
			   struct cluster_summary_view *out, char *why,
			   size_t why_size);

/* Record index (< record_count, asserted) of a decoded chunk. */
void cluster_summary_view_record(const struct cluster_summary_view *view,
				 uint32_t index, struct cluster_summary_record *out);

/* What a peer does with one of its records (R-WIRE-19). */
enum cluster_action {
	CLUSTER_ACTION_KEEP = 0,
	CLUSTER_ACTION_TRUNCATE_ROW = 1,
	CLUSTER_ACTION_DELETE = 2,
	CLUSTER_ACTION_LAST = CLUSTER_ACTION_DELETE,
};

struct cluster_agreement_entry {
	struct rec_key key;
	enum cluster_action action;
};

/* A decoded AGREEMENT chunk; entries point into the payload. */
struct cluster_agreement_view {
	uint32_t chunk_index;
	bool last;
	uint32_t entry_count;
	const uint8_t *entries; /* entry_count * CLUSTER_AGREEMENT_ENTRY_BYTES */
};

/* AGREEMENT (R-WIRE-17, R-WIRE-19): one chunk, as SUMMARY. */
int cluster_agreement_encode(uint8_t *buf, size_t buf_size, uint32_t chunk_index,
			     bool last, const struct cluster_agreement_entry *entries,
			     uint32_t entry_count);
int cluster_agreement_decode(const uint8_t *payload, uint32_t length,
			     struct cluster_agreement_view *out, char *why,
			     size_t why_size);
void cluster_agreement_view_entry(const struct cluster_agreement_view *view,
				  uint32_t index,
				  struct cluster_agreement_entry *out);

/*
 * A receiver's place in one chunked SUMMARY or AGREEMENT (R-WIRE-17):
 * chunks arrive with indices 0, 1, 2, ..., the last one flagged, and their
 * counts add up to at most a maximum. Initialise to zero.
 */
struct cluster_chunks {
	uint32_t next_index;
	uint64_t total;
	bool done;
};

/*
 * Accepts the chunk (chunk_index, last, count) against *chunks and
 * total_max (CLUSTER_SUMMARY_RECORDS_MAX or CLUSTER_AGREEMENT_ENTRIES_MAX).
 * Returns 0, or SEL_EPROTO with the reason: out of order, after the last,
 * or past total_max.
 */
int cluster_chunks_accept(struct cluster_chunks *chunks, uint32_t chunk_index,
			  bool last, uint32_t count, uint64_t total_max,
			  char *why, size_t why_size);

/*
 * AGREED (R-WIRE-20): a peer applied the agreement. result is 0 or a
 * negative code (R-WIRE-12); records_kept is 0 unless result is 0.
 */
struct cluster_agreed {
	int32_t result;
	uint64_t records_kept; /* <= CLUSTER_SUMMARY_RECORDS_MAX */
};

int cluster_agreed_encode(const struct cluster_agreed *msg, uint8_t *buf,
			  size_t buf_size);
int cluster_agreed_decode(const uint8_t *payload, uint32_t length,
			  struct cluster_agreed *out, char *why, size_t why_size);

enum cluster_job_kind {
	CLUSTER_JOB_STORE = 0,
	CLUSTER_JOB_FETCH = 1,
	CLUSTER_JOB_TRUNCATE = 2,
	CLUSTER_JOB_UNLINK = 3,
	CLUSTER_JOB_NOOP = 4, /* moves no bytes: the transport's own cost */
	CLUSTER_JOB_WARM_DROP = 5, /* drop a record's warm copy (version 4) */
	CLUSTER_JOB_POOL_ATTACH = 6, /* open this rank's pool connection (version 5) */
	CLUSTER_JOB_POOL_PUT = 7,    /* send this rank's share of a put (version 5) */
	CLUSTER_JOB_POOL_CLAIM = 8,  /* receive this rank's share of a claim (version 5) */
	CLUSTER_JOB_POOL_EXPORT = 9, /* send a GPU checkpoint's share of a put (version 6) */
	CLUSTER_JOB_KIND_LAST = CLUSTER_JOB_POOL_EXPORT,
};

/* A store's warm field is 0 .. this (enum shard_store_warm, R-WIRE-21). */
#define CLUSTER_JOB_STORE_WARM_LAST 3u

/* One record of a fetch chain (the shard engine's shard_chain_record). */
struct cluster_chain_record {
	struct rec_key key;
	uint32_t first_page_index;
	uint32_t tail_page_count;
};

/* One record of a pool claim's chain: a chain record and whether its share holds the row. */
struct cluster_pool_chain_record {
	struct rec_key key;
	uint32_t first_page_index;
	uint32_t tail_page_count;
	bool row;
};

/* A JOB to encode: native arrays, borrowed for the call. */
struct cluster_job {
	uint64_t job_id;
	enum cluster_job_kind kind;
	const uint8_t *record_header;              /* store, export: REC_HEADER_BYTES */
	const struct cluster_chain_record *chain;  /* fetch */
	uint32_t chain_count;                      /* fetch: 1 .. max */
	uint32_t skip_pages;                       /* fetch */
	uint32_t state_slot;                       /* store, fetch */
	const uint32_t *page_ids;                  /* store, fetch */
	uint32_t page_id_count;                    /* store, fetch */
	uint8_t warm; /* store: enum shard_store_warm, 0 .. 3 (R-WIRE-21) */
	bool read_through;                         /* fetch: into the warm tier */
	struct rec_key key;                        /* truncate, unlink, warm drop, put */
	uint8_t instance_id[16];                   /* pool attach: not all zero */
	const char *pool_address;                  /* pool attach: printable, 1 .. max */
	uint64_t pool_id;                          /* pool put, export: put id; claim: claim id */
	uint64_t share_bytes;                      /* pool put: the rank's image length */
	const struct cluster_pool_chain_record *pool_chain; /* pool claim */
};

/* A decoded JOB; arrays point into the payload. Unused fields are zero. */
struct cluster_job_view {
	uint64_t job_id;
	enum cluster_job_kind kind;
	const uint8_t *record_header; /* store: REC_HEADER_BYTES, not validated */
	uint32_t chain_count;
	const uint8_t *chain;         /* chain_count * CLUSTER_CHAIN_RECORD_BYTES */
	uint32_t skip_pages;
	uint32_t state_slot;
	uint32_t page_id_count;
	const uint8_t *page_ids;      /* page_id_count * 4 */
	uint8_t warm;
	bool read_through;
	struct rec_key key;
	uint8_t instance_id[16];
	char pool_address[CLUSTER_JOB_POOL_ADDRESS_BYTES_MAX + 1];
	uint64_t pool_id;
	uint64_t share_bytes;
	const uint8_t *pool_chain;    /* chain_count * CLUSTER_POOL_CHAIN_RECORD_BYTES */
};

/*
 * JOB (R-WIRE-21). The record header of a store travels as opaque bytes:
 * the receiver validates it with rec_header_decode (R-REC-*) before use.
 */
int cluster_job_encode(const struct cluster_job *msg, uint8_t *buf,
		       size_t buf_size);
int cluster_job_decode(const uint8_t *payload, uint32_t length,
		       struct cluster_job_view *out, char *why, size_t why_size);

/* Page id index (< page_id_count, asserted) of a decoded job. */
uint32_t cluster_job_view_page_id(const struct cluster_job_view *view,
				  uint32_t index);

/* Chain record index (< chain_count, asserted) of a decoded fetch. */
void cluster_job_view_chain_record(const struct cluster_job_view *view,
				   uint32_t index, struct cluster_chain_record *out);

/* Chain record index (< chain_count, asserted) of a decoded pool claim. */
void cluster_job_view_pool_chain_record(const struct cluster_job_view *view,
					uint32_t index, struct cluster_pool_chain_record *out);

/* JOB_DONE (R-WIRE-22): reason is NUL-terminated printable ASCII. */
struct cluster_job_done {
	uint64_t job_id;
	int32_t result; /* 0 or a negative code (R-WIRE-12) */
	uint64_t bytes;
	char reason[CLUSTER_JOB_REASON_BYTES_MAX + 1];
};

int cluster_job_done_encode(const struct cluster_job_done *msg, uint8_t *buf,
			    size_t buf_size);
int cluster_job_done_decode(const uint8_t *payload, uint32_t length,
			    struct cluster_job_done *out, char *why,
			    size_t why_size);

/* HEARTBEAT (R-WIRE-23): the sender's CLOCK_MONOTONIC, for logs only. */
struct cluster_heartbeat {
	uint64_t monotonic_ns;
};

int cluster_heartbeat_encode(const struct cluster_heartbeat *msg, uint8_t *buf,
			     size_t buf_size);
int cluster_heartbeat_decode(const uint8_t *payload, uint32_t length,
			     struct cluster_heartbeat *out, char *why,
			     size_t why_size);

/* BYE (R-WIRE-23): an empty payload; decode checks that it is empty. */
int cluster_bye_decode(const uint8_t *payload, uint32_t length, char *why,
		       size_t why_size);

/*
 * R-WIRE-16: the peer's join MAC, keyed BLAKE2b-256 (key: the 32-byte launch
 * secret) over "selene-join-v1" || server nonce || client nonce || u32 rank
 * || fingerprint.
 */
void cluster_join_mac(const uint8_t secret[CLUSTER_SECRET_BYTES],
		      const uint8_t server_nonce[CLUSTER_NONCE_BYTES],
		      const uint8_t client_nonce[CLUSTER_NONCE_BYTES], uint32_t rank,
		      const struct rec_digest *fingerprint,
		      uint8_t out[CLUSTER_MAC_BYTES]);

/*
 * R-WIRE-16: rank zero's welcome MAC, keyed BLAKE2b-256 over
 * "selene-welcome-v1" || client nonce || server nonce || u32 rank.
 */
void cluster_welcome_mac(const uint8_t secret[CLUSTER_SECRET_BYTES],
			 const uint8_t client_nonce[CLUSTER_NONCE_BYTES],
			 const uint8_t server_nonce[CLUSTER_NONCE_BYTES],
			 uint32_t rank, uint8_t out[CLUSTER_MAC_BYTES]);

/* Compares two MACs in time that does not depend on where they differ. */
bool cluster_mac_equal(const uint8_t a[CLUSTER_MAC_BYTES],
		       const uint8_t b[CLUSTER_MAC_BYTES]);

/* Fills a fresh nonce from getrandom(2); 0 or a negative errno. */
int cluster_nonce_fill(uint8_t out[CLUSTER_NONCE_BYTES]);

#endif
