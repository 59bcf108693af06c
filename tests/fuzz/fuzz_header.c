/*
 * libFuzzer target for the record header decoder (record/format.c): any
 * 4096 bytes, decoded and, when valid, checked against every file length
 * near its layout. Build and run with `make fuzz` (clang).
 */
#include "record/format.h"

#include <stddef.h>
#include <xxhash.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t block[REC_HEADER_BYTES] = { 0 };
	struct rec_header h;
	struct rec_layout layout;
	char why[256];
	bool row;

	memcpy(block, data, size < sizeof(block) ? size : sizeof(block));
	rec_header_decode(block, &h, why, sizeof(why));
	/*
	 * Then the same bytes as a header that passes the envelope (magic,
	 * version, checksum), so the structural checks behind it are reached.
	 */
	memcpy(block, REC_MAGIC, 8);
	block[REC_OFF_VERSION] = REC_VERSION;
	memset(block + REC_OFF_VERSION + 1, 0, 3);
	memset(block + REC_OFF_HEADER_CHECKSUM, 0, 8);
	{
		uint64_t sum = XXH3_64bits(block, REC_HEADER_BYTES);

		for (int i = 0; i < 8; i++)
			block[REC_OFF_HEADER_CHECKSUM + i] = (uint8_t)(sum >> (8 * i));
	}
	if (rec_header_decode(block, &h, why, sizeof(why)) != 0)
		return 0;
	/* A valid header has a layout, and exactly two valid lengths. */
	if (rec_layout_from_header(&h, &layout) != 0)
		__builtin_trap();
	for (uint64_t delta = 0; delta < 3; delta++) {
		rec_header_check_length(&h, h.row_offset + delta, &row, why, sizeof(why));
		rec_header_check_length(&h, layout.file_length - delta, &row, why, sizeof(why));
	}
	rec_header_encode(&h, block);
	if (rec_header_decode(block, &h, why, sizeof(why)) != 0)
		__builtin_trap();
	return 0;
}
