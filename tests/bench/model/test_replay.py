"""Workload replay: the collectives of one training step, and their time per implementation."""

from __future__ import annotations

import pandas as pd
import pytest

from bench.errors import BadInput
from bench.model.cost import Call, predict_us
from bench.model.impls import parse_variant
from bench.model.machine import Library, Machine
from bench.model.replay import Timed, measured_timer, model_timer, replay_rows
from bench.model.workload import Transformer, Workload, distinct_calls, load_workload, step_calls

SMALL = Transformer(layers=2, hidden=8, ffn_hidden=32, vocab=16, seq_len=4)


def small(strategy: str = "zero3", **changes) -> Workload:
    return Workload(name="small", model=SMALL, strategy=strategy, **changes)


def test_parameter_counts_of_a_small_transformer() -> None:
    # 4 h^2 + 2 h f + 9 h + f = 256 + 512 + 72 + 32; embeddings (16 + 4) x 8 + final norm 2 x 8
    assert SMALL.layer_params() == 872
    assert SMALL.root_params() == 176
    assert SMALL.total_params() == 2 * 872 + 176


def test_zero3_issues_gathers_forward_and_backward_and_a_reduce_scatter_per_layer() -> None:
    calls = step_calls(small(), nranks=4)
    sequence = [(c.phase, c.unit, c.collective, c.count_per_rank) for c in calls]
    assert sequence == [
        ("forward", "root", "allgather", 44),
        ("forward", "layer 1", "allgather", 218),
        ("forward", "layer 2", "allgather", 218),
        ("backward", "layer 2", "allgather", 218),
        ("backward", "layer 2", "reduce_scatter", 218),
        ("backward", "layer 1", "allgather", 218),
        ("backward", "layer 1", "reduce_scatter", 218),
        ("backward", "root", "reduce_scatter", 44),
    ]
    assert calls[1].bytes_total(4) == 218 * 4 * 2  # float16: padded layer, all-gather output
    # 3 ranks: 872 parameters pad to 873 = 3 x 291
    assert step_calls(small(), nranks=3)[1].count_per_rank == 291


def test_ddp_all_reduces_gradient_buckets() -> None:
    bucket_mib = 1000 * 2 / (1 << 20)  # 1000 float16 elements per bucket
    calls = step_calls(small("ddp", bucket_mib=bucket_mib), nranks=8)
    assert [c.count_per_rank for c in calls] == [1000, 920]
    assert all(c.collective == "allreduce" for c in calls)


def test_distinct_calls_count_repeats() -> None:
    counted = distinct_calls(step_calls(small(), nranks=4))
    assert counted[("allgather", 218, "float16")] == 4
    assert counted[("reduce_scatter", 44, "float16")] == 1


def toy() -> Machine:
    link = {"latency_us": 2.0, "bandwidth_gbps": 1.0}
    return Machine(name="toy", device="cuda", gpus_per_node=2, intra=link, inter={**link, "latency_us": 8.0},
                   copy_gbps=10.0, reduce_gbps=10.0, host_reduce_gbps=1.0, price_per_gpu_hour_usd=3.6,
                   libraries={"pccl": Library(name="pccl-bench"), "xccl": Library(name="NCCL", nic_policy="striped")})


def test_modelled_replay_sums_the_calls_and_prices_the_step() -> None:
    machine, workload = toy(), small()
    labels = ("xccl", "pccl-hier:rd/ring")
    timed = [Timed(label, model_timer(machine, parse_variant(label))) for label in labels]
    table = replay_rows(workload, [8], timed, "modelled", "toy", lambda n: 2, machine.price_per_gpu_hour_usd)
    expected_us = sum(predict_us(Call(c.collective, parse_variant("pccl-hier:rd/ring"), 8, 2, c.count_per_rank, 2),
                                 machine) for c in step_calls(workload, 8))
    row = table.set_index("implementation").loc["pccl-hier:rd/ring"]
    assert row["comm_ms_per_step"] == pytest.approx(expected_us / 1e3)
    assert row["allgather_ms"] + row["reduce_scatter_ms"] == pytest.approx(row["comm_ms_per_step"])
    # 3.6 $ per GPU-hour = 1e-3 $ per GPU-second
    assert row["cost_per_step_usd"] == pytest.approx(expected_us * 1e-6 * 8 * 1e-3)
    assert row["baseline"] == "xccl"
    base = table.set_index("implementation").loc["xccl", "comm_ms_per_step"]
    assert row["speedup_vs_baseline"] == pytest.approx(base / row["comm_ms_per_step"])


def measured(times: dict[int, float]) -> pd.DataFrame:
    return pd.DataFrame([{"status": "ok", "impl": "pccl-flat", "algorithm": "ring", "intra": "", "inter": "",
                          "collective": "allgather", "nranks": 2, "dtype": "float16", "bytes_total": size,
                          "time_us_p50": value} for size, value in times.items()])


def test_measured_times_interpolate_log_log_and_refuse_to_extrapolate() -> None:
    timer = measured_timer(measured({1024: 10.0, 4096: 40.0}), "pccl-flat:ring")
    # 2048 B total on 2 ranks = 512 float16 per rank: half-way in log size, time 20 us (a power law)
    assert timer("allgather", 512, "float16", 2) == pytest.approx(20.0)
    with pytest.raises(BadInput, match="outside the measured sizes"):
        timer("allgather", 4096, "float16", 2)


def test_shipped_workloads_load() -> None:
    seven = load_workload("gpt3-7b-zero3")
    assert seven.model.total_params() == pytest.approx(6.66e9, rel=0.01)
    assert len(step_calls(seven, 2048)) == 3 * 32 + 2
    assert load_workload("gpt3-13b-zero3").model.total_params() == pytest.approx(12.86e9, rel=0.01)
    with pytest.raises(BadInput, match="workload not found"):
        load_workload("no-such-workload")
