"""The end-of-sweep verdict (bench.present.best): per shape and size the fastest pccl variant and its
speedup over mpi, sure or marked unsure, shapes kept apart, failed cells never the best."""

from __future__ import annotations

import pandas as pd
from conftest import console_text

from bench.present import console as screen
from bench.present.best import best_variants

TIGHT = [0.99, 1.0, 1.01] * 7


def row(impl: str, size: int, time_us: float | None, collective: str = "allreduce", nranks: int = 2,
        status: str = "ok", **changes) -> dict:
    algorithm = {"mpi": "native", "shm": "", "pccl-flat": "ring", "pccl-hier": ""}[impl]
    base = {"collective": collective, "impl": impl, "algorithm": algorithm,
            "intra": "shm" if impl == "pccl-hier" else None, "inter": "ring" if impl == "pccl-hier" else None,
            "device": "host", "nranks": nranks, "nnodes": 1 if nranks == 2 else 2, "ranks_per_node": 2,
            "dtype": "float32", "op": "sum", "placement": "out_of_place", "count_per_rank": size // 4,
            "timing_mode": "sync", "bytes_total": size, "repeat": 0, "status": status,
            "time_us_p50": time_us, "busbw_gbps": 1.0, "n_wrong": 0, "error": ""}
    return {**base, **changes}


def samples_of(results: pd.DataFrame) -> pd.DataFrame:
    rows = [{**record, "run_id": "r", "launch_id": "n", "iteration": i, "time_us": record["time_us_p50"] * f}
            for record in results.to_dict("records") if record["status"] == "ok" for i, f in enumerate(TIGHT)]
    return pd.DataFrame(rows)


def rendered(results: pd.DataFrame, samples: pd.DataFrame | None) -> str:
    return console_text(screen.verdict_tables(results, samples))


RESULTS = pd.DataFrame([
    row("mpi", 8, 0.60), row("shm", 8, 0.30), row("pccl-flat", 8, 1.20),
    row("mpi", 4096, 3.0), row("shm", 4096, 2.0), row("pccl-flat", 4096, 1.0),
    row("mpi", 8, 2.0, collective="allgather"), row("shm", 8, 9.0, collective="allgather"),
    row("pccl-flat", 8, None, collective="allgather", status="failed"),
    row("mpi", 8, 4.0, nranks=4), row("pccl-hier", 8, 1.0, nranks=4), row("shm", 8, 8.0, nranks=4),
])


def test_the_fastest_variant_per_size_shape_and_collective():
    found = best_variants(RESULTS, {})
    two, four = (found[(2, 1, "host", "float32", "out_of_place", "warm")],
                 found[(4, 2, "host", "float32", "out_of_place", "warm")])
    assert two[(8, "allreduce")].label == "shm" and two[(4096, "allreduce")].label == "pccl-flat:ring"
    assert two[(8, "allgather")].label == "shm"  # the failed flat cell is never the best
    assert two[(8, "allgather")].ratio < 1  # and a loss against mpi is shown as one
    assert four[(8, "allreduce")].label == "pccl-hier:ring/shm" and four[(8, "allreduce")].ratio == 4.0


def test_the_table_names_the_variant_and_its_speedup():
    text = rendered(RESULTS, samples_of(RESULTS))
    assert "best pccl vs mpi 2 ranks / 1 nodes" in text
    assert "4 ranks / 2 nodes" in text
    assert "shm 0.30 2.00x" in text and "pccl-flat:ring 1.00 3.00x" in text
    assert "pccl-hier:ring/shm 1.00 4.00x" in text
    assert "unsure" not in text


def test_without_samples_the_ratio_is_unsure():
    assert "2.00x?" in rendered(RESULTS, None) and "unsure" in rendered(RESULTS, None)


def test_no_pccl_cells_no_table():
    only_mpi = pd.DataFrame([row("mpi", 8, 1.0)])
    assert screen.verdict_tables(only_mpi) == [] and screen.verdict_tables(only_mpi.iloc[:0]) == []


def test_a_descheduled_cell_makes_the_ratio_unsure():
    """The Open MPI 4 MiB case (docs/OPENMPI.md): mpi's median 10x its fastest call, pccl's 1.1x; the
    8x of the medians is the scheduler's, not a result, though every interval is tight."""
    results = pd.DataFrame([row("mpi", 4 << 20, 20000.0, time_us_min=2000.0),
                            row("shm", 4 << 20, 2500.0, time_us_min=2300.0)])
    text = rendered(results, samples_of(results))
    assert "8.00x?" in text and "descheduled" in text
    calm = results.assign(time_us_min=[19000.0, 2300.0])
    assert "8.00x?" not in rendered(calm, samples_of(calm))
