"""Streams beyond order (docs/levels.md#runtime-checks-round-2): event waits that form a cycle,
stream priorities, graph capture and replay.

A cycle of event waits between two streams must complete (waits bind to the event's last
record, as CUDA's do) or fail with a clear error; it must never hang the process. The check
synchronises in a helper thread with a deadline, so a hang is reported, not suffered::

    check_stream_cycle(probe)
    # passed("s1 waits e2, s2 waits e1, e2 recorded after ...: completed in 0.4 ms, values right")
"""

from __future__ import annotations

import threading
import time
from typing import Any

from .context import Probe
from .spec import Verdict, failed, not_applicable, passed
from .streams import N, _needs_streams, on_stream

__all__ = ["CYCLE_DEADLINE_S", "check_graph_replay", "check_stream_cycle", "check_stream_priority"]

#: how long the cyclic waits may take before the check calls them hung
CYCLE_DEADLINE_S = 30.0


def _cyclic(probe: Probe, make: Any, event: Any) -> Any:
    """Issue work whose event waits form a cycle between two streams; returns the result tensor."""
    import torch

    s1, s2 = make(), make()
    e1, e2 = event(), event()
    x = torch.zeros(N, device=probe.device())
    with on_stream(probe, s1):
        s1.wait_event(e2)  # e2 not yet recorded: s1 waits on s2's future
        x.add_(1)
        e1.record(s1)
    with on_stream(probe, s2):
        s2.wait_event(e1)
        x.mul_(3)
        e2.record(s2)
    with on_stream(probe, s1):
        s1.wait_event(e2)  # closes the cycle: s1 -> s2 -> s1
        x.add_(2)
    return x


def check_stream_cycle(probe: Probe) -> Verdict:
    """Cyclic event waits across two streams complete or fail clearly within a deadline."""
    found = _needs_streams(probe, "Stream", "Event")
    if isinstance(found, Verdict):
        return found
    makers, via = found
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            x = _cyclic(probe, makers["Stream"], makers["Event"])
            probe.sync()
            outcome["values"] = x.cpu()
        except Exception as exc:  # noqa: BLE001 - a clear error is an allowed answer to a cycle
            outcome["error"] = exc

    start = time.perf_counter()
    worker = threading.Thread(target=run, name="opmatrix-stream-cycle", daemon=True)
    worker.start()
    worker.join(CYCLE_DEADLINE_S)
    took = (time.perf_counter() - start) * 1e3
    if worker.is_alive():
        return failed(f"cyclic event waits between two streams did not complete or fail within {CYCLE_DEADLINE_S:.0f} s "
                      "(the process would hang)", "detect wait cycles or bind a wait to the event's last record", via)
    if "error" in outcome:
        exc = outcome["error"]
        return passed(f"cyclic event waits were refused clearly in {took:.1f} ms: {type(exc).__name__}: {str(exc)[:200]}",
                      via)
    values = outcome["values"]
    if not bool((values == 5).all()):
        return failed(f"cyclic event waits completed in {took:.1f} ms but the values are wrong "
                      f"({values[:4].tolist()}, want 5.0: (0 + 1) * 3 + 2)", via=via)
    return passed(f"s1 waits e2 (not yet recorded), s2 waits e1, s1 waits e2 again: completed in {took:.1f} ms, "
                  f"{N} values right", via)


def check_stream_priority(probe: Probe) -> Verdict:
    """The priority range is reported, a stream at the greatest priority is created with it,
    and a kernel on that stream computes the host result."""
    import torch

    if probe.host:
        return not_applicable("the host runs each op to completion before returning: no device streams to prioritise")
    make = getattr(probe.module(), "Stream", None)
    span = getattr(make, "priority_range", None)
    if not callable(span):
        return not_applicable(f"torch.{probe.device_type}.Stream has no priority_range(): the backend reports no "
                              "stream priorities")
    least, greatest = span()
    assert make is not None
    stream = make(device=probe.device(), priority=greatest)
    got = getattr(stream, "priority", None)
    if got != greatest:
        return failed(f"priority range (least {least}, greatest {greatest}); a stream asked for {greatest} reports {got}")
    with on_stream(probe, stream):
        x = torch.arange(64, dtype=torch.float32, device=probe.device()).mul(2).add(1)
    stream.synchronize()
    if not torch.equal(x.cpu(), torch.arange(64, dtype=torch.float32).mul(2).add(1)):
        return failed(f"a kernel on a stream at priority {greatest} computed wrong values")
    return passed(f"priority range (least {least}, greatest {greatest}); a stream created at {greatest} reports it "
                  f"and a kernel on it matches the host", via=f"torch.{probe.device_type}.Stream(priority=...)")


def _graph_api(probe: Probe) -> tuple[Any, Any] | None:
    mod = probe.module()
    cls = getattr(mod, "Graph", None) or getattr(mod, f"{probe.device_type.upper()}Graph", None)
    scope = getattr(mod, "graph", None)
    return (cls, scope) if callable(cls) and callable(scope) else None


def check_graph_replay(probe: Probe) -> Verdict:
    """A captured graph replays on new input values (static buffers, as CUDA graphs)."""
    import torch

    if probe.host:
        return not_applicable("the host runs ops eagerly: there is no device graph to capture")
    api = _graph_api(probe)
    if api is None:
        return not_applicable(f"torch.{probe.device_type} offers no graph capture (neither a Graph class with "
                              f"torch.{probe.device_type}.graph): nothing to replay")
    cls, scope = api
    static = torch.zeros(64, device=probe.device())
    graph = cls()
    try:
        with scope(graph):
            out = static * 2 + 1
        static.copy_(torch.arange(64, dtype=torch.float32))
        graph.replay()
        probe.sync()
    except Exception as exc:  # noqa: BLE001 - capture or replay failed: the finding
        return failed(f"graph capture / replay raised {type(exc).__name__}: {str(exc)[:200]}")
    want = torch.arange(64, dtype=torch.float32) * 2 + 1
    if not torch.equal(out.cpu(), want):
        return failed("the replayed graph's output does not follow the new values in its static input")
    return passed("a captured graph (x * 2 + 1) replayed on new values in its static input: output right")
