"""Site profiles (``suites/sites/*.yaml``): what a cluster needs of every job, as data.

A profile holds the batch header a site asks for (the GPU request, a constraint, the modules to
load, a prologue), the launcher flags (srun's CPU and GPU binding, mpiexec's), and the launch
environment in two parts: ``env.mpi`` reaches every launch, ``env.xccl`` only the launches whose
cells call NCCL/RCCL, so a vendor library's tuning never changes what an MPI cell measures (a launch
that holds both kinds is split in two, ``<id>`` and ``<id>-xccl``). Values may name the launch's
size, ``{nodes}``, ``{ranks}``, ``{ranks_per_node}``, ``{gpus_per_node}``, ``{cpus_per_task}`` (the
node's usable CPUs shared by its ranks, from ``facts``), and ``at_scale`` entries add or replace
variables from a node count up. ``facts`` are the site's nodes and policies as data (cores, usable
cores, GPUs and their NUMA nodes, the time limit per node count, the account rule), against which
every job is checked before it is written (bench/driver/slurm.py ``check_job``); ``gpu`` and ``cpu``
hold what only a GPU suite, or only a CPU one, gets (``for_device``). A suite names its site (``site: frontier``, or a
path), or ``run sweep --site`` does; docs/CLUSTERS-SITES.md has the three shipped here and what they cite.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, ValidationError, model_validator

from bench.errors import BadInput
from bench.files import project_folder
from bench.plan.cells import Cell, Launch
from bench.plan.schema import Strict, one_or_many
from bench.plan.slurm_options import option_name, sbatch_option, srun_option
from bench.plan.suite import _env_problem, _env_value, _pydantic_error_line
from bench.plan.suite_files import read_yaml
from collectives.memory import device_kinds
from collectives.memory.backends import ENV_GPU_MAP
from collectives.schedules.tuning import AUTO

#: the placeholders a profile's value may hold, filled per launch
PLACEHOLDERS = ("nodes", "ranks", "ranks_per_node", "gpus_per_node", "cpus_per_task")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
#: the implementation and the hierarchical phase that call the vendor library (NCCL/RCCL)
VENDOR_LIBRARY = "xccl"
#: the suffix of the launch id of a launch's NCCL/RCCL cells when the site keeps their environment apart
XCCL_SUFFIX = "-xccl"


def sites_dir() -> Path:
    return project_folder("suites/sites")


def known_sites() -> list[str]:
    return sorted(path.stem for path in sites_dir().glob("*.yaml"))


def _templated(value: str) -> str:
    """A value whose ``{...}`` are all placeholders this fills (a typo is caught when the profile is read)."""
    for name in _PLACEHOLDER.findall(value):
        if name not in PLACEHOLDERS:
            raise ValueError(f"{value!r}: {{{name}}} is not a placeholder; a value may hold "
                             f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)}")
    return value


def _printable(value: str) -> str:
    if not value.isprintable():
        raise ValueError(f"{value!r}: a line break or other control character cannot go into a job script")
    return value


def _env_entry(env: dict[str, str]) -> dict[str, str]:
    for name, value in env.items():
        problem = _env_problem(name, value)
        if problem:
            raise ValueError(f"{name}: {problem}")
        _templated(value)
    return env


def _srun_option(value: str) -> str:
    return _templated(srun_option(value))


def _sbatch_option(value: str) -> str:
    return _templated(sbatch_option(value))


def _mpiexec_word(value: str) -> str:
    # one argv word each ([--bind-to, core]): Open MPI and hydra do not all take --name=value
    if not value or any(char.isspace() for char in value):
        raise ValueError(f"{value!r}: one mpiexec argument per list item, without spaces")
    return _templated(_printable(value))


EnvBlock = dict[str, Annotated[str, BeforeValidator(lambda value: str(_env_value(value)))]]
Line = Annotated[str, AfterValidator(_printable), Field(min_length=1, max_length=4096)]
ModuleName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._+/-]*$", max_length=200)]


class LaunchEnv(Strict):
    """The launch environment, kept apart: MPI's for every launch, NCCL/RCCL's for theirs only, and
    NCCL/RCCL's for theirs that span nodes (``xccl_across_nodes``: ``NCCL_NET`` forces the network plugin,
    so a missing plugin fails the launch instead of falling back to TCP sockets; a one-node launch must
    not get it: the RCCL plugin does not start in a one-node job, OLCF's Frontier guide)."""

    mpi: Annotated[EnvBlock, AfterValidator(_env_entry)] = Field(default_factory=dict)
    xccl: Annotated[EnvBlock, AfterValidator(_env_entry)] = Field(default_factory=dict)
    xccl_across_nodes: Annotated[EnvBlock, AfterValidator(_env_entry)] = Field(default_factory=dict)

    def merged(self, other: LaunchEnv) -> LaunchEnv:
        """This environment with ``other``'s variables added (or replacing), block by block."""
        return LaunchEnv(mpi={**self.mpi, **other.mpi}, xccl={**self.xccl, **other.xccl},
                         xccl_across_nodes={**self.xccl_across_nodes, **other.xccl_across_nodes})


