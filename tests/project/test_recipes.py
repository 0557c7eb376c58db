"""docs/ARCHITECTURE.md's recipes followed once: each new piece is the files its recipe names and nothing else.

A copy of the library and the harness gets exactly what the recipes name, and a sweep of that copy
then runs the new pieces as a user's suite names them, every cell checked bit for bit; the copy
differs from the repository in the named files only.

- an algorithm (a pairwise all-gather: one module in collectives/schedules/algorithms/ and its import
  line), a transport (the MPI library's nonblocking collectives: one module in collectives/transports/
  and its import line) and the implementation over it (one module in collectives/impls/ and its import
  line): flat, as a pccl-hier phase, as an implementation;
- a collective (a broadcast: one module in collectives/spec/ and its import line), run by the MPI
  library (the spec's ``mpi_call``) and, with an algorithm that has a schedule of its name (a binomial
  tree: the algorithm recipe again), by pccl-flat; every other implementation declines it by name;
- a memory kind (host buffers each on pages of its own: a backend in collectives/memory/backends.py,
  one module in collectives/memory/ with its context and ``@register``, and its import line), which a
  suite's ``device:`` selects, run by every host implementation;
- a launcher (Flux: one module in bench/driver/launchers/ and its import line), swept through a stand-in
  ``flux`` that starts the same job with mpiexec.
"""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import ROOT, describe, find_mpiexec, subprocess_env

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

COLLECTIVE = '''"""Broadcast (MPI_Bcast): rank 0's ``count`` elements on every rank (a recipe's example).

Out of place every rank has a send buffer of its own data, and only the root's may arrive; in place
the root's data starts in its receive buffer. nccl-tests' size is ``count``, its bus bandwidth the
algorithm bandwidth (factor 1)."""

from __future__ import annotations

import numpy as np

from collectives.dtypes import numpy_dtype
from collectives.spec import Collective, register
from collectives.spec.inputs import GATHER_PERIOD, SENTINEL, gather_value, periodic

ROOT = 0


@register
class Broadcast(Collective):
    name = "broadcast"
    phases = ()  # no hierarchical composition
    reduces = False

    def buffer_counts(self, nranks, count, in_place):
        return (0 if in_place else count), count

    def total_count(self, nranks, count):
        return count

    def count_from_recv(self, nranks, recv_count, in_place):
        return recv_count

    def busbw_factor(self, nranks):
        return 1.0

    def inputs(self, call, rank):
        recv = np.full(call.count, SENTINEL, dtype=numpy_dtype(call.dtype))
        own = periodic(lambda index: gather_value(rank, index), 0, call.count, GATHER_PERIOD, recv.dtype)
        if call.in_place:
            if rank == ROOT:
                recv[:] = own
            return None, recv
        return own, recv

    def expected(self, call, rank, xp=np):
        return periodic(lambda index: gather_value(ROOT, index), 0, call.count, GATHER_PERIOD,
                        numpy_dtype(call.dtype), xp)

    def mpi_call(self, comm, send, recv, count, op):
        copy = send is not None and comm.Get_rank() == ROOT

        def call():
            if copy:
                recv[:] = send
            comm.Bcast(recv, root=ROOT)

        return call
'''

BROADCAST_ALGORITHM = '''"""``binomial``: broadcast down a binomial tree, ceil(log2 p) steps, any p (an example)."""

from __future__ import annotations

from collectives.schedules.algorithms import register
from collectives.schedules.algorithms.tree import BinomialTree
from collectives.schedules.rows import Block, Schedule, StepList


@register("binomial")
class Binomial:
    @staticmethod
    def broadcast(nranks: int, rank: int, source: Block, result: Block, scratch_base: int = 0) -> Schedule:
        steps = StepList()
        if rank == 0 and source != result:  # out of place the root's data starts in its send buffer
            steps.step(copy=(source, result))
        else:
            steps.step()
        return steps.build().then(BinomialTree.bcast(nranks, rank, result))
'''

