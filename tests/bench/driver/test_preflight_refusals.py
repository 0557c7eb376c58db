"""The pre-flight's refusals and its probes per launch environment, end to end through ``run sweep``
on this machine (no GPU needed): the MPI library against a site profile's ``mpi_library`` (the PyPI
MPICH wheel here, so a Cray profile is refused before anything is launched or submitted), the
overrides recorded in run.json and meta.json, and the ``-xccl`` launch probed with its own variables.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml
from conftest import describe, run_cli

from bench.driver import preflight
from bench.errors import BadInput
from bench.plan.site import load_site
from bench.rank.outcome import site_env_digest
from bench.sweep.options import SweepOptions
from bench.sweep.session import Sweep

pytestmark = pytest.mark.mpi

SUITE = {
    "name": "preflight-envs", "collectives": ["allreduce"], "implementations": ["mpi", "xccl"],
    "ranks": [2], "ranks_per_node": 1, "device": "cuda", "sizes": {"min": "64B", "max": "64B"},
    "timing": {"warmup": 1, "iters": 2, "min_iters": 1, "budget_s": 0}, "timeout_s": 120,
}


def site_file(tmp_path, **changes) -> str:
    site = {"name": "two-envs", "mpi_library": "MPICH", "env": {"mpi": {"FI_CXI_RDZV_THRESHOLD": 0},
                                                                 "xccl": {"NCCL_CROSS_NIC": 1}}, **changes}
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(site))
    return str(path)


def suite_file(tmp_path, **changes) -> str:
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump({**SUITE, **changes}, sort_keys=False))
    return str(path)


def test_mpi_problem_names_what_was_found_what_is_expected_and_the_rebuild():
    frontier = load_site("frontier", "test")
    text = preflight.mpi_problem(frontier, "MPICH 5.0.2", "mpi4py and the extensions", "/venv/lib/libmpi.so.12")
    assert text.startswith("site frontier expects Cray MPICH (mpi_library), but mpi4py and the extensions load "
                           "MPICH 5.0.2 (/venv/lib/libmpi.so.12)")
    assert 'MPICC="cc -shared" pip install --force-reinstall --no-cache-dir --no-binary=mpi4py mpi4py' in text
    assert "Installing on a cluster" in text and "\n" not in text
    assert preflight.mpi_problem(frontier, "Cray MPICH 8.1.31", "x") == ""
    generic = load_site("generic-openmpi-ucx", "test")
    assert "expects Open MPI" in preflight.mpi_problem(generic, "MPICH 5.0.2", "x")
    assert preflight.mpi_problem(generic, "Open MPI 5.0.3", "x") == ""
    assert preflight.mpi_problem(None, "MPICH 5.0.2", "x") == ""  # no site: nothing expected
    verdict = preflight.mpi_verdict(frontier, "MPICH 5.0.2", "x", ("other-mpi",))
    assert verdict.verdict == "warning" and verdict.message.endswith("(measured all the same: --allow-other-mpi)")


@pytest.mark.parametrize("site", ["frontier", "perlmutter"])
def test_a_cray_profile_is_refused_here_before_any_launch(tmp_path, site):
    """The PyPI MPICH wheel loads here: a Cray site's run stops in one line, nothing written or started."""
    out = tmp_path / "never"
    result = run_cli("run", "sweep", site, "--launcher", "srun", "--set", "ranks=[8]", "--out", out, timeout=120)
    assert result.returncode == 2, describe(result)
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr, describe(result)
    assert f"site {site} expects Cray MPICH" in result.stderr and "load MPICH " in result.stderr
    assert 'MPICC="cc -shared"' in result.stderr and "--allow-other-mpi" in result.stderr
    assert not out.exists()


