/*
 * The selene program's subcommands. Each takes its own argv (argv[0] is the
 * subcommand's name) and returns the process exit status.
 */
#ifndef SELENE_LAUNCH_COMMANDS_H
#define SELENE_LAUNCH_COMMANDS_H

#include <stddef.h>
#include <stdint.h>

int launch_cmd_ls(int argc, char **argv);
int launch_cmd_verify(int argc, char **argv);
int launch_cmd_failpoints(int argc, char **argv);
int launch_cmd_demo(int argc, char **argv);
int launch_cmd_bench(int argc, char **argv);
int launch_cmd_cluster_demo(int argc, char **argv);
int launch_cmd_run(int argc, char **argv);
int launch_cmd_pool(int argc, char **argv);

/*
 * Exit statuses shared by every subcommand (the top-level --help says
 * them): 2 only for what is wrong before anything runs, in the command
 * line or the launch environment; whatever the command meets while it
 * runs (a missing or unreadable directory, a bad record, a failed store)
 * is 1.
 */
enum {
	LAUNCH_EXIT_OK = 0,
	LAUNCH_EXIT_BAD = 1,   /* the command ran and failed or found a problem */
	LAUNCH_EXIT_USAGE = 2, /* bad arguments: a command, flag, value, operand or
				* launch variable malformed or missing */
};

/* one when n is 1, else many: "1 rank", "0 ranks", "2 ranks". */
static inline const char *launch_plural(uint64_t n, const char *one, const char *many)
{
	return n == 1 ? one : many;
}

/*
 * pattern into out with every %r replaced by rank (a per-rank directory).
 * Returns 0, or -ENAMETOOLONG (out empty) when the result does not fit:
 * a path cut short would name another directory.
 */
int launch_expand_rank(char *out, size_t size, const char *pattern, uint32_t rank);

/* True when argv holds -h or --help. */
int launch_wants_help(int argc, char **argv);

#endif
