"""Settings from environment variables (PCCL_RDMA_*, PCCL_SHM_*): parsed once, wrong ones named."""

from __future__ import annotations

from collections.abc import Mapping


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
