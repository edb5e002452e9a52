"""``python -m opmatrix``: the same as the ``opmatrix`` command."""

from opmatrix.cli import run

run()
