"""Bulk writes: many finished runs, each with its results and raw samples, in a handful of
statements whatever their number. The one writer of runs that arrive finished: `regress
demo-history` (hundreds of runs in one transaction, through `BulkWriter`) and bundle ingest
(`regress import`, POST /api/v1/runs: one run, through `transfer.import_bundle`). A nightly's results
arrive one at a time and go through repo.add_result instead.

Why: the row-by-row path (`add_result_rows` in repo.py: a SELECT and a savepoint per case, then one
INSERT per result and per sample) costs ~4 round trips per result; a 14,000-result bundle took 42 s
(issue #13), and 365 nights x 3 stacks x 300 cases of demo history would take minutes. Here:

1. `transfer.ensure_dimensions` (ingest: its own short transaction, committed first): the stack, the build
   and every case, looked up by key in one SELECT per chunk and the missing ones inserted with
   ON CONFLICT DO NOTHING. Committing these shared rows first means a concurrent upload never waits
   on another upload's uncommitted case row (PostgreSQL makes a duplicate-key insert wait for the
   transaction holding the key), so a large bundle does not hold small ones up.
2. `write_runs` (inside the caller's transaction, so each run is whole or absent): the run rows,
   then every result and sample with every JSON value encoded beforehand (`prepare_results`,
   outside any lock): on PostgreSQL, result ids drawn from the sequence in one query, then COPY for
   results and for samples; on SQLite, one executemany per table.

The rows are the ones repo writes for a nightly (a result's headline value, metrics, device state
and message, one samples row per series), so every reader sees a bulk-written run as a nightly's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import Table, insert, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

if TYPE_CHECKING:
    import psycopg

from regress.facts.metrics import headline_value
from regress.facts.results import CaseResult, CaseSpec, stored_series

from .case import Case
from .result import Result, Sample
from .run import Run

KEY_CHUNK = 500  # keys per IN (...) lookup: under SQLite's 999-parameter floor


def _chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


# The dialects whose INSERT takes ON CONFLICT DO NOTHING.
_UPSERT_INSERT: dict[str, Callable[[Table], postgresql.Insert | sqlite.Insert]] = {
    "postgresql": postgresql.insert,
    "sqlite": sqlite.insert,
}


def _psycopg_cursor(session: Session) -> psycopg.Cursor[Any]:
    """A psycopg cursor in this session's transaction (PostgreSQL only: the store ships psycopg 3)."""
    import psycopg

    driver = session.connection().connection.driver_connection
    assert isinstance(driver, psycopg.Connection), f"not a psycopg connection: {type(driver).__name__}"
    return driver.cursor()


def _case_ids(session: Session, keys: Sequence[str]) -> dict[str, int]:
    found: dict[str, int] = {}
    if not keys:
        return found
    if session.get_bind().dialect.name == "postgresql":
        # One array parameter, never a prepared (generic) plan: psycopg prepares a statement after
        # five runs, and a generic plan compares every row with every key of the IN list (O(n*m):
        # 12 s for a 14,000-result bundle); a custom plan hashes the keys or uses the unique index.
        cursor = _psycopg_cursor(session)
        cursor.execute("SELECT key, id FROM cases WHERE key = ANY(%s)", (list(keys),), prepare=False)
        found.update((key, id_) for key, id_ in cursor.fetchall())
        return found
    for chunk in _chunks(keys, KEY_CHUNK):
        rows = session.execute(select(Case.key, Case.id).where(Case.key.in_(chunk)))
        found.update((key, id_) for key, id_ in rows)
    return found


def ensure_cases(session: Session, specs: Iterable[CaseSpec]) -> dict[str, int]:
    """Case id by key for every spec, inserting the missing ones (a concurrent insert wins quietly)."""
    by_key = {spec.key: spec for spec in specs}
    ids = _case_ids(session, list(by_key))
    # Sorted, so two writers inserting overlapping cases take the key locks in the same order.
    missing = [Case.columns_of(by_key[key]) for key in sorted(by_key) if key not in ids]
    if missing:
        dialect = session.get_bind().dialect.name
        make = _UPSERT_INSERT.get(dialect)
        if dialect == "postgresql":
            _copy_cases_postgresql(session, missing)
        elif make is None:  # another backend: plain inserts (no concurrent writers assumed)
            session.execute(insert(_table(Case)), missing)
        else:
            # RETURNING makes SQLAlchemy batch the rows into multi-row VALUES (insertmanyvalues).
            stmt = make(_table(Case)).on_conflict_do_nothing(index_elements=["key"])
            ids.update((key, id_) for key, id_ in session.execute(stmt.returning(Case.key, Case.id), missing))
        lost = [v["key"] for v in missing if v["key"] not in ids]  # inserted concurrently by another
        ids.update(_case_ids(session, lost))
    return ids


