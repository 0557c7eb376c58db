"""Launchers whose ``sweep_driver`` is ``inside`` (none): the sweep runs in the processes it was started in.

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
import traceback

from rich.console import Console

from bench.driver import preflight
from bench.driver.job import follow_part
from bench.driver.launchers import BASE_ENV, MachineLoad, choose_launcher
from bench.driver.provenance import recorded_env
from bench.errors import EXIT_BAD_INPUT, EXIT_CELLS_FAILED, EXIT_INTERRUPTED, BadInput
from bench.plan.cells import Launch, LaunchPlan
from bench.plan.hosts import Host, HostPlan
from bench.plan.suite_files import read_yaml
from bench.rank import hostfacts, preflight_probe
from bench.rank.mpi_start import start_mpi
from bench.sweep import jobs
from bench.sweep.options import SweepOptions, load_for, lock_folder
from bench.sweep.session import Sweep, print_summary, said_exit_code
from bench.sweep.where import Where
from collectives.envsettings import MACHINE_RANKS_VARIABLE

#: the argv of every launch is the job the user started: the dry run shows what each would run
dry_run = jobs.dry_run


def _suite_device(options: SweepOptions) -> str:
    """The memory kind the suite asks for, read by every rank before MPI_Init so a GPU rank binds
    its device first; a suite that cannot be read: host (rank 0 reports it once MPI is up)."""
    try:
        if options.resume is not None:
            raw = read_yaml(options.resume / "suite.yaml", "saved suite")
        else:
            raw = load_for(options)[1]
    except (BadInput, OSError):
        return "host"
    device = raw.get("device", "host") if isinstance(raw, dict) else "host"
    return device if isinstance(device, str) else "host"


def run(options: SweepOptions, out: Console) -> int:
    launcher = choose_launcher(options.launcher)
    mpi = start_mpi(_suite_device(options))  # the same start as the worker's: the GPU, then MPI_Init
    comm = mpi.COMM_WORLD
    try:
        facts = comm.gather(hostfacts.local(), root=0)
        if comm.rank == 0:
            return _lead(options, out, comm, Where(job_hosts(comm, facts), launcher,
                                                   {host.hostname: host for host in facts}))
        return _follow(comm)
    finally:
        mpi.Finalize()


def _follow(comm) -> int:
    """A rank other than 0: run the plans rank 0 sends until it says the sweep is over."""
    from bench.rank.worker import run_plan

    try:
        while True:
            message = comm.bcast(None, root=0)
            if "plan" in message:
                os.environ.update(message["env"])
                run_plan(LaunchPlan.from_dict(message["plan"]), comm)
            elif "preflight" in message:
                preflight_probe.probe(**message["preflight"])
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


def _check_job(sweep: Sweep, size: int) -> None:
    """The suite's launches must be this job as it is: its ranks, its hosts, no launch of its own."""
    hosts = sweep.where.plan.hosts
    wrong = sorted({launch.nranks for launch in sweep.launches if launch.nranks != size})
    if wrong:
        ranks = f"{size} rank{'s' if size > 1 else ''}"
        raise BadInput("--launcher none", f"this job has {ranks}; the suite asks for {wrong} as well or instead "
                       f"(--set ranks=[{size}] runs the suite in it)")
    for launch in sweep.launches:
        if launch.where.nhosts != len(hosts):
            raise BadInput("--launcher none", f"{launch.launch_id} puts its nodes on {launch.where.nhosts} hosts; "
                           f"the job spans {len(hosts)} ({','.join(h.name for h in hosts)})")
    for index, arm in enumerate(sweep.suite.arms):
        if arm.env or arm.install:
            raise BadInput(f"{sweep.label}: arms.{index}", f"{arm.name}: sets env or install, which need "
                           "launches of their own; --launcher none runs every arm in the job you started")


def _lead(options: SweepOptions, out: Console, comm, where: Where) -> int:
    try:
        sweep = Sweep.open(options, where)
        _check_job(sweep, comm.size)
        sweep.check_fits()
        preflight.check_mpi(sweep, out)
        _preflight(sweep, comm, out)
        lock = lock_folder(options, sweep.folder, out)
    except BadInput:
        comm.bcast({"exit": EXIT_BAD_INPUT}, root=0)
        raise
    try:
        return _measure(sweep, comm, out, options.allow_unsupported)
    finally:
        lock.release()


