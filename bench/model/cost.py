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

from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from bench.model.impls import Variant
from bench.model.machine import Machine
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


@dataclass(frozen=True)
class LegSetting:
    """All that a call's leg features read from a description besides its profile (none of the priced
    terms): the links' rendezvous thresholds, band window and protocol switch, which reduction terms
    apply, the share of ranks off a core, and the call's node count."""

    intra_threshold: float
    inter_threshold: float
    band: tuple[int, int] | None
    protocol_bytes: int | None
    reduce_param: str
    mpi_reduce_param: str
    off_core: float
    nnodes: int


def leg_setting(machine: Machine, library: str, nranks: int, nnodes: int) -> LegSetting:
    intra_link, inter_link = links_of(machine, library)
    band = tuple(inter_link.band_bytes) if inter_link.band_bytes else None
    return LegSetting(_threshold(intra_link), _threshold(inter_link), band, inter_link.protocol_bytes,
                      _reduce_param(machine, library), _reduce_param(machine, "mpi"), machine.off_core_share(nranks),
                      nnodes)


def step_features(profile: Profile, scale: float, setting: LegSetting) -> tuple[np.ndarray, ...]:
    """(intra leg, inter leg, local action) features, each (steps, ranks, params), for ``scale`` units."""
    intra = _leg(profile.intra_bytes > 0, profile.intra_bytes * scale, profile.intra_bytes * scale,
                 setting.intra_threshold, "intra", setting.off_core)
    inter = _leg(profile.inter_bytes > 0, profile.inter_bytes * scale, profile.inter_shared_bytes * scale,
                 setting.inter_threshold, "inter", setting.off_core, setting.nnodes, setting.band,
                 setting.protocol_bytes)
    action = np.zeros_like(intra)
    action[..., P["copy.us_per_byte"]] = profile.copy_bytes * scale
    action[..., P[setting.reduce_param]] = profile.reduce_bytes * scale
    action[..., P[setting.mpi_reduce_param]] += profile.mpi_reduce_bytes * scale
    return intra, inter, action


@dataclass(frozen=True)
class Legs:
    """A call's step features, each distinct step (Profile.merged) once, as (intra, inter, intra + action,
    inter + action) blocks."""

    blocks: np.ndarray  # (distinct steps, 4, ranks, params)
    order: np.ndarray  # (steps,): the distinct step of every step, in order


def merged_legs(profile: Profile, scale: float, setting: LegSetting) -> Legs:
    intra, inter, action = step_features(profile.merged(), scale, setting)
    return Legs(np.stack([intra, inter, intra + action, inter + action], axis=1), profile.order)


def critical_features(legs: Legs, params: np.ndarray, nnodes: int = 1) -> np.ndarray:
    """Summed features of the slowest leg of the slowest rank of every step (plus one call).

    Bit for bit the sum over steps of ``where(intra @ params >= inter @ params, intra, inter) + action`` at
    the rank of the largest ``(that) @ params``: every product below is one of a (ranks, params) block, as
    with the unmerged steps (BLAS's rounding depends on a row's place in its block, not on other rows)."""
    blocks = legs.blocks
    if blocks.shape[0] == 0 or blocks.shape[2] == 0:
        total = np.zeros(len(PARAMS))
    else:
        cost = blocks @ params  # (distinct steps, 4, ranks)
        intra_slower = cost[:, 0] >= cost[:, 1]
        slowest = np.argmax(np.where(intra_slower, cost[:, 2], cost[:, 3]), axis=1)
        step = np.arange(len(slowest))
        rows = np.where(intra_slower[step, slowest][:, None], blocks[step, 2, slowest], blocks[step, 3, slowest])
        total = rows[legs.order].sum(axis=0)
    total[P["library.call_overhead_us"]] += 1.0
    total[P["library.call_us_per_node"]] += nnodes if nnodes > 1 else 0.0
    return total


class LegCache:
    """Legs by (profile, scale, setting), least recently used dropped beyond ``budget_bytes``: a fit prices
    the same cells under new parameters every round. Entries hold their profile, so its id is not reused
    while they live (a cleared profile cache builds new profiles, whose legs are then built anew)."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[tuple, tuple[Profile, Legs]] = OrderedDict()
        self._bytes = 0

    def get(self, profile: Profile, scale: float, setting: LegSetting) -> Legs:
        key = (id(profile), scale, setting)
        entry = self._entries.get(key)
        if entry is not None and entry[0] is profile:
            self._entries.move_to_end(key)
            return entry[1]
        legs = merged_legs(profile, scale, setting)
        self._entries[key] = (profile, legs)
        self._bytes += legs.blocks.nbytes + legs.order.nbytes
        while self._bytes > self.budget_bytes and len(self._entries) > 1:
            _, (_, old) = self._entries.popitem(last=False)
            self._bytes -= old.blocks.nbytes + old.order.nbytes
        return legs


#: the legs of a fit of ~1000 cells take ~20 MiB
LEGS = LegCache(256 << 20)


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
    nic_of_gpu = None if machine.nic_of_gpu is None else tuple(machine.nic_of_gpu)
    return _nic_layout(machine.libraries[library].nic_policy, machine.nics_per_node, nic_of_gpu,
                       machine.gpus_per_node, ranks_per_node)


@lru_cache(maxsize=1024)
def _nic_layout(policy: str, nics_per_node: int, nic_of_gpu: tuple[int, ...] | None, gpus_per_node: int,
                ranks_per_node: int) -> NicLayout:
    node = Machine.model_construct(nics_per_node=nics_per_node, nic_of_gpu=nic_of_gpu, gpus_per_node=gpus_per_node)
    nics = tuple(node.nic_of(local, ranks_per_node) for local in range(ranks_per_node))
    return NicLayout(policy, nics_per_node, nics)


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


def best_schedule(call: Call, machine: Machine, params: np.ndarray | None = None) -> tuple[np.ndarray, str]:
    """(features, schedule name) of the fastest schedule the call may run under ``params``."""
    library = library_key(call.variant, machine, call.collective)
    params = theta(machine, library) if params is None else params
    lib = machine.libraries.get(library)
    fixed = lib.algorithms.get(call.collective) if lib is not None and call.variant.model.mpich_selection else None
    switches = mpi_switches(machine)
    # else MPICH's selection at the description's (fitted) switch points, or the variant's own candidates
    names = (fixed,) if fixed else call.variant.candidates(call.collective, call.nranks, call.bytes_total, switches)
    nics = nic_layout(machine, library, call.ranks_per_node)
    nnodes = call.nranks // call.ranks_per_node
    setting = leg_setting(machine, library, call.nranks, nnodes)
    options = []
    for name in names:
        profile, scale = _profile(call, name, switches, nics)
        options.append((critical_features(LEGS.get(profile, scale, setting), params, nnodes), name))
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
