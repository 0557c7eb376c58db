"""Buffers that move (bench/rank/buffers.py): the layouts of rotate and cold, the last-level cache read
from sysfs, the walk through real buffers on two ranks, and a sweep of all three buffers, bit-exact."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from conftest import MPI_SCRIPTS, describe, run_cli, run_mpi

from bench.rank import buffers
from bench.results.read import read_results
from collectives.call import CallSpec
from collectives.memory.context import HOST


def fake_caches(root, caches) -> None:
    for index, (level, kind, size) in enumerate(caches):
        folder = root / f"index{index}"
        folder.mkdir(parents=True)
        (folder / "level").write_text(f"{level}\n")
        (folder / "type").write_text(f"{kind}\n")
        (folder / "size").write_text(f"{size}\n")


def test_the_last_level_cache_is_the_highest_data_or_unified_one(tmp_path):
    fake_caches(tmp_path, [(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "2048K"),
                           (3, "Unified", "105M"), (4, "Instruction", "1G")])
    assert buffers.last_level_cache(tmp_path) == (105 << 20, f"{tmp_path}: L3")


def test_without_sysfs_the_cache_comes_from_sysconf_else_it_is_unknown(tmp_path, monkeypatch):
    sizes = {"SC_LEVEL3_CACHE_SIZE": 0, "SC_LEVEL2_CACHE_SIZE": 1 << 20}
    monkeypatch.setattr(buffers.os, "sysconf", lambda name: sizes[name])
    assert buffers.last_level_cache(tmp_path / "none") == (1 << 20, "os.sysconf(SC_LEVEL2_CACHE_SIZE)")
    sizes["SC_LEVEL2_CACHE_SIZE"] = 0
    size, why = buffers.last_level_cache(tmp_path / "none")
    assert size == 0 and "no cache size" in why


@pytest.mark.parametrize("count", [1, 2, 1000, 1 << 16, 1 << 20, 1 << 24])
def test_a_cold_walk_spans_more_than_the_cache_in_each_buffer(count):
    llc = 32 << 20
    call = CallSpec("allreduce", 2, count, "float32")
    layout = buffers.cold_layout(call, llc)
    assert 2 <= layout.positions <= buffers.MAX_POSITIONS
    assert layout.positions * layout.stride_bytes > llc, layout
    assert layout.stride_bytes % buffers.CACHE_LINE == 0 and layout.stride_bytes >= 4 * count
    assert layout.llc_bytes == llc and layout.columns(call)["buffer_llc_bytes"] == llc


def test_rotate_walks_nccl_tests_positions_up_to_the_cap():
    # nccl-tests: steps = maxbytes / max(sendBytes, recvBytes), each shift one such footprint
    gather = CallSpec("allgather", 4, 256, "float32")  # 1 KiB sent, 4 KiB received
    layout = buffers.rotate_layout(gather, 4096)
    assert (layout.positions, layout.stride_bytes) == (16, 4096)
    assert buffers.rotate_layout(CallSpec("allgather", 4, 4096, "float32"), 4096).positions == 1
    assert buffers.rotate_layout(CallSpec("allreduce", 2, 1, "float32"), 1 << 30).positions == buffers.MAX_POSITIONS
    assert buffers.layout_of("warm", gather, 4096, 0) is buffers.WARM


def test_positions_are_views_of_one_allocation_holding_the_inputs():
    layout = buffers.Layout(3, 64)
    send, recv = np.arange(4, dtype=np.float32), np.full(8, -1, dtype=np.float32)
    placed = buffers.positions(HOST.backend, send, recv, layout)
    assert [s.ctypes.data - placed[0][0].ctypes.data for s, _ in placed] == [0, 64, 128]
    assert all(r.base is placed[0][1].base and np.array_equal(r, recv) for _, r in placed)
    assert all(np.array_equal(s, send) for s, _ in placed)
    assert buffers.positions(HOST.backend, None, recv, buffers.WARM) == [(None, recv)]


def test_a_device_gets_one_allocation_a_buffer_and_views_of_it():
    class Copying:  # a stand-in device backend: from_host copies, as CuPy's does to the GPU
        copies: list = []

        def from_host(self, array):
            self.copies.append(array.copy())
            return self.copies[-1]

    backend = Copying()
    send, recv = np.arange(4, dtype=np.float32), np.full(8, -1, dtype=np.float32)
    placed = buffers.positions(backend, send, recv, buffers.Layout(4, 64))
    assert len(backend.copies) == 2, "one copy to the device per buffer, not one per position"
    recvs, sends = backend.copies
    assert all(r.base is recvs and s.base is sends for s, r in placed)
    assert all(np.array_equal(s, send) and np.array_equal(r, recv) for s, r in placed)


@pytest.mark.mpi
def test_rotation_moves_through_every_position_and_each_is_checked():
    done = run_mpi(2, MPI_SCRIPTS / "check_buffers.py",
                   env={"PCCL_BENCH_FAULT": "corrupt:rank=1:cell=1:launch=check-buffers"})
    assert done.returncode == 0, describe(done)
    found = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))
    for impl, walk in found["walk"].items():
        n = walk["positions"]
        assert n == 4 and walk["one_allocation"] and walk["stride"] == [0, 64, 128, 192], (impl, walk)
        # after k calls the first k positions hold the result: each call took the next one's buffers
        assert walk["right_after"][:n + 1] == [[k < j for k in range(n)] for j in range(n + 1)], (impl, walk)
        assert walk["position"] == 1, "after a full turn the walk starts again at the first position"
    assert found["order"] == [k % 3 for k in range(9)], "the timing loop calls the parts in turn"
    ok, wrong = found["cells"]
    assert ok["status"] == "ok" and ok["buffer_positions"] == 4 and ok["buffer_span_bytes"] == 2 * (3 * 64 + 64)
    assert wrong["status"] == "wrong" and wrong["n_wrong"] == 1, "the last position's result is checked too"


@pytest.mark.mpi
def test_a_sweep_of_warm_rotate_and_cold_is_bit_exact_for_mpi_flat_and_shm(tmp_path):
    suite = {"name": "buffers-test", "collectives": ["allgather", "reduce_scatter", "allreduce"],
             "implementations": ["mpi", {"impl": "pccl-flat", "algorithms": ["ring"]}, "shm"], "ranks": [2],
             "sizes": {"min": "1KiB", "max": "4KiB", "factor": 4}, "placement": ["out_of_place", "in_place"],
             "buffers": ["warm", "rotate", "cold"],
             "select": [{"bytes_total": "1KiB", "placement": "out_of_place"},
                        {"bytes_total": "1KiB", "collective": "allreduce", "placement": "in_place"}],
             "timing": {"warmup": 1, "iters": 2, "min_iters": 1, "budget_s": 0}}
    path = tmp_path / "buffers.yaml"
    path.write_text(yaml.safe_dump(suite))
    done = run_cli("run", "sweep", path, "--out", tmp_path / "run")
    assert done.returncode == 0, describe(done)
    rows = read_results([tmp_path / "run"])  # the one validated reader (gate, report, plot) takes it
    assert len(rows) == 3 * 3 * 4 and rows["status"].eq("ok").all() and rows["n_wrong"].eq(0).all()
    assert {tuple(sorted(set(group))) for _, group in rows.groupby(["impl", "collective", "placement"])["buffers"]} \
        == {("cold", "rotate", "warm")}
    by = rows.set_index("buffers")
    assert set(by.loc["warm", "buffer_positions"]) == {1}
    assert set(by.loc["rotate", "buffer_positions"]) == {4}, "1 KiB of a 4 KiB sweep: nccl-tests' 4 shifts"
    llc = by.loc["cold", "buffer_llc_bytes"]
    assert (llc > 0).all() and (by.loc["cold", "buffer_span_bytes"] > llc).all()
    assert rows["cell_key"].is_unique


def test_the_memory_check_counts_every_position():
    from dataclasses import replace

    from bench.driver.memory_check import cell_buffer_bytes
    from bench.plan.cells import Cell

    warm = Cell("allreduce", "mpi", "native", "", "", "host", 2, 1, 2, False, "float32", "sum", "out_of_place",
                1 << 20, 4 << 20, 4 << 20, "sync")
    rotate = replace(warm, buffers="rotate", buffers_max_count=1 << 24)
    assert cell_buffer_bytes(warm) == 8 << 20
    assert cell_buffer_bytes(rotate) == 2 * (64 << 20), "each buffer spans the largest size's"
