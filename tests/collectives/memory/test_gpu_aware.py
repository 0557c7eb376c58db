"""GPU-aware MPI detection (the staging decision) without a GPU: override, library query, switches."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys

import pytest
from conftest import ROOT, describe, subprocess_env

from collectives.memory import gpu_aware
from collectives.memory.gpu_aware import GpuAwareness, decide, env_switch, query_library


class Query:
    """Stands in for a ctypes function of libmpi; ``flag`` is written through the pointer argument."""

    def __init__(self, result: int, flag: int | None = None) -> None:
        self.result, self.flag, self.calls = result, flag, []

    def __call__(self, *args):
        self.calls.append(args)
        if self.flag is not None:
            ctypes.cast(args[1], ctypes.POINTER(ctypes.c_int))[0] = self.flag
        return self.result


class Library:
    """A libmpi with only the symbols given."""

    def __init__(self, **symbols) -> None:
        self.__dict__.update(symbols)


def test_override_wins():
    assert decide("yes", (False, "query"), (False, "switch")) == GpuAwareness(
        True, "override PCCL_BENCH_GPU_AWARE=yes (suite gpu_aware)")
    assert decide(" NO ", (True, "query"), (True, "switch")).aware is False
    with pytest.raises(ValueError, match="expected one of"):
        decide("maybe", (None, ""), (None, ""))


def test_library_answer_before_switches():
    assert decide("auto", (True, "MPIX_GPU_query_support(...) = 1"), (False, "switch")) == GpuAwareness(
        True, "MPIX_GPU_query_support(...) = 1")
    assert decide("auto", (None, "no query"), (True, "Cray MPICH with MPICH_GPU_SUPPORT_ENABLED=1")).aware


def test_default_is_staged():
    decided = decide("auto", (None, "the MPI library has no GPU-support query"), (None, ""))
    assert decided.aware is False and decided.transport == "mpi-staged"
    assert "staging through pinned host memory" in decided.how and "no GPU-support query" in decided.how
    assert GpuAwareness(True, "").transport == "mpi-gpu-aware"


@pytest.mark.parametrize(("library", "env", "answer"), [
    ("Cray MPICH", {"MPICH_GPU_SUPPORT_ENABLED": "1"}, True),
    ("Cray MPICH", {"MPICH_GPU_SUPPORT_ENABLED": "0"}, False),
    ("Cray MPICH", {}, False),
    ("MPICH", {"MPIR_CVAR_ENABLE_GPU": "0"}, False),
    ("MPICH", {"MPICH_GPU_SUPPORT_ENABLED": "1"}, None),  # a Cray switch means nothing to MPICH
    ("Open MPI", {}, None),
])
def test_env_switches(library, env, answer):
    assert env_switch(library, env)[0] is answer


def test_mpich_query():
    query = Query(0, flag=1)
    assert query_library("rocm", Library(MPIX_GPU_query_support=query)) == (
        True, "MPIX_GPU_query_support(MPIX_GPU_SUPPORT_HIP) = 1")
    assert query.calls[0][0] == 2  # MPIX_GPU_SUPPORT_HIP
    answer, how = query_library("cuda", Library(MPIX_GPU_query_support=Query(0, flag=0)))
    assert (answer, how) == (False, "MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA) = 0")


def test_open_mpi_query_and_none():
    assert query_library("cuda", Library(MPIX_Query_cuda_support=Query(1))) == (True, "MPIX_Query_cuda_support() = 1")
    assert query_library("rocm", Library(MPIX_Query_rocm_support=Query(0)))[0] is False
    # an MPICH query that fails falls through to the next one
    library = Library(MPIX_GPU_query_support=Query(1, flag=1), MPIX_Query_cuda_support=Query(0))
    assert query_library("cuda", library) == (False, "MPIX_Query_cuda_support() = 0")
    assert query_library("cuda", Library())[0] is None


def test_detect_reads_the_override_from_env():
    decided = gpu_aware.detect("cuda", {"PCCL_BENCH_GPU_AWARE": "yes"}, library=Library())
    assert decided.aware and "override" in decided.how


def test_probe_on_the_loaded_mpi():
    """``python -m collectives.memory.gpu_aware`` initialises MPI and asks the real library (no GPU here)."""
    done = subprocess.run([sys.executable, "-m", "collectives.memory.gpu_aware", "cuda"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=subprocess_env(1, {"PCCL_BENCH_GPU_AWARE": "auto"}))
    assert done.returncode == 0, describe(done)
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["error"] == "" and answer["device"] == "cuda" and answer["how"]
    if answer["library"].startswith("MPICH"):  # the PyPI wheel: the query exists and says no GPU support
        assert answer["how"] == "MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA) = 0"
        assert answer["aware"] is False and "libmpi" in answer["libmpi"]
