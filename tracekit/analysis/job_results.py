"""What the analysis of a job concludes: :class:`JobDiagnosis`, every rank's
:class:`~tracekit.analysis.results.Diagnosis`, the comparison across ranks and the job as one
system (filled in by :func:`tracekit.analysis.diagnose.diagnose_job`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..reading.job import Job
from .job_model import JobModel
from .multirank import MultiRank
from .results import Diagnosis


@dataclass(frozen=True)
class JobDiagnosis:
    """Every rank of a job diagnosed, and the comparison across ranks."""

    job: Job
    #: rank → its diagnosis
    diagnoses: Mapping[int, Diagnosis]
    multirank: MultiRank
    #: the job as one system: cross-rank critical path, waits, job what-ifs (None: one rank)
    model: JobModel | None = None


__all__ = ["JobDiagnosis"]
