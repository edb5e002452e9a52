"""The one version source of opmatrix (``pyproject.toml`` reads it; ``opmatrix.__version__`` is it)."""

__version__ = "0.1.0"
