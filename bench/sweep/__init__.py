"""The sweep driver: suite -> launches -> MPI jobs -> rows -> table (``pccl-bench run sweep``).

options.py reads what was asked and opens the run folder; where.py finds the hosts and what
they are; run.py runs the launches through mpiexec or srun; batch.py submits the sweep to
sbatch; inside.py runs it in the processes of a job the user started (``--launcher none``).
"""

from bench.sweep.options import SweepOptions
from bench.sweep.run import run_sweep

__all__ = ["SweepOptions", "run_sweep"]
