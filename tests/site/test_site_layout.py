"""Issue #42 item 6: the pages read well at 1280 px with five stacks, in a real headless Chromium.

- Every table fits its page: a table wider than its box sits in a `.scroll` box no wider than the
  page's main column, and the page itself never scrolls sideways.
- Every regression's change carries its unit (a ULP change as "× the limit", not a bare 0.08667
  under a "% for perf" heading).
- Stack pages list their runs with links, and their gate verdicts.
- Drill findings are apart from the real ones, on the index and the regressions page.
- Charts are not empty; screenshots are 1280 px wide.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import NIGHTS, START
from sqlalchemy import select

from regress.present.demo import demo_history
from regress.present.site import build_site
from regress.store import Regression
from regress.store.repo import Store, open_store

pytestmark = [pytest.mark.chromium, pytest.mark.slow]

WIDTH = 1280
# A table is "too wide" when it is wider than its container by more than a rounding pixel, and
# that container is not a scroll box, or the scroll box is wider than the page's main column.
OVERFLOW_JS = """
(() => {
  const bad = [];
  const doc = document.documentElement;
  if (doc.scrollWidth > doc.clientWidth + 1) bad.push(`page ${doc.scrollWidth} > ${doc.clientWidth}`);
  const main = document.querySelector('main');
  for (const t of document.querySelectorAll('table')) {
    const box = t.parentElement;
    const name = t.id || (t.querySelector('th') || {}).textContent || '?';
    if (box.classList.contains('scroll')) {
      if (box.getBoundingClientRect().right > main.getBoundingClientRect().right + 1)
        bad.push(`scroll box of ${name} runs past main`);
    } else if (t.scrollWidth > box.clientWidth + 1) {
      bad.push(`${name}: ${t.scrollWidth} > ${box.clientWidth} outside a scroll box`);
    }
  }
  return bad;
})()
"""


@pytest.fixture(scope="module")
def five_stacks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, Path]]:
    tmp = tmp_path_factory.mktemp("five")
    store = open_store(f"sqlite:///{tmp / 'five.db'}")
    demo_history(store, nights=NIGHTS, stacks=5, cases=24, seed=5, samples=8, start=START)
    with store.transaction() as s:  # one finding of a fire drill, as the nightly stores it
        reg = s.scalars(select(Regression).where(Regression.kind != "numerics")).first()
        assert reg is not None
        reg.details = {**reg.details, "drill": True}
        reg.state = "acknowledged"
    out = tmp / "site"
    build_site(store, out)
    yield store, out
    store.engine.dispose()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from cdp import Browser, find_chromium

    if find_chromium() is None:
        pytest.skip("chromium not installed (Debian: apt-get install chromium; .ci/run installs it)")
    b = Browser(width=WIDTH, height=900)
    yield b
    b.close()


def _pages(out: Path) -> list[Path]:
    case = next(p for p in sorted((out / "case").glob("*.html")) if 'id="chart-main"' in p.read_text())
    return [
        out / "index.html",
        out / "regressions.html",
        out / "runs.html",
        out / "stacks.html",
        out / "gates.html",
        *sorted((out / "stack").glob("*.html"))[:8],
        next((out / "run").glob("*.html")),
        next((out / "gate").glob("*.html")),
        case,
    ]


def _png_size(path: Path) -> tuple[int, int]:
    w, h = struct.unpack(">II", path.read_bytes()[16:24])
    return w, h


def test_five_current_stacks(five_stacks: tuple[Store, Path]) -> None:
    _, out = five_stacks
    header = re.search(r'<table id="cases">.*?</thead>', (out / "index.html").read_text(), re.S)
    assert header is not None and header.group(0).count("latest value") >= 5


def test_every_table_fits_at_1280(five_stacks: tuple[Store, Path], browser: Any, tmp_path: Path) -> None:
    _, out = five_stacks
    problems = {}
    for page in _pages(out):
        browser.open(page)
        if bad := browser.eval(OVERFLOW_JS):
            problems[str(page.relative_to(out))] = bad
    browser.open(out / "index.html")
    shot = tmp_path / "index.png"
    browser.screenshot(shot)
    assert _png_size(shot)[0] == WIDTH
    assert not problems, json.dumps(problems, indent=1)


def test_no_empty_chart(five_stacks: tuple[Store, Path], browser: Any) -> None:
    _, out = five_stacks
    browser.open(_pages(out)[-1])
    assert browser.eval("document.documentElement.dataset.charts") is not None
    charts = browser.eval("document.querySelectorAll('.chart svg').length")
    drawn = browser.eval(
        "[...document.querySelectorAll('.chart svg')].filter(s => s.querySelectorAll('.points circle').length"
        " && [...s.querySelectorAll('path.line')].some(p => (p.getAttribute('d') || '').length > 10)).length"
    )
    assert charts >= 1 and drawn == charts


UNIT = re.compile(r"(%|× the limit|points of elements > 1 ULP|distinct outputs|spilled|registers)")


def test_every_change_has_its_unit(five_stacks: tuple[Store, Path], browser: Any) -> None:
    _, out = five_stacks
    browser.open(out / "regressions.html")
    heads = browser.eval("[...document.querySelectorAll('#regressions th')].map(t => t.textContent)")
    assert "change" in heads and not any("% for perf" in h for h in heads)
    col = heads.index("change")
    cells = browser.eval(
        f"[...document.querySelectorAll('#regressions tbody tr')].map(r => r.children[{col}].textContent)"
    )
    kinds = browser.eval(
        f"[...document.querySelectorAll('#regressions tbody tr')].map(r => r.children[{heads.index('kind')}]"
        ".textContent)"
    )
    assert "numerics" in kinds  # the demo's ULP contract regression
    shown = [c for c in cells if c.strip() not in ("", "–")]
    assert shown and all(UNIT.search(c) for c in shown), shown
    assert any("× the limit" in c for c, k in zip(cells, kinds, strict=True) if k == "numerics")


def test_stack_pages_list_their_runs_and_verdicts(five_stacks: tuple[Store, Path], browser: Any) -> None:
    _, out = five_stacks
    pages = [p for p in sorted((out / "stack").glob("*.html")) if not p.name.startswith("diff-")]
    assert len(pages) >= 5
    with_verdicts = 0
    for page in pages:
        browser.open(page)
        links = browser.eval(
            "[...document.querySelectorAll('#stack-runs a')].map(a => a.getAttribute('href'))"
        )
        assert links and all(re.fullmatch(r"\.\./run/[0-9a-z-]+\.html", h) for h in links), page.name
        assert all((page.parent / h).resolve().is_file() for h in links)
        with_verdicts += bool(browser.eval("document.querySelectorAll('#stack-verdicts tbody tr').length"))
    assert with_verdicts >= 1  # the demo's upgrade nights are gated


def test_drill_findings_are_apart(five_stacks: tuple[Store, Path], browser: Any) -> None:
    store, out = five_stacks
    with store.reader() as s:
        live = [r for r in s.scalars(select(Regression)) if r.state in ("open", "acknowledged")]
    real = [r for r in live if not r.details.get("drill")]
    assert len(live) - len(real) == 1
    browser.open(out / "regressions.html")
    assert browser.eval("document.querySelectorAll('#drill-regressions tbody tr').length") == 1
    assert browser.eval("document.querySelectorAll('#regressions tbody tr').length") >= len(real)
    browser.open(out / "index.html")
    assert browser.eval("document.querySelector('#drill-note') !== null")
    assert browser.eval("document.querySelectorAll('#open-regressions tbody tr').length") == len(real)
