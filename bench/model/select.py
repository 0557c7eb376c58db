"""Which terms each library's model carries: forward selection, held out inside the training counts.

Every library starts from its six base terms (bench/model/robust.py). Then, greedily, each option not
yet in its model is fitted from the current solution:

- ``inter.band_us`` at every window of BAND_WINDOWS (a slow band of inter-node message sizes);
- ``inter.node_latency_us`` (per step x log2(nodes)) and ``library.call_us_per_node``;
- ``xccl`` only: ``inter.protocol_us`` at every switch point of PROTOCOL_SWITCHES — NCCL's own tuner
  (src/graph/tuning.cc) runs a ring under LL for small per-step messages and Simple for large, Simple
  paying a higher per-step latency (3x the network overhead plus a flush); its switch, where the two
  predicted times cross, sits at a per-rank message size that does not depend on p (both the latency
  and the bandwidth term of a ring grow with p - 1), so it is fitted as one message size;
- ``mpi`` only: MPICH's selection thresholds (``switch:allgather.rd``: recursive doubling below it for
  p a power of two, ring above; ``switch:reduce_scatter.rh`` where the rows do not name the algorithm)
  at every size of SWITCH_SIZES; Cray MPICH's own are not published.

**The rule.** An option is kept when all three hold: (1) on all training cells it lowers
``2 x Cauchy loss / scale^2`` by more than log(cells) per parameter (BIC; a window or switch point
counts as one more parameter); (2) fitted on the training counts below the largest one, it lowers the
same loss on the largest training count (an extrapolation held out inside the training data: the real
question is a prediction beyond the fitted counts); (3) its fit needs no inter-node link faster than
MAX_OVER_NIC x the description's NIC (or 1.25x what the model had). Candidates are tried in the order of
(1); the first that passes (2) is kept (at most MAX_TRIES per round), and selection stops when none does. Where the
counts below the largest cannot be fitted on their own (fewer than 2 multi-node counts), (1) alone
decides, and the notes say so. Nothing here sees a GPU count outside the cells it is given.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench.errors import BadInput
from bench.model.check import Measured
from bench.model.machine import Machine
from bench.model.robust import (
    BAND_WINDOWS,
    BASE_TERMS,
    EXTRA_TERMS,
    SELECTION_PENALTY,
    START_FACTORS,
    LibraryFit,
    _criterion,
    _fit_from,
    _huber_weights,
    _residuals,
    _stated_algorithms,
    _uncertainty,
    gbps,
    library_values,
    median_cells,
    with_library_values,
)

#: NCCL/RCCL protocol switch points tried (per-step inter-node message bytes, powers of two, 2 KiB - 4 MiB)
PROTOCOL_SWITCHES = tuple(1 << k for k in range(11, 23))
#: MPICH selection thresholds tried (bytes_total of the call, powers of two, 512 KiB - 64 MiB)
SWITCH_SIZES = tuple(1 << k for k in range(19, 27))
#: with the all-gather's: recursive doubling only below this many ranks (None: any p), as MPICH 4's JSON
#: selection splits by communicator size
SWITCH_RANKS = (32, 64, 128, 256, None)
#: candidates tried against the held-out rule per round (in the order of their BIC gain)
MAX_TRIES = 3
#: an option whose fit needs an inter-node link faster than this many times the description's own
#: (``inter.bandwidth_gbps``: one NIC) is no physical reading of the data, and is not taken
MAX_OVER_NIC = 2.0


@dataclass(frozen=True)
class Option:
    """One candidate: a term (with its window or switch point) or an MPICH selection threshold."""

    name: str  # a TERMS name, or ``switch:<SWITCHES key>``
    setting: object = None  # band window (low, high), protocol switch bytes, or threshold bytes

    @property
    def parameters(self) -> int:
        if self.name == "switch:allgather.rd":
            return 1 if self.setting[1] is None else 2  # bytes, and ranks
        return 1 if self.name.startswith("switch:") else 2 if self.setting is not None else 1

    def switches(self) -> dict[str, int]:
        """The MPICH selection thresholds this option sets."""
        if self.name == "switch:allgather.rd":
            size, ranks = self.setting
            return {"allgather.rd": size, **({"allgather.rd_ranks": ranks} if ranks else {})}
        return {self.name[7:]: self.setting}

    def shown(self) -> str:
        if self.name == "inter.band_us":
            return f"{self.name} {self.setting[0] >> 10}-{self.setting[1] >> 10} KiB"
        if self.name == "inter.protocol_us":
            return f"{self.name} (Simple from {self.setting >> 10} KiB)"
        if self.name == "switch:allgather.rd":
            size, ranks = self.setting
            return f"allgather rd below {size >> 10} KiB" + (f" and {ranks} ranks" if ranks else "")
        if self.name.startswith("switch:"):
            return f"{self.name[7:]} below {self.setting >> 10} KiB"
        return self.name


@dataclass
class State:
    """A library's model: its fitted description, values, terms and settings."""

    machine: Machine
    values: dict[str, float]
    active: tuple[str, ...]
    seen: list[int]
    band: tuple[int, int] | None = None
    protocol: int | None = None

    def with_option(self, option: Option, library: str, algorithms: dict[str, str] | None) -> tuple[Machine, tuple]:
        """(start description, active terms) of this model with ``option`` added."""
        band, protocol, active = self.band, self.protocol, self.active
        machine = self.machine
        if option.name.startswith("switch:"):
            lib = machine.libraries[library]
            switches = {**lib.switch_bytes, **option.switches()}
            machine = machine.model_copy(update={"libraries": {
                **machine.libraries, library: lib.model_copy(update={"switch_bytes": switches})}})
        else:
            active = (*active, option.name)
            band = option.setting if option.name == "inter.band_us" else band
            protocol = option.setting if option.name == "inter.protocol_us" else protocol
        return with_library_values(machine, library, self.values, algorithms, band=band, protocol=protocol), active

    def added(self, option: Option, result: tuple, active: tuple[str, ...]) -> State:
        machine, values, _, _, _, seen = result
        return State(machine, values, active, seen,
                     option.setting if option.name == "inter.band_us" else self.band,
                     option.setting if option.name == "inter.protocol_us" else self.protocol)


