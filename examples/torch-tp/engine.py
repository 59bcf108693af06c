"""The reference tensor-parallel engine: one process per rank under mpirun.
Rank zero opens the Selene store and runs the scheduler on a trace (the
JSON-lines format of `selene run`, launch/worker/trace.h, plus two keys it skips:
"decode", tokens to decode, and "delay_steps", model steps after the request
before it until this one arrives, steps that pass idle when no request is
active; span tokens are drawn from the span's seed by torch's generator);
every other rank is a
Selene peer and runs the model steps rank zero broadcasts.

    mpirun -np 2 python3 engine.py --trace traces/cpu-1.jsonl --dir /tmp/tp/rank%r

Prints a line per request and the counts of each kind; --results writes a
JSON line per request (its tokens included) and a summary line. Exits 1 when
an expectation of the trace was missed or a restore was not bitwise right."""

import argparse
import json
import os
import re
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import selene  # noqa: E402
from connector import SeleneConnector  # noqa: E402
from kv_cache import PagedKV, PrefixCache  # noqa: E402
from model import SHAPES, TensorParallelLlama  # noqa: E402
from scheduler import Request, Scheduler  # noqa: E402


class Ranks:
    """Rank zero's model steps, run on every rank (broadcast over
    torch.distributed, then executed locally), and the followers' loop."""

    def __init__(self, model, kv, rank, world):
        self.model, self.kv, self.rank, self.world = model, kv, rank, world

    def _send(self, *msg):
        if self.world > 1:
            dist.broadcast_object_list([msg], src=0)

    def _forward(self, tokens, start, pages, row):
        hidden = self.model.forward(tokens, start, pages, self.kv)
        if row >= 0:  # a checkpoint: rank zero publishes it next
            self.kv.rows[row] = hidden
            self._settle()
        return self.model.next_token(hidden) if self.rank == 0 else 0

    def _settle(self):
        """Every rank's pages and row of this step are written before rank
        zero publishes them: Selene copies them on its own stream, and a
        peer's engine as soon as the store job reaches it, which may be
        before that peer has finished the step."""
        if self.kv.rows.is_cuda:
            torch.cuda.current_stream(self.kv.rows.device).synchronize()
        if self.world > 1:
            if dist.get_backend() == "nccl":
                dist.barrier(device_ids=[self.kv.rows.device.index])
            else:
                dist.barrier()

    def forward(self, tokens, start, pages, row):
        self._send("forward", tokens, start, pages, row)
        return self._forward(tokens, start, pages, row)

    def _digest(self, pages, row):
        mine = self.kv.digest(pages, row)
        every = [None] * self.world
        if self.world > 1:
            dist.all_gather_object(every, mine)
        else:
            every = [mine]
        return every

    def digest(self, pages, row):
        self._send("digest", pages, row)
        return self._digest(pages, row)

    def token_from_row(self, row):
        return self.model.next_token(self.kv.rows[row])

    def end(self):
        self._send("end")

    def follow(self):
        while True:
            box = [None]
            dist.broadcast_object_list(box, src=0)
            op, *args = box[0]
            if op == "end":
                return
            getattr(self, "_" + op)(*args)


def load_trace(path, vocab, decode):
    requests = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            r = json.loads(line)
            tokens, boundaries = [], []
            for seed, count in r["spans"]:
                g = torch.Generator().manual_seed(int(seed))
                tokens += torch.randint(0, vocab, (int(count),), generator=g).tolist()
                boundaries.append(len(tokens))
            requests.append(Request(r["id"], tokens, boundaries, int(r.get("decode", decode)),
                                    bool(r.get("settle", False)), r.get("expect", {}),
                                    int(r.get("delay_steps", 0))))
    return requests


