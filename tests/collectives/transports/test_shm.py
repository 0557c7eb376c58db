"""The shared-memory transport: settings and cut-overs here; real data under mpiexec.

Under mpiexec (tests/mpi_scripts/check_shm.py) every collective, dtype and op, in and out of
place, at p = 2, 3, 4, 6, through each path (LL, copy-in pipeline, cma) with cut-overs and
chunks made small so that a few small counts cross them; pccl-hier with ``intra: shm`` on
virtual nodes; a peer that stalls or dies; and a sweep whose rows say which path ran.
"""

from __future__ import annotations

import json
import time
import weakref

import pandas as pd
import pytest
import yaml
from conftest import MPI_SCRIPTS, describe, run_cli, run_mpi, sweep_table

from collectives import transports
from collectives.call import CallSpec
from collectives.memory.context import HOST
from collectives.schedules.rows import COMM_INTRA, COMM_WORLD
from collectives.transports.shm import ops as shm

SCRIPT = MPI_SCRIPTS / "check_shm.py"
#: LL up to 256 B, one-shot to 512 B, cma from 8 KiB, 1 KiB copy chunks: the check's counts cross them all
SMALL_CUTOVERS = {shm.ENV_LL_MAX: "256", shm.ENV_ONESHOT_MAX: "512", shm.ENV_CMA_MIN: "8192", shm.ENV_CHUNK: "1024",
                  shm.ENV_TIMEOUT: "60"}


@pytest.fixture(autouse=True)
def no_mpi_init():
    import mpi4py

    mpi4py.rc.initialize = False


# -- without MPI ---------------------------------------------------------------------------------


def test_settings_defaults_and_errors():
    assert shm.settings({}) == shm.Settings(shm.DEFAULT_TIMEOUT_S, "auto", "auto", None, None, None,
                                            shm.DEFAULT_CHUNK)
    for env, message in [({shm.ENV_TIMEOUT: "soon"}, "is not a number"), ({shm.ENV_TIMEOUT: "0"}, "must be positive"),
                         ({shm.ENV_YIELD: "yes"}, "expected auto, 0, 1"), ({shm.ENV_CMA: "1"}, "expected auto, 0"),
                         ({shm.ENV_PATH: "nccl"}, "expected one of ll, oneshot, copy, cma"),
                         ({shm.ENV_LL_MAX: str(shm.LL_CAPACITY + 1)}, "exceeds the LL slot"),
                         ({shm.ENV_CHUNK: "1000"}, "multiple of 64")]:
        with pytest.raises(shm.ShmSetupError, match=message):
            shm.settings(env)


def test_paths_by_size():
    chosen = shm.settings({})
    assert shm.path_for("allreduce", 2, 2, 4, True, chosen) == "ll"  # 8 B
    assert shm.path_for("allreduce", 2, 16, 4, True, chosen) == "ll"  # 64 B
    assert shm.path_for("allreduce", 2, 17, 4, True, chosen) == "oneshot"  # one step through a copy buffer
    assert shm.path_for("allreduce", 2, 16 << 10, 4, True, chosen) == "oneshot"  # 64 KiB read from the peer
    assert shm.path_for("allreduce", 4, 16 << 10, 4, True, chosen) == "copy"  # 192 KiB from 3 peers: two-shot
    assert shm.path_for("allreduce", 2, (16 << 10) + 1, 4, True, chosen) == "copy"
    assert shm.path_for("allreduce", 2, 64 << 10, 4, True, chosen) == "cma"  # 256 KiB
    assert shm.path_for("allreduce", 2, 64 << 10, 4, False, chosen) == "copy"  # no cross-memory attach
    assert shm.path_for("allgather", 4, 16, 4, True, chosen) == "ll"  # the payload is the block
    assert shm.path_for("reduce_scatter", 4, 16, 4, True, chosen) == "copy"  # ... the whole input
    assert shm.path_for("allgather", 2, 2 << 10, 4, True, chosen) == "cma"  # 16 KiB total
    forced = shm.settings({shm.ENV_PATH: "ll"})
    assert shm.path_for("allreduce", 2, 64, 4, True, forced) == "ll"
    assert shm.path_for("allreduce", 2, shm.LL_CAPACITY, 4, True, forced) == "copy"  # does not fit the slot
    assert shm.path_for("allgather", 2, 1, 4, False, shm.settings({shm.ENV_PATH: "cma"})) == "copy"
    assert shm.path_for("allgather", 2, 1, 4, True, shm.settings({shm.ENV_PATH: "oneshot"})) == "copy"  # AR only
    assert shm.ll_payload("reduce_scatter", 3, 1, 2) == 12  # every segment starts on a word


