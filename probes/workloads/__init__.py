"""Level 3/4 workload probes: a catalog of small seeded models run end to end on a backend."""
