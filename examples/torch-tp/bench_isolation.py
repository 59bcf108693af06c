"""Isolation: the engine's own workloads with and without Selene in one run
(seed section 4, the measurements that gate the defaults). One rank, one
process: the engine's model (model.py), paged K/V cache (kv_cache.py) and
connector (connector.py), no mpirun.

On the GPU host (sized for an 80 GB card beside the 8B-shaped model, and
to end in under 4 minutes; run in examples/torch-tp):

    python3 bench_isolation.py --device cuda --model 8b --dtype bfloat16 \\
        --warm 16G --dir /var/tmp/selene-iso --shm-dir /dev/shm/selene-iso \\
        --prompt-tokens 32768 --restore-tokens 32768 --rounds 3

(those are the cuda defaults: `--device cuda --model 8b --dtype bfloat16`
alone runs the same.) On the CPU, in seconds: `python3 bench_isolation.py
--model tiny`.

Each workload runs in rounds; a round runs it once without Selene (the
store open and idle: no call, every earlier copy and file write finished)
and once with Selene, the order alternating from round to round so that
drift reaches both sides; each side's figures pool its rounds. Three
workloads:

1. decode under copy-out: a batch of --batch sequences at --context
   tokens decodes --steps tokens each (a step: one token of every
   sequence, each its own forward as the engine runs them); with Selene
   every step also publishes a checkpoint of --publish-tokens tokens (the
   highest publication rate: a fresh key each, its pages the K/V of a
   prompt computed before) into the store with the warm tier (--warm,
   --warm-policy) in front of --dir. Tokens per second, and the
   per-token latency (a step's time: every sequence's next token comes
   once per step) p50 and p99.
2. prefill under copy-out: --prompts prompts of --prompt-tokens tokens
   back to back, each prefilled in one chunk; with Selene each prompt's
   checkpoint (every page and its row) is published after its prefill and
   copied out while the next prompt prefills. Prompt tokens per second.
   Two page sets alternate; a prompt whose set is still being copied
   waits for that copy's event (counted in the time, and printed).
3. decode under restore: workload 1's decode while a restore of a
   --restore-tokens prefix runs (looked up and fetched through the store
   between decode steps, a new one as soon as the last one's event came),
   from the warm tier (restore-warm), then from a store with no warm tier
   on --dir (restore-disk: the seed's "decode latency under inbound"
   reads from the disk) and on --shm-dir (restore-shm: memory-backed
   files, every byte read and verified on the CPU at memory speed).
   Per-token p50 and p99.
--workloads runs some of them (decode, prefill, restore-warm,
restore-disk, restore-shm), to measure a noisy one again.

Every step's time includes the Selene calls it made on the model thread
(history, publish, poll, lookup, fetch) and, in workload 2, the
synchronization before a publication (Selene copies on its own stream:
the row is written first).
A step's time is wall-clock from a device synchronization to the host
reading its tokens (each forward's token is read by the host, which
waits for the device). A ratio is with/without; "within 2%" means no worse
than 2% (tokens/s at least 0.98 of without, latency at most 1.02); a
better with-side counts as within. Printed beside: the device, the
model's shape and dtype, what each side did (publications queued, bytes
copied out, restores completed), and the model-thread time of each Selene
call. Exits 1 when a with-side measured nothing (no publication copied
out, no restore completed or one not served from where it should be) or
a restored page differs from the stored one; the ratios never change the
exit status."""

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

