"""Issue 41 items 12 and 19: `nightly --upload` said nothing of the upload's outcome and exited 0
when the service refused the bundle; `--trigger` longer than its column was a traceback at the end
of the run on PostgreSQL. A real CPU nightly against a real service on loopback."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from werkzeug.serving import make_server

from regress.cli import main
from regress.server import create_app
from regress.server.tokens import create_token
from regress.store.db import current_revision, make_engine


@pytest.mark.slow  # a real CPU nightly (~30 s)
def test_a_refused_upload_is_printed_and_exits_non_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    service_db = f"sqlite:///{tmp_path / 'service.db'}"
    app = create_app({"DATABASE_URL": service_db, "MAX_CONTENT_LENGTH": 1024})  # every bundle: 413
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("REGRESS_TOKEN", create_token(app.extensions["regress.store"], "cpu-1")[1])
        monkeypatch.setenv("REGRESS_SPOOL_DIR", str(tmp_path / "spool"))
        argv = ["nightly", "--backend", "cpu", "--quick", "--suites", "determinism"]
        argv += ["--db", f"sqlite:///{tmp_path / 'local.db'}", "--out", str(tmp_path / "out")]
        code = main([*argv, "--upload", f"http://127.0.0.1:{server.server_port}"])
    finally:
        server.shutdown()
        server.server_close()
    err = capsys.readouterr().err
    assert code == 2
    assert "upload: rejected" in err and "[413]" in err
    assert len(list((tmp_path / "spool" / "rejected").glob("*.json"))) == 1  # kept aside, not lost


def test_a_trigger_longer_than_its_column_is_refused_before_the_run(
    tmp_path: Path, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # On PostgreSQL this was a StringDataRightTruncation traceback; SQLite kept the 33 characters.
    assert main(["nightly", "--backend", "cpu", "--trigger", "x" * 33, "--db", db_url]) == 2
    assert "--trigger" in capsys.readouterr().err
    engine = make_engine(db_url)
    try:
        assert current_revision(engine) is None  # refused before the database was touched
    finally:
        engine.dispose()
    assert main(["nightly", "--backend", "cpu", "--trigger", "a\nb", "--db", db_url]) == 2
