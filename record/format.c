/*
 * Record format version 2: header encode, decode and validation, layout,
 * checksums and names. Each check cites its rule in FORMAT.md.
 */
#include "record/format.h"

#include "common/base.h"
#include "common/xxh.h"
#include "selene/selene.h"

#include <blake2.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack: no allocation */
#include <xxhash.h>

uint64_t rec_checksum_seed(const struct rec_key *key)
{
	return sel_get_le64(key->digest.bytes);
}

uint64_t rec_page_checksum(const void *page, uint64_t stride, uint64_t seed,
			   uint64_t prefix_index)
{
	return sel_xxh3_seeded(page, (size_t)stride, seed ^ prefix_index);
}

bool rec_page_spread_valid(const struct rec_page_spread *spread, uint64_t stride)
{
	uint64_t total;

	if (!rec_page_spread_split(spread))
		return true;
	return spread->segment_bytes > 0 &&
	       sel_is_aligned(spread->segment_bytes, SEL_BLOCK_BYTES) &&
	       spread->pitch_bytes >= spread->segment_bytes &&
	       sel_mul_u64(spread->segment_bytes, spread->segment_count, &total) &&
	       total == stride;
}

uint64_t rec_page_checksum_spread(const void *page, const struct rec_page_spread *spread,
				  uint64_t stride, uint64_t seed, uint64_t prefix_index)
{
	XXH3_state_t state;

	if (!rec_page_spread_split(spread))
		return rec_page_checksum(page, stride, seed, prefix_index);
	SEL_ASSERT(rec_page_spread_valid(spread, stride));
	/* Initialised before its reset: see xxh3_stack_state_init in file.c. */
	XXH3_INITSTATE(&state);
	XXH3_64bits_reset_withSeed(&state, seed ^ prefix_index);
	for (uint32_t k = 0; k < spread->segment_count; k++)
		sel_xxh3_update(&state, (const uint8_t *)page + spread->pitch_bytes * k,
				(size_t)spread->segment_bytes);
	return XXH3_64bits_digest(&state);
}

uint64_t rec_row_checksum(const void *row_segment, uint64_t length,
			  uint64_t seed)
{
	return sel_xxh3_seeded(row_segment, (size_t)length, seed);
}

int rec_layout_from_header(const struct rec_header *h, struct rec_layout *out)
{
	uint64_t planes = (uint64_t)h->rank_count * h->plane_count;
	uint64_t stride = 0, row_length = 0, pages_bytes, sum;

	SEL_ASSERT(planes + h->rank_count <= REC_HEADER_TABLE_ENTRIES_MAX);
	/* R-REC-7: every plane and every row padded to 4 KiB. */
	for (uint64_t i = 0; i < planes; i++)
		stride += sel_align_up(h->table[i], SEL_BLOCK_BYTES);
	for (uint64_t r = 0; r < h->rank_count; r++)
		row_length += sel_align_up(h->table[planes + r], SEL_BLOCK_BYTES);
	out->page_stride = stride;
	out->checksum_offset = REC_HEADER_BYTES;
	out->checksum_length = sel_align_up(8ull * h->tail_page_count,
					    SEL_BLOCK_BYTES);
	out->page_offset = out->checksum_offset + out->checksum_length;
	out->row_length = row_length;
	if (!sel_mul_u64(stride, h->tail_page_count, &pages_bytes) ||
	    !sel_add_u64(out->page_offset, pages_bytes, &out->row_offset) ||
	    !sel_add_u64(out->row_offset, row_length, &sum) ||
	    sum > (uint64_t)INT64_MAX)
		return SEL_ETOOBIG;
	out->file_length = sum;
	return 0;
}

