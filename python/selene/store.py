"""The store API of include/selene/store.h in Python: Store (rank zero),
Peer (every other rank), History, and the values they exchange. Every
negative code the library returns raises SeleneError; nothing here waits
for I/O that the C call would not wait for."""

import array
import ctypes
import dataclasses
import enum
import errno
import hashlib
import operator
import os
import threading
from dataclasses import dataclass, field, fields
from typing import List, Optional, Sequence

from . import _lib

_LIB, LIBRARY_PATH = _lib.load()
_lib.declare(_LIB)

DISK_LIMIT_AUTO = (1 << 64) - 1  # one tenth of the free space at open
# What a store or peer that could not drain leaves behind: its copies may
# still write the planes, so they are never freed (the C side keeps its own).
_UNDRAINED: list = []
METRICS_BYTES_FIRST = 1 << 16    # metrics() starts here and grows fourfold
POLL_EVENTS_MAX = 4096           # poll()'s array: a store holds at most 1024 events

# Selene's own error band (include/selene/selene.h), in order.
EBADHEADER, ECHECKSUM, EMISMATCH, ELOCKED, EGEOMETRY, ETOOBIG, EPROTO, \
    EQUEUEFULL, ESTOPPED, ENOTFOUND, EFAILPOINT = range(-30500, -30489)


def strerror(code: int) -> str:
    """sel_strerror: the text of 0, a negative errno or a SEL_E* code."""
    return _LIB.sel_strerror(_int("strerror(): code", code, _lib.c_int)).decode()


def version() -> str:
    return _LIB.sel_version().decode()


class SeleneError(Exception):
    """A negative code from the library: .code, .message (sel_strerror's
    text) and .detail (the library's own sentence, where it gave one)."""

    def __init__(self, code: int, detail: str = ""):
        self.code = code
        self.message = strerror(code)
        self.detail = detail
        super().__init__("%s (%d)%s" % (self.message, code, ": " + detail if detail else ""))


class ClosedError(SeleneError):
    """A call on a store or peer that is closed (or a history closed):
    .code is SEL_ESTOPPED, and the message says what was closed."""

    def __init__(self, what: str):
        super().__init__(ESTOPPED, what)
        self.args = (what,)

    def __str__(self):
        return self.detail


class InvalidArgumentError(SeleneError, ValueError):
    """An argument the library would refuse with -EINVAL, refused before
    the call with the argument and its bound named: .code is -EINVAL, and
    it is a ValueError too."""

    def __init__(self, detail: str):
        super().__init__(-errno.EINVAL, detail)


def _check(code: int, detail: str = "") -> int:
    if code < 0:
        raise SeleneError(code, detail)
    return code


class Outcome(enum.IntEnum):
    QUEUED = 0     # copying: keep the checkpoint's pages pinned until its event
    PRESENT = 1    # a committed copy exists
    RETRY = 2      # no room or queue space now, or the parent still being stored:
                   # offer it again later
    OVERSIZE = 3   # can never fit


class EventKind(enum.IntEnum):
    STORED = 0        # restorable (with a warm tier: in every rank's warm slots)
    STORE_FAILED = 1
    FETCHED = 2
    FETCH_FAILED = 3
    FATAL = 4
    ON_DISK = 5       # warm tier only, after STORED: its record file is on every
                      # rank's disk, so it survives a restart
    EXPORT_REQUESTED = 6  # id: an export; checkpoint, tokens: the offered GPU
                          # checkpoint the pool asks for (export_pinned or
                          # export_refuse answer it)
    EXPORT_ENDED = 7      # id: an export export_pinned took; its pin may go (once)


class WarmPolicy(enum.IntEnum):
    """When a warm record's file is written (StoreConfig.warm_policy)."""
    WRITE_THROUGH = 0  # as soon as it is warm
    WRITE_BEHIND = 1   # only when its slots are needed, or at close()'s drain


@dataclass(frozen=True)
class Event:
    kind: EventKind
    id: int         # the checkpoint (store events) or the waiter (fetch events)
    error: int      # 0, or why it failed (a code for strerror)
    why: str        # the library's sentence, or sel_strerror's text
    checkpoint: int = 0  # the export events' checkpoint
    tokens: int = 0      # EXPORT_REQUESTED: the checkpoint's tokens


def device_address(obj) -> int:
    """A plane's base address: an int, a torch tensor (data_ptr()), a numpy
    array (its __array_interface__), or a ctypes object; TypeError for
    anything else."""
    if isinstance(obj, int):
        return obj
    if hasattr(obj, "data_ptr"):
        return obj.data_ptr()
    if hasattr(obj, "__array_interface__"):
        return obj.__array_interface__["data"][0]
    if isinstance(obj, ctypes._SimpleCData) or isinstance(obj, ctypes.Array):
        return ctypes.addressof(obj)
    raise TypeError("cannot take a device address of %s: a plane's address is a torch "
                    "tensor, a numpy array, a ctypes object or an int" % _kind(obj))


@dataclass
class Plane:
    """One plane of a rank's cache: name, one page's (or row's) bytes, and
    its base address (anything device_address takes).

    A tensor or array must stay the memory it was at open. The store holds
    a tensor's storage, so a set_() cannot free it under a copy, and
    publish() and fetch() refuse (ValueError naming the plane) once a plane
    was re-pointed or resized (set_, resize_, numpy's resize): the store
    would copy into memory the caller no longer sees, or that is freed. A
    resize_() that grows a tensor frees its old memory all the same, so
    never resize a plane while its copies run; a Peer, whose copies rank
    zero starts, cannot check at all."""
    name: str
    unit_bytes: int
    address: object

    def __post_init__(self):
        _check_plane("Plane", self)


@dataclass
class ClusterConfig:
    """struct sel_cluster: where this process sits among the ranks."""
    rank: int
    world_size: int
    coordinator_host: str = "127.0.0.1"
    coordinator_port: int = 0
    secret: bytes = b""
    listen_fd: int = -1                    # rank zero: a listening socket to use
    rank_addresses: Optional[List[str]] = None
    join_timeout_ms: int = 60000
    silence_timeout_ms: int = 10000
    job_timeout_ms: int = 60000
    accept_empty_ranks: bool = False       # rank zero: form over unmarked empty ranks (deletes)
    listener: object = field(default=None, repr=False)  # keeps listen_fd open

    def __post_init__(self):
        _check_cluster("ClusterConfig", self)


