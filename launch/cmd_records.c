/*
 * selene ls and selene verify: read-only views of record directories. They
 * take no lock (a live store may hold it) and never change a file; they know
 * no geometry, so a header is checked against what its directory's name and
 * its own file name spell (FORMAT.md R-REC-12), and against itself.
 */
#include "launch/commands.h"

#include "common/base.h"
#include "common/limits.h"
#include "record/file.h"
#include "record/format.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Verify reads through one buffer of this size, however large a record. */
#define VERIFY_BUFFER_BYTES (8u << 20)

struct walk {
	int (*visit)(struct walk *w, int dirfd, const char *dir_path,
		     const char *name, const struct rec_expect *expect);
	bool json;
	bool header_printed; /* ls: the column names, before the first line */
	uint64_t now_ns;
	uint64_t good;
	uint64_t bad;
	uint64_t gone;      /* unlinked while read: a live store evicted them */
	uint64_t temporary;
	uint64_t dirs;
	uint64_t unreadable; /* directories and records that could not be read */
};

static int compare_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Lists names in a directory, sorted, skipping dot entries; caller frees. */
static int list_sorted(const char *path, char ***names_out, size_t *count_out)
{
	DIR *d = opendir(path);
	struct dirent *e;
	char **names = NULL;
	size_t count = 0, capacity = 0;

	if (!d)
		return -errno;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		if (count == capacity) {
			char **grown;

			capacity = capacity ? capacity * 2 : 64;
			grown = realloc(names, capacity * sizeof(*names));
			if (!grown)
				break;
			names = grown;
		}
		names[count] = strdup(e->d_name);
		if (names[count])
			count++;
	}
	closedir(d);
	if (count) /* an empty directory has no array to sort */
		qsort(names, count, sizeof(*names), compare_names);
	*names_out = names;
	*count_out = count;
	return 0;
}

static void free_names(char **names, size_t count)
{
	for (size_t i = 0; i < count; i++)
		free(names[i]);
	free(names);
}

/* Visits every *.ckpt of one record directory, in name order. */
static int walk_record_dir(struct walk *w, const char *path,
			   const char *dir_name)
{
	struct rec_digest fingerprint;
	uint8_t prefix[8];
	char **names;
	size_t count;
	int dirfd, ret;

	if (!rec_dir_name_parse(dir_name, prefix, &fingerprint))
		return 0;
	ret = list_sorted(path, &names, &count);
	if (ret) {
		fprintf(stderr, "selene: cannot read %s: %s\n", path, strerror(-ret));
		return ret;
	}
	dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0) {
		ret = -errno;
		goto out_free;
	}
	w->dirs++;
	for (size_t i = 0; i < count; i++) {
		struct rec_expect expect = { .namespace_prefix = prefix,
					     .fingerprint = &fingerprint };
		struct rec_key key;
		bool tmp;

		if (!rec_file_name_parse(names[i], &key, &tmp))
			continue;
		if (tmp) {
			w->temporary++;
			continue;
		}
		expect.key = &key;
		w->visit(w, dirfd, path, names[i], &expect);
	}
	close(dirfd);
out_free:
	free_names(names, count);
	return ret;
}

/* Base directories nest at most this deep below the one named. */
#define WALK_DEPTH_MAX 3

