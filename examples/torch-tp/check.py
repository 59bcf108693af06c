"""run-tests' helper: corrupts record files, and compares each phase's
tokens with the reference run's (every prompt computed in full).

    check.py corrupt DIR           flips one page byte in every record under DIR
    check.py compare REF PHASE...  tokens equal per request; counts of each kind
    check.py warm RESULTS hits     every restore of a run with --warm served warm
    check.py warm RESULTS restart  every restore of a restarted run read the disk
    check.py pool PUT CLAIM        one instance put records to a pool, another restored
                                   them from it, bitwise equal
    check.py gpu-pool HOLD CLAIM   one instance stored nothing and exported its GPU
                                   checkpoints through the pool; another restored
                                   them from it, bitwise equal"""

import json
import os
import struct
import sys


def corrupt(directory):
    flipped = 0
    for root, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            if os.path.getsize(path) <= 4096:
                continue  # the directory lock, or no record
            with open(path, "r+b") as f:
                f.seek(176)  # the page segment offset (record/FORMAT.md)
                at, = struct.unpack("<Q", f.read(8))
                f.seek(at + 7)
                byte = f.read(1)[0]
                f.seek(at + 7)
                f.write(bytes([byte ^ 0x40]))
            flipped += 1
    print("corrupted %d record files under %s" % (flipped, directory))
    return 0 if flipped else 1


def load(path):
    requests, summary = {}, None
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if "summary" in r:
                summary = r["summary"]
            else:
                requests[r["id"]] = r
    return requests, summary