def test_registered_as_intra_phase_and_implementation():
    from collectives.impls import get

    assert transports.get("shm").roles == ("intra",)
    assert get("shm").unsupported_reason(CallSpec("allreduce", 2, 2, "float16", "prod")) is None
    reason = get("pccl-hier").unsupported_reason(CallSpec("allgather", 4, 8, inter="shm", intra="ring", nnodes=2))
    assert reason == "inter phase by shm: it runs the intra phase only"


def test_refuses_device_buffers_and_ranks_on_several_hosts(monkeypatch):
    from collectives.schedules import topology
    from collectives.schedules.topology import Grid, Topology

    class Device:
        on_device = True

    call = CallSpec("allreduce", 4, 8)
    assert "host buffers only" in transports.get("shm").reason(call, Device())
    two_hosts = Topology(None, None, None, Grid(4, 2), False, ("a", "b"))
    monkeypatch.setattr(topology, "_MADE", [weakref.ref(two_hosts)])  # as topology() remembers what it made
    assert "on 2 hosts (a, b) and share no memory" in transports.get("shm").reason(call, HOST, COMM_WORLD)
    assert transports.get("shm").reason(call, HOST, COMM_INTRA) is None  # a node's ranks always do
    monkeypatch.setenv(shm.ENV_PATH, "bogus")
    assert "PCCL_SHM_PATH" in transports.get("shm").reason(CallSpec("allreduce", 2, 8), HOST)


# -- under mpiexec -------------------------------------------------------------------------------


def summary_of(result) -> dict:
    assert result.returncode == 0, describe(result)
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.mpi
@pytest.mark.parametrize("nranks", [2, 3, 4, 6])
def test_bit_exact_every_dtype_op_placement_and_path(nranks):
    summary = summary_of(run_mpi(nranks, SCRIPT, "full", env=SMALL_CUTOVERS, timeout=300))
    assert summary["failures"] == [] and summary["n_failures"] == 0
    # (dtype, op, placement, path) x counts: 4 for all-gather and reduce-scatter, 6 for all-reduce
    assert summary["checked"] == 5 * 4 * 2 * (1 + len(shm.PATHS)) * (4 + 4 + 6)  # path by size, then each forced
    assert summary["paths"] == ["cma", "copy", "ll", "oneshot"]
    # interleaved blocks: (all-gather in and out of place + reduce-scatter out of place) x 3 dtype/op x 3 paths
    # x 2 piece counts x 3 counts
    assert summary["interleaved"] == 3 * 3 * 3 * 2 * 3
    assert summary["cma"] == "on" or "process_vm_readv" in summary["cma"]


@pytest.mark.mpi
@pytest.mark.parametrize("nranks,per_node", [(4, 2), (6, 2), (6, 3)])
def test_hier_intra_phase_through_shared_memory(nranks, per_node):
    """pccl-hier with intra shm (its phases on the chunks where they lie, no packing) on hosts of 2x2, 3x2
    and 2x3, every inter phase, bit-exact through every shm path."""
    summary = summary_of(run_mpi(nranks, SCRIPT, "hier", str(per_node), env=SMALL_CUTOVERS, timeout=180))
    assert summary["failures"] == [] and summary["nodes"] == nranks // per_node
    # all-gather and reduce-scatter: 3 dtype/op x inter rd, ring, mpi (no float16 for mpi), 4 counts; all-reduce:
    # and inter rdfull, 6 counts; each in and out of place
    assert summary["checked"] == 2 * 2 * (3 * 3 - 1) * 4 + 2 * (3 * 4 - 1) * 6
    assert {"mpi/shm:ll", "mpi/shm:copy", "mpi/shm:cma"} <= set(summary["transports"])


@pytest.mark.mpi
def test_a_peer_that_never_calls_times_out_with_the_reason():
    started = time.monotonic()
    result = run_mpi(2, SCRIPT, "peer-stalls", env={shm.ENV_TIMEOUT: "2"}, timeout=60)
    assert result.returncode != 0
    report = json.loads(next(line for line in result.stdout.splitlines() if line.startswith("{")))
    assert report["error"].startswith("ShmTimeout: no ") and "from rank 1 within 2 s" in report["error"], report
    assert "PCCL_SHM_TIMEOUT_S" in report["error"] and report["waited_s"] < 10
    assert time.monotonic() - started < 40