int rec_header_init(struct rec_header *h, const struct rec_geometry *g,
		    const struct rec_identity *namespace_id,
		    const struct rec_key *key, const struct rec_key *parent,
		    const struct rec_digest *bucket, uint32_t first_page_index,
		    uint32_t tail_page_count, uint64_t created_ns)
{
	struct rec_layout layout;
	int ret;

	memset(h, 0, sizeof(*h));
	h->version = REC_VERSION;
	h->namespace_id = *namespace_id;
	h->fingerprint = g->fingerprint;
	h->key = *key;
	if (parent)
		h->parent = *parent;
	h->bucket = *bucket;
	h->page_tokens = g->page_tokens;
	h->tail_page_count = tail_page_count;
	h->first_page_index = first_page_index;
	h->rank_count = 1;
	h->first_rank = g->rank;
	h->world_size = g->world_size;
	h->plane_count = g->page_plane_count;
	for (uint32_t i = 0; i < g->page_plane_count; i++)
		h->table[i] = g->page_planes[i].unit_bytes;
	h->table[g->page_plane_count] = g->row_plane.unit_bytes;
	h->created_ns = created_ns;
	if (tail_page_count > REC_RECORD_PAGES_MAX ||
	    key->consumed > REC_CONSUMED_MAX)
		return SEL_ETOOBIG;
	/* R-REC-6: the stored pages are exactly [parent / pt, key / pt). */
	if (key->consumed == 0 ||
	    (parent && (parent->consumed == 0 || parent->consumed >= key->consumed)) ||
	    first_page_index != (parent ? parent->consumed / g->page_tokens : 0) ||
	    (uint64_t)first_page_index + tail_page_count !=
		    key->consumed / g->page_tokens)
		return SEL_EBADHEADER;
	ret = rec_layout_from_header(h, &layout);
	if (ret)
		return ret;
	h->page_stride = layout.page_stride;
	h->checksum_offset = layout.checksum_offset;
	h->page_offset = layout.page_offset;
	h->row_offset = layout.row_offset;
	h->row_length = layout.row_length;
	return 0;
}

void rec_header_encode(const struct rec_header *h, uint8_t *out)
{
	uint64_t entries = (uint64_t)h->rank_count * (h->plane_count + 1ull);

	SEL_ASSERT(entries <= REC_HEADER_TABLE_ENTRIES_MAX);
	memset(out, 0, REC_HEADER_BYTES);
	memcpy(out + REC_OFF_MAGIC, REC_MAGIC, 8);
	sel_put_le32(out + REC_OFF_VERSION, h->version);
	sel_put_le32(out + REC_OFF_FLAGS, h->flags);
	memcpy(out + REC_OFF_NAMESPACE, h->namespace_id.bytes, REC_IDENTITY_BYTES);
	memcpy(out + REC_OFF_FINGERPRINT, h->fingerprint.bytes, REC_DIGEST_BYTES);
	sel_put_le64(out + REC_OFF_KEY_CONSUMED, h->key.consumed);
	memcpy(out + REC_OFF_KEY_DIGEST, h->key.digest.bytes, REC_DIGEST_BYTES);
	sel_put_le64(out + REC_OFF_PARENT_CONSUMED, h->parent.consumed);
	memcpy(out + REC_OFF_PARENT_DIGEST, h->parent.digest.bytes,
	       REC_DIGEST_BYTES);
	memcpy(out + REC_OFF_BUCKET, h->bucket.bytes, REC_DIGEST_BYTES);
	sel_put_le32(out + REC_OFF_PAGE_TOKENS, h->page_tokens);
	sel_put_le32(out + REC_OFF_TAIL_PAGES, h->tail_page_count);
	sel_put_le32(out + REC_OFF_FIRST_PAGE, h->first_page_index);
	sel_put_le32(out + REC_OFF_RANK_COUNT, h->rank_count);
	sel_put_le32(out + REC_OFF_FIRST_RANK, h->first_rank);
	sel_put_le32(out + REC_OFF_WORLD_SIZE, h->world_size);
	sel_put_le32(out + REC_OFF_PLANE_COUNT, h->plane_count);
	sel_put_le64(out + REC_OFF_PAGE_STRIDE, h->page_stride);
	sel_put_le64(out + REC_OFF_CHECKSUM_OFFSET, h->checksum_offset);
	sel_put_le64(out + REC_OFF_PAGE_OFFSET, h->page_offset);
	sel_put_le64(out + REC_OFF_ROW_OFFSET, h->row_offset);
	sel_put_le64(out + REC_OFF_ROW_LENGTH, h->row_length);
	sel_put_le64(out + REC_OFF_ROW_CHECKSUM, h->row_checksum);
	sel_put_le64(out + REC_OFF_CREATED_NS, h->created_ns);
	for (uint64_t i = 0; i < entries; i++)
		sel_put_le64(out + REC_OFF_TABLE + 8 * i, h->table[i]);
	/* R-REC-5: xxh3 of the 4096 bytes with the checksum field zero. */
	sel_put_le64(out + REC_OFF_HEADER_CHECKSUM,
		     XXH3_64bits(out, REC_HEADER_BYTES));
}

