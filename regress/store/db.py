"""Engines, sessions and schema upgrades. SQLite file by default, PostgreSQL by URL."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.exc import DatabaseError as SQLAlchemyDatabaseError
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from .. import resources
from ..errors import POSTGRES_HINT, UserError, environment_fault

ENV_URL = "REGRESS_DATABASE_URL"
DEFAULT_SQLITE = Path(".regress") / "regress.db"
MIGRATIONS_DIR = resources.migrations_dir()


if TYPE_CHECKING:
    from alembic.config import Config

# Alembic (and the mako/pygments it pulls in) is imported only when a schema must change: opening an
# up-to-date database for `regress runs list` should not pay ~0.3 s of imports (issue 11).
_REVISION_LINE = re.compile(
    r"""^(down_revision|revision)\s*(?::[^=]*)?=\s*(?:["']([0-9A-Za-z_]+)["']|None)""", re.M
)


class DatabaseError(UserError):
    """A database that cannot be used as asked (bad URL, schema behind, unreachable)."""


def database_url(url: str | None = None) -> str:
    """The URL to use: explicit, else $REGRESS_DATABASE_URL, else ./.regress/regress.db."""
    chosen = url or os.environ.get(ENV_URL) or f"sqlite:///{DEFAULT_SQLITE.resolve()}"
    # Plain postgresql:// means psycopg2 to SQLAlchemy; we ship psycopg 3.
    if chosen.startswith("postgresql://") or chosen.startswith("postgres://"):
        chosen = "postgresql+psycopg://" + chosen.split("://", 1)[1]
    if "://" not in chosen:
        raise DatabaseError(f"not a database URL: {chosen!r} (expected sqlite:///PATH or postgresql://...)")
    return chosen


def engine_url_shown(url: str) -> str:
    """The URL without its password, for messages."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # a URL SQLAlchemy cannot parse is shown as given
        return url


def sqlite_path(url: str) -> Path | None:
    """The file of a sqlite:/// URL (None for other databases and in-memory SQLite)."""
    if not url.startswith("sqlite"):
        return None
    path = url.split("sqlite:///", 1)[-1].split("?", 1)[0]
    return Path(path) if path and path != ":memory:" else None


def make_engine(url: str | None = None, *, create: bool = True) -> Engine:
    """An engine for `url`. With create=False (commands that only read) a missing SQLite file is
    refused instead of being created: a typo in --db must not produce an empty, valid-looking answer."""
    resolved = database_url(url)
    kwargs: dict[str, Any] = {"future": True}
    if resolved.startswith("sqlite"):
        path = sqlite_path(resolved)
        if path is not None and not create and not path.is_file():
            raise DatabaseError(
                f"no database at {path}: this command only reads, so it does not create one "
                "(run `regress nightly` or `regress import BUNDLE` first, or pass --db)"
            )
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        kwargs["connect_args"] = {"timeout": 30}
    else:
        kwargs["pool_pre_ping"] = True
    try:
        engine = create_engine(resolved, **kwargs)
    except Exception as exc:  # bad driver names, malformed URLs, a driver not installed
        if isinstance(exc, ModuleNotFoundError) and (exc.name or "").startswith("psycopg"):
            raise DatabaseError(
                f"cannot open database {engine_url_shown(resolved)}: {POSTGRES_HINT}"
            ) from exc
        raise DatabaseError(f"cannot open database {resolved!r}: {exc}") from exc
    if resolved.startswith("sqlite"):
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA journal_mode=WAL")  # readers (the site) never block the nightly writer
    cur.close()


def alembic_config(engine: Engine) -> Config:
    from alembic.config import Config

    if not (MIGRATIONS_DIR / "env.py").exists():
        raise DatabaseError(f"migrations not found at {MIGRATIONS_DIR}")
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False))
    return cfg


def head_revision(engine: Engine) -> str | None:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config(engine)).get_current_head()


def quick_head_revision(versions_dir: Path | None = None) -> str | None:
    """The head read straight from the revision files (no alembic import), or None when the files
    do not give exactly one head; callers then ask alembic. tests/store checks it against alembic."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (versions_dir or MIGRATIONS_DIR / "versions").glob("*.py"):
        found = dict((m.group(1), m.group(2)) for m in _REVISION_LINE.finditer(path.read_text()))
        if "revision" not in found or not found["revision"]:
            return None
        revisions.add(found["revision"])
        if found.get("down_revision"):
            parents.add(found["down_revision"])
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


def current_revision(engine: Engine) -> str | None:
    """The revision stored in alembic_version (None for an empty database)."""
    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        rows = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    if len(rows) > 1:  # branches: let alembic explain
        from alembic.runtime.migration import MigrationContext

        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    return rows[0] if rows else None


def upgrade(engine: Engine, revision: str = "head") -> None:
    from alembic import command

    cfg = alembic_config(engine)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def downgrade(engine: Engine, revision: str) -> None:
    from alembic import command

    cfg = alembic_config(engine)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)


def ensure_schema(engine: Engine, *, auto_upgrade: bool = True, must_exist: bool = False) -> None:
    """Brings a new or old database to head (auto_upgrade), or refuses if it is behind. With
    must_exist, a database without the regress schema is refused rather than initialised."""
    try:
        current = current_revision(engine)
    except OperationalError as exc:  # unreachable server, wrong credentials, unwritable file
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        raise DatabaseError(f"cannot connect to {engine.url.render_as_string()}: {reason}") from exc
    except SQLAlchemyDatabaseError as exc:  # a SQLite file that is not (or no longer) a database
        raise DatabaseError(f"{engine.url.render_as_string()}: {environment_fault(exc) or exc}") from exc
    if current is None and must_exist:
        raise DatabaseError(
            f"{engine.url.render_as_string()} holds no regress data (no schema); "
            "this command only reads, so it does not create one"
        )
    if current is not None and current == quick_head_revision():
        return
    head = head_revision(engine)
    if current == head:
        return
    if not auto_upgrade:
        raise DatabaseError(
            f"database schema is at {current or 'empty'}, head is {head}: run `regress db upgrade`"
        )
    upgrade(engine)


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One unit of work: committed whole or rolled back whole."""
    with factory() as session, session.begin():
        yield session
