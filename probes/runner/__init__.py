"""opmatrix.probes.runner: see design.md."""
