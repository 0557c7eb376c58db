"""Hostile flags and files for ``pccl-bench model run|fit|check|band|replay``: each is refused before any
work with one line ``pccl-bench: error: ...`` naming the flag or file, the field and the value (exit 2),
within seconds, and nothing already written is touched.

Inputs that made the old code loop or allocate without end run in a subprocess with a timeout, so a
regression fails the test instead of hanging the suite; the rest run in process.
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
from conftest import ROOT
from hostile import assert_bad_input, run_in_process

from bench.model.band import MAX_RESAMPLE_BYTES, check_resampling
from bench.plan.sizes import geometric

MACHINES = ROOT / "suites" / "machines"
WORKLOADS = ROOT / "suites" / "workloads"
#: every refusal here comes before the work: well within this
LIMIT_S = 10.0




def one_error_line(code: int, stdout: str, stderr: str, *needed: str) -> str:
    """Exit 2, exactly one line on stderr starting ``pccl-bench: error:``, holding every ``needed``."""
    return assert_bad_input((code, stdout, stderr), *needed)


def refused(*argv: object, needed: tuple[str, ...] = ()) -> str:
    """Run in process; assert the one-line refusal within LIMIT_S."""
    start = time.monotonic()
    code, stdout, stderr = run_in_process(*argv)
    line = one_error_line(code, stdout, stderr, *needed)
    assert time.monotonic() - start < LIMIT_S, f"took {time.monotonic() - start:.1f} s: {line}"
    return line


#: runs each command line of argv[1] (JSON) in process, each under a timer: one JSON line per command
CHILD = r"""
import contextlib, io, json, signal, sys, time
from bench.cli import main

def expire(signum, frame):
    raise TimeoutError

signal.signal(signal.SIGALRM, expire)
for argv in json.loads(sys.argv[1]):
    out, err, code, start = io.StringIO(), io.StringIO(), None, time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, float(sys.argv[2]))
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(argv)
            except SystemExit as done:
                code = done.code if isinstance(done.code, int) else 1
    except TimeoutError:
        code = "still running"
    except BaseException as error:
        code = f"raised {error!r}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    print(json.dumps({"argv": argv, "code": code, "stdout": out.getvalue()[-2000:], "stderr": err.getvalue(),
                      "seconds": time.monotonic() - start}), flush=True)
"""


def refused_in_a_child(cases: list[tuple[list[str], tuple[str, ...]]], cwd: Path) -> None:
    """Every command refused within LIMIT_S, run in one child process (one interpreter start for all):
    a command that loops is stopped by its timer, one that exhausts memory takes only the child down."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-c", CHILD, json.dumps([argv for argv, _ in cases]), str(LIMIT_S)]
    try:
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=LIMIT_S * len(cases) + 30)
        output, errors = done.stdout, done.stderr
    except subprocess.TimeoutExpired as expired:
        output = expired.stdout.decode() if isinstance(expired.stdout, bytes) else expired.stdout or ""
        errors = "(the child timed out)"
    reports = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    for (argv, needed), report in zip(cases, reports, strict=False):
        assert report["argv"] == argv
        line = one_error_line(report["code"], report["stdout"], report["stderr"], *needed) if isinstance(
            report["code"], int) else pytest.fail(f"pccl-bench {' '.join(argv)}: {report['code']}")
        assert report["seconds"] < LIMIT_S, f"{report['seconds']:.1f} s: {line}"
    if len(reports) < len(cases):
        pytest.fail(f"the child stopped at pccl-bench {' '.join(cases[len(reports)][0])}: {errors[-2000:]}")


def edited(source: Path, folder: Path, name: str, old: str, new: str) -> Path:
    """A copy of a shipped YAML file with one piece of text replaced."""
    text = source.read_text()
    assert old in text, f"{old!r} not in {source}"
    path = folder / name
    path.write_text(text.replace(old, new, 1))
    return path


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> Path:
    """A small run folder that reads as measured: `model run local` with every row's status set to ok."""
    folder = tmp_path_factory.mktemp("measured") / "run"
    code, _, stderr = run_in_process("model", "run", "local", "-n", "2,4", "-C", "allgather", "-i", "pccl-flat:ring",
                                     "-i", "mpi", "--sizes", "1KiB:64KiB", "-o", folder)
    assert code == 0, stderr
    table = pd.read_parquet(folder / "results.parquet")
    table["status"] = "ok"
    table.to_parquet(folder / "results.parquet", index=False)
    return folder