void rec_header_agreement_digest(const struct rec_header *h,
				 struct rec_digest *out)
{
	uint8_t buf[REC_HEADER_BYTES];

	/* R-AGREE-1: what a rank's own file may hold differently is zeroed. */
	rec_header_encode(h, buf);
	memset(buf + REC_OFF_FINGERPRINT, 0, REC_DIGEST_BYTES);
	memset(buf + REC_OFF_FIRST_RANK, 0, 4);
	memset(buf + REC_OFF_ROW_CHECKSUM, 0, 8);
	memset(buf + REC_OFF_HEADER_CHECKSUM, 0, 8);
	blake2b(out->bytes, buf, NULL, REC_DIGEST_BYTES, REC_HEADER_BYTES, 0);
}

/*
 * Whether len bytes are zero: ORs whole words without an early exit, which
 * the compiler vectorises (most of a header is checked this way, R-REC-4).
 */
static bool all_zero(const uint8_t *p, size_t len)
{
	uint64_t acc = 0;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t word;

		memcpy(&word, p + i, 8);
		acc |= word;
	}
	for (; i < len; i++)
		acc |= p[i];
	return acc == 0;
}

static void decode_fields(const uint8_t *buf, struct rec_header *h)
{
	memset(h, 0, sizeof(*h));
	h->version = sel_get_le32(buf + REC_OFF_VERSION);
	h->flags = sel_get_le32(buf + REC_OFF_FLAGS);
	memcpy(h->namespace_id.bytes, buf + REC_OFF_NAMESPACE, REC_IDENTITY_BYTES);
	memcpy(h->fingerprint.bytes, buf + REC_OFF_FINGERPRINT, REC_DIGEST_BYTES);
	h->key.consumed = sel_get_le64(buf + REC_OFF_KEY_CONSUMED);
	memcpy(h->key.digest.bytes, buf + REC_OFF_KEY_DIGEST, REC_DIGEST_BYTES);
	h->parent.consumed = sel_get_le64(buf + REC_OFF_PARENT_CONSUMED);
	memcpy(h->parent.digest.bytes, buf + REC_OFF_PARENT_DIGEST,
	       REC_DIGEST_BYTES);
	memcpy(h->bucket.bytes, buf + REC_OFF_BUCKET, REC_DIGEST_BYTES);
	h->page_tokens = sel_get_le32(buf + REC_OFF_PAGE_TOKENS);
	h->tail_page_count = sel_get_le32(buf + REC_OFF_TAIL_PAGES);
	h->first_page_index = sel_get_le32(buf + REC_OFF_FIRST_PAGE);
	h->rank_count = sel_get_le32(buf + REC_OFF_RANK_COUNT);
	h->first_rank = sel_get_le32(buf + REC_OFF_FIRST_RANK);
	h->world_size = sel_get_le32(buf + REC_OFF_WORLD_SIZE);
	h->plane_count = sel_get_le32(buf + REC_OFF_PLANE_COUNT);
	h->page_stride = sel_get_le64(buf + REC_OFF_PAGE_STRIDE);
	h->checksum_offset = sel_get_le64(buf + REC_OFF_CHECKSUM_OFFSET);
	h->page_offset = sel_get_le64(buf + REC_OFF_PAGE_OFFSET);
	h->row_offset = sel_get_le64(buf + REC_OFF_ROW_OFFSET);
	h->row_length = sel_get_le64(buf + REC_OFF_ROW_LENGTH);
	h->row_checksum = sel_get_le64(buf + REC_OFF_ROW_CHECKSUM);
	h->created_ns = sel_get_le64(buf + REC_OFF_CREATED_NS);
	h->header_checksum = sel_get_le64(buf + REC_OFF_HEADER_CHECKSUM);
}

