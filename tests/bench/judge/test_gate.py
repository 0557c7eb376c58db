"""The regression gate on synthetic runs (no MPI, tests/synthetic_runs.py): statistics, every verdict, options,
outputs, bad input."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from conftest import DATA
from synthetic_runs import cell, cli, grid, make_run

from bench.errors import BadInput
from bench.judge.gate import GateOptions, gate
from bench.plan.cells import Cell
from bench.results.runset import load_runs
from bench.results.stats import median_ratio


def run_gate(tmp_path: Path, baseline: dict, current: dict, **options):
    base = make_run(tmp_path / "base", baseline, "base", seed=1)
    cur = make_run(tmp_path / "cur", current, "cur", seed=2, status=options.pop("status", None))
    return gate(load_runs([base]), load_runs([cur]), GateOptions(**options))


def verdict_of(result, spec: Cell) -> str:
    return next(c.verdict for c in result.cells if c.row["impl"] == spec.impl and c.row["bytes_total"] ==
                spec.bytes_total and c.row["collective"] == spec.collective)


def test_median_ratio_interval_contains_true_ratio():
    rng = np.random.default_rng(0)
    current = [rng.lognormal(np.log(12.5), 0.05, 80) for _ in range(2)]
    baseline = [rng.lognormal(np.log(10.0), 0.05, 80) for _ in range(3)]
    estimate = median_ratio(current, baseline)
    assert estimate.low < 1.25 < estimate.high
    assert estimate.launches_current == 2 and estimate.launches_baseline == 3
    assert estimate.n_current == 160 and estimate.n_baseline == 240


def test_one_slow_launch_widens_the_interval_instead_of_flagging():
    rng = np.random.default_rng(1)
    baseline = [rng.lognormal(np.log(10.0), 0.03, 60) for _ in range(2)]
    current = [rng.lognormal(np.log(10.0), 0.03, 60), rng.lognormal(np.log(30.0), 0.03, 60)]
    estimate = median_ratio(current, baseline)
    assert estimate.low < 1.1 < 2.5 < estimate.high


def test_same_samples_are_unchanged_and_deterministic(tmp_path):
    run = make_run(tmp_path / "a", grid(), "a")
    first = gate(load_runs([run]), load_runs([run]), GateOptions())
    second = gate(load_runs([run]), load_runs([run]), GateOptions())
    assert first.passed and {c.verdict for c in first.cells} == {"unchanged"}
    assert [c.estimate for c in first.cells] == [c.estimate for c in second.cells]


def test_every_verdict(tmp_path):
    slow, fast, broken, gone, added = (cell(bytes_total=64), cell(bytes_total=1 << 20), cell(bytes_total=4096),
                                       cell(impl="pccl-flat", algorithm="ring", bytes_total=64),
                                       cell(impl="pccl-hier", algorithm="hier", bytes_total=64))
    baseline = grid()
    current = {**grid(), slow: baseline[slow] * 1.5, fast: baseline[fast] / 1.5, added: 12.0}
    del current[gone]
    result = run_gate(tmp_path, baseline, current, status={broken: "wrong"})
    assert verdict_of(result, slow) == "regressed"
    assert verdict_of(result, fast) == "improved"
    assert verdict_of(result, broken) == "failed"
    assert verdict_of(result, gone) == "missing"
    assert verdict_of(result, added) == "new"
    assert result.counts()["unchanged"] == 2
    assert not result.passed


def test_threshold_depends_on_size(tmp_path):
    small, large = cell(bytes_total=64), cell(bytes_total=1 << 20)
    baseline = grid()
    current = {**grid(), small: baseline[small] * 1.13, large: baseline[large] * 1.13}
    result = run_gate(tmp_path, baseline, current)
    assert verdict_of(result, small) == "unchanged"  # 15% below 64 KiB
    assert verdict_of(result, large) == "regressed"  # 10% above


def test_failed_cell_is_never_unchanged(tmp_path):
    for status in ("failed", "timeout", "wrong"):
        spec = cell(bytes_total=4096)
        result = run_gate(tmp_path / status, grid(), grid(), status={spec: status})
        assert verdict_of(result, spec) == "failed"
        assert not result.passed


def test_too_few_samples_are_not_judged_and_fail_unless_allowed(tmp_path, capsys):
    """An unjudged cell is not a pass: insufficient cells fail the gate by default, and the
    headline says how many cells were judged and why the others were not."""
    base = make_run(tmp_path / "b", grid(), "b", iters=5, launches=1)
    result = gate(load_runs([base]), load_runs([base]), GateOptions(min_samples=20))
    assert {c.verdict for c in result.cells} == {"insufficient"}
    assert not result.passed and result.judged == 0
    assert gate(load_runs([base]), load_runs([base]), GateOptions(allow_insufficient=True)).passed
    code, _ = cli(["gate", base, base])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL: 6 insufficient of 6 cells; 0 of 6 cells judged" in out
    assert "6 insufficient (fewer than 20 samples on a side)" in out
    code, _ = cli(["gate", base, base, "--allow-insufficient"])
    assert code == 0 and "PASS: 6 insufficient of 6 cells; 0 of 6 cells judged" in capsys.readouterr().out


def test_half_judged_run_fails_and_says_so(tmp_path, capsys):
    """The smoke-run-against-itself case of issue 15: some cells have samples enough, some not."""
    few = {spec: median for spec, median in grid().items() if spec.bytes_total == 64}
    make_run(tmp_path / "run" / "many", {s: m for s, m in grid().items() if s not in few}, "b", seed=1)
    make_run(tmp_path / "run" / "few", few, "b", seed=1, iters=5, launches=1)
    code, _ = cli(["gate", tmp_path / "run", tmp_path / "run"])
    out = capsys.readouterr().out
    assert code == 1 and "4 of 6 cells judged" in out and "2 insufficient" in out


def test_missing_cells_fail_unless_allowed(tmp_path, capsys):
    gone = cell(bytes_total=64)
    base = make_run(tmp_path / "b", grid(), "b", seed=1)
    cur = make_run(tmp_path / "c", {s: m for s, m in grid().items() if s != gone}, "c", seed=2)
    code, _ = cli(["gate", base, cur])
    out = capsys.readouterr().out
    assert code == 1 and "1 missing (not in the current run)" in out and "5 of 6 cells judged" in out
    code, _ = cli(["gate", base, cur, "--allow-missing"])
    assert code == 0
    allow = tmp_path / "allow.yaml"
    allow.write_text("- reason: imported OSU table\n  match: {bytes_total: 64}\n  verdicts: [insufficient]\n")
    few = make_run(tmp_path / "few", grid(), "few", iters=5, launches=1)
    result = gate(load_runs([few]), load_runs([few]), GateOptions(allow=__import__(
        "bench.judge.allowlist", fromlist=["load_allowlist"]).load_allowlist(allow)))
    assert sum(c.fails for c in result.cells) == 4  # the two 64 B cells are allowed


def test_pooled_baselines_and_selection(tmp_path):
    first = make_run(tmp_path / "b1", grid(), "b1", seed=3)
    second = make_run(tmp_path / "b2", grid(), "b2", seed=4)
    current = make_run(tmp_path / "c", grid(), "c", seed=5)
    result = gate(load_runs([first, second]), load_runs([current]), GateOptions(impls=["mpi"], min_bytes=4096))
    assert len(result.cells) == 2
    assert all(c.estimate.launches_baseline == 4 and c.estimate.launches_current == 2 for c in result.cells)
    assert result.baseline_runs == ["b1", "b2"]


def test_allow_list_turns_a_regression_into_a_pass(tmp_path):
    slow = cell(bytes_total=64)
    allow = tmp_path / "allow.yaml"
    allow.write_text("- reason: known MPICH regression (upstream 1234)\n"
                     "  match: {collective: allreduce, impl: mpi, bytes_total: [64B, 8KiB]}\n")
    base = make_run(tmp_path / "b", grid(), "b", seed=1)
    cur = make_run(tmp_path / "c", {**grid(), slow: grid()[slow] * 2}, "c", seed=2)
    code, out = cli(["gate", base, cur])
    assert code == 1
    code, out = cli(["gate", base, cur, "--allow", allow, "--markdown", tmp_path / "g.md"])
    assert code == 0, out
    assert "known MPICH regression" in (tmp_path / "g.md").read_text()


def test_outputs_markdown_junit_json(tmp_path, capsys):
    slow = cell(bytes_total=1 << 20)
    base = make_run(tmp_path / "b", grid(), "b", seed=1)
    cur = make_run(tmp_path / "c", {**grid(), slow: grid()[slow] * 1.4}, "c", seed=2)
    code, _ = cli(["gate", base, cur, "--markdown", tmp_path / "g.md", "--junit", tmp_path / "g.xml",
                   "--json", tmp_path / "g.json"])
    assert code == 1
    assert "FAIL: 1 regressed" in capsys.readouterr().out
    markdown = (tmp_path / "g.md").read_text()
    assert markdown.startswith("### pccl-bench gate: FAIL") and "| allreduce mpi 2 ranks 1 MiB" in markdown
    suite = ET.parse(tmp_path / "g.xml").getroot().find("testsuite")
    assert suite.get("tests") == "6" and suite.get("failures") == "1"
    assert len(suite.findall("testcase/failure")) == 1
    entries = json.loads((tmp_path / "g.json").read_text())
    assert len(entries) == 6 and {"name", "unit", "value", "range", "extra"} <= set(entries[0])
    assert all(entry["unit"] == "us" and entry["value"] > 0 for entry in entries)


@pytest.mark.parametrize("problem", ["empty", "schema", "corrupt", "disjoint", "missing"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, problem):
    base = make_run(tmp_path / "b", grid(), "b")
    cur = make_run(tmp_path / "c", grid(), "c")
    if problem == "empty":
        make_run(tmp_path / "e", {}, "e")
        cur = tmp_path / "e"
    elif problem == "schema":
        import pandas as pd
        frame = pd.read_parquet(cur / "results.parquet").assign(schema_version=0)
        frame.to_parquet(cur / "results.parquet")
    elif problem == "corrupt":
        (cur / "results.parquet").write_bytes(b"PAR1 not really parquet")
    elif problem == "disjoint":
        cur = make_run(tmp_path / "d", {cell(collective="allgather", bytes_total=8192): 5.0}, "d")
    else:
        cur = tmp_path / "nowhere"
    code, _ = cli(["gate", base, cur])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("pccl-bench: error:") and len(err.strip().splitlines()) == 1, err


def test_bad_allow_list_is_bad_input(tmp_path):
    allow = tmp_path / "allow.yaml"
    allow.write_text("- match: {impl: mpi}\n")
    from bench.judge.allowlist import load_allowlist
    with pytest.raises(BadInput, match="reason"):
        load_allowlist(allow)
    allow.write_text("- reason: x\n  match: {colour: red}\n")
    with pytest.raises(BadInput, match="unknown field 'colour'"):
        load_allowlist(allow)


def test_common_shift_warns_when_everything_moved(tmp_path):
    many = {cell(impl=impl, bytes_total=64 << (3 * k)): 10.0 + k for impl in ("mpi", "xccl") for k in range(5)}
    result = run_gate(tmp_path, many, {spec: median * 1.3 for spec, median in many.items()})
    assert "moved the same way (median ratio 1.30)" in result.common_shift()
    assert run_gate(tmp_path / "same", many, many).common_shift() == ""


def test_paired_runs_cancel_drift_of_the_machine(tmp_path):
    """The machine is 1.6x slower during some pairs: pooled, the interval is too wide to see a 1.25x
    slowdown; judged pair by pair, it is plain. Three pairs cannot bound a ratio at 95% (their range
    covers the median 75% of the time): not judged, never passed."""
    base, cur = [], []
    for index, state in enumerate((1.0, 1.6, 1.0, 1.6, 1.0, 1.3)):
        cells = {spec: median * state for spec, median in grid().items()}
        # measured in alternation, so run ids sort otherwise than time: pairs follow time
        base.append(make_run(tmp_path / f"b{index}", cells, f"z-base-{9 - index}", seed=10 + index,
                             stamp=1.8e9 + 20 * index))
        cur.append(make_run(tmp_path / f"c{index}", {s: m * 1.25 for s, m in cells.items()}, f"cur-{index}",
                            seed=20 + index, stamp=1.8e9 + 20 * index + 10))
    runs = (load_runs(base), load_runs(cur))
    assert "regressed" not in {c.verdict for c in gate(*runs, GateOptions()).cells}
    paired = gate(*runs, GateOptions(paired=True))
    assert {c.verdict for c in paired.cells} == {"regressed"}
    assert all(1.2 < c.estimate.ratio < 1.3 for c in paired.cells)
    few = gate(load_runs(base[:3]), load_runs(cur[:3]), GateOptions(paired=True))
    assert {c.verdict for c in few.cells} == {"insufficient"} and not few.passed
    assert all(c.reason == "3 pairs cannot bound it at 95% (>= 6 needed)" for c in few.cells)
    with pytest.raises(BadInput, match="as many current runs"):
        gate(load_runs(base), load_runs(cur[:2]), GateOptions(paired=True))


def test_pooling_a_run_with_an_imported_one_keeps_the_samples(tmp_path):
    """An imported table has no samples; pooling it must not hide the other run's samples."""
    from bench.importers.import_run import import_files, write_import
    from bench.importers.imported_row import ImportOptions

    data = DATA / "osu" / "osu_allreduce.txt"
    write_import(tmp_path / "osu", *import_files("osu", [data], ImportOptions(nranks=2)))
    base = make_run(tmp_path / "b", grid(), "b", seed=1)
    cur = make_run(tmp_path / "c", grid(), "c", seed=2)
    result = gate(load_runs([base]), load_runs([cur, tmp_path / "osu"]), GateOptions())
    assert result.counts()["unchanged"] == len(grid()) and result.counts()["new"] == 19


