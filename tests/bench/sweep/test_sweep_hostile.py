"""Hostile input to ``run sweep``/``run point``/``baseline update``: run folders that cannot be or must
not be written (a file, under a file, an over-long name, a line break, results/baselines/), values
that would start a command in a generated shell script, a resumed run named with another suite,
part files with lines that are no rows, flags that are negative or zero, and rank counts that no
host can start. Each is exit 2 with one line on stderr, no traceback, before any work, and nothing
written or changed.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from conftest import describe, run_cli
from hostile import assert_bad_input, run_in_process

from bench.driver import memory_check as memory
from bench.driver import slurm
from bench.errors import BadInput
from bench.plan.cells import expand
from bench.plan.hosts import HostPlan
from bench.plan.slurm_options import Slurm
from bench.plan.suite import parse_suite
from bench.rank.parts import TORN_MARK, append_rows, read_parts

SUITE = {
    "name": "tiny",
    "collectives": ["allreduce"],
    "implementations": ["mpi"],
    "ranks": [2],
    "sizes": {"min": "8B", "max": "16B"},
    "timing": {"warmup": 1, "iters": 3, "min_iters": 1, "budget_s": 0},
    "timeout_s": 60,
}




def refused(*argv: object, needles: tuple[str, ...] = ()) -> str:
    """``argv`` is bad input: exit 2, one line on stderr naming ``needles``, no traceback, in < 10 s."""
    started = time.monotonic()
    code, stdout, stderr = run_in_process(*map(str, argv))
    line = assert_bad_input((code, stdout, stderr), *needles)
    assert time.monotonic() - started < 10, f"{argv}: {line}"
    return line


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every path under ``folder`` and the bytes of its files (to show nothing changed)."""
    return {str(path.relative_to(folder)): path.read_bytes() if path.is_file() else None
            for path in sorted(folder.rglob("*"))}


@pytest.fixture
def suite_file(tmp_path: Path) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(SUITE, sort_keys=False))
    return path


@pytest.fixture
def in_checkout(tmp_path: Path, monkeypatch) -> Path:
    """A working directory with a committed baseline in results/baselines/ci."""
    baseline = tmp_path / "work" / "results" / "baselines" / "ci" / "run-1"
    baseline.mkdir(parents=True)
    (baseline / "results.parquet").write_bytes(b"committed")
    monkeypatch.chdir(tmp_path / "work")
    return tmp_path / "work"


# ---------------------------------------------------------------- run folders


@pytest.mark.parametrize("out", ["results/baselines/ci", "results/baselines/new", "results/baselines"])
@pytest.mark.parametrize("extra", [[], ["--dry-run"], ["--launcher", "sbatch", "--dry-run"]])
def test_out_inside_the_baselines_is_refused(in_checkout: Path, suite_file: Path, out: str, extra: list[str]):
    before = snapshot(in_checkout)
    refused("run", "sweep", suite_file, "--out", out, *extra, needles=("--out", out, "results/baselines"))
    refused("run", "point", "--out", out, *extra, needles=("--out", out))
    assert snapshot(in_checkout) == before


def test_the_checkouts_baselines_are_refused_from_another_folder(tmp_path: Path, suite_file: Path, monkeypatch):
    """From a scratch folder (a cluster's), the committed baselines of the checkout the package runs from
    are still refused, not only ./results/baselines."""
    from bench.files import PACKAGE_ROOT

    monkeypatch.chdir(tmp_path)
    committed = PACKAGE_ROOT / "results" / "baselines" / "ci"
    refused("run", "sweep", suite_file, "--out", committed, "--dry-run", needles=("--out", "results/baselines"))


def test_out_inside_the_baselines_through_a_link_is_refused(in_checkout: Path, suite_file: Path):
    (in_checkout / "alias").symlink_to(in_checkout / "results" / "baselines")
    before = snapshot(in_checkout / "results")
    refused("run", "sweep", suite_file, "--out", "alias/ci", needles=("--out", "alias/ci", "baselines"))
    assert snapshot(in_checkout / "results") == before


def test_resume_inside_the_baselines_is_refused(in_checkout: Path):
    folder = in_checkout / "results" / "baselines" / "ci" / "run-1"
    (folder / "suite.yaml").write_text(yaml.safe_dump(SUITE))
    before = snapshot(in_checkout)
    refused("run", "sweep", "--resume", folder, needles=("--resume", "baselines"))
    assert snapshot(in_checkout) == before


