/*
 * The environment bootstrap (launch/bootstrap/bootstrap.h): a world of one needs
 * nothing; SELENE_* wins over Open MPI's variables; every missing or wrong
 * variable is refused with its name.
 */
#include "tests/testutil.h"

#include "launch/bootstrap/bootstrap.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const vars[] = {
	"SELENE_RANK", "SELENE_WORLD_SIZE", "SELENE_COORDINATOR", "SELENE_SECRET_FILE",
	"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "SELENE_ACCEPT_EMPTY_RANKS",
};

static char *dir;
static char secret_path[512];

static void write_file(const char *path, size_t bytes)
{
	uint8_t buf[64];
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	assert_true(fd >= 0);
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 7 + 1);
	assert_int_equal(write(fd, buf, bytes), (ssize_t)bytes);
	close(fd);
}

static int setup(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
	dir = tu_make_temp_dir("bootstrap");
	snprintf(secret_path, sizeof(secret_path), "%s/secret", dir);
	write_file(secret_path, 32);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	tu_remove_tree(dir);
	return 0;
}

static int boot(struct launch_bootstrap *b, char *err, size_t size)
{
	err[0] = '\0';
	return launch_bootstrap_from_env(b, err, size);
}

static void test_bootstrap_world_of_one(void **state)
{
	struct launch_bootstrap b;
	char err[256];

	(void)state;
	assert_int_equal(boot(&b, err, sizeof(err)), 0);
	assert_int_equal(b.cluster.rank, 0);
	assert_int_equal(b.cluster.world_size, 1);
}

static void test_bootstrap_full(void **state)
{
	struct launch_bootstrap b;
	char err[256];

	(void)state;
	setenv("SELENE_RANK", "2", 1);
	setenv("SELENE_WORLD_SIZE", "4", 1);
	setenv("OMPI_COMM_WORLD_RANK", "3", 1); /* SELENE_* wins */
	setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
	setenv("SELENE_COORDINATOR", "198.18.0.1:29500", 1);
	setenv("SELENE_SECRET_FILE", secret_path, 1);
	assert_int_equal(boot(&b, err, sizeof(err)), 0);
	assert_int_equal(b.cluster.rank, 2);
	assert_int_equal(b.cluster.world_size, 4);
	assert_string_equal(b.cluster.coordinator_host, "198.18.0.1");
	assert_int_equal(b.cluster.coordinator_port, 29500);
	assert_int_equal(b.cluster.secret[0], 1);
	assert_int_equal(b.cluster.secret[31], (uint8_t)(31 * 7 + 1));
	assert_int_equal(b.cluster.listen_fd, -1);
	assert_false(b.cluster.accept_empty_ranks);
	/* read-only for its owner is as private as 0600 */
	assert_int_equal(chmod(secret_path, 0400), 0);
	assert_int_equal(boot(&b, err, sizeof(err)), 0);
	setenv("SELENE_ACCEPT_EMPTY_RANKS", "1", 1);
	assert_int_equal(boot(&b, err, sizeof(err)), 0);
	assert_true(b.cluster.accept_empty_ranks);
}

/* SELENE_COORDINATOR=[IPv6 address]:port names the address without brackets. */
static void test_bootstrap_ipv6_coordinator(void **state)
{
	static const struct {
		const char *coordinator, *host;
		uint16_t port;
	} cases[] = {
		{ "[::1]:29500", "::1", 29500 },
		{ "[fe80::1%eth0]:7", "fe80::1%eth0", 7 },
		{ "[2001:db8::5]:65535", "2001:db8::5", 65535 },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct launch_bootstrap b;
		char err[256];

		setup(NULL);
		setenv("SELENE_RANK", "1", 1);
		setenv("SELENE_WORLD_SIZE", "2", 1);
		setenv("SELENE_COORDINATOR", cases[i].coordinator, 1);
		setenv("SELENE_SECRET_FILE", secret_path, 1);
		if (boot(&b, err, sizeof(err)) != 0)
			fail_msg("%s: %s", cases[i].coordinator, err);
		assert_string_equal(b.cluster.coordinator_host, cases[i].host);
		assert_int_equal(b.cluster.coordinator_port, cases[i].port);
		teardown(NULL);
	}
}

/* What mpirun sets for a rank, with the coordinator and the secret. */
static void open_mpi_env(const char *rank, const char *size)
{
	setenv("OMPI_COMM_WORLD_RANK", rank, 1);
	setenv("OMPI_COMM_WORLD_SIZE", size, 1);
	setenv("SELENE_COORDINATOR", "localhost:7", 1);
	setenv("SELENE_SECRET_FILE", secret_path, 1);
}

