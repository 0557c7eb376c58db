"""Type stubs for cython_ext.nonblocking (MPI's non-blocking collectives, OSU's overlapped iteration)."""

from typing import Any

import numpy as np
from mpi4py import MPI

from cython_ext.core import CollOp

KINDS: tuple[str, ...]
CHUNK: int

def compute(seconds: float) -> float: ...

class NonblockingCollective(CollOp):
    def __init__(self, comm: MPI.Comm, kind: str, send_addr: int, recv_addr: int, count: int, dtype: int, op: int,
                 in_place: bool, keepalive: Any = ...) -> None: ...
    def start(self) -> None: ...
    def poll(self) -> None: ...
    def finish(self) -> None: ...

class OverlapOp(CollOp):
    compute_s: float
    test_calls: int
    def __init__(self, collective: NonblockingCollective, compute_s: float, test_calls: int = ...) -> None: ...
    def times(self, last: int = ...) -> tuple[np.ndarray, np.ndarray]: ...