#: (a run folder that is a file or under one was refused only once the sweep tried to make it; now
#: also by a dry run, before the suite is read)
FOLDER_CASES = [(case, command) for case in ("file", "under-file", "long-name", "line-break", "control-char")
                for command in ("sweep", "sweep-dry", "sbatch-dry", "point")
                if not (case in ("file", "under-file") and command in ("sweep", "point"))]


@pytest.mark.parametrize(("case", "command"), FOLDER_CASES)
def test_out_that_cannot_be_a_folder_is_refused(tmp_path: Path, suite_file: Path, case: str, command: str):
    a_file = tmp_path / "a-file"
    a_file.write_text("keep me")
    out = {"file": a_file, "under-file": a_file / "run", "long-name": tmp_path / ("x" * 256),
           "line-break": tmp_path / "sb\ntouch PWNED #", "control-char": tmp_path / "run\x1b[2J"}[case]
    argv = {"sweep": ["run", "sweep", suite_file], "sweep-dry": ["run", "sweep", suite_file, "--dry-run"],
            "sbatch-dry": ["run", "sweep", suite_file, "--launcher", "sbatch", "--dry-run"],
            "point": ["run", "point"]}[command]
    before = snapshot(tmp_path)
    refused(*argv, "--out", out, needles=("--out",))
    assert snapshot(tmp_path) == before
    assert a_file.read_text() == "keep me"


def test_out_and_resume_together_are_refused(tmp_path: Path, suite_file: Path):
    refused("run", "sweep", suite_file, "--resume", tmp_path, "--out", tmp_path / "other",
            needles=("--out", "--resume"))
    assert not (tmp_path / "other").exists()


# ---------------------------------------------------------------- generated shell scripts