@dataclass
class StoreConfig:
    """struct sel_store_config. model_identity (32 bytes) or model_name
    (derived as model_identity(model_name) does, as the C library and the
    selene program derive it) names the model whose bytes these are.

    warm_bytes: the warm tier, this many bytes of each rank's host memory
    in front of its disk (docs/DESIGN.md section 6), registered with the
    device once at open; 0 (the default) has none. It needs a disk store
    (disk_limit_bytes not 0), the same figure on every rank (a peer whose
    differs is refused at the join), room for at least one page record and
    the row, and with the engine's staging at most half of the memory
    available to the process (the open names both figures otherwise).
    A store is copied from the device into warm slots, its record file
    written from them (warm_policy says when), and stays warm; a restore
    whose records are all warm copies from the slots and reads no file
    (Stats.warm_hits); the least recently used leave the tier to make
    room (Stats.warm_evictions), their files staying. A restart starts it
    empty: restores then read the disk.

    warm_policy: when a warm record's file is written, the same on every
    rank: WarmPolicy.WRITE_THROUGH (the default) as soon as it is warm,
    WarmPolicy.WRITE_BEHIND only when its slots are needed for another
    record (a spill) or at close()'s drain; also spelled "write-through"
    and "write-behind". Either way, with a tier, a store's STORED event
    comes once every rank holds it warm (restorable from then on, and
    its pages may be unpinned), and ON_DISK once its file is committed on
    every rank; until then a restart loses it (a miss, never wrong
    bytes).

    max_age_ms: a record not used for this many milliseconds (stored,
    found PRESENT, fetched, touched; one found at open counts from its
    file's time) is dropped from every tier on every rank, by a sweep
    that poll() runs at most once a minute (or once per max age, if
    shorter), of at most 64 leaves at a time; 0 (the default): never.
    Counted in Stats.expired and Stats.warm_expired, not evictions.

    pool: a pool manager's address, "host:port" ("[IPv6]:port"), that
    the store attaches to at open to share records with other instances
    of the same model and layout (docs/DESIGN.md section 13); None (the
    default): no pool. A manager that does not answer within 10 s, or
    refuses a rank, leaves the store on its local tiers with one warning
    (the open still succeeds); it never attaches later.

    pool_secret_file: with pool, the path of the pool secret (exactly 32
    bytes, mode 600 or stricter), proven to the manager, never sent."""
    dir: str
    page_tokens: int
    page_planes: Sequence[Plane]
    row_plane: Plane
    page_count: int
    row_count: int
    model_identity: Optional[bytes] = None
    model_name: Optional[str] = None
    state_mode: int = 0
    device: str = "auto"
    device_ordinal: int = 0
    disk_limit_bytes: int = DISK_LIMIT_AUTO
    durable: bool = True
    records_max: int = 0
    cluster: Optional[ClusterConfig] = None
    warm_bytes: int = 0
    warm_policy: object = WarmPolicy.WRITE_THROUGH
    max_age_ms: int = 0
    pool: Optional[str] = None
    pool_secret_file: Optional[object] = None

    def __post_init__(self):
        _check_config("StoreConfig", self)


MODEL_DOMAIN = b"selene-model-v1"  # R-KEY-1's prefix (record/FORMAT.md)


def model_identity(model_name: str) -> bytes:
    """The 32-byte model identity of a model name, R-KEY-1 of
    record/FORMAT.md: BLAKE2b-256 of b"selene-model-v1" followed by the
    name's UTF-8 bytes (no separator, no terminator), as the C library and
    the selene program derive it, so a C engine and a Python engine given
    the same name share their records."""
    if not isinstance(model_name, str):
        raise TypeError("model_name must be a str, got %s" % _kind(model_name))
    if "\0" in model_name:
        raise ValueError("model_name holds a NUL character: the C library's names end there")
    return hashlib.blake2b(MODEL_DOMAIN + model_name.encode(), digest_size=32).digest()


def _kind(value) -> str:
    """How an error message names what it got instead."""
    return "None" if value is None else type(value).__name__


def _int(what: str, value, ctype) -> int:
    """value as an int that ctype holds: TypeError for what is not an
    integer (None included), ValueError outside ctype's range; what names
    the argument."""
    if not hasattr(value, "__index__"):
        raise TypeError("%s must be an int, got %s" % (what, _kind(value)))
    value = operator.index(value)
    _lib.check_int(what, ctype, value)
    return value


def _flag(what: str, value) -> bool:
    if not (isinstance(value, bool) or hasattr(value, "__index__")):
        raise TypeError("%s must be a bool, got %s" % (what, _kind(value)))
    return bool(value)


def _str(what: str, value, optional: bool = False) -> None:
    if not (isinstance(value, str) or (optional and value is None)):
        raise TypeError("%s must be a str%s, got %s"
                        % (what, " or None" if optional else "", _kind(value)))


def _bytes(what: str, value, optional: bool = False) -> None:
    if not (isinstance(value, (bytes, bytearray, memoryview)) or (optional and value is None)):
        raise TypeError("%s must be bytes%s, got %s"
                        % (what, " or None" if optional else "", _kind(value)))


def _check_plane(what: str, p) -> None:
    if not isinstance(p, Plane):
        raise TypeError("%s must be a Plane, got %s" % (what, _kind(p)))
    _str(what + ".name", p.name)
    _int(what + ".unit_bytes", p.unit_bytes, _lib.u64)
    if p.address is None:
        raise TypeError("%s.address must be a torch tensor, a numpy array, a ctypes object "
                        "or an int, got None" % what)


def _check_cluster(what: str, c) -> None:
    if not isinstance(c, ClusterConfig):
        raise TypeError("%s must be a ClusterConfig, got %s" % (what, _kind(c)))
    for name, ctype in (("rank", _lib.u32), ("world_size", _lib.u32),
                        ("coordinator_port", _lib.u16), ("listen_fd", _lib.c_int),
                        ("join_timeout_ms", _lib.u32), ("silence_timeout_ms", _lib.u32),
                        ("job_timeout_ms", _lib.u32)):
        _int("%s.%s" % (what, name), getattr(c, name), ctype)
    _str(what + ".coordinator_host", c.coordinator_host)
    _bytes(what + ".secret", c.secret)
    _flag(what + ".accept_empty_ranks", c.accept_empty_ranks)
    if c.rank_addresses is not None:
        if isinstance(c.rank_addresses, str):
            raise TypeError("%s.rank_addresses must be a list of str, got str" % what)
        for i, a in enumerate(c.rank_addresses):
            _str("%s.rank_addresses[%d]" % (what, i), a)


