"""libselene.so through ctypes: finding the library, the C structs of
include/selene/store.h mirrored field for field, in the header's order
(python/tests' test_lib_structs_match_the_header compiles the header and
compares every offset and size), and every function's prototype. Nothing
here is public; selene.store wraps it."""

import ctypes
import operator
import ctypes.util
import os
import sys

VERSION = "1.0.0"
SONAME = "libselene.so.1"


def _candidates():
    """Where the library may be, in order: SELENE_LIBRARY, the build tree
    this package sits in (python/selene -> build/), the installed prefix
    (the loader's path, then this interpreter's and /usr/local's lib), and
    last the build tree of the checkout pip installed this package from."""
    named = os.environ.get("SELENE_LIBRARY")
    if named:
        return [named]
    here = os.path.dirname(os.path.abspath(__file__))
    tree = os.path.join(os.path.dirname(os.path.dirname(here)), "build")
    found = [os.path.join(tree, "libselene.so." + VERSION)]
    found.append(SONAME)
    by_name = ctypes.util.find_library("selene")
    if by_name:
        found.append(by_name)
    for prefix in (sys.prefix, "/usr/local", "/usr"):
        found.append(os.path.join(prefix, "lib", SONAME))
    try:  # written by pip install ./python: the checkout it came from
        from ._build_tree import BUILD_TREE
        found.append(os.path.join(BUILD_TREE, "libselene.so." + VERSION))
    except ImportError:
        pass
    return found


def load():
    """Loads libselene; raises OSError naming every place it looked."""
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(path + " (missing)")
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise OSError("libselene not found: build it with make, install it with make "
                  "install, or set SELENE_LIBRARY; tried " + "; ".join(tried))


u8, u16, u32, u64 = ctypes.c_uint8, ctypes.c_uint16, ctypes.c_uint32, ctypes.c_uint64
c_int, c_bool, c_char_p, c_void_p = ctypes.c_int, ctypes.c_bool, ctypes.c_char_p, ctypes.c_void_p

# What an int may be in each C integer type: ctypes would wrap anything else.
INT_RANGES = {u8: (0, 2**8 - 1), u16: (0, 2**16 - 1), u32: (0, 2**32 - 1),
              u64: (0, 2**64 - 1), c_int: (-2**31, 2**31 - 1),
              ctypes.c_size_t: (0, 2**(8 * ctypes.sizeof(ctypes.c_size_t)) - 1)}


def check_int(what: str, ctype, value) -> None:
    """Raises ValueError when value is an integer (an int, or anything with
    __index__, such as a numpy integer) that ctype cannot hold."""
    bounds = INT_RANGES.get(ctype)
    if bounds is None or isinstance(value, bool) or not hasattr(value, "__index__"):
        return
    value = operator.index(value)
    if not bounds[0] <= value <= bounds[1]:
        raise ValueError("%s is %d, outside %d..%d" % (what, value, bounds[0], bounds[1]))


class Checked(ctypes.Structure):
    """A structure whose integer fields refuse values their C type cannot hold."""

    def __init__(self, *args, **kwargs):
        types = dict(self._fields_)
        named = list(zip([f[0] for f in self._fields_], args)) + list(kwargs.items())
        for name, value in named:
            check_int("%s.%s" % (type(self).__name__, name), types.get(name), value)
        super().__init__(*args, **kwargs)


class Cluster(Checked):
    _fields_ = [("rank", u32), ("world_size", u32), ("coordinator_host", c_char_p),
                ("coordinator_port", u16), ("listen_fd", c_int),
                ("rank_addresses", ctypes.POINTER(c_char_p)), ("secret", u8 * 32),
                ("join_timeout_ms", u32), ("silence_timeout_ms", u32),
                ("job_timeout_ms", u32), ("accept_empty_ranks", c_bool)]


class Plane(Checked):
    _fields_ = [("name", c_char_p), ("unit_bytes", u64), ("device_address", u64)]


class StoreConfig(Checked):
    _fields_ = [("dir", c_char_p), ("model_identity", u8 * 32), ("state_mode", u8),
                ("page_tokens", u32), ("page_plane_count", u32),
                ("page_planes", ctypes.POINTER(Plane)), ("row_plane", Plane),
                ("page_count", u32), ("row_count", u32), ("device", c_char_p),
                ("device_ordinal", c_int), ("disk_limit_bytes", u64), ("durable", c_bool),
                ("records_max", u32), ("cluster", ctypes.POINTER(Cluster)),
                ("warm_bytes", u64), ("warm_policy", u8), ("max_age_ms", u64),
                ("pool", c_char_p), ("pool_secret_file", c_char_p)]


class Hit(ctypes.Structure):
    _fields_ = [("consumed", u64), ("page_count", u32), ("skip_pages", u32),
                ("resident", u64), ("endpoint", u32), ("generation", u64)]


