"""The site never deletes outside its output folder, whatever its manifest says (issue #13)."""

from __future__ import annotations

import json
from pathlib import Path

from regress.present.site import build_site
from regress.present.site.writer import MANIFEST_VERSION
from regress.store.repo import Store


def test_site_manifest_cannot_delete_outside_the_output(store: Store, tmp_path: Path) -> None:
    out = tmp_path / "site"
    build_site(store, out)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    manifest = out / ".regress-site" / "manifest.json"
    doc = json.loads(manifest.read_text())
    assert doc["version"] == MANIFEST_VERSION
    doc["pages"]["../victim.txt"] = ["k", "d"]
    doc["pages"][str(victim)] = ["k", "d"]
    manifest.write_text(json.dumps(doc))
    build_site(store, out)
    assert victim.read_text() == "keep me"
