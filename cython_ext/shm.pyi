"""Type stubs for cython_ext.shm (shared-memory collectives through one shared window)."""

from collections.abc import Sequence
from typing import Any

from cython_ext.core import CollOp

PATHS: tuple[str, ...]
CLASSES: dict[tuple[str, str], type[ShmCollective]]

class ShmError(RuntimeError): ...
class ShmTimeout(ShmError, TimeoutError): ...

def region_bytes(ll_bytes: int, nranks: int, chunk_bytes: int) -> int: ...

class Segment:
    rank: int
    size: int
    step: int
    timeout_s: float
    spin_limit: int
    ll_bytes: int
    chunk_bytes: int
    cma: bool
    def __init__(self, rank: int, bases: Sequence[int], ll_bytes: int, chunk_bytes: int, timeout_s: float,
                 spin_limit: int, keepalive: Any = ...) -> None: ...
    def publish_pid(self, pid: int, probe: int) -> None: ...
    def probe_cma(self) -> str: ...
    def pingpong(self, peer: int, iters: int) -> float: ...

class ShmCollective(CollOp):
    KIND: str
    PATH: str
    def __init__(self, comm: Any, seg: Segment, send_addr: int, recv_addr: int, count: int,
                 itemsize: int, dtype: int, reduction: int, segments: Sequence[int] = ...,
                 peer_src: Sequence[int] = ..., peer_dst: Sequence[int] = ..., keepalive: Any = ...,
                 pieces: int = ..., stride: int = ...) -> None: ...
    @property
    def steps(self) -> int: ...

def collective(comm: Any, seg: Segment, kind: str, path: str, send_addr: int, recv_addr: int, count: int,
               itemsize: int, dtype: int, reduction: int, segments: Sequence[int] = ...,
               peer_src: Sequence[int] = ..., peer_dst: Sequence[int] = ..., keepalive: Any = ...,
               pieces: int = ..., stride: int = ...) -> ShmCollective: ...
