"""Another install of the project as an arm (bench/driver/installs.py, an arm's ``install:``): asked once
what it is, refused in one line when it cannot measure for this install, and run in launches of its own
with its own Python, from its own folder."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import TINY_SUITE, describe, run_cli
from hostile import assert_bad_input, run_in_process

from bench.results.table import SCHEMA_VERSION

VENV = Path(sys.executable).parent.parent


def _suite(tmp_path: Path, install: str, **changes) -> Path:
    path = tmp_path / "suite.yaml"
    arms = [{"name": "base"}, {"name": "cand", "install": install}]
    path.write_text(yaml.safe_dump({**TINY_SUITE, "collectives": ["allreduce"], "arms": arms, **changes}))
    return path


def _fake_install(folder: Path, script: str) -> Path:
    """A venv whose bin/python is a shell script (what it says decides the test)."""
    python = folder / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n" + script + "\n")
    python.chmod(0o755)
    return folder


FACTS = {"home": "/nowhere", "version": "0.0", "git_sha": "", "schema_version": SCHEMA_VERSION, "flavour": "mpich",
         "mpi_library": "MPICH Version: 5.0.2", "plan": ""}


@pytest.mark.parametrize("case, script, needle", [
    ("absent", None, "no install there"),
    ("fails", "echo 'ModuleNotFoundError: No module named bench' >&2; exit 1", "cannot run pccl-bench (ModuleNot"),
    ("mute", "exit 0", "cannot run pccl-bench (no output)"),
    ("stranger", "echo '{\"hello\": 1}'", "did not say what it is"),
    ("schema", f"echo '{json.dumps({**FACTS, 'schema_version': 99})}'", "writes result schema version 99"),
    ("plan", f"echo '{json.dumps({**FACTS, 'plan': 'TypeError: unexpected keyword argument'})}'",
     "cannot read this install's launch plans (TypeError"),
    ("openmpi", f"echo '{json.dumps({**FACTS, 'flavour': 'openmpi'})}'", "loads MPICH Version"),
])
def test_an_install_that_cannot_measure_is_bad_input(tmp_path, case, script, needle):
    install = tmp_path / "other" if script is None else _fake_install(tmp_path / "other", script)
    suite = _suite(tmp_path, str(install))
    for command in (("run", "sweep", suite, "--dry-run"), ("run", "sweep", suite, "--out", tmp_path / "out")):
        assert_bad_input(run_in_process(*command), f"{suite}: arms.1.install", str(install), needle)
    assert not (tmp_path / "out").exists()


def test_arms_with_their_own_launches_are_refused_inside_a_job(tmp_path):
    suite = _suite(tmp_path, str(VENV), ranks=[1])
    done = run_cli("run", "sweep", suite, "--launcher", "none", "--out", tmp_path / "out")
    assert done.returncode == 2 and "arms.1: cand: sets env or install" in done.stderr, describe(done)


@pytest.mark.mpi
def test_an_install_arm_runs_its_own_worker_in_launches_of_its_own(tmp_path):
    """This venv, named as another install: its launches run its Python from its own folder, ABBA."""
    suite = _suite(tmp_path, str(VENV), repeats=2)
    done = run_cli("run", "sweep", suite, "--out", tmp_path / "run")
    assert done.returncode == 0, describe(done)
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    facts = meta["installs"][str(VENV)]
    assert facts["python"] == str(VENV / "bin" / "python") and facts["schema_version"] == SCHEMA_VERSION
    argv = meta["launches"]["n2-rpn2-host-r0-cand"]["argv"]
    assert argv[argv.index("-m") - 1] == facts["python"]
    results = pd.read_parquet(tmp_path / "run" / "results.parquet")
    assert set(results.status) == {"ok"} and sorted(results.arm.unique()) == ["base", "cand"]
    timed = results.sort_values("timestamp")
    assert list(dict.fromkeys(timed.launch_id)) == ["n2-rpn2-host-r0-base", "n2-rpn2-host-r0-cand",
                                                    "n2-rpn2-host-r1-cand", "n2-rpn2-host-r1-base"]


def test_an_install_asked_in_an_earlier_round_is_not_asked_again(tmp_path):
    """ab's later rounds take the first round's record (meta.json ``installs``): no second probe."""
    from bench.driver.launchers import choose_launcher
    from bench.plan.suite_files import load_suite
    from bench.sweep.session import Sweep
    from bench.sweep.where import Where

    never = _fake_install(tmp_path / "other", "exit 7")  # would be refused if it were asked
    suite, _ = load_suite(_suite(tmp_path, str(never)))
    where = Where.of(suite, choose_launcher("mpiexec"))
    record = {**{k: v for k, v in FACTS.items() if k != "plan"}, "given": str(never),
              "python": str(never / "bin" / "python")}
    Sweep.of(suite, where, label="suite.yaml").check_installs({str(never): record})
    launcher, install = where.job(where.launches(suite)[1])
    assert install is not None and install.python == record["python"] and install.home == "/nowhere"
    assert launcher.program == where.launcher.program  # no mpiexec beside that Python: this one


#: an install from before the driver/rank split (pre-split): the modules the probe imports, by their names of then
PRE_SPLIT = {
    "bench/__init__.py": "__version__ = '0.0.9'\n",
    "bench/files.py": "from pathlib import Path\nPACKAGE_ROOT = Path(__file__).resolve().parent.parent\n",
    "bench/results/__init__.py": "", "bench/results/table.py": f"SCHEMA_VERSION = {SCHEMA_VERSION}\n",
    "bench/run/__init__.py": "", "bench/run/launchers/__init__.py": "",  # pre-split
    "bench/run/launchers/base.py": "def mpi_flavour():\n    return 'mpich'\n",  # pre-split
    "bench/run/provenance.py": "def git_sha():\n    return 'abc123'\n",  # pre-split
}


def test_an_install_from_before_the_driver_rank_split_runs_its_own_worker_module(tmp_path):
    """An arm of main against a branch works across the split: the probe finds the install's modules
    by their names of then, and its launches start its worker by its name of then."""
    from bench.driver.installs import probe_install
    from bench.driver.launchers import choose_launcher
    from bench.plan.suite_files import load_suite
    from bench.sweep.session import Sweep
    from bench.sweep.where import Where

    tree = tmp_path / "old"
    for name, text in PRE_SPLIT.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    old = _fake_install(tmp_path / "old-venv", f'PYTHONPATH={tree} exec {sys.executable} "$@"')
    install = probe_install(str(old), "arms.1.install", SCHEMA_VERSION)
    old_worker = "bench.run.worker"  # pre-split
    assert (install.worker, install.version, install.home) == (old_worker, "0.0.9", str(tree))
    assert probe_install(str(VENV), "arms.1.install", SCHEMA_VERSION).worker == "bench.rank.worker"
    suite, _ = load_suite(_suite(tmp_path, str(old)))
    where = Where.of(suite, choose_launcher("mpiexec"))
    sweep = Sweep.of(suite, where, label="suite.yaml")
    sweep.check_installs({str(old): install.record()})  # as ab's later rounds take it
    argv, _ = sweep.job_command(where.launches(suite)[1], "plan.json")
    assert argv[argv.index("-m") - 1:argv.index("-m") + 3] == [install.python, "-m", old_worker, "plan.json"]
