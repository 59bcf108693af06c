/*
 * The pool wire protocol (pool/PROTOCOL.md, rules R-POOL-*): the frame
 * grammar (the cluster's header with magic SELP, R-POOL-2), the handshake
 * MACs, the connection key and frame tags (R-POOL-10 .. R-POOL-12), every
 * message's encoder and decoder, and a frame receiver that a poll loop (the
 * manager) or a blocking reader (the client) drives.
 *
 * Bytes and validation only: no sockets are made here, no threads, and
 * nothing is allocated. Encoders write a message's body (the payload
 * without its tag) into the caller's buffer and return its length, or
 * -ENOSPC, SEL_ETOOBIG, -EINVAL as R-WIRE-11; decoders take a body whose
 * frame, checksum and tag were verified, and return 0 or SEL_EPROTO with
 * the reason (citing its rule). Decoded arrays are views into the body,
 * read with the accessors; every entry was validated by the decoder.
 */
#ifndef SELENE_POOL_WIRE_H
#define SELENE_POOL_WIRE_H

#include "cluster/protocol.h"
#include "common/limits.h"
#include "pool/rdma.h"
#include "record/key.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define POOL_MAGIC "SELP"
#define POOL_VERSION 2u
#define POOL_NONCE_BYTES 32u
#define POOL_MAC_BYTES 32u
#define POOL_KEY_BYTES 32u  /* the connection key Kc */
#define POOL_TAG_BYTES 16u
#define POOL_SECRET_BYTES 32u
#define POOL_INSTANCE_ID_BYTES 16u
#define POOL_SCOPE_BYTES 32u
#define POOL_ARENA_ID_BYTES 16u
#define POOL_ARENA_HEADER_BYTES 4096u
#define POOL_ARENA_MAGIC "SELPOOLA"

/* Message types (R-POOL-3). */
enum pool_msg_type {
	POOL_MSG_HELLO = 1,
	POOL_MSG_CHALLENGE = 2,
	POOL_MSG_PROOF = 3,
	POOL_MSG_WELCOME = 4,
	POOL_MSG_REFUSE = 5,
	POOL_MSG_ATTACH = 6,
	POOL_MSG_ATTACHED = 7,
	POOL_MSG_LOOKUP = 8,
	POOL_MSG_ANSWER = 9,
	POOL_MSG_CLAIM = 10,
	POOL_MSG_CLAIMED = 11,
	POOL_MSG_CLAIM_PULL = 12,
	POOL_MSG_CLAIM_WINDOW = 13,
	POOL_MSG_CLAIM_PLACES = 14,
	POOL_MSG_CLAIM_END = 15,
	POOL_MSG_PUT_BEGIN = 16,
	POOL_MSG_PUT_READY = 17,
	POOL_MSG_PUT_WINDOW = 18,
	POOL_MSG_PUT_END = 19,
	POOL_MSG_HEARTBEAT = 20,
	POOL_MSG_BYE = 21,
	POOL_MSG_CLAIM_LOCAL = 22,
	/* 23 .. 39 are not types (R-POOL-3) */
	POOL_MSG_HOLDS = 40,
	POOL_MSG_EXPORT = 41,
	POOL_MSG_EXPORT_END = 42,
	/* 43 .. 59 are not types; RDMA claims (R-POOL-90 .. R-POOL-99) */
	POOL_MSG_RDMA_OFFER = 60,
	POOL_MSG_RDMA_LEND = 61,
	POOL_MSG_RDMA_WINDOW = 62,
	POOL_MSG_RDMA_FREE = 63,
	POOL_MSG_TYPE_LAST = POOL_MSG_RDMA_FREE,
};

/* The pool's frame grammar (R-POOL-2 .. R-POOL-4). */
extern const struct cluster_grammar pool_grammar;

