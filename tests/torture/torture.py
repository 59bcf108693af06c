#!/usr/bin/python3
"""The fault loops (docs/DESIGN.md section 10): `make torture`.

Runs the reference TP worker (`selene run`, 3 ranks under mpirun on
loopback) through faults and checks, after each, what Selene promises:

  kill       kill -9 of a random rank or of mpirun at a random moment of a
             workload that stores and restores; then a restart that restores
             every checkpoint reported stored before the kill and not
             evicted since, each on its own (the worker checks every byte
             on every rank), every rank holding the same record files, as
             many as the index knew at the close, and `selene verify`
             passing on each.
  kill-evict the same under a disk limit a few records fill (EVICT_DISK_LIMIT):
             nearly every publication evicts or compacts, and commits drop
             their parents' rows, so kills land while unlinks and truncates
             are in flight. Each run opens with a restore of every committed
             checkpoint, and `selene run --stored-log` names those the
             policy evicted or compacted since, which then need not restore.
  failpoint  every failpoint `selene failpoints` lists, with kill and with an
             error, on rank zero and on a peer; then the same restart checks.
  fp-evict   the unlink and truncate failpoints (EVICT_POINTS), with kill and
             with an error, on each rank of the evicting workload. Over both
             failpoint loops, an armed failpoint that never fires is a
             failure (CANNOT_FIRE lists the ones that cannot, and why).
  read-eio   the scan caches deleted, the 1st, 2nd, ... read of a start fails
             once with EIO on one rank; the clean start after must restore
             every committed checkpoint.
  corrupt    random bit flips, copied pages, swapped names, truncations and
             zeroed blocks in one rank's records, then restores: each refused
             or harmless, never a wrong byte; the refused record is removed
             and stored again by the next run.
  header     every bit of one record's 4096-byte header flipped in turn:
             `selene verify` refuses each copy.
  storm      cluster formation (selene cluster-demo, 3 ranks) while port
             scans, idle connections, garbage and bad MACs hit the join port.
  pool       a pool manager (selene pool, with a disk tier) under hostile
             connections on its port (garbage, truncated and oversized
             frames, cluster frames, idle and half-handshake connections,
             a slowloris) while honest claims (selene bench pool --manager)
             succeed and a wrong secret is refused; killed -9 mid-claim
             (the claims fail cleanly, never a wrong byte) and restarted,
             counting the arena files the killed ones left in /dev/shm;
             with a disk tier (selene pool --dir), its record files
             corrupted between runs (refused or harmless).
  fuzz       the libFuzzer targets (make fuzz-build) for a fixed time each.
  LOOP+wt, LOOP+wb  kill, kill-evict, failpoint, fp-evict, read-eio and
             corrupt again, fewer times (warm_tasks), with a warm tier on
             every rank written through (wt) or behind (wb): a checkpoint
             is committed once the stored log says it is on disk, or its
             run closed cleanly (the close's drain wrote it).

A wrong byte, a lost committed record, ranks that disagree, a crash or a
hang fails the run, naming the seed that reproduces it. Prints a table of
tries and outcomes. Debian's python3, standard library only.

Knobs (environment): TORTURE_QUICK=1 (3-5 minutes), TORTURE_SEED,
TORTURE_JOBS (parallel lanes, default 2), TORTURE_FUZZ_SECONDS,
TORTURE_SKIP_STORM=1, TORTURE_KEEP=1 (keep the work directory), and for
narrower runs TORTURE_ONLY=kill,kill-evict,failpoint,fp-evict,read-eio,
corrupt,header,storm,pool,fuzz, TORTURE_KILLS, TORTURE_EVICT_KILLS,
TORTURE_CORRUPTIONS, TORTURE_FAILPOINT_TRIALS, TORTURE_WARM=0 (no warm
loops), TORTURE_WARM_KILLS, TORTURE_WARM_EVICT_KILLS (per policy), and
TORTURE_REPLAY=KIND:...:SEED (one try, as a failure names it).
"""
import argparse
import collections
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

RANKS = 3
PAGE_TOKENS = 16
PAGE_BYTES = 4096          # one plane's unit, the size a "page" copy moves
HEADER_BYTES = 4096
RUN_ARGS = ["--device", "host", "--device-ordinal", "0", "--page-tokens", str(PAGE_TOKENS),
            "--planes", "2x4K", "--row-bytes", "4K", "--gpu-pages", "256",
            "--gpu-rows", "16", "--event-timeout-ms", "20000"]
MPI_ARGS = ["--oversubscribe", "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo",
            "--mca", "oob_tcp_if_include", "lo"]
LAUNCH_TIMEOUT_S = 60      # a launch past this is a hang
KILL_WAIT_S = 20           # mpirun's own teardown after a kill
CYCLE_KILLS = 8            # kills on one set of directories, then fresh ones
# The evicting workload: a disk limit a few records fill, so that nearly
# every publication evicts or compacts (tens of evictions a second).
EVICT_DISK_LIMIT = "2M"
# The warm lanes' tier on every rank: 1 MiB holds 128 slots, a few
# conversations, so stores spill (write-behind) and evict warm records, and
# restores read through from the disk. Each write policy gets its lanes.
WARM_BYTES = "1M"
WARM_POLICIES = {"write-through": "wt", "write-behind": "wb"}
# The failpoints met only while records are evicted, compacted or dropped:
# armed on the evicting workload (the seeded one never reaches them), with
# kill and with an error, on each rank.
EVICT_POINTS = ("record.before_truncate", "record.after_truncate", "record.before_unlink",
                "record.after_unlink", "disk.truncate", "disk.unlink")
# The read-eio loop fails the 1st, 2nd, ... 12th read of a start on each
# rank in turn (the scan caches deleted, so the scan reads every header):
# a seeded directory holds 14 record files, so the error meets records of
# every kind (roots, parents, children, page-only ones, the bait).
READ_EIO_READS = 12
# (failpoint, action or "*", role) that no try can fire, and why. Any other
# one tried and never fired fails the run: the loop did not test it.
CANNOT_FIRE = {
    ("warm.register", "*", "rank0"): "the plain loops run no warm tier (the warm ones fire it)",
    ("warm.register", "*", "peer"): "the plain loops run no warm tier (the warm ones fire it)",
    ("pool.rx_data", "*", "rank0"): "the loops attach no pool (tests/test_pool.c fires it)",
    ("pool.rx_data", "*", "peer"): "the loops attach no pool (tests/test_pool.c fires it)",
    ("pool.arena_map", "*", "rank0"): "the loops attach no pool (make qualify's pool phase fires it)",
    ("pool.arena_map", "*", "peer"): "the loops attach no pool (make qualify's pool phase fires it)",
    ("pool.arena_register", "*", "rank0"): "the loops attach no pool (tests/test_pool_link.c fires it)",
    ("pool.arena_register", "*", "peer"): "the loops attach no pool (tests/test_pool_link.c fires it)",
    ("pool.link_close", "*", "rank0"): "the loops attach no pool (tests/test_pool_attach.c fires it)",
    ("pool.link_close", "*", "peer"): "the loops attach no pool (tests/test_pool_attach.c fires it)",
    ("pool.link_cut", "*", "rank0"): "the loops attach no pool (tests/test_pool_attach.c fires it)",
    ("pool.link_cut", "*", "peer"): "the loops attach no pool (tests/test_pool_attach.c fires it)",
    ("pool.disk_sync", "*", "rank0"): "only a pool manager's disk tier syncs (tests/test_pool.c fires it)",
    ("pool.disk_sync", "*", "peer"): "only a pool manager's disk tier syncs (tests/test_pool.c fires it)",
    ("pool.disk_io", "*", "rank0"): "only a pool manager's disk thread does its I/O (tests/test_pool.c fires it)",
    ("pool.disk_io", "*", "peer"): "only a pool manager's disk thread does its I/O (tests/test_pool.c fires it)",
    ("pool.export_copy", "*", "rank0"): "the loops attach no pool (tests/test_pool_gpu_export.c fires it)",
    ("pool.export_copy", "*", "peer"): "the loops attach no pool (tests/test_pool_gpu_export.c fires it)",
    ("pool.claim_refuse", "*", "rank0"): "only a pool manager answers claims (tests/test_pool_attach.c fires it)",
    ("pool.claim_refuse", "*", "peer"): "only a pool manager answers claims (tests/test_pool_attach.c fires it)",
    ("pool.tx", "*", "rank0"): "the loops attach no pool (tests/test_pool_client.c fires it)",
    ("pool.tx", "*", "peer"): "the loops attach no pool (tests/test_pool_client.c fires it)",
    ("peer.socket", "*", "rank0"): "rank zero runs no peer agent",
    ("peer.dup", "*", "rank0"): "rank zero runs no peer agent",
    ("peer.resolve", "*", "rank0"): "rank zero runs no peer agent",
    ("peer.resolve", "*", "peer"): "under mpirun a peer is given rank zero's numeric "
                                   "address, which getaddrinfo takes without the helper "
                                   "thread the point is on (tests/test_resolve.c fires it)",
}
CRASH_WORDS = ("AddressSanitizer", "Segmentation fault", "Assertion", "assertion failed",
               "core dumped", "SEL_ASSERT")


class Failure(Exception):
    """A broken promise: the run fails, naming the seed."""


def env_int(name, default):
    value = os.environ.get(name, "")
    return int(value) if value.strip() else default


