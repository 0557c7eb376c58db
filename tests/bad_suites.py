"""Bad suites and the refusal of a bad command (tests/bench/cli/test_bad_input.py and the Slurm corpus in
tests/bench/plan/): a valid suite changed one field at a time, and what a refused command must look like."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path

import yaml
from conftest import TINY_SUITE, describe

GOOD = {**TINY_SUITE, "timeout_s": 60}
RESULT_FILES = ("results.parquet", "results.csv", "samples.parquet", "meta.json")


def suite_text(**changes) -> str:
    raw = copy.deepcopy(GOOD)
    raw.update(changes)
    return yaml.safe_dump(raw, sort_keys=False)


def assert_bad_command(result: subprocess.CompletedProcess, out: Path, needles: list[str],
                       out_existed: bool = False) -> None:
    """A command refused as bad input: exit 2, one line naming every needle, no traceback, no result files
    (and no ``out`` folder unless it existed before)."""
    everything = result.stdout + result.stderr
    assert "Traceback" not in everything, describe(result)
    assert result.returncode == 2, describe(result)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, f"stderr must be exactly one line\n{describe(result)}"
    assert lines[0].startswith("pccl-bench: error:"), describe(result)
    for needle in needles:
        assert needle in lines[0], f"{needle!r} missing from the error line\n{describe(result)}"
    for name in RESULT_FILES:
        assert not (out / name).exists(), f"bad input wrote {name}"
    assert out_existed or not out.exists(), f"bad input created {out}"
