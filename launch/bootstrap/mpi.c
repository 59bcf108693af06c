/*
 * The MPI bootstrap (bootstrap.h): rank and world from MPI; rank zero binds
 * its listener on an ephemeral port and draws a fresh 32-byte secret, both
 * broadcast; every rank's host identity and IPv4 interfaces are gathered,
 * so each peer connects over loopback on rank zero's host, else to an
 * address of rank zero's on a subnet it shares, and rank zero accepts each
 * peer only from the address that route gives it. Built where Open
 * MPI's headers are (SEL_HAVE_MPI); MPI is used nowhere else.
 */
#include "launch/bootstrap/bootstrap.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef SEL_HAVE_MPI
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <mpi.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>


struct launch_offer {
	uint16_t port;
	uint8_t secret[32];
	int32_t error;
};

/*
 * Which host this process is on: the kernel's boot id and its network
 * namespace, so that namespaces on one machine count as separate hosts.
 */
static void own_host_id(char *out, size_t size)
{
	char boot[40] = "";
	struct stat st = { 0 };
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");

	if (f) {
		if (!fgets(boot, sizeof(boot), f))
			boot[0] = '\0';
		fclose(f);
	}
	boot[strcspn(boot, "\n")] = '\0';
	stat("/proc/self/ns/net", &st);
	snprintf(out, size, "%.36s/%llu", boot, (unsigned long long)st.st_ino);
}

static void own_interfaces(struct launch_interfaces *out)
{
	struct ifaddrs *list = NULL;

	memset(out, 0, sizeof(*out));
	own_host_id(out->host_id, sizeof(out->host_id));
	if (getifaddrs(&list) != 0)
		return;
	for (struct ifaddrs *i = list; i && out->count < LAUNCH_ADDRESSES_MAX; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !i->ifa_netmask ||
		    !(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK))
			continue;
		out->addr[out->count] = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
		out->mask[out->count] = ((struct sockaddr_in *)i->ifa_netmask)->sin_addr.s_addr;
		out->count++;
	}
	freeifaddrs(list);
}

static int listen_any(uint16_t *port)
{
	struct sockaddr_in addr = { .sin_family = AF_INET };
	socklen_t len = sizeof(addr);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	addr.sin_addr.s_addr = htonl(INADDR_ANY);
	if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) || listen(fd, 1024) ||
	    getsockname(fd, (struct sockaddr *)&addr, &len)) {
		int ret = -errno;

		close(fd);
		return ret;
	}
	*port = ntohs(addr.sin_port);
	return fd;
}

bool launch_bootstrap_mpi_available(void)
{
	return true;
}

int launch_bootstrap_from_mpi(struct launch_bootstrap *b, char *err, size_t err_size)
{
	struct launch_offer offer = { 0 };
	struct launch_interfaces mine, *all;
	int rank, world, initialized;
	uint32_t to, from;

	memset(b, 0, sizeof(*b));
	b->cluster.listen_fd = -1;
	MPI_Initialized(&initialized);
	if (!initialized && MPI_Init(NULL, NULL) != MPI_SUCCESS) {
		snprintf(err, err_size, "MPI_Init failed");
		return -EINVAL;
	}
	b->mpi = true;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &world);
	if (world < 1 || world > 1024) {
		snprintf(err, err_size, "MPI world of %d ranks: Selene takes 1 to 1024", world);
		return -EINVAL;
	}
	own_interfaces(&mine);
	all = calloc((size_t)world, sizeof(*all));
	if (!all) {
		snprintf(err, err_size, "out of memory");
		return -ENOMEM;
	}
	MPI_Allgather(&mine, sizeof(mine), MPI_BYTE, all, sizeof(mine), MPI_BYTE,
		      MPI_COMM_WORLD);
	b->cluster = (struct sel_cluster){ .rank = (uint32_t)rank, .world_size = (uint32_t)world,
					   .listen_fd = -1, .join_timeout_ms = 60000,
					   .silence_timeout_ms = 10000, .job_timeout_ms = 60000 };
	if (rank == 0 && world > 1) {
		b->cluster.listen_fd = listen_any(&offer.port);
		if (b->cluster.listen_fd < 0)
			offer.error = b->cluster.listen_fd;
		else if (getrandom(offer.secret, sizeof(offer.secret), 0) != sizeof(offer.secret))
			offer.error = -EIO;
	}
	MPI_Bcast(&offer, sizeof(offer), MPI_BYTE, 0, MPI_COMM_WORLD);
	if (offer.error) {
		snprintf(err, err_size, "rank zero could not listen or draw a secret: %s",
			 strerror(-offer.error));
		free(all);
		return offer.error;
	}
	memcpy(b->cluster.secret, offer.secret, sizeof(offer.secret));
	b->cluster.coordinator_port = offer.port;
	/* every rank computes the same routes from the same table */
	for (int r = 1; r < world; r++) {
		if (!launch_route(&all[0], &all[r], &to, &from)) {
			/* every rank sees the same table, so every rank stops here */
			snprintf(err, err_size, "rank %d shares no IPv4 subnet with rank zero; "
				 "set SELENE_COORDINATOR and SELENE_SECRET_FILE instead", r);
			free(all);
			return -EHOSTUNREACH;
		}
		inet_ntop(AF_INET, &from, b->address_text[r], sizeof(b->address_text[r]));
		b->addresses[r] = b->address_text[r];
		if (r == rank)
			inet_ntop(AF_INET, &to, b->host, sizeof(b->host));
	}
	if (rank == 0 && world > 1) {
		/* rank zero connects to nobody; its own entry is never checked */
		snprintf(b->host, sizeof(b->host), "127.0.0.1");
		b->addresses[0] = b->host;
	}
	/* rank zero checks each peer's source; each peer binds its own */
	if (world > 1)
		b->cluster.rank_addresses = b->addresses;
	b->cluster.coordinator_host = b->host;
	free(all);
	return 0;
}

void launch_bootstrap_finish(struct launch_bootstrap *b)
{
	if (b->cluster.listen_fd >= 0 && b->cluster.rank == 0 && b->mpi)
		close(b->cluster.listen_fd);
	if (b->mpi)
		MPI_Finalize();
	b->mpi = false;
}

#else

bool launch_bootstrap_mpi_available(void)
{
	return false;
}

int launch_bootstrap_from_mpi(struct launch_bootstrap *b, char *err, size_t err_size)
{
	memset(b, 0, sizeof(*b));
	snprintf(err, err_size, "this selene was built without MPI: set SELENE_COORDINATOR "
		 "and SELENE_SECRET_FILE");
	return -EINVAL;
}

void launch_bootstrap_finish(struct launch_bootstrap *b)
{
	(void)b;
}

#endif
