"""opmatrix.probes.runtime: see design.md."""
