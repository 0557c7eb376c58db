"""Element types and reduction ops the library understands, with their C codes."""

from __future__ import annotations

import numpy as np

# Codes match cython_ext/reduce.pxd (tests/cython_ext/test_cython.py checks they agree).
DTYPES: dict[str, tuple[np.dtype, int]] = {
    "int32": (np.dtype(np.int32), 0),
    "int64": (np.dtype(np.int64), 1),
    "float16": (np.dtype(np.float16), 2),
    "float32": (np.dtype(np.float32), 3),
    "float64": (np.dtype(np.float64), 4),
}
OPS: dict[str, int] = {"sum": 0, "prod": 1, "min": 2, "max": 3}


def numpy_dtype(name: str) -> np.dtype:
    return DTYPES[name][0]


def dtype_code(name: str) -> int:
    return DTYPES[name][1]


def op_code(name: str) -> int:
    return OPS[name]


def itemsize(name: str) -> int:
    return DTYPES[name][0].itemsize
