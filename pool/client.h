/*
 * The client of a pool manager (pool/PROTOCOL.md, rules R-POOL-*): what one
 * rank of a Selene instance uses on its one connection to the manager. It
 * connects, proves the pool secret both ways and attaches to the instance's
 * scope (pool_client_open); on rank zero's connection, which is the
 * instance's session, it sends lookups, claims and put decisions whose
 * answers are polled later; on every rank's connection it moves that rank's
 * own share bytes: put windows out of caller buffers (or a record file), and
 * claim windows into caller buffers, each page and row verified against the
 * record's checksums before the window is handed over.
 *
 * What it is not: it decides nothing (what to put, look up or claim is the
 * store's choice), tells nothing to the instance's other ranks (rank zero
 * passes claim ids, chains and put ids to its peers over cluster links),
 * and never reconnects: after a failure the connection is poisoned, every
 * call returns the failure (pool_client_status says why), and the caller
 * closes it and opens a new one.
 *
 * Chains (struct pool_chain_entry), sections (enum pool_section) and arena
 * places (struct pool_place) are the wire's (pool/wire.h).
 *
 * Threads. A client owns one I/O thread that does all socket reads and
 * writes, except that a caller's request queued on an empty output is
 * written by the caller (one non-blocking sendmsg) without waking it.
 * Every function is safe to call from any thread. Functions marked
 * "never waits" only queue a frame (and write it so) or read client state
 * under the client's mutex, which the I/O thread holds across non-blocking
 * socket calls only (one read or sendmsg of at most what the socket buffer
 * holds); they fit the model thread, and return SEL_EQUEUEFULL rather than
 * wait when a bounded queue is full. Functions that take timeout_ms
 * block the calling thread (a transfer thread) up to that long; timeout_ms
 * < 0 waits without limit, 0 does not wait.
 *
 * Errors: 0 or a negative errno or SEL_E* code (include/selene/selene.h).
 * Functions with why/why_size put a printable reason there on failure.
 */
#ifndef SELENE_POOL_CLIENT_H
#define SELENE_POOL_CLIENT_H

#include "common/limits.h"
#include "pool/wire.h"
#include "record/geometry.h"
#include "record/key.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pool_client;

/*
 * Loads a pool secret file: exactly 32 bytes, a regular file that neither
 * group nor others may read (the launch secret's loader; R-POOL-10).
 * Returns 0, or -EINVAL with the reason in why.
 */
int pool_secret_load(const char *path, uint8_t secret[POOL_SECRET_BYTES], char *why,
		     size_t why_size);

/*
 * The parts of an instance's scope (R-POOL-14, R-POOL-16): equal on every
 * rank of the instance. page_bytes[i] and row_bytes[i] are rank i's stored
 * page and padded row (rec_geometry.page_record_bytes, row_record_bytes).
 */
struct pool_scope_parts {
	uint32_t world_size; /* 1 .. REC_WORLD_SIZE_MAX */
	struct rec_identity namespace_id; /* R-KEY-2 */
	struct rec_digest layout_digest;  /* R-KEY-3 */
	uint32_t page_tokens;
	uint32_t plane_count; /* page planes per rank */
	const uint64_t *page_bytes; /* world_size entries; borrowed */
	const uint64_t *row_bytes;  /* world_size entries; borrowed */
};

/* R-POOL-16: the scope of parts under a pool named pool_name. */
void pool_scope_compute(const char *pool_name, const struct pool_scope_parts *parts,
			uint8_t out[POOL_SCOPE_BYTES]);

