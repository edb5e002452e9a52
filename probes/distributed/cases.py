"""The plan of the distributed suite: which cases run, grouped into batches of rank processes.

A case is a plain dict (it travels to the rank processes as JSON)::

    {"id": "all_reduce.sum.float32.sync.w2", "kind": "collective", "collective": "all_reduce",
     "op": "sum", "dtype": "float32", "async_op": False, "world_size": 2, "deadline": 30.0}

Cases that kill a rank run in a batch of their own; the others share one batch per world size
(each still in its own process group, with its own deadline).
"""

from __future__ import annotations

from typing import Any

__all__ = ["COLLECTIVES", "COLLECTIVE_DTYPES", "Batch", "plan_batches"]

#: (collective, reduce op or None); barrier takes no dtype.
COLLECTIVES: tuple[tuple[str, str | None], ...] = (
    ("all_reduce", "sum"),
    ("all_reduce", "max"),
    ("all_reduce", "avg"),
    ("broadcast", None),
    ("all_gather", None),
    ("reduce_scatter", "sum"),
    ("all_to_all", None),
    ("send_recv", None),
)

COLLECTIVE_DTYPES: tuple[str, ...] = ("float32", "bfloat16", "int64")

Case = dict[str, Any]
Batch = tuple[int, list[Case]]  # (world size, cases)


def _collective_cases(world_size: int, dtypes: tuple[str, ...], modes: tuple[bool, ...]) -> list[Case]:
    cases: list[Case] = []
    for async_op in modes:
        mode = "async" if async_op else "sync"
        for name, op in COLLECTIVES:
            for dtype in dtypes:
                label = ".".join(p for p in (name, op, dtype, mode, f"w{world_size}") if p)
                cases.append({"id": label, "kind": "collective", "collective": name, "op": op, "dtype": dtype,
                              "async_op": async_op, "world_size": world_size, "deadline": 30.0})
        cases.append({"id": f"barrier.{mode}.w{world_size}", "kind": "collective", "collective": "barrier",
                      "op": None, "dtype": None, "async_op": async_op, "world_size": world_size, "deadline": 30.0})
    return cases


def plan_batches(*, world_sizes: tuple[int, ...] = (2, 4), failure_timeout: float = 3.0) -> list[Batch]:
    """Every batch of the suite in run order: world size 2 in full, 4 for float32 collectives, failures."""
    main = [{"id": "topology.w2", "kind": "topology", "world_size": 2, "deadline": 30.0}]
    main += _collective_cases(2, COLLECTIVE_DTYPES, (False, True))
    main += [
        {"id": "ddp.mlp.float32.w2", "kind": "ddp", "dtype": "float32", "world_size": 2, "deadline": 60.0},
        {"id": "checkpoint.dcp.float32.w2", "kind": "checkpoint", "dtype": "float32", "world_size": 2,
         "deadline": 60.0},
    ]
    batches: list[Batch] = [(2, main)]
    if 4 in world_sizes:
        four = [{"id": "topology.w4", "kind": "topology", "world_size": 4, "deadline": 30.0}]
        four += _collective_cases(4, ("float32",), (False,))
        batches.append((4, four))
    deadline = 3 * failure_timeout + 20.0
    for failure in ("rank_killed", "never_joins"):
        case = {"id": f"failure.{failure}.w2", "kind": "failure", "failure": failure, "world_size": 2,
                "timeout": failure_timeout, "deadline": deadline, "dies": [1] if failure == "rank_killed" else []}
        batches.append((2, [case]))
    return batches
