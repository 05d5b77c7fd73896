"""`regress/store/` is the only door to the database (issue 12).

The rule, checked by walking the syntax tree of every module of the `regress` package outside
`regress/store/` (the Alembic migrations live outside the package and are not walked):

* no import of a SQLAlchemy statement construct — `select`, `insert`, `update`, `delete`, `text`
  (nor `func`, `and_`, `or_`, `join`, ..., which only ever serve to build one) — from `sqlalchemy`
  or any of its submodules, and no `import sqlalchemy` that would reach them as attributes;
* no call of a session's or connection's query and write methods: `.execute`, `.scalars`,
  `.scalar`, `.query`, `.add_all`, `.get_bind`, `.connection` on anything, and `.get`, `.add`,
  `.delete`, `.merge` on a receiver named like a session (`session`, `sess`, `s`, `conn`...), since
  `dict.get` and `set.add` are everywhere.

The scripts in `benchmarks/` read the database through the store too, and are held to the first
rule; not to the second, since some create and drop their scratch PostgreSQL databases on a plain
psycopg admin connection (`conn.execute('CREATE DATABASE ...')`), which is not the result database.

Allowed outside the store: the types a caller passes around (`Session`, `Engine`, `Connection`),
the exceptions it handles (`sqlalchemy.exc`), opening a store's transaction or reader, and setting
attributes of ORM objects a store function returned inside that transaction (the analysis moves a
regression's state so). Everything else — every query, every new row — is a function in
`store/queries.py` (reads), `store/repo.py` (writes one at a time) or `store/bulk.py` (many
finished runs at once).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "regress"
BENCHMARKS = ROOT / "benchmarks"
STORE = PACKAGE / "store"

ALLOWED_FROM_SQLALCHEMY = {
    "sqlalchemy": {"Engine", "Connection", "Row"},
    "sqlalchemy.orm": {"Session", "sessionmaker"},
}
ANY_RECEIVER = {"execute", "scalars", "scalar", "query", "add_all", "get_bind", "connection"}
SESSION_RECEIVER = {"get", "add", "delete", "merge"}
SESSION_NAME = re.compile(r"^(s|sess|session|db|conn|connection)$|session$", re.IGNORECASE)


def violations(source: str, filename: str = "<source>", *, calls: bool = True) -> list[str]:
    """Every place in `source` that reaches the database itself, as 'file:line: what'
    (calls=False: imports only)."""
    out: list[str] = []
    for node in ast.walk(ast.parse(source, filename)):
        where = f"{filename}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            out += [f"{where}: import {a.name}" for a in node.names if a.name.split(".")[0] == "sqlalchemy"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sqlalchemy":
            module = node.module or ""
            if module == "sqlalchemy.exc":
                continue
            allowed = ALLOWED_FROM_SQLALCHEMY.get(module, set())
            out += [f"{where}: from {module} import {a.name}" for a in node.names if a.name not in allowed]
        elif calls and isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method, receiver = node.func.attr, node.func.value
            name = receiver.id if isinstance(receiver, ast.Name) else getattr(receiver, "attr", "")
            if method in ANY_RECEIVER or (method in SESSION_RECEIVER and SESSION_NAME.search(name)):
                out.append(f"{where}: {name}.{method}(...)")
    return out


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if STORE not in p.parents)


def test_no_module_outside_the_store_queries_or_writes_the_database() -> None:
    found = [v for path in _modules() for v in violations(path.read_text(), str(path.relative_to(PACKAGE)))]
    assert not found, "database access outside regress/store/ (move it into a store function):\n" + "\n".join(
        found
    )


def test_no_benchmark_builds_a_query() -> None:
    found = [
        v
        for path in sorted(BENCHMARKS.rglob("*.py"))
        for v in violations(path.read_text(), str(path.relative_to(ROOT)), calls=False)
    ]
    assert not found, "benchmarks that build their own queries (use regress.store.queries):\n" + "\n".join(
        found
    )


def test_the_walk_covers_the_modules_that_used_to_query() -> None:
    names = {str(p.relative_to(PACKAGE)) for p in _modules()}
    assert {
        "judge/analysis.py",
        "judge/gate/core.py",
        "server/tokens.py",
        "server/series.py",
        "server/health.py",
    } <= names


@pytest.mark.parametrize(
    "source",
    [
        "from sqlalchemy import select",
        "from sqlalchemy import text as sql_text",
        "from sqlalchemy.sql import update",
        "from sqlalchemy.dialects.postgresql import insert",
        "import sqlalchemy",
        "import sqlalchemy.orm",
        "rows = session.execute(q)",
        "rows = self.session.scalars(q)",
        "run = session.get(Run, run_id)",
        "s.add(row)",
        "conn.execute(q)",
        "n = store_session.scalar(q)",
    ],
)
def test_the_rule_catches_each_way_in(source: str) -> None:
    assert violations(source), source


@pytest.mark.parametrize(
    "source",
    [
        "from sqlalchemy.orm import Session",
        "from sqlalchemy import Engine",
        "from sqlalchemy.exc import IntegrityError, OperationalError",
        "value = metrics.get('wall_s')",
        "seen.add(key)",
        "with store.transaction() as session:\n    reg.state = 'resolved'",
    ],
)
def test_the_rule_allows_types_errors_and_plain_containers(source: str) -> None:
    assert violations(source) == [], source
