/*
 * The selene program's number parser (launch/args.h). Strict by design:
 * strtoull's habits (leading blanks, a sign, base prefixes, stopping at the
 * first bad character, wrapping a negative number) are exactly what turned
 * "--plane-bytes 64K" into 64 and "--records abc" into a default.
 */
#include "launch/args.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* The binary unit a suffix names, as a shift; 0 for none, -1 for junk. */
static int size_shift(const char *suffix)
{
	static const char units[] = "KMGT";
	const char *unit;

	if (*suffix == '\0')
		return 0;
	/* "k" spells K; what follows it is checked below like any unit's */
	unit = strchr(units, *suffix == 'k' ? 'K' : *suffix);
	if (!unit || *unit == '\0')
		return -1;
	if (suffix[1] != '\0' && strcmp(suffix + 1, "iB") != 0)
		return -1;
	return 10 * (int)(unit - units + 1);
}

static void describe(char *why, size_t why_size, const char *fmt, uint64_t v)
{
	if (why && why_size)
		snprintf(why, why_size, fmt, v);
}

int launch_parse_number(const char *text, enum launch_number_kind kind, uint64_t min,
			uint64_t max, uint64_t *out, char *why, size_t why_size)
{
	const char *p = text;
	uint64_t v = 0;
	int shift;

	if (!text || *p < '0' || *p > '9') {
		describe(why, why_size, kind == LAUNCH_SIZE ? "not a size (digits, then "
			 "an optional K, M, G or T)" : "not a number (digits only)", 0);
		return -EINVAL;
	}
	for (; *p >= '0' && *p <= '9'; p++) {
		unsigned digit = (unsigned)(*p - '0');

		if (v > (UINT64_MAX - digit) / 10) {
			describe(why, why_size, "more than the most allowed, %" PRIu64,
				 max);
			return -ERANGE;
		}
		v = v * 10 + digit;
	}
	shift = kind == LAUNCH_SIZE ? size_shift(p) : (*p ? -1 : 0);
	if (shift < 0) {
		describe(why, why_size, kind == LAUNCH_SIZE ? "not a size (digits, then "
			 "an optional K, M, G or T)" : "not a number (digits only)", 0);
		return -EINVAL;
	}
	if (shift && v > (UINT64_MAX >> shift)) {
		describe(why, why_size, "more than the most allowed, %" PRIu64, max);
		return -ERANGE;
	}
	v <<= shift;
	if (v < min) {
		describe(why, why_size, "less than the least allowed, %" PRIu64, min);
		return -ERANGE;
	}
	if (v > max) {
		describe(why, why_size, "more than the most allowed, %" PRIu64, max);
		return -ERANGE;
	}
	*out = v;
	return 0;
}

bool launch_option_u64(const char *command, const char *flag, const char *text,
		       enum launch_number_kind kind, uint64_t min, uint64_t max, uint64_t *out)
{
	char why[128];

	if (launch_parse_number(text, kind, min, max, out, why, sizeof(why)) == 0)
		return true;
	fprintf(stderr, "selene %s: --%s %s: %s\n", command, flag, text ? text : "", why);
	return false;
}

bool launch_option_u32(const char *command, const char *flag, const char *text,
		       enum launch_number_kind kind, uint32_t min, uint32_t max, uint32_t *out)
{
	uint64_t v;

	if (!launch_option_u64(command, flag, text, kind, min, max, &v))
		return false;
	*out = (uint32_t)v;
	return true;
}
