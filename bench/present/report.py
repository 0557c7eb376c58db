"""``pccl-bench report``: provenance, summary tables, plots and (with a baseline) the gate's verdicts."""

from __future__ import annotations

import io
import time
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from bench import __version__
from bench.judge.gate import GateResult
from bench.judge.gate_output import (
    headline,
    interval_text,
    note_text,
    ratio_text,
    settings_text,
    times_text,
    verdict_text,
)
from bench.plan.sizes import format_size
from bench.present import plot as plots
from bench.present.console import PLACEMENT_TITLES, placements_of
from bench.present.report_doc import Details, Document, Image, Paragraph, Section, TableBlock
from bench.results.runset import RunSet
from bench.results.speedup import UNSURE_NOTE, Speedup
from bench.text import printable

#: the runs' own environment is long: these prefixes are shown first
ENV_SHOWN = 40


def _joined(values) -> str:
    found = sorted({str(value) for value in values if str(value) not in ("", "nan", "None")})
    return ", ".join(found) or "-"


def _mapping(value: object) -> dict:
    """A field of meta.json that should be an object: itself, else {} (a hand-edited or foreign
    meta.json may hold anything; the report still documents the run)."""
    return value if isinstance(value, dict) else {}


def started_text(value: object) -> str:
    """meta.json ``started`` (seconds since the epoch) as UTC; an ISO date as given; "-" when absent;
    anything else (text, null, a list, a number no clock reaches) as unknown, with what it holds."""
    if value is None or value == "" or value == 0:
        return "-"
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:  # 1e20, 10**400, NaN and inf reach no calendar
            return time.strftime("%Y-%m-%d %H:%M", time.gmtime(float(value)))
        except (OverflowError, OSError, ValueError):
            pass
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
            return (moment.astimezone(timezone.utc) if moment.tzinfo else moment).strftime("%Y-%m-%d %H:%M")
        except (ValueError, OverflowError):
            pass
    shown = printable(value)
    return f"unknown ({shown[:40]}{'...' if len(shown) > 40 else ''})"


def _run_ids(meta: dict) -> set[str]:
    """The run ids of a run folder's rows: meta.json's run_id, and each run an import lists
    (``imported_from[].run_id``: the runs of a multi-run import are <run_id>-1, -2 ...)."""
    listed = meta.get("imported_from")
    ids = [meta.get("run_id"), *(_mapping(entry).get("run_id") for entry in
                                 (listed if isinstance(listed, list) else []))]
    return {run_id for run_id in ids if isinstance(run_id, str)}


def _run_rows(runs: RunSet) -> list[list[str]]:
    rows = []
    for source, meta in zip(runs.sources, runs.metas, strict=True):
        meta = _mapping(meta)
        frame = runs.results[runs.results["run_id"].isin(_run_ids(meta))]
        machine = _mapping(meta.get("machine"))
        libraries = _joined(f"{row.library} {row.library_version}".strip() for row in frame.itertuples())
        statuses = ", ".join(f"{n} {s}" for s, n in frame["status"].value_counts().items()) if len(frame) else "-"
        rows.append([str(meta.get("run_id", Path(source).name)), str(meta.get("suite", "-")),
                     started_text(meta.get("started")),
                     f"{machine.get('hostname', '-')} ({machine.get('cores', '?')} cores)",
                     libraries, str(meta.get("git_sha", "-")), statuses])
    return rows


def _versions(runs: RunSet) -> TableBlock:
    names = sorted({name for meta in runs.metas for name in _mapping(meta.get("versions"))})
    rows = [[name, _joined(_mapping(meta.get("versions")).get(name, "") for meta in runs.metas)] for name in names]
    platforms = _joined(_mapping(meta.get("machine")).get("platform", "") for meta in runs.metas)
    return TableBlock(["component", "version"], [["platform", platforms], *rows])


def _environment(runs: RunSet) -> TableBlock:
    env: dict[str, set] = {}
    for meta in runs.metas:
        for name, value in _mapping(meta.get("env")).items():
            env.setdefault(name, set()).add(str(value))
        for launch in _mapping(meta.get("launches")).values():
            for name, value in _mapping(_mapping(launch).get("env")).items():
                env.setdefault(name, set()).add(str(value))
    rows = [[name, ", ".join(sorted(values))] for name, values in sorted(env.items())]
    return TableBlock(["variable", "value"], rows)


def provenance_section(runs: RunSet) -> Section:
    return Section("Provenance", [
        TableBlock(["run", "suite", "started (UTC)", "machine", "libraries", "git sha", "cells"], _run_rows(runs)),
        _versions(runs),
        Details("Environment recorded for the runs (meta.json and every launch)", [_environment(runs)]),
    ])


def _fastest_vs_baseline(cells: pd.DataFrame, best: str, baseline: str) -> Speedup | None:
    """The fastest label's speedup at one size, with the interval of its cells (bench.results.speedup)."""
    base, mine = cells[cells["label"].eq(baseline)], cells[cells["label"].eq(best)]
    if base.empty or mine.empty:
        return None
    low = base["time_low_us"].min() / mine["time_high_us"].max() if "time_low_us" in cells else float("nan")
    high = base["time_high_us"].max() / mine["time_low_us"].min() if "time_low_us" in cells else float("nan")
    known = pd.notna(low) and pd.notna(high)
    over = bool(base.get("oversubscribed", pd.Series([False])).any() or mine.get("oversubscribed",
                                                                                   pd.Series([False])).any())
    return Speedup(base["time_us"].median() / mine["time_us"].median(), low if known else None,
                   high if known else None, over)