/* R-REC-1 .. R-REC-3: identification and integrity of the header block. */
static int check_envelope(const uint8_t *buf, const struct rec_header *h,
			  char *why, size_t why_size)
{
	uint8_t copy[REC_HEADER_BYTES];
	uint64_t actual;

	if (memcmp(buf + REC_OFF_MAGIC, REC_MAGIC, 8) != 0)
		return sel_fail(SEL_EBADHEADER, why, why_size,
				"bad magic (R-REC-1)");
	if (h->version != REC_VERSION)
		return sel_fail(SEL_EBADHEADER, why, why_size,
				"version %" PRIu32 ", expected %u (R-REC-3)",
				h->version, REC_VERSION);
	memcpy(copy, buf, REC_HEADER_BYTES);
	memset(copy + REC_OFF_HEADER_CHECKSUM, 0, 8);
	actual = XXH3_64bits(copy, REC_HEADER_BYTES);
	if (actual != h->header_checksum)
		return sel_fail(SEL_EBADHEADER, why, why_size,
				"header checksum %016" PRIx64 ", computed %016" PRIx64
				" (R-REC-5)",
				h->header_checksum, actual);
	/* R-REC-3: this implementation stores one rank's share, unreplicated. */
	if (h->flags != 0)
		return sel_fail(SEL_EBADHEADER, why, why_size,
				"flags %08" PRIx32 " are not supported (R-REC-3)",
				h->flags);
	return 0;
}

/* R-REC-4, R-REC-6, R-REC-7: counts, sizes and page arithmetic. */
static int check_counts(const uint8_t *buf, struct rec_header *h, char *why,
			size_t why_size)
{
	uint64_t entries, table_end;

	if (!all_zero(buf + REC_OFF_RESERVED_156, 4) ||
	    !all_zero(buf + REC_OFF_RESERVED_224, 32))
		return sel_fail(SEL_EBADHEADER, why, why_size,
				"reserved header bytes are not zero (R-REC-4)");
	if (h->page_tokens == 0 || h->page_tokens > REC_PAGE_TOKENS_MAX ||
	    h->rank_count == 0 || h->plane_count == 0 || h->world_size == 0 ||
	    h->world_size > REC_WORLD_SIZE_MAX ||
	    h->rank_count > h->world_size ||
	    h->first_rank > h->world_size - h->rank_count)
		return sel_fail(SEL_EBADHEADER, why, why_size,
				"page tokens %u, ranks %u from %u of %u, planes %u "
				"out of range (R-REC-4)",
				h->page_tokens, h->rank_count, h->first_rank,
				h->world_size, h->plane_count);
	entries = (uint64_t)h->rank_count * (h->plane_count + 1ull);
	if (entries > REC_HEADER_TABLE_ENTRIES_MAX)
		return sel_fail(SEL_EBADHEADER, why, why_size,
				"%" PRIu64 " table entries do not fit the header (R-REC-4)",
				entries);
	table_end = REC_OFF_TABLE + 8 * entries;
	if (!all_zero(buf + table_end, REC_HEADER_BYTES - table_end))
		return sel_fail(SEL_EBADHEADER, why, why_size,
				"bytes after the plane table are not zero (R-REC-4)");
	for (uint64_t i = 0; i < entries; i++) {
		uint64_t max = i < entries - h->rank_count ? REC_UNIT_BYTES_MAX :
							      REC_ROW_BYTES_MAX;

		h->table[i] = sel_get_le64(buf + REC_OFF_TABLE + 8 * i);
		if (h->table[i] == 0 || h->table[i] > max)
			return sel_fail(SEL_EBADHEADER, why, why_size,
					"table entry %" PRIu64 " is %" PRIu64
					" bytes (R-REC-4)", i, h->table[i]);
	}
	if (h->key.consumed == 0 || h->key.consumed > REC_CONSUMED_MAX ||
	    h->tail_page_count > REC_RECORD_PAGES_MAX)
		return sel_fail(SEL_EBADHEADER, why, why_size,
				"consumed %" PRIu64 " or %u pages out of range (R-REC-6)",
				h->key.consumed, h->tail_page_count);
	if (h->parent.consumed == 0 ? !rec_digest_is_zero(&h->parent.digest) :
				      h->parent.consumed >= h->key.consumed)
		return sel_fail(SEL_EBADHEADER, why, why_size,
				"parent key %" PRIu64 " is not a root and not before %" PRIu64
				" (R-REC-6)", h->parent.consumed, h->key.consumed);
	if (h->first_page_index != h->parent.consumed / h->page_tokens ||
	    (uint64_t)h->first_page_index + h->tail_page_count !=
		    h->key.consumed / h->page_tokens)
		return sel_fail(SEL_EBADHEADER, why, why_size,
				"pages %u..+%u do not span parent %" PRIu64
				" to key %" PRIu64 " at %u tokens a page (R-REC-6)",
				h->first_page_index, h->tail_page_count,
				h->parent.consumed, h->key.consumed, h->page_tokens);
	return 0;
}

