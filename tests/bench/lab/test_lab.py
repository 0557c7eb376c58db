"""Across a real network: sweeps on the namespace hosts of a lab (docs/LAB.md).

The lab (four hosts h1-h4 and a login host, each with its own hostname, address, IPC, PID and
mount namespaces) is brought up for these tests and taken down after them; every sweep runs on
its login host, as on a cluster. The tests assert facts: where the ranks ran, that the bytes
crossed the hosts' links (their interface counters) or did not, what UCX moved them with, what a
host failure leaves behind, and lower bounds the link emulator must respect. They skip with the
reason where no lab can be built (not root, no namespaces).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import MPI_SCRIPTS, ROOT, describe, find_mpiexec, run_cli, subprocess_env

from bench.lab import lab as lab_ops
from bench.lab import links, processes
from bench.lab.state import Link

LAB = "pytest"
HOSTS = ["h1", "h2", "h3", "h4"]
#: all three collectives, the MPI library against a schedule, sizes whose volume dwarfs the
#: launchers' own traffic
SUITE = {
    "name": "lab",
    "collectives": ["allgather", "reduce_scatter", "allreduce"],
    "implementations": ["mpi", {"impl": "pccl-flat", "algorithms": ["ring"]}],
    "ranks": [2],
    "sizes": {"min": "1KiB", "max": "1MiB", "factor": 32},
    "timing": {"warmup": 1, "iters": 10, "min_iters": 10, "budget_s": 0},
    "timeout_s": 90,
}

pytestmark = [pytest.mark.lab, pytest.mark.usefixtures("one_lab_at_a_time")]


@pytest.fixture(scope="module")
def lab():
    reason = lab_ops.unavailable()
    if reason:
        pytest.skip(f"no lab here: {reason}")
    lab_ops.down(LAB)
    made = lab_ops.up(LAB, len(HOSTS))
    try:
        yield made
    finally:
        lab_ops.down(LAB)


def on(host: str) -> tuple[list[str], dict[str, str]]:
    prefix, env = lab_ops.exec_prefix(LAB, host, str(ROOT))
    return prefix, env


def lab_sweep(tmp_path: Path, suite: dict, *flags: str, timeout: float = 150,
              relative: bool = False) -> subprocess.CompletedProcess:
    """``pccl-bench run sweep`` on the login host, into ``tmp_path/run`` (``relative``: named from the
    working directory, which the login host's mount namespace reaches through another mount)."""
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    prefix, env = on("login")
    out = os.path.relpath(tmp_path / "run", ROOT) if relative else tmp_path / "run"
    return run_cli("run", "sweep", path, "--out", out, *flags, prefix=prefix, env=env, timeout=timeout)


def read_run(folder: Path) -> tuple[pd.DataFrame, dict]:
    return pd.read_parquet(folder / "results.parquet"), json.loads((folder / "meta.json").read_text())


def link_bytes(lab, names: list[str]) -> dict[str, int]:
    """Bytes each host has received on its link so far."""
    return {node.name: links.counters(node)[0] for node in lab.hosts if node.name in names}


def least_volume(frame: pd.DataFrame) -> int:
    """What each of two hosts of one rank must at least receive: per call, the half of the data
    it does not hold (all-gather: the other block; reduce-scatter and all-reduce: the other rank's
    contribution to its half), times the timed calls."""
    return int((frame["bytes_total"] // 2 * frame["iters"]).sum())


def leftovers(lab) -> dict[str, list[str]]:
    """Processes still running on the lab's hosts (their inits aside) and on its login host."""
    found = {host: [processes.command_line(pid) for pid in lab_ops.host_processes(lab, host)] for host in HOSTS}
    login = [pid for pid in processes.members("net", {lab.login.netns}) if pid != lab.login.pid]
    found["login"] = [processes.command_line(pid) for pid in login]
    return {host: commands for host, commands in found.items() if commands}


# ---------------------------------------------------------------- the hosts


def test_hosts_have_names_memory_and_processes_of_their_own(lab):
    prefix, env = on("h1")
    script = "hostname; touch /dev/shm/pccl-lab-test; ls /proc | grep -c '^[0-9]'; ls /sys/class/net"
    first = subprocess.run([*prefix, "sh", "-c", script], capture_output=True, text=True, timeout=30)
    prefix, _ = on("h2")
    second = subprocess.run([*prefix, "sh", "-c", "hostname; ls /dev/shm"], capture_output=True, text=True,
                            timeout=30)
    name, processes_seen, *interfaces = first.stdout.split()
    assert name == "h1" and int(processes_seen) < 10 and sorted(interfaces) == ["eth0", "lo"], first.stdout
    assert second.stdout.split()[0] == "h2" and "pccl-lab-test" not in second.stdout


def test_lab_cli_runs_a_command_and_refuses_what_is_not_there(lab):
    env = subprocess_env()
    ran = run_cli("lab", "exec", "--lab", LAB, "h3", "--", "sh", "-c", "hostname; exit 7", env=env)
    assert ran.returncode == 7 and ran.stdout.strip() == "h3", describe(ran)
    for args, needle in ((["exec", "--lab", LAB, "h9", "--", "true"], "no host 'h9'"),
                         (["up", "2", "--lab", LAB], "already up"),
                         (["status", "--lab", "nosuch"], "no lab 'nosuch'")):
        refused = run_cli("lab", *args, env=env)
        lines = refused.stderr.strip().splitlines()
        assert refused.returncode == 2 and len(lines) == 1 and needle in lines[0], describe(refused)


# ---------------------------------------------------------------- sweeps across hosts


@pytest.fixture(scope="module")
def two_hosts(lab, tmp_path_factory):
    """One sweep, 2 hosts x 1 rank, with the bytes each host's link received meanwhile."""
    folder = tmp_path_factory.mktemp("two-hosts")
    before = link_bytes(lab, ["h1", "h2"])
    result = lab_sweep(folder, SUITE, "--hosts", "h1,h2")
    after = link_bytes(lab, ["h1", "h2"])
    return result, folder / "run", {host: after[host] - before[host] for host in before}


def test_ranks_on_two_hosts_are_two_real_nodes(two_hosts):
    result, out, _ = two_hosts
    assert result.returncode == 0, describe(result)
    frame, meta = read_run(out)
    assert set(frame["status"]) == {"ok"} and (frame["n_wrong"] == 0).all(), frame[["impl", "status", "error"]]
    assert (frame["nnodes"] == 2).all() and (frame["ranks_per_node"] == 1).all()
    assert not frame["virtual_nodes"].any() and set(frame["hosts"]) == {"h1,h2"}
    assert set(frame["launch_id"]) == {"n2-rpn1-h2x1-host"}
    assert meta["hosts"]["source"] == "hosts" and [h["name"] for h in meta["hosts"]["hosts"]] == ["h1", "h2"]
    assert meta["hosts"]["machines"] == 1  # namespace hosts: one boot id, one machine's cores
    (launch,) = meta["launches"].values()
    assert "-hosts" in launch["argv"] and launch["argv"][launch["argv"].index("-hosts") + 1] == "h1:1,h2:1"
    assert [(h["hostname"], h["ranks"]) for h in launch["placement"]] == [("h1", 1), ("h2", 1)]
    assert meta["env"]["HYDRA_LAUNCHER_EXEC"].endswith("/rsh")  # the launcher's environment is recorded


def test_the_bytes_crossed_the_hosts_links(two_hosts):
    _, out, received = two_hosts
    frame, _ = read_run(out)
    volume = least_volume(frame)
    assert volume > 10 << 20
    for host, count in received.items():
        assert count >= volume, f"{host} received {count} bytes; the collectives needed at least {volume}"


def test_ranks_on_one_host_of_the_lab_stay_off_the_network(lab, tmp_path):
    before = link_bytes(lab, ["h1"])
    result = lab_sweep(tmp_path, SUITE, "--hosts", "h1", relative=True)  # a run folder renamed into place there
    received = link_bytes(lab, ["h1"])["h1"] - before["h1"]
    assert result.returncode == 0, describe(result)
    frame, _ = read_run(tmp_path / "run")
    assert set(frame["hosts"]) == {"h1"} and (frame["nnodes"] == 1).all()
    # the launcher's own traffic (PMI, output) only: a few hundred KB against the data's tens of MB
    assert received < least_volume(frame) / 50, f"h1 received {received} bytes for an intra-host job"


def test_four_hosts_of_one_and_two_hosts_of_two_in_one_sweep(lab, tmp_path):
    suite = {**SUITE, "collectives": ["allreduce"], "ranks": [4], "ranks_per_node": [1, 2],
             "sizes": {"min": "8B", "max": "4KiB", "factor": 512},
             "implementations": ["mpi", {"impl": "pccl-hier", "inter": ["ring"], "intra": ["ring"]},
                                 {"impl": "pccl-hier", "inter": ["rdfull"], "intra": ["ring", "rdfull"]}]}
    result = lab_sweep(tmp_path, suite, "--hosts", ",".join(HOSTS))
    assert result.returncode == 0, describe(result)
    frame, meta = read_run(tmp_path / "run")
    assert set(frame["status"]) == {"ok"} and (frame["n_wrong"] == 0).all(), frame[["impl", "status", "error"]]
    # the whole-buffer compositions, bit-exact between real hosts in both shapes
    whole = frame[frame["inter"] == "rdfull"]
    assert {(row.intra, row.nnodes) for row in whole.itertuples()} == {(intra, nodes) for intra in ("ring", "rdfull")
                                                                       for nodes in (2, 4)}
    shapes = {(row.launch_id, row.nnodes, row.ranks_per_node, row.hosts) for row in frame.itertuples()}
    assert shapes == {("n4-rpn1-h4x1-host", 4, 1, "h1,h2,h3,h4"), ("n4-rpn2-h2x2-host", 2, 2, "h1,h2")}
    assert not frame["virtual_nodes"].any()
    # four ranks on one machine's two cores, whatever the hosts: oversubscribed, throttled
    assert frame["oversubscribed"].all()
    for launch in meta["launches"].values():
        assert launch["env"]["PCCL_BENCH_MACHINE_RANKS"] == "4"
        assert launch["env"].get("MPIR_CVAR_CH4_PROGRESS_THROTTLE") == "1"


def test_the_hierarchical_compositions_are_exact_on_three_hosts_of_two_and_two_of_three(lab, tmp_path):
    """6 ranks as 3 hosts x 2 and 2 hosts x 3: every composition bit-exact between real hosts, the
    whole-buffer ones, the pipelined ones, flat direct and the all-reduce tail within the node by shm
    included (64 B of int32 over 6 ranks leaves a tail of 4, 8 B is all tail); up to 32 KiB, so the
    shm phase (in place, on the chunks where they lie) runs its LL, copy and single-copy paths."""
    suite = {**SUITE, "ranks": [6], "ranks_per_node": [2, 3], "dtype": ["float64", "int32"], "op": ["sum", "max"],
             "sizes": {"min": "8B", "max": "32KiB", "factor": 8, "semantics": "total"},
             "implementations": [{"impl": "pccl-hier", "inter": ["ring", "bruck"], "intra": ["shm", "ring"]},
                                 {"impl": "pccl-hier", "collectives": ["allreduce"], "inter": ["rdfull"],
                                  "intra": ["shm", "rdfull", "tree"]},
                                 # messages in flight together: pipelined phases, every peer at once
                                 {"impl": "pccl-hier", "inter": ["ring*2", "rd*3"], "intra": ["ring", "bruck"]},
                                 {"impl": "pccl-flat", "algorithms": ["direct"]}],
             "timing": {"warmup": 1, "iters": 2, "min_iters": 2, "budget_s": 0}, "timeout_s": 300}
    result = lab_sweep(tmp_path, suite, "--hosts", "h1,h2,h3", timeout=400)
    assert result.returncode == 0, describe(result)
    frame, _ = read_run(tmp_path / "run")
    assert set(frame["status"]) == {"ok"} and (frame["n_wrong"] == 0).all(), frame[["intra", "inter", "error"]]
    assert {(row.nnodes, row.ranks_per_node, row.hosts) for row in frame.itertuples()} == {
        (3, 2, "h1,h2,h3"), (2, 3, "h1,h2")}
    tails = frame[(frame["collective"] == "allreduce") & (frame["intra"] == "shm") & (frame["bytes_total"] <= 64)]
    assert len(tails) == 2 * 2 * 2 * 3 * 2 and tails["transport"].str.contains("shm:").all()
    paths = set(frame.loc[frame["intra"] == "shm", "transport"].str.findall(r"shm:(\w+)").sum())
    assert {"ll", "copy"} <= paths, paths


def test_rdma_between_hosts_goes_over_tcp(lab, tmp_path):
    import mpi4py

    from collectives.transports.rdma import ops as rdma

    mpi4py.rc.initialize = False
    if rdma.binding_reason():
        pytest.skip(rdma.binding_reason())
    suite = {**SUITE, "collectives": ["allgather", "allreduce"], "sizes": {"min": "8B", "max": "64KiB", "factor": 64},
             "implementations": [{"impl": "rdma", "collectives": ["allgather"], "algorithms": ["ring"]},
                                 {"impl": "rdma", "collectives": ["allreduce"], "algorithms": ["gdraa"]}]}
    result = lab_sweep(tmp_path, suite, "--hosts", "h1,h2")
    assert result.returncode == 0, describe(result)
    frame, _ = read_run(tmp_path / "run")
    assert set(frame["status"]) == {"ok"} and (frame["n_wrong"] == 0).all(), frame[["status", "error"]]
    assert set(frame["transport"]) == {"ucx:tcp"} and set(frame["hosts"]) == {"h1,h2"}


def test_launcher_none_runs_on_every_rank_of_an_outer_mpiexec(lab, tmp_path):
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump({**SUITE, "ranks": [4], "collectives": ["allgather"]}, sort_keys=False))
    prefix, env = on("login")
    outer = [*prefix, find_mpiexec(), "-hosts", "h1:2,h2:2", "-n", "4"]
    result = run_cli("run", "sweep", path, "--launcher", "none", "--out", tmp_path / "run", prefix=outer, env=env)
    assert result.returncode == 0, describe(result)
    assert "MPIR_CVAR_CH4_PROGRESS_THROTTLE" in result.stdout  # the warning: started without the throttle
    frame, meta = read_run(tmp_path / "run")
    assert set(frame["status"]) == {"ok"} and (frame["nranks"] == 4).all()
    assert (frame["nnodes"] == 2).all() and set(frame["hosts"]) == {"h1,h2"} and frame["oversubscribed"].all()
    assert meta["launcher"] == "none" and meta["hosts"]["source"].startswith("the job around it")
    wrong = run_cli("run", "sweep", path, "--launcher", "none", "--set", "ranks=[2]", "--out", tmp_path / "other",
                    prefix=outer, env=env)
    lines = wrong.stderr.strip().splitlines()
    assert wrong.returncode == 2 and len(lines) == 1 and "this job has 4 ranks" in lines[0], describe(wrong)
    assert not (tmp_path / "other").exists()


# ---------------------------------------------------------------- a host fails


def test_a_failed_host_fails_its_cells_and_resume_finishes_them(lab, tmp_path):
    suite = {**SUITE, "collectives": ["allreduce"], "sizes": {"min": "8B", "max": "1MiB", "factor": 4},
             "timing": {"warmup": 1, "iters": 1500, "min_iters": 1500, "budget_s": 0}}
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    prefix, env = on("login")
    out = tmp_path / "run"
    argv = [*prefix, sys.executable, "-m", "bench", "run", "sweep", str(path), "--hosts", "h1,h2", "--out", str(out)]
    sweep = subprocess.Popen(argv, env=subprocess_env(1, env), cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    part = out / "parts" / "n2-rpn1-h2x1-host.jsonl"
    deadline = time.monotonic() + 60
    while not (part.exists() and len(part.read_text().splitlines()) >= 2) and time.monotonic() < deadline:
        time.sleep(0.05)
    killed = lab_ops.kill_host(LAB, "h2")
    output, _ = sweep.communicate(timeout=120)
    assert killed, "nothing ran on h2"
    assert sweep.returncode == 3, output[-3000:]
    frame, _ = read_run(out)
    finished, failed = frame[frame["status"] == "ok"], frame[frame["status"] == "failed"]
    assert len(finished) >= 2 and len(failed) >= 1 and len(finished) + len(failed) == len(frame)
    assert failed["error"].str.startswith("MPI job exited with").all(), failed["error"].iloc[0]
    assert not leftovers(lab), leftovers(lab)
    resumed = run_cli("run", "sweep", "--resume", out, prefix=prefix, env=env, timeout=150)
    assert resumed.returncode == 0, describe(resumed)
    frame, _ = read_run(out)
    assert set(frame["status"]) == {"ok"} and len(frame) == len(finished) + len(failed)
    assert not leftovers(lab)


# ---------------------------------------------------------------- the link emulator


def pingpong(sizes: list[int], repeats: int) -> dict:
    prefix, env = on("login")
    argv = [*prefix, find_mpiexec(), "-hosts", "h1:1,h2:1", "-n", "2", sys.executable,
            str(MPI_SCRIPTS / "pingpong.py"), ",".join(map(str, sizes)), str(repeats)]
    result = subprocess.run(argv, env=subprocess_env(2, env), capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_emulated_link_never_delivers_early(lab):
    """Lower bounds are facts whatever the machine's load: a frame leaves the switch no sooner
    than its delay after it arrived, and no faster than the link's rate lets it."""
    try:
        lab_ops.set_link(LAB, Link(delay_us=2000))
        delayed = pingpong([8], 5)["8"]
        lab_ops.set_link(LAB, Link(rate_gbit=0.2))
        limited = pingpong([4 << 20], 3)[str(4 << 20)]
        stats = links.emulator_stats(lab_ops.load(LAB))
    finally:
        lab_ops.set_link(LAB, Link())
    assert delayed["min_us"] >= 2000, delayed
    seconds = (4 << 20) * 8 / 0.2e9
    assert limited["min_us"] >= 0.95 * seconds * 1e6, limited
    assert stats and stats["departures"] > 0 and stats["rate_mbit"] == 200


def test_the_bridge_is_back_after_the_emulator(lab):
    assert lab_ops.load(LAB).link == Link() and lab_ops.load(LAB).emulator_pid is None
    # The emulator's 2 ms delay holds back every round trip; the bridge only some, when a load burst
    # deschedules a rank: the fastest of 100 round trips (not of 5, which one burst can cover; well under a s)
    assert pingpong([8], 100)["8"]["min_us"] < 2000
