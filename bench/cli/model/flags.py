"""The flags of the ``pccl-bench model`` commands: their declarations and their bounds, each value
checked (a one-line BadInput naming the flag) before any modelling starts."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated

import typer

from bench.errors import BadInput
from bench.model.impls import DEFAULT_VARIANTS, Variant, parse_variant
from bench.model.machine import MAX_GPUS_PER_NODE, MAX_PRICE
from bench.model.model_run import MAX_MODEL_BYTES, MAX_RANKS, RANKS_HELP
from bench.plan.sizes import geometric, parse_size
from collectives.spec import COLLECTIVES

#: GPU counts one --ranks list may hold
MAX_RANK_COUNTS = 256
#: sizes one --sizes range may give, and the largest --factor
MAX_SIZES = 10_000
MAX_FACTOR = 1 << 20
#: --seed: numpy's generators take any non-negative integer; 64 bits are plenty
MAX_SEED = (1 << 64) - 1
#: --published LOW:HIGH: speedups
MAX_SPEEDUP = 1e9

MachineArg = Annotated[str, typer.Argument(
    help=f"Machine description: a name from suites/machines/ or a path (gpus_per_node and nics_per_node at most "
         f"{MAX_GPUS_PER_NODE}; every figure finite and within the bounds of bench/model/machine.py).")]
Ranks = Annotated[str | None, typer.Option(
    "--ranks", "-n", help=f"GPU counts, comma-separated (e.g. 64,512,2048), at most {MAX_RANK_COUNTS}; {RANKS_HELP}.")]
Impls = Annotated[list[str] | None, typer.Option(
    "--impl", "-i", help="mpi | xccl | pccl-flat:<alg> | pccl-hier:<inter>/<intra>; repeatable.")]
OnlyRanks = Annotated[str | None, typer.Option("--ranks", "-n", help="Only cells with these rank counts, e.g. 2,3.")]
Price = Annotated[float | None, typer.Option(
    "--price-per-gpu-hour", help=f"US$ per GPU-hour for the cost columns, 0 to {MAX_PRICE:g} "
                                 "(default: the description's).")]
Results = Annotated[list[Path], typer.Argument(help="Run folders or results.parquet files.")]
#: MAX_MODEL_BYTES as people read it
MAX_SIZE_TEXT = "1 PiB (2^50 B)"
SIZES_HELP = f"min:max nccl-tests sizes, e.g. 1MiB:1GiB; each 1 B to {MAX_SIZE_TEXT}, min <= max."
FACTOR_HELP = f"Each size is the previous times this: a whole number 2 to {MAX_FACTOR}."


def quoted(text: object, limit: int = 60) -> str:
    shown = repr(text)
    return shown if len(shown) <= limit else f"{shown[: limit - 5]}...{shown[-2:]}"


def gpu_counts(text: str | None, default: list[int], flag: str = "--ranks") -> list[int]:
    """GPU counts of a comma-separated list, each 1..MAX_RANKS, repeats dropped (order kept)."""
    if not text:
        return default
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if len(parts) > MAX_RANK_COUNTS:
        raise BadInput(flag, f"{len(parts)} GPU counts: give at most {MAX_RANK_COUNTS}")
    if not all(re.fullmatch(r"[+-]?[0-9]{1,12}", part) for part in parts):
        raise BadInput(flag, f"{quoted(text)} is not a comma-separated list of whole numbers")
    values = list(dict.fromkeys(int(part) for part in parts))
    if not values:
        raise BadInput(flag, f"{quoted(text)}: give at least one GPU count")
    wrong = next((value for value in values if not 1 <= value <= MAX_RANKS), None)
    if wrong is not None:
        raise BadInput(flag, f"{wrong} GPUs: each GPU count must be 1 to {MAX_RANKS}")
    return values


def model_size(text: str, where: str) -> int:
    """A size of 1 byte to MAX_MODEL_BYTES."""
    if len(text) > 100:
        raise BadInput(where, f"{quoted(text)} is longer than 100 characters: not a size")
    try:
        size = parse_size(text)
    except ValueError as error:
        raise BadInput(where, str(error)) from None
    if not 1 <= size <= MAX_MODEL_BYTES:
        raise BadInput(where, f"{quoted(text)} is {size} B: expected 1 B to {MAX_SIZE_TEXT}")
    return size


def model_sizes(text: str, factor: int) -> list[int]:
    """--sizes min:max by --factor, checked before any size is made (a factor below 2 never ends)."""
    if not 2 <= factor <= MAX_FACTOR:
        raise BadInput("--factor", f"{factor}: each size is the previous times this, a whole number 2 to {MAX_FACTOR}")
    low, sep, high = text.partition(":")
    smallest, largest = model_size(low, "--sizes"), model_size(high if sep else low, "--sizes")
    if smallest > largest:
        raise BadInput("--sizes", f"{quoted(text)}: min ({smallest} B) is larger than max ({largest} B)")
    try:
        return geometric(smallest, largest, factor, limit=MAX_SIZES)
    except ValueError as error:
        raise BadInput("--sizes", str(error)) from None


def variants_of(impls: list[str] | None) -> list[Variant]:
    """The implementations to model, repeats dropped (order kept)."""
    texts = list(dict.fromkeys(impls or DEFAULT_VARIANTS))
    too_long = next((text for text in texts if len(text) > 100), None)
    if too_long is not None:
        raise BadInput("--impl", f"{quoted(too_long)} is longer than 100 characters")
    return [parse_variant(text) for text in texts]


def check_runnable(variants: list[Variant], collectives: list[str]) -> None:
    """Every variant runs every collective (replay and band time each one: no cell to skip)."""
    for variant in variants:
        for collective in collectives:
            problem = variant.problem(collective)
            if problem:
                raise BadInput("--impl", f"{variant.label}: no {collective} ({problem})")


def checked_price(price: float | None) -> float | None:
    if price is not None and not (math.isfinite(price) and 0 <= price <= MAX_PRICE):
        raise BadInput("--price-per-gpu-hour", f"{price}: expected US$ 0 to {MAX_PRICE:g} per GPU-hour")
    return price


def collectives_of(names: list[str] | None) -> list[str]:
    collectives = list(dict.fromkeys(names or COLLECTIVES))
    unknown = sorted(set(collectives) - set(COLLECTIVES))
    if unknown:
        raise BadInput("--collective", f"{quoted(unknown)} not in {list(COLLECTIVES)}")
    return collectives