/* Fixed sizes of bodies (payloads without their tag). */
enum pool_body_bytes {
	POOL_WELCOME_FIXED_BYTES = 84, /* plus name and arena path */
	POOL_WELCOME_OFF_NAME_LENGTH = 80,
	POOL_REFUSE_FIXED_BYTES = 6,
	POOL_ATTACH_FIXED_BYTES = 84, /* plus 16 per rank */
	POOL_ATTACH_RANK_BYTES = 16,
	POOL_ATTACHED_BYTES = 40,
	POOL_LOOKUP_FIXED_BYTES = 12, /* plus 24 per key */
	POOL_WIRE_KEY_BYTES = 24,
	POOL_ANSWER_FIXED_BYTES = 12, /* plus 57 per chain entry */
	POOL_CHAIN_ENTRY_BYTES = 33,  /* key, F, T, row: the part both chains carry */
	POOL_ANSWER_ENTRY_BYTES = 57, /* the chain entry, the session rank's place, stamp */
	POOL_CLAIM_BYTES = 32,
	POOL_CLAIMED_FIXED_BYTES = 20, /* plus 41 per chain entry */
	POOL_CLAIMED_ENTRY_BYTES = 41, /* the chain entry, stamp */
	POOL_CLAIM_PULL_BYTES = 13,
	POOL_CLAIM_WINDOW_HEAD_BYTES = 21, /* plus data */
	POOL_CLAIM_PLACES_FIXED_BYTES = 12, /* plus 16 per record */
	POOL_PLACE_BYTES = 16,
	POOL_CLAIM_END_BYTES = 12,
	POOL_PUT_BEGIN_FIXED_BYTES = 65, /* plus 8 per rank */
	POOL_PUT_READY_BYTES = 20,
	POOL_PUT_WINDOW_HEAD_BYTES = 16, /* plus data */
	POOL_PUT_END_BYTES = 13,
	POOL_HEARTBEAT_BYTES = 8,
	POOL_HOLDS_FIXED_BYTES = 5, /* plus 24 per key */
	POOL_EXPORT_BYTES = 36,
	POOL_EXPORT_END_BYTES = 12,
	POOL_RDMA_WINDOW_BYTES = 37, /* a CLAIM_WINDOW head, slot, length, xxh3 */
	POOL_RDMA_FREE_FIXED_BYTES = 4, /* plus 4 per slot */
};

/* The largest control body (not a window): an ANSWER of 4096 records. */
#define POOL_CONTROL_BODY_BYTES_MAX                                        \
	(POOL_ANSWER_FIXED_BYTES + POOL_ANSWER_ENTRY_BYTES * POOL_CHAIN_RECORDS_MAX)

/* Why a connection was refused (R-POOL-9). */
enum pool_refuse_reason {
	POOL_REFUSE_PROTOCOL = 1,
	POOL_REFUSE_AUTH = 2,
	POOL_REFUSE_SCOPE = 3,
	POOL_REFUSE_WORLD = 4,
	POOL_REFUSE_BUSY = 5,
	POOL_REFUSE_SHUTDOWN = 6,
	POOL_REFUSE_DEADLINE = 7,
	POOL_REFUSE_REASON_LAST = POOL_REFUSE_DEADLINE,
};

/* The name of a reason ("auth"), or "unknown". */
const char *pool_refuse_reason_name(uint32_t reason);

/* Directions, as the frame tags name them (R-POOL-12). */
enum pool_direction {
	POOL_TO_MANAGER = 0,
	POOL_TO_RANK = 1,
};

/* A window's part of a record image (R-POOL-33). */
enum pool_section {
	POOL_SECTION_HEADER = 0,
	POOL_SECTION_CHECKSUMS = 1,
	POOL_SECTION_PAGES = 2,
	POOL_SECTION_ROW = 3,
};

/* A share image's range in the manager's arena (R-POOL-34, R-POOL-22). */
struct pool_place {
	uint64_t offset;
	uint64_t bytes;
};

/*
 * One record of a chain, root first (R-POOL-21). ANSWER carries every field
 * (R-POOL-22: place and stamp), CLAIMED the stamp (R-POOL-36), and both
 * decoders leave what their frame does not carry 0.
 */
struct pool_chain_entry {
	struct rec_key key;
	uint32_t first_page_index;
	uint32_t tail_page_count;
	bool row;
	uint64_t stamp;          /* the record image's (R-POOL-53); 0: on the disk tier */
	struct pool_place place; /* ANSWER: the session rank's share image; 0 with stamp 0 */
};

/* ---- MACs, the connection key, tags (R-POOL-10 .. R-POOL-12) ---- */

