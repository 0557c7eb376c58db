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
