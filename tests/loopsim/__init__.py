"""A training-loop simulator with CUDA semantics: the truth the replay model is held to.

Not shipped in the wheel (test support only).  :func:`simulate` runs a :class:`Loop` (a
description of the program: how it loads data, copies, launches, syncs and allocates) as a
discrete-event simulation of one host thread, DataLoader worker processes and one CUDA
stream, and returns the recorded events plus the steady-state step time.  :func:`write_kineto`
writes those events as a PyTorch-profiler (Kineto) trace.  The truth of a fix is the same
loop re-simulated with the fix applied (:data:`FIXES`), never "step minus stall".
"""

from .kineto import write_kineto
from .sim import FIXES, INTERMITTENT, SCENARIOS, Loop, Run, mean_truth, simulate, truth

__all__ = ["FIXES", "INTERMITTENT", "SCENARIOS", "Loop", "Run", "mean_truth", "simulate", "truth", "write_kineto"]
