"""Issue 41 item 14: run ids cannot be squatted across runners. A runner that stored content under
another runner's spooled run id made that runner's genuine upload answer 403 for ever. A run is now
its runner's and its run id (regress/store/run.py): the genuine run is stored under a key of its
own, its re-sends are duplicates, and each runner reads back its own run. SQLite and PostgreSQL,
against the real service on 127.0.0.1 and through the real upload client and `regress import`.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import requests
from ingest_bundles import conflicting, make_bundle
from ingest_client import FAST, post
from ingest_server import Service

from regress.cli import main
from regress.facts.bundle import canonical
from regress.machine.pins import pin_for_digest
from regress.run.upload import flush_spool, spool_bundle, spooled_files
from regress.store.queries import find_run
from regress.store.repo import Store
from regress.store.transfer import export_bundle, import_files


def _read(service: Service, path: str, **params: str) -> dict[str, Any]:
    resp = requests.get(f"{service.url}/api/v1/runs/{path}", params=params, timeout=30)
    assert resp.status_code == 200, resp.text
    doc: dict[str, Any] = resp.json()
    return doc


def test_a_squatted_run_id_does_not_lock_its_runner_out(service: Service, tmp_path: Path) -> None:
    genuine = make_bundle()  # runner b's run, spooled: not yet sent
    spool = tmp_path / "spool"
    spool_bundle(genuine, spool)
    run_id = genuine["run"]["id"]
    squat = conflicting(genuine)  # other content under b's run id, sent first by runner a
    resp = post(service, squat, service.token("a"))
    assert resp.status_code == 201, resp.text

    # b's spooled bundle lands through the real client (on main: 403 "belongs to another runner",
    # moved to spool/rejected/ for ever)
    report = flush_spool(service.url, service.token("b"), spool, policy=FAST)
    assert report.stored == [run_id], report.lines()
    assert spooled_files(spool) == [] and not (spool / "rejected").exists()

    from regress.store.run import qualified_key  # here: the failure above is what main did

    key = qualified_key(run_id, "b")
    assert resp.json()["key"] == run_id  # the first runner's run keeps its id as its key
    assert report.lines() == [f"stored    {run_id} [201]: stored under the key {key}"]
    b_token = service.token("b")
    again = post(service, genuine, b_token)  # its re-send: a duplicate, under its own key
    assert again.status_code == 200 and again.json()["key"] == key, again.text
    assert again.headers["Location"].endswith(f"/api/v1/runs/{key}")
    assert post(service, conflicting(conflicting(genuine)), b_token).status_code == 409
    assert post(service, squat, service.token("a")).status_code == 200  # a's own run is a's

    # each runner reads back its own run: by key, or by runner and run id
    for doc in (_read(service, key), _read(service, run_id, runner="b")):
        assert canonical(doc) == canonical({**genuine, "run": {**genuine["run"], "runner": "b"}})
    assert _read(service, run_id)["run"]["runner"] == "a"
    assert canonical(_read(service, run_id, runner="a")) == canonical(squat)
    missing = requests.get(f"{service.url}/api/v1/runs/{run_id}", params={"runner": "c"}, timeout=30)
    assert missing.status_code == 404
    listed = requests.get(f"{service.url}/api/v1/runs", timeout=30).json()["runs"]
    assert sorted((r["id"], r["given_id"], r["runner"]) for r in listed) == sorted(
        [(run_id, run_id, "a"), (key, run_id, "b")]
    )


def test_the_qualified_key_cannot_be_taken_by_choosing_it(service: Service) -> None:
    """A runner cannot take the key another runner's run would be stored under: it is no run id."""
    from regress.store.run import qualified_key

    victim = make_bundle()
    forged = make_bundle(run_id=qualified_key(victim["run"]["id"], "b"))
    resp = post(service, forged, service.token("a"))
    assert resp.status_code == 400 and "bundle.run.id" in resp.json()["error"], resp.text


@pytest.mark.parametrize("squatter", ["a", None])
def test_import_keys_a_run_by_its_runner_and_id(
    store: Store, tmp_path: Path, squatter: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    """`regress import` (no token: the bundle's runner names it) follows the same rule: another
    runner's bundle under a stored id is another run, the same runner's again is already stored."""
    first = make_bundle(runner=squatter)
    second = copy.deepcopy(conflicting(first))
    second["run"]["runner"] = "b"
    paths = []
    for name, bundle in (("first", first), ("second", second), ("again", second)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(bundle))
        paths.append(path)
    outcomes = import_files(store, paths, pin_for=pin_for_digest)
    assert [o.state for o in outcomes] == ["stored", "stored", "already stored"], [o.line() for o in outcomes]
    from regress.store.run import qualified_key

    key = qualified_key(first["run"]["id"], "b")
    assert [o.run_id for o in outcomes] == [first["run"]["id"], key, key]
    assert f"{first['run']['id']} as {key}" in outcomes[1].line()
    with store.reader() as session:
        assert canonical(export_bundle(session, key)) == canonical(second)
        assert find_run(session, key).runner == "b"
    url = str(store.engine.url.render_as_string(hide_password=False))
    assert main(["runs", "show", key, "--db", url]) == 0
    assert f"runner b, key {key}" in capsys.readouterr().out


def test_an_import_that_races_another_runners_run_is_stored_under_its_own_key(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runner a's run is stored between runner b's look-up of the free key and b's insert: the
    insert meets the primary key, and the second pass stores b's run under its own key (the retry
    asked only for b's own run, so it re-raised the IntegrityError and stopped the import)."""
    from regress.store import transfer
    from regress.store.run import qualified_key

    first = make_bundle(runner="a")
    second = conflicting(first)
    second["run"]["runner"] = "b"
    paths = []
    for name, bundle in (("a", first), ("b", second)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(bundle))
    assert import_files(store, paths[:1], pin_for=pin_for_digest)[0].state == "stored"
    real, looks = transfer._free_key, []

    def looked_before_a_stored(session: Any, given_id: str, owner: str | None) -> str:
        looks.append(owner)
        return given_id if len(looks) == 1 else real(session, given_id, owner)

    monkeypatch.setattr(transfer, "_free_key", looked_before_a_stored)
    [outcome] = import_files(store, paths[1:], pin_for=pin_for_digest)
    assert (outcome.state, outcome.run_id) == ("stored", qualified_key(first["run"]["id"], "b"))
    assert looks == ["b", "b"]
