"""Engines, sessions and schema upgrades. SQLite file by default, PostgreSQL by URL."""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, create_engine, event, inspect, text
from sqlalchemy.exc import DatabaseError as SQLAlchemyDatabaseError
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from regress.facts import resources
from regress.facts.errors import POSTGRES_HINT, UserError, environment_fault

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


class StoreFault(DatabaseError):
    """The environment under a database broke (damaged file, full disk, read-only): retrying the same
    call cannot help. The server answers it 503; the CLI prints its one line and exits 2 (issue 24)."""


# SQLite result codes (sqlite3 errors carry sqlite_errorname) and PostgreSQL SQLSTATEs that mean
# "the environment", each with the hint that fixes it; every other driver error is left as it was.
_SQLITE_FAULTS = {
    "SQLITE_NOTADB": "is corrupt: not an SQLite database (damaged, or another kind of file)",
    "SQLITE_CORRUPT": "is corrupt: damaged (database disk image is malformed)",
    "SQLITE_FULL": "cannot be written: the disk is full",
    "SQLITE_READONLY": "cannot be written: it or its folder is read-only",
    "SQLITE_IOERR": "cannot be read or written (I/O error)",
}
_SQLITE_HINTS = {
    "SQLITE_NOTADB": "restore it from a backup, or move it aside and run `regress db upgrade` for a new one",
    "SQLITE_CORRUPT": "restore it from a backup, or move it aside and run `regress db upgrade` for a new one",
    "SQLITE_FULL": "free space on its filesystem and run the command again",
    "SQLITE_READONLY": "make the file and its folder writable, or pass --db",
    "SQLITE_IOERR": "check the disk and free space, then run the command again",
}
_PG_FAULTS = {
    "53100": "is out of disk space; free space on the server's data volume",
    "53200": "is out of memory; retry later or give it more memory",
    "25006": "is read-only (a standby?); point --db at the primary",
}


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
    event.listen(engine, "handle_error", _environment_fault)
    event.listen(engine, "commit", _clear_write_fault)
    return engine


# /healthz calls a SQLite database that cannot write when its filesystem has less than this free: a
# run's rows and its WAL need room, and "ok" while every upload gets 503 misleads (issue 24).
WRITE_FLOOR_BYTES = 1024 * 1024
# The last write fault each engine met (message, time), cleared by its next commit: a PostgreSQL
# server whose disk filled is seen only by the writes it refuses. Not by /healthz's own probe write,
# which rewrites one row in place and succeeds on a full disk: it used to clear the fault and answer
# 200 while every upload got 503. The record is per process (each gunicorn worker has its own), so
# a fault is reported for WRITE_FAULT_TTL_S after the last refused write, or until a real write
# commits in that process: clients retry every few seconds while the disk stays full.
_WRITE_FAULTS: dict[int, tuple[str, float]] = {}
WRITE_FAULT_TTL_S = 60.0
PROBE = "regress.health_probe"  # set in a connection's info while /healthz's probe commits


def write_problem(engine: Engine) -> str | None:
    """Why this database cannot take a write now, or None: a SQLite file or folder that is read-only
    or a filesystem under WRITE_FLOOR_BYTES free, a PostgreSQL standby, or the last write's fault."""
    fault = _WRITE_FAULTS.get(id(engine))
    if fault is not None and time.time() - fault[1] < WRITE_FAULT_TTL_S:
        return f"the last write failed {time.time() - fault[1]:.0f} s ago: {fault[0]}"
    path = sqlite_path(engine.url.render_as_string())
    if path is not None:
        if not os.access(path, os.W_OK) or not os.access(path.parent, os.W_OK):
            return f"{path} or its folder is read-only"
        free = _free_bytes(path)
        if free < WRITE_FLOOR_BYTES:
            return f"{free} bytes free on the filesystem of {path} (under {WRITE_FLOOR_BYTES})"
    elif engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            if conn.execute(text("SELECT pg_is_in_recovery()")).scalar():
                return "the server is a standby (read-only)"
    return None


def _free_bytes(path: Path) -> int:
    try:
        return shutil.disk_usage(path.parent).free
    except OSError:
        return WRITE_FLOOR_BYTES  # unknown: do not claim a full disk


def _clear_write_fault(conn: Any) -> None:
    if not conn.info.get(PROBE):
        _WRITE_FAULTS.pop(id(conn.engine), None)


def _environment_fault(context: Any) -> None:
    """Turns a driver error that means a broken environment into one StoreFault line naming the file
    or server (a random-bytes file used to give a 130-line traceback on every command: issue 24)."""
    orig = context.original_exception
    engine = context.engine
    if engine is None:
        return
    name = getattr(orig, "sqlite_errorname", None)
    if name is not None:
        base = next((k for k in _SQLITE_FAULTS if name == k or name.startswith(k + "_")), None)
        if base is None:
            return
        path = sqlite_path(engine.url.render_as_string())
        if base == "SQLITE_IOERR" and path is not None and _free_bytes(path) < WRITE_FLOOR_BYTES:
            base = "SQLITE_FULL"  # a write into a full filesystem often comes back as SQLITE_IOERR_WRITE
        where = path or "the in-memory database"
        message = f"database {where} {_SQLITE_FAULTS[base]}; {_SQLITE_HINTS[base]}"
        if base in ("SQLITE_FULL", "SQLITE_READONLY", "SQLITE_IOERR"):
            _WRITE_FAULTS[id(engine)] = (message, time.time())
        raise StoreFault(message) from orig
    sqlstate = getattr(orig, "sqlstate", None)
    if sqlstate in _PG_FAULTS:
        where = engine.url.render_as_string()
        reason = str(orig).strip().splitlines()[0] if str(orig).strip() else sqlstate
        message = f"database {where} {_PG_FAULTS[sqlstate]} ({reason})"
        if sqlstate != "53200":
            _WRITE_FAULTS[id(engine)] = (message, time.time())
        raise StoreFault(message) from orig


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
    # the option goes through configparser's interpolation: a "%" of the URL (a percent-encoded ":"
    # or "@" of a SQLite path) must be "%%"
    cfg.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False).replace("%", "%%"))
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