/* The rank's PROOF MAC. */
void pool_proof_mac(const uint8_t secret[POOL_SECRET_BYTES],
		    const uint8_t server_nonce[POOL_NONCE_BYTES],
		    const uint8_t client_nonce[POOL_NONCE_BYTES], uint8_t out[POOL_MAC_BYTES]);

/* The manager's WELCOME MAC over the nonces and WELCOME's bytes 32 .. end. */
void pool_welcome_mac(const uint8_t secret[POOL_SECRET_BYTES],
		      const uint8_t client_nonce[POOL_NONCE_BYTES],
		      const uint8_t server_nonce[POOL_NONCE_BYTES], const uint8_t *facts,
		      size_t facts_length, uint8_t out[POOL_MAC_BYTES]);

/* The connection key Kc. */
void pool_connection_key(const uint8_t secret[POOL_SECRET_BYTES],
			 const uint8_t client_nonce[POOL_NONCE_BYTES],
			 const uint8_t server_nonce[POOL_NONCE_BYTES],
			 uint8_t out[POOL_KEY_BYTES]);

/* Whether type's frames carry a tag when sent after WELCOME. */
bool pool_type_tagged(uint16_t type);

/* The head of a window type (21, 16), or 0 for any other type. */
uint32_t pool_window_head_bytes(uint16_t type);

/*
 * The tag of a frame: prefix is header bytes 0 .. 23
 * (cluster_frame_header_prefix), covered the bytes R-POOL-12 names (the
 * whole body, or a window's head).
 */
void pool_frame_tag(const uint8_t key[POOL_KEY_BYTES], enum pool_direction direction,
		    const uint8_t prefix[CLUSTER_OFF_PAYLOAD_CHECKSUM], const uint8_t *covered,
		    size_t covered_length, uint8_t out[POOL_TAG_BYTES]);

/* Compares two tags in time that does not depend on where they differ. */
bool pool_tag_equal(const uint8_t a[POOL_TAG_BYTES], const uint8_t b[POOL_TAG_BYTES]);

/*
 * Builds a frame's header (and, with key, its tag): body is the message's
 * body (a window's head), data a window's data (NULL and 0 for other
 * frames). With key NULL the frame has no tag (handshake frames). The
 * frame on the wire is header, body, data, then the tag when keyed.
 * Asserts the length is within the type's bounds.
 */
void pool_frame_build(const uint8_t *key, enum pool_direction direction, uint64_t sequence,
		      uint16_t type, const uint8_t *body, uint32_t body_length,
		      const uint8_t *data, uint32_t data_length,
		      uint8_t header[CLUSTER_FRAME_HEADER_BYTES], uint8_t tag[POOL_TAG_BYTES]);

/* ---- The frame receiver ---- */

/* What pool_rx_feed reports. */
enum pool_rx_event {
	POOL_RX_MORE = 0,  /* give it more bytes */
	POOL_RX_HEAD = 1,  /* a window's head is in rx->body: set rx->data, feed on */
	POOL_RX_FRAME = 2, /* a whole frame is in and verified */
};

/*
 * One direction of a connection being read, a frame at a time: the header
 * (checked on its own, R-WIRE-2 .. R-WIRE-6, and its sequence, R-POOL-5),
 * the body into body (control frames, and a window's head), a window's data
 * straight to rx->data (set by the caller on POOL_RX_HEAD), then the tag.
 * The payload checksum (R-WIRE-7) and the tag (R-POOL-12) are checked when
 * the frame is whole. Initialise with pool_rx_init.
 *
 * Where fewer than POOL_RX_AHEAD_BYTES are wanted (a frame's header, a
 * control body, a tag, a window's last bytes), one read takes up to that
 * many into ahead, and the frame is taken from there: bytes of the frames
 * after it may wait in ahead. A caller therefore feeds until POOL_RX_MORE
 * (the socket has nothing more either) before it waits on the socket, or
 * feeds again when pool_rx_buffered says bytes wait; nothing else may read
 * the fd once a receiver reads it.
 */
