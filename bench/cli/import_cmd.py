"""``pccl-bench import [--auto | nccl-tests|rccl-tests|osu|imb|pccl-reproducer] FILE...``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bench.errors import BadInput
from bench.importers import tools
from bench.importers.import_run import MAX_RANKS, check_out_folder, import_to_folder, preflight
from bench.importers.imported_row import ImportOptions
from bench.importers.kinds import KINDS

#: the registered tools (bench/importers/__init__.py), in the order the help names them
TOOLS = ("nccl-tests", "rccl-tests", "osu", "imb", "pccl-reproducer")
#: the first argument that asks for the importer to be chosen by content
AUTO = "auto"
#: runs of one file said on stderr one by one (a 200 MB log holds 30,000)
MAX_RUNS_SHOWN = 20
#: the longest name flag (--impl, --library, --library-version) a table cell takes
MAX_NAME = 200


def _count_flag(value: int | None, flag: str) -> None:
    if value is not None and not 1 <= value <= MAX_RANKS:
        raise BadInput(flag, f"{value}: expected a count from 1 to {MAX_RANKS}")


def _name_flag(value: str | None, flag: str) -> None:
    """A name that lands in every row (and in labels, file names): printable, one line, not blank."""
    if value is None:
        return
    if not value.strip() or len(value) > MAX_NAME or not value.isprintable():
        raise BadInput(flag, f"{value[:60]!r}: expected a printable name of 1 to {MAX_NAME} characters")


def import_results(
    items: Annotated[list[str], typer.Argument(
        help="[TOOL] FILE...: TOOL is nccl-tests | rccl-tests | osu | imb | pccl-reproducer | auto; without it "
             "(or with --auto) each file's runs are read by the importer their headers name. FILEs: nccl-tests/"
             "rccl-tests text or -J JSON (-I 1 for per-iteration samples), OSU text (any benchmark, -f), IMB-MPI1 "
             "logs, pccl-reproducer Slurm logs or CSVs.", show_default=False, metavar="[TOOL] FILE...")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Run folder to write (results.parquet/csv, "
                                                          "samples.parquet, meta.json).")],
    nranks: Annotated[int | None, typer.Option("--nranks", "-np", help="Ranks (GPUs) that ran (default: nccl-tests' "
                                                                        "'#  Rank' lines, IMB's '#processes', OSU's "
                                                                        "launcher line).")] = None,
    nnodes: Annotated[int | None, typer.Option(help="Nodes (default: distinct hosts in the output, else 1).")] = None,
    collective: Annotated[str | None, typer.Option(help="allgather | reduce_scatter | allreduce | broadcast | "
                                                        "reduce | alltoall | ... (bench/importers/kinds.py; "
                                                        "default: from '# Collective test starting: ...', the OSU "
                                                        "title or IMB's '# Benchmarking', else the file name).")]
    = None,
    impl: Annotated[str | None, typer.Option(help="Implementation name (default: xccl for nccl/rccl-tests, "
                                                  "osu-<library> for OSU, e.g. osu-cray-mpich).")] = None,
    device: Annotated[str | None, typer.Option(help="host | cuda | rocm (default: from the tool).")] = None,
    library: Annotated[str | None, typer.Option(help="Library name, e.g. 'Cray MPICH' (default: from the header: "
                                                     "NCCL/RCCL and version, OSU's MPI/NCCL/RCCL).")] = None,
    library_version: Annotated[str | None, typer.Option(help="Library version (default: parsed where "
                                                             "printed).")] = None,
    machine: Annotated[str | None, typer.Option(help="pccl-reproducer: frontier | perlmutter (default: from the "
                                                     "log; required for a CSV holding both).")] = None,
    dirs: Annotated[list[str] | None, typer.Option("--dir", help="pccl-reproducer CSV: only rows of this log "
                                                                "folder (repeatable), e.g. all_gather_2.")] = None,
    auto: Annotated[bool, typer.Option("--auto", help="Choose each run's importer by its headers and say which "
                                                      "(the default when no TOOL is named).")] = False,
) -> None:
    """Turn another tool's output into a pccl-bench run folder (same tidy table, status ok),
    with sizes converted to nccl-tests semantics, so plots and reports can show it beside
    pccl-bench runs. Only nccl-tests/rccl-tests JSON written with -I 1 -J FILE.json carries
    per-iteration samples (times_us), which `pccl-bench gate` judges; the cells of text output,
    OSU and JSON without -I have none, and the gate marks them insufficient."""
    named = items[0] if items and (items[0] in tools() or items[0] == AUTO) else None
    if named is None and len(items) > 1 and not Path(items[0]).exists() and not auto \
            and not any(sep in items[0] for sep in "/\\."):
        raise BadInput("import", f"unknown tool {items[0]!r}; expected one of {', '.join(TOOLS)} (or FILEs alone)")
    files = [Path(item) for item in (items[1:] if named else items)]
    tool = None if auto or named in (None, AUTO) else named
    if auto and named not in (None, AUTO):
        raise BadInput("--auto", f"given with the tool {named!r}: name a tool or ask for --auto, not both")
    if collective not in (None, *KINDS):
        raise BadInput("--collective", f"{collective!r}: expected one of {', '.join(KINDS)}")
    if device not in (None, "host", "cuda", "rocm"):
        raise BadInput("--device", f"{device!r}: expected host, cuda or rocm")
    _count_flag(nranks, "--nranks")
    _count_flag(nnodes, "--nnodes")
    if nranks is not None and nnodes is not None and nnodes > nranks:
        raise BadInput("--nnodes", f"{nnodes} nodes for {nranks} ranks: a node runs at least one rank")
    for value, flag in ((impl, "--impl"), (library, "--library"), (library_version, "--library-version")):
        _name_flag(value, flag)
    # before a line is parsed: where the run goes, and that every input is a file of this tool
    check_out_folder(out)
    preflight(tool, files)
    options = ImportOptions(nranks=nranks, nnodes=nnodes, collective=collective, impl=impl, device=device,
                            library=library, library_version=library_version,
                            extra={"machine": machine, "dirs": dirs} if tool in ("pccl-reproducer", None) else {})
    meta, table = import_to_folder(tool, files, options, out)
    shown: dict[str, int] = {}
    for entry in meta["imported_from"]:
        shown[entry["path"]] = shown.get(entry["path"], 0) + 1
        if shown[entry["path"]] > MAX_RUNS_SHOWN:  # a log of thousands of runs: the rest in meta.json
            continue
        where = f"{entry['path']} {entry['run']}" if entry.get("run") else entry["path"]
        if entry.get("chosen_by"):  # --auto: which importer read the run, and why
            typer.echo(f"{where}: read as {entry['read_as']}: {entry['chosen_by']}", err=True)
        if entry.get("skipped"):
            typer.echo(f"{where}: skipped, {entry['skipped']}", err=True)
        if entry.get("inferred"):  # what the headers told, so a wrong guess is seen (flags override it)
            typer.echo(f"{where}: inferred {'; '.join(entry['inferred'])}", err=True)
        if entry.get("bandwidth_check"):
            typer.echo(f"{where}: {entry['bandwidth_check']}", err=True)
    for path, runs in shown.items():
        if runs > MAX_RUNS_SHOWN:
            typer.echo(f"{path}: {runs - MAX_RUNS_SHOWN} more runs, each in meta.json imported_from (its lines, "
                       "importer and what was inferred)", err=True)
    if meta["machine"].get("name"):  # the pccl-reproducer's rows are of one machine
        shapes = ", ".join(f"{name}: {sorted(ranks for c, ranks in table.shapes if c == name)} GPUs"
                           for name in sorted({c for c, _ in table.shapes}))
        print(f"{table.cells} cells ({meta['machine']['name']}; {shapes}) -> {out}/results.parquet")
        return
    shapes = ", ".join(sorted(f"{collective} on {ranks} ranks" if ranks is not None else
                              f"{collective} on an unknown rank count" for collective, ranks in table.shapes))
    print(f"{table.cells} cells ({shapes}), {table.cells_with_samples} with per-iteration samples "
          f"-> {out}/results.parquet")