def options_for(library: str, cells: list[Measured], algorithms: dict[str, str] | None,
                extra: tuple[str, ...]) -> list[Option]:
    """Every candidate this library may take (see the module's list)."""
    out = []
    for term in extra:
        if term == "inter.protocol_us" and library != "xccl":
            continue
        settings = (BAND_WINDOWS if term == "inter.band_us" else PROTOCOL_SWITCHES if term == "inter.protocol_us"
                    else (None,))
        out += [Option(term, setting) for setting in settings]
    if library == "mpi":
        collectives = {m.call.collective for m in cells}
        if "allgather" in collectives:
            out += [Option("switch:allgather.rd", (size, ranks)) for size in SWITCH_SIZES for ranks in SWITCH_RANKS]
        if "reduce_scatter" in collectives and "reduce_scatter" not in (algorithms or {}):
            out += [Option("switch:reduce_scatter.rh", size) for size in SWITCH_SIZES]
    return out


def _base_fit(cells: list[Measured], machine: Machine, library: str) -> tuple[State, dict[str, str] | None]:
    """The best of the starts (and, for ``mpi``, of its reduce-scatter algorithms) with the base terms."""
    best = None
    for algorithms in _stated_algorithms(cells, library):
        for factor in START_FACTORS:
            start = _scaled_inter(machine, library, factor)
            fitted, values, loss, _, _, seen = _fit_from(cells, start, library, algorithms)
            # better by more than rounding: starts that reach one optimum (an observationally equivalent
            # reading, such as a ring's cost on the intra- or the inter-node leg) keep the first, the
            # description's own inter-node link (a term off the critical path could not come back)
            if best is None or loss < best[2] - 1e-6 * abs(best[2]):
                best = (fitted, values, loss, seen, algorithms)
    fitted, values, _, seen, algorithms = best
    return State(fitted, values, BASE_TERMS, seen), algorithms


def _split(cells: list[Measured]) -> tuple[list[Measured], list[Measured]]:
    """(cells below the largest GPU count, cells at it): the held-out split inside the training data."""
    largest = max(m.call.nranks for m in cells)
    return [m for m in cells if m.call.nranks < largest], [m for m in cells if m.call.nranks == largest]


def _try(cells: list[Measured], state: State, option: Option, library: str,
         algorithms: dict[str, str] | None) -> tuple[State, tuple[str, ...]] | None:
    """The model with ``option`` added, refitted; None where it cannot be fitted or is not physical."""
    start, active = state.with_option(option, library, algorithms)
    try:
        result = _fit_from(cells, start, library, algorithms, active)
    except BadInput:
        return None
    limit = max(MAX_OVER_NIC * start.inter.bandwidth_gbps, 1.25 * gbps(state.values["inter.us_per_byte"]))
    if gbps(result[1]["inter.us_per_byte"]) > limit:  # beyond the NIC, and beyond what the model had
        return None
    return state.added(option, result, active), active


