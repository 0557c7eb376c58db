"""Names for implementations and cells, the same in the gate, plots and reports.

Rows may be itertuples() rows, pandas Series or dicts.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from bench.plan.sizes import format_size
from collectives.spec import reduces

#: implementations that name themselves without an algorithm
PLAIN_IMPLS = ("mpi", "xccl")


def field(row, name: str, default=""):
    """``row[name]`` for Series and dicts (``Series.dtype`` is not the column), else an attribute."""
    if isinstance(row, Mapping | pd.Series):
        value = row.get(name, default)
    else:
        value = getattr(row, name, default)
    return default if value is None or (isinstance(value, float) and value != value) else value


def impl_label(row) -> str:
    """``mpi``, ``pccl-flat:ring``, ``pccl-hier:rd/ring`` (inter/intra phases), ``osu-mpich``; a
    non-blocking cell's (``mode``) with `` non-blocking`` after it."""
    impl, algorithm = str(field(row, "impl")), str(field(row, "algorithm"))
    if impl == "pccl-hier":
        name = f"pccl-hier:{field(row, 'inter')}/{field(row, 'intra')}"
    elif impl in PLAIN_IMPLS or impl.startswith("osu") or algorithm in ("", "native", "default"):
        name = impl
    else:
        name = f"{impl}:{algorithm}"
    return name if field(row, "mode", "blocking") in ("blocking", "") else f"{name} {field(row, 'mode')}"


def buffers_note(row) -> str:
    """`` rotate buffers`` / `` cold buffers`` after a cell's name where its buffers moved ("" for warm,
    as every table from before the buffers column)."""
    buffers = str(field(row, "buffers", "warm") or "warm")
    return "" if buffers == "warm" else f" {buffers} buffers"


def shape_label(row) -> str:
    """``2 ranks``, ``8 ranks / 2 nodes`` or ``8 ranks / 2 virtual nodes`` (network namespaces on one host)."""
    nodes = int(field(row, "nnodes", 1) or 1)
    # a table's bool (numpy's or Python's), or the gate's normalised key ("virtual"/"real"/"")
    kind = "virtual nodes" if str(field(row, "virtual_nodes", "")) in ("True", "virtual") else "nodes"
    ranks = field(row, "nranks")
    shown = f"{int(ranks)} ranks" if ranks != "" and int(ranks) >= 0 else "? ranks"  # -1: the gate's unknown
    return shown + (f" / {nodes} {kind}" if nodes > 1 else "")


def cell_label(row) -> str:
    """One line that names a cell: collective, implementation, shape, size, dtype/op, placement."""
    collective = field(row, "collective")
    text = f"{collective} {impl_label(row)} {shape_label(row)} {format_size(int(field(row, 'bytes_total')))}"
    text += f" {field(row, 'dtype')}"
    if reduces(collective):
        text += f" {field(row, 'op')}"
    if field(row, "placement", "out_of_place") != "out_of_place":
        text += " in-place"
    text += buffers_note(row)
    if field(row, "timing_mode", "sync") not in ("sync", ""):
        text += f" {field(row, 'timing_mode')}"
    if field(row, "arm", ""):
        text += f" [{field(row, 'arm')}]"
    return text