struct pool_rx {
	uint8_t *body;         /* caller-owned, body_size bytes */
	uint32_t body_size;    /* at least POOL_CONTROL_BODY_BYTES_MAX */
	const uint8_t *key;    /* Kc once WELCOME passed; NULL before */
	enum pool_direction direction; /* of the frames read */
	uint64_t next_sequence;
	/* the frame being read */
	struct cluster_frame_header header;
	uint32_t body_length;  /* the body's (window: head's) length */
	uint32_t data_length;  /* a window's data; 0 otherwise */
	uint8_t *data;         /* where a window's data goes (caller sets) */
	/* progress, private */
	uint8_t raw[CLUSTER_FRAME_HEADER_BYTES];
	uint8_t tag[POOL_TAG_BYTES];
	uint64_t done;         /* bytes of this frame consumed */
	uint64_t frames;       /* frames read */
	bool head_given;       /* POOL_RX_HEAD was returned for this frame */
	uint32_t ahead_at;     /* the next byte of ahead to take */
	uint32_t ahead_end;    /* bytes read into ahead */
	uint64_t reads;        /* read(2) calls that returned bytes */
	uint8_t ahead[POOL_RX_AHEAD_BYTES]; /* read, not yet taken */
	_Alignas(64) unsigned char xxh[640]; /* the payload's XXH3 state */
};

void pool_rx_init(struct pool_rx *rx, uint8_t *body, uint32_t body_size,
		  enum pool_direction direction);

/*
 * Reads from fd what it has for the current frame (without waiting when fd
 * is non-blocking; a blocking fd reads until it has the frame or its head).
 * Returns a pool_rx_event, or: 0 with *eof set when fd is at end of file
 * between frames; SEL_EPROTO (malformed, bad checksum, bad tag: why says
 * which, -EACCES for a tag), SEL_ETOOBIG (a body over body_size), or a
 * negative errno. After POOL_RX_FRAME the next call starts a new frame.
 */
int pool_rx_feed(struct pool_rx *rx, int fd, bool *eof, char *why, size_t why_size);

/* Bytes read from the fd that the receiver has not yet taken into a frame. */
static inline bool pool_rx_buffered(const struct pool_rx *rx)
{
	return rx->ahead_at < rx->ahead_end;
}

/*
 * Blocking read of one whole control frame (a window is a protocol error
 * here), within the socket's timeouts. Returns 1 with the frame in rx, 0
 * at end of file between frames, or a failure as pool_rx_feed.
 */
int pool_rx_read_frame(struct pool_rx *rx, int fd, char *why, size_t why_size);

/*
 * Blocking write of one frame (pool_frame_build), incrementing *sequence
 * once it is all written. Returns 0 or a negative errno.
 */
int pool_frame_write(int fd, const uint8_t *key, enum pool_direction direction,
		     uint64_t *sequence, uint16_t type, const uint8_t *body,
		     uint32_t body_length, const uint8_t *data, uint32_t data_length);

/* ---- Messages ---- */

/* HELLO, CHALLENGE, PROOF (R-POOL-10): 32 bytes each, never all zero. */
int pool_bytes32_encode(const uint8_t in[32], uint8_t *buf, size_t buf_size);
int pool_nonce_decode(uint16_t type, const uint8_t *body, uint32_t length, uint8_t out[32],
		      char *why, size_t why_size);

/* WELCOME (R-POOL-13). */
struct pool_welcome {
	uint8_t mac[POOL_MAC_BYTES];
	uint8_t arena_id[POOL_ARENA_ID_BYTES];
	uint64_t arena_generation;
	uint64_t arena_bytes;
	uint32_t window_bytes;
	uint32_t claims_max;
	uint32_t puts_max;
	uint32_t claim_setup_ms;
	char name[POOL_NAME_BYTES_MAX + 1];
	char arena_path[POOL_ARENA_PATH_BYTES_MAX + 1];
};

int pool_welcome_encode(const struct pool_welcome *m, uint8_t *buf, size_t buf_size);
int pool_welcome_decode(const uint8_t *body, uint32_t length, struct pool_welcome *out,
			char *why, size_t why_size);

/* REFUSE (R-POOL-9). */
struct pool_refuse {
	uint32_t reason;
	char text[CLUSTER_REFUSE_TEXT_BYTES_MAX + 1];
};

int pool_refuse_encode(const struct pool_refuse *m, uint8_t *buf, size_t buf_size);
int pool_refuse_decode(const uint8_t *body, uint32_t length, struct pool_refuse *out,
		       char *why, size_t why_size);