BACKEND = '''

class MmapBackend(HostBackend):
    """Host memory on pages of its own: every buffer an anonymous mmap, page-aligned (a recipe's example)."""

    kind = "host-mmap"

    def empty(self, count: int, dtype) -> np.ndarray:
        import mmap

        dtype = np.dtype(dtype)
        return np.frombuffer(mmap.mmap(-1, count * dtype.itemsize), dtype=dtype) if count else np.empty(0, dtype)

    def from_host(self, array: np.ndarray) -> np.ndarray:
        out = self.empty(array.size, array.dtype)
        out[...] = array
        return out

    pinned = empty
'''

MEMORY_KIND = '''"""``host-mmap``: host buffers each on pages of its own, run as host buffers are (an example)."""

from __future__ import annotations

from collectives.memory import register
from collectives.memory.backends import MmapBackend
from collectives.memory.context import HostContext

MMAP = HostContext(device="host-mmap", backend=MmapBackend())


@register("host-mmap")
def open_mmap(topo, device: str) -> HostContext:
    return MMAP
'''

LAUNCHER = '''"""``--launcher flux``: one ``flux run`` per launch, inside a Flux instance (a recipe's example)."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import ClassVar

from bench.errors import BadInput
from bench.driver.launchers import register
from bench.driver.launchers.base import Launcher


@register
@dataclass(frozen=True)
class Flux(Launcher):
    name: ClassVar[str] = "flux"

    @classmethod
    def make(cls, flavour, requested, slurm):
        flux = shutil.which("flux")
        if flux is None:
            raise BadInput("--launcher", "flux: not found on PATH")
        return cls(flavour, flux, requested)

    @classmethod
    def is_here(cls):
        return bool(os.environ.get("FLUX_URI"))  # inside a Flux instance

    def argv(self, job):
        return [self.program, "run", f"-N{job.placement.nhosts}", f"-n{job.nranks}",
                *(f"--env={key}={value}" for key, value in job.env.items())]
'''

#: a stand-in for Flux on a machine without it: ``flux run -N -n --env=K=V PROGRAM`` as an mpiexec job
FAKE_FLUX = '''#!{python}
import os, sys
args = sys.argv[2:]
nranks = 1
while args and args[0].startswith("-"):
    flag = args.pop(0)
    if flag.startswith("-n"):
        nranks = int(flag[2:])
    elif flag.startswith("--env="):
        key, _, value = flag[6:].partition("=")
        os.environ[key] = value
os.execv({mpiexec!r}, [{mpiexec!r}, "-n", str(nranks), *args])
'''

# (registry package, module name, source): the one file and the one import line of each recipe
RECIPES = [("collectives/schedules/algorithms", "pairwise", ALGORITHM),
           ("collectives/transports", "mpi_nb", TRANSPORT),
           ("collectives/impls", "mpi_nb", IMPLEMENTATION)]
COLLECTIVE_RECIPES = [("collectives/spec", "broadcast", COLLECTIVE),
                      ("collectives/schedules/algorithms", "binomial", BROADCAST_ALGORITHM)]
MEMORY_RECIPE = [("collectives/memory", "mmap_host", MEMORY_KIND)]
LAUNCHER_RECIPE = [("bench/driver/launchers", "flux", LAUNCHER)]

TIMING = {"mode": "sync", "warmup": 1, "iters": 3, "min_iters": 1, "budget_s": 0}
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
    "timing": TIMING,
}
#: 3 ranks (a binomial tree of p not a power of two) and 4 on two nodes (pccl-hier's turn to decline)
BROADCAST_SUITE = {**SUITE, "name": "broadcast", "collectives": ["broadcast", "allgather"],
                   "implementations": ["mpi", {"impl": "pccl-flat", "algorithms": ["binomial", "ring"]}, "pccl-hier",
                                       "shm"],
                   "ranks": [3, 4], "ranks_per_node": None}
MEMORY_SUITE = {**SUITE, "name": "host-mmap", "device": "host-mmap",
                "implementations": ["mpi", {"impl": "pccl-flat", "algorithms": ["ring"]}, "pccl-hier", "shm"]}


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