def init_distributed(cluster, device):
    """torch.distributed over the ranks Selene's bootstrap found: NCCL when
    every rank has a GPU of its own, gloo otherwise."""
    world, rank = cluster.world_size, cluster.rank
    if world == 1:
        return "none"
    from mpi4py import MPI
    port = None
    if rank == 0:
        import socket
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
    port = MPI.COMM_WORLD.bcast(port, root=0)
    own_gpus = device.type == "cuda" and torch.cuda.device_count() >= world
    backend = "nccl" if own_gpus else "gloo"
    host = "127.0.0.1" if rank == 0 else cluster.coordinator_host
    dist.init_process_group(backend, init_method="tcp://%s:%d" % (host, port),
                            rank=rank, world_size=world)
    return backend


def store_config(args, model, kv, cluster, device):
    esize = torch.finfo(model.dtype).bits // 8
    page_bytes = args.page_tokens * model.local_kv_heads * model.shape.head_dim * esize
    return selene.StoreConfig(
        dir=args.dir.replace("%r", str(cluster.rank)), page_tokens=args.page_tokens,
        model_name="torch-tp/%s/%d-ranks/seed-%d/%s" % (args.model, cluster.world_size,
                                                         args.seed, args.dtype),
        page_planes=[selene.Plane(name, page_bytes, t) for name, t in kv.planes()],
        row_plane=selene.Plane("hidden", model.shape.hidden * esize, kv.rows),
        page_count=args.gpu_pages, row_count=args.gpu_rows,
        device="cuda" if device.type == "cuda" else "host",
        device_ordinal=device.index or 0, durable=False,
        disk_limit_bytes=args.disk_limit if args.disk_limit is not None else selene.DISK_LIMIT_AUTO,
        cluster=cluster if cluster.world_size > 1 else None, warm_bytes=args.warm,
        warm_policy=args.warm_policy, max_age_ms=args.max_age_ms, pool=args.pool,
        pool_secret_file=args.pool_secret)


def size(text):
    """A byte count: digits, then an optional K, M, G or T (or KiB, MiB,
    ...), binary units, as the selene program reads --warm."""
    m = re.fullmatch(r"([0-9]+)(?:([KkMGT])(?:iB)?)?", text)
    if m is None:
        raise argparse.ArgumentTypeError("%r is not a size (digits, then an optional K, M, G "
                                         "or T)" % text)
    return int(m.group(1)) << {None: 0, "K": 10, "k": 10, "M": 20, "G": 30, "T": 40}[m.group(2)]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trace", required=True)
    p.add_argument("--dir", default="/tmp/torch-tp/rank%r", help="record directory; %%r: rank")
    p.add_argument("--model", default="tiny", choices=sorted(SHAPES))
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--page-tokens", type=int, default=16)
    p.add_argument("--gpu-pages", type=int, default=64)
    p.add_argument("--gpu-rows", type=int, default=16)
    p.add_argument("--decode", type=int, default=8, help="tokens per request (trace: decode)")
    p.add_argument("--max-active", type=int, default=2)
    p.add_argument("--disk-limit", type=int, default=None)
    p.add_argument("--warm", type=size, default=0, metavar="SIZE",
                   help="a warm tier of SIZE host memory on every rank in front of its disk "
                        "(default 0: none)")
    p.add_argument("--warm-policy", default="write-through",
                   choices=["write-through", "write-behind"],
                   help="when a warm record's file is written: as soon as it is warm "
                        "(default), or only when its slots are needed and at the close's drain")
    p.add_argument("--max-age-ms", type=int, default=0, metavar="MS",
                   help="drop records unused this long from every tier (default 0: never)")
    p.add_argument("--rule", default="auto", choices=["auto", "fetch", "recompute"],
                   help="fetch or recompute: the seed 2.10 rule, or always one way")
    p.add_argument("--reference", action="store_true",
                   help="no GPU cache reuse and no Selene: every prompt computed in full")
    p.add_argument("--pool", metavar="ADDR", help="a pool manager (selene pool) at host:port: "
                   "records leaving the disk go there, lookups ask it")
    p.add_argument("--pool-secret", metavar="FILE", help="the pool's 32-byte secret (mode 600)")
    p.add_argument("--serve-exports-until", metavar="FILE",
                   help="with --pool: after the trace, keep answering the pool's export "
                        "requests from the GPU cache until FILE exists (at most 300 s)")
    p.add_argument("--results", help="JSON lines: a line per request, then a summary")
    p.add_argument("--digests", help="file keeping the stored pages' digests across runs")
    args = p.parse_args(argv)
    if (args.pool is None) != (args.pool_secret is None):
        p.error("--pool and --pool-secret go together")
    if args.serve_exports_until and not args.pool:
        p.error("--serve-exports-until needs --pool")
    return args


