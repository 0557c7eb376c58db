"""The compiled extensions must call the MPI library mpi4py loaded.

On the GPU machine (Ubuntu's Python, a system Open MPI in /usr/lib/x86_64-linux-gnu) the build
bound cython_ext to Open MPI while mpi4py loaded the wheel's MPICH; every job then aborted with
"MPI_Allgather() called before MPI_INIT". These tests pin the build fix and the run-time check.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from collectives.libraries import mpi_library as mpiinfo
from cython_ext import core

OPEN_MPI_TEXT = "Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4, May 26, 2022\0"


@pytest.fixture
def fresh_check():
    mpiinfo.extension_mpi_mismatch.cache_clear()
    yield
    mpiinfo.extension_mpi_mismatch.cache_clear()


def test_compiled_calls_reach_the_library_mpi4py_loaded(fresh_check):
    from mpi4py import MPI

    assert mpiinfo.extension_mpi_mismatch() is None
    assert core.linked_mpi_library_version().split()[0] == MPI.Get_library_version().split()[0]


def test_a_foreign_library_is_named_with_the_fix(fresh_check, monkeypatch):
    monkeypatch.setattr(core, "linked_mpi_library_version", lambda: OPEN_MPI_TEXT)
    why = mpiinfo.extension_mpi_mismatch()
    loaded_first_line = " ".join(mpiinfo.mpi_library_text().splitlines()[0].split())
    assert why is not None
    assert "call Open MPI v4.1.4, package: Debian OpenMPI" in why and "\0" not in why
    assert f"mpi4py loaded {loaded_first_line}" in why
    assert "rebuild" in why and "MPICC" in why


def test_padding_and_the_terminating_nul_are_not_a_mismatch(fresh_check, monkeypatch):
    loaded = mpiinfo.mpi_library_text()
    monkeypatch.setattr(core, "linked_mpi_library_version", lambda: "  " + loaded.replace(" ", "   ") + "\0")
    assert mpiinfo.extension_mpi_mismatch() is None


def test_worker_fails_every_cell_of_a_launch_with_a_foreign_library():
    """The launch reports the cause in each row instead of aborting inside the first call."""
    script = (
        "from cython_ext import core\n"
        f"core.linked_mpi_library_version = lambda: {OPEN_MPI_TEXT!r}\n"
        "import json\nfrom mpi4py import MPI\nfrom bench.rank.worker import launch_facts\n"
        "topo, facts = launch_facts(MPI.COMM_WORLD, None)\n"
        "print(json.dumps({'topo': topo is None, **facts.columns(), **facts.failure().columns()}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    import json

    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["topo"] is True and facts["status"] == "failed" and facts["iters"] == 0
    assert facts["error"].startswith("build: the compiled extensions (cython_ext) call Open MPI v4.1.4")


FAKE_LIBMPI = r"""
#include <string.h>
int MPI_Get_library_version(char *version, int *length) {
    strcpy(version, "a foreign MPI that must not be linked");
    *length = (int)strlen(version);
    return 0;
}
"""


def _needed(shared_object: Path) -> list[str]:
    shown = subprocess.run(["readelf", "-d", str(shared_object)], capture_output=True, text=True, check=True)
    return [line.split("[", 1)[1].rstrip("]") for line in shown.stdout.splitlines() if "(NEEDED)" in line]


@pytest.mark.skipif(shutil.which("readelf") is None or shutil.which("gcc") is None, reason="needs gcc and readelf")
def test_build_links_the_wrappers_libmpi_before_any_other_library_folder(tmp_path):
    """A folder setuptools puts on the link line (a shared Python's LIBDIR) holding another libmpi.so
    must not win over the MPI compiler wrapper's own: build_ext -L adds exactly such a folder."""
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "fake.c").write_text(FAKE_LIBMPI)
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libmpi.so.99", "-o", str(foreign / "libmpi.so"),
                    str(foreign / "fake.c")], check=True)
    # A copy of what setup.py reads: a build writes cython_ext/_build_info.py and the generated C beside
    # its sources, and this -O0 build must not stand in the checkout's record for its -O3 extensions.
    source = tmp_path / "source"
    for part in ("setup.py", "buildsys", "cython_ext", "collectives/libraries/mpi_library.py"):
        if (ROOT / part).is_dir():
            shutil.copytree(ROOT / part, source / part,
                            ignore=shutil.ignore_patterns("*.so", "*.c", "_build_info.py", "__pycache__"))
        else:
            (source / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / part, source / part)
    build = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "-j", "2", "--library-dirs", str(foreign),
         "--build-lib", str(tmp_path / "lib"), "--build-temp", str(tmp_path / "temp")],
        cwd=source, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PCCL_BENCH_OPT": "-O0"},  # the link line is the point: -O3 compiles 5-10x longer
    )
    assert build.returncode == 0, build.stderr[-3000:]
    built = next((tmp_path / "lib" / "cython_ext").glob("core.*.so"))
    needed = _needed(built)
    in_use = next(name for name in _needed(next((ROOT / "cython_ext").glob("core.*.so"))) if "mpi" in name)
    assert "libmpi.so.99" not in needed
    assert in_use in needed, needed
