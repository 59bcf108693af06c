/*
 * The selene program (launch/): help for every command, ls and verify over
 * records the library wrote, a flipped payload bit found by verify, and
 * clear failures for bad arguments and a malformed SELENE_FAILPOINTS, the
 * demo of one rank and the store across three ranks (cluster-demo), and the
 * reference worker (selene run): a GPU hit, a restore after a restart, a
 * missed expectation, a corrupt record refused rather than restored, bad
 * traces and flags, and three ranks under mpirun where it is installed. It
 * runs the built program named by $SELENE_PROGRAM (default build/selene).
 */
#include "tests/testutil.h"

#include "common/base.h"
#include "common/log.h"
#include "selene/selene.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEL_STR_(x) #x
#define SEL_STR(x) SEL_STR_(x)

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
	const char *argv[32];
	ssize_t n;
	pid_t pid;
	int i = 0;

	if (!program)
		program = "build/selene";
	argv[i++] = program;
	for (; args[i - 1] && i < 31; i++)
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
						"cluster-demo", "run", "pool" };
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
	/* selene pool: its secret and memory are required, the secret kept private */
	run(r, NULL, (const char *[]){ "pool", "--memory", "4M", NULL });
	expect(r, 2, "--secret and --memory are required");
	{
		char *dir = tu_make_temp_dir("cli-pool"), path[512];
		FILE *f;

		snprintf(path, sizeof(path), "%s/secret", dir);
		f = fopen(path, "w");
		assert_non_null(f);
		fputs("0123456789abcdef0123456789abcdef", f);
		fclose(f);
		assert_int_equal(chmod(path, 0644), 0);
		run(r, NULL, (const char *[]){ "pool", "--secret", path, "--memory", "4M", NULL });
		expect(r, 2, "too open");
		run(r, NULL, (const char *[]){ "pool", "--secret", path, "--memory", "1K", NULL });
		expect(r, 2, "--memory");
		/* a disk limit needs the disk tier it limits */
		assert_int_equal(chmod(path, 0600), 0);
		run(r, NULL, (const char *[]){ "pool", "--secret", path, "--memory", "4M",
					       "--disk-limit", "8M", NULL });
		expect(r, 2, "--disk-limit limits the --dir tier");
		run(r, NULL, (const char *[]){ "pool", "--secret", path, "--memory", "4M",
					       "--dir", dir, "--disk-limit", "1K", NULL });
		expect(r, 2, "--disk-limit");
		tu_remove_tree(dir);
	}
	run(r, NULL, (const char *[]){ "verify", NULL });
	expect(r, 2, "usage: selene verify DIR");
	/* a directory that is missing is met while running: 1, not a usage error */
	run(r, NULL, (const char *[]){ "ls", "/nonexistent/selene", NULL });
	expect(r, 1, "/nonexistent/selene: No such file or directory");
	assert_null(strstr(r->out, "KEY")); /* no header for a listing that never starts */
	run(r, NULL, (const char *[]){ "ls", "/dev/null", NULL });
	expect(r, 1, "/dev/null is not a directory");
	run(r, NULL, (const char *[]){ "verify", "/nonexistent/selene", NULL });
	expect(r, 1, "/nonexistent/selene: No such file or directory");
	run(r, NULL, (const char *[]){ "--version", NULL });
	expect(r, 0, "selene " SEL_STR(SELENE_VERSION_MAJOR) "." SEL_STR(SELENE_VERSION_MINOR) ".");
	/* Open MPI's numbers, malformed: named, never taken for 0 or wrapped */
	run(r, "OMPI_COMM_WORLD_RANK=abc", (const char *[]){ "demo", "--dir", "/tmp", NULL });
	expect(r, 2, "OMPI_COMM_WORLD_RANK 'abc': not a number");
	run(r, "OMPI_COMM_WORLD_LOCAL_RANK=4294967297",
	    (const char *[]){ "run", "--trace", "/dev/null", "--dir", "/tmp", NULL });
	expect(r, 2, "OMPI_COMM_WORLD_LOCAL_RANK '4294967297'");
	run(r, "OMPI_COMM_WORLD_LOCAL_SIZE=x",
	    (const char *[]){ "run", "--trace", "/dev/null", "--dir", "/tmp", NULL });
	expect(r, 2, "OMPI_COMM_WORLD_LOCAL_SIZE 'x'");
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
	run(r, "SELENE_FAILPOINTS=disk.write=1*off->1*off->1*off->1*off->1*off->1*off->1*off->"
	       "1*off->off", (const char *[]){ "failpoints", NULL });
	expect(r, 2, "more than 8 terms for 'disk.write'");
	/* the list the message points at is still printed */
	run(r, "SELENE_FAILPOINTS=disk.wrte=return", (const char *[]){ "failpoints", NULL });
	expect(r, 2, "no failpoint named 'disk.wrte'");
	expect(r, 2, "disk.write ");
	run(r, "SELENE_FAILPOINTS=disk.wrte=return", (const char *[]){ "ls", "/tmp", NULL });
	expect(r, 2, "no failpoint named 'disk.wrte'");
	assert_null(strstr(r->out, "KEY"));
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
	expect(r, 0, "verified 2 records in 1 directory: 2 good, 0 bad");
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

/* Copies the program under test to path, mode 0755. */
static void copy_program(const char *path)
{
	const char *program = getenv("SELENE_PROGRAM");
	char buf[65536];
	int in, out;
	ssize_t n;

	in = open(program ? program : "build/selene", O_RDONLY | O_CLOEXEC);
	assert_true(in >= 0);
	out = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0755);
	assert_true(out >= 0);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		assert_int_equal(write(out, buf, (size_t)n), n);
	assert_int_equal(n, 0);
	assert_int_equal(fchmod(out, 0755), 0);
	close(in);
	close(out);
}

/*
 * The program's help says what each exit status means, and run's help
 * names every option run takes, --event-timeout-ms among them.
 */
static void test_cli_help_exit_status_and_options(void **state)
{
	static const char *const run_options[] = {
		"--trace", "--dir", "--results", "--stored-log", "--page-tokens", "--planes",
		"--row-bytes", "--gpu-pages", "--gpu-rows", "--device", "--device-ordinal",
		"--disk-limit", "--event-timeout-ms", "--accept-empty-ranks", "--metrics-port",
		"--metrics-address",
	};
	struct run_result *r = malloc(sizeof(*r));

	(void)state;
	run(r, NULL, (const char *[]){ "--help", NULL });
	expect(r, 0, "exit status, every command:");
	expect(r, 0, "  1   the command ran and failed or found a problem");
	expect(r, 0, "  2   usage: an unknown command, flag or operand");
	run(r, NULL, (const char *[]){ "run", "--help", NULL });
	for (size_t i = 0; i < SEL_ARRAY_SIZE(run_options); i++)
		expect(r, 0, run_options[i]);
	run(r, NULL, (const char *[]){ "ls", "--help", NULL });
	expect(r, 0, "exit status: 0 records listed, 1 ");
	free(r);
}

/*
 * ls over several rank directories says whose each record is (RANK/WORLD,
 * and in --json); the header comes once, and not at all before the error
 * of a directory with no records; counts of one are singular.
 */
static void test_cli_ls_ranks_and_plurals(void **state)
{
	char *base = tu_make_temp_dir("cli-ranks"), *empty = tu_make_temp_dir("cli-none");
	struct run_result *r = malloc(sizeof(*r));
	struct rec_geometry *g = malloc(sizeof(*g));
	struct tu_record rec[2];
	struct rec_dir *dirs[2];
	char sub[1024];
	const char *line;

	(void)state;
	for (uint32_t rank = 0; rank < 2; rank++) {
		snprintf(sub, sizeof(sub), "%s/rank%u", base, rank);
		assert_int_equal(mkdir(sub, 0755), 0);
		tu_geometry(g, 64, 2, 4096, 4096, rank, 2);
		dirs[rank] = tu_dir_open(sub, g, false);
		tu_record_make(&rec[rank], g, 7, 64 * 2, NULL, 7);
		assert_int_equal(tu_record_write(dirs[rank], &rec[rank], 0), 0);
	}
	run(r, NULL, (const char *[]){ "ls", base, NULL });
	expect(r, 0, "RANK      KEY");
	line = strstr(r->out, "\n0/2 ");
	assert_non_null(line);
	assert_non_null(strstr(line, "\n1/2 "));
	assert_null(strstr(strstr(r->out, "KEY") + 3, "KEY")); /* one header */
	run(r, NULL, (const char *[]){ "ls", "--json", base, NULL });
	expect(r, 0, "\"first_rank\":0,\"rank_count\":1,\"world_size\":2,\"key\":");
	expect(r, 0, "\"first_rank\":1,\"rank_count\":1,\"world_size\":2,\"key\":");
	run(r, NULL, (const char *[]){ "verify", base, NULL });
	expect(r, 0, "verified 2 records in 2 directories: 2 good, 0 bad");
	run(r, NULL, (const char *[]){ "verify", rec_dir_path(dirs[0]), NULL });
	expect(r, 0, "verified 1 record in 1 directory: 1 good, 0 bad");
	/* a record directory with no records: one directory, said alone */
	tu_record_free(&rec[0]);
	rec_dir_close(dirs[0]);
	tu_geometry(g, 64, 2, 4096, 4096, 0, 2);
	dirs[0] = tu_dir_open(empty, g, false);
	run(r, NULL, (const char *[]){ "ls", empty, NULL });
	expect(r, 1, "(1 record directory, empty)");
	assert_null(strstr(r->out, "KEY"));
	assert_null(strstr(r->out, "RANK"));
	tu_record_free(&rec[1]);
	rec_dir_close(dirs[0]);
	rec_dir_close(dirs[1]);
	tu_remove_tree(base);
	tu_remove_tree(empty);
	free(g);
	free(r);
}

/*
 * Verify names a directory or FIFO with a record's name
 * for what it is, NOT A RECORD, instead of calling it BAD.
 */
