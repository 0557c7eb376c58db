"""OSU's overlap of a non-blocking collective with compute, from the times bench/rank/cell.py measures.

OSU Micro-Benchmarks (osu_iallreduce.c, and ``print_stats_nbc`` in osu_util_mpi.c)
times a collective posted and waited for (the pure time), calibrates a dummy compute to that time,
times post, compute, wait (the overall time) and reports

    Overlap(%) = max(0, 100 - 100 * (overall - (cpu_time - test_time)) / pure)

where ``cpu_time`` is the compute including its MPI_Test calls and ``test_time`` those calls alone:
the compute is counted without the tests, which stay in ``overall``. 100% means the collective cost
nothing beside the compute; 0% that it cost as much as alone (none of it moved during the compute).

OSU averages each time over the iterations and then over the ranks; here each iteration's time is
the maximum over ranks (as every pccl-bench time) and the figures are medians over the iterations.
"""

from __future__ import annotations

import numpy as np


def overlap_pct(pure_us: float, overall_us: float, compute_us: float) -> float:
    """OSU's Overlap(%) (``compute_us`` without the MPI_Test calls); nan without a pure time."""
    if not pure_us > 0:
        return float("nan")
    return max(0.0, 100.0 - 100.0 * (overall_us - compute_us) / pure_us)


def overlap_columns(pure_us: float, overall_s: np.ndarray, compute_s: np.ndarray, test_s: np.ndarray,
                    test_calls: int) -> dict:
    """The row's overlap columns: ``overall_s`` the overlapped calls' times (max over ranks), ``compute_s``
    and ``test_s`` each call's compute (without the tests) and MPI_Test time, max over ranks, seconds."""
    overall_us = float(np.median(overall_s)) * 1e6
    compute_us = float(np.median(compute_s)) * 1e6
    return {"pure_us": pure_us, "overall_us": overall_us, "compute_us": compute_us,
            "test_us": float(np.median(test_s)) * 1e6, "nb_test_calls": test_calls,
            "overlap_pct": overlap_pct(pure_us, overall_us, compute_us)}
