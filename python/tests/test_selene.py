"""The Python binding (python/selene) against the built libselene, with the
host device: planes are numpy arrays (and torch tensors where torch is
installed). Round trips byte-exact, every error path raises SeleneError with
the library's code, and the bootstraps match the selene program's."""

import ctypes
import errno
import gc
import os
import shutil
import struct
import subprocess
import sys
import threading
import weakref

import numpy as np
import pytest

import selene

PAGE_TOKENS, PAGES, ROWS = 64, 32, 4
UNIT, ROW = 1024, 256


class Planes:
    """A rank's host-memory planes: K and V pages, and the state rows."""

    def __init__(self):
        self.k = np.zeros((PAGES, UNIT), dtype=np.uint8)
        self.v = np.zeros((PAGES, UNIT), dtype=np.uint8)
        self.rows = np.zeros((ROWS, ROW), dtype=np.uint8)

    def config(self, directory, **kw):
        kw.setdefault("device", "host")
        return selene.StoreConfig(
            dir=str(directory), page_tokens=PAGE_TOKENS, model_name="test-model",
            page_planes=[selene.Plane("k", UNIT, self.k), selene.Plane("v", UNIT, self.v)],
            row_plane=selene.Plane("state", ROW, self.rows), page_count=PAGES,
            row_count=ROWS, **kw)


def tokens(n, seed=7):
    return [(i * 2654435761 + seed) % 151936 for i in range(n)]


def wait_events(store, count, tries=5000):
    got = []
    for _ in range(tries):
        got += store.poll()
        if len(got) >= count:
            return got
        threading.Event().wait(0.002)
    raise AssertionError("waited for %d events, got %r" % (count, got))


