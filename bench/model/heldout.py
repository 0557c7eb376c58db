"""``model check --fit-on``: fit on some GPU counts, predict the others (a real held-out check).

Per implementation and collective: the median and 90th percentile of |log(predicted /
measured)|, shown as a factor (1.25 = 25% off either way), and how often the implementation
predicted fastest in a cell (collective, GPU count, size) is the one measured fastest.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from bench.files import atomic_write
from bench.results.labels import impl_label

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def factor_table(errors: pd.DataFrame) -> pd.DataFrame:
    """Rows (implementation, collective, GPU counts, cells, median and p90 factor), and 'all'."""
    frame = errors.assign(label=errors.apply(impl_label, axis=1),
                          log_error=np.abs(np.log(errors["model_us"] / errors["time_us_p50"])))
    rows = []
    for (label, collective), group in [*frame.groupby(["label", "collective"]), (("all", "all"), frame)]:
        values = group["log_error"].to_numpy()
        rows.append({"implementation": label, "collective": collective,
                     "gpus": ",".join(str(n) for n in sorted(set(group["nranks"]))), "cells": len(values),
                     "median_factor": float(np.exp(np.median(values))),
                     "p90_factor": float(np.exp(np.percentile(values, 90)))})
    return pd.DataFrame(rows)


def repeat_spread(frame: pd.DataFrame) -> pd.DataFrame:
    """Per measured cell and implementation: repeats, and the interquartile range of their times (us)."""
    ok = frame[(frame["status"] == "ok") & (frame["time_us_p50"] > 0)]
    ok = ok.assign(label=ok.apply(impl_label, axis=1))
    grouped = ok.groupby(["collective", "nranks", "bytes_total", "label"])["time_us_p50"]
    return pd.DataFrame({"repeats": grouped.size(), "q25": grouped.quantile(0.25),
                         "q75": grouped.quantile(0.75)}).reset_index()


def winner_cells(errors: pd.DataFrame, spread: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per cell with >= 2 implementations: measured and predicted fastest, and whether the measured two
    best are a tie: both measured in >= 2 repeats and their interquartile ranges overlap (without
    repeats a cell is never a tie)."""
    frame = errors.assign(label=errors.apply(impl_label, axis=1))
    spreads = {} if spread is None else {tuple(row[:4]): row[4:] for row in spread.itertuples(index=False)}
    cells = []
    for (collective, nranks, size), group in frame.groupby(["collective", "nranks", "bytes_total"]):
        if group["label"].nunique() < 2:
            continue
        ranked = group.sort_values("time_us_p50")
        measured, second = ranked["label"].iloc[0], ranked["label"].iloc[1]
        predicted = group.loc[group["model_us"].idxmin(), "label"]
        first_spread = spreads.get((collective, nranks, size, measured))
        second_spread = spreads.get((collective, nranks, size, second))
        tie = bool(first_spread is not None and second_spread is not None and first_spread[0] >= 2
                   and second_spread[0] >= 2 and first_spread[2] >= second_spread[1])
        cells.append({"collective": collective, "nranks": nranks, "bytes_total": size,
                      "measured_winner": measured, "measured_second": second,
                      "ratio_second_to_first": float(ranked["time_us_p50"].iloc[1] / ranked["time_us_p50"].iloc[0]),
                      "predicted_winner": predicted, "agree": measured == predicted, "tie": tie})
    return pd.DataFrame(cells, columns=["collective", "nranks", "bytes_total", "measured_winner", "measured_second",
                                        "ratio_second_to_first", "predicted_winner", "agree", "tie"])


def winner_agreement(errors: pd.DataFrame, spread: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per collective (and 'all'): cells with >= 2 implementations, the share where the predicted fastest
    implementation is the measured fastest (raw), the measured ties (see winner_cells) and the share
    among the cells that are not ties (tie-aware; ties count neither way)."""
    table = winner_cells(errors, spread)
    rows = []
    for c, g in [*table.groupby("collective"), ("all", table)]:
        if not len(g):
            continue
        decided = g[~g["tie"]]
        rows.append({"collective": c, "cells": len(g), "agree": int(g["agree"].sum()),
                     "agree_pct": 100.0 * g["agree"].mean(), "ties": int(g["tie"].sum()),
                     "tie_aware_pct": 100.0 * decided["agree"].mean() if len(decided) else float("nan")})
    return pd.DataFrame(rows, columns=["collective", "cells", "agree", "agree_pct", "ties", "tie_aware_pct"])


def plot_check(fit_errors: pd.DataFrame, check_errors: pd.DataFrame, path: Path, title: str,
               sizes_bytes: tuple[int, ...] = (1 << 20, 1 << 26, 1 << 30)) -> None:
    """Measured (markers) and predicted (lines) time against GPU count, per collective and size;
    the held-out GPU counts are shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    both = pd.concat([fit_errors.assign(held_out=False), check_errors.assign(held_out=True)])
    both = both.assign(label=both.apply(impl_label, axis=1))
    collectives = sorted(set(both["collective"]))
    sizes = [s for s in sizes_bytes if s in set(both["bytes_total"])] or sorted(set(both["bytes_total"]))[:3]
    figure, axes = plt.subplots(len(collectives), len(sizes), figsize=(4.2 * len(sizes), 3.4 * len(collectives)),
                                squeeze=False)
    held = sorted(set(check_errors["nranks"]))
    for r, collective in enumerate(collectives):
        for c, size in enumerate(sizes):
            ax = axes[r][c]
            cell = both[(both["collective"] == collective) & (both["bytes_total"] == size)]
            for index, (label, group) in enumerate(cell.groupby("label")):
                median = group.groupby("nranks")[["time_us_p50", "model_us"]].median().sort_index()
                color = f"C{index}"
                ax.plot(median.index, median["model_us"] / 1e3, "-", color=color, label=f"{label} model")
                ax.plot(median.index, median["time_us_p50"] / 1e3, "o", color=color, mfc="none",
                        label=f"{label} measured")
            if held:
                ax.axvspan(min(held) / 1.3, max(held) * 1.3, color="0.9", zorder=0)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{collective}, {size / (1 << 20):g} MiB", fontsize=9)
            ax.set_xlabel("GPUs")
            ax.set_ylabel("time per call (ms)")
    for row in axes:
        row[0].legend(fontsize=6, ncol=1)
    figure.suptitle(f"{title} (shaded: held out, not fitted)", fontsize=10)
    figure.tight_layout()
    save_figure(figure, path)
    plt.close(figure)


def save_figure(figure: Figure, path: Path) -> None:
    """``figure`` to ``path`` atomically, in the format its suffix names (none: PNG)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    image_format = path.suffix[1:].lower() or "png"  # the temp file has no suffix to go by
    atomic_write(path, lambda temp: figure.savefig(temp, dpi=110, format=image_format))