def with_rows(measured: Path, folder: Path, **columns: object) -> Path:
    """A copy of the measured run whose first row carries ``columns``."""
    run = folder / "edited-run"
    run.mkdir()
    for path in measured.iterdir():
        (run / path.name).write_bytes(path.read_bytes())
    table = pd.read_parquet(run / "results.parquet")
    for name, value in columns.items():
        table.loc[0, name] = value
    table.to_parquet(run / "results.parquet", index=False)
    return run


# --- inputs that looped or allocated without end ------------------------------------------------------------


def test_endless_inputs_are_refused_at_once(tmp_path: Path, measured: Path) -> None:
    huge_node = edited(MACHINES / "local.yaml", tmp_path, "huge-node.yaml", "gpus_per_node: 2",
                       "gpus_per_node: 1000000000000")
    wide_node = edited(MACHINES / "frontier-paper.yaml", tmp_path, "wide-node.yaml",
                       "gpus_per_node: 8\nnics_per_node: 4\nnic_of_gpu: [0, 0, 1, 1, 2, 2, 3, 3]",
                       "gpus_per_node: 1024\nnics_per_node: 4")
    layers = edited(WORKLOADS / "gpt3-7b-zero3.yaml", tmp_path, "layers.yaml", "layers: 32", "layers: 1000000000")
    buckets = edited(WORKLOADS / "gpt3-7b-ddp.yaml", tmp_path, "buckets.yaml", "bucket_mib: 25",
                     "bucket_mib: 0.000000001")
    many_ranks = edited(WORKLOADS / "gpt3-7b-zero3.yaml", tmp_path, "ranks.yaml", "ranks: [64, 512, 2048]",
                        "ranks: [1000000000]")
    huge_run = with_rows(measured, tmp_path, nranks=10**9)
    cases = [
        (["model", "run", "local", "-n", "2", "-f", "1"], ("--factor", "1", "2 to")),
        (["model", "run", "local", "-n", "2", "-f", "0"], ("--factor", "0")),
        (["model", "run", "local", "-n", "2", "--sizes", "0:1MiB"], ("--sizes", "'0'", "1 B")),
        (["model", "band", "frontier", "-f", "1"], ("--factor", "1")),
        (["model", "run", "local", "-n", "1000000"], ("--ranks", "1000000", "131072")),
        (["model", "run", str(huge_node)], (str(huge_node), "gpus_per_node", "1024", "1000000000000")),
        (["model", "run", str(wide_node), "-n", "8192"], ("--ranks", "8192", "nodes of 1024")),
        (["model", "replay", str(layers), "--machine", "frontier"], (str(layers), "model.layers", "100000")),
        (["model", "replay", str(buckets), "--machine", "frontier"], (str(buckets), "calls", "bucket_mib")),
        (["model", "replay", str(many_ranks), "--machine", "frontier"], (str(many_ranks), "1000000000", "131072")),
        (["model", "check", "local", str(huge_run)], ("results", "1000000000", "131072")),
        (["model", "band", "frontier", "--samples", "1000000000"], ("--samples", "1000000000", "10000")),
        (["model", "run", "local", "-n", ",".join(str(2 * k) for k in range(1, 400))], ("--ranks", "at most 256")),
    ]
    refused_in_a_child(cases, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["huge-node.yaml", "wide-node.yaml", "layers.yaml", "buckets.yaml", "ranks.yaml", "edited-run"])


def test_geometric_refuses_what_never_ends() -> None:
    for low, high, factor in ((8, 64, 1), (8, 64, 0), (8, 64, -2), (0, 64, 2), (-1, 64, 2)):
        with pytest.raises(ValueError):
            geometric(low, high, factor)
    with pytest.raises(ValueError, match="more than 10 sizes"):
        geometric(1, 1 << 60, 2, limit=10)
    assert geometric(1, 1 << 9, 2, limit=10) == [1 << k for k in range(10)]
    assert geometric(16, 8, 2, limit=10) == []


