"""The gate end to end: a real tiny sweep (2 ranks, 2 launches) gated against itself, against a
copy with every sample 1.25x slower, one with a wrong cell and one with a missing cell.

Deterministic on a noisy machine: a run gated against itself compares identical samples (the
bootstrap is seeded, and the interval of a ratio of two identical sample sets holds 1); the
scaled copy is judged on the same samples times 1.25 with the same bootstrap draws, so its
verdicts follow from the run's own interval exactly (tests/bench/judge/test_gate.py checks on seeded
synthetic samples that 1.25x slower cells are regressed).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import describe, run_cli

from bench.judge.gate import GateOptions, gate
from bench.results.runset import load_runs

pytestmark = pytest.mark.mpi

TINY = {
    "name": "gate-e2e", "collectives": ["allgather", "allreduce"],
    "implementations": ["mpi", {"impl": "pccl-flat", "algorithms": ["ring"]}],
    "ranks": [2], "sizes": {"min": "64B", "max": "4KiB", "factor": 8},
    "timing": {"warmup": 3, "iters": 40, "min_iters": 40, "budget_s": 0}, "repeats": 2, "timeout_s": 120,
}
CELLS = 2 * 2 * 3


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("gate-e2e")
    suite = folder / "suite.yaml"
    suite.write_text(yaml.safe_dump(TINY))
    done = run_cli("run", "sweep", suite, "--out", folder / "run")
    assert done.returncode == 0, describe(done)
    return folder / "run"


def copy_run(run: Path, target: Path, change) -> Path:
    """A copy of ``run`` whose results and samples went through ``change(results, samples)``."""
    shutil.copytree(run, target)
    results = pd.read_parquet(target / "results.parquet")
    samples = pd.read_parquet(target / "samples.parquet")
    results, samples = change(results, samples)
    results.to_parquet(target / "results.parquet", index=False)
    samples.to_parquet(target / "samples.parquet", index=False)
    return target


def scaled(results: pd.DataFrame, samples: pd.DataFrame, factor: float = 1.25):
    times = [name for name in results.columns if name.startswith("time_us_")]
    return results.assign(**{name: results[name] * factor for name in times}), \
        samples.assign(time_us=samples["time_us"] * factor)


def gate_cli(tmp_path: Path, *runs: Path) -> tuple:
    done = run_cli("gate", *runs, "--markdown", tmp_path / "gate.md", "--junit", tmp_path / "gate.xml",
                   "--json", tmp_path / "gate.json")
    return done, (tmp_path / "gate.md").read_text() if (tmp_path / "gate.md").exists() else ""


def test_run_against_itself_passes(run, tmp_path):
    done, markdown = gate_cli(tmp_path, run, run)
    assert done.returncode == 0, describe(done)
    assert f"PASS: {CELLS} unchanged of {CELLS} cells" in done.stdout
    assert len(json.loads((tmp_path / "gate.json").read_text())) == CELLS
    assert markdown.startswith("### pccl-bench gate: PASS")


def test_samples_pool_both_launches(run):
    result = gate(load_runs([run]), load_runs([run]), GateOptions())
    assert all(cell.estimate.launches_current == 2 and cell.estimate.n_current == 80 for cell in result.cells)


def test_slower_copy_is_judged_on_the_same_bootstrap(run, tmp_path):
    """Every sample x1.25: the point ratio is 1.25 and, the bootstrap being seeded, the interval is
    exactly 1.25 times the interval of the run against itself. So a cell is regressed exactly when
    1.25 x its own lower bound clears the threshold (this holds however noisy the run was; how
    often it clears is the evaluation's business, docs/GATE-EVALUATION.md), never improved, and the exit
    code says whether any cell regressed."""
    slow = copy_run(run, tmp_path / "slow", scaled)
    own = {cell.key: cell.estimate for cell in gate(load_runs([run]), load_runs([run]), GateOptions()).cells}
    result = gate(load_runs([run]), load_runs([slow]), GateOptions())
    for cell in result.cells:
        assert cell.estimate.ratio == pytest.approx(1.25)
        assert cell.estimate.low == pytest.approx(1.25 * own[cell.key].low)
        margin = 1.25 * own[cell.key].low - (1 + cell.threshold)
        if abs(margin) > 1e-9:
            assert cell.verdict == ("regressed" if margin > 0 else "unchanged"), cell.label
    done, markdown = gate_cli(tmp_path, run, slow)
    regressed = sum(cell.verdict == "regressed" for cell in result.cells)
    assert done.returncode == (1 if regressed else 0), describe(done)
    assert (f"{regressed} regressed" in markdown) == bool(regressed)


def test_wrong_and_missing_cells_fail(run, tmp_path):
    def break_one(results, samples):
        results.loc[0, ["status", "n_wrong"]] = ["wrong", 4]
        return results, samples

    def drop_one(results, samples):  # every repeat of one cell
        first = results.iloc[0]
        keep = lambda frame: ~((frame.collective == first["collective"]) & (frame.impl == first["impl"])  # noqa: E731
                               & (frame.count_per_rank == first["count_per_rank"]))
        return results[keep(results)], samples[keep(samples)]

    for name, change, verdict in (("wrong", break_one, "failed"), ("missing", drop_one, "missing")):
        broken = copy_run(run, tmp_path / name, change)
        done = run_cli("gate", run, broken)
        assert done.returncode == 1, describe(done)
        assert f"1 {verdict}" in done.stdout


def test_no_common_cells_is_bad_input(run, tmp_path):
    other = copy_run(run, tmp_path / "other", lambda r, s: (r.assign(nranks=r.nranks * 4), s.assign(nranks=16)))
    done = run_cli("gate", run, other)
    assert done.returncode == 2 and "no cell in common" in done.stderr


def test_baseline_update_replaces_the_folder(run, tmp_path):
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump({**TINY, "collectives": ["allreduce"], "repeats": 1,
                                     "sizes": {"min": "64B", "max": "64B"}}))
    dest = tmp_path / "baselines" / "tiny"
    (dest / "stale").mkdir(parents=True)
    done = run_cli("baseline", "update", suite, "--runs", "2", "--dest", dest)
    assert done.returncode == 0, describe(done)
    assert sorted(p.name for p in dest.iterdir()) == ["run-1", "run-2"]
    assert sorted(p.name for p in (dest / "run-1").iterdir()) == ["meta.json", "results.parquet", "samples.parquet"]
    assert run_cli("gate", dest, run, "--collective", "allreduce").returncode in (0, 1)  # readable as a baseline