def test_a_cray_batch_run_is_refused_before_submitting_and_its_dry_run_says_so(tmp_path):
    out = tmp_path / "never"
    args = ["run", "sweep", "frontier", "--launcher", "sbatch", "--account", "abc123", "--set", "ranks=[8,16]",
            "--out", out]
    result = run_cli(*args, timeout=120)
    assert result.returncode == 2 and "site frontier expects Cray MPICH" in result.stderr, describe(result)
    assert "submitted" not in result.stdout and not out.exists()
    dry = run_cli(*args, "--dry-run", timeout=120)
    assert dry.returncode == 0, describe(dry)
    lines = dry.stdout.splitlines()
    assert any(line.startswith("# pre-flight mpi_library: run sweep would refuse it (exit 2") for line in lines)
    probes = [line for line in lines if line.startswith("#   probe ")]
    # the MPI launches; the one-node RCCL launch; the two-node one, the only one forced onto the plugin
    assert len(probes) == 3 and "shaped as n16-rpn8-rocm (2 nodes" in probes[0], probes
    assert "shaped as n8-rpn8-rocm-xccl (1 node" in probes[1] and "shaped as n16-rpn8-rocm-xccl (2 nodes" in probes[2]
    assert "NCCL_CROSS_NIC" not in probes[0] and all("NCCL_CROSS_NIC=1" in probe for probe in probes[1:])
    assert "NCCL_NET=" not in probes[1] and "NCCL_NET=AWS Libfabric" in probes[2]
    refusing = [line for line in lines if line.startswith("#     refuse (exit 2):")]
    assert "network" not in refusing[0] and "network" not in refusing[1]
    assert "network (NCCL/RCCL on TCP sockets across 2 nodes: --allow-xccl-sockets lets it through; or " \
           "NCCL_NET=AWS Libfabric, forced across nodes, not starting)" in refusing[2]
    # the site binds the ranks' CPUs next to their GCDs: a rank away from its GCD's NUMA node is refused
    assert "numa (a rank's CPUs away from its GPU, though site frontier binds them (--cpu-bind=mask_cpu); " \
           "--allow-numa-mismatch lets it through)" in refusing[0]
    assert "one_gpu_per_rank (two ranks on one GPU" in refusing[0]
    assert "#!/bin/bash" in dry.stdout  # the scripts still printed
    # one job per node count: each job's own sweep probes its own launches
    per_nodes = run_cli(*args, "--dry-run", "--batch-jobs", "per-nodes", timeout=120)
    shapes = [line.split("shaped as ")[1].split()[0] for line in per_nodes.stdout.splitlines()
              if line.startswith("#   probe ")]
    assert shapes == ["n8-rpn8-rocm", "n8-rpn8-rocm-xccl", "n16-rpn8-rocm", "n16-rpn8-rocm-xccl"], per_nodes.stdout
    forced = [line for line in per_nodes.stdout.splitlines() if line.startswith("#   probe ") and "NCCL_NET=" in line]
    assert len(forced) == 1 and "n16-rpn8-rocm-xccl" in forced[0]
    assert per_nodes.stdout.count("# pre-flight mpi_library:") == 1
    allowed = run_cli(*args, "--dry-run", "--allow-other-mpi", "--allow-xccl-sockets", "--allow-numa-mismatch",
                      timeout=120)
    assert "# pre-flight mpi_library: let through:" in allowed.stdout, describe(allowed)
    assert "let through by --allow-xccl-sockets" in allowed.stdout
    assert "let through by --allow-numa-mismatch" in allowed.stdout