/* What a rank brings to pool_client_open. */
struct pool_client_config {
	const char *address; /* "host:port" or "[IPv6]:port"; borrowed for the call */
	const uint8_t *secret; /* POOL_SECRET_BYTES; copied */
	uint32_t rank;         /* this rank; 0 opens the session */
	uint8_t instance_id[POOL_INSTANCE_ID_BYTES]; /* equal on every rank, not all zero */
	struct pool_scope_parts scope; /* copied */
	/* This rank's geometry (copied): claim windows are checked against it. */
	const struct rec_geometry *geometry;
	/* Connect, handshake and attach must finish by then; 0: POOL_HANDSHAKE_MS. */
	uint32_t deadline_ms;
	/*
	 * RDMA claims (pool/PROTOCOL.md, R-POOL-90 ..): when the manager offers
	 * them and this host has a verbs device (rdma_device, NULL: the first
	 * with an active port), the client lends rdma_slots slots (0:
	 * POOL_RDMA_CLIENT_SLOTS_DEFAULT) of pool_client_slot_bytes, registered,
	 * within rdma_memory_bytes (0: POOL_RDMA_CLIENT_MEMORY_DEFAULT), and
	 * pulls in RDMA mode. rdma_off: never (no RDMA message is sent).
	 */
	bool rdma_off;
	const char *rdma_device;
	uint32_t rdma_slots;
	uint64_t rdma_memory_bytes;
};

/*
 * Connects to the manager, runs the handshake (R-POOL-10 .. R-POOL-13) and
 * ATTACH (R-POOL-14 .. R-POOL-18) within config->deadline_ms, and starts the
 * I/O thread. Returns 0 and *out (close with pool_client_close), or: -EACCES
 * (the manager refused the secret, or failed to prove it), SEL_EMISMATCH
 * (refused: scope, world; or ATTACHED's scope is not ours), -ESHUTDOWN
 * (the manager is draining), SEL_EQUEUEFULL (busy), -ETIMEDOUT (the
 * deadline), SEL_EPROTO, -EINVAL (a bad address or config), or a socket
 * errno; why says which, with the manager's own text when it refused.
 */
int pool_client_open(const struct pool_client_config *config, struct pool_client **out,
		     char *why, size_t why_size);

/*
 * Sends BYE (best effort), closes the connection, stops the I/O thread and
 * frees the client. Every live lookup, claim and put of this connection
 * ends with it on the manager's side (R-POOL-6, R-POOL-43); a thread still
 * blocked in another call of this client is a programmer error. NULL does
 * nothing.
 */
void pool_client_close(struct pool_client *c);

/* What the manager told (R-POOL-13, R-POOL-17); valid until close. */
struct pool_facts {
	char name[POOL_NAME_BYTES_MAX + 1];
	char arena_path[POOL_ARENA_PATH_BYTES_MAX + 1]; /* "" without an arena */
	uint8_t arena_id[POOL_ARENA_ID_BYTES];
	uint64_t arena_generation;
	uint64_t arena_bytes; /* 0: no arena */
	uint32_t window_bytes;
	uint32_t claims_max;
	uint32_t puts_max;
	uint32_t claim_setup_ms;
	uint8_t scope[POOL_SCOPE_BYTES];
	uint64_t scope_records; /* records the manager held in the scope at attach */
};

const struct pool_facts *pool_client_facts(const struct pool_client *c);

/*
 * Never waits. 0 while the connection is up; otherwise the failure that
 * poisoned it (-ECONNRESET, -ETIMEDOUT, SEL_EPROTO, -EACCES, -ESHUTDOWN for
 * the manager's BYE or REFUSE shutdown, ...) with its reason in why.
 */
int pool_client_status(const struct pool_client *c, char *why, size_t why_size);

/*
 * Never waits. Ends the connection now, as a network fault would: the
 * client is poisoned with -ECONNRESET and why, and its socket shut down
 * both ways, so the manager sees the close (fault injection: the
 * pool.link_cut failpoint).
 */
void pool_client_cut(struct pool_client *c, const char *why);

/*
 * Never waits. The smoothed round trip of this connection's control frames
 * (LOOKUP to ANSWER, HEARTBEAT), in microseconds; 0 before one was measured.
 * The store's lookup grace period is four of them (seed 2.15).
 */
uint32_t pool_client_rtt_us(const struct pool_client *c);

/*
 * Never waits. True while this connection's claims are pulled in RDMA mode
 * (slots lent and connected, and RDMA not turned off: R-POOL-97).
 */
bool pool_client_rdma_active(const struct pool_client *c);

