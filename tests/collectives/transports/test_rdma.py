"""The one-sided (UCX) path: lane parsing and settings here; real data under mpiexec.

Multi-rank tests move data through UCX on this machine, over shared memory (UCX_TLS=sm)
and over tcp on loopback only (UCX_TLS=tcp, UCX_NET_DEVICES=lo), bit for bit, in and out
of place, with the setup-once property checked (tests/mpi_scripts/check_rdma.py). They
skip, saying why, only where the UCX binding was not built.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from conftest import MPI_SCRIPTS, describe, run_mpi, sweep_table

from collectives.call import CallSpec
from collectives.transports.rdma import ops as rdma

SCRIPT = MPI_SCRIPTS / "check_rdma.py"


@pytest.fixture(scope="module")
def binding():
    """The UCX binding, importable without initialising MPI in the pytest process; skip if not built."""
    import mpi4py

    mpi4py.rc.initialize = False
    reason = rdma.binding_reason()
    if reason:
        pytest.skip(reason)
    from cython_ext import ucx

    return ucx


def wheel_library_env() -> dict[str, str]:
    """Run a job on the rdma extra's UCX (libucx wheel) rather than the one MPI brought.

    The UCX bundled with the MPICH wheel (1.20.1) finds no route to a loopback tcp address on
    these machines ("no route to ..."); the wheel's 1.22 connects. LD_LIBRARY_PATH comes before
    libmpi's RUNPATH, so MPI and the binding share that one UCX."""
    try:
        import libucx
    except ImportError:
        return {}
    lib = Path(libucx.__file__).parent / "lib"
    return {"LD_LIBRARY_PATH": os.pathsep.join(filter(None, [str(lib), os.environ.get("LD_LIBRARY_PATH")]))}


TRANSPORTS = {
    "sm": ({"UCX_TLS": "sm"}, "ucx:cma+sysv"),
    "tcp": ({"UCX_TLS": "tcp", "UCX_NET_DEVICES": "lo"}, "ucx:tcp"),
}


# -- without MPI ---------------------------------------------------------------------------------

SM_INFO = """#
#               peer: <no debug data>
#                 lane[0]:  0:sysv/memory.0 md[0]           -> md[0]/sysv/sysdev[255] seg 4294967295 am
#                 lane[1]:  1:posix/memory.0 md[1]          -> md[1]/posix/sysdev[255] seg 4294967295
#                 lane[2]:  2:cma/memory.0 md[2]            -> md[2]/cma/sysdev[255] seg 4294967295 rma_bw#0
"""
TCP_INFO = "#   lane[0]:  0:tcp/lo.0 md[0]   -> md[0]/tcp/sysdev[255] seg 4294967295 rma_bw#0 am wireup\n"
VERBS_INFO = """#  lane[0]:  3:rc_mlx5/mlx5_0:1.0 md[3]  -> md[3]/ib/sysdev[255] rma#0 rma_bw#0 amo#0 am am_bw#0
#  lane[1]:  4:rc_mlx5/mlx5_1:1.0 md[4]  -> md[4]/ib/sysdev[255] rma_bw#1 am_bw#1
#  lane[2]:  0:posix/memory.0 md[0]      -> md[0]/posix/sysdev[255] seg 4294967295
"""
CUDA_INFO = """#  lane[0]:  0:sysv/memory.0 md[0]   -> md[0]/sysv/sysdev[255] seg 4294967295 am
#  lane[1]:  2:cma/memory.0 md[2]    -> md[2]/cma/sysdev[255] seg 4294967295 rma_bw#0
#  lane[2]:  4:cuda_ipc/cuda.0 md[4] -> md[4]/cuda_ipc/sysdev[255] seg 4294967295 rma_bw#1
"""
AM_ONLY_INFO = "#  lane[0]:  0:sysv/memory.0 md[0]  -> md[0]/sysv/sysdev[255] seg 4294967295 am wireup\n"


def test_lanes_name_the_transport_that_carries_puts():
    assert rdma.lanes(SM_INFO)[2] == ("cma", "memory", ("rma_bw",))
    assert rdma.rma_transport(SM_INFO) == "cma"
    assert rdma.shm_transport(SM_INFO) == "sysv" and rdma.shm_transport(TCP_INFO) == ""
    assert rdma.rma_transport(TCP_INFO) == "tcp"
    assert rdma.lanes(VERBS_INFO)[0][:2] == ("rc_mlx5", "mlx5_0:1")
    assert rdma.rma_transport(VERBS_INFO) == "rc_mlx5"
    assert rdma.rma_transport(AM_ONLY_INFO) == "sysv/am"  # puts emulated over active messages
    assert rdma.rma_transports(CUDA_INFO) == ["cma", "cuda_ipc"]
    assert rdma.rma_transports(CUDA_INFO, "host") == ["cma"]
    assert rdma.rma_transports(CUDA_INFO, "cuda") == ["cuda_ipc"]
    assert rdma.rma_transport("") == ""


