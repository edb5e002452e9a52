"""opmatrix.probes: see design.md."""
