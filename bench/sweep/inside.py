"""``--launcher none``: the sweep runs in the processes it was started in.

Started by the user's own launcher (``mpiexec -hosts h1,h2 -n 4 pccl-bench run sweep S
--launcher none``, ``srun -N 2 pccl-bench ...``), every process runs this: rank 0 reads the suite,
learns where the job's ranks are (gathered to it, once), plans the one launch that fits the job,
owns the run folder and the table; every rank runs the worker's loop in-process on the plan
rank 0 broadcasts. Started alone, it is a job of one rank. The outer launcher owns the cleanup of a
failed rank; the suite's ``timeout_s`` still bounds each launch (a watchdog on rank 0 writes the
launch's unfinished cells as ``timeout``, the table of what finished, and aborts the job, as the
launcher's own timeout would end an MPI job it started).
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from pathlib import Path

from rich.console import Console

from bench.errors import EXIT_BAD_INPUT, EXIT_CELLS_FAILED, EXIT_INTERRUPTED, BadInput
from bench.plan.cells import LaunchPlan
from bench.plan.hosts import Host, HostPlan
from bench.run import hostfacts
from bench.run.launch import BASE_ENV, MACHINE_RANKS_VARIABLE, Launcher, mpi_flavour
from bench.run.parts import append_rows, finished_keys, read_parts
from bench.run.provenance import recorded_env
from bench.sweep.options import Run, SweepOptions, lock_folder, open_run, start_folder, where_of
from bench.sweep.run import FINISHED, check_fits, exit_code, finish, launch_plan, missing_rows, print_summary
from bench.sweep.where import Where

THREAD_LEVELS = ("single", "funneled", "serialized", "multiple")


def _init_mpi():
    from mpi4py import MPI  # mpi_flavour() imported it without initialising MPI

    if not MPI.Is_initialized():
        level = os.environ.get("PCCL_BENCH_THREAD_LEVEL", "single")
        required = {name: getattr(MPI, f"THREAD_{name.upper()}") for name in THREAD_LEVELS}.get(level,
                                                                                                 MPI.THREAD_SINGLE)
        MPI.Init_thread(required)
    return MPI


def run_inside(options: SweepOptions, out: Console) -> int:
    launcher = Launcher("none", mpi_flavour(), requested="none")
    mpi = _init_mpi()
    comm = mpi.COMM_WORLD
    try:
        facts = comm.gather(hostfacts.local(), root=0)
        if comm.rank == 0:
            return _lead(options, out, comm, launcher, facts)
        return _follow(comm)
    finally:
        mpi.Finalize()


def _follow(comm) -> int:
    """A rank other than 0: run the plans rank 0 sends until it says the sweep is over."""
    from bench.run.worker import run_plan

    try:
        while True:
            message = comm.bcast(None, root=0)
            if "plan" in message:
                os.environ.update(message["env"])
                run_plan(LaunchPlan.from_dict(message["plan"]), comm)
            else:
                return int(message.get("exit", EXIT_BAD_INPUT))
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        comm.Abort(1)
        raise


def job_hosts(comm, facts: list[hostfacts.HostFacts]) -> HostPlan:
    """The hosts of the job in rank order; BadInput where its ranks are not in equal blocks per host."""
    names = list(dict.fromkeys(host.hostname for host in facts))
    counts = {name: sum(1 for host in facts if host.hostname == name) for name in names}
    blocks = [host.hostname for host in facts] == [name for name in names for _ in range(counts[name])]
    if len(set(counts.values())) != 1 or not blocks:
        raise BadInput("--launcher none", f"the job's ranks are not in equal blocks per host ({counts}); start it "
                       "with block placement (mpiexec -ppn N, srun --distribution=block)")
    return HostPlan(tuple(Host(name) for name in names), f"the job around it ({comm.size} ranks)")


def _lead(options: SweepOptions, out: Console, comm, launcher: Launcher, facts: list) -> int:
    try:
        run = open_run(options)
        plan = job_hosts(comm, facts)
        where = Where(plan, launcher, {host.hostname: host for host in facts})
        launches = where.launches(run.suite)
        wrong = sorted({launch.nranks for launch in launches if launch.nranks != comm.size})
        if wrong:
            ranks = f"{comm.size} rank{'s' if comm.size > 1 else ''}"
            raise BadInput("--launcher none", f"this job has {ranks}; the suite asks for {wrong} as well or instead "
                           f"(--set ranks=[{comm.size}] runs the suite in it)")
        for launch in launches:
            if launch.where.nhosts != len(plan.hosts):
                raise BadInput("--launcher none", f"{launch.launch_id} puts its nodes on {launch.where.nhosts} hosts; "
                               f"the job spans {len(plan.hosts)} ({','.join(h.name for h in plan.hosts)})")
        for index, arm in enumerate(run.suite.arms):
            if arm.env or arm.install:
                raise BadInput(f"{where_of(options)}: arms.{index}", f"{arm.name}: sets env or install, which need "
                               "launches of their own; --launcher none runs every arm in the job you started")
        check_fits(run.suite, run.raw, where, launches, where_of(options))
        lock = lock_folder(options, run.folder, out)
    except BadInput:
        comm.bcast({"exit": EXIT_BAD_INPUT}, root=0)
        raise
    try:
        return _measure(run, where, launches, comm, out)
    finally:
        lock.release()


def _warn_if_unthrottled(launches: list, where: Where, env: dict[str, str], out: Console) -> None:
    """The job's environment was set before MPI started: say what an oversubscribed job lacks."""
    wanted = {name: value for launch in launches if where.load(launch).oversubscribed
              for name, value in where.launcher.job_env(where.load(launch), {}).items()
              if name not in BASE_ENV and name != MACHINE_RANKS_VARIABLE}
    missing = {name: value for name, value in wanted.items() if name not in env}
    if missing:
        flags = " ".join(f"-genv {name} {value}" for name, value in missing.items())
        out.print(f"[yellow]warning: more ranks than cores on one machine, and the job was started without "
                  f"{', '.join(missing)}: small messages will be slow; start it with {flags} (mpiexec) or "
                  f"export them (srun)[/yellow]", highlight=False, soft_wrap=True)


