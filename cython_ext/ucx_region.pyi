"""Type stubs for cython_ext.ucx_region (a mapped buffer for one-sided puts; built only where UCX was found)."""

from typing import Any

from cython_ext.ucx import Endpoints

def region_counters() -> dict[str, int]: ...
def wire_up(endpoints: Endpoints, comm: Any) -> None: ...

class Region:
    endpoints: Endpoints
    length: int
    memory_type: int
    memory_type_name: str
    def __init__(self, endpoints: Endpoints, comm: Any, address: int, length: int, owner: Any = None,
                 memory_type: str = "auto") -> None: ...