static void test_cli_verify_not_a_record(void **state)
{
	char reach[] = "/tmp/selene-cli-other-user-XXXXXX", program[64], base[64];
	struct run_result *r = malloc(sizeof(*r));
	struct rec_geometry *g = malloc(sizeof(*g));
	struct tu_record a, b, c;
	struct rec_dir *dir;
	char path[1024], name[REC_FILE_NAME_BYTES];

	(void)state;
	/*
	 * Everything the second part runs as another user lies in a fresh
	 * directory under /tmp that any user can reach (a copy of the program
	 * too): the checkout and TMPDIR may sit under a private directory.
	 */
	assert_non_null(mkdtemp(reach));
	assert_int_equal(chmod(reach, 0755), 0);
	snprintf(program, sizeof(program), "%s/selene", reach);
	copy_program(program);
	snprintf(base, sizeof(base), "%s/records", reach);
	assert_int_equal(mkdir(base, 0700), 0);
	tu_geometry(g, 64, 2, 4096, 4096, 0, 1);
	dir = tu_dir_open(base, g, false);
	tu_record_make(&a, g, 1, 64 * 2, NULL, 1);
	tu_record_make(&b, g, 2, 64 * 2, NULL, 2);
	tu_record_make(&c, g, 3, 64 * 2, NULL, 3);
	assert_int_equal(tu_record_write(dir, &a, 0), 0);
	rec_file_name(name, &b.key);
	snprintf(path, sizeof(path), "%s/%s", rec_dir_path(dir), name);
	assert_int_equal(mkdir(path, 0700), 0);
	rec_file_name(name, &c.key);
	snprintf(path, sizeof(path), "%s/%s", rec_dir_path(dir), name);
	assert_int_equal(mkfifo(path, 0600), 0);
	run(r, NULL, (const char *[]){ "verify", base, NULL });
	expect(r, 0, "1 good, 0 bad");
	expect(r, 0, "NOT A RECORD ");
	expect(r, 0, "a directory with a record's name");
	expect(r, 0, "a FIFO with a record's name");
	assert_null(strstr(r->out, "BAD "));
	/* ls says the same of them, and lists the record */
	run(r, NULL, (const char *[]){ "ls", base, NULL });
	expect(r, 0, "not a record: a FIFO with a record's name");
	expect(r, 0, "not a record: a directory with a record's name");
	assert_null(strstr(r->out, "invalid"));
	/*
	 * As a user who cannot read them: a sibling directory it cannot read is
	 * named and the others are still walked; a record it cannot read is
	 * UNREADABLE, not BAD; either makes the exit status 1 (met while
	 * running, not a usage error).
	 */
	{
		char locked[1024], other[1024];
		struct rec_dir *second;
		pid_t pid;
		int status;

		assert_int_equal(chmod(base, 0755), 0);
		snprintf(locked, sizeof(locked), "%s/a-locked", base);
		assert_int_equal(mkdir(locked, 0700), 0);
		snprintf(other, sizeof(other), "%s/z-other", base);
		assert_int_equal(mkdir(other, 0755), 0);
		second = tu_dir_open(other, g, false);
		assert_int_equal(tu_record_write(second, &b, 0), 0);
		assert_int_equal(chmod(rec_dir_path(second), 0755), 0);
		assert_int_equal(chmod(rec_dir_path(dir), 0755), 0);
		rec_file_name(name, &b.key);
		snprintf(path, sizeof(path), "%s/%s", rec_dir_path(second), name);
		assert_int_equal(chmod(path, 0600), 0);
		rec_file_name(name, &a.key);
		snprintf(path, sizeof(path), "%s/%s", rec_dir_path(dir), name);
		assert_int_equal(chmod(path, 0644), 0);
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			if (getuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
				_exit(99);
			if (getuid() == 0)
				_exit(98);
			if (access(program, X_OK) != 0)
				_exit(97); /* /tmp mounted noexec, say */
			setenv("SELENE_PROGRAM", program, 1);
			run(r, NULL, (const char *[]){ "verify", base, NULL });
			if (r->status != 1 || !strstr(r->out, "a-locked: Permission denied") ||
			    !strstr(r->out, "UNREADABLE ") || !strstr(r->out, "1 good, 0 bad") ||
			    strstr(r->out, "BAD "))
				_exit(1);
			run(r, NULL, (const char *[]){ "ls", base, NULL });
			if (r->status != 1 || !strstr(r->out, "cannot read it: Permission denied") ||
			    !strstr(r->out, "0000000000000080-")) {
				fprintf(stderr, "%d %s\n", r->status, r->out);
				_exit(2);
			}
			_exit(0);
		}
		assert_int_equal(waitpid(pid, &status, 0), pid);
		assert_true(WIFEXITED(status));
		rec_dir_close(second);
		if (WEXITSTATUS(status) == 97)
			printf("skipped the part as nobody: it cannot execute %s\n", program);
		else if (WEXITSTATUS(status) != 0)
			fail_msg("as nobody: check %d failed", WEXITSTATUS(status));
	}
	tu_record_free(&a);
	tu_record_free(&b);
	tu_record_free(&c);
	rec_dir_close(dir);
	tu_remove_tree(strdup(reach));
	free(g);
	free(r);
}

/*
 * ls and verify on a live store: while another process
 * evicts (unlinks) half the records and drops the rows of a quarter, every
 * run reports only good or gone records, never BAD, and exits 0; a
 * directory with no records says so and exits 1.
 */
static void test_cli_verify_live_and_empty(void **state)
{
	enum { RECORDS = 160, RUNS = 12 };
	char *base = tu_make_temp_dir("cli-live"), *empty = tu_make_temp_dir("cli-empty");
	struct run_result *r = malloc(sizeof(*r));
	struct rec_geometry *g = malloc(sizeof(*g));
	struct tu_record *recs = calloc(RECORDS, sizeof(*recs));
	struct rec_dir *dir;
	int status;
	pid_t pid;

	(void)state;
	run(r, NULL, (const char *[]){ "verify", empty, NULL });
	expect(r, 1, "no records in");
	run(r, NULL, (const char *[]){ "ls", empty, NULL });
	expect(r, 1, "no record directory");
	tu_geometry(g, 64, 4, 6000, 10000, 0, 1);
	dir = tu_dir_open(base, g, false);
	for (int i = 0; i < RECORDS; i++) {
		tu_record_make(&recs[i], g, 100 + (uint64_t)i, 64 * 3, NULL, (uint64_t)i);
		assert_int_equal(tu_record_write(dir, &recs[i], 0), 0);
	}
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		for (int i = 0; i < RECORDS; i++) {
			char *path = tu_record_path(dir, &recs[i].key);

			if (i % 2 == 0)
				unlink(path);
			else if (i % 4 == 1)
				rec_truncate_row(dir, &recs[i].key);
			free(path);
			usleep(2000);
		}
		_exit(0);
	}
	for (int k = 0; k < RUNS; k++) {
		run(r, NULL, (const char *[]){ k % 2 ? "ls" : "verify", base, NULL });
		if (r->status != 0 || strstr(r->out, "BAD") || strstr(r->out, "invalid"))
			fail_msg("run %d on a live directory: exit %d\n%s", k, r->status, r->out);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	run(r, NULL, (const char *[]){ "verify", base, NULL });
	expect(r, 0, "verified 80 records in 1 directory: 80 good, 0 bad");
	for (int i = 0; i < RECORDS; i++)
		tu_record_free(&recs[i]);
	rec_dir_close(dir);
	tu_remove_tree(base);
	tu_remove_tree(empty);
	free(recs);
	free(g);
	free(r);
}

/*
 * ls --json escapes every string: under a directory
 * named with a quote, a backslash, control bytes, UTF-8 and a byte that is
 * not UTF-8, every line is valid JSON that names the directory.
 */
static void test_cli_ls_json_escapes(void **state)
{
	char *top = tu_make_temp_dir("cli-json");
	struct run_result *r = malloc(sizeof(*r));
	struct rec_geometry *g = malloc(sizeof(*g));
	char base[600], cmd[1400];
	struct tu_record a;
	struct rec_dir *dir;
	FILE *f;

	(void)state;
	snprintf(base, sizeof(base), "%s/odd\"dir\\\n\x01\t\xc3\xa9\xff", top);
	assert_int_equal(mkdir(base, 0755), 0);
	tu_geometry(g, 64, 2, 4096, 4096, 0, 1);
	dir = tu_dir_open(base, g, false);
	tu_record_make(&a, g, 1, 64 * 2, NULL, 1);
	assert_int_equal(tu_record_write(dir, &a, 0), 0);
	run(r, NULL, (const char *[]){ "ls", "--json", top, NULL });
	expect(r, 0, "odd\\\"dir\\\\\\u000a\\u0001\\u0009\xc3\xa9\\ufffd/");
	snprintf(cmd, sizeof(cmd), "%s/out.json", top);
	f = fopen(cmd, "w");
	assert_non_null(f);
	fputs(r->out, f);
	fclose(f);
	snprintf(cmd, sizeof(cmd), "/usr/bin/python3 -c 'import json, sys\n"
		 "for line in open(sys.argv[1], encoding=\"utf-8\"):\n"
		 "    d = json.loads(line)\n"
		 "    assert d[\"dir\"].find(\"odd\\\"dir\\\\\\n\\x01\\t\\xe9\\ufffd/\") > 0, d\n' "
		 "%s/out.json", top);
	if (system(cmd) != 0)
		fail_msg("ls --json wrote lines that are not JSON:\n%s", r->out);
	tu_record_free(&a);
	rec_dir_close(dir);
	tu_remove_tree(top);
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
	expect(r, 0, "verified 5 records in 1 directory: 5 good, 0 bad");
	free(r);
	tu_remove_tree(base);
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* Reads path into text (size bytes) every 10 ms until it holds needle or
 * tries reads are done; text holds the last read. */
static void read_until(const char *path, const char *needle, char *text, size_t size, int tries)
{
	for (int i = 0; i < tries && !strstr(text, needle); i++) {
		FILE *f;

		usleep(10000);
		f = fopen(path, "r");
		if (f) {
			text[fread(text, 1, size - 1, f)] = '\0';
			fclose(f);
		}
	}
}

/* The run's arguments: trace, dir, results; small planes and cache. */
static void run_worker(struct run_result *r, const char *trace, const char *dir,
		       const char *results)
{
	run(r, NULL, (const char *[]){ "run", "--trace", trace, "--dir", dir, "--device", "host",
				       "--planes", "2x8K,1x4K", "--row-bytes", "12K",
				       "--page-tokens", "16", "--gpu-pages", "40",
				       "--gpu-rows", "4", "--results", results, NULL });
}

/* Flips one byte of the first page of the record file whose name starts
 * with prefix, under base (one record directory below it). */
static void flip_page_byte(const char *base, const char *prefix)
{
	char cmd[1024];

	snprintf(cmd, sizeof(cmd), "f=$(ls %s/*/*/%s*.ckpt | head -1) && "
		 "printf '\\xff' | dd of=\"$f\" bs=1 seek=8192 conv=notrunc status=none && "
		 "[ -n \"$f\" ]", base, prefix);
	assert_int_equal(system(cmd), 0);
}

/*
 * selene run on one rank: a prefill, a GPU hit, a restart restoring from
 * the store (every byte checked), results lines and a summary; a missed
 * expectation exits 1 naming it; a flipped page byte makes the restore
 * fail with the checksum rather than hand back wrong bytes.
 */
static void test_cli_run_one_rank(void **state)
{
	char *base = tu_make_temp_dir("run");
	struct run_result *r = malloc(sizeof(*r));
	char dir[512], trace[512], results[512];

	(void)state;
	snprintf(dir, sizeof(dir), "%s/rank%%r", base);
	snprintf(trace, sizeof(trace), "%s/trace.jsonl", base);
	snprintf(results, sizeof(results), "%s/results.json", base);
	write_text(trace,
		   "{\"id\": \"a.1\", \"spans\": [[1, 100]], \"expect\": {\"prefilled\": 100}}\n"
		   "\n"
		   "{\"id\": \"a.2\", \"settle\": true, \"spans\": [[1, 100], [2, 50]],\n"
		   "\"note\": {\"skipped\": [1, 2.5, null, true]}, \"expect\": {\"gpu_reused\": 100}}\n");
	/* the line break inside a request is a parse error: lines are requests */
	run_worker(r, trace, dir, results);
	expect(r, 1, "line 3:");
	write_text(trace,
		   "{\"id\": \"a.1\", \"spans\": [[1, 100]], \"expect\": {\"prefilled\": 100}}\n"
		   "\n"
		   "{\"id\": \"a.2\", \"settle\": true, \"spans\": [[1, 100], [2, 50]], "
		   "\"note\": {\"skipped\": [1, 2.5, null, true]}, \"expect\": {\"gpu_reused\": 100}}\n");
	run_worker(r, trace, dir, results);
	expect(r, 0, "every reused page and row, byte-exact on every rank");
	expect(r, 0, "GPU cache hits   1 (100 tokens reused)");
	run(r, NULL, (const char *[]){ "verify", base, NULL });
	expect(r, 0, "2 good, 0 bad");

	/* a restart: the GPU cache is empty, the store holds 150 tokens */
	write_text(trace, "{\"id\": \"a.3\", \"spans\": [[1, 100], [2, 50], [3, 7]], "
			  "\"expect\": {\"gpu_reused\": 0, \"host_reused\": 150}}\n");
	run_worker(r, trace, dir, results);
	expect(r, 0, "host restores    1 (150 tokens;");
	{
		FILE *f = fopen(results, "r");
		char line[1024], last[1024] = "";

		assert_non_null(f);
		assert_non_null(fgets(line, sizeof(line), f));
		assert_non_null(strstr(line, "\"id\": \"a.3\", \"gpu_reused\": 0, "
					     "\"host_reused\": 150, \"prefilled\": 7"));
		assert_non_null(strstr(line, "\"verified\": true"));
		while (fgets(line, sizeof(line), f))
			strcpy(last, line);
		fclose(f);
		assert_non_null(strstr(last, "{\"summary\": {\"requests\": 1,"));
		assert_non_null(strstr(last, "\"verified\": true"));
	}

	/* an expectation the run does not meet */
	write_text(trace, "{\"id\": \"a.4\", \"spans\": [[1, 100], [2, 50], [3, 7]], "
			  "\"expect\": {\"host_reused\": 999}}\n");
	run_worker(r, trace, dir, results);
	expect(r, 1, "request \"a.4\" (line 1): expected host_reused 999, found 157");
	/* a missed expectation is not a wrong byte: reported apart */
	expect(r, 1, "verified         every reused page and row, byte-exact on every rank");
	expect(r, 1, "not met          1 expectation missed");
	expect(r, 1, "result           FAILED");

	/* a warm tier: named at startup; empty after a restart, the disk restores */
	write_text(trace, "{\"id\": \"a.w\", \"spans\": [[1, 100], [2, 50], [3, 7]], "
			  "\"expect\": {\"gpu_reused\": 0, \"host_reused\": 157}}\n");
	run(r, NULL, (const char *[]){ "run", "--trace", trace, "--dir", dir, "--device", "host",
				       "--planes", "2x8K,1x4K", "--row-bytes", "12K",
				       "--page-tokens", "16", "--gpu-pages", "40",
				       "--gpu-rows", "4", "--results", results, "--warm", "2M",
				       NULL });
	expect(r, 0, "host restores    1 (157 tokens;");
	assert_non_null(strstr(r->out, "; warm 2.0 MiB, 102 slots of 20 KiB, registered in "));
	run(r, NULL, (const char *[]){ "run", "--trace", trace, "--dir", dir, "--device", "host",
				       "--page-tokens", "16", "--warm", "2K", NULL });
	expect(r, 1, "a warm tier of 2048 bytes holds 0 slots");

	/* a corrupt page in the root record (the first 100 tokens, 6 pages) */
	flip_page_byte(base, "0000000000000064");
	write_text(trace, "{\"id\": \"a.5\", \"spans\": [[1, 100], [2, 50], [3, 7], [4, 3]]}\n");
	run_worker(r, trace, dir, results);
	expect(r, 1, "checksum");
	free(r);
	tu_remove_tree(base);
}

/* The lines of a --stored-log that name checkpoints (no markers, no index). */
static void read_stored_log(const char *path, char *text, size_t size, uint32_t *markers,
			    char *index, size_t index_size)
{
	char line[512];
	FILE *f = fopen(path, "r");

	assert_non_null(f);
	text[0] = '\0';
	*markers = 0;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "{\"publish", 9) == 0)
			(*markers)++;
		else if (strncmp(line, "{\"index\"", 8) == 0)
			snprintf(index, index_size, "%s", line);
		else
			strncat(text, line, size - strlen(text) - 1);
	}
	fclose(f);
}

