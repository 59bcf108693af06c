"""Time to first token: a prompt recomputed against the same prompt restored
from Selene, in one run, for each record directory given (the host's disk,
/dev/shm) and from the warm tier (a store with a warm tier in front of the
first directory: the prompt stored, then restored while warm, reading no
file), with the fetch-or-recompute rule's choice beside each. One rank.

    python3 bench_ttft.py --device cuda --model 8b --dtype bfloat16 \\
        --lengths 4096,16384,32768 --dirs /var/tmp/ttft,/dev/shm/ttft

Recomputed: the whole prompt prefilled in one chunk, then the LM head.
Restored: lookup, fetch of every page and the row into other page ids, wait
for the event, then the LM head on the restored row. Both end in the same
token, and the restored pages are checked equal to the computed ones; a
warm row's restore is checked served from warm slots (Stats.warm_hits).
--warm sizes the tier (default: room for every prompt's record)."""

import argparse
import os
import shutil
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import selene  # noqa: E402
from connector import SeleneConnector  # noqa: E402
from engine import size  # noqa: E402
from kv_cache import PagedKV  # noqa: E402
from model import SHAPES, TensorParallelLlama  # noqa: E402


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def wait_event(store, timeout_s=600):
    """The next event of store (a Store or a connector, which measures rates)."""
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline:
        events = store.poll()
        if events:
            return events[0]
        time.sleep(0.0002)
    raise TimeoutError("no event in %d s" % timeout_s)