/* ATTACH (R-POOL-14): the scope parts by value. */
struct pool_attach {
	uint32_t rank;
	uint32_t world_size;
	uint8_t instance_id[POOL_INSTANCE_ID_BYTES];
	struct rec_identity namespace_id;
	struct rec_digest layout_digest;
	uint32_t page_tokens;
	uint32_t plane_count;
	uint64_t page_bytes[REC_WORLD_SIZE_MAX];
	uint64_t row_bytes[REC_WORLD_SIZE_MAX];
};

int pool_attach_encode(const struct pool_attach *m, uint8_t *buf, size_t buf_size);
int pool_attach_decode(const uint8_t *body, uint32_t length, struct pool_attach *out,
		       char *why, size_t why_size);

/* R-POOL-16: the scope of an encoded ATTACH body under pool name. */
void pool_scope_of_attach(const char *name, const uint8_t *attach_body, uint32_t length,
			  uint8_t out[POOL_SCOPE_BYTES]);

/* ATTACHED (R-POOL-17). */
struct pool_attached {
	uint8_t scope[POOL_SCOPE_BYTES];
	uint64_t scope_records;
};

int pool_attached_encode(const struct pool_attached *m, uint8_t *buf, size_t buf_size);
int pool_attached_decode(const uint8_t *body, uint32_t length, struct pool_attached *out,
			 char *why, size_t why_size);

/* LOOKUP (R-POOL-20): keys point into the body. */
struct pool_lookup_view {
	uint64_t ticket;
	uint32_t key_count;
	const uint8_t *keys;
};

int pool_lookup_encode(uint64_t ticket, const struct rec_key *keys, uint32_t key_count,
		       uint8_t *buf, size_t buf_size);
int pool_lookup_decode(const uint8_t *body, uint32_t length, struct pool_lookup_view *out,
		       char *why, size_t why_size);
void pool_lookup_view_key(const struct pool_lookup_view *v, uint32_t index,
			  struct rec_key *out);

/* A chain as ANSWER and CLAIMED carry it; entries point into the body. */
struct pool_chain_view {
	uint32_t count;
	uint32_t entry_bytes; /* POOL_ANSWER_ENTRY_BYTES or POOL_CLAIMED_ENTRY_BYTES */
	const uint8_t *entries;
};

void pool_chain_view_entry(const struct pool_chain_view *v, uint32_t index,
			   struct pool_chain_entry *out);

/* ANSWER (R-POOL-21). */
int pool_answer_encode(uint64_t ticket, const struct pool_chain_entry *chain,
		       uint32_t count, uint8_t *buf, size_t buf_size);
int pool_answer_decode(const uint8_t *body, uint32_t length, uint64_t *ticket,
		       struct pool_chain_view *chain, char *why, size_t why_size);

/* CLAIM (R-POOL-30) and CLAIM_LOCAL (R-POOL-51): the same payload. */
struct pool_claim {
	uint64_t claim_id;
	struct rec_key key;
};

int pool_claim_encode(const struct pool_claim *m, uint8_t *buf, size_t buf_size);
int pool_claim_decode(const uint8_t *body, uint32_t length, struct pool_claim *out,
		      char *why, size_t why_size);

/* CLAIMED (R-POOL-31). */
struct pool_claimed {
	uint64_t claim_id;
	int32_t result;
	uint32_t deadline_ms;
};

int pool_claimed_encode(const struct pool_claimed *m, const struct pool_chain_entry *chain,
			uint32_t count, uint8_t *buf, size_t buf_size);
int pool_claimed_decode(const uint8_t *body, uint32_t length, struct pool_claimed *out,
			struct pool_chain_view *chain, char *why, size_t why_size);

/* CLAIM_PULL (R-POOL-32). */
struct pool_claim_pull {
	uint64_t claim_id;
	uint32_t skip_pages;
	uint8_t mode; /* enum pool_pull_mode */
};

/* CLAIM_PULL's modes (R-POOL-32, R-POOL-93). */
enum pool_pull_mode {
	POOL_PULL_STREAM = 0,
	POOL_PULL_PLACES = 1,
	POOL_PULL_RDMA = 2, /* stream, by RDMA WRITEs where the connection lent slots */
};

