"""Unsure speedups are marked the same way in the report and the plots as in the console summary."""

from __future__ import annotations

import pandas as pd
from test_console import TIGHT, row, samples_of

from bench.present import plot as plots
from bench.present.report import summary_section
from bench.results.speedup import Speedup


def frame_of(oversubscribed: bool, with_samples: bool = True) -> pd.DataFrame:
    results = pd.DataFrame([row("mpi", time_us=10.0, oversubscribed=oversubscribed),
                            row("pccl-flat", time_us=5.0, oversubscribed=oversubscribed)])
    samples = samples_of(results, {"mpi": TIGHT, "pccl-flat": TIGHT}) if with_samples else None
    return plots.plot_frame(results, samples)


def test_heatmap_marks_follow_the_rule():
    for oversubscribed, with_samples, unsure in ((False, True, 0.0), (True, True, 1.0), (False, False, 1.0)):
        grid, marks = plots.speedup_grids(frame_of(oversubscribed, with_samples), "pccl-flat:ring", "mpi")
        assert grid.iloc[0, 0] == 2.0
        assert marks.iloc[0, 0] == unsure, (oversubscribed, with_samples)


def test_report_summary_marks_unsure_speedups():
    def text(frame: pd.DataFrame) -> str:
        section = summary_section(frame, "mpi")
        return repr(section)

    sure, unsure = text(frame_of(False)), text(frame_of(True))
    assert "2.00x" in sure and "2.00x?" not in sure and "unsure" not in sure
    assert "2.00x? [" in unsure and "unsure" in unsure


def test_speedup_text():
    assert Speedup(2.0, 1.8, 2.2, False).text() == "2.00x"
    assert Speedup(50.0, 0.9, 160.0, False).text() == "50.00x? [0.9-1.6e+02]"
    assert Speedup(2.0, None, None, False).text() == "2.00x?"
    assert not Speedup(2.0, 1.9, 2.1, True).sure
