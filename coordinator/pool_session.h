/*
 * Rank zero's pool session over pool/client.h (docs/DESIGN.md section 13):
 * fills struct coord_pool_session (puts and claims, for the driver in
 * coordinator/pool.h) and struct coord_pool_ops (lookups, for the store)
 * with rank zero's client's never-waiting calls. Neither waits.
 */
#ifndef SELENE_COORDINATOR_POOL_SESSION_H
#define SELENE_COORDINATOR_POOL_SESSION_H

#include "coordinator/pool.h"
#include "coordinator/store.h"
#include "pool/client.h"

struct coord_pool_client_session {
	struct pool_client *client; /* rank zero's; borrowed */
	uint32_t world_size;
	uint64_t share_bytes[REC_WORLD_SIZE_MAX]; /* a put's (scratch) */
	struct pool_chain_entry *chain;           /* an answer's (scratch) */
};

/* Allocates the scratch chain: 0 or -ENOMEM. */
int coord_pool_client_session_init(struct coord_pool_client_session *s,
				   struct pool_client *client, uint32_t world_size);
void coord_pool_client_session_destroy(struct coord_pool_client_session *s);

void coord_pool_client_session_fill(struct coord_pool_client_session *s,
				    struct coord_pool_session *session,
				    struct coord_pool_ops *ops);

#endif
