"""Where buffers live: the memory kinds a suite's ``device:`` names, each opening a job's context.

The context protocol (context.py: ``HOST``, numpy buffers), the buffer backends (backends.py: host,
CuPy), a GPU job's context (device_context.py: ``cuda``, ``rocm``) and how MPI reaches device memory
(gpu_aware.py). A memory kind is the function that opens one job's context, registered with
``@register(name)`` (``host`` and the GPUs' in context.py, which imports device_context.py only
when a GPU job opens); ``on_device``: its buffers are not in host memory (the harness checks host
memory before a launch for the others, and plots count GPUs for these). Adding one = a backend in
backends.py, a module here with its context and ``@register``, and its import line at the bottom;
the suite schema, ``run point --device``, bench/rank/cell.context_for and the memory check take it
from ``KINDS``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from collectives.registry import lookup


@dataclass(frozen=True)
class MemoryKind:
    name: str
    #: (topo, device) -> the job's context; collective over ``topo.comm`` (every rank opens it together)
    open: Callable
    on_device: bool = False


KINDS: dict[str, MemoryKind] = {}


def register(*names: str, on_device: bool = False):
    """``@register("name", ...)`` on the function that opens a job's context for those memory kinds."""
    def wrap(open_context: Callable) -> Callable:
        for name in names:
            KINDS[name] = MemoryKind(name, open_context, on_device)
        return open_context

    return wrap


def get(name: str) -> MemoryKind:
    return lookup(KINDS, name, "memory kind (device)")


def device_kinds() -> tuple[str, ...]:
    """The kinds whose buffers are on a device (a GPU's memory), not in host memory."""
    return tuple(name for name, kind in KINDS.items() if kind.on_device)


from collectives.memory import context  # noqa: E402,F401,I001  (registers, in order)
