"""The pre-flight of a GPU suite: one tiny launch on the allocation, before the first real one, with
the suite's environment and through the sweep's own launcher, so that what would abort every launch
stops the sweep with the fix (exit 2), and what would silently mis-measure is said (meta.json's
``preflight`` and the summary). docs/PREFLIGHT.md lists each check and its message.

The ranks run bench/run/preflight_probe.py; this module starts it, reads rank 0's report and judges
it. A suite whose device is not a GPU has no pre-flight (nothing is started).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field

from bench.plan.cells import Launch
from bench.run.preflight_probe import MARKER
from collectives.memory import device_kinds
from collectives.transports.xccl.debug_log import XcclNet

#: the pre-flight launch runs one MPI_Init, one GPU bind and one tiny all-reduce
TIMEOUT_S = 180
OK, WARNING, FATAL, SKIPPED = "ok", "warning", "fatal", "skipped"


@dataclass(frozen=True)
class Verdict:
    check: str  # gtl, launch, gpu, local_rank, one_gpu_per_rank, numa, network
    verdict: str  # ok | warning | fatal | skipped
    message: str


@dataclass
class Preflight:
    """What the pre-flight launch found: a verdict per check, and every rank's facts."""

    launch_id: str
    nranks: int
    argv: list[str] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    ranks: list[dict] = field(default_factory=list)

    @property
    def fatal(self) -> str:
        """The first fatal verdict's message ("" where none is)."""
        return next((v.message for v in self.verdicts if v.verdict == FATAL), "")

    @property
    def warnings(self) -> list[str]:
        return [f"{v.check}: {v.message}" for v in self.verdicts if v.verdict == WARNING]

    def record(self) -> dict:
        """meta.json's ``preflight``."""
        return {"launch_id": self.launch_id, "nranks": self.nranks, "argv": self.argv,
                "verdicts": [vars(v) for v in self.verdicts], "warnings": self.warnings, "ranks": self.ranks}


def needed(device: str) -> bool:
    """Only GPU suites have a pre-flight."""
    return device in device_kinds()


