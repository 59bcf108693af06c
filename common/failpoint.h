/*
 * Failpoints: named places in durable steps where a test can make Selene
 * fail, stall or die (docs/DESIGN.md section 10), in the style of fail(9) and
 * fail-rs. Configured by SELENE_FAILPOINTS (read by sel_failpoints_from_env,
 * which the first sel_store_open or sel_peer_start calls) or
 * sel_failpoints_configure():
 *
 *   config := entry (';' entry)*
 *   entry  := NAME '=' term ('->' term)*
 *   term   := [COUNT '*'] action
 *   action := off | return | return(ERR) | short | kill | abort
 *           | sleep(MS) | print
 *
 * ERR is an errno name (EIO, ENOSPC, ...) or a number; return alone means
 * EIO. A term with COUNT applies to that many evaluations, then the next term
 * takes over; a term without one applies forever; after the last counted
 * term the point is off. "short" makes an I/O point report half its bytes.
 * Example: "record.after_rename=1*kill;disk.write=3*off->return(EIO)".
 * kill and abort end the process, which the library never does itself: the
 * host installs what ends it (sel_failpoints_set_fatal: the selene program
 * and the tests that kill deliberately), and a configuration holding either
 * is refused unless that hook is installed and SELENE_FAILPOINTS_ALLOW_FATAL=1
 * is set too.
 *
 * With nothing configured a failpoint costs one predictable branch.
 */
#ifndef SELENE_COMMON_FAILPOINT_H
#define SELENE_COMMON_FAILPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* X(IDENT, "name", "when it is evaluated") */
#define SEL_FAILPOINT_LIST(X)                                                 \
	X(RECORD_BEFORE_CREATE, "record.before_create",                      \
	  "before a record's temporary file is created")                     \
	X(RECORD_AFTER_CREATE, "record.after_create",                        \
	  "after the temporary file is created and preallocated")            \
	X(RECORD_BEFORE_WRITE, "record.before_write",                        \
	  "before each payload write (pages or row) of a record")            \
	X(RECORD_AFTER_WRITE, "record.after_write",                          \
	  "after each payload write of a record")                            \
	X(RECORD_BEFORE_HEADER, "record.before_header",                      \
	  "before the checksum segment and header are written")              \
	X(RECORD_AFTER_HEADER, "record.after_header",                        \
	  "after the header is written")                                     \
	X(RECORD_BEFORE_FDATASYNC, "record.before_fdatasync",                \
	  "before fdatasync of a durable record")                            \
	X(RECORD_AFTER_FDATASYNC, "record.after_fdatasync",                  \
	  "after fdatasync of a durable record")                             \
	X(RECORD_BEFORE_RENAME, "record.before_rename",                      \
	  "before the temporary file is renamed into place")                 \
	X(RECORD_AFTER_RENAME, "record.after_rename",                        \
	  "after the rename, before the directory fsync")                    \
	X(RECORD_AFTER_DIR_FSYNC, "record.after_dir_fsync",                  \
	  "after the directory fsync that makes a rename durable")           \
	X(RECORD_BEFORE_TRUNCATE, "record.before_truncate",                  \
	  "before a record is truncated at its row segment")                 \
	X(RECORD_AFTER_TRUNCATE, "record.after_truncate",                    \
	  "after a record is truncated (and synced when durable)")           \
	X(RECORD_BEFORE_UNLINK, "record.before_unlink",                      \
	  "before a record file is unlinked")                                \
	X(RECORD_AFTER_UNLINK, "record.after_unlink",                        \
	  "after a record file is unlinked (and the directory synced)")      \
	X(SCAN_BEFORE_DELETE_TMP, "scan.before_delete_tmp",                  \
	  "before the scan deletes a temporary file")                        \
	X(SCAN_AFTER_DELETE_TMP, "scan.after_delete_tmp",                    \
	  "after the scan deleted a temporary file")                         \
	X(SCAN_BEFORE_DROP_INVALID, "scan.before_drop_invalid",              \
	  "before the scan deletes a record whose header fails")             \
	X(SCAN_AFTER_DROP_INVALID, "scan.after_drop_invalid",                \
	  "after the scan deleted an invalid record")                        \
	X(SCAN_BEFORE_DROP_ORPHAN, "scan.before_drop_orphan",                \
	  "before the scan deletes a record whose parent is missing")        \
	X(SCAN_AFTER_DROP_ORPHAN, "scan.after_drop_orphan",                  \
	  "after the scan deleted an orphan or childless page-only record")  \
	X(DISK_OPEN, "disk.open", "every open(2) of a record file")          \
	X(DISK_WRITE, "disk.write", "every write request (result rewritable)") \
	X(DISK_READ, "disk.read", "every read request (result rewritable)")  \
	X(DISK_FALLOCATE, "disk.fallocate", "every fallocate request")       \
	X(DISK_FDATASYNC, "disk.fdatasync", "every fdatasync of a file")     \
	X(DISK_FSYNC_DIR, "disk.fsync_dir", "every fsync of a directory")    \
	X(DISK_TRUNCATE, "disk.truncate", "every ftruncate request")         \
	X(DISK_RENAME, "disk.rename", "every rename request")                \
	X(DISK_UNLINK, "disk.unlink", "every unlink request")                \
	X(DISK_SUBMIT, "disk.submit",                                        \
	  "every io_uring_submit carrying I/O (result rewritable)")           \
	X(DISK_WAIT, "disk.wait",                                            \
	  "every io_uring_wait_cqe of the disk thread (result rewritable)")  \
	X(DEVICE_COPY, "device.copy",                                        \
	  "before each batched device copy call (return fails that batch)")  \
	X(CLUSTER_SEND, "cluster.send",                                      \
	  "before each frame is written to a link (short: half, then EPIPE)") \
	X(CLUSTER_RECV, "cluster.recv",                                      \
	  "before each frame is read from a link (short: EOF mid-frame)")   \
	X(PEER_SOCKET, "peer.socket",                                        \
	  "before each socket a peer opens to reach rank zero (return fails it)") \
	X(PEER_RESOLVE, "peer.resolve",                                      \
	  "on the helper thread, before getaddrinfo resolves rank zero's "   \
	  "host name (return(EAGAIN): a temporary failure; another: fails)")  \
	X(PEER_DUP, "peer.dup",                                              \
	  "when a joined peer duplicates its link's socket (return fails it)") \
	X(THREAD_START, "thread.start",                                      \
	  "before every thread the library starts (return refuses it)")     \
	X(DISK_IO_WORKERS, "disk.io_workers",                                \
	  "when the disk bounds its io_uring kernel workers (return: refused)") \
	X(WARM_REGISTER, "warm.register",                                    \
	  "before each chunk of the warm tier is registered with the device " \
	  "(return: the driver refuses it)")                                 \
	X(POOL_RX_DATA, "pool.rx_data",                                      \
	  "before each read of a pool window's data into its slot or place " \
	  "(sleep: a read that takes long)")                                 \
	X(POOL_ARENA_MAP, "pool.arena_map",                                  \
	  "before a rank maps its manager's arena for same-host claims "     \
	  "(return: the mapping fails; the rank's claims stream)")           \
	X(POOL_ARENA_REGISTER, "pool.arena_register",                        \
	  "on a rank's registration thread, before it registers its "        \
	  "manager's arena with the device (sleep: a large arena's long "    \
	  "registration; return: the device refuses it)")                    \
	X(POOL_LINK_CLOSE, "pool.link_close",                                \
	  "when a rank's pool link closes, before it undoes its registration " \
	  "of the manager's arena (print: logs on the closing thread; sleep: " \
	  "a slow unregistration)")                                         \
	X(POOL_LINK_CUT, "pool.link_cut",                                    \
	  "before each share a rank's pool link moves (return: its "         \
	  "connection is cut first, as a network fault would)")             \
	X(POOL_DISK_SYNC, "pool.disk_sync",                                  \
	  "before each sync of the pool manager's disk tier: a share file "  \
	  "before its rename, its directory after (return: the sync fails)") \
	X(POOL_DISK_IO, "pool.disk_io",                                      \
	  "before each spill or load of the pool manager's disk tier, on "   \
	  "its disk thread (sleep: a slow disk; return: the write or read "  \
	  "fails)")                                                          \
	X(POOL_EXPORT_COPY, "pool.export_copy",                              \
	  "before a rank builds its share of a GPU checkpoint's export "     \
	  "(return: the share fails; sleep: a copy that takes long)")       \
	X(POOL_CLAIM_REFUSE, "pool.claim_refuse",                            \
	  "when a pool manager answers a claim (return(ERR): the claim is "  \
	  "refused with ERR, as one of a record gone since its lookup)")     \
	X(POOL_TX, "pool.tx",                                                \
	  "before each write of a pool client's send queue, by its I/O "     \
	  "thread or by a caller writing its own request (return(ERR): the " \
	  "write fails with ERR, as a lost connection's)")