def drop_cached(directory):
    """Writes back and drops the page cache's copy of every file under
    directory, so that a restore from a disk reads the disk (where Selene
    could not use O_DIRECT); a no-op on tmpfs, where memory is the medium."""
    for root, _, files in os.walk(directory):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def warm_bytes_for(records, plane_count, page_bytes, row_bytes):
    """A warm tier with room for records (their page counts) and their
    rows, none evicted: a slot holds one page of every plane (rounded up
    to 4 KiB, and one more block for what a slot may carry beside), a row
    takes slots of its own, and a few spare; rounded up to whole groups of
    64 slots, as the tier rounds its slots down to them (shard/warm.h)."""
    slot = -(-plane_count * page_bytes // 4096) * 4096 + 4096
    slots = sum(records) + len(records) * (-(-row_bytes // slot) + 1) + 4
    return -(-slots // 64) * 64 * slot


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="8b", choices=sorted(SHAPES))
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--device", default="cuda")
    p.add_argument("--lengths", default="4096,16384,32768")
    p.add_argument("--dirs", default="/var/tmp/selene-ttft,/dev/shm/selene-ttft")
    p.add_argument("--page-tokens", type=int, default=64)
    p.add_argument("--warm", type=size, default=None, metavar="SIZE",
                   help="the warm rows' tier (default: room for every prompt's record; "
                        "0: no warm rows)")
    args = p.parse_args()
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    lengths = [int(x) for x in args.lengths.split(",")]
    shape = SHAPES[args.model]
    t0 = time.perf_counter()
    model = TensorParallelLlama(shape, 0, 1, device, dtype)
    pages = 2 * (max(lengths) // args.page_tokens) + 8
    kv = PagedKV(model, pages, args.page_tokens, 4)
    sync(device)
    print("model %s (%d layers, hidden %d, %d/%d heads) %s on %s, built in %.1f s; "
          "KV cache %.1f GiB" % (args.model, shape.layers, shape.hidden, shape.heads,
                                 shape.kv_heads, args.dtype, device, time.perf_counter() - t0,
                                 2 * shape.layers * kv.k[0].numel() * kv.k[0].element_size() / 2**30),
          flush=True)
    esize = kv.k[0].element_size()
    page_bytes = args.page_tokens * model.local_kv_heads * shape.head_dim * esize
    rows = []
    dirs = args.dirs.split(",")
    warm_bytes = args.warm if args.warm is not None else warm_bytes_for(
        [n // args.page_tokens for n in [lengths[0]] + lengths], 2 * shape.layers, page_bytes,
        shape.hidden * esize)
    # each directory alone, then a warm tier in front of the first
    targets = [(d, d, 0) for d in dirs]
    if warm_bytes:
        targets.append(("warm (%s)" % dirs[0], dirs[0], warm_bytes))
    for label, directory, warm_bytes in targets:
        shutil.rmtree(directory, ignore_errors=True)
        os.makedirs(directory)
        config = selene.StoreConfig(
            dir=directory, page_tokens=args.page_tokens, model_name="bench-ttft/" + args.model,
            page_planes=[selene.Plane(n, page_bytes, t) for n, t in kv.planes()],
            row_plane=selene.Plane("hidden", shape.hidden * esize, kv.rows),
            page_count=pages, row_count=4,
            device="cuda" if device.type == "cuda" else "host",
            device_ordinal=device.index or 0, disk_limit_bytes=24 << 30, durable=False,
            warm_bytes=warm_bytes)
        store = selene.Store(config)
        connector = SeleneConnector(store, args.page_tokens, page_bytes * 2 * shape.layers,
                                    shape.hidden * esize, 1.6e9,
                                    2e4 if device.type == "cuda" else 2e3)
        # the first length once untimed: the kernels warm up, and the rule's
        # rates start from this device's and this directory's measurements
        for i, n in enumerate([lengths[0]] + lengths):
            warmup = i == 0
            g = torch.Generator().manual_seed(n + (1 << 20 if warmup else 0))
            tokens = torch.randint(0, shape.vocab, (n,), generator=g).tolist()
            chain = list(range(n // args.page_tokens))
            dest = list(range(pages // 2, pages // 2 + len(chain)))
            sync(device)
            t = time.perf_counter()
            hidden = model.forward(tokens, 0, chain, kv)
            token = model.next_token(hidden)
            sync(device)
            recompute_s = time.perf_counter() - t
            connector.measured_prefill(n, recompute_s)
            kv.rows[0] = hidden
            sync(device)  # Selene copies on its own stream: the row is written first
            history = store.history(tokens)
            t = time.perf_counter()
            outcome, _ = connector.publish(history, n, 0, chain, 0)
            ev = wait_event(store)
            store_s = time.perf_counter() - t
            assert outcome == selene.Outcome.QUEUED and ev.kind == selene.EventKind.STORED, ev
            if warm_bytes:  # restorable once warm: its file is written after (untimed)
                ev = wait_event(store)
                assert ev.kind == selene.EventKind.ON_DISK, ev
            drop_cached(directory)
            for plane in kv.k + kv.v:  # the GPU copy is gone: junk where it restores
                plane[dest].fill_(7)
            kv.rows[1].fill_(7)
            sync(device)
            warm_hits = store.stats().warm_hits
            t = time.perf_counter()
            hit = connector.lookup(history, 0)
            fetch = connector.worth_fetching(hit)
            transfer_est, prefill_est = connector.estimate(hit)
            connector.restore(hit, dest, 1)
            ev = wait_event(connector)
            assert ev.kind == selene.EventKind.FETCHED, ev
            restored_token = model.next_token(kv.rows[1])
            sync(device)
            restore_s = time.perf_counter() - t
            equal = restored_token == token and all(
                torch.equal(p[dest], p[chain]) for p in kv.k + kv.v)
            # a warm row's restore is served from warm slots, no other row's
            served = store.stats().warm_hits - warm_hits == (1 if warm_bytes else 0)
            record_gib = (len(chain) * page_bytes * 2 * shape.layers) / 2**30
            history.close()
            if warmup:
                continue
            rows.append((label, n, record_gib, recompute_s, restore_s, store_s,
                         transfer_est, prefill_est, fetch, equal, served))
            print("%-24s %6d tokens %6.2f GiB: recompute %8.1f ms, restore %8.1f ms "
                  "(%.2f GB/s), store %8.1f ms; rule: transfer %.0f ms vs prefill %.0f ms -> %s "
                  "(%s); same token and pages: %s%s" % (
                      label, n, record_gib, recompute_s * 1e3, restore_s * 1e3,
                      record_gib * 2**30 / restore_s / 1e9, store_s * 1e3, transfer_est * 1e3,
                      prefill_est * 1e3, "fetch" if fetch else "recompute",
                      "right" if fetch == (restore_s < 0.5 * recompute_s) else "WRONG", equal,
                      "" if served else "; NOT SERVED AS EXPECTED (warm: %s)" % bool(warm_bytes)),
                  flush=True)
        store.close()
        shutil.rmtree(directory, ignore_errors=True)
    print("\n| prompt tokens | record | dir | recomputed TTFT | restored TTFT | rule chose |")
    print("| ---: | ---: | --- | ---: | ---: | --- |")
    for d, n, gib, rc, rs, _, te, pe, fetch, eq, served in rows:
        print("| %d | %.2f GiB | %s | %.0f ms | %.0f ms | %s (est. %.0f vs %.0f ms)%s |" % (
            n, gib, d, rc * 1e3, rs * 1e3, "fetch" if fetch else "recompute",
            te * 1e3, pe * 1e3, ("" if eq else " NOT EQUAL") +
            ("" if served else " NOT SERVED AS EXPECTED")))
    return 0 if all(r[-2] and r[-1] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
