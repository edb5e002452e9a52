"""opmatrix.probes.ops: see design.md."""
