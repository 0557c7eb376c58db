"""Settings from environment variables (PCCL_RDMA_*, PCCL_SHM_*): parsed once, wrong ones named."""

from __future__ import annotations

from collections.abc import Mapping

#: what launchers say about the ranks on this host (hydra, Open MPI, Cray PALS)
LOCAL_SIZE_VARIABLES = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "PALS_LOCAL_SIZE")
#: set by the sweep: the ranks of the job on the busiest physical machine (namespace hosts or
#: containers on one machine each see only their own ranks, yet share its cores)
MACHINE_RANKS_VARIABLE = "PCCL_BENCH_MACHINE_RANKS"


def machine_ranks(node_size: int, env: Mapping[str, str]) -> int:
    """The ranks that share this machine's cores: the node communicator's (a virtual node may be
    part of a host), the launcher's count of ranks on the host, the sweep's count per machine;
    the largest wins."""
    named = (*LOCAL_SIZE_VARIABLES, MACHINE_RANKS_VARIABLE)
    return max([node_size, *(int(env[name]) for name in named if env.get(name, "").isdigit())])


def env_number(env: Mapping[str, str], name: str, kind: type, default, error: type[Exception],
               allow_zero: bool = False):
    """``env[name]`` as ``kind`` (int, float), ``default`` when unset or empty; ``error`` naming the
    variable when it is not a number, or not positive (``allow_zero``: zero is allowed too)."""
    text = env.get(name, "")
    if not text:
        return default
    try:
        value = kind(text)
    except ValueError:
        raise error(f"{name}={text!r} is not a number") from None
    if value < 0 or (value == 0 and not allow_zero):
        raise error(f"{name}={text!r} must be positive")
    return value


def env_choice(env: Mapping[str, str], name: str, allowed: tuple[str, ...], error: type[Exception]) -> str:
    """``env[name]`` (``auto`` when unset or empty), one of ``allowed``, else ``error`` naming it."""
    value = env.get(name, "auto") or "auto"
    if value not in allowed:
        raise error(f"{name}={value!r}: expected {', '.join(allowed)}")
    return value
