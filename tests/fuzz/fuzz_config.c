/*
 * libFuzzer target for the failpoint configuration parser
 * (common/failpoint.c), the text SELENE_FAILPOINTS carries: any bytes as a
 * configuration. A refused one must keep the previous configuration; an
 * accepted one must parse the same way twice, and clearing must always
 * work. Nothing here evaluates a point, so kill and abort never act.
 * Build with `make fuzz-build`, run with `make fuzz` or `make torture`.
 */
#include "common/failpoint.h"

#include "selene/selene.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define CONFIG_BYTES_MAX 4096

static int stderr_fd = -1, null_fd = -1;

/* A refused configuration logs an error line; millions of them would make
 * the run about stderr. Inputs run with stderr on /dev/null, and libFuzzer
 * still saves any crashing input as a file. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	stderr_fd = dup(2);
	null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	return 0;
}

static void quiet(bool on)
{
	if (stderr_fd >= 0 && null_fd >= 0)
		dup2(on ? null_fd : stderr_fd, 2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char known[] = "disk.write=3*off->return(EIO)";
	char text[CONFIG_BYTES_MAX + 1];
	int first;

	if (size > CONFIG_BYTES_MAX)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	quiet(true);
	if (sel_failpoints_configure(known) != 0)
		__builtin_trap();
	first = sel_failpoints_configure(text);
	if (first != 0 && first != SEL_EFAILPOINT)
		__builtin_trap();
	/* refused: the known configuration is still armed */
	if (first != 0 && !sel_failpoints_armed)
		__builtin_trap();
	/* the same text, parsed again, gives the same answer */
	if (sel_failpoints_configure(text) != first)
		__builtin_trap();
	if (sel_failpoints_configure(NULL) != 0 || sel_failpoints_armed)
		__builtin_trap();
	quiet(false);
	return 0;
}