/* DIR is a record directory, or a base directory holding some. */
static int walk(struct walk *w, const char *path, int depth)
{
	char *copy = strdup(path), *base;
	struct stat st;
	char **names;
	size_t count;
	int ret;

	if (!copy)
		return -ENOMEM;
	while (strlen(copy) > 1 && copy[strlen(copy) - 1] == '/')
		copy[strlen(copy) - 1] = '\0';
	base = strrchr(copy, '/') ? strrchr(copy, '/') + 1 : copy;
	if (stat(copy, &st) != 0) {
		ret = -errno;
		fprintf(stderr, "selene: %s: %s\n", path, strerror(-ret));
		free(copy);
		return ret;
	}
	if (!S_ISDIR(st.st_mode)) {
		fprintf(stderr, "selene: %s is not a directory\n", path);
		free(copy);
		return -ENOTDIR;
	}
	if (rec_dir_name_parse(base, (uint8_t[8]){ 0 }, &(struct rec_digest){ 0 })) {
		ret = walk_record_dir(w, copy, base);
		free(copy);
		return ret;
	}
	ret = list_sorted(copy, &names, &count);
	if (ret) {
		fprintf(stderr, "selene: cannot read %s: %s\n", path, strerror(-ret));
		free(copy);
		return ret;
	}
	for (size_t i = 0; !ret && i < count; i++) {
		char *sub;

		if (asprintf(&sub, "%s/%s", copy, names[i]) < 0) {
			ret = -ENOMEM;
			break;
		}
		if (stat(sub, &st) == 0 && S_ISDIR(st.st_mode)) {
			if (rec_dir_name_parse(names[i], (uint8_t[8]){ 0 },
					       &(struct rec_digest){ 0 }))
				ret = walk_record_dir(w, sub, names[i]);
			else if (depth < WALK_DEPTH_MAX)
				ret = walk(w, sub, depth + 1);
			/*
			 * One directory that cannot be read (a lost+found) is
			 * named and counted; its siblings are still walked.
			 */
			if (ret && ret != -ENOMEM) {
				w->unreadable++;
				ret = 0;
			}
		}
		free(sub);
	}
	free_names(names, count);
	free(copy);
	return ret;
}

static void format_age(char *out, size_t size, uint64_t age_ns)
{
	uint64_t s = age_ns / 1000000000ull;

	if (s < 120)
		snprintf(out, size, "%" PRIu64 "s", s);
	else if (s < 7200)
		snprintf(out, size, "%" PRIu64 "m", s / 60);
	else if (s < 172800)
		snprintf(out, size, "%" PRIu64 "h", s / 3600);
	else
		snprintf(out, size, "%" PRIu64 "d", s / 86400);
}

/* Bytes of the valid UTF-8 sequence at s (1 to 4), or 0 if it is not one. */
static size_t utf8_length(const unsigned char *s)
{
	size_t len = s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : s[0] >= 0xe0 ? 3 :
		     s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : 0;

	for (size_t i = 1; i < len; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	if ((len == 3 && s[0] == 0xe0 && s[1] < 0xa0) ||  /* overlong */
	    (len == 3 && s[0] == 0xed && s[1] >= 0xa0) ||  /* a surrogate */
	    (len == 4 && s[0] == 0xf0 && s[1] < 0x90) ||  /* overlong */
	    (len == 4 && s[0] == 0xf4 && s[1] >= 0x90))   /* past U+10FFFF */
		return 0;
	return len;
}

/* s as a JSON string: quotes, backslashes and control bytes escaped, UTF-8
 * as it is, and a byte that is not UTF-8 (a file name may hold any) as
 * U+FFFD, so the line stays valid JSON whatever the name. */
static void json_string(FILE *f, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	fputc('"', f);
	while (*p) {
		size_t len;

		if (*p == '"' || *p == '\\') {
			fprintf(f, "\\%c", *p++);
		} else if (*p < 0x20 || *p == 0x7f) {
			fprintf(f, "\\u%04x", *p++);
		} else if (*p < 0x80) {
			fputc(*p++, f);
		} else if ((len = utf8_length(p)) != 0) {
			fwrite(p, 1, len, f);
			p += len;
		} else {
			fputs("\\ufffd", f);
			p++;
		}
	}
	fputc('"', f);
}

static void key_text(char out[REC_FILE_NAME_BYTES], const struct rec_key *key)
{
	rec_file_name(out, key);
	out[REC_FILE_NAME_BYTES - 6] = '\0'; /* drop ".ckpt" */
}

/*
 * A live store unlinks (evicts), replaces (stores again) and truncates
 * (drops a row of) records while ls or verify reads them, so a failure is
 * believed only when it repeats on a fresh open: a record is read at most
 * this many times, and one whose name is gone by then was evicted, not bad.
 */
#define READ_ATTEMPTS_MAX 3

static int verify_payload(struct rec_reader *r, char *why, size_t why_size);

static bool name_exists(int dirfd, const char *name)
{
	struct stat st;

	return fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT;
}

/*
 * Opens name (and with payload, verifies every page and the row), again
 * while a failure could come from a change under it. Returns 0 with r open
 * (the caller closes it), -ENOENT when the file was unlinked meanwhile, or
 * the failure that repeated, with why.
 */
static int read_record(struct rec_reader *r, int dirfd, const char *name,
		       const struct rec_expect *expect, bool payload, char *why,
		       size_t why_size)
{
	int ret = -EIO;

	for (int attempt = 0; attempt < READ_ATTEMPTS_MAX; attempt++) {
		why[0] = '\0';
		ret = rec_reader_open(r, dirfd, name, false, expect, why, why_size);
		if (!ret && payload) {
			ret = verify_payload(r, why, why_size);
			if (ret)
				rec_reader_close(r);
		}
		if (!ret)
			return 0;
		if (ret == -ENOENT || !name_exists(dirfd, name))
			return -ENOENT;
	}
	return ret;
}

/* What a file that is not a regular one is, for verify; NULL for a regular file. */
static const char *not_a_record(int dirfd, const char *name)
{
	struct stat st;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || S_ISREG(st.st_mode))
		return NULL;
	return S_ISDIR(st.st_mode) ? "a directory" : S_ISLNK(st.st_mode) ? "a symbolic link" :
	       S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISSOCK(st.st_mode) ? "a socket" :
	       "a device or other special file";
}

