"""The site rendered from the committed REAL bundles (benchmarks/headline/: a single-GPU H200 nightly,
a one-GPU sharded run, a two-GPU sharded quick run and its one-GPU twin), checked in headless
Chromium: the index card shows the geomean per rounding mode against each baseline, the device
state before/after as clocks, temperature and power per worker, and the workers of a sharded
run; the case tables show the speedup and every numeric column header names metric and unit.

Before issue 12 these pages showed "geomean –", "before time_unix 1795953146.16" and an empty
workers row on every real run, while the tests (fed by demo data only) passed.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from committed import SAMPLE, headline

from regress.machine.pins import pin_for_digest
from regress.present.site import build_site
from regress.store.repo import Store, open_store
from regress.store.transfer import import_bundle

ROOT = Path(__file__).resolve().parents[2]
BUNDLES = headline()
NUMBER = re.compile(r"\d+(\.\d+)?")


@dataclass
class RealSite:
    bundle: dict[str, Any]
    out: Path
    store: Store


def render(tmp: Path, bundles: list[dict[str, Any]]) -> RealSite:
    store = open_store(f"sqlite:///{tmp / 'real.db'}")
    for b in bundles:
        with store.transaction() as session:
            import_bundle(session, b, pin=pin_for_digest(b["stack"]["digest"]))
    build_site(store, tmp / "site")
    return RealSite(bundles[-1], tmp / "site", store)


# Plain pytest renders the sample, one bundle of each kind (one GPU's nightly, one shard, a two-GPU
# sharded run: tests/kit/committed.py); the slow tier renders every headline bundle (about 3 s of
# rendering and Chromium each).
REAL_PARAMS = [
    pytest.param(p, marks=() if p.stem in SAMPLE else pytest.mark.slow, id=f"{p.stem.rsplit('-', 1)[0]}")
    for p in BUNDLES
]


@pytest.fixture(scope="module", params=REAL_PARAMS)
def real(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealSite]:
    site = render(tmp_path_factory.mktemp("real"), [json.loads(Path(request.param).read_text())])
    yield site
    site.store.engine.dispose()


def test_the_real_bundles_are_there() -> None:
    names = " ".join(p.name for p in BUNDLES)
    assert "h200-nightly" in names and "sharded" in names and "quick" in names


def _card(html: str) -> str:
    return html[html.index('<div class="card') : html.index("</div>", html.index('<div class="card'))]


def test_index_card_shows_what_the_run_stored(real: RealSite) -> None:
    run = real.bundle["run"]
    if run["is_drill"]:  # a drill is never a stack's latest run (issue 23): alone, it has no card
        assert '<div class="card' not in (real.out / "index.html").read_text()
        return
    card = _card((real.out / "index.html").read_text())
    geo = run["summary"]["geomean_speedup"]
    assert geo, "every committed real run has perf results"
    for mode, per in geo.items():
        for base, x in per.items():
            assert f"speedup vs {base}" in card
            assert f"<b>{x:.3f}×</b>" in card, (mode, base, x)
    assert "time_unix" not in card
    assert card.count(" MHz") >= 2 and "°C" in card and " W of " in card
    workers = run["gpu_state"].get("workers", {})
    for name in workers:
        assert name in card  # the workers row names each
    rows = re.findall(r"<tr><td class=\"nowrap\">([^<]+)</td>", card)
    assert rows == (["parent process"] if workers else ["device"]) + [
        n.replace("worker", "worker ") for n in sorted(workers)
    ]


@pytest.mark.slow  # imports and renders every real bundle (2.9 s CPU)
def test_mutated_bundle_without_summary_still_shows_a_geomean(tmp_path: Path) -> None:
    """A run whose summary lost its geomean (an older writer, a run still going) gets it from its
    stored speedups through the same metrics function."""
    bundle = copy.deepcopy(json.loads(BUNDLES[0].read_text()))
    bundle["run"]["summary"].pop("geomean_speedup")
    bundle["run"]["gpu_state"] = {"before": {"gpu": {}}, "after": "not a dict"}
    site = render(tmp_path, [bundle])
    card = _card((site.out / "index.html").read_text())
    assert "no perf results" not in card and "×</b>" in card
    site.store.engine.dispose()


def test_a_run_deleted_and_stored_again_with_other_numbers_is_shown_anew(tmp_path: Path) -> None:
    """A run deleted (`regress runs delete`) and imported again under its id, with as many results
    but another p50: SQLite gave the new results the deleted ones' ids, so the site's change check
    (status, result count, largest result id) matched and the incremental render kept the old
    numbers on the run and case pages."""
    from regress.cli import main

    bundle = json.loads(next(p for p in BUNDLES if p.name.startswith("h200-shard-gpus0-")).read_text())
    site = render(tmp_path, [bundle])
    run_id = bundle["run"]["id"]
    perf = next(r for r in bundle["results"] if r["suite"] == "perf" and r["status"] == "pass")
    run_page, case_page = site.out / "run" / f"{run_id}.html", site.out / "case" / f"{perf['case_key']}.html"
    assert "9.87654" not in run_page.read_text() + case_page.read_text()

    assert main(["runs", "delete", run_id, "--yes", "--db", str(site.store.engine.url)]) == 0
    changed = copy.deepcopy(bundle)
    next(r for r in changed["results"] if r["case_key"] == perf["case_key"])["metrics"]["p50_ms"] = 9.87654321
    with site.store.transaction() as session:
        import_bundle(session, changed, pin=pin_for_digest(changed["stack"]["digest"]))
    report = build_site(site.store, site.out)
    assert report.reloaded_runs == 1 and not report.full_reload
    assert "9.87654" in run_page.read_text() and "9.87654" in case_page.read_text()
    site.store.engine.dispose()


# --- in Chromium ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from cdp import Browser, find_chromium

    if find_chromium() is None:
        pytest.skip("chromium not installed (Debian: apt-get install chromium; .ci/run installs it)")
    b = Browser(width=1400, height=900)
    yield b
    b.close()


CARD_JS = """(() => {
  const card = document.querySelector('.card');
  const cells = tr => [...tr.cells].map(c => c.innerText.trim());
  const geo = [...card.querySelectorAll('table.geo tr')].map(cells);
  const dev = [...card.querySelectorAll('table.devices tbody tr')].map(cells);
  const workers = card.querySelector('.workers');
  return {geo, dev, workers: workers ? workers.innerText : null, text: card.innerText};
})()"""

HEADERS_JS = """(sel) => [...document.querySelectorAll(sel + ' thead th')]
  .map(th => ({text: th.innerText.trim(), numeric: th.classList.contains('n')}))"""


@pytest.mark.chromium
def test_index_in_chromium(real: RealSite, browser: Any) -> None:
    browser.clear_events()
    browser.open(real.out / "index.html")
    assert browser.console_errors() == []
    if real.bundle["run"]["is_drill"]:  # no card: test_index_card_shows_what_the_run_stored
        return
    card = browser.eval(CARD_JS)
    run = real.bundle["run"]
    geo = run["summary"]["geomean_speedup"]
    bases = sorted({b for per in geo.values() for b in per})
    header, *rows = card["geo"]
    assert header[1:] == [f"speedup vs {b} (×, geomean)" for b in bases]
    assert {r[0] for r in rows} == set(geo)
    for r in rows:
        for b, cell in zip(bases, r[1:], strict=True):
            assert float(cell.rstrip("×")) == pytest.approx(geo[r[0]][b], abs=5e-4), (r, b)
    workers = sorted(run["gpu_state"].get("workers", {}))
    assert (card["workers"] or "") == (f"{len(workers)}: {', '.join(workers)}" if workers else "")
    assert len(card["dev"]) == 1 + len(workers)
    for _who, before, after in card["dev"]:
        for text in (before, after):
            assert re.search(r"SM \d+ MHz", text) and re.search(r"\d+ °C", text) and re.search(r"\d+ W", text)
            assert "time_unix" not in text and re.search(r"at \d\d:\d\d:\d\d UTC", text)
    assert "–" not in "".join(c for r in card["geo"] + card["dev"] for c in r)

    heads = browser.eval(f"({HEADERS_JS})('#cases')")
    numeric = [h["text"] for h in heads if h["numeric"]]
    assert numeric and all("(" in h and ")" in h for h in numeric), numeric  # metric and unit
    speedups = browser.eval(
        "[...document.querySelectorAll('#cases tbody tr[data-suite=perf] td.sp')].map(td => td.innerText)"
    )
    n_perf = sum(r["suite"] == "perf" for r in real.bundle["results"])
    assert len(speedups) == n_perf and all(NUMBER.match(s) and s.endswith("×") for s in speedups)


@pytest.mark.chromium
def test_run_page_in_chromium(real: RealSite, browser: Any) -> None:
    run_id = real.bundle["run"]["id"]
    browser.clear_events()
    browser.open(real.out / "run" / f"{run_id}.html")
    assert browser.console_errors() == []
    heads = browser.eval(f"({HEADERS_JS})('#results')")
    numeric = [h["text"] for h in heads if h["numeric"]]
    assert all("(" in h and ")" in h for h in numeric), numeric
    col = [h["text"] for h in heads].index(next(h for h in numeric if h.startswith("speedup")))
    rows = "[...document.querySelectorAll('#results tbody tr[data-suite=perf]')]"
    perf = browser.eval(f"{rows}.map(tr => tr.cells[{col}].innerText)")
    assert perf and all(NUMBER.match(s) for s in perf), perf[:5]
    text = browser.eval("document.querySelector('dl.kv').innerText")
    assert "time_unix" not in text and "°C" in text and "{'" not in text  # no Python reprs
    every = browser.eval("[...document.querySelectorAll('th.n')].map(th => th.innerText.trim())")
    assert all("(" in h and ")" in h for h in every), every  # geomean, kernels and results tables
    kernels = browser.eval("document.querySelectorAll('#kernels tbody tr').length")
    assert kernels == len(real.bundle["build"]["stats"]["kernels"])


@pytest.mark.chromium
def test_case_page_in_chromium(real: RealSite, browser: Any) -> None:
    perf = next(r for r in real.bundle["results"] if r["suite"] == "perf")
    browser.clear_events()
    browser.open(real.out / "case" / f"{perf['case_key']}.html")
    assert browser.console_errors() == []
    assert browser.eval("document.querySelectorAll('#chart-main svg .points circle').length") >= 1
    heads = browser.eval("[...document.querySelectorAll('th.n')].map(th => th.innerText.trim())")
    assert heads and all("(" in h and ")" in h for h in heads if h != "p-value"), heads
    assert any(h.startswith("speedup vs sdpa_") for h in heads), heads  # names the baseline


@pytest.mark.slow  # every committed bundle into two stores, two full renders
def test_the_real_site_is_byte_identical_for_the_same_runs_and_clock(tmp_path: Path) -> None:
    """The same committed runs and the same clock give the same bytes in every published file, from
    two stores filled independently (other ids, other paths): nothing leaks in from the database's
    row order, a dict's order, the render's own time or the folder it writes to."""
    from datetime import datetime

    from regress.present.site.writer import STATE_DIR

    bundles = [json.loads(p.read_text()) for p in BUNDLES]
    clock = datetime(2026, 1, 2, 3, 4, 5)
    published: list[dict[str, bytes]] = []
    for name, order in (("a", bundles), ("b", bundles[::-1])):
        store = open_store(f"sqlite:///{tmp_path / f'{name}.db'}")
        try:
            for b in order:
                with store.transaction() as session:
                    import_bundle(session, copy.deepcopy(b), pin=pin_for_digest(b["stack"]["digest"]))
            out = tmp_path / f"site-{name}"
            build_site(store, out, generated=clock)
        finally:
            store.engine.dispose()
        published.append(
            {
                str(p.relative_to(out)): p.read_bytes()
                for p in sorted(out.rglob("*"))
                if p.is_file() and STATE_DIR not in p.relative_to(out).parts
            }
        )
    a, b = published
    assert sorted(a) == sorted(b)
    differ = [name for name in a if a[name] != b[name]]
    assert not differ, f"{len(differ)} of {len(a)} files differ, first: {differ[:5]}"
    assert len(a) > 100