def _watchdog(run: Run, where: Where, plan: LaunchPlan, comm, out: Console, started: float) -> threading.Timer:
    """A timer of the suite's timeout_s for one launch run in this job: when it fires (a cell hangs,
    no outer limit ended the job), the launch's cells without a row get ``timeout`` rows, the table
    is written from what finished, and the job is aborted with exit code 3 (the other ranks may be
    inside a collective that never completes)."""
    def expire() -> None:
        seen = {row["cell_key"] for row in read_parts(run.folder)}
        error = (f"still running after the suite's timeout_s of {run.suite.timeout_s:g} s inside the job "
                 "(--launcher none): the job was aborted")
        append_rows(Path(plan.part), [{**row, "launch_id": plan.launch_id}
                                      for row in missing_rows(plan.cells, seen, "timeout", error)])
        results = finish(run, where.launcher, where, started)
        out.print(f"[red]{plan.launch_id}: {error}[/red]", highlight=False, soft_wrap=True)
        print_summary(results, run.folder, out)
        sys.stdout.flush()
        comm.Abort(EXIT_CELLS_FAILED)

    timer = threading.Timer(run.suite.timeout_s, expire)
    timer.daemon = True
    timer.start()
    return timer


def _measure(run: Run, where: Where, launches: list, comm, out: Console) -> int:
    from bench.run.worker import run_plan

    start_folder(run.folder, run.raw, run.run_id, "--out")
    started = time.time()
    done = finished_keys(read_parts(run.folder), [cell for launch in launches for cell in launch.cells], FINISHED)
    out.print(f"run [bold]{run.run_id}[/bold] -> {run.folder}  (inside this job: {comm.size} ranks on "
              f"{','.join(h.name for h in where.plan.hosts)}; {len(done)} cells already done)", highlight=False,
              soft_wrap=True)
    env = recorded_env(dict(os.environ))
    _warn_if_unthrottled(launches, where, env, out)
    try:
        for launch in launches:
            todo = [cell for cell in launch.cells if cell.key not in done]
            if not todo:
                continue
            plan = launch_plan(launch, todo, run.suite, where, run, list(sys.argv), env)
            plan.write(run.folder / "plans" / f"{launch.launch_id}.json")
            # what the launcher would have set: shm and rdma yield when the machine is oversubscribed
            machine = {MACHINE_RANKS_VARIABLE: str(where.load(launch).ranks)}
            comm.bcast({"plan": plan.to_dict(), "env": machine}, root=0)
            os.environ.update(machine)
            watchdog = _watchdog(run, where, plan, comm, out, started)
            try:
                run_plan(plan, comm)
            finally:
                watchdog.cancel()
            out.print(f"{launch.launch_id}: {len(todo)} cells", highlight=False)
    except KeyboardInterrupt:
        out.print("[yellow]interrupted: writing the table of the finished cells[/yellow]")
        finish(run, where.launcher, where, started)
        comm.Abort(EXIT_INTERRUPTED)  # the other ranks may be inside a collective
    results = finish(run, where.launcher, where, started)
    print_summary(results, run.folder, out)
    code = exit_code(results, False)
    comm.bcast({"exit": code}, root=0)
    return code
