"""The sweep driver: suite -> launches -> MPI jobs -> rows -> table (``pccl-bench run sweep``).

options.py reads what was asked and opens the run folder; where.py finds the hosts and what they
are; session.py holds one sweep (the suite, its launches expanded once, the hosts, the folder, every
row) and builds the table from it; run.py hands the session's options to the driver the launcher
names: jobs.py (one MPI job per launch: mpiexec, srun), batch.py (one batch job: sbatch), inside.py
(the job the sweep was started in: none); ab.py runs ``pccl-bench ab``'s rounds as sessions.
"""

from bench.sweep.drivers import run_sweep
from bench.sweep.options import SweepOptions

__all__ = ["SweepOptions", "run_sweep"]
