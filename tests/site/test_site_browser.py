"""The site in a real headless Chromium, from file://: no console errors, charts draw, hover shows
the run, regressions are visible, <script> names stay text, filters work."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import EVIL, EVIL_BRANCH, EVIL_CASE, Site
from sqlalchemy import select

from regress.store import Case, Regression

pytestmark = [pytest.mark.chromium, pytest.mark.slow]  # a headless Chromium per module: seconds of start-up


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from cdp import Browser, find_chromium

    if find_chromium() is None:
        pytest.skip("chromium not installed (Debian: apt-get install chromium; .ci/run installs it)")
    try:
        import websocket  # noqa: F401
    except ImportError:
        pytest.skip("websocket-client not installed (pip install websocket-client)")
    b = Browser(width=1400, height=900)
    yield b
    b.close()


def _open(browser: Any, path: Any) -> None:
    browser.clear_events()
    browser.open(path)


def _case_with_open_regression(site: Site) -> str:
    with site.store.reader() as s:
        return (
            s.execute(
                select(Case.key)
                .join(Regression, Regression.case_id == Case.id)
                .where(Regression.state == "open", Regression.kind == "perf", Case.name.not_like("evil%"))
            )
            .scalars()
            .first()
        )


def test_pages_open_without_console_errors(site: Site, browser: Any) -> None:
    out = site.out
    pages = [
        out / "index.html",
        out / "regressions.html",
        out / "runs.html",
        out / "stacks.html",
        out / "gates.html",
        next((out / "gate").glob("*.html")),
        next((out / "stack").glob("diff-*.html")),
        next(p for p in (out / "stack").glob("*.html") if not p.name.startswith("diff-")),
        out / "run" / f"{site.evil_run}.html",
        next((out / "run").glob("*.html")),
        out / "case" / f"{site.evil_case_key}.html",
        out / "case" / f"{_case_with_open_regression(site)}.html",
    ]
    pages += sorted((out / "case").glob("*.html"))[:5]
    for page in pages:
        _open(browser, page)
        assert browser.console_errors() == [], page.name


def test_charts_draw_with_points(site: Site, browser: Any) -> None:
    _open(browser, site.out / "case" / f"{_case_with_open_regression(site)}.html")
    assert browser.eval("document.documentElement.dataset.charts") is not None
    circles = browser.eval("document.querySelectorAll('#chart-main svg .points circle').length")
    lines = browser.eval("document.querySelectorAll('#chart-main svg path.line').length")
    bands = browser.eval("document.querySelectorAll('#chart-main svg polygon.band').length")
    assert circles >= 3 * 20 and lines >= 3 and bands >= 3
    assert browser.eval("document.querySelectorAll('#chart-speedup svg .points circle').length") > 20
    assert browser.eval("document.querySelectorAll('#chart-main .marker').length") >= 1, (
        "stack upgrade marked"
    )
    # a small perf shape also has ULP and determinism cases: their charts sit beneath
    small = next(
        p for p in sorted((site.out / "case").glob("*.html")) if 'id="chart-related-1"' in p.read_text()
    )
    _open(browser, small)
    related = browser.eval("document.querySelectorAll('[id^=chart-related-] svg .points circle').length")
    assert related > 20, "ULP / determinism beneath the perf chart"


def test_hover_shows_run_details(site: Site, browser: Any) -> None:
    _open(browser, site.out / "case" / f"{_case_with_open_regression(site)}.html")
    x, y = browser.eval(
        "(() => { const c = document.querySelectorAll('#chart-main .points circle');"
        " const r = c[c.length - 3].getBoundingClientRect();"
        " return [r.x + r.width / 2, r.y + r.height / 2]; })()"
    )
    browser.mouse_move(x, y)
    time.sleep(0.1)
    assert browser.eval("document.querySelector('#chart-main .tip').hidden") is False
    text = browser.eval("document.querySelector('#chart-main .tip').textContent")
    run_ids = {p.stem for p in (site.out / "run").glob("*.html")}
    assert any(r in text for r in run_ids), text
    for label in ("stack", "digest", "commit", "p5–p95", "p50"):
        assert label in text
    browser.mouse_move(5, 5)
    time.sleep(0.05)
    # clicking a point opens its run page
    browser.mouse_move(x, y)
    browser.send("Input.dispatchMouseEvent", type="mousePressed", x=x, y=y, button="left", clickCount=1)
    browser.send("Input.dispatchMouseEvent", type="mouseReleased", x=x, y=y, button="left", clickCount=1)
    deadline = time.time() + 5
    while time.time() < deadline and "/run/" not in browser.eval("location.href"):
        time.sleep(0.05)
    assert "/run/" in browser.eval("location.href")


def test_flagged_regression_visible(site: Site, browser: Any) -> None:
    key = _case_with_open_regression(site)
    _open(browser, site.out / "index.html")
    row_open = browser.eval(
        f"(() => {{ const a = document.querySelector('#open-regressions a[href=\"case/{key}.html\"]');"
        " return a && a.offsetParent !== null && a.closest('tr').textContent.includes('open'); })()"
    )
    assert row_open
    flagged = browser.eval(
        f"document.querySelector('#cases a[href=\"case/{key}.html\"]').closest('tr').className"
    )
    assert flagged == "flag-open"
    _open(browser, site.out / "case" / f"{key}.html")
    assert browser.eval("document.querySelector('.regression-banner').offsetHeight") > 0
    assert "open" in browser.eval("document.querySelector('.regression-banner').textContent")
    assert browser.eval("document.querySelectorAll('#chart-main .regression.open').length") >= 1


def test_script_names_are_text(site: Site, browser: Any) -> None:
    _open(browser, site.out / "case" / f"{site.evil_case_key}.html")
    assert browser.eval("document.querySelector('h1').textContent") == EVIL_CASE
    assert browser.eval("typeof window.__pwned") == "undefined"
    legend = browser.eval("document.querySelector('#chart-main .chart-controls').textContent")
    assert (
        "script" not in legend or EVIL not in legend
    )  # stack names are plain here; the case name is the title
    _open(browser, site.out / "run" / f"{site.evil_run}.html")
    assert EVIL_BRANCH in browser.eval("document.body.textContent")
    assert browser.eval("typeof window.__pwned") == "undefined"
    assert browser.eval("document.querySelectorAll('main script:not([type])').length") == 0
    _open(browser, site.out / "index.html")
    assert browser.eval("typeof window.__pwned") == "undefined"
    assert EVIL_CASE in browser.eval("document.querySelector('#cases').textContent")


def test_index_filters(site: Site, browser: Any) -> None:
    _open(browser, site.out / "index.html")
    total = browser.eval("document.querySelectorAll('#cases tbody tr').length")
    browser.eval(
        "(() => { const s = document.querySelector('[data-filter=mode]'); s.value = 'rtz';"
        " s.dispatchEvent(new Event('change')); })()"
    )
    modes = browser.eval(
        "[...document.querySelectorAll('#cases tbody tr:not([hidden])')].map(r => r.dataset.mode)"
    )
    assert modes and set(modes) == {"rtz"} and len(modes) < total
    browser.eval(
        "(() => { const s = document.querySelector('[data-filter=layout]'); s.value = 'bshd';"
        " s.dispatchEvent(new Event('change')); })()"
    )
    layouts = browser.eval(
        "[...document.querySelectorAll('#cases tbody tr:not([hidden])')].map(r => r.dataset.layout)"
    )
    assert layouts and set(layouts) == {"bshd"}
    stack = browser.eval("document.querySelector('[data-filter=stack] option:nth-child(2)').value")
    browser.eval(
        f"(() => {{ const s = document.querySelector('[data-filter=stack]'); s.value = '{stack}';"
        " s.dispatchEvent(new Event('change')); })()"
    )
    hidden_cols = browser.eval(
        f"document.querySelectorAll('#cases th[data-col]:not([data-col=\"{stack}\"])')[0].hidden"
    )
    assert hidden_cols is True


def test_run_page_table_from_embedded_rows(site: Site, browser: Any) -> None:
    run = next(p for p in sorted((site.out / "run").glob("*.html")) if p.stem != site.evil_run)
    _open(browser, run)
    rows = browser.eval("document.querySelectorAll('#results tbody tr').length")
    assert rows >= 40
    assert browser.eval("document.querySelector('#results tbody a').getAttribute('href')").startswith(
        "../case/"
    )
    _open(browser, site.out / "run" / f"{site.evil_run}.html")
    assert browser.eval("document.querySelector('#failing').textContent").count("fail") >= 1
