"""Issue #42 item 1: a stop signal ends a command cleanly.

Real signals to real `regress` subprocesses (CPU backend). `nightly`: the first SIGTERM/SIGINT/SIGHUP
ends the run like its deadline (every case a status, the bundle written and spooled, the run stored
'cancelled', exit 128 + N, no traceback); a second one exits at once. `import`, `site`, `serve` and
`demo-history` stop on SIGTERM with one line and exit 143.

Where a signal must land inside a step, the step is made to wait (a hung case, a FIFO, or one
function wrapped in the child, as tests/test_nightly_kill.py aims its kills), so what the signal
meets never depends on timing.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from committed import headline

from regress.facts.bundle import read_bundle

ROOT = Path(__file__).resolve().parent.parent
BUNDLES = headline()


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "REGRESS_TOKEN": "unused",
        "REGRESS_SPOOL_DIR": str(tmp_path / "spool"),
    }


def _start(tmp_path: Path, args: list[str], child: str | None = None) -> subprocess.Popen[str]:
    code = child or "import sys\nfrom regress.cli import main\nsys.exit(main(sys.argv[1:]))"
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env=_env(tmp_path),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(what: Callable[[], bool], proc: subprocess.Popen[str], limit: float = 300) -> None:
    ends = time.monotonic() + limit
    while not what():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the command ended (rc {proc.returncode}) before it was signalled:\n{out}\n{err}")
        assert time.monotonic() < ends, "the command never reached the point to signal"
        time.sleep(0.2)


def _rows(db: Path, sql: str) -> list[tuple[object, ...]]:
    if not db.exists():
        return []
    try:
        with sqlite3.connect(db, timeout=1) as con:
            return list(con.execute(sql))
    except sqlite3.OperationalError:  # no schema yet, or locked for a moment
        return []


def _no_traceback(err: str) -> None:
    assert "Traceback" not in err, err
    assert "_Terminated" not in err, err


def _nightly_args(tmp_path: Path, db: Path) -> list[str]:
    # The first ULP unit (Sq = 113) hangs with a limit far beyond the test: no case can end before
    # the signal, so every case is the signal's skip.
    return [
        "nightly", "--backend", "cpu", "--quick", "--suites", "ulp", "--db", f"sqlite:///{db}",
        "--out", str(tmp_path / "out"), "--inject", "hang=113", "--case-timeout", "600",
        "--upload", "http://127.0.0.1:9",
    ]  # fmt: skip


@pytest.mark.e2e
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_ends_a_nightly_like_its_deadline(tmp_path: Path, signum: signal.Signals) -> None:
    db = tmp_path / "r.db"
    proc = _start(tmp_path, _nightly_args(tmp_path, db))
    _wait_for(lambda: bool(_rows(db, "SELECT id FROM runs WHERE status = 'running'")), proc)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    _no_traceback(err)
    assert proc.returncode == 128 + signum, (out, err)
    assert "building the kernel" in err  # piped progress: plain lines on stderr (item 5)
    ((run_id, status, message, exit_code),) = _rows(db, "SELECT id, status, message, exit_code FROM runs")
    assert status == "cancelled" and exit_code == 128 + signum
    why = f"cancelled by {signum.name}"
    n = len(_rows(db, "SELECT id FROM results"))
    assert message == f"{why}: 0 of {n} cases ran, {n} case(s) not run (recorded 'skip')"
    results = _rows(db, "SELECT status, message FROM results")
    assert results and all(s == "skip" and m.startswith(f"{why}: the run was cancelled") for s, m in results)
    bundle = read_bundle(tmp_path / "out" / "bundles" / f"{run_id}.json")
    assert bundle["run"]["status"] == "cancelled" and len(bundle["results"]) == len(results)
    assert read_bundle(tmp_path / "spool" / f"{run_id}.json") == bundle  # spooled for the next upload
    assert out.strip().splitlines()[-1] == message  # the one line that says how it ended
    # The run is shown as cancelled, and its own import takes it back.
    listed = subprocess.run(
        [sys.executable, "-m", "regress", "runs", "list", "--db", f"sqlite:///{db}", "--json"],
        env=_env(tmp_path), capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert [r["status"] for r in json.loads(listed.stdout)] == ["cancelled"]
    other = tmp_path / "other.db"
    imported = subprocess.run(
        [sys.executable, "-m", "regress", "import", str(tmp_path / "out" / "bundles" / f"{run_id}.json"),
         "--db", f"sqlite:///{other}"],
        env=_env(tmp_path), capture_output=True, text=True,
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr


# The child: the real `regress nightly`, held where it writes the bundle (inside the transaction
# that ends the run), so a second signal meets the first one's unfinished end.
HOLD_THE_FINISH = """
import sys, time
from pathlib import Path
import regress.run.nightly as nightly
from regress.cli import main

