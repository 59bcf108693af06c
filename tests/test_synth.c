/*
 * The reference worker's synthetic model and trace format (launch/worker/synth.h,
 * launch/worker/trace.h): prompts from spans, prefix hashes that agree exactly on
 * shared prefixes, bytes that differ by rank, plane and prefix, and a trace
 * parsed to the letter (the refusals are in test_cli).
 */
#include "tests/testutil.h"

#include "launch/worker/synth.h"
#include "launch/worker/trace.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Shared prefixes hash alike at every count; anything past them differs. */
static void test_synth_prefix_hashes(void **state)
{
	struct launch_trace_span one[] = { { 5, 100 } }, two[] = { { 5, 100 }, { 6, 30 } },
			  other[] = { { 5, 99 }, { 7, 31 } };
	struct launch_synth_prompt a, b, c;

	(void)state;
	assert_int_equal(launch_synth_prompt_build(&a, one, 1, 16), 0);
	assert_int_equal(launch_synth_prompt_build(&b, two, 2, 16), 0);
	assert_int_equal(launch_synth_prompt_build(&c, other, 2, 16), 0);
	assert_int_equal(a.token_count, 100);
	assert_int_equal(a.full_pages, 6);
	assert_int_equal(b.full_pages, 8);
	for (uint64_t n = 0; n <= 100; n++)
		assert_true(launch_synth_prefix_hash(&a, n) == launch_synth_prefix_hash(&b, n));
	for (uint64_t i = 0; i < 6; i++)
		assert_true(a.page_hashes[i] == b.page_hashes[i]);
	assert_true(launch_synth_prefix_hash(&a, 99) == launch_synth_prefix_hash(&c, 99));
	assert_true(launch_synth_prefix_hash(&a, 100) != launch_synth_prefix_hash(&c, 100));
	assert_true(launch_synth_prefix_hash(&b, 50) != launch_synth_prefix_hash(&b, 51));
	for (uint64_t i = 0; i < a.token_count; i++)
		assert_true(a.tokens[i] < SYNTH_VOCABULARY);
	launch_synth_prompt_free(&a);
	launch_synth_prompt_free(&b);
	launch_synth_prompt_free(&c);
}

/* Page and row bytes are a function of rank, plane and hash, any size. */
static void test_synth_bytes(void **state)
{
	uint8_t x[1003], y[1003];

	(void)state;
	launch_synth_page(x, sizeof(x), 1, 2, 42);
	launch_synth_page(y, sizeof(y), 1, 2, 42);
	assert_memory_equal(x, y, sizeof(x));
	launch_synth_page(y, sizeof(y), 0, 2, 42);
	assert_memory_not_equal(x, y, sizeof(x));
	launch_synth_page(y, sizeof(y), 1, 3, 42);
	assert_memory_not_equal(x, y, sizeof(x));
	launch_synth_page(y, sizeof(y), 1, 2, 43);
	assert_memory_not_equal(x, y, sizeof(x));
	launch_synth_row(y, sizeof(y), 1, 42);
	assert_memory_not_equal(x, y, sizeof(x));
	launch_synth_poison(y, sizeof(y), 42);
	assert_memory_not_equal(x, y, sizeof(x));
	/* the tail past the last whole 8 bytes is written too */
	memset(y, 0, sizeof(y));
	launch_synth_page(y, 3, 1, 2, 42);
	assert_false(y[0] == 0 && y[1] == 0 && y[2] == 0);
	assert_int_equal(y[3], 0);
}

/* Every field a trace line may hold, blank lines, escapes, skipped keys. */
static void test_trace_parse(void **state)
{
	static const char text[] =
		"{\"id\": \"a\\u00e9\\n\", \"spans\": [[18446744073709551615, 3], [0, 1]]}\r\n"
		"   \n"
		"{\"note\": {\"y\": [true, null, -1.5e3, \"s\"]}, \"settle\": true, \"spans\": [[2, 7]],"
		" \"id\": \"b\", \"expect\": {\"gpu_reused\": 4, \"prefilled\": 3}}";
	struct launch_trace t;
	char err[256];

	(void)state;
	assert_int_equal(launch_trace_parse(text, sizeof(text) - 1, &t, err, sizeof(err)), 0);
	assert_int_equal(t.request_count, 2);
	assert_string_equal(t.requests[0].id, "a\xc3\xa9\n");
	assert_int_equal(t.requests[0].span_count, 2);
	assert_true(t.requests[0].spans[0].seed == UINT64_MAX);
	assert_int_equal(t.requests[0].token_count, 4);
	assert_false(t.requests[0].settle);
	assert_false(t.requests[0].expect.has_gpu_reused);
	assert_int_equal(t.requests[1].line, 3);
	assert_true(t.requests[1].settle);
	assert_true(t.requests[1].expect.has_gpu_reused);
	assert_int_equal(t.requests[1].expect.gpu_reused, 4);
	assert_false(t.requests[1].expect.has_host_reused);
	assert_int_equal(t.requests[1].expect.prefilled, 3);
	launch_trace_free(&t);
	/* a truncated line at every length is refused, never read past */
	for (size_t n = 1; n < 60; n++) {
		int ret = launch_trace_parse(text, n, &t, err, sizeof(err));

		assert_int_equal(ret, -EINVAL);
		assert_int_equal(t.request_count, 0);
		assert_non_null(strstr(err, "line 1:"));
	}
}

