"""nccl-tests and rccl-tests: the text table and the ``-J``/``--output_file x.json`` JSON as result rows.

Checked against NVIDIA/nccl-tests src/common.cu and src/util.cu (see docs/PLOTS.md for commits):

* ``size`` is ``max(sendBytes, expectedBytes)`` (all-gather output, reduce-scatter input, all-reduce
  buffer) and ``count`` is ``paramcount`` (per rank: all-gather send count, reduce-scatter receive
  count, all-reduce count): exactly pccl-bench's ``bytes_total`` and ``count_per_rank``.
* ``time`` is the host-timer mean over iterations (cross-rank reduction per ``-a``): it goes into
  ``time_us_mean`` and, unless a per-iteration median exists, ``time_us_p50``.
* ``-I 1`` (per_iter_timing) adds ``i_min i_max i_p99 i_cv%`` after each placement's ``#wrong``
  (CUDA-event times, per iteration the max over ranks): i_min/i_max go into time_us_min/max. The
  JSON adds ``<placement>_per_iter`` objects (util.cu ``writePerIterReport``): ``times_us`` holds one
  time per timed iteration (``config.iterations`` of them; common.cu ``BenchTime``: the CUDA-event
  time of iteration i divided by ``-m`` agg_iters, max over the GPUs of a process, then over
  processes), and min_us/max_us/p50_us/p95_us/p99_us summarise ``times_us[skipped_iterations:]``
  (``-K`` per_iter_skip, JSON version 3) with nearest-rank definitions (p50 = sorted[n/2],
  pXX = sorted[min(n-1, ceil(n*XX/100)-1)]). Those kept times become the cell's per-iteration
  samples, pccl-bench's own definition of a sample (time = max over ranks per iteration).
* The columns of a line are read from the ``#  size  count  type  redop  root  time ...`` header, so
  old layouts (no root, ``error``), ``-I``, the bitwise-check column and ``-S`` timestamps all parse.

rccl-tests prints the same table and writes the same ``-J`` JSON; its own ``-X file -Z json`` report
(a list of flat records with ``inPlace``) is read too.

A text log is read twice, line by line (200 MB in bounded memory): the first pass reads the
header facts (collective, ``#  Rank`` lines of every run, versions), the second the result lines.
Every number used is checked where it is read, and a bad one is a BadInput naming ``file:line``.

The modules: ``nccl_fields`` (what the names mean), ``nccl_lines`` (one line of the text table),
``nccl_text`` (the two passes over a text log), ``nccl_json`` (the JSON files); here, the importers.
"""

from __future__ import annotations

from collections.abc import Iterable

from bench.importers import importer
from bench.importers.frontend import Part, head_text
from bench.importers.imported_row import ImportOptions, Measurement
from bench.importers.input_files import json_like, read_limited
from bench.importers.nccl_json import MAX_JSON_BYTES, parse_json
from bench.importers.nccl_text import parse_text_file


@importer("nccl-tests")
def nccl_tests(part: Part, options: ImportOptions) -> tuple[dict, Iterable[Measurement]]:
    return _parse(part, options, "nccl-tests")


@importer("rccl-tests")
def rccl_tests(part: Part, options: ImportOptions) -> tuple[dict, Iterable[Measurement]]:
    return _parse(part, options, "rccl-tests")


def _parse(part: Part, options: ImportOptions, kind: str) -> tuple[dict, Iterable[Measurement]]:
    """(context, measurements) of one nccl-tests/rccl-tests run: JSON read whole (bounded), text
    streamed. The context is complete before the first measurement is read."""
    path = part.path
    first = head_text(path)  # the run's format was checked when the file was split (bench.importers.import_run)
    measurements: Iterable[Measurement]
    if json_like(first):
        text = read_limited(path, MAX_JSON_BYTES, f"{kind} JSON")
        measurements, context = parse_json(text, str(path), options, kind)
        for measurement in measurements:
            measurement.iters = context.get("iters", 0)
    else:
        context, measurements = parse_text_file(part, options, kind, first)
    context["device"] = "rocm" if context["library"] == "RCCL" else "cuda"
    # nccl-tests walks each call's start offset through its largest size's buffers by default
    context.update(impl="xccl", transport=context["library"].lower(), buffers="rotate")
    return context, measurements
