/*
 * libFuzzer target for the RDMA endpoint decoder (pool/rdma.c, pool/RDMA.md
 * R-RDMA-5, R-RDMA-6): any bytes, as the far end of a pool connection could
 * send them. An endpoint the decoder accepts must encode back to exactly
 * the bytes it came from. Build and run with `make fuzz` (clang).
 */
#include "pool/rdma.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t encoded[POOL_RDMA_ENDPOINT_BYTES_MAX];
	struct pool_rdma_endpoint e;
	char why[256];
	int len;

	if (pool_rdma_endpoint_decode(data, size, &e, why, sizeof(why)) != 0)
		return 0;
	len = pool_rdma_endpoint_encode(&e, encoded, sizeof(encoded));
	if (len < 0 || (size_t)len != size || memcmp(encoded, data, size) != 0)
		__builtin_trap();
	return 0;
}
