"""Issue #24 item 17 (in part): a second render into one folder is refused with a clear line, and
the temporary files a killed render left are removed by the next one."""

from __future__ import annotations

import fcntl
from pathlib import Path

import pytest

from regress.cli import main
from regress.errors import UserError
from regress.site import LOCK_FILE, build_site
from regress.store.repo import Store


def test_17_a_second_render_into_one_folder_is_refused(
    store: Store, tmp_path: Path, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "site"
    build_site(store, out)
    with open(out / LOCK_FILE, "w") as held:  # a render in progress holds this lock
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(UserError, match="another `regress site` is rendering into"):
            build_site(store, out)
        assert main(["site", "--out", str(out), "--db", db_url]) == 2
        assert "one render per folder" in capsys.readouterr().err
    build_site(store, out)  # the lock released: renders again


def test_17_a_killed_renders_temp_files_are_removed(store: Store, tmp_path: Path) -> None:
    out = tmp_path / "site"
    build_site(store, out)
    left = [
        out / ".index.html.12345.tmp",
        out / "run" / ".x.html.999.tmp",
        out / ".regress-site" / "results.tmp.npz",
    ]
    for path in left:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"half")
    build_site(store, out)
    assert not [p for p in left if p.exists()]
    assert (out / "index.html").is_file()
