"""Cost of one call: latency + bytes / bandwidth per step, by link class, on the critical path.

A rank's step costs the slower of its intra-node and inter-node message legs, each
``latency (+ rendezvous) + step overhead + bytes / bandwidth`` (inter-node bytes times
the NIC share), then its local copy or reduction at memory or reduction throughput.
Ranks move in lockstep, so a step costs what its slowest rank pays (bulk-synchronous:
a ring runs at the pace of its node-crossing hop); the call costs the sum over steps
plus the library's per-call overhead. Everything is linear in the parameters once the
slowest rank and leg of each step are chosen, which is what ``model fit`` exploits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench.model.impls import Variant
from bench.model.machine import Machine
from bench.model.mpich import mpich_algorithm
from bench.model.steps import NicLayout, Profile, build_profile, mpi_phase_choices, unit_count
from collectives.schedules.topology import Grid

#: the parameter vector, in microseconds (per step, per message, or per byte)
PARAMS = (
    "intra.latency_us", "intra.rendezvous_us", "intra.us_per_byte",
    "inter.latency_us", "inter.rendezvous_us", "inter.us_per_byte",
    "copy.us_per_byte", "reduce.us_per_byte", "host_reduce.us_per_byte",
    "oversubscription.latency_us", "oversubscription.rendezvous_us",
    "library.step_overhead_us", "library.call_overhead_us",
    # terms of ``model fit --per-impl`` (issue 14): per inter-node step, x log2(nodes) of the call
    # (network diameter / congestion); per inter-node step whose message lies in the link's
    # ``band_bytes`` (a slow protocol regime); per call, x nodes (per-peer software cost)
    "inter.node_latency_us", "inter.band_us", "library.call_us_per_node",
    # NCCL/RCCL's protocol switch (issue 28): per inter-node step whose message is at least the link's
    # ``protocol_bytes`` (Simple's latency over LL's)
    "inter.protocol_us",
)
P = {name: index for index, name in enumerate(PARAMS)}


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
    ])


def _threshold(link) -> float:
    return np.inf if link.rendezvous_bytes is None else float(link.rendezvous_bytes)


def _leg(has: np.ndarray, message: np.ndarray, shared: np.ndarray, threshold: float, prefix: str,
         off_core: float, nnodes: int = 1, band: tuple[int, int] | None = None,
         protocol_bytes: int | None = None) -> np.ndarray:
    """Features (steps, ranks, params) of one link class's message leg."""
    out = np.zeros((*has.shape, len(PARAMS)))
    rendezvous = has & (message >= threshold)
    out[..., P[f"{prefix}.latency_us"]] = has
    if prefix == "inter":
        out[..., P["inter.node_latency_us"]] = has * np.log2(max(nnodes, 1))
        if band is not None:
            out[..., P["inter.band_us"]] = has & (message >= band[0]) & (message < band[1])
        if protocol_bytes is not None:
            out[..., P["inter.protocol_us"]] = has & (message >= protocol_bytes)
    out[..., P[f"{prefix}.rendezvous_us"]] = rendezvous
    out[..., P[f"{prefix}.us_per_byte"]] = shared
    out[..., P["library.step_overhead_us"]] = has
    out[..., P["oversubscription.latency_us"]] = has * off_core
    out[..., P["oversubscription.rendezvous_us"]] = rendezvous * off_core
    return out


def _reduce_param(machine: Machine, library: str) -> str:
    lib = machine.libraries.get(library)
    return "host_reduce.us_per_byte" if lib is not None and lib.reduce_on == "host" else "reduce.us_per_byte"


def links_of(machine: Machine, library: str):
    """(intra, inter) links of ``library``: its own where fitted, else the machine's."""
    lib = machine.libraries.get(library)
    if lib is None:
        return machine.intra, machine.inter
    return lib.intra or machine.intra, lib.inter or machine.inter


