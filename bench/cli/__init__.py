"""pccl-bench command line: one module per command, assembled here."""

from __future__ import annotations

import sys

import typer

from bench.cli import (
    ab_cmd,
    baseline_cmd,
    env_cmd,
    gate_cmd,
    import_cmd,
    lab_cmd,
    plot_cmd,
    report_cmd,
    run_cmd,
    suites_cmd,
    tune_cmd,
)
from bench.cli.model import commands as model_cmd
from bench.errors import EXIT_BAD_INPUT, EXIT_CODES_HELP, EXIT_INTERRUPTED, BadInput

app = typer.Typer(
    name="pccl-bench",
    help=(
        "Benchmark collective communication: PCCL-style hierarchical collectives against the MPI "
        "library's own and NCCL/RCCL, across rank counts and message sizes, into tidy tables.\n\n"
        + EXIT_CODES_HELP
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
app.add_typer(run_cmd.app, name="run")
app.add_typer(suites_cmd.app, name="suites")
app.add_typer(model_cmd.app, name="model")
app.command("env")(env_cmd.env)
app.command("tune")(tune_cmd.tune)
app.command("gate", epilog=gate_cmd.GATE_EXIT_HELP)(gate_cmd.gate_command)
app.command("ab", epilog=ab_cmd.AB_EXIT_HELP)(ab_cmd.ab_command)
app.command("plot")(plot_cmd.plot)
app.command("report")(report_cmd.report)
app.command("import")(import_cmd.import_results)
app.add_typer(baseline_cmd.app, name="baseline")
app.add_typer(lab_cmd.app, name="lab")


def main(argv: list[str] | None = None) -> None:
    """Entry point: user errors become one line on stderr and exit code 2."""
    try:
        # Without standalone mode, typer returns the code of typer.Exit instead of exiting.
        code = app(args=argv, standalone_mode=False)
    except BadInput as error:
        print(f"pccl-bench: error: {error}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    except (typer.Abort, KeyboardInterrupt):
        sys.exit(EXIT_INTERRUPTED)
    except Exception as error:
        # Usage errors of the click that typer vendors: one line, exit 2. Bugs keep their traceback.
        if hasattr(error, "format_message") and hasattr(error, "exit_code"):
            print(f"pccl-bench: error: {error.format_message()}", file=sys.stderr)
            sys.exit(EXIT_BAD_INPUT)
        raise
    sys.exit(code if isinstance(code, int) else 0)
