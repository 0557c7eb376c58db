"""The features of a call's steps, leg by leg, and their sum on the critical path: many calls at once.

Every step of a profile (bench/model/steps.py) becomes, for each representative rank, an intra-node and
an inter-node message leg (and, on a machine with a shared fabric, a fabric leg: the inter-node leg with the
step's bytes of every rank over the fabric's rate in place of the rank's own over its link's, and a cost per
message of every rank beyond the first) and a local
action, each a feature vector over PARAMS. The critical path takes the slowest leg of every rank (plus its
action), the slowest rank of every step, and sums over steps. The
legs depend only on the profile, the scale and a LegSetting, not on the priced terms, so a fit that
prices the same cells under new terms every round builds them once (LEGS) and, for all cells of one
shape together (one product per (ranks, steps) shape), only picks the slowest leg and rank again.

Bit for bit as priced one step at a time: BLAS rounds a row's product by its place in its (ranks,
params) block, not by the other rows or blocks, so every product here is one of such a block, laid out
as for the call alone; equal steps (a ring repeats one step p - 1 times) are priced once and summed in
step order, as numpy sums a (steps, params) array.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from bench.model.steps import Profile

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
    # a fabric that every inter-node byte of a step shares (Machine.fabric_gbps): per byte of all ranks' step
    "fabric.us_per_byte",
    # ... and per inter-node message of a step beyond the first, every rank's (Machine.fabric_message_us)
    "fabric.us_per_message",
)
P = {name: index for index, name in enumerate(PARAMS)}
#: bytes of legs (and of their stacks by shape) kept; the legs of a fit of ~1000 cells take ~20 MiB
CACHE_BYTES = 256 << 20


@dataclass(frozen=True)
class LegSetting:
    """All that a call's legs read from a description besides its profile (none of the priced terms):
    the links' rendezvous thresholds, band window and protocol switch, which reduction terms apply, the
    share of ranks off a core, the call's node count, and whether a shared fabric has a leg of its own."""

    intra_threshold: float
    inter_threshold: float
    band: tuple[int, int] | None
    protocol_bytes: int | None
    reduce_param: str
    mpi_reduce_param: str
    off_core: float
    nnodes: int
    fabric: bool = False


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


def step_features(profile: Profile, scale: float, setting: LegSetting) -> tuple[list[np.ndarray], np.ndarray]:
    """([intra leg, inter leg(, fabric leg)], local action) features, each (steps, ranks, params), for ``scale``
    units."""
    intra = _leg(profile.intra_bytes > 0, profile.intra_bytes * scale, profile.intra_bytes * scale,
                 setting.intra_threshold, "intra", setting.off_core)
    has_inter = profile.inter_bytes > 0
    inter = _leg(has_inter, profile.inter_bytes * scale, profile.inter_shared_bytes * scale,
                 setting.inter_threshold, "inter", setting.off_core, setting.nnodes, setting.band,
                 setting.protocol_bytes)
    legs = [intra, inter]
    if setting.fabric:
        fabric = inter.copy()
        fabric[..., P["inter.us_per_byte"]] = 0.0
        fabric[..., P["fabric.us_per_byte"]] = has_inter * profile.fabric_bytes * scale
        fabric[..., P["fabric.us_per_message"]] = has_inter * np.maximum(profile.fabric_messages - 1, 0)
        legs.append(fabric)
    action = np.zeros_like(intra)
    action[..., P["copy.us_per_byte"]] = profile.copy_bytes * scale
    action[..., P[setting.reduce_param]] = profile.reduce_bytes * scale
    action[..., P[setting.mpi_reduce_param]] += profile.mpi_reduce_bytes * scale
    return legs, action


@dataclass(frozen=True)
class Legs:
    """A call's step features, each distinct step (Profile.merged) once, as (intra, inter(, fabric), intra +
    action, inter + action(, fabric + action)) blocks."""

    blocks: np.ndarray  # (distinct steps, 2 x legs, ranks, params)
    order: np.ndarray  # (steps,): the distinct step of every step, in order


