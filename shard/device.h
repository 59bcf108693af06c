/*
 * The device interface of a rank's shard engine (docs/DESIGN.md section 6): copy
 * page planes and state rows between device memory and host slots. Two
 * backends: "host" (planes in ordinary memory, copied with memcpy; for tests
 * and machines without a GPU) and "cuda" (libcuda.so.1 through dlopen; see
 * device_cuda.c). A device is used by one thread at a time: the transfer
 * thread, which makes it current with shard_device_bind.
 */
#ifndef SELENE_SHARD_DEVICE_H
#define SELENE_SHARD_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* At most this much and this many entries in one batched copy call. */
#define SHARD_COPY_BATCH_BYTES_MAX (16ull << 20)
#define SHARD_COPY_BATCH_ENTRIES_MAX 4096u
/* Marks a device keeps (shard_device_mark's numbers: 0 to this less one). */
#define SHARD_DEVICE_MARKS 4u

enum shard_copy_direction {
	SHARD_DEVICE_TO_HOST,
	SHARD_HOST_TO_DEVICE,
};

struct shard_copy {
	uint64_t device_address; /* a CUdeviceptr, or a host address for "host" */
	void *host;
	uint64_t bytes;
};

/*
 * A strided copy: rows rows of bytes each, row r between host + r *
 * host_pitch and device_address + r * device_pitch. Plane k of a run of
 * page records that lie a stride apart in a record image (the pool's
 * arena, a claim window), going to consecutive page ids, is one entry.
 */
struct shard_copy_strided {
	uint64_t device_address;
	uint64_t device_pitch;
	void *host;
	uint64_t host_pitch;
	uint64_t bytes;
	uint32_t rows;
};

/* A pitch past this is not given to a backend: its rows go one by one. */
#define SHARD_COPY_PITCH_MAX ((1ull << 31) - 1)

struct shard_device;

struct shard_device_ops {
	const char *name;
	/* Makes the device current on the calling (transfer) thread. */
	int (*bind)(struct shard_device *dev);
	int (*register_host)(struct shard_device *dev, void *ptr, uint64_t bytes);
	void (*unregister_host)(struct shard_device *dev, void *ptr);
	/* Issues copies (asynchronously where the device can). */
	int (*copy)(struct shard_device *dev, enum shard_copy_direction dir,
		    const struct shard_copy *copies, uint32_t count);
	/* Waits until every issued copy finished; reports the first failure. */
	int (*synchronize)(struct shard_device *dev);
	void (*close)(struct shard_device *dev);
	/*
	 * Registers memory mapped read-only (PROT_READ), which the device only
	 * reads from; NULL: register_host serves (shard_device_register_read_only).
	 */
	int (*register_read_only)(struct shard_device *dev, const void *ptr, uint64_t bytes);
	/*
	 * Records mark number mark (below SHARD_DEVICE_MARKS) behind every
	 * copy issued so far; recording a number again replaces it. NULL:
	 * nothing is recorded (shard_device_mark).
	 */
	int (*mark)(struct shard_device *dev, uint32_t mark);
	/*
	 * Waits until every copy issued before mark was recorded finished, and
	 * reports the first failure among them; copies issued after it may
	 * still run. NULL: synchronize serves (shard_device_wait_mark).
	 */
	int (*wait_mark)(struct shard_device *dev, uint32_t mark);
	/*
	 * copy returns only once its copies finished (the host backend): a
	 * caller has nothing to overlap with them.
	 */
	bool copies_synchronous;
	/*
	 * Issues strided copies (each one driver call where the device can);
	 * every row of bytes, every pitch at most SHARD_COPY_PITCH_MAX and at
	 * least bytes. NULL: shard_device_copy_strided issues each row as an
	 * entry of copy.
	 */
	int (*copy_strided)(struct shard_device *dev, enum shard_copy_direction dir,
			    const struct shard_copy_strided *copies, uint32_t count);
	/*
	 * bind that first says what was current on the calling thread, and
	 * putting that back (shard_device_bind_for). NULL: bind, and nothing
	 * to put back.
	 */
	int (*bind_saving)(struct shard_device *dev, void **previous);
	void (*restore)(struct shard_device *dev, void *previous);
};

