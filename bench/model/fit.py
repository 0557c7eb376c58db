"""``model fit``: the latency and bandwidth parameters of a machine from measured sweeps.

Every measured cell's modelled time is a sum of per-step costs, linear in the
parameters once the slowest rank and link of every step are fixed. So: take the
critical path under the current parameters, solve weighted least squares on the
relative error (each cell weighs 1 / its measured time, so 2 us and 2 ms cells count
alike) with the link, copy and reduction costs kept non-negative, recompute the
critical path, repeat until it no longer changes; start three times (inter-node links
as costly as, 4x and 1/4 of the base's) and keep the best.

Parameters the data cannot see keep the base description's values, and so do the terms
this fit does not take (the per-implementation terms of ``--per-impl``, a fabric's rate
measured by a probe): their cost is taken off each cell's time before the solve. Inter-node
parameters are tied to the intra-node ones when no cell crosses a node boundary, or
when asked (virtual nodes share one host's memory). The library ``pccl`` carries no
step overhead of its own (it would be the link latency again); other libraries get a
per-step overhead of either sign and a per-call overhead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bench.model.check import Measured, error_table
from bench.model.cost import call_features, library_key, theta
from bench.model.legs import PARAMS
from bench.model.machine import Machine, validated

SHARED = PARAMS[: PARAMS.index("library.step_overhead_us")]
#: parameters that may come out negative (a library cheaper per step than the reference)
FREE_SIGN_SUFFIX = ".step_overhead_us"
MAX_ROUNDS = 12
START_FACTORS = (1.0, 4.0, 0.25)
RENDEZVOUS_CANDIDATES = (None, *(1 << k for k in range(10, 21)))


@dataclass
class Fit:
    machine: Machine
    values: dict[str, float]
    fitted: list[str]
    notes: list[str] = field(default_factory=list)
    rounds: int = 0


def nnls(a: np.ndarray, b: np.ndarray, tolerance: float = 1e-10) -> np.ndarray:
    """min ||a x - b|| with x >= 0 (Lawson and Hanson's active-set method)."""
    rows, cols = a.shape
    x, passive = np.zeros(cols), np.zeros(cols, dtype=bool)
    for _ in range(3 * cols + 10):
        gradient = a.T @ (b - a @ x)
        candidates = np.where(~passive & (gradient > tolerance), gradient, -np.inf)
        if not np.isfinite(candidates).any():
            break
        passive[int(np.argmax(candidates))] = True
        while True:
            trial = np.zeros(cols)
            trial[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (trial[passive] > tolerance).all():
                x = trial
                break
            blocked = passive & (trial <= tolerance)
            step = np.min(x[blocked] / (x[blocked] - trial[blocked] + 1e-300))
            x = x + step * (trial - x)
            passive &= x > tolerance
    return x


def _columns(libraries: list[str]) -> list[str]:
    return [*SHARED, *(f"{lib}.step_overhead_us" for lib in libraries if lib != "pccl"),
            *(f"{lib}.call_overhead_us" for lib in libraries)]


STEP, CALL = PARAMS.index("library.step_overhead_us"), PARAMS.index("library.call_overhead_us")


def _design(measured: list[Measured], machine: Machine, columns: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(feature rows over the fit's columns (library parameters into their library's column), each cell's cost of
    the terms not fitted: kept at the description's values, e.g. a measured fabric rate)."""
    index = {name: i for i, name in enumerate(columns)}
    matrix, rest = np.zeros((len(measured), len(columns))), np.zeros(len(measured))
    for row, item in enumerate(measured):
        params = theta(machine, library_key(item.call.variant, machine, item.call.collective))
        features = call_features(item.call, machine, params)
        lib = item.call.variant.library
        kept = features.copy()
        matrix[row, : len(SHARED)] = features[: len(SHARED)]
        kept[: len(SHARED)] = 0.0
        if f"{lib}.step_overhead_us" in index:
            matrix[row, index[f"{lib}.step_overhead_us"]] = features[STEP]
            kept[STEP] = 0.0
        matrix[row, index[f"{lib}.call_overhead_us"]] = features[CALL]
        kept[CALL] = 0.0
        rest[row] = float(kept @ params)
    return matrix, rest


def _ties(matrix: np.ndarray, columns: list[str], tie_links: bool, host_device: bool) -> dict[str, str]:
    """Column -> the column it is tied to (its features are added there)."""
    crosses = matrix[:, [columns.index(f"inter.{p}") for p in ("latency_us", "us_per_byte")]].any()
    ties = {}
    if tie_links or not crosses:
        ties.update({f"inter.{p}": f"intra.{p}" for p in ("latency_us", "rendezvous_us", "us_per_byte")})
    if host_device:
        ties["host_reduce.us_per_byte"] = "reduce.us_per_byte"
    return ties


def _solve(matrix: np.ndarray, times_us: np.ndarray, columns: list[str], ties: dict[str, str],
           current: dict[str, float], rest: np.ndarray | None = None) -> tuple[dict[str, float], list[str]]:
    merged = matrix.copy()
    for source, target in ties.items():
        merged[:, columns.index(target)] += merged[:, columns.index(source)]
        merged[:, columns.index(source)] = 0
    seen = [i for i in range(len(columns)) if merged[:, i].any()]
    free = [i for i in seen if columns[i].endswith(FREE_SIGN_SUFFIX)]
    weights = 1.0 / times_us
    system = np.hstack([merged[:, seen], -merged[:, free]]) * weights[:, None]
    solution = nnls(system, (times_us - (0.0 if rest is None else rest)) * weights)
    values = dict(current)
    for position, i in enumerate(seen):
        values[columns[i]] = float(solution[position])
    for position, i in enumerate(free):
        values[columns[i]] -= float(solution[len(seen) + position])
    for source, target in ties.items():
        values[source] = values[target]
    return values, [columns[i] for i in seen]


def current_values(machine: Machine, libraries: list[str]) -> dict[str, float]:
    values = dict(zip(SHARED, theta(machine, "pccl")[: len(SHARED)], strict=True))
    for lib in libraries:
        values[f"{lib}.step_overhead_us"] = machine.libraries[lib].step_overhead_us
        values[f"{lib}.call_overhead_us"] = machine.libraries[lib].call_overhead_us
    return values


#: what a per-byte cost fitted to zero becomes (the data cannot tell it from free)
UNBOUNDED_GBPS = 1e6


def _gbps(value_us_per_byte: float) -> float:
    return UNBOUNDED_GBPS if value_us_per_byte <= 1.0 / (UNBOUNDED_GBPS * 1e3) else 1.0 / (value_us_per_byte * 1e3)


def apply_values(machine: Machine, values: dict[str, float], host_cores: int | None) -> Machine:
    """A copy of ``machine`` carrying ``values`` (per-byte costs back as GB/s)."""
    data = machine.model_dump()
    for link in ("intra", "inter"):
        data[link].update(latency_us=values[f"{link}.latency_us"], rendezvous_us=values[f"{link}.rendezvous_us"],
                          bandwidth_gbps=_gbps(values[f"{link}.us_per_byte"]))
    for name in ("copy", "reduce", "host_reduce"):
        data[f"{name}_gbps"] = _gbps(values[f"{name}.us_per_byte"])
    if host_cores is not None:
        data["oversubscription"] = {"host_cores": host_cores, "latency_us": values["oversubscription.latency_us"],
                                    "rendezvous_us": values["oversubscription.rendezvous_us"]}
    for lib, library in machine.libraries.items():
        data["libraries"][lib] = {**library.model_dump(),
                                  "step_overhead_us": values.get(f"{lib}.step_overhead_us", library.step_overhead_us),
                                  "call_overhead_us": values.get(f"{lib}.call_overhead_us", library.call_overhead_us)}
    # validated: values outside a description's bounds (data no machine could produce) are a BadInput
    return validated(data, "model fit: the fitted description")


def host_cores_of(measured: list[Measured]) -> int | None:
    """Cores implied by the sweeps' ``oversubscribed`` flags (None: nothing oversubscribed)."""
    over = [m.call.nranks for m in measured if m.row.get("oversubscribed")]
    if not over:
        return None
    under = [m.call.nranks for m in measured if not m.row.get("oversubscribed")]
    return max(under) if under else min(over) - 1


def _fit_from(measured: list[Measured], base: Machine, start: Machine, tie_links: bool) -> Fit:
    """Alternate critical path and least squares from ``start`` until the path stops changing."""
    libraries = sorted({m.call.variant.library for m in measured} | {"pccl"})
    columns = _columns(libraries)
    host_cores = host_cores_of(measured)
    values = current_values(start, libraries)
    machine, fitted = apply_values(start, values, host_cores), []
    times = np.array([m.time_us for m in measured])
    previous, ties, rounds = None, {}, 0
    while rounds < MAX_ROUNDS:
        matrix, rest = _design(measured, machine, columns)
        if previous is not None and np.allclose(matrix, previous):
            break
        ties = _ties(matrix, columns, tie_links, base.device == "host")
        values, fitted = _solve(matrix, times, columns, ties, values, rest)
        machine, previous, rounds = apply_values(base, values, host_cores), matrix, rounds + 1
    notes = [f"{source} tied to {target}" for source, target in ties.items()]
    notes += [f"{name} fitted to 0: not separable from the other costs in these data"
              for name in fitted if name.endswith("us_per_byte") and values[name] <= 1.0 / (UNBOUNDED_GBPS * 1e3)]
    return Fit(machine, values, fitted, notes, rounds)


def _scaled_inter(machine: Machine, factor: float) -> Machine:
    """``machine`` with inter-node links ``factor`` times as costly (another starting critical path)."""
    inter = machine.inter.model_copy(update={"latency_us": machine.inter.latency_us * factor,
                                             "bandwidth_gbps": machine.inter.bandwidth_gbps / factor})
    return machine.model_copy(update={"inter": inter})


def rms_error_pct(measured: list[Measured], machine: Machine) -> float:
    errors = error_table(measured, machine)["error_pct"].to_numpy()
    return float(np.sqrt(np.mean(errors**2)))


def fit_once(measured: list[Measured], base: Machine, tie_links: bool = False) -> Fit:
    """The best of fits started with inter-node links as costly as, 4x and 1/4 of the base's:
    which leg and rank bound each step depends on the parameters, so one start can settle
    on a path that is consistent but not the best."""
    fits = [_fit_from(measured, base, _scaled_inter(base, factor), tie_links) for factor in START_FACTORS]
    return min(fits, key=lambda result: rms_error_pct(measured, result.machine))


def with_rendezvous(machine: Machine, threshold: int | None) -> Machine:
    data = machine.model_dump()
    for link in ("intra", "inter"):
        data[link]["rendezvous_bytes"] = threshold
    return validated(data, "--rendezvous")


def fit(measured: list[Measured], base: Machine, tie_links: bool = False, search_rendezvous: bool = True) -> Fit:
    """Fit ``base``'s parameters to ``measured``; the rendezvous threshold by search (over none and
    1 KiB - 1 MiB) when asked and the base sets none."""
    if not search_rendezvous or base.intra.rendezvous_bytes is not None:
        return fit_once(measured, base, tie_links)
    best, best_error = None, np.inf
    for threshold in RENDEZVOUS_CANDIDATES:
        candidate = fit_once(measured, with_rendezvous(base, threshold), tie_links)
        rms = rms_error_pct(measured, candidate.machine)
        if rms < best_error:
            best, best_error = candidate, rms
    best.notes.append(f"rendezvous threshold {best.machine.intra.rendezvous_bytes} B chosen by search "
                      f"(RMS relative error {best_error:.1f}%)")
    return best

