"""opmatrix.matrix: see design.md."""
