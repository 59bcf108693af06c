/*
 * Every named maximum in Selene, each with the reason for its value
 * (SQLite's sqliteLimit.h). Lengths read from disk or the wire are checked
 * against these before anything is allocated, looped over or cast.
 */
#ifndef SELENE_COMMON_LIMITS_H
#define SELENE_COMMON_LIMITS_H

/* The unit of on-disk alignment: header size, segment and plane padding. */
#define SEL_BLOCK_BYTES 4096u

/* Record header: the first 4096 bytes of a record file (FORMAT.md R-REC-1). */
#define REC_HEADER_BYTES SEL_BLOCK_BYTES

/* Where the per-plane table begins in the header (FORMAT.md R-REC-4). */
#define REC_HEADER_TABLE_OFFSET 256u

/*
 * The table holds (planes + 1) * ranks u64 entries after offset 256, so a
 * header describes at most 480 entries: with one rank stored, 479 page
 * planes and its row.
 */
#define REC_HEADER_TABLE_ENTRIES_MAX \
	((REC_HEADER_BYTES - REC_HEADER_TABLE_OFFSET) / 8u)
#define REC_PAGE_PLANES_MAX (REC_HEADER_TABLE_ENTRIES_MAX - 1u)

/* Plane names are identifiers such as "layer.35.key"; 63 bytes is ample. */
#define REC_PLANE_NAME_BYTES_MAX 63u

/* One plane of one page: 1 GiB is far above any model's page plane. */
#define REC_UNIT_BYTES_MAX (1ull << 30)

/* One state row: 4 GiB covers recurrent matrices of the largest models. */
#define REC_ROW_BYTES_MAX (1ull << 32)

/* Tokens in one page: engines use 16 to 256; 65536 bounds arithmetic. */
#define REC_PAGE_TOKENS_MAX 65536u

/* Ranks in one world: bounds the fan-out and the rank field. */
#define REC_WORLD_SIZE_MAX 1024u

/*
 * Pages in one record: a root record holds its whole chain; 2^20 pages of
 * 64 tokens is 64M tokens, far past any context, and keeps the checksum
 * segment at most 8 MiB.
 */
#define REC_RECORD_PAGES_MAX (1u << 20)

/* Consumed tokens of a key: bounded so page arithmetic cannot overflow. */
#define REC_CONSUMED_MAX (1ull << 40)

/* One I/O request: docs/DESIGN.md section 4 writes in 8 MiB chunks. */
#define REC_IO_CHUNK_BYTES (8u << 20)

/* Records one directory scan keeps: 16M bounds memory at about 2 GiB. */
#define REC_DIR_RECORDS_MAX (1u << 24)

/*
 * Threads one startup scan reads headers on (one per core, at least 4).
 * After a reboot each header is a random 4 KiB read from the disk, and the
 * reads in flight, not the cores, bound the scan (100K headers on 1, 2 and
 * 16 threads: 42, 27 and 9.5 s on a virtio disk); from the page cache
 * threads past the cores just share them.
 */
#define REC_SCAN_THREADS_MAX 16u

/* Failpoints configured at once, and the terms one may chain. */
#define SEL_FAILPOINT_TERMS_MAX 8u

/*
 * One frame's payload on a cluster link (PROTOCOL.md R-WIRE-6): 16 MiB keeps
 * each link's receive buffer small, yet one summary chunk still carries
 * about 188k records and the largest job (1M page ids) fits.
 */
#define CLUSTER_FRAME_PAYLOAD_BYTES_MAX (16u << 20)

/* Frames a sender may write itself on an idle link (cluster/link.c): small
 * ones, where a writer wake-up is the cost; larger ones are bandwidth. */
#define CLUSTER_DIRECT_PAYLOAD_BYTES_MAX (64u << 10)

/* Records in one peer's summary, all chunks together: one directory scan's. */
#define CLUSTER_SUMMARY_RECORDS_MAX REC_DIR_RECORDS_MAX

/* Entries in one agreement, all chunks together: at most the summary's. */
#define CLUSTER_AGREEMENT_ENTRIES_MAX REC_DIR_RECORDS_MAX

/* Page ids in one job: a store writes one record, at most its pages. */
#define CLUSTER_JOB_PAGE_IDS_MAX REC_RECORD_PAGES_MAX