def _preflight(sweep: Sweep, comm, out: Console) -> None:
    """A GPU suite: the pre-flight's probe on every rank of this job (its MPI_Init has passed, so GTL
    is linked where it is needed): binding, shared GPUs, NUMA, the NCCL/RCCL network."""
    if not preflight.needed(sweep.suite.device, sweep.where.site) or not sweep.launches:
        return
    asked = {"device": sweep.suite.device, "with_xccl": preflight.uses_xccl(sweep.launches)}
    comm.bcast({"preflight": asked}, root=0)
    report = preflight_probe.probe(**asked)
    found = preflight.conclude(sweep, sweep.launches[0], list(sys.argv), report, out)
    sweep.preflight = found.record()


def _warn_if_unthrottled(sweep: Sweep, env: dict[str, str], out: Console) -> None:
    """The job's environment was set before MPI started: say what an oversubscribed job lacks."""
    loads = [sweep.where.load(launch) for launch in sweep.launches]
    wanted = {name: value for load in loads if load.oversubscribed
              for name, value in sweep.launcher.job_env(load, {}).items()
              if name not in BASE_ENV and name != MACHINE_RANKS_VARIABLE}
    missing = {name: value for name, value in wanted.items() if name not in env}
    if missing:
        flags = " ".join(f"-genv {name} {value}" for name, value in missing.items())
        out.print(f"[yellow]warning: more ranks than cores on one machine, and the job was started without "
                  f"{', '.join(missing)}: small messages will be slow; start it with {flags} (mpiexec) or "
                  f"export them (srun)[/yellow]", highlight=False, soft_wrap=True)


def _watchdog(sweep: Sweep, launch: Launch, plan: LaunchPlan, start: int, comm, out: Console) -> threading.Timer:
    """A timer of the suite's timeout_s for one launch run in this job: when it fires (a cell hangs,
    no outer limit ended the job), the launch's cells without a row get ``timeout`` rows, the table
    is written from what finished, and the job is aborted with exit code 3 (the other ranks may be
    inside a collective that never completes)."""
    def expire() -> None:
        arrived: set[str] = set()
        follow_part(sweep.part(launch), start, lambda row: (arrived.add(row["cell_key"]), sweep.take(row)))
        error = (f"still running after the suite's timeout_s of {sweep.suite.timeout_s:g} s inside the job "
                 "(--launcher none): the job was aborted")
        sweep.close_launch(launch, plan.cells, arrived, "timeout", error)
        tables = sweep.finish()
        out.print(f"[red]{plan.launch_id}: {error}[/red]", highlight=False, soft_wrap=True)
        print_summary(tables, sweep.folder, out)
        sys.stdout.flush()
        comm.Abort(EXIT_CELLS_FAILED)

    timer = threading.Timer(sweep.suite.timeout_s, expire)
    timer.daemon = True
    timer.start()
    return timer


def _measure(sweep: Sweep, comm, out: Console, allow_unsupported: bool = False) -> int:
    from bench.rank.worker import run_plan

    sweep.start()
    done = sweep.done()
    hosts = ",".join(h.name for h in sweep.where.plan.hosts)
    out.print(f"run [bold]{sweep.run_id}[/bold] -> {sweep.folder}  (inside this job: {comm.size} ranks on {hosts}; "
              f"{len(done)} cells already done)", highlight=False, soft_wrap=True)
    env = recorded_env(dict(os.environ))
    _warn_if_unthrottled(sweep, env, out)
    try:
        for launch in sweep.launches:
            todo = sweep.todo(launch, done)
            if not todo:
                continue
            plan = sweep.launch_plan(launch, todo, list(sys.argv), env)
            sweep.write_plan(plan)
            # what the launcher would have set: shm and rdma yield when the machine is oversubscribed
            load: MachineLoad = sweep.where.load(launch)
            machine = {MACHINE_RANKS_VARIABLE: str(load.ranks)}
            comm.bcast({"plan": plan.to_dict(), "env": machine}, root=0)
            os.environ.update(machine)
            part = sweep.part(launch)
            start = part.stat().st_size if part.exists() else 0
            watchdog = _watchdog(sweep, launch, plan, start, comm, out)
            try:
                run_plan(plan, comm)
            finally:
                watchdog.cancel()
            follow_part(part, start, sweep.take)  # the launch's rows, as rank 0 appended them
            out.print(f"{launch.launch_id}: {len(todo)} cells", highlight=False)
    except KeyboardInterrupt:
        out.print("[yellow]interrupted: writing the table of the finished cells[/yellow]")
        sweep.finish()
        comm.Abort(EXIT_INTERRUPTED)  # the other ranks may be inside a collective
    tables = sweep.finish()
    print_summary(tables, sweep.folder, out)
    code = said_exit_code(tables.results, False, allow_unsupported, out)
    comm.bcast({"exit": code}, root=0)
    return code