# per device: what fits an 80 GB card beside the 8B model and runs in a
# few minutes (cuda), or runs in seconds on a shared CPU
DEFAULTS = {
    "cuda": dict(model="8b", dtype="bfloat16", page_tokens=64, batch=4, context=4096,
                 steps=32, publish_tokens=512, prompt_tokens=32768, prompts=3,
                 restore_tokens=32768, rounds=3, warm=16 << 30, disk_limit=24 << 30,
                 dir="/var/tmp/selene-iso", shm_dir="/dev/shm/selene-iso"),
    "cpu": dict(model="tiny", dtype="float32", page_tokens=16, batch=2, context=64,
                steps=12, publish_tokens=64, prompt_tokens=512, prompts=3,
                restore_tokens=256, rounds=2, warm=32 << 20, disk_limit=1 << 30,
                dir="/var/tmp/selene-iso", shm_dir="/dev/shm/selene-iso"),
}
PUBLISH_TRIES = 5  # offers of the restored prefix, the store drained between
WORKLOADS = ("decode", "prefill", "restore-warm", "restore-disk", "restore-shm")
TARGET = 0.02       # each within 2% of without Selene
DRAIN_S = 600       # between sides: the with-side's copies and writes end by then


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    p.add_argument("--model", choices=sorted(SHAPES), help="default: 8b on cuda, tiny on cpu")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--page-tokens", type=int)
    p.add_argument("--batch", type=int, help="sequences decoding together (workloads 1, 3)")
    p.add_argument("--context", type=int, help="tokens of each decoding sequence's prompt")
    p.add_argument("--steps", type=int, help="decode steps a side and round")
    p.add_argument("--publish-tokens", type=int,
                   help="tokens of the checkpoint each decode step publishes (workload 1)")
    p.add_argument("--prompt-tokens", type=int, help="tokens of each prompt (workload 2)")
    p.add_argument("--prompts", type=int, help="prompts a side and round (workload 2)")
    p.add_argument("--restore-tokens", type=int, help="tokens of the prefix restored "
                   "(workload 3)")
    p.add_argument("--rounds", type=int, help="rounds of each workload (a side each)")
    p.add_argument("--warm", type=size, metavar="SIZE", help="the warm tier (host memory)")
    p.add_argument("--warm-policy", default="write-through",
                   choices=["write-through", "write-behind"])
    p.add_argument("--disk-limit", type=size, metavar="SIZE", help="each store's disk limit")
    p.add_argument("--dir", help="the warm store's disk directory (a subdirectory "
                   "selene-isolation is made in it and removed after)")
    p.add_argument("--shm-dir", help="the directory workload 3 also restores from "
                   "(a store with no warm tier; a subdirectory as for --dir)")
    p.add_argument("--workloads", default=",".join(WORKLOADS),
                   help="which to run, comma-separated (default all): " + ", ".join(WORKLOADS))
    p.add_argument("--seed", type=int, default=1234)
    args = p.parse_args(argv)
    kind = "cuda" if args.device.startswith("cuda") else "cpu"
    for key, value in DEFAULTS[kind].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    for key in ("page_tokens", "batch", "context", "steps", "publish_tokens", "prompt_tokens",
                "prompts", "restore_tokens", "rounds"):
        if getattr(args, key) < 1:
            p.error("--%s must be at least 1" % key.replace("_", "-"))
    for key in ("publish_tokens", "prompt_tokens", "restore_tokens"):
        if getattr(args, key) % args.page_tokens:
            p.error("--%s (%d) must be a multiple of --page-tokens (%d): a checkpoint holds "
                    "whole pages" % (key.replace("_", "-"), getattr(args, key), args.page_tokens))
    args.workloads = args.workloads.split(",")
    for w in args.workloads:
        if w not in WORKLOADS:
            p.error("--workloads: %r is none of %s" % (w, ", ".join(WORKLOADS)))
    if args.warm <= 0:
        p.error("--warm must be above 0: workloads 1 to 3 copy out into the warm tier")
    return args


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def percentile(values, q):
    """The q-th percentile (0..100) by linear interpolation of the sorted values."""
    s = sorted(values)
    if not s:
        return float("nan")
    at = (len(s) - 1) * q / 100.0
    lo = int(at)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (at - lo)


class Calls:
    """The model thread's time in each Selene call (with sides only)."""

    def __init__(self):
        self.times = {}
        self.workload = ""

    def run(self, name, fn, *args):
        t = time.perf_counter()
        try:
            return fn(*args)
        finally:
            key = (self.workload, name)
            self.times.setdefault(key, []).append(time.perf_counter() - t)

    def report(self):
        out = []
        for key in sorted(self.times):
            v = self.times[key]
            out.append("  %-32s %-8s %5d calls: p50 %8.0f us, p99 %8.0f us, max %8.0f us" % (
                key + (len(v), percentile(v, 50) * 1e6, percentile(v, 99) * 1e6,
                       max(v) * 1e6)))
        return "\n".join(out)


