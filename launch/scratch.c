/*
 * launch/scratch.h: the fork, the signal forwarding and the removal. The
 * child runs with default signal dispositions; the parent only waits.
 */
#include "launch/scratch.h"

#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t scratch_child;

/* Passes a stop request on to the child; the parent stays to clean up. */
static void scratch_forward(int sig)
{
	if (scratch_child > 0)
		kill((pid_t)scratch_child, sig);
}

static int scratch_remove_one(const char *path, const struct stat *st, int flag,
			      struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path) && errno != ENOENT ? -1 : 0;
}

int launch_scratch_run(const char *what, const char *parent, const char *name,
		       int (*fn)(const char *scratch_path, void *arg), void *arg)
{
	static const int signals[] = { SIGINT, SIGTERM, SIGHUP };
	struct sigaction forward = { .sa_handler = scratch_forward }, old[3];
	char path[1024];
	struct stat st;
	int status = 0;
	pid_t pid;

	if (stat(parent, &st) != 0) {
		fprintf(stderr, "%s: %s: %s\n", what, parent, strerror(errno));
		return 1;
	}
	if (!S_ISDIR(st.st_mode)) {
		fprintf(stderr, "%s: %s: not a directory\n", what, parent);
		return 1;
	}
	_Static_assert(sizeof(path) >= LAUNCH_SCRATCH_PATH_MAX, "a scratch path fits");
	if ((size_t)snprintf(path, sizeof(path), "%s/%s.%d", parent, name, (int)getpid()) >=
	    LAUNCH_SCRATCH_PATH_MAX) {
		fprintf(stderr, "%s: %s: too long a path (the scratch directory in it must "
			"name fewer than %u bytes)\n", what, parent, LAUNCH_SCRATCH_PATH_MAX);
		return 1;
	}
	if (mkdir(path, 0755) != 0) {
		fprintf(stderr, "%s: cannot make %s: %s\n", what, path, strerror(errno));
		return 1;
	}
	fflush(NULL); /* nothing buffered is written twice */
	sigemptyset(&forward.sa_mask);
	/* a signal the caller ignores (nohup, a background job) stays ignored */
	for (int i = 0; i < 3; i++) {
		sigaction(signals[i], NULL, &old[i]);
		if (old[i].sa_handler != SIG_IGN)
			sigaction(signals[i], &forward, NULL);
	}
	pid = fork();
	if (pid == 0) {
		for (int i = 0; i < 3; i++)
			sigaction(signals[i], &old[i], NULL);
		status = fn(path, arg);
		fflush(NULL);
		_exit(status);
	}
	if (pid < 0) {
		fprintf(stderr, "%s: cannot start: %s\n", what, strerror(errno));
		status = 1;
	} else {
		scratch_child = pid;
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
		scratch_child = 0;
		status = WIFEXITED(status) ? WEXITSTATUS(status) :
			 WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
	}
	for (int i = 0; i < 3; i++)
		sigaction(signals[i], &old[i], NULL);
	if (launch_remove_tree(path) != 0) {
		fprintf(stderr, "%s: cannot remove %s: %s\n", what, path, strerror(errno));
		status = status ? status : 1;
	}
	return status;
}

int launch_remove_tree(const char *path)
{
	return nftw(path, scratch_remove_one, 16, FTW_DEPTH | FTW_PHYS);
}
