"""GPU suites on a machine without a GPU: every GPU cell unsupported with the reason, the sweep succeeds.

Also the suite's gpu_aware / gpu_bind fields (given to every rank as environment),
xccl in a host suite, and ``pccl-bench env``'s GPU rows.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml
from conftest import describe, find_mpiexec, run_cli

from bench.driver.launchers import mpi_flavour
from bench.plan.site import load_site
from bench.plan.suite import parse_suite
from bench.plan.suite_files import load_suite, resolve_suite_path
from collectives.memory.backends import probe

pytestmark = pytest.mark.mpi

GPU_HERE = not probe("cuda").reason or not probe("rocm").reason
SUITE = {
    "name": "gpu-none",
    "collectives": ["allgather", "reduce_scatter", "allreduce"],
    "implementations": ["mpi", "xccl", {"impl": "pccl-flat", "algorithms": ["ring"]},
                        {"impl": "pccl-hier", "inter": ["rd"], "intra": ["ring", "xccl"]}],
    "ranks": [2],
    "ranks_per_node": 1,
    "device": "cuda",
    "sizes": {"min": "64B", "max": "64B"},
    "timing": {"warmup": 1, "iters": 2, "min_iters": 1, "budget_s": 0},
    "timeout_s": 120,
}


def sweep(tmp_path, **changes) -> tuple[pd.DataFrame, dict]:
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump({**SUITE, **changes}, sort_keys=False))
    out = tmp_path / "run"
    # no GPU here: every cell is refused, which exits 1 unless --allow-unsupported (tested below)
    result = run_cli("run", "sweep", path, "--out", out, "--allow-unsupported", timeout=180)
    assert result.returncode == 0, describe(result)
    return pd.read_parquet(out / "results.parquet"), json.loads((out / "meta.json").read_text())


@pytest.mark.skipif(GPU_HERE, reason="a GPU is here: tests/project/test_gpu_hardware.py runs the cells for real")
def test_gpu_cells_are_unsupported_with_the_reason(tmp_path):
    results, meta = sweep(tmp_path, gpu_aware=True)  # YAML's bare yes
    assert len(results) == 3 * 5
    assert (results["status"] == "unsupported").all()
    assert (results["device"] == "cuda").all()
    assert results["error"].str.startswith("device cuda: ").all()
    reason = results["error"].iloc[0]
    assert "CuPy is not installed" in reason or "no usable cuda device" in reason or "no cuda device" in reason
    transport = dict(zip(results["impl"] + ":" + results["intra"].fillna(""), results["transport"], strict=False))
    assert transport == {"mpi:": "mpi-gpu-aware", "xccl:": "nccl", "pccl-flat:": "mpi-gpu-aware",
                         "pccl-hier:ring": "mpi-gpu-aware", "pccl-hier:xccl": "mpi-gpu-aware/nccl"}
    assert set(results.loc[results["impl"] == "xccl", "library"]) == {"NCCL"}
    launch = next(iter(meta["launches"].values()))
    assert launch["env"]["PCCL_BENCH_GPU_AWARE"] == "yes"
    # every rank's GPU in meta.json (none bound here), its digest and the local rank's source on the rows
    assert [(one["rank"], one["index"], one["pci_bus_id"]) for one in launch["gpus"]] == [(0, -1, None), (1, -1, None)]
    assert results["gpu_devices_digest"].nunique() == 1 and results["gpu_devices_digest"].notna().all()
    if mpi_flavour() == "mpich":
        assert set(results["gpu_local_rank_from"]) == {"MPI_LOCALRANKID (before MPI_Init)"}
    assert results["xccl_net"].isna().all()  # NCCL never made a communicator


@pytest.mark.skipif(GPU_HERE, reason="a GPU is here")
def test_staged_when_not_gpu_aware_and_rocm_says_rccl(tmp_path):
    results, _ = sweep(tmp_path, device="rocm", gpu_aware="no", implementations=["mpi", "xccl"],
                       collectives=["allreduce"])
    assert dict(zip(results["impl"], results["transport"], strict=True)) == {"mpi": "mpi-staged", "xccl": "rccl"}
    assert results["error"].str.startswith("device rocm: ").all()


def test_xccl_in_a_host_suite_is_unsupported(tmp_path):
    results, _ = sweep(tmp_path, device="host", implementations=["xccl", {"impl": "pccl-hier", "intra": ["xccl"]}],
                       collectives=["allgather"])
    assert (results["status"] == "unsupported").all()
    assert set(results["error"]) == {
        "NCCL/RCCL run on GPU buffers only (device: cuda or rocm)",
        "intra phase by xccl: NCCL/RCCL run on GPU buffers only (device: cuda or rocm)",
    }


def test_gpu_suite_fields_become_rank_environment():
    suite = parse_suite({**SUITE, "gpu_aware": "no", "gpu_bind": 2}, "s.yaml")
    assert suite.env == {"PCCL_BENCH_GPU_AWARE": "no", "PCCL_BENCH_GPU": "2"}
    assert parse_suite(SUITE, "s.yaml").env == {}  # defaults add nothing
    same = parse_suite({**SUITE, "gpu_aware": False, "env": {"PCCL_BENCH_GPU_AWARE": "no"}}, "s.yaml")
    assert same.gpu_aware == "no"


@pytest.mark.parametrize(("changes", "words"), [
    ({"gpu_aware": "maybe"}, ["gpu_aware", "'auto', 'yes' or 'no'"]),
    ({"gpu_aware": "yes", "env": {"PCCL_BENCH_GPU_AWARE": "no"}}, ["contradicts", "PCCL_BENCH_GPU_AWARE"]),
    ({"gpu_bind": "first"}, ["gpu_bind"]),
])
def test_bad_gpu_fields_are_bad_input(tmp_path, changes, words):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**SUITE, **changes}))
    result = run_cli("suites", "validate", path)
    assert result.returncode == 2, describe(result)
    assert all(word in result.stderr for word in words), result.stderr
    assert "Traceback" not in result.stderr


def test_env_reports_the_gpu_stack():
    result = run_cli("env", env={"COLUMNS": "1000"})  # wide enough that no reason wraps in the table
    assert result.returncode == 0, describe(result)
    for row in ("GPU ", "GPU binding", "NCCL", "GPU-aware MPI"):
        assert row in result.stdout, result.stdout
    if not GPU_HERE:
        assert "unavailable:" in result.stdout and "every cuda cell is reported unsupported" in result.stdout
    assert "MPIX_GPU_query_support" in result.stdout or "MPIX_Query" in result.stdout or "no query" in result.stdout


def test_shipped_gpu_suites():
    for name, device, per_node in (("frontier", "rocm", 8), ("perlmutter", "cuda", 4), ("gpu-smoke", "cuda", 1)):
        result = run_cli("suites", "validate", name)
        assert result.returncode == 0, describe(result)
        suite, _ = load_suite(resolve_suite_path(name))
        assert (suite.device, suite.ranks_per_node) == (device, [per_node])
        assert {entry.impl for entry in suite.implementations} == {"mpi", "xccl", "pccl-flat", "pccl-hier"}
    frontier, _ = load_suite(resolve_suite_path("frontier"))
    # the launch environment is the site's now: the NIC of the GCD in use, not a map keyed by local rank
    assert frontier.site == "frontier" and "MPICH_OFI_NIC_MAPPING" not in frontier.env
    assert load_site(frontier.site, "test").for_device("rocm").env.mpi["MPICH_OFI_NIC_POLICY"] == "GPU"
    assert frontier.sizes.min == 1 << 20 and frontier.sizes.max == 1 << 30


@pytest.mark.skipif(GPU_HERE, reason="a GPU is here")
def test_run_point_takes_the_device_and_gpu_aware(tmp_path):
    out = tmp_path / "point"
    result = run_cli("run", "point", "-np", "1", "--device", "cuda", "--gpu-aware", "no", "-i", "mpi", "-i", "xccl",
                     "-b", "64", "-e", "64", "--out", out, "--allow-unsupported", timeout=180)
    assert result.returncode == 0, describe(result)
    results = pd.read_parquet(out / "results.parquet")
    assert (results["device"] == "cuda").all() and (results["status"] == "unsupported").all()
    assert dict(zip(results["impl"], results["transport"], strict=True)) == {"mpi": "mpi-staged", "xccl": "nccl"}
    assert "unsupported (mpi, xccl): device cuda: " in " ".join(result.stdout.split())


@pytest.mark.parametrize(("flag", "value"), [("--device", "gpu"), ("--gpu-aware", "maybe")])
def test_run_point_refuses_an_unknown_device_or_gpu_aware(tmp_path, flag, value):
    result = run_cli("run", "point", flag, value, "--out", tmp_path / "never", timeout=60)
    assert result.returncode == 2, describe(result)
    assert value in result.stderr and "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "never").exists()


@pytest.mark.skipif(GPU_HERE, reason="a GPU is here")
def test_a_gpu_suite_that_reached_no_gpu_exits_1(tmp_path):
    """Every cell unsupported used to exit 0: a CI or batch job "succeeded" without a GPU."""
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump({**SUITE, "implementations": ["mpi", "xccl"], "collectives": ["allreduce"]}))
    out = tmp_path / "run"
    result = run_cli("run", "sweep", path, "--out", out, timeout=180)
    assert result.returncode == 1, describe(result)
    lines = [line for line in result.stdout.splitlines() if line.startswith("no GPU cell ran")]
    assert len(lines) == 1 and "all 2 GPU cells" in lines[0] and "device cuda: " in lines[0], result.stdout
    assert "GPU cells run on a GPU: 0 of 2" in result.stdout
    meta = json.loads((out / "meta.json").read_text())
    verdicts = {verdict["check"]: verdict["verdict"] for verdict in meta["preflight"]["verdicts"]}
    assert verdicts["gpu"] == "warning" and verdicts["gtl"] == "ok"
    assert meta["preflight"]["warnings"] and "pre-flight warning: gpu:" in result.stdout
    # --allow-unsupported: today's behaviour, the same table
    again = run_cli("run", "sweep", path, "--out", tmp_path / "again", "--allow-unsupported", timeout=180)
    assert again.returncode == 0, describe(again)
    assert "no GPU cell ran" not in again.stdout


def test_a_host_suite_has_no_preflight(tmp_path):
    results, meta = sweep(tmp_path, device="host", implementations=["mpi"], collectives=["allgather"])
    assert (results["status"] == "ok").all() and "preflight" not in meta
    launch = next(iter(meta["launches"].values()))
    assert [one["rank"] for one in launch["ranks"]] == [0, 1] and "gpus" not in launch  # no GPU context
    if mpi_flavour() == "mpich":  # the variables Hydra set on each rank
        assert [one["env"].get("MPI_LOCALRANKID") for one in launch["ranks"]] == ["0", "1"]
    assert results["gpu_devices_digest"].isna().all()


def test_gpu_sharing_field_becomes_rank_environment(tmp_path):
    assert parse_suite({**SUITE, "gpu_sharing": True}, "s.yaml").env == {"PCCL_BENCH_GPU_SHARING": "yes"}
    assert "PCCL_BENCH_GPU_SHARING" not in parse_suite(SUITE, "s.yaml").env
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**SUITE, "gpu_sharing": "sometimes"}))
    result = run_cli("suites", "validate", path)
    assert result.returncode == 2 and "gpu_sharing" in result.stderr, describe(result)


@pytest.mark.skipif(GPU_HERE, reason="a GPU is here")
def test_launcher_none_binds_before_mpi_init_and_runs_the_preflight_in_the_job(tmp_path):
    """Inside an outer mpiexec: the ranks bind from the launcher's local rank before MPI_Init (the same
    start as the worker's), the pre-flight runs in the job, and no GPU reached still exits 1."""
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump({**SUITE, "implementations": ["mpi"], "collectives": ["allreduce"]}))
    outer = [find_mpiexec(), "-n", "2"]
    result = run_cli("run", "sweep", path, "--launcher", "none", "--out", tmp_path / "run", prefix=outer,
                     timeout=180)
    assert result.returncode == 1, describe(result)
    assert "no GPU cell ran" in result.stdout and "pre-flight gpu: warning" in result.stdout, describe(result)
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert [one["rank"] for one in meta["preflight"]["ranks"]] == [0, 1]
    gpus = next(iter(meta["launches"].values()))["gpus"]
    assert [one["local_rank"] for one in gpus] == [0, 1]  # the real host's ranks, whatever the virtual nodes
    if mpi_flavour() == "mpich":  # Hydra's variable, read before MPI_Init
        assert {one["local_rank_from"] for one in gpus} == {"MPI_LOCALRANKID (before MPI_Init)"}
