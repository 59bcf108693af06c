/*
 * From the public configuration to one rank's storage: see config.h.
 * Shared by rank zero (coordinator/api.c) and the peers (peer/api.c).
 */
#include "shard/config.h"

#include "common/base.h"
#include "common/limits.h"
#include "selene/selene.h"
#include "shard/warm.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/statvfs.h>

static int config_fail(char *err, size_t err_size, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int config_fail(char *err, size_t err_size, const char *fmt, ...)
{
	va_list ap;

	if (err_size > 0) {
		va_start(ap, fmt);
		vsnprintf(err, err_size, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

/*
 * One plane: what names it (field, e.g. "page_planes[3]"), its units on
 * the device (count of unit_bytes from device_address).
 */
static int config_check_plane(const struct sel_plane *plane, const char *field,
			      uint64_t unit_bytes_max, uint32_t count, char *err,
			      size_t err_size)
{
	uint64_t extent;

	if (!plane->name || plane->name[0] == '\0')
		return config_fail(err, err_size, "%s.name is %s", field,
				   plane->name ? "empty" : "NULL");
	if (strnlen(plane->name, REC_PLANE_NAME_BYTES_MAX + 1) > REC_PLANE_NAME_BYTES_MAX)
		return config_fail(err, err_size, "%s.name is longer than %u bytes", field,
				   REC_PLANE_NAME_BYTES_MAX);
	if (plane->unit_bytes == 0 || plane->unit_bytes > unit_bytes_max)
		return config_fail(err, err_size, "%s.unit_bytes is %" PRIu64
				   " (1 to %" PRIu64 ")", field, plane->unit_bytes,
				   unit_bytes_max);
	if (plane->device_address == 0)
		return config_fail(err, err_size, "%s.device_address is 0", field);
	/* unit_bytes <= 4 GiB and count < 4 Gi: the product fits in 64 bits. */
	extent = plane->unit_bytes * count;
	if (plane->device_address > UINT64_MAX - extent)
		return config_fail(err, err_size, "%s: %u units of %" PRIu64 " bytes from "
				   "device_address 0x%" PRIx64 " wrap the address space",
				   field, count, plane->unit_bytes, plane->device_address);
	return 0;
}

int shard_config_check_cluster(const struct sel_cluster *cl, char *err, size_t err_size)
{
	if (cl->world_size == 0 || cl->world_size > REC_WORLD_SIZE_MAX)
		return config_fail(err, err_size, "cluster.world_size is %u (1 to %u)",
				   cl->world_size, REC_WORLD_SIZE_MAX);
	if (cl->rank >= cl->world_size)
		return config_fail(err, err_size, "cluster.rank %u is not below world_size %u",
				   cl->rank, cl->world_size);
	if (cl->rank > 0 && (!cl->coordinator_host || !cl->coordinator_host[0]))
		return config_fail(err, err_size, "cluster.coordinator_host is %s",
				   cl->coordinator_host ? "empty" : "NULL");
	if (cl->rank > 0 && cl->coordinator_port == 0)
		return config_fail(err, err_size, "cluster.coordinator_port is 0");
	/* A link heartbeats every quarter of it: below, a quiet link would die. */
	if (cl->silence_timeout_ms != 0 && cl->silence_timeout_ms < SHARD_SILENCE_TIMEOUT_MIN_MS)
		return config_fail(err, err_size, "cluster.silence_timeout_ms is %u (0 for the "
				   "default, or %u and up)", cl->silence_timeout_ms,
				   SHARD_SILENCE_TIMEOUT_MIN_MS);
	if (cl->rank > 0 || cl->world_size == 1)
		return 0;
	/* Rank zero of several: a port the peers know, or a listener of the caller's. */
	if (cl->listen_fd < 0 && cl->coordinator_port == 0)
		return config_fail(err, err_size, "cluster.coordinator_port is 0 and there is no "
				   "listen_fd: no peer could find rank zero");
	if (cl->listen_fd >= 0) {
		int listening = 0;
		socklen_t len = sizeof(listening);

		if (getsockopt(cl->listen_fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 ||
		    !listening)
			return config_fail(err, err_size, "cluster.listen_fd %d is not a listening "
					   "socket (-1 binds coordinator_port)", cl->listen_fd);
	}
	return 0;
}

int shard_config_pool_address(const char *address, char *host, size_t host_size,
			      uint16_t *port, char *err, size_t err_size)
{
	const char *start = address, *end_host, *colon;
	unsigned long n;
	char *end;
	size_t length;

	if (!address || !address[0])
		return config_fail(err, err_size, "pool is %s (host:port)",
				   address ? "empty" : "NULL");
	length = strnlen(address, SHARD_POOL_ADDRESS_BYTES_MAX + 1);
	if (length > SHARD_POOL_ADDRESS_BYTES_MAX)
		return config_fail(err, err_size, "pool is longer than %u bytes",
				   SHARD_POOL_ADDRESS_BYTES_MAX);
	if (address[0] == '[') {
		end_host = strchr(address, ']');
		if (!end_host || end_host[1] != ':')
			return config_fail(err, err_size, "pool '%s' is not [IPv6 address]:port",
					   address);
		start = address + 1;
		colon = end_host + 1;
	} else {
		colon = strrchr(address, ':');
		if (!colon || strchr(address, ':') != colon)
			return config_fail(err, err_size, "pool '%s' is not host:port (an IPv6 "
					   "address goes in brackets: [::1]:port)", address);
		end_host = colon;
	}
	if (end_host == start)
		return config_fail(err, err_size, "pool '%s' has no host", address);
	if ((size_t)(end_host - start) + 1 > host_size)
		return config_fail(err, err_size, "pool '%s': the host is longer than %zu bytes",
				   address, host_size ? host_size - 1 : 0);
	errno = 0;
	n = strtoul(colon + 1, &end, 10);
	if (!colon[1] || colon[1] == '-' || colon[1] == '+' || errno || *end || n == 0 ||
	    n > 65535)
		return config_fail(err, err_size, "pool '%s': the port must be 1-65535", address);
	memcpy(host, start, (size_t)(end_host - start));
	host[end_host - start] = '\0';
	*port = (uint16_t)n;
	return 0;
}

/* pool and pool_secret_file: present together, and an address of the right shape. */
static int config_check_pool(const struct sel_store_config *c, char *err, size_t err_size)
{
	char host[SHARD_POOL_ADDRESS_BYTES_MAX + 1];
	uint16_t port;

	if (!c->pool && !c->pool_secret_file)
		return 0;
	if (!c->pool)
		return config_fail(err, err_size, "pool_secret_file is set but pool is NULL (no "
				   "pool to prove it to)");
	if (!c->pool_secret_file || !c->pool_secret_file[0])
		return config_fail(err, err_size, "pool is '%.64s' but pool_secret_file is %s: "
				   "every pool connection proves a secret", c->pool,
				   c->pool_secret_file ? "empty" : "NULL");
	return shard_config_pool_address(c->pool, host, sizeof(host), &port, err, err_size);
}

int shard_config_validate(const struct sel_store_config *c, char *err, size_t err_size)
{
	int ret;

	if (!c)
		return config_fail(err, err_size, "the configuration is NULL");
	if (c->disk_limit_bytes != 0 && (!c->dir || !c->dir[0]))
		return config_fail(err, err_size, "dir is %s (a disk store needs one)",
				   c->dir ? "empty" : "NULL");
	if (c->state_mode > REC_STATE_COPY_SPECULATION)
		return config_fail(err, err_size, "state_mode is %u (0, 1 or 2)", c->state_mode);
	if (c->page_tokens == 0 || c->page_tokens > REC_PAGE_TOKENS_MAX)
		return config_fail(err, err_size, "page_tokens is %u (1 to %u)", c->page_tokens,
				   REC_PAGE_TOKENS_MAX);
	if (c->page_plane_count == 0 || c->page_plane_count > REC_PAGE_PLANES_MAX)
		return config_fail(err, err_size, "page_plane_count is %u (1 to %u)",
				   c->page_plane_count, REC_PAGE_PLANES_MAX);
	if (!c->page_planes)
		return config_fail(err, err_size, "page_planes is NULL but page_plane_count is %u",
				   c->page_plane_count);
	if (c->page_count == 0)
		return config_fail(err, err_size, "page_count is 0");
	if (c->row_count == 0)
		return config_fail(err, err_size, "row_count is 0");
	for (uint32_t i = 0; i < c->page_plane_count; i++) {
		char field[32];

		snprintf(field, sizeof(field), "page_planes[%u]", i);
		ret = config_check_plane(&c->page_planes[i], field, REC_UNIT_BYTES_MAX,
					 c->page_count, err, err_size);
		if (ret)
			return ret;
	}
	ret = config_check_plane(&c->row_plane, "row_plane", REC_ROW_BYTES_MAX, c->row_count,
				 err, err_size);
	if (ret)
		return ret;
	if (c->device && strcmp(c->device, "auto") != 0 && strcmp(c->device, "cuda") != 0 &&
	    strcmp(c->device, "host") != 0)
		return config_fail(err, err_size, "device is '%.32s' (auto, cuda or host)",
				   c->device);
	if (c->device_ordinal < 0)
		return config_fail(err, err_size, "device_ordinal is %d", c->device_ordinal);
	if (c->warm_bytes != 0 && c->disk_limit_bytes == 0)
		return config_fail(err, err_size, "warm_bytes is %llu but there is no disk store "
				   "(disk limit 0): the warm tier sits in front of one",
				   (unsigned long long)c->warm_bytes);
	if (c->warm_policy > SEL_WARM_WRITE_BEHIND)
		return config_fail(err, err_size, "warm_policy is %u (0 write-through, 1 "
				   "write-behind)", c->warm_policy);
	if (c->max_age_ms > UINT64_MAX / 1000000u)
		return config_fail(err, err_size, "max_age_ms is %llu (at most %llu)",
				   (unsigned long long)c->max_age_ms,
				   (unsigned long long)(UINT64_MAX / 1000000u));
	if (c->warm_bytes > SHARD_WARM_BYTES_MAX)
		return config_fail(err, err_size, "warm_bytes is %llu (at most %llu)",
				   (unsigned long long)c->warm_bytes,
				   (unsigned long long)SHARD_WARM_BYTES_MAX);
	if (c->records_max > REC_DIR_RECORDS_MAX)
		return config_fail(err, err_size, "records_max is %u (at most %u)", c->records_max,
				   REC_DIR_RECORDS_MAX);
	ret = config_check_pool(c, err, err_size);
	if (ret)
		return ret;
	return c->cluster ? shard_config_check_cluster(c->cluster, err, err_size) : 0;
}

int shard_config_geometry(const struct sel_store_config *c, uint32_t rank,
			  uint32_t world_size, struct rec_geometry *g, char *err,
			  size_t err_size)
{
	struct rec_plane *planes = calloc(c->page_plane_count ? c->page_plane_count : 1,
					  sizeof(*planes));
	struct rec_geometry_spec spec = {
		.page_tokens = c->page_tokens, .page_plane_count = c->page_plane_count,
		.page_planes = planes, .page_count = c->page_count, .row_count = c->row_count,
		.rank = rank, .world_size = world_size,
	};
	int ret;

	if (!planes)
		return -ENOMEM;
	for (uint32_t i = 0; i < c->page_plane_count; i++) {
		snprintf(planes[i].name, sizeof(planes[i].name), "%s",
			 c->page_planes[i].name ? c->page_planes[i].name : "");
		planes[i].unit_bytes = c->page_planes[i].unit_bytes;
	}
	snprintf(spec.row_plane.name, sizeof(spec.row_plane.name), "%s",
		 c->row_plane.name ? c->row_plane.name : "");
	spec.row_plane.unit_bytes = c->row_plane.unit_bytes;
	ret = rec_geometry_init(g, &spec, err, err_size);
	free(planes);
	return ret;
}

/* Plane base addresses in the geometry's (name) order. */
void shard_config_planes(const struct sel_store_config *c, const struct rec_geometry *g,
			 struct shard_planes *planes)
{
	memset(planes, 0, sizeof(*planes));
	for (uint32_t p = 0; p < g->page_plane_count; p++)
		for (uint32_t i = 0; i < c->page_plane_count; i++)
			if (strcmp(g->page_planes[p].name, c->page_planes[i].name) == 0)
				planes->page_base[p] = c->page_planes[i].device_address;
	planes->row_base = c->row_plane.device_address;
}

/*
 * One tenth of the free space at startup, counting the store's own files as
 * free: otherwise every restart would shrink the budget by a tenth of what
 * the store already holds. A full disk would give a limit of 0, which is
 * "no disk store" (and a join refused for it) or a limit no record fits
 * in: said plainly instead.
 */
int shard_config_limit_from_space(const char *dir, uint64_t free_blocks, uint64_t block_bytes,
				  uint64_t own_bytes, uint64_t smallest_record, uint64_t *limit,
				  char *err, size_t err_size)
{
	uint64_t free_bytes = block_bytes && free_blocks > UINT64_MAX / block_bytes ?
				      UINT64_MAX : free_blocks * block_bytes;
	uint64_t total = free_bytes > UINT64_MAX - own_bytes ? UINT64_MAX : free_bytes + own_bytes;

	if (smallest_record < REC_HEADER_BYTES + SEL_BLOCK_BYTES)
		smallest_record = REC_HEADER_BYTES + SEL_BLOCK_BYTES;
	*limit = total / 10;
	if (*limit >= smallest_record)
		return 0;
	*limit = 0;
	return sel_fail(-ENOSPC, err, err_size, "%s: the disk is full (%" PRIu64 " bytes free, %"
			PRIu64 " in this store's records): a tenth of that, the default disk "
			"limit, holds no record of one page (%" PRIu64 " bytes); free some space "
			"or configure disk_limit_bytes", dir, free_bytes, own_bytes,
			smallest_record);
}

int shard_config_auto_limit(const char *dir, uint64_t own_bytes, uint64_t smallest_record,
			    uint64_t *limit, char *err, size_t err_size)
{
	struct statvfs st;
	int ret;

	*limit = 0;
	if (statvfs(dir, &st) != 0) {
		ret = -errno;
		return sel_fail(ret, err, err_size, "cannot tell the free space of %s for the "
				"default disk limit (%s); configure disk_limit_bytes", dir,
				strerror(-ret));
	}
	return shard_config_limit_from_space(dir, st.f_bavail, st.f_frsize ? st.f_frsize :
						   st.f_bsize, own_bytes, smallest_record, limit, err,
					     err_size);
}