class Selene:
    """One store and what its with-sides did: publications, their events,
    restores. Every call goes through calls (timed)."""

    def __init__(self, store, connector, calls, warm):
        self.store, self.connector, self.calls, self.warm = store, connector, calls, warm
        self.pending = {}            # checkpoint id -> (bytes, page set)
        self.fetching = None         # (waiter, bytes) of the restore in flight
        self.count = dict(queued=0, retry=0, present=0, oversize=0, stored=0, store_failed=0,
                          bytes_out=0, restores=0, restore_failed=0, bytes_in=0)
        self.fetch_why = []

    def poll(self):
        for ev in self.calls.run("poll", self.connector.poll):
            if ev.kind in (selene.EventKind.STORED, selene.EventKind.STORE_FAILED):
                nbytes, _ = self.pending.pop(ev.id)
                if ev.kind == selene.EventKind.STORED:
                    self.count["stored"] += 1
                    self.count["bytes_out"] += nbytes
                else:
                    self.count["store_failed"] += 1
            elif ev.kind in (selene.EventKind.FETCHED, selene.EventKind.FETCH_FAILED):
                _, nbytes = self.fetching
                self.fetching = None
                if ev.kind == selene.EventKind.FETCHED:
                    self.count["restores"] += 1
                    self.count["bytes_in"] += nbytes
                else:
                    self.count["restore_failed"] += 1
                    self.fetch_why.append(ev.why)
            elif ev.kind == selene.EventKind.FATAL:
                raise RuntimeError("Selene stopped: %s" % ev.why)

    def publish(self, tokens, pages, row, nbytes, page_set=None):
        """Offers a root checkpoint of tokens (their pages and row)."""
        history = self.calls.run("history", self.store.history, tokens)
        outcome, cid = self.calls.run("publish", self.connector.publish, history, len(tokens), 0,
                                      pages, row)
        history.close()
        if outcome == selene.Outcome.QUEUED:
            self.count["queued"] += 1
            self.pending[cid] = (nbytes, page_set)
        else:
            self.count[outcome.name.lower()] += 1
        return outcome

    def copying(self, page_set):
        return any(s == page_set for _, s in self.pending.values())

    def restore(self, history, dest, row, nbytes):
        """Starts a restore of history's deepest stored prefix into dest and row."""
        hit = self.calls.run("lookup", self.connector.lookup, history, 0)
        if hit is None:
            raise RuntimeError("the restored prefix is not found in the store")
        waiter, joined = self.calls.run("fetch", self.connector.restore, hit, dest[:hit.page_count],
                                        row)
        assert not joined  # one restore at a time
        self.fetching = (waiter, nbytes)

    def drain(self, policy):
        """Waits (untimed) until the store is idle: every publication's and
        restore's event came, no job in flight, and (write-through) every
        warm record's file written."""
        deadline = time.perf_counter() + DRAIN_S
        while True:
            self.poll()
            st = self.store.stats()
            if not self.pending and self.fetching is None and st.jobs_in_flight == 0 and \
                    (policy == "write-behind" or not self.warm or st.warm_dirty_records == 0):
                return
            if time.perf_counter() > deadline:
                raise RuntimeError("Selene did not go idle in %d s (%d publications, %s "
                                   "restore in flight, %d jobs, %d dirty records)" % (
                                       DRAIN_S, len(self.pending), self.fetching,
                                       st.jobs_in_flight, st.warm_dirty_records))
            time.sleep(0.001)