/*
 * --stored-log: one flushed JSON line per checkpoint reported stored, naming
 * the request that prefilled it and its tokens (tests/torture reads it to
 * know what was committed before it kills a run), a line before and after
 * each publication, and the index's figures at the close; a checkpoint
 * already stored is not logged again, and an unwritable log path fails the
 * run.
 */
static void test_cli_run_stored_log(void **state)
{
	char *base = tu_make_temp_dir("stored-log");
	struct run_result *r = malloc(sizeof(*r));
	char dir[512], trace[512], log[512], text[1024] = "", index[512] = "";
	uint32_t markers;

	(void)state;
	snprintf(dir, sizeof(dir), "%s/rank%%r", base);
	snprintf(trace, sizeof(trace), "%s/trace.jsonl", base);
	snprintf(log, sizeof(log), "%s/stored.log", base);
	write_text(trace, "{\"id\": \"a.1\", \"spans\": [[1, 64]]}\n"
			  "{\"id\": \"a\\\"2\", \"settle\": true, \"spans\": [[1, 64], [2, 32]]}\n"
			  "{\"id\": \"b.1\", \"settle\": true, \"spans\": [[1, 64]]}\n");
	run(r, NULL, (const char *[]){ "run", "--trace", trace, "--dir", dir, "--device", "host",
				       "--planes", "2x4K", "--row-bytes", "4K", "--page-tokens",
				       "16", "--gpu-pages", "40", "--gpu-rows", "4",
				       "--stored-log", log, NULL });
	expect(r, 0, "2 offered");
	read_stored_log(log, text, sizeof(text), &markers, index, sizeof(index));
	assert_string_equal(text, "{\"id\": \"a.1\", \"consumed\": 64}\n"
				  "{\"id\": \"a\\\"2\", \"consumed\": 96}\n");
	assert_int_equal(markers, 4);
	assert_non_null(strstr(index, "\"records\": 2,"));

	run(r, NULL, (const char *[]){ "run", "--trace", trace, "--dir", dir, "--device", "host",
				       "--stored-log", "/proc/no-such/stored.log", NULL });
	expect(r, 1, "cannot write /proc/no-such/stored.log");
	free(r);
	tu_remove_tree(base);
}

/*
 * With a warm tier the stored log says when each record reached the disk:
 * written through, every stored line gets an "on_disk" line before the run
 * ends; written behind, none does (the close's drain writes them). A
 * policy that is neither is refused.
 */
static void test_cli_run_stored_log_warm(void **state)
{
	char *base = tu_make_temp_dir("stored-log-warm");
	struct run_result *r = malloc(sizeof(*r));
	char dir[512], trace[512], log[512], results[512], text[2048] = "", index[512] = "";
	uint32_t markers;
	FILE *f;
	size_t n;

	(void)state;
	snprintf(dir, sizeof(dir), "%s/rank%%r", base);
	snprintf(trace, sizeof(trace), "%s/trace.jsonl", base);
	snprintf(log, sizeof(log), "%s/stored.log", base);
	snprintf(results, sizeof(results), "%s/results.json", base);
	write_text(trace, "{\"id\": \"a.1\", \"spans\": [[1, 64]]}\n"
			  "{\"id\": \"a.2\", \"settle\": true, \"spans\": [[1, 64], [2, 32]]}\n");
	run(r, NULL, (const char *[]){ "run", "--trace", trace, "--dir", dir, "--device", "host",
				       "--planes", "2x4K", "--row-bytes", "4K", "--page-tokens",
				       "16", "--gpu-pages", "40", "--gpu-rows", "4",
				       "--warm", "1M", "--stored-log", log, "--results", results,
				       NULL });
	expect(r, 0, "2 offered");
	expect(r, 0, "warm tier        0 restores from warm slots, 0 partly, 0 records read "
		  "through; 2 written from warm");
	f = fopen(results, "r");
	assert_non_null(f);
	n = fread(text, 1, sizeof(text) - 1, f);
	text[n] = '\0';
	fclose(f);
	/* the summary line, still the last, carries the warm figures */
	assert_non_null(strstr(text, ", \"warm\": {\"hits\": 0, \"partial_hits\": 0, "
				     "\"read_throughs\": 0, \"writes\": 2, \"dirty_at_close\": 0}}}\n"));
	f = fopen(log, "r");
	assert_non_null(f);
	n = fread(text, 1, sizeof(text) - 1, f);
	text[n] = '\0';
	fclose(f);
	assert_non_null(strstr(text, "{\"id\": \"a.1\", \"consumed\": 64}\n"));
	assert_non_null(strstr(text, "{\"id\": \"a.1\", \"consumed\": 64, \"on_disk\": true}\n"));
	assert_non_null(strstr(text, "{\"id\": \"a.2\", \"consumed\": 96}\n"));
	assert_non_null(strstr(text, "{\"id\": \"a.2\", \"consumed\": 96, \"on_disk\": true}\n"));
	/* Stored before on disk. */
	assert_true(strstr(text, "\"consumed\": 64}") < strstr(text, "64, \"on_disk"));

	tu_remove_tree(base);
	base = tu_make_temp_dir("stored-log-warm");
	snprintf(dir, sizeof(dir), "%s/rank%%r", base);
	snprintf(trace, sizeof(trace), "%s/trace.jsonl", base);
	snprintf(log, sizeof(log), "%s/stored.log", base);
	write_text(trace, "{\"id\": \"a.1\", \"spans\": [[1, 64]]}\n");
	run(r, NULL, (const char *[]){ "run", "--trace", trace, "--dir", dir, "--device", "host",
				       "--planes", "2x4K", "--row-bytes", "4K", "--page-tokens",
				       "16", "--gpu-pages", "40", "--gpu-rows", "4",
				       "--warm", "1M", "--warm-policy", "write-behind",
				       "--stored-log", log, NULL });
	expect(r, 0, "1 offered");
	read_stored_log(log, text, sizeof(text), &markers, index, sizeof(index));
	assert_string_equal(text, "{\"id\": \"a.1\", \"consumed\": 64}\n");

	run(r, NULL, (const char *[]){ "run", "--trace", trace, "--dir", dir, "--device", "host",
				       "--warm", "1M", "--warm-policy", "lazy", NULL });
	expect(r, 2, "--warm-policy lazy: write-through or write-behind");
	free(r);
	tu_remove_tree(base);
}

/* --pool and --pool-secret go together, and the address is checked before any rank starts. */
static void test_cli_run_pool_arguments(void **state)
{
	struct run_result *r = malloc(sizeof(*r));

	(void)state;
	run(r, NULL, (const char *[]){ "run", "--trace", "t", "--dir", "d", "--pool",
				       "127.0.0.1:7000", NULL });
	expect(r, 2, "--pool needs --pool-secret FILE");
	run(r, NULL, (const char *[]){ "run", "--trace", "t", "--dir", "d", "--pool-secret",
				       "s", NULL });
	expect(r, 2, "--pool-secret needs --pool ADDR");
	run(r, NULL, (const char *[]){ "run", "--trace", "t", "--dir", "d", "--pool",
				       "127.0.0.1", "--pool-secret", "s", NULL });
	expect(r, 2, "--pool: pool '127.0.0.1' is not host:port");
	run(r, NULL, (const char *[]){ "run", "--trace", "t", "--dir", "d", "--pool",
				       "[::1]:70000", "--pool-secret", "s", NULL });
	expect(r, 2, "the port must be 1-65535");
	run(r, NULL, (const char *[]){ "run", "--help", NULL });
	expect(r, 0, "--pool-secret FILE");
	{
		char *base = tu_make_temp_dir("run-pool");
		char dir[512], trace[512], secret[512];
		int fd;

		snprintf(dir, sizeof(dir), "%s/rank%%r", base);
		snprintf(trace, sizeof(trace), "%s/trace.jsonl", base);
		snprintf(secret, sizeof(secret), "%s/pool.secret", base);
		write_text(trace, "{\"id\": \"a.1\", \"spans\": [[1, 64]]}\n");
		write_text(secret, "0123456789abcdef0123456789abcdef");
		/* group-readable: refused before any rank starts, naming the file */
		chmod(secret, 0640);
		run(r, NULL, (const char *[]){ "run", "--trace", trace, "--dir", dir, "--device",
					       "host", "--planes", "2x4K", "--row-bytes", "4K",
					       "--page-tokens", "16", "--gpu-pages", "40",
					       "--gpu-rows", "4", "--pool", "127.0.0.1:9",
					       "--pool-secret", secret, NULL });
		assert_int_not_equal(r->status, 0);
		assert_non_null(strstr(r->out, "pool_secret_file: permissions 0640"));
		fd = open(secret, O_RDONLY);
		assert_true(fd >= 0);
		assert_int_equal(fchmod(fd, 0600), 0);
		close(fd);
		/* not attached: one warning, and the run is served by its local tiers */
		run(r, NULL, (const char *[]){ "run", "--trace", trace, "--dir", dir, "--device",
					       "host", "--planes", "2x4K", "--row-bytes", "4K",
					       "--page-tokens", "16", "--gpu-pages", "40",
					       "--gpu-rows", "4", "--pool", "127.0.0.1:9",
					       "--pool-secret", secret, NULL });
		expect(r, 0, "pool 127.0.0.1:9: not attached");
		assert_non_null(strstr(r->out, "1 offered"));
		tu_remove_tree(base);
	}
	free(r);
}

