/*
 * The selene program (launch/): help for every command, ls and verify over
 * records the library wrote, a flipped payload bit found by verify, and
 * clear failures for bad arguments and a malformed SELENE_FAILPOINTS, the
 * demo of one rank and the store across three ranks (cluster-demo). It
 * runs the built program named by $SELENE_PROGRAM (default build/selene).
 */
#include "tests/testutil.h"

#include "common/base.h"
#include "common/log.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

struct run_result {
	int status;
	char out[65536];
};

/* Runs the program with args (NULL-terminated), stdout and stderr joined. */
static void run(struct run_result *r, const char *env, const char *const *args)
{
	const char *program = getenv("SELENE_PROGRAM");
	char path[] = "/tmp/selene-cli-XXXXXX";
	int fd = mkstemp(path);
	const char *argv[16];
	ssize_t n;
	pid_t pid;
	int i = 0;

	if (!program)
		program = "build/selene";
	argv[i++] = program;
	for (; args[i - 1] && i < 15; i++)
		argv[i] = args[i - 1];
	argv[i] = NULL;
	pid = fork();
	if (pid == 0) {
		dup2(fd, 1);
		dup2(fd, 2);
		if (env)
			putenv((char *)env);
		else
			unsetenv("SELENE_FAILPOINTS");
		execv(program, (char *const *)argv);
		_exit(127);
	}
	waitpid(pid, &r->status, 0);
	n = pread(fd, r->out, sizeof(r->out) - 1, 0);
	r->out[n > 0 ? n : 0] = '\0';
	close(fd);
	unlink(path);
	assert_true(WIFEXITED(r->status));
	r->status = WEXITSTATUS(r->status);
}

static void expect(const struct run_result *r, int status, const char *needle)
{
	if (r->status != status || !strstr(r->out, needle))
		fail_msg("exit %d (wanted %d), output lacks '%s':\n%s", r->status,
			 status, needle, r->out);
}

/* Every command explains itself with --help; bad usage exits 2. */
static void test_cli_help(void **state)
{
	static const char *const commands[] = { "ls", "verify", "failpoints", "demo",
						"cluster-demo" };
	struct run_result *r = malloc(sizeof(*r));

	(void)state;
	run(r, NULL, (const char *[]){ "--help", NULL });
	expect(r, 0, "usage: selene COMMAND");
	for (size_t i = 0; i < SEL_ARRAY_SIZE(commands); i++) {
		assert_non_null(strstr(r->out, commands[i]));
	}
	for (size_t i = 0; i < SEL_ARRAY_SIZE(commands); i++) {
		struct run_result *h = malloc(sizeof(*h));

		run(h, NULL, (const char *[]){ commands[i], "--help", NULL });
		expect(h, 0, "usage: selene");
		free(h);
	}
	run(r, NULL, (const char *[]){ "frobnicate", NULL });
	expect(r, 2, "unknown command 'frobnicate'");
	run(r, NULL, (const char *[]){ "verify", NULL });
	expect(r, 2, "usage: selene verify DIR");
	run(r, NULL, (const char *[]){ "ls", "/nonexistent/selene", NULL });
	expect(r, 2, "is not a directory");
	run(r, NULL, (const char *[]){ "--version", NULL });
	expect(r, 0, "selene 0.");
	free(r);
}

/* selene failpoints lists them; a malformed configuration stops the program. */
static void test_cli_failpoints(void **state)
{
	struct run_result *r = malloc(sizeof(*r));

	(void)state;
	run(r, NULL, (const char *[]){ "failpoints", NULL });
	expect(r, 0, "record.after_rename");
	expect(r, 0, "scan.before_drop_orphan");
	run(r, "SELENE_FAILPOINTS=disk.write=explode", (const char *[]){ "failpoints", NULL });
	expect(r, 2, "bad action 'explode'");
	free(r);
}

/* verify says written records are good, and names a flipped payload bit. */
static void test_cli_verify_good_and_flipped(void **state)
{
	char *base = tu_make_temp_dir("cli");
	struct run_result *r = malloc(sizeof(*r));
	struct rec_geometry *g = malloc(sizeof(*g));
	struct tu_record a, b;
	struct rec_header h;
	struct rec_dir *dir;
	char *path;

	(void)state;
	tu_geometry(g, 64, 4, 6000, 10000, 2, 4);
	dir = tu_dir_open(base, g, true);
	tu_record_make(&a, g, 1, 64 * 3, NULL, 1);
	tu_record_make(&b, g, 1, 64 * 5 + 9, &a, 2);
	assert_int_equal(tu_record_write(dir, &a, 0), 0);
	assert_int_equal(tu_record_write(dir, &b, 0), 0);
	assert_int_equal(rec_truncate_row(dir, &a.key), 0);

	run(r, NULL, (const char *[]){ "verify", base, NULL });
	expect(r, 0, "verified 2 records in 1 directories: 2 good, 0 bad");
	run(r, NULL, (const char *[]){ "verify", rec_dir_path(dir), NULL });
	expect(r, 0, "2 good, 0 bad");
	run(r, NULL, (const char *[]){ "ls", base, NULL });
	expect(r, 0, "KEY");
	expect(r, 0, "00000000000000c0-");
	assert_non_null(strstr(r->out, "0000000000000149-"));
	run(r, NULL, (const char *[]){ "ls", "--json", base, NULL });
	expect(r, 0, "\"consumed\":192,\"parent\":null,\"first_page\":0,\"pages\":3,\"row\":false");
	expect(r, 0, "\"consumed\":329,\"parent\":\"00000000000000c0-");

	/* One flipped payload bit in b's last page. */
	tu_record_header(&h, dir, &b);
	path = tu_record_path(dir, &b.key);
	tu_flip_bit(path, h.page_offset + h.page_stride + 77);
	run(r, NULL, (const char *[]){ "verify", base, NULL });
	expect(r, 1, "1 good, 1 bad");
	expect(r, 1, "BAD ");
	expect(r, 1, strrchr(path, '/') + 1);
	expect(r, 1, "page 4 (stored page 1) fails its checksum");
	/* ls still lists it: its header is sound. */
	run(r, NULL, (const char *[]){ "ls", base, NULL });
	expect(r, 0, "0000000000000149-");
	/* a broken header is named by both */
	tu_flip_bit(path, 10);
	run(r, NULL, (const char *[]){ "ls", base, NULL });
	expect(r, 1, "invalid: ");
	run(r, NULL, (const char *[]){ "verify", base, NULL });
	expect(r, 1, "R-REC-3");
	free(path);
	tu_record_free(&a);
	tu_record_free(&b);
	rec_dir_close(dir);
	tu_remove_tree(base);
	free(g);
	free(r);
}

