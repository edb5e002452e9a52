"""opmatrix.ci: see design.md."""