/*
 * Bytes a claim slot must hold (pool_share_post): the window bytes, at
 * least one page and at least the row of this rank (R-POOL-15, R-POOL-33).
 */
size_t pool_client_slot_bytes(const struct pool_client *c);

/*
 * Never waits. With on, this client's later claims (pool_claim_begin) are
 * local (CLAIM_LOCAL, R-POOL-51): each grant brings this rank's places in
 * the arena, so a places pull of the claim (pool_share_pull) asks the
 * manager nothing. Turn it on only where the arena is mapped and usable
 * (shard/pool_link.c: registered with the device); a grant's places are
 * also dropped unused when the rank streams instead.
 */
void pool_client_claim_local(struct pool_client *c, bool on);

/*
 * Never waits. Frames of type this client queued to the manager since it
 * opened (HELLO and PROOF of the handshake not counted): tests count the
 * round trips of a claim with it.
 */
uint64_t pool_client_frames_sent(const struct pool_client *c, uint16_t type);

/* ---- Lookups (session only: rank zero's client) ---- */

/*
 * Never waits. Sends a LOOKUP of key_count keys (1 .. POOL_LOOKUP_KEYS_MAX,
 * strictly decreasing consumed counts: the candidates of one history,
 * longest first; copied) and sets *ticket. At most POOL_LOOKUPS_LIVE_MAX
 * tickets are live (SEL_EQUEUEFULL past it). -EINVAL on a rank other
 * than zero or a bad key list; the connection's failure when poisoned.
 */
int pool_lookup_begin(struct pool_client *c, const struct rec_key *keys, uint32_t key_count,
		      uint64_t *ticket);

/*
 * Never waits. 0 while the answer has not come. 1 when it has: *count
 * entries of the matched chain, root first (each with the session rank's
 * place in the arena and its image's stamp, R-POOL-22), in entries (entries_max must
 * be POOL_CHAIN_RECORDS_MAX or the chain's length; -ENOSPC otherwise,
 * the ticket stays); *count 0 means no candidate matched. The ticket ends
 * on 1 or on any failure (-ENOENT: not a live ticket; or the connection's
 * failure).
 */
int pool_lookup_poll(struct pool_client *c, uint64_t ticket, struct pool_chain_entry *entries,
		     uint32_t entries_max, uint32_t *count);

/* Never waits. Forgets a ticket (its answer, when it comes, is dropped). */
void pool_lookup_cancel(struct pool_client *c, uint64_t ticket);

/* ---- Holders and exports (session only: rank zero's client) ---- */

/*
 * Never waits. Announces (op add), withdraws (op withdraw) key_count keys
 * (1 .. POOL_HOLDS_KEYS_MAX) of records this instance holds with their
 * row in its own tiers, or (op reset, no key) forgets every announcement
 * (R-POOL-70, R-POOL-71). SEL_EQUEUEFULL when the queue is full (the
 * caller re-announces in full later), -EINVAL on a rank other than zero
 * or bad keys, or the connection's failure.
 */
int pool_holds_send(struct pool_client *c, enum pool_holds_op op, const struct rec_key *keys,
		    uint32_t key_count);

/*
 * Never waits. 1 and *out: the manager asks this instance to export out->key
 * (R-POOL-74), to be answered once with pool_export_end; 0 when none is
 * waiting. Exports past a small queue are answered SEL_EQUEUEFULL by the
 * client itself.
 */
int pool_export_next(struct pool_client *c, struct pool_export *out);

/*
 * Never waits. Answers export_id (R-POOL-75): 0 once its chain is in the
 * pool, -ENOENT when this instance does not hold the key with its row, or
 * the failure. Returns 0, SEL_EQUEUEFULL when the send queue (allocated at
 * open, never grown) has no room, or the connection's failure.
 */
int pool_export_end(struct pool_client *c, uint64_t export_id, int result);

/* ---- Claims: the session's part (rank zero) ---- */

/*
 * Never waits. Sends a CLAIM of key's chain (R-POOL-30), or a CLAIM_LOCAL
 * (R-POOL-51) when pool_client_claim_local is on, and sets *claim_id; poll
 * for the grant with pool_claim_poll (a local grant is whole once its
 * places came too, in the same write of the manager).
 */
