/*
 * The selene program's number parser (launch/args.h): counts and sizes with
 * binary suffixes, and everything else refused with the reason: letters,
 * signs, blanks, junk after the digits, overflow past 64 bits and values
 * outside the option's range.
 */
#include "tests/testutil.h"

#include "launch/args.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

static uint64_t parse(const char *text, enum launch_number_kind kind, int want)
{
	char why[128] = "";
	uint64_t v = 777;
	int ret = launch_parse_number(text, kind, 0, UINT64_MAX, &v, why, sizeof(why));

	if (ret != want)
		fail_msg("'%s': %d (wanted %d): %s", text, ret, want, why);
	if (ret)
		assert_int_equal(v, 777); /* untouched */
	return v;
}

/* Sizes take K, M, G, T (binary), with "k" and "KiB" spellings. */
static void test_args_sizes(void **state)
{
	(void)state;
	assert_int_equal(parse("0", LAUNCH_SIZE, 0), 0);
	assert_int_equal(parse("65536", LAUNCH_SIZE, 0), 65536);
	assert_int_equal(parse("64K", LAUNCH_SIZE, 0), 65536);
	assert_int_equal(parse("64k", LAUNCH_SIZE, 0), 65536);
	assert_int_equal(parse("64KiB", LAUNCH_SIZE, 0), 65536);
	assert_int_equal(parse("3M", LAUNCH_SIZE, 0), 3ull << 20);
	assert_int_equal(parse("1G", LAUNCH_SIZE, 0), 1ull << 30);
	assert_int_equal(parse("2T", LAUNCH_SIZE, 0), 2ull << 40);
	assert_int_equal(parse("18446744073709551615", LAUNCH_SIZE, 0), UINT64_MAX);
	assert_int_equal(parse("16777215T", LAUNCH_SIZE, 0), 16777215ull << 40);
}

/* What strtoull would have turned into some other number is refused. */
static void test_args_refuses_junk(void **state)
{
	static const char *const bad[] = { "", "abc", "64Q", "64KB", "64Ki", "64 K", " 64",
					   "-1", "+1", "0x10", "1.5", "1e3", "64K ", "K" };

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		parse(bad[i], LAUNCH_SIZE, -EINVAL);
		parse(bad[i], LAUNCH_COUNT, -EINVAL);
	}
	/* junk after a lower-case k is junk too, not 64K */
	parse("64kB", LAUNCH_SIZE, -EINVAL);
	parse("64kjunk", LAUNCH_SIZE, -EINVAL);
	parse("64k ", LAUNCH_SIZE, -EINVAL);
	/* a count takes no suffix */
	parse("64K", LAUNCH_COUNT, -EINVAL);
	assert_int_equal(launch_parse_number(NULL, LAUNCH_COUNT, 0, 1, &(uint64_t){ 0 }, NULL, 0),
			 -EINVAL);
}

/* Past 64 bits, with or without a suffix, and outside [min, max]. */
static void test_args_ranges(void **state)
{
	char why[128];
	uint64_t v = 0;

	(void)state;
	parse("18446744073709551616", LAUNCH_COUNT, -ERANGE);
	parse("99999999999999999999999", LAUNCH_SIZE, -ERANGE);
	parse("16777216T", LAUNCH_SIZE, -ERANGE);
	parse("17179869184G", LAUNCH_SIZE, -ERANGE);
	assert_int_equal(launch_parse_number("0", LAUNCH_COUNT, 1, 10, &v, why, sizeof(why)),
			 -ERANGE);
	assert_non_null(strstr(why, "least allowed, 1"));
	assert_int_equal(launch_parse_number("11", LAUNCH_COUNT, 1, 10, &v, why, sizeof(why)),
			 -ERANGE);
	assert_non_null(strstr(why, "most allowed, 10"));
	assert_int_equal(launch_parse_number("2K", LAUNCH_SIZE, 1, 2047, &v, why, sizeof(why)),
			 -ERANGE);
	assert_int_equal(launch_parse_number("10", LAUNCH_COUNT, 1, 10, &v, why, sizeof(why)), 0);
	assert_int_equal(v, 10);
}

/* An option's value: a 32-bit target is range-checked before the cast. */
static void test_args_option_u32(void **state)
{
	uint32_t v = 5;

	(void)state;
	assert_false(launch_option_u32("test", "records", "4294967296", LAUNCH_COUNT, 0,
				       UINT32_MAX, &v));
	assert_int_equal(v, 5);
	assert_false(launch_option_u32("test", "records", "abc", LAUNCH_COUNT, 0, UINT32_MAX,
				       &v));
	assert_true(launch_option_u32("test", "records", "4294967295", LAUNCH_COUNT, 0,
				      UINT32_MAX, &v));
	assert_int_equal(v, UINT32_MAX);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_args_sizes),
		cmocka_unit_test(test_args_refuses_junk),
		cmocka_unit_test(test_args_ranges),
		cmocka_unit_test(test_args_option_u32),
	};

	return cmocka_run_group_tests_name("args", tests, NULL, NULL);
}