def _follow(copy: Path, recipes: list[tuple[str, str, str]]) -> set[str]:
    """Each recipe's module and its registry line written into ``copy``; the files that changed."""
    for package, module, source in recipes:
        (copy / package / f"{module}.py").write_text(source)
        _add_registry_line(copy / package / "__init__.py", package.replace("/", "."), module)
    return {f"{package}/{name}" for package, module, _ in recipes for name in (f"{module}.py", "__init__.py")}


def _differing(copy: Path) -> set[str]:
    found = set()
    for folder in ("bench", "collectives"):
        for path in (copy / folder).rglob("*.py"):
            original = ROOT / path.relative_to(copy)
            if not original.exists() or not filecmp.cmp(path, original, shallow=False):
                found.add(str(path.relative_to(copy)))
    return found


def _run_in(copy: Path, argv: list[str], nranks: int = 1) -> subprocess.CompletedProcess:
    env = subprocess_env(nranks, {"PYTHONPATH": str(copy)})  # the copy before the editable install
    return subprocess.run([sys.executable, *argv], cwd=copy, env=env, capture_output=True, text=True, timeout=300)


def _sweep(copy: Path, tmp_path: Path, suite: dict) -> pd.DataFrame:
    """Sweep ``suite`` in the copy; its table, every cell that ran checked bit for bit."""
    path, out = tmp_path / f"{suite['name']}.yaml", tmp_path / f"out-{suite['name']}"
    path.write_text(yaml.safe_dump({name: value for name, value in suite.items() if value is not None}))
    done = _run_in(copy, ["-m", "bench", "run", "sweep", str(path), "--out", str(out)], max(suite["ranks"]))
    assert done.returncode == 0, describe(done)
    table = pd.read_parquet(out / "results.parquet")
    ran = table[table["status"] == "ok"]
    assert len(ran) and (ran["n_wrong"] == 0).all()
    return table


@pytest.mark.mpi
def test_an_algorithm_a_transport_and_an_implementation_each_one_file_and_one_line(tmp_path: Path):
    copy = tmp_path / "project"
    _copy_of_the_project(copy)
    assert _differing(copy) == set()
    named = _follow(copy, RECIPES)
    assert _differing(copy) == named
    table = _sweep(copy, tmp_path, SUITE)
    assert set(table["impl"]) == {"mpi", "mpi-nb", "pccl-flat", "pccl-hier"}
    nonblocking = table[table["impl"] == "mpi-nb"]
    assert (nonblocking["status"] == "ok").all() and set(nonblocking["transport"]) == {"mpi-nb"}
    flat = table[table["impl"] == "pccl-flat"]
    # the pairwise algorithm is an all-gather only: its other collectives are declined, with the reason
    assert (flat[flat["collective"] == "allgather"]["status"] == "ok").all()
    assert (flat[flat["collective"] != "allgather"]["status"] == "unsupported").all()
    hier = table[(table["impl"] == "pccl-hier") & (table["collective"] == "allgather")]
    assert (hier["status"] == "ok").all() and hier["transport"].str.contains("mpi-nb").all()


@pytest.mark.mpi
def test_a_collective_is_one_spec_file_and_one_line(tmp_path: Path):
    copy = tmp_path / "project"
    _copy_of_the_project(copy)
    named = _follow(copy, COLLECTIVE_RECIPES)
    assert _differing(copy) == named
    table = _sweep(copy, tmp_path, BROADCAST_SUITE)
    broadcast = table[table["collective"] == "broadcast"]
    ran = broadcast[broadcast["status"] == "ok"]
    # the MPI library's MPI_Bcast and the binomial schedule, both placements, 3 and 4 ranks, every size
    assert set(zip(ran["impl"], ran["algorithm"], strict=True)) == {("mpi", "native"), ("pccl-flat", "binomial")}
    assert ran.groupby(["impl", "placement", "nranks"]).size().eq(3).all() and len(ran) == 2 * 2 * 2 * 3
    assert (ran["busbw_gbps"] == ran["algbw_gbps"]).all() and (ran["bytes_total"] == ran["bytes_per_rank"]).all()
    declined = broadcast[broadcast["status"] != "ok"]
    assert (declined["status"] == "unsupported").all()
    reasons = dict(zip(declined["impl"] + ":" + declined["algorithm"], declined["error"], strict=False))
    assert reasons == {"pccl-flat:ring": "algorithm 'ring' has no broadcast schedule",
                       "pccl-hier:hier": "no hierarchical broadcast: pccl-hier composes allgather, reduce_scatter, "
                                         "allreduce",
                       "shm:native": "shm has no broadcast (it runs allgather, reduce_scatter, allreduce)"}
    # the collectives that were there run as before beside it
    allgather = table[(table["collective"] == "allgather") & (table["impl"] != "pccl-flat")]
    assert (allgather["status"] == "ok").all()


