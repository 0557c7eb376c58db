"""What Slurm's gres/gpu sets in each task of the Perlmutter and Frontier steps, and which GPU the
worker takes there, on the local cluster of ``scripts/local-slurm.sh`` (n1: 4 GPUs, Perlmutter-like;
n2: 8 GCDs, Frontier-like; stand-in device files, task/affinity).

Each task runs ``python -m collectives.memory.binding`` in place of the worker: it prints the local
rank, the visibility variables Slurm set, the CPUs the task may use and the GPU index the worker's
``bind_before_init`` would choose (the same function, without a GPU). The steps are the srun lines of
``pccl-bench run sweep suites/<site>.yaml --launcher srun --dry-run``, with one change: this
machine's 2 CPUs cannot hold ``-c 32`` x 4 or the Frontier masks (task/affinity refuses the step:
"Unable to layout tasks on given cpus", "CPU binding outside of job step allocation"), so the CPU
and memory binding become ``--cpu-bind=none``; ``test_first_cores_take_gpu_3`` binds for real on a
step that fits.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, describe, run_cli
from test_slurm import _need_slurm, on_cluster  # noqa: F401  (the fixture skips where no Slurm answers)

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("one_lab_at_a_time")]

ENTRY = [sys.executable, "-m", "collectives.memory.binding"]


def site_step(site: str) -> list[str]:
    """The first srun line of the site's own suite (dry run), as argv up to the worker."""
    result = run_cli("run", "sweep", ROOT / "suites" / f"{site}.yaml", "--launcher", "srun", "--dry-run")
    assert result.returncode == 0, describe(result)
    line = next(line for line in result.stdout.splitlines() if "srun " in line and "bench.rank.worker" in line)
    argv = shlex.split(line)
    return argv[:argv.index("-m") - 1]  # up to the python of the worker


def fitted(argv: list[str]) -> list[str]:
    """The step with its CPU and memory binding left to this machine (see the module's docstring)."""
    kept = [word for word in argv if not word.startswith(("--cpu-bind=", "--mem-bind="))]
    return [*kept, "--cpu-bind=none"]


def tasks(argv: list[str], device: str, exported: dict[str, str] | None = None,
          entry: list[str] | None = None) -> list[dict]:
    """What each task of the step printed (``entry``, by default the worker's choice for ``device``),
    in local-rank order."""
    env = [f"{name}={value}" for name, value in (exported or {}).items()]
    command = [*on_cluster(), "env", *env, *argv, *(entry or [*ENTRY, device])]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"{shlex.join(command)}\n{done.stdout}\n{done.stderr}"
    found = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return sorted(found, key=lambda one: one["local_rank"])


def test_perlmutter_step_reverses_in_the_worker_not_in_cuda_visible_devices():
    step = site_step("perlmutter")
    assert "PCCL_BENCH_GPU_MAP=3,2,1,0" in step and "--gpus-per-node=4" in step
    # the reproducer's export: gres/gpu replaces it in every task with the step's own GPUs
    seen = tasks(fitted(step), "cuda", {"CUDA_VISIBLE_DEVICES": "3,2,1,0"})
    assert [one["local_rank"] for one in seen] == [0, 1, 2, 3]
    assert {one["local_rank_from"] for one in seen} == {"SLURM_LOCALID"}
    assert {one["visible"] for one in seen} == {"CUDA_VISIBLE_DEVICES=0,1,2,3"}  # every GPU, every rank
    assert [(one["index"], one["gpu"]) for one in seen] == [(3, "3"), (2, "2"), (1, "1"), (0, "0")]