def run_script_safely(text: str, folder: Path) -> list[str]:
    """Run a generated batch script under bash with ``exec`` shadowed by a function that writes its
    argv (one per line) instead of starting anything; its argv. A command that a value started
    would run for real (and make the PWNED file the tests look for)."""
    script = folder / "script.sh"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True, timeout=10).returncode == 0, text
    argv_file = folder / "argv.txt"
    shadow = f'exec() {{ printf "%s\\0" "$@" > {shlex.quote(str(argv_file))}; }}; . {shlex.quote(str(script))}'
    done = subprocess.run(["bash", "-c", shadow], capture_output=True, text=True, timeout=10, cwd=folder,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    return argv_file.read_text().split("\0")[:-1]


HOSTILE_NAMES = ["$(touch PWNED)", "`touch PWNED`", "a;touch PWNED", "it's; touch PWNED #", "a b|touch PWNED",
                 "&& touch PWNED", "x\\'; touch PWNED; echo '"]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_batch_script_quotes_every_value(tmp_path: Path, monkeypatch, name: str):
    """The run folder, the working directory and the run id (a resumed run's run.json: any text, here
    with a line break) with shell syntax: the script's one command is the sweep on exactly that
    folder, nothing else runs."""
    work = tmp_path / f"cwd {name}"
    work.mkdir()
    monkeypatch.chdir(work)
    folder = tmp_path / f"run {name}"
    suite = parse_suite({**SUITE, "slurm": {"sbatch_args": ["--comment=two; words"]}}, "test")
    launches = expand(suite, HostPlan(source="sbatch", launcher_nodes=True))
    text = slurm.batch_script(f"tiny\n{name}", suite.slurm, launches, folder)
    argv = run_script_safely(text, tmp_path)
    assert argv == slurm.inner_command(folder)
    assert not list(tmp_path.rglob("PWNED*")), text
    directives = [shlex.split(line)[1] for line in text.splitlines() if line.startswith("#SBATCH ")]
    assert f"--chdir={work}" in directives and "--comment=two; words" in directives


@pytest.mark.parametrize("value", ["/tmp/sb\ntouch PWNED #", "x\rtouch PWNED", "a\x00b", "a\x0bb"])
def test_batch_directive_with_a_line_break_is_refused(tmp_path: Path, monkeypatch, value: str):
    """A ``#SBATCH`` line is a comment, where no quoting holds: a line break would start a command."""
    suite = parse_suite(SUITE, "test")
    launches = expand(suite, HostPlan(source="sbatch", launcher_nodes=True))
    if "\x00" not in value:  # no path holds a NUL (the OS refuses it), a suite's value may
        with pytest.raises(BadInput, match="sbatch"):
            slurm.batch_script("tiny-1", suite.slurm, launches, tmp_path / value)
    # values that slipped past the suite's own checks are caught here too
    hostile = Slurm.model_construct(sbatch_args=[f"--comment={value}"], srun_args=[], partition=None, account=None,
                                    time=None)
    with pytest.raises(BadInput, match="control character"):
        slurm.batch_script("tiny-1", hostile, launches, tmp_path / "run")
    monkeypatch.chdir(tmp_path)
    text = slurm.batch_script(f"tiny{value}", suite.slurm, launches, tmp_path / "run")  # a run id: a comment
    assert run_script_safely(text, tmp_path) == slurm.inner_command(tmp_path / "run")
    assert not list(tmp_path.rglob("PWNED*"))


@pytest.mark.parametrize("name", HOSTILE_NAMES[:4])
def test_sbatch_dry_run_script_runs_nothing_else(tmp_path: Path, monkeypatch, name: str):
    """Through the CLI, on a resumed run whose folder has shell syntax in its name and whose run.json
    holds a run id with a line break: the printed script, executed, runs only the sweep on it."""
    folder = tmp_path / f"sb {name}"
    (folder / "parts").mkdir(parents=True)
    (folder / "suite.yaml").write_text(yaml.safe_dump({**SUITE, "slurm": {"time": 5}}))
    (folder / "run.json").write_text(json.dumps({"run_id": f"tiny\n{name}\ntouch PWNED"}))
    before = snapshot(folder)
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here: a dry run needs none
    code, stdout, stderr = run_in_process("run", "sweep", "--launcher", "sbatch", "--dry-run", "--resume", str(folder))
    assert code == 0, stderr
    monkeypatch.setenv("PATH", os.defpath)
    script = stdout[stdout.index("#!/bin/bash"):]
    script, submit = script[:script.index("\nsbatch ") + 1], script[script.index("\nsbatch ") + 1:]
    assert run_script_safely(script, tmp_path) == slurm.inner_command(folder)
    assert shlex.split(submit)[-1] == f"{folder.resolve()}/{slurm.BATCH_SCRIPT}"
    assert not list(tmp_path.rglob("PWNED*")) and snapshot(folder) == before


def test_dry_run_launch_line_is_quoted(tmp_path: Path, monkeypatch):
    """``run sweep --dry-run`` prints commands to paste: an environment value with shell syntax is
    one quoted word, run as such."""
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump({**SUITE, "env": {"PCCL_TEST_VALUE": "a; touch PWNED $(touch PWNED)"}}))
    code, stdout, stderr = run_in_process("run", "sweep", str(path), "--dry-run")
    assert code == 0, stderr
    line = next(line for line in stdout.splitlines() if "bench.rank.worker" in line)
    words = shlex.split(line)
    assert "PCCL_TEST_VALUE=a; touch PWNED $(touch PWNED)" in words or "a; touch PWNED $(touch PWNED)" in words
    shown = subprocess.run(["bash", "-c", 'show() { printf "%s\\0" "$@"; }; show ' + line], capture_output=True,
                           text=True, timeout=10, cwd=tmp_path)
    assert shown.stdout.split("\0")[:-1] == words
    assert not list(tmp_path.rglob("PWNED*"))


# ---------------------------------------------------------------- --resume


def make_run(folder: Path, parts: str | None = None, suite: dict | None = None) -> Path:
    (folder / "parts").mkdir(parents=True)
    (folder / "suite.yaml").write_text(yaml.safe_dump(suite or SUITE, sort_keys=False))
    (folder / "run.json").write_text(json.dumps({"run_id": "tiny-1"}))
    if parts is not None:
        (folder / "parts" / "n2-rpn2-host.jsonl").write_text(parts)
    return folder


def test_resume_with_another_suite_is_refused(tmp_path: Path):
    folder = make_run(tmp_path / "run")
    before = snapshot(folder)
    refused("run", "sweep", "ci", "--resume", folder, needles=("--resume", "'tiny'", "'ci'", "ci.yaml"))
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({**SUITE, "name": "other"}))
    refused("run", "sweep", other, "--resume", folder, "--dry-run", needles=("'tiny'", "'other'"))
    assert snapshot(folder) == before
    same = tmp_path / "same.yaml"
    same.write_text(yaml.safe_dump(SUITE))
    for argv in (["--resume", str(folder)], [str(same), "--resume", str(folder)]):
        code, _, stderr = run_in_process("run", "sweep", *argv, "--dry-run")  # its own suite: fine
        assert code == 0, stderr


