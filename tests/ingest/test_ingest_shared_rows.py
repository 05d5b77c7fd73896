"""Shared rows are facts, not first come: a stack's digest must be its keys, a pinned stack takes
its pin's keys, declared drift is stored under the pin, an unpinned stack whose facts differ is
409, a build row is one whole record, never another uploader's (issue 41 item 13), and a token
limited to stacks uploads only there (issue #24). SQLite and PostgreSQL,
against the real service on 127.0.0.1.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest
import requests
from ingest_client import post, undrifted
from ingest_server import Service
from real_bundles import real_bundles

from regress.cli import main

# PostgreSQL copies in plain pytest: these (a second uploader's build row under PostgreSQL's unique keys);
# the module's others in CI (tests/conftest.py)
POSTGRES_IN_PLAIN = {"test_another_uploaders_build_record_locks_nothing"}


def test_a_digest_that_is_not_the_keys_is_400_naming_both(service: Service) -> None:
    from regress.facts.stack_keys import HASHED_KEYS, stack_digest

    bundle = undrifted()
    genuine = bundle["stack"]["digest"]
    bundle["stack"]["keys"]["driver"] = "EVIL-KEYS"
    resp = post(service, bundle, service.token("attacker"))
    assert resp.status_code == 400, resp.text
    forged = stack_digest({k: bundle["stack"]["keys"][k] for k in HASHED_KEYS})
    assert "bundle.stack.digest" in resp.json()["error"]
    assert genuine in resp.json()["error"] and forged in resp.json()["error"]


def test_a_pinned_stack_takes_its_pins_keys_only(service: Service) -> None:
    # the committed H200 runs: their digest is the shipped h200 pin's; one that declared no drift
    bundle = next(b for b in real_bundles() if not (b["run"].get("host") or {}).get("drift"))
    bundle["stack"]["keys"]["torch"] = "EVIL 9.9"  # not hashed: the digest still matches
    resp = post(service, bundle, service.token("attacker"))
    assert resp.status_code == 409, resp.text
    assert "bundle.stack.keys.torch" in resp.json()["error"]
    genuine = undrifted()
    assert post(service, genuine, service.token("h200-01")).status_code == 201
    got = requests.get(f"{service.url}/api/v1/runs/{genuine['run']['id']}", timeout=30).json()
    assert got["stack"]["keys"] == genuine["stack"]["keys"]


def test_a_run_that_declared_its_drift_is_stored_under_the_pins_keys(service: Service) -> None:
    """A pinned, unhashed key may drift on a run made with --allow-drift (run.host.drift says so).
    The committed H200 gate-calibration and hang-drill bundles ran on a newer os_kernel than the
    pin's, which is no longer compared (issue 42), so the drift here is a torch one. The run is
    stored; the stack row keeps the pin's values, so a genuine run reads back as pinned; the same
    drift undeclared is still a conflict."""
    from committed import read_json
    from real_bundles import _trim

    from regress.store.base import new_run_id

    drifted = _trim(read_json("h200-hang-drill.tar.xz:h200-hang-drill-01a2311cb51dea9f2ed179a0.json"), 3, 5)
    drifted["run"]["runner"] = None
    drifted["stack"]["keys"]["torch"] = "2.11.1"  # the pin says 2.11.0
    assert drifted["run"]["host"]["drift"], "the committed drill bundle records its drift"
    undeclared = copy.deepcopy(drifted)
    undeclared["run"]["host"].pop("drift")
    undeclared["run"]["id"] = new_run_id()
    resp = post(service, undeclared, service.token("h200-01"))
    assert resp.status_code == 409 and "run.host.drift" in resp.json()["error"], resp.text
    assert post(service, drifted, service.token("h200-01")).status_code == 201
    # Its identical re-send (a lost answer, 20 racing uploads) is "identical", not 409 at
    # bundle.stack.keys.torch (the stored row holds the pin's value).
    again = post(service, drifted, service.token("h200-01"))
    assert again.status_code == 200, again.text
    changed = copy.deepcopy(drifted)
    changed["run"]["host"]["drift"] = ["another drift"]
    assert post(service, changed, service.token("h200-01")).status_code == 409
    genuine = undrifted()
    assert post(service, genuine, service.token("h200-01")).status_code == 201
    for run in (drifted, genuine):
        got = requests.get(f"{service.url}/api/v1/runs/{run['run']['id']}", timeout=30).json()
        assert got["stack"]["keys"] == genuine["stack"]["keys"]


def test_a_stack_key_outside_the_digest_is_400(service: Service) -> None:
    # Issue 41 item 13: an extra key (not hashed, not pinned) became the stack row's, and every
    # later genuine upload of that digest answered 409 for good. Extra keys are refused now.
    from ingest_bundles import make_bundle

    first = make_bundle()
    first["stack"]["keys"]["extra"] = "x"
    resp = post(service, first, service.token("a"))
    assert resp.status_code == 400 and "'extra'" in resp.json()["error"], resp.text
    assert post(service, make_bundle(), service.token("b")).status_code == 201


def test_a_stored_extra_stack_key_locks_nothing(service: Service) -> None:
    # A row stored by an older door with an extra key: genuine uploads of its digest are stored.
    from ingest_bundles import make_bundle
    from sqlalchemy import update

    from regress.store.stack import Stack

    first = make_bundle()
    assert post(service, first, service.token("a")).status_code == 201
    with service.store.transaction() as session:
        row = session.query(Stack).filter_by(digest=first["stack"]["digest"]).one()
        session.execute(update(Stack).where(Stack.id == row.id).values(keys={**row.keys, "extra": "x"}))
    assert post(service, make_bundle(), service.token("b")).status_code == 201


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("inject", {"slowdown": 30}),
        ("flags", ["-O0"]),
        ("compiler", "evil"),
        ("stats", {"max_registers": 1}),
        ("stats", "one key dropped"),
    ],
)
def test_another_uploaders_build_record_locks_nothing(service: Service, field: str, value: Any) -> None:
    """Issue 41 item 13: a build row was one per artifact, and the first uploader's facts stood for
    every later run: a mutant that dropped one build.stats key became the build row, and 714 later
    genuine uploads answered 409. Build rows are keyed by their whole record now: each run is
    stored with, and reads back, the build it sent."""
    from regress.store.base import new_run_id

    bundles = [b for b in real_bundles() if b.get("build")]
    first, second = next(  # two committed runs of one artifact
        (a, b)
        for a, b in itertools.combinations(bundles, 2)
        if a["build"]["artifact_hash"] == b["build"]["artifact_hash"]
    )
    evil = copy.deepcopy(first)
    evil["run"]["id"] = new_run_id()
    if value == "one key dropped":
        evil["build"]["stats"].pop(sorted(evil["build"]["stats"])[0])
    else:
        evil["build"][field] = value
    assert post(service, evil, service.token("attacker")).status_code == 201
    for genuine in (first, second):  # the artifact's genuine runs: on main, 409 at bundle.build.FIELD
        resp = post(service, genuine, service.token("h200-01"))
        assert resp.status_code == 201, resp.text
        assert post(service, genuine, service.token("h200-01")).status_code == 200
    for sent in (evil, first, second):
        got = requests.get(f"{service.url}/api/v1/runs/{sent['run']['id']}", timeout=30).json()
        assert got["build"] == sent["build"]


def test_token_stacks_limit_where_a_runner_uploads(service: Service, db_url: str, capsys: Any) -> None:
    assert main(["token", "create", "mi300x-01", "--stacks", "mi300x-rocm6.4", "--db", db_url]) == 0
    limited = capsys.readouterr().out.strip()
    resp = post(service, undrifted(), limited)  # an H200 run: not this token's stack
    assert resp.status_code == 403 and "may not upload onto stack" in resp.json()["error"], resp.text
    assert main(["token", "create", "h200-01", "--stacks", "h200-cuda13.0", "--db", db_url]) == 0
    allowed = capsys.readouterr().out.strip()
    assert post(service, undrifted(), allowed).status_code == 201
