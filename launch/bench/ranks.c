/*
 * The benches' forked peers on loopback (bench_ranks.h): the listening
 * socket, each peer's life in its child, and reaping them. Not a launcher:
 * selene run and selene cluster start ranks their own way.
 */
#include "launch/bench/ranks.h"
#include "launch/commands.h"

#include "common/base.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

void bench_ranks_init(struct bench_ranks *b, const char *name, uint32_t world,
		      uint32_t join_timeout_ms, uint32_t silence_timeout_ms,
		      uint32_t job_timeout_ms, uint8_t secret_fill,
		      const struct bench_ranks_peer *peer)
{
	SEL_ASSERT(world >= 1 && world <= BENCH_RANKS_MAX);
	*b = (struct bench_ranks){
		.name = name, .world = world, .peer = peer,
		.cluster = {
			.rank = 0, .world_size = world, .coordinator_host = "127.0.0.1",
			.listen_fd = -1, .join_timeout_ms = join_timeout_ms,
			.silence_timeout_ms = silence_timeout_ms,
			.job_timeout_ms = job_timeout_ms,
		},
	};
	memset(b->cluster.secret, secret_fill, sizeof(b->cluster.secret));
}

static int bench_ranks_listen(struct bench_ranks *b)
{
	struct sockaddr_in addr = { .sin_family = AF_INET };
	socklen_t len = sizeof(addr);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
	if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) || listen(fd, (int)b->world) ||
	    getsockname(fd, (struct sockaddr *)&addr, &len)) {
		int ret = -errno;

		close(fd);
		return ret;
	}
	b->cluster.coordinator_port = ntohs(addr.sin_port);
	b->cluster.listen_fd = fd;
	return 0;
}

/* A peer: joins rank zero, runs jobs until rank zero's connection ends. */
static void bench_ranks_peer_main(struct bench_ranks *b, uint32_t rank)
{
	const struct bench_ranks_peer *p = b->peer;
	struct bench_ranks_config c;
	char err[256];
	sel_peer *peer;
	int ret;

	close(b->cluster.listen_fd);
	b->cluster.rank = rank;
	b->cluster.listen_fd = -1;
	ret = p->configure(p->arg, rank, &c, err, sizeof(err));
	if (!ret)
		ret = sel_peer_start(&c.store, &peer, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "selene bench %s: rank %u: %s\n", b->name, rank, err);
		_exit(LAUNCH_EXIT_BAD);
	}
	if (p->started)
		p->started(p->arg, rank, peer);
	ret = sel_peer_wait(peer);
	sel_peer_stop(peer);
	if (p->stopped)
		p->stopped(p->arg, rank);
	_exit(ret ? 3 : 0);
}

int bench_ranks_start(struct bench_ranks *b)
{
	int ret = 0;

	if (b->world < 2)
		return 0;
	ret = bench_ranks_listen(b);
	/* The children must not write this process's buffered output again. */
	fflush(NULL);
	for (uint32_t rank = 1; !ret && rank < b->world; rank++) {
		pid_t pid = fork();

		if (pid < 0)
			ret = -errno;
		else if (pid == 0)
			bench_ranks_peer_main(b, rank);
		else
			b->pids[rank] = pid;
	}
	if (ret)
		fprintf(stderr, "selene bench %s: %s\n", b->name, sel_strerror(ret));
	return ret;
}

int bench_ranks_stop(struct bench_ranks *b, int ret)
{
	int peer_failures = 0;

	if (b->cluster.listen_fd >= 0)
		close(b->cluster.listen_fd);
	b->cluster.listen_fd = -1;
	for (uint32_t rank = 1; rank < b->world; rank++) {
		int status;

		if (b->pids[rank] <= 0)
			continue;
		if (ret)
			kill(b->pids[rank], SIGKILL);
		if (waitpid(b->pids[rank], &status, 0) == b->pids[rank] &&
		    !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
			peer_failures++;
		b->pids[rank] = 0;
	}
	if (!ret && peer_failures) {
		fprintf(stderr, "selene bench %s: %d %s exited with an error\n", b->name,
			peer_failures, launch_plural((uint64_t)peer_failures, "peer", "peers"));
		ret = -EIO;
	}
	return ret;
}
