"""Terminal output: progress over cells while a sweep runs, a summary table at the end."""

from __future__ import annotations

import pandas as pd
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from bench.plan.cells import CELL_KEY
from bench.plan.sizes import format_size
from bench.present.best import best_tables
from bench.results.labels import buffers_note, impl_label
from bench.results.speedup import CELL_UNSURE_NOTE, Intervals, median_intervals, speedup
from bench.text import console_text, printable

BASELINE_IMPL = "mpi"
#: distinct reasons printed under the summary; the rest are in the table's ``error`` column
MAX_REASONS = 8
REASON_CHARS = 300


def progress_bar(console: Console) -> Progress:
    return Progress(
        # the description (a launch id) and the current cell's name come from the suite: never markup
        TextColumn("{task.description}", style="bold", markup=False), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[current]}", markup=False), TimeElapsedColumn(), console=console, transient=False,
    )


def _label(row) -> str:
    """The implementation's name everywhere (bench.results.labels), plus the placement when in place."""
    name = impl_label(row) + buffers_note(row)
    return name if row.placement == "out_of_place" else f"{name} (in place)"


#: the placements side by side, out-of-place first (as nccl-tests prints them)
PLACEMENTS = ("out_of_place", "in_place")
PLACEMENT_TITLES = {"out_of_place": "out-of-place", "in_place": "in-place"}
#: a line's columns for one placement
CELL_COLUMNS = ("time us p50", "busbw GB/s", "#wrong", "vs mpi")
#: the same, two placements side by side: the placement heads its block (a table 130 columns wide,
#: a non-terminal's, holds both blocks and a pccl-hier label untruncated)
SIDE_BY_SIDE_COLUMNS = ("time\nus p50", "busbw\nGB/s", "#wrong\n", "vs mpi\n")
#: what pairs one cell's placements on a line: the cell key but the placement (and the size, grouped apart)
PAIR_KEY = tuple(name for name in CELL_KEY if name not in ("placement", "count_per_rank"))


def summary_tables(results: pd.DataFrame, samples: pd.DataFrame | None = None,
                   intervals: Intervals | None = None) -> list[Table]:
    """Per collective and shape, one line per size and implementation (as nccl-tests prints sizes):
    median time, bus bandwidth, #wrong, and the speedup over ``mpi`` at the same size, marked
    ``?`` where it is unsure (bench.results.speedup; ``samples`` give the intervals, unless given).
    Where a table has both placements, each line holds both, as nccl-tests prints them: the
    out-of-place columns, then the in-place columns (each against ``mpi`` of its own placement)."""
    tables = []
    if results.empty:
        return tables
    intervals = median_intervals(samples) if intervals is None else intervals
    frame = _one_line_per_cell(results)
    timing = "time = median of per-iteration max over ranks"
    if len(frame) < len(results):
        timing += ", then the median over the cell's repeats"
    for (collective, nranks, nnodes, device, dtype, op), group in frame.groupby(
        ["collective", "nranks", "nnodes", "device", "dtype", "op"], sort=False
    ):
        placements = placements_of(group)
        side_by_side = len(placements) > 1
        group = group.assign(label=[impl_label(row) + buffers_note(row) if side_by_side else _label(row)
                                    for row in group.itertuples()])
        rows, unsure = [], False
        for (size, count), cells in group.groupby(["bytes_total", "count_per_rank"], sort=True):
            # mpi of the same placement, buffers and mode (a non-blocking cell: MPI's non-blocking call)
            baselines = {(row.placement, buffers_note(row), _mode(row)): row for row in cells.itertuples()
                         if row.impl == BASELINE_IMPL}
            lines = _lines(cells)
            for position, (label, by_placement) in enumerate(lines):
                first = position == 0
                texts = []
                for placement in placements:
                    row = by_placement.get(placement)
                    if row is None:
                        texts += ["", "", "", ""]
                        continue
                    ratio, sure = _speedup(baselines.get((placement, buffers_note(row), _mode(row))), row, intervals)
                    unsure |= not sure
                    texts += [*_cell_text(row), ratio]
                rows.append(([format_size(int(size)) if first else "", str(count) if first else "",
                              console_text(label), *texts], position == len(lines) - 1))
        notes = (["pccl-hier:<inter>/<intra> phases"] if group["impl"].eq("pccl-hier").any() else []) + [timing]
        caption = "; ".join(notes) + (f"\n{CELL_UNSURE_NOTE}" if unsure else "")
        # names from the table are data: escaped for Rich markup, escape sequences shown as text
        title = "  ".join(map(console_text, (collective, f"{nranks} ranks / {nnodes} nodes", device, f"{dtype} {op}")))
        table = Table(title=title, title_justify="left", caption=caption, caption_justify="left",
                      **({"box": box.SIMPLE_HEAD} if side_by_side else {}))
        for name in ("size", "count", "implementation"):
            table.add_column(name, justify="left" if name == "implementation" else "right",
                             no_wrap=name == "implementation")
        for placement in placements:
            if not side_by_side:
                for name in CELL_COLUMNS:
                    table.add_column(name, justify="right")
                continue
            title_of = PLACEMENT_TITLES.get(placement, console_text(str(placement)))
            for position, name in enumerate(SIDE_BY_SIDE_COLUMNS):
                table.add_column(f"{title_of if position == 0 else ''}\n{name}", justify="right")
        for cells, last in rows:
            table.add_row(*cells, end_section=last)
        tables.append(table)
    return tables


