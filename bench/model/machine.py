"""Machine descriptions for the analytical model (``suites/machines/*.yaml``).

A description says what one node holds (GPUs, NICs and which GPUs share a NIC),
what a step costs on each link class (intra-node, inter-node), how fast local
copies and reductions run, how each library behaves (its NIC use, where it
reduces, its own per-step and per-call costs), and optionally a price per
GPU-hour. Units are in the names: microseconds, decimal GB/s, bytes, US dollars.

Every number is finite and bounded (the bounds below), so a description can neither make the
model walk without end (``gpus_per_node`` at most 1024) nor overflow its arithmetic.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from bench.errors import BadInput
from bench.files import atomic_write, project_folder
from bench.plan.suite_files import read_yaml

#: how a library's inter-node traffic uses the NICs of a node
#: mapped: each GPU through its own NIC (nic_of_gpu), GPUs on one NIC share it;
#: single: every GPU of a node through one NIC; striped: a node's flows spread over all NICs
NicPolicy = Literal["mapped", "single", "striped"]
LIBRARY_KEYS = ("pccl", "mpi", "xccl")
#: a hierarchical implementation's own terms (``model fit --per-impl``), e.g. ``pccl-hier:mpi/xccl``: its
#: phases run different libraries (Cray MPICH or NCCL on the rail), so each pays its own software costs
HIER_KEY = re.compile(r"^pccl-hier:[A-Za-z0-9+_-]{1,40}/[A-Za-z0-9+_-]{1,40}$")
#: a library's own terms for one collective (``model fit --per-impl``), e.g. ``mpi@reduce_scatter``: the
#: reproducer's reduce-scatter is its own loop of Sendrecv calls with host reductions, not MPI's collective
COLLECTIVE_KEY = re.compile(r"^(mpi|xccl)@(allgather|reduce_scatter|allreduce)$")

#: the largest node a description may have (GPUs or NICs per node): the model walks whole nodes
MAX_GPUS_PER_NODE = 1024
#: microseconds (latencies, overheads): a step or call of more than 10^15 us (31 years) is a typo
MAX_US = 1e15
#: decimal GB/s: the slowest (1 byte per 1000 s) and fastest rates, so per-byte costs stay finite
MIN_GBPS, MAX_GBPS = 1e-12, 1e12
#: message sizes (rendezvous threshold, band window): 1 PiB
MAX_BYTES = 1 << 50
#: cores of the oversubscribed host
MAX_HOST_CORES = 1 << 20
#: US$ per GPU-hour
MAX_PRICE = 1e6
MAX_LIBRARIES = 64
MAX_NAME = 200
MAX_TEXT = 100_000


def _number(value: Any) -> Any:
    """A YAML ``yes`` is not a number (pydantic would take it as 1). Text stays allowed: YAML 1.1 reads
    ``1e-3`` (no dot) as a string, which pydantic then parses, finite or refused."""
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {value!r}")
    return value


Whole = Annotated[int, BeforeValidator(_number)]
Real = Annotated[float, BeforeValidator(_number)]
Micros = Annotated[float, BeforeValidator(_number), Field(ge=0, le=MAX_US)]
Gbps = Annotated[float, BeforeValidator(_number), Field(ge=MIN_GBPS, le=MAX_GBPS)]
Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME)]


class Strict(BaseModel):
    # nan and inf are no figures of a machine: pydantic takes them for floats unless told not to
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class Link(Strict):
    #: start-up cost of one message step on this link class
    latency_us: Micros
    #: one message's bandwidth, decimal GB/s (inter: one NIC, each direction)
    bandwidth_gbps: Gbps
    #: messages of at least this many bytes use a rendezvous protocol (None: never)
    rendezvous_bytes: Whole | None = Field(None, ge=1, le=MAX_BYTES)
    #: what a rendezvous message costs on top of ``latency_us``
    rendezvous_us: Micros = 0.0
    #: inter only: added to every step, times log2(nodes of the call) (network diameter, congestion)
    node_latency_us: Micros = 0.0
    #: inter only: messages of at least band_bytes[0] and below band_bytes[1] pay ``band_us`` more per step
    #: (a slow protocol regime, e.g. CXI rendezvous in one size range); None: no band
    band_bytes: tuple[Annotated[Whole, Field(ge=0, le=MAX_BYTES)], Annotated[Whole, Field(ge=1, le=MAX_BYTES)]] | None \
        = None
    band_us: Micros = 0.0
    #: inter only, NCCL/RCCL: the protocol switch of its ring (NCCL's tuner, src/graph/tuning.cc: LL for
    #: small per-step messages, Simple for large). Steps whose message is at least protocol_bytes run
    #: Simple and pay ``protocol_us`` more (its higher per-step latency: 3x the network overhead plus a
    #: flush); below, LL's latency is the link's ``latency_us``. None: one protocol
    protocol_bytes: Whole | None = Field(None, ge=1, le=MAX_BYTES)
    protocol_us: Micros = 0.0

    @field_validator("band_bytes")
    @classmethod
    def _band_order(cls, band: tuple[int, int] | None) -> tuple[int, int] | None:
        if band is not None and band[0] >= band[1]:
            raise ValueError(f"the band's low end {band[0]} B must be below its high end {band[1]} B")
        return band


class Oversubscription(Strict):
    """Extra per-step costs when one host runs more ranks than it has cores (a CI machine
    running every virtual node itself)."""

    #: cores of the one host that runs every (virtual) node
    host_cores: Whole = Field(ge=1, le=MAX_HOST_CORES)
    #: added to every message step, times the share of ranks off a core (1 - host_cores / ranks)
    latency_us: Micros = 0.0
    #: added to every rendezvous message, times the same share
    rendezvous_us: Micros = 0.0


class Library(Strict):
    #: what modelled rows name as ``library`` (e.g. "RCCL", "Cray MPICH")
    name: Name
    nic_policy: NicPolicy = "mapped"
    #: where reductions run: device (GPU kernel or the host of a host run) or host (CPU of a GPU run)
    reduce_on: Literal["device", "host"] = "device"
    #: the library's own cost per message step, on top of the link (may be negative after a fit)
    step_overhead_us: Real = Field(0.0, ge=-MAX_US, le=MAX_US)
    #: the library's own cost per call
    call_overhead_us: Real = Field(0.0, ge=-MAX_US, le=MAX_US)
    #: per call, times the nodes of the call (multi-node calls only: per-peer setup, proxy progress)
    call_us_per_node: Micros = 0.0
    #: this library's own link terms (``model fit --per-impl``); None: the machine's ``intra``/``inter``
    intra: Link | None = None
    inter: Link | None = None
    #: this library's reduction throughput, GB/s of output bytes (None: the machine's, by ``reduce_on``)
    reduce_gbps: Gbps | None = None
    #: algorithm per collective where the library does not run MPICH's default selection (``mpi`` only),
    #: e.g. ``{reduce_scatter: rh}``; chosen by ``model fit --per-impl`` from the data
    algorithms: dict[str, str] = Field(default_factory=dict)
    #: ``mpi`` only: MPICH's selection thresholds where fitted (bench/model/mpich.py SWITCHES), e.g.
    #: ``{allgather.rd: 2097152}`` = recursive doubling below 2 MiB (p a power of two); absent: MPICH's defaults
    switch_bytes: dict[str, Annotated[Whole, Field(ge=1, le=MAX_BYTES)]] = Field(default_factory=dict)

    @field_validator("switch_bytes")
    @classmethod
    def _known_switches(cls, switches: dict[str, int]) -> dict[str, int]:
        from bench.model.mpich import SWITCHES

        for key in switches:
            if key not in SWITCHES:
                raise ValueError(f"{key[:60]!r} is not one of {sorted(SWITCHES)}")
        return switches

    @field_validator("name")
    @classmethod
    def _printable(cls, name: str) -> str:
        if not name.isprintable():
            raise ValueError(f"{name[:60]!r} holds characters that are not printable")
        return name

    @field_validator("algorithms")
    @classmethod
    def _known_algorithms(cls, algorithms: dict[str, str]) -> dict[str, str]:
        from collectives.schedules.algorithms import unsupported_reason
        from collectives.spec import COLLECTIVES

        for collective, algorithm in algorithms.items():
            if collective not in COLLECTIVES:
                raise ValueError(f"{collective[:60]!r} is not one of {list(COLLECTIVES)}")
            mpich_own = collective == "reduce_scatter" and algorithm in ("pairwise", "rh-dd")
            reason = None if mpich_own else unsupported_reason(collective, algorithm)
            if reason:
                raise ValueError(f"{collective}: {reason}")
        return algorithms


#: a description's name (it names the default run folder ``results/model-<name>``)
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class Machine(Strict):
    name: str = Field(pattern=NAME_PATTERN, max_length=100)
    description: str = Field("", max_length=MAX_TEXT)
    device: Literal["host", "cuda", "rocm"]
    gpus_per_node: Whole = Field(ge=1, le=MAX_GPUS_PER_NODE)
    nics_per_node: Whole = Field(1, ge=1, le=MAX_GPUS_PER_NODE)
    #: NIC of each local rank (default: consecutive blocks of gpus_per_node / nics_per_node)
    nic_of_gpu: list[Whole] | None = Field(None, max_length=MAX_GPUS_PER_NODE)
    intra: Link
    inter: Link
    #: local copies (read + write), GB/s of copied bytes
    copy_gbps: Gbps
    #: reductions on the device, GB/s of output bytes
    reduce_gbps: Gbps
    #: reductions on the host CPU of a GPU node (libraries with reduce_on: host)
    host_reduce_gbps: Gbps
    oversubscription: Oversubscription | None = None
    #: the rate that all inter-node bytes of a step share, every node's flows together (a switch's capacity; in
    #: the lab, the one host's network stack and link emulator); none: each link carries its own at full rate
    fabric_gbps: Gbps | None = None
    #: what each inter-node message of a step beyond the first adds to the step, every node's together (in the lab:
    #: one machine's kernel and emulator handle every frame, on two cores); none: messages do not queue
    fabric_message_us: float | None = Field(None, ge=0, le=1e6)
    price_per_gpu_hour_usd: Real | None = Field(None, ge=0, le=MAX_PRICE)
    libraries: dict[Annotated[str, Field(max_length=100)], Library] = Field(max_length=MAX_LIBRARIES)
    #: where each figure came from (free text per field)
    sources: dict[str, str] = Field(default_factory=dict)
    #: the fit that produced the parameters (``model fit``), if any
    fit: dict | None = None

    @model_validator(mode="after")
    def _check(self) -> Machine:
        unknown = sorted(key for key in set(self.libraries) - set(LIBRARY_KEYS)
                         if not HIER_KEY.match(key) and not COLLECTIVE_KEY.match(key))
        if unknown:
            raise ValueError(f"libraries: unknown {unknown}; expected some of {list(LIBRARY_KEYS)}, "
                             "pccl-hier:<inter>/<intra> or mpi|xccl@<collective>")
        if "pccl" not in self.libraries:
            raise ValueError("libraries: 'pccl' (this project's schedules) is required")
        if self.nic_of_gpu is not None:
            if len(self.nic_of_gpu) != self.gpus_per_node:
                raise ValueError(f"nic_of_gpu lists {len(self.nic_of_gpu)} GPUs, gpus_per_node is {self.gpus_per_node}")
            if any(not 0 <= nic < self.nics_per_node for nic in self.nic_of_gpu):
                raise ValueError(f"nic_of_gpu: NIC indices must be 0..{self.nics_per_node - 1}")
        return self

    def nic_of(self, local: int, ranks_per_node: int) -> int:
        """NIC of local rank ``local`` when a node runs ``ranks_per_node`` ranks."""
        if self.nic_of_gpu is not None and ranks_per_node == self.gpus_per_node:
            return self.nic_of_gpu[local]
        return min(local * self.nics_per_node // ranks_per_node, self.nics_per_node - 1)

    @property
    def shared_fabric(self) -> bool:
        """Whether the inter-node legs have a fabric leg beside them (a shared rate or per-message cost)."""
        return self.fabric_gbps is not None or self.fabric_message_us is not None

    def off_core_share(self, nranks: int) -> float:
        """Share of ranks without a core at any moment, 1 - host_cores / ranks (0: not oversubscribed).

        A step waits for its partner to be scheduled; that wait grows with this share."""
        if self.oversubscription is None:
            return 0.0
        return max(0.0, 1.0 - self.oversubscription.host_cores / nranks)


def shown_value(value: object, limit: int = 60) -> str:
    """repr(value) cut to ``limit`` characters: the offending value in a one-line error."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 5]}...{text[-2:]}"


