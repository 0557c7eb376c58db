"""Other tools' outputs as pccl-bench result tables (bench.results.table's schema, status ok).

One module per tool registers a parser with ``@importer("name")``; a parser takes one file's path
and the options and returns (context, measurements): the file's facts (ranks, hosts, library ...),
complete before the first measurement is read, and its measurements (``bench.importers.rows.Measurement``)
as an iterable that may read the file as it goes (a large log is never held whole).
"""

from __future__ import annotations

from collections.abc import Callable

#: tool name -> parser(path, options) -> (context dict, iterable of Measurement)
IMPORTERS: dict[str, Callable] = {}


def importer(name: str) -> Callable:
    def register(parse: Callable) -> Callable:
        IMPORTERS[name] = parse
        return parse
    return register


from bench.importers import nccl_tests, osu  # noqa: E402,F401  (registers)