/*
 * --stored-log under a disk limit one record fills: a second conversation
 * evicts the first, and the log says so (the torture's evicting loop takes
 * it out of what must restore); a checkpoint a run restored is watched the
 * same way as one it stored.
 */
static void test_cli_run_stored_log_evictions(void **state)
{
	char *base = tu_make_temp_dir("stored-log-evict");
	struct run_result *r = malloc(sizeof(*r));
	char dir[512], dir2[512], trace[512], log[512], text[1024] = "", index[512] = "";
	const char *limit[] = { "--disk-limit", "60K", NULL };
	uint32_t markers;

	(void)state;
	snprintf(dir, sizeof(dir), "%s/a%%r", base);
	snprintf(dir2, sizeof(dir2), "%s/b%%r", base);
	snprintf(trace, sizeof(trace), "%s/trace.jsonl", base);
	snprintf(log, sizeof(log), "%s/stored.log", base);
	for (int part = 0; part < 3; part++) {
		write_text(trace, part == 0 ? "{\"id\": \"x\", \"settle\": true, \"spans\": [[1, 64]]}\n"
					      "{\"id\": \"y\", \"settle\": true, \"spans\": [[2, 64]]}\n" :
				  part == 1 ? "{\"id\": \"x\", \"spans\": [[1, 64]]}\n" :
					      "{\"id\": \"x2\", \"settle\": true, \"spans\": [[1, 64]]}\n"
					      "{\"id\": \"y\", \"settle\": true, \"spans\": [[2, 64]]}\n");
		run(r, NULL, (const char *[]){ "run", "--trace", trace, "--dir", part ? dir2 : dir,
					       "--device", "host", "--planes", "2x4K", "--row-bytes",
					       "4K", "--page-tokens", "16", "--gpu-pages", "40",
					       "--gpu-rows", "4", "--stored-log", log,
					       limit[part == 1 ? 2 : 0], limit[1], NULL });
		expect(r, 0, "result           ok");
		read_stored_log(log, text, sizeof(text), &markers, index, sizeof(index));
		if (part == 0) {
			/* y waits for x's unlink, and the trace ends first */
			assert_string_equal(text, "{\"id\": \"x\", \"consumed\": 64}\n"
						  "{\"id\": \"x\", \"consumed\": 64, \"evicted\": true}\n");
			assert_non_null(strstr(index, "\"records\": 0,"));
			assert_non_null(strstr(index, "\"evictions\": 1,"));
		} else if (part == 2) {
			assert_string_equal(text, "{\"id\": \"x2\", \"consumed\": 64, \"evicted\": true}\n");
		}
	}
	free(r);
	tu_remove_tree(base);
}

/*
 * A restore whose event does not come in time: the run stops at once and
 * never hands those page ids out again (a late copy would land in another
 * request's pages), and the record files stay good. A job table full of
 * stores answers a restore "queue full" for a moment: the worker waits for
 * a job to end and restores, rather than failing.
 */
static void test_cli_run_restore_timeout_and_busy_store(void **state)
{
	char *base = tu_make_temp_dir("run-late");
	struct run_result *r = malloc(sizeof(*r));
	char dir[512], trace[512], results[512], line[256];
	FILE *f;

	(void)state;
	snprintf(dir, sizeof(dir), "%s/rank%%r", base);
	snprintf(trace, sizeof(trace), "%s/trace.jsonl", base);
	snprintf(results, sizeof(results), "%s/results.json", base);
	write_text(trace, "{\"id\": \"x.1\", \"spans\": [[1, 128]]}\n");
	run_worker(r, trace, dir, results);
	expect(r, 0, "byte-exact");

	/* every read sleeps 3 s; the worker waits 1 s for an event */
	write_text(trace, "{\"id\": \"x.2\", \"spans\": [[1, 128], [2, 64]]}\n"
			  "{\"id\": \"y.1\", \"spans\": [[5, 128]]}\n");
	run(r, "SELENE_FAILPOINTS=disk.read=sleep(3000)",
	    (const char *[]){ "run", "--trace", trace, "--dir", dir, "--device", "host",
			      "--planes", "2x8K,1x4K", "--row-bytes", "12K", "--page-tokens", "16",
			      "--gpu-pages", "40", "--gpu-rows", "4", "--event-timeout-ms", "1000",
			      NULL });
	expect(r, 1, "did not end (Connection timed out); stopping, and page ids");
	if (strstr(r->out, "\"y.1\""))
		fail_msg("a request ran after the stop:\n%s", r->out);
	run(r, NULL, (const char *[]){ "verify", base, NULL });
	expect(r, 0, ", 0 bad");

	/* 70 one-page stores, each with a slow fdatasync, fill the job table */
	f = fopen(trace, "w");
	assert_non_null(f);
	for (int i = 0; i < 70; i++)
		fprintf(f, "{\"id\": \"one.%d\", \"spans\": [[%d, 16]]}\n", i, 1000 + i);
	fprintf(f, "{\"id\": \"x.3\", \"spans\": [[1, 128], [2, 64]], "
		   "\"expect\": {\"host_reused\": 128}}\n");
	fclose(f);
	run(r, "SELENE_FAILPOINTS=disk.fdatasync=sleep(20)",
	    (const char *[]){ "run", "--trace", trace, "--dir", dir, "--device", "host",
			      "--planes", "2x8K,1x4K", "--row-bytes", "12K", "--page-tokens", "16",
			      "--gpu-pages", "200", "--gpu-rows", "128", "--results", results,
			      NULL });
	expect(r, 0, "byte-exact");
	f = fopen(results, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "\"x.3\""))
			assert_non_null(strstr(line, "\"host_reused\": 128"));
	fclose(f);
	free(r);
	tu_remove_tree(base);
}

/*
 * A checkpoint the store still answers Retry when the trace ends (its
 * room is held by an eviction whose unlink is slow) is counted as refused
 * at the end, not as one that left the GPU first.
 */
static void test_cli_run_retry_refused_at_end(void **state)
{
	char *base = tu_make_temp_dir("run-retry");
	struct run_result *r = malloc(sizeof(*r));
	char dir[512], trace[512];

	(void)state;
	snprintf(dir, sizeof(dir), "%s/rank%%r", base);
	snprintf(trace, sizeof(trace), "%s/trace.jsonl", base);
	write_text(trace, "{\"id\": \"a\", \"spans\": [[1, 64]]}\n"
			  "{\"id\": \"b\", \"spans\": [[2, 64]]}\n");
	run(r, "SELENE_FAILPOINTS=disk.unlink=sleep(2000)",
	    (const char *[]){ "run", "--trace", trace, "--dir", dir, "--device", "host",
			      "--planes", "2x8K,1x4K", "--row-bytes", "12K", "--page-tokens", "16",
			      "--gpu-pages", "40", "--gpu-rows", "4", "--disk-limit", "150K", NULL });
	expect(r, 0, "1 retry (0 queued later, 0 left the GPU first, 1 still refused at the end");
	free(r);
	tu_remove_tree(base);
}

