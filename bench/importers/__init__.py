"""Other tools' outputs as pccl-bench result tables (bench.results.table's schema, status ok).

One module per tool registers a parser with ``@importer("name")``; a parser turns one file's
text into rows (dicts of result columns) using ``bench.importers.rows.make_row``.
"""

from __future__ import annotations

from collections.abc import Callable

#: tool name -> parser(text, source name, options) -> list of row dicts
IMPORTERS: dict[str, Callable] = {}


def importer(name: str) -> Callable:
    def register(parse: Callable) -> Callable:
        IMPORTERS[name] = parse
        return parse
    return register


from bench.importers import nccl_tests, osu  # noqa: E402,F401  (registers)