/* What a skipped value may be: any JSON, keys of any length; a NUL byte
 * inside a number is not part of it. Ids repeat nowhere, checked in n log n. */
static void test_trace_skipped_values_and_ids(void **state)
{
	static const char nul[] = "{\"id\": \"x\", \"spans\": [[1, 2]], \"n\": 1\0}";
	char long_key[600], err[256], *big;
	struct launch_trace t;
	size_t at = 0;

	(void)state;
	snprintf(long_key, sizeof(long_key), "{\"id\": \"x\", \"spans\": [[1, 2]], \"note\": "
		 "[0, -0.5e-3, 1E+9, {\"%0300d\": \"\\u0041\\ud800\\u0000\"}]}", 7);
	assert_int_equal(launch_trace_parse(long_key, strlen(long_key), &t, err, sizeof(err)), 0);
	assert_int_equal(t.request_count, 1);
	launch_trace_free(&t);
	/* a key of ours misspelt, or one too long to be ours, is refused by line */
	snprintf(long_key, sizeof(long_key), "{\"id\": \"x\", \"spans\": [[1, 2]], \"%0300d\": "
		 "1}", 7);
	assert_int_equal(launch_trace_parse(long_key, strlen(long_key), &t, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "line 1: unknown key (longer than"));
	assert_int_equal(launch_trace_parse(nul, sizeof(nul) - 1, &t, err, sizeof(err)), -EINVAL);

	/* 50,000 requests, the id of line 7 again on line 49,999 */
	big = malloc(50000 * 64);
	assert_non_null(big);
	for (int i = 1; i <= 50000; i++)
		at += (size_t)sprintf(big + at, "{\"id\": \"r%d\", \"spans\": [[%d, 3]]}\n",
				      i == 49999 ? 7 : i, i);
	assert_int_equal(launch_trace_parse(big, at, &t, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "line 49999: id \"r7\" is also on line 7");
	free(big);
}

/*
 * Every valid JSON string escape, surrogate pairs included:
 * Python's json.dumps writes "\U0001F600" as "\\ud83d\\ude00" and
 * the id holds the character's four UTF-8 bytes; a lone surrogate cannot
 * be an id; an unknown top-level key is refused with its line.
 */
static void test_trace_escapes_and_unknown_keys(void **state)
{
	static const char text[] =
		"{\"id\": \"\\ud83d\\ude00 \\u00e9\\u4e2d\\/\\b\\f\\r\\t\\\"\\\\\", \"spans\": [[1, 2]]}\n"
		"{\"id\": \"\\uD83D\\uDE00\", \"spans\": [[1, 2]], \"note\": \"\\udead\"}\n";
	static const char lone[] = "{\"id\": \"a\\ud83d\", \"spans\": [[1, 2]]}\n";
	static const char lone_pair[] = "{\"id\": \"a\\ud83d\\u0041\", \"spans\": [[1, 2]]}\n";
	static const char misspelt[] =
		"{\"id\": \"a\", \"spans\": [[1, 2]]}\n"
		"{\"id\": \"b\", \"spans\": [[1, 2]], \"expcet\": {\"prefilled\": 2}}\n";
	struct launch_trace t;
	char err[256];

	(void)state;
	assert_int_equal(launch_trace_parse(text, sizeof(text) - 1, &t, err, sizeof(err)), 0);
	assert_int_equal(t.request_count, 2);
	assert_string_equal(t.requests[0].id, "\xf0\x9f\x98\x80 \xc3\xa9\xe4\xb8\xad/\b\f\r\t\"\\");
	assert_string_equal(t.requests[1].id, "\xf0\x9f\x98\x80");
	launch_trace_free(&t);
	assert_int_equal(launch_trace_parse(lone, sizeof(lone) - 1, &t, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "line 1: a \\u escape names a lone surrogate (U+D83D)"));
	assert_int_equal(launch_trace_parse(lone_pair, sizeof(lone_pair) - 1, &t, err,
					    sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "lone surrogate (U+D83D)"));
	assert_int_equal(launch_trace_parse(misspelt, sizeof(misspelt) - 1, &t, err, sizeof(err)),
			 -EINVAL);
	assert_string_equal(err, "line 2: unknown key \"expcet\" in a request; a request holds "
			    "\"id\", \"spans\", \"expect\", \"settle\" and \"note\"");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_synth_prefix_hashes),
		cmocka_unit_test(test_synth_bytes),
		cmocka_unit_test(test_trace_parse),
		cmocka_unit_test(test_trace_skipped_values_and_ids),
		cmocka_unit_test(test_trace_escapes_and_unknown_keys),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
