"""``pccl-bench plot``: figures from synthetic runs and an imported nccl-tests run, in every format."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import DATA
from hostile import assert_bad_input, run_in_process
from synthetic_runs import cell, make_run

from bench.cli import main
from bench.present import plot as plots
from bench.present import plot_style as style
from bench.results.runset import load_runs

IMPLS = (("mpi", "native"), ("pccl-flat", "ring"), ("pccl-flat", "rd"))


def scaling_grid() -> dict:
    """All-gather and all-reduce, three implementations, 2 and 4 ranks, 8 B - 1 MiB."""
    return {cell(collective, impl, algorithm, 8 << (3 * k), nranks): (2.0 + nranks + (8 << (3 * k)) / 500) *
            (1.0 if impl == "mpi" else 0.8 + 0.1 * k)
            for collective in ("allgather", "allreduce") for impl, algorithm in IMPLS
            for k in range(6) for nranks in (2, 4)}


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return make_run(tmp_path_factory.mktemp("plot") / "run", scaling_grid(), "plot-run", launches=1, iters=10)


def test_plot_frame_pools_and_labels(run):
    frame = plots.plot_frame(load_runs([run]).results)
    assert set(frame.label) == {"mpi", "pccl-flat:ring", "pccl-flat:rd"}
    assert set(frame["shape"]) == {"2 ranks", "4 ranks"} and set(frame.variant) == {""}
    assert (frame.size_bucket & (frame.size_bucket - 1)).eq(0).all()  # powers of two


def test_every_figure_in_every_format(run, tmp_path):
    frame = plots.plot_frame(load_runs([run]).results)
    written = plots.save(plots.figures(frame, "mpi"), tmp_path, ["png", "svg", "pdf"])
    names = {path.name for path in written}
    for collective in ("allgather", "allreduce"):
        for kind in ("latency", "busbw", "speedup-vs-mpi", "scaling"):
            for extension in ("png", "svg", "pdf"):
                assert f"{collective}-{kind}.{extension}" in names
    assert all(path.stat().st_size > 1000 for path in written)
    assert (tmp_path / "allgather-latency.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "allgather-latency.pdf").read_bytes()[:4] == b"%PDF"
    svg = (tmp_path / "allgather-latency.svg").read_text()
    assert "1 KiB" in svg and "pccl-flat:ring" in svg  # binary size ticks; text kept as text


def test_speedup_grid_is_baseline_over_implementation(run):
    frame = plots.plot_frame(load_runs([run]).results)
    grid = plots.speedup_grid(frame[frame.collective.eq("allreduce")], "pccl-flat:ring", "mpi")
    assert list(grid.index) == ["2 ranks", "4 ranks"]
    assert grid.iloc[0, 0] == pytest.approx(1 / 0.8, rel=0.05)


def test_colours_are_fixed_per_implementation():
    assert style.colour("mpi") == style.KNOWN_COLOURS["mpi"]
    style.assign_colours(["zeta", "alpha", "mpi"])
    assert style.colour("alpha") != style.colour("zeta")
    assert style.colour("alpha") == style.FALLBACK[0]


def test_size_ticks_are_binary_and_few():
    ticks = style.size_ticks([8, 4 << 20])
    assert len(ticks) <= 8 and 1024 in ticks and 1 << 20 in ticks
    assert [style.short_size(size) for size in (8, 1024, 3 << 20)] == ["8 B", "1 KiB", "3 MiB"]


def test_plot_cli_with_import_and_filters(run, tmp_path, capsys):
    data = DATA / "nccl-tests"
    with pytest.raises(SystemExit):
        main(["import", "nccl-tests", str(data / "all_reduce_perf.txt"), "--out", str(tmp_path / "nccl")])
    with pytest.raises(SystemExit) as done:
        main(["plot", str(run), str(tmp_path / "nccl"), "--out", str(tmp_path / "figs"), "--impl", "mpi",
              "--impl", "xccl", "--format", "svg"])
    assert done.value.code == 0
    # nccl-tests has in-place too, and its buffers rotate: figures of their own beside the warm sweep's
    svg = (tmp_path / "figs" / "allreduce-out_of_place-rotate-latency.svg").read_text()
    assert "4 GPUs" in svg and "xccl" in svg and "pccl-flat" not in svg
    assert (tmp_path / "figs" / "allreduce-out_of_place-warm-latency.svg").is_file()
    with pytest.raises(SystemExit) as done:
        main(["plot", str(run), "--format", "gif", "--out", str(tmp_path / "x")])
    assert done.value.code == 2 and "--format" in capsys.readouterr().err


def test_an_impl_pattern_that_matches_nothing_is_named(run, tmp_path):
    """It said "no ok cells to plot", as if the runs held none."""
    line = assert_bad_input(run_in_process("plot", run, "--impl", "nomatch*", "--out", tmp_path / "figs"),
                            "--impl", "'nomatch*'", "matches no implementation", "mpi, pccl-flat:rd")
    assert "no ok cells" not in line and not (tmp_path / "figs").exists()


@pytest.mark.parametrize("argv", [["--baseline", "nope"], ["--impl", "pccl-*", "--baseline", "mpi"]])
def test_a_baseline_not_plotted_is_refused(run, tmp_path, argv):
    """It exited 0 and wrote every figure but the speedup heatmaps, saying nothing."""
    line = assert_bad_input(run_in_process("plot", run, *argv, "--out", tmp_path / "figs"),
                            "--baseline", repr(argv[-1]), "pccl-flat:ring")
    assert not (tmp_path / "figs").exists(), line


def test_a_run_folder_as_baseline_is_told_apart_from_a_label(run, tmp_path):
    line = assert_bad_input(run_in_process("plot", run, "--baseline", run, "--out", tmp_path / "figs"),
                            "--baseline", str(run), "report")
    assert not (tmp_path / "figs").exists(), line


def test_the_default_baseline_may_be_absent(tmp_path):
    """Without --baseline, runs without mpi (an nccl-tests import) plot without heatmaps, as before."""
    with pytest.raises(SystemExit):
        main(["import", "nccl-tests", str(DATA / "nccl-tests" / "all_reduce_perf.txt"), "--out", str(tmp_path / "n")])
    code, stdout, stderr = run_in_process("plot", tmp_path / "n", "--out", tmp_path / "figs")
    assert code == 0, stderr
    assert "latency" in stdout and "speedup" not in stdout
