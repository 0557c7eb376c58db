"""The figures of docs/MODEL.md (matplotlib, Agg). Regenerate with::

    .venv/bin/python -m bench.model.figures --fit /tmp/perf2 /tmp/perf3 --check /tmp/perfh --out docs/img

- model-validation.png: fitted on the --fit sweeps, predicting the --check sweeps;
- model-frontier-allgather.png: all-gather on 2048 GCDs of Frontier and PCCL-style speedups;
- model-replay.png: ZeRO-3 communication per step, GPT-3-style 7B and 13B, on Frontier.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from bench.model.check import error_table, measured_calls  # noqa: E402
from bench.model.cost import Call, predict_us  # noqa: E402
from bench.model.fit import fit  # noqa: E402
from bench.model.impls import Variant, parse_variant  # noqa: E402
from bench.model.machine import Library, Machine, load_machine  # noqa: E402
from bench.model.replay import Timed, model_timer, replay_rows  # noqa: E402
from bench.model.workload import load_workload  # noqa: E402
from bench.results.labels import impl_label  # noqa: E402
from bench.results.read import read_results  # noqa: E402

PUBLISHED_ALLGATHER = (6.0, 33.0)  # PCCL v1 all-gather speedup over RCCL on 2048 GCDs (REFERENCE.md §1)
FRONTIER_VARIANTS = ("xccl", "mpi", "pccl-flat:rd", "pccl-hier:ring/ring", "pccl-hier:rd/ring")
COLORS = dict(zip(FRONTIER_VARIANTS, ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple"), strict=True))


def fitted_machine(fit_runs: list[Path], gpus_per_node: int = 2) -> Machine:
    frame = read_results(fit_runs)
    link = {"latency_us": 1.0, "bandwidth_gbps": 5.0}
    base = Machine(name="local-fit", device="host", gpus_per_node=gpus_per_node, intra=link, inter=link,
                   copy_gbps=10.0, reduce_gbps=10.0, host_reduce_gbps=10.0,
                   libraries={"pccl": Library(name="pccl-bench"), "mpi": Library(name="MPICH")})
    return fit(measured_calls(frame, set(base.libraries)), base).machine


def validation_figure(errors: pd.DataFrame, title: str, path: Path) -> None:
    frame = errors.assign(label=errors.apply(impl_label, axis=1))
    collectives = sorted(frame["collective"].unique())
    fig, axes = plt.subplots(1, len(collectives), figsize=(4.2 * len(collectives), 4.2), squeeze=False)
    for axis, collective in zip(axes[0], collectives, strict=True):
        group = frame[frame["collective"] == collective]
        for label, part in group.groupby("label"):
            axis.scatter(part["time_us_p50"], part["model_us"], s=14, label=label)
        values = group[["time_us_p50", "model_us"]]
        low, high = values.min().min() * 0.7, values.max().max() * 1.4
        axis.plot([low, high], [low, high], color="black", linewidth=0.8)
        axis.fill_between([low, high], [low * 0.7, high * 0.7], [low * 1.3, high * 1.3], color="grey", alpha=0.15,
                          label="±30%")
        axis.set(xscale="log", yscale="log", xlabel="measured p50 (us)", ylabel="modelled (us)", title=collective)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _times(machine: Machine, variant: Variant, sizes: list[int], nranks: int) -> list[float]:
    return [predict_us(Call("allgather", variant, nranks, machine.gpus_per_node, size // (nranks * 4), 4), machine)
            for size in sizes]


def frontier_figure(machine: Machine, path: Path, nranks: int = 2048, extra_pccl_us: float = 110.0) -> None:
    sizes = [1 << k for k in range(20, 31)]
    times = {label: _times(machine, parse_variant(label), sizes, nranks) for label in FRONTIER_VARIANTS}
    slow = machine.model_copy(update={"libraries": {**machine.libraries, "pccl": machine.libraries["pccl"].model_copy(
        update={"step_overhead_us": extra_pccl_us})}})
    slow_hier = _times(slow, parse_variant("pccl-hier:rd/ring"), sizes, nranks)
    mib = [size / (1 << 20) for size in sizes]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.3))
    for label, values in times.items():
        left.plot(mib, [v / 1e3 for v in values], marker="o", markersize=3, label=label, color=COLORS[label])
    left.set(xscale="log", yscale="log", xlabel="all-gather output (MiB)", ylabel="modelled time (ms)",
             title=f"all-gather, {nranks} GCDs of Frontier (model)")
    left.legend(fontsize=8)
    base = times["xccl"]
    for label in ("pccl-hier:rd/ring", "pccl-hier:ring/ring", "pccl-flat:rd"):
        right.plot(mib, [b / v for b, v in zip(base, times[label], strict=True)], marker="o", markersize=3, label=label,
                   color=COLORS[label])
    right.plot(mib, [b / v for b, v in zip(base, slow_hier, strict=True)], linestyle="--", color=COLORS[
               "pccl-hier:rd/ring"],
               label=f"pccl-hier:rd/ring, +{extra_pccl_us:g} us software cost per step")
    right.axhspan(*PUBLISHED_ALLGATHER, color="tab:green", alpha=0.15, label="published 6-33x (PCCL v1)")
    right.axhline(1.0, color="black", linewidth=0.8)
    right.set(xscale="log", yscale="log", xlabel="all-gather output (MiB)", ylabel="speedup over xccl (RCCL ring)",
              title="modelled speedup over the RCCL-style ring")
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def replay_figure(machine: Machine, workloads: list[str], path: Path, nranks: int = 2048) -> None:
    labels = [label for label in FRONTIER_VARIANTS if parse_variant(label).library in machine.libraries]
    timed = [Timed(label, model_timer(machine, parse_variant(label))) for label in labels]
    fig, axes = plt.subplots(1, len(workloads), figsize=(5.5 * len(workloads), 4), squeeze=False)
    for axis, name in zip(axes[0], workloads, strict=True):
        table = replay_rows(load_workload(name), [nranks], timed, "modelled", machine.name,
                            lambda n: machine.gpus_per_node, machine.price_per_gpu_hour_usd)
        bottom = [0.0] * len(table)
        for column in ("allgather_ms", "reduce_scatter_ms"):
            axis.bar(table["implementation"], table[column], bottom=bottom, label=column.removesuffix("_ms"),
                     color="tab:blue" if column == "allgather_ms" else "tab:orange")
            bottom = [b + v for b, v in zip(bottom, table[column], strict=True)]
        axis.set(ylabel="communication per step (ms)", title=f"{name}, {nranks} GCDs ({machine.name}, model)")
        axis.tick_params(axis="x", labelrotation=30, labelsize=8)
        axis.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fit", nargs="+", type=Path, required=True, help="sweeps to fit on")
    parser.add_argument("--check", nargs="+", type=Path, required=True, help="held-out sweeps to predict")
    parser.add_argument("--out", type=Path, default=Path("docs/img"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    local = fitted_machine(args.fit)
    errors = error_table(measured_calls(read_results(args.check), set(local.libraries)), local)
    validation_figure(errors, f"fitted on {' + '.join(p.name for p in args.fit)}, predicting "
                      f"{' + '.join(p.name for p in args.check)} (this machine)", args.out / "model-validation.png")
    frontier, _ = load_machine("frontier-paper")  # the paper-figure description (docs/MODEL.md)
    frontier_figure(frontier, args.out / "model-frontier-allgather.png")
    replay_figure(frontier, ["gpt3-7b-zero3", "gpt3-13b-zero3"], args.out / "model-replay.png")


if __name__ == "__main__":
    main()
