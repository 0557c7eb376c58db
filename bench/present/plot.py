"""Comparison figures from result tables (matplotlib, Agg).

Per collective: latency and bus bandwidth against message size (log-log, one panel per rank or
GPU count, one line per implementation), the speedup over a baseline implementation as a
heatmap over GPU count x size, and scaling (time against GPU count at fixed sizes).
Sizes are nccl-tests sizes (bytes_total) in binary units; colours follow the implementation.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from fnmatch import fnmatch
from hashlib import sha1
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from bench.errors import BadInput
from bench.files import atomic_write, slug
from bench.plan.cells import CELL_KEY
from bench.present import plot_style as style  # selects the Agg backend
from bench.results.labels import impl_label
from bench.results.speedup import UNSURE_NOTE, WIDE_FACTOR, cell_identity, median_intervals
from bench.text import printable
from collectives.memory import device_kinds
from collectives.spec import reduces

FORMATS = ("png", "svg", "pdf")
#: speedup heatmaps saturate beyond 2**4 = 16x either way (the cells still print the value)
SPEEDUP_LIMIT_LOG2 = 4
#: what, when a collective has several, splits its figures (one set per dtype, op, placement, buffers, mode)
VARIANTS = ("dtype", "op", "placement", "buffers", "timing_mode")


#: the cell-key columns that are counts (the rest are text)
COUNT_KEYS = ("nranks", "nnodes", "ranks_per_node", "count_per_rank")


def plot_frame(results: pd.DataFrame, samples: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per cell (repeats and runs pooled: median of medians) with an implementation label,
    a shape ("8 GPUs, 2 nodes") and a variant (the dtype/op/placement/mode, where a collective has several).
    ``time_low_us``/``time_high_us``: the 95% interval of the cell's median from ``samples`` (NaN without)."""
    # zero-byte calls (IMB's 0 #bytes, a barrier) have no place on a size axis of powers of two
    ok = results[results["status"].eq("ok") & results["time_us_p50"].notna() & results["bytes_total"].gt(0)].copy()
    if ok.empty:
        return ok.assign(label=[], shape=[], variant=[])
    if "arm" not in ok:  # tables from before same-job arms
        ok["arm"] = ""
    if "buffers" not in ok:  # tables from before the buffers column: warm
        ok["buffers"] = "warm"
    if "mode" not in ok:  # tables from before call modes
        ok["mode"] = "blocking"
    for name in CELL_KEY:
        if name in COUNT_KEYS:  # numbers, or empty where a table does not say (an import's unknown nnodes)
            ok[name] = pd.to_numeric(ok[name], errors="coerce")
        elif ok[name].dtype == object or pd.api.types.is_string_dtype(ok[name]):
            ok[name] = ok[name].fillna("").astype(str)
    ok.loc[~ok["collective"].astype(str).map(reduces).astype(bool), "op"] = ""  # an all-gather reduces nothing
    keys = [*CELL_KEY, "bytes_total"]
    if "oversubscribed" not in ok:
        ok["oversubscribed"] = False
    ok["oversubscribed"] = ok["oversubscribed"].fillna(False).astype(bool)
    frame = ok.groupby(keys, as_index=False, sort=False, dropna=False).agg(
        time_us=("time_us_p50", "median"), busbw_gbps=("busbw_gbps", "median"),
        oversubscribed=("oversubscribed", "max"))
    intervals = median_intervals(samples)
    spans = [intervals.get(cell_identity(row), (np.nan, np.nan)) for row in frame.to_dict("records")]
    frame["time_low_us"] = [low for low, _ in spans]
    frame["time_high_us"] = [high for _, high in spans]
    frame["label"] = [impl_label(row) for row in frame.itertuples()]
    frame["variant"] = ""
    for _, group in frame.groupby("collective"):
        varying = [name for name in VARIANTS if group[name].nunique() > 1]
        frame.loc[group.index, "variant"] = group[varying].astype(str).agg(" ".join, axis=1) if varying else ""
    # "total" sizes are rounded to a multiple of the rank count: compare sizes by nearest power of two
    frame["size_bucket"] = np.exp2(np.round(np.log2(frame["bytes_total"].clip(lower=1)))).astype(np.int64)
    unit = np.where(frame["device"].isin(device_kinds()), "GPUs", "ranks")
    frame["shape"] = [(f"{n:g} {u}" if n == n else f"? {u} (unknown)") + (f", {m:g} nodes" if m == m and m > 1 else "")
                      for n, u, m in
                      zip(frame["nranks"], unit, frame["nnodes"], strict=True)]
    return frame.sort_values(["collective", "nranks", "nnodes", "label", "bytes_total"]).reset_index(drop=True)


