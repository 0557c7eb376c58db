"""``pip install ".[mpich]"`` the way Python users install tools: pip's default isolated build,
in a fresh virtual environment, on a machine with no MPI compiler wrapper and no $MPICC; then a
small sweep from that environment. Needs the package index (PyPI or a mirror) and 1-3 minutes.

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

import pytest
from conftest import ROOT, describe

BACKEND_PATH = ROOT / "buildsys" / "pccl_backend.py"

#: what a copy of the checkout leaves out: build outputs and local state, never sources
_LOCAL_STATE = shutil.ignore_patterns(".venv", "build", "*.egg-info", "__pycache__", ".git", "*.so", ".pytest_cache",
                                      ".ruff_cache", ".hypothesis")


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
    monkeypatch.delenv("MPICC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    assert backend._with_mpich(["cython"]) == ["cython", backend.MPICH_WHEEL]

    monkeypatch.setenv("MPICC", "cc")  # Cray: the system MPI, never the wheel
    assert backend._with_mpich(["cython"]) == ["cython"]

    monkeypatch.delenv("MPICC")
    on_path = tmp_path / "bin"
    on_path.mkdir()
    (on_path / "mpicc").write_text("#!/bin/sh\n")
    (on_path / "mpicc").chmod(0o755)
    monkeypatch.setenv("PATH", str(on_path))
    assert backend._with_mpich([]) == []


def test_backend_is_the_one_pyproject_names():
    tomllib = pytest.importorskip("tomllib")  # 3.11+
    system = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
    assert system["build-backend"] == "pccl_backend" and system["backend-path"] == ["buildsys"]
    assert any(req.startswith("setuptools>=77") for req in system["requires"]), "SPDX license needs 77"


def _path_without_mpi() -> str:
    """PATH without any folder that holds an MPI compiler wrapper: a machine with no MPI."""
    folders = [folder for folder in os.environ.get("PATH", "").split(os.pathsep)
               if folder and not any((Path(folder) / name).exists() for name in ("mpicc", "mpicc.mpich"))]
    return os.pathsep.join(folders)


@pytest.mark.install
def test_pip_install_mpich_extra_in_a_fresh_venv_then_sweep(tmp_path: Path):
    path = _path_without_mpi()
    if shutil.which("cc", path=path) is None and shutil.which("gcc", path=path) is None:
        pytest.skip("the C compiler shares a folder with an MPI wrapper here; no MPI-free PATH to build on")
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=not_sources)
    for generated in source.glob("cython_ext/*.c"):
        generated.unlink()
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    env = {name: value for name, value in os.environ.items()
           if name not in ("MPICC", "PYTHONPATH", "VIRTUAL_ENV", "PIP_NO_BUILD_ISOLATION", "PIP_REQUIRE_VIRTUALENV")}
    env["PATH"] = path
    install = subprocess.run([str(python), "-m", "pip", "install", f"{source}[mpich]"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=900)
    assert install.returncode == 0, describe(install)
    # Run inside the copied checkout, as a user would: the jobs must still load the installed build.
    sweep = subprocess.run([str(env_dir / "bin" / "pccl-bench"), "run", "sweep", "smoke", "--set", "ranks=[2]",
                            "--set", "sizes.max=64", "--out", str(tmp_path / "run")],
                           cwd=source, env=env, capture_output=True, text=True, timeout=300)
    assert sweep.returncode == 0, describe(sweep)
    assert "ok ->" in sweep.stdout and "failed" not in sweep.stdout, describe(sweep)
    assert (tmp_path / "run" / "results.parquet").exists()
    # Outside any checkout (pipx-style), the suites come with the wheel.
    listed = subprocess.run([str(env_dir / "bin" / "pccl-bench"), "suites", "list"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and "smoke" in listed.stdout, describe(listed)
    assert "share/pccl-bench/suites" in "".join(listed.stdout.split()), describe(listed)  # rich wraps the title
