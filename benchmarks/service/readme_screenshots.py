"""Regenerates README's two site screenshots from the bundles the tour imports (issue 42).

    python benchmarks/service/readme_screenshots.py [README]   # writes docs/img/site-real-{index,case}.png

It runs README's `regress import` globs (as bash expands them) into a fresh database, renders the
site with `regress site`'s own function, and photographs the index and the case page of the
headline run's largest perf shape in headless Chromium at 1280 px, so the pictures show what a
newcomer's tour builds, and the numbers README states (tests/test_readme_numbers.py checks those).
"""

from __future__ import annotations

import glob
import re
import shlex
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "kit"))  # the Chromium driver the site tests use


def tour_bundles(readme: Path) -> list[Path]:
    block = re.search(r"## A five-minute tour\s+```bash\n(.*?)```", readme.read_text(), re.S)
    assert block, "README has no five-minute tour"
    found: list[Path] = []
    for line in block.group(1).splitlines():
        words = shlex.split(line.split("  #")[0])
        if words[:2] == ["regress", "import"]:
            for word in words[2:]:
                found += [Path(p) for p in sorted(glob.glob(str(ROOT / word)))]
    return found


def main(argv: list[str]) -> int:
    from cdp import Browser

    from regress.machine.pins import pin_for_digest
    from regress.present.site import build_site
    from regress.store.repo import open_store
    from regress.store.transfer import import_files

    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"sqlite:///{tmp}/tour.db")
        readme = Path(argv[0]) if argv else ROOT / "README.md"  # a proposed README, to try it
        outcomes = import_files(store, tour_bundles(readme), pin_for=pin_for_digest)
        refused = [o.line() for o in outcomes if o.state == "refused"]
        if refused:
            print("\n".join(refused), file=sys.stderr)
            return 2
        out = Path(tmp) / "site"
        build_site(store, out)
        store.engine.dispose()
        # The perf case with the most history: case pages are named by key, so read their heading.
        case = max(
            (p for p in (out / "case").glob("*.html") if "perf · " in p.read_text()[:3000]),
            key=lambda p: p.stat().st_size,
        )
        img = ROOT / "docs" / "img"
        with Browser(width=1280, height=900) as browser:
            for page, name in ((out / "index.html", "site-real-index.png"), (case, "site-real-case.png")):
                browser.open(page)
                browser.screenshot(img / name)  # the first screen: what README shows
                print(f"{img / name}  <- {page.relative_to(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
