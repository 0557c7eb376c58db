"""Setup of the shared-memory collectives (cython_ext/shm.pyx): once per communicator and op.

* communicator: one shared window (``MPI_Win_allocate_shared``, MPICH / Open MPI / Cray-MPICH, no
  other dependency) holding every rank's region, made on first use and kept on the communicator
  (its ``shm`` resource: collectives/schedules/resources.py); its ranks must
  share memory (a real node, or a virtual node, which is always inside one). Cross-memory
  attach (process_vm_readv) is probed there once: every rank reads every peer's probe word,
  and the single-copy path is used only if all of them could.
* op: the path (``ll`` / ``copy`` / ``cma``) from the size, and for ``cma`` every rank's buffer
  addresses, exchanged with one allgather. Nothing is allocated or exchanged inside a call.

Settings (the same on every rank): ``PCCL_SHM_TIMEOUT_S`` (30) bounds every wait for a peer;
``PCCL_SHM_YIELD`` auto|0|1 (auto: yield after a few polls when the node's ranks outnumber
its cores); ``PCCL_SHM_CMA`` auto|0; ``PCCL_SHM_PATH`` ll|copy|cma forces a path (benchmarks,
tests); ``PCCL_SHM_LL_MAX_BYTES``, ``PCCL_SHM_ONESHOT_MAX_BYTES``, ``PCCL_SHM_CMA_MIN_BYTES``,
``PCCL_SHM_CHUNK_BYTES`` move the
cut-overs (defaults measured: docs/PERFORMANCE-SHM.md).
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

from collectives.addresses import host_address
from collectives.dtypes import dtype_code, itemsize, op_code
from collectives.envsettings import env_choice, env_number, machine_ranks, physical_cores
from collectives.schedules.resources import resources_of
from collectives.schedules.rows import COMM_WORLD
from collectives.spec import even_blocks

ENV_TIMEOUT = "PCCL_SHM_TIMEOUT_S"
ENV_YIELD = "PCCL_SHM_YIELD"
ENV_CMA = "PCCL_SHM_CMA"
ENV_PATH = "PCCL_SHM_PATH"
ENV_LL_MAX = "PCCL_SHM_LL_MAX_BYTES"
ENV_CMA_MIN = "PCCL_SHM_CMA_MIN_BYTES"
ENV_CHUNK = "PCCL_SHM_CHUNK_BYTES"
ENV_ONESHOT_MAX = "PCCL_SHM_ONESHOT_MAX_BYTES"

PATHS = ("ll", "oneshot", "copy", "cma")
#: what one LL slot can carry (the per-rank payload: all-gather block, reduce-scatter and all-reduce input)
LL_CAPACITY = 64 << 10
DEFAULT_TIMEOUT_S = 30.0
#: LL up to this payload per rank (bytes), by collective; measured (benchmarks/shm_cutover.py)
DEFAULT_LL_MAX = {"allgather": 64, "reduce_scatter": 64, "allreduce": 64}
#: single copy (cma) from this nccl-tests size on (bytes); below it the copy-in pipeline
DEFAULT_CMA_MIN = {"allgather": 16 << 10, "reduce_scatter": 16 << 10, "allreduce": 256 << 10}
#: all-reduce one-shot through a copy buffer while a rank reads at most this much from its peers
#: ((p - 1) x the buffer, bytes), then two-shot; measured
DEFAULT_ONESHOT_MAX = 64 << 10
DEFAULT_CHUNK = 256 << 10
#: polls before a wait yields the core: spin long when every rank has a core, yield soon when not
SPIN_DEDICATED = 1 << 12
SPIN_SHARED = 16


class ShmSetupError(ValueError):
    """Bad PCCL_SHM_* settings, or ranks that share no memory (the same on every rank)."""


@dataclass(frozen=True)
class Settings:
    timeout_s: float
    yield_mode: str
    cma_mode: str
    path: str | None
    ll_max: int | None
    cma_min: int | None
    chunk_bytes: int
    oneshot_max: int = DEFAULT_ONESHOT_MAX


def settings(env=os.environ) -> Settings:
    def number(name, kind, default):
        return env_number(env, name, kind, default, ShmSetupError, allow_zero=name not in (ENV_TIMEOUT, ENV_CHUNK))

    modes = {name: env_choice(env, name, allowed, ShmSetupError)
             for name, allowed in ((ENV_YIELD, ("auto", "0", "1")), (ENV_CMA, ("auto", "0")))}
    path = env.get(ENV_PATH) or None
    if path not in (None, *PATHS):
        raise ShmSetupError(f"{ENV_PATH}={path!r}: expected one of {', '.join(PATHS)}")
    ll_max = number(ENV_LL_MAX, int, None)
    if ll_max is not None and ll_max > LL_CAPACITY:
        raise ShmSetupError(f"{ENV_LL_MAX}={ll_max} exceeds the LL slot's {LL_CAPACITY} bytes")
    chunk = number(ENV_CHUNK, int, DEFAULT_CHUNK)
    if chunk % 64:
        raise ShmSetupError(f"{ENV_CHUNK}={chunk} must be a multiple of 64")
    return Settings(number(ENV_TIMEOUT, float, DEFAULT_TIMEOUT_S), modes[ENV_YIELD], modes[ENV_CMA], path, ll_max,
                    number(ENV_CMA_MIN, int, None), chunk, number(ENV_ONESHOT_MAX, int, DEFAULT_ONESHOT_MAX))


def ll_payload(collective: str, nranks: int, count: int, item: int) -> int:
    """Bytes one rank writes into its LL slot: the all-gather block, the whole reduce-scatter or
    all-reduce input (each reduce-scatter segment starts on a 4-byte word)."""
    if collective == "allgather":
        return count * item
    if collective == "reduce_scatter":
        return nranks * (count * item + 3) // 4 * 4
    return count * item


def path_for(collective: str, nranks: int, count: int, item: int, cma: bool, chosen: Settings) -> str:
    """The path of a call: LL while the payload is small, then the copy-in pipeline, then (where
    cross-memory attach works) the single copy. Pure: every rank gets the same answer."""
    payload = ll_payload(collective, nranks, count, item)
    fits_oneshot = collective == "allreduce" and count * item <= chosen.chunk_bytes
    if chosen.path is not None:
        if (chosen.path == "ll" and payload > LL_CAPACITY) or (chosen.path == "oneshot" and not fits_oneshot):
            return "copy"
        return "copy" if chosen.path == "cma" and not cma else chosen.path
    ll_max = DEFAULT_LL_MAX[collective] if chosen.ll_max is None else chosen.ll_max
    if payload <= ll_max:
        return "ll"
    if fits_oneshot and (nranks - 1) * count * item <= chosen.oneshot_max:
        return "oneshot"
    total = count * item * (1 if collective == "allreduce" else nranks)
    cma_min = DEFAULT_CMA_MIN[collective] if chosen.cma_min is None else chosen.cma_min
    return "cma" if cma and total >= cma_min else "copy"


def _multi_host_reason(nranks: int) -> str | None:
    """From the topology the job already made (asked without a communicator, so of the topologies this
    process holds): ranks on several hosts."""
    from collectives.schedules.topology import made_topologies

    for topo in made_topologies():
        if topo.grid.nranks == nranks and len(topo.hosts) > 1:
            return (f"the {nranks} ranks are on {len(topo.hosts)} hosts ({', '.join(topo.hosts)}) and share no "
                    f"memory; shm runs on one node (as pccl-hier's intra phase on more)")
    return None


def unsupported_reason(call, context, comm_index: int = COMM_WORLD) -> str | None:
    """Why the shared-memory path cannot run ``call`` (no communication), or None. A phase on a
    node communicator (real or virtual) always shares memory; the whole communicator only on one host."""
    if context.on_device:
        return "shm moves host buffers only (device: host)"
    try:
        import cython_ext.shm  # noqa: F401
    except ImportError as error:
        return f"cython_ext.shm is not built ({error}): python setup.py build_ext --inplace"
    try:
        settings()
    except ShmSetupError as error:
        return str(error)
    if comm_index == COMM_WORLD:
        return _multi_host_reason(call.nranks)
    return None


# -- communicator state --------------------------------------------------------------------------


@dataclass(frozen=True)
class ShmState:
    """shm's state on one communicator: its ``shm`` resource, kept on the communicator."""

    segment: object  # cython_ext.shm.Segment: every rank's region in one shared window
    cma_reason: str  # why the single-copy path is off ('' when it is on)


