"""The first-run kit: the one job a user submits first on a new cluster (``pccl-bench run first-run
--site S --nodes 1``, then ``--nodes 2``), about ten minutes each.

It is a small suite made here for the site (every implementation at a few sizes, each result checked
bit-exact before timing, one rank per GPU, the site's network counters switched on), run as a batch
job (bench/driver/slurm.py) whose last step packs the run folder into ``<run>.tar.gz``: the pre-flight's
per-rank table (meta.json ``preflight``: host, rank, local rank, GPU index and PCI id, CPU set, NUMA
node, the NCCL/RCCL network), the tables, every launch's argv and environment, and the job's log with
the counters Cray MPICH prints at MPI_Finalize: one file to attach to an issue or a site ticket.
"""

from __future__ import annotations

from bench.errors import BadInput
from bench.plan.site import Site

#: a few sizes per implementation: one eager, one around the protocol switch, one large enough to
#: pipeline (8 B, 8 KiB, 8 MiB: factor 1024)
SIZES = {"min": "8B", "max": "8MiB", "factor": 1024}
#: the batch job's limit: the kit's launches take a few minutes each
TIME_MINUTES = "10"
TIMEOUT_S = 240
NODE_COUNTS = (1, 2)


def first_run_suite(site: Site, site_ref: str, nodes: int, device: str, ranks_per_node: int | None) -> dict:
    """The kit's suite for ``site`` on ``nodes`` nodes: one rank per GPU of the node for a GPU
    ``device`` (the site's GPUs), ``ranks_per_node`` as given otherwise (2 by default)."""
    if nodes not in NODE_COUNTS:
        raise BadInput("--nodes", f"{nodes}: the first run is one node, then two ({', '.join(map(str, NODE_COUNTS))})")
    gpu = device != "host"
    node = site.facts.node
    per_node = ranks_per_node or ((node.gpus if node and node.gpus else site.gpus_per_node) if gpu else 2)
    if not per_node:
        raise BadInput("--ranks-per-node", f"site {site.name} names no GPUs per node (facts.node.gpus, "
                                           "gpus_per_node): give --ranks-per-node, one rank per GPU")
    impls = ["mpi", "pccl-flat", *(["xccl"] if gpu else [])]
    return {"name": f"first-run-{site.name}-n{nodes}", "collectives": ["allreduce", "allgather"],
            "implementations": impls, "ranks": [nodes * per_node], "ranks_per_node": per_node,
            "device": device, "sizes": dict(SIZES), "check": True, "timeout_s": TIMEOUT_S, "site": site_ref,
            "env": {name: str(value) for name, value in site.facts.network_counters.items()},
            "timing": {"warmup": 2, "iters": 10, "min_iters": 5, "budget_s": 0}}