/* Records in one fetch chain: the shard engine's SHARD_CHAIN_RECORDS_MAX. */
#define CLUSTER_JOB_CHAIN_RECORDS_MAX 4096u

/* A pool attach job's manager address: host:port, a DNS name's 253 and a port. */
#define CLUSTER_JOB_POOL_ADDRESS_BYTES_MAX 260u

/* A refusal's text: one sentence naming what differs, for the log. */
#define CLUSTER_REFUSE_TEXT_BYTES_MAX 256u

/*
 * Connections rank zero holds in the join handshake at once (docs/DESIGN.md
 * section 7): enough for every peer of a large world to connect together,
 * few enough that a storm of strangers costs a bounded number of fds; past
 * it the oldest stranger is dropped.
 */
#define CLUSTER_JOIN_PENDING_MAX 64u

/* The time one connection has to complete the join handshake: a real peer
 * needs one round trip; an idle connection is dropped after it. */
#define CLUSTER_JOIN_HANDSHAKE_MS 5000u

/*
 * When rank zero cannot accept a join connection for want of descriptors or
 * memory and holds no handshake it could give up, it leaves the listener
 * alone this long before trying again (the connection stays queued).
 */
#define CLUSTER_JOIN_ACCEPT_RETRY_MS 100u

/* Log lines a second about failed join connections (more are counted). */
#define CLUSTER_JOIN_LOG_PER_SECOND 5u

/* How long rank zero, failing at startup, keeps telling peers that connect. */
#define CLUSTER_FAILURE_NOTICE_MS 2000u

/* A failed job's reason: the shard engine's completion why[200] holds less. */
#define CLUSTER_JOB_REASON_BYTES_MAX 200u

/*
 * The pool (pool/PROTOCOL.md). A window is the unit of record bytes on a
 * pool connection: 4 MiB by default keeps a claim's staging small (the seed's
 * 16 windows in flight are 64 MiB) while a syscall moves megabytes; the
 * 16 MiB ceiling keeps one frame within the cluster's frame size.
 */
#define POOL_WINDOW_BYTES_MIN (64u << 10)
#define POOL_WINDOW_BYTES_DEFAULT (4u << 20)
#define POOL_WINDOW_BYTES_MAX (16u << 20)

/* One pool frame's payload: the largest window with its head and tag. */
#define POOL_FRAME_PAYLOAD_BYTES_MAX (POOL_WINDOW_BYTES_MAX + 64u)

/*
 * A pool connection's read-ahead: what one read takes at a frame's start
 * (and wherever less than this is wanted), so that a control frame (its
 * header, body and tag) and the frames that came with it cost one read,
 * not three each. Window data past it is read straight to its place.
 */
#define POOL_RX_AHEAD_BYTES 4096u

/* The manager's --name: a word for logs and the scope, not a document. */
#define POOL_NAME_BYTES_MAX 64u

/* The arena's path under /dev/shm, as a file name may be long. */
#define POOL_ARENA_PATH_BYTES_MAX 255u

/* Candidate keys in one LOOKUP: one per 64 tokens of a 256K-token history. */
#define POOL_LOOKUP_KEYS_MAX 4096u

/* Records in one chain the pool answers: the shard engine's fetch chain. */
#define POOL_CHAIN_RECORDS_MAX CLUSTER_JOB_CHAIN_RECORDS_MAX

/* Lookup tickets one client holds unanswered: the model thread's queue. */
#define POOL_LOOKUPS_LIVE_MAX 256u

/* Claims one rank's connection streams at once. */
#define POOL_SHARES_LIVE_MAX 64u

/* Claims and open puts a session may hold (WELCOME's maxima are at most). */
#define POOL_CLAIMS_MAX 1024u
#define POOL_PUTS_MAX 1024u

/* Connections a manager serves; past it a new one is refused (busy). */
#define POOL_CONNECTIONS_MAX 1024u

/* A pool connection's handshake and attach, from accept (or connect). */
#define POOL_HANDSHAKE_MS 5000u

/* Seed 2.15: a claim's setup allowance (clamped to the max), its bytes at
 * 8 MiB/s on top, and the manager's no-progress timeout of a transfer. */
