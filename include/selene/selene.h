/*
 * Selene's public API: the only header a serving engine includes.
 *
 * This first part holds what every other part of the API shares: the
 * library version and the error codes. Every action returns 0 or a negative
 * number: a negative errno (-EIO, -ENOSPC, ...) for an operating-system
 * failure, or one of the SEL_E* codes below for Selene's own failures.
 * sel_strerror() names either kind.
 */
#ifndef SELENE_SELENE_H
#define SELENE_SELENE_H

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The library's version; its major is the shared library's SONAME
 * (libselene.so.MAJOR), raised with every change that a program built
 * against the older headers would misread: a public struct's size or
 * layout, a function's arguments (README.md, "Building by hand").
 */
#define SELENE_VERSION_MAJOR 1
#define SELENE_VERSION_MINOR 0
#define SELENE_VERSION_PATCH 0

/*
 * Selene's own failures take a reserved negative band far below any errno
 * (Linux errnos stay under 4096), like LMDB's MDB_* band.
 */
enum sel_error {
	SEL_ERROR_FIRST = -30500,
	SEL_EBADHEADER = SEL_ERROR_FIRST, /* a record header failed validation */
	SEL_ECHECKSUM,   /* a page or row failed its checksum */
	SEL_EMISMATCH,   /* identity, fingerprint, key or layout differs */
	SEL_ELOCKED,     /* another process holds the record directory */
	SEL_EGEOMETRY,   /* a geometry description is invalid */
	SEL_ETOOBIG,     /* a size is past its named maximum */
	SEL_EPROTO,      /* a malformed frame or protocol violation */
	SEL_EQUEUEFULL,  /* a bounded queue or pool has no room */
	SEL_ESTOPPED,    /* the object failed earlier and is poisoned */
	SEL_ENOTFOUND,   /* no such record */
	SEL_EFAILPOINT,  /* a failpoint configuration is malformed */
	SEL_ERROR_LAST = SEL_EFAILPOINT,
};

/*
 * Returns a static, human-readable description of err, which is 0, a
 * negative errno, or a SEL_E* code. Never returns NULL; the string is valid
 * for the life of the process.
 */
const char *sel_strerror(int err);

/* Returns the library version as "MAJOR.MINOR.PATCH", a static string. */
const char *sel_version(void);

#ifdef __cplusplus
}
#endif

#endif