class AtScale(LaunchEnv):
    """Variables that launches of ``min_nodes`` nodes or more take on top of (or instead of) ``env``."""

    min_nodes: int = Field(ge=1)


class Batch(Strict):
    """The batch job's header and its first lines (``--launcher sbatch``)."""

    #: #SBATCH options of every job at this site (the GPU request, a constraint, a QOS)
    options: list[Annotated[str, AfterValidator(_sbatch_option)]] = Field(default_factory=list)
    #: ``module load`` of each, in order, before the sweep starts
    modules: Annotated[list[ModuleName], BeforeValidator(one_or_many)] = Field(default_factory=list)
    #: shell lines after the modules (an ``export``, a ``source``)
    prologue: Annotated[list[Line], BeforeValidator(one_or_many)] = Field(default_factory=list)
    #: shell lines after those, in a job whose launches call NCCL/RCCL only (the network plugin's path)
    xccl_prologue: Annotated[list[Line], BeforeValidator(one_or_many)] = Field(default_factory=list)
    #: the Slurm fields a user must give for this site (suite ``slurm`` block or the flags)
    requires: list[Annotated[str, Field(pattern=r"^(account|partition|time)$")]] = Field(default_factory=list)


class GpuOnly(Strict):
    """What a site asks of the jobs and launches of a GPU suite only (``device`` cuda or rocm): the
    GPU request, which a CPU partition refuses and a GPU one would hold for nothing."""

    batch: list[Annotated[str, AfterValidator(_sbatch_option)]] = Field(default_factory=list)
    srun: list[Annotated[str, AfterValidator(_srun_option)]] = Field(default_factory=list)
    mpiexec: list[Annotated[str, AfterValidator(_mpiexec_word)]] = Field(default_factory=list)
    #: variables of a GPU suite's launches only (GPU-aware MPI, the GPU order): a CPU suite gets none
    env: LaunchEnv = LaunchEnv()


class NodeFacts(Strict):
    """One kind of node of the site, as its guide describes it (each fact cited in ``sources``)."""

    cores: int = Field(ge=1)
    threads_per_core: int = Field(1, ge=1)
    #: the cores a job may use (Frontier's low-noise mode, -S 8, keeps one core of each L3: 56 of 64)
    usable_cores: int | None = Field(None, ge=1)
    #: what one CPU of srun's --cpus-per-task counts there: a core, or a hardware thread
    slurm_cpu: str = Field("thread", pattern=r"^(core|thread)$")
    gpus: int = Field(0, ge=0)
    #: the GPUs' kind (``cuda``, ``rocm``): what the first-run kit measures on by default
    device: str | None = Field(None, pattern=r"^(cuda|rocm)$")
    #: the NUMA node of each GPU, by index (what the pre-flight's table is read against)
    gpu_numa: list[int] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> NodeFacts:
        if self.usable_cores is not None and self.usable_cores > self.cores:
            raise ValueError(f"usable_cores {self.usable_cores} is more than cores {self.cores}")
        if self.gpu_numa and len(self.gpu_numa) != self.gpus:
            raise ValueError(f"gpu_numa names {len(self.gpu_numa)} GPUs, gpus is {self.gpus}")
        return self

    @property
    def usable_cpus(self) -> int:
        """The CPUs of srun's counting that a job's tasks may hold on one node."""
        cores = self.usable_cores or self.cores
        return cores * (self.threads_per_core if self.slurm_cpu == "thread" else 1)

    def cpus_per_task(self, ranks_per_node: int) -> int:
        """The usable CPUs shared by ``ranks_per_node`` tasks, whole cores each where Slurm counts
        threads (at least one CPU: a node asked for more tasks than CPUs is refused by ``fit``)."""
        share = self.usable_cpus // max(ranks_per_node, 1)
        if self.slurm_cpu == "thread" and share >= self.threads_per_core:
            share -= share % self.threads_per_core
        return max(share, 1)

    def describe(self) -> str:
        usable = f"{self.usable_cores} usable of {self.cores} cores" if self.usable_cores else f"{self.cores} cores"
        unit = (f"{self.usable_cpus} CPUs ({usable} x {self.threads_per_core} hardware threads)"
                if self.slurm_cpu == "thread" else f"{self.usable_cpus} CPUs (Slurm counts cores: {usable})")
        return unit


