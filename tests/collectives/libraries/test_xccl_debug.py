"""The NCCL/RCCL network on the rows, without a GPU: a stand-in ``cupy.cuda.nccl`` whose communicator
writes NCCL's own INIT/NET lines to the file the process asked for (NCCL_DEBUG_FILE), as NCCL does."""

from __future__ import annotations

import os
import types

from mpi4py import MPI

from collectives.libraries import xccl_communicators as xccl
from collectives.libraries import xccl_debug_log as debug_log
from collectives.memory import gpu_aware
from collectives.memory.device_context import DeviceContext

LINES = ("host1:7:7 [0] NCCL INFO NET/OFI Using aws-ofi-rccl 1.4.0\n"
         "host1:7:7 [0] NCCL INFO Using network AWS Libfabric\n"
         "RCCL version 2.18.3+hip6.2 HEAD:7a84c5d\n"
         "host1:7:7 [0] NCCL WARN NET/OFI a warning the job's log keeps\n")


def fake_nccl() -> types.SimpleNamespace:
    def communicator(size: int, uid: bytes, rank: int):
        # NCCL reads NCCL_DEBUG* once, then writes its lines where NCCL_DEBUG_FILE says
        assert os.environ["NCCL_DEBUG"] == "INFO" and os.environ["NCCL_DEBUG_SUBSYS"] == "INIT,NET"
        with open(os.environ["NCCL_DEBUG_FILE"], "a") as log:
            log.write(LINES)
        return types.SimpleNamespace(destroy=lambda: None)

    return types.SimpleNamespace(get_unique_id=lambda: b"uid", NcclCommunicator=communicator)


def test_the_network_nccl_chose_reaches_the_rows(monkeypatch, capsys):
    environ = {key: value for key, value in os.environ.items() if not key.startswith("NCCL_")}
    monkeypatch.setattr(os, "environ", environ)  # this test's process environment, not pytest's
    monkeypatch.setattr(debug_log, "_PROCESS", [])  # as in a fresh rank
    communicators = xccl.Communicators(fake_nccl(), 0)
    context = DeviceContext("rocm", "", gpu_aware.GpuAwareness(True, ""), xccl.XcclInfo("RCCL", "2.18.3"),
                            communicators=communicators)
    assert context.xccl_columns() == {}  # nothing said before a communicator
    communicators.get(MPI.COMM_SELF)
    assert context.xccl_columns() == {"xccl_net": "AWS Libfabric (aws-ofi-rccl 1.4.0)",
                                      "xccl_runtime_version": "2.18.3+hip6.2"}
    path = environ["NCCL_DEBUG_FILE"]
    context.close()
    assert capsys.readouterr().err == "host1:7:7 [0] NCCL WARN NET/OFI a warning the job's log keeps\n"
    # a second set of communicators in the same process (the pre-flight's, then the cells'): one capture
    again = xccl.Communicators(fake_nccl(), 0)
    assert again.capture is communicators.capture and environ["NCCL_DEBUG_FILE"] == path
    os.unlink(path)
