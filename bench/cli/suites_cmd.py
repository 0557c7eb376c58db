"""``pccl-bench suites list|validate``."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from bench.errors import BadInput
from bench.plan.cells import expand
from bench.plan.site import load_site
from bench.plan.suite_files import default_suites_dir, load_suite, resolve_suite_path

app = typer.Typer(help="List and validate suite files.", no_args_is_help=True)


@app.command("list")
def list_suites() -> None:
    """The suites in suites/ with their cell counts."""
    folder = default_suites_dir()
    table = Table("suite", "cells", "ranks", "description", title=f"suites in {folder}")
    for path in sorted(folder.glob("*.yaml")):
        try:
            suite, _ = load_suite(path)
        except BadInput as error:
            table.add_row(path.stem, "-", "-", f"[red]invalid: {error}[/red]")
            continue
        cells = sum(len(launch.cells) for launch in expand(suite))
        table.add_row(path.stem, str(cells), ",".join(map(str, suite.ranks)), suite.description)
    Console().print(table)


@app.command("validate")
def validate(
    suites: Annotated[list[str], typer.Argument(help="Suite files or names.")],
) -> None:
    """Check suites (and the site profile each names) against the schema; the first error of each is one
    line, exit 2."""
    failed = None
    for name in suites:
        path = resolve_suite_path(name)
        try:
            suite, _ = load_suite(path)
            # the site profile it names, against its own schema (the launches it splits are counted)
            site = load_site(suite.site, f"{path}: site") if suite.site else None
        except BadInput as error:
            failed = failed or error
            typer.echo(f"pccl-bench: error: {error}", err=True)
            continue
        launches = site.split(expand(suite)) if site else expand(suite)
        cells = sum(len(launch.cells) for launch in launches)
        with_site = f", site {site.name}" if site else ""
        typer.echo(f"{path}: ok ({cells} cells in {len(launches)} launches{with_site})")
    if failed:
        raise typer.Exit(2)
