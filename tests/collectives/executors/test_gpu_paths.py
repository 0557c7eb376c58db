"""The device code paths under a real mpiexec, on emulated device memory (no GPU needed).

tests/mpi_scripts/check_gpu_paths.py runs every implementation's ``build`` (device context) with
numpy arrays standing in for device memory and a test double for NCCL: the device
schedule executor (messages, strided packing, local kernels), GPU-aware and staged
MPI, library phases by MPI or NCCL, NCCL's in-place conventions, the GPU timing loop.
The same script runs on a real GPU in tests/project/test_gpu_hardware.py.
"""

from __future__ import annotations

import json

import pytest
from conftest import MPI_SCRIPTS, describe, run_mpi

pytestmark = pytest.mark.mpi

SCRIPT = MPI_SCRIPTS / "check_gpu_paths.py"


@pytest.mark.parametrize(("nranks", "ranks_per_node", "aware"), [
    (1, 1, "no"), (2, 1, "no"), (3, 1, "yes"), (4, 2, "no"), (4, 2, "yes"),
])
def test_device_paths_are_exact(nranks, ranks_per_node, aware):
    result = run_mpi(nranks, SCRIPT, ranks_per_node, aware, timeout=240)
    assert result.returncode == 0, describe(result)
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["failures"] == [] and summary["reason"] == ""
    assert summary["gpu_aware"] is (aware == "yes") and "override" in summary["how"]
    moved = "mpi-gpu-aware" if aware == "yes" else "mpi-staged"
    assert summary["transports"]["mpi"] == [moved]
    assert summary["transports"]["pccl-flat"] == [moved]
    assert summary["transports"]["xccl"] == ["nccl"]
    assert f"{moved}/nccl" in summary["transports"]["pccl-hier"]  # inter by MPI, intra by NCCL
    assert summary["xccl_communicators"] == 3  # world, node and rail: one each, reused by every cell
    # only MPI's missing float16 datatype and the all-gather-only bruck decline cells
    for line in summary["unsupported"]:
        assert "float16" in line or "'bruck' has no reduce_scatter" in line, line
    assert summary["checked"] >= 700


def test_messages_in_pieces():
    """Messages over the piece size (1 GiB in real runs) go as several posted pieces, on both transports."""
    for aware in ("yes", "no"):
        result = run_mpi(3, SCRIPT, 1, aware, "emulated", "quick", timeout=240, env={"CHECK_GPU_PIECE_BYTES": "24"})
        assert result.returncode == 0, describe(result)
        summary = json.loads(result.stdout.strip().splitlines()[-1])
        assert summary["failures"] == [] and summary["checked"] > 100