write = nightly.write_bundle

def held(*args, **kw):
    Path("held").write_text("")
    time.sleep(600)
    return write(*args, **kw)

nightly.write_bundle = held
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.e2e
def test_a_second_signal_exits_at_once(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    proc = _start(tmp_path, _nightly_args(tmp_path, db), child=HOLD_THE_FINISH)
    _wait_for(lambda: bool(_rows(db, "SELECT id FROM runs WHERE status = 'running'")), proc)
    proc.send_signal(signal.SIGINT)
    _wait_for(lambda: (tmp_path / "held").exists(), proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)  # not the held 600 s
    _no_traceback(err)
    assert proc.returncode == 130, (out, err)
    assert "second signal" in err.strip().splitlines()[-1]
    ((status,),) = _rows(db, "SELECT status FROM runs")
    assert status == "incomplete"  # not left "running" for the reaper


@pytest.mark.slow
def test_import_stops_on_sigterm_between_bundles(tmp_path: Path) -> None:
    """The second 'bundle' is a FIFO nobody writes: the import waits there after storing the first."""
    db = tmp_path / "r.db"
    fifo = tmp_path / "stalled.json"
    os.mkfifo(fifo)
    proc = _start(tmp_path, ["import", str(BUNDLES[0]), str(fifo), "--db", f"sqlite:///{db}"])
    _wait_for(lambda: bool(_rows(db, "SELECT id FROM runs")), proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    _no_traceback(err)
    assert proc.returncode == 143 and err.strip().splitlines()[-1] == "regress: stopped by SIGTERM"
    stored = json.loads(BUNDLES[0].read_text())
    assert _rows(db, "SELECT count(*) FROM results") == [(len(stored["results"]),)]


HOLD_THE_SITE = """
import sys, time
from pathlib import Path
import regress.present.site.writer as writer
from regress.cli import main

render = writer.SiteWriter._render

def held(self, job):
    Path("held").write_text("")
    time.sleep(600)
    return render(self, job)

writer.SiteWriter._render = held
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_site_stops_on_sigterm_while_writing(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    url = f"sqlite:///{db}"
    env = _env(tmp_path)
    subprocess.run(
        [sys.executable, "-m", "regress", "import", str(BUNDLES[0]), "--db", url], env=env, check=True
    )
    proc = _start(tmp_path, ["site", "--out", str(tmp_path / "site"), "--db", url], child=HOLD_THE_SITE)
    _wait_for(lambda: (tmp_path / "held").exists(), proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    _no_traceback(err)
    assert proc.returncode == 143 and err.strip().splitlines()[-1] == "regress: stopped by SIGTERM"
    again = subprocess.run(
        [sys.executable, "-m", "regress", "site", "--out", str(tmp_path / "site"), "--db", url],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr  # what the stopped render left is no obstacle


@pytest.mark.slow
def test_serve_stops_on_sigterm(tmp_path: Path) -> None:
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = _start(tmp_path, ["serve", "--port", str(port), "--db", f"sqlite:///{tmp_path / 'r.db'}"])

    def answers() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    _wait_for(answers, proc, limit=60)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    _no_traceback(err)
    assert proc.returncode == 143 and err.strip().splitlines()[-1] == "regress: stopped by SIGTERM"


@pytest.mark.slow
def test_demo_history_stops_on_sigterm(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    proc = _start(tmp_path, ["demo-history", "--db", f"sqlite:///{db}"])
    _wait_for(lambda: bool(_rows(db, "SELECT id FROM runs")), proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    _no_traceback(err)
    assert proc.returncode == 143 and err.strip().splitlines()[-1] == "regress: stopped by SIGTERM"
