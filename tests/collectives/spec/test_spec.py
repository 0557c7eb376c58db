"""collectives.spec: busbw factors, deterministic inputs and the exact expected outputs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from collectives.call import CallSpec
from collectives.dtypes import DTYPES, OPS
from collectives.spec import SENTINEL, busbw_factor, count_wrong, expected_output, inputs, make_buffers

COLLECTIVES = ("allgather", "reduce_scatter", "allreduce")
NUMPY_OPS = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum}


# ---------------------------------------------------------------- busbw (nccl-tests PERFORMANCE.md)


@pytest.mark.parametrize("nranks", [2, 3, 4, 8, 16, 127, 256, 2048])
def test_busbw_factors_follow_nccl_tests(nranks):
    assert busbw_factor("allgather", nranks) == pytest.approx((nranks - 1) / nranks)
    assert busbw_factor("reduce_scatter", nranks) == pytest.approx((nranks - 1) / nranks)
    assert busbw_factor("allreduce", nranks) == pytest.approx(2 * (nranks - 1) / nranks)


def test_busbw_factor_of_one_rank_is_zero():
    for collective in COLLECTIVES:
        assert busbw_factor(collective, 1) == 0


def test_busbw_factor_examples():
    assert busbw_factor("allgather", 2) == 0.5
    assert busbw_factor("reduce_scatter", 4) == 0.75
    assert busbw_factor("allreduce", 2) == 1.0
    assert busbw_factor("allreduce", 8) == 1.75


# ---------------------------------------------------------------- an independent reference


def reference_outputs(call: CallSpec) -> list[np.ndarray]:
    """What every rank's receive buffer holds after a correct collective, computed from
    the inputs make_buffers gives (not from expected_output)."""
    p, n = call.nranks, call.count
    inputs = []
    for rank in range(p):
        send, recv = make_buffers(call, rank)
        if send is None:  # in place: the input sits in the receive buffer
            if call.collective == "allgather":
                send = recv[rank * n : (rank + 1) * n].copy()
            elif call.collective == "reduce_scatter":
                send = recv[: p * n].copy()
            else:
                send = recv[:n].copy()
        inputs.append(send)
    outputs = []
    for rank in range(p):
        _, recv = make_buffers(call, rank)
        if call.collective == "allgather":
            recv[: p * n] = np.concatenate(inputs)
        else:
            total = inputs[0].astype(np.float64)
            for other in inputs[1:]:
                total = NUMPY_OPS[call.op](total, other.astype(np.float64))
            if call.collective == "reduce_scatter":
                recv[:n] = total[rank * n : (rank + 1) * n]
            else:
                recv[:n] = total
        outputs.append(recv)
    return outputs


CALLS = [
    CallSpec(collective, nranks, count, dtype, op, in_place)
    for collective, nranks, count, dtype, op, in_place in itertools.product(
        COLLECTIVES, (1, 2, 3, 5, 8), (0, 1, 7), DTYPES, OPS, (False, True)
    )
    if collective != "allgather" or op == "sum"  # all-gather ignores op
]


@pytest.mark.parametrize("call", CALLS, ids=str)
def test_buffers_expected_output_and_count_wrong_agree(call: CallSpec):
    dtype = DTYPES[call.dtype][0]
    references = reference_outputs(call)
    for rank in range(call.nranks):
        send, recv = make_buffers(call, rank)
        want_send, want_recv = call.buffer_counts
        assert (send is None) == call.in_place
        assert (0 if send is None else send.size) == want_send
        assert recv.size == want_recv
        assert recv.dtype == dtype and (send is None or send.dtype == dtype)
        expected = expected_output(call, rank)
        assert expected.dtype == dtype
        assert expected.size == (call.nranks * call.count if call.collective == "allgather" else call.count)
        got = references[rank]
        assert np.array_equal(got[: expected.size], expected), "expected_output disagrees with a correct result"
        assert count_wrong(call, rank, got) == 0
        if expected.size:
            flipped = got.copy()
            index = expected.size // 2
            bits = flipped.view(f"u{dtype.itemsize}")
            bits[index] ^= 1  # one bit of one element
            assert count_wrong(call, rank, flipped) == 1


@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_untouched_receive_buffer_is_caught(collective, dtype):
    call = CallSpec(collective, 4, 16, dtype, "sum", False)
    for rank in range(4):
        _, recv = make_buffers(call, rank)
        assert np.all(recv == SENTINEL)
        # expected values are never the sentinel, so every element is wrong
        assert count_wrong(call, rank, recv) == expected_output(call, rank).size


def test_in_place_layouts():
    p, n = 4, 3
    for rank in range(p):
        send, recv = make_buffers(CallSpec("allgather", p, n, "int32", "sum", True), rank)
        assert send is None
        own = slice(rank * n, (rank + 1) * n)
        assert np.array_equal(recv[own], inputs.gather_value(rank, np.arange(n)))
        assert np.all(np.delete(recv, np.arange(rank * n, (rank + 1) * n)) == SENTINEL)
        send, recv = make_buffers(CallSpec("reduce_scatter", p, n, "int32", "sum", True), rank)
        assert send is None and recv.size == p * n
        assert np.array_equal(recv, inputs.reduce_input("sum", rank, np.arange(p * n), p))
        send, recv = make_buffers(CallSpec("allreduce", p, n, "int32", "sum", True), rank)
        assert send is None and recv.size == n


def test_gather_inputs_differ_between_ranks_and_elements():
    p, n = 8, 64
    gathers = [make_buffers(CallSpec("allgather", p, n, "int32"), rank)[0] for rank in range(p)]
    assert len({g.tobytes() for g in gathers}) == p
    assert all(len(set(g.tolist())) == n for g in gathers)
    expected = expected_output(CallSpec("allgather", p, n, "int32"), 0)
    for rank in range(p):
        swapped = expected.copy()
        other = (rank + 1) % p
        swapped[rank * n : (rank + 1) * n] = expected[other * n : (other + 1) * n]
        assert count_wrong(CallSpec("allgather", p, n, "int32"), rank, swapped) == n


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("nranks", [2, 4, 8])
def test_reduce_scatter_block_from_another_rank_is_caught(op, nranks):
    count = 192  # 8 KiB-ish power-of-two-times-3 sizes are what sweeps use
    call = CallSpec("reduce_scatter", nranks, count, "int32", op)
    blocks = [expected_output(call, rank) for rank in range(nranks)]
    for rank in range(nranks):
        assert count_wrong(call, rank, blocks[(rank + 1) % nranks].copy()) > 0, f"rank {rank}"


@pytest.mark.parametrize("nranks", [8, 16, 64])
def test_permuted_allreduce_sum_is_caught(nranks):
    call = CallSpec("allreduce", nranks, 16, "float32", "sum")
    expected = expected_output(call, 0)
    assert count_wrong(call, 0, expected[::-1].copy()) > 0


# ---------------------------------------------------------------- exactness


COLLECTIVE_OPS = [("allgather", "sum")] + [(c, op) for c in COLLECTIVES[1:] for op in OPS]


@pytest.mark.parametrize(("collective", "op"), COLLECTIVE_OPS)
@pytest.mark.parametrize("nranks", [2, 3, 64, 255, 256])
def test_float16_expected_values_are_exact_integers(collective, op, nranks):
    """Every expected value (and every partial result on the way) is an integer float16 holds exactly."""
    count = 24
    call16 = CallSpec(collective, nranks, count, "float16", op)
    call64 = CallSpec(collective, nranks, count, "int64", op)
    for rank in (0, nranks // 2, nranks - 1):
        half = expected_output(call16, rank)
        exact = expected_output(call64, rank)
        assert np.array_equal(half.astype(np.int64), exact), "float16 lost precision"
        assert np.all(np.abs(exact) <= 2048)


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("nranks", [2, 7, 128, 256])
def test_float16_reduction_order_does_not_matter(op, nranks):
    """Partial results in any order stay exact in float16, so any algorithm gets the same bits."""
    count = 32
    call = CallSpec("allreduce", nranks, count, "float16", op)
    inputs = [make_buffers(call, rank)[0] for rank in range(nranks)]
    expected = expected_output(call, 0)
    combine = NUMPY_OPS[op]
    rng = np.random.default_rng(nranks)
    orders = [list(range(nranks)), list(reversed(range(nranks))), list(rng.permutation(nranks))]
    for order in orders:
        acc = inputs[order[0]].copy()
        for rank in order[1:]:
            acc = combine(acc, inputs[rank]).astype(np.float16)
        assert np.array_equal(acc.view(np.uint16), expected.view(np.uint16)), order[:4]
    # pairwise (tree) order, as recursive halving would reduce
    level = [x.copy() for x in inputs]
    while len(level) > 1:
        level = [
            combine(level[i], level[i + 1]).astype(np.float16) if i + 1 < len(level) else level[i]
            for i in range(0, len(level), 2)
        ]
    assert np.array_equal(level[0].view(np.uint16), expected.view(np.uint16))


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_expected_values_identical_across_dtypes(dtype):
    """The same integers in every dtype, so rows of different dtypes check the same thing."""
    for collective in COLLECTIVES:
        for op in OPS:
            call = CallSpec(collective, 16, 9, dtype, op)
            reference = CallSpec(collective, 16, 9, "int64", op)
            for rank in (0, 15):
                assert np.array_equal(expected_output(call, rank).astype(np.int64), expected_output(reference, rank))


# ---------------------------------------------------------------- periodic generation


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("nranks", [2, 3, 5, 8])
def test_periodic_inputs_and_results_equal_the_formulas(op, nranks):
    """Long buffers are one period repeated: exactly the element-wise formulas, at any start."""
    period = inputs.reduce_period(op, nranks)
    length = 2 * period + 12345
    for start in (0, 7 * period + 3):
        index = np.arange(start, start + length, dtype=np.int64)
        direct = inputs.reduced(op, index, nranks, np.float32)
        assert np.array_equal(inputs.reduced_range(op, start, length, nranks, np.float32), direct)
        last = nranks - 1
        tiled = inputs.periodic(lambda i, r=last: inputs.reduce_input(op, r, i, nranks), start, length, period,
                                np.int64)
        assert np.array_equal(tiled, inputs.reduce_input(op, last, index, nranks))


def test_periodic_gather_values_equal_the_formula():
    length = 5 * inputs.GATHER_PERIOD + 17
    tiled = inputs.periodic(lambda i: inputs.gather_value(3, i), 0, length, inputs.GATHER_PERIOD, np.int32)
    assert np.array_equal(tiled, inputs.gather_value(3, np.arange(length)))


def test_a_large_call_is_checked_element_for_element():
    """Above two periods: one element wrong anywhere is still one wrong element."""
    for collective in COLLECTIVES:
        call = CallSpec(collective, 3, 3 * inputs.reduce_period("sum", 3) + 5)
        expected = expected_output(call, 1)
        assert count_wrong(call, 1, expected.copy()) == 0
        broken = expected.copy()
        broken[-2] += 1
        assert count_wrong(call, 1, broken) == 1
