"""One sweep, held once: the validated suite, its launches (expanded once), the hosts and the
launcher, the run folder, and every row of the run as it arrives. The table and meta.json are built
from what the session holds; the part files are read once, when the session opens (a resumed run's
rows, checked), and then only followed as the jobs append to them.

The drivers (jobs.py, batch.py, inside.py) run a session the way its launcher asks; ``pccl-bench ab``
runs its rounds as sessions of suites it builds in memory.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.markup import escape

from bench.driver import memory_check as memory
from bench.driver import slurm
from bench.driver.installs import Install, probe_install
from bench.driver.launchers import Job, Launcher, choose_launcher, worker_program
from bench.driver.provenance import provenance
from bench.errors import EXIT_CELLS_FAILED, EXIT_CHECK_FAILED, EXIT_INTERRUPTED, EXIT_OK, BadInput
from bench.plan.cells import Cell, Launch, LaunchPlan, TimingPlan
from bench.plan.sizes import format_size
from bench.plan.suite import Suite
from bench.present import console as screen
from bench.rank.outcome import CellOutcome, part_row
from bench.rank.parts import append_rows, finished_keys, rows_of_cells
from bench.results.speedup import median_intervals
from bench.results.table import SCHEMA_VERSION, build_tables, write_run
from bench.sweep.options import SweepOptions, folder_flag, open_run, start_folder, where_of
from bench.sweep.where import Where
from collectives.memory import device_kinds

#: statuses that a resumed sweep keeps; the rest are measured again
FINISHED = ("ok", "wrong", "unsupported", "skipped")


@dataclass
class Tables:
    """A finished run in memory: what results.parquet, samples.parquet and meta.json hold."""

    results: pd.DataFrame
    samples: pd.DataFrame
    meta: dict


@dataclass
class Sweep:
    suite: Suite
    #: the suite as given (its file with --set and the flags applied), saved as the run's suite.yaml
    document: dict
    folder: Path
    run_id: str
    where: Where
    #: the suite's launches on these hosts, expanded once
    launches: list[Launch]
    #: what bad-input lines about the suite name (its file, or the resumed run's suite.yaml)
    label: str
    #: the flag that named the run folder, for a bad-input line about it
    folder_flag: str = "--out"
    #: the latest row of every cell: the part files' when the session opened, then each row as it arrives
    rows: dict[str, dict] = field(default_factory=dict)
    #: per launch: the exact command, environment and hosts of its MPI job (meta.json ``launches``)
    records: dict[str, dict] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    #: the pre-flight's record of a GPU suite (bench/driver/preflight.py), meta.json's ``preflight``
    preflight: dict | None = None
    #: the pre-flight refusals let through (--allow-xccl-sockets, --allow-other-mpi), meta.json's ``allowed``
    allowed: tuple[str, ...] = ()

    @classmethod
    def open(cls, options: SweepOptions, where: Where | None = None) -> Sweep:
        """The sweep ``options`` ask for, nothing written yet: a new run, or the resumed one with its
        rows. ``where``: the hosts and launcher when they are known already (a job started around
        this process); else the launcher ``--launcher`` names, on the hosts it finds."""
        run = open_run(options)
        if where is None:
            where = Where.of(run.suite, choose_launcher(options.launcher, run.suite.slurm), where_of(options),
                             some_launches=bool(options.nodes))
        launches = where.launches(run.suite)  # a rank count the hosts cannot hold: bad input, before the probe
        if run.suite.select and not any(launch.cells for launch in launches):
            raise BadInput(where_of(options), f"select: {run.document.get('select')!r} matches no cell of the suite")
        sweep = cls(run.suite, run.document, run.folder, run.run_id, where, launches, where_of(options),
                    folder_flag(options), {row["cell_key"]: row for row in run.rows})
        if options.resume is not None:
            sweep.records = earlier_launches(run.folder)
        sweep.allowed = run.allowed
        return sweep

    @classmethod
    def of(cls, suite: Suite, where: Where, folder: Path = Path("."), run_id: str = "plan", label: str = "suite",
           document: dict | None = None) -> Sweep:
        """A session of ``suite`` on ``where`` without a folder of its own (planning, tests, benchmarks)."""
        return cls(suite, document or {}, folder, run_id, where, where.launches(suite), label)

    @property
    def launcher(self) -> Launcher:
        return self.where.launcher

    def planned(self) -> list[Cell]:
        return [cell for launch in self.launches for cell in launch.cells]

    @property
    def cells(self) -> int:
        return len(self.planned())

    def done(self) -> set[str]:
        """The cells a resumed run keeps (by their keys now; a schema-1 folder's rows under theirs of then:
        bench.rank.parts.cell_rows)."""
        return finished_keys(list(self.rows.values()), self.planned(), FINISHED)

    def todo(self, launch: Launch, done: set[str]) -> list[Cell]:
        """The cells of ``launch`` still to measure."""
        return [cell for cell in launch.cells if cell.key not in done]

    # ------------------------------------------------------------------ before anything is written

    def check(self, known_installs: dict[str, dict] | None = None) -> None:
        """BadInput, before anything is written, where the sweep cannot run: a named host that does
        not answer, another install that cannot read this one's plans, buffers or processes that do
        not fit the machines, srun steps that do not fit the site's node or its time policy."""
        self.where.probe(self.suite)
        self.check_installs(known_installs)
        self.check_fits()
        self.launcher.check_launches(self.label, self.suite.slurm, self.where.site, self.launches)
        memory.check_processes(self.launches, self.where.process_room, self.label)

    def check_fits(self) -> None:
        """Refuse sizes whose buffers exceed a machine's memory (the machines of named hosts as probed;
        srun's own nodes cannot be seen from here)."""
        memory.check_memory(self.launches, self.where.memory_room, format_size(self.suite.sizes.max), self.label)

    def check_installs(self, known: dict[str, dict] | None = None) -> None:
        """Every other install an arm names, asked once what it is and whether it reads this install's
        plans (its first launch's, written to a scratch folder). ``known``: installs an earlier round
        of the same ab asked (their records), taken as they are."""
        for index, arm in enumerate(self.suite.arms):
            where = f"{self.label}: arms.{index}.install"
            if arm.install is None or arm.install in self.where.installs:
                continue
            if arm.install in (known or {}):
                self.where.add_install(Install(**known[arm.install]), where)
                continue
            launch = next(launch for launch in self.launches if launch.install == arm.install)
            with tempfile.TemporaryDirectory(prefix="pccl-plan-check-") as scratch:
                plan_path = Path(scratch) / "plan.json"
                self.launch_plan(launch, launch.cells, [], {}, part=Path(scratch) / "part.jsonl").write(plan_path)
                install = probe_install(arm.install, where, SCHEMA_VERSION, plan_path)
            self.where.add_install(install, where)

    # ------------------------------------------------------------------ launches

    def job_command(self, launch: Launch, plan_path: str,
                    program: list[str] | None = None) -> tuple[list[str], dict[str, str]]:
        """The argv and environment of one launch's MPI job (another install's worker for an arm that
        names one; ``program`` in place of the worker: the pre-flight's probe)."""
        load = self.where.load(launch)
        launcher, install = self.where.job(launch)
        # the site's variables first: the suite's own env and an arm's override them
        env = launcher.job_env(load, {**self.where.site_env(launch), **self.suite.env, **launch.env})
        if install is not None:
            env.update(install.job_env())
            program = program or [install.python, "-m", install.worker, plan_path]
        job = Job(launch.nranks, launch.where, env, tuple(program or worker_program([plan_path])),
                  self.suite.timeout_s, load.oversubscribed)
        return launcher.command(job), env

    def launch_plan(self, launch: Launch, todo: list[Cell], argv: list[str], env: dict[str, str],
                    part: Path | None = None) -> LaunchPlan:
        """What the workers of one launch run (``part``: where rank 0 appends the rows)."""
        part = part or self.part(launch)
        spread = launch.where
        return LaunchPlan(run_id=self.run_id, launch_id=launch.launch_id, nranks=launch.nranks,
                          ranks_per_node=launch.ranks_per_node,
                          requested_ranks_per_node=launch.requested_ranks_per_node, part=str(part.resolve()),
                          timing=TimingPlan(**self.suite.timing.model_dump()), check=self.suite.check, cells=todo,
                          row_extra={"oversubscribed": self.where.load(launch).oversubscribed}, argv=argv, env=env,
                          hosts=list(spread.names),
                          # 0 where Slurm chooses the nodes: no planned placement for the worker to hold it to
                          ranks_per_host=0 if spread.launcher_spreads else spread.ranks_per_host,
                          site_env=self.where.site_env(launch))

    def part(self, launch: Launch) -> Path:
        return self.folder / "parts" / f"{launch.launch_id}.jsonl"

    def write_plan(self, plan: LaunchPlan) -> Path:
        """plans/<launch>.json for the workers, and the launch's record for meta.json."""
        path = self.folder / "plans" / f"{plan.launch_id}.json"
        plan.write(path)
        self.records[plan.launch_id] = launch_record(plan)
        return path

    def take(self, row: dict) -> None:
        """A row as it arrives (the last row of a cell wins, as in the part files)."""
        self.rows[row["cell_key"]] = row

    def close_launch(self, launch: Launch, todo: list[Cell], arrived: set[str], status: str,
                     error: str) -> list[dict]:
        """The cells of ``todo`` a launch ended without (none in ``arrived``): a row each of ``status``
        with ``error``, appended to the launch's part file and taken."""
        rows = [part_row(cell, CellOutcome.not_run(status, error), time.time(), launch.launch_id)
                for cell in todo if cell.key not in arrived]
        append_rows(self.part(launch), rows)
        for row in rows:
            self.take(row)
        return rows

    # ------------------------------------------------------------------ the table

    def start(self) -> None:
        """The run folder made (suite.yaml, run.json): the sweep's first write."""
        start_folder(self.folder, self.document, self.run_id, self.folder_flag, self.allowed)
        self.started = time.time()

    def finish(self) -> Tables:
        """The run's tables and meta.json, written, from the rows of the cells the suite plans on these
        hosts, in the order they came (a schema-1 folder's rows under their keys of then)."""
        rows = rows_of_cells(list(self.rows.values()), self.planned())
        launcher = self.launcher
        meta = {
            "schema_version": SCHEMA_VERSION, "run_id": self.run_id, "suite": self.suite.name,
            "suite_definition": self.suite.model_dump(), "launcher": launcher.kind,
            "launcher_requested": launcher.requested, "slurm": slurm.job_facts(self.folder),
            "site": self.where.site.model_dump() if self.where.site else None,
            "mpi_flavour": launcher.flavour, "started": self.started, "finished": time.time(),
            "cells_planned": self.cells, "cells_written": len(rows), "hosts": self.where.record(),
            "installs": {given: install.record() for given, install in self.where.installs.items()},
            "launches": self.launch_records(), **provenance(),
        }
        if self.preflight is not None:
            meta["preflight"] = self.preflight
        if self.allowed:  # what the pre-flight would have refused, measured all the same
            meta["allowed"] = [f"--allow-{name}" for name in self.allowed]
        identity = {"run_id": self.run_id, "suite": self.suite.name, "tool_version": meta["tool_version"],
                    "git_sha": meta["git_sha"], "schema_version": SCHEMA_VERSION}
        results, samples = build_tables(rows, identity)
        write_run(self.folder, results, samples, meta)
        return Tables(results, samples, meta)

    def launch_records(self) -> dict:
        """Every MPI job of the run, with where its ranks ran (the worker's files beside its part:
        ``placement`` per host, ``ranks``: each rank's launcher variables, ``gpus``: each rank's GPU)."""
        records = {}
        for launch_id, record in sorted(self.records.items()):
            for name in ("placement", "ranks", "gpus"):
                written = self.folder / "parts" / f"{launch_id}.{name}.json"
                if written.exists():
                    try:
                        record = {**record, name: json.loads(written.read_text())}
                    except ValueError:
                        pass
            records[launch_id] = record
        return records