def row(key: str, **changes) -> dict:
    cell = expand(parse_suite(SUITE, "test"))[0].cells[0].to_dict()
    return {**cell, "cell_key": key, "status": "ok", "samples_us": [1.0, 2.0], **changes}


GOOD = json.dumps(row("a")) + "\n"
BAD_PARTS = {
    "garbage": (GOOD + "hello\n" + GOOD, 2),
    "cut-row-in-the-middle": (GOOD + json.dumps(row("b"))[:40] + "\n" + GOOD, 2),
    "json-list": (GOOD + "[1, 2]\n", 2),
    "json-number": ("42\n" + GOOD, 1),
    "json-string": (GOOD + GOOD + '"row"\n' + GOOD, 3),
    "no-cell-key": (json.dumps({"status": "ok"}) + "\n" + GOOD, 1),
    "cell-key-not-text": (json.dumps(row("a", cell_key=5)) + "\n", 1),
    "status-missing": (json.dumps({k: v for k, v in row("a").items() if k != "status"}) + "\n", 1),
    "samples-not-numbers": (GOOD + json.dumps(row("b", samples_us=["x"])) + "\n", 2),
    "samples-nan": (json.dumps(row("b"))[:-1] + ', "samples_us": [NaN]}\n', 1),
    "cell-field-missing": (json.dumps({k: v for k, v in row("a").items() if k != "nranks"}) + "\n", 1),
    "cell-field-wrong-type": (json.dumps(row("a", nranks="2")) + "\n", 1),
    "not-utf8": (GOOD + "\udcff\udcfe\n" + GOOD, 2),
}


@pytest.mark.parametrize("case", sorted(BAD_PARTS))
@pytest.mark.parametrize("extra", [[], ["--dry-run"], ["--launcher", "sbatch", "--dry-run"]])
def test_resume_on_part_lines_that_are_no_rows_is_refused(tmp_path: Path, case: str, extra: list[str]):
    text, line = BAD_PARTS[case]
    folder = tmp_path / "run"
    make_run(folder)
    (folder / "parts" / "n2-rpn2-host.jsonl").write_bytes(text.encode(errors="surrogateescape"))
    before = snapshot(folder)
    refused("run", "sweep", "--resume", folder, *extra, needles=(f"n2-rpn2-host.jsonl: line {line}",))
    assert snapshot(folder) == before


def test_new_run_into_a_folder_with_bad_parts_is_refused(tmp_path: Path, suite_file: Path):
    folder = make_run(tmp_path / "run", parts=GOOD + "hello\n" + GOOD)
    before = snapshot(folder)
    refused("run", "sweep", suite_file, "--out", folder, needles=("line 2",))
    assert snapshot(folder) == before


def test_a_cut_last_line_is_skipped_and_marked_when_rows_follow(tmp_path: Path):
    part = make_run(tmp_path / "run", parts=GOOD + json.dumps(row("b"))[:50]) / "parts" / "n2-rpn2-host.jsonl"
    assert [r["cell_key"] for r in read_parts(tmp_path / "run", check_cells=True)] == ["a"]
    append_rows(part, [row("c")])
    lines = part.read_text().splitlines()
    assert len(lines) == 3 and lines[1].endswith(TORN_MARK)
    assert [r["cell_key"] for r in read_parts(tmp_path / "run", check_cells=True)] == ["a", "c"]
    # a row that lost only its line break is a row, not a cut one
    part.write_text(GOOD + json.dumps(row("b")))
    append_rows(part, [row("c")])
    assert [r["cell_key"] for r in read_parts(tmp_path / "run")] == ["a", "b", "c"]
    # a cut line past the chunk that end_with_newline reads back at once
    part.write_text(GOOD + json.dumps(row("d", samples_us=[1.5] * 30000))[:-10])
    append_rows(part, [row("c")])
    assert part.read_text().splitlines()[1].endswith(TORN_MARK)
    assert [r["cell_key"] for r in read_parts(tmp_path / "run")] == ["a", "c"]


