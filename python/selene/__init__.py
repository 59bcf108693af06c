"""Selene from Python: a ctypes binding of libselene's public API
(include/selene/store.h). See README.md, "Selene from Python"."""

from .store import (DISK_LIMIT_AUTO, EBADHEADER, ECHECKSUM, EFAILPOINT, EGEOMETRY,
                    ELOCKED, EMISMATCH, ENOTFOUND, EPROTO, EQUEUEFULL, ESTOPPED, ETOOBIG,
                    LIBRARY_PATH, ClosedError, ClusterConfig, Event, EventKind, History, Hit,
                    InvalidArgumentError, LatencyHistogram, Outcome, Peer, Plane, SeleneError,
                    Stats, Store, StoreConfig, WarmPolicy, device_address, model_identity,
                    strerror, version)
from .bootstrap import BootstrapError, bootstrap, from_env, from_mpi

__all__ = [
    "DISK_LIMIT_AUTO", "EBADHEADER", "ECHECKSUM", "EFAILPOINT", "EGEOMETRY", "ELOCKED",
    "EMISMATCH", "ENOTFOUND", "EPROTO", "EQUEUEFULL", "ESTOPPED", "ETOOBIG", "LIBRARY_PATH",
    "BootstrapError", "ClosedError", "ClusterConfig", "Event", "EventKind", "History", "Hit",
    "InvalidArgumentError", "LatencyHistogram", "Outcome", "Peer", "Plane", "SeleneError",
    "Stats", "Store", "StoreConfig", "WarmPolicy", "bootstrap", "device_address", "from_env",
    "from_mpi", "model_identity", "strerror", "version",
]
__version__ = "1.0.0"
