"""The workload catalog: small, seeded, random-initialised models that stand for real programs.

Each entry builds a :class:`Workload` (model, example inputs, optional loss function, tolerance)
without downloads, small enough to run a forward pass, a training step and a compile on two CPU
cores in well under a second::

    wl = build("mlp", dtype=torch.bfloat16, seed=0)
    out = wl.model(*wl.inputs)

Users add their own with ``pkg.mod:factory`` (see :func:`build`): the factory returns
``(model, inputs)`` or ``(model, inputs, loss_fn)``. Optional workloads from torchvision /
transformers join only when those packages are installed.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

from opmatrix.probes.workloads import models

from .workload import Workload
from .workload import ce_logits as _ce_logits
from .workload import float_input as _float_input
from .workload import mse as _mse
from .workload import seeded as _gen
from .workload import tolerance as _tol

__all__ = ["WORKLOADS", "BadFactory", "Workload", "WorkloadSpec", "build", "resolve_names", "TORCH_DTYPES"]

#: the torch dtype of each dtype name the workload suite runs (a backend's claimed dtypes filter these)
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class WorkloadSpec:
    """A catalog entry: what the workload stands for, and its factory ``(dtype, seed) -> Workload``."""

    name: str
    description: str
    factory: Callable[[torch.dtype, int], Workload]
    #: low-precision tolerance (bfloat16/float16 vs an upcast float32 reference)
    tolerances: dict[str, tuple[float, float]] = field(default_factory=dict)
    optional: bool = False


def _ce_tokens(out: torch.Tensor) -> torch.Tensor:
    logits = out.float().reshape(-1, out.shape[-1])
    target = torch.arange(logits.shape[0]) % logits.shape[-1]
    return F.cross_entropy(logits, target)


def _mlp(dtype: torch.dtype, seed: int) -> Workload:
    torch.manual_seed(seed)
    model = models.MLP().to(dtype)
    mk = lambda b: (_float_input((b, 32), dtype, seed),)  # noqa: E731
    return _wl("mlp", model, mk, 8, _mse, dtype, f"x: ({{b}}, 32) {dtype}, randn, seed {seed + 1}")


def _cnn(dtype: torch.dtype, seed: int) -> Workload:
    torch.manual_seed(seed)
    model = models.SmallCNN().to(dtype)
    mk = lambda b: (_float_input((b, 3, 16, 16), dtype, seed),)  # noqa: E731
    return _wl("cnn", model, mk, 4, _ce_logits, dtype, f"x: ({{b}}, 3, 16, 16) {dtype}, randn, seed {seed + 1}")


def _transformer(dtype: torch.dtype, seed: int) -> Workload:
    torch.manual_seed(seed)
    model = models.EncoderBlock().to(dtype)
    mk = lambda b: (_float_input((b, 16, 32), dtype, seed),)  # noqa: E731
    return _wl("transformer", model, mk, 2, _mse, dtype, f"x: ({{b}}, 16, 32) {dtype}, randn, seed {seed + 1}")


def _lstm(dtype: torch.dtype, seed: int) -> Workload:
    torch.manual_seed(seed)
    model = models.GRUTagger().to(dtype)
    mk = lambda b: (_float_input((b, 12, 16), dtype, seed),)  # noqa: E731
    return _wl("lstm", model, mk, 4, _mse, dtype, f"x: ({{b}}, 12, 16) {dtype}, randn, seed {seed + 1}")


def _embeddingbag(dtype: torch.dtype, seed: int) -> Workload:
    torch.manual_seed(seed)
    model = models.Recommender().to(dtype)

    def mk(b: int) -> tuple:
        g = _gen(seed + 1)
        idx = torch.randint(0, models.Recommender.ROWS, (b * 4,), generator=g)
        offsets = torch.arange(0, b * 4, 4)
        dense = torch.randn(b, 8, generator=g).to(dtype)
        return (idx, offsets, dense)

    desc = f"idx: (4 per bag x {{b}} bags,) int64 randint(0,{models.Recommender.ROWS}); offsets: arange step 4; dense: ({{b}}, 8) {dtype}; seed {seed + 1}"
    return _wl("embeddingbag", model, mk, 8, _mse, dtype, desc)


def _tinygpt(dtype: torch.dtype, seed: int) -> Workload:
    torch.manual_seed(seed)
    model = models.TinyGPT().to(dtype)

    def mk(b: int) -> tuple:
        return (torch.randint(0, models.TinyGPT.VOCAB, (b, 8), generator=_gen(seed + 1)),)

    wl = _wl("tinygpt", model, mk, 2, _ce_tokens, dtype,
             f"tokens: ({{b}}, 8) int64 randint(0,{models.TinyGPT.VOCAB}), seed {seed + 1}; generate 4 tokens with a KV cache")
    wl.run = models.generate
    return wl


def _wl(name: str, model: nn.Module, mk: Callable[[int], tuple], batch: int, loss_fn: Callable,
        dtype: torch.dtype, desc: str) -> Workload:
    rtol, atol = _tol(WORKLOADS[name].tolerances if name in WORKLOADS else {}, dtype)
    return Workload(name=name, model=model.eval(), inputs=mk(batch), loss_fn=loss_fn, rtol=rtol, atol=atol,
                    batch=batch, input_desc=desc.replace("{b}", str(batch)), make_inputs=mk)


_DEEP = {"float32": (1e-4, 1e-4), "bfloat16": (1e-1, 1e-1), "float16": (2e-2, 2e-2)}

WORKLOADS: dict[str, WorkloadSpec] = {
    "mlp": WorkloadSpec("mlp", "3-layer MLP (linear, GELU, layer norm)", _mlp),
    "cnn": WorkloadSpec("cnn", "small CNN: conv, batch norm, max pooling, a residual block, linear head", _cnn,
                        tolerances=_DEEP),
    "transformer": WorkloadSpec("transformer", "transformer encoder block with scaled_dot_product_attention",
                                _transformer, tolerances=_DEEP),
    "lstm": WorkloadSpec("lstm", "GRU sequence tagger (1 layer, batch first) with a linear head", _lstm,
                         tolerances=_DEEP),
    "embeddingbag": WorkloadSpec("embeddingbag", "EmbeddingBag recommender (sum bags + dense features, MLP top)",
                                 _embeddingbag),
    "tinygpt": WorkloadSpec("tinygpt", "tiny GPT-style decoder generating tokens with a KV cache (greedy, top-k)",
                            _tinygpt, tolerances=_DEEP),
}


def _optional() -> None:
    """Add torchvision / transformers workloads when those packages are installed."""
    if importlib.util.find_spec("torchvision") is not None:
        WORKLOADS["resnet18"] = WorkloadSpec("resnet18", "torchvision resnet18 (random weights, 32x32 input)",
                                             models.resnet18_factory, tolerances=_DEEP, optional=True)
    if importlib.util.find_spec("transformers") is not None:
        WORKLOADS["bert2"] = WorkloadSpec("bert2", "transformers BertModel, 2 layers, hidden 64 (random weights)",
                                          models.bert_factory, tolerances=_DEEP, optional=True)


_optional()


class BadFactory(TypeError):
    """A ``pkg.mod:factory`` that raised, or returned something other than ``(nn.Module, inputs)``."""


def resolve_names(spec: str | None) -> list[str]:
    """``all`` / None -> the whole catalog; else the comma list, each a catalog name or ``pkg.mod:factory``."""
    if spec is None or spec.strip() in ("", "all"):
        return list(WORKLOADS)
    names = [n.strip() for n in spec.split(",") if n.strip()]
    for n in names:
        if n not in WORKLOADS and ":" not in n:
            raise ValueError(f"--workloads: unknown workload {n!r}; known: {', '.join(WORKLOADS)} "
                             "(or give a user factory as pkg.mod:factory)")
    return names


def build(name: str, dtype: torch.dtype = torch.float32, seed: int = 0) -> Workload:
    """Build workload ``name`` (a catalog name or ``pkg.mod:factory``) in ``dtype`` with ``seed``."""
    if name in WORKLOADS:
        return WORKLOADS[name].factory(dtype, seed)
    if ":" not in name:
        raise KeyError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)} (or pkg.mod:factory)")
    return _user(name, dtype, seed)


def _user(ref: str, dtype: torch.dtype, seed: int) -> Workload:
    from opmatrix.schema.userref import import_user_module

    mod_name, _, attr = ref.partition(":")
    factory = getattr(import_user_module(mod_name), attr)
    torch.manual_seed(seed)
    try:
        got = factory()
    except SystemExit as exc:  # exit() or argparse reading opmatrix's own argv: not a model
        raise BadFactory(f"workload factory {ref} called exit({exc.code!r}) instead of returning (model, inputs); "
                         "a factory must not exit or parse the command line") from None
    except Exception as exc:  # noqa: BLE001 - the user's code failed: say how, in one line
        from opmatrix.schema.userref import import_failure

        raise BadFactory(f"workload factory {ref} raised {import_failure(exc)}") from exc
    if not (isinstance(got, (tuple, list)) and len(got) >= 2 and isinstance(got[0], torch.nn.Module)):
        raise BadFactory(f"workload factory {ref} returned {type(got).__name__}, not (nn.Module, inputs[, loss_fn]); "
                         "return the model and its example inputs")
    model, inputs = got[0], tuple(got[1]) if isinstance(got[1], (tuple, list)) else (got[1],)
    loss_fn = got[2] if len(got) > 2 else None
    model = model.to(dtype)
    inputs = tuple(t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs)
    rtol, atol = _tol(_DEEP, dtype)
    desc = ", ".join(f"{tuple(t.shape)} {t.dtype}" if isinstance(t, torch.Tensor) else type(t).__name__ for t in inputs)
    batch = inputs[0].shape[0] if inputs and isinstance(inputs[0], torch.Tensor) and inputs[0].dim() else 1
    return Workload(name=ref, model=model.eval(), inputs=inputs, loss_fn=loss_fn, rtol=rtol, atol=atol, batch=batch,
                    input_desc=f"user factory {ref}: {desc}")