def test_resume_after_a_cut_row_measures_it_again_twice_over(tmp_path: Path):
    """A real sweep whose last row was cut (a crash): --resume measures the cell again, and a
    second --resume still reads the folder (the cut line now sits between rows, marked)."""
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump(SUITE))
    folder = tmp_path / "run"
    first = run_cli("run", "sweep", suite, "--out", folder, timeout=60)
    assert first.returncode == 0, describe(first)
    part = next((folder / "parts").glob("*.jsonl"))
    lines = part.read_text().splitlines()
    assert len(lines) == 2
    part.write_text(lines[0] + "\n" + lines[1][:70])
    (folder / "results.parquet").unlink()
    for _ in range(2):
        again = run_cli("run", "sweep", "--resume", folder, timeout=60)
        assert again.returncode == 0, describe(again)
        assert "2 ok" in again.stdout, describe(again)
    lines = part.read_text().splitlines()
    assert len(lines) == 3 and lines[1].endswith(TORN_MARK)


# ---------------------------------------------------------------- baseline update --dest


@pytest.mark.parametrize("case", ["file", "under-file", "working-directory", "above-it", "holds-a-file",
                                  "holds-a-run", "holds-runs", "long-name"])
def test_baseline_dest_that_cannot_be_replaced_is_refused(in_checkout: Path, suite_file: Path, case: str):
    outside = in_checkout.parent / "outside"
    outside.mkdir()
    (outside / "a-file").write_text("keep me")
    (outside / "notes").mkdir()
    (outside / "notes" / "todo.txt").write_text("keep me")
    run = outside / "runs" / "smoke-1"
    run.mkdir(parents=True)
    (run / "results.parquet").write_bytes(b"measured")
    dest = {"file": outside / "a-file", "under-file": outside / "a-file" / "b", "working-directory": Path("."),
            "above-it": in_checkout.parent, "holds-a-file": outside / "notes", "holds-a-run": run,
            "holds-runs": outside, "long-name": outside / ("x" * 256)}[case]
    if case == "holds-a-run":
        (run / "meta.json").write_text("{}")
    before = snapshot(in_checkout.parent)
    line = refused("baseline", "update", suite_file, "--dest", dest, needles=("--dest",))
    assert snapshot(in_checkout.parent) == before, line


def test_baseline_dest_that_is_a_baseline_passes_the_check(in_checkout: Path):
    from bench.cli.baseline_cmd import replaceable_baseline

    stale = in_checkout / "old-baseline"
    (stale / "run-1").mkdir(parents=True)
    (stale / "run-1" / "results.parquet").write_bytes(b"old")
    (stale / "stale").mkdir()
    for folder in (Path("results/baselines/ci"), Path("results/baselines/new"), stale, in_checkout / "fresh"):
        assert replaceable_baseline(folder, "--dest") == folder


# ---------------------------------------------------------------- numeric flags


@pytest.mark.parametrize("flags", [["-np", "-2"], ["-np", "0"], ["--nranks", "-1"], ["--ranks-per-node", "0"],
                                   ["--ranks-per-node", "-4"], ["--stepfactor", "1"], ["-f", "-2"], ["--iters", "0"],
                                   ["-n", "-5"], ["--warmup_iters", "-1"], ["--check", "7"], ["-c", "-1"]])
def test_point_numeric_flags_out_of_range_are_refused(tmp_path: Path, flags: list[str]):
    """Named by the flag given (not only by the suite field it sets) and the value."""
    long_name = {"-np": "--nranks", "-f": "--stepfactor", "-n": "--iters", "-c": "--check"}.get(flags[0], flags[0])
    refused("run", "point", *flags, "--out", tmp_path / "out", needles=(f"error: {long_name}: ", flags[1]))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("setting", ["timeout_s=inf", "timeout_s=.inf", "timing.budget_s=inf",
                                     "timing.warm_tol=.inf"])
@pytest.mark.parametrize("extra", [[], ["--launcher", "sbatch", "--dry-run"]])
def test_a_run_with_an_endless_time_limit_is_refused(tmp_path: Path, suite_file: Path, setting: str,
                                                     extra: list[str]):
    refused("run", "sweep", suite_file, "--set", setting, "--out", tmp_path / "out", *extra,
            needles=(setting.split("=")[0], "finite"))
    assert not (tmp_path / "out").exists()


def test_the_schema_refuses_an_endless_time_limit(tmp_path: Path, suite_file: Path):
    """``suites validate`` and a dry run agree: .inf is no limit (a hung job would never end)."""
    endless = tmp_path / "endless.yaml"
    endless.write_text(yaml.safe_dump({**SUITE, "timeout_s": float("inf")}, sort_keys=False))
    refused("suites", "validate", endless, needles=("timeout_s", "finite"))


