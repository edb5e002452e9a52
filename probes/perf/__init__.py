"""Performance measurement (level 6): ``opmatrix bench`` and the records it writes.

Each subject (a workload in eager or compiled mode, or a hot operator) is measured in its own
spawned process with a deadline (:mod:`.worker`): warm-up, then repetitions of a timed window
between device synchronisations, under the adapter's fallback observer::

    opmatrix bench --backend cpu --workloads mlp,cnn --ops add,mm --out out/perf
"""