def _check_config(what: str, c) -> None:
    """TypeError or ValueError naming the first field of c that is not
    what struct sel_store_config can take."""
    if not isinstance(c, StoreConfig):
        raise TypeError("%s must be a StoreConfig, got %s" % (what, _kind(c)))
    if not isinstance(c.dir, (str, bytes, os.PathLike)):
        raise TypeError("StoreConfig.dir must be a path (a str or os.PathLike), got %s"
                        % _kind(c.dir))
    for name, ctype in (("page_tokens", _lib.u32), ("page_count", _lib.u32),
                        ("row_count", _lib.u32), ("state_mode", _lib.u8),
                        ("device_ordinal", _lib.c_int), ("disk_limit_bytes", _lib.u64),
                        ("records_max", _lib.u32), ("warm_bytes", _lib.u64),
                        ("max_age_ms", _lib.u64)):
        _int("StoreConfig." + name, getattr(c, name), ctype)
    if isinstance(c.warm_bytes, bool):
        raise TypeError("StoreConfig.warm_bytes must be an int (bytes of host memory), got bool")
    _warm_policy(c.warm_policy)
    if c.warm_bytes and not c.disk_limit_bytes:
        raise InvalidArgumentError(
            "StoreConfig.warm_bytes is %d but StoreConfig.disk_limit_bytes is 0 (no disk "
            "store): the warm tier holds records in front of a disk store" % c.warm_bytes)
    if c.page_planes is None or isinstance(c.page_planes, (str, bytes, Plane)) or \
            not hasattr(c.page_planes, "__iter__"):
        raise TypeError("StoreConfig.page_planes must be a sequence of Plane, got %s"
                        % _kind(c.page_planes))
    for i, p in enumerate(c.page_planes):
        _check_plane("StoreConfig.page_planes[%d]" % i, p)
    _check_plane("StoreConfig.row_plane", c.row_plane)
    _bytes("StoreConfig.model_identity", c.model_identity, optional=True)
    _str("StoreConfig.model_name", c.model_name, optional=True)
    _str("StoreConfig.device", c.device, optional=True)
    _flag("StoreConfig.durable", c.durable)
    _str("StoreConfig.pool", c.pool, optional=True)
    if c.pool_secret_file is not None and \
            not isinstance(c.pool_secret_file, (str, bytes, os.PathLike)):
        raise TypeError("StoreConfig.pool_secret_file must be a path (a str or "
                        "os.PathLike) or None, got %s" % _kind(c.pool_secret_file))
    if (c.pool is None) != (c.pool_secret_file is None):
        raise InvalidArgumentError(
            "StoreConfig.pool and StoreConfig.pool_secret_file go together: pool is %r, "
            "pool_secret_file is %r" % (c.pool, c.pool_secret_file))
    if c.cluster is not None:
        _check_cluster("StoreConfig.cluster", c.cluster)


WARM_POLICY_NAMES = {"write-through": WarmPolicy.WRITE_THROUGH,
                     "write-behind": WarmPolicy.WRITE_BEHIND}


def _warm_policy(value) -> WarmPolicy:
    """StoreConfig.warm_policy as a WarmPolicy: TypeError for what is not a
    WarmPolicy, an int or a str, ValueError for one that names none."""
    if isinstance(value, str):
        if value not in WARM_POLICY_NAMES:
            raise ValueError("StoreConfig.warm_policy is %r: it is %s" % (
                value, " or ".join(repr(n) for n in WARM_POLICY_NAMES)))
        return WARM_POLICY_NAMES[value]
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError("StoreConfig.warm_policy must be a WarmPolicy (or \"write-through\" "
                        "or \"write-behind\"), got %s" % _kind(value))
    try:
        return WarmPolicy(operator.index(value))
    except ValueError:
        raise ValueError("StoreConfig.warm_policy is %d: it is %s" % (
            operator.index(value), ", ".join("%d (%s)" % (int(p), p.name) for p in WarmPolicy)))


def _identity(config: StoreConfig) -> bytes:
    if config.model_identity is not None:
        if len(config.model_identity) != 32:
            raise ValueError("StoreConfig.model_identity must be 32 bytes, got %d"
                             % len(config.model_identity))
        return bytes(config.model_identity)
    if config.model_name is None:
        raise ValueError("a store needs StoreConfig.model_identity or StoreConfig.model_name")
    return model_identity(config.model_name)


def _c_cluster(c: ClusterConfig, keep: list):
    if len(c.secret) != 32 and c.world_size > 1:
        raise ValueError("the launch secret must be 32 bytes")
    out = _lib.Cluster(rank=c.rank, world_size=c.world_size,
                       coordinator_host=c.coordinator_host.encode(),
                       coordinator_port=c.coordinator_port, listen_fd=c.listen_fd,
                       join_timeout_ms=c.join_timeout_ms,
                       silence_timeout_ms=c.silence_timeout_ms,
                       job_timeout_ms=c.job_timeout_ms,
                       accept_empty_ranks=c.accept_empty_ranks)
    out.secret[:] = list(c.secret.ljust(32, b"\0"))
    if c.rank_addresses is not None:
        if len(c.rank_addresses) != c.world_size:
            raise ValueError("rank_addresses needs one address per rank")
        addresses = (ctypes.c_char_p * c.world_size)(*[a.encode() for a in c.rank_addresses])
        keep.append(addresses)
        out.rank_addresses = ctypes.cast(addresses, ctypes.POINTER(ctypes.c_char_p))
    keep.append(out)
    return out


def _plane_bytes(obj) -> Optional[int]:
    """The bytes a plane's object holds, or None for a bare address; raises
    ValueError for memory the library cannot write as one extent."""
    if isinstance(obj, int):
        return None
    if hasattr(obj, "data_ptr"):  # a torch tensor
        if hasattr(obj, "is_contiguous") and not obj.is_contiguous():
            raise ValueError("a plane's tensor must be contiguous")
        return obj.numel() * obj.element_size()
    if hasattr(obj, "__array_interface__"):  # a numpy array
        flags = getattr(obj, "flags", None)
        if flags is not None and not (flags["C_CONTIGUOUS"] and flags["WRITEABLE"]):
            raise ValueError("a plane's array must be C-contiguous and writable")
        return obj.nbytes
    if isinstance(obj, (ctypes._SimpleCData, ctypes.Array)):
        return ctypes.sizeof(obj)
    return None


def _tensor_extent(t) -> tuple:
    return t.data_ptr(), t.numel() * t.element_size(), t.is_contiguous()


def _array_extent(a) -> tuple:
    return a.__array_interface__["data"][0], a.nbytes, a.flags.c_contiguous


