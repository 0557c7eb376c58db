"""``run sweep``: suite -> launches -> MPI jobs -> rows -> table, with resume and interrupts."""

from __future__ import annotations

import json
import os
import secrets
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from rich.console import Console

from bench import console as screen
from bench.errors import EXIT_CELLS_FAILED, EXIT_CHECK_FAILED, EXIT_INTERRUPTED, EXIT_OK, BadInput
from bench.launch import Launcher, choose_launcher, run_job
from bench.parts import append_rows, read_parts
from bench.plan import Cell, Launch, expand
from bench.provenance import provenance, recorded_env
from bench.suite import Suite, load_suite, parse_suite
from bench.table import SCHEMA_VERSION, build_tables, write_run

#: statuses that a resumed sweep keeps; the rest are measured again
FINISHED = ("ok", "wrong", "unsupported", "skipped")


@dataclass
class SweepOptions:
    suite_path: Path
    out: Path | None = None
    launcher: str = "auto"
    resume: Path | None = None
    dry_run: bool = False
    overrides: list[str] = field(default_factory=list)
    #: an in-memory suite (``run point``) instead of a file
    suite_raw: dict | None = None
    suite_where: str = "run point"


def _new_run_id(suite_name: str) -> str:
    return f"{suite_name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def _prepare_folder(folder: Path, where: str) -> None:
    try:
        (folder / "parts").mkdir(parents=True, exist_ok=True)
        (folder / "plans").mkdir(exist_ok=True)
        (folder / "logs").mkdir(exist_ok=True)
        probe = folder / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise BadInput(where, f"cannot write results to {folder}: {error.strerror or error}") from None


def _open_run(options: SweepOptions) -> tuple[Suite, dict, Path, str]:
    """The suite, its raw form, the run folder and the run id (new or resumed)."""
    if options.resume is not None and options.overrides:
        raise BadInput("--set", "a resumed run keeps the suite it started with; --set cannot change it")
    if options.suite_raw is not None:
        suite, raw = parse_suite(options.suite_raw, options.suite_where), options.suite_raw
    elif options.resume is not None:
        folder = options.resume
        saved = folder / "suite.yaml"
        if not saved.exists():
            raise BadInput("--resume", f"{folder} is not a pccl-bench run folder (no suite.yaml)")
        raw = yaml.safe_load(saved.read_text())
        suite = parse_suite(raw, str(saved))
        meta = json.loads((folder / "run.json").read_text()) if (folder / "run.json").exists() else {}
        return suite, raw, folder, meta.get("run_id", folder.name)
    else:
        suite, raw = load_suite(options.suite_path, options.overrides)
    run_id = _new_run_id(suite.name)
    folder = options.out if options.out is not None else Path("results") / run_id
    if options.out is not None and (folder / "results.parquet").exists():
        raise BadInput("--out", f"{folder} already holds a run; pass --resume {folder} or another --out")
    return suite, raw, folder, run_id


def _missing_rows(cells: list[Cell], seen: set[str], status: str, error: str) -> list[dict]:
    return [{**cell.to_dict(), "status": status, "error": error, "n_wrong": 0, "iters": 0, "samples_us": [],
             "timestamp": time.time()} for cell in cells if cell.key not in seen]


def _run_launch(launch: Launch, todo: list[Cell], suite: Suite, launcher: Launcher, folder: Path,
                run_id: str, on_row, on_start) -> None:
    env = launcher.job_env(launch.nranks, suite.env)
    plan_path = folder / "plans" / f"{launch.launch_id}.json"
    part = folder / "parts" / f"{launch.launch_id}.jsonl"
    argv = launcher.command(launch.nranks, env, [str(plan_path.resolve())])
    plan = {
        "argv": argv, "env": env, "run_id": run_id, "launch_id": launch.launch_id, "nranks": launch.nranks,
        "ranks_per_node": launch.ranks_per_node, "requested_ranks_per_node": launch.requested_ranks_per_node,
        "part": str(part.resolve()),
        "timing": suite.timing.model_dump(), "check": suite.check,
        "row_extra": {"oversubscribed": launch.nranks > (os.cpu_count() or 1)},
        "cells": [cell.to_dict() for cell in todo],
    }
    plan_path.write_text(json.dumps(plan))
    seen: set[str] = set()

    def record(row: dict) -> None:
        seen.add(row["cell_key"])
        on_row(row)

    outcome = run_job(argv, env, part, folder / "logs" / f"{launch.launch_id}.log", suite.timeout_s,
                      record, on_start)
    if len(seen) < len(todo):
        tail = " | ".join(line for line in outcome.output_tail[-6:] if line.strip())[-600:]
        if outcome.timed_out:
            status, error = "timeout", f"MPI job killed after {suite.timeout_s:g} s. {tail}"
        else:
            status, error = "failed", f"MPI job exited with {outcome.returncode} before this cell. {tail}"
        rows = [{**row, "launch_id": launch.launch_id} for row in _missing_rows(todo, seen, status, error)]
        append_rows(part, rows)
        for row in rows:
            on_row(row)