class Table:
    """Tries and outcomes per section, shared by the lanes."""

    def __init__(self):
        self.lock = threading.Lock()
        self.counts = collections.OrderedDict()
        self.notes = collections.defaultdict(list)
        self.failures = []
        self.fired = {}   # (failpoint, action, role) -> fired in some try

    def mark_fired(self, name, action, role, fired):
        with self.lock:
            key = (name, action, role)
            self.fired[key] = self.fired.get(key, False) or fired

    def add(self, section, outcome, n=1):
        with self.lock:
            self.counts.setdefault(section, collections.Counter())[outcome] += n

    def note(self, section, text):
        with self.lock:
            self.notes[section].append(text)

    def fail(self, section, text):
        with self.lock:
            self.failures.append((section, text))
        self.add(section, "FAILED")

    def print(self, seconds, seed):
        print("\n== torture: seed %d, %.0f s" % (seed, seconds))
        print("  %-10s %8s  %s" % ("section", "tries", "outcomes"))
        total = 0
        for section, counter in self.counts.items():
            tries = counter.get("tries", 0)
            total += tries
            rest = ", ".join("%s %d" % (k, v) for k, v in sorted(counter.items()) if k != "tries")
            print("  %-10s %8d  %s" % (section, tries, rest))
            notes = self.notes.get(section, [])
            for text in notes[:12]:
                print("  %-10s %8s  note: %s" % ("", "", text))
            if len(notes) > 12:
                print("  %-10s %8s  note: and %d more" % ("", "", len(notes) - 12))
        print("  %-10s %8d" % ("total", total))
        for section, text in self.failures:
            print("FAILED %s: %s" % (section, text))


class Launch:
    """One mpirun of `selene run`, in its own process group."""

    def __init__(self, program, work, argv, log_path, rank_env=None, every_rank_env=None):
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   SELENE_LOG=os.environ.get("TORTURE_LOG", "warn"))
        for name in ("SELENE_COORDINATOR", "SELENE_RANK", "SELENE_WORLD_SIZE", "SELENE_FAILPOINTS"):
            env.pop(name, None)
        cmd = ["mpirun"] + MPI_ARGS + ["-np", str(RANKS), "-x", "SELENE_LOG"]
        for name, value in sorted((every_rank_env or {}).items()):
            env[name] = value
            cmd += ["-x", name]
        if rank_env:
            rank, value = rank_env
            # the failpoint on one rank only, as tests/qualify does; kill is
            # deliberate here, so fatal actions are allowed
            cmd += ["bash", "-c", 'if [ "$OMPI_COMM_WORLD_RANK" = %d ]; then '
                    'export SELENE_FAILPOINTS=%s SELENE_FAILPOINTS_ALLOW_FATAL=1; fi; '
                    'exec "$0" "$@"' % (rank, shell_quote(value))]
        cmd += [program, "run"] + argv
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, cwd=work,
                                     env=env, start_new_session=True)

    def session_pids(self):
        """Every process of this launch: mpirun's session (each rank has a
        process group of its own)."""
        pids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.getsid(int(entry)) == self.proc.pid:
                        pids.append(int(entry))
                except OSError:
                    continue
        return pids

    def rank_pids(self):
        """rank -> pid of the selene processes of this launch."""
        pids = {}
        for pid in self.session_pids():
            entry = str(pid)
            try:
                with open("/proc/%s/comm" % entry) as f:
                    if f.read().strip() != "selene":
                        continue
                with open("/proc/%s/environ" % entry, "rb") as f:
                    for item in f.read().split(b"\0"):
                        if item.startswith(b"OMPI_COMM_WORLD_RANK="):
                            pids[int(item.split(b"=")[1])] = int(entry)
            except (OSError, ValueError):
                continue
        return pids

    def wait(self, timeout):
        """The exit status, or None after killing a launch that hung."""
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        self.kill_group()
        self.log.close()
        return rc

    def kill_group(self):
        for pid in self.session_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def output(self, tail=4000):
        with open(self.log_path, "rb") as f:
            data = f.read()
        return data[-tail:].decode("utf-8", "replace")


