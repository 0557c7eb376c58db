"""Workload replay: the collectives one training step issues, timed per implementation.

A workload (``suites/workloads/*.yaml``) is a GPT-style transformer and a data-parallel
strategy. ``zero3`` (ZeRO-3 / FSDP full sharding, one unit per layer): forward gathers
the root unit (embeddings + final layer norm) and then every layer; backward gathers
every layer again in reverse and reduce-scatters its gradient, then reduce-scatters the
root's gradient (the root stays gathered through the step, as FSDP keeps it). ``ddp``:
one all-reduce per gradient bucket of ``bucket_mib``, last layers first. Flat
parameter buffers are padded to a multiple of the GPU count, as FSDP pads them.

Times come from the model (a machine description) or from measured sweeps (log-log
interpolation between the measured sizes of each implementation). Communication time
per step is the sum over calls: no overlap with compute, as a lower bound on exposure.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bench.errors import BadInput
from bench.files import project_folder
from bench.plan.suite import read_yaml
from collectives.dtypes import DTYPES, itemsize


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Transformer(Strict):
    layers: int = Field(ge=1)
    hidden: int = Field(ge=1)
    #: MLP width (default 4 x hidden)
    ffn_hidden: int | None = Field(None, ge=1)
    vocab: int = Field(ge=1)
    #: learned position embeddings (GPT-3); 0 for rotary or none
    seq_len: int = Field(0, ge=0)

    @property
    def ffn(self) -> int:
        return self.ffn_hidden or 4 * self.hidden

    def layer_params(self) -> int:
        """QKV (3h^2 + 3h), output projection (h^2 + h), MLP (2 h f + f + h), two layer norms (4h)."""
        h, f = self.hidden, self.ffn
        return 4 * h * h + 2 * h * f + 9 * h + f

    def root_params(self) -> int:
        """Token and position embeddings (output projection tied to them) and the final layer norm."""
        return (self.vocab + self.seq_len) * self.hidden + 2 * self.hidden

    def total_params(self) -> int:
        return self.layers * self.layer_params() + self.root_params()


class Workload(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    description: str = ""
    model: Transformer
    strategy: Literal["zero3", "ddp"]
    #: parameters as gathered (bfloat16 moves like float16)
    dtype: Literal[tuple(DTYPES)] = "float16"  # type: ignore[valid-type]
    #: gradients as reduced
    grad_dtype: Literal[tuple(DTYPES)] = "float16"  # type: ignore[valid-type]
    #: ddp only: gradient bucket size
    bucket_mib: float = Field(25.0, gt=0)
    #: GPU counts to evaluate by default
    ranks: list[int] = Field(default_factory=lambda: [64, 512, 2048])


@dataclass(frozen=True)
class CollectiveCall:
    phase: str  # forward | backward
    unit: str  # root | layer <i> | bucket <i>
    collective: str
    count_per_rank: int
    dtype: str

    def bytes_total(self, nranks: int) -> int:
        count = self.count_per_rank if self.collective == "allreduce" else self.count_per_rank * nranks
        return count * itemsize(self.dtype)


def _per_rank(params: int, nranks: int) -> int:
    return -(-params // nranks)  # padded to a multiple of the GPU count


def zero3_calls(workload: Workload, nranks: int) -> list[CollectiveCall]:
    model, layers = workload.model, range(1, workload.model.layers + 1)
    root, layer = _per_rank(model.root_params(), nranks), _per_rank(model.layer_params(), nranks)
    calls = [CollectiveCall("forward", "root", "allgather", root, workload.dtype)]
    calls += [CollectiveCall("forward", f"layer {i}", "allgather", layer, workload.dtype) for i in layers]
    for i in reversed(layers):
        calls.append(CollectiveCall("backward", f"layer {i}", "allgather", layer, workload.dtype))
        calls.append(CollectiveCall("backward", f"layer {i}", "reduce_scatter", layer, workload.grad_dtype))
    calls.append(CollectiveCall("backward", "root", "reduce_scatter", root, workload.grad_dtype))
    return calls


def ddp_calls(workload: Workload) -> list[CollectiveCall]:
    """All-reduce buckets of ``bucket_mib`` over every gradient element, the last one the remainder."""
    size = itemsize(workload.grad_dtype)
    per_bucket = max(1, int(workload.bucket_mib * (1 << 20)) // size)
    remaining, calls = workload.model.total_params(), []
    while remaining > 0:
        count = min(per_bucket, remaining)
        calls.append(CollectiveCall("backward", f"bucket {len(calls) + 1}", "allreduce", count, workload.grad_dtype))
        remaining -= count
    return calls


def step_calls(workload: Workload, nranks: int) -> list[CollectiveCall]:
    """The collectives of one training step on ``nranks`` GPUs, in issue order."""
    return zero3_calls(workload, nranks) if workload.strategy == "zero3" else ddp_calls(workload)


def distinct_calls(calls: list[CollectiveCall]) -> Counter:
    """(collective, count_per_rank, dtype) -> how many times a step issues it."""
    return Counter((call.collective, call.count_per_rank, call.dtype) for call in calls)


def workloads_dir() -> Path:
    return project_folder("suites/workloads")


def load_workload(name_or_path: str) -> Workload:
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml") and not path.exists():
        path = workloads_dir() / f"{name_or_path}.yaml"
    raw = read_yaml(path, "workload", sorted(p.stem for p in workloads_dir().glob("*.yaml")))
    try:
        return Workload.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        loc = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise BadInput(str(path), f"{loc}: {first['msg']}") from None
