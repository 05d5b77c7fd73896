"""Site benchmark (issue 4): a year of nightly history, rendered full and after one new night.

    python benchmarks/service/site.py [--nights 365] [--stacks 3] [--cases 300] [--work DIR] \
        [--screenshots docs/img]

Measures: demo-history fill time; full render (fresh output folder); incremental render after one
more night is added; the index page's size; the heaviest page's time to interactive in headless
Chromium (navigation start to charts drawn, `window.regressReadyAt`), median of 5 loads. Targets:
full < 15 s, incremental < 3 s, index < 300 KB, heaviest page < 1 s. Not a timed test: run by hand.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "kit"))  # the CDP driver shared with the browser tests

from regress.facts.stats import median  # noqa: E402
from regress.present.demo import demo_history  # noqa: E402
from regress.present.site import build_site  # noqa: E402
from regress.store import queries  # noqa: E402
from regress.store.repo import open_store  # noqa: E402

TARGETS = {
    "full_s": 15.0,
    "incremental_s": 3.0,
    "index_kb": 300.0,
    "heaviest_tti_ms": 1000.0,
    "heaviest_case_tti_ms": 1000.0,
}


def time_to_interactive(page: Path, loads: int = 5) -> dict[str, float]:
    """Median over `loads` of navigation start -> interactive: charts drawn (`regressReadyAt`, set
    by trend.js) on chart pages, else the load event's end (tables are ready by then)."""
    from cdp import Browser, find_chromium

    if find_chromium() is None:
        return {}
    tti: list[float] = []
    with Browser() as b:
        for _ in range(loads):
            b.open(page)
            nav = b.eval("performance.getEntriesByType('navigation')[0].toJSON()")
            ready = b.eval("window.regressReadyAt || null")
            tti.append(float(ready) if ready is not None else float(nav["loadEventEnd"]))
        errors = b.console_errors()
    return {"tti_ms": round(median(tti), 1), "console_errors": len(errors)}


def screenshots(out: Path, img: Path) -> list[Path]:
    from cdp import Browser

    img.mkdir(parents=True, exist_ok=True)
    shots = []
    with Browser(width=1400, height=1000) as b:
        b.open(out / "index.html")
        b.screenshot(img / "site-index.png")
        shots.append(img / "site-index.png")
        # the trend page of a case with an open regression, hovering its newest point
        href = b.eval(
            "(document.querySelector('#open-regressions a[href^=\"case/\"]')||{}).getAttribute?.('href')"
        )
        if href:
            b.open(out / href)
            time.sleep(0.2)
            pos = b.eval(
                "(() => { const c = [...document.querySelectorAll('#chart-main .points circle')];"
                " const r = c[c.length - 40].getBoundingClientRect();"
                " return [r.x + r.width / 2, r.y + r.height / 2]; })()"
            )
            b.mouse_move(pos[0], pos[1])
            time.sleep(0.2)
            b.screenshot(img / "site-trend.png")
            shots.append(img / "site-trend.png")
    return shots


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nights", type=int, default=365)
    ap.add_argument("--stacks", type=int, default=3)
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--work", type=Path, default=None, help="keep the DB and site here (default: temp)")
    ap.add_argument("--screenshots", type=Path, default=None, help="write PNGs of index and a trend page")
    ap.add_argument("--json", type=Path, default=None, help="write the figures as JSON")
    args = ap.parse_args()

    work = args.work or Path(tempfile.mkdtemp(prefix="regress-site-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    db = work / "bench.db"
    out = work / "site"
    for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        p.unlink(missing_ok=True)
    shutil.rmtree(out, ignore_errors=True)
    store = open_store(f"sqlite:///{db}")
    fig: dict[str, float | int | str] = {}

    t = time.perf_counter()
    demo = demo_history(store, nights=args.nights, stacks=args.stacks, cases=args.cases)
    fig["fill_s"] = round(time.perf_counter() - t, 2)
    fig["results"] = demo.results
    fig["runs"] = demo.runs

    t = time.perf_counter()
    full = build_site(store, out)
    fig["full_s"] = round(time.perf_counter() - t, 2)
    fig["pages"] = full.pages
    fig["site_mb"] = round(sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) / 2**20, 1)

    with store.reader() as session:
        first = queries.first_run_start(session)
    assert first is not None, "the history was just written"
    start = first.replace(hour=0, minute=0, second=0, microsecond=0)
    demo_history(
        store,
        nights=1,
        stacks=args.stacks,
        cases=args.cases,
        first_night=args.nights,
        total_nights=args.nights,
        start=start,
    )
    t = time.perf_counter()
    inc = build_site(store, out)
    fig["incremental_s"] = round(time.perf_counter() - t, 2)
    fig["incremental_written"] = inc.written
    fig["incremental_timings"] = json.dumps({k: round(v, 2) for k, v in inc.timings.items()})

    t = time.perf_counter()
    noop = build_site(store, out)
    fig["unchanged_s"] = round(time.perf_counter() - t, 2)
    fig["unchanged_written"] = noop.written

    fig["index_kb"] = round((out / "index.html").stat().st_size / 1024, 1)
    pages = list(out.rglob("*.html"))
    heaviest = max(pages, key=lambda p: p.stat().st_size)
    heaviest_case = max((p for p in pages if p.parent.name == "case"), key=lambda p: p.stat().st_size)
    for label, page in (("heaviest", heaviest), ("heaviest_case", heaviest_case)):
        fig[f"{label}_page"] = str(page.relative_to(out))
        fig[f"{label}_kb"] = round(page.stat().st_size / 1024, 1)
        fig.update({f"{label}_{k}": v for k, v in time_to_interactive(page).items()})
    if args.screenshots:
        fig["screenshots"] = ", ".join(str(p) for p in screenshots(out, args.screenshots))

    width = max(len(k) for k in fig)
    for k, v in fig.items():
        target = TARGETS.get(k)
        mark = "" if target is None else ("  ok" if isinstance(v, int | float) and v < target else "  MISSED")
        print(f"{k:<{width}}  {v}{'' if target is None else f'  (target < {target:g})'}{mark}")
    if args.json:
        args.json.write_text(json.dumps(fig, indent=2))
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