def shown(text: object) -> str:
    """Data as matplotlib text: one printable line, every ``$`` literal (a name like ``$\\x$`` would
    otherwise be parsed as mathtext, and an unknown symbol makes ``savefig`` raise)."""
    return printable(text).replace("$", r"\$")


def select_impls(frame: pd.DataFrame, patterns: list[str]) -> pd.DataFrame:
    """Rows whose implementation label matches one of the shell patterns (all when none given)."""
    if not patterns:
        return frame
    keep = frame["label"].map(lambda label: any(fnmatch(label, pattern) for pattern in patterns))
    return frame[keep]


def _shapes(frame: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(frame.sort_values(["nranks", "nnodes"])["shape"]))


def _panels(count: int, width_in: float = 4.6, height_in: float = 3.6, most_columns: int = 3):
    columns = min(count, most_columns)
    rows = (count + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(width_in * columns + 1.8, height_in * rows), squeeze=False)
    for extra in axes.flat[count:]:
        extra.set_visible(False)
    return figure, list(axes.flat[:count])


def _legend(figure, axes) -> None:
    handles = {}
    for axis in axes:
        for handle, label in zip(*axis.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    columns = 1 + (len(handles) - 1) // 28
    figure.legend(handles.values(), handles.keys(), loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False,
                  ncols=columns)


def _lines(axis, group: pd.DataFrame, x: str, y: str) -> None:
    for label, line in group.groupby("label", sort=True):
        line = line.groupby(x, as_index=False)[y].median()
        axis.plot(line[x], line[y], label=shown(label), color=style.colour(label), marker=style.marker(label),
                  linestyle=style.line_style(label), markersize=4, linewidth=1.4)


def size_figure(data: pd.DataFrame, title: str, column: str, ylabel: str, what: str) -> Figure | None:
    """One panel per shape: ``column`` against size, one line per implementation."""
    data = data[data[column].notna() & (data[column] > 0)]
    shapes = _shapes(data)
    if not shapes:
        return None
    figure, axes = _panels(len(shapes))
    for axis, shape in zip(axes, shapes, strict=True):
        group = data[data["shape"].eq(shape)]
        _lines(axis, group, "bytes_total", column)
        style.size_axis(axis, sorted(group["bytes_total"].unique()))
        style.log_axis(axis)
        axis.set_title(shape)
        axis.set_xlabel("message size (total bytes, nccl-tests size)")
        axis.set_ylabel(ylabel)
    figure.suptitle(f"{shown(title)}: {what}", x=0.02, ha="left", fontweight="bold")
    _legend(figure, axes)
    figure.tight_layout()
    return figure


def speedup_grid(data: pd.DataFrame, label: str, baseline: str) -> pd.DataFrame:
    """baseline time / ``label`` time, shapes x sizes (> 1: ``label`` is faster)."""
    return speedup_grids(data, label, baseline)[0]


def speedup_grids(data: pd.DataFrame, label: str, baseline: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(speedups, unsure) over shapes x sizes; unsure as bench.results.speedup judges it: either cell
    oversubscribed, the ratio's interval wider than WIDE_FACTOR, or no interval (no samples)."""
    keys = ["shape", "nranks", "nnodes", "bytes_total", "size_bucket"]
    columns = {"time_us": "median", "time_low_us": "min", "time_high_us": "max", "oversubscribed": "max"}
    present = {name: how for name, how in columns.items() if name in data}

    def pooled(which: str) -> pd.DataFrame:
        return data[data["label"].eq(which)].groupby(keys).agg(present)

    joined = pd.merge(pooled(baseline), pooled(label), left_index=True, right_index=True,
                      suffixes=("_base", "")).dropna(subset=["time_us"])
    joined["speedup"] = joined["time_us_base"] / joined["time_us"]
    if {"time_low_us", "oversubscribed"} <= set(present):
        low = joined["time_low_us_base"] / joined["time_high_us"]
        high = joined["time_high_us_base"] / joined["time_low_us"]
        unsure = joined["oversubscribed_base"] | joined["oversubscribed"] | low.isna() | (high > WIDE_FACTOR * low)
    else:
        unsure = pd.Series(True, index=joined.index)
    joined["unsure"] = unsure.astype(float)
    table = joined.reset_index()
    order = [shape for shape in _shapes(data) if shape in set(table["shape"])]
    grid = table.pivot_table(index="shape", columns="size_bucket", values="speedup", aggfunc="median")
    marks = table.pivot_table(index="shape", columns="size_bucket", values="unsure", aggfunc="max")
    return grid.reindex(order), marks.reindex(order)


def speedup_figure(data: pd.DataFrame, title: str, baseline: str) -> Figure | None:
    """One heatmap per implementation over shape x size; None without the baseline implementation."""
    labels = [label for label in sorted(data["label"].unique()) if label != baseline]
    if not data["label"].eq(baseline).any() or not labels:
        return None
    pairs = {label: speedup_grids(data, label, baseline) for label in labels}
    columns = sorted(set().union(*(grid.columns for grid, _ in pairs.values())))
    grids = [(label, grid.reindex(columns=columns)) for label, (grid, _) in pairs.items() if grid.size]
    marks = {label: pairs[label][1].reindex(columns=columns) for label, _ in grids}
    if not grids:
        return None
    limit = max(1.0, *(float(np.nanmax(np.abs(np.log2(grid.to_numpy())))) for _, grid in grids))
    limit = float(min(np.ceil(limit), SPEEDUP_LIMIT_LOG2))  # beyond 16x the colour saturates; the text says
    norm = TwoSlopeNorm(vmin=-limit, vcenter=0.0, vmax=limit)
    width = min(2.5 + 0.6 * max(len(grid.columns) for _, grid in grids), 16.0)
    figure, axes = _panels(len(grids), width_in=width, height_in=1.7 + 0.4 * data["shape"].nunique(),
                           most_columns=1 if width > 8 else 2)
    for axis, (label, grid) in zip(axes, grids, strict=True):
        _heatmap(axis, grid, norm, marks[label])
        axis.set_title(f"{shown(label)} vs {shown(baseline)}")
    figure.suptitle(f"{shown(title)}: speedup over {shown(baseline)} (> 1: faster; colour scale is log2)",
                    x=0.02, ha="left", fontweight="bold")
    if any(np.nansum(mark.to_numpy(dtype=float)) for mark in marks.values()):
        figure.text(0.02, 0.0, UNSURE_NOTE.replace("x?", "?", 1), fontsize=7, ha="left", va="top")
    figure.tight_layout()
    return figure


def _heatmap(axis, grid: pd.DataFrame, norm, unsure: pd.DataFrame | None = None) -> None:
    values = grid.to_numpy(dtype=float)
    marks = np.zeros_like(values) if unsure is None else np.nan_to_num(unsure.to_numpy(dtype=float))
    image = axis.imshow(np.log2(values), cmap="RdBu", norm=norm, aspect="auto")
    axis.set_xticks(range(len(grid.columns)), [style.short_size(size) for size in grid.columns], rotation=45,
                    ha="right")
    axis.set_yticks(range(len(grid.index)), list(grid.index))
    axis.grid(False)
    axis.set_xlabel("message size (total bytes, nearest power of two)")
    if len(grid.columns) <= 24:
        for (row, column), value in np.ndenumerate(values):
            if np.isfinite(value):
                mark = "?" if marks[row, column] else ""  # unsure: bench.results.speedup
                axis.text(column, row, f"{value:.2f}{mark}", ha="center", va="center", fontsize=7,
                          color="white" if abs(np.log2(value)) > 0.6 * norm.vmax else "black")
    step = max(1, int(norm.vmax) // 2)
    bar = axis.figure.colorbar(image, ax=axis, fraction=0.05, pad=0.02,
                               ticks=np.arange(-int(norm.vmax), int(norm.vmax) + 1, step))
    bar.ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: style.ratio_label(2.0 ** value)))


def scaling_sizes(data: pd.DataFrame, most: int = 4) -> list[int]:
    """Size buckets measured at the most rank counts, spread from smallest to largest."""
    coverage = data.groupby("size_bucket")["nranks"].nunique()
    sizes = sorted(coverage[coverage.eq(coverage.max())].index)
    if len(sizes) <= most:
        return sizes
    return [sizes[i] for i in dict.fromkeys(np.linspace(0, len(sizes) - 1, most).round().astype(int))]


def scaling_figure(data: pd.DataFrame, title: str) -> Figure | None:
    """Time against rank/GPU count at fixed sizes; None when only one count was measured."""
    if data["nranks"].nunique() < 2:
        return None
    sizes = scaling_sizes(data)
    figure, axes = _panels(len(sizes), width_in=4.0)
    unit = "GPUs" if data["device"].isin(device_kinds()).any() else "ranks"
    for axis, size in zip(axes, sizes, strict=True):
        group = data[data["size_bucket"].eq(size)]
        _lines(axis, group, "nranks", "time_us")
        counts = sorted(group["nranks"].unique())
        axis.set_xscale("log", base=2)
        axis.set_xticks(counts, [str(count) for count in counts])
        axis.minorticks_off()
        style.log_axis(axis)
        axis.set_title(f"≈ {style.short_size(size)}")
        axis.set_xlabel(unit)
        axis.set_ylabel("time (µs, median)")
    figure.suptitle(f"{shown(title)}: scaling at fixed message size", x=0.02, ha="left", fontweight="bold")
    _legend(figure, axes)
    figure.tight_layout()
    return figure


def _file_part(text: str) -> str:
    """A file-name part from data: words joined by ``-``, then bench.files.slug (never leaves the folder)."""
    return slug("-".join(str(text).split()))


def _figures_of(data: pd.DataFrame, title: str, baseline: str) -> Iterator[tuple[str, Figure | None]]:
    yield "latency", size_figure(data, title, "time_us", "time (µs, median)", "latency against size")
    yield "busbw", size_figure(data, title, "busbw_gbps", "bus bandwidth (GB/s)", "bus bandwidth (nccl-tests formula)")
    yield f"speedup-vs-{_file_part(baseline)}", speedup_figure(data, title, baseline)
    yield "scaling", scaling_figure(data, title)


def _unique_stem(stem: str, identity: tuple, taken: dict[str, tuple]) -> str:
    """``stem``, or, when another (collective, variant) already slugged to it, ``stem-<hash of the
    names>`` (stable from run to run), so that no two collectives write the same file."""
    if taken.setdefault(stem, identity) == identity:
        return stem
    hashed = f"{stem}-{sha1(repr(identity).encode(errors='surrogateescape')).hexdigest()[:8]}"
    candidate, count = hashed, 1
    while taken.get(candidate, identity) != identity:
        count += 1
        candidate = f"{hashed}-{count}"
    taken[candidate] = identity
    return candidate


def figures(frame: pd.DataFrame, baseline: str = "mpi") -> Iterator[tuple[str, Figure]]:
    """(name, figure) for every collective (and every variant of it), made one at a time. Names are
    file names made from data: slugged, at most ~190 bytes, distinct for distinct collectives."""
    style.apply_defaults()
    style.assign_colours(frame["label"].unique())
    taken: dict[str, tuple] = {}
    for (collective, variant), data in frame.groupby(["collective", "variant"], sort=True):
        stem = _file_part(f"{collective} {variant}" if variant else collective)
        name = _unique_stem(stem, (collective, variant), taken)
        for suffix, figure in _figures_of(data, f"{collective} {variant}".strip(), baseline):
            if figure is not None:
                yield f"{name}-{suffix}", figure


def save(named: Iterable[tuple[str, Figure]], out: Path, formats: list[str]) -> list[Path]:
    """Write every figure in every format into ``out`` (each file atomically: an interrupted plot
    leaves no half image, and a link in ``out`` is replaced, not followed); close them.
    A name given twice gets a counter rather than overwriting the first figure."""
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    used: set[str] = set()
    for name, figure in named:
        if Path(name).name != name or name.startswith(".") or not name:
            raise ValueError(f"figure name {name!r} is not a plain file name")  # figures() slugs them
        unique, count = name, 1
        while unique in used:
            count += 1
            unique = f"{name}-{count}"
        used.add(unique)
        for extension in formats:
            path = out / f"{unique}.{extension}"
            if path.is_dir():  # os.replace cannot put a file over a folder: say so in one line
                raise BadInput("--out", f"{path} is a folder, not a figure: remove it or plot elsewhere")
            atomic_write(path, lambda temp, figure=figure, extension=extension:
                         figure.savefig(temp, format=extension, bbox_inches="tight"))
            written.append(path)
        plt.close(figure)
    return written
