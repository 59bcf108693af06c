/*
 * The selene program: dispatches to a subcommand. It holds no logic of its
 * own beyond the command table and the top-level help.
 */
#include "launch/commands.h"

#include "common/failpoint.h"
#include "selene/selene.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
};

static const struct command commands[] = {
	{ "bench", launch_cmd_bench,
	  "store, fetch and copy throughput beside the raw disk and copy paths" },
	{ "cluster-demo", launch_cmd_cluster_demo,
	  "one rank of a store across ranks: store, restore, restart every rank, restore" },
	{ "demo", launch_cmd_demo,
	  "write, restart, restore and verify a checkpoint chain on one rank" },
	{ "failpoints", launch_cmd_failpoints,
	  "list the failpoints SELENE_FAILPOINTS can arm" },
	{ "ls", launch_cmd_ls, "list the records in a record or base directory" },
	{ "pool", launch_cmd_pool,
	  "a pool manager: instances share prefix-cache records through it" },
	{ "run", launch_cmd_run,
	  "one rank of the reference TP worker: a trace through GPU cache and store" },
	{ "verify", launch_cmd_verify,
	  "check every record's header, pages and row; exit 1 if any is bad" },
};

static void usage(FILE *out)
{
	fprintf(out,
		"usage: selene COMMAND [ARGS...]\n"
		"       selene COMMAND --help\n"
		"\n"
		"Selene stores an inference server's prefix-cache checkpoints in\n"
		"record files, one directory per rank and namespace.\n"
		"\n"
		"commands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(out, "  %-12s %s\n", commands[i].name, commands[i].summary);
	fprintf(out,
		"\n"
		"options:\n"
		"  -h, --help   this help\n"
		"  --version    print the version\n"
		"\n"
		"environment:\n"
		"  SELENE_LOG=error|warn|info|debug   log level (default info)\n"
		"  SELENE_FAILPOINTS=NAME=ACTION;...  arm failpoints (see 'selene failpoints')\n"
		"  SELENE_FAILPOINTS_ALLOW_FATAL=1    let them use kill and abort\n"
		"\n"
		"exit status, every command:\n"
		"  0   done: everything checked was good\n"
		"  1   the command ran and failed or found a problem: a bad record, a\n"
		"      missing or unreadable directory or file, a failed store or restore\n"
		"  2   usage: an unknown command, flag or operand, a malformed value, or a\n"
		"      launch variable (SELENE_*, Open MPI's) malformed or missing;\n"
		"      nothing was done\n");
}

int launch_expand_rank(char *out, size_t size, const char *pattern, uint32_t rank)
{
	size_t n = 0;

	for (const char *p = pattern; *p; p++) {
		if (n + 12 >= size) {
			out[0] = '\0';
			return -ENAMETOOLONG;
		}
		if (p[0] == '%' && p[1] == 'r') {
			n += (size_t)snprintf(out + n, size - n, "%u", rank);
			p++;
		} else {
			out[n++] = *p;
		}
	}
	out[n] = '\0';
	return 0;
}

int launch_wants_help(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
			return 1;
	return 0;
}

/*
 * The failpoints' kill and abort actions, which the library leaves to its
 * host (common/failpoint.h): this program means them, for the fault loops.
 */
static void die_at_failpoint(bool abort_it)
{
	if (abort_it)
		abort();
	raise(SIGKILL);
	_exit(137);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return LAUNCH_EXIT_USAGE;
	}
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return LAUNCH_EXIT_OK;
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("selene %s\n", sel_version());
		return LAUNCH_EXIT_OK;
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		char why[256];

		if (strcmp(argv[1], commands[i].name) != 0)
			continue;
		/* Every command, the record-layer ones too, sees the failpoints. */
		sel_failpoints_set_fatal(die_at_failpoint);
		if (sel_failpoints_from_env(why, sizeof(why)) != 0) {
			fprintf(stderr, "selene: %s\n", why);
			/* The names the message points at are still listed. */
			if (strcmp(argv[1], "failpoints") == 0)
				commands[i].run(argc - 1, argv + 1);
			return LAUNCH_EXIT_USAGE;
		}
		return commands[i].run(argc - 1, argv + 1);
	}
	fprintf(stderr, "selene: unknown command '%s'\n\n", argv[1]);
	usage(stderr);
	return LAUNCH_EXIT_USAGE;
}

int launch_cmd_failpoints(int argc, char **argv)
{
	if (launch_wants_help(argc, argv)) {
		printf("usage: selene failpoints\n\n"
		       "Lists every failpoint with when it is evaluated. Arm them with\n"
		       "SELENE_FAILPOINTS='NAME=TERM[->TERM...];NAME=...' where TERM is\n"
		       "[COUNT*]ACTION and ACTION is off, return, return(ERRNO), short,\n"
		       "kill, abort, sleep(MS) or print. Example:\n"
		       "  SELENE_FAILPOINTS='record.after_rename=1*kill;disk.write=3*off->return(EIO)'\n");
		return LAUNCH_EXIT_OK;
	}
	if (argc > 1) {
		fprintf(stderr, "selene failpoints: takes no arguments\n");
		return LAUNCH_EXIT_USAGE;
	}
	for (int i = 0; i < SEL_FAILPOINT_COUNT; i++)
		printf("%-26s %s\n", sel_failpoint_name((enum sel_failpoint)i),
		       sel_failpoint_doc((enum sel_failpoint)i));
	return LAUNCH_EXIT_OK;
}
