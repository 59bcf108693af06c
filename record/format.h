/*
 * Record file format version 2 (docs/DESIGN.md section 4, record/FORMAT.md):
 * header encoding and validation, segment layout, checksums, file and
 * directory names. Pure functions over bytes; the file I/O is in file.h.
 * Rule numbers R-REC-* refer to FORMAT.md.
 */
#ifndef SELENE_RECORD_FORMAT_H
#define SELENE_RECORD_FORMAT_H

#include "common/limits.h"
#include "record/geometry.h"
#include "record/key.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define REC_MAGIC "FLARECKP"
#define REC_VERSION 2u
#define REC_FLAG_REPLICATED_PAGES (1u << 31)
#define REC_FLAG_REPLICATED_ROW (1u << 30)

/* Header field offsets (R-REC-4). */
enum rec_header_offset {
	REC_OFF_MAGIC = 0,
	REC_OFF_VERSION = 8,
	REC_OFF_FLAGS = 12,
	REC_OFF_NAMESPACE = 16,
	REC_OFF_FINGERPRINT = 48,
	REC_OFF_KEY_CONSUMED = 64,
	REC_OFF_KEY_DIGEST = 72,
	REC_OFF_PARENT_CONSUMED = 88,
	REC_OFF_PARENT_DIGEST = 96,
	REC_OFF_BUCKET = 112,
	REC_OFF_PAGE_TOKENS = 128,
	REC_OFF_TAIL_PAGES = 132,
	REC_OFF_FIRST_PAGE = 136,
	REC_OFF_RANK_COUNT = 140,
	REC_OFF_FIRST_RANK = 144,
	REC_OFF_WORLD_SIZE = 148,
	REC_OFF_PLANE_COUNT = 152,
	REC_OFF_RESERVED_156 = 156,
	REC_OFF_PAGE_STRIDE = 160,
	REC_OFF_CHECKSUM_OFFSET = 168,
	REC_OFF_PAGE_OFFSET = 176,
	REC_OFF_ROW_OFFSET = 184,
	REC_OFF_ROW_LENGTH = 192,
	REC_OFF_ROW_CHECKSUM = 200,
	REC_OFF_CREATED_NS = 208,
	REC_OFF_HEADER_CHECKSUM = 216,
	REC_OFF_RESERVED_224 = 224,
	REC_OFF_TABLE = 256,
};

_Static_assert(REC_OFF_TABLE == REC_HEADER_TABLE_OFFSET, "table offset");
_Static_assert(REC_OFF_RESERVED_224 + 32 == REC_OFF_TABLE, "reserved span");
_Static_assert(REC_OFF_HEADER_CHECKSUM + 8 == REC_OFF_RESERVED_224, "fields");
_Static_assert(REC_OFF_BUCKET + 16 == REC_OFF_PAGE_TOKENS, "fields");

/* A decoded header: every field of R-REC-4. */
struct rec_header {
	uint32_t version;
	uint32_t flags;
	struct rec_identity namespace_id;
	struct rec_digest fingerprint;
	struct rec_key key;
	struct rec_key parent; /* consumed 0 and zero digest: a root record */
	struct rec_digest bucket;
	uint32_t page_tokens;
	uint32_t tail_page_count;
	uint32_t first_page_index;
	uint32_t rank_count;
	uint32_t first_rank;
	uint32_t world_size;
	uint32_t plane_count;
	uint64_t page_stride;
	uint64_t checksum_offset;
	uint64_t page_offset;
	uint64_t row_offset;
	uint64_t row_length;
	uint64_t row_checksum;
	uint64_t created_ns;
	uint64_t header_checksum;
	/* unit bytes, rank-major (rank_count * plane_count), then row bytes */
	uint64_t table[REC_HEADER_TABLE_ENTRIES_MAX];
};

/* The layout of a record, derived from its header's counts and sizes. */
struct rec_layout {
	uint64_t page_stride;
	uint64_t checksum_offset;
	uint64_t checksum_length;  /* 8 per page, padded to 4 KiB */
	uint64_t page_offset;
	uint64_t row_offset;       /* also the length of a page-only file */
	uint64_t row_length;
	uint64_t file_length;      /* with the row */
};

/* R-KEY-7: the checksum seed s, the key digest's first 8 bytes as a u64. */
uint64_t rec_checksum_seed(const struct rec_key *key);

/* R-REC-9: xxh3 of one stored page record, seeded with s XOR prefix index. */
uint64_t rec_page_checksum(const void *page, uint64_t stride, uint64_t seed,
			   uint64_t prefix_index);

/*
 * Where one page record lies in memory (a warm slot, docs/DESIGN.md section
 * 6): its bytes in file order are segment_count segments of segment_bytes
 * each, segment k at page + k * pitch_bytes. A zeroed spread, or one of
 * one segment, is a page record in one piece, page_stride bytes at page.
 * The file's layout is the same either way (R-REC-7).
 */