def test_the_xccl_launch_is_probed_with_its_own_variables_and_overrides_are_recorded(tmp_path):
    """mpi + xccl cells at a site that keeps NCCL's variables apart: two launches, two probes, each with
    exactly its launches' variables; the allowed refusals in run.json and meta.json."""
    out = tmp_path / "run"
    result = run_cli("run", "sweep", suite_file(tmp_path), "--site", site_file(tmp_path), "--out", out,
                     "--allow-unsupported", "--allow-xccl-sockets", timeout=240)
    assert result.returncode == 0, describe(result)
    meta = json.loads((out / "meta.json").read_text())
    probes = {one["launch_id"]: one for one in meta["preflight"]["probes"]}
    assert set(probes) == {"n2-rpn1-cuda", "n2-rpn1-cuda-xccl"}
    mpi, xccl = probes["n2-rpn1-cuda"], probes["n2-rpn1-cuda-xccl"]
    assert mpi["env"]["FI_CXI_RDZV_THRESHOLD"] == "0" and "NCCL_CROSS_NIC" not in mpi["env"]
    assert xccl["env"]["NCCL_CROSS_NIC"] == "1" and xccl["env"]["FI_CXI_RDZV_THRESHOLD"] == "0"
    assert not mpi["with_xccl"] and xccl["with_xccl"]
    assert mpi["argv"][-1] == "0" and xccl["argv"][-1] == "1"  # only the -xccl probe tries NCCL
    # each probe's environment is the one its measured launch ran with
    site_set = ("FI_CXI_RDZV_THRESHOLD", "NCCL_CROSS_NIC")
    for launch_id, probe in probes.items():
        measured = meta["launches"][launch_id]["env"]
        assert {name: measured.get(name) for name in site_set} == {name: probe["env"].get(name) for name in site_set}
    verdicts = {one["check"]: one["verdict"] for one in mpi["verdicts"]}
    assert verdicts["mpi_library"] == "ok"  # the site expects MPICH: the wheel's
    # every row names the site settings its launch ran with: the MPI and the -xccl launch differ
    results = pd.read_parquet(out / "results.parquet")
    digests = results.groupby("launch_id")["site_env_digest"].unique().to_dict()
    assert {launch_id: list(values) for launch_id, values in digests.items()} == {
        "n2-rpn1-cuda": [site_env_digest({"FI_CXI_RDZV_THRESHOLD": "0"}, {"FI_CXI_RDZV_THRESHOLD": "0"})],
        "n2-rpn1-cuda-xccl": [site_env_digest(["FI_CXI_RDZV_THRESHOLD", "NCCL_CROSS_NIC"],
                                              {"FI_CXI_RDZV_THRESHOLD": "0", "NCCL_CROSS_NIC": "1"})]}
    assert meta["launches"]["n2-rpn1-cuda-xccl"]["site_env"] == {"FI_CXI_RDZV_THRESHOLD": "0", "NCCL_CROSS_NIC": "1"}
    assert meta["allowed"] == ["--allow-xccl-sockets"]
    assert json.loads((out / "run.json").read_text())["allowed"] == ["xccl-sockets"]
    # a resume (the batch job's own sweep is one) keeps the run's overrides
    resumed = Sweep.open(SweepOptions(suite_path=out / "suite.yaml", resume=out, suite_named=False))
    assert resumed.allowed == ("xccl-sockets",)
    # a run.json edited by hand lets through nothing but the named refusals
    (out / "run.json").write_text(json.dumps({"run_id": "x", "allowed": ["everything", "other-mpi", 3]}))
    assert Sweep.open(SweepOptions(suite_path=out / "suite.yaml", resume=out, suite_named=False)).allowed == (
        "other-mpi",)


def test_check_mpi_refuses_or_warns_and_a_site_without_mpi_library_is_not_checked(tmp_path):
    class Out:
        lines: list[str] = []

        def print(self, text, **options):
            self.lines.append(text)

    options = SweepOptions(suite_path=tmp_path / "suite.yaml", site="frontier", launcher="srun")
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump({**SUITE, "ranks": [8], "ranks_per_node": 8}))
    sweep = Sweep.open(options)
    with pytest.raises(BadInput, match=r"^pre-flight: site frontier expects Cray MPICH .*--allow-other-mpi"):
        preflight.check_mpi(sweep, Out())
    sweep.allowed = ("other-mpi",)
    out = Out()
    assert preflight.check_mpi(sweep, out).verdict == "warning"
    assert out.lines[-1].startswith("pre-flight mpi_library: warning: site frontier expects Cray MPICH")
    assert preflight.check_mpi(Sweep.open(SweepOptions(suite_path=tmp_path / "suite.yaml",
                                                       site=site_file(tmp_path, mpi_library=None),
                                                       launcher="srun")), Out()) is None


def test_site_env_digest_shows_a_value_the_launcher_replaced():
    given = {"CUDA_VISIBLE_DEVICES": "3,2,1,0", "MPICH_GPU_SUPPORT_ENABLED": "1"}
    as_planned = site_env_digest(given, given)
    assert len(as_planned) == 12 and as_planned == site_env_digest(list(reversed(list(given))), given)
    # Slurm's gres/gpu sets CUDA_VISIBLE_DEVICES per step: the rank saw 0,1,2,3, and the digest says so
    assert site_env_digest(given, {**given, "CUDA_VISIBLE_DEVICES": "0,1,2,3"}) != as_planned
    assert site_env_digest(given, {"MPICH_GPU_SUPPORT_ENABLED": "1"}) != as_planned  # one unset
    assert site_env_digest({}, given) == ""