/* GET path from 127.0.0.1:port; the whole answer into r->out. */
static void http_get(struct run_result *r, uint16_t port, const char *request)
{
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons(port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	size_t used = 0;
	ssize_t n;

	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	assert_int_equal(write(fd, request, strlen(request)), (ssize_t)strlen(request));
	while ((n = read(fd, r->out + used, sizeof(r->out) - 1 - used)) > 0)
		used += (size_t)n;
	r->out[used] = '\0';
	close(fd);
}

/*
 * selene run --metrics-port 0 serves the store's and the worker's metrics
 * over HTTP while it runs: valid exposition, 404 and
 * 405 for what it does not serve. out is the run's output file.
 */
static void scrape_live_metrics(const char *out)
{
	struct run_result *r = malloc(sizeof(*r));
	char text[4096] = "", *at = NULL, *body;
	unsigned port = 0;
	FILE *f = fopen(out, "r");

	assert_non_null(f);
	text[fread(text, 1, sizeof(text) - 1, f)] = '\0';
	fclose(f);
	at = strstr(text, "metrics at http://127.0.0.1:");
	assert_non_null(at);
	assert_int_equal(sscanf(at, "metrics at http://127.0.0.1:%u/metrics", &port), 1);
	http_get(r, (uint16_t)port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
	assert_non_null(strstr(r->out, "HTTP/1.0 200 OK\r\n"));
	assert_non_null(strstr(r->out, "Content-Type: text/plain; version=0.0.4"));
	body = strstr(r->out, "\r\n\r\n");
	assert_non_null(body);
	tu_check_metrics(body + 4, "selene_build_info selene_records selene_staging_slots "
			 "selene_run_requests selene_run_retries_abandoned "
			 "selene_metrics_http_refused");
	http_get(r, (uint16_t)port, "GET /other HTTP/1.0\r\n\r\n");
	assert_non_null(strstr(r->out, "404 Not Found"));
	http_get(r, (uint16_t)port, "POST /metrics HTTP/1.0\r\n\r\n");
	assert_non_null(strstr(r->out, "405 Method Not Allowed"));
	http_get(r, (uint16_t)port, "\x01\x02 junk\r\n\r\n");
	assert_non_null(strstr(r->out, "400 Bad Request"));
	free(r);
}

/*
 * selene pool as a daemon (with a limited disk tier): it logs where it
 * listens and its arena, serves valid metrics, and on SIGTERM drains, exits
 * 0 and removes its arena. With --rdma and no verbs device here, it says
 * why once and serves claims by TCP (pool/PROTOCOL.md, R-POOL-90).
 */
static void test_cli_pool_daemon(void **state)
{
	const char *program = getenv("SELENE_PROGRAM");
	char *base = tu_make_temp_dir("cli-pool-daemon");
	struct run_result *r = malloc(sizeof(*r));
	char secret[512], out[512], text[4096] = "", arena[256] = "", *at, *body;
	unsigned port = 0;
	int status = 0;
	pid_t pid;
	FILE *f;

	(void)state;
	snprintf(secret, sizeof(secret), "%s/secret", base);
	snprintf(out, sizeof(out), "%s/out", base);
	f = fopen(secret, "w");
	assert_non_null(f);
	fputs("0123456789abcdef0123456789abcdef", f);
	fclose(f);
	assert_int_equal(chmod(secret, 0600), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		dup2(fd, 1);
		dup2(fd, 2);
		execl(program ? program : "build/selene", "selene", "pool", "--secret", secret,
		      "--memory", "4M", "--listen", "127.0.0.1:0", "--name", "cli",
		      "--metrics-port", "0", "--rdma", "--dir", base, "--disk-limit", "8M",
		      (char *)NULL);
		_exit(127);
	}
	read_until(out, "listening on port", text, sizeof(text), 500);
	at = strstr(text, "metrics on http://127.0.0.1:");
	assert_non_null(at);
	assert_int_equal(sscanf(at, "metrics on http://127.0.0.1:%u/metrics", &port), 1);
	if (strstr(text, "RDMA claims through")) {
		print_message("this host has a verbs device: the --rdma fallback is not checked\n");
	} else {
		at = strstr(text, "RDMA is off, claims use the TCP stream: ");
		assert_non_null(at);
		assert_null(strstr(at + 1, "RDMA is off")); /* said once */
	}
	at = strstr(text, "arena /dev/shm/");
	assert_non_null(at);
	assert_int_equal(sscanf(at, "arena %255s", arena), 1);
	assert_int_equal(access(arena, F_OK), 0);
	http_get(r, (uint16_t)port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
	assert_non_null(strstr(r->out, "HTTP/1.0 200 OK\r\n"));
	body = strstr(r->out, "\r\n\r\n");
	assert_non_null(body);
	tu_check_metrics(body + 4, "selene_pool_records selene_pool_arena_used_bytes "
			 "selene_pool_puts_total selene_pool_claims_total "
			 "selene_pool_records_dropped_total selene_pool_holds "
			 "selene_pool_exports_total selene_pool_rdma_windows_total "
			 "selene_pool_rdma_failures_total selene_pool_disk_used_bytes "
			 "selene_pool_spill_failures_total");
	assert_non_null(strstr(body, "selene_pool_exports_total{outcome=\"refused\"} 0\n"));
	kill(pid, SIGTERM);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(access(arena, F_OK), -1); /* the arena is gone with it */
	free(r);
	tu_remove_tree(base);
}

/*
 * SIGINT to selene run: it admits no more requests,
 * drains what was offered, prints its summary, writes only whole results
 * lines ending with the summary, and exits 1; what it stored verifies.
 */
static void test_cli_run_interrupted(void **state)
{
	const char *program = getenv("SELENE_PROGRAM");
	char *base = tu_make_temp_dir("run-int");
	struct run_result *r = malloc(sizeof(*r));
	char dir[512], trace[512], results[512], out[512], line[2048], last[2048] = "";
	int status = 0, lines = 0;
	pid_t pid;
	FILE *f;

	(void)state;
	snprintf(dir, sizeof(dir), "%s/rank%%r", base);
	snprintf(trace, sizeof(trace), "%s/trace.jsonl", base);
	snprintf(results, sizeof(results), "%s/results.json", base);
	snprintf(out, sizeof(out), "%s/out", base);
	f = fopen(trace, "w");
	assert_non_null(f);
	for (int i = 0; i < 400; i++) /* each waits for its stores: 20 ms a sync */
		fprintf(f, "{\"id\": \"r.%d\", \"settle\": true, \"spans\": [[%d, 32]]}\n",
			i, 5000 + i);
	fclose(f);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		dup2(fd, 1);
		dup2(fd, 2);
		setenv("SELENE_FAILPOINTS", "disk.fdatasync=sleep(20)", 1);
		execl(program ? program : "build/selene", "selene", "run", "--trace", trace, "--dir",
		      dir, "--device", "host", "--planes", "2x8K,1x4K", "--row-bytes", "12K",
		      "--page-tokens", "16", "--gpu-pages", "40", "--gpu-rows", "4", "--results",
		      results, "--metrics-port", "0", (char *)NULL);
		_exit(127);
	}
	/* once three requests are done */
	for (int i = 0; i < 3000 && lines < 3; i++) {
		usleep(10000);
		lines = 0;
		f = fopen(results, "r");
		while (f && fgets(line, sizeof(line), f))
			lines++;
		if (f)
			fclose(f);
	}
	assert_true(lines >= 3);
	scrape_live_metrics(out);
	kill(pid, SIGINT);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 1);
	f = fopen(out, "r");
	r->status = 1;
	r->out[fread(r->out, 1, sizeof(r->out) - 1, f)] = '\0';
	fclose(f);
	expect(r, 1, "Interrupt after ");
	expect(r, 1, "admitting no more, draining the store");
	expect(r, 1, "verified         every reused page and row, byte-exact");
	expect(r, 1, "interrupted before the trace ended");
	expect(r, 1, "result           FAILED");
	f = fopen(results, "r");
	lines = 0;
	while (fgets(line, sizeof(line), f)) {
		size_t len = strlen(line);

		if (len == 0 || line[len - 1] != '\n' || line[0] != '{' || line[len - 2] != '}')
			fail_msg("a results line is not whole: '%s'", line);
		strcpy(last, line);
		lines++;
	}
	fclose(f);
	assert_true(lines < 400);
	assert_non_null(strstr(last, "{\"summary\": "));
	assert_non_null(strstr(last, "\"interrupted\": true, \"verified\": true, \"ok\": false"));
	run(r, NULL, (const char *[]){ "verify", base, NULL });
	expect(r, 0, ", 0 bad");
	free(r);
	tu_remove_tree(base);
}

/*
 * Log lines: a file name with a newline and an escape
 * sequence is logged with them as \xNN, never raw; SELENE_LOG=bogus is
 * reported once and the default level kept.
 */
static void test_cli_log_escapes_and_bad_level(void **state)
{
	char *base = tu_make_temp_dir("run-log");
	struct run_result *r = malloc(sizeof(*r));
	char dir[512], trace[512], cmd[1200];

	(void)state;
	snprintf(dir, sizeof(dir), "%s/rank%%r", base);
	snprintf(trace, sizeof(trace), "%s/trace.jsonl", base);
	write_text(trace, "{\"id\": \"a\", \"spans\": [[1, 32]]}\n");
	run_worker(r, trace, dir, "/dev/null");
	expect(r, 0, "byte-exact");
	snprintf(cmd, sizeof(cmd), "cd %s/rank0/*/ && touch \"$(printf 'evil\\nselene: error: forged\\033[2J.ckpt')\"",
		 base);
	assert_int_equal(system(cmd), 0);
	run(r, "SELENE_LOG=bogus", (const char *[]){ "run", "--trace", trace, "--dir", dir,
						     "--device", "host", "--planes", "2x8K,1x4K",
						     "--row-bytes", "12K", "--page-tokens", "16",
						     "--gpu-pages", "40", "--gpu-rows", "4", NULL });
	expect(r, 0, "warn: SELENE_LOG=bogus is not a level (error, warn, info or debug); "
		     "using info");
	expect(r, 0, "evil\\x0aselene: error: forged\\x1b[2J.ckpt");
	if (strstr(r->out, "\nselene: error: forged") || strchr(r->out, '\033'))
		fail_msg("a control byte of a file name reached the log:\n%s", r->out);
	expect(r, 0, "info: scan"); /* the default level, info, holds */
	free(r);
	tu_remove_tree(base);
}

/* Bad traces and flags are refused with what is wrong, before any store. */
static void test_cli_run_bad_input(void **state)
{
	static const struct { const char *text, *message; } traces[] = {
		{ "", "the trace holds no request" },
		{ "{\"id\": \"x\"}\n", "line 1: request \"x\" has no \"spans\"" },
		{ "{\"spans\": [[1, 2]]}\n", "line 1: a request needs an \"id\"" },
		{ "{\"id\": \"x\", \"spans\": []}\n", "\"spans\" is empty" },
		{ "{\"id\": \"x\", \"spans\": [[1, 0]]}\n", "span 1 has no tokens" },
		{ "{\"id\": \"x\", \"spans\": [[1, -2]]}\n", "must not be negative" },
		{ "{\"id\": \"x\", \"spans\": [[1, 2.5]]}\n", "must be an integer" },
		{ "{\"id\": \"x\", \"spans\": [[1]]}\n", "between a span's seed and count" },
		{ "{\"id\": \"x\", \"spans\": [[1, 99999999999999999999]]}\n", "does not fit 64 bits" },
		{ "{\"id\": \"x\", \"spans\": [[1, 20000000]]}\n", "longer than 16777216 tokens" },
		{ "{\"id\": \"x\", \"spans\": [[1, 2]]}\n{\"id\": \"x\", \"spans\": [[1, 2]]}\n",
		  "line 2: id \"x\" is also on line 1" },
		{ "{\"id\": \"x\", \"spans\": [[1, 2]]} trailing\n", "text after the request" },
		{ "{\"id\": \"x\", \"spans\": [[1, 2]], \"expect\": {\"gpu\": 1}}\n",
		  "\"expect\" has no key \"gpu\"" },
		{ "{\"id\": \"x\", \"spans\": [[1, 2]], \"settle\": 1}\n", "must be true or false" },
		{ "{\"id\": \"x\\q\", \"spans\": [[1, 2]]}\n", "unknown escape" },
		{ "{\"id\": \"x, \"spans\": [[1, 2]]}\n", "line 1:" },
		{ "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n", "'{' expected to open a request" },
		{ "{\"id\": \"x\", \"spans\": [[1, 2]], \"note\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]}\n",
		  "nest deeper than 32" },
		{ "{\"id\": \"x\", \"spans\": [[1, 2]], \"note\": -}\n", "a number needs digits" },
		{ "{\"id\": \"x\", \"spans\": [[1, 2]], \"note\": 1.}\n", "digits after its '.'" },
		{ "{\"id\": \"x\", \"spans\": [[1, 2]], \"note\": 1e+}\n", "digits in its exponent" },
		{ "{\"id\": \"x\", \"spans\": [[1, 2]], \"note\": 1.2.3}\n", "found '.'" },
		{ "{\"id\": \"x\", \"spans\": [[1, 2]], \"settle\": true, \"settle\": false}\n",
		  "\"settle\" appears twice" },
		{ "{\"id\": \"x\", \"spans\": [[1, 2]], \"expect\": {}, \"expect\": {}}\n",
		  "\"expect\" appears twice" },
		{ "{\"id\": \"x\", \"spans\": [[1, 2]], \"expect\": {\"prefilled\": 1, "
		  "\"prefilled\": 2}}\n", "\"expect\" names \"prefilled\" twice" },
	};
	char *base = tu_make_temp_dir("run-bad");
	struct run_result *r = malloc(sizeof(*r));
	char dir[512], trace[512];

	(void)state;
	snprintf(dir, sizeof(dir), "%s/rank%%r", base);
	snprintf(trace, sizeof(trace), "%s/trace.jsonl", base);
	for (size_t i = 0; i < sizeof(traces) / sizeof(traces[0]); i++) {
		write_text(trace, traces[i].text);
		run(r, NULL, (const char *[]){ "run", "--trace", trace, "--dir", dir, "--device",
					       "host", NULL });
		expect(r, 1, traces[i].message);
	}
	write_text(trace, "{\"id\": \"x\", \"spans\": [[1, 2]]}\n");
	run(r, NULL, (const char *[]){ "run", "--trace", "/nonexistent/t", "--dir", dir, NULL });
	expect(r, 1, "cannot open trace /nonexistent/t");
	run(r, NULL, (const char *[]){ "run", "--trace", trace, "--dir", dir, "--planes", "3y4",
				       NULL });
	expect(r, 2, "--planes 3y4: not COUNTxSIZE");
	run(r, NULL, (const char *[]){ "run", "--trace", trace, "--dir", dir, "--device",
				       "tpu", NULL });
	expect(r, 2, "--device tpu: auto, cuda or host");
	run(r, NULL, (const char *[]){ "run", "--dir", dir, NULL });
	expect(r, 2, "--trace and --dir are required");
	free(r);
	tu_remove_tree(base);
}

/*
 * One strict number parser for every subcommand: a
 * size with a suffix means what it says, junk and values past a limit are
 * refused naming the flag (exit 2), and selene run allows as many planes
 * as a record file can describe, naming that limit past it. Sizes that do
 * not fit this host's memory are refused before they are allocated.
 */
static void test_cli_strict_numbers(void **state)
{
	char *base = tu_make_temp_dir("numbers");
	struct run_result *r = malloc(sizeof(*r));
	char dir[512], trace[512];

	(void)state;
	snprintf(dir, sizeof(dir), "%s/rank%%r", base);
	snprintf(trace, sizeof(trace), "%s/trace.jsonl", base);
	write_text(trace, "{\"id\": \"x\", \"spans\": [[1, 40]]}\n");
	run(r, NULL, (const char *[]){ "demo", "--dir", dir, "--plane-bytes", "64Q", NULL });
	expect(r, 2, "selene demo: --plane-bytes 64Q: not a size");
	run(r, NULL, (const char *[]){ "demo", "--dir", dir, "--tokens", "abc", NULL });
	expect(r, 2, "--tokens abc: not a number");
	run(r, NULL, (const char *[]){ "demo", "--dir", dir, "--rank", "-1", NULL });
	expect(r, 2, "--rank -1: not a number");
	run(r, NULL, (const char *[]){ "demo", "--dir", dir, "--rank", "2", "--world", "2",
				       NULL });
	expect(r, 2, "--rank 2: not below --world 2");
	/* 64K is 65536 bytes: the demo's line says so */
	run(r, NULL, (const char *[]){ "demo", "--dir", dir, "--planes", "1", "--plane-bytes",
				       "4K", "--row-bytes", "4K", "--tokens", "320",
				       "--page-tokens", "64", NULL });
	expect(r, 0, "0.0 MiB) at");
	run(r, NULL, (const char *[]){ "bench", "store", "--records", "abc", NULL });
	expect(r, 2, "selene bench store: --records abc: not a number");
	/* an empty --dir would be the filesystem's root; a cut-off one another directory */
	run(r, NULL, (const char *[]){ "demo", "--dir", "", NULL });
	expect(r, 2, "selene demo: --dir is empty");
	{
		char long_dir[1100];

		memset(long_dir, 'e', sizeof(long_dir) - 1);
		long_dir[0] = '/';
		long_dir[sizeof(long_dir) - 1] = '\0';
		run(r, NULL, (const char *[]){ "demo", "--dir", long_dir, NULL });
		expect(r, 1, "selene demo: --dir is too long");
		run(r, NULL, (const char *[]){ "run", "--trace", trace, "--dir", long_dir,
					       "--device", "host", NULL });
		expect(r, 1, "selene run: rank 0: --dir is too long");
	}
	run(r, NULL, (const char *[]){ "bench", "lookup", "--no-such-option", NULL });
	expect(r, 2, "selene bench lookup: takes no arguments");
	run(r, NULL, (const char *[]){ "run", "--trace", trace, "--dir", dir, "--planes",
				       "2x4K,", NULL });
	expect(r, 2, "--planes 2x4K,: not COUNTxSIZE");
	run(r, NULL, (const char *[]){ "run", "--trace", trace, "--dir", dir, "--planes",
				       "2x4K,,2x4K", NULL });
	expect(r, 2, "not COUNTxSIZE");
	run(r, NULL, (const char *[]){ "run", "--trace", trace, "--dir", dir,
				       "--metrics-address", "127.0.0.1", NULL });
	expect(r, 2, "--metrics-address needs --metrics-port");
	run(r, NULL, (const char *[]){ "bench", "store", "--plane-bytes", "99999999999999999999",
				       NULL });
	expect(r, 2, "--plane-bytes 99999999999999999999: more than the most allowed");
	run(r, NULL, (const char *[]){ "run", "--trace", trace, "--dir", dir, "--planes",
				       "480x1K", NULL });
	expect(r, 2, "--planes 480x1K: more than the most allowed, 479");
	run(r, NULL, (const char *[]){ "run", "--trace", trace, "--dir", dir, "--planes",
				       "400x1K,80x1K", NULL });
	expect(r, 2, "more than 479 planes in all (the record format's limit)");
	run(r, NULL, (const char *[]){ "run", "--trace", trace, "--dir", dir, "--gpu-rows",
				       "0", NULL });
	expect(r, 2, "--gpu-rows 0: less than the least allowed, 1");
	/* a 70B-class model: 80 layers of K and V */
	run(r, NULL, (const char *[]){ "run", "--trace", trace, "--dir", dir, "--device", "host",
				       "--planes", "80x1K,80x1K", "--page-tokens", "16",
				       "--row-bytes", "4K", "--gpu-pages", "16", "--gpu-rows", "4",
				       NULL });
	expect(r, 0, "160 page planes");
	expect(r, 0, "byte-exact on every rank");
	/* sizes this host cannot hold are refused before they are allocated */
	run(r, NULL, (const char *[]){ "run", "--trace", trace, "--dir", dir, "--device", "host",
				       "--gpu-pages", "4294967294", NULL });
	expect(r, 1, "of host memory per rank");
	run(r, NULL, (const char *[]){ "run", "--trace", trace, "--dir", dir, "--device", "host",
				       "--planes", "1x64M", "--gpu-pages", "100000", NULL });
	expect(r, 1, "do not fit the");
	free(r);
	tu_remove_tree(base);
}

/* Entries of a directory other than . and .., or -1 where it is missing. */
static int entries(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int count = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)) != NULL)
		count += e->d_name[0] != '.';
	closedir(d);
	return count;
}