struct rec_page_spread {
	uint32_t segment_count;
	uint64_t segment_bytes;
	uint64_t pitch_bytes;
};

/* Whether spread splits a page into segments (NULL does not). */
static inline bool rec_page_spread_split(const struct rec_page_spread *spread)
{
	return spread && spread->segment_count > 1;
}

/* Whether spread can hold a page record of stride bytes. */
bool rec_page_spread_valid(const struct rec_page_spread *spread, uint64_t stride);

/*
 * rec_page_checksum of the page record laid out as spread says (NULL: in
 * one piece), streamed over its segments: the same value for the same
 * bytes in file order.
 */
uint64_t rec_page_checksum_spread(const void *page, const struct rec_page_spread *spread,
				  uint64_t stride, uint64_t seed, uint64_t prefix_index);

/* R-REC-11: xxh3 of the row segment as stored, seeded with s. */
uint64_t rec_row_checksum(const void *row_segment, uint64_t length,
			  uint64_t seed);

/*
 * Fills a header for one rank's share (rank count 1, no replication) of a
 * record of geometry g: every count, size and offset; row checksum and
 * header checksum zero (the writer sets the first, encode the second).
 * parent NULL makes a root record. Returns 0, or SEL_ETOOBIG / SEL_EBADHEADER
 * when the pages do not match the key (R-REC-6) or sizes overflow.
 */
int rec_header_init(struct rec_header *h, const struct rec_geometry *g,
		    const struct rec_identity *namespace_id,
		    const struct rec_key *key, const struct rec_key *parent,
		    const struct rec_digest *bucket, uint32_t first_page_index,
		    uint32_t tail_page_count, uint64_t created_ns);

/*
 * R-AGREE-1: BLAKE2b-128 of h encoded (rec_header_encode) with the fields
 * that differ between the ranks of one record zeroed: shard fingerprint,
 * first stored rank, row checksum and header checksum. Two ranks' files of
 * one record have equal digests exactly when their headers agree.
 */
void rec_header_agreement_digest(const struct rec_header *h,
				 struct rec_digest *out);

/* The layout that h's counts and sizes describe; 0 or SEL_ETOOBIG. */
int rec_layout_from_header(const struct rec_header *h, struct rec_layout *out);

/* Encodes h into the 4096-byte out, computing the header checksum. */
void rec_header_encode(const struct rec_header *h, uint8_t *out);

/*
 * Decodes and validates the structure of a header (R-REC-1 .. R-REC-8):
 * magic, version, flags, checksum, reserved bytes, counts, sizes, offsets,
 * page arithmetic. Returns 0 or SEL_EBADHEADER with the reason in why.
 */
int rec_header_decode(const uint8_t *buf, struct rec_header *h, char *why,
		      size_t why_size);

/*
 * R-REC-10: checks the file length against a valid header's layout; sets
 * *row_present. Returns 0 or SEL_EBADHEADER with the reason.
 */
int rec_header_check_length(const struct rec_header *h, uint64_t file_length,
			    bool *row_present, char *why, size_t why_size);

/* What a reader expects of a header; NULL fields are not checked. */
struct rec_expect {
	const struct rec_identity *namespace_id;
	const uint8_t *namespace_prefix; /* 8 bytes: a directory name's prefix */
	const struct rec_digest *fingerprint;
	const struct rec_geometry *geometry;
	const struct rec_key *key; /* from the file name */
};

/*
 * R-REC-12: checks a valid header against what its directory, name and
 * geometry say. Returns 0 or SEL_EMISMATCH with the reason.
 */
int rec_header_check_expected(const struct rec_header *h,
			      const struct rec_expect *expect, char *why,
			      size_t why_size);

/* "<consumed 16 hex>-<digest 32 hex>.ckpt": 54 bytes and NUL. */
#define REC_FILE_NAME_BYTES 55u
#define REC_TMP_SUFFIX ".tmp"
/* "<namespace prefix 16 hex>-<fingerprint 32 hex>": 49 bytes and NUL. */
#define REC_DIR_NAME_BYTES 50u

void rec_file_name(char out[REC_FILE_NAME_BYTES], const struct rec_key *key);

/* Parses a record file name (R-REC-2); *tmp says whether ".tmp" followed. */
bool rec_file_name_parse(const char *name, struct rec_key *key, bool *tmp);

void rec_dir_name(char out[REC_DIR_NAME_BYTES],
		  const struct rec_identity *namespace_id,
		  const struct rec_digest *fingerprint);

/*
 * Whether a read's failure says the record file itself is bad (R-READ-4: a
 * checksum, a header, identity, key, layout or length check, the file
 * missing or not a regular file), rather than the disk or the job (EIO,
 * ENOMEM, a refusal): only such a failure may drop the record.
 */
bool rec_failure_condemns(int result);

/* Parses a record directory name; prefix gets the 8 namespace bytes. */
bool rec_dir_name_parse(const char *name, uint8_t prefix[8],
			struct rec_digest *fingerprint);

#endif