def compare(reference, phases):
    ref, _ = load(reference)
    passed = failed = 0
    kinds = dict(gpu_hit=0, host_restore=0, restarted=0, recomputed_after_failure=0)
    totals = dict(evictions=0, overlapped_steps=0, restore_failures=0, wrong_pages=0,
                  expectations_missed=0, joined=0, cached_again=0, retry=0)

    def check(ok, what):
        nonlocal passed, failed
        passed += ok
        failed += not ok
        if not ok:
            print("FAILED: " + what)

    for n, path in enumerate(phases):
        got, summary = load(path)
        for key in totals:
            totals[key] += summary[key]
        for rid, r in got.items():
            check(r["tokens"] == ref[rid]["tokens"], "%s: tokens %s, recomputed %s" % (
                rid, r["tokens"], ref[rid]["tokens"]))
            kinds["gpu_hit"] += r["gpu_reused"] > 0
            kinds["host_restore"] += r["host_reused"] > 0
            kinds["restarted"] += n > 0 and r["host_reused"] > 0
            kinds["recomputed_after_failure"] += r["restore_failed"] > 0
    for kind, count in kinds.items():
        check(count > 0, "no request of the kind %s" % kind)
    check(totals["evictions"] > 0, "no GPU eviction")
    check(totals["overlapped_steps"] > 0, "no decode step overlapped a restore")
    check(totals["wrong_pages"] == 0, "restored pages differ from the stored ones")
    check(totals["joined"] > 0, "no restore joined an equal one in flight")
    check(totals["cached_again"] > 0, "no prefix was cached by two requests")
    check(totals["retry"] > 0, "no checkpoint was offered while its parent was stored")
    check(totals["expectations_missed"] == 0, "expectations missed")
    def n(count, one, many):  # "1 GPU hit", "2 GPU hits"
        return "%d %s" % (count, one if count == 1 else many)

    print("identical tokens after: %s, %s (%d after a restart of every rank), %s after a "
          "corrupted record; %s, %s overlapping a restore, %s checked bitwise (0 differ); "
          "%s another, %s twice, %s retry" % (
              n(kinds["gpu_hit"], "GPU hit", "GPU hits"),
              n(kinds["host_restore"], "host restore", "host restores"), kinds["restarted"],
              n(kinds["recomputed_after_failure"], "recompute", "recomputes"),
              n(totals["evictions"], "GPU eviction", "GPU evictions"),
              n(totals["overlapped_steps"], "decode step", "decode steps"),
              n(kinds["host_restore"], "restore", "restores"),
              n(totals["joined"], "restore joined", "restores joined"),
              n(totals["cached_again"], "prefix cached", "prefixes cached"),
              n(totals["retry"], "offer answered", "offers answered")))
    print("torch-tp: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


def warm(path, kind):
    """The store's counters of a run with a warm tier (engine.py --warm,
    its summary's "store"): "hits", every restore served from warm slots
    (the run sets a failpoint failing every file read, so a restore that
    read a file would have failed), and with write-behind some records
    still only warm when the run closed (its drain writes them);
    "restart", a run after a restart, whose tier starts empty: every
    restore read the disk."""
    _, summary = load(path)
    st = summary.get("store", {})
    problems = []
    if not st.get("warm_slots_total"):
        problems.append("no warm tier (run engine.py with --warm)")
    if not st.get("fetches"):
        problems.append("no restore")
    if st.get("fetch_failures") or summary.get("restore_failures"):
        problems.append("%d restores failed" % max(st.get("fetch_failures", 0),
                                                   summary.get("restore_failures", 0)))
    if kind == "hits" and st.get("warm_hits") != st.get("fetches"):
        problems.append("%s of %s restores served warm" % (st.get("warm_hits"),
                                                           st.get("fetches")))
    if kind == "hits" and st.get("warm_policy") == "write-behind" and \
            not st.get("warm_dirty_records"):
        problems.append("write-behind, but every record was on disk before the close")
    if kind == "restart" and (st.get("warm_hits") or not st.get("scanned_records")):
        problems.append("%s restores served warm after a restart of %s scanned records" % (
            st.get("warm_hits"), st.get("scanned_records")))
    for problem in problems:
        print("FAILED: %s: %s" % (path, problem))
    if not problems:
        print("warm %s: %d restores, %d served warm, %d records warm, %d of them only warm "
              "(%s)" % (kind, st["fetches"], st["warm_hits"], st["warm_records"],
                        st["warm_dirty_records"], st["warm_policy"]))
    return 1 if problems else 0


def pool(put_path, claim_path):
    """Two instances sharing one selene pool (engine.py --pool): the first
    put records to it (its disk limit made them leave), the second,
    separate and with empty directories, restored prefixes from it, every
    restored page and row equal to the digests the first recorded."""
    _, put = load(put_path)
    results, claim = load(claim_path)
    a, b = put.get("store", {}), claim.get("store", {})
    problems = []
    if not a.get("pool_attached") or not b.get("pool_attached"):
        problems.append("an instance was not attached to the pool")
    if not a.get("pool_puts"):
        problems.append("%s put no record to the pool" % put_path)
    if not b.get("pool_claims"):
        problems.append("%s restored nothing from the pool" % claim_path)
    if b.get("pool_claim_failures") or claim.get("restore_failures"):
        problems.append("%d restores from the pool failed" % b.get("pool_claim_failures", 0))
    if claim.get("wrong_pages") or not all(r.get("verified") for r in results.values()):
        problems.append("a restore from the pool was not bitwise the pages stored")
    for problem in problems:
        print("FAILED: %s" % problem)
    if not problems:
        print("pool: %d records put by the first instance, %d restores from the pool by the "
              "second, %d tokens, every page and row bitwise equal" % (
                  a["pool_puts"], b["pool_claims"],
                  sum(r.get("host_reused", 0) for r in results.values())))
    return 1 if problems else 0


def gpu_pool(hold_path, claim_path):
    """The first instance kept its checkpoints on the GPU only (its disk
    took none) and exported them when the pool asked (engine.py
    --serve-exports-until); the second restored them from the pool."""
    _, hold = load(hold_path)
    a = hold.get("store", {})
    problems = []
    if a.get("stored"):
        problems.append("%s stored %d records: its exports need not be GPU-only"
                        % (hold_path, a["stored"]))
    if not hold.get("exports") or hold.get("exports_ended") != hold.get("exports"):
        problems.append("%s pinned %d GPU exports, %d ended" % (
            hold_path, hold.get("exports", 0), hold.get("exports_ended", 0)))
    for problem in problems:
        print("FAILED: %s" % problem)
    if problems:
        return 1
    print("gpu-pool: %d GPU checkpoints exported (%d requests refused)"
          % (hold["exports"], hold.get("exports_refused", 0)))
    return pool(hold_path, claim_path)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "gpu-pool":
        sys.exit(gpu_pool(sys.argv[2], sys.argv[3]))
    if len(sys.argv) == 4 and sys.argv[1] == "pool":
        sys.exit(pool(sys.argv[2], sys.argv[3]))
    if len(sys.argv) == 4 and sys.argv[1] == "warm" and sys.argv[3] in ("hits", "restart"):
        sys.exit(warm(sys.argv[2], sys.argv[3]))
    if len(sys.argv) >= 3 and sys.argv[1] == "corrupt":
        sys.exit(corrupt(sys.argv[2]))
    if len(sys.argv) >= 4 and sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2], sys.argv[3:]))
    sys.exit(__doc__)