def _extent_of(obj):
    """The function giving (address, bytes, contiguous) of obj's memory
    now, for a torch tensor or a numpy array; None for what cannot be
    re-pointed (an int, a ctypes object)."""
    if hasattr(obj, "data_ptr"):
        return _tensor_extent
    if hasattr(obj, "__array_interface__") and hasattr(obj, "flags"):
        return _array_extent
    return None


def _storage(obj):
    """A torch tensor's storage, or None: held, it keeps the memory alive
    when the tensor is pointed elsewhere (set_), as the tensor alone does
    not."""
    if not hasattr(obj, "data_ptr"):
        return None
    for name in ("untyped_storage", "storage"):  # torch 2 names the first
        get = getattr(obj, name, None)
        if callable(get):
            try:
                return get()
            except Exception:  # not a tensor after all: nothing to hold
                return None
    return None


def _first_dimension(obj) -> Optional[int]:
    """The length of a tensor's or array's first dimension, or None."""
    shape = getattr(obj, "shape", None)
    return int(shape[0]) if shape is not None and len(shape) > 0 else None


def _c_plane(p: Plane, count: int, keep: list, extents: list):
    """The C plane of count units; keeps p's memory alive as long as keep
    (a tensor's storage too), and adds (name, object, its extent function,
    its extent at open) to extents for a tensor or array, whose memory
    can be re-pointed."""
    name = p.name.encode()
    dtype = getattr(p.address, "dtype", None)
    if getattr(dtype, "hasobject", False):  # numpy's object dtype, alone or in a record
        raise ValueError("plane %s holds Python objects (dtype %s): restored bytes would "
                         "overwrite their pointers" % (p.name, dtype))
    held = _plane_bytes(p.address)
    if held is not None and held < p.unit_bytes * count:
        raise ValueError("plane %s holds %d bytes, less than %d units of %d"
                         % (p.name, held, count, p.unit_bytes))
    # one unit per entry of the first dimension: a unit of another size
    # would put unit i elsewhere than at tensor[i] (a dtype mixed up)
    if held is not None and count > 0 and _first_dimension(p.address) == count \
            and held != p.unit_bytes * count:
        raise ValueError("plane %s has %d entries of %d bytes, but unit_bytes is %d"
                         % (p.name, count, held // count, p.unit_bytes))
    keep.append(name)
    keep.append(p.address)
    keep.append(_storage(p.address))
    try:
        address = device_address(p.address)
    except TypeError as e:
        raise TypeError("plane %s: %s" % (p.name, e))
    extent = _extent_of(p.address)
    if extent is not None:
        extents.append((p.name, p.address, extent, (address, held, True)))
    return _lib.Plane(name, p.unit_bytes, address)


def _device_of(config: StoreConfig) -> str:
    """The device backend for config's planes: a CUDA tensor needs cuda
    (the host backend would read its GPU address as host memory), on the
    GPU that device_ordinal names."""
    device = config.device or "auto"
    for p in list(config.page_planes) + [config.row_plane]:
        if not getattr(p.address, "is_cuda", False):
            continue
        if device == "host":
            raise ValueError("plane %s is a CUDA tensor, but the device is host" % p.name)
        index = p.address.device.index
        if index is not None and index != config.device_ordinal:
            raise ValueError("plane %s is on cuda:%d, but device_ordinal is %d"
                             % (p.name, index, config.device_ordinal))
        if device == "auto":
            device = "cuda"  # any other name is the library's to judge
    return device


def _c_config(config: StoreConfig):
    """The C config, the Python objects its pointers need alive, and the
    planes' extents at open (_c_plane)."""
    keep: list = []
    extents: list = []
    device = _device_of(config)
    if config.cluster is not None and not 0 <= config.cluster.rank < max(1, config.cluster.world_size):
        raise ValueError("rank %d is not among %d ranks"
                         % (config.cluster.rank, config.cluster.world_size))
    planes = (_lib.Plane * max(1, len(config.page_planes)))(
        *[_c_plane(p, config.page_count, keep, extents) for p in config.page_planes])
    out = _lib.StoreConfig(
        dir=os.fsencode(config.dir), state_mode=config.state_mode,
        page_tokens=config.page_tokens, page_plane_count=len(config.page_planes),
        page_planes=planes, row_plane=_c_plane(config.row_plane, config.row_count, keep, extents),
        page_count=config.page_count, row_count=config.row_count,
        device=device.encode(),
        device_ordinal=config.device_ordinal, disk_limit_bytes=config.disk_limit_bytes,
        durable=config.durable, records_max=config.records_max,
        warm_bytes=config.warm_bytes, warm_policy=_warm_policy(config.warm_policy),
        max_age_ms=config.max_age_ms,
        pool=config.pool.encode() if config.pool is not None else None,
        pool_secret_file=os.fsencode(config.pool_secret_file)
        if config.pool_secret_file is not None else None)
    out.model_identity[:] = list(_identity(config))
    if config.cluster is not None and config.cluster.world_size > 1:
        out.cluster = ctypes.pointer(_c_cluster(config.cluster, keep))
    keep.append(planes)
    return out, keep, extents


def _planes_in_place(call: str, extents: list) -> None:
    """Raises ValueError when a plane's tensor or array no longer is the
    memory the store was opened over: a set_() or resize_() (or numpy's
    resize) re-pointed or resized it, and the store would copy into
    memory that is freed or that the caller no longer sees."""
    for name, obj, extent, at_open in extents:
        now = extent(obj)
        if now == at_open:
            continue
        address, size, _ = at_open
        raise ValueError(
            "%s: plane %s is no longer the memory the store was opened over: it was "
            "0x%x (%d bytes), it is 0x%x (%d bytes%s) (re-pointed or resized by set_(), "
            "resize_() or resize()); the store copies only to and from the memory given "
            "at open: close it and open one over the plane as it is now"
            % (call, name, address, size, now[0], now[1],
               "" if now[2] else ", not contiguous"))


def _int_list(what: str, values) -> list:
    """values (a sequence, a numpy array, a torch tensor) as Python ints
    that a uint32_t holds, so that ids are compared by value: a tensor's
    elements are tensors, hashed by identity. TypeError or ValueError
    naming what, or the element."""
    if values is None or isinstance(values, (str, bytes, bytearray)):
        raise TypeError("%s must be a sequence of ints, got %s" % (what, _kind(values)))
    listed = values.tolist() if hasattr(values, "tolist") else values
    try:
        listed = list(listed)
    except TypeError:
        raise TypeError("%s must be a sequence of ints, got %s" % (what, _kind(values)))
    # the common case at once: Python ints within range
    if all(type(v) is int for v in listed) and \
            (not listed or (min(listed) >= 0 and max(listed) < 2**32)):
        return listed
    return [_int("%s[%d]" % (what, i), v, _lib.u32) for i, v in enumerate(listed)]


class History:
    """A request's tokens with their block digests (sel_history_create).
    Made by Store.history; freed by close() or when collected. close()
    waits for a call of its store that is using it in another thread."""

    def __init__(self, handle: int, token_count: int, owner: object = None,
                 lock: Optional[threading.RLock] = None):
        self._handle = handle
        self.token_count = token_count
        self.owner = owner  # the Store open that made it
        self._lock = lock   # its store's: the store's calls read it under it

    @property
    def handle(self):
        if not self._handle:
            raise ClosedError("the history is closed")
        return self._handle

    def close(self):
        if self._lock is None:
            self._destroy()
            return
        with self._lock:
            self._destroy()

    def _destroy(self):
        handle, self._handle = self._handle, None
        if handle:
            _LIB.sel_history_destroy(handle)

    # Collected: no call holds it any more, so nothing to wait for (and a
    # finalizer must not wait on a lock).
    __del__ = _destroy

    def __len__(self):
        return self.token_count


@dataclass(frozen=True)
class Hit:
    """sel_lookup's answer, valid for one fetch while the store lives.

    consumed: the restored endpoint's token count.
    page_count: how many page ids fetch() takes: the pages from
        resident // page_tokens up to consumed // page_tokens (a page
        that resident ends inside is restored whole).
    skip_pages: how many leading pages of the restored chain fetch()
        leaves out because they lie within the resident tokens. The chain
        starts after its stopping ancestor p, the deepest record of it at
        or below resident (p = 0: the root), so skip_pages is
        resident // page_tokens - p // page_tokens. It is not the number
        of pages the GPU holds (resident // page_tokens): with a record
        ending exactly at resident it is 0. The engine needs neither
        figure to fetch; it is the C field of the same name.
    resident: the resident count the lookup was given.
    """
    consumed: int
    page_count: int
    skip_pages: int
    resident: int
    raw: _lib.Hit = field(repr=False, compare=False)
    owner: object = field(default=None, repr=False, compare=False)  # its Store's open


@dataclass
class LatencyHistogram:
    bounds: tuple
    counts: List[int]   # one per bound, then one above every bound
    count: int
    sum_seconds: float


@dataclass
class Stats:
    """sel_store_stats' counters (include/selene/store.h names each).

    By tier: the disk tier is records, disk_bytes and disk_limit_bytes
    (rank zero's index), evictions (records deleted for room) and the
    fetches that read record files; the warm tier
    (StoreConfig.warm_bytes) is warm_records (records held warm on every
    rank), warm_bytes (their slots' bytes, a rank's), warm_slots_used
    (slots held by warm records and warm stores in flight) of
    warm_slots_total (0: no warm tier), warm_hits (fetches served from
    warm slots, reading no file) and warm_evictions (records dropped from
    warm for room; their files stay). fetches counts the restores of both
    tiers: those that are not warm hits read record files. A fetch of a
    chain warm in part counts in warm_partial_hits; records a fetch read
    from their files into warm slots (read-through), and those slots'
    bytes, in warm_read_throughs and warm_read_through_bytes;
    read-through fetches that failed (their slots freed) in
    warm_read_failures.

    The warm tier's writes (StoreConfig.warm_policy): warm_dirty_records
    and warm_dirty_bytes, warm records whose files are not yet on every
    rank's disk (never dropped from warm; a restart loses them);
    warm_writes, the files written from warm slots, of which warm_spills
    were written because their slots were needed; warm_write_failures
    (the record stays dirty and is tried again); warm_retry_dirty,
    publications answered RETRY because dirty records held the slots
    they needed; warm_dirty_dropped, dirty records dropped unwritten
    (condemned, or left at close).

    Max age (StoreConfig.max_age_ms): expired, records dropped from every
    tier because they went unused that long, and warm_expired, those of
    them that were warm.

    The pool (StoreConfig.pool): pool_attached, 1 while every rank is
    attached; pool_puts, records put as they left the local tiers and
    accepted with every rank's share, and pool_put_failures (dropped as
    without a pool); pool_hits, lookups answered from the pool;
    pool_claims, restores claimed from the pool, their bytes (a rank's,
    pool_claim_bytes) and pool_claim_failures (the restore failed);
    pool_refusals, the manager's refusals of any kind."""
    lookups: int
    hits: int
    reused_tokens: int
    published_queued: int
    published_present: int
    published_retry: int
    published_oversize: int
    stored: int
    store_failures: int
    fetches: int
    fetch_failures: int
    bytes_stored: int
    bytes_fetched: int
    evictions: int
    truncations: int
    unlinks: int
    records: int
    disk_bytes: int
    disk_limit_bytes: int
    jobs_in_flight: int
    scanned_records: int
    store_latency: LatencyHistogram
    fetch_latency: LatencyHistogram
    records_dropped_checksum: int
    records_dropped_header: int
    records_dropped_missing: int
    warm_records: int
    warm_bytes: int
    warm_slots_used: int
    warm_slots_total: int
    warm_hits: int
    warm_evictions: int
    warm_partial_hits: int
    warm_read_throughs: int
    warm_read_through_bytes: int
    warm_read_failures: int
    warm_dirty_records: int
    warm_dirty_bytes: int
    warm_writes: int
    warm_spills: int
    warm_write_failures: int
    warm_retry_dirty: int
    warm_dirty_dropped: int
    expired: int
    warm_expired: int
    pool_attached: int
    pool_puts: int
    pool_put_failures: int
    pool_hits: int
    pool_claims: int
    pool_claim_bytes: int
    pool_claim_failures: int
    pool_refusals: int

    @classmethod
    def _from_c(cls, c: _lib.Stats) -> "Stats":
        values = {}
        for f in fields(cls):
            v = getattr(c, f.name)
            if isinstance(v, _lib.LatencyHistogram):
                v = LatencyHistogram(_lib.LATENCY_BOUNDS, list(v.counts), v.count, v.sum_seconds)
            values[f.name] = v
        return cls(**values)


class _Using:
    """Store._using's context manager (a class: a generator's costs a
    microsecond more a call)."""
    __slots__ = ("store",)

    def __init__(self, store: "Store"):
        self.store = store

    def __enter__(self) -> int:
        store = self.store
        if store._closing:  # a close is draining: no use waiting for it
            raise ClosedError("the store is closed")
        store._lock.acquire()
        if not store._handle:
            store._lock.release()
            raise ClosedError("the store is closed")
        return store._handle

    def __exit__(self, *exc):
        self.store._lock.release()


class Store:
    """Rank zero's store (sel_store_open). Use as a context manager, or
    call close().

    Threads: the C library takes its calls from one thread; this object
    may be shared between threads all the same. Its calls are serialized
    by one lock (held while the C call runs, which never waits for I/O,
    with the GIL released), so a call racing close() either completes
    before the close or raises ClosedError ("the store is closed"); close()
    waits for the call inside, and calls that come while it drains fail at
    once. stats() and metrics() take no lock: the library answers them
    from any thread, also while a close drains. The binding makes no
    callback into Python, so the lock cannot deadlock with one."""

    def __init__(self, config: StoreConfig):
        self._lock = threading.RLock()
        self._closing = False
        self._handle = None
        _check_config("Store(): config", config)
        # a private copy: the caller may change or reuse its own
        config = dataclasses.replace(config, page_planes=tuple(config.page_planes))
        c, self._keep, self._extents = _c_config(config)
        handle = ctypes.c_void_p()
        err = ctypes.create_string_buffer(512)
        _check(_LIB.sel_store_open(ctypes.byref(c), ctypes.byref(handle), err, len(err)),
               err.value.decode(errors="replace"))
        self._handle = handle.value
        self._open = object()  # what this open's hits carry
        self.config = config

    @property
    def handle(self):
        if not self._handle:
            raise ClosedError("the store is closed")
        return self._handle

    def _using(self) -> "_Using":
        """with store._using() as handle: the open handle, with the
        store's lock held until the block ends, so close() cannot free it
        under the call."""
        return _Using(self)

    def close(self, drain_timeout_ms: int = 60000):
        """Drains and frees (sel_store_close); raises SeleneError(ESTOPPED)
        when the transport had stopped or jobs outlived the drain. Waits
        for a call running in another thread; later calls raise
        ClosedError. Closing twice is fine."""
        lock = self.__dict__.get("_lock")
        if lock is None:
            return  # the constructor failed before anything was opened
        drain_timeout_ms = _int("close(): drain_timeout_ms", drain_timeout_ms, _lib.u64)
        self._closing = True
        with lock:
            handle, self._handle = self._handle, None
            if not handle:
                return
            code = _LIB.sel_store_close(handle, drain_timeout_ms)
        if code == ESTOPPED:
            _UNDRAINED.append(self._keep)
        _check(code)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_handle", None):
            try:
                self.close()
            except Exception:  # a finalizer has no caller to tell
                pass

    def history(self, tokens) -> History:
        """A history of tokens (a sequence of ints in 0..2**32-1: a list,
        an array.array, a numpy array, a torch tensor)."""
        if isinstance(tokens, (bytes, bytearray, str)):  # array() would take their bytes
            raise ValueError("history(): tokens are a sequence of ints, not %s" % _kind(tokens))
        if tokens is None:
            raise TypeError("history(): tokens must be a sequence of ints, got None")
        if hasattr(tokens, "tolist"):
            tokens = tokens.tolist()
        try:
            buf = array.array("I", tokens)
        except OverflowError as e:
            raise ValueError("history(): tokens must be ints in 0..%d (%s)" % (2**32 - 1, e))
        except TypeError as e:
            raise TypeError("history(): tokens must be a sequence of ints (%s)" % e)
        out = ctypes.c_void_p()
        pointer = ctypes.cast(buf.buffer_info()[0], ctypes.POINTER(ctypes.c_uint32))
        with self._using() as handle:
            _check(_LIB.sel_history_create(handle, pointer, len(buf), ctypes.byref(out)))
        return History(out.value, len(buf), self._open, self._lock)

    def _own(self, call: str, history) -> History:
        """history, when this open made it: another store's digests name
        another model's records."""
        if not isinstance(history, History):
            raise TypeError("%s: history must be a History from this store's history(), got %s"
                            % (call, _kind(history)))
        if history.owner is not self._open:
            raise ValueError("%s: the history is from another store, or from an earlier open "
                             "of this one" % call)
        return history

    def _page_ids(self, call: str, page_ids) -> list:
        """page_ids as ints, each a page of the device (page_count)."""
        ids = _int_list(call + ": page_ids", page_ids)
        count = self.config.page_count
        if ids and (min(ids) < 0 or max(ids) >= count):
            i, bad = next((i, v) for i, v in enumerate(ids) if not 0 <= v < count)
            raise InvalidArgumentError("%s: page_ids[%d] is %d, past the device's last page %d "
                                       "(page_count %d)" % (call, i, bad, count - 1, count))
        return ids

    def _state_slot(self, call: str, state_slot) -> int:
        state_slot = _int(call + ": state_slot", state_slot, _lib.u32)
        rows = self.config.row_count
        if state_slot >= rows:
            raise InvalidArgumentError("%s: state_slot %d is past the device's last row %d "
                                       "(row_count %d)" % (call, state_slot, rows - 1, rows))
        return state_slot

    def lookup(self, history: History, resident: int = 0) -> Optional[Hit]:
        """The deepest restorable prefix of history beyond resident tokens
        (the deepest ready checkpoint the GPU still holds), or None. A
        checkpoint whose only child has committed is no longer found at
        its own length (see publish()): a history ending between the two
        finds an ancestor that kept its row, or nothing."""
        self._own("lookup()", history)
        resident = _int("lookup(): resident", resident, _lib.u64)
        raw = _lib.Hit()
        with self._using() as handle:
            if not _LIB.sel_lookup(handle, history.handle, resident, ctypes.byref(raw)):
                return None
        return Hit(raw.consumed, raw.page_count, raw.skip_pages, raw.resident, raw, self._open)

    def lookup_pending(self, history: History) -> bool:
        """sel_lookup_pending: whether the pool may still answer history's
        lookup within its grace period, so that calling lookup() again later
        (never waiting in between) may find a longer prefix. False without a
        pool, before the history's first lookup, and once the answer came
        or the grace period ran out."""
        self._own("lookup_pending()", history)
        with self._using() as handle:
            return bool(_LIB.sel_lookup_pending(handle, history.handle))

    def fetch(self, hit: Hit, page_ids: Sequence[int], state_slot: int, waiter: int) -> bool:
        """Restores hit into page_ids (distinct ints: a sequence, a numpy
        array or a torch tensor) and state_slot; the event for waiter comes
        through poll(). Returns whether waiter joined an equal fetch."""
        if not isinstance(hit, Hit):
            raise TypeError("fetch(): hit must be a Hit from this store's lookup(), got %s"
                            % _kind(hit))
        if hit.owner is not getattr(self, "_open", None):
            raise ValueError("fetch(): the hit is from another store, or from an earlier open "
                             "of this one")
        ids = self._page_ids("fetch()", page_ids)
        if len(ids) != hit.page_count:
            raise InvalidArgumentError("fetch(): the hit needs %d page ids, got %d"
                                       % (hit.page_count, len(ids)))
        if len(set(ids)) != len(ids):
            raise InvalidArgumentError("fetch(): page_ids must be distinct: pages would "
                                       "overwrite each other")
        state_slot = self._state_slot("fetch()", state_slot)
        waiter = _int("fetch(): waiter", waiter, _lib.u64)
        joined = ctypes.c_bool()
        c_ids = (ctypes.c_uint32 * max(1, len(ids)))(*ids)
        with self._using() as handle:
            _planes_in_place("fetch()", self._extents)
            _check(_LIB.sel_fetch(handle, ctypes.byref(hit.raw), c_ids, state_slot, waiter,
                                  ctypes.byref(joined)))
        return joined.value

    def cancel(self, waiter: int):
        """Removes a joined waiter (sel_cancel); an owner still hears. Raises
        SeleneError (SEL_ENOTFOUND) for an unknown waiter, and for one whose
        fetch already completed: its event still comes through poll."""
        waiter = _int("cancel(): waiter", waiter, _lib.u64)
        with self._using() as handle:
            _check(_LIB.sel_cancel(handle, waiter))

    def touch(self, history: History, consumed: int):
        """A GPU-cache hit on history's first consumed tokens (sel_touch)."""
        self._own("touch()", history)
        consumed = _int("touch(): consumed", consumed, _lib.u64)
        if not 0 < consumed <= history.token_count:
            raise InvalidArgumentError("touch(): consumed %d is not in 1..%d, the history's "
                                       "tokens" % (consumed, history.token_count))
        with self._using() as handle:
            _check(_LIB.sel_touch(handle, history.handle, consumed))

    def publish(self, checkpoint: int, history: History, consumed: int,
                parent_consumed: int, page_ids: Sequence[int], state_slot: int) -> Outcome:
        """Offers a checkpoint (sel_store_publish): history's first
        consumed tokens, whose pages are page_ids (every page of the chain
        from the root, consumed // page_tokens of them) and whose row is
        state_slot. checkpoint is the engine's id, echoed in its STORED or
        STORE_FAILED event.

        parent_consumed is the consumed count of the nearest ancestor
        checkpoint of the same history that this engine offered before,
        0 for none; it is below consumed. The record then holds only the
        pages from parent_consumed // page_tokens on, and a restore reads
        the rest from the parent's record; a parent the store does not
        hold (never offered, refused, evicted) makes it a root record
        holding every page of its chain.

        Returns QUEUED (copying: keep its pages and row pinned until its
        event), PRESENT (a committed copy exists), RETRY (offer it again
        later: room or queue space is short, or its parent is still being
        stored: a child offered while its parent's copy is in flight
        answers RETRY until the parent's STORED event) or OVERSIZE (it can
        never fit).

        Once a checkpoint's only child commits, the checkpoint stops being
        offered at its own length: its row moves to the child (seed design
        section 2.3: the record keeps its pages for the child's chain and
        drops its row), so lookup() no longer finds it there. A root record
        keeps its row. Offered again, the checkpoint has its row stored
        again (QUEUED)."""
        call = "publish()"
        checkpoint = _int("publish(): checkpoint", checkpoint, _lib.u64)
        self._own(call, history)
        consumed = _int("publish(): consumed", consumed, _lib.u64)
        parent_consumed = _int("publish(): parent_consumed", parent_consumed, _lib.u64)
        ids = self._page_ids(call, page_ids)
        state_slot = self._state_slot(call, state_slot)
        if not 0 < consumed <= history.token_count:
            raise InvalidArgumentError("publish(): consumed %d is not in 1..%d, the history's "
                                       "tokens" % (consumed, history.token_count))
        if parent_consumed >= consumed:
            raise InvalidArgumentError(
                "publish(): parent_consumed %d is at or past consumed %d: the parent is a "
                "shorter checkpoint of the same history (0 for none)" % (parent_consumed, consumed))
        pages = consumed // self.config.page_tokens
        if pages > self.config.page_count:
            raise InvalidArgumentError("publish(): consumed %d spans %d pages, more than the "
                                       "device's %d (page_count)"
                                       % (consumed, pages, self.config.page_count))
        if len(ids) < pages:
            raise InvalidArgumentError("publish(): publishing %d tokens needs %d page ids, got %d"
                                       % (consumed, pages, len(ids)))
        c_ids = (ctypes.c_uint32 * max(1, len(ids)))(*ids)
        outcome = ctypes.c_int()
        with self._using() as handle:
            _planes_in_place(call, self._extents)
            pub = _lib.Publication(checkpoint, history.handle, consumed, parent_consumed,
                                   ctypes.cast(c_ids, ctypes.POINTER(ctypes.c_uint32)), state_slot)
            _check(_LIB.sel_store_publish(handle, ctypes.byref(pub), ctypes.byref(outcome)))
        return Outcome(outcome.value)

    def poll(self, max_events: int = 64) -> List[Event]:
        """Takes up to max_events events without waiting (0 takes the
        engine's completions and returns none)."""
        max_events = _int("poll(): max_events", max_events, _lib.u32)
        count = min(max_events, POLL_EVENTS_MAX)
        events = (_lib.Event * max(1, count))()
        with self._using() as handle:
            n = _LIB.sel_poll(handle, events, count)
        return [Event(EventKind(e.kind), e.id, e.error,
                      e.why.decode(errors="replace") or strerror(e.error),
                      e.checkpoint, e.tokens)
                for e in events[:n]]

    # Exports of GPU checkpoints (include/selene/store.h, sel_gpu_hold on):
    # offer what the GPU cache holds, answer EXPORT_REQUESTED in the same
    # iteration, unpin at EXPORT_ENDED. None of these waits.

    def gpu_hold(self, checkpoint: int, history: History, consumed: int):
        """Offers a checkpoint the GPU cache holds (history's first consumed
        tokens: pages 0 .. consumed // page_tokens - 1 and a row) for export
        through the pool (sel_gpu_hold). Raises SeleneError: -EEXIST for an
        id offered already, EQUEUEFULL past 4096 offers, -ENOTSUP without an
        attached pool."""
        checkpoint = _int("gpu_hold(): checkpoint", checkpoint, _lib.u64)
        self._own("gpu_hold()", history)
        consumed = _int("gpu_hold(): consumed", consumed, _lib.u64)
        if not self.config.page_tokens <= consumed <= history.token_count:
            raise InvalidArgumentError("gpu_hold(): consumed %d is not in %d..%d (a page at "
                                       "least, the history's tokens at most)"
                                       % (consumed, self.config.page_tokens,
                                          history.token_count))
        with self._using() as handle:
            _check(_LIB.sel_gpu_hold(handle, checkpoint, history.handle, consumed))

    def gpu_evicted(self, checkpoint: int):
        """The GPU cache evicted checkpoint (sel_gpu_evicted); SeleneError
        (ENOTFOUND) for one not offered."""
        checkpoint = _int("gpu_evicted(): checkpoint", checkpoint, _lib.u64)
        with self._using() as handle:
            _check(_LIB.sel_gpu_evicted(handle, checkpoint))

    def gpu_evictions_lost(self):
        """Every offer withdrawn (sel_gpu_evictions_lost): the engine lost
        track of its evictions and offers again what it holds."""
        with self._using() as handle:
            _check(_LIB.sel_gpu_evictions_lost(handle))

    def export_pinned(self, export_id: int, page_ids: Sequence[int], state_slot: int):
        """Answers EXPORT_REQUESTED export_id: page_ids (the checkpoint's
        tokens // page_tokens of them) and state_slot are pinned
        (sel_export_pinned). Returns once the store took the export: its
        EXPORT_ENDED comes exactly once, and only then may the pin go.
        Raises SeleneError when it did not (the export is over, no event
        comes: unpin at once): ENOTFOUND for an export not waiting for an
        answer, -EINVAL for ids that do not fit, EQUEUEFULL, ESTOPPED."""
        export_id = _int("export_pinned(): export_id", export_id, _lib.u64)
        try:
            ids = self._page_ids("export_pinned()", page_ids)
            state_slot = self._state_slot("export_pinned()", state_slot)
        except (InvalidArgumentError, TypeError, ValueError):
            # over, as the library's own -EINVAL: no pin to keep, no event
            with self._using() as handle:
                _LIB.sel_export_pinned(handle, export_id, None, 0, 0)
            raise
        c_ids = (ctypes.c_uint32 * max(1, len(ids)))(*ids)
        with self._using() as handle:
            _check(_LIB.sel_export_pinned(handle, export_id,
                                          ctypes.cast(c_ids, ctypes.POINTER(ctypes.c_uint32)),
                                          len(ids), state_slot))

    def export_refuse(self, export_id: int, reason: int):
        """Refuses EXPORT_REQUESTED export_id (sel_export_refuse): reason
        ENOTFOUND (the GPU cache no longer holds it: its offer goes too) or
        -errno.ENOSPC (no headroom to pin it now)."""
        export_id = _int("export_refuse(): export_id", export_id, _lib.u64)
        if reason not in (ENOTFOUND, -errno.ENOSPC):
            raise InvalidArgumentError("export_refuse(): reason %r is neither ENOTFOUND nor "
                                       "-errno.ENOSPC" % (reason,))
        with self._using() as handle:
            _check(_LIB.sel_export_refuse(handle, export_id, reason))

    def _monitor(self, call) -> int:
        """call(handle) without the lock (the library takes stats and
        metrics from any thread, also while a close drains): -ESHUTDOWN,
        or a close that ended meanwhile, is ClosedError. (A freed handle's
        address may by then be another store's: its answer is dropped.)"""
        handle = self._handle
        if not handle or self._closing:
            raise ClosedError("the store is closed")
        code = call(handle)
        if code == -errno.ESHUTDOWN or self._handle != handle:
            raise ClosedError("the store is closed")
        return code

    def stats(self) -> Stats:
        """The counters (sel_store_stats); any thread, any time."""
        c = _lib.Stats()
        _check(self._monitor(lambda handle: _LIB.sel_store_stats(handle, ctypes.byref(c))))
        return Stats._from_c(c)

    def metrics(self) -> str:
        """The Prometheus text exposition; the buffer grows until it fits.
        Any thread, any time."""
        size = METRICS_BYTES_FIRST
        while True:
            buf = ctypes.create_string_buffer(size)
            n = self._monitor(lambda handle: _LIB.sel_store_metrics(handle, buf, size))
            if n >= 0:
                return buf.raw[:n].decode()
            if n != -errno.ENOSPC or size >= 1 << 26:  # grow
                _check(n)
            size *= 4


class Peer:
    """Every other rank (sel_peer_start): returns once the agreement is
    applied; its threads then run rank zero's jobs on this rank's planes.
    wait() and stop() may come from different threads: stop() is refused
    while wait() runs, and wait() after stop() raises ClosedError. Its
    planes' tensors (storages held) must not be resized while it runs:
    its copies come from rank zero, with no call here to check them at."""

    def __init__(self, config: StoreConfig):
        _check_config("Peer(): config", config)
        if config.cluster is None or config.cluster.rank == 0:
            raise ValueError("a peer needs a cluster config with rank > 0")
        config = dataclasses.replace(config, page_planes=tuple(config.page_planes))
        c, self._keep, _ = _c_config(config)
        handle = ctypes.c_void_p()
        err = ctypes.create_string_buffer(512)
        self._lock = threading.Lock()
        self._waiting = False
        self._undrained = False
        _check(_LIB.sel_peer_start(ctypes.byref(c), ctypes.byref(handle), err, len(err)),
               err.value.decode(errors="replace"))
        self._handle = handle.value
        self.config = config

    def wait(self):
        """Blocks until rank zero's connection ends and every job drained;
        raises SeleneError when it did not end cleanly. One thread at a time,
        and stop() is refused while it runs."""
        with self._lock:
            if not self._handle:
                raise ClosedError("the peer is stopped")
            if self._waiting:
                raise SeleneError(-16, "another thread is in wait()")
            self._waiting = True
        try:
            code = _LIB.sel_peer_wait(self._handle)
        finally:
            with self._lock:
                self._waiting = False
        if code == ESTOPPED:
            self._undrained = True  # its copies may still write the planes
        _check(code)

    def stop(self):
        lock = getattr(self, "_lock", None)
        if lock is None:
            return  # the start failed: nothing to stop
        with lock:
            if self._waiting:
                raise SeleneError(-16, "wait() is running in another thread: it returns "
                                       "when rank zero's connection ends")
            handle, self._handle = getattr(self, "_handle", None), None
        if handle:
            # jobs that outlived the drain may still write the planes: the C
            # side keeps its peer, and the planes stay alive with it
            if _LIB.sel_peer_stop(handle) == ESTOPPED or self._undrained:
                _UNDRAINED.append(self._keep)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    __del__ = stop