@contextmanager
def _reachable(engine: Engine) -> Iterator[None]:
    """An OperationalError on the way in (unreachable server, wrong credentials, unwritable file)
    becomes one DatabaseError line: `db current` on a stopped server gave a traceback (issue 24)."""
    try:
        yield
    except OperationalError as exc:
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        raise DatabaseError(f"cannot connect to {engine.url.render_as_string()}: {reason}") from exc


def current_revision(engine: Engine) -> str | None:
    """The revision stored in alembic_version (None for an empty database)."""
    with _reachable(engine), engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        rows = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    if len(rows) > 1:  # branches: let alembic explain
        from alembic.runtime.migration import MigrationContext

        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    return rows[0] if rows else None


@contextmanager
def _known_revisions(engine: Engine) -> Iterator[None]:
    """Alembic's "Can't locate revision" (a database written by a newer regress, or a revision name
    that does not exist) as one line naming both ends, not a traceback."""
    from alembic.util.exc import CommandError

    try:
        yield
    except CommandError as exc:
        raise DatabaseError(
            f"{engine.url.render_as_string()}: {exc} (this regress knows revisions up to "
            f"{quick_head_revision() or head_revision(engine)}; a newer regress wrote it, or the revision "
            "named does not exist)"
        ) from None


# pg_advisory_xact_lock key of schema changes: any constant that no other lock of this database uses.
_MIGRATION_LOCK_KEY = 0x7265677265737331  # "regress1"


@contextmanager
def _one_migrator(engine: Engine) -> Iterator[None]:
    """Schema changes one at a time. Two commands creating a new database's schema at once raced:
    SQLite answered a misleading "cannot connect" (database is locked), PostgreSQL an
    IntegrityError traceback (issue 41 item 17). SQLite: an exclusive lock on a file beside the
    database; PostgreSQL: a transaction-scoped advisory lock, taken by the caller's connection
    (see _lock_postgres). The second migrator waits, then finds the schema at head: a no-op."""
    path = sqlite_path(str(engine.url))
    if path is None:
        yield
        return
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".migrate.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _lock_postgres(conn: Any) -> None:
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK_KEY})


@contextmanager
def migration_connection(engine: Engine) -> Iterator[Connection]:
    """The connection a schema change runs on, in one transaction (committed at the end).

    On SQLite, foreign keys are off while it runs: Alembic's batch mode changes a table by copying it
    and dropping the old one, and a DROP with foreign keys on first deletes every row, so rebuilding
    `runs` deleted every result through their ON DELETE CASCADE, and rebuilding `builds` failed on
    the runs that refer to it. SQLite ignores that pragma inside a transaction, so it is set before
    the transaction begins and read back; before the commit, PRAGMA foreign_key_check must find no
    row the change left pointing nowhere (SQLite's own procedure for changing a table)."""
    with engine.connect() as conn:
        sqlite = conn.dialect.name == "sqlite"
        if sqlite:
            conn.exec_driver_sql("PRAGMA foreign_keys=OFF")
            if conn.exec_driver_sql("PRAGMA foreign_keys").scalar() != 0:
                raise DatabaseError("cannot change the schema: SQLite kept its foreign keys on")
            conn.commit()  # ends the (empty) transaction SQLAlchemy began around the pragmas
        try:
            with conn.begin():
                _lock_postgres(conn)
                before = _dangling(conn) if sqlite else set()
                yield conn
                if sqlite and (new := _dangling(conn) - before):
                    raise DatabaseError(
                        f"the schema change would leave {len(new)} row(s) referring to rows that do not "
                        f"exist (first: {sorted(new)[0]}); nothing was changed"
                    )
        finally:
            if sqlite:
                conn.exec_driver_sql("PRAGMA foreign_keys=ON")
                conn.commit()


def _dangling(conn: Connection) -> set[tuple[Any, ...]]:
    """(table, rowid, parent, constraint) of each row whose foreign key points nowhere (SQLite)."""
    return {tuple(row) for row in conn.exec_driver_sql("PRAGMA foreign_key_check").all()}


def upgrade(engine: Engine, revision: str = "head") -> None:
    from alembic import command

    cfg = alembic_config(engine)
    with (
        _reachable(engine),
        _known_revisions(engine),
        _one_migrator(engine),
        migration_connection(engine) as conn,
    ):
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def downgrade(engine: Engine, revision: str) -> None:
    from alembic import command

    cfg = alembic_config(engine)
    with (
        _reachable(engine),
        _known_revisions(engine),
        _one_migrator(engine),
        migration_connection(engine) as conn,
    ):
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)


def ensure_schema(engine: Engine, *, auto_upgrade: bool = True, must_exist: bool = False) -> None:
    """Brings a new or old database to head (auto_upgrade), or refuses if it is behind. With
    must_exist, a database without the regress schema is refused rather than initialised."""
    try:
        current = current_revision(engine)  # DatabaseError when it cannot connect
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
