"""``model fit`` recovers known parameters from synthetic tables; NNLS; per-cell errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bench.model.check import error_summary, error_table, measured_calls
from bench.model.cost import Call, predict_us
from bench.model.fit import fit, nnls
from bench.model.impls import parse_variant
from bench.model.machine import Library, Machine

VARIANTS = ("pccl-flat:ring", "pccl-flat:rd", "pccl-hier:rd/ring", "mpi")
SHAPES = ((2, 2), (4, 2), (8, 2))  # (ranks, ranks per node)
HOST_CORES = 2


def machine(**links) -> Machine:
    return Machine(
        name="known", device="host", gpus_per_node=2,
        intra=links.get("intra", {"latency_us": 2.0, "bandwidth_gbps": 5.0, "rendezvous_bytes": 8192,
                                  "rendezvous_us": 3.0}),
        inter=links.get("inter", {"latency_us": 6.0, "bandwidth_gbps": 2.0, "rendezvous_bytes": 8192,
                                  "rendezvous_us": 5.0}),
        copy_gbps=20.0, reduce_gbps=10.0, host_reduce_gbps=10.0,
        oversubscription={"host_cores": HOST_CORES, "latency_us": 4.0},
        libraries={"pccl": Library(name="pccl-bench", call_overhead_us=0.5),
                   "mpi": Library(name="MPICH", step_overhead_us=-0.5, call_overhead_us=1.0)},
    )


def synthetic(truth: Machine, shapes=SHAPES) -> pd.DataFrame:
    """A results table whose every time is the model's under ``truth``."""
    rows = []
    for collective in ("allgather", "reduce_scatter", "allreduce"):
        for label in VARIANTS:
            variant = parse_variant(label)
            for nranks, per_node in shapes:
                for count in (16, 256, 4096, 65536):
                    count = count * nranks if collective == "allreduce" else count
                    call = Call(collective, variant, nranks, per_node, count, 4)
                    rows.append({"collective": collective, "impl": variant.impl, "algorithm": variant.algorithm,
                                 "intra": variant.intra, "inter": variant.inter, "nranks": nranks,
                                 "ranks_per_node": per_node, "count_per_rank": count, "dtype": "float32",
                                 "placement": "out_of_place", "bytes_total": call.bytes_total, "status": "ok",
                                 "oversubscribed": nranks > HOST_CORES, "time_us_p50": predict_us(call, truth)})
    return pd.DataFrame(rows)


def start() -> Machine:
    link = {"latency_us": 1.0, "bandwidth_gbps": 1.0, "rendezvous_bytes": 8192}
    return Machine(name="start", device="host", gpus_per_node=2, intra=link, inter=link, copy_gbps=1.0,
                   reduce_gbps=1.0, host_reduce_gbps=1.0,
                   libraries={"pccl": Library(name="pccl-bench"), "mpi": Library(name="MPICH")})


def test_nnls_matches_a_known_nonnegative_solution() -> None:
    rng = np.random.default_rng(1)
    a = rng.uniform(0, 1, (40, 5))
    x = np.array([0.0, 2.0, 0.5, 0.0, 3.0])
    assert np.allclose(nnls(a, a @ x), x, atol=1e-8)
    # the unconstrained optimum has a negative entry: NNLS clamps it and stays optimal
    b = a @ np.array([1.0, -1.0, 0, 0, 0])
    solution = nnls(a, b)
    assert (solution >= 0).all()
    assert np.linalg.norm(a @ solution - b) <= np.linalg.norm(a @ np.maximum(np.linalg.lstsq(a, b)[0], 0) - b) + 1e-9