def earlier_launches(folder: Path) -> dict[str, dict]:
    """The launch records of a resumed run's earlier sweeps (their plans), read once when it opens."""
    records = {}
    for path in sorted((folder / "plans").glob("*.json")):
        try:
            plan = LaunchPlan.read(path)
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a plan cut by a crash: its launch runs again and writes a new one
        records[plan.launch_id] = launch_record(plan)
    return records


def launch_record(plan: LaunchPlan) -> dict:
    """meta.json's record of one launch: the exact command and environment of its MPI job, its hosts."""
    return {"argv": plan.argv, "env": plan.env, "nranks": plan.nranks, "hosts": plan.hosts,
            "ranks_per_host": plan.ranks_per_host, **({"site_env": plan.site_env} if plan.site_env else {})}


#: a GPU cell that reached its GPU: it ran its collective there (checked, and timed or found wrong)
REACHED_GPU = ("ok", "wrong")


def gpu_cells(results: pd.DataFrame) -> tuple[int, int]:
    """(GPU cells that ran on a GPU, GPU cells in the table): cells of a device memory kind."""
    if not len(results) or "device" not in results:
        return 0, 0
    on_gpu = results["device"].isin(device_kinds())
    return int((on_gpu & results["status"].isin(REACHED_GPU)).sum()), int(on_gpu.sum())