@pytest.mark.mpi
def test_a_peer_that_dies_mid_call_ends_the_job():
    started = time.monotonic()
    result = run_mpi(2, SCRIPT, "peer-exits", env={shm.ENV_TIMEOUT: "2"}, timeout=60)
    assert result.returncode != 0, describe(result)
    assert time.monotonic() - started < 40


SUITE = {
    "name": "shm-e2e",
    "collectives": ["allgather", "reduce_scatter", "allreduce"],
    "implementations": ["mpi", "shm", {"impl": "pccl-hier", "inter": ["rd"], "intra": ["shm"]}],
    "ranks": [2, 4],
    "ranks_per_node": 2,
    "sizes": {"min": "8B", "max": "1MiB", "factor": 64},
    "dtype": ["float16", "int64"],
    "op": "max",
    "placement": ["out_of_place", "in_place"],
    "timing": {"mode": "sync", "warmup": 2, "iters": 5, "min_iters": 1, "budget_s": 0},
    "timeout_s": 120,
}


@pytest.mark.mpi
def test_sweep_rows_say_which_path_ran(tmp_path):
    frame = sweep_table(tmp_path, SUITE, timeout=240)
    flat = frame[frame["impl"] == "shm"]
    assert (flat["status"] == "ok").all() and (flat["n_wrong"] == 0).all(), flat[["status", "error"]]
    assert {"shm:ll", "shm:oneshot", "shm:copy"} <= set(flat["transport"]) <= {
        "shm:ll", "shm:oneshot", "shm:copy", "shm:cma"}  # cma where cross-memory attach works
    eight = flat[(flat["bytes_total"] == 8) & (flat["collective"] == "allreduce")]
    assert set(eight["transport"]) == {"shm:ll"}
    hier = frame[frame["impl"] == "pccl-hier"]
    assert (hier["status"] == "ok").all()
    # the row names what its own ops ran: an all-reduce below one element per rank has no phases, only
    # its tail: one shm all-reduce within the node (LL), the rail's doubling over MPI
    count = hier["bytes_total"] // hier["dtype"].map({"float16": 2, "int64": 8})
    no_phases = (hier["collective"] == "allreduce") & (count < hier["nranks"])
    assert hier[~no_phases]["transport"].str.contains("shm:").all() and no_phases.any()
    assert set(hier[no_phases]["transport"]) == {"mpi/shm:ll"}
    mpi = frame[frame["impl"] == "mpi"]
    assert (mpi[mpi["dtype"] == "float16"]["status"] == "unsupported").all()  # shm reduces float16, MPI cannot


def test_oversubscription_counts_the_hosts_ranks_not_the_virtual_nodes():
    import os

    cores = os.cpu_count() or 1
    assert not shm._oversubscribed(cores, {})
    assert shm._oversubscribed(cores + 1, {})
    assert shm._oversubscribed(2, {"MPI_LOCALNRANKS": str(cores + 2)})  # a virtual node of 2 on a full host
    assert not shm._oversubscribed(1, {"OMPI_COMM_WORLD_LOCAL_SIZE": "x"})


@pytest.mark.mpi
def test_a_rank_that_dies_in_a_sweep_ends_its_launch_with_the_cells_marked(tmp_path):
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump({**SUITE, "implementations": ["shm"], "ranks": [2], "dtype": "float32",
                                     "placement": "out_of_place", "timeout_s": 30}))
    started = time.monotonic()
    result = run_cli("run", "sweep", suite, "--out", tmp_path / "out", timeout=120,
                     env={"PCCL_BENCH_FAULT": "crash:rank=1:cell=4", shm.ENV_TIMEOUT: "5"})
    assert result.returncode == 3, describe(result)
    frame = pd.read_parquet(tmp_path / "out" / "results.parquet")
    assert list(frame["status"]) == ["ok"] * 4 + ["failed"] * 5, frame[["status", "error"]]
    assert frame[frame["status"] == "failed"]["error"].str.contains("exited with 17").all()
    assert time.monotonic() - started < 60


@pytest.mark.mpi
def test_without_cross_memory_attach_the_copy_path_runs_and_says_so():
    summary = summary_of(run_mpi(2, SCRIPT, "full", env={**SMALL_CUTOVERS, shm.ENV_CMA: "0"}, timeout=120))
    assert summary["failures"] == [] and summary["n_failures"] == 0
    assert summary["paths"] == ["copy", "ll", "oneshot"] and summary["cma"] == "PCCL_SHM_CMA=0"