def dry_run_commands(options: SweepOptions, out: Console) -> int:
    if options.suite_raw is not None:
        suite = parse_suite(options.suite_raw, options.suite_where)
    else:
        suite, _ = load_suite(options.suite_path, options.overrides)
    launcher = choose_launcher(options.launcher)
    for launch in expand(suite):
        env = launcher.job_env(launch.nranks, suite.env)
        argv = launcher.command(launch.nranks, env, [f"<run>/plans/{launch.launch_id}.json"])
        out.print(f"# {launch.launch_id}: {len(launch.cells)} cells, timeout {suite.timeout_s:g} s", highlight=False)
        out.print(" ".join(argv), highlight=False, soft_wrap=True)
    return EXIT_OK


def finish(folder: Path, suite: Suite, run_id: str, launcher: Launcher | None, started: float) -> object:
    wanted = {cell.key for launch in expand(suite) for cell in launch.cells}
    rows = [row for row in read_parts(folder) if row["cell_key"] in wanted]
    meta = {
        "schema_version": SCHEMA_VERSION, "run_id": run_id, "suite": suite.name,
        "suite_definition": suite.model_dump(), "launcher": launcher.kind if launcher else None,
        "mpi_flavour": launcher.flavour if launcher else None, "started": started, "finished": time.time(),
        "cells_planned": len(wanted), "cells_written": len(rows), "launches": _launch_records(folder),
        **provenance(),
    }
    identity = {"run_id": run_id, "suite": suite.name, "tool_version": meta["tool_version"],
                "git_sha": meta["git_sha"], "schema_version": SCHEMA_VERSION}
    results, samples = build_tables(rows, identity)
    write_run(folder, results, samples, meta)
    return results


def _launch_records(folder: Path) -> dict:
    """The exact command and environment of every MPI job of the run."""
    records = {}
    for path in sorted((folder / "plans").glob("*.json")):
        plan = json.loads(path.read_text())
        records[plan["launch_id"]] = {"argv": plan["argv"], "env": plan["env"], "nranks": plan["nranks"]}
    return records


def exit_code(results, interrupted: bool) -> int:
    if interrupted:
        return EXIT_INTERRUPTED
    statuses = set(results["status"]) if len(results) else set()
    if "wrong" in statuses:
        return EXIT_CHECK_FAILED
    if statuses & {"failed", "timeout"}:
        return EXIT_CELLS_FAILED
    return EXIT_OK


def run_sweep(options: SweepOptions, out: Console) -> int:
    if options.dry_run:
        return dry_run_commands(options, out)
    suite, raw, folder, run_id = _open_run(options)
    launcher = choose_launcher(options.launcher)
    _prepare_folder(folder, "--out" if options.out else "results")
    (folder / "suite.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    (folder / "run.json").write_text(json.dumps({"run_id": run_id}))
    started = time.time()
    done = {row["cell_key"] for row in read_parts(folder) if row["status"] in FINISHED}
    launches = expand(suite)
    total = sum(len(launch.cells) for launch in launches)
    interrupted = False
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    out.print(f"run [bold]{run_id}[/bold] -> {folder}  ({total} cells, {len(done)} already done; "
              f"launcher {launcher.kind}, {launcher.flavour}; env {recorded_env(launcher.job_env(1, suite.env))})",
              highlight=False)
    try:
        with screen.progress_bar(out) as bar:
            task = bar.add_task("sweep", total=total, completed=len(done), current="")
            for launch in launches:
                todo = [cell for cell in launch.cells if cell.key not in done]
                if not todo:
                    continue
                bar.update(task, description=launch.launch_id)
                names = {cell.key: f"{cell.collective} {cell.impl}:{cell.algorithm} {cell.bytes_total} B"
                         for cell in todo}
                _run_launch(launch, todo, suite, launcher, folder, run_id,
                            on_row=lambda row: bar.advance(task),
                            on_start=lambda key, names=names: bar.update(task, current=names.get(key, "")))
    except KeyboardInterrupt:
        interrupted = True
        out.print("[yellow]interrupted: writing the table of the finished cells[/yellow]")
    finally:
        signal.signal(signal.SIGTERM, previous)
    results = finish(folder, suite, run_id, launcher, started)
    for table in screen.summary_tables(results):
        out.print(table)
    out.print(f"{screen.status_line(results)} -> {folder}/results.parquet", highlight=False)
    return exit_code(results, interrupted)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt
