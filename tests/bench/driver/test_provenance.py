"""What a row says ran is what the op itself ran: no module state carries it from one build to the next.

The ``transport`` column is asked of the implementation with the op it built
(``describe(call, context, op)``); shm's path and UCX's lanes are chosen when an op is built
and kept by the op (``CollOp.moved_by``), never in a module's "last built" variable, which
an op built later (another cell, the other arm of a turn) would overwrite.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import ROOT

# What the library keeps per communicator lives on the communicator (a segment, endpoints:
# collectives/schedules/resources.py), not in modules; a name set with ``global`` is one value for
# the whole process: each one listed, with why.
ALLOWED_GLOBALS = {("collectives/transports/rdma/ops.py", "_WORKER"): "one UCP worker per process, made on first use"}

TWO_OPS = textwrap.dedent('''
    import json
    import mpi4py
    mpi4py.rc.thread_level = "single"
    import numpy as np
    from mpi4py import MPI
    from collectives.transports.shm import ops as shm
    from collectives.call import CallSpec
    from collectives.memory.context import HOST
    from collectives.impls import get

    comm = MPI.COMM_WORLD
    out = {}
    for collective in ("allgather", "allreduce"):
        call = CallSpec(collective, 1, 4, "float32", "sum")
        impl = get("shm")
        first = shm.build(comm, collective, np.ones(4, np.float32), np.zeros(4, np.float32), 4, "float32", "sum",
                          path="ll")
        second = shm.build(comm, collective, np.ones(4, np.float32), np.zeros(4, np.float32), 4, "float32", "sum",
                           path="copy")
        out[collective] = [impl.describe(call, HOST, first).transport, impl.describe(call, HOST, second).transport,
                           impl.describe(call, HOST).transport]
    print(json.dumps(out))
''')


def test_each_op_says_its_own_path_whatever_was_built_after_it():
    done = subprocess.run([sys.executable, "-c", TWO_OPS], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    # the first op keeps saying ll after the copy op was built; before any op there is only the name
    assert said == {"allgather": ["shm:ll", "shm:copy", "shm"], "allreduce": ["shm:ll", "shm:copy", "shm"]}


def _globals_set(path: Path) -> set[str]:
    return {name for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Global)
            for name in node.names}


def test_the_library_keeps_no_process_wide_value_but_the_listed_caches():
    found = {(str(path.relative_to(ROOT)), name) for path in sorted((ROOT / "collectives").rglob("*.py"))
             for name in _globals_set(path)}
    unlisted = found - set(ALLOWED_GLOBALS)
    assert not unlisted, f"module state set with `global` (list it in ALLOWED_GLOBALS, with why): {unlisted}"


def test_no_module_hands_out_its_last_built_op():
    """The shape of the old hidden channels (shm.last_path, rdma.last_transport): gone, and not back."""
    for path in sorted((ROOT / "collectives").rglob("*.py")):
        body = ast.parse(path.read_text()).body  # module level: functions and module variables
        names = {node.name for node in body if isinstance(node, ast.FunctionDef)}
        names |= {target.id for node in body if isinstance(node, (ast.Assign, ast.AnnAssign))
                  for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                  if isinstance(target, ast.Name)}
        assert not {name for name in names if name.lstrip("_").lower().startswith("last_")}, path


def test_recorded_env_keeps_what_decides_the_libraries_and_the_ranks():
    """LD_PRELOAD and LD_LIBRARY_PATH pick GTL and the NCCL/RCCL network plugin; the loaded modules and
    srun's step and task variables say how the job was set up; secrets and the rest stay out."""
    from bench.driver.provenance import recorded_env

    env = {"LD_PRELOAD": "/opt/cray/pe/mpich/8.1.31/gtl/lib/libmpi_gtl_hsa.so",
           "LD_LIBRARY_PATH": "/x/aws-ofi-rccl/lib",
           "LOADEDMODULES": "PrgEnv-cray/8.5.0:craype-accel-amd-gfx90a:rocm/6.2.4", "SLURM_STEP_NUM_TASKS": "16",
           "SLURM_CPU_BIND": "quiet,mask_cpu:0xfe", "SLURM_LOCALID": "3", "SLURM_PROCID": "11",
           "ROCR_VISIBLE_DEVICES": "3", "CRAY_MPICH_VERSION": "8.1.31", "AWS_SECRET_ACCESS_KEY": "no", "HOME": "/h"}
    recorded = recorded_env(env)
    assert set(recorded) == set(env) - {"AWS_SECRET_ACCESS_KEY", "HOME"}


def test_package_versions_name_every_gpu_build(monkeypatch):
    from bench.driver import provenance

    def dist(name: str, version: str):
        return type("Dist", (), {"metadata": {"Name": name}, "version": version})()

    found = [dist("cupy-rocm-6-0", "13.3.0"), dist("amd-cupy", "13.0"), dist("nvidia-nccl-cu12", "2.21.5"),
             dist("rich", "13")]
    monkeypatch.setattr(provenance, "distributions", lambda: found)
    versions = provenance.package_versions()
    assert {"cupy-rocm-6-0": "13.3.0", "amd-cupy": "13.0", "nvidia-nccl-cu12": "2.21.5"}.items() <= versions.items()
    assert "rich" not in versions and "python" in versions