/* bench restore at one rank with failpoints failing the disk alone: the
 * bench fails naming it, measures nothing, leaves nothing behind */
static void restore_floor_fails(struct run_result *r, const char *dir, const char *failpoints,
				const char *message)
{
	run(r, failpoints, (const char *[]){ "bench", "restore", "--device", "host", "--ranks",
					     "1", "--records", "2", "--dir", dir, NULL });
	expect(r, 1, message);
	assert_null(strstr(r->out, "\nraw:     1 "));
	assert_null(strstr(r->out, "\nrestore:     1 "));
	assert_int_equal(tu_count_suffix(dir, ""), 2);
}

/*
 * selene bench writes only into a scratch directory of its own and removes
 * it at the end, also when interrupted (SIGINT); a directory that does not
 * exist is refused, not made.
 */
static void test_cli_bench_cleans_up(void **state)
{
	const char *program = getenv("SELENE_PROGRAM");
	char *dir = tu_make_temp_dir("bench-clean");
	struct run_result *r = malloc(sizeof(*r));
	char missing[600], scratch[600];
	int status = 0;
	pid_t pid;

	(void)state;
	snprintf(missing, sizeof(missing), "%s/missing/deeper", dir);
	run(r, NULL, (const char *[]){ "bench", "fetch", "--device", "host", missing, NULL });
	expect(r, 1, "No such file or directory");
	assert_int_equal(tu_count_suffix(dir, ""), 2); /* "." and "..": nothing made */
	/*
	 * A directory too long for the names made under it is refused whole:
	 * cut short, one would name another directory, which the end removes
	 * (it did: a --dir of 511 bytes was removed with what it held).
	 */
	{
		char longer[700], kept[760];
		size_t n = (size_t)snprintf(longer, sizeof(longer), "%s", dir);
		int fd;

		while (n < 500) {
			assert_true(n + 62 < sizeof(longer));
			n += (size_t)snprintf(longer + n, sizeof(longer) - n, "/%.60s",
					      "dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd");
			assert_true(mkdir(longer, 0755) == 0);
		}
		snprintf(kept, sizeof(kept), "%s/kept", longer);
		fd = open(kept, O_CREAT | O_WRONLY, 0644);
		assert_true(fd >= 0);
		close(fd);
		run(r, NULL, (const char *[]){ "bench", "restore", "--device", "host",
					       "--records", "1", "--dir", longer, NULL });
		expect(r, 1, "too long a path");
		assert_int_equal(access(kept, F_OK), 0);
		assert_int_equal(tu_count_suffix(longer, ""), 3); /* ".", "..", kept */
		/* startup works in the directory itself: its own names checked */
		run(r, NULL, (const char *[]){ "bench", "startup", "--ranks", "1", "--records",
					       "1", "--rounds", "1", "--dir", longer, NULL });
		expect(r, 1, "too long a path");
		assert_int_equal(tu_count_suffix(longer, ""), 3);
		unlink(kept);
		while (strlen(longer) > strlen(dir)) {
			assert_int_equal(rmdir(longer), 0);
			*strrchr(longer, '/') = '\0';
		}
	}
	run(r, NULL, (const char *[]){ "bench", "store", "--dir", dir, "--device", "host",
				       "--planes", "2", "--plane-bytes", "4K", "--row-bytes", "4K",
				       "--pages", "4", "--rounds", "2", NULL });
	expect(r, 0, "store: selene");
	assert_int_equal(tu_count_suffix(dir, ""), 2);
	/*
	 * fetch after an untimed warm-up round, and the host's ceiling after
	 * it: its files go too; the report counts the timed rounds only
	 */
	run(r, NULL, (const char *[]){ "bench", "fetch", "--device", "host", "--planes", "2",
				       "--plane-bytes", "4K", "--row-bytes", "4K", "--pages", "4",
				       "--rounds", "2", "--warmup", "1", dir, NULL });
	expect(r, 0, "ceiling: raw, a round's bytes as ");
	assert_non_null(strstr(r->out, "fetch: selene"));
	assert_non_null(strstr(r->out, "; 2 rounds of 1 record of "));
	assert_non_null(strstr(r->out, "\nfetch: the transfer thread ran fetches for "));
	assert_int_equal(tu_count_suffix(dir, ""), 2);
	/* a round's records stored as one chain and restored as one job */
	run(r, NULL, (const char *[]){ "bench", "fetch", "--device", "host", "--planes", "2",
				       "--plane-bytes", "4K", "--row-bytes", "4K", "--pages", "4",
				       "--records", "3", "--rounds", "2", "--chain", dir, NULL });
	expect(r, 0, "; 2 rounds of 3 records (one chain, one job) of ");
	assert_non_null(strstr(r->out, "\nfetch: the transfer thread ran fetches for "));
	assert_non_null(strstr(r->out, " of 6 records opened ahead of their first window"));
	assert_int_equal(tu_count_suffix(dir, ""), 2);
	/* the warm tier beside bulk copies, every fetch a warm hit (each store
	 * writing its own file in its job, warm field 1) */
	run(r, NULL, (const char *[]){ "bench", "warm", "--device", "host", "--planes", "2",
				       "--plane-bytes", "4K", "--row-bytes", "4K", "--pages", "4",
				       "--records", "2", "--rounds", "2", "--pre-reads", "0",
				       "--file-in-job", "--dir", dir, NULL });
	expect(r, 0, "warm: restore from warm slots ");
	assert_non_null(strstr(r->out, ", bulk host to device "));
	assert_non_null(strstr(r->out, "\nwarm: store into warm slots (device copies) "));
	assert_non_null(strstr(r->out, "\nwarm: one restore at a time: p50 "));
	assert_non_null(strstr(r->out, "; a restore's fixed cost about "));
	/* each round's read-through beside its raw read, each side first in turn */
	assert_non_null(strstr(r->out, "warm: round 0, raw read first: read-through "));
	assert_non_null(strstr(r->out, "\nwarm: round 1, read-through first: read-through "));
	assert_non_null(strstr(r->out, "\nwarm: read-through ratio by order: "));
	assert_non_null(strstr(r->out, "(the files read 0 times untimed first; "));
	/* the stores' copies split per window, beside a window's bulk copy */
	assert_non_null(strstr(r->out, "\nwarm: round 1, store: device copies "));
	assert_non_null(strstr(r->out, "\nwarm: store copies: 4 windows of "));
	assert_non_null(strstr(r->out, "; a bulk device to host copy of a window's bytes with "
				       "its own wait, p50 of 32: "));
	assert_non_null(strstr(r->out, "\nwarm: the same bulk copy of a window's bytes while "));
	assert_non_null(strstr(r->out, "\nwarm: 4 stores into warm slots, 0 found too few free "));
	assert_int_equal(tu_count_suffix(dir, ""), 2);
	/* stores into warm slots only, then their files written from warm: the
	 * default, as rank zero sends them */
	run(r, NULL, (const char *[]){ "bench", "warm", "--device", "host", "--planes", "2",
				       "--plane-bytes", "4K", "--row-bytes", "4K", "--pages", "4",
				       "--records", "2", "--rounds", "2", "--dir", dir, NULL });
	expect(r, 0, "\nwarm: store into warm slots only (whole jobs, submit to completion) ");
	assert_non_null(strstr(r->out, ", 0 overlapped by a checksum pass, 0 with the next "
				       "window issued before their wait, 4 waited for right "
				       "after their issue; "));
	assert_non_null(strstr(r->out, "; their writes from warm (checksums, "));
	assert_int_equal(tu_count_suffix(dir, ""), 2);
	/* two ranks sharing the device, each reporting */
	run(r, NULL, (const char *[]){ "bench", "warm", "--device", "host", "--planes", "2",
				       "--plane-bytes", "4K", "--row-bytes", "4K", "--pages", "4",
				       "--records", "2", "--rounds", "2", "--ranks", "2", "--dir",
				       dir, NULL });
	expect(r, 0, "warm rank 0 of 2: restore from warm slots ");
	assert_non_null(strstr(r->out, "\nwarm rank 1 of 2: restore from warm slots "));
	assert_non_null(strstr(r->out, "\nwarm rank 1 of 2: one restore at a time: p50 "));
	assert_int_equal(tu_count_suffix(dir, ""), 2);
	/* a chain past a fetch job's records, or on a bench that fetches nothing */
	run(r, NULL, (const char *[]){ "bench", "fetch", "--records", "5000", "--chain", dir,
				       NULL });
	expect(r, 2, "--chain is for bench fetch, with at most 4096 records");
	run(r, NULL, (const char *[]){ "bench", "store", "--chain", "--dir", dir, NULL });
	expect(r, 2, "--chain is for bench fetch");
	run(r, NULL, (const char *[]){ "bench", "fetch", "--pre-reads", "0", dir, NULL });
	expect(r, 2, "--pre-reads is for bench warm");
	run(r, NULL, (const char *[]){ "bench", "fetch", "--warm-only", dir, NULL });
	expect(r, 2, "--warm-only is for bench warm");
	run(r, NULL, (const char *[]){ "bench", "fetch", "--file-in-job", dir, NULL });
	expect(r, 2, "--file-in-job is for bench warm");
	run(r, NULL, (const char *[]){ "bench", "warm", "--warm-only", "--file-in-job", "--dir",
				       dir, NULL });
	expect(r, 2, "--warm-only and --file-in-job exclude each other");
	assert_int_equal(tu_count_suffix(dir, ""), 2);
	run(r, NULL, (const char *[]){ "bench", "fetch", "--warmup", "101", dir, NULL });
	expect(r, 2, "--warmup 101: more than the most allowed");
	assert_int_equal(tu_count_suffix(dir, ""), 2);
	/* restore latency at two ranks and one, after an untimed loaded pass */
	run(r, NULL, (const char *[]){ "bench", "restore", "--device", "host", "--ranks", "2",
				       "--records", "3", "--warmup", "1", "--dir", dir, NULL });
	expect(r, 0, "(after 1 untimed such passes)");
	assert_non_null(strstr(r->out, "\nrestore:     2 "));
	assert_non_null(strstr(r->out, "\nrestore:     1 "));
	/* and the disk alone beside it, at both, where io_uring can be used */
	if (strstr(r->out, "\nraw: the disk alone not measured: io_uring is unavailable")) {
		assert_int_equal(tu_count_suffix(dir, ""), 2);
		goto no_uring;
	}
	assert_non_null(strstr(r->out, "\nraw: the disk alone, no Selene: "));
	assert_non_null(strstr(r->out, "\nraw:     2 "));
	assert_non_null(strstr(r->out, "\nraw:     1 "));
	assert_int_equal(tu_count_suffix(dir, ""), 2);
	/* the disk alone failing in its setup */
	restore_floor_fails(r, dir, "SELENE_FAILPOINTS=disk.open=return(ENOSPC)",
			    "/floor: No space left on device");
	/* a writer failing once its threads run (the fifth open, its first
	 * file's as the loaded phase starts: the targets take four): every
	 * thread stops */
	restore_floor_fails(r, dir, "SELENE_FAILPOINTS=disk.open=4*off->return(EIO)",
			    "the disk alone, writing: Input/output error");
	assert_non_null(strstr(r->out, "/floor: Input/output error"));
	/* on tmpfs through kernel workers, as the disk thread; inline where the
	 * kernel refuses their bound, as the disk thread too */
	if (access("/dev/shm", W_OK) == 0) {
		char *shm;

		unsetenv("SELENE_IO_THREADS"); /* the default's workers */
		setenv("TMPDIR", "/dev/shm", 1);
		shm = tu_make_temp_dir("bench-floor");
		unsetenv("TMPDIR");
		run(r, NULL, (const char *[]){ "bench", "restore", "--device", "host",
					       "--ranks", "1", "--records", "2", "--dir", shm,
					       NULL });
		expect(r, 0, " MiB requests, to kernel workers, all in flight)");
		run(r, "SELENE_FAILPOINTS=disk.io_workers=return(EINVAL)",
		    (const char *[]){ "bench", "restore", "--device", "host", "--ranks", "1",
				      "--records", "2", "--dir", shm, NULL });
		expect(r, 0, "\nraw:     1 ");
		assert_null(strstr(r->out, "to kernel workers"));
		assert_int_equal(tu_count_suffix(shm, ""), 2);
		tu_remove_tree(shm);
	}
no_uring:

	/* interrupted while it runs: waits for its first record directory */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		dup2(null, 1);
		dup2(null, 2);
		/* as a terminal's: a shell's background job starts with SIGINT ignored */
		signal(SIGINT, SIG_DFL);
		execl(program ? program : "build/selene", "selene", "bench", "store", "--dir", dir,
		      "--device", "host", "--rounds", "1000", "--records", "4", (char *)NULL);
		_exit(127);
	}
	snprintf(scratch, sizeof(scratch), "%s/selene-bench.%d", dir, (int)pid);
	for (int i = 0; i < 6000 && entries(scratch) < 1; i++)
		usleep(10000);
	assert_true(entries(scratch) >= 1);
	kill(pid, SIGINT);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 128 + SIGINT);
	assert_int_equal(tu_count_suffix(dir, ""), 2);
	free(r);
	tu_remove_tree(dir);
}

