"""nccl-tests and rccl-tests: the text table (and nccl-tests' -J JSON) as result rows.

nccl-tests' ``size`` is the total buffer (all-gather output, reduce-scatter input, all-reduce
buffer) and ``count`` is per rank (REFERENCE.md §3), exactly pccl-bench's ``bytes_total`` and
``count_per_rank``. ``time`` is the tool's average over iterations (cross-rank reduction per -a):
it goes into ``time_us_p50`` and ``time_us_mean`` (there are no per-iteration samples).
"""

from __future__ import annotations

import json
import re

from bench.errors import BadInput
from bench.importers import importer
from bench.importers.rows import ITEMSIZE, ImportOptions, Measurement

COLLECTIVES = {"all_gather": "allgather", "allgather": "allgather", "reduce_scatter": "reduce_scatter",
               "reducescatter": "reduce_scatter", "all_reduce": "allreduce", "allreduce": "allreduce"}
DTYPES = {"float": "float32", "half": "float16", "double": "float64", "bfloat16": "bfloat16", "int8": "int8",
          "uint8": "uint8", "int32": "int32", "int": "int32", "uint32": "uint32", "int64": "int64",
          "uint64": "uint64", "float32": "float32", "float64": "float64", "float16": "float16",
          "f8e4m3": "fp8_e4m3", "f8e5m2": "fp8_e5m2", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}
RANK_LINE = re.compile(r"#\s*Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+")
ITERS = re.compile(r"warmup iters:\s*(\d+)\s+iters:\s*(\d+)")
VERSION = re.compile(r"\b([NR]CCL) version (\d+\.\d+\.\d+)")
LIBRARY_CODE = re.compile(r"nccl-library=(\d+)")
TOOL_VERSION = re.compile(r"#\s*([nr]ccl-tests) version (\S+)")
TEST_NAME = re.compile(r"(?<![a-z])(all_gather|reduce_scatter|all_reduce|alltoall|broadcast|reduce|sendrecv|gather|"
                       r"scatter|hypercube)_perf")


def collective_of(text: str, source: str, options: ImportOptions) -> str:
    """--collective, else the test's name in the output or the file name (all_gather_perf ...)."""
    if options.collective:
        return options.collective
    for where in (text, source):
        found = TEST_NAME.search(where)
        if found:
            name = found.group(1)
            if name not in COLLECTIVES:
                raise BadInput(source, f"{name}_perf is not a collective pccl-bench compares "
                                       "(all_gather, reduce_scatter, all_reduce)")
            return COLLECTIVES[name]
    raise BadInput(source, "cannot tell which collective this is; name the file after the test "
                           "(all_gather_perf.txt) or pass --collective")


def _number(token: str) -> float | None:
    try:
        return float(token)
    except ValueError:
        return None


def parse_data_line(tokens: list[str], collective: str) -> list[Measurement]:
    """``size count type redop [root] time algbw busbw #wrong time algbw busbw #wrong``."""
    if len(tokens) < 8 or not tokens[0].isdigit() or not tokens[1].isdigit() or tokens[2] not in DTYPES:
        return []
    dtype, op = DTYPES[tokens[2]], tokens[3]
    rest = tokens[4:]
    if len(rest) in (5, 9) and re.fullmatch(r"-?\d+", rest[0]):
        rest = rest[1:]  # the root column (nccl-tests >= 2.13 prints it for every test)
    if op == "none" or collective == "allgather":
        op = "sum"  # pccl-bench records all-gathers with the suite's op; nccl-tests says "none"
    found = []
    for placement, block in (("out_of_place", rest[0:4]), ("in_place", rest[4:8])):
        if len(block) < 3 or _number(block[0]) is None:
            continue  # "N/A" where a test has no in-place variant
        wrong = _number(block[3]) if len(block) > 3 else 0
        found.append(Measurement(collective, dtype, op, int(tokens[1]), placement, _number(block[0]),
                                 n_wrong=int(wrong or 0)))
    return found


def header_context(text: str, kind: str) -> dict:
    """Ranks, hosts, iterations and versions printed in the header."""
    ranks = {int(rank): host for rank, host in RANK_LINE.findall(text)}
    iters = ITERS.search(text)
    library = VERSION.search(text)
    code = LIBRARY_CODE.search(text)
    tool = TOOL_VERSION.search(text)
    version = library.group(2) if library else (_decode_version(code.group(1)) if code else "")
    return {"nranks": len(ranks) or None, "hosts": sorted(set(ranks.values())),
            "warmup": int(iters.group(1)) if iters else 0, "iters": int(iters.group(2)) if iters else 0,
            "library": library.group(1) if library else ("RCCL" if kind == "rccl-tests" else "NCCL"),
            "library_version": version, "tool_version": f"{tool.group(1)} {tool.group(2)}" if tool else kind}


