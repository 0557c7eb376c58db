"""Plan stage: a suite file validated (suite), its sizes (sizes), expanded into cells and
grouped into launches, one MPI job each (cells). Knows nothing of how jobs run."""