/* R-REC-7, R-REC-8: the stored offsets are exactly the derived layout. */
static int check_layout(const struct rec_header *h, char *why, size_t why_size)
{
	struct rec_layout layout;

	if (rec_layout_from_header(h, &layout) != 0)
		return sel_fail(SEL_EBADHEADER, why, why_size,
				"record size overflows (R-REC-7)");
	if (h->page_stride != layout.page_stride ||
	    h->checksum_offset != layout.checksum_offset ||
	    h->page_offset != layout.page_offset ||
	    h->row_offset != layout.row_offset ||
	    h->row_length != layout.row_length)
		return sel_fail(SEL_EBADHEADER, why, why_size,
				"stride or segment offsets disagree with the plane "
				"sizes (R-REC-7, R-REC-8)");
	return 0;
}

int rec_header_decode(const uint8_t *buf, struct rec_header *h, char *why,
		      size_t why_size)
{
	int ret;

	decode_fields(buf, h);
	ret = check_envelope(buf, h, why, why_size);
	if (!ret)
		ret = check_counts(buf, h, why, why_size);
	if (!ret)
		ret = check_layout(h, why, why_size);
	return ret;
}

int rec_header_check_length(const struct rec_header *h, uint64_t file_length,
			    bool *row_present, char *why, size_t why_size)
{
	if (file_length == h->row_offset + h->row_length) {
		*row_present = true;
		return 0;
	}
	if (file_length == h->row_offset) {
		*row_present = false;
		return 0;
	}
	return sel_fail(SEL_EBADHEADER, why, why_size,
			"file is %" PRIu64 " bytes; expected %" PRIu64
			" without the row or %" PRIu64 " with it (R-REC-10)",
			file_length, h->row_offset, h->row_offset + h->row_length);
}

static int check_geometry(const struct rec_header *h,
			  const struct rec_geometry *g, char *why,
			  size_t why_size)
{
	if (h->page_tokens != g->page_tokens || h->rank_count != 1 ||
	    h->first_rank != g->rank || h->world_size != g->world_size ||
	    h->plane_count != g->page_plane_count)
		return sel_fail(SEL_EMISMATCH, why, why_size,
				"header counts differ from this rank's geometry "
				"(R-REC-12)");
	for (uint32_t i = 0; i < g->page_plane_count; i++)
		if (h->table[i] != g->page_planes[i].unit_bytes)
			return sel_fail(SEL_EMISMATCH, why, why_size,
					"plane '%s' is %" PRIu64 " bytes in the "
					"header, %" PRIu64 " here (R-REC-12)",
					g->page_planes[i].name, h->table[i],
					g->page_planes[i].unit_bytes);
	if (h->table[g->page_plane_count] != g->row_plane.unit_bytes)
		return sel_fail(SEL_EMISMATCH, why, why_size,
				"row is %" PRIu64 " bytes in the header, %" PRIu64
				" here (R-REC-12)", h->table[g->page_plane_count],
				g->row_plane.unit_bytes);
	return 0;
}

