"""Setup of the one-sided (UCX) collectives: once per process, communicator and buffer set.

* process: one UCP context and worker (``worker()``), created on first use;
* communicator: an endpoint to every rank (``endpoints(comm)``), worker addresses exchanged
  with one MPI allgather, kept on the communicator (its ``rdma`` resource:
  collectives/schedules/resources.py);
* buffer set: ``build``/``build_at`` map the receive buffer, a landing buffer and the flag
  words (ucp_mem_map), pack their rkeys, exchange them with one MPI allgather and unpack
  them once per peer, then return a cython_ext.rdma op whose calls do puts and flags only.

Transport truth: the transport recorded is what UCX chose, read from the endpoints' lanes
(ucp_ep_print_info): the transports of the lanes that carry RMA (``ucx:cma``, ``ucx:tcp``,
``ucx:rc_mlx5``), or of the active-message lane when UCX has no RMA lane and emulates puts
over it (``ucx:sysv/am``); united over every rank and peer.

The UCX in use is the libucp the process loaded: MPI's own when the MPI library links UCX
(the MPICH wheel does; so do many system MPIs), else the one found at build time (the
``rdma`` extra's wheel, $UCX_HOME, pkg-config). ``ucx_library()`` says which.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import numpy as np

from collectives.dtypes import dtype_code, itemsize, op_code
from collectives.envsettings import env_number, machine_ranks, physical_cores
from collectives.schedules.resources import resources_of
from collectives.spec import even_blocks

ENV_TIMEOUT = "PCCL_RDMA_TIMEOUT_S"  # bound on every wait for a peer (default 30 s)
ENV_ORDERING = "PCCL_RDMA_ORDERING"  # fence (default on host memory) | flush (default on device memory)
ENV_MAX_REGISTER = "PCCL_RDMA_MAX_REGISTER_BYTES"  # refuse (unsupported) mappings above this size
ENV_YIELD = "PCCL_RDMA_YIELD"  # auto (yield when ranks outnumber cores) | 0 | 1
ENV_QUIESCE = "PCCL_RDMA_QUIESCE"  # auto (for software transports) | 0 | 1: end calls with a progressing barrier
DEFAULT_TIMEOUT_S = 30.0

#: the one-sided algorithm of each collective
ALGORITHMS = {"allgather": "ring", "reduce_scatter": "ring", "allreduce": "gdraa"}


class RdmaSetupError(ValueError):
    """Bad PCCL_RDMA_* settings (the same on every rank, so reported as unsupported)."""


def binding_reason() -> str | None:
    """Why the UCX binding cannot be used here, or None."""
    try:
        import cython_ext.rdma  # noqa: F401
        import cython_ext.ucx  # noqa: F401
    except ImportError as error:
        from collectives.libraries.mpi_library import (
            ucx_binding_note,  # what the build recorded: skipped, or built for
        )

        return ucx_binding_note(error) or (
            f"the UCX binding (cython_ext.ucx) is not built: {error}. setup.py builds it only where it finds "
            "ucp/api/ucp.h and libucp ($UCX_HOME, pkg-config ucx, or the rdma extra: pip install -e '.[rdma]')")
    return None


@dataclass(frozen=True)
class Settings:
    timeout_s: float
    ordering: str | None  # None: by memory type
    max_register_bytes: int | None
    yield_mode: str
    quiesce_mode: str


def settings(env=os.environ) -> Settings:
    """PCCL_RDMA_* from the environment; RdmaSetupError naming the variable when one is wrong."""
    def number(name, kind, default):
        return env_number(env, name, kind, default, RdmaSetupError)

    ordering = env.get(ENV_ORDERING) or None
    if ordering not in (None, "fence", "flush"):
        raise RdmaSetupError(f"{ENV_ORDERING}={ordering!r}: expected fence or flush")
    modes = {}
    for name in (ENV_YIELD, ENV_QUIESCE):
        modes[name] = env.get(name, "auto") or "auto"
        if modes[name] not in ("auto", "0", "1"):
            raise RdmaSetupError(f"{name}={modes[name]!r}: expected auto, 0 or 1")
    return Settings(number(ENV_TIMEOUT, float, DEFAULT_TIMEOUT_S), ordering,
                    number(ENV_MAX_REGISTER, int, None), modes[ENV_YIELD], modes[ENV_QUIESCE])


def registered_bytes(collective: str, nranks: int, count: int, item: int) -> int:
    """The largest single buffer a call maps (the receive or the landing buffer)."""
    if collective == "allgather":
        return nranks * count * item
    if collective == "reduce_scatter":
        return max(nranks - 1, 0) * count * item
    return max(max(even_blocks(count, nranks)) * max(nranks - 1, 0), count) * item


def unsupported_reason(collective: str, algorithm: str, nranks: int, count: int, dtype: str) -> str | None:
    """Why the one-sided path cannot run this call (decided without communication), or None."""
    reason = binding_reason()
    if reason:
        return reason
    wanted = ALGORITHMS[collective]
    if algorithm != wanted:
        return f"the one-sided {collective} is {wanted!r}, not {algorithm!r}"
    try:
        limit = settings().max_register_bytes
    except RdmaSetupError as error:
        return str(error)
    size = registered_bytes(collective, nranks, count, itemsize(dtype))
    if limit is not None and size > limit:
        return f"a {size}-byte buffer to register exceeds {ENV_MAX_REGISTER}={limit}"
    return None


# -- process and communicator state ------------------------------------------------------------

_WORKER = None


@dataclass(frozen=True)
class UcxState:
    """UCX's state on one communicator: its ``rdma`` resource, kept on the communicator."""

    endpoints: object  # cython_ext.ucx.Endpoints: this rank's endpoint to every rank
    transport: str  # what UCX moves the puts with over them (``ucx:cma``), agreed by every rank