CASE_COLUMNS = ("key", "kernel", "suite", "name", "params", "b", "h", "sq", "sk", "d", "layout", "mode")


def _copy_cases_postgresql(session: Session, missing: list[dict[str, Any]]) -> None:
    """COPY into a temporary table, then one INSERT ... SELECT ... ON CONFLICT DO NOTHING: a multi-row
    VALUES of 14,000 cases costs seconds of client-side placeholder parsing in the driver."""
    cursor = session.connection().connection.cursor()
    cols = ", ".join(CASE_COLUMNS)
    cursor.execute(
        "CREATE TEMP TABLE IF NOT EXISTS regress_cases_in (LIKE cases INCLUDING DEFAULTS) ON COMMIT DROP"
    )
    cursor.execute("TRUNCATE regress_cases_in")
    with cursor.copy(f"COPY regress_cases_in ({cols}) FROM STDIN") as copy:
        for row in missing:
            copy.write_row(tuple(json.dumps(row[c]) if c == "params" else row[c] for c in CASE_COLUMNS))
    cursor.execute(
        f"INSERT INTO cases ({cols}) SELECT {cols} FROM regress_cases_in ORDER BY key "
        "ON CONFLICT (key) DO NOTHING"
    )


_dumps = json.JSONEncoder(allow_nan=False, separators=(",", ":")).encode


@dataclass
class PreparedResults:
    """Results of one or more runs with every JSON value already encoded: the CPU work of a write,
    done before the transaction takes a lock (SQLite has one writer at a time; a 14,000-result
    bundle's JSON takes seconds to encode)."""

    results: list[CaseResult] = field(default_factory=list)
    # per result: run id, case key, status, headline value, metrics, device, message (JSON encoded)
    rows: list[tuple[str, str, str, float | None, str, str, str]] = field(default_factory=list)
    samples: list[list[tuple[str, str]]] = field(default_factory=list)  # per result: (name, values JSON)

    def add(self, run_id: str, results: Iterable[CaseResult]) -> None:
        for r in results:
            value = headline_value(r.case.suite, r.metrics)
            self.results.append(r)
            self.rows.append(
                (run_id, r.case.key, r.status, value, _dumps(r.metrics), _dumps(r.device), r.message)
            )
            self.samples.append([(name, _dumps(stored_series(values))) for name, values in r.samples.items()])

    def __len__(self) -> int:
        return len(self.rows)


def prepare_results(run_id: str, results: Iterable[CaseResult]) -> PreparedResults:
    prepared = PreparedResults()
    prepared.add(run_id, results)
    return prepared


def _table(model: type[Any]) -> Table:
    table = model.__table__
    assert isinstance(table, Table)
    return table


def write_runs(
    session: Session,
    runs: Sequence[dict[str, Any]],
    prepared: PreparedResults,
    case_ids: dict[str, int] | None = None,
) -> int:
    """Writes finished runs (every column of `runs` as a dict) and then all their results and
    samples, inside the caller's transaction. `case_ids` (case key -> id) saves looking up cases
    already known; missing ones are found or created. Returns the number of results written."""
    if runs:
        session.execute(insert(_table(Run)), list(runs))
    return add_results(session, prepared, case_ids)


