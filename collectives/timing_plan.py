"""How a cell is timed: the one definition of the timing plan's fields, defaults, bounds and docs.

The suite's ``timing:`` block (bench/plan/suite.py ``Timing``) is made from these fields, the
plan JSON carries a ``TimingPlan`` (bench/plan/cells.py ``LaunchPlan``), and the timing loop
(cython_ext/timing.pyx ``measure``) reads it; a new timing field is written here once. No pydantic
and nothing compiled here: every MPI rank imports it before its first cell, the driver before any
MPI job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: how each timed call starts (cython_ext/timing.pyx)
MODES = ("sync", "pipelined", "window")
#: how same-job arms that share a launch are timed
TURNS = ("iteration", "cell")
#: the most arms of one cell timed in turns (cython_ext/timing.pxd MAX_OPS)
MAX_TURNS = 4


def _option(default: Any, doc: str, **rules: Any) -> Any:
    """A field with what the suite schema needs: its documentation and its rules (pydantic's
    ``ge``/``gt``/``lt``, or ``choices`` for a closed set of strings)."""
    return field(default=default, metadata={"doc": doc, **rules})


@dataclass(frozen=True)
class TimingPlan:
    """The suite's ``timing`` block as the worker runs it. The loop reads the first eight fields;
    the worker the last four."""

    mode: str = _option("sync", "sync: barrier before every timed call (OSU/IMB); pipelined: calls back to back; "
                        "window: every call started at the same time on clocks synchronised before the cell "
                        "(ReproMPI), its time the latest finish minus that start", choices=MODES)
    warmup: int = _option(5, "untimed calls before the timed ones", ge=0)
    iters: int = _option(20, "the most timed iterations per cell", ge=1)
    min_iters: int = _option(5, "the fewest timed iterations, whatever the budget", ge=1)
    budget_s: float = _option(1.0, "seconds of timed iterations per cell (0: always iters)", ge=0)
    target_ci: float = _option(0.0, "adaptive stop: keep timing batches until the 95% interval of the median is "
                               "within +-target_ci of it (0.02 = 2%), the budget is spent or iters is reached "
                               "(0: off, the iteration count is fixed after the warm-up from the budget)", ge=0, lt=1)
    max_warmup: int = _option(0, "warm-up until stable: after warmup, timed warm-up batches until two batches' "
                              "medians agree within warm_tol, at most this many more iterations (0: the fixed "
                              "warm-up only)", ge=0)
    warm_tol: float = _option(0.1, "how far apart (relative) two warm-up batches' medians may be to agree", gt=0)
    probe: bool = _option(False, "measure the machine-speed probe (barrier, 8 B all-reduce, 1 MiB memcpy) after "
                          "every cell (bench/rank/probe.py); gate --normalise probe judges cells relative to it")
    turns: str = _option("iteration", "same-job arms that share a launch: iteration (the arms of a cell, up to 4, "
                         "timed in turns, iteration by iteration: every change of the machine lands on all) or cell "
                         "(one cell after the other)", choices=TURNS)
    clock_sync: bool = _option(False, "synchronise the ranks' clocks before every cell in sync and pipelined mode "
                               "too, and report each cell's start skew (start_skew_us_p50/_p95; window mode always "
                               "does)")
    nb_test_calls: int = _option(0, "non-blocking cells (mode: nonblocking): MPI_Test calls spread through the "
                                 "compute between post and wait (OSU's -t; 0: none, the library progresses on its "
                                 "own or in the wait)", ge=0, le=100000)
