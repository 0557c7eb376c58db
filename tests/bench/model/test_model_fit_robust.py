"""``model fit --per-impl`` and ``model check --fit-on``: known terms recovered within their uncertainty,
stragglers ignored, too few points / missing terms as one-line errors (exit 2), a real held-out check."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.cli import main
from bench.errors import BadInput
from bench.model.check import Measured
from bench.model.cost import Call, predict_us
from bench.model.heldout import factor_table, winner_agreement
from bench.model.impls import parse_variant
from bench.model.machine import Link, load_machine
from bench.model.robust import with_library_values
from bench.model.select import fit_per_library

TRUE = {"intra.latency_us": 12.0, "intra.us_per_byte": 1 / 80e3, "inter.latency_us": 30.0,
        "inter.us_per_byte": 1 / 20e3, "reduce.us_per_byte": 1 / 200e3, "library.call_overhead_us": 50.0}


def _machine(values: dict[str, float]):
    base, _ = load_machine("perlmutter-paper")
    return with_library_values(base, "xccl", values)


def _cells(machine, ranks=(4, 8, 16, 32), noise: float = 0.03, seed: int = 1) -> list[Measured]:
    rng = np.random.default_rng(seed)
    cells = []
    for collective in ("allgather", "reduce_scatter"):
        for nranks in ranks:
            for size in (1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28):
                call = Call(collective, parse_variant("xccl"), nranks, min(nranks, 4), size // nranks // 4, 4)
                for _repeat in range(3):
                    time_us = predict_us(call, machine) * float(np.exp(rng.normal(0, noise)))
                    cells.append(Measured(call, time_us, {"nranks": nranks}))
    return cells


def test_known_terms_recovered_within_their_uncertainty() -> None:
    truth = _machine(TRUE)
    start = _machine({name: value * 2.0 for name, value in TRUE.items()})
    fitted, fits = fit_per_library(_cells(truth), start)
    (result,) = fits
    for name, value in TRUE.items():
        if name in result.sd:  # a term the critical path sees has an uncertainty: truth within 3 sd (or 8%:
            # the covariance sd understates the spread of the call cost, see docs/MODEL-PROJECTION.md; with 3% noise the
            # fit's optimum has a lower loss than the truth and sits 5.4% off it in intra.latency_us)
            assert abs(result.values[name] - value) <= max(3 * result.sd[name], 0.08 * value), name
        assert result.values[name] == pytest.approx(value, rel=0.25), name
    assert {"intra.latency_us", "inter.latency_us", "inter.us_per_byte"} <= set(result.sd)
    assert fitted.libraries["xccl"].inter.latency_us == pytest.approx(TRUE["inter.latency_us"], rel=0.25)


def test_a_straggler_does_not_drag_the_fit() -> None:
    truth = _machine(TRUE)
    cells = _cells(truth)
    cells[7] = Measured(cells[7].call, cells[7].time_us * 100.0, cells[7].row)  # one 100x call, as in the logs
    _, (result,) = fit_per_library(cells, _machine({k: v * 2 for k, v in TRUE.items()}))
    assert result.values["inter.latency_us"] == pytest.approx(TRUE["inter.latency_us"], rel=0.25)


def test_a_straggled_median_does_not_drag_the_fit() -> None:
    truth = _machine(TRUE)
    cells = _cells(truth)
    for index in (7, 8):  # two of the three repeats of one cell
        cells[index] = Measured(cells[index].call, cells[index].time_us * 100.0, cells[index].row)
    _, (result,) = fit_per_library(cells, _machine({k: v * 2 for k, v in TRUE.items()}))
    assert result.values["inter.latency_us"] == pytest.approx(TRUE["inter.latency_us"], rel=0.25)


def test_too_few_points_is_one_line_naming_the_implementation() -> None:
    truth = _machine(TRUE)
    with pytest.raises(BadInput, match=r"xccl.*too few points"):
        fit_per_library(_cells(truth, ranks=(4, 8)), truth)
    with pytest.raises(BadInput, match=r"xccl.*no cell that crosses a node.*inter"):
        fit_per_library(_cells(truth, ranks=(2, 4)), truth)


def _table(machine, ranks, impls=("xccl", "mpi")) -> pd.DataFrame:
    rows = []
    for impl in impls:
        for nranks in ranks:
            for size in (1 << 20, 1 << 24, 1 << 28):
                count = size // nranks // 4
                call = Call("allgather", parse_variant(impl), nranks, min(nranks, 4), count, 4)
                rows.append({"status": "ok", "impl": impl, "algorithm": "native", "intra": "", "inter": "",
                             "collective": "allgather", "nranks": nranks, "ranks_per_node": min(nranks, 4),
                             "count_per_rank": count, "dtype": "float32", "placement": "out_of_place",
                             "bytes_total": count * 4 * nranks, "oversubscribed": False, "device": "cuda",
                             "time_us_p50": predict_us(call, machine), "run_id": "synthetic",
                             "cell_key": f"synthetic-{len(rows)}"})
    return pd.DataFrame(rows)


def test_held_out_check_predicts_unseen_counts(tmp_path: Path, capsys) -> None:
    truth = _machine(TRUE)
    truth = with_library_values(truth, "mpi", {**TRUE, "inter.latency_us": 5.0, "library.call_overhead_us": 200.0})
    frame = _table(truth, (4, 8, 16, 32, 64))
    run = tmp_path / "run"
    run.mkdir()
    frame.to_parquet(run / "results.parquet")
    with pytest.raises(SystemExit) as exit_info:
        main(["model", "check", "perlmutter-paper", str(run), "--fit-on", "4,8,16,32", "--errors",
              str(tmp_path / "e.csv"), "--plot", str(tmp_path / "p.png")])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0 and "predicting [64]" in out and (tmp_path / "p.png").stat().st_size > 0
    errors = pd.read_csv(tmp_path / "e.csv", keep_default_na=False)  # empty phase names stay ""
    assert set(errors["nranks"]) == {64}  # only held-out counts are judged
    table = factor_table(errors)
    assert (table["median_factor"] < 1.1).all()
    assert winner_agreement(errors)["agree_pct"].iloc[-1] == 100.0


def test_check_without_a_needed_library_fails_in_one_line(tmp_path: Path, capsys) -> None:
    machine = _machine(TRUE)
    frame = _table(machine, (4, 8), impls=("xccl",))
    run = tmp_path / "run"
    run.mkdir()
    frame.to_parquet(run / "results.parquet")
    with pytest.raises(SystemExit) as exit_info:
        main(["model", "check", "local", str(run)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "xccl" in err and "no 'xccl' library" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_library_links_override_the_machine_links() -> None:
    machine = _machine(TRUE)
    lib = machine.libraries["xccl"]
    assert lib.inter.latency_us == 30.0 and lib.inter.bandwidth_gbps == pytest.approx(20.0)
    assert isinstance(lib.inter, Link)
    assert machine.inter.latency_us != 30.0


# --- issue 14: the terms the reproducer's data demand, the tie-aware winner count, the band ---------------

def _ring_cells(machine, ranks=(16, 32, 64, 128), noise: float = 0.02, seed: int = 3) -> list[Measured]:
    """RCCL-style rings over 8-GPU nodes at sizes whose per-rank message spans 8 KiB - 16 MiB."""
    rng = np.random.default_rng(seed)
    cells = []
    for nranks in ranks:
        for size in (1 << k for k in range(20, 31)):
            call = Call("allgather", parse_variant("xccl"), nranks, 8, size // nranks // 2, 2)
            time_us = predict_us(call, machine) * float(np.exp(rng.normal(0, noise)))
            cells.append(Measured(call, time_us, {"nranks": nranks}))
    return cells


def _frontier_xccl(values: dict[str, float], band=None):
    base, _ = load_machine("frontier-paper")
    return with_library_values(base, "xccl", values, band=band)


RING = {"intra.latency_us": 5.0, "intra.us_per_byte": 1 / 80e3, "inter.latency_us": 20.0,
        "inter.us_per_byte": 1 / 40e3, "reduce.us_per_byte": 0.0, "library.call_overhead_us": 80.0}


def test_band_term_and_window_are_recovered_within_uncertainty() -> None:
    truth = _frontier_xccl({**RING, "inter.band_us": 300.0}, band=(1 << 16, 1 << 18))
    _, (result,) = fit_per_library(_ring_cells(truth), _frontier_xccl({k: v * 2 for k, v in RING.items()}))
    assert "inter.band_us" in result.terms and result.band_bytes == (1 << 16, 1 << 18)
    assert abs(result.values["inter.band_us"] - 300.0) <= max(3 * result.sd["inter.band_us"], 0.05 * 300.0)
    assert result.values["inter.latency_us"] == pytest.approx(20.0, rel=0.25)


def test_node_latency_and_per_node_call_cost_are_recovered() -> None:
    truth = _frontier_xccl({**RING, "inter.node_latency_us": 6.0})
    _, (result,) = fit_per_library(_ring_cells(truth), _frontier_xccl(RING))
    assert "inter.node_latency_us" in result.terms
    assert abs(result.values["inter.node_latency_us"] - 6.0) <= max(3 * result.sd["inter.node_latency_us"], 0.3)
    base, _ = load_machine("frontier-paper")
    values = {**TRUE, "library.call_us_per_node": 40.0}
    truth = with_library_values(base, "pccl", values)
    cells = []
    rng = np.random.default_rng(5)
    for nranks in (16, 32, 64, 128):
        for size in (1 << k for k in range(20, 31, 2)):
            call = Call("allgather", parse_variant("pccl-hier:rd/ring"), nranks, 8, size // nranks // 2, 2)
            cells.append(Measured(call, predict_us(call, truth) * float(np.exp(rng.normal(0, 0.02))), {}))
    _, fits = fit_per_library(cells, with_library_values(base, "pccl", TRUE))
    (result,) = [fit for fit in fits if fit.library == "pccl-hier:rd/ring"]  # its own entry (and pooled pccl)
    assert "library.call_us_per_node" in result.terms
    assert abs(result.values["library.call_us_per_node"] - 40.0) <= max(3 * result.sd["library.call_us_per_node"], 4)


def test_no_extra_term_without_evidence() -> None:
    truth = _frontier_xccl(RING)
    _, (result,) = fit_per_library(_ring_cells(truth), _frontier_xccl(RING))
    assert result.terms == ["intra.latency_us", "intra.us_per_byte", "inter.latency_us", "inter.us_per_byte",
                            "reduce.us_per_byte", "library.call_overhead_us"]
    assert any("not kept" in note for note in result.selection)


def test_ties_are_counted_apart_and_raw_agreement_is_kept() -> None:
    from bench.model.heldout import winner_cells

    errors = pd.DataFrame({"collective": ["allgather"] * 4, "impl": ["xccl", "mpi", "xccl", "mpi"],
                           "algorithm": ["native"] * 4, "intra": [""] * 4, "inter": [""] * 4,
                           "nranks": [256] * 4, "bytes_total": [1, 1, 2, 2],
                           "time_us_p50": [100.0, 102.0, 100.0, 200.0], "model_us": [110.0, 100.0, 110.0, 100.0]})
    spread = pd.DataFrame({"collective": ["allgather"] * 4, "nranks": [256] * 4, "bytes_total": [1, 1, 2, 2],
                           "label": ["xccl", "mpi", "xccl", "mpi"], "repeats": [3] * 4,
                           "q25": [95.0, 99.0, 95.0, 190.0], "q75": [105.0, 106.0, 105.0, 210.0]})
    cells = winner_cells(errors, spread)
    assert cells["tie"].tolist() == [True, False] and not cells["agree"].any()
    row = winner_agreement(errors, spread).iloc[-1]
    assert row["agree_pct"] == 0.0 and row["ties"] == 1 and row["tie_aware_pct"] == 0.0
    assert winner_agreement(errors)["ties"].iloc[-1] == 0  # without repeats no cell is a tie


def test_the_scale_is_the_noise_not_a_subset_fit() -> None:
    """22 cells with 10% noise: the fitted scale is the noise (a scale re-taken from each round's residuals fell
    to 0.03 as the fit matched half the cells exactly), and the per-call cost is known to tens of us, not to
    0.01 us (the covariance's pseudo-inverse of unscaled columns dropped its least determined direction)."""
    cells = _ring_cells(_frontier_xccl(RING), ranks=(16, 32), noise=0.1)
    _, (result,) = fit_per_library(cells, _frontier_xccl({k: v * 2 for k, v in RING.items()}))
    assert 0.07 <= result.robust_scale <= 0.13
    assert result.sd["library.call_overhead_us"] > 5.0


def test_band_is_a_real_band_and_wider_with_fewer_points() -> None:
    from bench.model.band import band_table
    from bench.model.robust import fit_record

    truth = _frontier_xccl(RING)
    widths = []
    for ranks in ((16, 32, 64, 128), (16, 32)):
        cells = [c for c in _ring_cells(truth, ranks=ranks, noise=0.1)]
        fitted, fits = fit_per_library(cells, _frontier_xccl({k: v * 2 for k, v in RING.items()}))
        fitted = fitted.model_copy(update={"fit": {"libraries": fit_record(fits)}})
        table = band_table(fitted, [parse_variant("xccl")], "allgather", 2048, [1 << 20, 1 << 30], samples=200)
        assert (table["time_ms_p5"] < table["time_ms"]).all() and (table["time_ms"] < table["time_ms_p95"]).all()
        widths.append(float(np.log(table["time_ms_p95"] / table["time_ms_p5"]).mean()))
    assert widths[1] > 1.5 * widths[0] > 0


def test_band_without_a_fit_record_fails_in_one_line(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["model", "band", "frontier-paper", "--ranks", "2048"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "no fit covariance for library" in err and len(err.strip().splitlines()) == 1


def test_held_out_counts_never_reach_the_fit(tmp_path: Path, monkeypatch) -> None:
    import bench.cli.model.fit_cmd as model_fit

    seen: list[int] = []
    real = model_fit.fit_per_library

    def spy(measured, base):
        seen.extend(m.call.nranks for m in measured)
        return real(measured, base)

    monkeypatch.setattr(model_fit, "fit_per_library", spy)
    truth = with_library_values(_machine(TRUE), "mpi", {**TRUE, "inter.latency_us": 5.0})
    run = tmp_path / "run"
    run.mkdir()
    _table(truth, (4, 8, 16, 32, 64)).to_parquet(run / "results.parquet")
    with pytest.raises(SystemExit):
        main(["model", "check", "perlmutter-paper", str(run), "--fit-on", "4,8,16,32"])
    assert seen and 64 not in set(seen) and set(seen) == {4, 8, 16, 32}


def test_each_hierarchical_implementation_gets_its_own_terms() -> None:
    base, _ = load_machine("perlmutter-paper")
    hier = {"intra.latency_us": 20.0, "intra.us_per_byte": 1 / 100e3, "inter.latency_us": 15.0,
            "inter.us_per_byte": 1 / 20e3, "reduce.us_per_byte": 1 / 500e3, "library.call_overhead_us": 50.0}
    truth = base
    for label, call_cost in (("pccl-hier:mpi/xccl", 300.0), ("pccl-hier:xccl/xccl", 40.0)):
        truth = truth.model_copy(update={"libraries": {**truth.libraries, label: truth.libraries["pccl"]}})
        truth = with_library_values(truth, label, {**hier, "library.call_overhead_us": call_cost})
    rng = np.random.default_rng(7)
    cells = []
    for label in ("pccl-hier:mpi/xccl", "pccl-hier:xccl/xccl"):
        for nranks in (8, 16, 32, 64):
            for size in (1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28):
                call = Call("allgather", parse_variant(label), nranks, 4, size // nranks // 4, 4)
                cells.append(Measured(call, predict_us(call, truth) * float(np.exp(rng.normal(0, 0.02))), {}))
    fitted, fits = fit_per_library(cells, base)
    by = {fit.library: fit for fit in fits}
    assert {"pccl", "pccl-hier:mpi/xccl", "pccl-hier:xccl/xccl"} <= set(by)  # pooled pccl + one per implementation
    # with 4 GPUs per node the intra steps are a constant 3, so the call cost and the intra latency are one
    # sum: check what the entries predict (held out: 128 GPUs), each its own implementation's truth
    for label in ("pccl-hier:mpi/xccl", "pccl-hier:xccl/xccl"):
        assert label in fitted.libraries
        for size in (1 << 20, 1 << 26):
            call = Call("allgather", parse_variant(label), 128, 4, size // 128 // 4, 4)
            assert predict_us(call, fitted) == pytest.approx(predict_us(call, truth), rel=0.1), (label, size)
    small = [Call("allgather", parse_variant(label), 128, 4, (1 << 20) // 512, 4)
             for label in ("pccl-hier:mpi/xccl", "pccl-hier:xccl/xccl")]
    gap = predict_us(small[1], fitted) - predict_us(small[0], fitted)
    assert gap == pytest.approx(predict_us(small[1], truth) - predict_us(small[0], truth), rel=0.25)


def test_bootstrap_band_resamples_the_cells() -> None:
    from bench.model.band import band_table
    from bench.model.robust import fit_record

    truth = _frontier_xccl(RING)
    cells = _ring_cells(truth, noise=0.1)
    fitted, fits = fit_per_library(cells, _frontier_xccl({k: v * 2 for k, v in RING.items()}))
    fitted = fitted.model_copy(update={"fit": {"libraries": fit_record(fits)}})
    table = band_table(fitted, [parse_variant("xccl")], "allgather", 2048, [1 << 20], samples=25, measured=cells)
    row = table.iloc[0]
    assert row["time_ms_p5"] < row["time_ms_p95"] and row["time_ms_p5"] <= row["time_ms"] * 1.05
    assert row["time_ms"] <= row["time_ms_p95"] * 1.05
