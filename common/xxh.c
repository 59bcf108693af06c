/*
 * See xxh.h. The dispatcher's symbols are weak references: a libxxhash
 * built without them (its DISPATCH=0 default) leaves them NULL and the
 * plain functions serve, so Selene links and runs against either.
 */
#include "common/xxh.h"

#include <stdbool.h>

extern XXH64_hash_t XXH3_64bits_dispatch(const void *input, size_t len) __attribute__((weak));
extern XXH64_hash_t XXH3_64bits_withSeed_dispatch(const void *input, size_t len,
						  XXH64_hash_t seed) __attribute__((weak));
extern XXH_errorcode XXH3_64bits_update_dispatch(XXH3_state_t *state, const void *input,
						 size_t len) __attribute__((weak));

bool sel_xxh3_dispatched(void)
{
	return XXH3_64bits_dispatch && XXH3_64bits_withSeed_dispatch &&
	       XXH3_64bits_update_dispatch;
}

uint64_t sel_xxh3(const void *data, size_t length)
{
	return XXH3_64bits_dispatch ? XXH3_64bits_dispatch(data, length)
				    : XXH3_64bits(data, length);
}

uint64_t sel_xxh3_seeded(const void *data, size_t length, uint64_t seed)
{
	return XXH3_64bits_withSeed_dispatch ? XXH3_64bits_withSeed_dispatch(data, length, seed)
					     : XXH3_64bits_withSeed(data, length, seed);
}

void sel_xxh3_update(XXH3_state_t *state, const void *data, size_t length)
{
	if (XXH3_64bits_update_dispatch)
		XXH3_64bits_update_dispatch(state, data, length);
	else
		XXH3_64bits_update(state, data, length);
}