enum sel_failpoint {
#define SEL_FAILPOINT_ENUM(ident, name, doc) SEL_FP_##ident,
	SEL_FAILPOINT_LIST(SEL_FAILPOINT_ENUM)
#undef SEL_FAILPOINT_ENUM
	SEL_FAILPOINT_COUNT
};

/* What an evaluated point asks its caller to do besides proceeding. */
#define SEL_FAILPOINT_SHORT 1

extern bool sel_failpoints_armed;

/*
 * Evaluates a point: 0 to proceed, a negative errno to fail with it, or
 * SEL_FAILPOINT_SHORT. kill, abort and sleep act here and do not return
 * (kill, abort) or return 0 (sleep, print).
 */
int sel_failpoint_eval(enum sel_failpoint point);

#define SEL_FAILPOINT(point)                                            \
	(__builtin_expect(__atomic_load_n(&sel_failpoints_armed,        \
					  __ATOMIC_RELAXED), 0) ?        \
		 sel_failpoint_eval(point) :                            \
		 0)

/*
 * Replaces the whole configuration with config (NULL or "" clears it).
 * Returns 0, or SEL_EFAILPOINT after logging what is wrong; on error the
 * previous configuration stays. Resets every point's counters.
 */
int sel_failpoints_configure(const char *config);

/*
 * What a kill (abort false) or abort (abort true) action calls: it ends the
 * process and does not return. NULL (the default) leaves both refused.
 */
typedef void (*sel_failpoint_fatal_fn)(bool abort);
void sel_failpoints_set_fatal(sel_failpoint_fatal_fn fn);

/*
 * Applies SELENE_FAILPOINTS once per process (later calls answer what the
 * first found). Returns 0 (also when it is unset), or SEL_EFAILPOINT with
 * the reason in err; a malformed value arms nothing.
 */
int sel_failpoints_from_env(char *err, size_t err_size);

/* The point's name, its description, or its id by name (-1 if unknown). */
const char *sel_failpoint_name(enum sel_failpoint point);
const char *sel_failpoint_doc(enum sel_failpoint point);
int sel_failpoint_lookup(const char *name);

/* How often the point was evaluated, and how often an action took effect. */
uint64_t sel_failpoint_evaluations(enum sel_failpoint point);
uint64_t sel_failpoint_fired(enum sel_failpoint point);

#endif
