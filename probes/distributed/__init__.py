"""Level-5 probes: real ``torch.distributed`` process groups on 127.0.0.1, case by case.

    from opmatrix.probes.distributed import run_suite
    section = run_suite("cpu", None, Path("out/cpu"))   # collectives, topology, DDP, checkpoint, failures

Cases run in spawned rank processes (:mod:`.rank`) watched by a launcher (:mod:`.launch`) that
records a crash or a hang against the case that caused it and goes on with the others.
"""

from .suite import merge_case, run_suite

__all__ = ["merge_case", "run_suite"]
