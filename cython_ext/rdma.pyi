"""Type stubs for cython_ext.rdma (one-sided collectives over UCX; built only where UCX was found)."""

from collections.abc import Sequence
from typing import Any

from cython_ext.core import CollOp
from cython_ext.ucx import Endpoints
from cython_ext.ucx_region import Region

ORDERINGS: tuple[str, ...]

def flag_words(collective: str, nranks: int) -> int: ...

class OneSidedOp(CollOp):
    facts: dict[str, Any]
    quiesce: bool
    @property
    def calls(self) -> int: ...

class RingAllgather(OneSidedOp):
    def __init__(self, comm: Any, endpoints: Endpoints, flags: Region, flags_addr: int, recv: Region,
                 recv_addr: int, send_addr: int, block_bytes: int, *, ordering: str = ..., memory_type: str = ...,
                 kernels: Any = ..., keepalive: Any = ...) -> None: ...

class RingReduceScatter(OneSidedOp):
    def __init__(self, comm: Any, endpoints: Endpoints, flags: Region, flags_addr: int, landing: Region,
                 landing_addr: int, source_addr: int, result_addr: int, count: int, itemsize: int, dtype: int,
                 reduction: int, *, ordering: str = ..., memory_type: str = ..., kernels: Any = ...,
                 keepalive: Any = ...) -> None: ...

class GdraaAllreduce(OneSidedOp):
    def __init__(self, comm: Any, endpoints: Endpoints, flags: Region, flags_addr: int, landing: Region,
                 landing_addr: int, recv: Region, recv_addr: int, source_addr: int, segments: Sequence[int],
                 itemsize: int, dtype: int, reduction: int, *, ordering: str = ..., memory_type: str = ...,
                 kernels: Any = ..., keepalive: Any = ...) -> None: ...
