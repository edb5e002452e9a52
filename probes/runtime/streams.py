"""Command submission (docs/levels.md#runtime-bring-up-order, steps 3-5): a no-op completes, a small kernel computes,
work in one stream is ordered, an event orders work across streams, and events can be queried,
synchronised and timed.

Streams and events come from the best path the backend serves (``torch.Stream`` /
``torch.Event``, else ``torch.<device>.Stream`` / ``Event``) and each verdict says which::

    check_event_cross_stream(probe)
    # passed("s2 waited on an event recorded after 20 ops on s1: 1048576 values right", via="torch.Event")
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from .apis import NOT_SERVED
from .context import Probe
from .spec import Verdict, failed, not_applicable, passed, unknown

__all__ = [
    "check_event_cross_stream",
    "check_event_elapsed_time",
    "check_event_query",
    "check_kernel",
    "check_noop_completion",
    "check_stream_order",
]

#: elements in the buffers the stream checks work on (4 MiB of float32: long enough to race)
N = 1 << 20
_NO_STREAMS = "the host runs each op to completion before returning: no device streams"


def _maker(probe: Probe, kind: str) -> tuple[Any, str] | None:
    return probe.api(kind)


@contextlib.contextmanager
def on_stream(probe: Probe, stream: Any) -> Iterator[None]:
    """Make ``stream`` current: ``torch.<dev>.stream(s)`` when the module has it, else ``with s``."""
    scope = getattr(probe.module(), "stream", None)
    if callable(scope) and not isinstance(stream, _generic_stream_type()):
        with scope(stream):
            yield
    else:
        with stream:
            yield


def _generic_stream_type() -> type:
    import torch

    return torch.Stream


def _needs_streams(probe: Probe, *kinds: str) -> tuple[dict[str, Any], str] | Verdict:
    if probe.host:
        return not_applicable(_NO_STREAMS)
    found, vias = {}, []
    for kind in kinds:
        hit = _maker(probe, kind)
        if hit is None:
            return unknown(f"no {kind} reaches {probe.device_type} (torch.{kind} and torch.{probe.device_type}.{kind} "
                           "not served)", f"serve torch.{kind} for the device (C++ device guard with streams)")
        found[kind], via = hit
        vias.append(via)
    return found, " + ".join(vias)


def check_noop_completion(probe: Probe) -> Verdict:
    """An idle device synchronises, and an event recorded with no work before it completes."""
    start = time.perf_counter()
    probe.sync()
    waited = (time.perf_counter() - start) * 1e3
    if probe.host:
        return passed(f"synchronize on the idle host returned in {waited:.2f} ms")
    hit = _maker(probe, "Event")
    if hit is None:
        return passed(f"synchronize on the idle device returned in {waited:.2f} ms (no event API to record a no-op)")
    make, via = hit
    event = make()
    event.record()
    event.synchronize()
    if not event.query():
        return failed("an event recorded on an idle stream did not complete after synchronize", via=via)
    return passed(f"idle synchronize {waited:.2f} ms; a no-op event completed", via=via)


def check_kernel(probe: Probe) -> Verdict:
    """A small kernel with tensor and scalar arguments computes the host's result."""
    import torch

    dev = probe.device()
    # claims are about storage; float32 is what every compute path serves first
    floats = [d for d in probe.dtypes if d.is_floating_point]
    dtype = torch.float32 if torch.float32 in probe.dtypes or not probe.dtypes else (floats or probe.dtypes)[0]
    a = torch.arange(12, dtype=torch.float32).reshape(3, 4).to(dtype)
    b = torch.full((3, 4), 2, dtype=dtype)
    got = torch.add(a.to(dev), b.to(dev), alpha=3).mul(2)
    if not probe.values:
        ok = got.shape == a.shape and got.dtype == dtype
        return passed(f"meta: add(alpha=3).mul(2) gave shape {tuple(got.shape)} {got.dtype}") if ok else failed(
            f"meta: shape {tuple(got.shape)} {got.dtype}")
    probe.sync()
    want = torch.add(a, b, alpha=3).mul(2)
    if not torch.equal(got.cpu(), want):
        return failed(f"{str(dtype).removeprefix('torch.')} add(alpha=3).mul(2) gave {got.cpu().flatten()[:4].tolist()} "
                      f"instead of {want.flatten()[:4].tolist()}")
    return passed(f"{str(dtype).removeprefix('torch.')} add(a, b, alpha=3).mul(2) matches the host")