#: the overlap table's columns (OSU's osu_iallreduce prints these, with Init and MPI_Wait)
OVERLAP_COLUMNS = ("pure us", "compute us", "overall us", "MPI_Test", "overlap %")


def overlap_tables(results: pd.DataFrame) -> list[Table]:
    """The non-blocking cells' overlap as OSU prints it, per collective and shape: one line per size
    and implementation (placement), the pure time, the compute, the overlapped call, the MPI_Test
    calls in the compute and OSU's Overlap(%) (bench/rank/overlap.py). None without such cells."""
    if results.empty or "overlap_pct" not in results:
        return []
    posted = results[(results["status"] == "ok") & results["overlap_pct"].notna()]
    tables = []
    for (collective, nranks, nnodes, device), group in posted.groupby(["collective", "nranks", "nnodes", "device"],
                                                                       sort=False):
        title = "  ".join(map(console_text, (f"{collective} overlap (OSU)", f"{nranks} ranks / {nnodes} nodes",
                                             device)))
        table = Table(title=title, title_justify="left", caption="overlap % = max(0, 100 - 100 x (overall - "
                      "compute) / pure), medians of per-iteration max over ranks", caption_justify="left")
        for name in ("size", "implementation", *OVERLAP_COLUMNS):
            table.add_column(name, justify="left" if name == "implementation" else "right")
        for row in group.sort_values(["bytes_total", "impl", "placement"]).itertuples():
            calls = "" if pd.isna(row.nb_test_calls) else str(int(row.nb_test_calls))
            table.add_row(format_size(int(row.bytes_total)), console_text(_label(row)), f"{row.pure_us:.2f}",
                          f"{row.compute_us:.2f}", f"{row.overall_us:.2f}", calls, f"{row.overlap_pct:.1f}")
        tables.append(table)
    return tables


def _mode(row) -> str:
    """A row's call mode (blocking where a table from before modes says nothing)."""
    mode = getattr(row, "mode", "blocking")
    return mode if isinstance(mode, str) and mode else "blocking"


def placements_of(group: pd.DataFrame) -> list[str]:
    """The placements of a table's rows, out-of-place first, then in-place, then any other (an import's)."""
    present = list(dict.fromkeys(group["placement"].fillna("out_of_place")))
    return [name for name in PLACEMENTS if name in present] + [name for name in present if name not in PLACEMENTS]


def _lines(cells: pd.DataFrame) -> list[tuple[str, dict]]:
    """One size's cells as lines: (label, {placement: row}), a cell's placements on one line, in the
    order the cells come."""
    lines: dict[tuple, tuple[str, dict]] = {}
    pair = [name for name in PAIR_KEY if name in cells]
    for row in cells.itertuples():
        key = (row.label, *(str(getattr(row, name)) for name in pair))
        placement = row.placement if isinstance(row.placement, str) else "out_of_place"
        label, by_placement = lines.setdefault(key, (row.label, {}))
        if placement in by_placement:  # one placement twice (e.g. two runs' rows that differ elsewhere)
            lines[(*key, len(lines))] = (row.label, {placement: row})
        else:
            by_placement[placement] = row
    return list(lines.values())


