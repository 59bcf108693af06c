"""Where this process sits among the ranks, as a ClusterConfig: the same two
sources as the selene program (launch/bootstrap/bootstrap.h), in Python.

from_env(): SELENE_RANK / SELENE_WORLD_SIZE (else OMPI_COMM_WORLD_RANK /
_SIZE, else rank 0 of 1), SELENE_COORDINATOR=host:port, SELENE_SECRET_FILE
(exactly 32 bytes; required for more than one rank).

from_mpi(): under mpirun, through mpi4py: rank zero listens on an ephemeral
port and draws a fresh secret, both broadcast (over MPI's transport, in the
clear); every rank's host identity and IPv4 interfaces are gathered, and
each peer connects over loopback on rank zero's host, else to rank zero's
address on a subnet they share, from its own address there, which rank zero
checks. bootstrap() picks one the way the program does."""

import ctypes
import ctypes.util
import os
import re
import socket
import stat
import struct
from typing import List, Optional, Tuple

from .store import ClusterConfig

WORLD_MAX = 1024


class BootstrapError(ValueError):
    """A variable missing or wrong, or no route between two ranks."""


def _decimal(text: str) -> bool:
    """ASCII digits only (str.isdigit also takes other scripts' digits)."""
    return re.fullmatch(r"[0-9]+", text) is not None


def _number(env, name: str, maximum: int) -> Optional[int]:
    value = env.get(name, "")
    if not value:
        return None
    if not _decimal(value) or int(value) > maximum:
        raise BootstrapError("%s=%s is not a number in 0..%d" % (name, value, maximum))
    return int(value)


def _coordinator(text: str, world: int) -> Tuple[str, int]:
    host, colon, port = text.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    if bracketed:
        host = host[1:-1]
    # An IPv6 address without brackets has more colons: ambiguous (as in C).
    if not colon or not host or (not bracketed and ":" in host) or "[" in host or "]" in host:
        raise BootstrapError("SELENE_COORDINATOR must be host:port (an IPv6 address in "
                             "brackets: [::1]:port) for a world of %d" % world)
    if not _decimal(port) or not 1 <= int(port) <= 65535:
        raise BootstrapError("SELENE_COORDINATOR %s: the port must be 1-65535" % text)
    return host, int(port)


def _secret(path: str) -> bytes:
    try:
        # never blocks: a FIFO would wait for a writer forever
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise BootstrapError("SELENE_SECRET_FILE %s: %s" % (path, e.strerror)) from e
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise BootstrapError("SELENE_SECRET_FILE %s is not a regular file" % path)
        # as ssh with a private key, and as the C bootstrap: a secret others
        # can read or change is no secret
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise BootstrapError("SELENE_SECRET_FILE: permissions %04o for %s are too open "
                                 "(group or others may use it); chmod 600 %s"
                                 % (stat.S_IMODE(mode), path, path))
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(33)
    except OSError as e:
        raise BootstrapError("SELENE_SECRET_FILE %s: %s" % (path, e.strerror)) from e
    finally:
        os.close(fd)
    if len(data) != 32:
        raise BootstrapError("SELENE_SECRET_FILE %s must hold exactly 32 bytes" % path)
    return data


def from_env(env=None) -> ClusterConfig:
    """The environment's cluster (above); BootstrapError names what is wrong."""
    env = os.environ if env is None else env
    rank_var, world_var = "SELENE_RANK", "SELENE_WORLD_SIZE"
    # An empty variable counts as unset, as in the C bootstrap.
    if not env.get("SELENE_RANK") and env.get("OMPI_COMM_WORLD_RANK"):
        if env.get("SELENE_WORLD_SIZE"):
            raise BootstrapError("SELENE_WORLD_SIZE is set but SELENE_RANK is not: set "
                                 "both, or neither to take Open MPI's")
        rank_var, world_var = "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"
    try:
        rank, world = _number(env, rank_var, WORLD_MAX - 1), _number(env, world_var, WORLD_MAX)
    except BootstrapError:
        rank = world = -1
    if rank == -1 or (rank is None) != (world is None) or \
            (world is not None and (world == 0 or rank >= world)):
        raise BootstrapError("%s and %s must both be set, with 0 <= rank < world size <= %d"
                             % (rank_var, world_var, WORLD_MAX))
    if world is None and (env.get("SELENE_COORDINATOR") or env.get("SELENE_SECRET_FILE")):
        raise BootstrapError("SELENE_COORDINATOR or SELENE_SECRET_FILE is set but %s and %s "
                             "are not: set them too, or unset both for one rank"
                             % (rank_var, world_var))
    if world is None or world == 1:
        return ClusterConfig(rank=0, world_size=1)
    host, port = _coordinator(env.get("SELENE_COORDINATOR", ""), world)
    if not env.get("SELENE_SECRET_FILE"):
        raise BootstrapError("SELENE_SECRET_FILE must name the launch secret for a world of %d"
                             % world)
    return ClusterConfig(rank=rank, world_size=world, coordinator_host=host,
                         coordinator_port=port, secret=_secret(env["SELENE_SECRET_FILE"]))