#define POOL_CLAIM_SETUP_MS 10000u
#define POOL_CLAIM_SETUP_MS_MAX 30000u
#define POOL_TRANSFER_BYTES_PER_S (8u << 20)
#define POOL_NO_PROGRESS_MS 3000u

/* A connection silent this long is closed; an idle rank heartbeats at a
 * sixth of it, so one lost heartbeat never closes it. */
#define POOL_IDLE_MS 30000u
#define POOL_HEARTBEAT_MS 5000u
/* Keys one HOLDS frame carries (R-POOL-70). */
#define POOL_HOLDS_KEYS_MAX 1024u
/* (key, instance) announcements the manager keeps per scope (R-POOL-72). */
#define POOL_HOLDS_SCOPE_MAX 65536u
/* Exports a holder is asked for at once (R-POOL-73). */
#define POOL_EXPORTS_LIVE_MAX 4u
/*
 * The pool manager's loop walks its deadlines when the earliest is due and
 * at least this often; it waits no longer than this for events.
 */
#define POOL_LOOP_TICK_MS 100u
/*
 * The manager's max-age sweep (R-POOL-44): at most once per this or per
 * the max age, if shorter, and at most this many records dropped a sweep.
 */
#define POOL_EXPIRE_EVERY_MS 60000u
#define POOL_EXPIRE_SWEEP_MAX 64u
/* How long the manager keeps an export it asked for (R-POOL-74). */
#define POOL_EXPORT_MS 30000u
/*
 * A GPU checkpoint's export share (R-POOL-78) is built whole in host
 * memory before it is sent: at most this many bytes a rank.
 */
#define POOL_GPU_EXPORT_SHARE_BYTES_MAX (1ull << 30)
/*
 * Jobs the pool manager's disk thread holds at once (spills, loads and
 * unlinks, queued, running or done and not yet taken by the loop): past it
 * a spill is refused (backpressure) and an unlink runs on the loop.
 */
#define POOL_DISK_JOBS_MAX 1024u
/*
 * Bytes of spill copies queued to the disk thread: a spill copies its
 * record out of the arena so the room is free at once; past this the
 * spill is refused and the put or claim that needed room with it.
 */
#define POOL_DISK_QUEUE_BYTES_MAX (256ull << 20)
/* GPU checkpoints an engine may offer for export at once (sel_gpu_hold). */
#define POOL_GPU_HOLDS_MAX 4096u

/* RDMA for pool claims (pool/rdma.h). */

/* A verbs device's name: IBV_SYSFS_NAME_MAX is 64 with its NUL. */
#define POOL_RDMA_DEVICE_NAME_BYTES 64u

/* One lent slot: a claim window; 1 GiB is far above any window and keeps
 * a single RDMA WRITE under the 2 GiB message limit of every device. */
#define POOL_RDMA_SLOT_BYTES_MAX (1ull << 30)

/* Slots one rank lends: bounds the plan's arithmetic and the slot map. */
#define POOL_RDMA_SLOTS_MAX 4096u

/* Memory regions one lender splits its slots over when a device's largest
 * region is smaller than the whole (each region is one rkey on the wire). */
#define POOL_RDMA_REGIONS_MAX 16u

/* An encoded endpoint: 56 fixed bytes and 24 per region (pool/rdma.c). */
#define POOL_RDMA_ENDPOINT_BYTES_MAX (56u + 24u * POOL_RDMA_REGIONS_MAX)

/* Slots a pool client lends by default, and the memory they may take. */
#define POOL_RDMA_CLIENT_SLOTS_DEFAULT 4u
#define POOL_RDMA_CLIENT_MEMORY_DEFAULT (256ull << 20)

/* RDMA WRITEs one link has posted and not polled: the send queue's depth. */
#define POOL_RDMA_WRITES_IN_FLIGHT_MAX 64u

/* Scatter entries of one RDMA WRITE: a source crossing regions of the
 * writer's memory; every device offers at least 4 a send. */
#define POOL_RDMA_WRITE_SGES_MAX 4u

/* Times close's drain waits out a failed write from warm's backoff to try
 * again (sel_store_close): a transient failure is written, a disk that
 * keeps failing ends the drain within seconds. */
#define SEL_CLOSE_WRITE_RETRIES 2u

#endif
