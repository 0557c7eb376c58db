"""cython_ext.reduce against numpy, and the codes shared between Python and C."""

from __future__ import annotations

import numpy as np
import pytest

from collectives.dtypes import DTYPES, OPS, dtype_code, numpy_dtype, op_code
from collectives.schedules import rows as schedule
from cython_ext import reduce as creduce

NUMPY_OPS = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum}
SIZES = [0, 1, 2, 7, 8, 31, 1000, 4097]


def operands(dtype: str, op: str, size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    kind = numpy_dtype(dtype)
    if kind.kind == "i":
        low, high = (-40, 40) if op == "prod" else (-(2**20), 2**20)
        a, b = rng.integers(low, high, size), rng.integers(low, high, size)
    else:
        # finite values with fractions (rounding matters), a few ties and signed zeros
        scale = 8.0 if dtype == "float16" else 1e3
        a, b = rng.uniform(-scale, scale, size), rng.uniform(-scale, scale, size)
        if size >= 4:
            b[0] = a[0]
            a[1], b[1] = 0.0, -0.0
    return a.astype(kind), b.astype(kind)


def expected(dtype: str, op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return NUMPY_OPS[op](a, b).astype(numpy_dtype(dtype))


def same_bits(x: np.ndarray, y: np.ndarray) -> bool:
    """Bit-for-bit, except that min/max of +0 and -0 may return either zero."""
    as_bits = f"u{x.dtype.itemsize}"
    equal = x.view(as_bits) == y.view(as_bits)
    both_zero = (x == 0) & (y == 0) if x.dtype.kind == "f" else np.zeros_like(equal)
    return bool(np.all(equal | both_zero))


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_reduce_arrays_matches_numpy(dtype, op, size):
    a, b = operands(dtype, op, size, seed=size)
    out = np.full(size, 99, dtype=numpy_dtype(dtype))
    returned = creduce.reduce_arrays(out, a, b, dtype, op)
    assert returned is out
    assert same_bits(out, expected(dtype, op, a, b))


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_reduce_arrays_out_aliases_an_input(dtype, op):
    a, b = operands(dtype, op, 1001, seed=7)
    want = expected(dtype, op, a, b)
    first = a.copy()
    creduce.reduce_arrays(first, first, b, dtype, op)
    assert same_bits(first, want)
    second = b.copy()
    creduce.reduce_arrays(second, a, second, dtype, op)
    assert same_bits(second, want)
    both = a.copy()
    creduce.reduce_arrays(both, both, both, dtype, op)
    assert same_bits(both, expected(dtype, op, a, a))


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_reduce_arrays_does_not_touch_inputs_or_beyond(dtype):
    a, b = operands(dtype, "sum", 64, seed=3)
    a0, b0 = a.copy(), b.copy()
    backing = np.full(80, 5, dtype=numpy_dtype(dtype))
    out = backing[8:72]
    creduce.reduce_arrays(out, a, b, dtype, "sum")
    assert np.array_equal(a, a0) and np.array_equal(b, b0)
    assert np.all(backing[:8] == 5) and np.all(backing[72:] == 5)


def test_float16_sum_rounds_like_numpy():
    # 2048 + 1 is not representable in float16: round to even gives 2048
    a = np.array([2048, 2048, 0.1, 65504], dtype=np.float16)
    b = np.array([1, 3, 0.2, 65504], dtype=np.float16)
    out = np.empty(4, np.float16)
    creduce.reduce_arrays(out, a, b, "float16", "sum")
    with np.errstate(over="ignore"):
        assert same_bits(out, (a + b).astype(np.float16))
    assert out[0] == 2048 and out[1] == 2052 and np.isinf(out[3])


def test_reduce_arrays_rejects_length_mismatch():
    a = np.ones(4, np.float32)
    with pytest.raises(ValueError):
        creduce.reduce_arrays(np.empty(3, np.float32), a, a, "float32", "sum")
    with pytest.raises(ValueError):
        creduce.reduce_arrays(np.empty(4, np.float32), a, np.ones(5, np.float32), "float32", "sum")


def test_codes_agree_between_python_and_c():
    assert set(creduce.DTYPE_CODES) == set(DTYPES)
    assert set(creduce.OP_CODES) == set(OPS)
    for name in DTYPES:
        assert creduce.DTYPE_CODES[name] == dtype_code(name), name
    for name in OPS:
        assert creduce.OP_CODES[name] == op_code(name), name
    assert len(set(creduce.DTYPE_CODES.values())) == len(DTYPES)
    assert len(set(creduce.OP_CODES.values())) == len(OPS)


def test_executor_columns_match_the_schedule_layout():
    """The compiled executor reads schedules by column position (executor.pyx: "a test checks it")."""
    import mpi4py

    mpi4py.rc.initialize = False  # importing the executor loads mpi4py.MPI; no MPI_Init in pytest
    mpi4py.rc.finalize = False
    from cython_ext import executor

    assert executor.column_indices() == {**schedule.COLUMN, "ncols": len(schedule.COLUMNS)}
    assert set(executor.LIBRARY_CODES) == set(schedule.LIBRARY_ACTIONS)
