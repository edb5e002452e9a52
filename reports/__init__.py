"""opmatrix.reports: a matrix rendered as a static HTML support site.

The site answers "which ops run natively, which fall back to the host, which are rejected, and
what changed since the last release?" for a reader in a browser, from ``file://``::

    opmatrix report out/refaccel-g2/matrix.yaml --baseline out/refaccel-g1/matrix.yaml --out site/

or from Python::

    >>> from opmatrix.reports import render_site
    >>> render_site(load_matrix("m.yaml"), "site/").index  # needs a matrix and writes a site: not run  # doctest: +SKIP
    PosixPath('site/index.html')

``summary`` computes what the pages show, ``chart`` the coverage chart, ``diff`` the changes since
a baseline, ``gate`` reads a gate verdict, ``names`` makes safe page names and ``site`` renders
the templates in ``templates/`` with the assets in ``static/``.
"""

from .site import SiteResult, render_site

__all__ = ["SiteResult", "render_site"]
