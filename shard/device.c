/*
 * The device interface's shared parts and the host backend: see device.h.
 * The host backend copies with memcpy on the calling (transfer) thread; its
 * "device addresses" are host pointers the caller allocated.
 */
#include "shard/device.h"

#include "common/base.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "selene/selene.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Entries gathered before one call; calls also stop at the byte bound. */
#define COPY_GATHER_MAX 512u

_Static_assert(COPY_GATHER_MAX <= SHARD_COPY_BATCH_ENTRIES_MAX, "gather bound");

/* One batch to the backend; device.copy can fail it before it is issued. */
static int copy_batch(struct shard_device *dev, enum shard_copy_direction dir,
		      const struct shard_copy *batch, uint32_t count, uint64_t bytes)
{
	int ret = SEL_FAILPOINT(SEL_FP_DEVICE_COPY);

	if (ret < 0)
		return ret;
	ret = dev->ops->copy(dev, dir, batch, count);
	if (ret)
		return ret;
	dev->batch_calls++;
	dev->bytes_copied += bytes;
	return 0;
}

int shard_device_copy(struct shard_device *dev, enum shard_copy_direction dir,
		      const struct shard_copy *copies, uint32_t count)
{
	struct shard_copy batch[COPY_GATHER_MAX];
	uint32_t batch_count = 0;
	uint64_t batch_bytes = 0;
	int ret;

	for (uint32_t i = 0; i < count; i++) {
		uint64_t done = 0;

		while (done < copies[i].bytes) {
			uint64_t room = SHARD_COPY_BATCH_BYTES_MAX - batch_bytes;
			uint64_t n = copies[i].bytes - done;

			n = n < room ? n : room;
			batch[batch_count++] = (struct shard_copy){
				.device_address = copies[i].device_address + done,
				.host = (uint8_t *)copies[i].host + done,
				.bytes = n,
			};
			batch_bytes += n;
			done += n;
			if (batch_count == COPY_GATHER_MAX ||
			    batch_bytes == SHARD_COPY_BATCH_BYTES_MAX) {
				ret = copy_batch(dev, dir, batch, batch_count, batch_bytes);
				if (ret)
					return ret;
				batch_count = 0;
				batch_bytes = 0;
			}
		}
	}
	if (batch_count == 0)
		return 0;
	return copy_batch(dev, dir, batch, batch_count, batch_bytes);
}

/* Whether entry c goes to the device's copy_strided (in pieces of whole rows). */
static bool strided_whole(const struct shard_device *dev, const struct shard_copy_strided *c)
{
	return dev->ops->copy_strided && c->rows > 1 && c->bytes > 0 &&
	       c->bytes <= SHARD_COPY_BATCH_BYTES_MAX && c->host_pitch >= c->bytes &&
	       c->device_pitch >= c->bytes && c->host_pitch <= SHARD_COPY_PITCH_MAX &&
	       c->device_pitch <= SHARD_COPY_PITCH_MAX;
}

/* One call of count strided pieces to the device; failpoint as copy_batch. */
static int strided_call(struct shard_device *dev, enum shard_copy_direction dir,
			const struct shard_copy_strided *pieces, uint32_t count)
{
	int ret = count ? SEL_FAILPOINT(SEL_FP_DEVICE_COPY) : 0;

	if (!count || ret < 0)
		return ret;
	ret = dev->ops->copy_strided(dev, dir, pieces, count);
	if (ret)
		return ret;
	dev->batch_calls++;
	for (uint32_t i = 0; i < count; i++)
		dev->bytes_copied += pieces[i].bytes * pieces[i].rows;
	return 0;
}

/*
 * Whole strided entries to the device, each cut into pieces of whole rows
 * of at most SHARD_COPY_BATCH_BYTES_MAX bytes (as plain copies are), in
 * calls of at most COPY_GATHER_MAX pieces.
 */
static int strided_batch(struct shard_device *dev, enum shard_copy_direction dir,
			 const struct shard_copy_strided *copies, uint32_t count)
{
	struct shard_copy_strided pieces[COPY_GATHER_MAX];
	uint32_t n = 0;
	int ret = 0;

	for (uint32_t i = 0; i < count && !ret; i++) {
		const struct shard_copy_strided *c = &copies[i];
		uint64_t per = SHARD_COPY_BATCH_BYTES_MAX / c->bytes;

		for (uint64_t r = 0; r < c->rows && !ret; r += per) {
			pieces[n] = *c;
			pieces[n].device_address += c->device_pitch * r;
			pieces[n].host = (uint8_t *)c->host + c->host_pitch * r;
			pieces[n].rows = (uint32_t)(c->rows - r < per ? c->rows - r : per);
			if (++n == COPY_GATHER_MAX) {
				ret = strided_call(dev, dir, pieces, n);
				n = 0;
			}
		}
	}
	return ret ? ret : strided_call(dev, dir, pieces, n);
}

int shard_device_copy_strided(struct shard_device *dev, enum shard_copy_direction dir,
			      const struct shard_copy_strided *copies, uint32_t count)
{
	struct shard_copy rows[COPY_GATHER_MAX];
	uint32_t n = 0, first = 0;
	int ret = 0;

	/* entries go whole, consecutive ones in one call; the rest as rows */
	for (uint32_t i = 0; i < count && !ret; i++) {
		const struct shard_copy_strided *c = &copies[i];

		if (strided_whole(dev, c)) {
			if (n) {
				ret = shard_device_copy(dev, dir, rows, n);
				n = 0;
			}
			continue;
		}
		ret = strided_batch(dev, dir, copies + first, i - first);
		for (uint32_t r = 0; r < c->rows && !ret; r++) {
			rows[n++] = (struct shard_copy){
				.device_address = c->device_address + c->device_pitch * r,
				.host = (uint8_t *)c->host + c->host_pitch * r,
				.bytes = c->bytes,
			};
			if (n == COPY_GATHER_MAX) {
				ret = shard_device_copy(dev, dir, rows, n);
				n = 0;
			}
		}
		first = i + 1;
	}
	if (!ret)
		ret = strided_batch(dev, dir, copies + first, count - first);
	if (!ret)
		ret = shard_device_copy(dev, dir, rows, n);
	return ret;
}