def publish_chain(store, planes, history, points=(256, 512), on_disk=False):
    """Fills pages and rows with random bytes, publishes a chain, waits
    for each STORED event (and with on_disk, a warm tier's ON_DISK next)."""
    rng = np.random.default_rng(1)
    planes.k[:] = rng.integers(0, 256, planes.k.shape, dtype=np.uint8)
    planes.v[:] = rng.integers(0, 256, planes.v.shape, dtype=np.uint8)
    planes.rows[:] = rng.integers(0, 256, planes.rows.shape, dtype=np.uint8)
    ids = list(range(points[-1] // PAGE_TOKENS))
    parent = 0
    for n, consumed in enumerate(points):
        outcome = store.publish(100 + n, history, consumed, parent, ids, n)
        assert outcome == selene.Outcome.QUEUED
        ev = wait_events(store, 2 if on_disk else 1)
        assert ev[0].kind == selene.EventKind.STORED and ev[0].id == 100 + n
        if on_disk:
            assert ev[1].kind == selene.EventKind.ON_DISK and ev[1].id == 100 + n
        parent = consumed
    return planes.k.copy(), planes.v.copy(), planes.rows.copy()


# Every ctypes struct of selene._lib and the C struct it mirrors.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
C_STRUCTS = {"Cluster": "sel_cluster", "Plane": "sel_plane", "StoreConfig": "sel_store_config",
             "Hit": "sel_hit", "Publication": "sel_publication", "Event": "sel_event",
             "LatencyHistogram": "sel_latency_histogram", "Stats": "sel_stats"}


def header_program(tmp_path, statements):
    """Compiles statements (C, one printf each) against
    include/selene/store.h and returns their output lines; skips the test
    without a C compiler."""
    import shutil
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        pytest.skip("no C compiler (%s) to compile include/selene/store.h with" % cc)
    source = tmp_path / "header.c"
    source.write_text("#include <stddef.h>\n#include <stdio.h>\n#include \"selene/store.h\"\n"
                      "int main(void)\n{\n%s\nreturn 0;\n}\n" % "\n".join(statements))
    binary = tmp_path / "header"
    subprocess.run([cc, "-I", os.path.join(ROOT, "include"), str(source), "-o", str(binary)],
                   check=True)
    return subprocess.run([str(binary)], check=True, stdout=subprocess.PIPE,
                          universal_newlines=True).stdout.splitlines()


def test_lib_structs_match_the_header(tmp_path):
    """Every field of the binding's structs sits at the offset, and has the
    size, that include/selene/store.h gives it, and every struct has the C
    size: compiled with the C compiler against the header."""
    from selene import _lib
    lines, want = [], []
    for py, c in C_STRUCTS.items():
        ours = getattr(_lib, py)
        lines.append('printf("%%zu\\n", sizeof(struct %s));' % c)
        want.append("sizeof(struct %s) %d" % (c, ctypes.sizeof(ours)))
        for name, ctype in ours._fields_:
            lines.append('printf("%%zu %%zu\\n", offsetof(struct %s, %s), '
                         'sizeof(((struct %s *)0)->%s));' % (c, name, c, name))
            want.append("%s.%s at %d size %d" % (c, name, getattr(ours, name).offset,
                                                 ctypes.sizeof(ctype)))
    got = header_program(tmp_path, lines)
    for expected, answer in zip(want, got):
        numbers = [int(x) for x in answer.split()]
        wanted = [int(x) for x in expected.split() if x.isdigit()]
        assert numbers == wanted, "%s, but the C header: %s" % (expected, answer)
    assert len(got) == len(want)


def test_enums_match_the_header(tmp_path):
    """Outcome, EventKind and WarmPolicy have every constant of enum
    sel_outcome, sel_event_kind and sel_warm_policy, with the header's
    values: poll() would raise on an event kind the binding does not know."""
    import re
    with open(os.path.join(ROOT, "include", "selene", "store.h")) as f:
        header = f.read()
    pairs = []
    for c_enum, prefix, ours in (("sel_outcome", "SEL_", selene.Outcome),
                                 ("sel_event_kind", "SEL_EVENT_", selene.EventKind),
                                 ("sel_warm_policy", "SEL_WARM_", selene.WarmPolicy)):
        body = re.search(r"enum %s \{(.*?)\};" % c_enum, header, re.S).group(1)
        body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
        names = re.findall(r"\b(%s[A-Z_]+)\b" % prefix, body)
        assert names, c_enum
        assert sorted(n[len(prefix):] for n in names) == sorted(ours.__members__), \
            "enum %s: %s, the binding's %s: %s" % (c_enum, names, ours.__name__,
                                                    list(ours.__members__))
        pairs += [(ours[n[len(prefix):]], n) for n in names]
    got = header_program(tmp_path, ['printf("%%d\\n", (int)%s);' % n for _, n in pairs])
    assert [int(x) for x in got] == [int(member) for member, _ in pairs]


def test_version_and_errors():
    assert selene.version() == "1.0.0"
    # The binding looks for the SONAME of the library's own major version.
    from selene import _lib
    assert _lib.VERSION == selene.version() == selene.__version__
    assert _lib.SONAME == "libselene.so." + selene.version().split(".")[0]
    assert selene.strerror(selene.ECHECKSUM) == "checksum mismatch"
    e = selene.SeleneError(selene.ELOCKED, "why")
    assert e.code == selene.ELOCKED and e.detail == "why"
    assert e.message == selene.strerror(selene.ELOCKED) and "why" in str(e)


def test_publish_lookup_fetch_byte_exact(tmp_path):
    planes = Planes()
    with selene.Store(planes.config(tmp_path)) as store:
        history = store.history(tokens(600))
        k, v, rows = publish_chain(store, planes, history)
        planes.k[:] = planes.v[:] = planes.rows[:] = 0xEE
        hit = store.lookup(history, resident=0)
        assert hit is not None and hit.consumed == 512 and hit.page_count == 8
        assert store.lookup(history, resident=512) is None
        dest = list(range(20, 28))
        assert store.fetch(hit, dest, 3, waiter=9) is False
        ev = wait_events(store, 1)[0]
        assert ev.kind == selene.EventKind.FETCHED and ev.id == 9 and ev.error == 0
        assert np.array_equal(planes.k[20:28], k[:8]) and np.array_equal(planes.v[20:28], v[:8])
        assert np.array_equal(planes.rows[3], rows[1])
        store.touch(history, 512)
        st = store.stats()
        assert (st.records, st.stored, st.hits, st.fetches) == (2, 2, 1, 1)
        assert st.store_latency.count == 2 and len(st.fetch_latency.counts) == 13
        text = store.metrics()
        assert "selene_records 2\n" in text


def test_metrics_buffer_grows(tmp_path, monkeypatch):
    planes = Planes()
    monkeypatch.setattr(selene.store, "METRICS_BYTES_FIRST", 16)
    with selene.Store(planes.config(tmp_path)) as store:
        text = store.metrics()
        assert len(text) > 1000 and text.endswith("\n")


def test_torch_tensor_addresses(tmp_path):
    torch = pytest.importorskip("torch")
    k = torch.zeros((PAGES, PAGE_TOKENS, 2, 4), dtype=torch.float32)  # 2 KiB pages
    rows = torch.zeros((ROWS, 64), dtype=torch.float32)
    cfg = selene.StoreConfig(
        dir=str(tmp_path), page_tokens=PAGE_TOKENS, model_name="torch",
        page_planes=[selene.Plane("k", k[0].numel() * 4, k)],
        row_plane=selene.Plane("state", rows[0].numel() * 4, rows),
        page_count=PAGES, row_count=ROWS, device="host")
    with selene.Store(cfg) as store:
        h = store.history(tokens(128))
        k.normal_()
        rows.normal_()
        stored, stored_row = k[:2].clone(), rows[1].clone()
        assert store.publish(1, h, 128, 0, [0, 1], 1) == selene.Outcome.QUEUED
        wait_events(store, 1)
        hit = store.lookup(h)
        store.fetch(hit, [5, 6], 2, 1)
        assert wait_events(store, 1)[0].kind == selene.EventKind.FETCHED
        assert torch.equal(k[5:7], stored) and torch.equal(rows[2], stored_row)


def test_error_paths(tmp_path):
    planes = Planes()
    store = selene.Store(planes.config(tmp_path))
    with pytest.raises(selene.SeleneError) as e:
        selene.Store(planes.config(tmp_path))  # a second opener
    assert e.value.code == selene.ELOCKED and e.value.detail
    h = store.history(tokens(600))
    with pytest.raises(selene.SeleneError) as e:
        store.publish(1, h, 700, 0, list(range(10)), 0)  # past the history
    assert e.value.code == -22
    with pytest.raises(selene.SeleneError) as e:
        store.publish(1, h, 128, 0, [0, 1], ROWS)  # no such row
    assert e.value.code == -22
    with pytest.raises(selene.SeleneError) as e:
        store.cancel(12345)
    assert e.value.code == selene.ENOTFOUND
    with pytest.raises(selene.SeleneError) as e:
        store.touch(h, 128)
    assert e.value.code == selene.ENOTFOUND
    with pytest.raises(selene.SeleneError) as e:
        store.touch(h, 0)
    assert e.value.code == -22
    publish_chain(store, planes, h, points=(128,))
    hit = store.lookup(h)
    with pytest.raises(ValueError):
        store.fetch(hit, [1], 0, 1)  # the hit needs two ids
    with pytest.raises(selene.SeleneError) as e:
        store.fetch(hit, [PAGES, PAGES + 1], 0, 1)  # outside the device
    assert e.value.code == -22
    h.close()
    with pytest.raises(selene.SeleneError) as e:
        store.lookup(h)
    assert e.value.code == selene.ESTOPPED
    store.close()
    store.close()  # twice is fine
    with pytest.raises(selene.SeleneError) as e:
        store.history([1, 2, 3])
    assert e.value.code == selene.ESTOPPED


def test_ints_out_of_range_are_refused(tmp_path):
    """An int its C type cannot hold is a ValueError, never wrapped; a
    publication with fewer page ids than its pages is refused before C
    reads past them."""
    planes = Planes()
    cfg = planes.config(tmp_path)
    cfg.page_count = 2**32 + PAGES
    with pytest.raises(ValueError, match="StoreConfig.page_count is 4294967328, outside"):
        selene.Store(cfg)
    cfg.page_count = PAGES * 2
    with pytest.raises(ValueError, match="plane k holds 32768 bytes"):
        selene.Store(cfg)  # more pages than the planes hold
    cfg = planes.config(tmp_path)
    cfg.row_count = -1
    with pytest.raises(ValueError, match="row_count"):
        selene.Store(cfg)
    cfg = planes.config(tmp_path)
    cfg.page_tokens = -1
    with pytest.raises(ValueError, match="page_tokens"):
        selene.Store(cfg)
    with selene.Store(planes.config(tmp_path)) as store:
        h = store.history(tokens(600))
        with pytest.raises(ValueError, match="needs 8 page ids, got 1"):
            store.publish(1, h, 8 * PAGE_TOKENS, 0, [0], 0)
        with pytest.raises(ValueError, match=r"publish\(\): page_ids\[0\] is 4294967301, outside"):
            store.publish(1, h, PAGE_TOKENS, 0, [2**32 + 5], 0)
        with pytest.raises(ValueError, match="checkpoint"):
            store.publish(-1, h, PAGE_TOKENS, 0, [0], 0)
        with pytest.raises(ValueError, match="state_slot"):
            store.publish(1, h, PAGE_TOKENS, 0, [0], 2**32)
        with pytest.raises(ValueError, match=r"lookup\(\): resident"):
            store.lookup(h, -2**64)
        with pytest.raises(ValueError, match=r"cancel\(\): waiter"):
            store.cancel(-1)
        with pytest.raises(ValueError, match=r"touch\(\): consumed"):
            store.touch(h, 2**64)
        assert store.poll() == []  # nothing was queued by any of them
        publish_chain(store, planes, h, points=(PAGE_TOKENS * 2,))
        hit = store.lookup(h)
        with pytest.raises(ValueError, match=r"fetch\(\): waiter"):
            store.fetch(hit, [0, 1], 0, -1)


def test_binding_refuses_what_would_crash(tmp_path):
    """What would let C write freed or foreign memory is refused: numpy
    integers out of range, planes smaller than their pages, numpy planes
    of Python objects, planes kept
    only by a config the caller reuses, a hit of another store or of an
    earlier open."""
    planes = Planes()
    with selene.Store(planes.config(tmp_path)) as store:
        h = store.history(tokens(600))
        with pytest.raises(ValueError, match="checkpoint"):
            store.publish(np.int64(-1), h, PAGE_TOKENS, 0, [0], 0)
        with pytest.raises(ValueError, match=r"page_ids\[0\]"):
            store.publish(1, h, PAGE_TOKENS, 0, np.array([2**32 + 5]), 0)
        with pytest.raises(ValueError, match="state_slot"):
            store.publish(1, h, PAGE_TOKENS, 0, [0], np.int64(2**32 + 1))
    small = Planes()
    cfg = small.config(tmp_path / "small")
    cfg.page_planes = [selene.Plane("k", UNIT * 2, small.k), selene.Plane("v", UNIT, small.v)]
    with pytest.raises(ValueError, match="plane k holds"):
        selene.Store(cfg)
    with pytest.raises(ValueError, match="contiguous"):
        cfg.page_planes = [selene.Plane("k", UNIT, planes.k[:, ::2]),
                           selene.Plane("v", UNIT, small.v)]
        selene.Store(cfg)
    # an array of Python objects holds pointers: bytes restored over them
    # would be dereferenced as objects
    objects = np.empty((PAGES, UNIT // 8), dtype=object)
    cfg.page_planes = [selene.Plane("k", UNIT, objects), selene.Plane("v", UNIT, small.v)]
    with pytest.raises(ValueError, match="plane k holds Python objects"):
        selene.Store(cfg)
    cfg.row_plane = selene.Plane("state", ROW, np.zeros((ROWS, 1), dtype=[("a", "u1", 248), ("b", "O")]))
    cfg.page_planes = small.config(tmp_path / "small").page_planes
    with pytest.raises(ValueError, match="plane state holds Python objects"):
        selene.Store(cfg)
    # the store keeps its planes alive, whatever the caller does with its config
    a_planes, b_planes = Planes(), Planes()
    cfg = a_planes.config(tmp_path / "a")
    a = selene.Store(cfg)
    b_cfg = b_planes.config(tmp_path / "b")
    cfg.page_planes, cfg.row_plane, cfg.dir = b_cfg.page_planes, b_cfg.row_plane, b_cfg.dir
    b = selene.Store(cfg)
    weak = weakref.ref(a_planes.k)
    del a_planes
    gc.collect()
    assert weak() is not None
    ha, hb = a.history(tokens(300, seed=1)), b.history(tokens(300, seed=2))
    publish_chain(a, Planes(), ha, points=(128,))
    hit = a.lookup(ha)
    with pytest.raises(ValueError, match="another store"):
        b.fetch(hit, [0, 1], 0, 1)
    a.close()
    b.close()
    with selene.Store(a_cfg_copy(tmp_path / "a")) as again:
        with pytest.raises(ValueError, match="earlier open"):
            again.fetch(hit, [0, 1], 0, 1)


def test_binding_refuses_what_would_misplace_bytes(tmp_path):
    """What would store or restore the right bytes in the wrong place, or
    another model's, is refused: a plane whose entries are not unit_bytes
    (a dtype mixed up), a fetch into one page id twice, a history of
    another store or an earlier open, bytes taken for tokens, a rank
    outside its world, a CUDA tensor on the host backend."""
    planes = Planes()
    cfg = planes.config(tmp_path / "wide")
    wide = np.zeros((PAGES, UNIT * 2), dtype=np.uint8)  # pages of 2 units
    cfg.page_planes = [selene.Plane("k", UNIT, wide), selene.Plane("v", UNIT, planes.v)]
    with pytest.raises(ValueError, match="plane k has 32 entries of 2048 bytes"):
        selene.Store(cfg)
    cfg = planes.config(tmp_path / "rank")
    cfg.cluster = selene.ClusterConfig(rank=1, world_size=1)
    with pytest.raises(ValueError, match="rank 1 is not among 1 ranks"):
        selene.Store(cfg)
    with selene.Store(planes.config(tmp_path / "a")) as a, \
            selene.Store(planes.config(tmp_path / "b")) as b:
        with pytest.raises(ValueError, match="sequence of ints"):
            a.history(b"hello world!")
        import array
        assert len(a.history(memoryview(array.array("I", tokens(300))))) == 300
        h = a.history(tokens(300))
        publish_chain(a, planes, h, points=(128,))
        hit = a.lookup(h)
        with pytest.raises(ValueError, match="distinct"):
            a.fetch(hit, [3, 3], 0, 1)
        with pytest.raises(ValueError, match="distinct"):
            a.fetch(hit, np.array([4, 4]), 0, 1)
        for call in (lambda: b.lookup(h), lambda: b.touch(h, 128),
                     lambda: b.publish(1, h, 128, 0, [0, 1], 0)):
            with pytest.raises(ValueError, match="another store"):
                call()
    torch = pytest.importorskip("torch")
    cfg = planes.config(tmp_path / "cuda")

    class FakeCuda:  # what the check reads of a CUDA tensor; no GPU here
        is_cuda = True
        device = torch.device("cuda", 0)

    cfg.page_planes = [selene.Plane("k", UNIT, FakeCuda()), selene.Plane("v", UNIT, planes.v)]
    with pytest.raises(ValueError, match="plane k is a CUDA tensor, but the device is host"):
        selene.Store(cfg)
    cfg.device, cfg.device_ordinal = "auto", 1
    with pytest.raises(ValueError, match="plane k is on cuda:0, but device_ordinal is 1"):
        selene.Store(cfg)


def test_fetch_refuses_a_tensor_of_page_ids_twice(tmp_path):
    """A torch tensor of page ids is checked like a list: one id twice is
    refused (its elements are tensors, hashed by identity, so a set of
    them counted every id distinct), and distinct ids restore."""
    torch = pytest.importorskip("torch")
    planes = Planes()
    with selene.Store(planes.config(tmp_path)) as store:
        h = store.history(tokens(300))
        publish_chain(store, planes, h, points=(128,))
        hit = store.lookup(h)
        with pytest.raises(ValueError, match="distinct"):
            store.fetch(hit, torch.tensor([3, 3]), 0, 1)
        assert store.poll() == []
        assert not store.fetch(hit, torch.tensor([5, 6]), 1, 2)
        (ev,) = wait_events(store, 1)
        assert (ev.kind, ev.id) == (selene.EventKind.FETCHED, 2)
        assert (planes.k[[5, 6]] == planes.k[[0, 1]]).all()


UNDRAINED_SCRIPT = '''
import gc, sys, time
import numpy as np
sys.path.insert(0, sys.argv[2])
from test_selene import Planes, tokens, publish_chain
import selene
planes = Planes()
# planes past malloc's mmap threshold, so freeing them unmaps them
planes.k, planes.v = (np.zeros((planes.k.shape[0] * 64, planes.k.shape[1]), np.uint8)
                      for _ in range(2))
store = selene.Store(planes.config(sys.argv[1]))
h = store.history(tokens(300))
publish_chain(store, planes, h, points=(128,))
store.fetch(store.lookup(h), [5, 6], 1, 9)  # its reads sleep 1 s (failpoint)
try:
    store.close(drain_timeout_ms=0)
except selene.SeleneError as e:
    assert e.code == selene.ESTOPPED, e
else:
    raise SystemExit("close drained a fetch whose reads sleep")
del store, planes
gc.collect()
time.sleep(1.5)  # the copies land in planes the binding kept
print("survived")
'''


def test_close_undrained_keeps_planes(tmp_path):
    """A close that cannot drain raises ESTOPPED and leaves the fetch's
    copies running; the process survives them landing after the Store
    object is gone. (On this VM it also survives without the binding
    keeping the planes: freed numpy memory stayed mapped here.)"""
    env = dict(os.environ, SELENE_FAILPOINTS="disk.read=sleep(1000)", SELENE_LOG="error")
    done = subprocess.run([sys.executable, "-c", UNDRAINED_SCRIPT, str(tmp_path),
                           os.path.dirname(__file__)], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "survived" in done.stdout, done.stdout + done.stderr


def a_cfg_copy(directory):
    return Planes().config(directory)


def test_bad_configs(tmp_path):
    planes = Planes()
    with pytest.raises(selene.SeleneError) as e:
        selene.Store(planes.config(tmp_path, device="tpu"))
    assert e.value.code < 0 and e.value.detail
    cfg = planes.config(tmp_path)
    cfg.page_tokens = 0
    with pytest.raises(selene.SeleneError):
        selene.Store(cfg)
    cfg = planes.config(tmp_path)
    cfg.model_name = None
    with pytest.raises(ValueError):
        selene.Store(cfg)
    with pytest.raises(TypeError):
        selene.device_address("not memory")
    with pytest.raises(ValueError):
        selene.Peer(planes.config(tmp_path))  # a peer needs rank > 0


def test_no_disk_store(tmp_path):
    planes = Planes()
    with selene.Store(planes.config(tmp_path, disk_limit_bytes=0)) as store:
        h = store.history(tokens(200))
        assert store.publish(1, h, 128, 0, [0, 1], 0) == selene.Outcome.OVERSIZE
        assert store.lookup(h) is None


def test_restart_finds_records(tmp_path):
    planes = Planes()
    with selene.Store(planes.config(tmp_path)) as store:
        h = store.history(tokens(600))
        k, _, _ = publish_chain(store, planes, h)
    with selene.Store(planes.config(tmp_path)) as store:
        assert store.stats().scanned_records == 2
        h = store.history(tokens(600))
        hit = store.lookup(h)
        store.fetch(hit, list(range(8, 16)), 0, 1)
        assert wait_events(store, 1)[0].kind == selene.EventKind.FETCHED
        assert np.array_equal(planes.k[8:16], k[:8])


def record_files(directory):
    for root, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            if os.path.getsize(path) > 4096:
                yield path


WARM = 64 * (UNIT * 2 + 4096)  # room for every page record and row of the tests' chains


def test_warm_tier_restores_without_reading_files(tmp_path):
    """A chain stored with a warm tier is restored byte-exact from its warm
    slots while its record files are corrupted (no file read: a read
    would fail by checksum), counted as a warm hit; after a restart the
    tier is empty and the same restore reads the disk."""
    planes = Planes()
    with selene.Store(planes.config(tmp_path, warm_bytes=WARM)) as store:
        h = store.history(tokens(600))
        k, v, rows = publish_chain(store, planes, h, on_disk=True)
        st = store.stats()
        assert st.warm_records == 2 and st.warm_slots_total > 0
        assert (st.warm_writes, st.warm_dirty_records) == (2, 0)
        assert 0 < st.warm_slots_used <= st.warm_slots_total and st.warm_bytes > 0
        assert (st.warm_hits, st.warm_evictions) == (0, 0)
        for path in record_files(tmp_path):
            with open(path, "r+b") as f:
                f.seek(os.path.getsize(path) - 600)
                f.write(b"\x55" * 500)
        planes.k[:] = planes.v[:] = planes.rows[:] = 0xEE
        hit = store.lookup(h)
        store.fetch(hit, list(range(20, 28)), 3, waiter=1)
        ev = wait_events(store, 1)[0]
        assert ev.kind == selene.EventKind.FETCHED, ev
        assert np.array_equal(planes.k[20:28], k[:8]) and np.array_equal(planes.v[20:28], v[:8])
        assert np.array_equal(planes.rows[3], rows[1])
        st = store.stats()
        assert (st.fetches, st.warm_hits, st.fetch_failures) == (1, 1, 0)
        text = store.metrics()
        assert "selene_warm_hits_total 1\n" in text and "selene_warm_records 2\n" in text
    shutil.rmtree(tmp_path)
    os.makedirs(tmp_path)
    with selene.Store(planes.config(tmp_path, warm_bytes=WARM)) as store:
        h = store.history(tokens(600))
        k, v, rows = publish_chain(store, planes, h, on_disk=True)
    with selene.Store(planes.config(tmp_path, warm_bytes=WARM)) as store:
        st = store.stats()
        assert (st.scanned_records, st.warm_records, st.warm_slots_used) == (2, 0, 0)
        planes.k[:] = planes.v[:] = planes.rows[:] = 0xEE
        h = store.history(tokens(600))
        store.fetch(store.lookup(h), list(range(20, 28)), 3, waiter=2)
        assert wait_events(store, 1)[0].kind == selene.EventKind.FETCHED
        assert np.array_equal(planes.k[20:28], k[:8]) and np.array_equal(planes.rows[3], rows[1])
        st = store.stats()
        assert (st.fetches, st.warm_hits) == (1, 0)


def test_warm_write_behind_drains_at_close(tmp_path):
    """With WarmPolicy.WRITE_BEHIND a chain is restorable from warm slots
    at its STORED events while no record file exists (dirty in stats);
    close() drains it to disk, and after a restart it restores from
    there, byte-exact."""
    planes = Planes()
    cfg = planes.config(tmp_path, warm_bytes=WARM, warm_policy="write-behind")
    with selene.Store(cfg) as store:
        h = store.history(tokens(600))
        k, v, rows = publish_chain(store, planes, h)
        assert list(record_files(tmp_path)) == [] and store.poll() == []
        st = store.stats()
        assert (st.warm_records, st.warm_dirty_records, st.warm_writes) == (2, 2, 0)
        planes.k[:] = planes.v[:] = planes.rows[:] = 0xEE
        store.fetch(store.lookup(h), list(range(20, 28)), 3, waiter=1)
        assert wait_events(store, 1)[0].kind == selene.EventKind.FETCHED
        assert np.array_equal(planes.k[20:28], k[:8]) and np.array_equal(planes.rows[3], rows[1])
        assert store.stats().warm_hits == 1
    assert len(list(record_files(tmp_path))) == 2
    planes.k[:] = planes.v[:] = planes.rows[:] = 0xEE
    with selene.Store(planes.config(tmp_path, warm_bytes=WARM,
                                    warm_policy=selene.WarmPolicy.WRITE_BEHIND)) as store:
        assert store.stats().scanned_records == 2
        h = store.history(tokens(600))
        store.fetch(store.lookup(h), list(range(20, 28)), 3, waiter=2)
        assert wait_events(store, 1)[0].kind == selene.EventKind.FETCHED
        assert np.array_equal(planes.k[20:28], k[:8]) and np.array_equal(planes.v[20:28], v[:8])
        assert np.array_equal(planes.rows[3], rows[1])
        assert store.stats().warm_hits == 0


def test_max_age_expires_from_both_tiers(tmp_path):
    """A record unused for max_age_ms is dropped from the warm tier and
    the disk by poll()'s sweep: counted as expired, not evicted, and no
    longer found; max_age_ms refuses what a uint64_t cannot hold."""
    with pytest.raises(ValueError, match="StoreConfig.max_age_ms is -1"):
        Planes().config(tmp_path, max_age_ms=-1)
    with pytest.raises(TypeError, match="StoreConfig.max_age_ms must be an int"):
        Planes().config(tmp_path, max_age_ms=0.5)
    planes = Planes()
    with selene.Store(planes.config(tmp_path, warm_bytes=WARM, max_age_ms=200)) as store:
        h = store.history(tokens(600))
        publish_chain(store, planes, h, points=(256,), on_disk=True)
        assert store.stats().warm_records == 1
        for _ in range(2500):
            store.poll()
            st = store.stats()
            if st.expired and not st.jobs_in_flight:
                break
            threading.Event().wait(0.002)
        assert (st.expired, st.warm_expired, st.evictions) == (1, 1, 0)
        assert (st.records, st.warm_records, st.warm_slots_used) == (0, 0, 0)
        assert store.lookup(h) is None
    assert list(record_files(tmp_path)) == []


def test_warm_bytes_is_checked(tmp_path):
    """warm_bytes refuses what is not a byte count, and a tier with no disk
    store behind it, and warm_policy what names no policy, naming the
    argument; the library's own refusal (a
    tier too small for a page and the row) comes back as SeleneError."""
    planes = Planes()
    for bad, error, words in (("1G", TypeError, "StoreConfig.warm_bytes must be an int"),
                              (None, TypeError, "StoreConfig.warm_bytes must be an int"),
                              (True, TypeError, "StoreConfig.warm_bytes must be an int"),
                              (-1, ValueError, "StoreConfig.warm_bytes is -1"),
                              (2**64, ValueError, "warm_bytes is 18446744073709551616")):
        with pytest.raises(error, match=words):
            planes.config(tmp_path, warm_bytes=bad)
    for bad, error, words in (("lazy", ValueError, "'write-through' or 'write-behind'"),
                              (2, ValueError, "warm_policy is 2: it is 0 .WRITE_THROUGH."),
                              (None, TypeError, "warm_policy must be a WarmPolicy"),
                              (False, TypeError, "warm_policy must be a WarmPolicy")):
        with pytest.raises(error, match=words):
            planes.config(tmp_path, warm_bytes=WARM, warm_policy=bad)
    with pytest.raises(ValueError, match="disk_limit_bytes is 0"):
        planes.config(tmp_path, warm_bytes=WARM, disk_limit_bytes=0)
    with pytest.raises(selene.SeleneError, match="warm tier of 100 bytes"):
        selene.Store(planes.config(tmp_path, warm_bytes=100))
    with selene.Store(planes.config(tmp_path)) as store:
        st = store.stats()
        assert (st.warm_slots_total, st.warm_records, st.warm_hits) == (0, 0, 0)


def test_pool_fields_are_checked(tmp_path):
    """pool and pool_secret_file go together and take a str (and a path),
    naming the argument; the library refuses a malformed address with its
    own reason, before anything opens."""
    planes = Planes()
    for kwargs, error, words in (
            (dict(pool=7000, pool_secret_file="s"), TypeError,
             "StoreConfig.pool must be a str or None, got int"),
            (dict(pool="h:1", pool_secret_file=32), TypeError,
             "StoreConfig.pool_secret_file must be a path"),
            (dict(pool="h:1"), ValueError, "pool_secret_file go together"),
            (dict(pool_secret_file="s"), ValueError, "pool_secret_file go together")):
        with pytest.raises(error, match=words):
            planes.config(tmp_path, **kwargs)
    with pytest.raises(selene.SeleneError, match="the port must be 1-65535"):
        selene.Store(planes.config(tmp_path, pool="127.0.0.1:0",
                                   pool_secret_file=tmp_path / "secret"))
    with pytest.raises(selene.SeleneError, match="is not host:port"):
        selene.Store(planes.config(tmp_path, pool="nowhere", pool_secret_file="secret"))


def test_lookup_pending_without_pool(tmp_path):
    """Without a pool no lookup waits on anything: lookup_pending() is False
    before and after a lookup, hit or miss."""
    planes = Planes()
    with selene.Store(planes.config(tmp_path)) as store:
        h = store.history(tokens(600))
        assert store.lookup_pending(h) is False
        assert store.lookup(h) is None
        assert store.lookup_pending(h) is False


def test_corrupted_record_fails_by_checksum(tmp_path):
    planes = Planes()
    with selene.Store(planes.config(tmp_path)) as store:
        h = store.history(tokens(600))
        publish_chain(store, planes, h, points=(256,))
    (path,) = record_files(tmp_path)
    with open(path, "r+b") as f:
        f.seek(176)
        page_offset, = struct.unpack("<Q", f.read(8))
        f.seek(page_offset + 5)
        byte = f.read(1)[0]
        f.seek(page_offset + 5)
        f.write(bytes([byte ^ 0x01]))
    with selene.Store(planes.config(tmp_path)) as store:
        h = store.history(tokens(600))
        hit = store.lookup(h)
        store.fetch(hit, list(range(4)), 0, 5)
        ev = wait_events(store, 1)[0]
        assert ev.kind == selene.EventKind.FETCH_FAILED and ev.error == selene.ECHECKSUM
        assert ev.why
        assert store.stats().records_dropped_checksum == 1
        assert store.lookup(h) is None  # removed: the next publication stores it again


def test_peer_and_store_in_one_process(tmp_path):
    """Rank zero's store and rank one's peer over loopback, with a secret."""
    zero, one = Planes(), Planes()
    secret = os.urandom(32)
    listener = __import__("socket").socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]

    def cluster(rank):
        return selene.ClusterConfig(rank=rank, world_size=2, coordinator_host="127.0.0.1",
                                    coordinator_port=port, secret=secret,
                                    listen_fd=listener.fileno() if rank == 0 else -1,
                                    join_timeout_ms=20000)

    peers, errors = [], []

    def run_peer():
        try:
            peers.append(selene.Peer(one.config(tmp_path / "r1", cluster=cluster(1))))
        except Exception as e:  # reported below
            errors.append(e)

    os.makedirs(tmp_path / "r0")
    os.makedirs(tmp_path / "r1")
    thread = threading.Thread(target=run_peer)
    thread.start()
    store = selene.Store(zero.config(tmp_path / "r0", cluster=cluster(0)))
    thread.join()
    assert not errors, errors
    h = store.history(tokens(300))
    one.k[:2] = 0x11
    zero.k[:2] = 0x22
    assert store.publish(1, h, 128, 0, [0, 1], 0) == selene.Outcome.QUEUED
    assert wait_events(store, 1)[0].kind == selene.EventKind.STORED
    hit = store.lookup(h)
    store.fetch(hit, [7, 8], 1, 2)
    assert wait_events(store, 1)[0].kind == selene.EventKind.FETCHED
    assert (one.k[7:9] == 0x11).all() and (zero.k[7:9] == 0x22).all()
    # stop() while another thread waits is refused (it would free what wait uses)
    waiter = threading.Thread(target=peers[0].wait)
    waiter.start()
    for _ in range(500):
        if peers[0]._waiting:
            break
        threading.Event().wait(0.002)
    with pytest.raises(selene.SeleneError, match="wait\\(\\) is running"):
        peers[0].stop()
    store.close()
    waiter.join()
    peers[0].stop()
    peers[0].stop()  # twice is fine
    with pytest.raises(selene.ClosedError, match="^the peer is stopped$"):
        peers[0].wait()
    listener.close()


def test_bootstrap_from_env(tmp_path):
    assert selene.from_env({}).world_size == 1
    secret = tmp_path / "secret"
    secret.write_bytes(os.urandom(32))
    secret.chmod(0o600)
    c = selene.from_env({"SELENE_RANK": "1", "SELENE_WORLD_SIZE": "2",
                         "SELENE_COORDINATOR": "10.0.0.1:29500",
                         "SELENE_SECRET_FILE": str(secret)})
    assert (c.rank, c.world_size, c.coordinator_host, c.coordinator_port) == \
        (1, 2, "10.0.0.1", 29500)
    assert c.secret == secret.read_bytes()
    # an empty SELENE_RANK is unset: Open MPI's numbers, not a world of one
    c = selene.from_env({"SELENE_RANK": "", "SELENE_WORLD_SIZE": "",
                         "OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4",
                         "SELENE_COORDINATOR": "h:7", "SELENE_SECRET_FILE": str(secret)})
    assert (c.rank, c.world_size) == (2, 4)
    with pytest.raises(selene.BootstrapError, match="SELENE_WORLD_SIZE is set"):
        selene.from_env({"SELENE_WORLD_SIZE": "8", "OMPI_COMM_WORLD_RANK": "2",
                         "OMPI_COMM_WORLD_SIZE": "4", "SELENE_COORDINATOR": "h:7",
                         "SELENE_SECRET_FILE": str(secret)})
    c = selene.from_env({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
                         "SELENE_COORDINATOR": "[::1]:7", "SELENE_SECRET_FILE": str(secret)})
    assert c.coordinator_host == "::1" and c.coordinator_port == 7
    bad = [
        {"SELENE_RANK": "1"},
        {"SELENE_RANK": "2", "SELENE_WORLD_SIZE": "2"},
        {"SELENE_RANK": "x", "SELENE_WORLD_SIZE": "2"},
        {"SELENE_RANK": "0", "SELENE_WORLD_SIZE": "2"},
        {"SELENE_RANK": "0", "SELENE_WORLD_SIZE": "2", "SELENE_COORDINATOR": "h:0"},
        {"SELENE_RANK": "0", "SELENE_WORLD_SIZE": "2", "SELENE_COORDINATOR": "h:1"},
        # ASCII digits only, as the C bootstrap reads them
        {"SELENE_RANK": "\u00b2", "SELENE_WORLD_SIZE": "2"},
        {"SELENE_RANK": "\u0661", "SELENE_WORLD_SIZE": "\u0664",
         "SELENE_COORDINATOR": "h:80", "SELENE_SECRET_FILE": str(secret)},
        {"SELENE_RANK": "1", "SELENE_WORLD_SIZE": "2", "SELENE_COORDINATOR": "h:\u00b9",
         "SELENE_SECRET_FILE": str(secret)},
        {"SELENE_RANK": "1", "SELENE_WORLD_SIZE": "2", "SELENE_COORDINATOR": "h:\uff18\uff10",
         "SELENE_SECRET_FILE": str(secret)},
        # an IPv6 address without brackets is ambiguous
        {"SELENE_RANK": "1", "SELENE_WORLD_SIZE": "2", "SELENE_COORDINATOR": "fe80::1:5000",
         "SELENE_SECRET_FILE": str(secret)},
        {"SELENE_RANK": "1", "SELENE_WORLD_SIZE": "2", "SELENE_COORDINATOR": "[]:5000",
         "SELENE_SECRET_FILE": str(secret)},
    ]
    for env in bad:
        with pytest.raises(selene.BootstrapError):
            selene.from_env(env)
    # a coordinator or secret without rank and world: a launch that lost them
    for env in ({"SELENE_COORDINATOR": "h:1"}, {"SELENE_SECRET_FILE": str(secret)}):
        with pytest.raises(selene.BootstrapError, match="is set but SELENE_RANK"):
            selene.from_env(env)
    # a FIFO or a directory as the secret: said, never waited on
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (fifo, tmp_path):
        with pytest.raises(selene.BootstrapError, match="not a regular file"):
            selene.from_env({"SELENE_RANK": "0", "SELENE_WORLD_SIZE": "2",
                             "SELENE_COORDINATOR": "h:1", "SELENE_SECRET_FILE": str(path)})
    secret.write_bytes(b"short")
    with pytest.raises(selene.BootstrapError, match="32 bytes"):
        selene.from_env({"SELENE_RANK": "0", "SELENE_WORLD_SIZE": "2",
                         "SELENE_COORDINATOR": "h:1", "SELENE_SECRET_FILE": str(secret)})


def test_bootstrap_routes():
    from selene.bootstrap import interfaces, route
    host = interfaces()
    assert route(host, host) == (0x7F000001, 0x7F000001)
    zero = ("a", [(0x0A000001, 0xFFFFFF00)])
    assert route(zero, ("b", [(0x0A000002, 0xFFFFFF00)])) == (0x0A000001, 0x0A000002)
    assert route(zero, ("b", [(0x0A000001, 0xFFFFFF00)])) is None  # the same address
    assert route(zero, ("b", [(0x0B000002, 0xFFFFFF00)])) is None


def test_bootstrap_from_mpi_single_rank():
    pytest.importorskip("mpi4py")
    c = selene.from_mpi()
    assert c.world_size >= 1


def test_pip_install_finds_the_build_tree(tmp_path):
    """pip install ./python (offline, into a target directory) gives a
    package that imports from anywhere and finds this checkout's library."""
    import subprocess
    import sys
    import importlib.util
    for module in ("pip", "setuptools"):  # not imported here: torch loaded distutils
        if importlib.util.find_spec(module) is None:
            pytest.skip("%s is not installed (scripts/install-deps python)" % module)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation",
                    "--no-deps", "--no-index", "--target", str(target), here],
                   check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SELENE_LIBRARY")}
    env["PYTHONPATH"] = str(target)
    out = subprocess.run([sys.executable, "-c", "import selene; print(selene.LIBRARY_PATH, "
                          "selene.version())"], cwd=str(tmp_path), env=env, check=True,
                         capture_output=True, text=True).stdout
    assert out.split()[1] == "1.0.0" and "libselene.so" in out


def test_selene_library_names_a_missing_file(tmp_path):
    import subprocess
    import sys
    env = dict(os.environ, SELENE_LIBRARY=str(tmp_path / "nothing.so"))
    run = subprocess.run([sys.executable, "-c", "import selene"], env=env,
                         capture_output=True, text=True)
    assert run.returncode != 0 and "SELENE_LIBRARY" in run.stderr


def test_bootstrap_accept_empty_ranks():
    assert selene.bootstrap({}).accept_empty_ranks is False
    assert selene.bootstrap({"SELENE_ACCEPT_EMPTY_RANKS": "1"}).accept_empty_ranks is True
    with pytest.raises(selene.BootstrapError, match="0 or 1"):
        selene.bootstrap({"SELENE_ACCEPT_EMPTY_RANKS": "yes"})


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def key_vectors():
    """tests/vectors/gen_key_vectors.py: R-KEY-* computed with hashlib."""
    sys.path.insert(0, os.path.join(REPO, "tests", "vectors"))
    try:
        import gen_key_vectors
    finally:
        sys.path.pop(0)
    return gen_key_vectors


def test_model_identity_is_r_key_1():
    """model_name derives R-KEY-1's identity (record/FORMAT.md): the C
    library's vector for "test-model" (tests/test_key.c) and the
    reference generator's (tests/vectors/gen_key_vectors.py) for others."""
    assert selene.model_identity("test-model").hex() == \
        "01803e0724e7bc5d8e8a3bd85e3a9ce8a98cd916e5231ed0e44829335bcb378c"
    for name in ("", "llama-8b", "torch-tp/tiny/2-ranks/seed-1/float32", "m\u00e9lange"):
        assert selene.model_identity(name) == key_vectors().model_identity(name)
    with pytest.raises(TypeError, match="model_name must be a str, got None"):
        selene.model_identity(None)
    with pytest.raises(ValueError, match="NUL"):
        selene.model_identity("a\0b")


def demo_tokens(count):
    """The conversation `selene demo` stores (launch/cmd_demo.c)."""
    state, out = 0x5E1E4E, []
    for _ in range(count):
        state = (state * 6364136223846793005 + 1442695040888963407) % 2**64
        out.append((state >> 33) % 151936)
    return out


def test_store_finds_what_the_c_program_stored(tmp_path):
    """A Python store given the model name `selene demo` was given finds
    and restores the records the C program wrote: one identity (R-KEY-1),
    so one namespace directory (R-REC-2) and the same keys."""
    program = os.environ.get("SELENE_PROGRAM", os.path.join(REPO, "build", "selene"))
    if not os.access(program, os.X_OK):
        pytest.skip("the selene program is not built (%s): make" % program)
    done = subprocess.run([program, "demo", "--dir", str(tmp_path), "--model", "cross-model",
                           "--planes", "2", "--plane-bytes", "4K", "--row-bytes", "4K",
                           "--tokens", "1024"], env=dict(os.environ, SELENE_LOG="error"),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    (written,) = os.listdir(tmp_path)
    vectors = key_vectors()
    namespace = vectors.namespace_identity(vectors.model_identity("cross-model"), 0)
    assert written.startswith(namespace[:8].hex() + "-")
    k, v = (np.zeros((40, 4096), np.uint8) for _ in range(2))
    rows = np.zeros((8, 4096), np.uint8)
    cfg = selene.StoreConfig(
        dir=str(tmp_path), page_tokens=64, model_name="cross-model", device="host",
        page_planes=[selene.Plane("layer.00.key", 4096, k), selene.Plane("layer.00.value", 4096, v)],
        row_plane=selene.Plane("state", 4096, rows), page_count=40, row_count=8)
    with selene.Store(cfg) as store:
        assert os.listdir(tmp_path) == [written]
        assert store.stats().scanned_records == 5
        hit = store.lookup(store.history(demo_tokens(1024)))
        assert hit is not None and (hit.consumed, hit.page_count) == (1024, 16)
        store.fetch(hit, list(range(16)), 0, 1)
        (ev,) = wait_events(store, 1)
        assert (ev.kind, ev.error) == (selene.EventKind.FETCHED, 0), ev
        assert k[:16].any() and v[:16].any() and rows[0].any()


CLOSE_RACE_SCRIPT = '''
import sys, threading, time
sys.path.insert(0, sys.argv[2])
from test_selene import Planes, tokens, publish_chain
import selene, selene.store
planes = Planes()
store = selene.Store(planes.config(sys.argv[1]))
h = store.history(tokens(600))
publish_chain(store, planes, h, points=(128,))
hit = store.lookup(h)
calls = {
    "sel_lookup": lambda: store.lookup(h),
    "sel_poll": lambda: store.poll(),
    "sel_touch": lambda: store.touch(h, 128),
    "sel_fetch": lambda: store.fetch(hit, [5, 6], 0, 1),
    "sel_cancel": lambda: store.cancel(1),
    "sel_store_publish": lambda: store.publish(2, h, 256, 128, list(range(4)), 1),
    "sel_history_create": lambda: store.history(tokens(64)),
}
name = sys.argv[3]
real, entered = getattr(selene.store._LIB, name), threading.Event()

def late(*args):  # a thread preempted between its checks and the C call
    entered.set()
    time.sleep(0.2)
    return real(*args)

setattr(selene.store._LIB, name, late)
got = []

def call():
    try:
        got.append(calls[name]())
    except selene.SeleneError as e:
        got.append(e)

thread = threading.Thread(target=call)
thread.start()
entered.wait()
store.close()
thread.join()
assert not isinstance(got[0], selene.ClosedError), got  # it ran before the close
try:
    calls[name]()
except selene.ClosedError as e:
    assert str(e) == "the store is closed" and e.code == selene.ESTOPPED, e
else:
    raise SystemExit("a call after close() went through")
print("survived", got)
'''


def run_script(script, *args, env=None, timeout=120):
    """Runs script in a fresh interpreter (a crash fails the test, not
    pytest); returns (returncode, output)."""
    env = dict(os.environ, SELENE_LOG="error", **(env or {}))
    done = subprocess.run([sys.executable, "-c", script, *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=timeout)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("name", ["sel_lookup", "sel_poll", "sel_touch", "sel_fetch",
                                  "sel_cancel", "sel_store_publish", "sel_history_create"])
def test_store_close_waits_for_a_call_in_another_thread(tmp_path, name):
    """close() while another thread is inside a call (held just before
    the C call) waits for it rather than free the store under it (a
    SIGSEGV before); the next call raises ClosedError."""
    code, out = run_script(CLOSE_RACE_SCRIPT, tmp_path, os.path.dirname(__file__), name)
    assert code == 0 and "survived" in out, "exit %d: %s" % (code, out)


CLOSE_STRESS_SCRIPT = '''
import os, sys, threading, time
sys.path.insert(0, sys.argv[2])
from test_selene import Planes, tokens, publish_chain
import selene
planes, outcomes = Planes(), set()
for cycle in range(int(sys.argv[3])):
    store = selene.Store(planes.config(os.path.join(sys.argv[1], str(cycle)), durable=False))
    h = store.history(tokens(600))
    publish_chain(store, planes, h, points=(128,))
    hit = store.lookup(h)

    def work(i):
        n = 0
        while True:
            try:
                if i == 0:
                    store.lookup(h)
                elif i == 1:
                    store.poll()
                elif i == 2:
                    store.touch(h, 128)
                elif i == 3:
                    store.stats()
                else:
                    n += 1
                    store.fetch(hit, [10 + i, 20 + i], 0, 1000 * i + n)
            except selene.ClosedError as e:
                outcomes.add(str(e))
                return
            except selene.SeleneError as e:
                if e.code != selene.EQUEUEFULL:
                    raise

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    time.sleep(0.002 * (cycle % 5))
    store.close()
    for t in threads:
        t.join()
assert outcomes == {"the store is closed"}, outcomes
print("survived")
'''


def test_store_close_under_threads_stress(tmp_path):
    """Threads calling lookup, poll, touch, stats and fetch in a loop
    while the store closes, 30 times: each call completes or raises
    ClosedError, never a crash (12 of 270 such runs ended in SIGSEGV)."""
    code, out = run_script(CLOSE_STRESS_SCRIPT, tmp_path, os.path.dirname(__file__), 30)
    assert code == 0 and "survived" in out, "exit %d: %s" % (code, out)


def test_history_close_waits_for_a_call_using_it(tmp_path, monkeypatch):
    """History.close() in one thread while the store's lookup reads the
    same history in another waits for the lookup (it freed the digests
    under it before); a closed history then says so."""
    planes = Planes()
    with selene.Store(planes.config(tmp_path)) as store:
        h = store.history(tokens(600))
        publish_chain(store, planes, h, points=(128,))
        real, entered, got = selene.store._LIB.sel_lookup, threading.Event(), []

        def late(*args):
            entered.set()
            threading.Event().wait(0.2)
            return real(*args)

        monkeypatch.setattr(selene.store._LIB, "sel_lookup", late)
        thread = threading.Thread(target=lambda: got.append(store.lookup(h)))
        thread.start()
        entered.wait()
        h.close()
        thread.join()
        assert got[0] is not None and got[0].consumed == 128
        with pytest.raises(selene.ClosedError, match="^the history is closed$"):
            store.lookup(h)


REPOINT_SCRIPT = '''
import gc, sys
import numpy as np
sys.path.insert(0, sys.argv[2])
from test_selene import tokens, wait_events
import selene
kind, how, unit = sys.argv[3], sys.argv[4], int(sys.argv[5])
PAGES, ROWS = 32, 4
if kind == "torch":
    import torch
    k, rows = torch.zeros((PAGES, unit // 4)), torch.zeros((ROWS, 64))
else:
    k, rows = np.zeros((PAGES, unit), np.uint8), np.zeros((ROWS, 256), np.uint8)
cfg = selene.StoreConfig(
    dir=sys.argv[1], page_tokens=64, model_name="repoint", device="host",
    page_planes=[selene.Plane("k", unit, k)], row_plane=selene.Plane("state", 256, rows),
    page_count=PAGES, row_count=ROWS)
store = selene.Store(cfg)
h = store.history(tokens(256))
assert store.publish(1, h, 128, 0, [0, 1], 0) == selene.Outcome.QUEUED
wait_events(store, 1)
hit = store.lookup(h)
if how == "set_":
    k.set_(torch.zeros(10))
elif how == "grow":
    k.resize_(PAGES * 4, unit // 4)
elif how == "shrink":
    k.resize_(PAGES // 2, unit // 4)
else:
    k.resize((PAGES * 4, unit), refcheck=False)  # numpy reallocates
gc.collect()
for call in (lambda: store.fetch(hit, [5, 6], 1, 1),
             lambda: store.publish(2, h, 256, 128, [0, 1, 2, 3], 1)):
    try:
        call()
    except ValueError as e:
        assert "plane k is no longer the memory the store was opened over" in str(e), e
    else:
        raise SystemExit("a call on a re-pointed plane went through")
assert store.poll() == []
store.close()
print("survived")
'''


@pytest.mark.parametrize("kind,how", [("torch", "set_"), ("torch", "grow"),
                                      ("torch", "shrink"), ("numpy", "resize")])
@pytest.mark.parametrize("unit", [1024, 256 * 1024])
def test_repointed_plane_is_refused(tmp_path, kind, how, unit):
    """A plane's tensor re-pointed (set_) or resized (resize_, numpy's
    resize) after open: fetch and publish refuse, naming the plane,
    instead of copying into freed memory (SIGSEGV with 256 KiB pages,
    silent heap corruption with 1 KiB ones, before)."""
    if kind == "torch":
        pytest.importorskip("torch")
    code, out = run_script(REPOINT_SCRIPT, tmp_path, os.path.dirname(__file__), kind, how, unit)
    assert code == 0 and "survived" in out, "exit %d: %s" % (code, out)


HELD_STORAGE_SCRIPT = '''
import gc, sys
import torch
sys.path.insert(0, sys.argv[2])
from test_selene import tokens, wait_events
import selene
PAGES, unit = 32, 256 * 1024
k, rows = torch.zeros((PAGES, unit // 4)), torch.zeros((4, 64))
cfg = selene.StoreConfig(
    dir=sys.argv[1], page_tokens=64, model_name="held", device="host",
    page_planes=[selene.Plane("k", unit, k)], row_plane=selene.Plane("state", 256, rows),
    page_count=PAGES, row_count=4)
store = selene.Store(cfg)
h = store.history(tokens(256))
assert store.publish(1, h, 128, 0, [0, 1], 0) == selene.Outcome.QUEUED
wait_events(store, 1)
store.fetch(store.lookup(h), [5, 6], 1, 1)  # its reads sleep (failpoint)
k.set_(torch.zeros(10))  # the tensor's memory would be freed here
gc.collect()
(ev,) = wait_events(store, 1)
assert ev.kind == selene.EventKind.FETCHED, ev
store.close()
print("survived")
'''


def test_plane_storage_outlives_a_set_under_a_running_fetch(tmp_path):
    """A fetch in flight when the plane's tensor is pointed elsewhere
    (set_) lands in the storage the store holds, not in freed memory
    (SIGSEGV before: the binding held the tensor, not its storage). The
    same holding keeps a Peer's planes alive."""
    pytest.importorskip("torch")
    code, out = run_script(HELD_STORAGE_SCRIPT, tmp_path, os.path.dirname(__file__),
                           env={"SELENE_FAILPOINTS": "disk.read=sleep(300)"})
    assert code == 0 and "survived" in out, "exit %d: %s" % (code, out)


def test_wrong_types_name_the_python_argument(tmp_path):
    """None (or another wrong type) where an argument or field is expected
    raises TypeError naming it, never ctypes' ArgumentError numbered by
    the C argument, nor an AttributeError from inside the binding."""
    planes = Planes()
    store = selene.Store(planes.config(tmp_path / "s"))
    h = store.history(tokens(600))
    publish_chain(store, planes, h, points=(128,))
    hit = store.lookup(h)

    def config(**fields):
        cfg = planes.config(tmp_path / "c")
        for name, value in fields.items():
            setattr(cfg, name, value)
        return cfg

    k, v = (selene.Plane(n, UNIT, a) for n, a in (("k", planes.k), ("v", planes.v)))
    cases = [
        (lambda: selene.strerror(None), r"strerror\(\): code must be an int, got None"),
        (lambda: selene.device_address(None), "cannot take a device address of None"),
        (lambda: selene.Plane(None, UNIT, planes.k), "Plane.name must be a str, got None"),
        (lambda: selene.Plane("k", None, planes.k), "Plane.unit_bytes must be an int, got None"),
        (lambda: selene.Plane("k", UNIT, None), "Plane.address must be a torch tensor"),
        (lambda: selene.Store(None), r"Store\(\): config must be a StoreConfig, got None"),
        (lambda: selene.Peer(None), r"Peer\(\): config must be a StoreConfig, got None"),
        (lambda: selene.StoreConfig(dir=None, page_tokens=64, page_planes=[k], row_plane=k,
                                    page_count=1, row_count=1, model_name="m"),
         "StoreConfig.dir must be a path"),
        (lambda: selene.ClusterConfig(rank=None, world_size=2),
         "ClusterConfig.rank must be an int, got None"),
        (lambda: selene.ClusterConfig(rank=0, world_size=2, secret=None),
         "ClusterConfig.secret must be bytes, got None"),
    ]
    for name in ("page_tokens", "page_count", "row_count", "state_mode", "device_ordinal",
                 "disk_limit_bytes", "records_max"):
        cases.append((lambda name=name: selene.Store(config(**{name: None})),
                      "StoreConfig.%s must be an int, got None" % name))
    cases += [
        (lambda: selene.Store(config(dir=None)), "StoreConfig.dir must be a path"),
        (lambda: selene.Store(config(page_planes=None)),
         "StoreConfig.page_planes must be a sequence of Plane, got None"),
        (lambda: selene.Store(config(page_planes=[k, None])),
         r"StoreConfig.page_planes\[1\] must be a Plane, got None"),
        (lambda: selene.Store(config(row_plane=None)), "StoreConfig.row_plane must be a Plane"),
        (lambda: selene.Store(config(model_identity="x" * 32)),
         "StoreConfig.model_identity must be bytes or None, got str"),
        (lambda: selene.Store(config(model_name=b"m")), "StoreConfig.model_name must be a str"),
        (lambda: selene.Store(config(durable=None)), "StoreConfig.durable must be a bool"),
        (lambda: selene.Store(config(cluster=5)), "StoreConfig.cluster must be a ClusterConfig"),
        (lambda: store.history(None), r"history\(\): tokens must be a sequence of ints, got None"),
        (lambda: store.history([1, None]), r"history\(\): tokens must be a sequence of ints"),
        (lambda: store.lookup(None), r"lookup\(\): history must be a History from this "
                                     r"store's history\(\), got None"),
        (lambda: store.lookup(h, None), r"lookup\(\): resident must be an int, got None"),
        (lambda: store.fetch(None, [0, 1], 0, 1),
         r"fetch\(\): hit must be a Hit from this store's lookup\(\), got None"),
        (lambda: store.fetch(hit, None, 0, 1), r"fetch\(\): page_ids must be a sequence of ints"),
        (lambda: store.fetch(hit, [None, 1], 0, 1), r"fetch\(\): page_ids\[0\] must be an int"),
        (lambda: store.fetch(hit, [0, 1], None, 1), r"fetch\(\): state_slot must be an int"),
        (lambda: store.fetch(hit, [0, 1], 0, None), r"fetch\(\): waiter must be an int"),
        (lambda: store.cancel(None), r"cancel\(\): waiter must be an int, got None"),
        (lambda: store.touch(None, 128), r"touch\(\): history must be a History"),
        (lambda: store.touch(h, None), r"touch\(\): consumed must be an int"),
        (lambda: store.publish(None, h, 128, 0, [0, 1], 0), r"publish\(\): checkpoint must be"),
        (lambda: store.publish(1, None, 128, 0, [0, 1], 0), r"publish\(\): history must be"),
        (lambda: store.publish(1, h, None, 0, [0, 1], 0), r"publish\(\): consumed must be"),
        (lambda: store.publish(1, h, 128, None, [0, 1], 0), r"publish\(\): parent_consumed must"),
        (lambda: store.publish(1, h, 128, 0, None, 0), r"publish\(\): page_ids must be"),
        (lambda: store.publish(1, h, 128, 0, [0, 1], None), r"publish\(\): state_slot must be"),
        (lambda: store.poll(None), r"poll\(\): max_events must be an int, got None"),
        (lambda: store.close(None), r"close\(\): drain_timeout_ms must be an int, got None"),
    ]
    for call, message in cases:
        with pytest.raises(TypeError, match=message):
            call()
    assert store.poll() == []  # nothing was submitted by any of them
    store.close()


def test_refused_publication_and_fetch_say_why(tmp_path):
    """A publication or fetch the library would refuse with -EINVAL is
    refused first, naming the argument and its bound (an InvalidArgument-
    Error: a SeleneError of -EINVAL and a ValueError), instead of a bare
    "Invalid argument (-22)"; nothing is submitted."""
    planes = Planes()
    with selene.Store(planes.config(tmp_path)) as store:
        h = store.history(tokens(600))
        publish_chain(store, planes, h, points=(128,))
        hit = store.lookup(h)
        ids = list(range(9))
        cases = [
            (lambda: store.publish(1, h, 128, 0, [0, PAGES], 0),
             r"publish\(\): page_ids\[1\] is 32, past the device's last page 31 \(page_count 32\)"),
            (lambda: store.publish(1, h, 128, 0, [0, 1], ROWS),
             r"publish\(\): state_slot 4 is past the device's last row 3 \(row_count 4\)"),
            (lambda: store.publish(1, h, 700, 0, list(range(10)), 0),
             r"publish\(\): consumed 700 is not in 1..600, the history's tokens"),
            (lambda: store.publish(1, h, 0, 0, ids, 0), r"publish\(\): consumed 0 is not in"),
            (lambda: store.publish(1, h, 256, 256, ids, 0),
             r"publish\(\): parent_consumed 256 is at or past consumed 256"),
            (lambda: store.publish(1, h, 256, 300, ids, 0),
             r"publish\(\): parent_consumed 300 is at or past consumed 256"),
            (lambda: store.publish(1, h, 256, 0, [0, 1], 0),
             r"publish\(\): publishing 256 tokens needs 4 page ids, got 2"),
            (lambda: store.fetch(hit, [PAGES, 0], 0, 1),
             r"fetch\(\): page_ids\[0\] is 32, past the device's last page 31"),
            (lambda: store.fetch(hit, [0, 1], ROWS, 1),
             r"fetch\(\): state_slot 4 is past the device's last row 3"),
            (lambda: store.fetch(hit, [0], 0, 1), r"fetch\(\): the hit needs 2 page ids, got 1"),
            (lambda: store.touch(h, 0), r"touch\(\): consumed 0 is not in 1..600"),
            (lambda: store.touch(h, 601), r"touch\(\): consumed 601 is not in 1..600"),
        ]
        for call, message in cases:
            with pytest.raises(selene.InvalidArgumentError, match=message) as e:
                call()
            assert e.value.code == -22 and isinstance(e.value, ValueError)
            assert str(e.value).startswith("Invalid argument (-22): ")
        long = store.history(tokens(64 * (PAGES + 1)))
        with pytest.raises(selene.InvalidArgumentError,
                           match=r"consumed 2112 spans 33 pages, more than the device's 32"):
            store.publish(1, long, 64 * (PAGES + 1), 0, list(range(PAGES)) * 2, 0)
        assert store.poll() == [] and store.stats().published_queued == 1


def test_calls_after_close_say_the_store_is_closed(tmp_path):
    """Every call on a closed store raises ClosedError saying "the store
    is closed" (a SeleneError of SEL_ESTOPPED), not "stopped after an
    earlier failure"; a closed history says so too."""
    planes = Planes()
    store = selene.Store(planes.config(tmp_path))
    h = store.history(tokens(600))
    publish_chain(store, planes, h, points=(128,))
    hit = store.lookup(h)
    h2 = store.history(tokens(64))
    h2.close()
    with pytest.raises(selene.ClosedError) as e:
        store.lookup(h2)
    assert str(e.value) == "the history is closed"
    store.close()
    for call in (lambda: store.history([1, 2]), lambda: store.lookup(h),
                 lambda: store.fetch(hit, [0, 1], 0, 1), lambda: store.cancel(1),
                 lambda: store.touch(h, 128), lambda: store.poll(), lambda: store.stats(),
                 lambda: store.metrics(), lambda: store.publish(1, h, 128, 0, [0, 1], 0),
                 lambda: store.handle):
        with pytest.raises(selene.ClosedError) as e:
            call()
        assert str(e.value) == "the store is closed" and e.value.code == selene.ESTOPPED
    store.close()  # twice is fine


def test_docstrings_say_what_the_library_does(tmp_path):
    """What publish(), lookup() and Hit say about parent_consumed, a child
    offered while its parent is stored, the row moving to an only child,
    and skip_pages is what the library does (skip_pages was documented as
    the pages the GPU holds)."""
    planes = Planes()
    with selene.Store(planes.config(tmp_path)) as store:
        t = tokens(600)
        h, short = store.history(t), store.history(t[:300])
        ids = list(range(9))
        publish_chain(store, planes, h, points=(128, 256))  # a root, then a child
        assert store.lookup(short).consumed == 256
        assert store.publish(3, h, 512, 256, ids, 2) == selene.Outcome.QUEUED
        # its parent (512) is still being stored: Retry
        assert store.publish(4, h, 576, 512, ids, 3) == selene.Outcome.RETRY
        assert wait_events(store, 1)[0].id == 3
        # 256's only child committed: its row moved, 300 tokens find the root
        assert store.lookup(short).consumed == 128 and store.stats().truncations == 1
        assert store.publish(5, h, 256, 128, ids, 1) == selene.Outcome.QUEUED  # the row again
        assert wait_events(store, 1)[0].id == 5
        assert store.lookup(short).consumed == 256
        # skip_pages: resident // 64 - p // 64 for the stopping ancestor p
        for resident, p in ((256, 256), (320, 256), (128, 128), (200, 128)):
            hit = store.lookup(h, resident)
            assert hit.consumed == 512 and hit.page_count == 8 - resident // 64
            assert hit.skip_pages == resident // 64 - p // 64
    assert "the pages from\n        resident // page_tokens" in selene.Hit.__doc__
    assert "resident // page_tokens - p // page_tokens" in selene.Hit.__doc__
    assert "It is not the number\n        of pages the GPU holds" in selene.Hit.__doc__
    publish = " ".join(selene.Store.publish.__doc__.split())
    assert "parent_consumed is the consumed count of the nearest ancestor checkpoint" in publish
    assert "answers RETRY until the parent's STORED event" in publish
    assert "Once a checkpoint's only child commits, the checkpoint stops being offered " \
           "at its own length: its row moves to the child" in publish
    assert "A root record keeps its row" in publish
    assert "only child has committed is no longer found" in " ".join(
        selene.Store.lookup.__doc__.split())


def test_bootstrap_refuses_a_secret_others_may_use(tmp_path):
    """A secret file group or others may read, write or execute is refused
    naming its mode, as the C bootstrap and ssh do; 0600 and 0400 pass."""
    secret = tmp_path / "secret"
    secret.write_bytes(os.urandom(32))
    env = {"SELENE_RANK": "1", "SELENE_WORLD_SIZE": "2",
           "SELENE_COORDINATOR": "10.0.0.1:29500", "SELENE_SECRET_FILE": str(secret)}
    for mode in (0o644, 0o640, 0o604, 0o620, 0o602, 0o610):
        secret.chmod(mode)
        with pytest.raises(selene.BootstrapError,
                           match="permissions %04o for .* are too open.*chmod 600" % mode):
            selene.from_env(env)
    for mode in (0o600, 0o400):
        secret.chmod(mode)
        assert selene.from_env(env).secret == secret.read_bytes()


def test_gpu_export_without_pool_is_refused(tmp_path):
    """Without a pool the GPU export calls raise the library's -ENOTSUP
    (offers) or ENOTFOUND (answers), and a reason the API does not know is
    refused before the library is called."""
    planes = Planes()
    with selene.Store(planes.config(tmp_path)) as store:
        h = store.history(tokens(600))
        with pytest.raises(selene.SeleneError) as info:
            store.gpu_hold(1, h, 256)
        assert info.value.code == -errno.ENOTSUP
        with pytest.raises(selene.SeleneError) as info:
            store.export_pinned(1, [0, 1, 2, 3], 0)
        assert info.value.code == selene.ENOTFOUND
        with pytest.raises(selene.InvalidArgumentError, match="neither ENOTFOUND"):
            store.export_refuse(1, -5)
        with pytest.raises(selene.InvalidArgumentError, match="consumed 10 is not in"):
            store.gpu_hold(1, h, 10)


def test_gpu_export_through_a_pool(tmp_path):
    """A checkpoint offered from A's GPU (never stored) reaches B through a
    `selene pool` manager: A's engine answers EXPORT_REQUESTED with the
    pages it pins, EXPORT_ENDED comes once, and B restores the bytes into
    other page ids."""
    program = os.environ.get("SELENE_PROGRAM", os.path.join(REPO, "build", "selene"))
    if not os.access(program, os.X_OK):
        pytest.skip("the selene program is not built (%s): make" % program)
    import socket
    import time
    secret = tmp_path / "pool.secret"
    secret.write_bytes(b"\x42" * 32)
    os.chmod(secret, 0o600)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    manager = subprocess.Popen([program, "pool", "--listen", "127.0.0.1:%d" % port,
                                "--secret", str(secret), "--memory", "8M",
                                "--name", "py-gpu-export"],
                               env=dict(os.environ, SELENE_LOG="error"))
    try:
        for _ in range(500):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.01)
        a_planes, b_planes = Planes(), Planes()
        rng = np.random.default_rng(5)
        a_planes.k[:] = rng.integers(0, 256, a_planes.k.shape, dtype=np.uint8)
        a_planes.v[:] = rng.integers(0, 256, a_planes.v.shape, dtype=np.uint8)
        a_planes.rows[2] = rng.integers(0, 256, ROW, dtype=np.uint8)
        pool = dict(pool="127.0.0.1:%d" % port, pool_secret_file=str(secret))
        with selene.Store(a_planes.config(tmp_path / "a", **pool)) as a, \
                selene.Store(b_planes.config(tmp_path / "b", **pool)) as b:
            ha = a.history(tokens(600))
            a.gpu_hold(9, ha, 512)  # 8 pages, in pages 20..27 of A, row 2
            ended, hit = [], None
            for _ in range(2000):
                for ev in a.poll():
                    if ev.kind == selene.EventKind.EXPORT_REQUESTED:
                        assert (ev.checkpoint, ev.tokens) == (9, 512)
                        a.export_pinned(ev.id, list(range(20, 28)), 2)
                    elif ev.kind == selene.EventKind.EXPORT_ENDED:
                        ended.append(ev)
                hb = b.history(tokens(600))
                hit = b.lookup(hb)
                while hit is None and b.lookup_pending(hb):
                    time.sleep(0.0005)
                    hit = b.lookup(hb)
                if hit is not None and hit.consumed == 512 and ended:
                    break
                time.sleep(0.005)
            assert hit is not None and hit.consumed == 512
            assert len(ended) == 1 and ended[0].error == 0 and ended[0].checkpoint == 9
            assert b.fetch(hit, list(range(4, 12)), 1, 77) is False
            (ev,) = wait_events(b, 1)
            assert ev.kind == selene.EventKind.FETCHED
            assert np.array_equal(b_planes.k[4:12], a_planes.k[20:28])
            assert np.array_equal(b_planes.v[4:12], a_planes.v[20:28])
            assert np.array_equal(b_planes.rows[1], a_planes.rows[2])
            a.gpu_evicted(9)
    finally:
        manager.terminate()
        manager.wait(timeout=30)