int pool_claim_pull_encode(const struct pool_claim_pull *m, uint8_t *buf, size_t buf_size);
int pool_claim_pull_decode(const uint8_t *body, uint32_t length, struct pool_claim_pull *out,
			   char *why, size_t why_size);

/* CLAIM_WINDOW's head (R-POOL-33); data_length is the frame's data. */
struct pool_claim_window {
	uint64_t claim_id;
	uint32_t chain_index;
	uint8_t section; /* enum pool_section */
	uint32_t first;
	uint32_t count;
};

int pool_claim_window_encode(const struct pool_claim_window *m, uint32_t data_length,
			     uint8_t *buf, size_t buf_size);
int pool_claim_window_decode(const uint8_t *head, uint32_t head_length,
			     uint32_t data_length, struct pool_claim_window *out, char *why,
			     size_t why_size);

/* CLAIM_PLACES (R-POOL-34); struct pool_place is above. */

struct pool_places_view {
	uint64_t claim_id;
	uint32_t count;
	const uint8_t *places;
};

int pool_claim_places_encode(uint64_t claim_id, const struct pool_place *places,
			     uint32_t count, uint8_t *buf, size_t buf_size);
int pool_claim_places_decode(const uint8_t *body, uint32_t length,
			     struct pool_places_view *out, char *why, size_t why_size);
void pool_places_view_place(const struct pool_places_view *v, uint32_t index,
			    struct pool_place *out);

/* CLAIM_END (R-POOL-35). */
struct pool_claim_end {
	uint64_t claim_id;
	int32_t result;
};

int pool_claim_end_encode(const struct pool_claim_end *m, uint8_t *buf, size_t buf_size);
int pool_claim_end_decode(const uint8_t *body, uint32_t length, struct pool_claim_end *out,
			  char *why, size_t why_size);

/* PUT_BEGIN (R-POOL-40): share_bytes point into the body. */
struct pool_put_begin {
	uint64_t request_id;
	struct rec_key key;
	struct rec_key parent;
	uint32_t first_page_index;
	uint32_t tail_page_count;
	bool row;
	uint32_t world_size;
	const uint8_t *share_bytes; /* world_size u64s (decode); see encode */
};

/* Encodes m with share_bytes[world_size] taken from shares. */
int pool_put_begin_encode(const struct pool_put_begin *m, const uint64_t *shares,
			  uint8_t *buf, size_t buf_size);
int pool_put_begin_decode(const uint8_t *body, uint32_t length, struct pool_put_begin *out,
			  char *why, size_t why_size);
uint64_t pool_put_begin_share_bytes(const struct pool_put_begin *m, uint32_t rank);

/* PUT_READY (R-POOL-40). */
struct pool_put_ready {
	uint64_t request_id;
	int32_t result;
	uint64_t put_id; /* 0 unless result is 0 */
};

int pool_put_ready_encode(const struct pool_put_ready *m, uint8_t *buf, size_t buf_size);
int pool_put_ready_decode(const uint8_t *body, uint32_t length, struct pool_put_ready *out,
			  char *why, size_t why_size);

/* PUT_WINDOW's head (R-POOL-41). */
struct pool_put_window {
	uint64_t put_id;
	uint64_t offset;
};

int pool_put_window_encode(const struct pool_put_window *m, uint8_t *buf, size_t buf_size);
int pool_put_window_decode(const uint8_t *head, uint32_t head_length, uint32_t data_length,
			   struct pool_put_window *out, char *why, size_t why_size);

/* PUT_END (R-POOL-42). */
struct pool_put_end {
	uint64_t put_id;
	int32_t result;
	bool commit;
};

int pool_put_end_encode(const struct pool_put_end *m, uint8_t *buf, size_t buf_size);
int pool_put_end_decode(const uint8_t *body, uint32_t length, struct pool_put_end *out,
			char *why, size_t why_size);

/*
 * RDMA_OFFER and RDMA_LEND (R-POOL-91, R-POOL-92): an RDMA endpoint
 * (pool/RDMA.md, R-RDMA-5) as the body. OFFER carries a writer's (no
 * slots), LEND a lender's (at least one slot). Encode returns the body's
 * length or -EINVAL (the wrong role, or an endpoint R-RDMA-6 refuses).
 */
