/*
 * XXH3 at the speed of the machine's vector unit. libxxhash's plain entry
 * points use SSE2 (about 10 GB/s here); where the library was built with
 * its x86 dispatcher (XXH3_*_dispatch: AVX2, AVX-512 chosen at run time,
 * about 40 GB/s on the same core) these call it, elsewhere the plain ones.
 * Same function, same values: only the speed differs.
 */
#ifndef SEL_COMMON_XXH_H
#define SEL_COMMON_XXH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <xxhash.h>

uint64_t sel_xxh3(const void *data, size_t length);
uint64_t sel_xxh3_seeded(const void *data, size_t length, uint64_t seed);
/* XXH3_64bits_update on a state made by XXH3_64bits_reset*. */
void sel_xxh3_update(XXH3_state_t *state, const void *data, size_t length);
/* True when the dispatcher is there (the tests say which path they ran). */
bool sel_xxh3_dispatched(void);

#endif
