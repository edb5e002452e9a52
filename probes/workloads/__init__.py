"""Workloads: small real models with inputs, a loss and tolerances (levels 3, 4 and 6)."""