/* The demo writes, restarts, restores and verifies one rank's chain. */
static void test_cli_demo(void **state)
{
	char *base = tu_make_temp_dir("demo");
	struct run_result *r = malloc(sizeof(*r));
	char dir_arg[512];

	(void)state;
	snprintf(dir_arg, sizeof(dir_arg), "%s/rank%%r", base);
	run(r, NULL, (const char *[]){ "demo", "--dir", dir_arg, "--rank", "1",
				       "--world", "2", "--planes", "3",
				       "--plane-bytes", "5000", "--tokens", "2000",
				       NULL });
	expect(r, 0, "rank 1/2: stored 5 checkpoints");
	expect(r, 0, "found 5/5");
	expect(r, 0, "verified byte-exact");
	run(r, NULL, (const char *[]){ "verify", base, NULL });
	expect(r, 0, "verified 5 records in 1 directories: 5 good, 0 bad");
	free(r);
	tu_remove_tree(base);
}

/* A free loopback port (closed again: rank zero binds it with SO_REUSEADDR). */
static uint16_t free_port(void)
{
	struct sockaddr_in addr = { .sin_family = AF_INET };
	socklen_t len = sizeof(addr);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&addr, &len), 0);
	close(fd);
	return ntohs(addr.sin_port);
}

/*
 * selene cluster-demo with three ranks started by hand through the
 * environment bootstrap (no mpirun): every rank verifies both phases; a
 * missing variable is refused by name.
 */
static void test_cli_cluster_demo(void **state)
{
	enum { RANKS = 3 };
	char *base = tu_make_temp_dir("cluster-demo");
	const char *program = getenv("SELENE_PROGRAM");
	struct run_result *r = malloc(sizeof(*r));
	char dir_arg[512], secret[600], coordinator[64], out[RANKS][600];
	pid_t pids[RANKS];
	int fd;

	(void)state;
	if (!program)
		program = "build/selene";
	snprintf(dir_arg, sizeof(dir_arg), "%s/rank%%r", base);
	snprintf(secret, sizeof(secret), "%s/secret", base);
	fd = open(secret, O_WRONLY | O_CREAT, 0600);
	assert_int_equal(write(fd, "0123456789abcdef0123456789abcdef", 32), 32);
	close(fd);
	snprintf(coordinator, sizeof(coordinator), "127.0.0.1:%u", free_port());
	for (int k = 0; k < RANKS; k++) {
		snprintf(out[k], sizeof(out[k]), "%s/out%d", base, k);
		pids[k] = fork();
		assert_true(pids[k] >= 0);
		if (pids[k] == 0) {
			char rank[16];

			fd = open(out[k], O_WRONLY | O_CREAT | O_TRUNC, 0600);
			dup2(fd, 1);
			dup2(fd, 2);
			snprintf(rank, sizeof(rank), "%d", k);
			setenv("SELENE_RANK", rank, 1);
			setenv("SELENE_WORLD_SIZE", "3", 1);
			setenv("SELENE_COORDINATOR", coordinator, 1);
			setenv("SELENE_SECRET_FILE", secret, 1);
			execl(program, program, "cluster-demo", "--dir", dir_arg, (char *)NULL);
			_exit(127);
		}
	}
	for (int k = 0; k < RANKS; k++) {
		int status, n;

		assert_int_equal(waitpid(pids[k], &status, 0), pids[k]);
		fd = open(out[k], O_RDONLY);
		n = (int)read(fd, r->out, sizeof(r->out) - 1);
		close(fd);
		r->out[n > 0 ? n : 0] = '\0';
		r->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
		expect(r, 0, "phase 1: verified");
		expect(r, 0, "phase 2: verified");
		if (k == 0)
			expect(r, 0, "after restarting every rank, 640 tokens restored");
	}
	run(r, NULL, (const char *[]){ "verify", base, NULL });
	expect(r, 0, "verified 15 records in 3 directories: 15 good, 0 bad");
	run(r, "SELENE_WORLD_SIZE=2", (const char *[]){ "cluster-demo", "--dir", dir_arg, NULL });
	expect(r, 2, "SELENE_RANK and SELENE_WORLD_SIZE must both be set");
	free(r);
	tu_remove_tree(base);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cli_help),
		cmocka_unit_test(test_cli_failpoints),
		cmocka_unit_test(test_cli_verify_good_and_flipped),
		cmocka_unit_test(test_cli_demo),
		cmocka_unit_test(test_cli_cluster_demo),
	};

	return cmocka_run_group_tests_name("cli", tests, NULL, NULL);
}
