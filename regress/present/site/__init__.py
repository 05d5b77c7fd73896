"""The static HTML site (DESIGN §7): `build_site(store, out)` renders every page from the store.

Rules: reads the store, writes only under `out`; pages are self-contained (assets vendored from
web/static, data embedded), so they work from file:// and any static host. Incremental: results of
unchanged runs come from a cache and only pages whose data changed are rewritten (writer.py).

Layout: data.py reads the store (through regress.store.queries) into rows and a columnar table;
model.py derives series, transitions and overviews; pages/ holds one writer per page kind;
format.py is how values look; writer.py writes only what changed.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from regress.facts.resources import web_dir
from regress.store.repo import Store

from . import data as site_data
from . import model as site_model
from .format import make_env
from .pages import WRITERS, Pages
from .writer import LOCK_FILE as WRITER_LOCK
from .writer import STATE_DIR, TMP_DIR, SiteWriter, assets_hash, atomic_path, copy_static, render_lock

CACHE_DIR = STATE_DIR


@dataclass
class SiteReport:
    out: Path
    pages: int
    rendered: int
    written: int
    removed: int
    reloaded_runs: int
    full_reload: bool
    seconds: float
    timings: dict[str, float]
    written_paths: list[str]


LOCK_FILE = f"{STATE_DIR}/{WRITER_LOCK}"  # relative to the output folder


def build_site(
    store: Store,
    out: Path,
    *,
    full: bool = False,
    base_url: str | None = None,
    generated: datetime | None = None,
) -> SiteReport:
    """Renders the site into `out`. full=True ignores the cache and the manifest (rewrites all).
    `generated`: the time the pages say they were made (default now; fixed, the same store renders
    the same bytes). One render per folder at a time: a second is refused with a UserError
    (writer.render_lock)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with render_lock(out):
        return _build_site(store, out, full=full, base_url=base_url, generated=generated)


def _build_site(
    store: Store, out: Path, *, full: bool, base_url: str | None, generated: datetime | None
) -> SiteReport:
    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    cache = out / CACHE_DIR
    web = web_dir()

    data = site_data.load(store.engine, cache, full=full)
    timings["load"] = time.perf_counter() - t0

    t1 = time.perf_counter()
    cp_path = cache / "changepoints.json"
    cp_cache: dict[str, list[list[object]]] = {}
    if not full:
        try:
            cp_cache = json.loads(cp_path.read_text())
        except (OSError, ValueError):
            cp_cache = {}
        if not isinstance(cp_cache, dict):
            cp_cache = {}  # valid JSON of another shape: detect again (the model checks each entry)
    model = site_model.build(data, cp_cache)
    with atomic_path(cp_path, cache / TMP_DIR) as tmp:
        tmp.write_text(json.dumps(cp_cache, separators=(",", ":")))
    timings["model"] = time.perf_counter() - t1

    t2 = time.perf_counter()
    writer = SiteWriter(out, make_env(web / "templates"), assets_hash(web), full=full)
    when = generated or datetime.now()
    pages = Pages(model, writer, base_url=base_url, generated=when.replace(microsecond=0))
    copy_static(writer, web / "static")
    for write in WRITERS:
        ts = time.perf_counter()
        write(pages)
        timings[write.__name__] = time.perf_counter() - ts
    ts = time.perf_counter()
    stats = writer.finish()
    timings["write"] = time.perf_counter() - ts
    timings["render"] = time.perf_counter() - t2
    return SiteReport(
        out=out,
        pages=stats.pages,
        rendered=stats.rendered,
        written=stats.written,
        removed=stats.removed,
        reloaded_runs=len(data.reloaded_runs),
        full_reload=data.full_reload,
        seconds=time.perf_counter() - t0,
        timings=timings,
        written_paths=stats.written_paths,
    )


__all__ = ["SiteReport", "build_site", "web_dir"]