def no_gpu_line(results: pd.DataFrame) -> str:
    """The one line of a GPU suite whose cells never reached a GPU ("" where one did, or none is planned)."""
    ran, planned = gpu_cells(results)
    if not planned or ran:
        return ""
    reasons = results.loc[results["device"].isin(device_kinds()), "error"].dropna()
    first = next((text for text in reasons if text), "")
    return (f"no GPU cell ran: all {planned} GPU cells were refused or failed ({first}); "
            "--allow-unsupported exits 0 all the same")


def exit_code(results: pd.DataFrame, interrupted: bool, allow_unsupported: bool = True) -> int:
    """The sweep's exit code; ``allow_unsupported`` False: a GPU suite that reached no GPU is a failed
    check (1), not a success (``run sweep`` asks for that unless --allow-unsupported)."""
    if interrupted:
        return EXIT_INTERRUPTED
    statuses = set(results["status"]) if len(results) else set()
    if "wrong" in statuses:
        return EXIT_CHECK_FAILED
    if statuses & {"failed", "timeout"}:
        return EXIT_CELLS_FAILED
    if not allow_unsupported and no_gpu_line(results):
        return EXIT_CHECK_FAILED
    return EXIT_OK


def said_exit_code(results: pd.DataFrame, interrupted: bool, allow_unsupported: bool, out: Console) -> int:
    """exit_code, and the one line that says why when a GPU suite reached no GPU (every driver's end)."""
    code = exit_code(results, interrupted, allow_unsupported)
    if code == EXIT_CHECK_FAILED and (line := no_gpu_line(results)):
        out.print(f"[red]{escape(line)}[/red]", highlight=False, soft_wrap=True)
    return code


def print_summary(tables: Tables, folder: Path, out: Console) -> None:
    results = tables.results
    intervals = median_intervals(tables.samples if len(tables.samples) else None)  # the bootstrap once for both
    for table in (screen.summary_tables(results, intervals=intervals) + screen.overlap_tables(results)
                  + screen.verdict_tables(results, intervals=intervals)):
        out.print(table)
    for reason in screen.reasons(results):
        out.print(reason, highlight=False, markup=False)
    for warning in (tables.meta.get("preflight") or {}).get("warnings", []):
        out.print(f"pre-flight warning: {warning}", highlight=False, markup=False, soft_wrap=True)
    ran, planned = gpu_cells(results)
    if planned:
        out.print(f"GPU cells run on a GPU: {ran} of {planned}", highlight=False)
    out.print(f"{screen.status_line(results)} -> {folder}/results.parquet", highlight=False)
