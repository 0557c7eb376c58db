"""Two installs of the project, measured round by round in alternating order (ABBA...).

Each install is NAME=REPO, a checkout with its own ``.venv``; drift of a shared machine lands on
both because every round runs both, and the order flips every round.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

Result = TypeVar("Result")


def install_parser(doc: str, rounds: int) -> argparse.ArgumentParser:
    """The arguments every install comparison takes: --install twice, --rounds."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--install", action="append", required=True, help="NAME=REPO (twice)")
    parser.add_argument("--rounds", type=int, default=rounds)
    return parser


def two_installs(items: list[str]) -> list[tuple[str, Path]]:
    """``--install NAME=REPO`` given exactly twice, as (name, repo)."""
    # resolved: ``after=.`` names this checkout (Path(".").name is empty)
    installs = [(name, Path(repo).resolve()) for name, _, repo in (item.partition("=") for item in items) if repo]
    if len(installs) != 2 or not all(name and repo.name for name, repo in installs):
        raise SystemExit("--install NAME=REPO exactly twice")
    return installs


def alternating_rounds(installs: list[tuple[str, Path]], rounds: int,
                       run_once: Callable[[Path], Result]) -> dict[str, list[Result]]:
    """``run_once(repo)`` of every install in every round, the order flipped each round."""
    runs: dict[str, list[Result]] = {name: [] for name, _ in installs}
    for round_index in range(rounds):
        for name, repo in installs if round_index % 2 == 0 else installs[::-1]:
            runs[name].append(run_once(repo))
            print(f"round {round_index + 1}/{rounds} {name} done", file=sys.stderr, flush=True)
    return runs
