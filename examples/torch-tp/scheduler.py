"""Rank zero's scheduler: admits a trace's requests, reuses the GPU prefix
cache, restores from Selene or recomputes, prefills span by span (a
checkpoint, cached and published, at every page-aligned span boundary) and
decodes greedily. Every model step goes to every rank through `ranks`.

The model loop waits for Selene only when the pages a step needs are held
by checkpoints whose stores still copy them (pinned: never evicted until
their events come): a restoring request sits in the inbound state while the
others prefill and decode, and is admitted when its event comes. A failed restore frees its destination pages and row only after
its event (until then Selene may still write them) and the request
recomputes. Prefill always runs span by span, so a prefix restored and a
prefix recomputed are the same computation and decode to the same tokens.

With a pool, every checkpoint cached is offered for export
(Store.gpu_hold) and every eviction withdrawn at the next poll; an
EXPORT_REQUESTED is answered in the poll that takes it: the checkpoint is
pinned (as a store's copy pins it) and its pages and row handed over, or
refused when no longer cached; its EXPORT_ENDED unpins it."""

import time
from dataclasses import dataclass, field
from typing import List

import selene
from kv_cache import prefix_hashes


def fresh_result():
    return dict(gpu_reused=0, host_reused=0, prefilled=0, restore_ms=0.0, checkpoints=0,
                restore_failed=0, verified=True)


@dataclass
class Request:
    id: str
    tokens: List[int]
    boundaries: List[int]            # span ends, ascending
    decode: int
    settle: bool
    expect: dict
    delay_steps: int = 0             # arrives this many model steps after the one before
    state: str = "new"               # new, inbound, prefill, decode, done
    pages: List[int] = field(default_factory=list)  # the chain this request holds
    held: list = field(default_factory=list)         # checkpoints it keeps from eviction
    position: int = 0                # tokens with K/V in pages
    parent: int = 0                  # the last checkpoint's count in this chain
    out: List[int] = field(default_factory=list)
    history: object = None
    hashes: list = None
    waiter: int = 0
    hit: object = None
    dest: List[int] = field(default_factory=list)
    row: int = -1
    joined: bool = False             # its fetch joined another request's equal fetch
    restore_t0: float = 0.0
    admitted: int = 0                # its place in the order of admission
    preempted: int = 0               # times its pages were taken back
    back_after: int = 0              # preempted: requests finished by then
    result: dict = field(default_factory=fresh_result)  # since its last admission


