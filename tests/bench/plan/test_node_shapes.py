"""Node shapes as a sweep axis: ``ranks_per_node`` may list several shapes (8 ranks as 2x4 and 4x2).

A shape runs with every rank count it divides and is skipped for the others; a shape that
divides no rank count, or a rank count no shape divides, is bad input (exit 2, one line).
"""

from __future__ import annotations

import copy

import pandas as pd
import pytest
import yaml
from conftest import TINY_SUITE, describe, find_mpiexec, run_cli

from bench.errors import BadInput
from bench.judge.tune import derive
from bench.plan.cells import expand
from bench.plan.suite import parse_suite
from bench.present.console import summary_tables
from bench.present.plot import plot_frame, speedup_grid


def suite_of(**changes):
    raw = copy.deepcopy(TINY_SUITE)
    raw.update(changes)
    return parse_suite(raw, "shapes.yaml")


def test_one_launch_per_rank_count_and_shape_that_divides_it():
    launches = expand(suite_of(ranks=[4, 6, 8], ranks_per_node=[2, 4]))
    shapes = [(launch.nranks, launch.ranks_per_node) for launch in launches]
    assert shapes == [(4, 2), (4, 4), (6, 2), (8, 2), (8, 4)]  # 4 does not divide 6: skipped there
    assert len({launch.launch_id for launch in launches}) == len(launches)
    for launch in launches:
        assert launch.requested_ranks_per_node == launch.ranks_per_node
        for cell in launch.cells:
            assert (cell.ranks_per_node, cell.nnodes) == (launch.ranks_per_node, launch.nranks // launch.ranks_per_node)
            assert cell.virtual_nodes == (launch.ranks_per_node < launch.nranks)
    # the same measurement in another shape is another cell (the gate, tune and plots tell them apart)
    keys = [cell.key for launch in launches for cell in launch.cells]
    assert len(set(keys)) == len(keys)


def test_a_single_shape_still_reads_as_before():
    one = expand(suite_of(ranks=[2, 4], ranks_per_node=2))
    listed = expand(suite_of(ranks=[2, 4], ranks_per_node=[2]))
    assert [launch.launch_id for launch in one] == [launch.launch_id for launch in listed] == \
        ["n2-rpn2-host", "n4-rpn2-host"]
    assert [c.key for launch in one for c in launch.cells] == [c.key for launch in listed for c in launch.cells]


@pytest.mark.parametrize(
    "change, needles",
    [
        ({"ranks": [8], "ranks_per_node": [3, 4]}, ["shapes.yaml", "ranks_per_node.0", "3", "[8]"]),
        ({"ranks": [6], "ranks_per_node": [4, 5]}, ["ranks.0", "6", "[4, 5]"]),
        ({"ranks": [2, 3], "ranks_per_node": 2}, ["ranks.1", "3", "ranks_per_node=2"]),
        ({"ranks": [8], "ranks_per_node": [2, 2]}, ["ranks_per_node.1", "2", "twice"]),
        ({"ranks_per_node": []}, ["ranks_per_node"]),
        ({"ranks_per_node": [2, 0]}, ["ranks_per_node.1", "0"]),
        ({"ranks_per_node": ["two"]}, ["ranks_per_node.0", "two"]),
    ],
)
def test_bad_shapes_are_one_line_naming_field_and_value(change, needles):
    raw = copy.deepcopy(TINY_SUITE)
    raw.update(change)
    with pytest.raises(BadInput) as info:
        parse_suite(raw, "shapes.yaml")
    message = str(info.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, (needle, message)


def test_bad_shape_on_the_command_line_exits_2(tmp_path):
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump({**TINY_SUITE, "ranks": [8]}))
    result = run_cli("run", "sweep", path, "--dry-run", "--set", "ranks_per_node=[3,4]", timeout=60)
    assert result.returncode == 2, describe(result)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "ranks_per_node.0" in lines[0] and "3" in lines[0], describe(result)
    assert "Traceback" not in result.stderr


def test_dry_run_shows_both_shapes_of_8_ranks(tmp_path):
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump({**TINY_SUITE, "ranks": [8], "ranks_per_node": [2, 4]}))
    result = run_cli("run", "sweep", path, "--dry-run", timeout=60)
    assert result.returncode == 0, describe(result)
    mpiexec = find_mpiexec()
    lines = [line for line in result.stdout.splitlines() if line.startswith(mpiexec)]
    assert len(lines) == 2, describe(result)
    assert "n8-rpn2-host" in lines[0] and "n8-rpn4-host" in lines[1]
    assert all(" -n 8 " in line for line in lines)


@pytest.fixture(scope="module")
def two_shape_run(tmp_path_factory):
    """4 ranks (oversubscribed on 2 cores: slow, so one tiny size) as 4 nodes of 1 and 2 nodes of 2."""
    base = tmp_path_factory.mktemp("shapes")
    raw = {**TINY_SUITE, "name": "shapes", "collectives": ["allgather"], "ranks": [4], "ranks_per_node": [1, 2],
           "implementations": ["mpi", {"impl": "pccl-hier", "inter": ["ring", "rd"], "intra": "ring"}],
           "sizes": {"min": "64B", "max": "64B"}, "timing": {"warmup": 1, "iters": 3, "min_iters": 1, "budget_s": 0}}
    path = base / "suite.yaml"
    path.write_text(yaml.safe_dump(raw))
    out = base / "run"
    result = run_cli("run", "sweep", path, "--out", out, timeout=240)
    assert result.returncode == 0, describe(result)
    return pd.read_parquet(out / "results.parquet"), result


@pytest.mark.mpi
def test_a_real_run_measures_both_shapes(two_shape_run):
    results, _ = two_shape_run
    assert set(results["status"]) == {"ok"} and (results["n_wrong"] == 0).all()
    shapes = results.groupby(["ranks_per_node", "nnodes"])["impl"].apply(lambda s: sorted(set(s))).to_dict()
    assert shapes == {(1, 4): ["mpi", "pccl-hier"], (2, 2): ["mpi", "pccl-hier"]}
    assert results["launch_id"].nunique() == 2
    assert results["cell_key"].is_unique


@pytest.mark.mpi
def test_tables_tune_and_plots_keep_the_shapes_apart(two_shape_run):
    results, _ = two_shape_run
    titles = [table.title for table in summary_tables(results)]
    assert any("4 ranks / 4 nodes" in title for title in titles), titles
    assert any("4 ranks / 2 nodes" in title for title in titles), titles
    entries = derive(results)
    assert sorted(entry["nnodes"] for entry in entries) == [2, 4]
    grid = speedup_grid(plot_frame(results), "pccl-hier:ring/ring", "mpi")
    assert len(grid.index) == 2, grid


def test_measured_replay_times_one_shape_not_the_best_of_both():
    from bench.model.replay import measured_timer

    rows = [{"status": "ok", "impl": "pccl-hier", "algorithm": "", "intra": "ring", "inter": "ring",
             "collective": "allgather", "nranks": 8, "ranks_per_node": per_node, "dtype": "float32",
             "bytes_total": size, "time_us_p50": time_us}
            for per_node, time_us in ((2, 10.0), (4, 30.0)) for size in (1024, 4096)]
    frame = pd.DataFrame(rows)
    count = 1024 // (8 * 4)
    for per_node, time_us in ((4, 30.0), (2, 10.0)):
        timer = measured_timer(frame, "pccl-hier:ring/ring", lambda n, shape=per_node: shape)
        assert timer("allgather", count, "float32", 8) == pytest.approx(time_us)