def report(args, sched, done, seconds, world):
    c = sched.counts
    missed = 0
    for q in done if not args.reference else []:  # the reference only computes
        for key, want in q.expect.items():
            if q.result.get(key) != want:
                missed += 1
                print("  %s: expected %s %s, found %s" % (q.id, key, want, q.result.get(key)))
    summary = dict(requests=len(done), ranks=world, evictions=sched.cache.evictions,
                   expectations_missed=missed, seconds=round(seconds, 3), **c)
    if getattr(sched, "store_stats", None) is not None:  # the store's own counters
        st = sched.store_stats
        summary["store"] = {k: getattr(st, k) for k in (
            "fetches", "fetch_failures", "warm_hits", "warm_records", "warm_slots_total",
            "warm_evictions", "scanned_records", "stored", "warm_dirty_records", "warm_writes",
            "warm_spills", "warm_write_failures", "expired", "warm_expired", "pool_attached",
            "pool_puts", "pool_put_failures", "pool_hits", "pool_claims", "pool_claim_failures")}
        summary["store"]["warm_policy"] = args.warm_policy
        if st.warm_slots_total:
            print("torch-tp: warm tier of %d slots a rank, %s: %d restores of %d served warm, "
                  "%d records warm (%d not yet on disk), %d dropped from warm, %d files "
                  "written from warm (%d spills)" % (
                      st.warm_slots_total, args.warm_policy, st.warm_hits, st.fetches,
                      st.warm_records, st.warm_dirty_records, st.warm_evictions,
                      st.warm_writes, st.warm_spills), flush=True)
    if args.pool and getattr(sched, "store_stats", None) is not None:
        st = sched.store_stats
        print("torch-tp: pool %s, %s: %d records put (%d failed), %d lookups answered, "
              "%d restores from it (%d failed), %d GPU exports pinned (%d ended, %d refused)"
              % (args.pool, "attached" if st.pool_attached else "not attached", st.pool_puts,
                 st.pool_put_failures, st.pool_hits, st.pool_claims, st.pool_claim_failures,
                 sched.counts["exports"], sched.counts["exports_ended"],
                 sched.counts["exports_refused"]), flush=True)
    if sched.sel is not None:
        summary["rule"] = [dict(tokens=t, fetch_s=round(f, 6), prefill_s=round(p, 6), fetched=x)
                           for t, f, p, x in sched.sel.decisions]
    print("torch-tp: %d requests on %d ranks in %.2f s: %d GPU hits, %d host restores, "
          "%d restores failed and recomputed, %d GPU evictions, %d decode steps overlapped "
          "a restore, %d checkpoints published (%d stored), %d restores not bitwise equal, "
          "%d expectations missed" % (len(done), world, seconds, c["gpu_hits"],
                                      c["host_restores"], c["restore_failures"],
                                      sched.cache.evictions, c["overlapped_steps"],
                                      c["published"], c["stored"], c["wrong_pages"], missed),
          flush=True)
    if args.results:
        with open(args.results, "w") as f:
            for q in done:
                f.write(json.dumps(dict(id=q.id, tokens=q.out, **q.result)) + "\n")
            f.write(json.dumps(dict(summary=summary)) + "\n")
    return 1 if missed or c["wrong_pages"] else 0


