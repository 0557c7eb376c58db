"""Suites: YAML sweep definitions, validated against a typed schema.

Every error names the file, the field, the value and what was expected, and
becomes one line and exit code 2 at the CLI edge.
"""

from __future__ import annotations

import os
from dataclasses import Field as DataclassField
from dataclasses import fields
from typing import Annotated, Any, Literal, get_type_hints

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from bench.errors import BadInput
from bench.plan.hosts import parse_host
from bench.plan.schema import Size, Strict, none_or_many, one_or_many
from bench.plan.sizes import cell_value
from bench.plan.slurm_options import Slurm
from collectives.call import BLOCKING, MODES
from collectives.dtypes import DTYPES, OPS
from collectives.impls import IMPLEMENTATIONS
from collectives.memory import KINDS
from collectives.schedules import algorithms, hier, tuning
from collectives.spec import COLLECTIVES
from collectives.timing_plan import MAX_TURNS, TimingPlan

Collective = Literal[COLLECTIVES]  # collectives/spec: one file per collective
Placement = Literal["out_of_place", "in_place"]
Buffers = Literal["warm", "rotate", "cold"]  # bench/rank/buffers.py: today's, nccl-tests', IMB -off_cache
CallMode = Literal[MODES]  # bench/plan/cells.py: blocking, nonblocking
Dtype = Literal[tuple(DTYPES)]  # type: ignore[valid-type]
Op = Literal[tuple(OPS)]  # type: ignore[valid-type]


class SizeSweep(Strict):
    #: smallest message, e.g. 8B
    min: Size = Field(ge=1)
    #: largest message, e.g. 4MiB
    max: Size = Field(ge=1)
    #: each size is the previous times this
    factor: int = Field(2, ge=2)
    #: "total": nccl-tests size (all-gather output, reduce-scatter input, all-reduce buffer);
    #: "per_rank": bytes each rank contributes (OSU)
    semantics: Literal["total", "per_rank"] = "total"


def _timing_field(option: DataclassField) -> tuple[Any, Any]:
    """A ``timing:`` field of the schema from the plan's field: its type (``choices``: a Literal of
    them), its default, its bounds and its documentation."""
    rules = dict(option.metadata)
    doc, choices = rules.pop("doc"), rules.pop("choices", None)
    kind = Literal[choices] if choices else get_type_hints(TimingPlan)[option.name]
    return kind, Field(option.default, description=doc, **rules)


#: the suite's ``timing`` block: the fields, defaults, bounds and docs of collectives/timing_plan.py's
#: TimingPlan, which the plan JSON carries to the worker (``TimingPlan(**timing.model_dump())``)
Timing = create_model("Timing", __base__=Strict, __doc__="How every cell of the suite is timed.",
                      **{option.name: _timing_field(option) for option in fields(TimingPlan)})


class ImplEntry(Strict):
    impl: str
    #: run this entry only for these collectives (default: all of the suite's)
    collectives: Annotated[list[Collective], BeforeValidator(one_or_many)] = Field(default_factory=list)
    #: schedules to run (implementations with one algorithm ignore it)
    algorithms: Annotated[list[str], BeforeValidator(one_or_many)] = Field(default_factory=list)
    #: pccl-hier only: intra-node phase algorithms (ring, rd, bruck, mpi, "rs+ag" pairs)
    intra: Annotated[list[str], BeforeValidator(one_or_many)] = Field(default_factory=list)
    #: pccl-hier only: inter-node (rail) phase algorithms
    inter: Annotated[list[str], BeforeValidator(one_or_many)] = Field(default_factory=list)

    def launch_setting(self) -> tuple:
        """What decides the launches this arm runs in: arms with equal settings share them."""
        return tuple(sorted((name, str(value)) for name, value in self.env.items())), self.install

    @field_validator("impl")
    @classmethod
    def _known_impl(cls, name: str) -> str:
        if name not in IMPLEMENTATIONS:
            raise ValueError(f"unknown implementation {name!r}; expected one of {sorted(IMPLEMENTATIONS)}")
        return name


def _env_value(value: Any) -> Any:
    if value is None or isinstance(value, (dict, list)):
        raise ValueError(f"an environment value is a string or a number, not {type(value).__name__}")
    return value


