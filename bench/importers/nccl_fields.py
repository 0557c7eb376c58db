"""What nccl-tests' and rccl-tests' names mean, for their text and JSON readers alike: test programs
as collectives, type names as dtypes, reduction ops, NCCL version codes, and the largest rank count."""

from __future__ import annotations

import os
import re

from bench.errors import BadInput
from bench.importers.imported_row import ImportOptions
from bench.importers.kinds import op_of

#: nccl-tests' and rccl-tests' programs (and their JSON names) as the table's collectives: the three the
#: sweep runs and the others under their own names (bench/importers/kinds.py)
COLLECTIVES = {"all_gather": "allgather", "allgather": "allgather", "reduce_scatter": "reduce_scatter",
               "reducescatter": "reduce_scatter", "all_reduce": "allreduce", "allreduce": "allreduce",
               "broadcast": "broadcast", "reduce": "reduce", "alltoall": "alltoall", "alltoallv": "alltoallv",
               "sendrecv": "sendrecv", "gather": "gather", "scatter": "scatter", "hypercube": "hypercube"}
DTYPES = {"float": "float32", "half": "float16", "double": "float64", "bfloat16": "bfloat16", "int8": "int8",
          "uint8": "uint8", "int32": "int32", "int": "int32", "uint32": "uint32", "int64": "int64",
          "uint64": "uint64", "float32": "float32", "float64": "float64", "float16": "float16",
          "f8e4m3": "fp8_e4m3", "f8e5m2": "fp8_e5m2", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2",
          "char": "int8"}
TEST_NAME = re.compile(r"(?<![a-z])(all_gather|reduce_scatter|all_reduce|alltoallv|alltoall|broadcast|reduce|sendrecv|"
                       r"gather|scatter|hypercube)_perf")
#: a reduction op as nccl-tests prints it (sum, prod, max, min, avg, mulsum, none)
REDOP = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,31}")
#: more ranks than any machine has: a rank count beyond it is a corrupt number
MAX_RANKS = 1 << 24
#: "# Collective test starting: all_gather_perf" (common.cu writeDeviceReport)
STARTING = re.compile(r"^#\s*Collective test starting:\s*(\S{1,200})")


def infer_collective(text: str, source: str, options: ImportOptions,
                     text_is: str = "the output") -> tuple[str, str | None]:
    """(collective, what it was read from; None when --collective gave it). ``text_is`` names
    ``text`` in that note (the output, or the JSON's args[0])."""
    if options.collective:
        return options.collective, None
    candidates = []
    if starting := re.search(STARTING.pattern, text, re.MULTILINE):
        candidates.append((starting.group(1), repr(starting.group(0).strip())))
    if found := TEST_NAME.search(text):
        candidates.append((found.group(0), f"{found.group(0)!r} in {text_is}"))
    return choose_collective(candidates, source)


def choose_collective(candidates: list[tuple[str, str]], source: str) -> tuple[str, str]:
    """The first candidate (program, evidence) that names a test, else the file name's test."""
    if found := TEST_NAME.search(source):
        candidates = [*candidates, (found.group(0), f"the file name {os.path.basename(source)!r}")]
    for program, evidence in candidates:
        if not (found := TEST_NAME.search(program)):
            continue
        return COLLECTIVES[found.group(1)], evidence
    raise BadInput(source, "cannot tell which collective this is (no '# Collective test starting: <test>_perf' "
                           "line, no test name in the file name): pass --collective")


def reduction_op(token: str, collective: str, where: str) -> str:
    if not REDOP.fullmatch(token):
        raise BadInput(where, f"redop: {token[:40]!r} is not a reduction op")
    # as printed: nccl-tests prints "none" for a collective that reduces nothing (all_gather, alltoall ...)
    return op_of(collective, token)


def decode_version(code: object) -> str:
    """NCCL_VERSION_CODE 22105 -> 2.21.5 (major*10000 + minor*100 + patch; 1000s before 2.9)."""
    try:
        value = int(str(code))
    except ValueError:
        return str(code)[:40]
    if value >= 10000:
        return f"{value // 10000}.{value // 100 % 100}.{value % 100}"
    return f"{value // 1000}.{value // 100 % 10}.{value % 100}" if value >= 1000 else str(value)