def add_results(session: Session, prepared: PreparedResults, case_ids: dict[str, int] | None = None) -> int:
    """Writes the results and all their samples of runs already in this transaction: COPY on
    PostgreSQL, executemany of pre-encoded rows on SQLite."""
    if not prepared.rows:
        return 0
    known = case_ids if case_ids is not None else {}
    unknown = [r.case for r, row in zip(prepared.results, prepared.rows, strict=True) if row[1] not in known]
    case_ids = {**known, **ensure_cases(session, unknown)} if unknown else known
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        _copy_postgresql(session, prepared, case_ids)
    elif dialect == "sqlite":
        _executemany_sqlite(session, prepared, case_ids)
    else:  # another backend: SQLAlchemy Core, one executemany per table
        t = _table(Result)
        stmt = insert(t).returning(t.c.id, sort_by_parameter_order=True)
        rows = [
            {"run_id": run_id, "case_id": case_ids[key], "status": status, "value": value}
            | {"metrics": r.metrics, "device": r.device, "message": message}
            for (run_id, key, status, value, _m, _d, message), r in zip(
                prepared.rows, prepared.results, strict=True
            )
        ]
        ids = list(session.scalars(stmt, rows))
        samples = [
            {"result_id": id_, "name": name, "values": stored_series(values)}
            for id_, r in zip(ids, prepared.results, strict=True)
            for name, values in r.samples.items()
        ]
        if samples:
            session.execute(insert(_table(Sample)), samples)
    return len(prepared.rows)


def _executemany_sqlite(session: Session, prepared: PreparedResults, case_ids: dict[str, int]) -> None:
    """sqlite3's executemany (a C loop) over pre-encoded rows. Result ids follow the largest one:
    the caller has already written in this transaction (the run rows go in first), so it holds
    SQLite's write lock and no other writer can take an id meanwhile; if one ever did, the primary
    key would refuse it and the whole transaction would roll back."""
    cursor = session.connection().connection.cursor()
    cursor.execute("SELECT coalesce(max(id), 0) FROM results")
    row = cursor.fetchone()
    assert row is not None  # an aggregate without GROUP BY returns one row
    first = int(row[0]) + 1
    ids = range(first, first + len(prepared.rows))
    cursor.executemany(
        "INSERT INTO results (id, run_id, case_id, status, value, metrics, device, message) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (id_, run_id, case_ids[key], status, value, metrics, device, message)
            for id_, (run_id, key, status, value, metrics, device, message) in zip(
                ids, prepared.rows, strict=True
            )
        ],
    )
    cursor.executemany(
        'INSERT INTO samples (result_id, name, "values") VALUES (?, ?, ?)',
        [
            (id_, name, values)
            for id_, series in zip(ids, prepared.samples, strict=True)
            for name, values in series
        ],
    )


def _copy_postgresql(session: Session, prepared: PreparedResults, case_ids: dict[str, int]) -> None:
    """COPY FROM STDIN: the result ids are drawn from the sequence first, so samples can name them
    without a round trip per row."""
    cursor = _psycopg_cursor(session)
    cursor.execute(
        "SELECT nextval(pg_get_serial_sequence('results', 'id')) FROM generate_series(1, %s)",
        (len(prepared.rows),),
    )
    ids = [row[0] for row in cursor.fetchall()]
    with cursor.copy(
        "COPY results (id, run_id, case_id, status, value, metrics, device, message) FROM STDIN"
    ) as copy:
        for id_, (run_id, key, status, value, metrics, device, message) in zip(
            ids, prepared.rows, strict=True
        ):
            copy.write_row((id_, run_id, case_ids[key], status, value, metrics, device, message))
    with cursor.copy('COPY samples (result_id, name, "values") FROM STDIN') as copy:
        for id_, series in zip(ids, prepared.samples, strict=True):
            for name, values in series:
                copy.write_row((id_, name, values))


class BulkWriter:
    """Queues finished runs with their results and writes them in batches of about `flush_every`
    results (the demo history: hundreds of runs in one transaction, without holding them all)."""

    def __init__(
        self, session: Session, *, case_ids: dict[str, int] | None = None, flush_every: int = 20_000
    ) -> None:
        self.session = session
        self.case_ids = dict(case_ids or {})
        self.flush_every = flush_every
        self.runs: list[dict[str, Any]] = []
        self.prepared = PreparedResults()
        self.written = 0

    def run(self, row: dict[str, Any], results: Iterable[CaseResult]) -> None:
        """A finished run (every column of `runs`: id, stack_id, status, summary, ...) and its results."""
        self.runs.append(row)
        self.prepared.add(row["id"], results)
        if len(self.prepared) >= self.flush_every:
            self.flush()

    def flush(self) -> None:
        self.written += write_runs(self.session, self.runs, self.prepared, self.case_ids)
        self.runs, self.prepared = [], PreparedResults()