class ByteCache:
    """Least recently used entries dropped beyond ``budget_bytes``. Keys hold ids: each value holds the
    objects whose ids key it, so no other object takes such an id while the entry lives."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[tuple, tuple[object, int]] = OrderedDict()
        self._bytes = 0

    def get(self, key: tuple) -> object | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: tuple, value: object, nbytes: int) -> None:
        self._entries[key] = (value, nbytes)
        self._bytes += nbytes
        while self._bytes > self.budget_bytes and len(self._entries) > 1:
            _, (_, dropped) = self._entries.popitem(last=False)
            self._bytes -= dropped


LEGS = ByteCache(CACHE_BYTES)
STACKS = ByteCache(CACHE_BYTES)


def legs_of(profile: Profile, scale: float, setting: LegSetting) -> Legs:
    """The legs of ``profile`` at ``scale`` (cached by the profile object: a cleared profile cache builds
    new profiles, whose legs are built anew)."""
    key = (id(profile), scale, setting)
    entry = LEGS.get(key)
    if entry is not None:
        return entry[1]
    message_legs, action = step_features(profile.merged(), scale, setting)
    legs = Legs(np.stack([*message_legs, *(leg + action for leg in message_legs)], axis=1), profile.order)
    LEGS.put(key, (profile, legs), legs.blocks.nbytes + legs.order.nbytes)
    return legs


@dataclass(frozen=True)
class Stack:
    """Legs of one (ranks, steps) shape, their distinct steps in one array."""

    blocks: np.ndarray  # (distinct steps of all, 4, ranks, params)
    orders: np.ndarray  # (legs, steps): each one's steps, as rows of ``blocks``
    members: tuple[Legs, ...]


def _stack(members: tuple[Legs, ...]) -> Stack:
    if len(members) == 1:
        return Stack(members[0].blocks, members[0].order[None, :], members)
    key = tuple(id(legs) for legs in members)
    stack = STACKS.get(key)
    if stack is None:
        starts = np.cumsum([0, *(len(legs.blocks) for legs in members[:-1])])
        stack = Stack(np.concatenate([legs.blocks for legs in members]),
                      np.stack([legs.order + start for legs, start in zip(members, starts, strict=True)]), members)
        STACKS.put(key, stack, stack.blocks.nbytes + stack.orders.nbytes)
    return stack


def _slowest_sums(stack: Stack, params: np.ndarray) -> np.ndarray:
    """(legs, params): per step the slowest message leg (ties: the first, intra) plus action of the rank that
    pays most (ties: the first), summed over steps."""
    blocks = stack.blocks
    cost = blocks @ params  # (distinct steps, 2 x message legs, ranks)
    message_legs = blocks.shape[1] // 2
    leg = np.argmax(cost[:, :message_legs], axis=1)  # (distinct steps, ranks)
    with_action = np.take_along_axis(cost[:, message_legs:], leg[:, None, :], axis=1)[:, 0]
    slowest = np.argmax(with_action, axis=1)
    step = np.arange(len(slowest))
    rows = blocks[step, message_legs + leg[step, slowest], slowest]
    return rows[stack.orders].sum(axis=1)


def critical_features(calls_legs: list[Legs], nnodes: np.ndarray, params: np.ndarray) -> np.ndarray:
    """(calls, params): the summed features of every call's critical path under ``params`` (plus one
    call, and its nodes for ``library.call_us_per_node`` where it spans more than one)."""
    totals = np.zeros((len(calls_legs), len(PARAMS)))
    shapes: dict[tuple[int, int, int], list[int]] = {}
    for index, legs in enumerate(calls_legs):
        blocks, ranks, steps = legs.blocks.shape[1], legs.blocks.shape[2], len(legs.order)
        if ranks and steps:
            shapes.setdefault((blocks, ranks, steps), []).append(index)
    for indices in shapes.values():
        totals[indices] = _slowest_sums(_stack(tuple(calls_legs[i] for i in indices)), params)
    totals[:, P["library.call_overhead_us"]] += 1.0
    totals[:, P["library.call_us_per_node"]] += np.where(nnodes > 1, nnodes, 0.0)
    return totals