static void say_gone(struct walk *w, const char *dir_path, const char *name)
{
	w->gone++;
	fprintf(stderr, "selene: %s/%s: gone (removed while it was read: a live store "
		"evicted it)\n", dir_path, name);
}

/* Whose record: "RANK/WORLD", or "FIRST-LAST/WORLD" for a record of several ranks. */
static void rank_text(char *out, size_t size, const struct rec_header *h)
{
	if (h->rank_count > 1)
		snprintf(out, size, "%u-%u/%u", h->first_rank, h->first_rank + h->rank_count - 1,
			 h->world_size);
	else
		snprintf(out, size, "%u/%u", h->first_rank, h->world_size);
}

static int visit_ls(struct walk *w, int dirfd, const char *dir_path,
		    const char *name, const struct rec_expect *expect)
{
	char key[REC_FILE_NAME_BYTES], parent[REC_FILE_NAME_BYTES], age[16], why[256];
	const char *what = not_a_record(dirfd, name);
	struct rec_reader r;
	struct stat st;
	uint64_t age_ns = 0;
	int ret;

	if (what) {
		/* Not a damaged record: the store moves it aside at its next start. */
		fprintf(stderr, "selene: %s/%s: not a record: %s with a record's name\n",
			dir_path, name, what);
		return 0;
	}
	ret = read_record(&r, dirfd, name, expect, false, why, sizeof(why));
	if (ret == -ENOENT) {
		say_gone(w, dir_path, name);
		return 0;
	}
	if (ret && !sel_is_selene_error(ret)) {
		fprintf(stderr, "selene: %s/%s: cannot read it: %s\n", dir_path, name,
			strerror(-ret));
		w->unreadable++;
		return 0;
	}
	if (ret) {
		fprintf(stderr, "selene: %s/%s: invalid: %s\n", dir_path, name, why);
		w->bad++;
		return 0;
	}
	if (fstat(r.fd, &st) == 0) {
		uint64_t mtime = (uint64_t)st.st_mtim.tv_sec * 1000000000ull +
				 (uint64_t)st.st_mtim.tv_nsec;

		age_ns = w->now_ns > mtime ? w->now_ns - mtime : 0;
	}
	key_text(key, &r.header.key);
	if (r.header.parent.consumed)
		key_text(parent, &r.header.parent);
	else
		strcpy(parent, "-");
	if (w->json) {
		/* every string escaped: a directory may be named anything */
		printf("{\"dir\":");
		json_string(stdout, dir_path);
		printf(",\"first_rank\":%u,\"rank_count\":%u,\"world_size\":%u",
		       r.header.first_rank, r.header.rank_count, r.header.world_size);
		printf(",\"key\":");
		json_string(stdout, key);
		printf(",\"consumed\":%" PRIu64 ",\"parent\":", r.header.key.consumed);
		if (r.header.parent.consumed)
			json_string(stdout, parent);
		else
			printf("null");
		printf(",\"first_page\":%u,\"pages\":%u,"
		       "\"row\":%s,\"bytes\":%" PRIu64 ",\"age_s\":%.3f}\n",
		       r.header.first_page_index, r.header.tail_page_count,
		       r.row_present ? "true" : "false", r.file_length,
		       (double)age_ns / 1e9);
	} else {
		char rank[40];

		format_age(age, sizeof(age), age_ns);
		rank_text(rank, sizeof(rank), &r.header);
		if (!w->header_printed)
			printf("%-9s %-49s %-49s %6s %6s %-3s %12s %5s\n", "RANK", "KEY",
			       "PARENT", "FIRST", "PAGES", "ROW", "BYTES", "AGE");
		w->header_printed = true;
		printf("%-9s %-49s %-49s %6u %6u %-3s %12" PRIu64 " %5s\n", rank, key,
		       parent, r.header.first_page_index, r.header.tail_page_count,
		       r.row_present ? "yes" : "no", r.file_length, age);
	}
	w->good++;
	rec_reader_close(&r);
	return 0;
}