class Scheduler:
    def __init__(self, ranks, cache, connector, page_tokens, max_active=2, verify=True):
        self.ranks, self.cache, self.sel = ranks, cache, connector
        self.pt, self.max_active, self.verify = page_tokens, max_active, verify
        self.stores = {}        # checkpoint id -> cached Checkpoint (pinned)
        self.offers = {}        # offer id -> cached Checkpoint offered for export
        self.exports = {}       # export id -> cached Checkpoint (pinned until its end)
        self.deferred = []      # checkpoints Selene answered RETRY for (pinned)
        self.next_offer = 0.0   # with no store in flight, offers wait this long apart
        self.digests = {}       # prefix key hex -> every rank's digest at publish
        self.admitted = self.finished = 0
        self.counts = dict(gpu_hits=0, host_restores=0, restore_failures=0, recomputed=0,
                           overlapped_steps=0, published=0, stored=0, store_failures=0,
                           retry=0, wrong_pages=0, joined=0, cached_again=0, preempted=0,
                           on_disk=0, exports=0, exports_refused=0, exports_ended=0)

    # -- events ---------------------------------------------------------
    def poll(self, active):
        if self.sel is None:
            return
        self.withdraw_evicted()
        fetched, stored = [], False
        for ev in self.sel.poll():
            if ev.kind in (selene.EventKind.STORED, selene.EventKind.STORE_FAILED):
                k = self.stores.pop(ev.id)
                k.pins -= 1
                stored = True
                self.counts["stored" if ev.kind == selene.EventKind.STORED else
                            "store_failures"] += 1
            elif ev.kind == selene.EventKind.ON_DISK:  # a warm tier's file, after STORED
                self.counts["on_disk"] += 1
            elif ev.kind in (selene.EventKind.FETCHED, selene.EventKind.FETCH_FAILED):
                q = next(r for r in active if r.state == "inbound" and r.waiter == ev.id)
                fetched.append((q, ev))
            elif ev.kind == selene.EventKind.EXPORT_REQUESTED:
                self.export_requested(ev)
            elif ev.kind == selene.EventKind.EXPORT_ENDED:
                self.exports.pop(ev.id).pins -= 1  # the only release
                self.counts["exports_ended"] += 1
            else:
                raise RuntimeError("Selene stopped: %s" % ev.why)
        # a fetch's owner first: a request that joined it takes what it cached
        for q, ev in sorted(fetched, key=lambda f: f[0].joined):
            self.restored(q, ev)
        # a parent's store ended, or none is in flight (then 10 ms apart:
        # Retry also means a full disk): offer the retries again
        if self.deferred and (stored or (not self.stores and
                                         time.perf_counter() >= self.next_offer)):
            self.offer_deferred()
            self.next_offer = time.perf_counter() + 0.01

    def withdraw_evicted(self):
        """The checkpoints the cache evicted since the last poll leave the
        pool's view (before any export request is answered)."""
        evicted, self.cache.evicted = self.cache.evicted, []
        for k in evicted:
            if k.offer_id:
                del self.offers[k.offer_id]
                self.sel.gpu_evicted(k.offer_id)
                k.offer_id = 0

    def offer_for_export(self, q, k, consumed):
        """A checkpoint just cached: the pool may ask this instance for it."""
        offer = getattr(self.sel, "gpu_hold", None)
        k.offer_id = offer(q.history, consumed) if offer else 0
        if k.offer_id:
            self.offers[k.offer_id] = k

    def export_requested(self, ev):
        """Pins the checkpoint the pool asks for and hands its pages and
        row over, in this same step (nothing evicts it meanwhile: eviction
        runs on this thread too); one no longer cached is refused."""
        self.withdraw_evicted()
        k = self.offers.get(ev.checkpoint)
        if k is None or self.cache.lru.get(k.key) is not k:
            self.sel.export_refuse(ev.id, selene.ENOTFOUND)
            self.counts["exports_refused"] += 1
            return
        k.pins += 1
        if self.sel.export_pinned(ev.id, k.pages, k.row):
            self.exports[ev.id] = k
            self.counts["exports"] += 1
        else:
            k.pins -= 1  # not taken: no end event will come

    def restored(self, q, ev):
        q.result["restore_ms"] += (time.perf_counter() - q.restore_t0) * 1e3
        if q.joined:
            self.joined_restored(q, ev)
            return
        if ev.kind == selene.EventKind.FETCH_FAILED:
            # the destination is quiescent only now: free it, and recompute
            self.cache.release(q.dest)
            self.cache.free_rows.append(q.row)
            q.result["restore_failed"] += 1
            self.counts["restore_failures"] += 1
            self.counts["recomputed"] += 1
            print("  %s: restore of %d tokens failed (%s); recomputing"
                  % (q.id, q.hit.consumed, ev.why), flush=True)
            q.state = "prefill"
            return
        consumed = q.hit.consumed
        q.pages += q.dest
        key = q.hashes[consumed // self.pt - 1]
        if self.verify:
            got = self.ranks.digest(q.pages[:consumed // self.pt], q.row)
            want = self.digests.get(key.hex())
            if want is not None and got != want:
                self.counts["wrong_pages"] += 1
                q.result["verified"] = False
        k, inserted = self.cache.insert(consumed, key, q.pages[:consumed // self.pt], q.row)
        self.use(q, k)
        q.result["host_reused"] += consumed - q.position
        self.counts["host_restores"] += 1
        q.position = q.parent = consumed
        self.start_prefill_or_decode(q, q.row)
        if not inserted:  # the cache kept its own copy: this row is read and free
            self.cache.free_rows.append(q.row)

    def joined_restored(self, q, ev):
        """q's fetch joined an equal one in flight: Selene wrote the owner's
        destination, never q's (released at once). q takes the checkpoint
        the owner cached, as a GPU hit, or recomputes."""
        q.joined = False
        consumed = q.hit.consumed
        k = self.cache.lru.get(q.hashes[consumed // self.pt - 1])
        if ev.kind == selene.EventKind.FETCH_FAILED or k is None:
            if ev.kind == selene.EventKind.FETCH_FAILED:
                q.result["restore_failed"] += 1
                self.counts["restore_failures"] += 1
            self.counts["recomputed"] += 1
            q.state = "prefill"
            return
        self.use(q, k)
        self.cache.hold(k.pages)
        self.cache.release(q.pages)
        q.pages = list(k.pages)
        q.result["host_reused"] += consumed - q.position
        self.counts["host_restores"] += 1
        q.position = q.parent = consumed
        self.start_prefill_or_decode(q, k.row)

    # -- admission ------------------------------------------------------
    def admit(self, q):
        self.admitted += 1
        q.admitted = self.admitted
        q.hashes = prefix_hashes(q.tokens, self.pt)
        aligned = [b for b in q.boundaries if b % self.pt == 0]
        candidates = [q.hashes[b // self.pt - 1] for b in aligned]
        k = self.cache.find(candidates) if self.sel is not None else None
        if self.sel is not None and q.history is None:  # a preempted request keeps its own
            q.history = self.sel.history(q.tokens)
        if k is not None:
            self.use(q, k)
            self.cache.hold(k.pages)
            q.pages, q.position, q.parent = list(k.pages), k.consumed, k.consumed
            q.result["gpu_reused"] = k.consumed
            self.counts["gpu_hits"] += 1
            self.sel.touch(q.history, k.consumed)
        if q.position < len(q.tokens) and self.sel is not None and self.try_restore(q):
            return
        if q.position < len(q.tokens) and self.sel is not None and \
                self.sel.lookup_pending(q.history):
            q.state = "lookup"  # the pool may still answer: asked again next steps
            return
        if q.position == len(q.tokens):
            self.start_prefill_or_decode(q, k.row)
        else:
            q.state = "prefill"

    def try_restore(self, q) -> bool:
        hit = self.sel.lookup(q.history, q.position)
        if hit is None or not self.sel.worth_fetching(hit):
            return False
        assert q.position // self.pt + hit.page_count == hit.consumed // self.pt
        dest = self.cache.take_pages(hit.page_count)
        row = self.cache.take_row() if dest is not None else None
        if row is None:  # no room on the GPU: recompute
            if dest is not None:
                self.cache.release(dest)
            return False
        try:
            q.waiter, q.joined = self.sel.restore(hit, dest, row)
        except selene.SeleneError:  # a stale hit or a full queue: recompute
            self.cache.release(dest)
            self.cache.free_rows.append(row)
            return False
        if q.joined:  # Selene writes the owner's destination, not this one
            self.counts["joined"] += 1
            self.cache.release(dest)
            self.cache.free_rows.append(row)
            dest, row = [], -1
        q.hit, q.dest, q.row, q.state = hit, dest, row, "inbound"
        q.restore_t0 = time.perf_counter()
        return True

    def lookup_again(self, q):
        """A request held while the pool's answer may come (at most the
        grace period, sel_lookup_pending): restored when it came with a
        longer prefix, prefilled once the answer is final."""
        if self.try_restore(q):
            return
        if not self.sel.lookup_pending(q.history):
            q.state = "prefill"

    def start_prefill_or_decode(self, q, row):
        if q.position < len(q.tokens):
            q.state = "prefill"
        else:  # the checkpoint's row holds the last hidden state: no compute
            q.out = [self.ranks.token_from_row(row)]
            q.state = "decode"

    # -- model steps ----------------------------------------------------
    def grow(self, q) -> bool:
        """Takes the pages q's next step writes; False when there are none:
        every other page is held by a request, or pinned by a store that
        still copies it (such pages are never taken: _evict_one skips them)."""
        if q.state == "prefill":
            count = next(b for b in q.boundaries if b > q.position)
        elif len(q.out) < q.decode:
            count = len(q.tokens) + len(q.out)
        else:
            return True  # done: no step
        need = (count + self.pt - 1) // self.pt - len(q.pages)
        if need > 0:
            got = self.cache.take_pages(need)
            if got is None:
                return False
            q.pages += got
        return True

    def prefill_span(self, q):
        """The next span of q, whose pages grow(q) took."""
        end = next(b for b in q.boundaries if b > q.position)
        row = self.cache.take_row() if end % self.pt == 0 and self.sel is not None else None
        checkpoint = row is not None  # no row free: no checkpoint here
        row = -1 if row is None else row
        t0 = time.perf_counter()
        token = self.ranks.forward(q.tokens[q.position:end], q.position, q.pages, row)
        if self.sel is not None:
            self.sel.measured_prefill(end - q.position, time.perf_counter() - t0)
        q.result["prefilled"] += end - q.position
        q.position = end
        if checkpoint:
            self.checkpoint(q, end, row)
        if end == len(q.tokens):
            q.out = [token]
            q.state = "decode"

    def checkpoint(self, q, consumed, row):
        key = q.hashes[consumed // self.pt - 1]
        chain = q.pages[:consumed // self.pt]
        k, inserted = self.cache.insert(consumed, key, chain, row)
        self.use(q, k)
        parent, q.parent = q.parent, consumed
        if not inserted:
            # another request cached this prefix meanwhile, and published
            # it: that copy stays, and this row is not needed
            self.counts["cached_again"] += 1
            self.cache.free_rows.append(row)
            return
        if self.verify:
            self.digests[key.hex()] = self.ranks.digest(chain, row)
        self.offer_for_export(q, k, consumed)
        q.result["checkpoints"] += 1
        self.counts["published"] += 1
        self.offer(q, k, consumed, parent, 0)

    def offer(self, q, k, consumed, parent, tries):
        """Publishes checkpoint k of q; one Selene answers RETRY for (its
        parent is still being stored) stays pinned, to be offered again
        when a store ends."""
        outcome, cid = self.sel.publish(q.history, consumed, parent, k.pages, k.row)
        if outcome == selene.Outcome.QUEUED:
            k.pins += 1
            self.stores[cid] = k
        elif outcome == selene.Outcome.RETRY and tries < 20:
            k.pins += 1
            self.deferred.append((q, k, consumed, parent, tries + 1))
        self.counts["retry"] += outcome == selene.Outcome.RETRY

    def offer_deferred(self):
        deferred, self.deferred = self.deferred, []
        for q, k, consumed, parent, tries in deferred:
            k.pins -= 1
            self.offer(q, k, consumed, parent, tries)
        for q, *_ in deferred:  # a finished request's history, once no retry needs it
            if q.state == "done" and q.history is not None and \
                    not any(d[0] is q for d in self.deferred):
                q.history.close()

    def decode_step(self, q):
        """One token of q, whose page grow(q) took."""
        position = len(q.tokens) + len(q.out) - 1
        q.out.append(self.ranks.forward([q.out[-1]], position, q.pages, -1))

    @staticmethod
    def use(q, k):
        k.users += 1
        q.held.append(k)

    def finish(self, q):
        for k in q.held:
            k.users -= 1
        self.cache.release(q.pages)
        q.state = "done"
        self.finished += 1
        if q.history is not None and not any(d[0] is q for d in self.deferred):
            q.history.close()  # else once its retries are through (offer_deferred)

    def preempt(self, runnable, waiting, active):
        """No runnable request finds a page for its next step, and no store
        or restore in flight will free one: the one admitted last gives back
        its pages and its checkpoints' uses, and waits at the head of the
        queue to start again, from the GPU cache or from nothing, once
        another request has finished (back at once, it would take the
        pages again). Its checkpoints stay cached and, while stored, pinned."""
        q = max(runnable, key=lambda r: r.admitted)
        for k in q.held:
            k.users -= 1
        self.cache.release(q.pages)
        q.held, q.pages, q.out, q.position, q.parent = [], [], [], 0, 0
        q.result, q.state, q.back_after = fresh_result(), "new", self.finished
        q.preempted += 1
        self.counts["preempted"] += 1
        print("  %s: preempted, no page for any request's next step" % q.id, flush=True)
        active.remove(q)
        waiting.insert(0, q)

    # -- the loop ---------------------------------------------------------
    def check(self, requests):
        """Raises ValueError for a request the scheduler could never finish,
        before anything runs."""
        for q in requests:
            if not q.tokens:  # nothing to prefill, so no token to decode from
                raise ValueError("%s: an empty prompt (a request needs at least one token)"
                                 % q.id)
            # the last decoded token is never fed back: it has no K/V
            count = len(q.tokens) + max(q.decode, 1) - 1
            pages = (count + self.pt - 1) // self.pt
            if pages > self.cache.pages:  # it would wait for pages forever
                raise ValueError("%s: %d tokens need %d pages, but the GPU cache has %d"
                                 % (q.id, count, pages, self.cache.pages))

    def run(self, requests, on_done):
        self.check(requests)
        waiting, active = list(requests), []
        steps = arrived = 0
        while waiting or active:
            self.poll(active)
            while waiting and len(active) < self.max_active:
                q = waiting[0]
                if q.preempted:  # arrived long ago
                    if active and self.finished <= q.back_after:
                        break
                else:
                    if q.settle and (self.stores or self.deferred or active):
                        break  # a user's think time: earlier turns finish and are stored
                    if steps < arrived + q.delay_steps:
                        if active:
                            break  # not arrived yet
                        steps = arrived + q.delay_steps  # nothing runs: its steps pass idle
                    arrived = steps
                waiting.pop(0)
                active.append(q)
                self.admit(q)
            for q in [r for r in active if r.state == "lookup"]:
                self.lookup_again(q)
            runnable = [q for q in active if q.state in ("prefill", "decode")]
            inbound = any(q.state == "inbound" for q in active)
            # the first in turn whose next step finds its pages
            q = next((r for r in runnable if self.grow(r)), None)
            if q is None:
                looking = any(r.state == "lookup" for r in active)
                if runnable and not (self.stores or self.deferred or self.exports or inbound or
                                     looking):
                    self.preempt(runnable, waiting, active)  # else none ever steps again
                    continue
                # restores in flight, or stores copying the pages a step
                # needs (they are free once their events come): poll again
                time.sleep(0.0005)
                continue
            steps += 1
            if q.state == "prefill":
                self.prefill_span(q)
            elif len(q.out) < q.decode:
                self.decode_step(q)
                self.counts["overlapped_steps"] += inbound
            if q.state == "decode" and len(q.out) >= q.decode:
                self.finish(q)
                active.remove(q)
                on_done(q)
            else:  # round robin
                active.remove(q)
                active.append(q)
        while self.stores or self.deferred or self.exports:
            self.poll(active)
            time.sleep(0.001)
