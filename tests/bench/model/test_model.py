"""The analytical model on hand-computed small cases (p = 2, 4, 8; one and two levels)."""

from __future__ import annotations

import pytest

from bench.model import steps as model_steps
from bench.model.cost import Call, predict, predict_us
from bench.model.impls import parse_variant
from bench.model.machine import Library, Machine, load_machine
from bench.model.steps import representatives
from collectives.schedules.topology import Grid

ALPHA_INTRA, BETA_INTRA = 1.0, 1.0  # us, GB/s: 1000 B per us
ALPHA_INTER, BETA_INTER = 10.0, 0.5
COPY, REDUCE, HOST_REDUCE = 2.0, 4.0, 0.25
C = 1000  # elements per rank
B = 4 * C  # float32 bytes per rank


def toy(nics: int = 1, **changes) -> Machine:
    data = dict(
        name="toy", device="rocm", gpus_per_node=2, nics_per_node=nics,
        intra={"latency_us": ALPHA_INTRA, "bandwidth_gbps": BETA_INTRA},
        inter={"latency_us": ALPHA_INTER, "bandwidth_gbps": BETA_INTER},
        copy_gbps=COPY, reduce_gbps=REDUCE, host_reduce_gbps=HOST_REDUCE,
        libraries={"pccl": Library(name="pccl-bench"),
                   "mpi": Library(name="MPICH", nic_policy="single", reduce_on="host"),
                   "xccl": Library(name="RCCL", nic_policy="striped", step_overhead_us=5.0)},
    )
    data.update(changes)
    return Machine(**data)


def intra(nbytes: float) -> float:
    return ALPHA_INTRA + nbytes / (BETA_INTRA * 1e3)


def inter(nbytes: float) -> float:
    return ALPHA_INTER + nbytes / (BETA_INTER * 1e3)


def copy(nbytes: float) -> float:
    return nbytes / (COPY * 1e3)


def reduce(nbytes: float, gbps: float = REDUCE) -> float:
    return nbytes / (gbps * 1e3)


def model(collective: str, variant: str, nranks: int, machine: Machine | None = None, count: int = C) -> float:
    return predict_us(Call(collective, parse_variant(variant), nranks, 2 if nranks > 1 else 1, count, 4),
                      machine or toy())


def test_two_ranks_one_node_ring_allgather_and_reduce_scatter() -> None:
    assert model("allgather", "pccl-flat:ring", 2) == pytest.approx(copy(B) + intra(B))
    assert model("reduce_scatter", "pccl-flat:ring", 2) == pytest.approx(intra(B) + reduce(B))
    # all-reduce of C elements = ring reduce-scatter + ring all-gather of C/2 each
    assert model("allreduce", "pccl-flat:ring", 2) == pytest.approx(2 * intra(B / 2) + reduce(B / 2))


def test_ring_across_two_nodes_runs_at_the_node_crossing_pace() -> None:
    # 4 ranks on 2 nodes: every step has one rank per node sending across, alone on the NIC
    assert model("allgather", "pccl-flat:ring", 4) == pytest.approx(copy(B) + 3 * inter(B))
    assert model("allgather", "pccl-flat:ring", 8) == pytest.approx(copy(B) + 7 * inter(B))


def test_recursive_doubling_shares_the_nic_in_its_inter_node_step() -> None:
    # step 1 with the node neighbour; step 2 both ranks of a node send 2 blocks through one NIC
    assert model("allgather", "pccl-flat:rd", 4) == pytest.approx(copy(B) + intra(B) + inter(2 * 2 * B))
    # with a NIC per rank the two flows no longer share
    assert model("allgather", "pccl-flat:rd", 4, toy(nics=2)) == pytest.approx(copy(B) + intra(B) + inter(2 * B))


def test_direct_exchange_is_one_step_of_all_its_messages() -> None:
    # posted rows: 3 messages in flight at once, one latency; the two that cross share the NIC with the
    # node neighbour's two (4 flows of B), the one within the node overlaps them
    assert model("allgather", "pccl-flat:direct", 4) == pytest.approx(copy(B) + inter(2 * 2 * B))
    # tiny messages: one latency where recursive doubling pays one per level
    assert model("allgather", "pccl-flat:direct", 8, count=1) < 0.6 * model("allgather", "pccl-flat:rd", 8, count=1)