class TimeLimit(Strict):
    """The longest job the site runs for a node count (and, where it has several, a QOS)."""

    min_nodes: int = Field(1, ge=1)
    max_nodes: int | None = Field(None, ge=1)
    #: the ``--qos`` this limit is of (none: whatever the job's)
    qos: str | None = None
    #: a Slurm time: minutes, hours:minutes:seconds, days-hours[:minutes[:seconds]]
    max_time: str


class SiteFacts(Strict):
    """The site's nodes and policies as data: what every job is checked against before it is written."""

    #: the nodes of the site's jobs (its GPU nodes where it has both kinds; ``cpu.node`` for CPU suites)
    node: NodeFacts | None = None
    #: the per-node-count (and per-QOS) time policy, first match wins
    time_limits: list[TimeLimit] = Field(default_factory=list)
    #: how the accounts of GPU jobs end (NERSC: ``_g``); a GPU suite given another account is refused
    gpu_account_suffix: str | None = Field(None, pattern=r"^[A-Za-z0-9._-]+$")
    #: variables that make the network report its counters at the end of a job (the first-run kit sets them)
    network_counters: Annotated[EnvBlock, AfterValidator(_env_entry)] = Field(default_factory=dict)

    def time_limit(self, nodes: int, qos: str | None) -> TimeLimit | None:
        for limit in self.time_limits:
            if limit.qos not in (None, qos):
                continue
            if limit.min_nodes <= nodes and (limit.max_nodes is None or nodes <= limit.max_nodes):
                return limit
        return None


class CpuOnly(Strict):
    """What a site asks of the jobs and launches of a CPU suite only (``device: host``): the CPU
    nodes' constraint and binding, and the CPU nodes' facts where they differ from ``facts.node``."""

    batch: list[Annotated[str, AfterValidator(_sbatch_option)]] = Field(default_factory=list)
    srun: list[Annotated[str, AfterValidator(_srun_option)]] = Field(default_factory=list)
    mpiexec: list[Annotated[str, AfterValidator(_mpiexec_word)]] = Field(default_factory=list)
    node: NodeFacts | None = None