def size_or0(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def shell_quote(text):
    return "'" + text.replace("'", "'\\''") + "'"


class Lane:
    """One worker: its own directories, workloads and committed records."""

    def __init__(self, index, program, root, seed, table, disk_limit=None):
        self.index = index
        self.program = program
        self.disk_limit = disk_limit  # --disk-limit of every run but the checks'
        self.root = os.path.join(root, "lane%d%s" % (index, "-evict" if disk_limit else ""))
        self.table = table
        self.rng = random.Random(seed)
        self.launches = 0
        self.cycle_kills = CYCLE_KILLS
        self.duration_s = 0.7   # a workload's run time after startup, learned
        self.section = "kill"   # the table's line the try in hand counts on
        os.makedirs(self.root)
        self.fresh()

    # ---- state: directories, requests, what is committed
    def fresh(self):
        self.cycle = getattr(self, "cycle", 0) + 1
        self.dirs = os.path.join(self.root, "cycle%d" % self.cycle)
        os.makedirs(self.dirs)
        self.conversations = []     # span lists
        self.prompts = set()        # every prompt asked so far (tuples of spans)
        self.committed = {}         # spans tuple -> consumed tokens
        self.kills = 0

    def base_arg(self, dirs=None):
        return os.path.join(dirs or self.dirs, "rank%r")

    def new_span(self):
        count = self.rng.choice((16, 32, 48, 64, 96, 128, 192, 256))
        if self.rng.random() < 0.2:
            count += self.rng.randint(1, PAGE_TOKENS - 1)
        return (self.rng.randint(1, 1 << 40), count)

    def workload(self, requests):
        """A trace of requests: new conversations, next turns, earlier turns
        again (restores), a settle now and then. Returns (lines, by id)."""
        lines, by_id = [], {}
        for i in range(requests):
            roll = self.rng.random()
            if not self.conversations or roll < 0.3:
                spans = [self.new_span() for _ in range(self.rng.randint(1, 3))]
                self.conversations.append(spans)
            elif roll < 0.75:
                spans = self.rng.choice(self.conversations)
                if sum(c for _, c in spans) < 1200:
                    spans.append(self.new_span())
            else:
                conv = self.rng.choice(self.conversations)
                spans = conv[:self.rng.randint(1, len(conv))]
            spans = tuple(tuple(s) for s in spans)
            rid = "w%d.%d.%d" % (self.launches, i, len(spans))
            by_id[rid] = spans
            self.prompts.add(spans)
            request = {"id": rid, "spans": [list(s) for s in spans]}
            if self.rng.random() < 0.15:
                request["settle"] = True
            lines.append(request)
        return lines, by_id

    def restores_first(self, lines, by_id):
        """With a disk limit, the trace opens with a restore of every
        committed checkpoint: the run then watches each, and logs it when
        the policy evicts it or drops its row (the run can only watch what
        it stored or restored itself)."""
        if not self.disk_limit:
            return lines, by_id
        keys = sorted(self.committed)
        self.rng.shuffle(keys)
        first = []
        for i, key in enumerate(keys):
            rid = "r%d.%d" % (self.launches + 1, i)
            by_id[rid] = key
            first.append({"id": rid, "spans": [list(s) for s in key]})
        return first + lines, by_id

    def write_trace(self, requests, name):
        path = os.path.join(self.root, name)
        with open(path, "w") as f:
            for r in requests:
                f.write(json.dumps(r) + "\n")
        return path

    def absorb(self, stored_log, by_id, drops_expected=False, also=None):
        """Adds the checkpoints a run reported stored to what is committed
        (and to also, a copy a check holds), and takes out those it
        reported evicted (or, with drops_expected, dropped after an injected
        error). Returns what the log said: counts,
        whether it ends inside a publication (a kill there may have evicted
        what no line names), and the index's last figures."""
        info = {"stored": 0, "evicted": 0, "dropped": 0, "dropped kept": 0,
                "in_publish": False, "index": None}
        try:
            with open(stored_log) as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return info
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                continue      # the last line of a killed run, cut short
            if "publishing" in entry or "published" in entry:
                info["in_publish"] = "publishing" in entry
                continue
            if "index" in entry:
                info["index"] = entry["index"]
                continue
            spans = by_id.get(entry["id"])
            if spans is None:
                raise Failure("stored log names unknown request %r" % entry["id"])
            at, prefix = 0, []
            for s in spans:
                if at >= entry["consumed"]:
                    break
                prefix.append(s)
                at += s[1]
            if at != entry["consumed"]:
                raise Failure("stored %d tokens of %r: not a span boundary" %
                              (entry["consumed"], entry["id"]))
            sets = [self.committed] + ([also] if also is not None and also is not self.committed
                                       else [])
            if entry.get("evicted") or (entry.get("dropped") and drops_expected):
                for c in sets:
                    c.pop(tuple(prefix), None)
                info["evicted" if entry.get("evicted") else "dropped"] += 1
            elif entry.get("dropped"):
                info["dropped kept"] += 1   # still committed: a loss if it is missing
            else:
                for c in sets:
                    c[tuple(prefix)] = at
                info["stored"] += 1
        return info

    def expected(self, prompt):
        """The tokens a restore of prompt must reach: its deepest committed prefix."""
        best = 0
        for key, consumed in self.committed.items():
            if len(key) <= len(prompt) and prompt[:len(key)] == key:
                best = max(best, consumed)
        return best

    def verification(self, committed=None):
        """Requests whose restores cover every committed checkpoint: for each
        committed prefix that no other extends, the longest prompt asked
        through it (a longer record stored but not reported may have taken
        its row)."""
        committed = self.committed if committed is None else committed
        keys = list(committed)
        maximal = [k for k in keys
                   if not any(len(o) > len(k) and o[:len(k)] == k for o in keys)]
        prompts = set()
        for k in maximal:
            through = [p for p in self.prompts if len(p) >= len(k) and p[:len(k)] == k]
            prompts.add(max(through, key=len) if through else k)
        prompts = sorted(prompts)
        self.rng.shuffle(prompts)
        return prompts

    # ---- one launch, and the checks after a restart
    def launch(self, trace, extra=(), rank_env=None, dirs=None, check=False,
               every_rank_env=None):
        """A run of trace; the lane's disk limit applies unless it is a
        check's (those evict nothing, so a shortfall is a loss)."""
        if self.disk_limit and not check:
            extra = ["--disk-limit", self.disk_limit] + list(extra)
        self.launches += 1
        tag = "l%d" % self.launches
        log = os.path.join(self.root, tag + ".out")
        stored = os.path.join(self.root, tag + ".stored")
        results = os.path.join(self.root, tag + ".results")
        argv = ["--trace", trace, "--dir", self.base_arg(dirs), "--stored-log", stored,
                "--results", results] + RUN_ARGS + list(extra)
        run = Launch(self.program, self.root, argv, log, rank_env, every_rank_env)
        run.stored, run.results = stored, results
        return run

    def restart_and_check(self, why, committed=None, dirs=None, allow_missing=False,
                          prompts=None, tolerate=(), gone_ok=False, killed=False):
        """A restart restoring every committed checkpoint, byte-exact on every
        rank: each on its own, longest first (so that the GPU cache holds
        none of its prefix and all of it comes from the disk), then the
        longest prompt through each deepest one; then the ranks' files agree
        and verify, and hold no record the index does not know.

        With gone_ok (the killed run's log ended inside a publication, which
        may have evicted what no line names) a shortfall takes the
        checkpoints out of what is committed, counted. With killed (a rank
        or mpirun was killed), a checkpoint whose row alone is gone, while a
        deeper record through it restores, is counted and taken out too: a
        child that committed as the kill landed drops its parent's row
        (seed 2.3) before the log could say so. Returns the launch."""
        committed = self.committed if committed is None else committed
        if prompts is None:
            keys = sorted(committed, key=lambda k: (-committed[k], k))
            prompts = keys + self.verification(committed)
        by_id, requests = {}, []
        for i, p in enumerate(prompts):
            rid = "v%d.%d" % (self.launches + 1, i)
            by_id[rid] = p
            requests.append({"id": rid, "spans": [list(s) for s in p]})
        if not requests:
            requests.append({"id": "v-empty", "spans": [[7, 32]]})
            by_id["v-empty"] = ((7, 32),)
            self.prompts.add(((7, 32),))
        trace = self.write_trace(requests, "verify%d.jsonl" % (self.launches + 1))
        run = self.launch(trace, dirs=dirs, check=True)
        rc = run.wait(LAUNCH_TIMEOUT_S)
        out = run.output()
        if rc is None:
            raise Failure("%s: the restart hung (over %d s):\n%s" % (why, LAUNCH_TIMEOUT_S, out))
        check_no_crash(out, why + ": restart")
        if rc != 0:
            raise Failure("%s: the restart failed (exit %d):\n%s" % (why, rc, out))
        results = read_results(run.results)
        reached = {}
        for rid, p in by_id.items():
            got = results.get(rid)
            if got is not None:
                reached[p] = max(reached.get(p, 0), got["gpu_reused"] + got["host_reused"])
        for rid, p in by_id.items():
            got = results.get(rid)
            want = committed_depth(committed, p)
            if got is None:
                raise Failure("%s: no result for %s" % (why, rid))
            if not got["verified"]:
                raise Failure("%s: %s not verified:\n%s" % (why, rid, out))
            reused = got["gpu_reused"] + got["host_reused"]
            key = next((k for k in committed if committed[k] == want and
                        p[:len(k)] == k), None)
            if (reused < want and killed and key is not None and len(key) >= 2 and
                    any(q[:len(key)] == key and r > want for q, r in reached.items())):
                del committed[key]
                self.table.add(self.section, "row gone with a child the kill left unlogged")
                continue
            if reused < want and gone_ok:
                for key in [k for k in committed if len(k) <= len(p) and p[:len(k)] == k and
                            committed[k] > reused]:
                    del committed[key]
                    self.table.add(self.section, "gone inside the killed publication")
                continue
            if reused < want and not allow_missing:
                raise Failure("%s: committed record lost: %s restored %d tokens, %d were "
                              "reported stored (spans %s)\n%s" % (why, rid, reused, want, list(p), out))
        info = self.absorb(run.stored, by_id, also=committed)
        self.check_agreement(why, dirs, tolerate, info["index"])
        return run

    def check_agreement(self, why, dirs=None, tolerate=(), index=None):
        """Every rank holds the same record names and lengths and each
        verifies, except the files in tolerate (damaged on purpose and never
        read since: no restore went through them); and, given the index's
        figures at a clean close, as many records as it knew."""
        dirs = dirs or self.dirs
        listings = [listing(os.path.join(dirs, "rank%d" % r)) for r in range(RANKS)]
        if index is not None and index["records"] != len(listings[0]):
            raise Failure("%s: rank 0 holds %d record files, the index knew %d at the close"
                          % (why, len(listings[0]), index["records"]))
        for r in range(1, RANKS):
            if listings[r] != listings[0]:
                only0 = sorted(set(listings[0].items()) - set(listings[r].items()))[:5]
                onlyr = sorted(set(listings[r].items()) - set(listings[0].items()))[:5]
                raise Failure("%s: rank %d's record files differ from rank 0's: rank 0 only %s, "
                              "rank %d only %s" % (why, r, only0, r, onlyr))
        for r in range(RANKS):
            d = os.path.join(dirs, "rank%d" % r)
            if not os.path.isdir(d):
                continue
            p = subprocess.run([self.program, "verify", d], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=120)
            out = p.stdout.decode("utf-8", "replace")
            bad = {os.path.basename(m.group(1)) for m in re.finditer(r"^BAD (.*?\.ckpt):", out, re.M)}
            if p.returncode == 1 and bad and bad <= set(tolerate):
                self.table.add("corrupt", "damaged file left unread")
                continue
            if p.returncode != 0:
                raise Failure("%s: selene verify failed on rank %d:\n%s" % (why, r, out[-3000:]))

    # ---- kill -9
    def kill_try(self, seed):
        self.section = "kill-evict" if self.disk_limit else "kill"
        if self.kills >= self.cycle_kills:
            self.fresh()
        self.kills += 1
        lines, by_id = self.restores_first(*self.workload(self.rng.randint(12, 24)))
        trace = self.write_trace(lines, "work%d.jsonl" % (self.launches + 1))
        target = self.rng.choice(["rank0", "rank1", "rank2", "mpirun"])
        # mostly while it stores and restores (after its first store was
        # reported), sometimes while it starts (scan, join, agreement)
        at_startup = self.rng.random() < 0.2
        delay = self.rng.uniform(0.0, self.duration_s * (2.0 if at_startup else 0.9))
        run = self.launch(trace)
        landed = False
        while not at_startup and run.proc.poll() is None and not size_or0(run.stored):
            time.sleep(0.02)
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline and run.proc.poll() is None:
            time.sleep(0.02)
        if target == "mpirun" and run.proc.poll() is None:
            os.kill(run.proc.pid, signal.SIGKILL)
            landed = True
        while target != "mpirun" and run.proc.poll() is None:
            pid = run.rank_pids().get(int(target[4:]))
            if pid:  # (not yet there: mpirun is still starting it)
                try:
                    os.kill(pid, signal.SIGKILL)
                    landed = True
                except ProcessLookupError:
                    pass
                break
            time.sleep(0.02)
        rc = run.wait(KILL_WAIT_S if landed else LAUNCH_TIMEOUT_S)
        out = run.output()
        if not landed:
            m = re.search(r"requests on \d+ ranks \(host device\) in ([0-9.]+) s", out)
            if m:
                self.duration_s = 0.7 * self.duration_s + 0.3 * float(m.group(1))
            check_no_crash(out, "kill seed %d: the workload" % seed)
            if rc != 0:
                raise Failure("kill seed %d: the workload failed with no fault (exit %s):\n%s"
                              % (seed, rc, out))
        if "WRONG BYTES" in out:
            raise Failure("kill seed %d: wrong bytes before the kill:\n%s" % (seed, out))
        info = self.absorb(run.stored, by_id)
        section = self.section
        self.table.add(section, "tries")
        self.table.add(section, ("killed %s%s" % (target, " at startup" if at_startup else ""))
                       if landed else "finished first")
        if self.disk_limit:
            self.table.add(section, "evicted or compacted (logged)", info["evicted"])
            if landed and info["evicted"]:
                self.table.add(section, "killed after evictions")
            if landed and info["in_publish"]:
                self.table.add(section, "killed inside a publication")
        self.restart_and_check("kill seed %d (%s, %.2f s after %s%s)" % (
            seed, target, delay, "launch" if at_startup else "its first store",
            ", disk limit %s" % self.disk_limit if self.disk_limit else ""),
            gone_ok=landed and info["in_publish"], killed=landed)
        self.table.add(section, "restarts ok")

    # ---- failpoints
    def seeded_dirs(self, seed):
        """Fresh directories holding records, a leftover temporary file, a
        record whose header is broken and an orphan, for the scan's points.
        The records are made once per lane and copied for each try."""
        snapshot = os.path.join(self.root, "seeded")
        if not os.path.isdir(snapshot):
            self.fresh()
            lines, by_id = self.workload(10)
            # token counts no workload prompt reaches (their file names say them)
            bait_a = ((123456789, 2003),)
            bait_b = ((987654321, 2005), (55, 32))
            for rid, spans in (("bait-a", bait_a), ("bait-b", bait_b)):
                lines.append({"id": rid, "settle": True, "spans": [list(s) for s in spans]})
                by_id[rid] = spans
            trace = self.write_trace(lines, "seed%d.jsonl" % (self.launches + 1))
            run = self.launch(trace)
            rc = run.wait(LAUNCH_TIMEOUT_S)
            if rc != 0:
                raise Failure("seed %d: seeding the store failed (exit %s):\n%s" %
                              (seed, rc, run.output()))
            self.absorb(run.stored, by_id)
            for key in list(self.committed):
                if key[0][0] in (123456789, 987654321):
                    del self.committed[key]
            shutil.copytree(self.dirs, snapshot, symlinks=True)
            self.seeded = (dict(self.committed), set(self.prompts),
                           [list(c) for c in self.conversations])
        self.fresh()
        os.rmdir(self.dirs)
        shutil.copytree(snapshot, self.dirs, symlinks=True)
        committed, prompts, conversations = self.seeded
        self.committed = dict(committed)
        self.prompts = set(prompts)
        self.conversations = [list(c) for c in conversations]
        # the bait records: the newest files; break one header, orphan another
        for r in range(RANKS):
            files = record_files(os.path.join(self.dirs, "rank%d" % r))
            by_len = {}
            for path in files:
                by_len.setdefault(int(os.path.basename(path)[:16], 16), []).append(path)
            for path in by_len.get(2003, []):
                flip_bit(path, 200 * 8)   # a header byte: invalid at the scan
            for path in by_len.get(2005, []):
                os.unlink(path)           # the parent of the 2037-token child: orphan
            d = os.path.dirname(files[0])
            with open(os.path.join(d, os.path.basename(files[0]) + ".tmp"), "wb") as f:
                f.write(b"\0" * 8192)

    def failpoint_try(self, seed, name, action, role):
        self.section = "failpoint"
        self.seeded_dirs(seed)
        lines, by_id = self.workload(16)
        trace = self.write_trace(lines, "fp%d.jsonl" % (self.launches + 1))
        value = "%s=%s" % (name, "kill" if action == "kill" else
                           "1*off->2*return(EIO)" if name.startswith("cluster.") else
                           "return(EIO)")
        rank = 0 if role == "rank0" else self.rng.randint(1, RANKS - 1)
        # the disk bounds its kernel workers only where it has some: where
        # the kernel copies on the CPU (tmpfs, buffered I/O), or when told
        workers = {"SELENE_IO_THREADS": "2"} if name == "disk.io_workers" else None
        run = self.launch(trace, rank_env=(rank, value), every_rank_env=workers)
        rc = run.wait(LAUNCH_TIMEOUT_S)
        out = run.output()
        why = "failpoint seed %d (%s on rank %d)" % (seed, value, rank)
        self.table.add("failpoint", "tries")
        if rc is None:
            raise Failure("%s: the run hung (over %d s):\n%s" % (why, LAUNCH_TIMEOUT_S, out))
        if "WRONG BYTES" in out:
            raise Failure("%s: wrong bytes:\n%s" % (why, out))
        if action == "error":
            check_no_crash(out, why)
        info = self.absorb(run.stored, by_id, drops_expected=action == "error")
        # a kill that fired ends the run; an error may be recovered from
        self.table.add("failpoint", "%s: run %s" % (action, "failed" if rc else "passed"))
        hit = failpoint_fired(run.output(1 << 22), rc, name, action, rank)
        self.table.mark_fired(name, action, role, hit)
        self.table.add("failpoint", "fired" if hit else "not fired")
        self.restart_and_check(why, gone_ok=action == "kill" and info["in_publish"],
                               killed=action == "kill" and rc != 0)
        self.table.add("failpoint", "restarts ok")
        self.fresh()

    # ---- failpoints of eviction and compaction, on a store kept full
    def seeded_full_dirs(self, seed):
        """Fresh directories whose records fill the lane's disk limit, so
        that the next publication evicts or compacts; made once per lane
        and copied for each try."""
        snapshot = os.path.join(self.root, "seeded-full")
        if not os.path.isdir(snapshot):
            self.fresh()
            for _ in range(2):
                lines, by_id = self.restores_first(*self.workload(24))
                run = self.launch(self.write_trace(lines, "full%d.jsonl" % (self.launches + 1)))
                rc = run.wait(LAUNCH_TIMEOUT_S)
                if rc != 0:
                    raise Failure("seed %d: filling the store failed (exit %s):\n%s" %
                                  (seed, rc, run.output()))
                self.absorb(run.stored, by_id)
            shutil.copytree(self.dirs, snapshot, symlinks=True)
            self.seeded_full = (dict(self.committed), set(self.prompts),
                                [list(c) for c in self.conversations])
        self.fresh()
        os.rmdir(self.dirs)
        shutil.copytree(snapshot, self.dirs, symlinks=True)
        committed, prompts, conversations = self.seeded_full
        self.committed = dict(committed)
        self.prompts = set(prompts)
        self.conversations = [list(c) for c in conversations]

    def evict_failpoint_try(self, seed, name, action, rank):
        """name armed with kill or an error on one rank while the store
        evicts and compacts; then the restart's checks. A run that met no
        such operation on that rank (they follow the timing of commits) is
        tried again, up to 3 times."""
        for _ in range(3):
            if self.evict_failpoint_once(seed, name, action, rank):
                return

    def evict_failpoint_once(self, seed, name, action, rank):
        self.section = "fp-evict"
        self.seeded_full_dirs(seed)
        lines, by_id = self.restores_first(*self.workload(20))
        trace = self.write_trace(lines, "fpe%d.jsonl" % (self.launches + 1))
        value = "%s=%s" % (name, "kill" if action == "kill" else "return(EIO)")
        run = self.launch(trace, rank_env=(rank, value))
        rc = run.wait(LAUNCH_TIMEOUT_S)
        out = run.output()
        why = "evicting failpoint seed %d (%s on rank %d, disk limit %s)" % (
            seed, value, rank, self.disk_limit)
        self.table.add(self.section, "tries")
        if rc is None:
            raise Failure("%s: the run hung (over %d s):\n%s" % (why, LAUNCH_TIMEOUT_S, out))
        if "WRONG BYTES" in out:
            raise Failure("%s: wrong bytes:\n%s" % (why, out))
        if action == "error":
            check_no_crash(out, why)
        info = self.absorb(run.stored, by_id, drops_expected=action == "error")
        hit = failpoint_fired(run.output(1 << 22), rc, name, action, rank)
        self.table.mark_fired(name, action, "rank%d" % rank, hit)
        self.table.add(self.section, "%s on rank %d %s" % (
            action, rank, "fired" if hit else "NOT FIRED"))
        self.table.add(self.section, "evicted or compacted (logged)", info["evicted"])
        self.table.add(self.section, "dropped after the error (logged)", info["dropped"])
        self.restart_and_check(why, gone_ok=action == "kill" and info["in_publish"],
                               killed=action == "kill" and rc != 0)
        self.table.add(self.section, "restarts ok")
        self.fresh()
        return hit

    # ---- a transient read error in the startup scan, then a clean start
    def read_eio_try(self, seed, rank, skip):
        """The scan caches deleted (so that the scan reads every header),
        one read of the startup on one rank fails once with EIO; the run
        may fail, but the clean start after it restores every committed
        checkpoint: a transient error loses nothing."""
        self.section = "read-eio"
        self.seeded_dirs(seed)
        for r in range(RANKS):
            for top, _, names in os.walk(os.path.join(self.dirs, "rank%d" % r)):
                if ".selene-scan-cache" in names:
                    os.unlink(os.path.join(top, ".selene-scan-cache"))
        prompts = self.verification()
        requests, by_id = [], {}
        for i, p in enumerate(prompts):
            rid = "e%d.%d" % (self.launches + 1, i)
            by_id[rid] = p
            requests.append({"id": rid, "spans": [list(s) for s in p]})
        trace = self.write_trace(requests, "eio%d.jsonl" % (self.launches + 1))
        value = "disk.read=%sreturn(EIO)" % ("%d*off->1*" % skip if skip else "1*")
        run = self.launch(trace, rank_env=(rank, value))
        rc = run.wait(LAUNCH_TIMEOUT_S)
        out = run.output()
        why = "read-eio seed %d (%s on rank %d at startup)" % (seed, value, rank)
        self.table.add(self.section, "tries")
        if rc is None:
            raise Failure("%s: the run hung (over %d s):\n%s" % (why, LAUNCH_TIMEOUT_S, out))
        check_no_crash(out, why)
        if "WRONG BYTES" in out:
            raise Failure("%s: wrong bytes:\n%s" % (why, out))
        if not failpoint_fired(run.output(1 << 22), rc, "disk.read", "error", rank):
            raise Failure("%s: the read error never fired:\n%s" % (why, out))
        self.table.add(self.section, "rank %d: run %s" % (rank, "failed" if rc else "passed"))
        self.absorb(run.stored, by_id)
        self.restart_and_check(why + ": the clean start")
        self.table.add(self.section, "clean start restored all")
        self.fresh()

    # ---- corruption of records, then restores
    def corrupt_try(self, seed, kind):
        self.seeded_dirs(seed)
        committed = dict(self.committed)
        rank = self.rng.randrange(RANKS)
        files = [f for f in record_files(os.path.join(self.dirs, "rank%d" % rank))
                 if int(os.path.basename(f)[:16], 16) < 2003]   # not the bait
        path = self.rng.choice(files)
        size = os.path.getsize(path)
        before = {f: os.path.getsize(f) for f in files}
        what = corrupt(self.rng, kind, path, size, files)
        touched = {os.path.basename(path)} | {
            os.path.basename(f) for f in files if kind == "swapnames" and
            (not os.path.exists(f) or os.path.getsize(f) != before[f])}
        why = "corrupt seed %d (%s on rank %d)" % (seed, what, rank)
        self.table.add("corrupt", "tries")
        # restores of every committed record: refused or harmless, never wrong
        prompts = self.verification(committed)
        requests, by_id = [], {}
        for i, p in enumerate(prompts):
            rid = "c%d.%d" % (self.launches + 1, i)
            by_id[rid] = p
            requests.append({"id": rid, "spans": [list(s) for s in p]})
        trace = self.write_trace(requests, "corrupt%d.jsonl" % (self.launches + 1))
        run = self.launch(trace)
        rc = run.wait(LAUNCH_TIMEOUT_S)
        out = run.output()
        if rc is None:
            raise Failure("%s: the restore run hung:\n%s" % (why, out))
        check_no_crash(out, why)
        results = read_results(run.results)
        summary = results.get("summary", {})
        if "WRONG BYTES" in out or summary.get("wrong_units", 0):
            raise Failure("%s: WRONG BYTES restored:\n%s" % (why, out))
        short = [rid for rid, p in by_id.items() if rid in results and
                 results[rid]["gpu_reused"] + results[rid]["host_reused"] <
                 committed_depth(committed, p)]
        refused = rc != 0 or short
        self.table.add("corrupt", ("refused " if refused else "harmless ") + kind)
        self.absorb(run.stored, by_id, also=committed)
        # the next run finds the corrupted record gone and stores it again;
        # the one after restores everything
        self.restart_and_check(why + ": the run after", committed=committed,
                               allow_missing=True, prompts=prompts, tolerate=touched)
        # (the same restores: one of a checkpoint on its own could read a
        # damaged file that no restore went through, so never removed)
        self.restart_and_check(why + ": stored again", committed=committed, prompts=prompts,
                               tolerate=touched)
        self.table.add("corrupt", "stored again ok")
        self.fresh()  # a damaged file left unread must not meet the next kill's checks


class SectionTable:
    """The table as a warm lane sees it: every section it counts on gets
    the lane's suffix (its own lines), and a failpoint it arms does not
    join the plain loops' fired-or-not bookkeeping (a warm pass draws one
    action and role per failpoint; its fired count is on its own line)."""

    def __init__(self, table, suffix):
        self.table, self.suffix = table, suffix

    def add(self, section, outcome, n=1):
        self.table.add(section + self.suffix, outcome, n)

    def note(self, section, text):
        self.table.note(section + self.suffix, text)

    def fail(self, section, text):
        self.table.fail(section + self.suffix, text)

    def mark_fired(self, name, action, role, fired):
        pass


class WarmLane(Lane):
    """A lane whose every run has a warm tier (WARM_BYTES on every rank,
    the given write policy), small enough that stores spill and evict
    warm records and restores read through from the disk. A checkpoint is
    committed once the stored log says it reached the disk ("on_disk"),
    or once a run that stored it ended cleanly with nothing lost in the
    close's drain (a write-behind run's records reach the disk there, and
    the drain reports no events); a STORED line alone (restorable from
    warm slots) need not survive a kill."""

    def __init__(self, index, program, root, seed, table, policy, disk_limit=None):
        self.policy = policy
        self.runs = {}   # stored log -> its launch, for absorb
        super().__init__(index, program, os.path.join(root, "warm-" + WARM_POLICIES[policy]),
                         seed, SectionTable(table, "+" + WARM_POLICIES[policy]), disk_limit)

    def launch(self, trace, extra=(), **kw):
        run = super().launch(trace, ["--warm", WARM_BYTES, "--warm-policy", self.policy] +
                             list(extra), **kw)
        self.runs[run.stored] = run
        return run

    def absorb(self, stored_log, by_id, drops_expected=False, also=None):
        run = self.runs.pop(stored_log, None)
        clean = (run is not None and run.proc.returncode == 0 and
                 "are lost" not in run.output(1 << 22))
        try:
            with open(stored_log) as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            lines = []
        kept, warm_only, on_disk, late, gone = [], 0, 0, 0, set()
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                continue      # the last line of a killed run, cut short
            key = (entry.get("id"), entry.get("consumed"))
            if entry.get("evicted") or entry.get("dropped"):
                gone.add(key)
            elif "id" in entry and not entry.get("on_disk"):
                gone.discard(key)   # stored again
                if not clean:
                    warm_only += 1
                    continue
            elif entry.get("on_disk"):
                # A dirty record whose row a child's commit dropped (or
                # which the policy evicted) is logged gone, then written:
                # its file is on disk, but it no longer restores whole.
                if key in gone:
                    late += 1
                    continue
                on_disk += 1
            kept.append(line)
        self.table.add(self.section, "on-disk lines", on_disk)
        self.table.add(self.section, "on disk after its evicted line", late)
        self.table.add(self.section, "stored, not on disk at the kill (not committed)", warm_only)
        path = stored_log + ".on-disk"
        with open(path, "w") as f:
            f.write("".join(line + "\n" for line in kept))
        info = super().absorb(path, by_id, drops_expected, also)
        if clean:
            self.drained_row_drops(kept, by_id, also)
        return info

    def drained_row_drops(self, kept, by_id, also):
        """A record written in the close's drain drops its parent's row
        there, after the run's last look for rows gone (the stored log
        cannot say so): the deepest committed checkpoint through which a
        record of this run was stored no longer restores whole, only its
        child does (which stays committed, and whose restore reads the
        parent's pages)."""
        stored = set()
        for line in kept:
            entry = json.loads(line)
            spans = by_id.get(entry.get("id"))
            if spans is None or entry.get("evicted") or entry.get("dropped"):
                continue
            at, prefix = 0, []
            for s in spans:
                if at >= entry["consumed"]:
                    break
                prefix.append(s)
                at += s[1]
            stored.add(tuple(prefix))
        for c in [self.committed] + ([also] if also is not None and also is not self.committed
                                     else []):
            parents = set()
            for p in stored:
                through = [k for k in c if len(k) < len(p) and p[:len(k)] == k]
                if through:
                    parents.add(max(through, key=len))
            for k in parents:
                del c[k]
                if c is self.committed:
                    self.table.add(self.section, "row dropped in the close's drain")

    def failpoint_try(self, seed, name, action, role):
        self.section = "failpoint"
        super().failpoint_try(seed, name, action, role)

    def corrupt_try(self, seed, kind):
        self.section = "corrupt"
        super().corrupt_try(seed, kind)


def warm_tasks(rng, quick, plain_points):
    """The warm variants of the fault loops, for each write policy: a
    fraction of the kills, one pass over the failpoints (action and role
    drawn), the evicting points once each, a read error at startup on
    each rank and two corruptions (TORTURE_WARM=0: none;
    TORTURE_WARM_KILLS, TORTURE_WARM_EVICT_KILLS per policy)."""
    if os.environ.get("TORTURE_WARM", "") == "0":
        return []
    kills = env_int("TORTURE_WARM_KILLS", 3 if quick else 12)
    evict_kills = env_int("TORTURE_WARM_EVICT_KILLS", 2 if quick else 6)
    tasks = []
    for short in WARM_POLICIES.values():
        points = rng.sample(plain_points, (len(plain_points) + 3) // 4) if quick else plain_points
        evict = rng.sample(EVICT_POINTS, 2) if quick else EVICT_POINTS
        tasks += [("kill+" + short, None)] * kills
        tasks += [("kill-evict+" + short, None)] * evict_kills
        tasks += [("failpoint+" + short, (n, rng.choice(("kill", "error")),
                                          rng.choice(("rank0", "peer")))) for n in points]
        tasks += [("fp-evict+" + short, (n, rng.choice(("kill", "error")),
                                         str(rng.randrange(RANKS)))) for n in evict]
        tasks += [("read-eio+" + short, (str(r), str(rng.randrange(READ_EIO_READS))))
                  for r in (range(RANKS) if not quick else [rng.randrange(RANKS)])]
        tasks += [("corrupt+" + short, rng.choice(CORRUPTIONS)) for _ in range(1 if quick else 2)]
    return tasks


def warm_lane_for(lanes, kind, index, program, root, seed, table):
    """The lane a warm task (kind "LOOP+wt" or "LOOP+wb") runs on, made on
    first use: one per policy and workload (plain or evicting) per lane."""
    loop, short = kind.split("+")
    policy = next(p for p, s in WARM_POLICIES.items() if s == short)
    evicting = loop in ("kill-evict", "fp-evict")
    key = (short, evicting)
    if key not in lanes:
        lanes[key] = WarmLane(index, program, root, seed * 1000 + (700 if evicting else 600) +
                              10 * len(lanes) + index, table, policy,
                              disk_limit=EVICT_DISK_LIMIT if evicting else None)
    return lanes[key], loop


def failpoint_fired(out, rc, name, action, rank):
    """Whether an armed failpoint was met: a kill ends its rank by SIGKILL
    (mpirun says so); an error is counted by the rank's `selene run`, which
    names what fired as it ends."""
    if action == "kill":
        return rc not in (0, None) and "exited on signal 9" in out
    return re.search(r"rank %d: failpoint %s fired" % (rank, re.escape(name)), out) is not None


def committed_depth(committed, prompt):
    best = 0
    for key, consumed in committed.items():
        if len(key) <= len(prompt) and prompt[:len(key)] == key:
            best = max(best, consumed)
    return best


def corrupt(rng, kind, path, size, files):
    """Damages path; returns what it did, for messages."""
    if kind == "bitflip":
        bit = rng.randrange(HEADER_BYTES * 8, size * 8)
        flip_bit(path, bit)
        return "bit %d of %s flipped" % (bit, os.path.basename(path))
    if kind == "copypage":
        blocks = size // PAGE_BYTES
        if blocks < 3:
            flip_bit(path, (size - 1) * 8)
            return "last byte of %s flipped (too small to copy a page)" % os.path.basename(path)
        src, dst = rng.sample(range(1, blocks), 2)
        other = rng.choice(files)
        source = other if os.path.getsize(other) > src * PAGE_BYTES + PAGE_BYTES else path
        with open(source, "rb") as f:
            f.seek(src * PAGE_BYTES)
            data = f.read(PAGE_BYTES)
        with open(path, "r+b") as f:
            f.seek(dst * PAGE_BYTES)
            f.write(data)
        return "block %d of %s copied over block %d of %s" % (
            src, os.path.basename(source), dst, os.path.basename(path))
    if kind == "swapnames":
        others = [f for f in files if f != path]
        if not others:
            os.truncate(path, size // 2)
            return "%s truncated (no other record to swap with)" % os.path.basename(path)
        other = rng.choice(others)
        tmp = path + ".swap"
        os.rename(path, tmp)
        os.rename(other, path)
        os.rename(tmp, other)
        return "%s and %s swapped" % (os.path.basename(path), os.path.basename(other))
    if kind == "truncate":
        length = rng.randrange(0, size)
        os.truncate(path, length)
        return "%s truncated to %d of %d bytes" % (os.path.basename(path), length, size)
    if kind == "zeroblock":
        block = rng.randrange(0, max(1, size // PAGE_BYTES))
        with open(path, "r+b") as f:
            f.seek(block * PAGE_BYTES)
            f.write(b"\0" * min(PAGE_BYTES, size - block * PAGE_BYTES))
        return "block %d of %s zeroed" % (block, os.path.basename(path))
    raise ValueError(kind)


CORRUPTIONS = ("bitflip", "copypage", "swapnames", "truncate", "zeroblock")


def flip_bit(path, bit):
    with open(path, "r+b") as f:
        f.seek(bit // 8)
        byte = f.read(1)[0]
        f.seek(bit // 8)
        f.write(bytes([byte ^ (1 << (bit % 8))]))


def record_files(d):
    found = []
    for top, _, names in os.walk(d):
        found += [os.path.join(top, n) for n in names if n.endswith(".ckpt")]
    return sorted(found)


def listing(d):
    return {os.path.basename(p): os.path.getsize(p) for p in record_files(d)}


def read_results(path):
    results = {}
    try:
        with open(path) as f:
            for line in f:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if "summary" in entry:
                    results["summary"] = entry["summary"]
                else:
                    results[entry["id"]] = entry
    except FileNotFoundError:
        pass
    return results


def check_no_crash(out, why):
    for word in CRASH_WORDS:
        if word in out:
            raise Failure("%s: crashed (%s):\n%s" % (why, word, out))
    if "exited on signal" in out and "signal 9" not in out:
        raise Failure("%s: a rank died by a signal:\n%s" % (why, out))


# ---- the header: every bit, verify refuses each
def header_flips(program, root, source, table, bits, batch=4096):
    flips = os.path.join(root, "flips")
    rec_dir = os.path.basename(os.path.dirname(source))
    name = os.path.basename(source)
    with open(source, "rb") as f:
        data = bytearray(f.read())
    for start in range(0, len(bits), batch):
        shutil.rmtree(flips, ignore_errors=True)
        chunk = bits[start:start + batch]
        for bit in chunk:
            d = os.path.join(flips, "b%05d" % bit, rec_dir)
            os.makedirs(d)
            data[bit // 8] ^= 1 << (bit % 8)
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
            data[bit // 8] ^= 1 << (bit % 8)
        p = subprocess.run([program, "verify", flips], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=600)
        out = p.stdout.decode("utf-8", "replace")
        bad = {m.group(1) for m in re.finditer(r"^BAD .*/flips/b(\d{5})/", out, re.M)}
        missed = [bit for bit in chunk if "%05d" % bit not in bad]
        table.add("header", "tries", len(chunk))
        table.add("header", "refused", len(chunk) - len(missed))
        if missed or p.returncode != 1:
            raise Failure("header: selene verify accepted header bit(s) %s flipped (exit %d):\n%s"
                          % (missed[:10], p.returncode, out[-2000:]))
    shutil.rmtree(flips, ignore_errors=True)


# ---- the join storm
def join_storm(program, root, table, rng, seconds_max=60):
    base = os.path.join(root, "storm")
    os.makedirs(base)
    secret = os.path.join(base, "secret")
    wrong = os.path.join(base, "wrong-secret")
    for path in (secret, wrong):  # mode 0600: a secret others may read is refused
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
            f.write(os.urandom(32))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, SELENE_WORLD_SIZE=str(RANKS), SELENE_COORDINATOR="127.0.0.1:%d" % port,
               SELENE_SECRET_FILE=secret, SELENE_LOG="warn")
    env.pop("SELENE_FAILPOINTS", None)
    stop = threading.Event()
    counts = collections.Counter()
    idle = []

    def connect():
        c = socket.create_connection(("127.0.0.1", port), timeout=1)
        return c

    def storm():
        while not stop.is_set():
            kind = rng.choice(["scan", "idle", "garbage", "truncated"])
            try:
                c = connect()
            except OSError:
                time.sleep(0.01)
                continue
            counts[kind] += 1
            try:
                if kind == "idle" and len(idle) < 32:
                    idle.append(c)
                    continue
                if kind == "garbage":
                    c.sendall(os.urandom(rng.randint(1, 4096)))
                elif kind == "truncated":
                    c.sendall(b"SELN" + os.urandom(rng.randint(0, 20)))
            except OSError:
                pass
            c.close()
            time.sleep(0.005)

    def bad_macs():
        # after the first connections of the other kinds, so that each kind
        # meets the port (a join that falls to one bad MAC stops there)
        until = time.monotonic() + 10
        while not stop.is_set() and sum(counts.values()) < 40 and time.monotonic() < until:
            time.sleep(0.05)
        while not stop.is_set():
            bad_env = dict(env, SELENE_RANK=str(rng.randint(1, RANKS - 1)), SELENE_SECRET_FILE=wrong)
            p = subprocess.Popen([program, "cluster-demo", "--dir", os.path.join(base, "bad%r")],
                                 env=bad_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            counts["bad MAC"] += 1
            for _ in range(20):
                if stop.is_set() or p.poll() is not None:
                    break
                time.sleep(0.1)
            p.kill()
            p.wait()

    threads = [threading.Thread(target=storm), threading.Thread(target=bad_macs)]
    for t in threads:
        t.start()
    time.sleep(0.3)   # the storm first: rank zero opens its port into it
    ranks = []
    for r in range(RANKS):
        log = open(os.path.join(base, "rank%d.out" % r), "wb")
        ranks.append((subprocess.Popen([program, "cluster-demo", "--dir",
                                        os.path.join(base, "rank%r"), "--device", "host"],
                                       env=dict(env, SELENE_RANK=str(r)), stdout=log,
                                       stderr=subprocess.STDOUT), log))
    # every rank ends by the deadline; once one has failed, the others get
    # a few seconds to learn it (a hang past that is reported as exit None)
    deadline = time.monotonic() + seconds_max
    while time.monotonic() < deadline and any(p.poll() is None for p, _ in ranks):
        if any(p.poll() not in (None, 0) for p, _ in ranks):
            deadline = min(deadline, time.monotonic() + 5)
        time.sleep(0.05)
    rcs = []
    for p, log in ranks:
        hung = p.poll() is None
        if hung:
            p.kill()
        p.wait()
        rcs.append(None if hung else p.returncode)
        log.close()
    stop.set()
    for t in threads:
        t.join()
    for c in idle:
        c.close()
    table.add("storm", "tries")
    for kind, n in sorted(counts.items()):
        table.add("storm", "conn " + kind, n)
    if any(rc != 0 for rc in rcs):
        outs = []
        for r in range(RANKS):
            with open(os.path.join(base, "rank%d.out" % r), "rb") as f:
                outs.append("rank %d (exit %s): %s" % (
                    r, rcs[r], f.read()[-800:].decode("utf-8", "replace")))
        raise Failure("storm: formation did not complete under the storm:\n" + "\n".join(outs))
    table.add("storm", "formed")


# ---- The pool: faults of a pool manager (selene pool) and its clients
POOL_PAGES = 16            # one bench record: 16 pages of 4 planes of 64 KiB, 4 MiB
POOL_BENCH_S = 120         # a bench run past this is a hang
POOL_WRONG = "wrong bytes"  # what `selene bench pool` says of a claim that differs


class PoolManager:
    """One `selene pool` process on loopback with a disk tier, restartable."""

    def __init__(self, program, base, secret):
        self.program, self.base, self.secret = program, base, secret
        self.disk = os.path.join(base, "disk")
        os.makedirs(self.disk, exist_ok=True)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.address = "127.0.0.1:%d" % self.port
        self.proc, self.starts = None, 0
        self.disk_tier = pool_has_disk_tier(program)

    def start(self):
        self.starts += 1
        self.log = open(os.path.join(self.base, "manager%d.out" % self.starts), "wb")
        self.proc = subprocess.Popen(pool_manager_argv(self), stdout=self.log,
                                     stderr=subprocess.STDOUT,
                                     env=dict(os.environ, SELENE_LOG="info"))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise Failure("pool: the manager exited at start (%s):\n%s" %
                              (self.proc.returncode, self.output()))
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise Failure("pool: the manager did not listen within 20 s:\n" + self.output())

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        self.proc.kill()
        self.proc.wait()
        self.log.close()

    def stop(self):
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise Failure("pool: the manager did not drain within 30 s of SIGTERM")
        self.log.close()
        if self.proc.returncode != 0:
            raise Failure("pool: the manager exited %s on SIGTERM:\n%s" %
                          (self.proc.returncode, self.output()))

    def output(self):
        self.log.flush()
        with open(self.log.name, "rb") as f:
            return f.read()[-3000:].decode("utf-8", "replace")

    def records(self):
        found = []
        for d, _, names in os.walk(self.disk):
            found += [os.path.join(d, n) for n in names if n.endswith(".ckpt")]
        return sorted(found)


def pool_manager_argv(m):
    argv = [m.program, "pool", "--listen", m.address, "--name", "torture",
            "--secret", m.secret, "--memory", "64M"]
    return argv + (["--dir", m.disk] if m.disk_tier else [])


def pool_has_disk_tier(program):
    """Whether `selene pool` takes --dir (its disk tier) in this build."""
    text = subprocess.run([program, "pool", "--help"], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT).stdout.decode("utf-8", "replace")
    return "--dir" in text and "not built" not in text


def pool_bench(m, base, rounds, secret=None):
    """Starts `selene bench pool` against m; returns the process."""
    log = open(os.path.join(base, "bench-%d.out" % random.getrandbits(32)), "w+b")
    p = subprocess.Popen([m.program, "bench", "pool", "--dir", base, "--pages", str(POOL_PAGES),
                          "--rounds", str(rounds), "--manager", m.address,
                          "--pool-secret", secret or m.secret],
                         stdout=log, stderr=subprocess.STDOUT)
    p.log = log
    return p


def pool_bench_wait(p, what):
    """Waits for a bench; returns (exit status, output); a hang, a crash or a wrong byte fails."""
    try:
        p.wait(POOL_BENCH_S)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        raise Failure("pool: %s: selene bench pool hung past %d s" % (what, POOL_BENCH_S))
    p.log.seek(0)
    out = p.log.read().decode("utf-8", "replace")
    p.log.close()
    if POOL_WRONG in out or p.returncode < 0 or any(w in out for w in CRASH_WORDS):
        raise Failure("pool: %s: exit %s:\n%s" % (what, p.returncode, out[-3000:]))
    return p.returncode, out


def pool_hostile(m, rng, stop, counts, idle):
    """Hostile connections on the pool port until stop is set."""
    def frame_head(type_, length):  # SELP, version 1, a type, any length; checksums wrong
        return (b"SELP" + (1).to_bytes(2, "little") + type_.to_bytes(2, "little") +
                length.to_bytes(4, "little") + bytes(28))

    while not stop.is_set():
        kind = rng.choice(["scan", "idle", "garbage", "truncated", "oversized", "hello-only",
                           "slowloris", "cluster"])
        try:
            c = socket.create_connection(("127.0.0.1", m.port), timeout=1)
        except OSError:
            time.sleep(0.01)
            continue
        counts[kind] += 1
        try:
            if kind in ("idle", "hello-only", "slowloris") and len(idle) < 48:
                if kind == "hello-only":
                    c.sendall(frame_head(1, 32)[:rng.randint(1, 40)])
                idle.append((kind, c))
                continue
            if kind == "garbage":
                c.sendall(os.urandom(rng.randint(1, 65536)))
            elif kind == "truncated":
                c.sendall(b"SELP" + os.urandom(rng.randint(0, 30)))
            elif kind == "oversized":
                c.sendall(frame_head(rng.choice([1, 6, 13, 18]), rng.choice([1 << 30, 0xffffffff])))
            elif kind == "cluster":
                c.sendall(b"SELN" + os.urandom(36 + 32))
        except OSError:
            pass
        c.close()
        time.sleep(0.005)
        for kind_, c in list(idle):  # a byte now and then from each slowloris
            if kind_ == "slowloris":
                try:
                    c.send(b"S")
                except OSError:
                    idle.remove((kind_, c))
                    c.close()


def pool_faults(program, root, table, rng, quick):
    """The pool's fault loops: hostile connections, kills mid-claim, corrupted records."""
    base = os.path.join(root, "pool")
    os.makedirs(base)
    secret, wrong = os.path.join(base, "secret"), os.path.join(base, "wrong-secret")
    for path in (secret, wrong):
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
            f.write(os.urandom(32))
    m = PoolManager(program, base, secret)
    m.start()

    # Hostile connections: honest claims and a wrong secret meanwhile.
    stop, counts, idle = threading.Event(), collections.Counter(), []
    storm_rng = random.Random(rng.randrange(1 << 31))  # its own: the draws below stay seeded
    storm = threading.Thread(target=pool_hostile, args=(m, storm_rng, stop, counts, idle))
    storm.start()
    try:
        time.sleep(0.3)
        until = time.monotonic() + (4 if quick else 20)
        while time.monotonic() < until:  # honest claims, again and again, in the storm
            rc, out = pool_bench_wait(pool_bench(m, base, 10), "under hostile connections")
            if rc != 0:
                raise Failure("pool: honest claims failed under hostile connections:\n" +
                              out[-3000:])
            table.add("pool", "honest runs in the storm")
        rc, out = pool_bench_wait(pool_bench(m, base, 1, wrong), "wrong secret")
        if rc == 0:
            raise Failure("pool: a wrong secret was served:\n" + out[-3000:])
        table.add("pool", "wrong secret refused")
    finally:
        stop.set()
        storm.join()
        for _, c in idle:
            c.close()
    for kind, n in sorted(counts.items()):
        table.add("pool", "hostile " + kind, n)
    if not m.alive():
        raise Failure("pool: the manager died under hostile connections:\n" + m.output())

    # Kills of the manager mid-claim: the bench fails cleanly, never a wrong
    # byte; the restarted manager (its disk tier kept) serves again.
    landed = 0
    for i in range(3 if quick else 10):
        p = pool_bench(m, base, 1000)  # about 15 s of claims: the kill lands mid-run
        time.sleep(rng.uniform(0.3, 2.0))
        m.kill()
        rc, out = pool_bench_wait(p, "manager killed mid-claim")
        table.add("pool", "manager kills")
        if rc != 0:
            landed += 1
            table.add("pool", "kill: claims failed cleanly")
        m.start()
        rc, out = pool_bench_wait(pool_bench(m, base, 2), "after a restart")
        if rc != 0:
            raise Failure("pool: claims failed after the manager restarted:\n" + out[-3000:])
    if landed == 0:
        raise Failure("pool: no kill landed while claims ran (the loop tested nothing)")
    # A manager killed -9 cannot unlink its arena; say how many were left
    # behind in /dev/shm (each up to --memory bytes once written).
    left = [n for n in os.listdir("/dev/shm") if n.startswith("selene-pool-torture-") and
            not os.path.exists("/proc/%s" % n.split("-")[3])]
    table.add("pool", "arena files left by killed managers", len(left))
    for n in left:
        os.unlink(os.path.join("/dev/shm", n))

    # Corrupted records on the manager's disk tier: refused or harmless,
    # never a wrong byte; the manager starts and serves.
    if not m.disk_tier:
        table.add("pool", "corrupt: skipped (selene pool has no disk tier yet)")
    for i in range(0 if not m.disk_tier else 3 if quick else 8):
        m.stop()
        files = m.records()
        if not files:
            table.add("pool", "corrupt: no record on disk")
            m.start()
            break
        path = rng.choice(files)
        size = os.path.getsize(path)
        how = rng.choice(["flip", "truncate", "zero-header"])
        with open(path, "r+b") as f:
            if how == "flip":
                at = rng.randrange(size)
                f.seek(at)
                b = f.read(1)
                f.seek(at)
                f.write(bytes([b[0] ^ (1 << rng.randrange(8))]))
            elif how == "truncate":
                f.truncate(rng.randrange(size))
            else:
                f.write(bytes(4096))
        table.add("pool", "corrupt " + how)
        m.start()
        rc, out = pool_bench_wait(pool_bench(m, base, 2), "corrupt %s" % how)
        table.add("pool", "corrupt: the next claims %s" % ("passed" if rc == 0 else
                                                           "failed cleanly"))
        rc, out = pool_bench_wait(pool_bench(m, base, 2), "after corrupt %s" % how)
        if rc != 0:
            raise Failure("pool: claims failed after a corrupt record (%s):\n%s" % (how, out[-3000:]))
    m.stop()
    table.add("pool", "tries")


# ---- libFuzzer
FUZZ_MAX_LEN = {"header": 4096, "frame": 65536, "trace": 8192, "config": 4096,
               "catalog": 8192, "pool": 65536, "rdma": 1024}


def fuzz(repo, table, seconds, seed):
    for target, max_len in FUZZ_MAX_LEN.items():
        binary = os.path.join(repo, "build-fuzz", "fuzz_" + target)
        if not os.path.exists(binary):
            raise Failure("fuzz: %s missing (make fuzz-build)" % binary)
        corpus = os.path.join(repo, "build-fuzz", "corpus-" + target)
        os.makedirs(corpus, exist_ok=True)
        log = os.path.join(repo, "build-fuzz", "torture-" + target + ".log")
        with open(log, "wb") as f:
            p = subprocess.run([binary, "-max_total_time=%d" % seconds, "-max_len=%d" % max_len,
                                "-seed=%d" % (seed & 0x7fffffff),
                                "-artifact_prefix=" + os.path.join(repo, "build-fuzz") + "/",
                                corpus, os.path.join(repo, "tests", "fuzz", "corpus-" + target)],
                               stdout=f, stderr=subprocess.STDOUT, timeout=seconds + 120)
        with open(log, "rb") as f:
            text = f.read().decode("utf-8", "replace")
        runs = 0
        for line in text.splitlines():
            if line.startswith("Done ") and " runs" in line:
                runs = int(line.split()[1])
        table.add("fuzz", "tries", runs)
        table.add("fuzz", target + " runs", runs)
        if p.returncode != 0:
            raise Failure("fuzz: %s failed (exit %d; log %s):\n%s" %
                          (target, p.returncode, log, text[-3000:]))


def main():
    parser = argparse.ArgumentParser(description="Selene's fault loops (make torture)")
    parser.add_argument("--program", default="build/selene")
    args = parser.parse_args()
    program = os.path.abspath(args.program)
    repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    quick = os.environ.get("TORTURE_QUICK", "") not in ("", "0")
    seed = env_int("TORTURE_SEED", random.SystemRandom().randrange(1, 1 << 31))
    jobs = max(1, env_int("TORTURE_JOBS", 2))
    fuzz_seconds = env_int("TORTURE_FUZZ_SECONDS", 8 if quick else 30)
    skip_storm = os.environ.get("TORTURE_SKIP_STORM", "") not in ("", "0")
    kills = env_int("TORTURE_KILLS", 16 if quick else 100)
    corruptions = env_int("TORTURE_CORRUPTIONS", 5 if quick else 20)
    print("== torture: seed %d (TORTURE_SEED=%d reproduces), %s, %d lanes" %
          (seed, seed, "quick" if quick else "full", jobs), flush=True)
    table = Table()
    rng = random.Random(seed)
    root = tempfile.mkdtemp(prefix="selene-torture.")
    t0 = time.monotonic()

    names = subprocess.run([program, "failpoints"], stdout=subprocess.PIPE, check=True)
    names = [line.split()[0] for line in names.stdout.decode().splitlines() if line.strip()]
    evict_kills = env_int("TORTURE_EVICT_KILLS", 10 if quick else 50)
    plain = [n for n in names if n not in EVICT_POINTS]
    trials = [(n, a, r) for n in plain for a in ("kill", "error") for r in ("rank0", "peer")]
    evict_trials = [(n, a, str(r)) for n in EVICT_POINTS for a in ("kill", "error")
                    for r in range(RANKS)]
    eio_trials = [(str(r), str(skip)) for r in range(RANKS) for skip in range(READ_EIO_READS)]
    if quick:  # half the failpoints once, action and role drawn by the seed
        trials = [(n, rng.choice(("kill", "error")), rng.choice(("rank0", "peer")))
                  for n in rng.sample(plain, (len(plain) + 1) // 2)]
        evict_trials = [(n, a, str(rng.randrange(RANKS))) for n in EVICT_POINTS
                        for a in ("kill", "error")]
        eio_trials = [(str(r), str(skip)) for r in range(RANKS)
                      for skip in rng.sample(range(READ_EIO_READS), 4)]
    cap = env_int("TORTURE_FAILPOINT_TRIALS", 0)   # a sample of them, for a narrower run
    if cap:
        trials = rng.sample(trials, min(cap, len(trials)))
    tasks = [("kill", None)] * kills
    tasks += [("kill-evict", None)] * evict_kills
    tasks += [("failpoint", t) for t in trials]
    tasks += [("fp-evict", t) for t in evict_trials]
    tasks += [("read-eio", t) for t in eio_trials]
    tasks += [("corrupt", CORRUPTIONS[i % len(CORRUPTIONS)]) for i in range(corruptions)]
    tasks += warm_tasks(rng, quick, plain)
    tasks = [(kind, arg, rng.randrange(1, 1 << 31)) for kind, arg in tasks]
    only = os.environ.get("TORTURE_ONLY", "")   # e.g. "kill,corrupt": a narrower run

    def wanted(kind):
        return not only or kind in only.split(",") or kind.split("+")[0] in only.split(",")

    tasks = [t for t in tasks if wanted(t[0])]
    replay = os.environ.get("TORTURE_REPLAY", "")  # one try, as a failure names it
    if replay:
        parts = replay.split(":")
        arg = (None if len(parts) == 2 else parts[1] if parts[0] == "corrupt"
               else tuple(parts[1:-1]))
        if parts[0].startswith("corrupt") and isinstance(arg, tuple):
            arg = arg[0]
        tasks = [(parts[0], arg, int(parts[-1]))]
        only = "none"
    rng.shuffle(tasks)
    queue = collections.deque(tasks)
    qlock = threading.Lock()
    stop = threading.Event()

    def lane_main(index):
        plain = Lane(index, program, root, seed * 1000 + index, table)
        evicting = Lane(index, program, root, seed * 1000 + 500 + index, table,
                        disk_limit=EVICT_DISK_LIMIT)
        warm_lanes = {}
        while not stop.is_set():
            with qlock:
                if not queue:
                    return
                kind, arg, task_seed = queue.popleft()
            lane = evicting if kind in ("kill-evict", "fp-evict") else plain
            loop = kind
            if "+" in kind:
                lane, loop = warm_lane_for(warm_lanes, kind, index, program, root, seed, table)
            lane.rng.seed(task_seed)
            try:
                if loop in ("kill", "kill-evict"):
                    lane.kill_try(task_seed)
                elif loop == "failpoint":
                    lane.failpoint_try(task_seed, *arg)
                elif loop == "fp-evict":
                    lane.evict_failpoint_try(task_seed, arg[0], arg[1], int(arg[2]))
                elif loop == "read-eio":
                    lane.read_eio_try(task_seed, int(arg[0]), int(arg[1]))
                else:
                    lane.corrupt_try(task_seed, arg)
            except Exception as e:  # a harness bug is a failure too
                what = str(e) if isinstance(e, Failure) else "harness error %r" % e
                again = ":".join([kind] + ([] if arg is None else [arg] if isinstance(arg, str)
                                           else list(arg)) + [str(task_seed)])
                table.fail(kind, "%s\n  reproduce: TORTURE_SEED=%d make torture, or this try "
                           "alone (on fresh directories): TORTURE_REPLAY=%s" % (what, seed, again))
                lane.fresh()

    progress_stop = threading.Event()

    def progress():
        while not progress_stop.wait(30):
            with table.lock:
                done = {k: v.get("tries", 0) for k, v in table.counts.items()}
            print("   %.0f s: %s, %d left" % (time.monotonic() - t0, done, len(queue)), flush=True)

    threading.Thread(target=progress, daemon=True).start()
    lanes = [threading.Thread(target=lane_main, args=(i,)) for i in range(jobs)]
    for t in lanes:
        t.start()
    for t in lanes:
        t.join()
    progress_stop.set()
    never = sorted(key for key, fired in table.fired.items() if not fired and
                   (key[0], key[1], key[2]) not in CANNOT_FIRE and
                   (key[0], "*", key[2]) not in CANNOT_FIRE)
    for name, action, role in never:
        table.fail("failpoint", "%s armed with %s on %s never fired in any loop (the loop "
                   "did not test it; TORTURE_SEED=%d)" % (name, action, role, seed))
    for (name, action, role), reason in sorted(CANNOT_FIRE.items()):
        if any(k[0] == name and k[2] == role for k in table.fired):
            table.note("failpoint", "%s%s on %s cannot fire: %s" % (
                name, "" if action == "*" else " (%s)" % action, role, reason))

    try:  # a small record's header, every bit (quick: a seeded eighth)
        if not wanted("header"):
            raise StopIteration
        lane = Lane(99, program, root, seed, table)
        lines = [{"id": "h", "spans": [[1, 16]]}]
        run = lane.launch(lane.write_trace(lines, "h.jsonl"))
        if run.wait(LAUNCH_TIMEOUT_S) != 0:
            raise Failure("header: making a record failed:\n" + run.output())
        source = record_files(os.path.join(lane.dirs, "rank0"))[0]
        bits = list(range(HEADER_BYTES * 8))
        if quick:
            bits = sorted(rng.sample(bits, len(bits) // 8))
        header_flips(program, root, source, table, bits)
    except StopIteration:
        pass
    except Failure as e:
        table.fail("header", "%s (TORTURE_SEED=%d)" % (e, seed))
    if not wanted("storm"):
        pass
    elif skip_storm:
        table.add("storm", "skipped (TORTURE_SKIP_STORM=1)")
    else:
        try:
            join_storm(program, root, table, random.Random(seed))
        except Failure as e:
            table.fail("storm", "%s (TORTURE_SEED=%d)" % (e, seed))
    try:
        if wanted("pool"):
            pool_faults(program, root, table, random.Random(seed), quick)
    except Failure as e:
        table.fail("pool", "%s (TORTURE_SEED=%d)" % (e, seed))
    try:
        if wanted("fuzz"):
            fuzz(repo, table, fuzz_seconds, seed)
    except Failure as e:
        table.fail("fuzz", "%s (TORTURE_SEED=%d)" % (e, seed))

    table.print(time.monotonic() - t0, seed)
    if os.environ.get("TORTURE_KEEP", "") in ("", "0"):
        shutil.rmtree(root, ignore_errors=True)
    else:
        print("kept %s" % root)
    if table.failures:
        print("torture: FAILED (%d); reproduce with TORTURE_SEED=%d" % (len(table.failures), seed))
        return 1
    print("torture: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