int rec_header_check_expected(const struct rec_header *h,
			      const struct rec_expect *expect, char *why,
			      size_t why_size)
{
	if (expect->namespace_id &&
	    memcmp(h->namespace_id.bytes, expect->namespace_id->bytes,
		   REC_IDENTITY_BYTES) != 0)
		return sel_fail(SEL_EMISMATCH, why, why_size,
				"namespace identity differs (R-REC-12)");
	if (expect->namespace_prefix &&
	    memcmp(h->namespace_id.bytes, expect->namespace_prefix, 8) != 0)
		return sel_fail(SEL_EMISMATCH, why, why_size,
				"namespace identity does not match the directory "
				"name (R-REC-12)");
	if (expect->fingerprint &&
	    !rec_digest_equal(&h->fingerprint, expect->fingerprint))
		return sel_fail(SEL_EMISMATCH, why, why_size,
				"shard fingerprint differs (R-REC-12)");
	if (expect->key && !rec_key_equal(&h->key, expect->key))
		return sel_fail(SEL_EMISMATCH, why, why_size,
				"key differs from the file name (R-REC-2)");
	if (expect->geometry)
		return check_geometry(h, expect->geometry, why, why_size);
	return 0;
}

void rec_file_name(char out[REC_FILE_NAME_BYTES], const struct rec_key *key)
{
	char hex[2 * REC_DIGEST_BYTES + 1];

	sel_hex_encode(hex, key->digest.bytes, REC_DIGEST_BYTES);
	snprintf(out, REC_FILE_NAME_BYTES, "%016" PRIx64 "-%s.ckpt",
		 key->consumed, hex);
}

bool rec_file_name_parse(const char *name, struct rec_key *key, bool *tmp)
{
	uint8_t consumed[8];
	size_t len = strlen(name);

	if (len == REC_FILE_NAME_BYTES - 1)
		*tmp = false;
	else if (len == REC_FILE_NAME_BYTES - 1 + strlen(REC_TMP_SUFFIX) &&
		 strcmp(name + REC_FILE_NAME_BYTES - 1, REC_TMP_SUFFIX) == 0)
		*tmp = true;
	else
		return false;
	if (name[16] != '-' || memcmp(name + 49, ".ckpt", 5) != 0 ||
	    !sel_hex_decode(consumed, name, 8) ||
	    !sel_hex_decode(key->digest.bytes, name + 17, REC_DIGEST_BYTES))
		return false;
	key->consumed = 0;
	for (int i = 0; i < 8; i++)
		key->consumed = key->consumed << 8 | consumed[i];
	return true;
}

void rec_dir_name(char out[REC_DIR_NAME_BYTES],
		  const struct rec_identity *namespace_id,
		  const struct rec_digest *fingerprint)
{
	sel_hex_encode(out, namespace_id->bytes, 8);
	out[16] = '-';
	sel_hex_encode(out + 17, fingerprint->bytes, REC_DIGEST_BYTES);
}

bool rec_dir_name_parse(const char *name, uint8_t prefix[8],
			struct rec_digest *fingerprint)
{
	return strlen(name) == REC_DIR_NAME_BYTES - 1 && name[16] == '-' &&
	       sel_hex_decode(prefix, name, 8) &&
	       sel_hex_decode(fingerprint->bytes, name + 17, REC_DIGEST_BYTES);
}

bool rec_failure_condemns(int result)
{
	switch (result) {
	case SEL_ECHECKSUM:
	case SEL_EBADHEADER:
	case SEL_EMISMATCH:
	case -ENOENT:
	case -ENXIO:
		return true;
	default:
		return false;
	}
}
