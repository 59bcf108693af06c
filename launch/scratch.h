/*
 * A scratch directory that never outlives its command (selene bench): the
 * work runs in a child process inside a fresh directory, and the parent
 * removes that directory once the child has ended, however it ended (done,
 * failed, crashed, or stopped by SIGINT, SIGTERM or SIGHUP), so an
 * interrupted benchmark leaves no record files behind. Because the parent
 * removes only after the child is gone, no thread can still be writing
 * there.
 */
#ifndef SELENE_LAUNCH_SCRATCH_H
#define SELENE_LAUNCH_SCRATCH_H

#define LAUNCH_SCRATCH_PATH_MAX 384u
#define LAUNCH_SCRATCH_NAMES_MAX 128u

/*
 * Makes parent/NAME.PID (parent must be an existing directory: nothing is
 * made above it), runs fn(scratch_path, arg) in a child process, removes
 * the scratch directory and everything in it, and returns fn's result as
 * an exit status: fn's own value (0 to 125) when the child exited, 128 +
 * the signal when a signal ended it, 1 when the scratch directory could
 * not be made or the child not started (said on stderr, prefixed with
 * what). A scratch path of LAUNCH_SCRATCH_PATH_MAX bytes or more is
 * refused (1, said), so that fn's own names under it (at most
 * LAUNCH_SCRATCH_NAMES_MAX bytes more, in buffers that hold both) are
 * never cut short: cut short, a name could name another directory, which
 * fn's cleanup would then remove. The parent forwards SIGINT, SIGTERM and SIGHUP to the child,
 * unless the caller ignores them (they stay ignored in both).
 */
int launch_scratch_run(const char *what, const char *parent, const char *name,
		       int (*fn)(const char *scratch_path, void *arg), void *arg);

/*
 * Removes path and everything under it, deepest first, never following a
 * symlink (it is removed, not what it names); what is already gone is no
 * failure. 0, or -1 with errno set by the first removal that failed.
 */
int launch_remove_tree(const char *path);

#endif
