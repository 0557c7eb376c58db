"""Names from data are data: text from result tables, logs and suites made safe for where it is shown.

A collective, implementation or error string in a result table may hold anything a file can. On a
terminal that is Rich markup (``[/nope]`` crashes a print) and escape sequences (ANSI, OSC); in JUnit
XML, characters XML 1.0 forbids; in Markdown, raw HTML that a viewer would run.
"""

from __future__ import annotations

import html
import re

from rich.markup import escape as _markup_escape

#: characters XML 1.0 allows (https://www.w3.org/TR/xml/#charsets); everything else is dropped
_XML_ILLEGAL = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def printable(value: object) -> str:
    """``value`` as one line of printable text: control and escape characters shown as ``\\xNN``."""
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in str(value))


def console_text(value: object) -> str:
    """``value`` safe inside a Rich markup string: printable, and its brackets escaped."""
    return _markup_escape(printable(value))


def xml_text(value: object) -> str:
    """``value`` with the characters XML 1.0 cannot hold removed (escaping is the writer's job)."""
    return _XML_ILLEGAL.sub("", str(value))


def markdown_text(value: object) -> str:
    """``value`` safe in a Markdown table cell: printable, HTML escaped, pipes escaped."""
    return html.escape(printable(value)).replace("|", "\\|")
