"""`python -m bench run sweep|point` end to end on a tiny suite: the tables, meta.json, dry run, resume."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import ROOT, describe, find_mpiexec, run_cli, sigint_default, subprocess_env

from bench.plan.cells import expand
from bench.plan.suite_files import load_suite
from bench.results.table import COLUMNS, SAMPLE_COLUMNS, SCHEMA_VERSION
from collectives.spec import busbw_factor

pytestmark = pytest.mark.mpi

ITERS = 3
TINY = {
    "name": "e2e",
    "description": "pytest end-to-end",
    "collectives": ["allgather", "reduce_scatter", "allreduce"],
    "implementations": ["mpi", {"impl": "pccl-flat", "algorithms": ["ring"]}],
    "ranks": [2, 4],
    "ranks_per_node": 2,
    "sizes": {"min": "64B", "max": "128B", "factor": 2, "semantics": "total"},
    "dtype": "float32",
    "op": "sum",
    "placement": "out_of_place",
    "timing": {"mode": "sync", "warmup": 1, "iters": ITERS, "min_iters": 1, "budget_s": 0},
    "check": True,
    "timeout_s": 120,
}
#: 2 launches x 3 collectives x 2 implementations x 2 sizes
PLANNED = 24
#: what a launcher passes only when ranks outnumber cores (REFERENCE.md §5: harmful otherwise)
OVERSUBSCRIPTION_AIDS = {
    "MPIR_CVAR_ENABLE_HEAVY_YIELD",
    "MPIR_CVAR_CH4_PROGRESS_THROTTLE",
    "OMPI_MCA_mpi_yield_when_idle",
}
TABLE_FILES = ("results.parquet", "results.csv", "samples.parquet", "meta.json")


def write_suite(folder: Path, **changes) -> Path:
    raw = {**TINY, **changes}
    path = folder / "suite.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """One real sweep of the tiny suite, shared by the table checks."""
    base = tmp_path_factory.mktemp("sweep")
    suite = write_suite(base)
    out = base / "run"
    result = run_cli("run", "sweep", suite, "--out", out, timeout=180)
    assert result.returncode == 0, describe(result)
    return {"suite": suite, "out": out, "result": result}


@pytest.fixture(scope="module")
def results(sweep) -> pd.DataFrame:
    return pd.read_parquet(sweep["out"] / "results.parquet")


@pytest.fixture(scope="module")
def samples(sweep) -> pd.DataFrame:
    return pd.read_parquet(sweep["out"] / "samples.parquet")


@pytest.fixture(scope="module")
def meta(sweep) -> dict:
    return json.loads((sweep["out"] / "meta.json").read_text())


def test_plan_of_the_tiny_suite(sweep):
    suite, _ = load_suite(sweep["suite"])
    assert sum(len(launch.cells) for launch in expand(suite)) == PLANNED


def test_sweep_writes_every_file(sweep):
    for name in TABLE_FILES:
        assert (sweep["out"] / name).is_file(), name
    assert "Traceback" not in sweep["result"].stdout + sweep["result"].stderr
    assert f"{PLANNED} ok" in sweep["result"].stdout


def test_results_rows_and_columns(results):
    assert len(results) == PLANNED
    assert list(results.columns) == COLUMNS
    assert results["cell_key"].is_unique
    assert set(results["status"]) == {"ok"}, results[["collective", "impl", "status", "error"]]
    assert (results["n_wrong"] == 0).all()
    assert (results["error"].fillna("") == "").all()


def test_results_describe_what_ran(results, meta):
    assert set(results["collective"]) == {"allgather", "reduce_scatter", "allreduce"}
    assert set(zip(results["impl"], results["algorithm"], strict=True)) == {
        ("mpi", "native"),
        ("pccl-flat", "ring"),
    }
    assert (results["run_id"] == meta["run_id"]).all()
    assert (results["suite"] == "e2e").all()
    assert (results["device"] == "host").all()
    assert (results["dtype"] == "float32").all() and (results["op"] == "sum").all()
    assert (results["placement"] == "out_of_place").all()
    assert (results["timing_mode"] == "sync").all()
    assert (results["warmup"] == 1).all() and (results["iters"] == ITERS).all()
    assert (results["transport"] == "mpi").all()
    assert set(results.loc[results["impl"] == "pccl-flat", "library"]) == {"pccl-bench"}
    assert results.loc[results["impl"] == "mpi", "library"].str.len().gt(0).all()
    assert results["library_version"].str.len().gt(0).all()
    assert (results["mpi_thread_level"] == "single").all()
    assert (results["hosts"].str.len() > 0).all()
    assert str(results["timestamp"].dt.tz) == "UTC"


def test_placement_columns(results):
    for nranks, group in results.groupby("nranks"):
        assert (group["ranks_per_node"] == 2).all()
        assert (group["nnodes"] == nranks // 2).all()
        assert (group["virtual_nodes"] == (nranks > 2)).all()
        assert (group["oversubscribed"] == (nranks > (os.cpu_count() or 1))).all()
        assert group["launch_id"].nunique() == 1
    assert sorted(results["nranks"].unique()) == [2, 4]


def test_sizes(results):
    for row in results.itertuples():
        assert row.bytes_per_rank == row.count_per_rank * 4
        share = 1 if row.collective == "allreduce" else row.nranks
        assert row.bytes_total == row.bytes_per_rank * share
        assert row.bytes_total in (64, 128)  # both sizes divide evenly on 2 and 4 ranks


def test_bandwidths_follow_the_nccl_tests_formulas(results):
    algbw = results["bytes_total"] / results["time_us_p50"] / 1e3
    assert np.allclose(results["algbw_gbps"], algbw)
    factors = [busbw_factor(c, n) for c, n in zip(results["collective"], results["nranks"], strict=True)]
    assert np.allclose(results["busbw_gbps"], algbw * np.array(factors))
    for row in results.itertuples():
        expected = 2 * (row.nranks - 1) / row.nranks if row.collective == "allreduce" else (row.nranks - 1) / row.nranks
        assert row.busbw_gbps == pytest.approx(row.algbw_gbps * expected)
    ordered = results[["time_us_min", "time_us_p50", "time_us_p95", "time_us_p99", "time_us_max"]]
    assert (ordered.diff(axis=1).iloc[:, 1:] >= 0).all().all()
    assert (results["time_us_min"] > 0).all()


def test_samples(results, samples):
    assert list(samples.columns) == SAMPLE_COLUMNS
    assert len(samples) == PLANNED * ITERS
    per_cell = samples.groupby("cell_key").size()
    assert set(per_cell.index) == set(results["cell_key"])
    assert (per_cell == ITERS).all()
    assert (samples["time_us"] > 0).all()
    medians = samples.groupby("cell_key")["time_us"].median()
    by_key = results.set_index("cell_key")
    assert np.allclose(by_key.loc[medians.index, "time_us_p50"], medians)
    assert np.allclose(by_key.loc[medians.index, "time_us_max"], samples.groupby("cell_key")["time_us"].max())


def test_meta(meta, results):
    assert meta["schema_version"] == SCHEMA_VERSION
    assert isinstance(meta["git_sha"], str) and meta["git_sha"]
    assert meta["suite"] == "e2e"
    assert meta["cells_planned"] == meta["cells_written"] == PLANNED
    assert meta["tool_version"] == results["tool_version"].iloc[0]
    assert meta["git_sha"] == results["git_sha"].iloc[0]
    launches = meta["launches"]
    assert len(launches) == 2
    for launch_id, launch in launches.items():
        assert launch_id in set(results["launch_id"])
        argv = launch["argv"]
        assert "bench.rank.worker" in argv
        assert argv[argv.index("-n") + 1] == str(launch["nranks"])
        aids = OVERSUBSCRIPTION_AIDS & set(launch["env"])
        if launch["nranks"] > (os.cpu_count() or 1):
            assert aids, f"{launch_id}: ranks outnumber cores but no yield/throttle setting is passed"
        else:
            assert not aids, f"{launch_id}: {aids} is harmful when ranks do not outnumber cores"
    assert meta["suite_definition"]["name"] == "e2e"
    assert "python" in meta["versions"]


def test_csv_matches_parquet(sweep, results):
    csv = pd.read_csv(sweep["out"] / "results.csv")
    assert list(csv.columns) == COLUMNS
    assert len(csv) == len(results)
    assert list(csv["cell_key"]) == list(results["cell_key"])
    assert np.allclose(csv["time_us_p50"], results["time_us_p50"])
    assert list(csv["status"]) == list(results["status"])


# ---------------------------------------------------------------- dry run


def test_dry_run_prints_one_mpiexec_line_per_launch_and_writes_nothing(tmp_path, repo_root):
    suite = write_suite(tmp_path)
    out = tmp_path / "dry"
    before = sorted(p.name for p in (repo_root / "results").iterdir()) if (repo_root / "results").exists() else []
    for extra in (["--out", str(out)], []):
        result = run_cli("run", "sweep", suite, "--dry-run", *extra, timeout=60)
        assert result.returncode == 0, describe(result)
        mpiexec = find_mpiexec()
        lines = [line for line in result.stdout.splitlines() if line.startswith(mpiexec)]
        assert len(lines) == 2, describe(result)
        for line, nranks in zip(lines, (2, 4), strict=True):
            assert f" -n {nranks} " in line
            assert "bench.rank.worker" in line
            oversubscribed = nranks > (os.cpu_count() or 1)
            assert any(aid in line for aid in OVERSUBSCRIPTION_AIDS) == oversubscribed, line
        assert not out.exists()
    after = sorted(p.name for p in (repo_root / "results").iterdir()) if (repo_root / "results").exists() else []
    assert after == before, "a dry run created a run folder under results/"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["suite.yaml"]


def test_the_default_suite_is_found_from_any_working_directory(tmp_path):
    """``run sweep`` without a suite from a scratch folder (as on a cluster): suites/smoke.yaml by name."""
    result = run_cli("run", "sweep", "--dry-run", cwd=tmp_path, timeout=60)
    assert result.returncode == 0, describe(result)
    assert "bench.rank.worker" in result.stdout and not list(tmp_path.iterdir())


# ---------------------------------------------------------------- run point


def test_run_point(tmp_path):
    out = tmp_path / "point"
    result = run_cli(
        "run",
        "point",
        "-C",
        "allreduce",
        "-np",
        "2",
        "-b",
        "8",
        "-e",
        "64",
        "-n",
        "3",
        "-w",
        "1",
        "--out",
        out,
        timeout=120,
    )
    assert result.returncode == 0, describe(result)
    frame = pd.read_parquet(out / "results.parquet")
    assert len(frame) == 2 * 4  # mpi and pccl-flat, 8/16/32/64 B
    assert set(frame["status"]) == {"ok"} and (frame["n_wrong"] == 0).all()
    assert set(frame["collective"]) == {"allreduce"}
    assert (frame["nranks"] == 2).all()
    assert sorted(frame["bytes_total"].unique()) == [8, 16, 32, 64]
    assert (frame["iters"] == 3).all() and (frame["warmup"] == 1).all()
    assert len(pd.read_parquet(out / "samples.parquet")) == 8 * 3


# ---------------------------------------------------------------- resume


def _part_lines(folder: Path) -> dict[str, list[str]]:
    return {p.name: p.read_text().splitlines() for p in sorted((folder / "parts").glob("*.jsonl"))}


def test_resume_of_a_finished_run_reruns_nothing(sweep, results, tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(sweep["out"], folder)
    parts_before = _part_lines(folder)
    logs_before = {p.name: p.read_text() for p in (folder / "logs").iterdir()}
    result = run_cli("run", "sweep", "--resume", folder, timeout=120)
    assert result.returncode == 0, describe(result)
    assert _part_lines(folder) == parts_before, "a finished cell was measured again"
    assert {p.name: p.read_text() for p in (folder / "logs").iterdir()} == logs_before, "an MPI job was started"
    again = pd.read_parquet(folder / "results.parquet")
    assert sorted(again["cell_key"]) == sorted(results["cell_key"])
    keyed, original = again.set_index("cell_key"), results.set_index("cell_key")
    for column in ("status", "time_us_p50", "busbw_gbps", "n_wrong", "run_id", "launch_id"):
        assert keyed.loc[original.index, column].tolist() == original[column].tolist(), column
    assert json.loads((folder / "meta.json").read_text())["run_id"] == results["run_id"].iloc[0]


def _interrupt(sweep, folder: Path, keep: int, tail: str = "") -> tuple[Path, list[str]]:
    """A copy of the sweep as if it died after ``keep`` rows of the n4 launch (+ a partial line)."""
    shutil.copytree(sweep["out"], folder)
    for name in TABLE_FILES:
        (folder / name).unlink()
    part = next((folder / "parts").glob("n4-*.jsonl"))
    lines = part.read_text().splitlines()
    part.write_text("\n".join(lines[:keep]) + "\n" + tail)
    return part, lines


def test_resume_of_an_interrupted_run_redoes_only_the_missing_cells(sweep, results, tmp_path):
    folder = tmp_path / "run"
    keep = 5
    part, lines = _interrupt(sweep, folder, keep)
    result = run_cli("run", "sweep", "--resume", folder, timeout=180)
    assert result.returncode == 0, describe(result)
    again = pd.read_parquet(folder / "results.parquet")
    assert len(again) == PLANNED and set(again["status"]) == {"ok"}
    assert sorted(again["cell_key"]) == sorted(results["cell_key"])
    kept_keys = sorted(json.loads(line)["cell_key"] for line in lines[:keep])
    assert (
        again.set_index("cell_key").loc[kept_keys, "time_us_p50"].tolist()
        == results.set_index("cell_key").loc[kept_keys, "time_us_p50"].tolist()
    ), "a finished cell was redone"
    rows = [json.loads(line) for line in part.read_text().splitlines()[keep:]]
    assert len(rows) == len(lines) - keep, "exactly the missing n4 cells are measured again"
    assert not {row["cell_key"] for row in rows} & set(kept_keys)
    n2 = next((folder / "parts").glob("n2-*.jsonl"))
    assert n2.read_text().splitlines() == _part_lines(sweep["out"])[n2.name], "the finished launch was rerun"


def test_resume_after_a_crash_mid_line_loses_no_cell(sweep, results, tmp_path):
    folder = tmp_path / "run"
    _, lines = _interrupt(sweep, folder, 5, tail=lines_half(sweep))
    result = run_cli("run", "sweep", "--resume", folder, timeout=180)
    assert result.returncode == 0, describe(result)
    again = pd.read_parquet(folder / "results.parquet")
    assert sorted(again["cell_key"]) == sorted(results["cell_key"])
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["cells_written"] == meta["cells_planned"] == PLANNED


def lines_half(sweep) -> str:
    line = next((sweep["out"] / "parts").glob("n4-*.jsonl")).read_text().splitlines()[5]
    return line[: len(line) // 2]


# ---------------------------------------------------------------- failing jobs


@pytest.fixture(scope="module")
def failing_runs(tmp_path_factory):
    """A job whose worker dies at start-up, and a job killed by its timeout."""
    base = tmp_path_factory.mktemp("failing")
    runs = {}
    for kind, changes in {
        "failed": {"env": {"PYTHONHOME": "/nonexistent"}},  # every rank dies at start-up
        # the first cell cannot finish its ten million timed calls within the second it is given
        "timeout": {
            "timeout_s": 1,
            "timing": {"warmup": 0, "iters": 10_000_000, "min_iters": 1, "budget_s": 0},
        },
    }.items():
        folder = base / kind
        folder.mkdir()
        suite = write_suite(folder, ranks=[2], collectives=["allgather"], **changes)
        result = run_cli("run", "sweep", suite, "--out", folder / "run", timeout=120)
        runs[kind] = (result, folder / "run")
    return runs


@pytest.mark.parametrize("kind", ["failed", "timeout"])
def test_failed_jobs_still_write_the_table(failing_runs, kind):
    result, folder = failing_runs[kind]
    assert "Traceback (most recent call last)" not in result.stderr, describe(result)
    frame = pd.read_parquet(folder / "results.parquet")
    assert len(frame) == 4, describe(result)  # 2 implementations x 2 sizes
    assert set(frame["status"]) == {kind}, frame[["status", "error"]]
    assert frame["error"].str.len().gt(0).all()
    assert frame["time_us_p50"].isna().all()


@pytest.mark.parametrize("kind", ["failed", "timeout"])
def test_failed_jobs_exit_3(failing_runs, kind):
    result, _ = failing_runs[kind]
    assert result.returncode == 3, describe(result)


# ---------------------------------------------------------------- interrupts


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


@pytest.fixture(scope="module")
def interrupted_run(tmp_path_factory):
    """A long sweep interrupted (SIGINT, as Ctrl-C) once it has finished a few cells."""
    base = tmp_path_factory.mktemp("interrupted")
    suite = write_suite(
        base,
        ranks=[2],
        collectives=["allreduce"],
        sizes={"min": "8B", "max": "16MiB"},  # the large cells take seconds: still running at SIGINT
        timing={"warmup": 1, "iters": 500, "min_iters": 1, "budget_s": 0},
    )
    out = base / "run"
    process = subprocess.Popen(
        [sys.executable, "-m", "bench", "run", "sweep", str(suite), "--out", str(out)],
        cwd=ROOT,
        env=subprocess_env(1),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=sigint_default,
    )
    deadline = time.monotonic() + 60
    part = out / "parts" / "n2-rpn2-host.jsonl"
    while time.monotonic() < deadline and process.poll() is None:
        if part.exists() and part.read_text().count("\n") >= 2:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    try:
        stdout, stderr = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"the sweep did not stop after SIGINT\n{stdout}\n{stderr}")
    planned = 2 * 22  # 2 implementations x 22 sizes
    return {
        "out": out,
        "returncode": process.returncode,
        "stdout": stdout,
        "stderr": stderr,
        "planned": planned,
        "base": base,
    }


def test_interrupt_keeps_the_finished_cells(interrupted_run):
    out = interrupted_run["out"]
    assert "Traceback" not in interrupted_run["stderr"], interrupted_run["stderr"]
    frame = pd.read_parquet(out / "results.parquet")
    assert 2 <= len(frame) < interrupted_run["planned"]
    assert set(frame["status"]) == {"ok"}
    meta = json.loads((out / "meta.json").read_text())
    assert meta["cells_written"] == len(frame) and meta["cells_planned"] == interrupted_run["planned"]
    assert not _processes_mentioning(str(interrupted_run["base"])), "MPI ranks outlived the interrupted sweep"


def test_interrupt_exits_130(interrupted_run):
    assert interrupted_run["returncode"] == 130


def test_a_sweep_expands_its_suite_once_and_reads_each_part_file_once(sweep, tmp_path, monkeypatch):
    """The session holds the run: the suite expanded once, each part file read once when the session
    opens (a resumed run's rows), the launches' rows taken as they stream in, the tables written from
    memory and never read back."""
    from hostile import run_in_process

    import bench.sweep.where
    from bench.rank import parts

    calls = {"expand": 0, "parts": [], "parquet": 0}
    expand_before, rows_before, parquet_before = bench.sweep.where.expand, parts._rows, pd.read_parquet

    def counted_expand(*args, **kwargs):
        calls["expand"] += 1
        return expand_before(*args, **kwargs)

    def counted_rows(part, *args):
        calls["parts"].append(part.name)
        return rows_before(part, *args)

    def counted_parquet(*args, **kwargs):
        calls["parquet"] += 1
        return parquet_before(*args, **kwargs)

    folder = tmp_path / "run"
    _interrupt(sweep, folder, 5)
    monkeypatch.setattr(bench.sweep.where, "expand", counted_expand)
    monkeypatch.setattr(parts, "_rows", counted_rows)
    monkeypatch.setattr(pd, "read_parquet", counted_parquet)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    code, out, err = run_in_process("run", "sweep", "--resume", folder)
    assert code == 0, err + out
    assert calls["expand"] == 1
    assert sorted(calls["parts"]) == sorted(path.name for path in (sweep["out"] / "parts").glob("*.jsonl"))
    assert calls["parquet"] == 0
    monkeypatch.undo()
    assert len(pd.read_parquet(folder / "results.parquet")) == PLANNED
