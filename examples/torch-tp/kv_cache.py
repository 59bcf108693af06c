"""One rank's paged K/V cache, and rank zero's prefix cache over it.

PagedKV: per layer a K plane and a V plane, each [pages, page_tokens,
local_kv_heads, head_dim] (each one Selene page plane), and the row plane
[rows, hidden] holding each checkpoint's last hidden state. Every rank has
one; page and row ids come from rank zero.

PrefixCache (rank zero only): which page chains and rows hold which token
prefixes (checkpoints), with reference-counted pages and LRU eviction of
checkpoints that no request uses and no store copies (pinned)."""

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import List, Optional

import torch


class PagedKV:
    def __init__(self, model, pages: int, page_tokens: int, rows: int):
        s = model.shape
        dims = (pages, page_tokens, model.local_kv_heads, s.head_dim)
        self.page_tokens = page_tokens
        self.k = [torch.zeros(dims, device=model.device, dtype=model.dtype) for _ in range(s.layers)]
        self.v = [torch.zeros(dims, device=model.device, dtype=model.dtype) for _ in range(s.layers)]
        self.rows = torch.zeros((rows, s.hidden), device=model.device, dtype=model.dtype)

    def planes(self):
        """(name, tensor) of every page plane, for Selene's config."""
        for li in range(len(self.k)):
            yield "layer%03d.k" % li, self.k[li]
            yield "layer%03d.v" % li, self.v[li]

    def write(self, layer, pages, start, k, v):
        """Writes K/V of positions start.. into the chain's pages."""
        pt, t = self.page_tokens, k.shape[0]
        at = 0
        while at < t:
            pos = start + at
            page, offset = pages[pos // pt], pos % pt
            n = min(t - at, pt - offset)
            self.k[layer][page, offset:offset + n] = k[at:at + n]
            self.v[layer][page, offset:offset + n] = v[at:at + n]
            at += n

    def page_ids(self, pages, count):
        """The ids of the pages holding positions 0..count-1, on the device:
        made once per forward and read by every layer (an upload per layer
        would put one synchronous copy a layer on the link)."""
        return torch.as_tensor(pages[:(count + self.page_tokens - 1) // self.page_tokens],
                               device=self.rows.device)

    def read(self, layer, ids, count):
        """K and V of positions 0..count-1, [count, kv_heads, head_dim], from
        the pages page_ids gave."""
        k = self.k[layer][ids].flatten(0, 1)[:count]
        v = self.v[layer][ids].flatten(0, 1)[:count]
        return k, v

    def digest(self, pages, row: Optional[int]) -> str:
        """BLAKE2b of the chain's pages in every plane (and the row): what
        proves a restore bitwise equal to what was stored."""
        h = hashlib.blake2b(digest_size=16)
        ids = torch.as_tensor(list(pages), device=self.rows.device, dtype=torch.long)
        for plane in self.k + self.v:
            h.update(plane[ids].contiguous().view(torch.uint8).cpu().numpy().tobytes())
        if row is not None:
            h.update(self.rows[row].contiguous().view(torch.uint8).cpu().numpy().tobytes())
        return h.hexdigest()


def prefix_hashes(tokens, page_tokens) -> List[bytes]:
    """[i]: a digest of tokens[:(i + 1) * page_tokens] (chained per page)."""
    out, h = [], b""
    for i in range(len(tokens) // page_tokens):
        chunk = bytes(memoryview(torch.as_tensor(
            tokens[i * page_tokens:(i + 1) * page_tokens], dtype=torch.int32).numpy()))
        h = hashlib.blake2b(h + chunk, digest_size=16).digest()
        out.append(h)
    return out


@dataclass
class Checkpoint:
    consumed: int
    key: bytes
    pages: List[int]         # the chain from the root
    row: int
    users: int = 0           # requests reading it now
    pins: int = 0            # store copies and exports in flight
    store_id: int = 0
    offer_id: int = 0        # offered to the pool for export (0: not)


@dataclass
class PrefixCache:
    pages: int
    rows: int
    page_tokens: int
    refs: List[int] = field(default_factory=list)
    free_pages: List[int] = field(default_factory=list)
    free_rows: List[int] = field(default_factory=list)
    lru: "OrderedDict[bytes, Checkpoint]" = field(default_factory=OrderedDict)
    evictions: int = 0
    evicted: List[Checkpoint] = field(default_factory=list)  # since the owner last took them

    def __post_init__(self):
        self.refs = [0] * self.pages
        self.free_pages = list(range(self.pages - 1, -1, -1))
        self.free_rows = list(range(self.rows - 1, -1, -1))

    def find(self, hashes: List[bytes]) -> Optional[Checkpoint]:
        """The deepest cached checkpoint on this prompt's page boundaries;
        it becomes the most recently used."""
        for key in reversed(hashes):
            k = self.lru.get(key)
            if k is not None:
                self.lru.move_to_end(key)
                return k
        return None

    def _evict_one(self) -> bool:
        for key, k in self.lru.items():
            if k.users == 0 and k.pins == 0:
                del self.lru[key]
                self.release(k.pages)
                self.free_rows.append(k.row)
                self.evictions += 1
                self.evicted.append(k)  # its offer for export is withdrawn
                return True
        return False

    def take_pages(self, n) -> Optional[List[int]]:
        """n fresh pages (one reference each), evicting LRU checkpoints."""
        while len(self.free_pages) < n:
            if not self._evict_one():
                return None
        got = [self.free_pages.pop() for _ in range(n)]
        for p in got:
            self.refs[p] = 1
        return got

    def take_row(self) -> Optional[int]:
        while not self.free_rows:
            if not self._evict_one():
                return None
        return self.free_rows.pop()

    def hold(self, pages):
        for p in pages:
            self.refs[p] += 1

    def release(self, pages):
        for p in pages:
            self.refs[p] -= 1
            assert self.refs[p] >= 0
            if self.refs[p] == 0:
                self.free_pages.append(p)

    def insert(self, consumed, key, pages, row):
        """Caches a checkpoint, which holds its own reference on every page;
        returns (checkpoint, True). When key is cached already (another
        request computed or restored the same prefix meanwhile), that one
        stays, unchanged, and is returned with False: it may be read by a
        request or copied by a store right now, so its pages and row are
        never freed under it; the caller's pages and row are not taken."""
        old = self.lru.get(key)
        if old is not None:
            self.lru.move_to_end(key)
            return old, False
        self.hold(pages)
        k = Checkpoint(consumed, key, list(pages), row)
        self.lru[key] = k
        return k, True