def verdict_tables(results: pd.DataFrame, samples: pd.DataFrame | None = None,
                   intervals: Intervals | None = None) -> list[Table]:
    """After the per-collective tables: per shape and size, the fastest pccl variant against ``mpi``
    (bench.present.best), repeats merged as in summary_tables."""
    if results.empty:
        return []
    return best_tables(_one_line_per_cell(results), median_intervals(samples) if intervals is None else intervals)


def _one_line_per_cell(results: pd.DataFrame) -> pd.DataFrame:
    """Repeats of a cell (suite ``repeats``) as one line: the median of their medians, all wrong
    elements counted, and the first status that is not ok."""
    if "repeat" not in results or results["repeat"].nunique(dropna=False) <= 1:
        return results
    key = [name for name in CELL_KEY if name in results]
    lines = []
    for _, repeats in results.groupby(key, sort=False, dropna=False):
        not_ok = repeats[repeats["status"] != "ok"]
        line = (not_ok if len(not_ok) else repeats).iloc[0].copy()
        if not_ok.empty:
            line["time_us_p50"] = repeats["time_us_p50"].median()
            line["busbw_gbps"] = repeats["busbw_gbps"].median()
        line["n_wrong"] = repeats["n_wrong"].fillna(0).sum()
        lines.append(line)
    return pd.DataFrame(lines).reset_index(drop=True)


def reasons(results: pd.DataFrame) -> list[str]:
    """Why cells gave no time: each distinct reason once, with how many cells and which
    implementations, the most frequent first (the whole text is in the table's ``error`` column)."""
    failed = results[results["status"] != "ok"]
    if failed.empty:
        return []
    # printed with markup=False (bench.sweep.drivers), but escape sequences must not reach the terminal
    failed = failed.assign(label=[printable(_label(row)) for row in failed.itertuples()],
                           reason=failed["error"].fillna("").astype(str))
    groups = sorted(failed.groupby(["status", "reason"], sort=False), key=lambda item: -len(item[1]))
    lines = []
    for (status, reason), cells in groups[:MAX_REASONS]:
        text = printable(" ".join(reason.split()))
        text = text if len(text) <= REASON_CHARS else text[:REASON_CHARS - 3] + "..."
        labels = ", ".join(sorted(set(cells["label"])))
        lines.append(f"{len(cells)} {printable(status)} ({labels}): {text or 'no reason recorded'}")
    if len(groups) > MAX_REASONS:
        lines.append(f"... {len(groups) - MAX_REASONS} more reasons: see the error column of the table")
    return lines


def _cell_text(row) -> tuple[str, str, str]:
    if row.status == "unsupported":
        return "[dim]unsupported[/dim]", "", ""
    if row.status != "ok":
        return f"[red]{console_text(row.status)}[/red]", "", f"[red]{row.n_wrong}[/red]" if row.n_wrong else ""
    # an imported row may have no bus bandwidth (point-to-point) or no count of wrong elements
    busbw = "" if pd.isna(row.busbw_gbps) else f"{row.busbw_gbps:.3f}"
    return f"{row.time_us_p50:.2f}", busbw, "?" if pd.isna(row.n_wrong) else str(row.n_wrong)


def _speedup(baseline, row, intervals: Intervals) -> tuple[str, bool]:
    """(the ratio's text, whether it is sure); an unsure ratio is dim, never green or red."""
    if baseline is None or row.impl == BASELINE_IMPL or baseline.status != "ok" or row.status != "ok":
        return "", True
    estimate = speedup(baseline, row, intervals)
    if not estimate.sure:
        return f"[dim]{estimate.text()}[/dim]", False
    colour = "green" if estimate.ratio >= 1.1 else "red" if estimate.ratio <= 0.9 else "white"
    return f"[{colour}]{estimate.text()}[/{colour}]", True


def status_line(results: pd.DataFrame) -> str:
    counts = results["status"].value_counts().to_dict() if len(results) else {}
    return ", ".join(f"{count} {status}" for status, count in sorted(counts.items())) or "no cells"
