"""``model band``: projections with the fit's uncertainty, by sampling the fitted parameters.

A description fitted by ``model fit --per-impl`` records, per library, the fitted terms, the free
ones and their covariance (``fit.libraries.<lib>``: ``s^2 (J^T W J)^-1`` of the robust log-space
problem). Each sample draws every library's free terms from that normal (independently per library:
they are fitted on disjoint cells), clips them at 0 (as the fit bounds them), and models every call
again (its critical path re-taken under the sample). The band of a time or of a speedup is its 5th -
95th percentile over the samples. It is the parameter uncertainty only: what the model's form leaves
out (the held-out error of ``model check --fit-on``) is not in it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from bench.errors import BadInput
from bench.model.cost import Call, library_key, predict_us
from bench.model.heldout import save_figure
from bench.model.impls import Variant
from bench.model.machine import MAX_US, Machine, shown_value
from bench.model.robust import TERMS, library_values, with_library_values

PERCENTILES = (5.0, 50.0, 95.0)
#: parameter draws or bootstrap refits of one band (a 5-95% band needs a few hundred)
MAX_SAMPLES = 10_000
#: what the resampling may hold: samples x measured cells x 8 bytes
MAX_RESAMPLE_BYTES = 2 << 30
#: a fitted term's variance beyond this is no fit (sd 10^12 us or us per byte)
MAX_VARIANCE = 1e24


@dataclass(frozen=True)
class LibraryPosterior:
    library: str
    values: dict[str, float]  # every TERMS value of the fit
    free: list[str]
    covariance: np.ndarray

    def draw(self, rng: np.random.Generator, count: int) -> list[dict[str, float]]:
        """``count`` parameter sets: the free terms from N(values, covariance), clipped at 0."""
        if not self.free:
            return [dict(self.values) for _ in range(count)]
        mean = np.array([self.values[name] for name in self.free])
        vals, vecs = np.linalg.eigh((self.covariance + self.covariance.T) / 2)
        root = vecs * np.sqrt(np.clip(vals, 0.0, None))
        draws = mean + rng.standard_normal((count, len(self.free))) @ root.T
        return [{**self.values, **dict(zip(self.free, np.clip(row, 0.0, None), strict=True))} for row in draws]


def _finite(value: object, where: str, field: str, bound: float) -> np.ndarray:
    """``value`` as a float array, every entry finite and within +-``bound`` (a hand-edited fit record)."""
    try:
        array = np.array(value, dtype=float)
    except (TypeError, ValueError, OverflowError):
        raise BadInput(where, f"{field}: {shown_value(value)} is not numbers") from None
    if not np.isfinite(array).all() or (np.abs(array) > bound).any():
        raise BadInput(where, f"{field}: {shown_value(value)}: every entry must be finite and within +-{bound:g}")
    return array


def posterior(machine: Machine, library: str, where: str = "") -> LibraryPosterior:
    """The fitted normal of ``library``'s terms, from the description's ``fit`` record (checked: a
    description is a file anybody may edit)."""
    where = where or machine.name
    libraries = (machine.fit or {}).get("libraries") if isinstance(machine.fit, dict) else None
    record = libraries.get(library) if isinstance(libraries, dict) else None
    if not isinstance(record, dict) or "covariance" not in record:
        raise BadInput(where, f"no fit covariance for library {library!r}: a band needs a "
                       "description fitted by `model fit --per-impl` (fit.libraries.<lib>.covariance)")
    field = f"fit.libraries.{library}"
    terms = record.get("terms") or {}
    if not isinstance(terms, dict):
        raise BadInput(where, f"{field}.terms: expected a mapping of term -> value, got {shown_value(terms)}")
    fitted = {k: float(_finite(v, where, f"{field}.terms.{k}", MAX_US)) for k, v in terms.items() if k in TERMS}
    values = {**library_values(machine, library), **fitted}
    free = record.get("free", [])
    if not isinstance(free, list) or any(name not in TERMS for name in free) or len(set(free)) != len(free):
        raise BadInput(where, f"{field}.free: {shown_value(free)}: expected distinct names of {list(TERMS)}")
    covariance = _finite(record["covariance"], where, f"{field}.covariance", MAX_VARIANCE)
    if covariance.shape != (len(free), len(free)):
        raise BadInput(where, f"{field}.covariance: shape {covariance.shape}, expected {len(free)} x {len(free)} "
                              f"(one row and column per free term)")
    return LibraryPosterior(library, values, free, covariance)


def sampled_machines(machine: Machine, libraries: list[str], samples: int, seed: int = 0,
                     where: str = "") -> list[Machine]:
    """``samples`` copies of ``machine``, each library's terms drawn from its fitted normal."""
    rng = np.random.default_rng(seed)
    draws = {lib: posterior(machine, lib, where).draw(rng, samples) for lib in libraries}
    out = []
    for index in range(samples):
        sampled = machine
        for lib in libraries:
            try:
                sampled = with_library_values(sampled, lib, draws[lib][index])
            except BadInput as error:
                raise BadInput(where or machine.name, f"fit.libraries.{lib}: a draw from its fitted normal leaves "
                                                      f"the valid range ({error}); is the covariance right?") from None
        out.append(sampled)
    return out


def check_resampling(samples: int, cells: int) -> None:
    """Bootstrap refits hold ``samples`` x ``cells`` draws: refuse what would not fit in MAX_RESAMPLE_BYTES."""
    if samples * cells * 8 > MAX_RESAMPLE_BYTES:
        raise BadInput("--samples", f"{samples} resamples of {cells} measured cells need {samples * cells * 8} "
                                    f"bytes, more than {MAX_RESAMPLE_BYTES} (2 GiB): give fewer")