def test_software_transports_end_calls_with_a_progressing_barrier():
    assert not rdma.needs_quiesce("ucx:cma")
    assert not rdma.needs_quiesce("ucx:cma+rc_mlx5")
    assert rdma.needs_quiesce("ucx:tcp")
    assert rdma.needs_quiesce("ucx:cma+tcp")
    assert rdma.needs_quiesce("ucx:sysv/am")
    assert rdma.needs_quiesce("ucx")  # unknown: be safe
    assert not rdma.needs_quiesce("ucx:tcp", "0") and rdma.needs_quiesce("ucx:cma", "1")


@pytest.mark.parametrize("env, message", [
    ({rdma.ENV_TIMEOUT: "soon"}, "is not a number"),
    ({rdma.ENV_TIMEOUT: "-1"}, "must be positive"),
    ({rdma.ENV_ORDERING: "strict"}, "expected fence or flush"),
    ({rdma.ENV_YIELD: "yes"}, "expected auto, 0 or 1"),
    ({rdma.ENV_QUIESCE: "2"}, "expected auto, 0 or 1"),
])
def test_bad_settings_are_named(env, message):
    with pytest.raises(rdma.RdmaSetupError, match=message):
        rdma.settings(env)


def test_settings_defaults():
    assert rdma.settings({}) == rdma.Settings(rdma.DEFAULT_TIMEOUT_S, None, None, "auto", "auto")


def test_registered_bytes_is_the_largest_mapping():
    assert rdma.registered_bytes("allgather", 4, 10, 4) == 160
    assert rdma.registered_bytes("reduce_scatter", 4, 10, 4) == 120  # p-1 landing slots
    assert rdma.registered_bytes("allreduce", 4, 10, 4) == 40  # the result (landing: 3 x 3)
    assert rdma.registered_bytes("allreduce", 4, 100, 4) == 400


def test_unsupported_reasons(binding, monkeypatch):
    from collectives.impls import get

    impl = get("rdma")
    assert impl.unsupported_reason(CallSpec("allgather", 4, 8)) is None
    assert impl.algorithm(CallSpec("allreduce", 4, 8)) == "gdraa"
    assert "is 'gdraa', not 'ring'" in impl.unsupported_reason(CallSpec("allreduce", 4, 8, algorithm="ring"))
    monkeypatch.setenv(rdma.ENV_MAX_REGISTER, "1024")
    assert impl.unsupported_reason(CallSpec("allgather", 4, 64)) is None
    assert "4096-byte buffer to register exceeds" in impl.unsupported_reason(CallSpec("allgather", 4, 256))
    monkeypatch.setenv(rdma.ENV_TIMEOUT, "never")
    assert "is not a number" in impl.unsupported_reason(CallSpec("allgather", 4, 8))


def test_without_the_binding_the_reason_says_how_to_build_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "cython_ext.ucx", None)  # import fails as if never built
    reason = rdma.binding_reason()
    assert "not built" in reason and "rdma" in reason
    from collectives.impls import get

    assert get("rdma").unsupported_reason(CallSpec("allgather", 2, 8)) == reason


def test_device_memory_needs_a_ucx_that_can_move_it(binding):
    from collectives.memory.backends import HostEmulation

    assert rdma.device_reason("cuda", HostEmulation()) is None  # emulated device memory is host memory

    class Gpu:
        xp = object()  # not numpy: real device arrays

    movable = rdma.worker().memory_types()
    assert "host" in movable
    reason = rdma.device_reason("cuda", Gpu())
    if "cuda" in movable:
        assert reason is None
    else:
        assert "cannot move cuda memory" in reason and "memory types: host" in reason


CONTEXT_INFO = """#      resource 0  :  md 0  dev 0  flags -- sysv/memory
#      resource 1  :  md 1  dev 1  flags -- tcp/lo
#      resource 2  :  md 3  dev 2  flags -- rc_mlx5/mlx5_0:1
"""


def test_env_rows_name_transports_and_verbs_devices(binding):
    from collectives.transports.rdma import env as rdma_env

    assert rdma_env.resources(CONTEXT_INFO) == ["sysv/memory", "tcp/lo", "rc_mlx5/mlx5_0:1"]
    rows = {what: (value, how) for what, value, how in rdma_env.env_rows()}
    assert rows["UCX library"][0].startswith(binding.version())
    assert "host" in rows["UCX memory types"][0]
    assert rows["verbs devices"][0].startswith(("yes: ", "no: "))
    assert "ibv_get_device_list" in rows["verbs devices"][1]


# -- under mpiexec -------------------------------------------------------------------------------


def summary_of(result) -> dict:
    assert result.returncode == 0, describe(result)
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.mpi
@pytest.mark.parametrize("transport, nranks", [
    ("sm", 2), ("sm", 3), ("sm", 4), ("tcp", 2), ("tcp", 3), ("tcp", 4)])