def main(argv=None):
    args = parse_args(argv)
    cluster = selene.bootstrap()
    rank, world = cluster.rank, cluster.world_size
    device = torch.device(args.device)
    if device.type == "cuda":
        local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"))
        device = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(device)
    init_distributed(cluster, device)
    model = TensorParallelLlama(SHAPES[args.model], rank, world, device,
                                getattr(torch, args.dtype), args.seed)
    kv = PagedKV(model, args.gpu_pages, args.page_tokens, args.gpu_rows)
    ranks = Ranks(model, kv, rank, world)
    config = None if args.reference else store_config(args, model, kv, cluster, device)
    if config is not None:
        os.makedirs(config.dir, exist_ok=True)
    status = run_rank(args, model, kv, ranks, config, device)  # a failure: mpirun ends all
    # every rank leaves the process group before exit: a gloo thread still
    # running at interpreter shutdown aborts the process
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    return status


def serve_exports(sched, until):
    """Answers the pool's export requests from the GPU cache as the trace
    left it (every rank's agent still serves its share) until the file
    until exists, then until the exports pinned ended."""
    print("torch-tp: serving exports until %s exists" % until, flush=True)
    deadline = time.monotonic() + 300
    while not os.path.exists(until) and time.monotonic() < deadline:
        sched.poll([])
        time.sleep(0.001)
    while sched.exports:
        sched.poll([])
        time.sleep(0.001)


def run_rank(args, model, kv, ranks, config, device):
    if ranks.rank != 0:
        peer = selene.Peer(config) if config is not None else None
        ranks.follow()
        if peer is not None:
            peer.wait()
            peer.stop()
        return 0
    store = selene.Store(config) if config is not None else None
    esize = torch.finfo(model.dtype).bits // 8
    connector = None
    if store is not None:
        page_bytes = 2 * model.shape.layers * args.page_tokens * model.local_kv_heads * \
            model.shape.head_dim * esize
        # stated starting rates: the host disk's read speed, and a prefill rate
        # of the order this device reaches (the median of measurements follows)
        connector = SeleneConnector(store, args.page_tokens, page_bytes,
                                    model.shape.hidden * esize, 1.6e9,
                                    2e4 if device.type == "cuda" else 2e3, args.rule)
    cache = PrefixCache(args.gpu_pages, args.gpu_rows, args.page_tokens)
    sched = Scheduler(ranks, cache, connector, args.page_tokens, args.max_active,
                      verify=store is not None)
    if args.digests and os.path.exists(args.digests):
        with open(args.digests) as f:
            sched.digests = json.load(f)
    requests = load_trace(args.trace, model.shape.vocab, args.decode)
    done = []

    def on_done(q):
        done.append(q)
        r = q.result
        print("  %-14s gpu %5d  host %5d  prefilled %5d  restore %7.2f ms  %s" % (
            q.id, r["gpu_reused"], r["host_reused"], r["prefilled"], r["restore_ms"],
            "restore failed, recomputed" if r["restore_failed"] else
            "verified" if r["verified"] else "WRONG PAGES"), flush=True)

    t0 = time.perf_counter()
    try:
        sched.run(requests, on_done)
        if args.serve_exports_until and store is not None:
            serve_exports(sched, args.serve_exports_until)
    finally:
        ranks.end()
        if store is not None:
            sched.store_stats = store.stats()
            store.close()
    if args.digests:
        with open(args.digests, "w") as f:
            json.dump(sched.digests, f)
    return report(args, sched, done, time.perf_counter() - t0, ranks.world)


if __name__ == "__main__":
    status = main()
    # no interpreter teardown: a gloo worker thread releasing a tensor then
    # aborts the process (seen with torch 2.11); everything is written by now
    if "mpi4py.MPI" in sys.modules and not sys.modules["mpi4py.MPI"].Is_finalized():
        sys.modules["mpi4py.MPI"].Finalize()  # mpirun wants it; atexit will not run
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
