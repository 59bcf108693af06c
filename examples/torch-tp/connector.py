"""The Selene-facing part of the engine: what another engine would lift.
One object on rank zero wraps the store and knows nothing of the model:

  lookup(tokens, resident)   the deepest stored prefix beyond resident (a Hit)
  worth_fetching(hit)        the fetch-or-recompute rule (seed 2.10)
  restore(hit, pages, row)   starts (or joins) a fetch; its outcome comes from poll()
  publish(...)               offers a checkpoint (Outcome); its event from poll()
  touch(tokens, consumed)    a GPU-cache hit keeps the record young on disk
  poll()                     completions, as (kind, id, error, why) events

Fetch or recompute: fetch only when the estimated transfer time is below
half the estimated prefill time of the same tokens. Both estimates start
from stated rates and follow the median of the last three measurements."""

import errno
import statistics
import time
from collections import deque

import selene


class Rate:
    """Units per second: a stated start, then the median of the last 3."""

    def __init__(self, initial: float):
        self.initial, self.recent = initial, deque(maxlen=3)

    def measure(self, units: float, seconds: float):
        if units > 0 and seconds > 0:
            self.recent.append(units / seconds)

    @property
    def value(self) -> float:
        return statistics.median(self.recent) if self.recent else self.initial


class SeleneConnector:
    def __init__(self, store: selene.Store, page_tokens: int, unit_bytes_per_page: int,
                 row_bytes: int, fetch_bytes_per_s: float, prefill_tokens_per_s: float,
                 rule: str = "auto"):
        self.store, self.page_tokens = store, page_tokens
        self.page_bytes, self.row_bytes = unit_bytes_per_page, row_bytes
        self.fetch_rate, self.prefill_rate = Rate(fetch_bytes_per_s), Rate(prefill_tokens_per_s)
        self.rule = rule                     # auto, or always fetch / recompute (tests)
        self.gpu_exports = store is not None and store.config.pool is not None
        self.next_id = 0
        self.fetches = {}                    # waiter -> (bytes, submit time)
        self.decisions = []                  # (tokens, estimated fetch s, prefill s, fetched)

    def _id(self):
        self.next_id += 1
        return self.next_id

    def history(self, tokens):
        return self.store.history(tokens)

    def lookup(self, history, resident: int):
        hit = self.store.lookup(history, resident)
        return hit if hit is not None and hit.consumed > resident else None

    def lookup_pending(self, history) -> bool:
        """Whether the pool may still answer history's lookup (within its
        grace period): an engine holds the request and looks up again."""
        return self.store.lookup_pending(history)

    def estimate(self, hit):
        """(transfer s, prefill s) of restoring hit against recomputing it,
        per rank (ranks move and compute their shares at once)."""
        restore_bytes = hit.page_count * self.page_bytes + self.row_bytes
        tokens = hit.consumed - hit.resident
        return restore_bytes / self.fetch_rate.value, tokens / self.prefill_rate.value

    def worth_fetching(self, hit) -> bool:
        transfer_s, prefill_s = self.estimate(hit)
        fetch = transfer_s < 0.5 * prefill_s if self.rule == "auto" else self.rule == "fetch"
        self.decisions.append((hit.consumed - hit.resident, transfer_s, prefill_s, fetch))
        return fetch

    def restore(self, hit, pages, row):
        """Starts restoring hit into pages (hit.page_count ids) and row.
        Returns (waiter, joined): the id its event will carry, and whether
        it joined an equal fetch in flight. Not joined, the destination
        belongs to Selene until that event; joined, Selene never writes it
        (the owner's destination gets the bytes) and it is the caller's
        again at once. Raises SeleneError (ENOTFOUND: the hit went stale;
        EQUEUEFULL: try later)."""
        waiter = self._id()
        joined = self.store.fetch(hit, pages, row, waiter)
        self.fetches[waiter] = (0 if joined else
                                hit.page_count * self.page_bytes + self.row_bytes,
                                time.perf_counter())
        return waiter, joined

    def publish(self, history, consumed, parent_consumed, pages, row):
        """Offers a checkpoint; returns (outcome, id): keep its pages pinned
        until the event for id when the outcome is QUEUED."""
        checkpoint = self._id()
        return self.store.publish(checkpoint, history, consumed, parent_consumed,
                                  pages, row), checkpoint

    # GPU checkpoint exports through the pool (Store.gpu_hold on): with a
    # pool, the scheduler offers what its GPU cache holds, answers each
    # EXPORT_REQUESTED by pinning the checkpoint, and unpins at EXPORT_ENDED.

    def gpu_hold(self, history, consumed) -> int:
        """Offers a cached checkpoint for export; its id, or 0 when the
        store takes no offer (no pool attached, or 4096 offered)."""
        if not self.gpu_exports:
            return 0
        offer = self._id()
        try:
            self.store.gpu_hold(offer, history, consumed)
        except selene.SeleneError as e:
            if e.code not in (-errno.ENOTSUP, selene.EQUEUEFULL):
                raise
            self.gpu_exports = e.code != -errno.ENOTSUP  # no pool: never ask again
            return 0
        return offer

    def gpu_evicted(self, offer: int):
        try:
            self.store.gpu_evicted(offer)
        except selene.SeleneError as e:
            if e.code != selene.ENOTFOUND:
                raise

    def export_pinned(self, export_id, pages, row) -> bool:
        """True: the store took the export (keep the pin until its
        EXPORT_ENDED); False: it is over (unpin now)."""
        try:
            self.store.export_pinned(export_id, pages, row)
            return True
        except selene.SeleneError:
            return False

    def export_refuse(self, export_id, reason):
        try:
            self.store.export_refuse(export_id, reason)
        except selene.SeleneError as e:
            if e.code != selene.ENOTFOUND:  # forgotten meanwhile: nothing to answer
                raise

    def touch(self, history, consumed):
        try:
            self.store.touch(history, consumed)
        except selene.SeleneError as e:
            if e.code != selene.ENOTFOUND:  # never stored or evicted: nothing to keep
                raise

    def measured_prefill(self, tokens, seconds):
        self.prefill_rate.measure(tokens, seconds)

    def poll(self):
        """Events since the last poll; a fetch's rate is measured here."""
        events = self.store.poll()
        for ev in events:
            if ev.kind in (selene.EventKind.FETCHED, selene.EventKind.FETCH_FAILED):
                moved, t0 = self.fetches.pop(ev.id, (0, 0.0))
                if ev.kind == selene.EventKind.FETCHED:
                    self.fetch_rate.measure(moved, time.perf_counter() - t0)
        return events
