"""Where each call of a cell finds its buffers (the suite's ``buffers``; docs/SWEEPS.md, "Buffers").

- ``warm``: the same send and receive buffers every call (what pccl-bench always did; OSU's way).
- ``rotate``: nccl-tests' default (``startColl`` in its src/common.cu): one allocation per buffer
  sized by the suite's largest size, and the start of call ``i`` shifted by
  ``footprint * (i % (max_footprint // footprint))``, the footprint being the larger of the send and
  receive buffers at this size (nccl-tests' ``max(sendBytes, expectedBytes)``).
- ``cold``: IMB's ``-off_cache``: the positions of the rotation spaced so that each buffer's walk
  spans more than the last-level cache (read from sysfs, else ``os.sysconf``; the largest over
  ranks), so every call meets its data outside the cache.

At most MAX_POSITIONS positions (nccl-tests walks max/size of them: millions for 8 B of a 64 MiB
sweep). Each position is a view of the one allocation per buffer, filled with the cell's inputs and
built as an op of its own (a transport that registers or exchanges addresses does it per position,
at build time), so the timed call only picks the next op (cython_ext.core.Rotating).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from collectives import spec
from collectives.call import CallSpec
from collectives.dtypes import itemsize

#: the most positions a cell walks (each one an op built, and checked, before timing)
MAX_POSITIONS = 1024
#: cold positions start on cache lines of this many bytes
CACHE_LINE = 64
#: where Linux describes cpu0's caches: index*/level, type, size
SYSFS_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")


@dataclass(frozen=True)
class Layout:
    """The positions a cell's calls take in turn: how many, how far apart (bytes, in each buffer)."""

    positions: int
    stride_bytes: int
    #: cold: the last-level cache the walk was made to exceed, bytes (None: not asked)
    llc_bytes: int | None = None

    def span_bytes(self, call: CallSpec) -> int:
        """The bytes one rank's buffers (send and receive; receive alone in place) span over the positions."""
        counts = [count for count in spec.buffer_counts(call.collective, call.nranks, call.count, call.in_place)
                  if count]
        return sum((self.positions - 1) * self.stride_bytes + count * itemsize(call.dtype) for count in counts)

    def columns(self, call: CallSpec) -> dict:
        """The row's buffer columns: the positions, the bytes they span, the cache they were made to exceed."""
        return {"buffer_positions": self.positions, "buffer_span_bytes": self.span_bytes(call),
                "buffer_llc_bytes": self.llc_bytes}


WARM = Layout(1, 0)


def _size_bytes(text: str) -> int:
    """A sysfs cache size ("32768K", "1M", "512") in bytes."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


def last_level_cache(root: Path = SYSFS_CACHES) -> tuple[int, str]:
    """(bytes, where from) of this CPU's last-level data cache: the highest-level data or unified
    cache under sysfs ``root``, else glibc's ``os.sysconf`` (L3, then L2); (0, why not) if neither says."""
    caches = []
    for index in sorted(root.glob("index*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = _size_bytes((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified") and size > 0:
            caches.append((level, size))
    if caches:
        level, size = max(caches)
        return size, f"{root}: L{level}"
    for name in ("SC_LEVEL3_CACHE_SIZE", "SC_LEVEL2_CACHE_SIZE"):
        try:
            size = os.sysconf(name)
        except (ValueError, OSError):
            continue
        if size > 0:
            return size, f"os.sysconf({name})"
    return 0, f"no cache size in {root} or os.sysconf"


def footprint_bytes(call: CallSpec) -> int:
    """The larger of one rank's send and receive buffers (nccl-tests' ``max(sendBytes, expectedBytes)``)."""
    return max(spec.buffer_counts(call.collective, call.nranks, call.count, call.in_place)) * itemsize(call.dtype)


def rotate_layout(call: CallSpec, max_count: int) -> Layout:
    """nccl-tests' walk: max_footprint // footprint positions, one footprint apart (at most MAX_POSITIONS)."""
    footprint = footprint_bytes(call)
    largest = footprint_bytes(CallSpec(call.collective, call.nranks, max(max_count, call.count), call.dtype,
                                       call.op, call.in_place))
    return Layout(max(1, min(largest // footprint, MAX_POSITIONS)), footprint)


def cold_layout(call: CallSpec, llc_bytes: int) -> Layout:
    """Positions on cache lines, a footprint apart or more, whose walk spans more than ``llc_bytes``
    in each buffer; at least two (a buffer larger than the cache alternates between two, as
    rccl-tests' ``-E``), at most MAX_POSITIONS (small sizes: spaced ``llc_bytes / (MAX_POSITIONS - 1)``
    apart)."""
    line = max(CACHE_LINE, itemsize(call.dtype))
    # (llc // stride + 1 positions: with a stride of llc / (MAX_POSITIONS - 1) or more, at most MAX_POSITIONS)
    stride = -(-max(footprint_bytes(call), -(-llc_bytes // (MAX_POSITIONS - 1))) // line) * line
    return Layout(max(2, llc_bytes // stride + 1), stride, llc_bytes)


def layout_of(buffers: str, call: CallSpec, max_count: int, llc_bytes: int) -> Layout:
    """The positions of a cell's ``buffers`` (``llc_bytes``: for cold, the cache to exceed)."""
    if buffers == "rotate":
        return rotate_layout(call, max_count)
    if buffers == "cold":
        return cold_layout(call, llc_bytes)
    return WARM


def _walk(backend, first: np.ndarray, layout: Layout) -> list:
    """One allocation of ``backend`` holding ``first`` at every position: the positions' views, in order."""
    step = layout.stride_bytes // first.itemsize
    whole = np.zeros((layout.positions - 1) * step + len(first), dtype=first.dtype)
    for k in range(layout.positions):
        whole[k * step:k * step + len(first)] = first
    whole = backend.from_host(whole)
    return [whole[k * step:k * step + len(first)] for k in range(layout.positions)]


def positions(backend, host_send: np.ndarray | None, host_recv: np.ndarray, layout: Layout) -> list[tuple]:
    """The (send, receive) buffers of each position in ``backend``'s memory (send None in place):
    the spec's arrays themselves for one position, else views of one allocation per buffer."""
    if layout.positions == 1:
        return [(None if host_send is None else backend.from_host(host_send), backend.from_host(host_recv))]
    recvs = _walk(backend, host_recv, layout)
    sends = [None] * layout.positions if host_send is None else _walk(backend, host_send, layout)
    return list(zip(sends, recvs, strict=True))