def test_resampling_is_bounded_by_memory() -> None:
    check_resampling(10_000, 1000)
    with pytest.raises(Exception, match="--samples"):
        check_resampling(10_000, MAX_RESAMPLE_BYTES // 8 // 10_000 + 1)


# --- flag values ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("argv", "needed"), [
    (("run", "local", "-n", "2", "--price-per-gpu-hour", "nan"), ("--price-per-gpu-hour", "nan")),
    (("run", "local", "-n", "2", "--price-per-gpu-hour", "inf"), ("--price-per-gpu-hour", "inf")),
    (("run", "local", "-n", "2", "--price-per-gpu-hour", "-1"), ("--price-per-gpu-hour", "-1")),
    (("run", "local", "-n", "2", "--sizes", "1:99999999999999999999GiB"), ("--sizes", "99999999999999999999GiB")),
    (("run", "local", "-n", "2", "--sizes", "1MiB:1KiB"), ("--sizes", "larger than max")),
    (("run", "local", "-n", "2", "-f", "99999999999"), ("--factor", "99999999999")),
    (("band", "frontier", "--seed", "-1"), ("--seed", "-1")),
    (("band", "frontier", "--ranks", "-5"), ("--ranks: -5 GPUs",)),
    (("band", "frontier", "--ranks", "0"), ("--ranks: 0 GPUs",)),
    (("band", "frontier", "--published", "6:33"), ("--published", "--plot")),
    (("band", "frontier", "--published", "nan:3", "--plot", "{tmp}/band.png"), ("--published", "nan:3")),
    (("band", "frontier", "--published", "33:6", "--plot", "{tmp}/band.png"), ("--published", "33:6")),
    (("band", "frontier", "-i", "xccl", "-i", "pccl-flat:bogus"), ("--impl", "pccl-flat:bogus")),
    (("replay", "gpt-tiny-zero3", "--machine", "local", "--price-per-gpu-hour", "nan"), ("--price-per-gpu-hour",)),
    (("replay", "gpt-tiny-zero3", "--machine", "local", "-i", "pccl-flat:bogus"), ("--impl", "bogus")),
    (("replay", "gpt-tiny-zero3", "--machine", "local", "-i", "xccl"), ("--impl", "library")),
    (("fit", "{run}", "--gpus-per-node", "0"), ("--gpus-per-node: 0:", "1024")),
    (("fit", "{run}", "--gpus-per-node", "100000"), ("--gpus-per-node: 100000:",)),
    (("fit", "{run}", "--name", "../escape"), ("--name", "../escape")),
    (("fit", "{run}", "--rendezvous", "0"), ("--rendezvous", "'0'")),
    (("check", "local", "{run}", "--plot", "{tmp}/check.png"), ("--plot", "--fit-on")),
    (("check", "local", "{run}", "--winners", "{tmp}/w.csv"), ("--winners", "--fit-on")),
    (("check", "local", "{run}", "--fit-on", ""), ("--fit-on",)),
    (("check", "local", "{run}", "--fit-on", "2", "--plot", "{tmp}/check.foo"), ("--plot", ".foo")),
    (("run", "nosuch-machine"), ("nosuch-machine", "known: ", "frontier", "local")),
])
def test_bad_flag_values_are_one_line(argv: tuple[str, ...], needed: tuple[str, ...], tmp_path: Path,
                                      measured: Path) -> None:
    args = [arg.format(tmp=tmp_path, run=measured) for arg in argv]
    before = files_of(measured)
    out = {"run": "-o", "replay": "-o", "band": "-o"}.get(args[0], "--errors")  # what the work would write
    refused("model", *args, out, tmp_path / "out", needed=needed)
    assert list(tmp_path.iterdir()) == [] and files_of(measured) == before


def test_a_price_of_zero_is_zero(tmp_path: Path) -> None:
    code, _, stderr = run_in_process("model", "run", "frontier", "-n", "8", "-C", "allgather", "-i", "xccl",
                                     "--sizes", "1MiB:1MiB", "--price-per-gpu-hour", "0", "-o", tmp_path / "run")
    assert code == 0, stderr
    table = pd.read_parquet(tmp_path / "run" / "results.parquet")
    assert (table["price_per_gpu_hour_usd"] == 0).all() and (table["cost_per_call_usd"] == 0).all()


# --- machine descriptions and workloads ---------------------------------------------------------------------


