"""toyaccel as a plugin that registers its PrivateUse1 device on import, the way vendor packages
do (``import torch_openreg``): reached with ``--backend privateuse1:tests.toyaccel_plugin``, the
generic adapter with generic signals only."""

from __future__ import annotations

from .toyaccel import install

install()
