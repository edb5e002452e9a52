"""opmatrix.reports: see design.md."""