def _oversubscribed(node_size: int, env=os.environ) -> bool:
    """Whether this machine runs more ranks than it has cores (envsettings.machine_ranks, physical_cores)."""
    return machine_ranks(node_size, env) > physical_cores()


def segment(comm):
    """The shared segment of ``comm`` (collective on first use, then kept on ``comm``)."""
    return resources_of(comm).open("shm", lambda: _open(comm)).segment


def _open(comm) -> ShmState:
    """Allocate, zero and probe ``comm``'s segment (collective)."""
    from mpi4py import MPI

    from cython_ext import shm

    chosen = settings()
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    shares, node_size = node.Get_size() == comm.Get_size(), node.Get_size()
    node.Free()
    if not all(comm.allgather(shares)):
        raise ShmSetupError(f"the {comm.Get_size()} ranks of this communicator do not all share memory")
    size = shm.region_bytes(LL_CAPACITY, comm.Get_size(), chosen.chunk_bytes)
    info = MPI.Info.Create()
    info.Set("alloc_shared_noncontig", "true")  # every region page-aligned on its own
    win = MPI.Win.Allocate_shared(size, 1, info, comm=comm)
    info.Free()
    bases = [win.Shared_query(q)[0].address for q in range(comm.Get_size())]
    ctypes.memset(bases[comm.Get_rank()], 0, size)
    yielding = _oversubscribed(node_size) if chosen.yield_mode == "auto" else chosen.yield_mode == "1"
    found = shm.Segment(comm.Get_rank(), bases, LL_CAPACITY, chosen.chunk_bytes, chosen.timeout_s,
                        SPIN_SHARED if yielding else SPIN_DEDICATED, keepalive=win)
    why = "PCCL_SHM_CMA=0"
    if chosen.cma_mode != "0":
        found.publish_pid(os.getpid(), 0x5EED0000 + comm.Get_rank())
        comm.Barrier()
        why = next((text for text in comm.allgather(found.probe_cma()) if text), "")
    found.cma = not why
    comm.Barrier()  # every region zeroed before anyone publishes a step
    return ShmState(found, why)


