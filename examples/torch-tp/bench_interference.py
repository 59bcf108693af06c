"""Interference: bench_isolation.py's decode batch beside loads that are not
Selene, to say what bounds the isolation figures on a machine. Each load
runs in rounds of (without, with) sides, the order alternating, as
bench_isolation.py runs its workloads; a line gives the per-step p50 and
mean with/without, the p99 ratio, the model thread's CPU seconds on each
side, and what the load moved.

Loads (--loads, comma-separated; default all that the device allows):
  bulk-in, bulk-out   a thread copying 1 GiB between pinned host memory and
                      the device in 512 MiB calls, back to back, on its own
                      stream (the raw path a restore or a copy-out rides on)
  entries-in-128K, entries-in-2M
                      the same bytes host to device in cuMemcpyBatchAsync
                      calls of 128 KiB or 2 MiB entries (how a paged cache
                      moves: one entry a page plane), through libcuda
  --duty F            a copy load busy a fraction F of the time: after each
                      GiB it rests (1 - F) / F of what the GiB took (a
                      restore's or a copy-out's duty, not the link's)
  spin                --procs processes running Python loops (CPU only)
  memcpy              --procs processes copying 256 MiB buffers (CPU and
                      host memory only)
The copy loads need --device cuda (entries-* also a driver with
cuMemcpyBatchAsync: CUDA 12.8 or later); on the CPU only spin and memcpy
run. On the GPU host, in examples/torch-tp:

    python3 bench_interference.py --device cuda

Exits 1 when a load moved nothing or failed."""

import argparse
import ctypes
import multiprocessing
import os
import sys
import threading
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_isolation as iso  # noqa: E402

GIB = 1 << 30
COPY_LOADS = ("bulk-in", "bulk-out", "entries-in-128K", "entries-in-2M")
LOADS = COPY_LOADS + ("spin", "memcpy")
BATCH_ENTRIES = 4096  # entries a cuMemcpyBatchAsync call


class ThreadLoad:
    """A load on a thread of this process; body() runs until stop is set.
    Its waits (event synchronisations) release the GIL."""

    def __init__(self, duty=1.0):
        self.stop = threading.Event()
        self.duty = duty
        self.moved = 0
        self.calls = 0
        self.error = None

    def start(self):
        self.stop.clear()
        self.thread = threading.Thread(target=self.guarded, daemon=True)
        self.thread.start()

    def guarded(self):
        try:
            self.body()
        except Exception as e:  # reported by the line, never a hang
            self.error = "%s: %s" % (type(e).__name__, e)

    def end(self):
        self.stop.set()
        self.thread.join()

    def rest(self, busy_s):
        """Rests after busy_s seconds of copying, as --duty asks."""
        if self.duty < 1.0:
            self.stop.wait(busy_s * (1.0 - self.duty) / self.duty)


class Bulk(ThreadLoad):
    def __init__(self, device, to_device, duty):
        super().__init__(duty)
        self.device, self.to_device = device, to_device
        self.host = torch.empty(GIB, dtype=torch.uint8).pin_memory()
        self.gpu = torch.empty(GIB, dtype=torch.uint8, device=device)

    def body(self):
        torch.cuda.set_device(self.device)
        stream = torch.cuda.Stream(self.device)
        done = torch.cuda.Event(blocking=True)
        chunk = 512 << 20
        while not self.stop.is_set():
            began = time.perf_counter()
            with torch.cuda.stream(stream):
                for at in range(0, GIB, chunk):
                    dst, src = ((self.gpu, self.host) if self.to_device else
                                (self.host, self.gpu))
                    dst[at:at + chunk].copy_(src[at:at + chunk], non_blocking=True)
                    self.calls += 1
            done.record(stream)
            done.synchronize()
            self.moved += GIB
            self.rest(time.perf_counter() - began)


class MemcpyAttributes(ctypes.Structure):
    """CUmemcpyAttributes: source access order, two CUmemLocation hints, flags."""
    _fields_ = [("src_access_order", ctypes.c_int), ("src_type", ctypes.c_int),
                ("src_id", ctypes.c_int), ("dst_type", ctypes.c_int), ("dst_id", ctypes.c_int),
                ("flags", ctypes.c_uint)]


class Entries(ThreadLoad):
    """1 GiB host to device in batched calls of entry-byte entries."""

    def __init__(self, device, entry, duty):
        super().__init__(duty)
        self.device = device
        self.host = torch.empty(GIB, dtype=torch.uint8).pin_memory()
        self.gpu = torch.empty(GIB, dtype=torch.uint8, device=device)
        try:
            self.batch = ctypes.CDLL("libcuda.so.1").cuMemcpyBatchAsync_v2
        except (OSError, AttributeError) as e:
            raise RuntimeError("this driver has no cuMemcpyBatchAsync_v2 (%s)" % e)
        count = GIB // entry
        host, gpu = self.host.data_ptr(), self.gpu.data_ptr()
        self.calls_args = []
        for first in range(0, count, BATCH_ENTRIES):
            k = min(BATCH_ENTRIES, count - first)
            self.calls_args.append((
                (ctypes.c_uint64 * k)(*[gpu + (first + i) * entry for i in range(k)]),
                (ctypes.c_uint64 * k)(*[host + (first + i) * entry for i in range(k)]),
                (ctypes.c_size_t * k)(*([entry] * k)), k))
        self.attributes = MemcpyAttributes(1)  # CU_MEMCPY_SRC_ACCESS_ORDER_STREAM
        self.first_index = (ctypes.c_size_t * 1)(0)

    def body(self):
        torch.cuda.set_device(self.device)
        stream = torch.cuda.Stream(self.device)
        done = torch.cuda.Event(blocking=True)
        handle = ctypes.c_void_p(stream.cuda_stream)
        while not self.stop.is_set():
            began = time.perf_counter()
            for dsts, srcs, sizes, k in self.calls_args:
                result = self.batch(dsts, srcs, sizes, ctypes.c_size_t(k),
                                    ctypes.byref(self.attributes), self.first_index,
                                    ctypes.c_size_t(1), handle)
                if result:
                    raise RuntimeError("cuMemcpyBatchAsync_v2 returned %d" % result)
                self.calls += 1
            done.record(stream)
            done.synchronize()
            self.moved += GIB
            self.rest(time.perf_counter() - began)


