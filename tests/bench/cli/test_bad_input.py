"""Bad input through the CLI: exit code 2, one line on stderr naming the
file or field and the bad value, no traceback, and no result files written.

The corpus runs ``main()`` in this process (tests/hostile.py run_in_process: the same exit code
and streams, without a Python start per case); a sample of it, and everything around an existing
run, goes through the real command in a process of its own.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from bad_suites import GOOD, assert_bad_command, suite_text
from conftest import describe, run_cli
from hostile import run_in_process


@dataclass
class Case:
    """One bad invocation. ``argv`` gets (suite path, out folder, tmp_path); ``{suite}``/``{out}``
    in ``needles`` are replaced by those paths."""

    id: str
    argv: Callable[[Path, Path, Path], list[str]]
    needles: list[str]
    suite: str | None = field(default_factory=suite_text)


def sweep(*extra: str) -> Callable[[Path, Path, Path], list[str]]:
    return lambda suite, out, tmp: ["run", "sweep", str(suite), "--out", str(out), *extra]


def point(*extra: str) -> Callable[[Path, Path, Path], list[str]]:
    return lambda suite, out, tmp: ["run", "point", "--out", str(out), *extra]


CASES = [
    Case(
        "malformed-yaml",
        sweep(),
        ["{suite}", "malformed YAML"],
        suite="name: tiny\ncollectives: [allgather\nranks: [2]\n",
    ),
    Case("tab-indented-yaml", sweep(), ["{suite}", "malformed YAML"], suite="name: tiny\n\tranks: [2]\n"),
    Case("unknown-top-level-key", sweep(), ["{suite}", "bogus", "unknown field"], suite=suite_text(bogus=1)),
    Case(
        "unknown-nested-key",
        sweep(),
        ["{suite}", "timing.itrs", "unknown field"],
        suite=suite_text(timing={"itrs": 3}),
    ),
    Case(
        "unknown-implementation",
        sweep(),
        ["{suite}", "implementations.0", "nccl2"],
        suite=suite_text(implementations=["nccl2"]),
    ),
    Case(
        "unknown-algorithm",
        sweep(),
        ["{suite}", "implementations.0.algorithms.0", "bruck9"],
        suite=suite_text(implementations=[{"impl": "pccl-flat", "algorithms": ["bruck9"]}]),
    ),
    Case(
        "size-in-parsecs",
        sweep(),
        ["{suite}", "sizes.min", "4 parsecs"],
        suite=suite_text(sizes={"min": "4 parsecs", "max": "1MiB"}),
    ),
    Case(
        "fractional-size",
        sweep(),
        ["{suite}", "sizes.max", "1.5K"],
        suite=suite_text(sizes={"min": "8", "max": "1.5K"}),
    ),
    Case(
        "sizes-min-above-max",
        sweep(),
        ["{suite}", "sizes", "min", "1024", "64"],
        suite=suite_text(sizes={"min": "1KiB", "max": "64B"}),
    ),
    Case("zero-ranks", sweep(), ["{suite}", "ranks.0", "got 0"], suite=suite_text(ranks=[0])),
    Case("negative-ranks", sweep(), ["{suite}", "ranks.1", "-4"], suite=suite_text(ranks=[2, -4])),
    Case(
        "ranks-not-divisible",
        sweep(),
        ["{suite}", "ranks.1", "6", "ranks_per_node=4"],
        suite=suite_text(ranks=[4, 6], ranks_per_node=4),
    ),
    Case("wrong-dtype", sweep(), ["{suite}", "dtype", "bfloat16"], suite=suite_text(dtype="bfloat16")),
    Case("wrong-op", sweep(), ["{suite}", "op", "avg"], suite=suite_text(op="avg")),
    Case(
        "min-iters-above-iters",
        sweep(),
        ["{suite}", "timing.min_iters", "9"],
        suite=suite_text(timing={"iters": 3, "min_iters": 9}),
    ),
    Case(
        "five-arms-in-turns",
        sweep(),
        ["{suite}", "arms", "a, b, c, d, e share a launch", "at most 4"],
        suite=suite_text(arms=[{"name": name} for name in "abcde"]),
    ),
    Case("suite-is-a-list", sweep(), ["{suite}", "mapping", "list"], suite="- allgather\n- allreduce\n"),
    Case("suite-is-empty", sweep(), ["{suite}", "mapping"], suite=""),
    Case(
        "missing-required-field",
        sweep(),
        ["{suite}", "sizes", "missing"],
        suite=yaml.safe_dump({k: v for k, v in GOOD.items() if k != "sizes"}),
    ),
    Case(
        "missing-suite-file",
        lambda suite, out, tmp: ["run", "sweep", str(tmp / "nope.yaml"), "--out", str(out)],
        ["nope.yaml", "not found"],
        suite=None,
    ),
    Case(
        "suite-is-a-folder",
        lambda suite, out, tmp: ["run", "sweep", str(tmp), "--out", str(out)],
        ["{tmp}"],
        suite=None,
    ),
    Case(
        "out-under-a-regular-file",
        lambda suite, out, tmp: ["run", "sweep", str(suite), "--out", str(suite / "run")],
        ["--out", "{suite}/run"],
    ),
    Case("bad-set-syntax", sweep("--set", "timing.iters"), ["--set", "timing.iters"]),
    Case("bad-set-yaml", sweep("--set", "ranks=[2"), ["--set", "ranks", "[2"]),
    Case("set-into-a-scalar", sweep("--set", "name.first=x"), ["--set", "name.first"]),
    Case("set-invalid-value", sweep("--set", "timing.iters=0"), ["timing.iters", "got 0"]),
    Case("set-unknown-field", sweep("--set", "colectives=[allgather]"), ["colectives", "unknown field"]),
    Case("unknown-launcher", sweep("--launcher", "slurmx"), ["--launcher", "slurmx"]),
    Case(
        "resume-not-a-run",
        lambda suite, out, tmp: ["run", "sweep", "--resume", str(tmp / "elsewhere")],
        ["--resume", "{tmp}/elsewhere"],
    ),
    Case(
        "dry-run-of-a-bad-suite",
        sweep("--dry-run"),
        ["{suite}", "dtype", "bfloat16"],
        suite=suite_text(dtype="bfloat16"),
    ),
    Case("point-size-in-parsecs", point("-b", "4 parsecs"), ["sizes.min", "4 parsecs"]),
    Case("point-zero-ranks", point("-np", "0"), ["ranks", "got 0"]),
    Case("point-negative-ranks", point("-np", "-3"), ["ranks", "-3"]),
    Case("point-unknown-collective", point("-C", "alltoall"), ["collectives", "alltoall"]),
    Case("point-unknown-impl", point("-i", "nccl2"), ["implementations", "nccl2"]),
    Case("point-unknown-algorithm", point("-i", "pccl-flat", "-a", "bruck9"), ["algorithms", "bruck9"]),
    Case("point-wrong-dtype", point("-d", "bfloat16"), ["dtype", "bfloat16"]),
    Case("point-factor-one", point("-f", "1"), ["sizes.factor", "1"]),
    Case("point-min-above-max", point("-b", "1M", "-e", "1K"), ["sizes", "min", "max"]),
    Case(
        "point-ranks-not-divisible",
        point("-np", "3", "--ranks-per-node", "2"),
        ["ranks", "3", "ranks_per_node"],
    ),
    Case("point-unknown-launcher", point("--launcher", "pbs"), ["--launcher", "pbs"]),
    # Reading: any bytes get the one line (the file, where, what), never a traceback or a hang.
    Case("non-utf8-bytes", sweep(), ["{suite}:", "not UTF-8", "byte 0xe9"], suite=suite_text() + "# caf\udce9\udcff\n"),
    Case("nul-character", sweep(), ["{suite}", "U+0000"], suite=suite_text() + "description: a\0b\n"),
    Case(
        "alias-expansion-bomb",
        sweep(),
        ["{suite}", "aliases expand", "20000"],
        suite=suite_text() + "x0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
            f"x{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 10)),
    ),
    Case("deep-nesting", sweep(), ["{suite}", "description.0.0", "deeper than 32"],
         suite=suite_text() + "description: " + "[" * 3000 + "]" * 3000 + "\n"),
    Case("oversized-file", sweep(), ["{suite}", "bytes is larger than"],
         suite=suite_text() + "".join(f"# {'x' * 70}\n" for _ in range(4000))),
    Case("duplicate-top-level-key", sweep(), ["{suite}", "ranks", "given twice"],
         suite=suite_text() + "ranks: [4]\n"),
    Case("duplicate-nested-key", sweep(), ["{suite}", "timing.iters", "'iters' is given twice"],
         suite=suite_text(timing=None).replace("timing: null", "timing:\n  iters: 3\n  iters: 4")),
    Case("duplicate-key-in-set", sweep("--set", "timing={iters: 3, iters: 4}"), ["--set timing", "iters", "twice"]),
    # The environment: what execve would refuse is refused before a folder exists.
    Case("env-name-with-equals", sweep(), ["{suite}", "env.A=B", "'='", "'A=B'"], suite=suite_text(env={"A=B": "1"})),
    Case("env-value-with-nul", sweep(), ["{suite}", "env.A", "NUL", "'x\\x00y'"], suite=suite_text(env={"A": "x\0y"})),
    Case("env-empty-name", sweep(), ["{suite}", "env.", "needs a name"], suite=suite_text(env={"": "1"})),
    Case("env-value-too-long", sweep(), ["{suite}", "env.A", "at most"],
         suite=suite_text(env={"A": "x" * 140_000})),
    Case("env-mapping-value", sweep(), ["{suite}", "env.A", "{'b': 1}"], suite=suite_text(env={"A": {"b": 1}})),
    Case("env-set-with-nul", sweep("--set", 'env.A="x\\0y"'), ["env.A", "NUL"]),
    Case("set-unknown-mapping", sweep("--set", "bogus.key=1"), ["bogus", "unknown field", "{'key': 1}"]),
    # Memory: sizes beyond what this host has are refused before launch, naming both figures.
    Case("size-beyond-memory", sweep(), ["{suite}", "sizes.max: 1024 GiB", "per rank", "available"],
         suite=suite_text(sizes={"min": "8B", "max": "1024GiB"})),
    Case("point-size-beyond-memory", point("-e", "1024G"), ["sizes.max: 1024 GiB", "available"]),
]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input(case: Case, tmp_path: Path):
    suite = tmp_path / "suite.yaml"
    if case.suite is not None:
        # Lone surrogates stand for raw bytes (the non-UTF-8 case).
        suite.write_bytes(case.suite.encode("utf-8", "surrogateescape"))
    out = tmp_path / "out"
    argv = case.argv(suite, out, tmp_path)
    needles = [
        n.replace("{suite}", str(suite)).replace("{out}", str(out)).replace("{tmp}", str(tmp_path))
        for n in case.needles
    ]
    assert_bad_command(in_process(*argv), out, needles)


#: the corpus cases also run through the real command (a process of its own, as a user runs it)
REAL_PROCESS = ("malformed-yaml", "unknown-implementation", "size-in-parsecs")


@pytest.mark.parametrize("case", [case for case in CASES if case.id in REAL_PROCESS], ids=list(REAL_PROCESS))
def test_bad_input_through_the_real_command(case: Case, tmp_path: Path):
    suite = tmp_path / "suite.yaml"
    suite.write_text(case.suite)
    out = tmp_path / "out"
    needles = [n.replace("{suite}", str(suite)).replace("{out}", str(out)) for n in case.needles]
    assert_bad_command(run_cli(*case.argv(suite, out, tmp_path), timeout=60), out, needles)


def in_process(*argv: object) -> subprocess.CompletedProcess:
    """run_in_process as the CompletedProcess the assertions here read."""
    code, stdout, stderr = run_in_process(*argv)
    return subprocess.CompletedProcess([str(arg) for arg in argv], code, stdout, stderr)


def test_corpus_is_big_enough():
    assert len(CASES) >= 14


def test_out_folder_that_already_holds_a_run_is_refused(tmp_path: Path):
    suite = tmp_path / "suite.yaml"
    suite.write_text(suite_text())
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.parquet").write_bytes(b"an earlier run")
    result = run_cli("run", "sweep", suite, "--out", out, timeout=60)
    everything = result.stdout + result.stderr
    assert "Traceback" not in everything, describe(result)
    assert result.returncode == 2, describe(result)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pccl-bench: error:"), describe(result)
    assert "--out" in lines[0] and str(out) in lines[0] and "already holds a run" in lines[0]
    assert (out / "results.parquet").read_bytes() == b"an earlier run"
    assert sorted(p.name for p in out.iterdir()) == ["results.parquet"], "nothing else may be written"


# ---------------------------------------------------------------- suites validate

VALIDATE_CASES = [
    ("malformed-yaml", "name: [a\n", ["malformed YAML"]),
    ("unknown-key", suite_text(bogus=1), ["bogus", "unknown field"]),
    ("unknown-implementation", suite_text(implementations=["nccl2"]), ["nccl2"]),
    ("size-in-parsecs", suite_text(sizes={"min": "4 parsecs", "max": 64}), ["sizes.min", "4 parsecs"]),
    ("list-not-mapping", "- a\n", ["mapping", "list"]),
]


@pytest.mark.parametrize(("text", "needles"), [c[1:] for c in VALIDATE_CASES], ids=[c[0] for c in VALIDATE_CASES])
def test_suites_validate_reports_one_line(tmp_path: Path, text: str, needles: list[str]):
    path = tmp_path / "suite.yaml"
    path.write_text(text)
    result = in_process("suites", "validate", path)
    assert "Traceback" not in result.stdout + result.stderr, describe(result)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pccl-bench: error:"), describe(result)
    assert str(path) in lines[0]
    for needle in needles:
        assert needle in lines[0], describe(result)


@pytest.mark.parametrize(("text", "needles"), [c[1:] for c in VALIDATE_CASES], ids=[c[0] for c in VALIDATE_CASES])
def test_suites_validate_bad_suite_exits_2(tmp_path: Path, text: str, needles: list[str]):
    path = tmp_path / "suite.yaml"
    path.write_text(text)
    result = in_process("suites", "validate", path)
    assert result.returncode == 2, describe(result)


def test_suites_validate_one_bad_among_good_exits_2(tmp_path: Path, repo_root: Path):
    path = tmp_path / "bad.yaml"
    path.write_text(suite_text(ranks=[0]))
    result = in_process("suites", "validate", repo_root / "suites" / "smoke.yaml", path)
    assert ": ok (" in result.stdout
    assert result.returncode == 2, describe(result)


def test_suites_validate_missing_file(tmp_path: Path):
    result = in_process("suites", "validate", tmp_path / "nope.yaml")
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "nope.yaml" in lines[0] and "not found" in lines[0], describe(result)


# ---------------------------------------------------------------- command-line usage errors


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "sweep", "--bogus"],
        ["run", "point", "-np", "abc"],
        ["run", "point", "-n", "many"],
        ["run", "sweepx"],
    ],
    ids=["unknown-option", "non-integer-ranks", "non-integer-iters", "unknown-command"],
)
def test_usage_errors_are_one_line_exit_2(tmp_path: Path, argv: list[str]):
    result = run_cli(*argv, timeout=60) if argv == ["run", "sweep", "--bogus"] else in_process(*argv)
    assert "Traceback" not in result.stdout + result.stderr, describe(result)
    assert result.returncode == 2, describe(result)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pccl-bench: error:"), describe(result)


# ---------------------------------------------------------------- an existing run survives bad input


def _fingerprint(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """One real, tiny 2-rank sweep (about a second)."""
    base = tmp_path_factory.mktemp("finished")
    suite = base / "suite.yaml"
    suite.write_text(suite_text(collectives=["allgather"], sizes={"min": "8B", "max": "16B"}))
    out = base / "run"
    result = run_cli("run", "sweep", suite, "--out", out, timeout=120)
    assert result.returncode == 0, describe(result)
    assert (out / "results.parquet").exists()
    return out


BAD_AFTER_RUN = {
    "same-suite-again": lambda suite, out: ["run", "sweep", str(suite), "--out", str(out)],
    "bad-suite": lambda suite, out: ["run", "sweep", str(suite.with_name("bad.yaml")), "--out", str(out)],
    "bad-set": lambda suite, out: ["run", "sweep", str(suite), "--out", str(out), "--set", "ranks=[0]"],
    "bad-launcher": lambda suite, out: ["run", "sweep", str(suite), "--out", str(out), "--launcher", "x"],
    "missing-suite": lambda suite, out: [
        "run",
        "sweep",
        str(suite.with_name("nope.yaml")),
        "--out",
        str(out),
    ],
    "bad-point": lambda suite, out: ["run", "point", "--out", str(out), "-b", "4 parsecs"],
}


@pytest.mark.mpi
@pytest.mark.parametrize("name", list(BAD_AFTER_RUN))
def test_bad_input_does_not_touch_an_existing_run(finished_run: Path, tmp_path: Path, name: str):
    out = tmp_path / "run"
    shutil.copytree(finished_run, out)
    suite = tmp_path / "suite.yaml"
    suite.write_text(suite_text(collectives=["allgather"], sizes={"min": "8B", "max": "16B"}))
    (tmp_path / "bad.yaml").write_text(suite_text(dtype="bfloat16"))
    before = _fingerprint(out)
    result = run_cli(*BAD_AFTER_RUN[name](suite, out), timeout=60)
    assert result.returncode == 2, describe(result)
    assert "Traceback" not in result.stdout + result.stderr, describe(result)
    assert len(result.stderr.splitlines()) == 1, describe(result)
    assert _fingerprint(out) == before, "a refused invocation changed the existing run folder"


@pytest.mark.mpi
def test_point_refuses_an_out_folder_that_holds_a_run(finished_run: Path, tmp_path: Path):
    out = tmp_path / "run"
    shutil.copytree(finished_run, out)
    before = _fingerprint(out)
    result = run_cli("run", "point", "--out", out, "-b", "8", "-e", "8", "-n", "1", "-w", "0", timeout=120)
    assert _fingerprint(out) == before, "run point rewrote an existing run"
    assert result.returncode == 2, describe(result)