def step_features(profile: Profile, scale: float, machine: Machine, library: str,
                  off_core: float, nnodes: int = 1) -> tuple[np.ndarray, ...]:
    """(intra leg, inter leg, local action) features, each (steps, ranks, params), for ``scale`` units."""
    intra_link, inter_link = links_of(machine, library)
    intra = _leg(profile.intra_bytes > 0, profile.intra_bytes * scale, profile.intra_bytes * scale,
                 _threshold(intra_link), "intra", off_core)
    band = tuple(inter_link.band_bytes) if inter_link.band_bytes else None
    inter = _leg(profile.inter_bytes > 0, profile.inter_bytes * scale, profile.inter_shared_bytes * scale,
                 _threshold(inter_link), "inter", off_core, nnodes, band, inter_link.protocol_bytes)
    action = np.zeros_like(intra)
    action[..., P["copy.us_per_byte"]] = profile.copy_bytes * scale
    action[..., P[_reduce_param(machine, library)]] = profile.reduce_bytes * scale
    action[..., P[_reduce_param(machine, "mpi")]] += profile.mpi_reduce_bytes * scale
    return intra, inter, action


def critical_features(legs: tuple[np.ndarray, ...], params: np.ndarray, nnodes: int = 1) -> np.ndarray:
    """Summed features of the slowest leg of the slowest rank of every step (plus one call)."""
    intra, inter, action = legs
    slower = np.where(((intra @ params) >= (inter @ params))[..., None], intra, inter) + action
    if slower.shape[0] == 0 or slower.shape[1] == 0:
        total = np.zeros(len(PARAMS))
    else:
        slowest = np.argmax(slower @ params, axis=1)
        total = slower[np.arange(slower.shape[0]), slowest].sum(axis=0)
    total[P["library.call_overhead_us"]] += 1.0
    total[P["library.call_us_per_node"]] += nnodes if nnodes > 1 else 0.0
    return total


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
    if variant.impl == "pccl-hier" and variant.label in machine.libraries:
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


def call_profile(call: Call, machine: Machine, resolved: str) -> tuple[Profile, float]:
    """(profile, scale) of ``call`` running schedule ``resolved``."""
    grid = Grid(call.nranks, call.ranks_per_node)
    unit = unit_count(call.collective, call.nranks)
    scale = call.count / unit
    choices: tuple[str, ...] = ()
    if call.variant.impl == "pccl-hier":  # its MPI-library phases run MPICH's choice at their real size
        first = call.variant.schedule(call.collective, grid, 0, unit, call.in_place, resolved)
        choices = mpi_phase_choices(first, grid, 0, scale, call.itemsize, mpi_switches(machine))
    nics = nic_layout(machine, library_key(call.variant, machine, call.collective), call.ranks_per_node)
    profile = build_profile(call.variant, call.collective, grid, call.in_place, call.itemsize, resolved, choices, nics)
    return profile, scale


def _features(call: Call, machine: Machine, params: np.ndarray, resolved: str) -> np.ndarray:
    profile, scale = call_profile(call, machine, resolved)
    nnodes = call.nranks // call.ranks_per_node
    legs = step_features(profile, scale, machine, library_key(call.variant, machine, call.collective),
                         machine.off_core_share(call.nranks), nnodes)
    return critical_features(legs, params, nnodes)


def best_schedule(call: Call, machine: Machine, params: np.ndarray | None = None) -> tuple[np.ndarray, str]:
    """(features, schedule name) of the fastest schedule the call may run under ``params``."""
    params = theta(machine, library_key(call.variant, machine, call.collective)) if params is None else params
    lib = machine.libraries.get(library_key(call.variant, machine, call.collective))
    fixed = lib.algorithms.get(call.collective) if lib is not None and call.variant.impl == "mpi" else None
    if fixed:
        names: tuple[str, ...] = (fixed,)
    elif call.variant.impl == "mpi":  # MPICH's selection at the description's (fitted) switch points
        names = (mpich_algorithm(call.collective, call.nranks, call.bytes_total, mpi_switches(machine)),)
    else:
        names = call.variant.candidates(call.collective, call.nranks, call.bytes_total)
    options = [(_features(call, machine, params, name), name) for name in names]
    return min(options, key=lambda option: float(option[0] @ params))


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