def cma_reason(comm) -> str:
    """Why the single-copy path is off on ``comm`` ('' when it is on), once its segment exists."""
    state = resources_of(comm).get("shm")
    return "" if state is None else state.cma_reason


def build(comm, collective: str, send, recv, count: int, dtype: str, op: str, path: str | None = None,
          pieces: int = 1, stride: int = 0):
    """A cython_ext.shm op for this call on these host buffers (``send`` None: in place); its
    ``moved_by`` says the path it runs (``shm:ll``, ...). ``pieces`` > 1: the ranks' blocks of the
    all-gather's result or the reduce-scatter's input interleaved, rank q's the k-th piece of count /
    pieces elements at q * count / pieces + k * ``stride`` (a hierarchical phase in place)."""
    from cython_ext import shm

    found = segment(comm)
    chosen = settings()
    if path is not None:
        chosen = Settings(**{**chosen.__dict__, "path": path})
    item, nranks, rank = itemsize(dtype), comm.Get_size(), comm.Get_rank()
    use = path_for(collective, nranks, count, item, found.cma, chosen)
    send_addr, recv_addr = (0 if send is None else host_address(send)), host_address(recv)
    segments = even_blocks(count, nranks) if collective == "allreduce" else ()
    peer_src = peer_dst = ()
    if use == "cma":
        if collective == "allgather" and send is None:
            # the own block in place: contiguous at its position, interleaved from the buffer's start
            source = recv_addr + (rank * count * item if pieces <= 1 else 0)
        else:
            source = send_addr or recv_addr
        peer_src, peer_dst = zip(*comm.allgather((source, recv_addr)), strict=True)
    return shm.collective(comm, found, collective, use, send_addr, recv_addr, count, item, dtype_code(dtype),
                          op_code(op), segments, peer_src, peer_dst, keepalive=(send, recv), pieces=pieces,
                          stride=stride)
