"""Issue 41 items 10, 11, 15, the rules both doors (the service, `regress import`) now share in
regress.facts.bundle.validate_bundle: a schema `$` is the end of the string (Python's also matched before
a final newline: `aaaaaaaa\\n` was a run id), case names are stored NFC (an NFD spelling became a
second case that looks the same), and `regress import` refuses a run from the future as the service
did (a 2999 `started_at` became every `stack:NAME` gate's baseline)."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest
from ingest_bundles import make_bundle
from ingest_client import post
from ingest_server import Service
from sqlalchemy import select

from regress.cli import main
from regress.store.case import Case


@pytest.mark.parametrize(
    "field,value",
    [
        ("id", "aaaaaaaa\n"),
        ("backend", "hip\n"),
        ("kernel_commit", "0" * 40 + "\n"),
        ("trigger", "nightly\n"),
    ],
)
def test_a_trailing_newline_matches_no_pattern(
    service: Service, field: str, value: str, tmp_path: Path
) -> None:
    bundle = make_bundle()
    bundle["run"][field] = value
    resp = post(service, bundle, service.token("r1"))
    assert resp.status_code == 400 and f"bundle.run.{field}" in resp.json()["error"], resp.text
    path = tmp_path / "b.json"
    path.write_text(json.dumps(bundle))
    assert main(["import", str(path), "--db", f"sqlite:///{tmp_path / 'i.db'}"]) == 2


def test_nfc_and_nfd_spellings_are_one_case(service: Service) -> None:
    token = service.token("r1")
    for form in ("NFC", "NFD"):
        bundle = make_bundle()
        res = bundle["results"][0]
        res.pop("case_key", None)
        res["name"] = unicodedata.normalize(form, "café-b2")
        assert post(service, bundle, token).status_code == 201
    with service.store.reader() as session:
        names = [n for n in session.scalars(select(Case.name)) if n.startswith("caf")]
    assert names == [unicodedata.normalize("NFC", "café-b2")]


def test_import_refuses_a_run_from_the_future(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bundle = make_bundle()
    bundle["run"]["started_at"] = "2999-12-30T00:00:00"
    bundle["run"]["finished_at"] = None
    path = tmp_path / "future.json"
    path.write_text(json.dumps(bundle))
    assert main(["import", str(path), "--db", f"sqlite:///{tmp_path / 'i.db'}"]) == 2
    assert "bundle.run.started_at" in capsys.readouterr().err
