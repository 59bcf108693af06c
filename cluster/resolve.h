/*
 * Resolving a host name for a TCP connection within a deadline
 * (docs/DESIGN.md section 7). getaddrinfo has no timeout of its own: a name
 * server that never answers holds the caller for as long as resolv.conf's
 * retries allow, past any join timeout. Here a numeric address is parsed
 * at once; a name is resolved on a helper thread while the caller waits
 * until its deadline at most. A helper still waiting then is left to
 * finish on its own and frees what it resolved (it holds no reference to
 * the caller's memory). A temporary failure (EAI_AGAIN: no answer yet) is
 * retried every CLUSTER_RESOLVE_RETRY_MS until the deadline.
 */
#ifndef SELENE_CLUSTER_RESOLVE_H
#define SELENE_CLUSTER_RESOLVE_H

#include <netdb.h>
#include <stddef.h>
#include <stdint.h>

/* Between two tries after a temporary failure (EAI_AGAIN). */
#define CLUSTER_RESOLVE_RETRY_MS 100u

/*
 * Resolves host and port (a decimal string) for a stream socket, trying
 * until deadline (sel_monotonic_ns; 0: no bound but the resolver's own).
 * Returns 0 and *out (free it with freeaddrinfo), or -ETIMEDOUT when the
 * deadline passed first, -EHOSTUNREACH when the name does not resolve, or
 * another negative errno (a helper thread refused), each with a message
 * that names host in err.
 */
int cluster_resolve(const char *host, const char *port, uint64_t deadline,
		    struct addrinfo **out, char *err, size_t err_size);

#endif
