/*
 * The worker's step channel (launch/worker/step.h) over MPI, where this program was
 * built with Open MPI's headers (SEL_HAVE_MPI); otherwise only a world of one.
 * Nonblocking collectives completed by polling with 50 us sleeps: a blocking
 * MPI call spins, and on a host with fewer cores than ranks a spinning peer
 * starves the store's own threads.
 */
#include "launch/worker/step.h"

#include "common/base.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#ifdef SEL_HAVE_MPI
#include <mpi.h>

/* Polls request to its end, or for at most timeout_ms (0: no limit). */
static int wait_polling_within(MPI_Request *request, uint32_t timeout_ms)
{
	const struct timespec pause = { 0, 50000 };
	uint64_t start = sel_monotonic_ns();

	for (;;) {
		int done = 0;

		if (MPI_Test(request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
			return -EIO;
		if (done)
			return 0;
		if (timeout_ms && sel_monotonic_ns() - start >= timeout_ms * 1000000ull)
			return -ETIMEDOUT;
		nanosleep(&pause, NULL);
	}
}

static int wait_polling(MPI_Request *request)
{
	return wait_polling_within(request, 0);
}

bool launch_step_available(const struct launch_bootstrap *b)
{
	return b->mpi || b->cluster.world_size <= 1;
}

int launch_step_broadcast(const struct launch_bootstrap *b, void *buf, size_t capacity,
			  size_t *bytes)
{
	uint64_t size = b->cluster.rank == 0 ? *bytes : 0;
	MPI_Request request;
	int ret;

	if (b->cluster.world_size <= 1)
		return 0;
	if (!b->mpi)
		return -ENOTSUP;
	if (MPI_Ibcast(&size, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD, &request) != MPI_SUCCESS)
		return -EIO;
	ret = wait_polling(&request);
	if (ret)
		return ret;
	/* every rank learns the size first, so all agree to skip a too-large step */
	if (size > capacity || size > (uint64_t)INT32_MAX)
		return -EMSGSIZE;
	if (MPI_Ibcast(buf, (int)size, MPI_BYTE, 0, MPI_COMM_WORLD, &request) != MPI_SUCCESS)
		return -EIO;
	*bytes = (size_t)size;
	return wait_polling(&request);
}

/* launch_step_sum for at most timeout_ms (0: no limit). */
static int sum_polling(const struct launch_bootstrap *b, uint64_t *values, uint32_t count,
		       uint32_t timeout_ms)
{
	MPI_Request request;

	if (b->cluster.world_size <= 1)
		return 0;
	if (!b->mpi)
		return -ENOTSUP;
	if (MPI_Iallreduce(MPI_IN_PLACE, values, (int)count, MPI_UINT64_T, MPI_SUM,
			   MPI_COMM_WORLD, &request) != MPI_SUCCESS)
		return -EIO;
	return wait_polling_within(&request, timeout_ms);
}

int launch_step_sum(const struct launch_bootstrap *b, uint64_t *values, uint32_t count)
{
	return sum_polling(b, values, count, 0);
}

int launch_step_sum_within(const struct launch_bootstrap *b, uint64_t *values, uint32_t count,
			   uint32_t timeout_ms)
{
	return sum_polling(b, values, count, timeout_ms ? timeout_ms : 1);
}

void launch_step_abort(const struct launch_bootstrap *b, int status)
{
	if (b->mpi)
		MPI_Abort(MPI_COMM_WORLD, status);
}

#else

bool launch_step_available(const struct launch_bootstrap *b)
{
	return b->cluster.world_size <= 1;
}

int launch_step_broadcast(const struct launch_bootstrap *b, void *buf, size_t capacity,
			  size_t *bytes)
{
	(void)buf;
	(void)capacity;
	(void)bytes;
	return b->cluster.world_size <= 1 ? 0 : -ENOTSUP;
}

int launch_step_sum(const struct launch_bootstrap *b, uint64_t *values, uint32_t count)
{
	(void)values;
	(void)count;
	return b->cluster.world_size <= 1 ? 0 : -ENOTSUP;
}

int launch_step_sum_within(const struct launch_bootstrap *b, uint64_t *values, uint32_t count,
			   uint32_t timeout_ms)
{
	(void)timeout_ms;
	return launch_step_sum(b, values, count);
}

void launch_step_abort(const struct launch_bootstrap *b, int status)
{
	(void)b;
	(void)status;
}

#endif
