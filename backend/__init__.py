"""opmatrix.backend: see design.md."""
