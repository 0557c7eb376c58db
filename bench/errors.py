"""Exit codes and the user-facing error type (one line at the CLI edge, no traceback)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_CHECK_FAILED = 1  # a regression, a collective returned wrong data, or a GPU suite reached no GPU
EXIT_BAD_INPUT = 2  # suite, flags or files
EXIT_CELLS_FAILED = 3  # some cells failed or timed out (table still written)
EXIT_INTERRUPTED = 130  # table of the finished cells still written

EXIT_CODES_HELP = (
    "Exit codes: 0 success; 1 a check failed (wrong data, a regression, or a GPU suite ran no cell on a GPU); "
    "2 bad input (suite, flags, files, a fatal pre-flight); 3 some cells failed or timed out (table still written); "
    "130 interrupted (table of the finished cells still written)."
)


class BadInput(Exception):
    """Wrong input from the user. ``where`` names the file and/or field."""

    def __init__(self, where: str, message: str) -> None:
        text = f"{where}: {message}" if where else message
        # One line whatever the input held: a key or value with a line break is shown escaped.
        super().__init__("".join(char if char.isprintable() else repr(char)[1:-1] for char in text))
