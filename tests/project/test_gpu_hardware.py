"""On a real GPU (marked gpu; skipped without one): every implementation on CuPy buffers, bit for bit.

Runs tests/mpi_scripts/check_gpu_paths.py in ``cuda``/``rocm`` mode: CuPy device buffers,
the device executor, staged and (where the MPI library is GPU-aware) GPU-aware MPI,
NCCL/RCCL through cupy.cuda.nccl, the check on the GPU. scripts/device-check.sh runs
these and a gpu-smoke sweep on a GPU machine.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import MPI_SCRIPTS, ROOT, describe, run_mpi, subprocess_env

from collectives import spec
from collectives.call import CallSpec
from collectives.memory.backends import probe

DEVICE = next((name for name in ("cuda", "rocm") if not probe(name).reason), None)
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(DEVICE is None, reason=f"no GPU: {probe('cuda').reason}")]

SCRIPT = MPI_SCRIPTS / "check_gpu_paths.py"
#: what a GPU run may decline: MPI's missing float16, the all-gather-only bruck, NCCL on a shared GPU
ALLOWED = ("float16", "'bruck' has no reduce_scatter", "needs one GPU per rank")


def gpu_aware_here() -> bool:
    done = subprocess.run([sys.executable, "-m", "collectives.memory.gpu_aware", DEVICE], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=subprocess_env(1, {"PCCL_BENCH_GPU_AWARE": "auto"}))
    return bool(json.loads(done.stdout.strip().splitlines()[-1])["aware"])


def run_paths(nranks: int, ranks_per_node: int, aware: str, *scope: str) -> dict:
    result = run_mpi(nranks, SCRIPT, ranks_per_node, aware, DEVICE, *scope, timeout=600)
    assert result.returncode == 0, describe(result)
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["failures"] == [] and summary["reason"] == "", summary
    for line in summary["unsupported"]:
        assert any(word in line for word in ALLOWED), line
    return summary


@pytest.mark.mpi
def test_one_rank_everything_on_the_gpu():
    summary = run_paths(1, 1, "auto")
    assert summary["xccl"][2] == "" and summary["xccl"][1]  # NCCL/RCCL loaded, with a version
    assert summary["transports"]["xccl"] == ["rccl" if DEVICE == "rocm" else "nccl"]
    assert summary["checked"] >= 700


@pytest.mark.mpi
@pytest.mark.parametrize("nranks", [2, 4])
def test_ranks_sharing_or_not_a_gpu_staged(nranks):
    summary = run_paths(nranks, 1, "no", "quick")
    assert summary["transports"]["mpi"] == ["mpi-staged"]


@pytest.mark.mpi
def test_gpu_aware_mpi_when_the_library_is():
    if not gpu_aware_here():
        pytest.skip("the MPI library here is not GPU-aware (staging is tested above)")
    summary = run_paths(2, 1, "yes", "quick")
    assert summary["transports"]["mpi"] == ["mpi-gpu-aware"]


def test_expected_output_on_the_gpu_matches_the_host():
    import cupy

    for collective in ("allgather", "reduce_scatter", "allreduce"):
        for op in ("sum", "prod", "max"):
            for dtype in ("float16", "int32", "float64"):
                call = CallSpec(collective, 6, 1001, dtype, op)
                on_gpu = spec.expected_output(call, 4, cupy)
                assert isinstance(on_gpu, cupy.ndarray)
                assert np.array_equal(on_gpu.get(), spec.expected_output(call, 4))
                recv = cupy.asarray(spec.expected_output(call, 4))
                assert spec.count_wrong(call, 4, recv, cupy) == 0
                recv[3] += 1
                assert spec.count_wrong(call, 4, recv, cupy) == 1
