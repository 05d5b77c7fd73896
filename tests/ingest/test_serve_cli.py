"""`regress serve` as a real process: it comes up, migrates its database and answers."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from ingest_server import free_port


@pytest.mark.slow  # a real `regress serve` process, started and stopped
def test_regress_serve_process(tmp_path: Path) -> None:
    port = free_port()
    db = f"sqlite:///{tmp_path / 'served.db'}"
    argv = [sys.executable, "-m", "regress", "serve", "--port", str(port), "--db", db, "--max-bundle-mb", "1"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                health = requests.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except requests.ConnectionError:
                assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
                assert time.monotonic() < deadline, "regress serve did not come up"
                time.sleep(0.2)
        assert health.json() == {"status": "ok", "database": "ok"}
        token = subprocess.run(
            [sys.executable, "-m", "regress", "token", "create", "runner-1", "--db", db],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        big = requests.post(
            f"http://127.0.0.1:{port}/api/v1/runs",
            data=b"x" * (2 * 1024 * 1024),
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        assert big.status_code == 413  # --max-bundle-mb 1
        assert requests.get(f"http://127.0.0.1:{port}/api/v1/runs", timeout=5).json()["runs"] == []
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-1"])
def test_serve_refuses_a_limit_that_is_no_size(
    value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # nan and inf raised a traceback from int(); 0 and -1 served, answering 413 to every upload.
    from regress.cli import main

    db = f"sqlite:///{tmp_path / 'served.db'}"
    assert main(["serve", "--port", str(free_port()), "--db", db, "--max-bundle-mb", value]) == 2
    assert "--max-bundle-mb must be a positive number" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["64MB", "0", "-5"])
def test_serve_refuses_a_bad_limit_variable(
    value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from regress.cli import main
    from regress.server import create_app

    monkeypatch.setenv("REGRESS_MAX_BUNDLE_BYTES", value)
    db = f"sqlite:///{tmp_path / 'served.db'}"
    assert main(["serve", "--port", str(free_port()), "--db", db]) == 2
    assert "$REGRESS_MAX_BUNDLE_BYTES must be a positive number of bytes" in capsys.readouterr().err
    with pytest.raises(ValueError, match="REGRESS_MAX_BUNDLE_BYTES"):  # gunicorn's create_app()
        create_app({"DATABASE_URL": db})
