"""Other tools' outputs as pccl-bench result tables (bench.results.table's schema, status ok).

One module per tool registers a parser with ``@importer("name")``; a parser takes one part of a run
(``bench.importers.frontend.Part``: a file's lines from one line to another, read through the front
end that strips launcher prefixes) and the options and returns (context, measurements): the run's
facts (ranks, hosts, library ...), complete before the first measurement is read, and its measurements
(``bench.importers.imported_row.Measurement``) as an iterable that may read the file as it goes (a large log
is never held whole). The front end splits each file into runs and recognises each run's tool by its
headers (``pccl-bench import`` without a tool).

A tool whose rows depend on all its files at once registers with ``@importer("name", whole=True)``
a reader that takes every path and the options and returns (results, meta, samples): the
pccl-reproducer (one machine chosen over all files, each job a repeat of its cells, a method per
row). Both kinds are run by bench/importers/import_run.py and written by the one run-folder writer.
"""

from __future__ import annotations

from collections.abc import Callable

#: tool name -> parser(part, options) -> (context dict, iterable of Measurement)
IMPORTERS: dict[str, Callable] = {}
#: tool name -> reader(paths, options) -> (results DataFrame, meta, samples DataFrame)
WHOLE_IMPORTERS: dict[str, Callable] = {}


def importer(name: str, whole: bool = False) -> Callable:
    def register(parse: Callable) -> Callable:
        (WHOLE_IMPORTERS if whole else IMPORTERS)[name] = parse
        return parse
    return register


def tools() -> list[str]:
    """Every registered tool's name."""
    return sorted({*IMPORTERS, *WHOLE_IMPORTERS})


from bench.importers import imb, nccl_tests, osu, pccl_reproducer  # noqa: E402,F401  (registers)