struct shard_device {
	const struct shard_device_ops *ops;
	uint64_t batch_calls;  /* copy calls issued to the driver */
	uint64_t bytes_copied;
};

/* The host backend: device addresses are host pointers. */
int shard_device_open_host(struct shard_device **out);

/*
 * The host backend's copy: each entry by memcpy, its device address a host
 * pointer (also for devices built on it, as the tests' deferred ones).
 */
void shard_copy_in_memory(enum shard_copy_direction dir, const struct shard_copy *copies,
			  uint32_t count);

/*
 * The CUDA backend on device ordinal. Returns 0, or a negative code with
 * the reason in why ("libcuda.so.1 not found: ...", "no CUDA device").
 */
int shard_device_open_cuda(int ordinal, struct shard_device **out, char *why,
			   size_t why_size);

/*
 * "auto" (cuda when it opens, else host when allow_host), "cuda" or
 * "host". Returns 0, or a negative code with why.
 */
int shard_device_open(const char *kind, int ordinal, struct shard_device **out,
		      char *why, size_t why_size);

/*
 * Copies a list in calls of at most SHARD_COPY_BATCH_BYTES_MAX bytes and
 * SHARD_COPY_BATCH_ENTRIES_MAX entries, splitting entries that are larger.
 * On a failure the batches already issued may still be running: the caller
 * synchronizes before it reuses or reports anything they touch.
 */
int shard_device_copy(struct shard_device *dev, enum shard_copy_direction dir,
		      const struct shard_copy *copies, uint32_t count);

/*
 * Issues strided copies: each through the device's copy_strided where it
 * has one and the entry's pitches allow, in pieces of whole rows of at
 * most SHARD_COPY_BATCH_BYTES_MAX bytes; its rows as copy entries
 * otherwise. Failures and waiting as shard_device_copy.
 */
int shard_device_copy_strided(struct shard_device *dev, enum shard_copy_direction dir,
			      const struct shard_copy_strided *copies, uint32_t count);

static inline int shard_device_synchronize(struct shard_device *dev)
{
	return dev->ops->synchronize(dev);
}

/*
 * Marks: a caller that issues several jobs' copies back to back records a
 * mark behind each job's and waits for one job's alone (the engine's
 * pipelined warm fetches, docs/DESIGN.md section 6).
 */
static inline int shard_device_mark(struct shard_device *dev, uint32_t mark)
{
	return dev->ops->mark ? dev->ops->mark(dev, mark) : 0;
}

static inline int shard_device_wait_mark(struct shard_device *dev, uint32_t mark)
{
	return dev->ops->wait_mark ? dev->ops->wait_mark(dev, mark) :
				     dev->ops->synchronize(dev);
}

static inline int shard_device_bind(struct shard_device *dev)
{
	return dev->ops->bind(dev);
}

/* What was current on a thread before shard_device_bind_for. */
struct shard_device_binding {
	void *previous;
};

/*
 * Makes the device current on the calling thread for a few calls (an
 * unregistration at close, on the application's thread) and remembers
 * what was current there: shard_device_unbind puts it back, so the
 * application's own context is left as it was. Returns 0, or the device's
 * failure (then there is nothing to undo).
 */
int shard_device_bind_for(struct shard_device *dev, struct shard_device_binding *binding);
void shard_device_unbind(struct shard_device *dev, const struct shard_device_binding *binding);

void shard_device_close(struct shard_device *dev);

/* For tests and the worker: device memory of the cuda backend, and copies. */
int shard_device_cuda_alloc(struct shard_device *dev, uint64_t bytes,
			    uint64_t *address);
void shard_device_cuda_free(struct shard_device *dev, uint64_t address);
int shard_device_cuda_memcpy(struct shard_device *dev, enum shard_copy_direction dir,
			     uint64_t address, void *host, uint64_t bytes);

/*
 * Registers ptr (bytes, mapped read-only) for host-to-device copies: the
 * device's register_read_only, else its register_host. Undo with
 * ops->unregister_host. Returns 0 or the device's refusal.
 */
int shard_device_register_read_only(struct shard_device *dev, const void *ptr, uint64_t bytes);

bool shard_device_is_cuda(const struct shard_device *dev);

#endif