def test_frontier_step_takes_the_gcd_of_the_local_rank():
    step = site_step("frontier")
    assert "--gpus-per-node=8" in step and not any("PCCL_BENCH_GPU_MAP" in word for word in step)
    seen = tasks(fitted(step), "rocm")
    assert [one["local_rank"] for one in seen] == list(range(8))
    # ROCm filters by ROCR_VISIBLE_DEVICES, which gres/gpu sets as well: all 8 GCDs, each rank its own
    assert {one["visible"].split("; ")[0] for one in seen} == {"ROCR_VISIBLE_DEVICES=0,1,2,3,4,5,6,7"}
    assert [one["gpu"] for one in seen] == [str(gcd) for gcd in range(8)]
    # the masks go by local rank, as --cpu-bind=mask_cpu does on Frontier (two that fit this machine)
    masked = tasks(["srun", "--nodelist=n2", "--nodes=1", "--ntasks=2", "--cpus-per-task=1",
                    "--cpu-bind=mask_cpu:0x2,0x1", "--gpus-per-node=8"], "rocm")
    assert [(one["cpus"], one["gpu"]) for one in masked] == [("1", "0"), ("0", "1")]


def test_first_cores_take_gpu_3():
    """task/affinity binds each rank to its own core (this machine has two): local rank 0 on the
    first core takes GPU 3, local rank 1 on the next GPU 2, as the Perlmutter profile's map says."""
    step = ["srun", "--nodelist=n1", "--nodes=1", "--ntasks=2", "--cpus-per-task=1", "--cpu-bind=cores",
            "--gpus-per-node=4"]
    seen = tasks(step, "cuda", {"PCCL_BENCH_GPU_MAP": "3,2,1,0", "CUDA_VISIBLE_DEVICES": "3,2,1,0"})
    assert [(one["cpus"], one["visible"], one["gpu"]) for one in seen] == [
        ("0", "CUDA_VISIBLE_DEVICES=0,1,2,3", "3"), ("1", "CUDA_VISIBLE_DEVICES=0,1,2,3", "2")]


STATE = Path(os.environ.get("PCCL_SLURM_STATE", "/var/lib/pccl-slurm"))
#: in a task: its visible GPUs and what opening each of the node's device files gives (ENXIO: the
#: cgroup lets it through to a device with no driver behind it; EPERM: the cgroup refuses it)
OPENS = ("import errno, json, os, sys\n"
         "folder = sys.argv[1]\n"
         "def opened(name):\n"
         "    try:\n"
         "        os.close(os.open(os.path.join(folder, name), os.O_RDONLY))\n"
         "        return 'opened'\n"
         "    except OSError as error:\n"
         "        return errno.errorcode[error.errno]\n"
         "print(json.dumps({'local_rank': int(os.environ['SLURM_LOCALID']),\n"
         "                  'visible': os.environ.get('CUDA_VISIBLE_DEVICES'),\n"
         "                  'opens': [opened(name) for name in sorted(os.listdir(folder))]}))\n")


def test_per_task_gpus_hide_the_peers_gpus():
    """Why the profiles ask --gpus-per-node and choose in the worker: with --gpus-per-task=1 and
    task/cgroup's ConstrainDevices each task may open its own GPU only (Cray MPICH's CUDA IPC
    to a peer's GPU fails); with --gpus-per-node=4 every task reaches all four."""
    config = subprocess.run([*on_cluster(), "scontrol", "show", "config"], capture_output=True, text=True,
                            timeout=30, stdin=subprocess.DEVNULL).stdout
    if "task/cgroup" not in config:
        pytest.skip("the cluster runs without task/cgroup (scripts/local-slurm.sh: no writable cgroup v1 here)")
    folder = STATE / "dev" / "n1"
    base = ["srun", "--nodelist=n1", "--nodes=1", "--ntasks=2", "--cpus-per-task=1"]
    shared = tasks([*base, "--gpus-per-node=4"], "", entry=[sys.executable, "-c", OPENS, str(folder)])
    assert [(one["visible"], one["opens"]) for one in shared] == [("0,1,2,3", ["ENXIO"] * 4)] * 2
    alone = tasks([*base, "--gpus-per-task=1"], "", entry=[sys.executable, "-c", OPENS, str(folder)])
    assert [one["visible"] for one in alone] == ["0", "0"]  # each its own GPU, renumbered from 0
    assert [one["opens"].count("ENXIO") for one in alone] == [1, 1]
    assert [one["opens"].count("EPERM") for one in alone] == [3, 3]
    assert alone[0]["opens"] != alone[1]["opens"]
