"""The result database: SQLAlchemy 2.0 models (one module per entity) and their session plumbing.

Entity diagram:
    stacks 1─* builds        stacks 1─* runs *─1 builds
    runs 1─* results *─1 cases        results 1─* samples
    regressions → cases, stacks, runs (first, baseline, last)
    gate_decisions → runs (baseline, candidate)        runner_tokens (ingest credentials)
The schema is created and changed only by the Alembic migrations in migrations/.
"""

from regress.facts.results import REGRESSION_STATES

from .base import Base, new_run_id, utcnow
from .build import Build
from .case import Case
from .gate import GateDecision
from .regression import Regression
from .result import Result, Sample
from .run import FINISHED_STATES, RUN_STATES, Run
from .stack import Stack
from .token import RunnerToken

__all__ = [
    "FINISHED_STATES",
    "REGRESSION_STATES",
    "RUN_STATES",
    "Base",
    "Build",
    "Case",
    "GateDecision",
    "Regression",
    "Result",
    "Run",
    "RunnerToken",
    "Sample",
    "Stack",
    "new_run_id",
    "utcnow",
]
