"""Cost of one call: latency + bytes / bandwidth per step, by link class, on the critical path.

A rank's step costs the slower of its intra-node and inter-node message legs, each
``latency (+ rendezvous) + step overhead + bytes / bandwidth`` (inter-node bytes times
the NIC share), then its local copy or reduction at memory or reduction throughput.
Ranks move in lockstep, so a step costs what its slowest rank pays (bulk-synchronous:
a ring runs at the pace of its node-crossing hop); the call costs the sum over steps
plus the library's per-call overhead. Everything is linear in the parameters once the
slowest rank and leg of each step are chosen, which is what ``model fit`` exploits. The features of
the legs and their sum on the critical path, for many calls at once: bench/model/legs.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from bench.model.impls import Variant
from bench.model.legs import Legs, LegSetting, critical_features, legs_of
from bench.model.machine import Machine
from bench.model.steps import NicLayout, Profile, build_profile, mpi_phase_choices, unit_count
from collectives.schedules.topology import Grid


def us_per_byte(gbps: float) -> float:
    return 1.0 / (gbps * 1e3)


def theta(machine: Machine, library: str) -> np.ndarray:
    """The parameter vector of ``library`` on ``machine``."""
    lib = machine.libraries[library]
    over = machine.oversubscription
    intra, inter = lib.intra or machine.intra, lib.inter or machine.inter  # a library's own links, if fitted
    reduce = us_per_byte(lib.reduce_gbps) if lib.reduce_gbps else None
    return np.array([
        intra.latency_us, intra.rendezvous_us, us_per_byte(intra.bandwidth_gbps),
        inter.latency_us, inter.rendezvous_us, us_per_byte(inter.bandwidth_gbps),
        us_per_byte(machine.copy_gbps), reduce or us_per_byte(machine.reduce_gbps),
        reduce or us_per_byte(machine.host_reduce_gbps),
        over.latency_us if over else 0.0, over.rendezvous_us if over else 0.0,
        lib.step_overhead_us, lib.call_overhead_us,
        inter.node_latency_us, inter.band_us, lib.call_us_per_node, inter.protocol_us,
        us_per_byte(machine.fabric_gbps) if machine.fabric_gbps else 0.0,
        machine.fabric_message_us or 0.0,
    ])


def _threshold(link) -> float:
    return np.inf if link.rendezvous_bytes is None else float(link.rendezvous_bytes)


def _reduce_param(machine: Machine, library: str) -> str:
    lib = machine.libraries.get(library)
    return "host_reduce.us_per_byte" if lib is not None and lib.reduce_on == "host" else "reduce.us_per_byte"


def links_of(machine: Machine, library: str):
    """(intra, inter) links of ``library``: its own where fitted, else the machine's."""
    lib = machine.libraries.get(library)
    if lib is None:
        return machine.intra, machine.inter
    return lib.intra or machine.intra, lib.inter or machine.inter


def leg_setting(machine: Machine, library: str, nranks: int, nnodes: int) -> LegSetting:
    intra_link, inter_link = links_of(machine, library)
    band = tuple(inter_link.band_bytes) if inter_link.band_bytes else None
    return LegSetting(_threshold(intra_link), _threshold(inter_link), band, inter_link.protocol_bytes,
                      _reduce_param(machine, library), _reduce_param(machine, "mpi"), machine.off_core_share(nranks),
                      nnodes, machine.shared_fabric)


@dataclass(frozen=True)
class Call:
    """One collective call to model."""

    collective: str
    variant: Variant
    nranks: int
    ranks_per_node: int
    count: int  # per rank, as collectives.spec
    itemsize: int
    in_place: bool = False

    @property
    def bytes_total(self) -> int:
        return (self.count if self.collective == "allreduce" else self.nranks * self.count) * self.itemsize


def library_key(variant: Variant, machine: Machine, collective: str | None = None) -> str:
    """Whose terms price ``variant``: a hierarchical implementation's own entry where the description has
    one (``libraries: pccl-hier:<inter>/<intra>``, fitted per implementation), a library's own entry for
    ``collective`` (``mpi@reduce_scatter``), else its library's."""
    if variant.model.own_entry and variant.label in machine.libraries:
        return variant.label
    if collective is not None and f"{variant.library}@{collective}" in machine.libraries:
        return f"{variant.library}@{collective}"
    return variant.library


def nic_layout(machine: Machine, library: str, ranks_per_node: int) -> NicLayout:
    nics = tuple(machine.nic_of(local, ranks_per_node) for local in range(ranks_per_node))
    return NicLayout(machine.libraries[library].nic_policy, machine.nics_per_node, nics)


