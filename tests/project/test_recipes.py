"""docs/ARCHITECTURE.md's recipes followed once: each new piece is its one file plus its registry line.

A copy of the library and the harness gets exactly what the recipes name: an algorithm (a pairwise
all-gather, one module in collectives/schedules/algorithms/ and its import line), a transport (the
MPI library's nonblocking collectives, one module in collectives/transports/ and its import line)
and the implementation over it (one module in collectives/impls/ and its import line). A sweep of
that copy then runs them as a user's suite names them (flat, as a pccl-hier phase, as an
implementation), every cell checked bit for bit; and the copy differs from the repository in
those files only.
"""

from __future__ import annotations

import filecmp
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import ROOT, describe, subprocess_env

ALGORITHM = '''"""``pairwise``: all-gather by direct exchange, p - 1 steps, step k to rank + k (a recipe's example)."""

from __future__ import annotations

from collectives.schedules.algorithms import register
from collectives.schedules.rows import Layout, Schedule, StepList


@register("pairwise")
class Pairwise:
    @staticmethod
    def allgather(nranks: int, rank: int, layout: Layout, scratch_base: int = 0) -> Schedule:
        steps = StepList()
        for k in range(1, nranks):
            source = (rank - k) % nranks
            steps.step(send=((rank + k) % nranks, layout.block(rank)), recv=(source, layout.block(source)))
        return steps.build()
'''

TRANSPORT = '''"""``mpi-nb``: the MPI library's nonblocking collectives, each started and waited for at once."""

from __future__ import annotations

from collectives.memory.context import HOST
from collectives.transports import Transport, get, register


@register("mpi-nb")
class NonblockingMPI(Transport):
    def reason(self, call, context=HOST, comm_index=0):
        if context.on_device:
            return "mpi-nb runs on host buffers"
        return None if call.dtype in ("float32", "float64", "int32", "int64") else f"no MPI datatype for {call.dtype}"

    def collective(self, context, comm, collective, send, recv, count, dtype, op):
        from mpi4py import MPI

        from cython_ext.core import PyCallOp

        source = MPI.IN_PLACE if send is None else send
        reduction = {"sum": MPI.SUM, "prod": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX}[op]
        if collective == "allgather":
            start = lambda: comm.Iallgather(source, recv)  # noqa: E731
        elif collective == "reduce_scatter":
            start = lambda: comm.Ireduce_scatter_block(source, recv, reduction)  # noqa: E731
        else:
            start = lambda: comm.Iallreduce(source, recv, reduction)  # noqa: E731
        return PyCallOp(comm, lambda: start().Wait(), keepalive=(send, recv))

    def moved_by(self, context, op=None):
        return "mpi-nb"

    def library(self, context):
        return get("mpi").library(context)
'''

IMPLEMENTATION = '''"""``mpi-nb``: the nonblocking MPI collectives over the whole communicator."""

from __future__ import annotations

from collectives.impls import LibraryCollective, register


@register("mpi-nb")
class NonblockingMPI(LibraryCollective):
    transport = "mpi-nb"
'''

# (registry package, module name, source): the one file and the one import line of each recipe
RECIPES = [("collectives/schedules/algorithms", "pairwise", ALGORITHM),
           ("collectives/transports", "mpi_nb", TRANSPORT),
           ("collectives/impls", "mpi_nb", IMPLEMENTATION)]

SUITE = {
    "name": "recipes",
    "collectives": ["allgather", "reduce_scatter", "allreduce"],
    "implementations": ["mpi", "mpi-nb", {"impl": "pccl-flat", "algorithms": ["pairwise"]},
                        {"impl": "pccl-hier", "inter": ["pairwise"], "intra": ["mpi-nb"]}],
    "ranks": [4],
    "ranks_per_node": 2,
    "sizes": {"min": "8B", "max": "64KiB", "factor": 64},
    "dtype": "float32",
    "placement": ["out_of_place", "in_place"],
    "timing": {"mode": "sync", "warmup": 1, "iters": 3, "min_iters": 1, "budget_s": 0},
}


def _add_registry_line(init: Path, package: str, module: str) -> None:
    """Append ``module`` to the registry's import line at the bottom (``from PACKAGE import a, b``)."""
    lines = init.read_text().splitlines()
    at = max(i for i, line in enumerate(lines) if line.startswith(f"from {package} import "))
    names, _, comment = lines[at].removeprefix(f"from {package} import ").partition("  #")
    lines[at] = f"from {package} import {names.strip()}, {module}" + (f"  #{comment}" if comment else "")
    init.write_text("\n".join(lines) + "\n")


def _copy_of_the_project(target: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.c", "build")
    for folder in ("bench", "collectives", "cython_ext", "suites"):
        shutil.copytree(ROOT / folder, target / folder, ignore=ignore)


def _differing(copy: Path) -> set[str]:
    found = set()
    for folder in ("bench", "collectives"):
        for path in (copy / folder).rglob("*.py"):
            original = ROOT / path.relative_to(copy)
            if not original.exists() or not filecmp.cmp(path, original, shallow=False):
                found.add(str(path.relative_to(copy)))
    return found


@pytest.mark.mpi
def test_an_algorithm_a_transport_and_an_implementation_each_one_file_and_one_line(tmp_path: Path):
    copy = tmp_path / "project"
    _copy_of_the_project(copy)
    for package, module, source in RECIPES:
        (copy / package / f"{module}.py").write_text(source)
        _add_registry_line(copy / package / "__init__.py", package.replace("/", "."), module)
    assert _differing(copy) == {f"{package}/{name}" for package, module, _ in RECIPES
                                for name in (f"{module}.py", "__init__.py")}
    suite = tmp_path / "recipes.yaml"
    suite.write_text(yaml.safe_dump(SUITE))
    env = subprocess_env(1, {"PYTHONPATH": str(copy)})  # the copy before the editable install
    done = subprocess.run([sys.executable, "-m", "bench", "run", "sweep", str(suite), "--out", str(tmp_path / "out")],
                          cwd=copy, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, describe(done)
    table = pd.read_parquet(tmp_path / "out" / "results.parquet")
    assert set(table["impl"]) == {"mpi", "mpi-nb", "pccl-flat", "pccl-hier"}
    ran = table[table["status"] == "ok"]
    assert (ran["n_wrong"] == 0).all()
    nonblocking = table[table["impl"] == "mpi-nb"]
    assert (nonblocking["status"] == "ok").all() and set(nonblocking["transport"]) == {"mpi-nb"}
    flat = table[table["impl"] == "pccl-flat"]
    # the pairwise algorithm is an all-gather only: its other collectives are declined, with the reason
    assert (flat[flat["collective"] == "allgather"]["status"] == "ok").all()
    assert (flat[flat["collective"] != "allgather"]["status"] == "unsupported").all()
    hier = table[(table["impl"] == "pccl-hier") & (table["collective"] == "allgather")]
    assert (hier["status"] == "ok").all() and hier["transport"].str.contains("mpi-nb").all()
