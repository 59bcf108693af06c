/* The environment bootstrap, and the choice between it and MPI (bootstrap.h). */
#include "launch/bootstrap/bootstrap.h"

#include "cluster/join.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Whether name is set to something: an empty variable counts as unset. */
static bool env_set(const char *name)
{
	const char *v = getenv(name);

	return v && *v;
}

/* Decimal digits only: strtoul would also take blanks, a sign, and wrap. */
static bool all_digits(const char *text)
{
	if (!*text)
		return false;
	for (const char *p = text; *p; p++)
		if (*p < '0' || *p > '9')
			return false;
	return true;
}

/* A decimal variable; false when set but not a number in [0, max]. */
static bool env_number(const char *name, uint32_t max, uint32_t *out, bool *set)
{
	const char *v = getenv(name);
	char *end;
	unsigned long n;

	*set = v && *v;
	if (!*set)
		return true;
	if (!all_digits(v))
		return false;
	errno = 0;
	n = strtoul(v, &end, 10);
	if (errno || *end || n > max)
		return false;
	*out = (uint32_t)n;
	return true;
}

/*
 * Splits host:port, or [IPv6 address]:port, into host (without brackets)
 * and port. Returns 0, -EINVAL when it is not of that shape, or -ERANGE
 * when the port is not 1-65535.
 */
static int coordinator_address(const char *text, char *host, size_t host_size,
			       uint16_t *port)
{
	const char *start = text, *end_host, *colon;
	unsigned long n;
	char *end;

	if (!text)
		return -EINVAL;
	if (text[0] == '[') {
		start = text + 1;
		end_host = strchr(start, ']');
		if (!end_host || end_host[1] != ':')
			return -EINVAL;
		colon = end_host + 1;
	} else {
		colon = strrchr(text, ':');
		end_host = colon;
		/* an IPv6 address without brackets has more colons: ambiguous */
		if (colon && memchr(text, ':', (size_t)(colon - text)))
			return -EINVAL;
	}
	if (!colon || end_host == start || (size_t)(end_host - start) >= host_size)
		return -EINVAL;
	if (!all_digits(colon + 1))
		return -ERANGE;
	errno = 0;
	n = strtoul(colon + 1, &end, 10);
	if (errno || *end || n == 0 || n > 65535)
		return -ERANGE;
	memcpy(host, start, (size_t)(end_host - start));
	host[end_host - start] = '\0';
	*port = (uint16_t)n;
	return 0;
}

/* SELENE_ACCEPT_EMPTY_RANKS: 1 accepts, 0 or unset refuses, anything else is an error. */
static int env_accept_empty_ranks(struct launch_bootstrap *b, char *err, size_t err_size)
{
	const char *v = getenv("SELENE_ACCEPT_EMPTY_RANKS");

	if (!v || !*v || strcmp(v, "0") == 0)
		return 0;
	if (strcmp(v, "1") != 0) {
		snprintf(err, err_size, "SELENE_ACCEPT_EMPTY_RANKS must be 0 or 1, not \"%.40s\"", v);
		return -EINVAL;
	}
	b->cluster.accept_empty_ranks = true;
	return 0;
}

int launch_bootstrap_from_env(struct launch_bootstrap *b, char *err, size_t err_size)
{
	const char *coordinator = getenv("SELENE_COORDINATOR"), *secret = getenv("SELENE_SECRET_FILE");
	const char *rank_var = "SELENE_RANK", *world_var = "SELENE_WORLD_SIZE";
	uint32_t rank = 0, world = 1;
	uint16_t port;
	bool rank_set, world_set;
	int ret;

	memset(b, 0, sizeof(*b));
	if (!env_set("SELENE_RANK") && env_set("OMPI_COMM_WORLD_RANK")) {
		if (env_set("SELENE_WORLD_SIZE")) {
			snprintf(err, err_size, "SELENE_WORLD_SIZE is set but SELENE_RANK is not: "
				 "set both, or neither to take Open MPI's");
			return -EINVAL;
		}
		rank_var = "OMPI_COMM_WORLD_RANK";
		world_var = "OMPI_COMM_WORLD_SIZE";
	}
	if (!env_number(rank_var, 1023, &rank, &rank_set) ||
	    !env_number(world_var, 1024, &world, &world_set) || world == 0 || rank >= world ||
	    rank_set != world_set) {
		snprintf(err, err_size, "%s and %s must both be set, with 0 <= rank < world "
			 "size <= 1024", rank_var, world_var);
		return -EINVAL;
	}
	b->cluster = (struct sel_cluster){ .rank = rank, .world_size = world, .listen_fd = -1,
					   .join_timeout_ms = 60000, .silence_timeout_ms = 10000,
					   .job_timeout_ms = 60000 };
	ret = env_accept_empty_ranks(b, err, err_size);
	if (ret)
		return ret;
	/* A coordinator with no rank and world is a launch that lost them. */
	if (!rank_set && (env_set("SELENE_COORDINATOR") || env_set("SELENE_SECRET_FILE"))) {
		snprintf(err, err_size, "SELENE_COORDINATOR or SELENE_SECRET_FILE is set but %s "
			 "and %s are not: set them too, or unset both for one rank", rank_var,
			 world_var);
		return -EINVAL;
	}
	if (world == 1)
		return 0;
	ret = coordinator_address(coordinator, b->host, sizeof(b->host), &port);
	if (ret == -EINVAL) {
		snprintf(err, err_size, "SELENE_COORDINATOR must be host:port (an IPv6 "
			 "address in brackets: [::1]:port) for a world of %u", world);
		return ret;
	}
	if (ret) {
		snprintf(err, err_size, "SELENE_COORDINATOR %s: the port must be 1-65535",
			 coordinator);
		return -EINVAL;
	}
	b->cluster.coordinator_host = b->host;
	b->cluster.coordinator_port = port;
	if (!secret || !*secret) {
		snprintf(err, err_size, "SELENE_SECRET_FILE must name the launch secret for a "
			 "world of %u", world);
		return -EINVAL;
	}
	return cluster_secret_load(secret, "SELENE_SECRET_FILE", b->cluster.secret, err, err_size);
}

int launch_bootstrap(struct launch_bootstrap *b, char *err, size_t err_size)
{
	const char *mpi_world = getenv("OMPI_COMM_WORLD_SIZE");

	if (!env_set("SELENE_COORDINATOR") && !env_set("SELENE_RANK") && mpi_world &&
	    strcmp(mpi_world, "1") != 0 && launch_bootstrap_mpi_available()) {
		int ret = launch_bootstrap_from_mpi(b, err, err_size);

		return ret ? ret : env_accept_empty_ranks(b, err, err_size);
	}
	return launch_bootstrap_from_env(b, err, err_size);
}

bool launch_route(const struct launch_interfaces *zero, const struct launch_interfaces *peer,
		  uint32_t *to, uint32_t *from)
{
	if (strcmp(zero->host_id, peer->host_id) == 0) {
		*to = *from = htonl(INADDR_LOOPBACK);
		return true;
	}
	for (uint32_t z = 0; z < zero->count; z++) {
		for (uint32_t p = 0; p < peer->count; p++) {
			uint32_t mask = zero->mask[z];

			if ((zero->addr[z] & mask) != (peer->addr[p] & mask) ||
			    zero->addr[z] == peer->addr[p])
				continue;
			*to = zero->addr[z];
			*from = peer->addr[p];
			return true;
		}
	}
	return false;
}
