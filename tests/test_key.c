/*
 * Names and hashes (record/key.h, FORMAT.md R-KEY-*): fixed vectors computed
 * once by tests/vectors/gen_key_vectors.py (Python's own BLAKE2b, a second
 * implementation of docs/DESIGN.md section 3) and properties of prefix keys.
 */
#include "tests/testutil.h"

#include "common/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void assert_hex(const uint8_t *bytes, size_t len, const char *hex)
{
	char actual[2 * 32 + 1];

	sel_hex_encode(actual, bytes, len);
	assert_string_equal(actual, hex);
}

static void vector_tokens(uint32_t *tokens, size_t count)
{
	for (size_t i = 0; i < count; i++)
		tokens[i] = (uint32_t)((i * 7 + 3) % 151936);
}

/* R-KEY-1, R-KEY-2: model and namespace identities match the vectors. */
static void test_key_identity_vectors(void **state)
{
	struct rec_identity model, ns;

	(void)state;
	rec_model_identity_from_name(&model, "test-model");
	assert_hex(model.bytes, 32,
		   "01803e0724e7bc5d8e8a3bd85e3a9ce8a98cd916e5231ed0e44829335bcb378c");
	rec_namespace_identity(&ns, &model, REC_STATE_ORDINARY);
	assert_hex(ns.bytes, 32,
		   "5fecb8c48cec58d174d86367142dd9c92a03744f3250795b06dd14be2646d031");
	rec_namespace_identity(&ns, &model, REC_STATE_LEARNED_SPECULATION);
	assert_hex(ns.bytes, 32,
		   "286d9df8d38cc7e55c60071aecefebe98e4902a8deca0631233fd7d5a89e6af2");
	rec_namespace_identity(&ns, &model, REC_STATE_COPY_SPECULATION);
	assert_hex(ns.bytes, 32,
		   "b5868b39fbc3a8f9ba9d64c76c3d4ebe70023381f0dc482793e8f51e9506f571");
}

/* R-KEY-5, R-KEY-6: the block chain and keys match the vectors. */
static void test_key_history_vectors(void **state)
{
	static const struct {
		uint64_t consumed;
		const char *hex;
	} keys[] = {
		{ 1, "4d0aaddb4e6bf4d9aab20ce969edcf09" },
		{ 63, "b4df64c0326cb5f49543cab4b179ee97" },
		{ 64, "fee5a845b7a6279abc1773813e01d842" },
		{ 65, "a810ed8572c64549a8e6d0612acd2768" },
		{ 130, "af5fe64bb8facf5e3f203a65cc4508c0" },
		{ 200, "321c2e1360e506f1930be4e499b95b66" },
	};
	static const char *const blocks[] = {
		"00000000000000000000000000000000",
		"2a8b2c1c58a50b9b191288b4f09b65d5",
		"e6bc185155f19398f4e2764bedae4b46",
		"fbb3e65c1c8a42b439c745ed93b5ddc2",
	};
	struct rec_identity model;
	struct rec_history h;
	uint32_t tokens[200];

	(void)state;
	tu_identities(&model, NULL);
	vector_tokens(tokens, 200);
	assert_int_equal(rec_history_init(&h, &model, tokens, 200), 0);
	for (size_t k = 0; k < SEL_ARRAY_SIZE(blocks); k++)
		assert_hex(h.blocks[k].bytes, 16, blocks[k]);
	for (size_t i = 0; i < SEL_ARRAY_SIZE(keys); i++) {
		struct rec_key key;

		rec_history_key_at(&h, keys[i].consumed, &key);
		assert_int_equal(key.consumed, keys[i].consumed);
		assert_hex(key.digest.bytes, 16, keys[i].hex);
	}
	/* The bucket of c is d(floor(c / 64)). */
	assert_hex(rec_history_bucket(&h, 63)->bytes, 16, blocks[0]);
	assert_hex(rec_history_bucket(&h, 130)->bytes, 16, blocks[2]);
	rec_history_free(&h);
}

