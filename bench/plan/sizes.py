"""Message sizes as people write them: 8, 8B, 4K, 4KiB, 1 MiB, 2M, 1G, 1kB, 1MB.

K/M/G and KiB/MiB/GiB are binary (1024, as nccl-tests' -b/-e); kB/MB/GB are decimal. And the
values of cell columns as YAML gives them (``cell_value``: the suite's ``select:`` and the gate's
allowlist read cells through it, below both the cells and the suite).
"""

from __future__ import annotations

import numbers
import re

_UNITS = {
    "": 1, "b": 1,
    "k": 1 << 10, "ki": 1 << 10, "kib": 1 << 10,
    "m": 1 << 20, "mi": 1 << 20, "mib": 1 << 20,
    "g": 1 << 30, "gi": 1 << 30, "gib": 1 << 30,
    "kb": 10**3, "mb": 10**6, "gb": 10**9,
}
_PATTERN = re.compile(r"^\s*(\d+)\s*([a-zA-Z]*)\s*$")
SIZE_HELP = "a whole number of bytes with an optional unit: B, K/KiB, M/MiB, G/GiB (binary) or kB/MB/GB"


def parse_size(text: str | int) -> int:
    """Bytes in ``text``; ValueError naming what was expected otherwise."""
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not a size; expected {SIZE_HELP}")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"{text!r} is negative; expected {SIZE_HELP}")
        return text
    match = _PATTERN.match(str(text))
    unit = match.group(2).lower() if match else None
    if not match or unit not in _UNITS:
        raise ValueError(f"{text!r} is not a size; expected {SIZE_HELP}")
    return int(match.group(1)) * _UNITS[unit]


def format_size(nbytes: int) -> str:
    """Binary units, as the summary table and plots print them (4 KiB, 1 MiB)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    if nbytes >= 1 << 10:
        return f"{nbytes / 1024:.1f} KiB"
    return f"{nbytes} B"


def geometric(min_bytes: int, max_bytes: int, factor: int, limit: int | None = None) -> list[int]:
    """min, min*factor, ... up to and including max (nccl-tests -b/-e/-f); empty when min > max.

    ValueError (before any loop) for a factor below 2 or a smallest size below 1 byte, which would
    never reach max, and for more than ``limit`` sizes when a limit is given."""
    for name, value in (("factor", factor), ("smallest size", min_bytes), ("largest size", max_bytes)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ValueError(f"the {name} {value!r} is not a whole number")
    if factor < 2:
        raise ValueError(f"the factor {factor} is below 2: the sizes would never grow")
    if min_bytes < 1:
        raise ValueError(f"the smallest size {min_bytes} B is below 1 byte")
    if limit is not None and min_bytes <= max_bytes:
        # Count by integer division first (at most limit + 1 steps), so a huge range never builds a list.
        steps = 0
        ratio = max_bytes // min_bytes
        while ratio >= factor and steps <= limit:
            ratio //= factor
            steps += 1
        if steps + 1 > limit:
            raise ValueError(f"{min_bytes} B to {max_bytes} B by factor {factor} gives more than {limit} sizes")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


#: cell columns that hold sizes (given with units in YAML) and counts
SIZE_COLUMNS = ("count_per_rank", "bytes_per_rank", "bytes_total")
INT_COLUMNS = ("nranks", "nnodes", "ranks_per_node")


def cell_value(name: str, value: object) -> int | str:
    """A value of cell column ``name`` as cells and tables hold it, from YAML or a table row (sizes
    take units; ValueError when it is none)."""
    if name in SIZE_COLUMNS:
        return parse_size(value if isinstance(value, int) else str(value))
    if name in INT_COLUMNS:
        return int(value)
    return "" if value is None else str(value)
