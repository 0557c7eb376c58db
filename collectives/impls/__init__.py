"""Implementation registry: who performs a collective call.

Adding one = a module here with ``@register("name")`` on an Implementation
subclass, plus its import line at the bottom. ``unsupported_reason`` must give
the same answer on every rank (it decides before any communication).

Host buffers (numpy) go through ``build``, which returns a cython_ext CollOp for the
Cython timing loop. Device buffers (CuPy, ``cuda``/``rocm``) go through
``build_device`` with the job's collectives.gpu_context.DeviceContext, which returns
a plain callable (bench/gpu_timing.py times it with stream synchronisation).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from collectives.call import CallSpec

IMPLEMENTATIONS: dict[str, type[Implementation]] = {}


def register(name: str):
    def wrap(cls: type[Implementation]) -> type[Implementation]:
        cls.name = name
        IMPLEMENTATIONS[name] = cls
        return cls

    return wrap


def get(name: str) -> Implementation:
    try:
        return IMPLEMENTATIONS[name]()
    except KeyError:
        raise ValueError(f"unknown implementation {name!r} (known: {', '.join(sorted(IMPLEMENTATIONS))})") from None


def address(array: np.ndarray | None) -> int:
    return 0 if array is None else int(array.__array_interface__["data"][0])


class Implementation:
    name: ClassVar[str]
    #: what ``algorithm: None`` means for this implementation
    default_algorithm: ClassVar[str]
    #: algorithms this implementation accepts (None: any registered schedule)
    algorithms: ClassVar[tuple[str, ...] | None] = None
    #: False for implementations that run on device buffers only (NCCL/RCCL)
    host_buffers: ClassVar[bool] = True

    def algorithm(self, call: CallSpec) -> str:
        return call.algorithm or self.default_algorithm

    def unsupported_reason(self, call: CallSpec) -> str | None:
        return None

    def build(self, topo, call: CallSpec, sendbuf: np.ndarray | None, recvbuf: np.ndarray):
        """A cython_ext CollOp that performs ``call`` on these buffers when invoked.

        ``topo``: a collectives.topology.Topology (the communicator and its node/rail split)."""
        raise NotImplementedError

    def describe(self, call: CallSpec) -> dict[str, str]:
        """transport, library, library_version of what moves the bytes."""
        raise NotImplementedError

    # -- device buffers ---------------------------------------------------------------

    def device_unsupported_reason(self, call: CallSpec, context) -> str | None:
        """Why this call cannot run on the context's GPU buffers (same answer on every rank), or None."""
        return self.unsupported_reason(call)

    def build_device(self, topo, call: CallSpec, sendbuf, recvbuf, context):
        """A callable that performs ``call`` on device arrays (``context``: a DeviceContext)."""
        raise NotImplementedError(f"{self.name} has no device path")

    def describe_device(self, call: CallSpec, context) -> dict[str, str]:
        """As ``describe``, for device buffers (the transport says GPU-aware, staged, nccl or rccl)."""
        return {**self.describe(call), "transport": context.mpi_transport}


from collectives.impls import flat, hier, mpi, rdma, xccl  # noqa: E402,F401  (registers)