def probe_launch(launches: list[Launch]) -> Launch:
    """The launch the pre-flight copies: the one over the most nodes (the network matters there),
    then the most ranks."""
    return max(launches, key=lambda one: (one.where.nhosts, one.nranks // one.ranks_per_node, one.nranks))


def uses_xccl(launches: list[Launch]) -> bool:
    """Whether any cell runs on NCCL/RCCL (an xccl implementation, or an xccl phase)."""
    return any(cell.impl == "xccl" or "xccl" in f"{cell.intra} {cell.inter}"
               for launch in launches for cell in launch.cells)


def report_of(output: str) -> dict | None:
    """Rank 0's report (the first marker line), or None where no rank got that far."""
    for line in output.splitlines():
        if line.startswith(MARKER):
            try:
                return json.loads(line[len(MARKER):])
            except ValueError:
                return None
    return None


def judge(report: dict | None, *, sharing_allowed: bool, library: str, xccl: bool, returncode: int = 0,
          tail: str = "") -> list[Verdict]:
    """The verdicts on one pre-flight report (None: the launch ended before rank 0 reported)."""
    if report is None:
        return [Verdict("launch", FATAL, f"the pre-flight launch ended (exit {returncode}) before its ranks "
                                         f"reported; every launch of the suite would fail the same way: {tail}")]
    if "fatal" in report:
        return [Verdict(report["fatal"]["check"], FATAL, report["fatal"]["message"])]
    ranks = report["ranks"]
    verdicts = [Verdict("gtl", OK, "MPI_Init passed with the suite's environment")]
    without = [one for one in ranks if one["reason"]]
    if without:
        first = without[0]
        verdicts.append(Verdict("gpu", WARNING, f"{len(without)} of {len(ranks)} ranks have no GPU (rank "
                                                f"{first['rank']} on {first['host']}: {first['reason']}): "
                                                "their GPU cells will be unsupported"))
    else:
        verdicts.append(Verdict("gpu", OK, f"every rank bound a GPU ({len(ranks)} ranks)"))
    verdicts.append(_local_rank(ranks))
    verdicts.append(_one_gpu_per_rank(ranks, sharing_allowed))
    verdicts.append(_numa(ranks))
    verdicts.append(_network(ranks, library, xccl))
    return verdicts


def _local_rank(ranks: list[dict]) -> Verdict:
    late = [one for one in ranks if one["local_rank_from"].startswith("shared-memory split")]
    if late:
        return Verdict("local_rank", WARNING, f"{len(late)} ranks found no launcher local-rank variable and bind "
                                              f"their GPU after MPI_Init: {late[0]['local_rank_from']}")
    return Verdict("local_rank", OK, f"local rank from {ranks[0]['local_rank_from']}")


def _one_gpu_per_rank(ranks: list[dict], sharing_allowed: bool) -> Verdict:
    seen: dict[tuple[str, str], int] = {}
    for one in ranks:
        if not one.get("pci_bus_id"):
            continue
        key = (one["host"], one["pci_bus_id"])
        if key in seen:
            text = (f"ranks {seen[key]} and {one['rank']} share GPU {one['pci_bus_id']} on {one['host']} (fewer "
                    "visible GPUs than ranks on a node)")
            if sharing_allowed:
                return Verdict("one_gpu_per_rank", OK, f"{text}; the suite allows it (gpu_sharing: yes)")
            return Verdict("one_gpu_per_rank", WARNING, f"{text}: every GPU cell will be refused (unsupported); "
                                                        "give each rank its own GPU, or gpu_sharing: yes")
        seen[key] = one["rank"]
    if not seen:
        return Verdict("one_gpu_per_rank", SKIPPED, "no rank reported its GPU's PCI bus id")
    return Verdict("one_gpu_per_rank", OK, "each rank has a GPU of its own")


def _numa(ranks: list[dict]) -> Verdict:
    away = [one for one in ranks if one.get("cpus_near_gpu") in ("far", "partly")]
    if away:
        one = away[0]
        return Verdict("numa", WARNING, f"{len(away)} ranks run on CPUs not (all) on their GPU's NUMA node (rank "
                                        f"{one['rank']} on {one['host']}: CPUs {one['cpus']}, GPU {one['pci_bus_id']} "
                                        f"on NUMA node {one['numa_node']}): bind each rank next to its GPU (srun "
                                        "--cpu-bind with the site's masks, or mpiexec's binding)")
    if all(one.get("cpus_near_gpu") == "near" for one in ranks):
        return Verdict("numa", OK, "every rank runs on its GPU's NUMA node")
    return Verdict("numa", SKIPPED, "the GPUs' NUMA nodes are not known here (no GPU, or no sysfs entry)")


def _network(ranks: list[dict], library: str, xccl: bool) -> Verdict:
    if not xccl:
        return Verdict("network", SKIPPED, "no cell of the suite runs on NCCL/RCCL")
    seen = ranks[0].get("xccl")
    if seen is None:
        return Verdict("network", SKIPPED, f"{library} was not tried: not every rank has a GPU")
    if seen.get("reason"):
        return Verdict("network", SKIPPED, seen["reason"])
    net = XcclNet(seen["network"], seen["version"], seen["plugin"], seen["missing_plugin"], seen["interfaces"])
    hosts = len({one["host"] for one in ranks})
    if not net.network:
        return Verdict("network", WARNING, f"{library} said nothing of its network (NCCL_DEBUG set below INFO, or "
                                           "NCCL_DEBUG_FILE set by the suite): the rows will not say it either")
    said = f"{library} {net.version or '(version not printed)'} uses {net.summary}"
    if hosts < 2:
        return Verdict("network", OK, f"{said} (one node: inter-node network not exercised)")
    if net.socket:
        return Verdict("network", WARNING, net.socket_warning(library))
    return Verdict("network", OK, said)


def _run(argv: list[str], env: dict[str, str], timeout_s: float, cwd: str) -> tuple[str, int]:
    """The launch's output (stdout then stderr) and exit code; past ``timeout_s`` its whole process
    group is killed (the launcher and what it started here) and the code is -1."""
    try:
        process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   stdin=subprocess.DEVNULL, cwd=cwd, start_new_session=True)
    except OSError as error:
        return str(error), -1
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
        return stdout + stderr, process.returncode
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        return f"{stdout}{stderr}\n(killed after {timeout_s:g} s)", -1


def run(sweep, out, launches: list[Launch] | None = None) -> Preflight | None:
    """The pre-flight of ``sweep`` (a bench.sweep.session.Sweep) on its hosts, with its launcher and
    environment, shaped as the largest of ``launches`` (default: the sweep's; ``--nodes``: those this
    job runs, whose allocation may hold no more nodes); None for a suite without GPUs. BadInput (exit
    2) on a fatal verdict."""
    from bench.run.launchers import PACKAGE_HOME

    device = sweep.suite.device
    launches = sweep.launches if launches is None else launches
    if not needed(device) or not launches:
        return None
    launch = probe_launch(launches)
    xccl = uses_xccl(launches)
    program = [sys.executable, "-m", "bench.run.preflight_probe", device, "1" if xccl else "0"]
    argv, env = sweep.job_command(launch, "", program)
    timeout_s = min(TIMEOUT_S, sweep.suite.timeout_s)
    output, returncode = _run(argv, {**os.environ, **env}, timeout_s, PACKAGE_HOME)
    tail = " | ".join(line for line in output.splitlines()[-6:] if line.strip())[-600:]
    return conclude(sweep, launch, argv, report_of(output), out, returncode, tail, xccl)


def conclude(sweep, launch: Launch, argv: list[str], report: dict | None, out, returncode: int = 0,
             tail: str = "", xccl: bool | None = None) -> Preflight:
    """The verdicts on rank 0's ``report``, printed; BadInput (exit 2) on a fatal one. ``xccl``: whether
    the launches checked run NCCL/RCCL cells (default: any of the sweep's)."""
    from rich.markup import escape

    from bench.errors import BadInput
    from collectives.transports.xccl.communicators import library_name

    device = sweep.suite.device
    preflight = Preflight(launch.launch_id, launch.nranks, argv,
                          judge(report, sharing_allowed=sweep.suite.gpu_sharing == "yes",
                                library=library_name(device),
                                xccl=uses_xccl(sweep.launches) if xccl is None else xccl,
                                returncode=returncode, tail=tail),
                          (report or {}).get("ranks", []))
    if preflight.fatal:
        raise BadInput("pre-flight", preflight.fatal)
    for verdict in preflight.verdicts:
        colour = {OK: "green", WARNING: "yellow"}.get(verdict.verdict, "dim")
        out.print(f"[{colour}]pre-flight {verdict.check}: {verdict.verdict}[/{colour}]: {escape(verdict.message)}",
                  highlight=False, soft_wrap=True)
    return preflight
