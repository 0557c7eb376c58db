"""``xccl``: NCCL (CUDA) or RCCL (ROCm) collectives, the vendor baseline; GPU buffers only."""

from __future__ import annotations

from collectives.impls import LibraryCollective, register


@register("xccl")
class VendorLibrary(LibraryCollective):
    transport = "xccl"
    host_buffers = False
