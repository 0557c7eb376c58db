"""``pccl-bench model replay``: the communication time per training step of a workload, modelled on
a machine description or timed from measured runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import pandas as pd
import typer

from bench.cli.model.flags import Impls, Price, Ranks, check_runnable, checked_price, gpu_counts, variants_of
from bench.cli.model.outputs import check_outputs
from bench.cli.model.tables import make_console, print_replay
from bench.errors import BadInput
from bench.files import atomic_write, output_folder
from bench.model.impls import Variant
from bench.model.machine import load_machine
from bench.model.model_run import MAX_RANKS, check_ranks, node_shape
from bench.model.replay import Timed, measured_timer, model_timer, replay_rows
from bench.model.workload import MAX_CALLS_PER_STEP, MAX_LAYERS, load_workload
from bench.results.labels import impl_label
from bench.results.read import read_results


def replay(
    workload_name: Annotated[str, typer.Argument(
        help=f"Workload: a name from suites/workloads/ or a path (layers at most {MAX_LAYERS}, GPU counts at most "
             f"{MAX_RANKS}, at most {MAX_CALLS_PER_STEP} calls a step).")],
    machine_name: Annotated[str | None, typer.Option("--machine", "-m", help="Model on this description.")] = None,
    measured: Annotated[list[Path] | None, typer.Option(
        "--results", help="Time from these measured runs instead (repeatable).")] = None,
    ranks: Ranks = None,
    impl: Impls = None,
    price: Price = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write replay.csv and replay.parquet here.")]
    = None,
) -> None:
    """Communication time per training step of a workload, per implementation (modelled or measured)."""
    if (machine_name is None) == (not measured):
        raise BadInput("model replay", "give exactly one of --machine (modelled) or --results (measured)")
    price, requested = checked_price(price), gpu_counts(ranks, [])
    variants = variants_of(impl) if impl or machine_name else None
    workload = load_workload(workload_name)
    machine, machine_path = load_machine(machine_name) if machine_name else (None, None)
    if out is not None:
        output_folder(out, "--out")
        check_outputs([(out / "replay.csv", "--out"), (out / "replay.parquet", "--out")],
                 [*(measured or []), *([machine_path] if machine_path else [])])
    if machine is not None:
        variants = [v for v in variants if v.library in machine.libraries]
        if not variants:
            raise BadInput("--impl", f"none of these implementations has its library in {machine_path}")
        issued = sorted({"allreduce"} if workload.strategy == "ddp" else {"allgather", "reduce_scatter"})
        check_runnable(variants, issued)
        rank_list = check_ranks(machine, requested) if requested else check_ranks(
            machine, workload.ranks, f"{workload_name}: ranks")
        timed = [Timed(v.label, model_timer(machine, v)) for v in variants]
        table = replay_rows(workload, rank_list, timed, "modelled", machine.name,
                            lambda n: node_shape(machine, n),
                            price if price is not None else machine.price_per_gpu_hour_usd)
    else:
        table = _measured_replay(workload, read_results(measured), requested, variants, price)
    print_replay(table, make_console())
    if out:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write(out / "replay.csv", lambda temp: table.to_csv(temp, index=False))
        atomic_write(out / "replay.parquet", lambda temp: table.to_parquet(temp, index=False))


def _measured_replay(workload, frame: pd.DataFrame, ranks: list[int], variants: list[Variant] | None,
                     price: float | None) -> pd.DataFrame:
    """Replay from measured sweeps; implementations without the needed cells are left out, with a note."""
    ok = frame[frame["status"] == "ok"]
    labels = [v.label for v in variants] if variants else sorted(set(ok.apply(impl_label, axis=1)))
    # One node shape per rank count: the one with the most ranks per node where several were swept.
    shapes = ok.groupby("nranks")["ranks_per_node"].agg(lambda values: sorted(set(values)))
    shape = {int(nranks): int(values[-1]) for nranks, values in shapes.items()}
    chosen_ranks = ranks or sorted(shape)
    timed, console = [], make_console()
    for nranks, values in shapes.items():
        if len(values) > 1 and nranks in chosen_ranks:
            console.print(f"note: {nranks} ranks were measured with {values} ranks per node; replaying "
                          f"{shape[nranks]} per node", highlight=False)
    for label in labels:
        item = Timed(label, measured_timer(frame, label, lambda n: shape.get(n, n)))
        try:
            replay_rows(workload, chosen_ranks, [item], "measured", "", lambda n: shape.get(n, n), None)
        except BadInput as error:
            console.print(f"note: {label} left out: {error}", highlight=False)
            continue
        timed.append(item)
    if not timed:
        raise BadInput("--results", "no implementation has ok cells covering the workload's sizes")
    return replay_rows(workload, chosen_ranks, timed, "measured", str(frame["run_id"].iloc[0]),
                       lambda n: shape.get(n, n), price)
