"""``pccl-bench model run|fit|check|replay`` end to end through the CLI entry point (in process, no MPI)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from bench.cli import main
from bench.model.cost import Call, predict_us
from bench.model.impls import parse_variant
from bench.model.machine import load_machine
from bench.results.read import read_results
from bench.results.table import STATUSES


def run_cli(capsys, *args: object) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``pccl-bench args...``."""
    with pytest.raises(SystemExit) as exit_info:
        main([str(arg) for arg in args])
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err


def test_model_run_writes_a_modelled_table(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    code, stdout, _ = run_cli(capsys, "model", "run", "frontier", "--ranks", "16,2048", "-C", "allgather",
                              "--sizes", "1MiB:4MiB", "--out", out)
    assert code == 0 and "modelled cells" in stdout
    table = read_results([out])
    assert set(table["status"]) == {"modelled"} <= set(STATUSES)
    assert {"xccl", "mpi", "pccl-flat", "pccl-hier"} <= set(table["impl"])
    assert table["cost_per_call_usd"].notna().all() and (table["price_per_gpu_hour_usd"] == 0.18).all()
    assert set(table["library"]) >= {"RCCL", "Cray MPICH", "pccl-bench"}
    meta = json.loads((out / "meta.json").read_text())
    assert meta["model"]["machine"]["name"] == "frontier" and "method" in meta["model"]


def test_model_run_rejects_a_gpu_count_that_does_not_fill_nodes(tmp_path: Path, capsys) -> None:
    code, _, stderr = run_cli(capsys, "model", "run", "frontier", "--ranks", "12", "--out", tmp_path / "run")
    assert code == 2
    assert "do not fill nodes of 8" in stderr and "Traceback" not in stderr


def _synthetic_results(folder: Path) -> None:
    machine, _ = load_machine("frontier-paper")
    machine = machine.model_copy(update={"device": "host", "gpus_per_node": 2})
    rows = []
    for label in ("pccl-flat:ring", "pccl-hier:rd/ring"):
        variant = parse_variant(label)
        for nranks in (2, 4, 8):
            for count in (64, 4096, 262144):
                time_us = predict_us(Call("allgather", variant, nranks, 2, count, 4), machine)
                rows.append({"collective": "allgather", "impl": variant.impl, "algorithm": variant.algorithm,
                             "intra": variant.intra, "inter": variant.inter, "nranks": nranks, "ranks_per_node": 2,
                             "count_per_rank": count, "dtype": "float32", "placement": "out_of_place",
                             "bytes_total": nranks * count * 4, "status": "ok", "oversubscribed": False,
                             "time_us_p50": time_us, "device": "host", "library": "pccl-bench", "run_id": "synthetic",
                             "cell_key": f"synthetic-{len(rows)}"})
    folder.mkdir()
    pd.DataFrame(rows).to_parquet(folder / "results.parquet")


def test_model_fit_then_check(tmp_path: Path, capsys) -> None:
    runs, fitted, errors = tmp_path / "runs", tmp_path / "fitted.yaml", tmp_path / "errors.csv"
    _synthetic_results(runs)
    code, _, stderr = run_cli(capsys, "model", "fit", runs, "--name", "synthetic", "--rendezvous", "none",
                              "--out", fitted, "--errors", errors)
    assert code == 0, stderr
    description = yaml.safe_load(fitted.read_text())
    assert description["name"] == "synthetic" and description["fit"]["cells"] == 18
    assert description["inter"]["latency_us"] == pytest.approx(39.0, rel=1e-3)
    assert len(pd.read_csv(errors)) == 18
    code, stdout, _ = run_cli(capsys, "model", "check", fitted, runs)
    assert code == 0 and "median_abs_error_pct" in stdout


def test_model_replay_modelled(tmp_path: Path, capsys) -> None:
    code, _, stderr = run_cli(capsys, "model", "replay", "gpt3-7b-zero3", "--machine", "frontier", "--ranks", "2048",
                              "--out", tmp_path)
    assert code == 0, stderr
    table = pd.read_csv(tmp_path / "replay.csv")
    assert set(table["implementation"]) >= {"xccl", "pccl-hier:rd/ring"}
    assert (table["calls"] == 98).all() and table["cost_per_step_usd"].notna().all()
    code, _, stderr = run_cli(capsys, "model", "replay", "gpt3-7b-zero3", "--machine", "frontier", "--results",
                              tmp_path)
    assert code == 2 and "exactly one of" in stderr
