"""Issue #24 item 4: nothing is lost between "complete" and the bundle.

Aimed SIGKILLs of a real `regress nightly` (CPU backend) at the two points around the end of a run:
just after the finish is committed (where main committed 'complete' and had not yet written or
spooled the bundle) and just after the bundle is spooled but before the commit. The kill is aimed by
wrapping one function in the child process; everything else is the real command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from committed import headline
from sqlalchemy import select

from regress.cli import main
from regress.facts.bundle import read_bundle
from regress.store import Run
from regress.store.repo import open_store

# The child: `regress nightly ARGS...` with a SIGKILL at the aimed point.
CHILD = """
import os, signal, sys
import regress.run.nightly as nightly
import regress.run.upload as upload
from regress.cli import main

point = sys.argv[1]
if point == "after-commit":  # the run is finished in the store; the analysis comes next
    nightly._analyse = lambda store, run_id: os.kill(os.getpid(), signal.SIGKILL)
else:  # "before-commit": the bundle is written and spooled, the finish not yet committed
    spool = upload.spool_bundle

    def spool_then_die(bundle, spool_dir=None):
        spool(bundle, spool_dir)
        os.kill(os.getpid(), signal.SIGKILL)

    upload.spool_bundle = spool_then_die
sys.exit(main(sys.argv[2:]))
"""


def _nightly(tmp_path: Path, db_url: str, point: str) -> int:
    args = ["nightly", "--backend", "cpu", "--quick", "--suites", "ulp", "--db", db_url]
    args += ["--out", str(tmp_path / "out"), "--upload", "http://127.0.0.1:9"]
    env = {**os.environ, "REGRESS_TOKEN": "unused", "REGRESS_SPOOL_DIR": str(tmp_path / "spool")}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, point, *args], env=env, capture_output=True, timeout=600, cwd=tmp_path
    )
    return done.returncode


def _runs(db_url: str) -> list[Run]:
    store = open_store(db_url)
    try:
        with store.reader() as s:
            return list(s.scalars(select(Run)))
    finally:
        store.engine.dispose()


@pytest.mark.slow
def test_kill_after_the_finish_leaves_the_bundle_written_and_spooled(tmp_path: Path, db_url: str) -> None:
    assert _nightly(tmp_path, db_url, "after-commit") == -9
    (run,) = _runs(db_url)
    assert run.status == "complete"
    bundle = read_bundle(tmp_path / "out" / "bundles" / f"{run.id}.json")
    spooled = read_bundle(tmp_path / "spool" / f"{run.id}.json")
    assert bundle == spooled and bundle["run"]["status"] == "complete"
    assert len(bundle["results"]) >= 1


@pytest.mark.slow
def test_kill_before_the_commit_is_restored_from_the_bundle(tmp_path: Path, db_url: str) -> None:
    assert _nightly(tmp_path, db_url, "before-commit") == -9
    (run,) = _runs(db_url)
    assert run.status == "running"  # the finish was never committed...
    spooled = read_bundle(tmp_path / "spool" / f"{run.id}.json")
    assert spooled["run"]["status"] == "complete"  # ...but the bundle saying how it ended is kept
    # The next nightly reaps the dead run and restores its end from the bundle it had written.
    assert main(["nightly", "--backend", "cpu", "--quick", "--suites", "ulp", "--db", db_url,
                 "--out", str(tmp_path / "out")]) == 0  # fmt: skip
    first = next(r for r in _runs(db_url) if r.id == run.id)
    assert first.status == "complete"
    assert first.exit_code == spooled["run"]["exit_code"] == 0
    assert first.summary == spooled["run"]["summary"]


@pytest.mark.slow  # a whole nightly, then its bundle rebuilt from the store (~3-5 s)
def test_upload_run_recreates_a_bundle_from_the_store(tmp_path: Path, db_url: str) -> None:
    """`regress upload --run ID` spools the stored run's bundle (here: the service is down)."""
    from regress.machine.pins import pin_for_digest
    from regress.store.transfer import export_bundle, import_bundle

    store = open_store(db_url)
    bundle = json.loads(headline()[0].read_text())
    with store.transaction() as s:
        run_id, _ = import_bundle(s, bundle, pin=pin_for_digest(bundle["stack"]["digest"]))
    with store.reader() as s:
        stored = export_bundle(s, run_id)
    store.engine.dispose()
    spool = tmp_path / "spool"
    os.environ["REGRESS_TOKEN"] = "unused"
    try:
        code = main(["upload", "--run", run_id[:10], "--db", db_url, "--url", "http://127.0.0.1:9",
                     "--spool", str(spool)])  # fmt: skip
    finally:
        del os.environ["REGRESS_TOKEN"]
    assert code == 2  # spooled, the service unreachable
    assert read_bundle(spool / f"{run_id}.json") == stored