/* Reads and verifies every page and the row through one bounded buffer. */
static int verify_payload(struct rec_reader *r, char *why, size_t why_size)
{
	void *buf;
	int ret;

	if (posix_memalign(&buf, SEL_BLOCK_BYTES, VERIFY_BUFFER_BYTES))
		return -ENOMEM;
	ret = rec_reader_verify_streaming(r, buf, VERIFY_BUFFER_BYTES, why, why_size);
	free(buf);
	return ret;
}


static int visit_verify(struct walk *w, int dirfd, const char *dir_path,
			const char *name, const struct rec_expect *expect)
{
	const char *what = not_a_record(dirfd, name);
	struct rec_reader r;
	char why[256] = "";
	int ret;

	if (what) {
		/* Not a damaged record: the store moves it aside at its next start. */
		printf("NOT A RECORD %s/%s: %s with a record's name\n", dir_path, name, what);
		return 0;
	}
	ret = read_record(&r, dirfd, name, expect, true, why, sizeof(why));
	if (!ret)
		rec_reader_close(&r);
	if (ret == -ENOENT) {
		say_gone(w, dir_path, name);
		return 0;
	}
	if (ret && !sel_is_selene_error(ret)) {
		/* Not a check that failed: the file could not be read (EACCES, EIO). */
		printf("UNREADABLE %s/%s: %s\n", dir_path, name, strerror(-ret));
		w->unreadable++;
	} else if (ret) {
		printf("BAD %s/%s: %s\n", dir_path, name, why[0] ? why : sel_strerror(ret));
		w->bad++;
	} else {
		w->good++;
	}
	return 0;
}

static const struct option walk_options[] = {
	{ "json", no_argument, NULL, 'j' },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

static int parse_walk_args(int argc, char **argv, struct walk *w,
			   bool json_allowed, const char **dir)
{
	int opt;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", walk_options, NULL)) != -1) {
		if (opt == 'j' && json_allowed)
			w->json = true;
		else
			return -1;
	}
	if (optind != argc - 1)
		return -1;
	*dir = argv[optind];
	return 0;
}

/* A directory that held no record at all is said to be one (exit 1):
 * an empty listing must not pass for a healthy store. */
static bool say_if_empty(const struct walk *w, const char *dir)
{
	if (w->good + w->bad + w->gone + w->temporary)
		return false;
	if (w->dirs)
		fprintf(stderr, "selene: no records in %s (%" PRIu64 " record %s, %s)\n", dir,
			w->dirs, launch_plural(w->dirs, "directory", "directories"),
			w->dirs == 1 ? "empty" : "all empty");
	else
		fprintf(stderr, "selene: no records in %s: no record directory "
			"(<namespace>-<fingerprint>) in it or up to three levels down\n", dir);
	return true;
}

