/* Resolving within a deadline: see resolve.h. */
#include "cluster/resolve.h"

#include "common/base.h"
#include "common/failpoint.h"
#include "selene/selene.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* One name's resolution, shared by the caller and its helper thread. */
struct resolve_job {
	pthread_mutex_t lock;
	pthread_cond_t answered;
	uint32_t holders;        /* the caller and the helper: the last one frees */
	bool done;
	int gai;                 /* getaddrinfo's answer */
	int gai_errno;           /* errno with EAI_SYSTEM */
	struct addrinfo *result; /* the caller's once taken, else freed with the job */
	char host[NI_MAXHOST];
	char port[NI_MAXSERV];
};

static struct timespec timespec_from_ns(uint64_t ns)
{
	return (struct timespec){ .tv_sec = (time_t)(ns / 1000000000u),
				  .tv_nsec = (long)(ns % 1000000000u) };
}

/* Drops one holder; the last frees the job and an answer no one took. */
static void resolve_job_release(struct resolve_job *job)
{
	bool last;

	pthread_mutex_lock(&job->lock);
	last = --job->holders == 0;
	pthread_mutex_unlock(&job->lock);
	if (!last)
		return;
	if (job->result)
		freeaddrinfo(job->result);
	pthread_cond_destroy(&job->answered);
	pthread_mutex_destroy(&job->lock);
	free(job);
}

static void *resolve_main(void *arg)
{
	struct resolve_job *job = arg;
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *result = NULL;
	int injected = SEL_FAILPOINT(SEL_FP_PEER_RESOLVE), gai;

	if (injected < 0)
		gai = injected == -EAGAIN ? EAI_AGAIN : EAI_FAIL;
	else
		gai = getaddrinfo(job->host, job->port, &hints, &result);
	pthread_mutex_lock(&job->lock);
	job->gai = gai;
	job->gai_errno = errno;
	job->result = gai == 0 ? result : NULL;
	job->done = true;
	pthread_cond_signal(&job->answered);
	pthread_mutex_unlock(&job->lock);
	resolve_job_release(job);
	return NULL;
}

/*
 * One try on a helper thread: 0 with its answer in *gai (and *out when it
 * is 0), -ETIMEDOUT when deadline passed first, or the thread's refusal.
 */
static int resolve_on_helper(const char *host, const char *port, uint64_t deadline,
			     struct addrinfo **out, int *gai, int *gai_errno)
{
	struct resolve_job *job = calloc(1, sizeof(*job));
	struct timespec until = timespec_from_ns(deadline);
	pthread_condattr_t attr;
	pthread_t thread;
	int ret;

	if (!job)
		return -ENOMEM;
	snprintf(job->host, sizeof(job->host), "%s", host);
	snprintf(job->port, sizeof(job->port), "%s", port);
	pthread_mutex_init(&job->lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&job->answered, &attr);
	pthread_condattr_destroy(&attr);
	job->holders = 2;
	ret = sel_thread_start(&thread, resolve_main, job);
	if (ret) {
		job->holders = 1;
		resolve_job_release(job);
		return ret;
	}
	pthread_detach(thread);
	pthread_mutex_lock(&job->lock);
	while (!job->done && ret == 0)
		ret = -(deadline ? pthread_cond_timedwait(&job->answered, &job->lock, &until) :
				   pthread_cond_wait(&job->answered, &job->lock));
	if (job->done) {
		ret = 0;
		*gai = job->gai;
		*gai_errno = job->gai_errno;
		*out = job->result;
		job->result = NULL;
	}
	pthread_mutex_unlock(&job->lock);
	resolve_job_release(job);
	return ret;
}

static void resolve_pause(uint64_t deadline)
{
	uint64_t now = sel_monotonic_ns(), pause_ns = CLUSTER_RESOLVE_RETRY_MS * 1000000ull;
	struct timespec pause;

	if (now >= deadline)
		return;
	if (deadline - now < pause_ns)
		pause_ns = deadline - now;
	pause = timespec_from_ns(pause_ns);
	nanosleep(&pause, NULL);
}

int cluster_resolve(const char *host, const char *port, uint64_t deadline,
		    struct addrinfo **out, char *err, size_t err_size)
{
	struct addrinfo numeric = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST };
	int gai = 0, gai_errno = 0, ret;

	*out = NULL;
	if (strlen(host) >= NI_MAXHOST)
		return sel_fail(-EINVAL, err, err_size, "cannot resolve %.64s...: the host name "
				 "is longer than %d bytes", host, NI_MAXHOST - 1);
	if (strlen(port) >= NI_MAXSERV)
		return sel_fail(-EINVAL, err, err_size, "cannot resolve %s: the port %.16s... is "
				 "longer than %d bytes", host, port, NI_MAXSERV - 1);
	if (getaddrinfo(host, port, &numeric, out) == 0)
		return 0; /* an address, not a name: nothing to wait for */
	for (;;) {
		ret = deadline && sel_monotonic_ns() >= deadline ? -ETIMEDOUT :
			resolve_on_helper(host, port, deadline, out, &gai, &gai_errno);
		if (ret == -ETIMEDOUT)
			return sel_fail(ret, err, err_size, "cannot resolve %s: no answer "
					 "from the resolver before the deadline", host);
		if (ret)
			return sel_fail(ret, err, err_size, "cannot resolve %s on a helper "
					 "thread: %s", host, sel_strerror(ret));
		if (gai != EAI_AGAIN || deadline == 0)
			break;
		resolve_pause(deadline);
		if (sel_monotonic_ns() >= deadline)
			return sel_fail(-ETIMEDOUT, err, err_size, "cannot resolve %s: %s, "
					 "still at the deadline", host, gai_strerror(gai));
	}
	if (gai == 0)
		return 0;
	return sel_fail(-EHOSTUNREACH, err, err_size, "cannot resolve %s: %s", host,
			 gai == EAI_SYSTEM ? strerror(gai_errno) : gai_strerror(gai));
}
