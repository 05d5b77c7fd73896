"""The upload client against what a shared deployment puts in its way: a proxy that redirects, a
proxy's own JSON error, a token pasted with a newline or a smart quote, a URL without a scheme.
Each leaves the bundle spooled or refuses with one line; none loses a bundle or prints the token."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ingest_bundles import make_bundle
from ingest_client import FAST
from ingest_server import Service
from sqlalchemy import select
from werkzeug.serving import make_server

from regress.cli import main
from regress.facts.bundle import write_bundle
from regress.run.upload import spooled_files, upload_bundles
from regress.store import Run

REPO = Path(__file__).resolve().parents[2]


def _front(app: Any) -> Iterator[str]:
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def redirecting(service: Service) -> Iterator[str]:
    """A front that answers every request 301 to the same path on the real service (an http:// URL
    in front of an https-only proxy)."""

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("301 MOVED PERMANENTLY", [("Location", service.url + environ["PATH_INFO"])])
        return [b""]

    yield from _front(app)


@pytest.fixture
def json_list_errors() -> Iterator[str]:
    """A proxy whose error body is JSON but not an object."""

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("502 BAD GATEWAY", [("Content-Type", "application/json")])
        return [b'["upstream down"]']

    yield from _front(app)


def _stored(service: Service) -> list[str]:
    with service.store.reader() as session:
        return list(session.scalars(select(Run.id)))


def test_redirect_keeps_the_bundle_spooled(service: Service, redirecting: str, tmp_path: Path) -> None:
    # requests followed the 301 as a GET of the run list; its 200 removed the bundle from the spool
    # as "duplicate" though nothing was stored.
    path = write_bundle(make_bundle(), tmp_path / "out")
    spool = tmp_path / "spool"
    report = upload_bundles([path], redirecting, service.token("h200-01"), spool, policy=FAST)
    [outcome] = report.outcomes
    assert (outcome.state, outcome.status) == ("spooled", 301)
    assert service.url in outcome.message
    assert len(spooled_files(spool)) == 1
    assert _stored(service) == []


def test_proxy_json_that_is_not_an_object(json_list_errors: str, tmp_path: Path) -> None:
    path = write_bundle(make_bundle(), tmp_path / "out")
    report = upload_bundles([path], json_list_errors, "rgr_x", tmp_path / "spool", policy=FAST)
    [outcome] = report.outcomes
    assert outcome.state == "spooled" and "upstream down" in outcome.message
    assert len(spooled_files(tmp_path / "spool")) == 1


def test_token_with_a_trailing_newline_uploads(
    service: Service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REGRESS_SPOOL_DIR", str(tmp_path / "spool"))
    monkeypatch.setenv("REGRESS_TOKEN", service.token("h200-01") + "\n")
    path = write_bundle(make_bundle(), tmp_path / "out")
    assert main(["upload", str(path), "--url", service.url]) == 0
    assert len(_stored(service)) == 1


@pytest.mark.parametrize("wrap", ["\u201c{}\u201d", "{} extra", "{}\x07"])
def test_unsendable_token_is_one_line_without_the_token(
    service: Service,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    wrap: str,
) -> None:
    token = service.token("h200-01")
    monkeypatch.setenv("REGRESS_SPOOL_DIR", str(tmp_path / "spool"))
    monkeypatch.setenv("REGRESS_TOKEN", wrap.format(token))
    path = write_bundle(make_bundle(), tmp_path / "out")
    assert main(["upload", str(path), "--url", service.url]) == 2
    err = capsys.readouterr().err
    assert "REGRESS_TOKEN" in err and token not in err
    assert spooled_files(tmp_path / "spool") == [] and _stored(service) == []


@pytest.mark.parametrize("url", ["127.0.0.1:8080", "ftp://host", "http://host:port", "http://"])
def test_bad_service_url_is_one_line(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REGRESS_SPOOL_DIR", str(tmp_path / "spool"))
    monkeypatch.setenv("REGRESS_TOKEN", "rgr_x")
    path = write_bundle(make_bundle(), tmp_path / "out")
    assert main(["upload", str(path), "--url", url]) == 2
    assert "service URL" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("token", "url", "says"),
    [
        ("rgr_\u201cquoted\u201d", "http://127.0.0.1:9", "non-ASCII"),
        ("rgr_fine", "127.0.0.1:9", "must be http://HOST"),
    ],
)
def test_nightly_upload_refuses_an_unsendable_token_or_url_before_it_runs(
    tmp_path: Path, token: str, url: str, says: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """`regress nightly --upload` checks the token and the URL as `regress upload` does, before
    anything runs: it used to run every suite, store the run and then end in a traceback. (In this
    process, as `main` runs for the console script: a subprocess cost 2-4 s a case here.)"""
    db = tmp_path / "n.db"
    monkeypatch.setenv("REGRESS_TOKEN", token)
    monkeypatch.setenv("REGRESS_SPOOL_DIR", str(tmp_path / "spool"))
    cmd = ["nightly", "--backend", "cpu", "--quick", "--upload", url]
    cmd += ["--db", f"sqlite:///{db}", "--out", str(tmp_path / "out")]
    assert main(cmd) == 2
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in err, err[-2000:]
    assert "quoted" not in err  # the token is a secret: never printed
    assert not db.exists() and not (tmp_path / "out").exists()
