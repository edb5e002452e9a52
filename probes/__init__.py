"""opmatrix.probes: see docs/levels.md and README.md."""