static void test_bootstrap_open_mpi(void **state)
{
	struct launch_bootstrap b;
	char err[256];

	(void)state;
	open_mpi_env("1", "3");
	assert_int_equal(boot(&b, err, sizeof(err)), 0);
	assert_int_equal(b.cluster.rank, 1);
	assert_int_equal(b.cluster.world_size, 3);
}

/*
 * Under mpirun an empty SELENE_RANK is unset, so Open MPI's numbers are
 * taken (not a world of one on every rank); SELENE_WORLD_SIZE without
 * SELENE_RANK is refused rather than ignored.
 */
static void test_bootstrap_open_mpi_empty_selene_rank(void **state)
{
	struct launch_bootstrap b;
	char err[256] = "";

	(void)state;
	setenv("SELENE_RANK", "", 1);
	setenv("SELENE_WORLD_SIZE", "", 1);
	open_mpi_env("2", "4");
	assert_int_equal(boot(&b, err, sizeof(err)), 0);
	assert_int_equal(b.cluster.rank, 2);
	assert_int_equal(b.cluster.world_size, 4);
	setenv("SELENE_WORLD_SIZE", "8", 1);
	assert_int_equal(boot(&b, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "SELENE_WORLD_SIZE is set but SELENE_RANK is not"));
}

/* Each wrong environment is refused with the variable's name. */
static void test_bootstrap_refusals(void **state)
{
	static const struct {
		const char *rank, *world, *coordinator, *secret, *says;
	} cases[] = {
		{ "4", "4", "h:1", "ok", "SELENE_RANK" },          /* rank outside the world */
		{ "1", NULL, "h:1", "ok", "SELENE_WORLD_SIZE" },   /* half set */
		{ "x", "4", "h:1", "ok", "SELENE_RANK" },          /* not a number */
		{ "1", "4", NULL, "ok", "SELENE_COORDINATOR" },
		{ "1", "4", "h", "ok", "SELENE_COORDINATOR" },     /* no port */
		{ "1", "4", "h:0", "ok", "port" },
		{ "1", "4", "h:70000", "ok", "port" },
		{ "1", "4", "[::1]", "ok", "brackets" },           /* no port */
		{ "1", "4", "[::1:5", "ok", "brackets" },          /* no closing bracket */
		{ "1", "4", "::1:5", "ok", "brackets" },           /* IPv6 without brackets */
		{ "1", "4", "[]:5", "ok", "SELENE_COORDINATOR" },  /* no host */
		{ "1", "4", "[::1]:", "ok", "port" },
		{ "1", "4", "[::1]:70000", "ok", "port" },
		{ "1", "4", "h:1", NULL, "SELENE_SECRET_FILE" },
		{ "1", "4", "h:1", "accept=yes", "SELENE_ACCEPT_EMPTY_RANKS" },
		{ "1", "4", "h:1", "missing", "No such file" },
		{ "1", "4", "h:1", "short", "exactly 32 bytes" },
		{ "1", "4", "h:1", "long", "exactly 32 bytes" },
		/* decimal digits only: no blanks, signs or wrapped negatives */
		{ "-18446744073709551615", "2", "h:1", "ok", "SELENE_RANK" },
		{ "0", "-18446744073709551615", "h:1", "ok", "SELENE_WORLD_SIZE" },
		{ " +0", "2", "h:1", "ok", "SELENE_RANK" },
		{ "1", "2", "h:-18446744073709549616", "ok", "port" },
		{ "1", "2", "h: +80", "ok", "port" },
		/* a coordinator or secret without rank and world: a launch that lost them */
		{ NULL, NULL, "h:1", "ok", "SELENE_COORDINATOR or SELENE_SECRET_FILE is set" },
		{ NULL, NULL, NULL, "ok", "SELENE_COORDINATOR or SELENE_SECRET_FILE is set" },
		/* checked in a world of one too */
		{ "0", "1", NULL, "accept=yes", "SELENE_ACCEPT_EMPTY_RANKS" },
		/* a FIFO or a directory as the secret: said, never waited on */
		{ "1", "4", "h:1", "fifo", "is not a regular file" },
		{ "1", "4", "h:1", "dir", "is not a regular file" },
		/* readable or writable beyond its owner: refused, as ssh refuses a key */
		{ "1", "4", "h:1", "mode=0644", "permissions 0644 for" },
		{ "1", "4", "h:1", "mode=0640", "permissions 0640 for" },
		{ "1", "4", "h:1", "mode=0604", "permissions 0604 for" },
		{ "1", "4", "h:1", "mode=0620", "permissions 0620 for" },
		{ "1", "4", "h:1", "mode=0602", "permissions 0602 for" },
	};
	char short_path[600], long_path[600];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct launch_bootstrap b;
		char err[256];
		const char *secret = cases[i].secret;

		setup(NULL);
		snprintf(short_path, sizeof(short_path), "%s/short", dir);
		snprintf(long_path, sizeof(long_path), "%s/long", dir);
		write_file(short_path, 31);
		write_file(long_path, 33);
		if (cases[i].rank)
			setenv("SELENE_RANK", cases[i].rank, 1);
		if (cases[i].world)
			setenv("SELENE_WORLD_SIZE", cases[i].world, 1);
		if (cases[i].coordinator)
			setenv("SELENE_COORDINATOR", cases[i].coordinator, 1);
		if (secret && strcmp(secret, "accept=yes") == 0) {
			setenv("SELENE_ACCEPT_EMPTY_RANKS", "yes", 1);
			secret = "ok";
		}
		if (secret && strcmp(secret, "fifo") == 0) {
			snprintf(short_path, sizeof(short_path), "%s/fifo", dir);
			assert_int_equal(mkfifo(short_path, 0600), 0);
			secret = "short";
		} else if (secret && strcmp(secret, "dir") == 0) {
			secret = "short";
			snprintf(short_path, sizeof(short_path), "%s", dir);
		} else if (secret && strncmp(secret, "mode=", 5) == 0) {
			assert_int_equal(chmod(secret_path, (mode_t)strtoul(secret + 5, NULL, 8)), 0);
			secret = "ok";
		}
		if (secret)
			setenv("SELENE_SECRET_FILE",
			       strcmp(secret, "ok") == 0 ? secret_path :
			       strcmp(secret, "short") == 0 ? short_path :
			       strcmp(secret, "long") == 0 ? long_path : "/nonexistent/secret", 1);
		assert_int_equal(boot(&b, err, sizeof(err)), -EINVAL);
		if (!strstr(err, cases[i].says))
			fail_msg("case %zu: \"%s\" does not say %s", i, err, cases[i].says);
		teardown(NULL);
	}
}

