"""Stage 2, run: launchers (mpiexec, srun, sbatch), the MPI worker on every rank, one cell's
check-then-time (cell), part files of finished rows, provenance. Knows plan, never results."""
