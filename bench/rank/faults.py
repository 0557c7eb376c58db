"""Fault injection for tests: inert unless PCCL_BENCH_FAULT is set.

    PCCL_BENCH_FAULT="crash:rank=1:cell=3"            rank 1 dies (exit 17) at the launch's 4th cell
    PCCL_BENCH_FAULT="hang:rank=0:cell=0"             rank 0 sleeps forever (the launch timeout ends it)
    PCCL_BENCH_FAULT="corrupt:rank=1:cell=2:launch=n4-rpn2-host"   one wrong element before the check

``cell`` counts the cells of one launch from 0; ``launch`` (optional) limits the fault
to one launch id. A test aid only: it changes nothing when the variable is unset.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

KINDS = ("crash", "hang", "corrupt")


@dataclass(frozen=True)
class Fault:
    kind: str
    rank: int
    cell: int
    launch: str | None = None

    def hits(self, rank: int, cell_index: int, launch_id: str) -> bool:
        return rank == self.rank and cell_index == self.cell and self.launch in (None, launch_id)


def parse(text: str | None) -> Fault | None:
    if not text:
        return None
    kind, *fields = text.split(":")
    values = dict(field.split("=", 1) for field in fields)
    if kind not in KINDS or not {"rank", "cell"} <= values.keys():
        raise ValueError(f"PCCL_BENCH_FAULT={text!r}: expected KIND:rank=R:cell=C[:launch=ID], KIND in {KINDS}")
    return Fault(kind, int(values["rank"]), int(values["cell"]), values.get("launch"))


FAULT = parse(os.environ.get("PCCL_BENCH_FAULT"))


def before_check(rank: int, cell_index: int, launch_id: str, recvbuf) -> None:
    """Called between the collective and its check on every rank."""
    if FAULT is None or not FAULT.hits(rank, cell_index, launch_id):
        return
    if FAULT.kind == "crash":
        os._exit(17)  # no MPI_Abort, no cleanup: as a segfaulting rank would
    if FAULT.kind == "hang":
        while True:
            time.sleep(3600)
    if recvbuf.size:
        recvbuf.reshape(-1)[0] += 1  # corrupt
