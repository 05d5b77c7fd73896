"""Bundle transfer: a run in and out of the store as the schema-versioned bundle a runner uploads.

`import_bundle` (the server's POST and `regress import`, through `import_files`) checks the shared
rows a bundle makes (its stack and build: `bundle_stack`, `bundle_build`, committed first by the
server through `ensure_dimensions`) and writes the run through bulk.py; `export_bundle` reads one
back (`regress runs show --json`, `regress upload`, the API's run read, the nightly's own bundle);
`bundle_fingerprint` says whether two bundles are the same run. Row mapping lives on each entity
(run.py, result.py, build.py, stack.py, case.py); one-at-a-time writes stay in repo.py.

Which pin names a stack is the caller's to say (the `pin` argument, from regress/machine/pins.py): the
store neither probes the machine nor reads the pin files.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session, lazyload

from regress.facts.errors import UserError
from regress.facts.results import CaseResult, stored_series
from regress.facts.stack_keys import HASHED_KEYS, PINNED_KEYS, RETIRED_KEYS, drifted_keys, stack_digest

from .build import Build
from .bulk import ensure_cases, prepare_results, write_runs
from .case import Case
from .queries import run_of_runner
from .readable import result_problem, run_problem
from .repo import Store, add_result_rows
from .result import Result
from .run import Run, qualified_key
from .stack import Stack


class BundleConflict(Exception):
    """A run id that is already stored with different content."""


class StackPin(Protocol):
    """What the store needs of a stack's pin (regress.machine.pins.Pin is one): its name and the facts
    the stack must have. Read-only: the store never sets them (so Pin's narrower dict[str, str] fits)."""

    @property
    def name(self) -> str: ...
    @property
    def expected(self) -> Mapping[str, Any]: ...


def stack_facts(bundle: dict[str, Any], pin: StackPin | None) -> tuple[str | None, dict[str, Any]]:
    """The name (the caller's `pin`'s: the pin of the bundle's digest, or None for an unpinned
    stack, never the uploader's) and the keys the store holds for a validated bundle's stack.

    The digest must be the one of the bundle's keys (BundleError). A pinned stack's keys are its
    pin's: a pinned, unhashed key may differ only on a run that declared its drift, and the stored
    row keeps the pin's value (BundleConflict otherwise)."""
    from regress.facts.bundle import BundleError

    st = bundle["stack"]
    computed = stack_digest({k: st["keys"].get(k) for k in HASHED_KEYS}, st["schema_version"])
    if computed != st["digest"]:
        raise BundleError(
            f"bundle.stack.digest: {st['digest']} is not the digest of bundle.stack.keys "
            f"and schema_version, which is {computed}"
        )
    extra = sorted(set(st["keys"]) - {*HASHED_KEYS, *PINNED_KEYS, *RETIRED_KEYS})
    if extra:  # not in the digest: a first uploader's extra key locked the stack for everyone else
        raise BundleError(
            f"bundle.stack.keys: has key(s) {', '.join(map(repr, extra[:5]))} that are no stack fact "
            f"(known: {', '.join(HASHED_KEYS + PINNED_KEYS)})"
        )
    keys = st["keys"]
    name = pin.name if pin is not None else None
    if pin is not None:  # a pinned stack's facts are its pin's, reviewed in the repository
        host = bundle["run"].get("host")
        declared_drift = bool(isinstance(host, dict) and host.get("drift"))
        for key in drifted_keys(pin.expected, st["keys"]):  # the one drift rule
            # A pinned but unhashed key (torch, python...) may drift on a run that said so (a
            # plain nightly or `--allow-drift` records the diff in run.host.drift); the stack row
            # keeps the pin's value and the run's host record the live one. Undeclared drift is
            # a conflict.
            if key in HASHED_KEYS or not declared_drift:
                raise BundleConflict(
                    f"bundle.stack.keys.{key}: {str(st['keys'].get(key))[:80]!r} is not the value of "
                    f"stack {name}'s pin ({str(pin.expected.get(key))[:80]!r})"
                    + ("" if key in HASHED_KEYS else "; the run records no drift (bundle.run.host.drift)")
                )
        # Every fact the pin states, compared or not (older bundles carry os_kernel as a key).
        keys = {**st["keys"], **pin.expected}
    return name, keys


def bundle_stack(session: Session, bundle: dict[str, Any], pin: StackPin | None) -> Stack:
    """The stack row of a validated bundle (`stack_facts`). Shared rows are facts, not first come:
    a stored stack with other keys is a conflict (BundleConflict)."""
    from regress.facts.bundle import first_difference

    st = bundle["stack"]
    name, keys = stack_facts(bundle, pin)
    stack = Stack.for_digest(
        session, digest=st["digest"], keys=keys, schema_version=st["schema_version"], name=name
    )
    # Only the stack facts are compared: a row stored before extra keys were refused keeps them,
    # and they no longer lock the stack for every later uploader (issue 41 item 13).
    known = (*HASHED_KEYS, *PINNED_KEYS)
    stored = {
        "keys": {k: v for k, v in stack.keys.items() if k in known},
        "schema_version": stack.schema_version,
    }
    sent = {"keys": {k: v for k, v in keys.items() if k in known}, "schema_version": st["schema_version"]}
    where = first_difference(stored, sent, ("stack",))
    if where:
        raise BundleConflict(f"stack {st['digest'][:12]} is stored with other facts (first at {where})")
    return stack


def bundle_build(session: Session, stack: Stack, build: dict[str, Any]) -> Build:
    """The build row of a validated bundle: the row of exactly its record (store/build.py), so no
    uploader's build facts stand for, or lock out, another's."""
    return Build.for_artifact(session, stack.id, build)


def ensure_dimensions(session: Session, bundle: dict[str, Any], pin: StackPin | None) -> None:
    """The shared rows a validated bundle refers to (stack, build, cases), for a transaction of their
    own before the run's (bulk.py's docstring says why). Idempotent."""
    stack = bundle_stack(session, bundle, pin)
    if bundle.get("build"):
        bundle_build(session, stack, bundle["build"])
    ensure_cases(session, (CaseResult.from_dict(r).case for r in bundle["results"]))


def export_bundle(
    session: Session,
    run_id: str,
    *,
    offset: int = 0,
    limit: int | None = None,
    samples: bool = True,
    skipped: list[tuple[str, str]] | None = None,
) -> dict[str, Any]:
    """The run as a schema-versioned bundle (the same document a runner uploads). offset/limit
    take one page of its results, in stored order (the API's paginated read); samples=False leaves
    the raw samples out without loading them. UnreadableRun when the run's own row is unreadable;
    unreadable results are left out (and listed in `skipped` as (case name, why))."""
    # regress.facts.bundle (and jsonschema with it) is imported where a bundle is made or read, not when
    # a command opens the store (issue 11: `regress runs list` pays only for SQLAlchemy).
    from regress.facts.bundle import BUNDLE_SCHEMA, BUNDLE_VERSION

    run = session.get(Run, run_id)
    if run is None:
        raise KeyError(f"run {run_id} does not exist")
    problem = run_problem(run)
    if problem is not None:
        raise UnreadableRun(f"run {run_id} is an unreadable row: {problem}")
    stack = session.get(Stack, run.stack_id)
    assert stack is not None
    build = session.get(Build, run.build_id) if run.build_id else None
    query = (
        select(Result, Case)
        .join(Case, Case.id == Result.case_id)
        .where(Result.run_id == run_id)
        .order_by(Result.id)
    )
    if not samples:
        query = query.options(lazyload(Result.samples))  # never touched below
    rows = session.execute(query.offset(offset).limit(limit) if limit is not None or offset else query).all()
    return {
        "schema": BUNDLE_SCHEMA,
        "schema_version": BUNDLE_VERSION,
        "run": run.to_bundle(),
        "stack": stack.to_bundle(),
        "build": None if build is None else build.to_bundle(),
        "results": [
            res.to_case_result(case, samples=samples).to_dict()
            for res, case in rows
            if _kept(case.name, result_problem(res, samples=samples), skipped)
        ],
    }


class UnreadableRun(UserError):
    """A stored run whose own row no reader can use (regress.store.readable)."""


def _kept(name: str, problem: str | None, skipped: list[tuple[str, str]] | None) -> bool:
    if problem is not None and skipped is not None:
        skipped.append((name, problem))
    return problem is None


def import_bundle(
    session: Session,
    bundle: dict[str, Any],
    *,
    pin: StackPin | None,
    runner: str | None = None,
    row_by_row: bool = False,
    validated: bool = False,
) -> tuple[str, bool]:
    """Stores a bundle inside the caller's transaction. Returns (the run's key, created).

    pin: the pin of the bundle's stack digest (regress.machine.pins.pin_for_digest), None when unpinned.
    A run is its runner's (`runner`, the uploading token's, else the bundle's run.runner) and its
    run id: the same bundle again is a no-op (created=False); a different bundle under a run id
    this runner stored raises BundleConflict; another runner's run under that id is another run,
    stored under its own key (store/run.py). The run goes in through the bulk writer (store/bulk.py:
    COPY on PostgreSQL); row_by_row=True keeps the old one-row-per-statement path for its results,
    for the ingest benchmark's comparison.
    validated=True: the caller has just run validate_bundle on this very dict (the service).
    """
    if not validated:
        from regress.facts.bundle import validate_bundle

        validate_bundle(bundle)
    run_doc = bundle["run"]
    owner = Run.owner(run_doc, runner)
    existing = run_of_runner(session, owner, run_doc["id"])
    if existing is not None:
        from regress.facts.bundle import BundleError, canonical, first_difference, normalised

        stored, sent = canonical(export_bundle(session, existing.id)), canonical(bundle)
        # The stack as the store holds it: a run that declared drift from its pin is stored under
        # the pin's keys, so its own identical re-send was 409 (the live value is in run.host).
        # A bundle whose stack the store would refuse differs anyway: its first difference is named.
        with suppress(BundleError, BundleConflict):
            sent["stack"]["keys"] = normalised(stack_facts(bundle, pin)[1])
        if stored == sent:
            return existing.id, False
        where = first_difference(stored, sent)
        raise BundleConflict(
            f"run {run_doc['id']} is already stored with different content (first at {where})"
        )
    key = _free_key(session, run_doc["id"], owner)
    results = [CaseResult.from_dict(res) for res in bundle["results"]]
    # The JSON encoding of every result before the first write: SQLite's lock is then held only
    # for the inserts themselves.
    prepared = prepare_results(key, [] if row_by_row else results)
    stack = bundle_stack(session, bundle, pin)
    build_id = bundle_build(session, stack, bundle["build"]).id if bundle.get("build") else None
    row = Run.columns_of_upload(run_doc, key=key, stack_id=stack.id, build_id=build_id, runner=runner)
    write_runs(session, [row], prepared)
    for result in results if row_by_row else []:
        add_result_rows(session, key, result)
    return key, True


def _free_key(session: Session, given_id: str, owner: str | None) -> str:
    """The key a new run of this runner and id is stored under: its id, unless another runner's run
    holds that key (run.py's docstring), then its qualified key. That one taken too (a SHA-256
    collision, or a row stored before keys were qualified) is a conflict, never an overwrite."""
    if session.get(Run, given_id) is None:
        return given_id
    key = qualified_key(given_id, owner)
    if session.get(Run, key) is not None:
        raise BundleConflict(f"run {given_id}: its keys {given_id} and {key} both hold other runs")
    return key


def bundle_fingerprint(bundle: dict[str, Any]) -> tuple[Any, ...]:
    """What must match for two bundles to be 'the same run': identity and every result's numbers.

    Numbers compare by value (`bundle.normalised`: a resent 3 is the stored 3.0, 2**53 + 1 is not
    2**53), raw samples as the store keeps them; call only on a validated bundle.
    """
    from regress.facts.bundle import normalised

    run = bundle["run"]
    results = sorted(
        (
            r["suite"],
            r["name"],
            r["status"],
            json.dumps(normalised(r["params"]), sort_keys=True),
            json.dumps({k: stored_series(v) for k, v in r["samples"].items()}, sort_keys=True),
            json.dumps(normalised(r["metrics"]), sort_keys=True),
        )
        for r in bundle["results"]
    )
    return (run["id"], run["status"], run["backend"], bundle["stack"]["digest"], tuple(results))


# ---- bundle files (`regress import`) --------------------------------------------------------------


@dataclass(frozen=True)
class ImportOutcome:
    path: Path
    state: str  # "stored" | "already stored" | "refused"
    run_id: str | None = None  # the run's key in this database
    results: int = 0
    reason: str = ""
    given_id: str | None = None  # the bundle's run id, where another runner's run holds it as a key

    def line(self) -> str:
        if self.state == "refused":
            return f"refused {self.path}: {self.reason}"
        shown = f"{self.given_id} as {self.run_id}" if self.given_id else self.run_id
        return f"{self.state} {shown} ({self.results} results) from {self.path}"


def import_files(
    store: Store, paths: Iterable[Path], *, pin_for: Callable[[str], StackPin | None]
) -> list[ImportOutcome]:
    """Validates and stores each bundle, one transaction each; a refused one leaves the database as
    it was. pin_for: a stack digest's pin, or None (regress.machine.pins.pin_for_digest)."""
    from regress.facts.bundle import BundleError, read_bundle

    outcomes = []
    for path in paths:
        try:
            bundle = read_bundle(path)
            pin = pin_for(bundle["stack"]["digest"])
            run_id, created = _store_bundle(store, bundle, pin)
        except (BundleError, BundleConflict, UnreadableRun) as exc:
            outcomes.append(ImportOutcome(path, "refused", reason=str(exc).removeprefix(f"{path}: ")))
            continue
        state = "stored" if created else "already stored"
        given = bundle["run"]["id"]
        outcomes.append(
            ImportOutcome(
                path, state, run_id, len(bundle["results"]), given_id=None if given == run_id else given
            )
        )
    return outcomes


def _store_bundle(store: Store, bundle: dict[str, Any], pin: StackPin | None) -> tuple[str, bool]:
    """One transaction; once more where another writer stored a run under this run id between this
    one's look-up and its insert (two imports of one bundle at once, or another runner's run under
    the same id): the second look finds it, so the run is "already stored" (or a conflict), or is
    stored under its own key, never an IntegrityError that stops the remaining files."""
    from sqlalchemy.exc import IntegrityError

    try:
        with store.transaction() as session:
            return import_bundle(session, bundle, pin=pin, validated=True)
    except IntegrityError:
        with store.transaction() as session:
            run = bundle["run"]
            if (
                session.get(Run, run["id"]) is None
                and run_of_runner(session, Run.owner(run, None), run["id"]) is None
            ):
                raise  # not that race: some other constraint
            return import_bundle(session, bundle, pin=pin, validated=True)