def fit_library(cells: list[Measured], machine: Machine, library: str,
                extra: tuple[str, ...] = EXTRA_TERMS) -> tuple[Machine, LibraryFit]:
    """The base fit, then forward selection by the rule of this module's docstring."""
    state, algorithms = _base_fit(cells, machine, library)
    scale = _huber_weights(_residuals(cells, state.machine, library, state.values))[1]
    current = _criterion(cells, state.machine, library, state.values, scale)
    penalty = SELECTION_PENALTY * np.log(len(cells))
    inner_cells, check_cells = _split(cells)
    notes = []
    try:
        inner, _ = _base_fit(inner_cells, machine, library)
        inner_score = _criterion(check_cells, inner.machine, library, inner.values, scale)
        largest = check_cells[0].call.nranks
    except BadInput:
        inner = None
        notes.append("held-out rule not applied: the counts below the largest cannot be fitted alone")
    candidates = options_for(library, cells, algorithms, extra)
    while candidates:
        trials = []
        for option in candidates:
            tried = _try(cells, state, option, library, algorithms)
            if tried is not None:
                score = _criterion(cells, tried[0].machine, library, tried[0].values, scale)
                trials.append((current - score - penalty * option.parameters, option, tried[0], score))
        trials.sort(key=lambda trial: -trial[0])
        kept = None
        for _, option, new_state, score in [t for t in trials if t[0] > 0][:MAX_TRIES]:
            if inner is None:
                kept = (option, new_state, score, None)
                break
            inner_tried = _try(inner_cells, inner, option, library, algorithms)
            held = (np.inf if inner_tried is None else
                    _criterion(check_cells, inner_tried[0].machine, library, inner_tried[0].values, scale))
            if held < inner_score:
                kept = (option, new_state, score, (inner_tried[0], held))
                break
            notes.append(f"{option.shown()} passes BIC ({score - current:+.1f}) but not held out at {largest} "
                         f"GPUs ({held - inner_score:+.1f}): not kept")
        if kept is None:
            if trials:
                gain, option, _, score = trials[0]
                if gain <= 0:
                    notes.append(f"best extra {option.shown()} not kept (criterion {score - current:+.1f}, "
                                 f"needs {current - score - gain:.1f})")
            break
        option, new_state, score, inner_update = kept
        shown_held = ("" if inner_update is None else
                      f", held out at {largest} GPUs {inner_update[1] - inner_score:+.1f}")
        notes.append(f"kept {option.shown()} (criterion {score - current:+.1f}, needs "
                     f"{penalty * option.parameters:.1f}{shown_held})")
        state, current = new_state, score
        if inner_update is not None:
            inner, inner_score = inner_update
        candidates = [c for c in candidates if c.name != option.name]
    sd, covariance, free, scale = _uncertainty(cells, state.machine, library, state.values, state.seen)
    switches = dict(state.machine.libraries[library].switch_bytes)
    return state.machine, LibraryFit(library, state.values, sd, covariance, free, len(cells), scale,
                                     algorithms or {}, list(state.active), state.band, notes, state.protocol,
                                     switches)


def _scaled_inter(machine: Machine, library: str, factor: float) -> Machine:
    values = library_values(machine, library)
    values["inter.latency_us"] *= factor
    values["inter.us_per_byte"] *= factor
    return with_library_values(machine, library, values)


def fit_per_library(measured: list[Measured], base: Machine, per_implementation: bool = True
                    ) -> tuple[Machine, list[LibraryFit]]:
    """Fit every library present in ``measured`` on its own cells (medians over repeats); with
    ``per_implementation`` every hierarchical implementation gets its own entry (``pccl-hier:<inter>/<intra>``,
    started from ``pccl``'s): its rail runs Cray MPICH or NCCL, whose software costs differ. ``mpi`` is fitted
    first: its selection thresholds choose the algorithm of every MPI-library phase of ``pccl-hier``. The
    ``pccl`` entry is then fitted on all of this project's cells pooled, for the variants (``pccl-flat``,
    other ``pccl-hier`` phases) that have no entry of their own."""
    cells = median_cells(measured)
    machine, fits = base, []

    def key(item: Measured) -> str:
        variant = item.call.variant
        if per_implementation and variant.model.own_entry:
            return variant.label
        if per_implementation and item.row.get("resolved_algorithm") in variant.model.own_loops:
            return f"{variant.library}@{item.call.collective}"  # the benchmark's own loop of point-to-point calls
        return variant.library

    order = sorted({key(m) for m in cells}, key=lambda name: (name != "mpi", name))
    if "mpi" in order:
        machine, result = fit_library([m for m in cells if key(m) == "mpi"], machine, "mpi")
        fits.append(result)
    pooled = [m for m in cells if m.call.variant.library == "pccl"]
    if per_implementation and any(m.call.variant.model.own_entry for m in pooled):
        own = {name: lib for name, lib in machine.libraries.items() if name.startswith("pccl-hier:")}
        plain = {name: lib for name, lib in machine.libraries.items() if name not in own}
        fitted, result = fit_library(pooled, machine.model_copy(update={"libraries": plain}), "pccl")
        machine = fitted.model_copy(update={"libraries": {**fitted.libraries, **own}})
        fits.append(result)
    for library in (name for name in order if name != "mpi"):
        source = "pccl" if library.startswith("pccl-hier:") else library.partition("@")[0]
        if source not in machine.libraries:
            raise BadInput("model fit", f"the base description has no {source!r} library for "
                           f"{sorted({m.call.variant.label for m in cells if key(m) == library})}")
        if library not in machine.libraries:
            machine = machine.model_copy(update={"libraries": {**machine.libraries,
                                                               library: machine.libraries[source].model_copy()}})
        machine, result = fit_library([m for m in cells if key(m) == library], machine, library)
        fits.append(result)
    return machine, fits