void shard_device_close(struct shard_device *dev)
{
	if (dev)
		dev->ops->close(dev);
}

static int host_bind(struct shard_device *dev)
{
	(void)dev;
	return 0;
}

static int host_register(struct shard_device *dev, void *ptr, uint64_t bytes)
{
	(void)dev;
	(void)ptr;
	(void)bytes;
	return 0;
}

static void host_unregister(struct shard_device *dev, void *ptr)
{
	(void)dev;
	(void)ptr;
}

int shard_device_register_read_only(struct shard_device *dev, const void *ptr, uint64_t bytes)
{
	if (dev->ops->register_read_only)
		return dev->ops->register_read_only(dev, ptr, bytes);
	return dev->ops->register_host(dev, (void *)ptr, bytes);
}

int shard_device_bind_for(struct shard_device *dev, struct shard_device_binding *binding)
{
	binding->previous = NULL;
	if (dev->ops->bind_saving)
		return dev->ops->bind_saving(dev, &binding->previous);
	return dev->ops->bind(dev);
}

void shard_device_unbind(struct shard_device *dev, const struct shard_device_binding *binding)
{
	if (dev->ops->restore)
		dev->ops->restore(dev, binding->previous);
}

void shard_copy_in_memory(enum shard_copy_direction dir, const struct shard_copy *copies,
			  uint32_t count)
{
	for (uint32_t i = 0; i < count; i++) {
		void *device = (void *)(uintptr_t)copies[i].device_address;

		if (dir == SHARD_DEVICE_TO_HOST)
			memcpy(copies[i].host, device, copies[i].bytes);
		else
			memcpy(device, copies[i].host, copies[i].bytes);
	}
}

static int host_copy(struct shard_device *dev, enum shard_copy_direction dir,
		     const struct shard_copy *copies, uint32_t count)
{
	(void)dev;
	SEL_ASSERT(count <= SHARD_COPY_BATCH_ENTRIES_MAX);
	shard_copy_in_memory(dir, copies, count);
	return 0;
}

/*
 * Row by row across the entries (row 0 of each, then row 1, ...), so a
 * run's planes are read from a record image in its file order.
 */
static int host_copy_strided(struct shard_device *dev, enum shard_copy_direction dir,
			     const struct shard_copy_strided *copies, uint32_t count)
{
	uint32_t rows = 0;

	(void)dev;
	for (uint32_t i = 0; i < count; i++)
		rows = copies[i].rows > rows ? copies[i].rows : rows;
	for (uint32_t r = 0; r < rows; r++)
		for (uint32_t i = 0; i < count; i++) {
			uint8_t *device, *host;

			if (r >= copies[i].rows)
				continue;
			device = (uint8_t *)(uintptr_t)copies[i].device_address +
				 copies[i].device_pitch * r;
			host = (uint8_t *)copies[i].host + copies[i].host_pitch * r;
			if (dir == SHARD_DEVICE_TO_HOST)
				memcpy(host, device, copies[i].bytes);
			else
				memcpy(device, host, copies[i].bytes);
		}
	return 0;
}

static int host_synchronize(struct shard_device *dev)
{
	(void)dev;
	return 0;
}

/* Copies are done when copy returns: a mark has nothing to wait for. */
static int host_mark(struct shard_device *dev, uint32_t mark)
{
	(void)dev;
	SEL_ASSERT(mark < SHARD_DEVICE_MARKS);
	return 0;
}

static void host_close(struct shard_device *dev)
{
	free(dev);
}

static const struct shard_device_ops host_ops = {
	.name = "host",
	.bind = host_bind,
	.register_host = host_register,
	.unregister_host = host_unregister,
	.copy = host_copy,
	.synchronize = host_synchronize,
	.close = host_close,
	.mark = host_mark,
	.wait_mark = host_mark,
	.copies_synchronous = true,
	.copy_strided = host_copy_strided,
};

int shard_device_open_host(struct shard_device **out)
{
	struct shard_device *dev = calloc(1, sizeof(*dev));

	if (!dev)
		return -ENOMEM;
	dev->ops = &host_ops;
	*out = dev;
	return 0;
}

int shard_device_open(const char *kind, int ordinal, struct shard_device **out,
		      char *why, size_t why_size)
{
	int ret;

	if (strcmp(kind, "host") == 0)
		return shard_device_open_host(out);
	if (strcmp(kind, "cuda") == 0)
		return shard_device_open_cuda(ordinal, out, why, why_size);
	if (strcmp(kind, "auto") != 0) {
		snprintf(why, why_size, "unknown device '%s' (auto, cuda or host)", kind);
		return -EINVAL;
	}
	ret = shard_device_open_cuda(ordinal, out, why, why_size);
	if (ret == 0)
		return 0;
	/* The caller allowed the host backend; it still hears why. */
	sel_warn("no CUDA device (%s); using the host-memory device", why);
	return shard_device_open_host(out);
}
