"""What the C paths take of a host array: its address. A base module (no memory kind needed), so that
the executors and transports that hand host buffers to C import no floor above their own
(collectives/memory/ imports the executors of its GPU context: tests/project/test_layers.py)."""

from __future__ import annotations

import numpy as np


def host_address(array: np.ndarray | None) -> int:
    """Address of a host (numpy, pinned or not) array; 0 for None or an empty one."""
    return int(array.__array_interface__["data"][0]) if array is not None and array.size else 0