/*
 * Runs cmd (bash: it uses process substitution) from base/check.sh; on
 * failure shows base/out, where cmd sends the program's output.
 */
static bool run_check_script(const char *base, const char *cmd)
{
	char script[600], line[700];
	FILE *f;

	snprintf(script, sizeof(script), "%s/check.sh", base);
	f = fopen(script, "w");
	assert_non_null(f);
	fprintf(f, "%s\n", cmd);
	fclose(f);
	snprintf(line, sizeof(line), "bash %s", script);
	if (system(line) == 0)
		return true;
	snprintf(line, sizeof(line), "cat %s/out", base);
	if (system(line) != 0)
		print_message("(the output could not be shown)\n");
	return false;
}

/*
 * mpirun on loopback, as root too, for the MPI tests below. Under ASan:
 * Open MPI leaks at MPI_Finalize; one rank's leaks are checked in
 * test_cli_run_one_rank, without MPI.
 */
#define MPIRUN_LOOPBACK                                                              \
	"OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 SELENE_LOG=warn "   \
	"ASAN_OPTIONS=detect_leaks=0 "                                                 \
	"mpirun --oversubscribe --mca btl self,tcp --mca btl_tcp_if_include lo "      \
	"--mca oob_tcp_if_include lo "

/* Whether mpirun is here and the MPI bootstrap was built (pkg-config finds ompi-c). */
static bool mpirun_built(void)
{
	return system("command -v mpirun > /dev/null 2>&1 && pkg-config --exists ompi-c") == 0;
}

/* Three ranks under mpirun (where it is installed): the MPI bootstrap and
 * step channel, and each rank's files the same as rank zero's. */
static void test_cli_run_mpirun(void **state)
{
	const char *program = getenv("SELENE_PROGRAM");
	char *base = tu_make_temp_dir("run-mpi");
	char cmd[2048];

	(void)state;
	if (!mpirun_built()) {
		tu_remove_tree(base);
		skip();
	}
	snprintf(cmd, sizeof(cmd),
		 MPIRUN_LOOPBACK "-np 3 -x SELENE_LOG -x ASAN_OPTIONS %s run --trace "
		 "tests/qualify/phase-1.jsonl --dir %s/rank%%r --device host --gpu-pages 64 "
		 "--gpu-rows 8 > %s/out 2>&1 && grep -q 'byte-exact on every rank' %s/out && "
		 "for r in 1 2; do diff <(cd %s/rank0/* && ls -l *.ckpt | awk '{print $5, $9}') "
		 "<(cd %s/rank$r/* && ls -l *.ckpt | awk '{print $5, $9}') || exit 1; done",
		 program ? program : "build/selene", base, base, base, base, base);
	if (!run_check_script(base, cmd))
		fail_msg("selene run under mpirun failed");
	tu_remove_tree(base);
}

/*
 * Two ranks under mpirun, rank 1 unable to open any socket to rank zero
 * (failpoint peer.socket): it cannot tell rank zero, so after 10 s of
 * waiting for the others it ends the job, saying so; before, the job
 * waited out rank zero's 60 s join timeout.
 */
static void test_cli_run_mpirun_peer_without_sockets(void **state)
{
	const char *program = getenv("SELENE_PROGRAM");
	char *base = tu_make_temp_dir("run-mpi-nosock");
	char cmd[2048];
	uint64_t t0, took_ms;

	(void)state;
	if (!mpirun_built()) {
		tu_remove_tree(base);
		skip();
	}
	snprintf(cmd, sizeof(cmd),
		 MPIRUN_LOOPBACK "-np 2 -x SELENE_LOG -x ASAN_OPTIONS bash -c "
		 "'if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then "
		 "export SELENE_FAILPOINTS=\"peer.socket=return(EIO)\"; fi; exec \"$0\" \"$@\"' "
		 "%s run --trace tests/qualify/phase-1.jsonl --dir %s/rank%%r --device host "
		 "--gpu-pages 64 --gpu-rows 8 > %s/out 2>&1; [ $? -ne 0 ] && "
		 "grep -q 'cannot open a socket to reach rank zero' %s/out && "
		 "grep -q 'did not learn of this failure within 10000 ms; ending the job' %s/out",
		 program ? program : "build/selene", base, base, base, base);
	t0 = sel_monotonic_ns();
	if (!run_check_script(base, cmd))
		fail_msg("selene run did not end the job when a peer could not reach rank zero");
	took_ms = (sel_monotonic_ns() - t0) / 1000000;
	print_message("the job ended %llu ms after the start\n", (unsigned long long)took_ms);
	assert_true(took_ms < 45000); /* rank zero's join timeout is 60 s */
	tu_remove_tree(base);
}

/*
 * Never delete what could not be read, across ranks (FORMAT.md R-AGREE-2):
 * three ranks store a and b; with the scan caches gone, a start in which
 * one rank's second header read fails (each rank in turn) leaves every
 * rank's files in place, and a clean start restores both records whole.
 * Before, the agreement deleted the record that rank could not read from
 * the other ranks, and the clean start restored 0 of a's 64 tokens. Then
 * every open failing on one rank for a whole run that publishes a and b
 * again: those publications answer Retry (they would fail on that rank,
 * and a failed store's unlink on every rank deleted the copies it could
 * not read), and the clean start restores both.
 */