class Site(Strict):
    #: a name for the run's records (meta.json ``site``)
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=80)
    description: str = ""
    #: the MPI library the site's ranks must load, as MPI_Get_library_version names it ("Cray MPICH",
    #: "Open MPI"): the pre-flight refuses another (bench/driver/preflight.py, docs/PREFLIGHT.md)
    mpi_library: str | None = Field(None, min_length=1, max_length=80)
    #: where the values come from: the site's guides, the job scripts they follow
    sources: list[Annotated[str, Field(min_length=1, max_length=1000)]] = Field(default_factory=list)
    #: GPUs (or GCDs) per node: ``{gpus_per_node}`` in a value
    gpus_per_node: int | None = Field(None, ge=1)
    #: GPU suites: the GPU local rank k takes, an index into the GPUs it sees (all of the node's), as
    #: ``$PCCL_BENCH_GPU_MAP``; empty: local rank k takes GPU k. Not CUDA_VISIBLE_DEVICES: Slurm's
    #: gres/gpu sets that per step and an exported reordering never reaches the ranks
    gpu_map: list[Annotated[int, Field(ge=0)]] = Field(default_factory=list)
    batch: Batch = Batch()
    #: srun options of every launch (``--launcher srun``, and srun inside the batch job)
    srun: list[Annotated[str, AfterValidator(_srun_option)]] = Field(default_factory=list)
    #: mpiexec arguments of every launch (``--launcher mpiexec``), one word each, before ``-n``
    mpiexec: list[Annotated[str, AfterValidator(_mpiexec_word)]] = Field(default_factory=list)
    env: LaunchEnv = LaunchEnv()
    at_scale: list[AtScale] = Field(default_factory=list)
    #: options and variables added for GPU suites only, after the ones above (``for_device``)
    gpu: GpuOnly = GpuOnly()
    #: options added for CPU suites only (``for_device``), and their nodes' facts
    cpu: CpuOnly = CpuOnly()
    facts: SiteFacts = SiteFacts()

    @model_validator(mode="after")
    def _gpus_named(self) -> Site:
        texts = [*self.batch.options, *self.srun, *self.mpiexec, *self.gpu.batch, *self.gpu.srun, *self.gpu.mpiexec,
                 *self.cpu.batch, *self.cpu.srun, *self.cpu.mpiexec,
                 *(value for block in [self.env, self.gpu.env, *self.at_scale]
                   for value in [*block.mpi.values(), *block.xccl.values(), *block.xccl_across_nodes.values()])]
        if self.gpus_per_node is None and any("{gpus_per_node}" in text for text in texts):
            raise ValueError("{gpus_per_node} is used but gpus_per_node is not given")
        if self.facts.node is None and self.cpu.node is None and any("{cpus_per_task}" in text for text in texts):
            raise ValueError("{cpus_per_task} is used but facts.node (the node's cores) is not given")
        if self.gpu_map and sorted(self.gpu_map) != list(range(self.gpus_per_node or 0)):
            raise ValueError(f"gpu_map: {self.gpu_map} is not an order of the {self.gpus_per_node or 0} GPUs of "
                             "gpus_per_node (each index 0..gpus_per_node-1 once)")
        return self

    def for_device(self, device: str) -> Site:
        """The profile as a suite of ``device`` uses it: the ``gpu`` options and variables in their
        sections for a GPU suite; for a host one the ``cpu`` options and the CPU nodes' facts instead
        (a suite has one device, so every job and launch alike)."""
        if device not in device_kinds():
            cpu = self.cpu
            return self.model_copy(update={
                "batch": self.batch.model_copy(update={"options": [*self.batch.options, *cpu.batch]}),
                "srun": [*self.srun, *cpu.srun], "mpiexec": [*self.mpiexec, *cpu.mpiexec],
                "facts": self.facts.model_copy(update={"node": cpu.node or self.facts.node}),
                "gpu": GpuOnly(), "cpu": CpuOnly()})
        gpu = self.gpu
        env = self.env.merged(gpu.env)
        return self.model_copy(update={
            "batch": self.batch.model_copy(update={"options": [*self.batch.options, *gpu.batch]}),
            "srun": [*self.srun, *gpu.srun], "mpiexec": [*self.mpiexec, *gpu.mpiexec], "env": env,
            "gpu": GpuOnly(), "cpu": CpuOnly()})

    # ------------------------------------------------------------------ per launch

    def fill(self, text: str, nodes: int, ranks: int, ranks_per_node: int) -> str:
        """``text`` with a launch's placeholders filled."""
        node = self.facts.node or self.cpu.node
        values = {"nodes": nodes, "ranks": ranks, "ranks_per_node": ranks_per_node,
                  "gpus_per_node": self.gpus_per_node,
                  "cpus_per_task": node.cpus_per_task(ranks_per_node) if node else None}
        return _PLACEHOLDER.sub(lambda match: str(values[match.group(1)]), text)

    def fill_for(self, text: str, launch: Launch) -> str:
        return self.fill(text, launch.where.nhosts, launch.nranks, launch.where.ranks_per_host)

    def launcher_options(self, section: str, nodes: int, ranks: int, ranks_per_node: int,
                         given: tuple[str, ...] = ()) -> list[str]:
        """The profile's options for one launcher (``srun``, ``mpiexec``), filled for a launch; an
        option the suite gives as well (``given``, by its name) is the suite's."""
        names = {option_name(option) for option in given}
        return [self.fill(option, nodes, ranks, ranks_per_node) for option in getattr(self, section)
                if option_name(option) not in names]

    def launch_env(self, launch: Launch) -> dict[str, str]:
        """The site's variables for one launch: MPI's, then NCCL/RCCL's where its cells call the
        vendor library (and ``xccl_across_nodes`` where it spans nodes), then the ``at_scale`` entries
        its node count reaches, in order."""
        vendor = any(calls_vendor_library(cell) for cell in launch.cells)
        across = launch.where.nhosts > 1
        env: dict[str, str] = {}
        for block in [self.env, *sorted((entry for entry in self.at_scale if launch.where.nhosts >= entry.min_nodes),
                                        key=lambda entry: entry.min_nodes)]:
            env.update(block.mpi)
            if vendor:
                env.update(block.xccl)
                env.update(block.xccl_across_nodes if across else {})
        if self.gpu_map and any(cell.device in device_kinds() for cell in launch.cells):
            env[ENV_GPU_MAP] = ",".join(str(index) for index in self.gpu_map)
        return {name: self.fill_for(value, launch) for name, value in env.items()}

    def batch_options(self, launches: list[Launch], given: tuple[str, ...] = ()) -> list[str]:
        """The profile's #SBATCH options for a job of ``launches`` (filled for its largest launch);
        an option the suite gives as well (``given``: its sbatch_args) is the suite's."""
        largest = max(launches, key=lambda launch: launch.where.nhosts)
        names = {option_name(option) for option in given}
        return [self.fill_for(option, largest) for option in self.batch.options if option_name(option) not in names]

    def job_lines(self, launches: list[Launch]) -> list[str]:
        """The first commands of a batch job of ``launches``: the modules, the prologue, and the NCCL/RCCL
        prologue where one of its launches calls the vendor library."""
        vendor = any(calls_vendor_library(cell) for launch in launches for cell in launch.cells)
        return [*(f"module load {module}" for module in self.batch.modules), *self.batch.prologue,
                *(self.batch.xccl_prologue if vendor else [])]

    def cpu_binding(self, section: str) -> str:
        """The CPU binding the profile asks launcher ``section``'s launches for (srun's ``--cpu-bind``,
        mpiexec's ``--bind-to``/``-bind-to``), "" where it asks for none: then nothing claims a rank sits
        next to its GPU, and the pre-flight only warns where one does not."""
        if section == "srun":
            for option in [*self.srun, *self.gpu.srun]:
                if option_name(option) == "--cpu-bind" and not option.endswith("=none"):
                    return option.split(":", 1)[0]
        if section == "mpiexec":
            words = [*self.mpiexec, *self.gpu.mpiexec]
            for index, word in enumerate(words):
                if word.lstrip("-") == "bind-to" and index + 1 < len(words) and words[index + 1] != "none":
                    return f"{word} {words[index + 1]}"
        return ""

    @property
    def keeps_xccl_apart(self) -> bool:
        return any(block.xccl or block.xccl_across_nodes for block in [self.env, *self.at_scale])

    def split(self, launches: list[Launch]) -> list[Launch]:
        """Each launch whose cells call NCCL/RCCL and others too, as two: the MPI cells without the
        vendor library's environment, then the NCCL/RCCL cells with it (read at MPI_Init and at the
        communicator's creation, so it cannot change per cell)."""
        if not self.keeps_xccl_apart:
            return launches
        out = []
        for launch in launches:
            vendor = [cell for cell in launch.cells if calls_vendor_library(cell)]
            others = [cell for cell in launch.cells if not calls_vendor_library(cell)]
            if not vendor or not others:
                out.append(launch)
                continue
            out += [replace(launch, cells=others),
                    replace(launch, launch_id=launch.launch_id + XCCL_SUFFIX, cells=vendor)]
        return out


def calls_vendor_library(cell: Cell) -> bool:
    """Whether a cell may call NCCL/RCCL: the xccl implementation, or a hierarchical phase of it
    (``auto`` phases on a GPU may pick it)."""
    if cell.impl == VENDOR_LIBRARY:
        return True
    phases = (cell.intra, cell.inter)
    return VENDOR_LIBRARY in phases or (cell.device != "host" and AUTO in phases)


def site_path(name_or_path: str) -> Path:
    """A path as given, or a bare name like ``frontier`` from suites/sites/."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or "/" in name_or_path:
        return path
    return sites_dir() / f"{name_or_path}.yaml"


def load_site(name_or_path: str, where: str) -> Site:
    """The validated profile, or one line (exit 2) naming the file, the field and the value."""
    path = site_path(name_or_path)
    raw: Any = read_yaml(path, f"site profile (named by {where})", known_sites())
    if not isinstance(raw, dict):
        raise BadInput(str(path), f"a site profile is a YAML mapping of fields, got {type(raw).__name__}")
    try:
        return Site.model_validate(raw)
    except ValidationError as error:
        raise BadInput("", _pydantic_error_line(str(path), error)) from None
