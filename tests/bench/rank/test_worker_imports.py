"""What every MPI rank imports before its first cell (issue 29: Python start-up on a shared filesystem).

Each module a rank imports costs it about five metadata operations (directory stats, the source's
stat, the .pyc's open), times every rank of the job: benchmarks/worker_start.py measures it and
docs/PERFORMANCE-SCALE.md has the figures. Numpy and mpi4py import what they import; this pins what the
worker's own modules add on top of them.
"""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT

#: imported by no rank before its first cell: the driver's tables, schema, console and CLI,
#: GPU probes (device cells import them when they open a device), and what only a failing rank
#: needs (traceback) or only the driver or the build asks for (importlib.metadata, socket, subprocess,
#: shutil with its bz2 and lzma, shlex)
NOT_AT_START = ("traceback", "importlib.metadata", "socket", "subprocess", "shutil", "shlex", "bz2", "lzma", "pandas",
                "pyarrow", "polars", "pydantic",
                "yaml", "rich", "typer", "click", "matplotlib", "cupy", "collectives.memory.device_context",
                "collectives.memory.device_compute",
                "collectives.executors.device", "bench.results", "bench.sweep", "bench.cli", "bench.plan.suite",
                "bench.driver.provenance")

PROBE = """
import json, sys
import mpi4py
mpi4py.rc.initialize = False  # importing the worker must not need an MPI job
mpi4py.rc.finalize = False
import numpy
from mpi4py import MPI
before = set(sys.modules)
import bench.rank.worker
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_worker_imports_only_what_a_cell_needs():
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    added = json.loads(done.stdout.splitlines()[-1])
    assert "bench.rank.worker" in added  # the probe measured the worker, not an empty import
    unwanted = [name for name in added if any(name == bad or name.startswith(f"{bad}.") for bad in NOT_AT_START)]
    assert not unwanted, f"the worker's import pulls in {unwanted}: every rank pays for them at start-up"