def _decode_version(code: str) -> str:
    """NCCL_VERSION_CODE 22105 -> 2.21.5 (major*10000 + minor*100 + patch)."""
    value = int(code)
    return f"{value // 10000}.{value // 100 % 100}.{value % 100}" if value >= 10000 else code


def parse_text(text: str, source: str, options: ImportOptions, kind: str) -> tuple[list[Measurement], dict]:
    collective = collective_of(text, source, options)
    measurements, implied = [], set()
    for line in text.splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        tokens = line.split()
        found = parse_data_line(tokens, collective)
        if found and collective != "allreduce" and int(tokens[1]):
            # size = count * itemsize * nranks: the rank count when the header lacks rank lines
            implied.add(int(tokens[0]) // (int(tokens[1]) * ITEMSIZE[found[0].dtype]))
        measurements += found
    if not measurements:
        raise BadInput(source, f"no {kind} result lines (size count type redop ... time algbw busbw #wrong)")
    context = header_context(text, kind)
    if not context["nranks"] and len(implied) == 1:
        context["nranks"] = implied.pop()
    return measurements, context


def parse_json(text: str, source: str, options: ImportOptions, kind: str) -> tuple[list[Measurement], dict]:
    """nccl-tests -J output: a list of records (size, count, type, redop, and per placement
    time/algbw/busbw/wrong, nested under out_of_place/in_place or flat with a placement)."""
    try:
        data = json.loads(text)
    except ValueError as error:
        raise BadInput(source, f"not JSON: {error}") from None
    records = data if isinstance(data, list) else next(
        (data[key] for key in ("results", "data", "tests", "measurements") if isinstance(data.get(key), list)), None)
    if not records:
        raise BadInput(source, "no list of results (a top-level list or 'results': [...]) in this JSON")
    meta = data if isinstance(data, dict) else {}
    name = str(meta.get("collective") or meta.get("test") or meta.get("name") or "")
    collective = collective_of(name + " " + (name.replace("_perf", "") + "_perf" if name else ""), source, options)
    measurements = [m for record in records for m in _json_record(record, collective, source)]
    version = str(meta.get("nccl_version") or meta.get("nccl_library_version") or meta.get("version") or "")
    context = {"nranks": meta.get("nranks") or meta.get("nRanks"), "hosts": [], "warmup": int(meta.get("warmup", 0)),
               "iters": int(meta.get("iters", 0)), "library": "RCCL" if kind == "rccl-tests" else "NCCL",
               "library_version": version, "tool_version": f"{kind} {meta.get('nccl_tests_version', '')}".strip()}
    return measurements, context


def _json_record(record: dict, collective: str, source: str) -> list[Measurement]:
    try:
        dtype = DTYPES[str(record.get("type") or record.get("datatype") or record.get("dtype"))]
        count = int(record["count"])
    except (KeyError, TypeError, ValueError):
        raise BadInput(source, f"a result record without size/count/type: {str(record)[:120]}") from None
    op = str(record.get("redop") or record.get("op") or "sum")
    op = "sum" if op == "none" or collective == "allgather" else op
    found = []
    for placement, key in (("out_of_place", "out_of_place"), ("in_place", "in_place")):
        block = record.get(key) or (record if record.get("placement", "out_of_place") == placement else None)
        time_us = block.get("time") if isinstance(block, dict) else None
        if isinstance(time_us, int | float):
            wrong = block.get("wrong", block.get("nwrong", block.get("errors", 0)))
            found.append(Measurement(collective, dtype, op, count, placement, float(time_us),
                                     n_wrong=int(wrong) if isinstance(wrong, int | float) else 0))
    return found


@importer("nccl-tests")
def nccl_tests(text: str, source: str, options: ImportOptions) -> tuple[list[Measurement], dict]:
    return _parse(text, source, options, "nccl-tests")


@importer("rccl-tests")
def rccl_tests(text: str, source: str, options: ImportOptions) -> tuple[list[Measurement], dict]:
    return _parse(text, source, options, "rccl-tests")


def _parse(text: str, source: str, options: ImportOptions, kind: str) -> tuple[list[Measurement], dict]:
    measurements, context = (parse_json if text.lstrip().startswith(("{", "[")) else parse_text)(
        text, source, options, kind)
    context["device"] = "rocm" if context["library"] == "RCCL" else "cuda"
    context.update(impl="xccl", transport=context["library"].lower())
    for measurement in measurements:
        measurement.iters = context.get("iters", 0)
    return measurements, context
