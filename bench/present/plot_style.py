"""Look of every figure: one colour per implementation everywhere, binary size ticks, Agg backend."""

from __future__ import annotations

import hashlib
import math

import matplotlib

matplotlib.use("Agg")  # headless: no display on CI or clusters

from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullLocator  # noqa: E402

#: fixed colours for the implementations this project knows; others get a stable hashed one
KNOWN_COLOURS = {
    "mpi": "#222222",
    "xccl": "#2ca02c",
    "pccl-flat:ring": "#ff7f0e",
    "pccl-flat:rd": "#d62728",
    "pccl-flat:bruck": "#9467bd",
    "pccl-flat:auto": "#e377c2",
    "pccl-hier:ring/ring": "#1f77b4",
    "pccl-hier:rd/ring": "#17becf",
    "pccl-hier:mpi/ring": "#393b79",
    "pccl-hier:rd/rd": "#6b6ecf",
    "pccl-hier:auto/ring": "#9edae5",
    "osu-mpi": "#8c564b",
}
FALLBACK = ["#bcbd22", "#7f7f7f", "#c49c94", "#f7b6d2", "#dbdb8d", "#98df8a", "#ff9896", "#c5b0d5",
            "#aec7e8", "#ffbb78", "#5254a3", "#637939", "#8c6d31", "#843c39", "#7b4173"]
MARKERS = {"mpi": "s", "xccl": "D", "pccl-flat": "o", "pccl-hier": "^"}


#: colours handed to labels this project does not know, in sorted order (see assign_colours)
_ASSIGNED: dict[str, str] = {}


def assign_colours(labels) -> None:
    """Give every unknown label of one plotting session its own fallback colour, in sorted order,
    so that no two lines share a colour and every figure of the session agrees."""
    unknown = sorted(label for label in set(labels) if label not in KNOWN_COLOURS)
    _ASSIGNED.clear()
    _ASSIGNED.update({label: FALLBACK[index % len(FALLBACK)] for index, label in enumerate(unknown)})


def colour(label: str) -> str:
    """The colour of an implementation label: fixed for known ones, else assigned or hashed."""
    if label in KNOWN_COLOURS:
        return KNOWN_COLOURS[label]
    if label in _ASSIGNED:
        return _ASSIGNED[label]
    digest = int(hashlib.md5(label.encode()).hexdigest(), 16)
    return FALLBACK[digest % len(FALLBACK)]


def marker(label: str) -> str:
    family = label.split(" ")[0].split(":")[0]
    return MARKERS.get(family, "v" if family.startswith("osu") else "x")


def line_style(label: str) -> str:
    return "--" if "in-place" in label else "-"


def short_size(nbytes: float) -> str:
    """Binary units for axis ticks: 8 B, 1 KiB, 32 KiB, 1 MiB."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            value = nbytes / scale
            return f"{value:g} {unit}" if value < 10 or value == int(value) else f"{value:.0f} {unit}"
    return f"{nbytes:g} B"


def size_ticks(sizes: list[int], most: int = 8) -> list[int]:
    """Powers of two spanning ``sizes``, thinned to at most ``most`` ticks on round exponents."""
    low = math.floor(math.log2(max(min(sizes), 1)))
    high = math.ceil(math.log2(max(max(sizes), 1)))
    for step in (1, 2, 5, 10):
        exponents = [e for e in range(low, high + 1) if e % step == 0]
        if len(exponents) <= most:
            return [1 << e for e in exponents]
    return [1 << e for e in range(low, high + 1) if e % 10 == 0]


def size_axis(axis, sizes: list[int]) -> None:
    """Log-2 x axis with binary-unit tick labels."""
    axis.set_xscale("log", base=2)
    axis.xaxis.set_major_locator(FixedLocator(size_ticks(sizes)))
    axis.xaxis.set_minor_locator(NullLocator())
    axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _: short_size(value)))
    for label in axis.get_xticklabels():
        label.set_rotation(30)
        label.set_horizontalalignment("right")


def log_axis(axis) -> None:
    """Log y axis with plain numbers (1, 2, 5, 10, ... or 1, 10, 100 over many decades); call it
    after the data is drawn."""
    axis.set_yscale("log")
    low, high = axis.get_ylim()
    span = high / max(low, 1e-12)
    subs = tuple(range(1, 10)) if span <= 10 else (1.0, 2.0, 5.0) if span <= 10**2.5 else (1.0,)
    axis.yaxis.set_major_locator(LogLocator(base=10, subs=subs))
    axis.yaxis.set_minor_locator(NullLocator())
    axis.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))


def ratio_label(ratio: float) -> str:
    """4x, 1x, 1/4x for colour bars of speedups."""
    return f"{ratio:g}x" if ratio >= 1 else f"1/{1 / ratio:g}x"


def apply_defaults() -> None:
    matplotlib.rcParams.update({
        "figure.dpi": 110, "savefig.dpi": 130, "font.size": 10, "axes.titlesize": 11,
        "axes.grid": True, "grid.alpha": 0.3, "legend.fontsize": 8, "axes.spines.top": False,
        "axes.spines.right": False, "svg.fonttype": "none",
    })