def test_fit_recovers_known_parameters() -> None:
    truth = machine()
    measured = measured_calls(synthetic(truth))
    fitted = fit(measured, start()).machine
    for link in ("intra", "inter"):
        for name in ("latency_us", "bandwidth_gbps", "rendezvous_us"):
            assert getattr(getattr(fitted, link), name) == pytest.approx(getattr(getattr(truth, link), name), rel=1e-4)
    assert fitted.copy_gbps == pytest.approx(truth.copy_gbps, rel=1e-4)
    assert fitted.reduce_gbps == pytest.approx(truth.reduce_gbps, rel=1e-4)
    assert fitted.oversubscription.host_cores == HOST_CORES
    assert fitted.oversubscription.latency_us == pytest.approx(4.0, rel=1e-4)
    assert fitted.libraries["pccl"].call_overhead_us == pytest.approx(0.5, abs=1e-4)
    assert fitted.libraries["mpi"].step_overhead_us == pytest.approx(-0.5, abs=1e-4)
    assert fitted.libraries["mpi"].call_overhead_us == pytest.approx(1.0, abs=1e-4)
    assert error_table(measured, fitted)["error_pct"].abs().max() < 1e-3


def test_one_node_data_ties_inter_node_parameters_to_intra_node() -> None:
    truth = machine()
    one_node = synthetic(truth, shapes=((2, 2),))
    result = fit(measured_calls(one_node), start())
    assert "inter.latency_us tied to intra.latency_us" in result.notes
    assert result.machine.inter.latency_us == pytest.approx(result.machine.intra.latency_us)
    assert result.machine.intra.latency_us == pytest.approx(2.0, rel=1e-3)


def test_rendezvous_threshold_is_found_by_search() -> None:
    truth = machine()
    table = synthetic(truth, shapes=((2, 2),))
    base = start().model_copy(update={"intra": start().intra.model_copy(update={"rendezvous_bytes": None})})
    result = fit(measured_calls(table), base)
    # the data's messages are 64 B, 1 KiB, 16 KiB, 256 KiB: any threshold in (1 KiB, 16 KiB] fits exactly
    assert 1024 < result.machine.intra.rendezvous_bytes <= 16384
    assert result.machine.intra.rendezvous_us == pytest.approx(3.0, rel=1e-4)


def test_error_summary_reports_each_group_and_all() -> None:
    truth = machine()
    table = synthetic(truth, shapes=((2, 2), (4, 2)))
    table.loc[table["nranks"] == 4, "time_us_p50"] *= 1.25  # the model is 20% low on 4 ranks
    errors = error_table(measured_calls(table), truth)
    summary = error_summary(errors, ("nranks",))
    by_ranks = summary.set_index("nranks")
    assert by_ranks.loc[2, "max_abs_error_pct"] < 1e-6
    assert by_ranks.loc[4, "median_abs_error_pct"] == pytest.approx(20.0)
    assert by_ranks.loc["all", "cells"] == len(errors)


def test_a_measured_fabric_is_kept_and_the_rest_recovered_around_it() -> None:
    # every inter-node byte of a step shares 5 GB/s: a 2-node step's two flows stay on their 2 GB/s links, an
    # 8-node ring's eight flows are held to the fabric
    truth = machine().model_copy(update={"fabric_gbps": 5.0})
    shapes = ((2, 2), (4, 2), (8, 2), (8, 1))
    table = synthetic(truth, shapes=shapes)
    assert (table["time_us_p50"] > synthetic(machine(), shapes=shapes)["time_us_p50"] * 1.2).sum() > 20
    fitted = fit(measured_calls(table), start().model_copy(update={"fabric_gbps": 5.0})).machine
    assert fitted.fabric_gbps == 5.0
    for name in ("latency_us", "bandwidth_gbps"):
        assert getattr(fitted.inter, name) == pytest.approx(getattr(truth.inter, name), rel=1e-3)
    assert error_table(measured_calls(table), fitted)["error_pct"].abs().max() < 1e-2
    # without the fabric the same fit cannot follow the cells
    blind = fit(measured_calls(table), start()).machine
    assert error_table(measured_calls(table), blind)["error_pct"].abs().max() > 5
