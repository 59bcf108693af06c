/*
 * From the public configuration to one rank's storage: see config.h.
 * Shared by rank zero (coordinator/api.c) and the peers (peer/api.c).
 */
#include "shard/config.h"

#include "common/base.h"
#include "selene/selene.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

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
 * the store already holds. 0 when the filesystem cannot say.
 */
uint64_t shard_config_auto_limit(const char *dir, uint64_t own_bytes)
{
	struct statvfs st;

	if (statvfs(dir, &st) != 0)
		return 0;
	return ((uint64_t)st.f_bavail * st.f_frsize + own_bytes) / 10;
}

