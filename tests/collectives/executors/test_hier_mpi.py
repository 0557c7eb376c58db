"""Every flat algorithm and pccl-hier phase pair on real MPI ranks, virtual nodes included."""

from __future__ import annotations

import json

import pytest
from conftest import MPI_SCRIPTS, describe, run_mpi

SHAPES = [(p, per_node) for p in (1, 2, 3, 4, 5, 6, 8) for per_node in (1, 2, 3, 4) if p % per_node == 0]


@pytest.mark.mpi
@pytest.mark.parametrize("nranks,per_node", SHAPES)
def test_algorithms_and_phases_bit_exact(nranks: int, per_node: int) -> None:
    result = run_mpi(nranks, MPI_SCRIPTS / "check_hier.py", per_node, timeout=240)
    assert result.returncode == 0, describe(result)
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["failures"] == [] and summary["checked"] > 0, describe(result)
    # only the whole-buffer algorithms (all-reduce only) may decline: Bruck runs every collective
    assert all(line.split()[-1] in ("rdfull", "tree") and " allreduce " not in line for line in summary["declined"]), \
        summary["declined"]


@pytest.mark.mpi
@pytest.mark.parametrize("nranks", [2, 3])
def test_messages_split_in_pieces_stay_exact(nranks: int) -> None:
    """The >1 GiB path (pieces posted together), exercised with a 12-byte piece size."""
    result = run_mpi(nranks, MPI_SCRIPTS / "check_hier.py", 1, 12, timeout=240)
    assert result.returncode == 0, describe(result)
