"""Every implementation under a real mpiexec, checked bit for bit (tests/mpi_scripts/check_collectives.py)."""

from __future__ import annotations

import json

import pytest
from conftest import MPI_SCRIPTS, describe, run_mpi

from collectives.impls import IMPLEMENTATIONS

pytestmark = pytest.mark.mpi

SCRIPT = MPI_SCRIPTS / "check_collectives.py"
COMBINATIONS = 3 * 2 * 3 * 4  # collectives x placements x (dtype, op) x counts


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_every_implementation_is_exact(nranks):
    result = run_mpi(nranks, SCRIPT, timeout=90)
    failures = [line for line in result.stdout.splitlines() if line.startswith("FAIL ")]
    assert result.returncode == 0 and not failures, describe(result)
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["nranks"] == nranks
    assert summary["failures"] == []
    # only the MPI baseline may decline a cell, and only float16 (no standard MPI datatype)
    for line in summary["unsupported"]:
        assert line.startswith("mpi ") and " float16 " in line, line
    host = [name for name, cls in IMPLEMENTATIONS.items() if cls.host_buffers]
    assert summary["checked"] + len(summary["unsupported"]) == len(host) * COMBINATIONS
    assert summary["checked"] >= COMBINATIONS  # at least pccl-flat ran everything
    assert summary["api_checked"] > 0 and summary["api_errors_checked"] == 11


@pytest.mark.mpi
@pytest.mark.parametrize("nranks", [1, 3])
def test_bookkeeping_and_topology_in_fixed_size_exchanges(nranks):
    result = run_mpi(nranks, MPI_SCRIPTS / "check_bookkeeping.py")
    assert result.returncode == 0 and "bookkeeping ok" in result.stderr, describe(result)