def bootstrap_machines(machine: Machine, libraries: list[str], measured: list, resamples: int, seed: int = 0,
                       ) -> list[Machine]:
    """``resamples`` refits of ``machine``'s libraries, each on its cells (medians over repeats) drawn
    with replacement, with the description's terms, band window and algorithms kept (no reselection),
    started from the fitted values. A resample the fit cannot take (too few distinct GPU counts) is
    skipped. Includes what the normal leaves out: cells the model fits badly move the refits."""
    from bench.model.robust import _fit_from, median_cells

    rng = np.random.default_rng(seed)
    cells = median_cells(measured)
    check_resampling(resamples, len(cells))
    mine = {lib: [c for c in cells if library_key(c.call.variant, machine, c.call.collective) == lib]
            for lib in libraries}
    for lib, chosen in mine.items():
        if not chosen:
            raise BadInput("--bootstrap", f"no measured cells of library {lib!r} to resample")
    out = []
    for _ in range(resamples):
        sampled = machine
        for lib in libraries:
            record = ((machine.fit or {}).get("libraries") or {}).get(lib) or {}
            active = tuple(record.get("terms") or TERMS[:6])
            algorithms = machine.libraries[lib].algorithms or None
            draw = [mine[lib][i] for i in rng.integers(0, len(mine[lib]), len(mine[lib]))]
            try:
                fitted, values, *_ = _fit_from(draw, sampled, lib, algorithms, active)
            except BadInput:
                continue
            sampled = with_library_values(sampled, lib, values)
        out.append(sampled)
    return out


def band_table(machine: Machine, variants: list[Variant], collective: str, nranks: int, sizes: list[int],
               samples: int = 300, seed: int = 0, itemsize: int = 2, where: str = "",
               measured: list | None = None) -> pd.DataFrame:
    """Rows per (size, implementation): the modelled time (fitted values) and its 5-50-95% band, and the
    speedup of every implementation over the first one (the baseline) with its band, taken per sample.
    Samples: draws from the fitted normal, or with ``measured`` cells, bootstrap refits."""
    per_node = machine.gpus_per_node if nranks >= machine.gpus_per_node else nranks
    libraries = sorted({library_key(v, machine, collective) for v in variants})
    machines = (bootstrap_machines(machine, libraries, measured, samples, seed) if measured is not None
                else sampled_machines(machine, libraries, samples, seed, where))
    rows = []
    for size in sizes:
        # at least one element per rank, as counts_for rounds the sizes of `model run`
        count = max(1, size // (nranks * itemsize) if collective != "allreduce" else size // itemsize)
        calls = [Call(collective, v, nranks, per_node, count, itemsize) for v in variants]
        fitted = [predict_us(call, machine) for call in calls]
        times = np.array([[predict_us(call, m) for call in calls] for m in machines])  # (samples, variants)
        for index, variant in enumerate(variants):
            low, mid, high = np.percentile(times[:, index], PERCENTILES)
            speedups = times[:, 0] / times[:, index]
            s_low, s_mid, s_high = np.percentile(speedups, PERCENTILES)
            rows.append({"collective": collective, "nranks": nranks, "bytes_total": size,
                         "implementation": variant.label, "time_ms": fitted[index] / 1e3, "time_ms_p5": low / 1e3,
                         "time_ms_p50": mid / 1e3, "time_ms_p95": high / 1e3, "baseline": variants[0].label,
                         "speedup": fitted[0] / fitted[index], "speedup_p5": s_low, "speedup_p50": s_mid,
                         "speedup_p95": s_high, "samples": samples})
    return pd.DataFrame(rows)


def plot_band(table: pd.DataFrame, path, title: str, published: tuple[float, float] | None = None) -> None:
    """Speedup over the baseline against size, the 5-95% band shaded, the published range as a strip."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for index, (label, group) in enumerate(table.groupby("implementation", sort=False)):
        mib = group["bytes_total"] / (1 << 20)
        color = f"C{index}"
        left.plot(mib, group["time_ms"], "o-", color=color, markersize=3, label=label)
        left.fill_between(mib, group["time_ms_p5"], group["time_ms_p95"], color=color, alpha=0.25)
        if label != group["baseline"].iloc[0]:
            right.plot(mib, group["speedup"], "o-", color=color, markersize=3, label=f"{label} (fitted values)")
            right.fill_between(mib, group["speedup_p5"], group["speedup_p95"], color=color, alpha=0.25,
                               label="5-95% over parameter draws")
            if "speedup_cal_low" in group:  # the band calibrated on held-out checks (model band --calibration)
                right.fill_between(mib, group["speedup_cal_low"], group["speedup_cal_high"], color=color, alpha=0.12,
                                   hatch="//", label="calibrated on held-out checks")
    if published:
        right.axhspan(*published, color="tab:green", alpha=0.15, label=f"published {published[0]:g}-{published[1]:g}x")
    right.axhline(1.0, color="black", linewidth=0.8)
    left.set(xscale="log", yscale="log", xlabel="size (MiB)", ylabel="modelled time (ms)", title=title)
    right.set(xscale="log", yscale="log", xlabel="size (MiB)",
              ylabel=f"speedup over {table['baseline'].iloc[0]}", title="speedup, 5-95% band")
    left.legend(fontsize=7)
    right.legend(fontsize=7)
    figure.tight_layout()
    save_figure(figure, Path(path))
    plt.close(figure)
