"""The engine's parts alone (pytest, CPU, one process): the fetch-or-recompute
rule and its rates, the prefix cache's references and LRU eviction, the
paged K/V layout, and that a prefix computed in pieces equals one computed
whole (what makes restored and recomputed requests decode alike)."""

import os
import sys
import threading
import zlib
from types import SimpleNamespace

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

from connector import Rate, SeleneConnector  # noqa: E402
from kv_cache import PagedKV, PrefixCache, prefix_hashes  # noqa: E402
from model import SHAPES, TensorParallelLlama  # noqa: E402
from scheduler import Request, Scheduler  # noqa: E402

import selene  # noqa: E402


class FakeRanks:
    """The model steps without a model: a position's K/V is its token and
    position, and a step's token is a digest of every K/V the step reads,
    so pages another request overwrote give other tokens."""

    def __init__(self, pages, page_tokens, rows):
        self.pt = page_tokens
        self.kv = [[None] * page_tokens for _ in range(pages)]
        self.rows = [None] * rows

    def forward(self, tokens, start, pages, row):
        for i, t in enumerate(tokens):
            pos = start + i
            self.kv[pages[pos // self.pt]][pos % self.pt] = (t, pos)
        end = start + len(tokens)
        read = [self.kv[pages[pos // self.pt]][pos % self.pt] for pos in range(end)]
        token = zlib.crc32(repr(read).encode()) % 509
        if row >= 0:
            self.rows[row] = token
        return token

    def token_from_row(self, row):
        return self.rows[row]


class FakeConnector:
    """Selene as the scheduler sees it, with no restores: a publish is
    queued, and its store ends store_polls polls later; a store counts as
    clobbered when its pages changed while it copied them."""

    def __init__(self, ranks, store_polls):
        self.ranks, self.store_polls = ranks, store_polls
        self.copying, self.next_id, self.clobbered, self.stored = [], 0, 0, 0

    def history(self, tokens):
        return SimpleNamespace(close=lambda: None)

    def lookup(self, history, resident):
        return None

    def lookup_pending(self, history):
        return False  # no pool

    def worth_fetching(self, hit):
        return False  # never reached: lookup finds nothing

    def touch(self, history, consumed):
        pass  # a GPU hit on a checkpoint of this run (a preempted request's own)

    def measured_prefill(self, tokens, seconds):
        pass

    def pages(self, ids):
        return [list(self.ranks.kv[p]) for p in ids]

    def publish(self, history, consumed, parent, pages, row):
        self.next_id += 1
        self.copying.append([self.store_polls, self.next_id, list(pages), self.pages(pages)])
        return selene.Outcome.QUEUED, self.next_id

    def poll(self):
        events = []
        for store in list(self.copying):
            store[0] -= 1
            if store[0] == 0:
                self.copying.remove(store)
                self.clobbered += self.pages(store[2]) != store[3]
                self.stored += 1
                events.append(SimpleNamespace(kind=selene.EventKind.STORED, id=store[1]))
        return events


def request(name, count, boundaries=None, decode=4, seed=0, **kw):
    tokens = [(seed * 7919 + i * 31) % 509 for i in range(count)]
    return Request(name, tokens, boundaries or [count], decode, False, {}, **kw)


def run_requests(sched, requests, seconds=20):
    """Runs the scheduler in a thread: its finished requests, or the error
    it raised; a run still going after seconds is a hang."""
    done, failed = [], []

    def body():
        try:
            sched.run(requests, done.append)
        except Exception as e:  # noqa: BLE001 - handed to the test
            failed.append(e)

    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "the scheduler hangs"
    if failed:
        raise failed[0]
    return done


def scheduler(pages=8, rows=4, page_tokens=16, sel=None, max_active=2):
    return Scheduler(FakeRanks(pages, page_tokens, rows), PrefixCache(pages, rows, page_tokens),
                     sel, page_tokens, max_active, verify=False)


def test_rate_follows_the_median_of_the_last_three():
    r = Rate(100.0)
    assert r.value == 100.0
    r.measure(10, 1)
    assert r.value == 10
    for units in (30, 20, 1000):
        r.measure(units, 1)
    assert r.value == 30   # 30, 20, 1000: the first measurement aged out
    r.measure(5, 0)        # a zero-length measurement is ignored
    assert r.value == 30


def test_rule_fetches_only_below_half_the_prefill_time():
    page_bytes = 1000
    c = SeleneConnector(None, 16, page_bytes, 0, fetch_bytes_per_s=1e6,
                        prefill_tokens_per_s=1e3)
    hit = SimpleNamespace(page_count=10, consumed=160, resident=0)
    # transfer 10 ms, prefill 160 ms: fetch
    assert c.worth_fetching(hit)
    c.fetch_rate.measure(page_bytes * 10, 0.1)  # the medium is slower than stated
    # transfer 100 ms against 160 ms: not below half, recompute
    assert not c.worth_fetching(hit)
    assert [d[3] for d in c.decisions] == [True, False]
    assert SeleneConnector(None, 16, 1000, 0, 1e6, 1e3, rule="recompute").worth_fetching(hit) \
        is False


def test_prefix_cache_refcounts_and_lru():
    cache = PrefixCache(pages=4, rows=2, page_tokens=16)
    a = cache.take_pages(2)
    k, inserted = cache.insert(32, b"a", a, cache.take_row())
    assert inserted
    cache.release(a)                     # the request ends; the checkpoint keeps them
    assert cache.refs[a[0]] == 1 and len(cache.free_pages) == 2
    k.pins = 1                           # being stored: not evictable
    assert cache.take_pages(3) is None
    k.pins = 0
    got = cache.take_pages(3)            # evicts it
    assert got is not None and cache.evictions == 1 and b"a" not in cache.lru
    assert cache.find([b"a"]) is None


def test_prefix_cache_keeps_a_checkpoint_cached_again():
    """The same prefix cached twice: the first copy stays, because a store
    may be copying it (pinned) or a request reading it; the second copy's
    pages and row stay the caller's."""
    cache = PrefixCache(pages=4, rows=2, page_tokens=16)
    first, row = cache.take_pages(2), cache.take_row()
    k, _ = cache.insert(32, b"a", first, row)
    k.pins = 1
    second, row2 = cache.take_pages(2), cache.take_row()
    again, inserted = cache.insert(32, b"a", second, row2)
    assert again is k and not inserted
    assert cache.refs[first[0]] == 2 and cache.refs[second[0]] == 1  # the caller's only
    assert row not in cache.free_rows and cache.take_row() is None


def test_prefix_hashes_chain_by_page():
    a, b = prefix_hashes(list(range(40)), 16), prefix_hashes(list(range(32)) + [9] * 8, 16)
    assert len(a) == 2 and a == b
    assert prefix_hashes([1] + list(range(1, 32)), 16)[1] != a[1]


def test_prefix_in_pieces_equals_prefix_whole():
    model = TensorParallelLlama(SHAPES["tiny"], 0, 1, "cpu", torch.float32)
    kv = PagedKV(model, 16, 16, 2)
    tokens = torch.randint(0, 512, (80,), generator=torch.Generator().manual_seed(3)).tolist()
    whole = model.forward(tokens[:48], 0, [0, 1, 2], kv)
    model.forward(tokens[:32], 0, [3, 4], kv)
    pieces = model.forward(tokens[32:48], 32, [3, 4, 5], kv)
    assert torch.allclose(whole, pieces, atol=1e-5)
    assert torch.equal(kv.k[0][[0, 1]], kv.k[0][[3, 4]])  # the same pages, bitwise
    assert kv.digest([0, 1], None) == kv.digest([3, 4], None)


def test_scheduler_refuses_an_empty_prompt():
    """A request of no tokens is refused before anything runs."""
    with pytest.raises(ValueError, match="empty-1: an empty prompt"):
        run_requests(scheduler(), [request("a", 32), request("empty-1", 0)])


def test_scheduler_refuses_a_request_larger_than_the_gpu_cache():
    """A prompt, with the tokens it decodes, that needs more pages than
    the whole GPU cache has is refused before anything runs; one that
    fills the cache exactly runs."""
    with pytest.raises(ValueError, match="long: 65 tokens need 5 pages, but the GPU cache has 4"):
        run_requests(scheduler(pages=4), [request("fits", 32), request("long", 64, decode=2)])
    done = run_requests(scheduler(pages=4), [request("exact", 63, decode=2)])
    assert [q.id for q in done] == ["exact"]


def test_scheduler_starts_a_delayed_request_when_nothing_else_runs():
    """With no request active, the steps a delayed request waits for pass
    idle: it starts (before, the loop waited for steps no one ran)."""
    done = run_requests(scheduler(), [request("first", 32, decode=2),
                                      request("late", 32, decode=2, seed=1, delay_steps=50)],
                        seconds=5)
    assert [q.id for q in done] == ["first", "late"]
    done = run_requests(scheduler(), [request("alone", 32, decode=2, delay_steps=3)], seconds=5)
    assert [q.id for q in done] == ["alone"]


def test_scheduler_waits_for_pages_its_stores_copy():
    """Every page is held by checkpoints whose stores still copy them: the
    next request waits for those stores and then evicts (before, the run
    ended with 'no room in the GPU cache'), and no page changes while it
    is copied."""
    sched = scheduler(pages=4, max_active=1)
    sched.sel = FakeConnector(sched.ranks, store_polls=50)
    done = run_requests(sched, [request("first", 64, [32, 64], decode=1),
                                request("second", 32, decode=2, seed=1)])
    assert [q.id for q in done] == ["first", "second"]
    assert sched.sel.stored == 3 and sched.sel.clobbered == 0
    assert sched.cache.evictions >= 1


class PendingConnector(FakeConnector):
    """A pool whose answer may come for the first `pending` asks of each
    history, then is final and finds nothing."""

    def __init__(self, ranks, store_polls, pending):
        super().__init__(ranks, store_polls)
        self.pending, self.asked = pending, {}

    def lookup(self, history, resident):
        self.asked[id(history)] = self.asked.get(id(history), 0) + 1
        return None

    def lookup_pending(self, history):
        return self.asked.get(id(history), 0) <= self.pending


def test_scheduler_holds_a_request_while_the_pool_may_answer():
    """A request whose lookup may still be answered by the pool waits in the
    lookup state, asked again each step, while another request runs; once
    the answer is final it prefills (before, it prefilled at once and a
    pool's answer was never asked for again)."""
    sched = scheduler(max_active=2)
    sched.sel = PendingConnector(sched.ranks, store_polls=1, pending=5)
    done = run_requests(sched, [request("first", 32, decode=4),
                                request("second", 32, decode=2, seed=1)], seconds=5)
    assert sorted(q.id for q in done) == ["first", "second"]
    assert sorted(sched.sel.asked.values()) == [6, 6]  # asked until pending was false
    assert all(q.result["prefilled"] == 32 for q in done)


def test_scheduler_preempts_when_no_request_can_grow():
    """Two requests hold every page and each needs one more: the one
    admitted last is preempted (its pages freed, requeued) and recomputed
    once the other finished (before, the run ended with 'no room in the
    GPU cache'); both decode the tokens they decode alone."""
    def make():
        return [request("a", 32, [16, 32], decode=4), request("b", 32, [16, 32], decode=4, seed=1)]

    alone = {q.id: q.out for q in run_requests(scheduler(pages=16), make())}
    sched = scheduler(pages=4)
    done = run_requests(sched, make())
    assert [q.id for q in done] == ["a", "b"]
    assert {q.id: q.out for q in done} == alone
    assert sched.counts["preempted"] == 1
    assert done[1].result["prefilled"] == 32 and len(sched.cache.free_pages) == 4
    # with checkpoints stored meanwhile: the stores end first, none is clobbered
    sched = scheduler(pages=4)
    sched.sel = FakeConnector(sched.ranks, store_polls=20)
    done = run_requests(sched, make())
    assert {q.id: q.out for q in done} == alone
    assert sched.counts["preempted"] == 1 and sched.sel.clobbered == 0


def test_engine_warm_size_reads_like_the_program():
    """engine.py --warm takes a size as `selene run --warm` does (binary
    K, M, G, T, optionally spelled KiB...) and refuses anything else."""
    import argparse
    import engine
    assert engine.parse_args(["--trace", "t", "--warm", "64M"]).warm == 64 << 20
    assert engine.parse_args(["--trace", "t"]).warm == 0
    args = engine.parse_args(["--trace", "t", "--warm-policy", "write-behind", "--max-age-ms", "5"])
    assert (args.warm_policy, args.max_age_ms) == ("write-behind", 5)
    for text, value in (("0", 0), ("4096", 4096), ("2k", 2048), ("3GiB", 3 << 30)):
        assert engine.size(text) == value
    for text in ("", "-1", "1.5G", "1iB", "1Q", "64 M", "\u0663"):
        with pytest.raises(argparse.ArgumentTypeError, match="not a size"):
            engine.size(text)


class ExportConnector(FakeConnector):
    """A pool that asks for the first checkpoint offered, once, after
    `ask_after` polls, and ends the export `end_after` polls later; an
    export counts as clobbered when its pages changed while pinned."""

    def __init__(self, ranks, store_polls, ask_after, end_after):
        super().__init__(ranks, store_polls)
        self.ask_after, self.end_after = ask_after, end_after
        self.offered, self.withdrawn, self.polls = {}, [], 0
        self.pinned, self.asked, self.ended = None, False, 0

    def gpu_hold(self, history, consumed):
        self.next_id += 1
        self.offered[self.next_id] = consumed
        return self.next_id

    def gpu_evicted(self, offer):
        assert offer in self.offered and offer not in self.withdrawn
        self.withdrawn.append(offer)

    def export_pinned(self, export_id, pages, row):
        assert export_id == 999 and self.pinned is None
        self.pinned = [self.end_after, list(pages), self.pages(pages)]
        return True

    def export_refuse(self, export_id, reason):
        raise AssertionError("refused an export of a checkpoint it holds")

    def poll(self):
        events = super().poll()
        self.polls += 1
        if not self.asked and self.offered and self.polls >= self.ask_after:
            self.asked = True
            first = min(self.offered)
            events.append(SimpleNamespace(kind=selene.EventKind.EXPORT_REQUESTED, id=999,
                                          checkpoint=first, tokens=self.offered[first]))
        if self.pinned is not None:
            self.pinned[0] -= 1
            if self.pinned[0] == 0:
                self.clobbered += self.pages(self.pinned[1]) != self.pinned[2]
                self.pinned, self.ended = None, self.ended + 1
                events.append(SimpleNamespace(kind=selene.EventKind.EXPORT_ENDED, id=999,
                                              checkpoint=0, error=0))
        return events


def test_scheduler_answers_an_export_and_unpins_at_its_end():
    """Every cached checkpoint is offered; the pool's request is answered
    with the checkpoint's pages and row, pinned: no page changes until its
    end, which unpins it (the run finishes, so it was released), and the
    checkpoints evicted meanwhile are withdrawn."""
    sched = scheduler(pages=4, max_active=1)
    sched.sel = ExportConnector(sched.ranks, store_polls=1, ask_after=3, end_after=40)
    done = run_requests(sched, [request("first", 64, [32, 64], decode=1),
                                request("second", 48, [32, 48], decode=2, seed=1)])
    assert [q.id for q in done] == ["first", "second"]
    assert sched.sel.asked and sched.sel.ended == 1 and sched.sel.clobbered == 0
    assert sched.counts["exports"] == 1 and sched.counts["exports_ended"] == 1
    assert not sched.exports and all(k.pins == 0 for k in sched.cache.lru.values())
    assert sched.cache.evictions >= 1 and sched.sel.withdrawn