def worker():
    """This process's UCP context and worker (created once)."""
    global _WORKER
    if _WORKER is None:
        from cython_ext import ucx

        _WORKER = ucx.Worker(settings().timeout_s)
    return _WORKER


def _oversubscribed(comm) -> bool:
    from mpi4py import MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return machine_ranks(node.Get_size(), os.environ) > physical_cores()
    finally:
        node.Free()


def endpoints(comm):
    """Endpoints from this rank to every rank of ``comm`` (collective on first use, then kept on ``comm``)."""
    return resources_of(comm).open("rdma", lambda: _connect(comm)).endpoints


def _connect(comm) -> UcxState:
    """Endpoints to every rank of ``comm``, wired up, and the transport UCX chose (collective)."""
    from cython_ext import ucx, ucx_region

    mode = settings().yield_mode
    spin_yield = _oversubscribed(comm) if mode == "auto" else mode == "1"
    try:
        mine, error = worker(), ""
    except ucx.UcxError as failure:  # UCX did not start here: every rank raises, none waits
        mine, error = None, f"UCX did not start: {failure}"
    ucx._agree(comm, error)
    found = ucx.Endpoints(mine, comm)
    found.worker.yield_when_idle = found.worker.yield_when_idle or spin_yield
    ucx_region.wire_up(found, comm)
    return UcxState(found, _agreed_transport(comm, found))


def transport_of(comm) -> str:
    """What UCX moves ``comm``'s puts with (``ucx:cma``), once its endpoints exist; else ''."""
    state = resources_of(comm).get("rdma")
    return "" if state is None else state.transport


_USES = re.compile(r"^(am|am_bw|rma|rma_bw|amo|tag|wireup|keepalive)(#\d+)?$")


