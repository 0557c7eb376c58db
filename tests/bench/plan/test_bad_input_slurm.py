"""Bad Slurm input through the real CLI (the pattern of tests/bench/cli/test_bad_input.py): the suite's ``slurm``
block, --launcher srun|sbatch without Slurm, --wait, --partition/--account/--time. Exit 2, one line
naming the field or flag and the value, no traceback, no result files. No cluster needed."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from bad_suites import assert_bad_command, suite_text
from conftest import run_cli

from bench.errors import BadInput
from bench.plan.suite import parse_suite


@dataclass
class Case:
    id: str
    argv: Callable[[Path, Path], list[str]]
    needles: list[str]
    suite: str = field(default_factory=suite_text)
    #: run with PATH holding nothing but an empty folder (no srun, no sbatch)
    no_slurm: bool = False


def sweep(*extra: str) -> Callable[[Path, Path], list[str]]:
    return lambda suite, out: ["run", "sweep", str(suite), "--out", str(out), *extra]


def point(*extra: str) -> Callable[[Path, Path], list[str]]:
    return lambda suite, out: ["run", "point", "--out", str(out), *extra]


def slurm_block(**fields) -> str:
    return suite_text(slurm=fields)


CASES = [
    Case("srun-args-not-a-list", sweep(), ["{suite}", "slurm.srun_args", "valid list", "--cpu-bind=cores"],
         slurm_block(srun_args="--cpu-bind=cores")),
    Case("srun-args-sets-ntasks", sweep(), ["{suite}", "slurm.srun_args.0", "--ntasks=4", "ranks"],
         slurm_block(srun_args=["--ntasks=4"])),
    Case("sbatch-args-sets-output", sweep("--launcher", "sbatch"),
         ["{suite}", "slurm.sbatch_args.0", "--output", "run folder"], slurm_block(sbatch_args=["--output=x.log"])),
    Case("slurm-time-in-words", sweep(), ["{suite}", "slurm.time", "1 hour", "Slurm time"],
         slurm_block(time="1 hour")),
    Case("launcher-srun-without-srun", sweep("--launcher", "srun"), ["--launcher", "srun", "not found"],
         no_slurm=True),
    Case("launcher-sbatch-without-sbatch", sweep("--launcher", "sbatch"), ["--launcher", "sbatch", "not found"],
         no_slurm=True),
    Case("wait-without-sbatch", sweep("--wait"), ["--wait", "--launcher sbatch"]),
    Case("point-wait-with-mpiexec", point("--launcher", "mpiexec", "--wait"), ["--wait", "mpiexec"]),
    Case("time-flag-in-words", sweep("--launcher", "sbatch", "--time", "1 hour"), ["--time", "1 hour"]),
    Case("partition-flag-with-space", sweep("--launcher", "sbatch", "--partition", "a b"), ["--partition", "a b"]),
]

#: the same checks without a process each (the suite's slurm block): (id, block, needles)
SUITE_CASES = [
    ("srun-args-item-not-a-string", {"srun_args": [4]}, ["slurm.srun_args.0", "string", "4"]),
    ("srun-args-not-an-option", {"srun_args": ["--cpu-bind", "cores"]},
     ["slurm.srun_args.1", "'cores'", "--name=value"]),
    ("srun-args-sets-nodes-short", {"srun_args": ["-N2"]}, ["slurm.srun_args.0", "-N2"]),
    ("srun-args-sets-export", {"srun_args": ["--export=NONE"]}, ["slurm.srun_args.0", "--export", "env"]),
    ("srun-args-sets-partition", {"srun_args": ["--partition=zz"]},
     ["slurm.srun_args.0", "--partition", "slurm.partition"]),
    ("sbatch-args-sets-wait", {"sbatch_args": ["--wait"]}, ["slurm.sbatch_args.0", "--wait"]),
    ("sbatch-args-with-newline", {"sbatch_args": ["--comment=a\nb"]}, ["slurm.sbatch_args.0", "sbatch option"]),
    ("time-negative", {"time": -5}, ["slurm.time", "-5"]),
    ("time-a-boolean", {"time": True}, ["slurm.time", "True"]),
    ("partition-with-space", {"partition": "a b"}, ["slurm.partition", "a b"]),
    ("account-empty", {"account": ""}, ["slurm.account"]),
    ("unknown-field", {"qos": "high"}, ["slurm.qos", "unknown field"]),
    ("not-a-mapping", "srun", ["slurm", "srun"]),
]


@pytest.mark.parametrize(("block", "needles"), [case[1:] for case in SUITE_CASES], ids=[c[0] for c in SUITE_CASES])
def test_bad_slurm_block(block, needles: list[str]):
    raw = {**yaml.safe_load(suite_text()), "slurm": block}
    with pytest.raises(BadInput) as info:
        parse_suite(raw, "suite.yaml")
    line = str(info.value)
    assert line.startswith("suite.yaml: ") and "\n" not in line
    for needle in needles:
        assert needle in line, line


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_slurm_input(case: Case, tmp_path: Path):
    suite = tmp_path / "suite.yaml"
    suite.write_text(case.suite)
    out = tmp_path / "out"
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    env = {"PATH": str(empty)} if case.no_slurm else None
    result = run_cli(*case.argv(suite, out), env=env, timeout=60)
    assert_bad_command(result, out, [needle.replace("{suite}", str(suite)) for needle in case.needles])
    assert not out.exists(), "bad input created the run folder"


def test_out_folder_of_a_submitted_batch_job_is_refused(tmp_path: Path):
    suite = tmp_path / "suite.yaml"
    suite.write_text(suite_text())
    out = tmp_path / "out"
    out.mkdir()
    (out / "slurm.json").write_text(json.dumps({"job_id": "7"}))
    result = run_cli("run", "sweep", suite, "--out", out, timeout=60)
    assert_bad_command(result, out, ["--out", str(out), "batch job", "--resume"], out_existed=True)
    assert sorted(path.name for path in out.iterdir()) == ["slurm.json"]
