/*
 * Translating the public store configuration (include/selene/store.h) into
 * one rank's geometry, plane addresses and default disk limit. Pure, except
 * for statvfs.
 */
#ifndef SELENE_SHARD_CONFIG_H
#define SELENE_SHARD_CONFIG_H

#include "record/geometry.h"
#include "selene/store.h"
#include "shard/engine.h"

#include <stddef.h>
#include <stdint.h>

/*
 * Checks every field of a store configuration before anything is opened:
 * NULL pointers where a count says there is something, empty or overlong
 * names, zero or oversized units and counts, a zero device address or a
 * plane whose extent wraps the address space, an unknown device, a cluster
 * description out of range. Returns 0, or -EINVAL with a message naming
 * the field in err (err_size bytes, may be 0). Pure; reads nothing else.
 */
int shard_config_validate(const struct sel_store_config *c, char *err, size_t err_size);

/* The longest pool address ("host:port") a configuration may give: a DNS name's 253 and a port. */
#define SHARD_POOL_ADDRESS_BYTES_MAX 260u

/*
 * Splits a pool address, "host:port" or "[IPv6 literal]:port", into host
 * (without brackets, NUL-terminated, at most host_size bytes with its NUL)
 * and port. Returns 0, or -EINVAL with a message in err saying what is
 * wrong with it (empty, too long, no port, a port outside 1-65535, an
 * unclosed bracket, a host too long for host_size). Pure.
 */
int shard_config_pool_address(const char *address, char *host, size_t host_size,
			      uint16_t *port, char *err, size_t err_size);

/* The shortest silence_timeout_ms a cluster may set (0 takes the default). */
#define SHARD_SILENCE_TIMEOUT_MIN_MS 100u

/*
 * The cluster part of shard_config_validate alone: 0, or -EINVAL with a
 * message naming the field. Rank zero tells its peers of a failed open
 * only through a cluster description that passes this.
 */
int shard_config_check_cluster(const struct sel_cluster *cl, char *err, size_t err_size);

/* The geometry of rank in a world of world_size; 0 or SEL_EGEOMETRY with err. */
int shard_config_geometry(const struct sel_store_config *c, uint32_t rank,
			  uint32_t world_size, struct rec_geometry *g, char *err,
			  size_t err_size);

/* Plane base addresses in the geometry's (name) order. */
void shard_config_planes(const struct sel_store_config *c, const struct rec_geometry *g,
			 struct shard_planes *planes);

/*
 * SEL_DISK_LIMIT_AUTO: one tenth of the free space of dir's file system at
 * startup (what an unprivileged user may take), counting the store's own
 * files (own_bytes) as free. Returns 0 and *limit; -ENOSPC when the disk
 * is full (that tenth is below smallest_record, the bytes of a record of
 * one page and the row, and never below a header and one block), or the
 * negative errno of statvfs; either with a message naming dir in err.
 */
int shard_config_auto_limit(const char *dir, uint64_t own_bytes, uint64_t smallest_record,
			    uint64_t *limit, char *err, size_t err_size);

/*
 * shard_config_auto_limit from the file system's figures (free_blocks of
 * block_bytes each): pure, so a full disk can be tested. dir is for the
 * message only.
 */
int shard_config_limit_from_space(const char *dir, uint64_t free_blocks, uint64_t block_bytes,
				  uint64_t own_bytes, uint64_t smallest_record, uint64_t *limit,
				  char *err, size_t err_size);

#endif