@pytest.mark.mpi
def test_a_memory_kind_is_a_backend_a_context_module_and_one_line(tmp_path: Path):
    copy = tmp_path / "project"
    _copy_of_the_project(copy)
    backends = copy / "collectives/memory/backends.py"
    backends.write_text(backends.read_text() + BACKEND)
    named = {"collectives/memory/backends.py", *_follow(copy, MEMORY_RECIPE)}
    assert _differing(copy) == named
    # the suite's device: value selects it, and the job's buffers are the backend's
    opened = _run_in(copy, ["-c", "import mmap, numpy; from bench.rank.cell import context_for; "
                                  "from collectives.memory import get; context = context_for(None, 'host-mmap'); "
                                  "buffer = context.backend.from_host(numpy.arange(9.0)); "
                                  "assert isinstance(buffer.base.obj, mmap.mmap) and buffer.sum() == 36; "
                                  "assert context.on_device is get('host-mmap').on_device is False"])
    assert opened.returncode == 0, describe(opened)
    table = _sweep(copy, tmp_path, MEMORY_SUITE)
    assert set(table["device"]) == {"host-mmap"} and (table["status"] == "ok").all()
    assert set(table["impl"]) == {"mpi", "pccl-flat", "pccl-hier", "shm"} and len(table) == 4 * 3 * 2 * 3


@pytest.mark.mpi
def test_a_launcher_is_one_file_and_one_line(tmp_path: Path):
    """Flux: its argv and when ``auto`` takes it, in one class; a real sweep then runs through it (a
    stand-in ``flux`` on PATH that starts the same job with mpiexec), every cell checked, and the
    run records the launcher and the exact ``flux run`` command."""
    copy = tmp_path / "project"
    _copy_of_the_project(copy)
    assert _differing(copy) == set()
    assert _differing(copy) | _follow(copy, LAUNCHER_RECIPE) == _differing(copy) == {
        "bench/driver/launchers/flux.py", "bench/driver/launchers/__init__.py"}
    tools = tmp_path / "tools"
    tools.mkdir()
    flux = tools / "flux"
    flux.write_text(FAKE_FLUX.format(python=sys.executable, mpiexec=find_mpiexec()))
    flux.chmod(0o755)
    suite = {**SUITE, "name": "flux", "implementations": ["mpi", {"impl": "pccl-flat", "algorithms": ["ring"]}],
             "ranks": [2], "ranks_per_node": None}
    path, out = tmp_path / "flux.yaml", tmp_path / "out-flux"
    path.write_text(yaml.safe_dump({name: value for name, value in suite.items() if value is not None}))
    env = subprocess_env(2, {"PYTHONPATH": str(copy), "PATH": f"{tools}:{os.environ['PATH']}"})
    dry = subprocess.run([sys.executable, "-m", "bench", "run", "sweep", str(path), "--launcher", "flux", "--dry-run"],
                         cwd=copy, env=env, capture_output=True, text=True, timeout=120)
    assert dry.returncode == 0 and f"{flux} run -N1 -n2 --env=" in dry.stdout, describe(dry)
    done = subprocess.run([sys.executable, "-m", "bench", "run", "sweep", str(path), "--launcher", "flux", "--out",
                           str(out)], cwd=copy, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, describe(done)
    table = pd.read_parquet(out / "results.parquet")
    assert set(table["status"]) == {"ok"} and (table["n_wrong"] == 0).all() and len(table) == 36
    meta = json.loads((out / "meta.json").read_text())
    assert meta["launcher"] == "flux"
    assert all(record["argv"][:4] == [str(flux), "run", "-N1", "-n2"] for record in meta["launches"].values())
