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

Every field is bounded (the MAX_* below: layers at most 10^5, GPU counts at most MAX_RANKS of
bench/model/model_run.py, at most 10^6 calls per step), so a workload file cannot make a replay run
without end.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from bench.errors import BadInput
from bench.files import project_folder
from bench.model.machine import MAX_TEXT, NAME_PATTERN, Real, Whole, error_line
from bench.plan.suite_files import read_yaml
from collectives.dtypes import DTYPES, itemsize

#: transformer layers (GPT-3 175B has 96; the largest published models a few hundred)
MAX_LAYERS = 10**5
#: hidden and MLP widths, vocabulary and sequence length
MAX_WIDTH = 1 << 20
MAX_VOCAB = MAX_SEQ_LEN = 1 << 24
#: collective calls one training step may issue (ZeRO-3: 3 x layers + 2; DDP: one per bucket)
MAX_CALLS_PER_STEP = 10**6
#: GPU counts a workload lists
MAX_RANK_COUNTS = 256
#: the largest DDP gradient bucket, MiB (1 TiB)
MAX_BUCKET_MIB = float(1 << 20)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Transformer(Strict):
    layers: Whole = Field(ge=1, le=MAX_LAYERS)
    hidden: Whole = Field(ge=1, le=MAX_WIDTH)
    #: MLP width (default 4 x hidden)
    ffn_hidden: Whole | None = Field(None, ge=1, le=4 * MAX_WIDTH)
    vocab: Whole = Field(ge=1, le=MAX_VOCAB)
    #: learned position embeddings (GPT-3); 0 for rotary or none
    seq_len: Whole = Field(0, ge=0, le=MAX_SEQ_LEN)

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
    name: str = Field(pattern=NAME_PATTERN, max_length=100)
    description: str = Field("", max_length=MAX_TEXT)
    model: Transformer
    strategy: Literal["zero3", "ddp"]
    #: parameters as gathered (bfloat16 moves like float16)
    dtype: Literal[tuple(DTYPES)] = "float16"  # type: ignore[valid-type]
    #: gradients as reduced
    grad_dtype: Literal[tuple(DTYPES)] = "float16"  # type: ignore[valid-type]
    #: ddp only: gradient bucket size
    bucket_mib: Real = Field(25.0, gt=0, le=MAX_BUCKET_MIB)
    #: GPU counts to evaluate by default
    ranks: list[Annotated[Whole, Field(ge=1)]] = Field(default_factory=lambda: [64, 512, 2048], min_length=1,
                                                     max_length=MAX_RANK_COUNTS)

    @model_validator(mode="after")
    def _bounded_step(self) -> Workload:
        from bench.model.model_run import MAX_RANKS

        too_many = [n for n in self.ranks if n > MAX_RANKS]
        if too_many:
            raise ValueError(f"ranks: {too_many[0]} GPUs is more than the model takes (at most {MAX_RANKS})")
        calls = calls_per_step(self)
        if calls > MAX_CALLS_PER_STEP:
            raise ValueError(f"one step would issue {calls} collective calls, more than {MAX_CALLS_PER_STEP} "
                             "(fewer layers, or larger bucket_mib)")
        return self


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


def _bucket_count(workload: Workload) -> int:
    """Elements per DDP gradient bucket."""
    return max(1, int(workload.bucket_mib * (1 << 20)) // itemsize(workload.grad_dtype))


def calls_per_step(workload: Workload) -> int:
    """How many calls step_calls returns, computed without building them."""
    if workload.strategy == "zero3":
        return 3 * workload.model.layers + 2
    return -(-workload.model.total_params() // _bucket_count(workload))


def ddp_calls(workload: Workload) -> list[CollectiveCall]:
    """All-reduce buckets of ``bucket_mib`` over every gradient element, the last one the remainder."""
    per_bucket = _bucket_count(workload)
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
    if not isinstance(raw, dict):
        raise BadInput(str(path), "a workload is a YAML mapping of fields")
    try:
        return Workload.model_validate(raw)
    except ValidationError as error:
        raise BadInput("", error_line(str(path), error)) from None