def test_collectives_bit_exact_and_set_up_once(binding, transport, nranks):
    env, expected = TRANSPORTS[transport]
    if transport == "tcp":
        env = {**env, **wheel_library_env()}
    # ranks above the core count make tcp slow here: fewer dtypes and repeated calls
    mode = "full" if transport == "sm" or nranks == 2 else "quick"
    summary = summary_of(run_mpi(nranks, SCRIPT, expected, mode, env=env, timeout=90))
    assert summary["failures"] == []
    assert summary["checked"] == (48 + 16 if mode == "full" else 16)  # full: also the device-buffer path
    assert summary["transports"] == [expected]


@pytest.mark.mpi
def test_hier_inter_phase_runs_one_sided(binding):
    """What pccl-hier's ``inter: rdma`` needs: its rail phase swapped for one-sided ops (compose.schedule_op)."""
    summary = summary_of(run_mpi(4, SCRIPT, "-", "hier", env={"UCX_TLS": "sm"}, timeout=90))
    assert summary["failures"] == [] and summary["checked"] == 16
    assert summary["transports"] == ["ucx:cma+sysv"]


@pytest.mark.mpi
@pytest.mark.parametrize("tls, message", [
    ("self", "ucp_ep_create failed: Destination is unreachable"),  # no transport reaches a peer
    ("nosuch", "UCX did not start: ucp_init failed"),  # no transport at all
])
def test_no_usable_transport_is_a_clear_error_on_every_rank(binding, tls, message):
    # MPI on its other network module, so that only the binding sees UCX_TLS
    env = {"UCX_TLS": tls, "MPIR_CVAR_CH4_NETMOD": "ofi"}
    started = time.monotonic()
    result = run_mpi(2, SCRIPT, "-", env=env, timeout=60)
    assert result.returncode != 0
    assert result.stderr.count(message) == 2, describe(result)
    assert time.monotonic() - started < 30


@pytest.mark.mpi
def test_a_peer_that_leaves_during_setup_ends_the_job(binding):
    result = run_mpi(2, SCRIPT, "-", "peer-exits", env={"UCX_TLS": "sm", rdma.ENV_TIMEOUT: "3"}, timeout=60)
    assert result.returncode != 0, describe(result)


@pytest.mark.mpi
def test_a_peer_that_never_calls_times_out_with_the_reason(binding):
    result = run_mpi(2, SCRIPT, "-", "peer-stalls", env={"UCX_TLS": "sm", rdma.ENV_TIMEOUT: "2"}, timeout=60)
    assert result.returncode != 0
    report = json.loads(next(line for line in result.stdout.splitlines() if line.startswith("{")))
    assert "no segment to reduce from rank 1 within 2 s" in report["error"], describe(result)
    assert report["waited_s"] < 10


SUITE = {
    "name": "rdma-e2e",
    "collectives": ["allgather", "reduce_scatter", "allreduce"],
    "implementations": ["mpi", "rdma"],
    "ranks": [2],
    "sizes": {"min": "16B", "max": "16KiB", "factor": 32},
    "timing": {"mode": "sync", "warmup": 2, "iters": 5, "min_iters": 1, "budget_s": 0},
    "timeout_s": 60,
    "env": {"UCX_TLS": "sm", rdma.ENV_MAX_REGISTER: "8192"},
}


@pytest.mark.mpi
def test_sweep_records_what_ucx_used(binding, tmp_path):
    frame = sweep_table(tmp_path, SUITE, timeout=120)
    ours = frame[frame["impl"] == "rdma"]
    done = ours[ours["status"] == "ok"]
    assert len(ours) == 9 and len(done) == 7 and (done["n_wrong"] == 0).all()
    # every cell after the first built op names the transport UCX chose (the first can say only "ucx")
    assert set(done["transport"]) <= {"ucx", "ucx:cma+sysv"} and "ucx:cma+sysv" in set(done["transport"])
    assert set(done["library"]) == {"UCX"} and done["library_version"].str.match(r"^\d+\.\d+").all()
    refused = ours[ours["status"] == "unsupported"]
    assert set(refused["bytes_total"]) == {16384} and set(refused["collective"]) == {"allgather", "allreduce"}
    assert refused["error"].str.contains(rdma.ENV_MAX_REGISTER).all()


@pytest.mark.mpi
def test_hier_rail_phase_one_sided(binding):
    """pccl-hier with ``inter: rdma``: 4 ranks as 2 virtual nodes, all collectives, over shared memory."""
    result = run_mpi(4, MPI_SCRIPTS / "check_rdma_hier.py", timeout=120, env={"UCX_TLS": "sm,self"})
    assert result.returncode == 0, describe(result)
    assert "bad 0" in result.stdout and "ucx:" in result.stdout, describe(result)