def check_stream_order(probe: Probe) -> Verdict:
    """Ops issued to one non-default stream run in order; the stream is current inside its scope."""
    import torch

    found = _needs_streams(probe, "Stream")
    if isinstance(found, Verdict):
        return found
    makers, via = found
    stream = makers["Stream"]()
    current_hit = probe.api("current_stream")
    switched = "current stream not readable"
    with on_stream(probe, stream):
        if current_hit is not None:
            now = current_hit[0]()
            same = now == stream or getattr(now, "stream_id", None) == getattr(stream, "stream_id", -1)
            switched = "current stream switched" if same else f"current stream NOT switched (still {now})"
        x = torch.zeros(N, device=probe.device())
        for _ in range(10):
            x.add_(1)
            x.mul_(2)
    stream.synchronize()
    want = 0.0
    for _ in range(10):
        want = (want + 1) * 2
    got = x.cpu()
    if not bool((got == want).all()):
        return failed(f"20 ordered ops on one stream gave {got[:3].tolist()}, expected {want}", via=via)
    if "NOT" in switched:
        return failed(f"results right, but {switched} inside the stream scope", via=via)
    return passed(f"20 ops on one stream: all {N} values {want}; {switched}; stream.query() {stream.query()}", via=via)


def check_event_cross_stream(probe: Probe) -> Verdict:
    """A stream that waits on an event recorded on another stream sees that stream's results."""
    import torch

    found = _needs_streams(probe, "Stream", "Event")
    if isinstance(found, Verdict):
        return found
    makers, via = found
    producer, consumer = makers["Stream"](), makers["Stream"]()
    event = makers["Event"]()
    src = torch.ones(N, device=probe.device())
    with on_stream(probe, producer):
        y = src.clone()
        for _ in range(20):
            y.mul_(1.0).add_(1)
        event.record(producer)
    consumer.wait_event(event)
    with on_stream(probe, consumer):
        z = y * 2
    consumer.synchronize()
    got = z.cpu()
    if not bool((got == 42.0).all()):
        bad = int((got != 42.0).sum())
        return failed(f"{bad} of {N} values read before the producer stream finished (expected 42.0)", via=via)
    return passed(f"consumer waited on an event after 40 ops on the producer: all {N} values 42.0", via=via)


def check_event_query(probe: Probe) -> Verdict:
    """event.query / synchronize and stream.query / synchronize report completion."""
    import torch

    found = _needs_streams(probe, "Stream", "Event")
    if isinstance(found, Verdict):
        return found
    makers, via = found
    stream, event = makers["Stream"](), makers["Event"]()
    with on_stream(probe, stream):
        x = torch.ones(N, device=probe.device()).mul_(3)
        event.record(stream)
    event.synchronize()
    done, idle = event.query(), None
    stream.synchronize()
    idle = stream.query()
    if not (done and idle):
        return failed(f"after synchronize: event.query() {done}, stream.query() {idle}", via=via)
    if float(x[0].item()) != 3.0:
        return failed("event completed but the work before it had not", via=via)
    return passed("event.synchronize -> query() True; stream.synchronize -> query() True", via=via)


def check_event_elapsed_time(probe: Probe) -> Verdict:
    """Two timing events around work give a non-negative elapsed_time in milliseconds."""
    import torch

    found = _needs_streams(probe, "Event")
    if isinstance(found, Verdict):
        return found
    makers, via = found
    try:
        start, end = makers["Event"](enable_timing=True), makers["Event"](enable_timing=True)
    except NOT_SERVED as exc:
        return failed(f"Event(enable_timing=True): {type(exc).__name__}: {exc}", via=via)
    start.record()
    x = torch.ones(N, device=probe.device())
    for _ in range(5):
        x.mul_(1.0)
    end.record()
    end.synchronize()
    try:
        ms = start.elapsed_time(end)
    except NOT_SERVED as exc:
        return failed(f"elapsed_time: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}", via=via)
    if not isinstance(ms, float) or ms < 0:
        return failed(f"elapsed_time gave {ms!r}, expected a non-negative float (ms)", via=via)
    return passed(f"elapsed_time {ms:.3f} ms around 5 ops on {N} values", via=via)
