/*
 * The selene program's one number parser (docs/DESIGN.md section 8): every
 * subcommand reads counts and sizes through it, so "64K" means 65536
 * everywhere, and "abc", "64Q", "-1", " 5" or a value past its limit is
 * refused with the flag's name instead of becoming some other number. It
 * parses and reports; the caller decides the exit status (usage: 2).
 */
#ifndef SELENE_LAUNCH_ARGS_H
#define SELENE_LAUNCH_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum launch_number_kind {
	LAUNCH_COUNT, /* decimal digits only */
	LAUNCH_SIZE,  /* decimal digits, then an optional K, M, G or T (binary;
			 "KiB" and "k" too) */
};

/*
 * Parses text as a kind into *out, accepting only min <= value <= max.
 * Returns 0, -EINVAL (not a number of that kind; why says what is
 * expected) or -ERANGE (a number outside [min, max], or past 64 bits; why
 * names the limit). *out is written only on success; why may be NULL.
 */
int launch_parse_number(const char *text, enum launch_number_kind kind, uint64_t min,
			uint64_t max, uint64_t *out, char *why, size_t why_size);

/*
 * The same for one option's value: on failure prints "selene COMMAND:
 * --FLAG TEXT: WHY" on stderr and returns false. command is the
 * subcommand ("run", "bench fetch"), flag the option without its dashes.
 */
bool launch_option_u64(const char *command, const char *flag, const char *text,
		       enum launch_number_kind kind, uint64_t min, uint64_t max, uint64_t *out);
bool launch_option_u32(const char *command, const char *flag, const char *text,
		       enum launch_number_kind kind, uint32_t min, uint32_t max, uint32_t *out);

#endif