@pytest.mark.parametrize(("old", "new", "needed"), [
    ("latency_us: 1.024", "latency_us: .nan", ("intra.latency_us", "finite", "(got nan)")),
    ("bandwidth_gbps: 7.9807", "bandwidth_gbps: .inf", ("intra.bandwidth_gbps", "finite", "(got inf)")),
    ("copy_gbps: 87.736", "copy_gbps: -3", ("copy_gbps", "(got -3)")),
    ("copy_gbps: 87.736", "copy_gbps: 1.0e-300", ("copy_gbps", "(got 1e-300)")),
    ("gpus_per_node: 2", "gpus_per_node: 2.5", ("gpus_per_node", "(got 2.5)")),
    ("gpus_per_node: 2", "gpus_per_node: yes", ("gpus_per_node", "got True")),
    ("nics_per_node: 1", "nics_per_node: 5000", ("nics_per_node", "(got 5000)", "1024")),
    ("host_cores: 2", "host_cores: 100000000000", ("oversubscription.host_cores", "(got 100000000000)")),
    ("step_overhead_us: 0.0", "step_overhead_us: 1e300", ("libraries.pccl.step_overhead_us", "(got '1e300')")),
    ("call_overhead_us: 0.72317", "call_overhead_us: -.inf", ("libraries.pccl.call_overhead_us", "(got -inf)")),
    ("rendezvous_bytes: 8192\n  rendezvous_us: 2.869\ninter", "rendezvous_bytes: 8192\n  rendezvous_us: 2.869\n"
     "  band_bytes: [65536, 1024]\ninter", ("intra.band_bytes", "65536")),
    ("  mpi:\n    name: MPICH", "  mpi:\n    algorithms: {reduce_scatter: bogus}\n    name: MPICH",
     ("libraries.mpi.algorithms", "bogus")),
    ("  mpi:\n    name: MPICH", "  mpi:\n    algorithms: {allgather: pairwise}\n    name: MPICH",
     ("libraries.mpi.algorithms", "pairwise")),
    ("name: pccl-bench", 'name: "two\\nlines"', ("libraries.pccl.name", "two\\nlines")),
    ("name: pccl-bench", f"name: {'x' * 300}", ("libraries.pccl.name", "200")),
])
def test_bad_machine_fields_name_file_field_and_value(old: str, new: str, needed: tuple[str, ...],
                                                      tmp_path: Path) -> None:
    machine = edited(MACHINES / "local.yaml", tmp_path, "machine.yaml", old, new)
    refused("model", "run", machine, "-n", "2", "-o", tmp_path / "out", needed=(str(machine), *needed))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("old", "new", "needed"), [
    ("hidden: 4096", "hidden: .nan", ("model.hidden", "(got nan)")),
    ("hidden: 4096", "hidden: 10000000000", ("model.hidden", "(got 10000000000)")),
    ("layers: 32", "layers: 0", ("model.layers", "(got 0)")),
    ("vocab: 51200", "vocab: true", ("model.vocab", "got True")),
    ("ranks: [64, 512, 2048]", "ranks: []", ("ranks", "(got [])")),
    ("ranks: [64, 512, 2048]", "ranks: [12]", ("ranks", "12 GPUs", "nodes of 8")),
    ("ranks: [64, 512, 2048]", "ranks: [-8]", ("ranks.0", "(got -8)")),
    ("bucket_mib: 25", "bucket_mib: .inf", ("bucket_mib", "(got inf)")),
    ("bucket_mib: 25", "bucket_mib: -1", ("bucket_mib", "(got -1)")),
])
def test_bad_workload_fields_name_file_field_and_value(old: str, new: str, needed: tuple[str, ...],
                                                       tmp_path: Path) -> None:
    source = WORKLOADS / ("gpt3-7b-ddp.yaml" if "bucket" in old else "gpt3-7b-zero3.yaml")
    workload = edited(source, tmp_path, "workload.yaml", old, new)
    refused("model", "replay", workload, "--machine", "frontier", "-o", tmp_path / "out",
            needed=(str(workload), *needed))
    assert not (tmp_path / "out").exists()


def _fitted(tmp_path: Path, change) -> Path:
    machine = yaml.safe_load((MACHINES / "frontier.yaml").read_text())
    change(machine["fit"]["libraries"]["xccl"])
    path = tmp_path / "fitted.yaml"
    path.write_text(yaml.safe_dump(machine))
    return path


def _square(record: dict, value: float) -> None:
    size = len(record["free"])
    record["covariance"] = [[value if i == j else 0.0 for j in range(size)] for i in range(size)]


@pytest.mark.parametrize(("change", "needed"), [
    (lambda record: record.update(covariance=[[1.0, 2.0], [3.0]]), ("fit.libraries.xccl.covariance",)),
    (lambda record: record.update(covariance=[[1.0]]), ("fit.libraries.xccl.covariance", "shape")),
    (lambda record: _square(record, float("nan")), ("fit.libraries.xccl.covariance", "nan")),
    (lambda record: _square(record, 1e20), ("fit.libraries.xccl", "valid range")),
    (lambda record: record.update(free=["bogus"]), ("fit.libraries.xccl.free", "bogus")),
    (lambda record: record.update(terms={"intra.latency_us": "abc"}), ("fit.libraries.xccl.terms", "abc")),
])
def test_bad_fit_records_stop_a_band(change, needed: tuple[str, ...], tmp_path: Path) -> None:
    machine = _fitted(tmp_path, change)
    refused("model", "band", machine, "--samples", "20", "--sizes", "1MiB:1MiB", "-o", tmp_path / "band.csv",
            needed=(str(machine), *needed))
    assert not (tmp_path / "band.csv").exists()


