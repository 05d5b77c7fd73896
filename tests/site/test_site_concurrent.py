"""Issue #24 item 17 (in part): a second render into one folder is refused with a clear line, and
the temporary files a killed render left are removed by the next one."""

from __future__ import annotations

import fcntl
from pathlib import Path

import pytest

from regress.cli import main
from regress.facts.errors import UserError
from regress.present.site import LOCK_FILE, build_site
from regress.store.repo import Store


def test_a_second_render_into_one_folder_is_refused(
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


def test_a_killed_renders_temp_files_are_removed(store: Store, tmp_path: Path) -> None:
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


def _damaged(original: object) -> list[object]:
    """Valid JSON of the wrong shape: generic values, then the real document with each top-level
    value (and each value one level down) replaced by a wrong type."""
    out: list[object] = [[], 1, "x", None, {}, [original]]
    if isinstance(original, dict):
        for key, value in original.items():
            for bad in ([1], "x", 1.5, None, {"k": [None]}):
                if bad != value:
                    out.append({**original, key: bad})
            if isinstance(value, dict) and value:
                first = next(iter(value))
                out.append({**original, key: {**value, first: {"bad": 1}}})
                out.append({**original, key: {**value, first: [[1, "sideways", "x", None]]}})
    return out


# One site render per damaged variant: results.json stays in the plain tier, the two files with the
# most variants (about 12 s and 8 s) run in the slow tier.
@pytest.mark.parametrize(
    "name",
    [
        pytest.param("manifest.json", marks=pytest.mark.slow),
        "results.json",
        pytest.param("changepoints.json", marks=pytest.mark.slow),
    ],
)
def test_a_damaged_cache_or_manifest_is_read_again(store: Store, tmp_path: Path, name: str) -> None:
    import json

    from regress.present.demo import demo_history

    demo_history(store, nights=10, cases=12, seed=1)
    out = tmp_path / "site"
    build_site(store, out)
    path = out / ".regress-site" / name
    original = json.loads(path.read_text())
    pages = sorted(p.relative_to(out) for p in out.rglob("*.html"))
    variants = _damaged(original)
    for bad in variants:
        path.write_text(json.dumps(bad))
        build_site(store, out)  # crashed on 9 of 11 such files on main
        assert sorted(p.relative_to(out) for p in out.rglob("*.html")) == pages
    assert len(variants) >= 11
