"""What ``pccl-bench env`` says about UCX and RDMA: (what, value, found by) rows.

The UCX facts come from the libucp this process loaded (MPI's own when MPI links UCX):
its version and file, the transports and devices its context opened (this environment's
UCX_TLS / UCX_NET_DEVICES apply), the memory types it can move. Verbs devices are asked
three ways, since any one can be missing: UCX's own resources, libibverbs'
ibv_get_device_list, and /sys/class/infiniband.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
from pathlib import Path

from collectives.transports.rdma import ops as rdma

VERBS_TRANSPORTS = ("rc_verbs", "rc_mlx5", "dc_mlx5", "ud_verbs", "ud_mlx5", "rc_x", "dc_x", "ud_x")


def resources(context_info: str) -> list[str]:
    """``transport/device`` of each resource line of ucp_context_print_info."""
    return re.findall(r"resource\s+\d+\s*:.*?--\s+(\S+/\S+)", context_info)


def ibverbs_devices() -> tuple[list[str] | None, str]:
    """(device names, how), or (None, why not) — libibverbs' own answer."""
    name = ctypes.util.find_library("ibverbs")
    if name is None:
        return None, "not installed"
    try:
        library = ctypes.CDLL(name, use_errno=True)
    except OSError as error:
        return None, f"{name} does not load: {error}"
    library.ibv_get_device_list.restype = ctypes.POINTER(ctypes.c_void_p)
    library.ibv_get_device_name.restype = ctypes.c_char_p
    count = ctypes.c_int(0)
    devices = library.ibv_get_device_list(ctypes.byref(count))
    if not devices:
        errno = ctypes.get_errno()
        return None, f"ibv_get_device_list failed: {os.strerror(errno)} ({errno})"
    try:
        return [library.ibv_get_device_name(ctypes.c_void_p(devices[i])).decode() for i in range(count.value)], name
    finally:
        library.ibv_free_device_list(devices)


def _ib_module(library_path: str) -> str:
    """Whether the loaded UCX has its InfiniBand transport module (libuct_ib) beside it."""
    if not library_path:
        return "unknown"
    modules = Path(library_path).parent / "ucx"
    found = sorted(path.name for path in modules.glob("libuct_ib*.so*")) if modules.is_dir() else []
    return "present" if found else f"absent (no libuct_ib in {modules})"


def env_rows() -> list[tuple[str, str, str]]:
    reason = rdma.binding_reason()
    if reason:
        return [("UCX (rdma)", f"unavailable: {reason}", "import cython_ext.ucx")]
    from cython_ext import ucx

    version, path = rdma.ucx_library()
    rows = [("UCX library", f"{version} ({path}); built against headers {ucx.header_version()}",
             "ucp_get_version_string, dladdr")]
    try:
        worker = rdma.worker()
        found = resources(worker.context_info())
        movable = worker.memory_types()
    except Exception as error:  # noqa: BLE001 - a UCX that does not start is the fact to show
        return [*rows, ("UCX transports", f"UCX did not start: {error}", "ucp_init")]
    tls = os.environ.get("UCX_TLS", "")
    rows.append(("UCX transports", ", ".join(found) or "none",
                 "ucp_context_print_info" + (f" (UCX_TLS={tls})" if tls else "")))
    rows.append(("UCX memory types", ", ".join(movable), "ucp_context_query"))
    ucx_verbs = [item for item in found if item.split("/")[0] in VERBS_TRANSPORTS]
    devices, how = ibverbs_devices()
    sysfs = Path("/sys/class/infiniband")
    listed = sorted(entry.name for entry in sysfs.iterdir()) if sysfs.is_dir() else []
    verdict = "yes" if (ucx_verbs or devices or listed) else "no"
    rows.append(("verbs devices",
                 f"{verdict}: UCX: {', '.join(ucx_verbs) or 'none'}; libibverbs: "
                 f"{', '.join(devices) if devices else ('none' if devices is not None else how)}; "
                 f"sysfs: {', '.join(listed) or 'none'}; UCX ib module: {_ib_module(path)}",
                 "UCX resources, ibv_get_device_list, /sys/class/infiniband"))
    return rows