def _summary_table(group: pd.DataFrame, baseline: str) -> tuple[TableBlock, bool]:
    """The table, and whether any of its speedups is unsure. Both placements side by side, as
    nccl-tests prints them: the out-of-place columns (each label's time, the fastest, its speedup),
    then the in-place ones; a placement is never pooled with the other."""
    labels = sorted(group["label"].unique(), key=lambda label: (label != baseline, label))
    placements = placements_of(group)
    side_by_side = len(placements) > 1
    sizes = sorted(group["bytes_total"].unique())
    header, numeric, columns, unsure = ["size"], set(), [], False
    for placement in placements:
        part = group[group["placement"].fillna("out_of_place").eq(placement)]
        grid = part.pivot_table(index="bytes_total", columns="label", values="time_us", aggfunc="median")
        grid = grid.reindex(index=sizes, columns=labels)
        suffix = f" ({PLACEMENT_TITLES.get(placement, placement)})" if side_by_side else ""
        texts = []
        for size, times in grid.iterrows():
            best = times.idxmin() if times.notna().any() else "-"
            estimate = _fastest_vs_baseline(part[part["bytes_total"].eq(size)], best, baseline) \
                if baseline in times and pd.notna(times.get(baseline)) else None
            unsure |= estimate is not None and not estimate.sure
            texts.append([*[f"{value:.2f}" if pd.notna(value) else "" for value in times], best,
                          estimate.text() if estimate else ""])
        numeric |= set(range(len(header), len(header) + len(labels))) | {len(header) + len(labels) + 1}
        header += [*[f"{label} µs{suffix}" for label in labels], f"fastest{suffix}", f"fastest vs {baseline}{suffix}"]
        columns.append(texts)
    rows = [[format_size(int(size)), *[text for part in columns for text in part[index]]]
            for index, size in enumerate(sizes)]
    return TableBlock(header, rows, numeric=numeric), unsure


def summary_section(frame: pd.DataFrame, baseline: str) -> Section:
    blocks = [Paragraph("Median per-iteration time in µs (iteration time = maximum over ranks; repeats and runs "
                        "pooled as the median of their medians). Sizes are nccl-tests sizes (total bytes).")]
    any_unsure = False
    for (collective, shape), group in frame.groupby(["collective", "shape"], sort=False):
        table, unsure = _summary_table(group, baseline)
        blocks += [Paragraph(f"**{collective}, {shape}**"), table]
        any_unsure |= unsure
    if any_unsure:
        blocks.append(Paragraph(UNSURE_NOTE))
    return Section("Summary", blocks)


def gate_section(result: GateResult) -> Section:
    rows = [[cell.label, *times_text(cell), ratio_text(cell), interval_text(cell), verdict_text(cell),
             note_text(cell)] for cell in result.cells]
    flagged = [row for row, cell in zip(rows, result.cells, strict=True) if cell.verdict != "unchanged"]
    header = ["cell", "baseline µs", "current µs", "ratio", "interval", "verdict", "note"]
    counts = [[name, str(count)] for name, count in result.counts().items() if count]
    warning = result.common_shift()
    blocks = [Paragraph(f"**{headline(result)}**"),
              Paragraph(f"Baseline: {', '.join(result.baseline_runs)}. Rule: {settings_text(result)}."),
              *([Paragraph(f"**Warning:** {warning}.")] if warning else []),
              TableBlock(["verdict", "cells"], counts, numeric={1})]
    if flagged:
        blocks += [Paragraph("Cells that are not unchanged:"), TableBlock(header, flagged, numeric={1, 2, 3})]
    blocks.append(Details(f"All {len(rows)} cells", [TableBlock(header, rows, numeric={1, 2, 3})]))
    return Section("Regression gate", blocks)


def plots_section(frame: pd.DataFrame, baseline: str) -> Section:
    blocks = []
    for name, figure in plots.figures(frame, baseline):
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", bbox_inches="tight")
        plots.plt.close(figure)
        blocks.append(Image(name, buffer.getvalue()))
    return Section("Plots", blocks)


def build(runs: RunSet, baseline_impl: str = "mpi", gate_result: GateResult | None = None) -> Document:
    frame = plots.plot_frame(runs.results, runs.samples)
    title = f"pccl-bench report: {', '.join(runs.run_ids[:4])}" + (" ..." if len(runs.run_ids) > 4 else "")
    document = Document(title, [Section("About", [Paragraph(
        f"Generated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by pccl-bench {__version__} from "
        f"{len(runs.sources)} run(s): {', '.join(runs.sources)}.")])])
    document.sections.append(provenance_section(runs))
    if gate_result is not None:
        document.sections.append(gate_section(gate_result))
    if not frame.empty:
        document.sections += [summary_section(frame, baseline_impl), plots_section(frame, baseline_impl)]
    return document
