"""The critical path of merged steps, priced for many calls at once (bench/model/legs.py), bit for bit as
priced step by step and rank by rank for one call: a fit's results must not depend on how it is batched."""

from __future__ import annotations

import numpy as np
import pytest

from bench.model.cost import (
    Call,
    best_schedule,
    best_schedules,
    call_profile,
    leg_setting,
    library_key,
    mpi_switches,
    theta,
)
from bench.model.impls import parse_variant
from bench.model.legs import P, step_features
from bench.model.machine import load_machine

VARIANTS = ("xccl", "mpi", "pccl-flat:ring", "pccl-flat:rd", "pccl-flat:bruck", "pccl-hier:rd/ring",
            "pccl-hier:mpi/xccl")


def _calls(variant: str) -> list[Call]:
    calls = []
    for collective in ("allgather", "reduce_scatter", "allreduce"):
        for nranks in (16, 24, 96):  # 96: representative nodes only; 24: no power of two
            for size in (1 << 12, 1 << 22):
                call = Call(collective, parse_variant(variant), nranks, 8, max(size // nranks // 4, 1), 4)
                if not call.variant.problem(collective):
                    calls.append(call)
    return calls


def _step_by_step(call: Call, machine, params: np.ndarray, name: str) -> np.ndarray:
    """Every step and rank of one call, unmerged: the slower leg plus action, the slowest rank, summed."""
    library = library_key(call.variant, machine, call.collective)
    profile, scale = call_profile(call, machine, name)
    nnodes = call.nranks // call.ranks_per_node
    legs, action = step_features(profile, scale, leg_setting(machine, library, call.nranks, nnodes))
    assert len(legs) == (3 if machine.shared_fabric else 2)
    slowest_leg = np.argmax(np.stack([leg @ params for leg in legs]), axis=0)  # ties: the first (intra)
    slower = np.choose(slowest_leg[..., None], legs) + action
    total = slower[np.arange(len(slower)), np.argmax(slower @ params, axis=1)].sum(axis=0)
    total[P["library.call_overhead_us"]] += 1.0
    total[P["library.call_us_per_node"]] += nnodes if nnodes > 1 else 0.0
    return total


@pytest.mark.parametrize(("machine_name", "fabric_gbps", "message_us"),
                         [("frontier-paper", None, None), ("perlmutter-paper", None, None),
                          ("frontier-paper", 50.0, None), ("frontier-paper", None, 3.0)])
def test_batched_merged_critical_path_is_the_step_by_step_one_bit_for_bit(machine_name: str, fabric_gbps: float | None,
                                                                         message_us: float | None) -> None:
    machine, _ = load_machine(machine_name)
    machine = machine.model_copy(update={"fabric_gbps": fabric_gbps, "fabric_message_us": message_us})
    rng = np.random.default_rng(3)
    checked = on_fabric = 0
    for variant in VARIANTS:
        calls = _calls(variant)
        base = theta(machine, library_key(calls[0].variant, machine, calls[0].collective))
        for params in (base, base * np.exp(rng.normal(0, 1.5, base.shape)) * (rng.random(base.shape) > 0.2)):
            batched = best_schedules(calls, machine, params)
            for call, (features, name) in zip(calls, batched, strict=True):
                alone, alone_name = best_schedule(call, machine, params)
                assert (name, features.tobytes()) == (alone_name, alone.tobytes()), call
                names = call.variant.candidates(call.collective, call.nranks, call.bytes_total, mpi_switches(machine))
                options = [(_step_by_step(call, machine, params, option), option) for option in names]
                reference, reference_name = min(options, key=lambda option: float(option[0] @ params))
                assert name == reference_name, call
                assert features.tobytes() == reference.tobytes(), (call, features - reference)
                checked += 1
                on_fabric += features[P["fabric.us_per_byte"]] + features[P["fabric.us_per_message"]] > 0
    assert checked > 200
    # with a fabric, some steps are priced by it (and none without one)
    assert (on_fabric > 20) if machine.shared_fabric else on_fabric == 0, on_fabric
