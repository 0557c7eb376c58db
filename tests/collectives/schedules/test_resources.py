"""Per-communicator state on the object that owns it (collectives/schedules/resources.py): a
Topology's own resources, and the ones kept on an MPI communicator (in a one-rank subprocess:
MPI is never initialised inside the pytest process)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from conftest import ROOT

from collectives.schedules.resources import Resources
from collectives.schedules.topology import Grid, Topology


class Entry:
    def __init__(self, name: str, closed: list[str]) -> None:
        self.name, self.closed = name, closed

    def close(self) -> None:
        self.closed.append(self.name)


def test_an_entry_is_opened_once_and_released_once_last_opened_first():
    closed: list[str] = []
    held = Resources()
    made = [held.open(name, lambda name=name: Entry(name, closed)) for name in ("context:cuda", "clock", "shm")]
    assert held.open("clock", lambda: pytest.fail("opened twice")) is made[1]
    held.open("plain", object)  # no close(): released by dropping it
    assert held.names() == ["context:cuda", "clock", "shm", "plain"] and "shm" in held
    held.close()
    assert closed == ["shm", "clock", "context:cuda"] and held.names() == [] and held.get("shm") is None
    held.close()
    assert closed == ["shm", "clock", "context:cuda"]


def test_an_entry_whose_opening_fails_is_not_kept():
    held = Resources()

    def refuse():
        raise ValueError("ranks share no memory")

    with pytest.raises(ValueError):
        held.open("shm", refuse)
    assert "shm" not in held and held.open("shm", lambda: "opened") == "opened"


def test_two_topologies_keep_separate_state_and_close_their_own():
    closed: list[str] = []
    one, two = (Topology(None, None, None, Grid(4, size), False, ("h1",)) for size in (2, 4))
    one.resources.open("clock", lambda: Entry("one", closed))
    two.resources.open("clock", lambda: Entry("two", closed))
    assert one.resources.get("clock") is not two.resources.get("clock")
    one.close()
    assert closed == ["one"] and two.resources.get("clock").name == "two"
    one.close()
    assert closed == ["one"]
    assert one == Topology(None, None, None, Grid(4, 2), False, ("h1",))  # what it holds is not what it is


ON_COMMUNICATORS = textwrap.dedent('''
    import json
    import mpi4py
    mpi4py.rc.thread_level = "single"
    from mpi4py import MPI
    from bench.rank.cell import close_contexts
    from collectives.schedules.resources import resources_of
    from collectives.schedules.topology import made_topologies, topology
    from collectives.transports.shm import ops as shm

    closed = []

    class Entry:
        def __init__(self, name):
            self.name = name

        def close(self):
            closed.append(self.name)

    world, twin = MPI.COMM_WORLD, MPI.COMM_WORLD.Dup()
    out = {"segments_apart": shm.segment(world) is not shm.segment(twin),
           "segment_kept": shm.segment(world) is shm.segment(MPI.Comm(world)),  # any wrapper of the handle
           "topology_kept": topology(world) is topology(world) and topology(world) is not topology(twin),
           "shapes_apart": topology(world, 1) is not topology(world),
           "made": len(made_topologies())}
    twin.Free()
    again = MPI.COMM_WORLD.Dup()  # MPI may hand the freed handle out again: nothing of the twin's is there
    out["fresh_after_free"] = resources_of(again).names()
    job = topology(world)
    job.resources.open("context:host", lambda: Entry("context"))
    resources_of(job.node_comm).open("shm", lambda: Entry("node shm"))
    resources_of(world).open("rdma", lambda: Entry("world rdma"))
    close_contexts(job)
    close_contexts(job)
    out["closed"] = closed
    out["left"] = [resources_of(job.comm).names(), resources_of(job.node_comm).names(), job.resources.names()]
    print(json.dumps(out))
''')


def test_state_is_kept_on_the_communicator_and_released_in_order():
    done = subprocess.run([sys.executable, "-c", ON_COMMUNICATORS], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said["segments_apart"] and said["segment_kept"] and said["topology_kept"] and said["shapes_apart"], said
    assert said["made"] == 3 and said["fresh_after_free"] == [], said
    # the job's contexts, then its node communicator's state, then its communicator's: each once
    assert said["closed"] == ["context", "node shm", "world rdma"] and said["left"] == [[], [], []], said