class Bench:
    def __init__(self, args):
        self.args = args
        self.device = torch.device(args.device)
        if self.device.type == "cuda":
            if self.device.index is None:
                self.device = torch.device("cuda", torch.cuda.current_device())
            torch.cuda.set_device(self.device)
        self.shape = SHAPES[args.model]
        self.model = TensorParallelLlama(self.shape, 0, 1, self.device, getattr(torch, args.dtype),
                                         args.seed)
        pt = args.page_tokens
        self.gen = torch.Generator().manual_seed(args.seed)
        # page ids: the decoding sequences', the published checkpoint's,
        # then two sets of the longest prompt's or prefix's
        self.seq_pages = []
        at = 0
        per_seq = -(-(args.context + args.steps) // pt)
        for _ in range(args.batch):
            self.seq_pages.append(list(range(at, at + per_seq)))
            at += per_seq
        self.pub_pages = list(range(at, at + args.publish_tokens // pt))
        at += len(self.pub_pages)
        big = max(args.prompt_tokens, args.restore_tokens) // pt
        self.sets = [list(range(at, at + big)), list(range(at + big, at + 2 * big))]
        at += 2 * big
        self.page_count = at
        # rows: 0 the published checkpoint's, 1 and 2 the page sets', 3 a
        # restore's destination
        self.kv = PagedKV(self.model, self.page_count, pt, 4)
        esize = self.kv.k[0].element_size()
        self.plane_bytes = pt * self.model.local_kv_heads * self.shape.head_dim * esize
        self.page_bytes = 2 * self.shape.layers * self.plane_bytes
        self.row_bytes = self.shape.hidden * esize
        self.calls = Calls()
        self.root = {}

    def tokens(self, n):
        return torch.randint(0, self.shape.vocab, (n,), generator=self.gen).tolist()

    def record_bytes(self, tokens):
        return tokens // self.args.page_tokens * self.page_bytes + self.row_bytes

    def open(self, directory, warm_bytes, label):
        root = os.path.join(directory, "selene-isolation")
        shutil.rmtree(root, ignore_errors=True)
        os.makedirs(root)
        self.root[label] = root
        config = selene.StoreConfig(
            dir=root, page_tokens=self.args.page_tokens,
            model_name="bench-isolation/%s/%s" % (self.args.model, self.args.dtype),
            page_planes=[selene.Plane(n, self.plane_bytes, t) for n, t in self.kv.planes()],
            row_plane=selene.Plane("hidden", self.row_bytes, self.kv.rows),
            page_count=self.page_count, row_count=4,
            device="cuda" if self.device.type == "cuda" else "host",
            device_ordinal=self.device.index or 0, disk_limit_bytes=self.args.disk_limit,
            durable=False, warm_bytes=warm_bytes, warm_policy=self.args.warm_policy)
        t = time.perf_counter()
        store = selene.Store(config)
        opened_s = time.perf_counter() - t
        connector = SeleneConnector(store, self.args.page_tokens, self.page_bytes,
                                    self.row_bytes, 1.6e9, 2e4, "fetch")
        return Selene(store, connector, self.calls, warm_bytes > 0), opened_s

    def close(self, sel, label):
        sel.store.close()
        shutil.rmtree(self.root.pop(label), ignore_errors=True)

    # -- setup (untimed) --------------------------------------------------
    def setup(self):
        a = self.args
        self.first = []
        for pages in self.seq_pages:
            hidden = self.model.forward(self.tokens(a.context), 0, pages, self.kv)
            self.first.append(self.model.next_token(hidden))
        hidden = self.model.forward(self.tokens(a.publish_tokens), 0, self.pub_pages, self.kv)
        self.kv.rows[0] = hidden
        sync(self.device)
        # warm-up: kernels and allocator at every size measured
        self.decode_side(None, 2)
        self.model.next_token(self.model.forward(self.tokens(a.prompt_tokens), 0, self.sets[0],
                                                 self.kv))
        sync(self.device)

    # -- workload bodies: sel is None for the side without Selene -------
    def decode_side(self, sel, steps, publish=False, restore=None):
        """steps decode steps of the batch from its prompts; returns
        (per-step seconds, steps that overlapped a restore, per-step
        seconds of a small upload and read-back of the tokens)."""
        a = self.args
        pubs = [self.tokens(a.publish_tokens) for _ in range(steps)] if publish else []
        nbytes = self.record_bytes(a.publish_tokens)
        tok = list(self.first)
        times, overlapped, probes = [], 0, []
        sync(self.device)
        for i in range(steps):
            t = time.perf_counter()
            # the probe: what the link gives the engine's own small copies
            # (the tokens up from pageable memory, back down), timed alone
            torch.as_tensor(tok, device=self.device).cpu()
            probes.append(time.perf_counter() - t)
            if sel is not None:
                sel.poll()
                if publish:
                    sel.publish(pubs[i], self.pub_pages, 0, nbytes)
                if restore is not None and sel.fetching is None:
                    history, dest, nbytes_in = restore
                    sel.restore(history, dest, 3, nbytes_in)
                overlapped += sel.fetching is not None
            for s, pages in enumerate(self.seq_pages):
                tok[s] = self.model.next_token(
                    self.model.forward([tok[s]], a.context + i, pages, self.kv))
            sync(self.device)
            times.append(time.perf_counter() - t)
        return times, overlapped, probes

    def prefill_side(self, sel):
        """--prompts prompts back to back; returns (seconds, waited s)."""
        a = self.args
        prompts = [self.tokens(a.prompt_tokens) for _ in range(a.prompts)]
        nbytes = self.record_bytes(a.prompt_tokens)
        chain = a.prompt_tokens // a.page_tokens
        waited = 0.0
        sync(self.device)
        t = time.perf_counter()
        for i, tokens in enumerate(prompts):
            which = i % 2
            pages = self.sets[which][:chain]
            if sel is not None:
                w = time.perf_counter()
                sel.poll()
                while sel.copying(which):  # its last copy pins the set
                    time.sleep(0.0002)
                    sel.poll()
                waited += time.perf_counter() - w
            hidden = self.model.forward(tokens, 0, pages, self.kv)
            self.model.next_token(hidden)
            if sel is not None:
                self.kv.rows[1 + which] = hidden
                sync(self.device)  # Selene copies on its own stream: the row is written first
                sel.publish(tokens, pages, 1 + which, nbytes, which)
        sync(self.device)
        return time.perf_counter() - t, waited

    # -- the three workloads -------------------------------------------
    def alternate(self, body, sel):
        """Runs body(side) for rounds of (without, with) sides, the order
        alternating; returns {False: [results], True: [results]}."""
        out = {False: [], True: []}
        for r in range(self.args.rounds):
            for with_selene in ((False, True) if r % 2 == 0 else (True, False)):
                out[with_selene].append(body(sel if with_selene else None))
                if with_selene:
                    sel.drain(self.args.warm_policy)
        return out


def human(nbytes):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return "%.2f %s" % (nbytes / 2**shift, unit)
    return "%d bytes" % nbytes


def ratio_line(what, with_v, without_v, unit, higher_better):
    r = with_v / without_v if without_v else float("nan")
    ok = r >= 1 - TARGET if higher_better else r <= 1 + TARGET
    return "%-44s with %10.3f %-8s without %10.3f %-8s ratio %.4f  within 2%%: %s" % (
        what, with_v, unit, without_v, unit, r, "yes" if ok else "no")


def decode_lines(name, out, batch):
    lines = []
    for key, label in ((True, "with"), (False, "without")):
        steps = [t for run in out[key] for t in run[0]]
        out[label] = (batch * len(steps) / sum(steps), percentile(steps, 50) * 1e3,
                      percentile(steps, 99) * 1e3)
    w, wo = out["with"], out["without"]
    if name.startswith("decode under copy-out"):
        lines.append(ratio_line(name + ": tokens/s", w[0], wo[0], "tok/s", True))
    lines.append(ratio_line(name + ": per-token p50", w[1], wo[1], "ms", False))
    lines.append(ratio_line(name + ": per-token p99", w[2], wo[2], "ms", False))
    probe = {key: [t for run in out[key] for t in run[2]] for key in (True, False)}
    lines.append("  (a step's small upload and read-back of its tokens: p50/p99 %.0f/%.0f us "
                 "with, %.0f/%.0f us without)" % (
                     percentile(probe[True], 50) * 1e6, percentile(probe[True], 99) * 1e6,
                     percentile(probe[False], 50) * 1e6, percentile(probe[False], 99) * 1e6))
    return lines


class Report:
    """The lines printed at the end: a workload's ratios only when its
    with-side did what it measures; otherwise what it did and why it
    failed."""

    def __init__(self):
        self.lines, self.failures = [], []
        self.t = time.perf_counter()

    def workload(self, ratios, did, problems):
        """ratios: a function giving the ratio lines; did: what each side
        did; problems: why the with-side measured nothing or was wrong."""
        now = time.perf_counter()
        did += " (%.1f s, drains and setup included)" % (now - self.t)
        self.t = now
        lines = ([] if problems else ratios()) + [did]
        lines += ["  FAILED: " + p for p in problems]
        self.failures += problems
        self.lines += lines
        print(*lines, sep="\n", flush=True)


def main(argv=None):
    args = parse_args(argv)
    t_start = time.perf_counter()
    bench = Bench(args)
    dev = bench.device
    s = bench.shape
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "host CPU (%d threads)" % \
        torch.get_num_threads()
    print("device %s (%s), torch %s; model %s: %d layers, hidden %d, %d/%d heads, mlp %d, "
          "vocab %d, %s; page tokens %d (%s a page)" % (
              dev, name, torch.__version__, args.model, s.layers, s.hidden, s.heads,
              s.kv_heads, s.mlp, s.vocab, args.dtype, args.page_tokens,
              human(bench.page_bytes)), flush=True)
    bench.setup()
    report = Report()
    try:
        run_workloads(args, bench, report)
    finally:
        for label in list(bench.root):
            shutil.rmtree(bench.root.pop(label), ignore_errors=True)
    print("\nthe model thread's time in each Selene call (with sides):\n" + bench.calls.report())
    print("\n" + "\n".join(report.lines))
    print("\n%.1f s in all" % (time.perf_counter() - t_start))
    for f in report.failures:
        print("FAILED: " + f)
    return 1 if report.failures else 0


def run_workloads(args, bench, report):
    sel, opened_s = bench.open(args.dir, args.warm, "warm")
    st = sel.store.stats()
    print("warm store: %s, a warm tier of %s (%d slots, %s), opened in %.2f s; disk limit "
          "%s" % (bench.root["warm"], human(args.warm), st.warm_slots_total,
                  args.warm_policy, opened_s, human(args.disk_limit)), flush=True)

    if "decode" in args.workloads:
        decode_under_copy_out(args, bench, report, sel)
    if "prefill" in args.workloads:
        prefill_under_copy_out(args, bench, report, sel)
    sources = [s for s in WORKLOADS if s.startswith("restore-") and s in args.workloads]
    if sources:
        sel, label = decode_under_restore(args, bench, report, sel, sources)
    else:
        label = "warm"
    bench.close(sel, label)


def decode_under_copy_out(args, bench, report, sel):
    bench.calls.workload = "decode under copy-out"
    before = dict(sel.count)
    out = bench.alternate(lambda x: bench.decode_side(x, args.steps, publish=True), sel)
    did = {k: sel.count[k] - before[k] for k in before}
    report.workload(
        lambda: decode_lines("decode under copy-out", out, args.batch),
        "  decode: batch %d at %d tokens of context, %d rounds x %d steps a side; with: %d "
        "publications of %d tokens (%d queued, %d retry, %d present), %d stored, %d failed, "
        "%s copied out; without: none" % (
            args.batch, args.context, args.rounds, args.steps, args.rounds * args.steps,
            args.publish_tokens, did["queued"], did["retry"], did["present"], did["stored"],
            did["store_failed"], human(did["bytes_out"])),
        [] if did["stored"] and did["bytes_out"] else
        ["decode under copy-out: no publication was copied out"])



def prefill_under_copy_out(args, bench, report, sel):
    bench.calls.workload = "prefill under copy-out"
    before = dict(sel.count)
    out = bench.alternate(bench.prefill_side, sel)
    did = {k: sel.count[k] - before[k] for k in before}
    tokens = args.rounds * args.prompts * args.prompt_tokens
    report.workload(
        lambda: [ratio_line("prefill under copy-out: tokens/s",
                            tokens / sum(r[0] for r in out[True]),
                            tokens / sum(r[0] for r in out[False]), "tok/s", True)],
        "  prefill: %d rounds x %d prompts of %d tokens a side; with: %d publications (%d "
        "queued, %d retry), %d stored, %d failed, %s copied out, %.1f ms waiting for a page "
        "set's copy; without: none" % (
            args.rounds, args.prompts, args.prompt_tokens, args.rounds * args.prompts,
            did["queued"], did["retry"], did["stored"], did["store_failed"],
            human(did["bytes_out"]), sum(r[1] for r in out[True]) * 1e3),
        [] if did["stored"] and did["bytes_out"] else
        ["prefill under copy-out: no publication was copied out"])



def decode_under_restore(args, bench, report, sel, sources):
    """The prefix stored once (untimed), then restored again and again
    during the with-sides' decode steps, from each source; returns the
    store open at the end."""
    prefix = bench.tokens(args.restore_tokens)
    chain = args.restore_tokens // args.page_tokens
    src, dest = bench.sets[0][:chain], bench.sets[1][:chain]
    hidden = bench.model.forward(prefix, 0, src, bench.kv)
    bench.kv.rows[1] = hidden
    sync(bench.device)
    nbytes = bench.record_bytes(args.restore_tokens)
    open_label = "warm"
    for workload, label, directory, warm in (
            ("restore-warm", "the warm tier", args.dir, True),
            ("restore-disk", "%s (no warm tier)" % args.dir, args.dir, False),
            ("restore-shm", "%s (no warm tier)" % args.shm_dir, args.shm_dir, False)):
        if workload not in sources:
            continue
        if not warm:
            bench.close(sel, open_label)
            open_label = workload
            sel, _ = bench.open(directory, 0, open_label)
        name = "decode under restore from %s" % workload[len("restore-"):]
        stored = sel.count["stored"]
        bench.calls.workload = "storing the restored prefix"
        # Copy-out before may hold every warm slot dirty: a publication
        # answers Retry until the files are written; offer again once idle.
        sel.drain(args.warm_policy)
        for _ in range(PUBLISH_TRIES):
            outcome = sel.publish(prefix, src, 1, nbytes)
            sel.drain(args.warm_policy)
            if outcome != selene.Outcome.RETRY:
                break
        if outcome != selene.Outcome.QUEUED or sel.count["stored"] == stored:
            report.workload(None, "  restore from %s: the prefix offered (%s, %d tries) was "
                            "not stored" % (label, outcome.name, PUBLISH_TRIES),
                            [name + ": the prefix was not stored"])
            continue
        bench.calls.workload = name
        history = sel.store.history(prefix)
        before, st0 = dict(sel.count), sel.store.stats()
        out = bench.alternate(lambda x: bench.decode_side(x, args.steps,
                                                          restore=(history, dest, nbytes)), sel)
        st1 = sel.store.stats()
        history.close()
        did = {k: sel.count[k] - before[k] for k in before}
        overlapped = sum(r[1] for r in out[True])
        warm_hits = st1.warm_hits - st0.warm_hits
        file_reads = (st1.fetches - st0.fetches) - warm_hits
        problems = []
        if not did["restores"] or not overlapped:
            problems.append(name + ": no restore completed during decode")
        if did["restore_failed"]:
            problems.append("%s: %d restores failed (%s)" % (name, did["restore_failed"],
                                                              sel.fetch_why[-1]))
        if warm and warm_hits != did["restores"]:
            problems.append("%s: %d of %d restores served warm" % (name, warm_hits,
                                                                   did["restores"]))
        if not warm and file_reads < did["restores"]:
            problems.append("%s: %d of %d restores read files" % (name, file_reads,
                                                                  did["restores"]))
        if did["restores"] and not (torch.equal(bench.kv.rows[3], bench.kv.rows[1]) and all(
                torch.equal(p[dest], p[src]) for p in bench.kv.k + bench.kv.v)):
            problems.append(name + ": the restored pages or row differ from the stored ones")
        report.workload(
            lambda: decode_lines(name, out, args.batch),
            "  restore from %s: %d tokens (%s) a restore; with: %d restores completed (%d "
            "failed), %s restored, %d served warm, %d read files, %d of %d decode steps "
            "overlapped a restore; without: none" % (
                label, args.restore_tokens, human(nbytes), did["restores"],
                did["restore_failed"], human(did["bytes_in"]), warm_hits, file_reads,
                overlapped, args.rounds * args.steps),
            problems)
        bench.kv.rows[3].zero_()
        for p in bench.kv.k + bench.kv.v:
            p[dest] = 0
    return sel, open_label


if __name__ == "__main__":
    sys.exit(main())
