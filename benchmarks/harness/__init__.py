"""What every study shares: running fl-run, grids of runs and their saved metrics, same-start
checks, statistics over seeds, tables, plots, cost estimates and the `reproduce` driver."""
