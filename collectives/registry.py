"""Looking names up in the library's registries (collectives, transports, implementations)."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def lookup(table: dict[str, T], name: str, what: str) -> T:
    """``table[name]``, or a ValueError naming what was asked for and what is known."""
    try:
        return table[name]
    except KeyError:
        raise ValueError(f"unknown {what} {name!r} (known: {', '.join(table)})") from None