int pool_rdma_offer_encode(const struct pool_rdma_endpoint *writer, uint8_t *buf,
			   size_t buf_size);
int pool_rdma_offer_decode(const uint8_t *body, uint32_t length,
			   struct pool_rdma_endpoint *out, char *why, size_t why_size);
int pool_rdma_lend_encode(const struct pool_rdma_endpoint *lender, uint8_t *buf,
			  size_t buf_size);
int pool_rdma_lend_decode(const uint8_t *body, uint32_t length,
			  struct pool_rdma_endpoint *out, char *why, size_t why_size);

/* RDMA_WINDOW (R-POOL-94): a window that an RDMA WRITE put into a lent slot. */
struct pool_rdma_window {
	struct pool_claim_window w; /* as CLAIM_WINDOW's head */
	uint32_t slot;
	uint32_t data_length; /* the window's bytes, from the slot's first */
	uint64_t data_xxh3;   /* XXH3_64bits of those bytes */
};

int pool_rdma_window_encode(const struct pool_rdma_window *m, uint8_t *buf, size_t buf_size);
int pool_rdma_window_decode(const uint8_t *body, uint32_t length, struct pool_rdma_window *out,
			    char *why, size_t why_size);

/* RDMA_FREE (R-POOL-95): slots the rank gives back; count 1 .. POOL_RDMA_SLOTS_MAX. */
int pool_rdma_free_encode(const uint32_t *slots, uint32_t count, uint8_t *buf,
			  size_t buf_size);
/* Sets *count and *slots (a view into body: read with sel_get_le32). */
int pool_rdma_free_decode(const uint8_t *body, uint32_t length, uint32_t *count,
			  const uint8_t **slots, char *why, size_t why_size);

/* HEARTBEAT and BYE (R-POOL-45). */
int pool_heartbeat_encode(uint64_t monotonic_ns, uint8_t *buf, size_t buf_size);
int pool_heartbeat_decode(const uint8_t *body, uint32_t length, uint64_t *monotonic_ns,
			  char *why, size_t why_size);
int pool_bye_decode(const uint8_t *body, uint32_t length, char *why, size_t why_size);

/* HOLDS (R-POOL-70): what an instance holds in its own tiers. */
enum pool_holds_op {
	POOL_HOLDS_ADD = 0,
	POOL_HOLDS_WITHDRAW = 1,
	POOL_HOLDS_RESET = 2,
};

struct pool_holds_view {
	uint8_t op; /* enum pool_holds_op */
	uint32_t key_count;
	const uint8_t *keys;
};

/* key_count 0 only with POOL_HOLDS_RESET (keys may then be NULL). */
int pool_holds_encode(enum pool_holds_op op, const struct rec_key *keys, uint32_t key_count,
		      uint8_t *buf, size_t buf_size);
int pool_holds_decode(const uint8_t *body, uint32_t length, struct pool_holds_view *out,
		      char *why, size_t why_size);
void pool_holds_view_key(const struct pool_holds_view *v, uint32_t index, struct rec_key *out);

/* EXPORT (R-POOL-74). */
struct pool_export {
	uint64_t export_id;
	uint32_t deadline_ms;
	struct rec_key key;
};

int pool_export_encode(const struct pool_export *m, uint8_t *buf, size_t buf_size);
int pool_export_decode(const uint8_t *body, uint32_t length, struct pool_export *out,
		       char *why, size_t why_size);

/* EXPORT_END (R-POOL-75). */
struct pool_export_end {
	uint64_t export_id;
	int32_t result;
};

int pool_export_end_encode(const struct pool_export_end *m, uint8_t *buf, size_t buf_size);
int pool_export_end_decode(const uint8_t *body, uint32_t length, struct pool_export_end *out,
			   char *why, size_t why_size);

/* The arena header (R-POOL-50). */
void pool_arena_header_encode(uint8_t out[POOL_ARENA_HEADER_BYTES],
			      const uint8_t id[POOL_ARENA_ID_BYTES], uint64_t generation,
			      uint64_t bytes);
int pool_arena_header_decode(const uint8_t in[POOL_ARENA_HEADER_BYTES],
			     uint8_t id[POOL_ARENA_ID_BYTES], uint64_t *generation,
			     uint64_t *bytes, char *why, size_t why_size);

#endif