int pool_claim_begin(struct pool_client *c, const struct rec_key *key, uint64_t *claim_id);

/* A granted claim (R-POOL-31). */
struct pool_claim_grant {
	uint32_t deadline_ms; /* from when CLAIMED arrived */
	uint64_t deadline_ns; /* the same, on this host's CLOCK_MONOTONIC */
	uint32_t chain_count;
};

/*
 * Never waits. 0 while CLAIMED has not come; 1 when the claim was granted
 * (*grant, and its chain in entries as pool_lookup_poll, each with the
 * stamp of the image pinned, R-POOL-36, and no place); the manager's
 * refusal (-ENOENT, SEL_EQUEUEFULL, -EEXIST, -ESHUTDOWN) or the
 * connection's failure otherwise, which also ends the claim id.
 */
int pool_claim_poll(struct pool_client *c, uint64_t claim_id, struct pool_claim_grant *grant,
		    struct pool_chain_entry *entries, uint32_t entries_max, uint32_t *count);

/*
 * Where a claim's grant spent its time, on this host's CLOCK_MONOTONIC in
 * ns (0: not yet): its request queued (pool_claim_begin), written whole to
 * the socket, the I/O thread's start of the read that brought CLAIMED
 * (woken, the lock taken), CLAIMED read, and the grant whole (for a local
 * grant, its places read). by_caller: the caller wrote the request itself
 * (its connection's output was empty), without the I/O thread.
 */
struct pool_claim_times {
	uint64_t queued_ns, written_ns, woken_ns, claimed_ns, answered_ns;
	bool by_caller;
};

/* Never waits. The times of a live claim (until pool_claim_end); -ENOENT otherwise. */
int pool_claim_times(struct pool_client *c, uint64_t claim_id, struct pool_claim_times *out);

/*
 * Never waits. Ends a claim (CLAIM_END, R-POOL-35): the manager drops its
 * pins. Call it once every rank finished with the claim, or gave up;
 * result is the instance's outcome (0 or its failure), for the manager's
 * counters. Ending a claim that is not live is a no-op.
 */
int pool_claim_end(struct pool_client *c, uint64_t claim_id, int result);

/*
 * Never waits. Whether claim_id (live) was sent as CLAIM_LOCAL, so that its
 * grant brings the session rank's places (R-POOL-51).
 */
bool pool_claim_is_local(struct pool_client *c, uint64_t claim_id);

/*
 * Waits up to timeout_ms for a local claim's grant (the session rank's
 * transfer thread, which began its copies from the lookup's places before
 * it, R-POOL-22), while the session's own thread polls the same claim with
 * pool_claim_poll: neither takes the grant from the other. 1 when the
 * claim was granted: *grant, its chain with each image's stamp (R-POOL-36)
 * in entries and the session rank's places in places (*count of each;
 * entries_max at least the chain's length, else -ENOSPC). Otherwise the
 * manager's refusal, -ENOENT when the claim is not live (ended, or its
 * refusal already taken by pool_claim_poll), -EINVAL for a claim that is
 * not local, SEL_EPROTO for a place past the arena, -ETIMEDOUT, or the
 * connection's failure (a manager silent for POOL_NO_PROGRESS_MS ends it,
 * R-POOL-52). The claim stays live: the session ends it.
 */
int pool_claim_wait(struct pool_client *c, uint64_t claim_id, struct pool_claim_grant *grant,
		    struct pool_chain_entry *entries, struct pool_place *places,
		    uint32_t entries_max, uint32_t *count, int timeout_ms);

/* ---- Claims: every rank's part, on its own connection ---- */

/* One delivered window: its bytes lie in a slot the caller posted. */
struct pool_window {
	uint32_t chain_index;
	enum pool_section section;
	uint32_t first; /* pages: stored page index j of record chain_index; else byte offset */
	uint32_t count; /* pages: whole pages; else bytes */
	const uint8_t *data; /* the slot's first byte; verified (pages, row) */
	size_t bytes;
	void *slot_ctx; /* what pool_share_post was given with the slot */
	bool last;      /* the rank's last window of this claim */
};