/*
 * The exit status of a walk: 1 when something could not be read (nothing
 * may be said of it, the empty check included), for a bad record or for no
 * record at all; else 0.
 */
static int walk_status(const struct walk *w, const char *dir)
{
	if (w->unreadable)
		return LAUNCH_EXIT_BAD;
	if (say_if_empty(w, dir))
		return LAUNCH_EXIT_BAD;
	return w->bad ? LAUNCH_EXIT_BAD : LAUNCH_EXIT_OK;
}

int launch_cmd_ls(int argc, char **argv)
{
	struct walk w = { .visit = visit_ls, .now_ns = sel_realtime_ns() };
	const char *dir;

	if (launch_wants_help(argc, argv) ||
	    parse_walk_args(argc, argv, &w, true, &dir) != 0) {
		FILE *out = launch_wants_help(argc, argv) ? stdout : stderr;

		fprintf(out,
			"usage: selene ls [--json] DIR\n\n"
			"Lists the records in DIR, a record directory\n"
			"(<namespace>-<fingerprint>) or a directory holding them (up to\n"
			"three levels down, such as a base per rank):\n"
			"one line per record with the rank that wrote it and the world's\n"
			"size (RANK/WORLD), its key, its parent key ('-' for a\n"
			"root record), the index of its first stored page, its page\n"
			"count, whether it has its row, its bytes and its age (mtime).\n"
			"Files that fail their header are named on stderr.\n\n"
			"exit status: 0 records listed, 1 some file is invalid or could not\n"
			"be read, DIR could not be read, or there is no record, 2 bad\n"
			"arguments\n\n"
			"  --json   one JSON object per line instead\n"
			"  --help   this help\n");
		return out == stdout ? LAUNCH_EXIT_OK : LAUNCH_EXIT_USAGE;
	}
	if (walk(&w, dir, 0) != 0)
		return LAUNCH_EXIT_BAD;
	return walk_status(&w, dir);
}

int launch_cmd_verify(int argc, char **argv)
{
	struct walk w = { .visit = visit_verify };
	const char *dir;

	if (launch_wants_help(argc, argv) ||
	    parse_walk_args(argc, argv, &w, false, &dir) != 0) {
		FILE *out = launch_wants_help(argc, argv) ? stdout : stderr;

		fprintf(out,
			"usage: selene verify DIR\n\n"
			"Checks every record in DIR (a record directory or a directory\n"
			"holding them, up to three levels down): its header against its\n"
			"directory's name and its file name, its length, every page\n"
			"checksum and its row checksum. Names each bad file and why.\n"
			"Takes no lock and changes nothing.\n\n"
			"A record removed while it is read (a live store evicting it) is\n"
			"reported as gone, not bad.\n\n"
			"exit status: 0 all good, 1 some record is bad, there is no record,\n"
			"or DIR or some directory or record in it could not be read, 2 bad\n"
			"arguments\n\n"
			"  --help   this help\n");
		return out == stdout ? LAUNCH_EXIT_OK : LAUNCH_EXIT_USAGE;
	}
	if (walk(&w, dir, 0) != 0)
		return LAUNCH_EXIT_BAD;
	if (w.good + w.bad + w.unreadable) {
		printf("verified %" PRIu64 " %s in %" PRIu64 " %s: %" PRIu64 " good, %" PRIu64
		       " bad", w.good + w.bad, launch_plural(w.good + w.bad, "record", "records"),
		       w.dirs, launch_plural(w.dirs, "directory", "directories"), w.good, w.bad);
		if (w.gone)
			printf(", %" PRIu64 " gone while read (evicted by a live store)",
			       w.gone);
		if (w.temporary)
			printf(" (%" PRIu64 " temporary %s not checked)", w.temporary,
			       launch_plural(w.temporary, "file", "files"));
		if (w.unreadable)
			printf("; %" PRIu64 " %s could not be read", w.unreadable,
			       launch_plural(w.unreadable, "directory or record",
					     "directories or records"));
		printf("\n");
	}
	return walk_status(&w, dir);
}
