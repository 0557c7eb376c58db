"""Implementation registry: who performs a collective call.

Adding one = a module here with ``@register("name")`` on an Implementation
subclass, plus its import line at the bottom. ``unsupported_reason`` must give
the same answer on every rank (it decides before any communication).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from collectives.call import CallSpec

IMPLEMENTATIONS: dict[str, type[Implementation]] = {}


def register(name: str):
    def wrap(cls: type[Implementation]) -> type[Implementation]:
        cls.name = name
        IMPLEMENTATIONS[name] = cls
        return cls

    return wrap


def get(name: str) -> Implementation:
    try:
        return IMPLEMENTATIONS[name]()
    except KeyError:
        raise ValueError(f"unknown implementation {name!r} (known: {', '.join(sorted(IMPLEMENTATIONS))})") from None


def address(array: np.ndarray | None) -> int:
    return 0 if array is None else int(array.__array_interface__["data"][0])


class Implementation:
    name: ClassVar[str]
    #: what ``algorithm: None`` means for this implementation
    default_algorithm: ClassVar[str]
    #: algorithms this implementation accepts (None: any registered schedule)
    algorithms: ClassVar[tuple[str, ...] | None] = None

    def algorithm(self, call: CallSpec) -> str:
        return call.algorithm or self.default_algorithm

    def unsupported_reason(self, call: CallSpec) -> str | None:
        return None

    def build(self, topo, call: CallSpec, sendbuf: np.ndarray | None, recvbuf: np.ndarray):
        """A cython_ext CollOp that performs ``call`` on these buffers when invoked.

        ``topo``: a collectives.topology.Topology (the communicator and its node/rail split)."""
        raise NotImplementedError

    def describe(self, call: CallSpec) -> dict[str, str]:
        """transport, library, library_version of what moves the bytes."""
        raise NotImplementedError


from collectives.impls import flat, hier, mpi  # noqa: E402,F401  (registers)