class Arm(Strict):
    """One side of a same-job comparison (``gate --arms``, ``pccl-bench ab``)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=40)
    #: environment read at MPI_Init (MPI settings): an arm with its own env runs in launches of its
    #: own, alternating with the other arm's launches; arms with the same env share launches and
    #: take turns cell by cell
    env: dict[str, Annotated[str | int | float, BeforeValidator(_env_value)]] = Field(default_factory=dict)
    #: another install of this project whose worker measures this arm (a venv, a checkout with a
    #: .venv, or a python executable; relative to the working directory): a branch against main in
    #: one run. Launches of its own, alternating with the other arm's, as for ``env``
    install: str | None = Field(None, min_length=1, max_length=4096)
    #: what this arm measures instead of the suite's implementation entry (same launch, in turns)
    impl: str | None = None
    algorithm: str | None = None
    intra: str | None = None
    inter: str | None = None

    def launch_setting(self) -> tuple:
        """What decides the launches this arm runs in: arms with equal settings share them."""
        return tuple(sorted((name, str(value)) for name, value in self.env.items())), self.install

    @field_validator("impl")
    @classmethod
    def _known_impl(cls, name: str | None) -> str | None:
        if name is not None and name not in IMPLEMENTATIONS:
            raise ValueError(f"unknown implementation {name!r}; expected one of {sorted(IMPLEMENTATIONS)}")
        return name


def _host(value: Any) -> Any:
    if isinstance(value, str):
        parse_host(value)
    return value


def _yes_no(value: Any) -> Any:
    """YAML reads a bare yes/no as a boolean."""
    return {True: "yes", False: "no"}.get(value, value) if isinstance(value, bool) else value


def _impl_entry(value: Any) -> Any:
    return {"impl": value} if isinstance(value, str) else value


#: cell columns a ``select:`` entry may name; matched before arms, so impl/algorithm/intra/inter
#: are the suite entry's (an arm that sets them measures the same selected cells)
SELECTABLE = ("collective", "impl", "algorithm", "intra", "inter", "nranks", "ranks_per_node", "dtype", "op",
              "placement", "buffers", "mode", "count_per_rank", "bytes_per_rank", "bytes_total")


def _selection(entry: Any) -> dict[str, tuple]:
    """One ``select:`` entry: column -> the values it may take (sizes with units, counts as numbers)."""
    if not isinstance(entry, dict) or not entry:
        raise ValueError("each entry maps cell columns to a value or a list of values")
    out = {}
    for name, value in entry.items():
        if name not in SELECTABLE:
            raise ValueError(f"unknown column {name!r}; an entry takes {', '.join(SELECTABLE)}")
        values = value if isinstance(value, list) else [value]
        if not values or any(v is None or isinstance(v, (dict, list, bool)) for v in values):
            raise ValueError(f"{name}: a value or a list of values, got {value!r}")
        out[name] = tuple(cell_value(name, v) for v in values)
    return out


class Suite(Strict):
    #: names the run folder: letters, digits, ".", "_" and "-"
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=80)
    description: str = ""
    collectives: Annotated[list[Collective], BeforeValidator(one_or_many)] = Field(min_length=1)
    implementations: Annotated[list[Annotated[ImplEntry, BeforeValidator(_impl_entry)]],
                               BeforeValidator(one_or_many)] = Field(min_length=1)
    #: rank counts (GPU counts on GPU runs), one MPI job each
    ranks: Annotated[list[Annotated[int, Field(ge=1)]], BeforeValidator(one_or_many)] = Field(min_length=1)
    #: ranks per node, one node shape or a list of them (a sweep axis: 8 ranks as 2x4 and 4x2);
    #: on one host this makes virtual nodes. Omitted: one node holds all ranks. With a list, a shape
    #: runs with every rank count it divides (and is skipped for the others)
    ranks_per_node: Annotated[list[Annotated[int, Field(ge=1)]] | None,
                              BeforeValidator(none_or_many)] = Field(None, min_length=1)
    #: the hosts the launches go to, ``name`` or ``name:slots`` (MPICH's form); a launch takes as
    #: many as it has nodes, the same number of ranks on each, in blocks. Empty (and no hostfile):
    #: this host, or the Slurm allocation under srun (docs/LAB.md, "Named hosts")
    hosts: Annotated[list[Annotated[str, AfterValidator(_host)]], BeforeValidator(one_or_many)] = Field(
        default_factory=list)
    #: instead of ``hosts``: an MPICH (host:slots) or Open MPI (host slots=N) hostfile
    hostfile: str | None = Field(None, min_length=1, max_length=4096)
    #: where the buffers live: a memory kind of collectives/memory (host, cuda, rocm)
    device: Literal[tuple(KINDS)] = "host"  # type: ignore[valid-type]
    sizes: SizeSweep
    dtype: Annotated[list[Dtype], BeforeValidator(one_or_many)] = ["float32"]
    op: Annotated[list[Op], BeforeValidator(one_or_many)] = ["sum"]
    placement: Annotated[list[Placement], BeforeValidator(one_or_many)] = ["out_of_place"]
    #: where each call's buffers are: warm (the same every call), rotate (nccl-tests: the start
    #: offset walks an allocation of the largest size), cold (IMB -off_cache: a set of buffers larger
    #: than the last-level cache); docs/SWEEPS.md, "Buffers"
    buffers: Annotated[list[Buffers], BeforeValidator(one_or_many)] = ["warm"]
    #: blocking calls, or non-blocking ones posted and waited for with OSU's overlap measured (the pure
    #: time, then a compute of that length between post and wait: docs/SWEEPS.md); one or a list
    mode: Annotated[list[CallMode], BeforeValidator(one_or_many)] = [BLOCKING]
    timing: Timing = Timing()
    #: check every result bit for bit before timing it
    check: bool = True
    #: run every launch this many times, as separate MPI jobs (gates pool samples over launches)
    repeats: int = Field(1, ge=1, le=100)
    #: seconds one MPI job may run before it is killed
    timeout_s: float = Field(300, gt=0)
    #: extra environment for every rank (recorded in the table's provenance)
    env: dict[str, Annotated[str | int | float, BeforeValidator(_env_value)]] = Field(default_factory=dict)
    #: same-job comparison: two (or more) arms measured in alternation in the same run
    #: (docs/GATE.md, "Same-job comparison"); every cell is measured once per arm
    arms: list[Arm] = Field(default_factory=list)
    #: measure only the cells that one of these entries matches (column: value or list of values),
    #: e.g. the re-measurement of the cells a gate flagged (``pccl-bench ab --confirm``); empty: all
    select: list[Annotated[dict[str, tuple], BeforeValidator(_selection)]] = Field(default_factory=list)
    #: Slurm requests for ``--launcher srun|sbatch``
    slurm: Slurm = Slurm()
    #: the cluster's site profile, a name from suites/sites/ or a path (bench/plan/site.py): the batch
    #: header, the launcher's binding flags, the MPI and NCCL/RCCL environments (docs/CLUSTERS.md)
    site: str | None = Field(None, min_length=1, max_length=4096)
    #: GPU suites: hand device buffers to MPI (yes), stage them through pinned host memory (no), or
    #: ask the library (auto); every rank gets it as PCCL_BENCH_GPU_AWARE (collectives/memory/gpu_aware.py)
    gpu_aware: Annotated[Literal["auto", "yes", "no"], BeforeValidator(_yes_no)] = "auto"
    #: GPU suites: each rank's GPU, "local" (local rank modulo the visible GPUs) or one device index;
    #: every rank gets it as PCCL_BENCH_GPU
    gpu_bind: Literal["local"] | Annotated[int, Field(ge=0)] = "local"
    #: GPU suites: "yes" lets ranks of a node share a GPU (fewer visible GPUs than ranks); "no" (the
    #: default) refuses every GPU cell of such a launch (unsupported, with the ranks and the GPU);
    #: NCCL/RCCL refuse a shared GPU either way. Every rank gets it as PCCL_BENCH_GPU_SHARING
    gpu_sharing: Annotated[Literal["yes", "no"], BeforeValidator(_yes_no)] = "no"

    @model_validator(mode="after")
    def _hosts_or_hostfile(self) -> Suite:
        if self.hosts and self.hostfile:
            raise ValueError("give hosts or hostfile, not both")
        return self

    @model_validator(mode="after")
    def _distinct_arms(self) -> Suite:
        names = [arm.name for arm in self.arms]
        if len(set(names)) != len(names):
            raise ValueError(f"arms: names must differ, got {names}")
        if len(names) == 1:
            raise ValueError("arms: give at least two arms (a baseline and a candidate), or none")
        shared: dict[tuple, list[str]] = {}
        for arm in self.arms:  # arms of one environment and install share launches (bench.plan.cells.with_arms)
            shared.setdefault(arm.launch_setting(), []).append(arm.name)
        crowded = next((group for group in shared.values() if len(group) > MAX_TURNS), None)
        if crowded and self.timing.turns == "iteration":
            raise ValueError(f"arms: {', '.join(crowded)} share a launch, and at most {MAX_TURNS} arms are timed in "
                             f"turns (timing.turns: iteration); give fewer, or timing.turns: cell")
        return self

    @model_validator(mode="after")
    def _gpu_settings_to_env(self) -> Suite:
        for field, variable, default in (("gpu_aware", "PCCL_BENCH_GPU_AWARE", "auto"),
                                         ("gpu_bind", "PCCL_BENCH_GPU", "local"),
                                         ("gpu_sharing", "PCCL_BENCH_GPU_SHARING", "no")):
            value = str(getattr(self, field))
            if str(self.env.get(variable, value)) != value:
                raise ValueError(f"{field}: {value!r} contradicts env.{variable}={self.env[variable]!r}")
            if value != default:
                self.env[variable] = value
        return self


def _format_location(loc: tuple) -> str:
    return ".".join(str(part) for part in loc) or "(top level)"


def _pydantic_error_line(path: str, error: ValidationError) -> str:
    first = error.errors()[0]
    loc = tuple(part for part in first["loc"] if not str(part).startswith("function-"))
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = "unknown field"
    elif first["type"] == "missing":
        return f"{path}: {_format_location(loc)}: required field is missing"
    value = first.get("input")
    # The whole suite (a model-level error) is not worth repeating; any nested value is.
    whole = not loc and isinstance(value, dict)
    shown = "" if whole or message.startswith(repr(value)) else f" (got {_shown(value)})"
    return f"{path}: {_format_location(loc)}: {message}{shown}"


def _check_duplicates(path: str, suite: Suite) -> None:
    """A value listed twice would plan the same cells twice; say so instead of guessing."""
    lists = {name: getattr(suite, name) for name in ("collectives", "ranks", "dtype", "op", "placement", "buffers",
                                                     "mode")}
    lists["ranks_per_node"] = suite.ranks_per_node or []
    lists["implementations"] = suite.implementations
    for index, entry in enumerate(suite.implementations):
        for name in ("collectives", "algorithms", "intra", "inter"):
            lists[f"implementations.{index}.{name}"] = getattr(entry, name)
    for field, values in lists.items():
        for position, value in enumerate(values):
            if value in values[:position]:
                shown = value.model_dump(exclude_defaults=True) if isinstance(value, BaseModel) else value
                raise BadInput(path, f"{field}.{position}: {shown!r} is listed twice")


#: Linux's MAX_ARG_STRLEN: the longest single NAME=value (or argv string) execve takes
MAX_ENV_STRING = 32 * 4096


def _env_problem(name: str, value: str) -> str | None:
    """Why the operating system (or the launcher's argv) would refuse ``name=value``; None if fine."""
    if not name:
        return "an environment variable needs a name"
    if "=" in name:
        return "a name with '=' is not a valid environment variable name"
    if "\0" in name or "\0" in value:
        return "environment names and values cannot hold a NUL character"
    if name.startswith("-"):
        return "a name starting with '-' would read as an option on the mpiexec/env command line"
    try:
        size = len(os.fsencode(name)) + len(os.fsencode(value)) + 2
    except UnicodeEncodeError:
        return "not encodable for the operating system (a lone surrogate escape?)"
    if size > MAX_ENV_STRING:
        return f"{name}=value is {size} bytes; the operating system takes at most {MAX_ENV_STRING}"
    return None


def _check_env(path: str, suite: Suite) -> None:
    """Refuse what execve would refuse, before any folder exists (not a traceback mid-launch)."""
    total = 0
    # an arm's env is added to the suite's in its launches: each is checked, and the largest counted
    blocks = [("env", suite.env)] + [(f"arms.{i}.env", arm.env) for i, arm in enumerate(suite.arms)]
    for field, env in blocks:
        for name, value in env.items():
            problem = _env_problem(name, str(value))
            if problem:
                raise BadInput(path, f"{field}.{name}: {problem} (got {name!r}: {_shown(value)})")
    for env in [suite.env] + [{**suite.env, **arm.env} for arm in suite.arms]:
        size = sum(len(os.fsencode(name)) + len(os.fsencode(str(value))) + 2 for name, value in env.items())
        total = max(total, size)
    # The values travel twice, in the job's environment and in mpiexec's -genv arguments.
    room = (os.sysconf("SC_ARG_MAX") if hasattr(os, "sysconf") else 1 << 21) - sum(
        len(key) + len(value) + 2 for key, value in os.environ.items())
    if 2 * total > room:
        raise BadInput(path, f"env: {total} bytes of variables; with this environment the operating system "
                       f"takes about {max(room, 0) // 2} more")


def _shown(value: Any, limit: int = 80) -> str:
    """repr(value), cut to ``limit`` characters so the error stays one readable line."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 5]}...{text[-2:]}"


def _check_consistency(path: str, suite: Suite) -> None:
    _check_duplicates(path, suite)
    _check_env(path, suite)
    if suite.sizes.min > suite.sizes.max:
        raise BadInput(path, f"sizes: min ({suite.sizes.min} B) is larger than max ({suite.sizes.max} B)")
    if suite.timing.mode == "window" and suite.timing.warmup < 1:
        raise BadInput(path, "timing.warmup: window mode sizes its windows from the warm-up; give at least 1")
    if suite.timing.min_iters > suite.timing.iters:
        raise BadInput(path, f"timing.min_iters ({suite.timing.min_iters}) exceeds timing.iters ({suite.timing.iters})")
    _check_shapes(path, suite)
    for index, entry in enumerate(suite.implementations):
        implementation = IMPLEMENTATIONS[entry.impl]
        for position, collective in enumerate(entry.collectives):
            if collective not in suite.collectives:
                raise BadInput(path, f"implementations.{index}.collectives.{position}: {collective!r} is not one of "
                               f"the suite's collectives {suite.collectives}")
        _check_phases(path, f"implementations.{index}", entry, suite)
        for position, name in enumerate(entry.algorithms):
            field = f"implementations.{index}.algorithms.{position}"
            if implementation.algorithms is not None:
                if name not in implementation.algorithms:
                    raise BadInput(path, f"{field}: {entry.impl} runs {list(implementation.algorithms)}, not {name!r}")
                continue
            if name == tuning.AUTO:
                continue
            runnable = [c for c in entry.collectives or suite.collectives
                        if algorithms.unsupported_reason(c, name) is None]
            if not runnable:
                reason = algorithms.unsupported_reason(suite.collectives[0], name)
                raise BadInput(path, f"{field}: {reason}")


def _check_shapes(path: str, suite: Suite) -> None:
    """Every rank count runs in some node shape and every shape with some rank count: a value
    that would plan nothing is a typo to report, not a launch to drop quietly."""
    shapes = suite.ranks_per_node
    if not shapes:
        return
    for index, nranks in enumerate(suite.ranks):
        if all(nranks % per_node for per_node in shapes):
            named = f"ranks_per_node={shapes[0]}" if len(shapes) == 1 else f"any of ranks_per_node {shapes}"
            raise BadInput(path, f"ranks.{index}: {nranks} ranks do not divide into nodes of {named}")
    for index, per_node in enumerate(shapes):
        if all(nranks % per_node for nranks in suite.ranks):
            raise BadInput(path, f"ranks_per_node.{index}: nodes of {per_node} ranks divide none of the rank "
                                 f"counts {suite.ranks}")


def _check_phases(path: str, field: str, entry: ImplEntry, suite: Suite) -> None:
    if (entry.intra or entry.inter) and entry.impl != "pccl-hier":
        raise BadInput(path, f"{field}: intra/inter phases belong to pccl-hier, not {entry.impl!r}")
    for role in ("intra", "inter"):
        for position, spec in enumerate(getattr(entry, role)):
            if spec == tuning.AUTO:
                continue
            problems = [hier.spec_problem(collective, spec, role)
                        for collective in entry.collectives or suite.collectives]
            if all(problems):
                raise BadInput(path, f"{field}.{role}.{position}: {problems[0]}")


def parse_suite(raw: Any, path: str) -> Suite:
    if not isinstance(raw, dict):
        raise BadInput(path, f"a suite is a YAML mapping of fields, got {type(raw).__name__}")
    try:
        suite = Suite.model_validate(raw)
    except ValidationError as error:
        raise BadInput("", _pydantic_error_line(path, error)) from None
    _check_consistency(path, suite)
    return suite


