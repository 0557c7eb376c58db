"""Helpers of the hostile-input tests: the CLI in this process, the one-line error contract, and a
small real run folder to mutate (12 cells of the committed ci baseline)."""

from __future__ import annotations

import contextlib
import io
import shutil
import traceback
from pathlib import Path

import pandas as pd
from conftest import ROOT

from bench.cli import main

SOURCE = ROOT / "results" / "baselines" / "ci" / "run-1"


def run_in_process(*argv: object) -> tuple[int, str, str]:
    """``pccl-bench argv...`` in this process: (exit code, stdout, stderr); a bug's exception is exit 1
    with its traceback on stderr (as the installed command would show it)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    code = None
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            main([str(arg) for arg in argv])
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        except Exception:
            traceback.print_exc()
            code = 1
    assert code is not None, "main() returned without an exit code"
    return code, stdout.getvalue(), stderr.getvalue()


def assert_bad_input(result: tuple[int, str, str], *names: str) -> str:
    """Exit 2, one line on stderr that starts as the CLI's errors do and names each of ``names``."""
    code, stdout, stderr = result
    shown = f"exit {code}\nstdout: {stdout[-1500:]}\nstderr: {stderr[-1500:]}"
    assert code == 2, shown
    assert "Traceback" not in stdout + stderr, shown
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pccl-bench: error: "), shown
    for name in names:
        assert name in lines[0], f"{name!r} not named\n{shown}"
    return lines[0]


def small_run(folder: Path, cells: int = 12) -> Path:
    """A copy of the first ``cells`` cells (both repeats) of the committed ci baseline's first run."""
    folder.mkdir(parents=True)
    results = pd.read_parquet(SOURCE / "results.parquet")
    keys = results.drop_duplicates(["collective", "impl", "algorithm", "count_per_rank"]).head(cells)
    kept = results.merge(keys[["collective", "impl", "algorithm", "count_per_rank"]])
    samples = pd.read_parquet(SOURCE / "samples.parquet")
    kept.to_parquet(folder / "results.parquet", index=False)
    samples[samples["cell_key"].isin(kept["cell_key"])].to_parquet(folder / "samples.parquet", index=False)
    shutil.copy(SOURCE / "meta.json", folder / "meta.json")
    return folder


def files_under(folder: Path) -> set[Path]:
    return {path for path in folder.rglob("*")}


def mutate_bytes(draw, data: bytes, specials: list[bytes], edits: int, longest_delete: int,
                 most_copies: int = 1) -> bytes:
    """``data`` with 1..``edits`` edits drawn by hypothesis: a piece inserted or written over (one of
    ``specials`` or random bytes), up to ``longest_delete`` bytes deleted, or a line repeated (up to
    ``most_copies`` times: a repeated key in most places)."""
    from hypothesis import strategies as st

    data = bytearray(data)
    for _ in range(draw(st.integers(1, edits))):
        position = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["insert", "delete", "replace", "duplicate-line"]))
        piece = draw(st.one_of(st.sampled_from(specials), st.binary(min_size=1, max_size=4)))
        if kind == "insert":
            data[position:position] = piece
        elif kind == "delete":
            del data[position: position + draw(st.integers(1, longest_delete))]
        elif kind == "replace":
            data[position: position + len(piece)] = piece
        else:
            start = data.rfind(b"\n", 0, position) + 1
            end = data.find(b"\n", position)
            end = len(data) if end < 0 else end + 1
            data[end:end] = data[start:end] * draw(st.integers(1, most_copies))
    return bytes(data)