def spin(stop):
    x = 0
    while not stop.is_set():
        for i in range(10000):
            x += i


def copy_buffers(stop):
    a = torch.ones(256 << 20, dtype=torch.uint8)
    b = torch.empty_like(a)
    while not stop.is_set():
        b.copy_(a)


class ProcessLoad:
    def __init__(self, target, procs):
        self.target, self.procs = target, procs
        self.moved, self.calls, self.error = 0, 0, None

    def start(self):
        ctx = multiprocessing.get_context("fork")
        self.stop = ctx.Event()
        self.ps = [ctx.Process(target=self.target, args=(self.stop,), daemon=True)
                   for _ in range(self.procs)]
        for p in self.ps:
            p.start()

    def end(self):
        self.stop.set()
        for p in self.ps:
            p.join()
            if p.exitcode:
                self.error = "a load process exited with %d" % p.exitcode


def make_load(name, device, procs, duty):
    if name == "bulk-in":
        return Bulk(device, True, duty)
    if name == "bulk-out":
        return Bulk(device, False, duty)
    if name.startswith("entries-in-"):
        return Entries(device, iso.size(name[len("entries-in-"):]), duty)
    return ProcessLoad(spin if name == "spin" else copy_buffers, procs)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--loads", help="comma-separated, of " + ", ".join(LOADS))
    p.add_argument("--procs", type=int, default=4, help="processes of spin and memcpy")
    p.add_argument("--duty", type=float, default=1.0,
                   help="fraction of the time a copy load copies (0 < F <= 1)")
    p.add_argument("--settle-ms", type=float, default=200,
                   help="a load runs this long before its side starts")
    args, rest = p.parse_known_args(argv)
    bench_args = iso.parse_args(rest)
    cuda = bench_args.device.startswith("cuda")
    args.loads = args.loads.split(",") if args.loads else [
        n for n in LOADS if cuda or n not in COPY_LOADS]
    for name in args.loads:
        if name not in LOADS:
            p.error("--loads: %r is none of %s" % (name, ", ".join(LOADS)))
        if name in COPY_LOADS and not cuda:
            p.error("--loads %s copies to a GPU: it needs --device cuda" % name)
    if args.procs < 1:
        p.error("--procs must be at least 1")
    if not 0.0 < args.duty <= 1.0:
        p.error("--duty must be above 0 and at most 1")
    return args, bench_args


def side(bench, steps, load, settle_s):
    if load:
        load.start()
        time.sleep(settle_s)
    cpu = time.thread_time()
    times = bench.decode_side(None, steps)[0]
    cpu = time.thread_time() - cpu
    if load:
        load.end()
    return times, cpu


def main(argv=None):
    args, a = parse_args(sys.argv[1:] if argv is None else argv)
    bench = iso.Bench(a)
    name = (torch.cuda.get_device_name(bench.device) if bench.device.type == "cuda" else
            "host CPU")
    print("device %s (%s), %d cores; model %s, batch %d at %d tokens of context, %d rounds x "
          "%d steps a side; copy loads busy %.0f%% of the time" % (
              bench.device, name, os.cpu_count(), a.model, a.batch, a.context, a.rounds,
              a.steps, args.duty * 100), flush=True)
    bench.setup()
    failures = []
    for load_name in args.loads:
        try:
            load = make_load(load_name, bench.device, args.procs, args.duty)
        except RuntimeError as e:
            failures.append("%s: %s" % (load_name, e))
            print("%-16s FAILED: %s" % (load_name, e), flush=True)
            continue
        steps = {False: [], True: []}
        cpu = {False: 0.0, True: 0.0}
        loaded_s = 0.0
        for r in range(a.rounds):
            for with_load in ((False, True) if r % 2 == 0 else (True, False)):
                t = time.perf_counter()
                times, c = side(bench, a.steps, load if with_load else None,
                                args.settle_ms / 1e3)
                if with_load:
                    loaded_s += time.perf_counter() - t
                steps[with_load] += times
                cpu[with_load] += c
        w, wo = steps[True], steps[False]
        moved = (", moved %.1f GB/s in %d calls" % (load.moved / loaded_s / 1e9, load.calls)
                 if load_name in COPY_LOADS else ", %d processes" % args.procs)
        print("%-16s per-step p50 %.1f / %.1f ms (%.3f), mean %.1f / %.1f ms (%.3f), p99 "
              "ratio %.3f; model thread CPU %.2f / %.2f s%s" % (
                  load_name, iso.percentile(w, 50) * 1e3, iso.percentile(wo, 50) * 1e3,
                  iso.percentile(w, 50) / iso.percentile(wo, 50), sum(w) / len(w) * 1e3,
                  sum(wo) / len(wo) * 1e3, (sum(w) / len(w)) / (sum(wo) / len(wo)),
                  iso.percentile(w, 99) / iso.percentile(wo, 99), cpu[True], cpu[False],
                  moved), flush=True)
        if load.error or (load_name in COPY_LOADS and not load.moved):
            failures.append("%s: %s" % (load_name, load.error or "moved nothing"))
        del load
    for f in failures:
        print("FAILED: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