static uint32_t ip(const char *text)
{
	struct in_addr a;

	assert_int_equal(inet_pton(AF_INET, text, &a), 1);
	return a.s_addr;
}

static void add_interface(struct launch_interfaces *i, const char *addr, const char *mask)
{
	i->addr[i->count] = ip(addr);
	i->mask[i->count] = ip(mask);
	i->count++;
}

/*
 * The MPI bootstrap's routing (launch_route): loopback on rank zero's host
 * (same boot id and namespace, whatever the interfaces); otherwise rank
 * zero's address on a subnet the peer shares, from the peer's address
 * there, skipping an address both carry (docker0's); no shared subnet is
 * refused.
 */
static void test_bootstrap_route(void **state)
{
	struct launch_interfaces zero = { .host_id = "boot-a/4026531840" };
	struct launch_interfaces same = { .host_id = "boot-a/4026531840" };
	struct launch_interfaces other = { .host_id = "boot-a/4026532999" };
	struct launch_interfaces far = { .host_id = "boot-b/4026531840" };
	uint32_t to, from;

	(void)state;
	add_interface(&zero, "172.17.0.1", "255.255.0.0");    /* docker0, on both */
	add_interface(&zero, "10.1.0.5", "255.255.255.0");
	add_interface(&zero, "198.18.7.11", "255.255.255.0");
	assert_true(launch_route(&zero, &same, &to, &from));
	assert_true(to == htonl(INADDR_LOOPBACK) && from == htonl(INADDR_LOOPBACK));

	add_interface(&other, "172.17.0.1", "255.255.0.0");
	add_interface(&other, "198.18.7.12", "255.255.255.0");
	assert_true(launch_route(&zero, &other, &to, &from));
	assert_true(to == ip("198.18.7.11") && from == ip("198.18.7.12"));

	/* another namespace on the same machine is another host */
	add_interface(&far, "192.168.9.9", "255.255.255.0");
	assert_false(launch_route(&zero, &far, &to, &from));
	add_interface(&far, "172.17.0.1", "255.255.0.0"); /* only the shared docker0 */
	assert_false(launch_route(&zero, &far, &to, &from));
	add_interface(&far, "10.1.0.77", "255.255.255.0");
	assert_true(launch_route(&zero, &far, &to, &from));
	assert_true(to == ip("10.1.0.5") && from == ip("10.1.0.77"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_bootstrap_world_of_one, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bootstrap_full, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bootstrap_open_mpi, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bootstrap_open_mpi_empty_selene_rank, setup,
						teardown),
		cmocka_unit_test(test_bootstrap_ipv6_coordinator),
		cmocka_unit_test(test_bootstrap_refusals),
		cmocka_unit_test(test_bootstrap_route),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