static void test_cli_run_mpirun_unreadable_at_startup(void **state)
{
	const char *program = getenv("SELENE_PROGRAM");
	char *base = tu_make_temp_dir("run-mpi-unreadable");
	char path[600], cmd[2048];

	(void)state;
	if (!mpirun_built()) {
		tu_remove_tree(base);
		skip();
	}
	snprintf(path, sizeof(path), "%s/t1.jsonl", base);
	write_text(path, "{\"id\": \"a\", \"settle\": true, \"spans\": [[1, 64]]}\n"
			 "{\"id\": \"b\", \"settle\": true, \"spans\": [[2, 64]]}\n");
	snprintf(path, sizeof(path), "%s/t2.jsonl", base);
	write_text(path, "{\"id\": \"c\", \"spans\": [[7, 8]]}\n");
	snprintf(path, sizeof(path), "%s/t3.jsonl", base);
	write_text(path, "{\"id\": \"a3\", \"spans\": [[1, 64], [5, 16]]}\n"
			 "{\"id\": \"b3\", \"spans\": [[2, 64], [5, 16]]}\n");
	snprintf(path, sizeof(path), "%s/go.sh", base);
	write_text(path,
		   "B=$1; P=$2\n"
		   "go() { FR=$1 FP=$2 " MPIRUN_LOOPBACK "-np 3 -x SELENE_LOG -x ASAN_OPTIONS "
		   "-x FR -x FP bash -c 'if [ \"$OMPI_COMM_WORLD_RANK\" = \"$FR\" ]; then "
		   "export SELENE_FAILPOINTS=\"$FP\"; fi; exec \"$0\" \"$@\"' $P run --trace "
		   "$B/$3.jsonl --dir $B/d/rank%r --device host --page-tokens 16 --planes 2x4K "
		   "--row-bytes 4K --gpu-pages 64 --gpu-rows 8 --results $B/$3.results "
		   ">> $B/out 2>&1 || { echo \"$3 failed\"; exit 1; }; }\n"
		   "try() { go \"$@\" || true; }\n"
		   "count() { ls $B/d/rank$1/*/ | grep -c 'ckpt$'; }\n"
		   "for fr in 0 1 2; do\n"
		   "  rm -rf $B/d; go 9 '' t1\n"
		   "  rm -f $B/d/rank*/*/.selene-scan-cache\n"
		   "  go $fr 'disk.read=1*off->1*return(EIO)' t2\n"
		   "  for r in 1 2; do [ $(count $r) = $(count 0) ] || "
		   "{ echo \"rank $r: $(count $r) files, rank 0: $(count 0)\"; exit 1; }; done\n"
		   "  go 9 '' t3\n"
		   "  for id in a3 b3; do grep \"\\\"id\\\": \\\"$id\\\"\" $B/t3.results | "
		   "grep -q '\"host_reused\": 64' || { echo \"read error on rank $fr: $id lost\"; "
		   "cat $B/t3.results; exit 1; }; done\n"
		   "done\n"
		   /* every open failing on one rank for a whole run that stores a and b again */
		   "for fr in 0 1; do\n"
		   "  rm -rf $B/d; go 9 '' t1\n"
		   "  rm -f $B/d/rank*/*/.selene-scan-cache\n"
		   "  try $fr 'disk.open=return(EIO)' t1\n"
		   "  go 9 '' t3\n"
		   "  for id in a3 b3; do grep \"\\\"id\\\": \\\"$id\\\"\" $B/t3.results | "
		   "grep -q '\"host_reused\": 64' || { echo \"opens failing on rank $fr: $id lost\"; "
		   "cat $B/t3.results; exit 1; }; done\n"
		   "done\n");
	snprintf(cmd, sizeof(cmd), "bash %s/go.sh %s %s >> %s/out 2>&1", base, base,
		 program ? program : "build/selene", base);
	if (!run_check_script(base, cmd))
		fail_msg("a record one rank could not read at startup was lost");
	tu_remove_tree(base);
}

/*
 * selene run --pool across two launches: a selene pool process on
 * loopback; instance A (mpirun, two ranks, a disk limit under four
 * records) cascades records to it; instance B (another mpirun, its own
 * empty directories) restores them from the pool on both ranks, every page
 * and row checked byte-exact against what A prefilled (the same spans
 * make the same bytes). On its host the pool answers within a 2 ms grace,
 * which a busy machine can miss: B is launched again, fresh, up to three
 * times.
 */
static void test_cli_run_pool_two_launches(void **state)
{
	const char *program = getenv("SELENE_PROGRAM");
	char *base = tu_make_temp_dir("run-pool-two");
	char path[512], script[4096], text[4096] = "", *at;
	unsigned port = 0;
	int status = 0, checked;
	pid_t pid;
	FILE *f;

	(void)state;
	if (!mpirun_built()) {
		tu_remove_tree(base);
		skip();
	}
	snprintf(path, sizeof(path), "%s/secret", base);
	write_text(path, "0123456789abcdef0123456789abcdef");
	assert_int_equal(chmod(path, 0600), 0);
	/* eight conversations of 64 tokens: 44 KiB a rank's record */
	f = fopen(strcat(strcpy(script, base), "/a.jsonl"), "w");
	assert_non_null(f);
	for (int i = 1; i <= 8; i++)
		fprintf(f, "{\"id\": \"c%d\", \"settle\": true, \"spans\": [[%d, 64]]}\n", i, i);
	fclose(f);
	f = fopen(strcat(strcpy(script, base), "/b.jsonl"), "w");
	assert_non_null(f);
	for (int i = 1; i <= 8; i++)
		fprintf(f, "{\"id\": \"d%d\", \"spans\": [[%d, 64], [99, 5]]}\n", i, i);
	fclose(f);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = open(strcat(strcpy(script, base), "/pool.out"),
			      O_WRONLY | O_CREAT | O_TRUNC, 0600);

		dup2(fd, 1);
		dup2(fd, 2);
		setenv("SELENE_LOG", "info", 1); /* it says its port at info */
		execl(program ? program : "build/selene", "selene", "pool", "--secret", path,
		      "--memory", "8M", "--listen", "127.0.0.1:0", "--name", "cli-run",
		      (char *)NULL);
		_exit(127);
	}
	read_until(strcat(strcpy(script, base), "/pool.out"), "listening on port", text,
		   sizeof(text), 1000);
	at = strstr(text, "listening on port ");
	assert_non_null(at);
	assert_int_equal(sscanf(at, "listening on port %u", &port), 1);
	/*
	 * A: 140K holds three records, the cascade puts past 122.5K, and the
	 * run offers refused checkpoints again while the cascade makes room.
	 * B: its first 64 tokens come from the pool, the rest prefilled.
	 */
	snprintf(script, sizeof(script),
		 "prog=$(realpath %s) || exit 1\n"
		 "sr() { " MPIRUN_LOOPBACK "-np 2 -x SELENE_LOG -x ASAN_OPTIONS \"$prog\" run "
		 "--device host --planes 2x4K --row-bytes 4K --page-tokens 16 --gpu-pages 40 "
		 "--gpu-rows 4 --pool 127.0.0.1:%u --pool-secret %s \"$@\"; }\n"
		 "cd %s || exit 1\n"
		 "sr --trace a.jsonl --dir a%%r --disk-limit 140K --results a.res > out 2>&1 || exit 1\n"
		 "grep -q '\"pool\": {\"attached\": true, .*\"puts\": [1-9]' a.res || exit 1\n"
		 "for try in 1 2 3; do\n"
		 "  rm -rf b0 b1\n"
		 "  sr --trace b.jsonl --dir b%%r --results b.res >> out 2>&1 || exit 1\n"
		 "  grep -q '\"wrong_units\": 0, .*\"verified\": true, \"ok\": true, "
		 "\"pool\": {\"attached\": true, \"hits\": [1-9][0-9]*, \"claims\": [1-9]' b.res &&\n"
		 "  grep -q '\"host_reused\": 64, .*\"verified\": true, \"ok\": true}' b.res &&\n"
		 "  grep -q '  pool             attached; [1-9][0-9]* hits*, ' out && exit 0\n"
		 "done\n"
		 "exit 1\n",
		 program ? program : "build/selene", port, path, base);
	write_text(strcat(strcpy(text, base), "/check.sh"), script);
	snprintf(script, sizeof(script), "bash %s/check.sh", base);
	checked = system(script);
	if (checked != 0) {
		snprintf(script, sizeof(script), "cat %s/out %s/*.res %s/pool.out", base, base,
			 base);
		if (system(script) != 0)
			print_message("(the output could not be shown)\n");
	}
	kill(pid, SIGTERM);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_int_equal(checked, 0);
	/* the manager drains and exits 0 with instances gone */
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
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

/*
 * selene bench fanout runs every world size through both tables (a few
 * jobs: its figures are for benchmarks, never asserted here) and leaves
 * nothing in its directory.
 */
static void test_cli_bench_fanout(void **state)
{
	struct run_result *r = malloc(sizeof(*r));
	char *dir = tu_make_temp_dir("bench-fanout");

	(void)state;
	run(r, NULL, (const char *[]){ "bench", "fanout", "--dir", dir, "--records", "20",
				       NULL });
	expect(r, 0, "control overhead at 8 ranks");
	for (int world = 1; world <= 8; world *= 2) {
		char line[32];

		snprintf(line, sizeof(line), "fanout: %5d  ", world);
		/* once in the noop table, once in the store table */
		assert_non_null(strstr(r->out, line));
		assert_non_null(strstr(strstr(r->out, line) + 1, line));
	}
	assert_int_equal(tu_count_suffix(dir, ""), 2); /* "." and ".." */
	tu_remove_tree(dir);
	free(r);
}

/*
 * selene bench startup on 3 ranks: makes the records, restarts twice cold,
 * prints a row of phases per restart and the raw path's row before it (it
 * read every record file's first 4 KiB), and leaves nothing.
 */
static void test_cli_bench_startup(void **state)
{
	struct run_result *r = malloc(sizeof(*r));
	char *dir = tu_make_temp_dir("bench-startup");

	(void)state;
	run(r, NULL, (const char *[]){ "bench", "startup", "--dir", dir, "--ranks", "3",
				       "--records", "40", "--rounds", "2", "--cold", NULL });
	expect(r, 0, "made 40 records on each of 3 ranks");
	assert_non_null(strstr(r->out, "of which closing (a syncfs of each rank's directory "
				       "and its scan cache saved) "));
	assert_non_null(strstr(r->out, "taken from the ranks' scan caches; closing every rank "
				       "took "));
	assert_non_null(strstr(r->out, "startup:     0  "));
	assert_non_null(strstr(r->out, "startup:     1  "));
	assert_non_null(strstr(r->out, "startup:     1  raw: the first 4 KiB of each of 120 "
				       "record files, cold"));
	assert_int_equal(tu_count_suffix(dir, ""), 2); /* "." and ".." */
	tu_remove_tree(dir);
	free(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cli_help),
		cmocka_unit_test(test_cli_help_exit_status_and_options),
		cmocka_unit_test(test_cli_ls_ranks_and_plurals),
		cmocka_unit_test(test_cli_failpoints),
		cmocka_unit_test(test_cli_verify_good_and_flipped),
		cmocka_unit_test(test_cli_verify_not_a_record),
		cmocka_unit_test(test_cli_verify_live_and_empty),
		cmocka_unit_test(test_cli_ls_json_escapes),
		cmocka_unit_test(test_cli_demo),
		cmocka_unit_test(test_cli_cluster_demo),
		cmocka_unit_test(test_cli_run_one_rank),
		cmocka_unit_test(test_cli_run_stored_log),
		cmocka_unit_test(test_cli_run_stored_log_warm),
		cmocka_unit_test(test_cli_run_stored_log_evictions),
		cmocka_unit_test(test_cli_run_pool_arguments),
		cmocka_unit_test(test_cli_run_bad_input),
		cmocka_unit_test(test_cli_run_restore_timeout_and_busy_store),
		cmocka_unit_test(test_cli_run_mpirun),
		cmocka_unit_test(test_cli_run_mpirun_unreadable_at_startup),
		cmocka_unit_test(test_cli_run_mpirun_peer_without_sockets),
		cmocka_unit_test(test_cli_bench_fanout),
		cmocka_unit_test(test_cli_strict_numbers),
		cmocka_unit_test(test_cli_run_retry_refused_at_end),
		cmocka_unit_test(test_cli_log_escapes_and_bad_level),
		cmocka_unit_test(test_cli_run_interrupted),
		cmocka_unit_test(test_cli_pool_daemon),
		cmocka_unit_test(test_cli_run_pool_two_launches),
		cmocka_unit_test(test_cli_bench_cleans_up),
		cmocka_unit_test(test_cli_bench_startup),
	};

	/* SELENE_TEST_FILTER=test_cli_help runs the tests whose names match */
	if (getenv("SELENE_TEST_FILTER"))
		cmocka_set_test_filter(getenv("SELENE_TEST_FILTER"));
	return cmocka_run_group_tests_name("cli", tests, NULL, NULL);
}
