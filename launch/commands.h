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

/* Exit statuses shared by every subcommand. */
enum {
	LAUNCH_EXIT_OK = 0,
	LAUNCH_EXIT_BAD = 1,   /* the command ran and found a problem */
	LAUNCH_EXIT_USAGE = 2, /* bad arguments: a flag, a value, an operand */
};

/*
 * pattern into out with every %r replaced by rank (a per-rank directory).
 * Returns 0, or -ENAMETOOLONG (out empty) when the result does not fit:
 * a path cut short would name another directory.
 */
int launch_expand_rank(char *out, size_t size, const char *pattern, uint32_t rank);

/* True when argv holds -h or --help. */
int launch_wants_help(int argc, char **argv);

#endif
