"""Results stage: the tidy table (its row type is the column contract), reading tables back,
run sets and their statistics, the names of cells and implementations."""