def lanes(info: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """(transport, device, uses) of each lane in ucp_ep_print_info's text."""
    found = []
    for line in info.splitlines():
        if "lane[" not in line:
            continue
        tokens = line.replace("#", " ", 1).split()
        where = next((t for t in tokens if re.match(r"^\d+:[\w.-]+/\S+$", t)), None)
        if where is None:
            continue
        transport, _, device = where.split(":", 1)[1].partition("/")
        device = re.sub(r"\.\d+$", "", device)
        found.append((transport, device, tuple(t.split("#")[0] for t in tokens if _USES.match(t))))
    return found


SHARED_MEMORY = ("sysv", "posix", "xpmem")


def shm_transport(info: str) -> str:
    """The first shared-memory lane (UCX allocates memory with sysv, then posix: UCX_ALLOC_PRIO)."""
    return next((t for t, _, _ in lanes(info) if t in SHARED_MEMORY), "")


#: transports that move only device memory, and only host memory
DEVICE_ONLY = frozenset({"cuda_ipc", "cuda_copy", "gdr_copy", "rocm_ipc", "rocm_copy", "rocm_gdr"})
HOST_ONLY = frozenset({"cma", "knem", "xpmem", "sysv", "posix"})


def rma_transports(info: str, memory: str | None = None) -> list[str]:
    """The transports that carry puts on one endpoint: its RMA lanes (those that can reach
    ``memory``: host, cuda, ...; None: all), else the AM lane (``sysv/am``: RMA emulated)."""
    found = lanes(info)
    rma = list(dict.fromkeys(t for t, _, uses in found if any(u.startswith("rma") for u in uses)))
    if memory is not None:
        wrong = DEVICE_ONLY if memory == "host" else HOST_ONLY
        rma = [t for t in rma if t not in wrong] or rma
    if rma:
        return rma
    return [t + "/am" for t in dict.fromkeys(t for t, _, uses in found if "am" in uses)]


def rma_transport(info: str) -> str:
    return "+".join(rma_transports(info))


def _agreed_transport(comm, eps, regions=()) -> str:
    """``ucx:`` and the transports UCX has for the puts, united over every rank and peer: for each
    region, the RMA lanes that can reach its memory type, or the shared-memory lane where UCX maps
    the peer's region into this process (ucp_rkey_ptr)."""
    mine = set()
    for peer in range(eps.size):
        if peer == eps.rank:
            continue
        info = eps.info(peer)
        if not regions:
            mine.update(rma_transports(info))
        for region in regions:
            if not region.length:
                continue
            if region.mappable(peer):
                mine.add(shm_transport(info))
            mine.update(rma_transports(info, region.memory_type_name))
    every = sorted(set().union(*comm.allgather(mine)) - {""})
    return "ucx:" + "+".join(every) if every else "ucx"


def device_reason(device: str, backend) -> str | None:
    """Why device buffers of ``device`` (cuda | rocm) cannot go through UCX here, or None.

    Asks the UCX context which memory types it can move (ucp_context_query); that needs a
    UCX built with the device's transports and their driver loadable. Emulated device memory
    (numpy, tests) is host memory and always works."""
    if backend is not None and backend.xp is np:
        return None
    try:
        movable = worker().memory_types()
    except Exception as error:  # noqa: BLE001 - any UCX start-up failure is the reason
        return f"UCX did not start: {error}"
    if device in movable:
        return None
    version, path = ucx_library()
    return (f"the UCX in this process (version {version}, {path}) cannot move {device} memory (its memory types: "
            f"{', '.join(movable)}): a GPU with its driver and a UCX built with {device} support are needed")


#: transports whose puts complete without the target's software (hardware RMA, shared memory)
TARGET_PASSIVE = frozenset({"cma", "knem", "xpmem", "posix", "sysv", "self", "rc_verbs", "rc_mlx5", "dc_mlx5",
                            "rc_x", "dc_x", "cuda_ipc", "cuda_copy", "gdr_copy", "rocm_ipc", "rocm_copy"})


def needs_quiesce(transport: str, mode: str = "auto") -> bool:
    """Whether calls over ``transport`` (``ucx:cma+tcp``) must end with a progressing barrier:
    any transport that moves puts in software (tcp; RMA emulated over active messages)."""
    if mode != "auto":
        return mode == "1"
    names = transport.removeprefix("ucx").lstrip(":").split("+")
    return not names[0] or any(name.endswith("/am") or name not in TARGET_PASSIVE for name in names)


def ucx_library() -> tuple[str, str]:
    """(version, path) of the libucp this process loaded."""
    from cython_ext import ucx

    return ucx.version(), ucx.library_path()


# -- building ops ------------------------------------------------------------------------------


class DeviceKernels:
    """Local copy and reduction on device memory (CuPy) for the one-sided ops: each returns once done."""

    _UFUNCS = {"sum": "add", "prod": "multiply", "min": "minimum", "max": "maximum"}

    def __init__(self, backend, dtype: str, op: str) -> None:
        self.backend, self.dtype = backend, np.dtype(dtype)
        self.ufunc = getattr(backend.xp, self._UFUNCS[op])

    def _view(self, address: int, count: int):
        xp = self.backend.xp
        if xp is np:
            import ctypes

            raw = (ctypes.c_char * (count * self.dtype.itemsize)).from_address(address)
            return np.frombuffer(raw, dtype=self.dtype, count=count)
        memory = xp.cuda.UnownedMemory(address, count * self.dtype.itemsize, self)
        return xp.ndarray(count, self.dtype, xp.cuda.MemoryPointer(memory, 0))

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        count = nbytes // self.dtype.itemsize
        self._view(dst, count)[...] = self._view(src, count)
        self.backend.synchronize()

    def reduce(self, dst: int, a: int, b: int, count: int) -> None:
        self.ufunc(self._view(a, count), self._view(b, count), out=self._view(dst, count))
        self.backend.synchronize()


def _address(array, backend) -> int:
    if array is None:
        return 0
    if backend is not None:
        return backend.ptr(array)
    return int(array.__array_interface__["data"][0]) if array.size else 0


def build(comm, collective: str, sendbuf, recvbuf, count: int, dtype: str, op: str, *, backend=None):
    """An op that runs ``collective`` on these arrays (``sendbuf`` None: in place); collective over comm.

    ``backend``: a collectives.memory.backends backend for device arrays (CuPy), None for numpy."""
    return build_at(comm, collective, _address(sendbuf, backend), _address(recvbuf, backend), count, dtype, op,
                    owners=(sendbuf, recvbuf), backend=backend)


def build_at(comm, collective: str, send_addr: int, recv_addr: int, count: int, dtype: str, op: str, *,
             owners=(), backend=None, memory_type: str | None = None):
    """As ``build`` on raw addresses (``send_addr`` 0: in place), buffers laid out as MPI's:
    all-gather ``count`` -> p*count, reduce-scatter p*count -> count, all-reduce count -> count.
    ``owners``: objects that keep the memory alive. Also the inter-node phase of pccl-hier. The
    op's ``moved_by`` (and ``facts["transport"]``) is what UCX chose for its puts (``ucx:cma``)."""
    from cython_ext import rdma, ucx

    config = settings()
    eps = endpoints(comm)
    nranks, item = eps.size, itemsize(dtype)
    if memory_type is None:
        memory_type = "host" if backend is None or backend.xp is np else backend.kind
    before = ucx.counters()
    # Flag words (and, on the host, landing slots) live in memory UCX allocates: on one host its
    # shared-memory transports map it into the peers, so a put there is a copy, not a system call.
    flags = _region(eps, comm, 0, rdma.flag_words(collective, nranks) * 8, None, "host", None)
    common = (comm, eps, flags, flags.address)
    options = {"ordering": config.ordering or ("fence" if memory_type == "host" else "flush"),
               "memory_type": memory_type, "kernels": DeviceKernels(backend, dtype, op) if backend else None}
    codes = (dtype_code(dtype), op_code(op))
    if collective == "allgather":
        recv = _region(eps, comm, recv_addr, nranks * count * item, owners, memory_type, config)
        regions, keep = [flags, recv], ()
        made = rdma.RingAllgather(*common, recv, recv_addr, send_addr, count * item,
                                  keepalive=(regions, owners), **options)
    else:
        keep, landing_bytes = _landing(collective, nranks, count, item, backend)
        landing = _region(eps, comm, _address(keep, backend), landing_bytes, keep, memory_type, config)
        if collective == "reduce_scatter":
            regions = [flags, landing]
            made = rdma.RingReduceScatter(*common, landing, landing.address, send_addr or recv_addr, recv_addr,
                                          count, item, *codes, keepalive=(regions, keep, owners), **options)
        else:
            recv = _region(eps, comm, recv_addr, count * item, owners, memory_type, config)
            regions = [flags, landing, recv]
            made = rdma.GdraaAllreduce(*common, landing, landing.address, recv, recv_addr, send_addr,
                                       even_blocks(count, nranks), item, *codes,
                                       keepalive=(regions, keep, owners), **options)
    after = ucx.counters()
    transport = _agreed_transport(comm, eps, regions)
    made.quiesce = needs_quiesce(transport, config.quiesce_mode)
    made.facts = {"registrations": after["registrations"] - before["registrations"],
                  "rkey_unpacks": after["rkey_unpacks"] - before["rkey_unpacks"],
                  "transport": transport, "memory_type": memory_type, "ordering": options["ordering"],
                  "quiesce": made.quiesce, "algorithm": ALGORITHMS[collective]}
    made.moved_by = transport
    return made


def _landing(collective: str, nranks: int, count: int, item: int, backend):
    """The receiver-side slots peers put into: p-1 blocks (ring reduce-scatter) or segments (all-reduce).
    (array, bytes); on the host the array is None and UCX allocates the memory when mapping it."""
    slot = count if collective == "reduce_scatter" else max(even_blocks(count, nranks))
    elements = max(nranks - 1, 0) * slot
    if backend is None:  # host: UCX allocates it (see build_at), so there is nothing to keep
        return None, elements * item
    return backend.empty(elements * item, np.uint8), elements * item


def _region(eps, comm, address: int, nbytes: int, owner, memory_type: str, config):
    from cython_ext import ucx, ucx_region

    limit = config.max_register_bytes if config is not None else None
    if limit is not None and nbytes > limit:  # the same on every rank: all raise together
        raise ucx.UcxError(f"a {nbytes}-byte buffer to register exceeds {ENV_MAX_REGISTER}={limit}")
    return ucx_region.Region(eps, comm, address, nbytes, owner, memory_type)
