"""``model run``: every implementation on a machine description, as the tidy result table.

Rows carry ``status = modelled``, one "sample" (the modelled time, so every timing
column and the bandwidths are filled the usual way), ``transport = model`` and the
library the description names; the description and the method go to meta.json. The
table's model columns say which description (``model_machine``) and what one call costs
in GPU time (``price_per_gpu_hour_usd``, ``cost_per_call_usd``; null without a price).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from bench.driver.provenance import provenance
from bench.errors import BadInput
from bench.model.cost import Call, predict
from bench.model.impls import Variant
from bench.model.machine import MAX_BYTES, Machine
from bench.model.steps import representatives
from bench.plan.cells import Cell, counts_for
from bench.results.table import SCHEMA_VERSION, build_tables, write_run
from collectives.dtypes import itemsize
from collectives.schedules.topology import Grid
from collectives.spec import total_count

METHOD = (
    "per step: latency (+ rendezvous) + library step overhead + bytes / bandwidth of the link class the step "
    "crosses (inter-node bytes times the NIC share), then copy / reduce at memory / reduction throughput; a step "
    "costs its slowest representative rank; a call is the sum of its steps plus the library's call overhead"
)


@dataclass
class ModelSpec:
    machine: Machine
    machine_file: str
    collectives: list[str]
    variants: list[Variant]
    ranks: list[int]
    sizes: list[int]  # nccl-tests sizes (all-gather output, reduce-scatter input, all-reduce buffer)
    dtype: str = "float32"
    placement: str = "out_of_place"
    price_per_gpu_hour_usd: float | None = None


#: the most GPUs one modelled call may span (all of Frontier, 9408 nodes x 8 GCDs, is 75264)
MAX_RANKS = 1 << 17
#: representative ranks x GPUs of one call: what the model walks (a ring has about one step per GPU, each
#: step ~0.5 KB per representative rank); 48 representatives x 131072 GPUs (nodes of 8) is 6.3 million
MAX_WALK = 1 << 23
#: nccl-tests sizes a model call may have (1 PiB)
MAX_MODEL_BYTES = MAX_BYTES
RANKS_HELP = (f"each 1 to {MAX_RANKS}, whole nodes beyond one node, and at most {MAX_WALK} GPUs x representative "
              "ranks (every rank up to 64, else up to 6 nodes' worth)")


def shape_problem(nranks: int, ranks_per_node: int) -> str | None:
    """Why the model will not walk a call of ``nranks`` GPUs, ``ranks_per_node`` a node (None: it will)."""
    if isinstance(nranks, bool) or not isinstance(nranks, int) or not 1 <= nranks <= MAX_RANKS:
        return f"{nranks!r} GPUs: the model takes 1 to {MAX_RANKS}"
    if isinstance(ranks_per_node, bool) or not isinstance(ranks_per_node, int) or not 1 <= ranks_per_node <= nranks:
        return f"{ranks_per_node!r} ranks per node for {nranks} GPUs: expected 1 to {nranks}"
    if nranks % ranks_per_node:
        return f"{nranks} GPUs do not fill nodes of {ranks_per_node}"
    walk = len(representatives(Grid(nranks, ranks_per_node))) * nranks
    if walk > MAX_WALK:
        return (f"{nranks} GPUs in nodes of {ranks_per_node}: {walk} GPUs x representative ranks to walk, more "
                f"than {MAX_WALK} (fewer GPUs, or smaller nodes)")
    return None


def check_ranks(machine: Machine, ranks: list[int], where: str = "--ranks") -> list[int]:
    """``ranks`` if the model can project every one onto ``machine`` (checked before any work)."""
    for nranks in ranks:
        problem = shape_problem(nranks, 1)  # the count's own bounds first, then its node shape here
        if problem is None:
            problem = shape_problem(nranks, node_shape(machine, nranks, where))
        if problem:
            raise BadInput(where, problem)
    return ranks


def cost_usd(time_us: float, nranks: int, price_per_gpu_hour_usd: float | None) -> float | None:
    """What ``time_us`` on ``nranks`` GPUs costs at the price per GPU-hour (None without a price)."""
    if price_per_gpu_hour_usd is None:
        return None
    return time_us * 1e-6 / 3600.0 * nranks * price_per_gpu_hour_usd


def node_shape(machine: Machine, nranks: int, where: str = "--ranks") -> int:
    """Ranks per node: a full node, or fewer ranks on one node."""
    if nranks < 1:
        raise BadInput(where, f"{nranks} GPUs: give at least 1")
    if nranks <= machine.gpus_per_node:
        return nranks
    if nranks % machine.gpus_per_node:
        raise BadInput(where, f"{nranks} GPUs do not fill nodes of {machine.gpus_per_node} ({machine.name})")
    return machine.gpus_per_node


def _cell(spec: ModelSpec, variant: Variant, collective: str, nranks: int, count: int) -> Cell:
    per_node = node_shape(spec.machine, nranks)
    size = itemsize(spec.dtype)
    return Cell(collective=collective, impl=variant.impl, algorithm=variant.algorithm, intra=variant.intra,
                inter=variant.inter, device=spec.machine.device, nranks=nranks, nnodes=nranks // per_node,
                ranks_per_node=per_node, virtual_nodes=False, dtype=spec.dtype, op="sum", placement=spec.placement,
                count_per_rank=count, bytes_per_rank=count * size,
                bytes_total=total_count(collective, nranks, count) * size, timing_mode="sync")


def model_row(spec: ModelSpec, variant: Variant, collective: str, nranks: int, count: int) -> dict:
    cell = _cell(spec, variant, collective, nranks, count)
    call = Call(collective, variant, nranks, cell.ranks_per_node, count, itemsize(spec.dtype),
                spec.placement == "in_place")
    time_us, resolved = predict(call, spec.machine)
    library = spec.machine.libraries[variant.library]
    price = spec.price_per_gpu_hour_usd
    return {**cell.to_dict(), "launch_id": f"model-{spec.machine.name}", "timestamp": time.time(),
            "resolved_algorithm": resolved, "transport": "model", "library": library.name,
            "library_version": "model", "hosts": "", "n_wrong": 0, "status": "modelled", "error": "",
            "warmup": 0, "iters": 0, "samples_us": [time_us], "mpi_thread_level": "",
            "oversubscribed": spec.machine.off_core_share(nranks) > 0,
            "price_per_gpu_hour_usd": price, "cost_per_call_usd": cost_usd(time_us, nranks, price),
            "model_machine": spec.machine.name}


def model_rows(spec: ModelSpec) -> tuple[list[dict], list[str]]:
    """Rows for every (collective, variant, ranks, size), and notes on what was left out."""
    rows, notes = [], []
    for variant in spec.variants:
        if variant.library not in spec.machine.libraries:
            notes.append(f"{variant.label}: {spec.machine.name} describes no {variant.library!r} library; skipped")
            continue
        for collective in spec.collectives:
            if variant.problem(collective):
                notes.append(f"{variant.label}: no {collective} ({variant.problem(collective)}); skipped")
                continue
            for nranks in spec.ranks:
                for count in counts_for(collective, nranks, spec.dtype, spec.sizes, "total"):
                    rows.append(model_row(spec, variant, collective, nranks, count))
    return rows, notes


def _meta(spec: ModelSpec, run_id: str, notes: list[str]) -> dict:
    return {"schema_version": SCHEMA_VERSION, "run_id": run_id, "suite": f"model-{spec.machine.name}",
            "model": {"machine_file": spec.machine_file, "machine": spec.machine.model_dump(), "method": METHOD,
                      "representative_ranks": "all ranks up to 64; above, whole nodes: first, last, fold boundaries",
                      "variants": [v.label for v in spec.variants], "notes": notes,
                      "price_per_gpu_hour_usd": spec.price_per_gpu_hour_usd},
            **provenance()}


def write_model_run(folder: Path, spec: ModelSpec) -> tuple[pd.DataFrame, list[str]]:
    """Model every cell of ``spec`` and write the run folder (results, samples, meta)."""
    rows, notes = model_rows(spec)
    if not rows:
        raise BadInput(spec.machine_file, "nothing to model: " + ("; ".join(notes) or "no cells"))
    run_id = f"model-{spec.machine.name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    meta = _meta(spec, run_id, notes)
    identity = {"run_id": run_id, "suite": meta["suite"], "tool_version": meta["tool_version"],
                "git_sha": meta["git_sha"], "schema_version": SCHEMA_VERSION}
    results, samples = build_tables(rows, identity)
    folder.mkdir(parents=True, exist_ok=True)
    write_run(folder, results, samples, meta)
    return results, notes
