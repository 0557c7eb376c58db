"""The machine-speed probe (bench/rank/probe.py) and ``gate --normalise probe`` (issue 15, item 2).

Synthetic runs: a machine that is 2x slower everywhere (cells and the probe beside them) is one
verdict of its own, not a regression of every cell; a real 1.5x regression on top of it still is."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml
from conftest import describe, run_cli
from synthetic_runs import cell, cli, grid, make_run

from bench.errors import BadInput
from bench.judge.gate import GateOptions, gate
from bench.results.runset import load_runs


def with_probe(folder, probe_us: float):
    frame = pd.read_parquet(folder / "results.parquet")
    frame["probe_us"] = probe_us
    frame.to_parquet(folder / "results.parquet")
    return folder


def runs(tmp_path, machine: float, changes: dict | None = None):
    base = with_probe(make_run(tmp_path / "b", grid(), "b", seed=1), 1.0)
    current = {spec: median * machine * (changes or {}).get(spec, 1.0) for spec, median in grid().items()}
    cur = with_probe(make_run(tmp_path / "c", current, "c", seed=2), 1.0 * machine)
    return base, cur


def test_a_2x_slower_machine_is_one_verdict(tmp_path, capsys):
    base, cur = runs(tmp_path, 2.0)
    raw = gate(load_runs([base]), load_runs([cur]), GateOptions())
    assert {c.verdict for c in raw.cells} == {"regressed"}  # on raw times every cell looks regressed
    assert raw.probe_ratio == pytest.approx(2.0) and "2.00x slower" in raw.machine_verdict()
    judged = gate(load_runs([base]), load_runs([cur]), GateOptions(normalise="probe"))
    assert {c.verdict for c in judged.cells} == {"unchanged"} and judged.passed
    assert "whole machine was 2.00x slower" in judged.machine_verdict()
    code, _ = cli(["gate", base, cur, "--normalise", "probe"])
    out = capsys.readouterr().out
    assert code == 0 and "machine: the whole machine was 2.00x slower" in out and out.count("2.00x") == 1


def test_a_real_regression_on_a_slower_machine_is_still_seen(tmp_path):
    slow = cell(bytes_total=4096)
    base, cur = runs(tmp_path, 2.0, {slow: 1.5})
    result = gate(load_runs([base]), load_runs([cur]), GateOptions(normalise="probe"))
    verdicts = {c.label: c.verdict for c in result.cells}
    assert sorted(verdicts.values()).count("regressed") == 1
    assert next(c for c in result.cells if c.verdict == "regressed").estimate.ratio == pytest.approx(1.5, rel=0.05)


def test_same_machine_has_no_machine_verdict(tmp_path):
    base, cur = runs(tmp_path, 1.0)
    result = gate(load_runs([base]), load_runs([cur]), GateOptions(normalise="probe"))
    assert result.machine_verdict() == "" and result.passed


def test_normalising_without_a_probe_is_bad_input(tmp_path):
    base = make_run(tmp_path / "b", grid(), "b")
    with pytest.raises(BadInput, match="probe"):
        gate(load_runs([base]), load_runs([base]), GateOptions(normalise="probe"))


@pytest.mark.mpi
def test_probe_columns_are_measured(tmp_path):
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump({
        "name": "probe", "collectives": ["allreduce"], "implementations": ["mpi"], "ranks": [2],
        "sizes": {"min": "8B", "max": "64B", "factor": 8},
        "timing": {"warmup": 1, "iters": 25, "min_iters": 25, "budget_s": 0, "probe": True}, "timeout_s": 60}))
    done = run_cli("run", "sweep", suite, "--out", tmp_path / "run")
    assert done.returncode == 0, describe(done)
    results = pd.read_parquet(tmp_path / "run" / "results.parquet")
    for name in ("probe_us", "probe_barrier_us", "probe_memcpy_us"):
        assert (results[name] > 0).all(), name
    done = run_cli("gate", tmp_path / "run", tmp_path / "run", "--normalise", "probe")
    assert done.returncode == 0 and "2 of 2 cells judged" in done.stdout, describe(done)
