"""What each suite is, in one table: whether it is timed (judged by the noise rule, charted with a
band and speedups, weighted as costly when planned) or exact (a numerical contract: a failure is a
failure), and so which backends run it (a timed suite needs a backend with a clock).

The CLI, the nightly, the analysis, the gate, the sharder and the site read this table; none
restates which suites are timed. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from .backends import BACKENDS


@dataclass(frozen=True)
class SuiteFacts:
    name: str
    timed: bool  # measures time: noise band, speedups, the perf rule
    exact: bool  # checks a numerical contract: a fail is judged as such, not as a timing


# In the order a nightly runs them (DESIGN.md §3).
SUITES: dict[str, SuiteFacts] = {
    s.name: s
    for s in (
        SuiteFacts("determinism", timed=False, exact=True),
        SuiteFacts("ulp", timed=False, exact=True),
        SuiteFacts("perf", timed=True, exact=False),
        SuiteFacts("e2e", timed=True, exact=False),
    )
}
DEFAULT_SUITES: tuple[str, ...] = tuple(SUITES)
TIMED_SUITES: tuple[str, ...] = tuple(n for n, s in SUITES.items() if s.timed)
EXACT_SUITES: tuple[str, ...] = tuple(n for n, s in SUITES.items() if s.exact)


def is_timed(suite: str) -> bool:
    facts = SUITES.get(suite)
    return facts is not None and facts.timed


def is_exact(suite: str) -> bool:
    facts = SUITES.get(suite)
    return facts is not None and facts.exact


def suites_for(backend: str) -> tuple[str, ...]:
    """The suites `backend` can run: all of them, or the untimed ones on a backend without a clock."""
    return tuple(n for n, s in SUITES.items() if BACKENDS[backend].clock or not s.timed)
