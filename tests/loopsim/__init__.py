"""A training-loop simulator with CUDA semantics: the truth the replay model is held to.

Not shipped in the wheel (test support only).  :func:`simulate` runs a :class:`Loop` (a
description of the program: how it loads data, copies, launches, syncs and allocates, and on
which threads) as a discrete-event simulation of the host threads, DataLoader worker
processes and one CUDA stream, and returns the recorded events plus the steady-state step
time.  :func:`write_kineto` writes those events as a PyTorch-profiler (Kineto) trace.  The
truth of a fix is the same loop re-simulated with the fix applied (:data:`FIXES`), never
"step minus stall"; several fixes apply together (:func:`truth` with a list,
:func:`subset_truths`).

Modules: ``loop`` (the program's description and the simulator's constants), ``sim`` (the
simulation), ``fixes`` (the program edits), ``scenarios``, ``kineto`` (the writer), ``jobsim``
(several ranks sharing collectives).
"""

from .fixes import FIXES, apply_fixes, mean_truth, subset_truths, truth
from .kineto import write_kineto
from .loop import Loop
from .scenarios import BEHAVIOURS, INTERMITTENT, PLANS, SCENARIOS
from .sim import Run, simulate

__all__ = [
    "BEHAVIOURS", "FIXES", "INTERMITTENT", "PLANS", "SCENARIOS", "Loop", "Run", "apply_fixes", "mean_truth", "simulate",
    "subset_truths", "truth", "write_kineto",
]