def error_line(where: str, error: ValidationError) -> str:
    """``where: field.path: what is wrong (got value)`` from pydantic's first error."""
    first = error.errors()[0]
    loc = ".".join(str(part) for part in first["loc"]) or "(top level)"
    message = "unknown field" if first["type"] == "extra_forbidden" else first["msg"].removeprefix("Value error, ")
    value = first.get("input")
    # value_error: the project's own validators, whose messages show the value already
    shown = first["type"] not in ("missing", "extra_forbidden", "value_error") and not isinstance(value, dict)
    return f"{where}: {loc}: {message}" + (f" (got {shown_value(value)})" if shown else "")


def validated(data: dict, where: str) -> Machine:
    """``Machine.model_validate(data)``, a bad field a BadInput naming ``where`` (computed descriptions:
    a fit or a sample that leaves the valid range)."""
    try:
        return Machine.model_validate(data)
    except ValidationError as error:
        raise BadInput("", error_line(where, error)) from None


def machines_dir() -> Path:
    return project_folder("suites/machines")


def resolve_machine_path(name_or_path: str) -> Path:
    """A path as given, or a bare name like ``frontier`` from suites/machines/."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return path
    return machines_dir() / f"{name_or_path}.yaml"


def parse_machine(raw: object, where: str) -> Machine:
    if not isinstance(raw, dict):
        raise BadInput(where, "a machine description is a YAML mapping of fields")
    return validated(raw, where)


def load_machine(name_or_path: str) -> tuple[Machine, Path]:
    path = resolve_machine_path(name_or_path)
    raw = read_yaml(path, "machine description", sorted(p.stem for p in machines_dir().glob("*.yaml")))
    return parse_machine(raw, str(path)), path


def _rounded(value: object, digits: int = 5) -> object:
    """Floats to ``digits`` significant digits, through dicts and lists (readable fitted files)."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}")
    if isinstance(value, dict):
        return {key: _rounded(item, digits) for key, item in value.items()}
    if isinstance(value, list):
        return [_rounded(item, digits) for item in value]
    return value


def dump_machine(machine: Machine, path: Path, header: str = "") -> None:
    """Write ``machine`` as YAML (atomically: an existing file is replaced whole or left as it was)."""
    text = yaml.safe_dump(_rounded(machine.model_dump(exclude_none=True)), sort_keys=False, width=110)
    comment = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda temp: temp.write_text(comment + text))
