"""NCCL (CUDA) or RCCL (ROCm) through ``cupy.cuda.nccl``: availability, version, communicators.

``cupy.cuda.nccl.available`` says whether CuPy loaded the library; it can be True on a
machine without a GPU, so it is never taken as a GPU check (collectives.memory.backends does that).
Communicators are made once per (MPI communicator, GPU): rank 0 of the communicator makes
the unique id, MPI broadcasts it, every rank joins. NCCL refuses two ranks on one GPU in a
communicator, so that case is reported before any communicator is made.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from collectives.libraries import xccl_debug_log as debug_log

DTYPES = {"int32": "NCCL_INT32", "int64": "NCCL_INT64", "float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32",
          "float64": "NCCL_FLOAT64"}
OPS = {"sum": "NCCL_SUM", "prod": "NCCL_PROD", "min": "NCCL_MIN", "max": "NCCL_MAX"}


@dataclass(frozen=True)
class XcclInfo:
    library: str  # "NCCL" | "RCCL"
    version: str = ""
    reason: str = ""  # why it cannot be used; empty when it can


def library_name(device: str) -> str:
    return "RCCL" if device == "rocm" else "NCCL"


def version_text(code: int) -> str:
    """NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9, major*1000 + minor*100 + patch before."""
    if code >= 10000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


def _nccl_hint() -> str:
    """The NCCL wheel for this CuPy's CUDA major version (cupy-cuda13x needs nvidia-nccl-cu13)."""
    try:
        import cupy

        major = cupy.cuda.runtime.runtimeGetVersion() // 1000
    except Exception:
        major = 12
    return f"pip install nvidia-nccl-cu{major}" + (", part of the [gpu] extra" if major == 12 else "")


def load(device: str):
    """``cupy.cuda.nccl`` if CuPy loaded NCCL/RCCL; else (None, reason). Never raises."""
    name = library_name(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            from cupy.cuda import nccl
        except Exception as error:
            return None, f"{name} is not available: cannot import cupy.cuda.nccl ({type(error).__name__}: {error})"
    if not getattr(nccl, "available", False):
        detail = " ".join(" ".join(str(w.message).split()) for w in caught)[:300]
        hint = _nccl_hint() if name == "NCCL" else "a CuPy built with RCCL"
        return None, f"{name} is not available to CuPy (cupy.cuda.nccl.available is False; {hint})" + (
            f": {detail}" if detail else "")
    return nccl, ""


def info(device: str) -> XcclInfo:
    name = library_name(device)
    nccl, reason = load(device)
    if nccl is None:
        return XcclInfo(name, "", reason)
    try:
        return XcclInfo(name, version_text(nccl.get_version()))
    except Exception as error:
        return XcclInfo(name, "", f"{name} version query failed: {error}")


def shared_gpu_reason(identities: list[str | None], members: list[int], library: str) -> str:
    """Why ``library`` cannot make a communicator of ``members`` (world ranks) given each rank's GPU identity."""
    seen: dict[str, int] = {}
    for position, rank in enumerate(members):
        identity = identities[rank]
        if identity is None:
            continue
        if identity in seen:
            return (f"{library} needs one GPU per rank: ranks {seen[identity]} and {position} of the communicator "
                    f"share GPU {identity.split('@')[0]}")
        seen[identity] = position
    return ""


class Communicators:
    """NCCL/RCCL communicators, one per (MPI communicator, GPU index), made on first use (collective)."""

    def __init__(self, nccl, device_index: int, capture: bool = True) -> None:
        self.nccl, self.device_index = nccl, device_index
        self._cache: dict[int, object] = {}
        # NCCL reads its debug settings at its first call: set before any communicator is made
        self.capture = debug_log.process_capture() if capture else None
        #: the network and version NCCL/RCCL said it uses (read after each new communicator)
        self.net = debug_log.XcclNet()

    def get(self, comm):
        from mpi4py import MPI

        key = MPI._handleof(comm)
        if key not in self._cache:
            uid = self.nccl.get_unique_id() if comm.Get_rank() == 0 else None
            uid = comm.bcast(uid, root=0)
            self._cache[key] = self.nccl.NcclCommunicator(comm.Get_size(), uid, comm.Get_rank())
            seen = self.capture.read() if self.capture is not None else debug_log.XcclNet()
            if seen.network or seen.version:
                self.net = seen
        return self._cache[key]

    def close(self) -> None:
        """Destroy every communicator (ncclCommDestroy) while the process is whole, not at interpreter
        teardown after MPI_Finalize, where the order of destructors is nobody's."""
        while self._cache:
            _, communicator = self._cache.popitem()
            communicator.destroy()
        if self.capture is not None:
            self.capture.hand_back()

    def dtype(self, name: str) -> int:
        return getattr(self.nccl, DTYPES[name])

    def op(self, name: str) -> int:
        return getattr(self.nccl, OPS[name])
