"""What an operator-probe worker imports before its first task, for the workers' zygote.

OpInfo's ``op_db`` (about 2 s), the compile check's front end (dynamo and AOTAutograd, about
1 s: every builtin backend compiles with ``aot_eager``; inductor, 0.7 s more, is left to the
backends that use it) and the engine. Imported by the zygote (:mod:`opmatrix.probes.runner.zygote`)
so that forked workers start with them; none of these imports touches a device. It also builds
OpInfo's name index, which a first run's orchestrator asks the zygote for instead of importing
``op_db`` itself (:func:`opmatrix.probes.ops.source.index_data`).
"""

from __future__ import annotations

import gc

import torch._dynamo  # noqa: F401
import torch._functorch.aot_autograd  # noqa: F401
from torch.testing._internal.common_methods_invocations import op_db  # noqa: F401

from . import engine  # noqa: F401
from .source import all_ops

all_ops()  # OpInfo's name index (a first run's orchestrator asks the zygote for it), cached on disk
gc.freeze()  # as the preload does (:mod:`opmatrix.probes.runner.preload`): kept out of collections