def test_bad_result_rows_name_the_run(tmp_path: Path, measured: Path) -> None:
    run = with_rows(measured, tmp_path, ranks_per_node=3)
    refused("model", "check", "local", run, needed=("results", "3 ranks per node"))
    refused("model", "fit", run, "--gpus-per-node", "2", "-o", tmp_path / "fitted.yaml",
            needed=("results", "3 ranks per node"))
    assert not (tmp_path / "fitted.yaml").exists()


# --- output paths ----------------------------------------------------------------------------------------------


def test_model_run_never_overwrites_a_measured_run(tmp_path: Path, measured: Path) -> None:
    before = files_of(measured)
    refused("model", "run", "local", "-n", "2", "-o", measured, needed=("--out", str(measured), "measured run"))
    assert files_of(measured) == before
    modelled = tmp_path / "modelled"
    for _ in range(2):  # a folder `model run` wrote is its own to overwrite
        code, _, stderr = run_in_process("model", "run", "local", "-n", "2", "-C", "allgather", "-i", "mpi",
                                         "--sizes", "1KiB:1KiB", "-o", modelled)
        assert code == 0, stderr


def test_outputs_are_checked_before_the_work(tmp_path: Path, measured: Path) -> None:
    before = files_of(measured)
    folder = tmp_path / "a-folder"
    folder.mkdir()
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    cases = [
        (("fit", measured, "-o", folder), ("--out", str(folder), "folder")),
        (("fit", measured, "--errors", measured / "results.parquet"), ("--errors", "measured run")),
        (("fit", measured, "-o", tmp_path / "x.yaml", "--errors", tmp_path / "x.yaml"), ("--errors", "--out")),
        (("fit", measured, "--base", tmp_path / "copy.yaml", "--errors", tmp_path / "copy.yaml"),
         ("--errors", "copy.yaml", "input")),
        (("check", "local", measured, "--errors", blocker / "errors.csv"), ("--errors", "blocker")),
        (("check", tmp_path / "copy.yaml", measured, "--errors", tmp_path / "copy.yaml"), ("--errors", "input")),
        (("band", "frontier", "-o", folder), ("--out", "folder")),
        (("band", "frontier", "--plot", tmp_path / "band.foo"), ("--plot", ".foo")),
        (("band", "frontier", "--plot", blocker / "band.png"), ("--plot", "blocker")),
        (("replay", "gpt-tiny-zero3", "--machine", "local", "-o", blocker), ("--out", "blocker")),
        (("replay", "gpt-tiny-zero3", "--machine", "local", "-o", tmp_path / "replay"), ("--out", "replay.csv")),
        (("run", "local", "-n", "2", "-o", blocker), ("--out", "blocker")),
        (("run", "local", "-n", "2", "-o", tmp_path / "run"), ("--out", "results.parquet")),
    ]
    (tmp_path / "copy.yaml").write_bytes((MACHINES / "local.yaml").read_bytes())
    (tmp_path / "replay" / "replay.csv").mkdir(parents=True)
    (tmp_path / "run" / "results.parquet").mkdir(parents=True)
    copy = (tmp_path / "copy.yaml").read_bytes()
    for argv, needed in cases:
        refused("model", *argv, needed=needed)
    assert files_of(measured) == before and (tmp_path / "copy.yaml").read_bytes() == copy
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-folder", "blocker", "copy.yaml", "replay", "run"]
    assert list(folder.iterdir()) == [] and blocker.read_text() == "a file, not a folder"


def test_measured_replay_takes_checked_ranks_and_impls(tmp_path: Path) -> None:
    run = tmp_path / "run"
    code, _, stderr = run_in_process("model", "run", "local", "-n", "2,4", "-C", "allgather", "-C", "reduce_scatter",
                                     "-i", "pccl-flat:ring", "-i", "mpi", "--sizes", "8:16MiB", "-f", "4", "-o", run)
    assert code == 0, stderr
    table = pd.read_parquet(run / "results.parquet")
    table["status"] = "ok"
    table.to_parquet(run / "results.parquet", index=False)
    code, _, stderr = run_in_process("model", "replay", "gpt-tiny-zero3", "--results", run, "-n", "2,2", "-i", "mpi",
                                     "-o", tmp_path / "replay")
    assert code == 0, stderr
    replay = pd.read_csv(tmp_path / "replay" / "replay.csv")
    assert list(replay["nranks"]) == [2] and list(replay["implementation"]) == ["mpi"]
    refused("model", "replay", "gpt-tiny-zero3", "--results", run, "-n", "0", needed=("--ranks", "0"))
