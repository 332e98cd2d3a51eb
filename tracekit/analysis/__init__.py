"""Analyses: pure functions from canonical tables to polars tables and frozen results.

:func:`diagnose` (:mod:`tracekit.analysis.diagnose`) runs them all on one trace and returns a
:class:`Diagnosis` — steps, utilization, idle gaps with causes, sync points, kernel statistics,
memory headroom and ranked findings; :func:`~tracekit.analysis.diagnose.diagnose_job` does it for
every rank of a job and compares the ranks.  The vocabulary of causes is
:mod:`tracekit.analysis.causes`.  Nothing here prints, plots or keeps global state; renderers
(:mod:`tracekit.report`) and the TUI only present a Diagnosis.
"""

from __future__ import annotations

from .causes import CAUSES
from .critical_path import CriticalPath
from .diagnose import diagnose, diagnose_job
from .efficiency import Efficiency
from .findings import Finding
from .job_results import JobDiagnosis
from .results import Diagnosis
from .whatif import WhatIfResult

__all__ = ["CAUSES", "CriticalPath", "Diagnosis", "Efficiency", "Finding", "JobDiagnosis", "WhatIfResult", "diagnose", "diagnose_job"]