/* Equal prefixes give equal keys, whatever follows them. */
static void test_key_equal_prefixes_equal_keys(void **state)
{
	struct rec_identity model;
	struct rec_history a, b;
	uint32_t ta[300], tb[500];

	(void)state;
	tu_identities(&model, NULL);
	tu_tokens(ta, 300, 42);
	memcpy(tb, ta, sizeof(ta));
	tu_tokens(tb + 300, 200, 43);
	assert_int_equal(rec_history_init(&a, &model, ta, 300), 0);
	assert_int_equal(rec_history_init(&b, &model, tb, 500), 0);
	for (uint64_t c = 1; c <= 300; c++) {
		struct rec_key ka, kb;

		rec_history_key_at(&a, c, &ka);
		rec_history_key_at(&b, c, &kb);
		assert_true(rec_key_equal(&ka, &kb));
		assert_true(rec_digest_equal(rec_history_bucket(&a, c),
					     rec_history_bucket(&b, c)));
	}
	rec_history_free(&a);
	rec_history_free(&b);
}

/* Changing any one token changes the key at every count that covers it. */
static void test_key_changed_token_changes_key(void **state)
{
	struct rec_identity model;
	uint32_t tokens[200];
	struct rec_history base;
	uint64_t seed = 7;

	(void)state;
	tu_identities(&model, NULL);
	tu_tokens(tokens, 200, seed);
	assert_int_equal(rec_history_init(&base, &model, tokens, 200), 0);
	for (size_t pos = 0; pos < 200; pos += 13) {
		struct rec_history changed;
		uint32_t copy[200];

		memcpy(copy, tokens, sizeof(copy));
		copy[pos] ^= 1;
		assert_int_equal(rec_history_init(&changed, &model, copy, 200), 0);
		for (uint64_t c = 1; c <= 200; c++) {
			struct rec_key ka, kb;

			rec_history_key_at(&base, c, &ka);
			rec_history_key_at(&changed, c, &kb);
			if (c > pos)
				assert_false(rec_key_equal(&ka, &kb));
			else
				assert_true(rec_key_equal(&ka, &kb));
		}
		rec_history_free(&changed);
	}
	rec_history_free(&base);
}

/* Every count gives a different key, and so does another model identity. */
static void test_key_count_and_model_change_key(void **state)
{
	struct rec_identity model, other;
	struct rec_history h, g;
	uint32_t tokens[256];
	struct rec_key keys[256];

	(void)state;
	tu_identities(&model, NULL);
	rec_model_identity_from_name(&other, "test-model-2");
	tu_tokens(tokens, 256, 9);
	assert_int_equal(rec_history_init(&h, &model, tokens, 256), 0);
	assert_int_equal(rec_history_init(&g, &other, tokens, 256), 0);
	for (uint64_t c = 1; c <= 256; c++) {
		struct rec_key other_key;

		rec_history_key_at(&h, c, &keys[c - 1]);
		rec_history_key_at(&g, c, &other_key);
		assert_false(rec_digest_equal(&keys[c - 1].digest, &other_key.digest));
		for (uint64_t d = 1; d < c; d++)
			assert_false(rec_digest_equal(&keys[c - 1].digest,
						      &keys[d - 1].digest));
	}
	rec_history_free(&h);
	rec_history_free(&g);
}

/* A history of no tokens has only d(0) and is freed cleanly. */
static void test_key_empty_history(void **state)
{
	struct rec_identity model;
	struct rec_history h;

	(void)state;
	tu_identities(&model, NULL);
	assert_int_equal(rec_history_init(&h, &model, NULL, 0), 0);
	assert_true(rec_digest_is_zero(rec_history_bucket(&h, 0)));
	rec_history_free(&h);
	rec_history_free(&h);
}

/* Keys order by token count first, then by digest bytes; equal keys are 0. */
static void test_key_compare_orders_count_then_digest(void **state)
{
	struct rec_key a = { .consumed = 64 }, b = { .consumed = 128 };

	(void)state;
	a.digest.bytes[0] = 0xff;
	assert_true(rec_key_compare(&a, &b) < 0);
	assert_true(rec_key_compare(&b, &a) > 0);
	b.consumed = 64;
	assert_true(rec_key_compare(&a, &b) > 0);
	b.digest.bytes[0] = 0xff;
	assert_int_equal(rec_key_compare(&a, &b), 0);
	b.digest.bytes[REC_DIGEST_BYTES - 1] = 1;
	assert_true(rec_key_compare(&a, &b) < 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_key_compare_orders_count_then_digest),
		cmocka_unit_test(test_key_identity_vectors),
		cmocka_unit_test(test_key_history_vectors),
		cmocka_unit_test(test_key_equal_prefixes_equal_keys),
		cmocka_unit_test(test_key_changed_token_changes_key),
		cmocka_unit_test(test_key_count_and_model_change_key),
		cmocka_unit_test(test_key_empty_history),
	};

	return cmocka_run_group_tests_name("key", tests, NULL, NULL);
}