def test_a_cpu_suite_at_a_site_has_a_pre_flight_with_its_per_rank_table(tmp_path):
    """A host suite run at a site: one probe, every rank's local rank, CPUs and NUMA nodes in meta.json."""
    out = tmp_path / "run"
    suite = suite_file(tmp_path, implementations=["mpi"], device="host", ranks_per_node=2)
    result = run_cli("run", "sweep", suite, "--site", site_file(tmp_path, srun=["--cpu-bind=cores"]), "--out", out,
                     timeout=240)
    assert result.returncode == 0, describe(result)
    # mpiexec here, which the site asks for no binding: the ranks share this machine's CPUs, nothing claimed
    assert "pre-flight cpus: ok (n2-rpn2-host): 2 ranks; no binding asked for" in result.stdout, describe(result)
    record = json.loads((out / "meta.json").read_text())["preflight"]
    assert [one["rank"] for one in record["ranks"]] == [0, 1]
    for one in record["ranks"]:
        assert one["cpus"] and isinstance(one["numa_nodes"], list) and one["local_rank"] in (0, 1)
    assert {one["check"] for one in record["verdicts"]} == {"gtl", "mpi_library", "local_rank", "cpus"}


def test_srun_steps_are_checked_against_the_sites_node_and_time_policy(tmp_path, monkeypatch):
    """--launcher srun: a CPU suite's steps that cannot fit a Frontier node, and (srun's own job, outside an
    allocation) a --time beyond the policy, refused before the first step."""
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    path = tmp_path / "suite.yaml"
    cpu = {**SUITE, "implementations": ["mpi"], "device": "host", "ranks": [16], "ranks_per_node": 16}
    path.write_text(yaml.safe_dump({**cpu, "slurm": {"srun_args": ["--cpus-per-task=7"]}}))
    sweep = Sweep.open(SweepOptions(suite_path=path, site="frontier", launcher="srun"))
    with pytest.raises(BadInput, match=r"16 ranks per node x --cpus-per-task=7 \(slurm.srun_args\) = 112 CPUs; "
                                       r"a frontier node has .*give slurm.srun_args: \[--cpus-per-task=3\]"):
        sweep.check()
    path.write_text(yaml.safe_dump({**cpu, "slurm": {"time": "3:00:00"}}))
    sweep = Sweep.open(SweepOptions(suite_path=path, site="frontier", launcher="srun"))
    with pytest.raises(BadInput, match=r"^--time: 3:00:00 for a 1-node job is beyond site frontier's limit"):
        sweep.check()
    monkeypatch.setenv("SLURM_JOB_ID", "1234")  # inside an allocation: its time was the allocation's to give
    Sweep.open(SweepOptions(suite_path=path, site="frontier", launcher="srun")).check()


def test_a_refusal_in_the_batch_jobs_own_sweep_keeps_the_probes_record_in_the_run_folder(tmp_path, monkeypatch):
    """The first-run kit packs the run folder whatever the sweep's exit: a refused probe's per-rank table
    stays in it (preflight-refused.json), so the archive shows what was refused; a new run writes nothing."""
    from bench.sweep import jobs

    out = tmp_path / "run"
    suite = suite_file(tmp_path, implementations=["mpi"], device="host", ranks_per_node=2)
    assert run_cli("run", "sweep", suite, "--site", site_file(tmp_path), "--out", out, timeout=240).returncode == 0
    record = {"launch_id": "n2-rpn2-host", "ranks": [{"rank": 0, "host": "n1", "cpus": "0"}]}

    def refuse(sweep, console, launches=None):
        raise preflight.Refused("ranks 0 and 1 share GPU ...", record)

    monkeypatch.setattr(preflight, "run", refuse)
    options = SweepOptions(suite_path=out / "suite.yaml", resume=out, suite_named=False)
    with pytest.raises(BadInput, match=r"^pre-flight: ranks 0 and 1 share GPU"):
        jobs.run_with_tables(options, Out())
    assert json.loads((out / preflight.REFUSED_FILE).read_text()) == record
    fresh = tmp_path / "fresh"
    with pytest.raises(BadInput):
        jobs.run_with_tables(SweepOptions(suite_path=tmp_path / "suite.yaml", out=fresh), Out())
    assert not fresh.exists()


class Out:
    def print(self, *args, **options):
        pass
