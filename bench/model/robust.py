"""``model fit --per-impl``: every implementation's own terms, fitted robustly in log space.

Each library (``xccl``, ``mpi``, ``pccl``) gets its own per-step latency and per-byte cost on
each level (intra-node; inter-node, whose bytes carry the NIC share of the library's NIC
policy), its own reduction throughput and a per-call software cost; ``mpi`` also the algorithm
of each collective where MPICH's default selection does not fit (the reproducer's
reduce-scatter is recursive halving). Why per library: RCCL, Cray MPICH and PCCL's Python
driver pay very different software costs per message step on the same wires.

The fit: medians over repeats; minimise the Cauchy loss of ``log(model / measured)`` (robust:
a cell whose residual is beyond 1.5 robust standard deviations weighs much less, so a single
100+ ms straggler in a job of 2 ms calls does not drag the fit) by Gauss-Newton steps solved
with non-negative least squares, re-taking the critical path every round. The scale is fitted with
the terms (the maximum of a Student t likelihood whose weights are those Cauchy weights), so rounds
of different scales compare: a scale re-taken from each round's own residuals falls as the fit
matches half the cells exactly, and the fit then drifted there (a band of half its width). Three starts
(inter-node links as costly as, 4x and 1/4 of the base's), the best kept. Uncertainty: the
covariance ``s^2 (J^T W J)^-1`` of the log-space problem at the solution (parameters at
their bound 0 have none), written to the description with the fitted values.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from pydantic import ValidationError

from bench.errors import BadInput
from bench.model.check import Measured
from bench.model.cost import best_schedules, call_features, library_key, theta, us_per_byte
from bench.model.fit import UNBOUNDED_GBPS, nnls
from bench.model.legs import PARAMS
from bench.model.machine import Library, Machine, error_line

#: the terms fitted per library (PARAMS names; ``reduce`` covers device and host reductions)
BASE_TERMS = ("intra.latency_us", "intra.us_per_byte", "inter.latency_us", "inter.us_per_byte", "reduce.us_per_byte",
              "library.call_overhead_us")
#: terms added only where the training data demand them (forward selection: bench/model/select.py)
EXTRA_TERMS = ("inter.node_latency_us", "inter.band_us", "library.call_us_per_node", "inter.protocol_us")
TERMS = BASE_TERMS + EXTRA_TERMS
#: windows [low, high) of inter-node message bytes tried for the band term (powers of two, 8 KiB - 4 MiB)
BAND_WINDOWS = tuple((1 << lo, 1 << hi) for lo in range(13, 21) for hi in range(lo + 1, min(lo + 5, 23)))
#: an extra term is kept when it lowers 2 x loss / scale^2 by more than this many log(cells) per parameter
#: (the Bayesian information criterion; the band's window counts as one more parameter)
SELECTION_PENALTY = 1.0
HUBER_K = 1.5
#: the shape (nu + 1) of the Student t whose likelihood the fit maximises: 4.42 puts the limit of its Cauchy
#: weights at 1.5 sd of Gaussian residuals (HUBER_K x the scale, the scale then the sd)
SCALE_SHAPE = 4.42
MAX_ROUNDS = 30
#: step lengths tried along a Gauss-Newton step, longest first
LINE_SEARCH = (1.0, 0.5, 0.25, 0.125)
#: rounds without improvement before the fit stops (it then returns its best point): a refit whose first round
#: does not improve (a new term starting at 0, a critical path about to change) moves on instead of staying at its
#: start ("criterion +0.0" in the selection notes of PATIENCE = 0). Costs ~1.9x the fit time of 0 (docs/MODEL-FITTED.md)
PATIENCE = 2
START_FACTORS = (1.0, 4.0, 0.25)
#: reduce-scatter algorithms tried for ``mpi`` (None: MPICH's default selection) when the rows do not say
MPI_REDUCE_SCATTER = (None, "rh", "pairwise", "ring", "rh-dd")
#: resolved_algorithm values of measured ``mpi`` rows that name the algorithm that ran
STATED_MPI = {"rh", "rh-dd", "pairwise", "ring", "rd", "bruck"}


@dataclass
class LibraryFit:
    library: str
    values: dict[str, float]  # TERMS -> fitted value (us, us per byte)
    sd: dict[str, float]  # standard deviation of each free term (absent: at its bound)
    covariance: list[list[float]]
    free: list[str]
    cells: int
    robust_scale: float  # robust sd of log residuals
    algorithms: dict[str, str] = field(default_factory=dict)
    terms: list[str] = field(default_factory=lambda: list(BASE_TERMS))  # the terms of the chosen model
    band_bytes: tuple[int, int] | None = None
    selection: list[str] = field(default_factory=list)  # what forward selection tried and kept
    protocol_bytes: int | None = None  # NCCL/RCCL's protocol switch (LL below, Simple at and above)
    switches: dict[str, int] = field(default_factory=dict)  # MPICH selection thresholds fitted (``mpi``)


def median_cells(measured: list[Measured]) -> list[Measured]:
    """One entry per call: the median over its repeats (rows carry their repeat count)."""
    groups: dict = {}
    for item in measured:
        groups.setdefault(item.call, []).append(item)
    return [Measured(call, float(np.median([m.time_us for m in items])), {**items[0].row, "repeats": len(items)})
            for call, items in groups.items()]


_TERM_COLUMNS = np.array([PARAMS.index(name) for name in TERMS])


def _terms_of(features: np.ndarray, library: str, machine: Machine) -> np.ndarray:
    """The TERMS columns of a PARAMS feature vector (reductions in one column)."""
    terms = features[_TERM_COLUMNS]
    terms[TERMS.index("reduce.us_per_byte")] = (features[PARAMS.index("reduce.us_per_byte")]
                                                 + features[PARAMS.index("host_reduce.us_per_byte")])
    return terms


_KEEP = object()


def with_library_values(machine: Machine, library: str, values: dict[str, float],
                        algorithms: dict[str, str] | None = None, band=_KEEP, protocol=_KEEP) -> Machine:
    """``machine`` with ``library``'s own links, reduction rate, call cost (and algorithms; the band
    window and the protocol switch kept unless given)."""
    lib = machine.libraries[library]
    base = {"intra": lib.intra or machine.intra, "inter": lib.inter or machine.inter}
    links = {}
    for level in ("intra", "inter"):
        update = {"latency_us": values[f"{level}.latency_us"], "bandwidth_gbps": gbps(values[f"{level}.us_per_byte"])}
        if level == "inter":
            update.update(node_latency_us=values.get("inter.node_latency_us", 0.0),
                          band_us=values.get("inter.band_us", 0.0),
                          protocol_us=values.get("inter.protocol_us", 0.0))
            if band is not _KEEP:
                update["band_bytes"] = band
            if protocol is not _KEEP:
                update["protocol_bytes"] = protocol
        links[level] = {**base[level].model_dump(), **update}
    data = {**lib.model_dump(), **links, "reduce_gbps": gbps(values["reduce.us_per_byte"]), "step_overhead_us": 0.0,
            "call_overhead_us": values["library.call_overhead_us"],
            "call_us_per_node": values.get("library.call_us_per_node", 0.0)}
    if algorithms is not None:
        data["algorithms"] = algorithms
    try:  # validated: terms outside a description's bounds (a wild fit or draw) are refused, not carried on
        fitted = Library.model_validate(data)
    except ValidationError as error:
        raise BadInput("", error_line(f"libraries.{library}", error)) from None
    return machine.model_copy(update={"libraries": {**machine.libraries, library: fitted}})


def gbps(value_us_per_byte: float) -> float:
    return UNBOUNDED_GBPS if value_us_per_byte <= 1.0 / (UNBOUNDED_GBPS * 1e3) else 1.0 / (value_us_per_byte * 1e3)


def library_values(machine: Machine, library: str) -> dict[str, float]:
    full = theta(machine, library)
    values = {name: float(full[PARAMS.index(name)]) for name in TERMS if name != "reduce.us_per_byte"}
    lib = machine.libraries[library]
    reduce = lib.reduce_gbps or (machine.host_reduce_gbps if lib.reduce_on == "host" else machine.reduce_gbps)
    values["reduce.us_per_byte"] = us_per_byte(reduce)
    values["library.call_overhead_us"] = lib.call_overhead_us
    values["library.call_us_per_node"] = lib.call_us_per_node
    return values


#: PARAMS the TERMS stand for (the library step overhead is 0 after with_library_values: the latency)
FITTED_PARAMS = ("intra.latency_us", "intra.us_per_byte", "inter.latency_us", "inter.us_per_byte",
                 "reduce.us_per_byte", "host_reduce.us_per_byte", "library.call_overhead_us",
                 "library.step_overhead_us", *EXTRA_TERMS)


def _design(cells: list[Measured], machine: Machine, library: str) -> tuple[np.ndarray, np.ndarray]:
    """(TERMS features, the fixed rest of each cell's modelled time: copies, ...) under ``machine``."""
    params = theta(machine, library)
    fitted = [PARAMS.index(name) for name in FITTED_PARAMS]
    fitted_params = params[fitted]
    rows, rest = [], []
    for features, _ in best_schedules([item.call for item in cells], machine, params):  # call_features of each
        rows.append(_terms_of(features, library, machine))
        rest.append(float(features @ params - features[fitted] @ fitted_params))
    return np.array(rows), np.array(rest)


def _huber_weights(residuals: np.ndarray) -> tuple[np.ndarray, float]:
    """Cauchy weights and the robust scale of ``residuals`` (the scale by maximum likelihood, see _profile)."""
    scale = _scale(residuals)
    size = np.abs(residuals) / (HUBER_K * scale)
    # Cauchy weights: a straggler 100x off weighs ~nothing (Huber's would still pull linearly)
    return 1.0 / (1.0 + size**2), scale


def _scale(residuals: np.ndarray) -> float:
    """The scale s that maximises the likelihood of ``residuals`` under _profile's distribution, from the MAD
    (the fixed point ``(1.5 s)^2 = SCALE_SHAPE / n x sum w r^2``: the EM step of a Student t; monotone)."""
    limit = HUBER_K * max(1.4826 * float(np.median(np.abs(residuals - np.median(residuals)))), 1e-3)
    squares = residuals**2
    for _ in range(200):
        new = float(np.sqrt(SCALE_SHAPE * np.mean(squares / (1.0 + squares / limit**2))))
        if abs(new - limit) <= 1e-9 * limit:
            break
        limit = new
    return max(limit / HUBER_K, 1e-3)


def _profile(residuals: np.ndarray) -> float:
    """What the fit minimises: ``-log`` likelihood of the residuals under a Student t (the Cauchy loss at the
    limit ``1.5 s``, shape SCALE_SHAPE) with its scale at its maximum, so that points of different scales
    compare (a Cauchy loss at a scale re-taken from each point's own residuals falls as the scale shrinks:
    the fit then drifts into fitting half the cells exactly)."""
    limit = HUBER_K * _scale(residuals)
    return float(len(residuals) * np.log(limit) + 0.5 * SCALE_SHAPE * np.sum(np.log1p((residuals / limit) ** 2)))


def _loss(residuals: np.ndarray, scale: float) -> float:
    limit = HUBER_K * scale
    return float(np.sum(0.5 * limit**2 * np.log1p((residuals / limit) ** 2)))  # the Cauchy loss


def _needed(matrix: np.ndarray, library: str, cells: list[Measured], active: tuple[str, ...]) -> list[int]:
    """Columns the data can see; a level the fit needs but no cell exercises is an error."""
    seen = [i for i in range(len(TERMS)) if TERMS[i] in active and matrix[:, i].any()]
    if not any(m.call.nranks > m.call.ranks_per_node for m in cells):
        labels = sorted({m.call.variant.label for m in cells})
        raise BadInput(f"model fit: {', '.join(labels)}", f"library {library!r} has no cell that crosses a node: "
                       "nothing to fit inter.latency_us / inter.us_per_byte from (need >1-node runs)")
    distinct_ranks = {m.call.nranks for m in cells if m.call.nranks > m.call.ranks_per_node}
    if len(cells) < len(seen) + 2 or len(distinct_ranks) < 2:
        labels = sorted({m.call.variant.label for m in cells})
        raise BadInput(f"model fit: {', '.join(labels)}",
                       f"too few points for library {library!r}: {len(cells)} cells on "
                       f"{len(distinct_ranks)} multi-node GPU count(s) for {len(seen)} terms "
                       "(need >= terms + 2 cells and >= 2 multi-node GPU counts)")
    return seen


def _fit_from(cells: list[Measured], machine: Machine, library: str, algorithms: dict[str, str] | None,
              active: tuple[str, ...] = BASE_TERMS
              ) -> tuple[Machine, dict[str, float], float, np.ndarray, np.ndarray, list[int]]:
    times = np.array([m.time_us for m in cells])
    values = library_values(machine, library)
    for name in TERMS:
        if name not in active:
            values[name] = 0.0
    machine = with_library_values(machine, library, values, algorithms)
    best_loss, weights, scale = np.inf, np.ones(len(cells)), 1.0
    matrix, rest = _design(cells, machine, library)
    seen = _needed(matrix, library, cells, active)
    best, stalled = (machine, values, matrix, weights, seen), 0
    for _ in range(MAX_ROUNDS):
        matrix, rest = _design(cells, machine, library)
        seen = [i for i in range(len(TERMS)) if TERMS[i] in active and matrix[:, i].any()]  # this path's terms
        vector = np.array([values[name] for name in TERMS])
        model = matrix @ vector + rest
        residuals = np.log(model / times)
        weights, scale = _huber_weights(residuals)
        loss = _profile(residuals)
        if not np.isfinite(best_loss) or loss < best_loss - 1e-6 * abs(best_loss):
            best_loss, best, stalled = loss, (machine, values, matrix, weights, seen), 0
        else:  # no better: go on from here a few rounds (the critical path may change), keep the best point
            stalled += 1
            if stalled > PATIENCE:
                break
        # Gauss-Newton in log space: log m(v) ~ log m0 + (A (v - v0)) / m0
        jac = matrix[:, seen] / model[:, None]
        target = -residuals + (matrix[:, seen] @ vector[seen]) / model
        root = np.sqrt(weights)
        solution = nnls(jac * root[:, None], target * root)
        step = dict(values)
        for position, i in enumerate(seen):
            step[TERMS[i]] = float(solution[position])
        for fraction in LINE_SEARCH:  # the full step, else shorter ones (the critical path may change)
            trial = {k: values[k] + fraction * (step[k] - values[k]) for k in values}
            trial_machine = with_library_values(machine, library, trial, algorithms)
            new_matrix, new_rest = _design(cells, trial_machine, library)
            new_model = new_matrix @ np.array([trial[n] for n in TERMS]) + new_rest
            if _profile(np.log(np.maximum(new_model, 1e-9) / times)) < loss:
                break
        values, machine = trial, trial_machine
    machine, values, matrix, weights, seen = best
    return machine, values, best_loss, matrix, weights, seen


def _residuals(cells: list[Measured], machine: Machine, library: str, values: dict[str, float]) -> np.ndarray:
    times = np.array([m.time_us for m in cells])
    matrix, rest = _design(cells, machine, library)
    model = matrix @ np.array([values[name] for name in TERMS]) + rest
    return np.log(np.maximum(model, 1e-9) / times)


def _uncertainty(cells: list[Measured], machine: Machine, library: str, values: dict[str, float],
                 seen: list[int]) -> tuple[dict[str, float], list[list[float]], list[str], float]:
    times = np.array([m.time_us for m in cells])
    matrix, rest = _design(cells, machine, library)
    vector = np.array([values[name] for name in TERMS])
    model = matrix @ vector + rest
    residuals = np.log(model / times)
    weights, scale = _huber_weights(residuals)
    free = [i for i in seen if vector[i] > 0]
    jac = matrix[:, free] / model[:, None]
    dof = max(len(cells) - len(free), 1)
    sigma2 = float(np.sum(weights * residuals**2) / dof)
    # columns scaled to unit norm first: per-byte and per-call columns differ by ~1e8, and a pseudo-inverse of
    # the raw normal matrix (condition ~1e16) drops its least determined direction, i.e. gives it no variance
    norms = np.linalg.norm(jac * np.sqrt(weights)[:, None], axis=0)
    norms[norms == 0] = 1.0
    scaled = jac / norms
    covariance = sigma2 * np.linalg.pinv(scaled.T @ (scaled * weights[:, None])) / np.outer(norms, norms)
    sd = {TERMS[i]: float(np.sqrt(max(covariance[k, k], 0.0))) for k, i in enumerate(free)}
    return sd, covariance.tolist(), [TERMS[i] for i in free], scale


def _stated_algorithms(cells: list[Measured], library: str) -> list[dict[str, str] | None]:
    """``mpi`` reduce-scatter algorithm options: the one the rows name (the importer knows what the
    reproducer ran), else a search over MPICH's algorithms."""
    if library.partition("@")[0] != "mpi" or not any(m.call.collective == "reduce_scatter" for m in cells):
        return [None]
    stated = {m.row.get("resolved_algorithm") for m in cells if m.call.collective == "reduce_scatter"}
    if len(stated) == 1 and next(iter(stated)) in STATED_MPI:
        return [{"reduce_scatter": next(iter(stated))}]
    return [{"reduce_scatter": name} if name else {} for name in MPI_REDUCE_SCATTER]


def _criterion(cells: list[Measured], machine: Machine, library: str, values: dict[str, float],
               scale: float) -> float:
    """2 x the Cauchy loss / scale^2 at a fixed scale (a -2 log likelihood, comparable across models)."""
    return 2.0 * _loss(_residuals(cells, machine, library, values), scale) / scale**2


def fit_record(fits: list[LibraryFit]) -> dict:
    """What the description records about the fit: values, sd, covariance per library."""
    return {fit.library: {"cells": fit.cells, "terms": {name: round(fit.values[name], 9) for name in fit.terms},
                          **({"band_bytes": list(fit.band_bytes)} if fit.band_bytes else {}),
                          **({"protocol_bytes": fit.protocol_bytes} if fit.protocol_bytes else {}),
                          **({"switch_bytes": fit.switches} if fit.switches else {}),
                          "selection": fit.selection,
                          "sd": {name: float(f"{value:.4g}") for name, value in fit.sd.items()},
                          "free": fit.free, "covariance": [[float(f"{v:.4g}") for v in row] for row in fit.covariance],
                          "robust_sd_log_residual": round(fit.robust_scale, 4),
                          **({"algorithms": fit.algorithms} if fit.algorithms else {})}
            for fit in fits}


def predicted_sd_us(call_features_terms: np.ndarray, record: dict) -> float:
    """Standard deviation of a modelled time from the fit's covariance (TERMS features of the call)."""
    free = record["free"]
    g = np.array([call_features_terms[TERMS.index(name)] for name in free])
    covariance = np.array(record["covariance"])
    return float(np.sqrt(max(g @ covariance @ g, 0.0))) if len(free) else 0.0


def call_terms(item_call, machine: Machine) -> np.ndarray:
    """TERMS features of a call under ``machine`` (for prediction bands)."""
    library = library_key(item_call.variant, machine, item_call.collective)
    return _terms_of(call_features(item_call, machine, theta(machine, library)), library, machine)