class Publication(ctypes.Structure):  # Store.publish checks every field first
    _fields_ = [("checkpoint", u64), ("history", c_void_p), ("consumed", u64),
                ("parent_consumed", u64), ("page_ids", ctypes.POINTER(u32)),
                ("state_slot", u32)]


class Event(ctypes.Structure):
    _fields_ = [("kind", c_int), ("id", u64), ("error", c_int), ("why", ctypes.c_char * 200),
                ("checkpoint", u64), ("tokens", u64)]


LATENCY_BUCKETS = 12
LATENCY_BOUNDS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 5.0)


class LatencyHistogram(ctypes.Structure):
    _fields_ = [("counts", u64 * (LATENCY_BUCKETS + 1)), ("count", u64),
                ("sum_seconds", ctypes.c_double)]


STATS_COUNTERS = (
    "lookups hits reused_tokens published_queued published_present published_retry "
    "published_oversize stored store_failures fetches fetch_failures bytes_stored "
    "bytes_fetched evictions truncations unlinks records disk_bytes disk_limit_bytes "
    "jobs_in_flight scanned_records").split()
STATS_DROPS = "records_dropped_checksum records_dropped_header records_dropped_missing".split()
# The warm tier's counters (sel_store_config.warm_bytes).
STATS_WARM = ("warm_records warm_bytes warm_slots_used warm_slots_total warm_hits "
              "warm_evictions warm_partial_hits warm_read_throughs "
              "warm_read_through_bytes warm_read_failures warm_dirty_records "
              "warm_dirty_bytes warm_writes warm_spills warm_write_failures "
              "warm_retry_dirty warm_dirty_dropped expired warm_expired").split()
# The pool's counters (sel_store_config.pool).
STATS_POOL = ("pool_attached pool_puts pool_put_failures pool_hits pool_claims "
              "pool_claim_bytes pool_claim_failures pool_refusals").split()


class Stats(ctypes.Structure):
    _fields_ = ([(name, u64) for name in STATS_COUNTERS] +
                [("store_latency", LatencyHistogram), ("fetch_latency", LatencyHistogram)] +
                [(name, u64) for name in STATS_DROPS] +
                [(name, u64) for name in STATS_WARM] +
                [(name, u64) for name in STATS_POOL])


def declare(lib):
    """Every public function's prototype (include/selene/store.h)."""
    p = ctypes.POINTER
    protos = {
        "sel_strerror": (c_char_p, [c_int]),
        "sel_version": (c_char_p, []),
        "sel_store_open": (c_int, [p(StoreConfig), p(c_void_p), ctypes.c_char_p, ctypes.c_size_t]),
        "sel_store_close": (c_int, [c_void_p, u64]),
        "sel_peer_start": (c_int, [p(StoreConfig), p(c_void_p), ctypes.c_char_p, ctypes.c_size_t]),
        "sel_peer_wait": (c_int, [c_void_p]),
        "sel_peer_stop": (c_int, [c_void_p]),
        "sel_history_create": (c_int, [c_void_p, p(u32), u64, p(c_void_p)]),
        "sel_history_destroy": (None, [c_void_p]),
        "sel_lookup": (c_bool, [c_void_p, c_void_p, u64, p(Hit)]),
        "sel_lookup_pending": (c_bool, [c_void_p, c_void_p]),
        "sel_fetch": (c_int, [c_void_p, p(Hit), p(u32), u32, u64, p(c_bool)]),
        "sel_cancel": (c_int, [c_void_p, u64]),
        "sel_touch": (c_int, [c_void_p, c_void_p, u64]),
        "sel_store_publish": (c_int, [c_void_p, p(Publication), p(c_int)]),
        "sel_poll": (u32, [c_void_p, p(Event), u32]),
        "sel_gpu_hold": (c_int, [c_void_p, u64, c_void_p, u64]),
        "sel_gpu_evicted": (c_int, [c_void_p, u64]),
        "sel_gpu_evictions_lost": (c_int, [c_void_p]),
        "sel_export_pinned": (c_int, [c_void_p, u64, p(u32), u32, u32]),
        "sel_export_refuse": (c_int, [c_void_p, u64, c_int]),
        "sel_store_stats": (c_int, [c_void_p, p(Stats)]),
        "sel_store_metrics": (c_int, [c_void_p, ctypes.c_char_p, ctypes.c_size_t]),
    }
    for name, (restype, argtypes) in protos.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
        setattr(lib, name, _range_checked(name, fn, argtypes))
    return lib


def _range_checked(name, fn, argtypes):
    """fn, refusing an int argument its C type cannot hold (ValueError)."""
    def call(*args):
        for i, (ctype, value) in enumerate(zip(argtypes, args)):
            check_int("%s argument %d" % (name, i + 1), ctype, value)
        return fn(*args)
    return call