/*
 * Never waits. Starts this rank's share of a claim (CLAIM_PULL, R-POOL-32):
 * the chain as CLAIMED gave it (copied; rank zero passes it on), skipping
 * its first skip_pages pages. places true asks for arena places
 * (pool_share_places) instead of a stream; only for a rank on the
 * manager's host (pool_arena_map succeeded). A places pull of a local
 * claim this client was granted (R-POOL-51) sends nothing: the grant's
 * places serve it. A stream is pulled in RDMA
 * mode while pool_client_rdma_active: its windows land in the client's
 * lent slots and are copied into the posted slots, then verified as
 * stream windows are; the caller sees no difference. At most
 * POOL_SHARES_LIVE_MAX claims per connection (SEL_EQUEUEFULL).
 */
int pool_share_pull(struct pool_client *c, uint64_t claim_id,
		    const struct pool_chain_entry *chain, uint32_t chain_count,
		    uint32_t skip_pages, bool places);

/*
 * Never waits. Lends the I/O thread a slot of slot_bytes (at least
 * pool_client_slot_bytes) for the next window of claim_id; slot_ctx comes
 * back in the window. The caller owns the slot again when the window is
 * delivered (pool_share_next), or when the claim ends (pool_share_end).
 * A window is read into a slot only; with none posted the connection's
 * reading waits, so keep at least one posted while a claim streams.
 */
int pool_share_post(struct pool_client *c, uint64_t claim_id, void *slot, size_t slot_bytes,
		    void *slot_ctx);

/*
 * Waits up to timeout_ms for the next window of claim_id, in stream order.
 * 1 and *out: the window is in its slot and was verified (headers against
 * the chain and this rank's geometry, pages and the row against their
 * checksums: R-POOL-33). 0: the stream is complete (every window was
 * delivered). -ETIMEDOUT on timeout (the claim goes on). Otherwise the
 * claim failed on this rank: SEL_ECHECKSUM, SEL_EBADHEADER, SEL_EMISMATCH
 * (a window failed its check), the manager's CLAIM_END (-ETIMEDOUT for
 * its deadline, -ENOENT), or the connection's failure; the caller then
 * discards whatever it copied out of this claim's windows.
 */
int pool_share_next(struct pool_client *c, uint64_t claim_id, struct pool_window *out,
		    int timeout_ms);

/*
 * Called by pool_share_claim for each window in order. Return 0 to go on,
 * or a negative code to stop (pool_share_claim returns it). The slot is
 * posted again when the callback returns.
 */
typedef int (*pool_window_fn)(void *ctx, const struct pool_window *window);

/*
 * Blocking: pulls this rank's share of a claim as pool_share_pull (stream
 * mode), posts slot_count slots of slot_bytes (caller-owned, valid for the
 * call), and calls fn on each window until the stream completes (0), fn
 * stops it, the deadline deadline_ms from now passes (-ETIMEDOUT), or it
 * fails as pool_share_next. The claim's share is ended on return.
 */
int pool_share_claim(struct pool_client *c, uint64_t claim_id,
		     const struct pool_chain_entry *chain, uint32_t chain_count,
		     uint32_t skip_pages, void *const *slots, uint32_t slot_count,
		     size_t slot_bytes, pool_window_fn fn, void *ctx, int deadline_ms);

/*
 * Waits up to timeout_ms for a places claim's CLAIM_PLACES (R-POOL-34):
 * places[i] for chain record i (chain_count entries). The images stay
 * there until the session ends the claim. Returns 0, -ETIMEDOUT, or the
 * claim's failure as pool_share_next.
 */
int pool_share_places(struct pool_client *c, uint64_t claim_id, struct pool_place *places,
		      uint32_t chain_count, int timeout_ms);

/*
 * Never waits for the manager (only, at most, for the one non-blocking
 * read into one of the claim's slots that the I/O thread may be doing).
 * This rank is done with claim_id: returns every posted slot it did not
 * deliver and forgets the claim (the pins are the session's to end).
 * Returns 0, or -ENOENT when the claim is not pulled here.
 */
