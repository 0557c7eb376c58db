"""Synthetic runs for the tests of what reads results (gate, plot, report): run folders written exactly
as a sweep writes them (bench.results.table.build_tables + write_run), from cells whose per-launch samples
are drawn with a fixed seed, so every verdict is deterministic. No MPI."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.cli import main
from bench.plan.cells import Cell
from bench.results.table import build_tables, write_run

SIZES = (64, 4096, 1 << 20)


def cell(collective: str = "allreduce", impl: str = "mpi", algorithm: str = "native", bytes_total: int = 4096,
         nranks: int = 2) -> Cell:
    count = bytes_total // 4 if collective == "allreduce" else bytes_total // 4 // nranks
    return Cell(collective=collective, impl=impl, algorithm=algorithm, intra="", inter="", device="host",
                nranks=nranks, nnodes=1, ranks_per_node=nranks, virtual_nodes=False, dtype="float32", op="sum",
                placement="out_of_place", count_per_rank=count, bytes_per_rank=count * 4,
                bytes_total=bytes_total, timing_mode="sync")


def make_run(folder: Path, cells: dict, run_id: str, seed: int = 0, launches: int = 2, iters: int = 60,
             spread: float = 0.03, status: dict | None = None, stamp: float = 1.8e9) -> Path:
    """``cells``: {Cell: median time in us}; ``status``: {Cell: status} for cells that went wrong."""
    rng = np.random.default_rng(seed)
    rows = []
    for spec, median_us in cells.items():
        for repeat in range(launches):
            bad = (status or {}).get(spec)
            samples = [] if bad else list(median_us * np.exp(rng.normal(0.0, spread, iters)))
            rows.append({**Cell(**{**spec.__dict__, "repeat": repeat}).to_dict(),
                         "launch_id": f"n2-r{repeat}", "samples_us": samples, "status": bad or "ok",
                         "n_wrong": 3 if bad == "wrong" else 0, "error": "", "iters": len(samples),
                         "timestamp": stamp, "library": "MPICH", "library_version": "5.0.2"})
    identity = {"run_id": run_id, "suite": "synthetic", "tool_version": "test", "git_sha": "", "schema_version": 1}
    results, samples = build_tables(rows, identity)
    folder.mkdir(parents=True, exist_ok=True)
    write_run(folder, results, samples, {"schema_version": 1, "run_id": run_id, "suite": "synthetic",
                                         "machine": {"hostname": "test", "cores": 2}, "env": {}})
    return folder


def grid(**changes) -> dict:
    """Two implementations of all-reduce at three sizes."""
    cells = {cell(impl=impl, algorithm=algorithm, bytes_total=size): 10.0 + size / 1000
             for impl, algorithm in (("mpi", "native"), ("pccl-flat", "ring")) for size in SIZES}
    return {**cells, **changes}


def cli(argv: list) -> tuple[int, str]:
    try:
        main([str(a) for a in argv])
    except SystemExit as done:
        return int(done.code or 0), ""
    return 0, ""