class _Ifaddrs(ctypes.Structure):
    pass


_Ifaddrs._fields_ = [("next", ctypes.POINTER(_Ifaddrs)), ("name", ctypes.c_char_p),
                     ("flags", ctypes.c_uint), ("addr", ctypes.c_void_p),
                     ("netmask", ctypes.c_void_p), ("broadaddr", ctypes.c_void_p),
                     ("data", ctypes.c_void_p)]
_IFF_UP, _IFF_LOOPBACK = 0x1, 0x8


def _ipv4(sockaddr: int) -> Optional[int]:
    if not sockaddr:
        return None
    family, = struct.unpack("H", ctypes.string_at(sockaddr, 2))
    if family != socket.AF_INET:
        return None
    return struct.unpack("!I", ctypes.string_at(sockaddr + 4, 4))[0]


def interfaces() -> Tuple[str, List[Tuple[int, int]]]:
    """This host's identity (boot id and network namespace) and its up,
    non-loopback IPv4 (address, mask) pairs, host order."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    host_id = "%s/%d" % (boot, os.stat("/proc/self/ns/net").st_ino)
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    head = ctypes.POINTER(_Ifaddrs)()
    pairs = []
    if libc.getifaddrs(ctypes.byref(head)) != 0:
        return host_id, pairs
    node = head
    while node:
        i = node.contents
        addr, mask = _ipv4(i.addr), _ipv4(i.netmask)
        if addr is not None and mask is not None and i.flags & _IFF_UP and \
                not i.flags & _IFF_LOOPBACK:
            pairs.append((addr, mask))
        node = i.next
    libc.freeifaddrs(head)
    return host_id, pairs


def route(zero, peer) -> Optional[Tuple[int, int]]:
    """(to, from) for peer reaching rank zero (launch_route), or None."""
    if zero[0] == peer[0]:
        return 0x7F000001, 0x7F000001
    for z_addr, z_mask in zero[1]:
        for p_addr, _ in peer[1]:
            if z_addr & z_mask == p_addr & z_mask and z_addr != p_addr:
                return z_addr, p_addr
    return None


def _text(address: int) -> str:
    return socket.inet_ntoa(struct.pack("!I", address))


def from_mpi(comm=None) -> ClusterConfig:
    """The cluster from MPI (mpi4py's COMM_WORLD unless comm is given)."""
    if comm is None:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    if not 1 <= world <= WORLD_MAX:
        raise BootstrapError("MPI world of %d ranks: Selene takes 1 to %d" % (world, WORLD_MAX))
    every = comm.allgather(interfaces())
    if world == 1:
        return ClusterConfig(rank=0, world_size=1)
    offer, listener = None, None
    if rank == 0:
        try:
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.bind(("0.0.0.0", 0))
            listener.listen(1024)
            offer = (listener.getsockname()[1], os.urandom(32), "")
        except OSError as e:
            offer = (0, b"", "rank zero could not listen: %s" % e.strerror)
    port, secret, error = comm.bcast(offer, root=0)
    if error:
        raise BootstrapError(error)
    addresses, host = ["127.0.0.1"] * world, "127.0.0.1"
    for r in range(1, world):  # every rank computes the same routes
        found = route(every[0], every[r])
        if found is None:
            raise BootstrapError("rank %d shares no IPv4 subnet with rank zero; set "
                                 "SELENE_COORDINATOR and SELENE_SECRET_FILE instead" % r)
        addresses[r] = _text(found[1])
        if r == rank:
            host = _text(found[0])
    return ClusterConfig(rank=rank, world_size=world, coordinator_host=host,
                         coordinator_port=port, secret=secret,
                         listen_fd=listener.fileno() if listener else -1,
                         rank_addresses=addresses, listener=listener)


def bootstrap(env=None) -> ClusterConfig:
    """MPI under mpirun when SELENE_COORDINATOR and SELENE_RANK are unset
    (and mpi4py is there), the environment otherwise."""
    env = os.environ if env is None else env
    mpi_world = env.get("OMPI_COMM_WORLD_SIZE")
    if not env.get("SELENE_COORDINATOR") and not env.get("SELENE_RANK") and \
            mpi_world and mpi_world != "1":
        try:
            import mpi4py  # noqa: F401
            cluster = from_mpi()
        except ImportError:
            cluster = from_env(env)
    else:
        cluster = from_env(env)
    cluster.accept_empty_ranks = _accept_empty_ranks(env)
    return cluster


def _accept_empty_ranks(env) -> bool:
    """SELENE_ACCEPT_EMPTY_RANKS: 1 accepts, 0 or unset refuses (as the program)."""
    value = env.get("SELENE_ACCEPT_EMPTY_RANKS", "")
    if value not in ("", "0", "1"):
        raise BootstrapError('SELENE_ACCEPT_EMPTY_RANKS must be 0 or 1, not "%.40s"' % value)
    return value == "1"