int pool_share_end(struct pool_client *c, uint64_t claim_id);

/*
 * Maps the manager's arena read-only when this rank is on its host: the
 * file at facts->arena_path whose header (R-POOL-50) has the WELCOME's id,
 * generation and size. Returns 0 with *base (valid until close) and
 * *bytes; -ENOENT when no such file is here (another host: claim by
 * stream), SEL_EMISMATCH when the file is another arena, or an errno.
 * Mapped once per client; a second call returns the same mapping.
 */
int pool_arena_map(struct pool_client *c, const uint8_t **base, uint64_t *bytes, char *why,
		   size_t why_size);

/* ---- Puts ---- */

/* What the session asks to put (R-POOL-40). */
struct pool_put_spec {
	struct rec_key key;
	struct rec_key parent; /* consumed 0, zero digest: a root record */
	uint32_t first_page_index;
	uint32_t tail_page_count;
	bool row;
	const uint64_t *share_bytes; /* world_size entries: each rank's image length; borrowed */
};

/*
 * Session, never waits. Sends PUT_BEGIN and sets *request_id; poll with
 * pool_put_poll.
 */
int pool_put_begin(struct pool_client *c, const struct pool_put_spec *spec,
		   uint64_t *request_id);

/*
 * Session, never waits. 0 while PUT_READY has not come; 1 and *put_id when
 * the manager opened the put (pass put_id to every rank, which then sends
 * its share); the refusal otherwise (-EEXIST: the pool holds the key
 * already; -ENOENT, -ENOSPC, SEL_EQUEUEFULL, -EINVAL, -ESHUTDOWN), which
 * also ends the request id.
 */
int pool_put_poll(struct pool_client *c, uint64_t request_id, uint64_t *put_id);

/*
 * Session, never waits. commit true asks the manager to make the put's
 * record visible once every rank's share verified; false abandons it.
 * The outcome comes back through pool_put_outcome.
 */
int pool_put_commit(struct pool_client *c, uint64_t put_id, bool commit);

/*
 * Session, never waits. 0 while the outcome has not come; 1 when the put
 * committed (its record is visible to lookups); its failure otherwise
 * (R-POOL-42: -ECANCELED, -ETIMEDOUT, -ECONNRESET, -EAGAIN, a share's
 * SEL_ECHECKSUM/SEL_EBADHEADER/SEL_EMISMATCH, or the connection's
 * failure). The outcome may come before any commit (a failed put). The
 * put id ends on any return but 0.
 */
int pool_put_outcome(struct pool_client *c, uint64_t put_id);

/*
 * Any rank, blocking up to timeout_ms: sends bytes of this rank's share
 * image of put_id, at offset (windows of a share are sent in order,
 * contiguous from 0), from data (caller-owned; it may be reused once this
 * returns 0: every byte was handed to the socket). Windows larger than
 * the manager's window bytes are cut. Returns 0, -ETIMEDOUT, the put's
 * end when the manager already ended it (its PUT_END result),
 * SEL_EQUEUEFULL when the send queue has no room for the window's head,
 * or the connection's failure. A timeout poisons the connection (data may have
 * been half sent; nothing more is, so data is the caller's again at once).
 */
int pool_put_window(struct pool_client *c, uint64_t put_id, uint64_t offset, const void *data,
		    size_t bytes, int timeout_ms);

/*
 * Any rank, blocking up to timeout_ms: waits for the manager's PUT_END for
 * this rank's share of put_id. 0: the share arrived whole and verified;
 * otherwise its failure (R-POOL-41), -ETIMEDOUT, or the connection's.
 */
int pool_put_share_wait(struct pool_client *c, uint64_t put_id, int timeout_ms);

/*
 * Any rank, blocking up to timeout_ms in all: sends the share image held in
 * fd (a record file: bytes 0 .. length), read with pread, in windows, then
 * waits for its PUT_END as pool_put_share_wait. fd stays the caller's.
 */
int pool_put_share_fd(struct pool_client *c, uint64_t put_id, int fd, uint64_t length,
		      int timeout_ms);

#endif