def test_each_further_message_in_flight_on_a_shared_fabric_adds_its_cost() -> None:
    message_us = 50.0  # above the per-byte cost of a B message, so the fabric leg is the slower
    fabric = toy(fabric_message_us=message_us)

    def on(nodes: int, variant: str) -> float:
        return predict_us(Call("allgather", parse_variant(variant), 4, 4 // nodes, C, 4), fabric)

    # 2 nodes x 2: one rank a node crosses per ring step, 2 messages in flight; 4 x 1: all 4 cross
    assert on(2, "pccl-flat:ring") == pytest.approx(copy(B) + 3 * (ALPHA_INTER + 1 * message_us))
    assert on(4, "pccl-flat:ring") == pytest.approx(copy(B) + 3 * (ALPHA_INTER + 3 * message_us))
    # direct's posted group is one step of every rank's 3 messages: 12 in flight
    assert on(4, "pccl-flat:direct") == pytest.approx(copy(B) + ALPHA_INTER + 11 * message_us)
    # none without the term: the ring's steps are the link's
    assert model("allgather", "pccl-flat:ring", 4) == pytest.approx(copy(B) + 3 * inter(B))


def test_hierarchical_allgather_two_levels_on_eight_ranks() -> None:
    # 4 nodes of 2: rail rd over 4 nodes (blocks of 1 then 2 chunks, two rails on one NIC), then the
    # intra-node ring moves the node's 4 chunks of the other rank
    expected = copy(B) + inter(2 * B) + inter(2 * 2 * B) + intra(4 * B)
    assert model("allgather", "pccl-hier:rd/ring", 8) == pytest.approx(expected)
    rails_alone = copy(B) + inter(B) + inter(2 * B) + intra(4 * B)
    assert model("allgather", "pccl-hier:rd/ring", 8, toy(nics=2)) == pytest.approx(rails_alone)


def test_hierarchical_reduce_scatter_reduces_each_level() -> None:
    # intra ring: send 4 chunks (one per node) and add them; then rail rh over 4 nodes: 2 chunks, then 1
    expected = intra(4 * B) + reduce(4 * B) + inter(2 * 2 * B) + reduce(2 * B) + inter(2 * B) + reduce(B)
    assert model("reduce_scatter", "pccl-hier:rd/ring", 8) == pytest.approx(expected)


def test_vendor_ring_stripes_over_all_nics_and_pays_its_overhead() -> None:
    # one flow per node crossing, spread over 2 NICs: half the bytes per NIC
    expected = copy(B) + 3 * (inter(B / 2) + 5.0)
    assert model("allgather", "xccl", 4, toy(nics=2)) == pytest.approx(expected)


def test_mpi_uses_one_nic_and_reduces_on_the_host() -> None:
    # MPICH picks recursive halving below 512 KiB; 2 flows per node on its single NIC even with 2 NICs
    time_us, algorithm = predict(Call("reduce_scatter", parse_variant("mpi"), 4, 2, C, 4), toy(nics=2))
    assert algorithm == "rh"
    assert time_us == pytest.approx(inter(2 * 2 * B) + reduce(2 * B, HOST_REDUCE) + intra(B) + reduce(B, HOST_REDUCE))


def test_rendezvous_messages_pay_their_extra_latency() -> None:
    machine = toy(intra={"latency_us": ALPHA_INTRA, "bandwidth_gbps": BETA_INTRA, "rendezvous_bytes": B,
                         "rendezvous_us": 3.0})
    assert model("allgather", "pccl-flat:ring", 2, machine) == pytest.approx(copy(B) + intra(B) + 3.0)
    assert model("allgather", "pccl-flat:ring", 2, machine, count=C - 1) == pytest.approx(
        copy(B - 4) + intra(B - 4))


def test_oversubscription_adds_per_step_latency_by_the_share_off_core() -> None:
    machine = toy(oversubscription={"host_cores": 2, "latency_us": 8.0})
    # 4 ranks on 2 cores: half the ranks off a core, +4 us per message step
    assert model("allgather", "pccl-flat:ring", 4, machine) == pytest.approx(copy(B) + 3 * (inter(B) + 4.0))
    assert model("allgather", "pccl-flat:ring", 2, machine) == pytest.approx(copy(B) + intra(B))


def test_hierarchy_with_an_mpi_phase_expands_mpichs_algorithm() -> None:
    # inter phase by MPI on the rail of 2 nodes (rd: one step of one chunk), packing copies around it
    with_mpi = model("allgather", "pccl-hier:mpi/ring", 4)
    assert with_mpi == pytest.approx(copy(B) + inter(2 * B) + copy(2 * B) + intra(2 * B))


def test_representatives_are_whole_nodes_at_scale() -> None:
    assert representatives(Grid(16, 2)) == list(range(16))
    assert representatives(Grid(2048, 8)) == [*range(8), *range(2040, 2048)]
    ranks = representatives(Grid(2000, 8))  # 250 nodes, 2000 ranks: folds on both levels
    assert len(ranks) % 8 == 0 and set(range(8)) <= set(ranks)


@pytest.mark.parametrize("variant", ["pccl-flat:ring", "pccl-flat:rd", "pccl-flat:bruck", "pccl-hier:rd/ring",
                                     "pccl-hier:ring/rd", "mpi", "xccl"])
@pytest.mark.parametrize("nranks", [96, 128])
def test_representative_ranks_give_the_all_ranks_answer(monkeypatch, variant: str, nranks: int) -> None:
    machine = toy(nics=2, gpus_per_node=8)
    call = Call("allgather", parse_variant(variant), nranks, 8, 4096, 4)
    few = predict_us(call, machine)
    model_steps.build_profile.cache_clear()
    monkeypatch.setattr(model_steps, "ALL_RANKS_UP_TO", 10_000)
    assert predict_us(call, machine) == pytest.approx(few)
    model_steps.build_profile.cache_clear()


def test_frontier_vendor_ring_is_the_published_fitted_model() -> None:
    frontier, _ = load_machine("frontier-paper")
    size = 1 << 30
    ring_us = predict_us(Call("allgather", parse_variant("xccl"), 2048, 8, size // 2048 // 4, 4), frontier)
    fitted_us = 2047 * 39.0 + (2047 / 2048) * size / 110e3  # a*p + b*((p-1)/p)*size, REFERENCE.md §1
    assert ring_us == pytest.approx(fitted_us, rel=0.01)


def test_frontier_hierarchy_speedup_is_in_the_published_range_mid_size() -> None:
    frontier, _ = load_machine("frontier-paper")
    size = 256 << 20

    def at(variant: str) -> float:
        return predict_us(Call("allgather", parse_variant(variant), 2048, 8, size // 2048 // 4, 4), frontier)

    assert 6.0 <= at("xccl") / at("pccl-hier:rd/ring") <= 33.0


def test_reproducer_recursive_halving_keeps_large_halves_inside_the_node() -> None:
    """rh-dd (partner XOR 1, 2, 4 ...): on 4 nodes of 8 only the last 2 of 5 steps cross the network,
    carrying 1/16 and 1/32 of the input; MPICH's rh (partner p/2 first) sends the largest half across."""
    from bench.model.cost import Call, call_profile
    from bench.model.impls import parse_variant
    from bench.model.machine import load_machine

    machine, _ = load_machine("frontier-paper")
    count = 1024
    profiles = {}
    for algorithm in ("rh-dd", "rh"):
        lib = machine.libraries["mpi"].model_copy(update={"algorithms": {"reduce_scatter": algorithm}})
        fixed = machine.model_copy(update={"libraries": {**machine.libraries, "mpi": lib}})
        call = Call("reduce_scatter", parse_variant("mpi"), 32, 8, count, 4)
        profile, scale = call_profile(call, fixed, algorithm)
        profiles[algorithm] = (profile.inter_bytes * scale).max(axis=1)
    total = 32 * count * 4
    crossing = profiles["rh-dd"][profiles["rh-dd"] > 0]
    assert list(crossing) == [total // 16, total // 32]
    assert profiles["rh"].max() == total // 2