# ---------------------------------------------------------------- processes a host can start


def test_ten_thousand_ranks_on_this_host_are_refused(tmp_path: Path, suite_file: Path):
    cores = len(os.sched_getaffinity(0))
    if 10000 <= memory.MAX_RANKS_PER_CORE * cores:
        pytest.skip(f"{cores} cores hold 10000 ranks by the rule")
    line = refused("run", "sweep", suite_file, "--set", "ranks=[10000]", "--out", tmp_path / "out",
                   needles=("10000", f"{cores} cores", str(memory.MAX_RANKS_PER_CORE)))
    assert "8 ranks on 2 cores" in line
    assert not (tmp_path / "out").exists()


def launches_of(ranks: list[int], hosts: int = 0) -> list:
    raw = {**SUITE, "ranks": ranks, **({"hosts": [f"h{i}" for i in range(hosts)]} if hosts else {})}
    suite = parse_suite(raw, "test")
    from bench.plan.hosts import suite_host_plan

    return expand(suite, suite_host_plan(suite))


def test_process_rule_lets_an_oversubscribed_test_run():
    launches = launches_of([8])
    memory.check_processes(launches, lambda launch: (8, 2, "this host", True), "suite.yaml")
    memory.check_processes(launches_of([128]), lambda launch: (128, 2, "this host", False), "suite.yaml")
    with pytest.raises(BadInput, match="129 ranks on this host, which has 2 cores"):
        memory.check_processes(launches_of([129]), lambda launch: (129, 2, "this host", False), "suite.yaml")


def test_process_rule_counts_the_ranks_of_one_host(monkeypatch):
    """Several hosts: each holds ranks / hosts (10000 on 100 hosts of 2 cores: 100 each, fine)."""
    from bench.driver.launchers.mpiexec import Mpiexec
    from bench.driver.launchers.srun import Srun
    from bench.rank.hostfacts import HostFacts
    from bench.sweep.where import Where

    launches = launches_of([10000], hosts=100)
    facts = {f"h{i}": HostFacts(f"h{i}", f"h{i}", f"boot{i}", 2, None) for i in range(100)}
    where = Where(HostPlan(), Mpiexec.for_flavour("mpich"), facts)
    assert where.process_room(launches[0]) == (100, 2, "h0", False)
    memory.check_processes(launches, where.process_room, "suite.yaml")
    one_machine = {name: HostFacts(name, name, "one-boot", 2, None) for name in facts}
    crowded = Where(HostPlan(), Mpiexec.for_flavour("mpich"), one_machine)
    with pytest.raises(BadInput, match="10000 ranks on the machine of h0"):
        memory.check_processes(launches, crowded.process_room, "suite.yaml")
    srun_nodes = Where(HostPlan(source="srun", launcher_nodes=True), Srun("mpich"))
    assert srun_nodes.process_room(launches_of([10000])[0]) is None  # Slurm sizes its own nodes


def test_process_rule_on_this_host_keeps_to_its_process_limits(monkeypatch):
    monkeypatch.setattr(memory, "process_room", lambda: (100, "ulimit -u 150, 50 of them running"))
    memory.check_processes(launches_of([100]), lambda launch: (100, 64, "this host", True), "suite.yaml")
    with pytest.raises(BadInput, match=r"needs 101 processes on this host, which can start 100 more \(ulimit -u"):
        memory.check_processes(launches_of([101]), lambda launch: (101, 64, "this host", True), "suite.yaml")
    monkeypatch.undo()
    here = memory.process_room()  # this host's own figures: some room left, and where it is read
    assert here is None or (here[0] > 0 and here[1]), here


def test_an_oversubscribed_run_here_passes_the_check():
    """The rule's own example on this host, as run_sweep checks it: 8 ranks pass whatever the cores."""
    from bench.driver.launchers import choose_launcher
    from bench.sweep.session import Sweep
    from bench.sweep.where import Where

    suite = parse_suite({**SUITE, "ranks": [8]}, "test")
    where = Where.of(suite, choose_launcher("mpiexec"))
    sweep = Sweep.of(suite, where, label="test")
    launches = sweep.launches
    sweep.check_fits()
    memory.check_processes(launches, where.process_room, "test")
    assert where.process_room(launches[0])[0] == 8