def mpi_switches(machine: Machine) -> dict[str, int]:
    """The MPI library's selection thresholds (fitted, or none: MPICH's defaults)."""
    lib = machine.libraries.get("mpi")
    return lib.switch_bytes if lib is not None else {}


@lru_cache(maxsize=4096)
def _phase_choices(variant: Variant, collective: str, grid: Grid, in_place: bool, resolved: str, scale: float,
                   itemsize: int, switches: tuple[tuple[str, int], ...]) -> tuple[str, ...]:
    """MPICH's choice for each MPI-library phase of the call (read off rank 0's schedule)."""
    first = variant.schedule(collective, grid, 0, unit_count(collective, grid.nranks), in_place, resolved)
    return mpi_phase_choices(first, grid, 0, scale, itemsize, dict(switches))


def _profile(call: Call, resolved: str, switches: dict[str, int], nics: NicLayout) -> tuple[Profile, float]:
    grid = Grid(call.nranks, call.ranks_per_node)
    scale = call.count / unit_count(call.collective, call.nranks)
    choices: tuple[str, ...] = ()
    if call.variant.model.mpich_phases:  # its MPI-library phases run MPICH's choice at their real size
        choices = _phase_choices(call.variant, call.collective, grid, call.in_place, resolved, scale, call.itemsize,
                                 tuple(sorted(switches.items())))
    profile = build_profile(call.variant, call.collective, grid, call.in_place, call.itemsize, resolved, choices, nics)
    return profile, scale


def call_profile(call: Call, machine: Machine, resolved: str) -> tuple[Profile, float]:
    """(profile, scale) of ``call`` running schedule ``resolved``."""
    nics = nic_layout(machine, library_key(call.variant, machine, call.collective), call.ranks_per_node)
    return _profile(call, resolved, mpi_switches(machine), nics)


def _options(call: Call, machine: Machine, shared: dict) -> tuple[tuple[str, ...], list[Legs], int]:
    """(the schedules the call may run, the legs of each, its nodes); ``shared``: what the calls of one
    variant, collective and shape share under ``machine`` (all but the count)."""
    key = (call.variant, call.collective, call.nranks, call.ranks_per_node)
    if key not in shared:
        library = library_key(call.variant, machine, call.collective)
        lib = machine.libraries.get(library)
        fixed = lib.algorithms.get(call.collective) if lib is not None and call.variant.model.mpich_selection else None
        nnodes = call.nranks // call.ranks_per_node
        shared[key] = (fixed, nic_layout(machine, library, call.ranks_per_node), nnodes,
                       leg_setting(machine, library, call.nranks, nnodes))
    fixed, nics, nnodes, setting = shared[key]
    switches = mpi_switches(machine)
    # else MPICH's selection at the description's (fitted) switch points, or the variant's own candidates
    names = (fixed,) if fixed else call.variant.candidates(call.collective, call.nranks, call.bytes_total, switches)
    return names, [legs_of(*_profile(call, name, switches, nics), setting) for name in names], nnodes


def best_schedules(calls: list[Call], machine: Machine, params: np.ndarray) -> list[tuple[np.ndarray, str]]:
    """best_schedule of every call under the same ``params`` (a fit's cells: their legs priced together)."""
    shared: dict = {}
    options = [_options(call, machine, shared) for call in calls]
    legs = [one for _, call_legs, _ in options for one in call_legs]
    nnodes = np.array([count for names, _, count in options for _ in names], dtype=np.int64)
    totals = critical_features(legs, nnodes, params)
    best, row = [], 0
    for names, _, _ in options:
        priced = [(totals[row + i].copy(), name) for i, name in enumerate(names)]
        row += len(names)
        best.append(min(priced, key=lambda option: float(option[0] @ params)) if len(priced) > 1 else priced[0])
    return best


def best_schedule(call: Call, machine: Machine, params: np.ndarray | None = None) -> tuple[np.ndarray, str]:
    """(features, schedule name) of the fastest schedule the call may run under ``params``."""
    params = theta(machine, library_key(call.variant, machine, call.collective)) if params is None else params
    return best_schedules([call], machine, params)[0]


def call_features(call: Call, machine: Machine, params: np.ndarray | None = None) -> np.ndarray:
    """Feature vector of ``call``; the critical path is chosen with ``params`` (default: the machine's)."""
    return best_schedule(call, machine, params)[0]


def predict(call: Call, machine: Machine) -> tuple[float, str]:
    """(modelled microseconds, schedule name: MPICH's choice for ``mpi``, ``inter/intra`` for pccl-hier)."""
    params = theta(machine, library_key(call.variant, machine, call.collective))
    features, name = best_schedule(call, machine, params)
    return float(features @ params), name


def predict_us(call: Call, machine: Machine) -> float:
    """Modelled time of one call, microseconds."""
    return predict(call, machine)[0]