def test_baseline_update_refuses_cells_the_gate_cannot_judge(tmp_path):
    from bench.cli.baseline_cmd import too_few_samples

    enough = make_run(tmp_path / "ok", grid(), "ok")
    few = make_run(tmp_path / "few", grid(), "few", iters=5, launches=1)
    assert too_few_samples([enough]) == []
    assert len(too_few_samples([few])) == len(grid())
    assert too_few_samples([few, few, few, few]) == []  # pooled over runs: 4 x 5 samples


def _on_nodes(cells: dict, virtual: bool) -> dict:
    return {Cell(**{**spec.__dict__, "nnodes": 2, "ranks_per_node": 1, "virtual_nodes": virtual}): median
            for spec, median in cells.items()}


def test_virtual_nodes_are_never_judged_against_real_ones(tmp_path):
    """Namespace "nodes" on one host and real nodes of the same shape are other cells: the gate says so
    instead of comparing them; a baseline holding both judges each against its own kind."""
    virtual, real = _on_nodes(grid(), True), _on_nodes(grid(), False)
    with pytest.raises(BadInput, match="the baseline's are virtual, the current run's real"):
        run_gate(tmp_path / "apart", virtual, real)
    slower = {spec: median * 1.5 for spec, median in real.items()}
    result = run_gate(tmp_path / "both", {**virtual, **real}, {**virtual, **slower})
    verdicts = {(cell.label.split(" / ")[1].split(" nodes")[0], cell.verdict) for cell in result.cells}
    assert verdicts == {("2 virtual", "unchanged"), ("2", "regressed")}, verdicts
    assert len(result.cells) == 12
