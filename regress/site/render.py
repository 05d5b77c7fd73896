"""Renders the pages (jinja2, autoescaped) and writes only those whose content changed.

Each page has a data key (a hash of what it is built from, plus the templates and assets); a page
whose key matches the manifest of the previous render is neither rendered nor written. A rendered
page whose content hash matches the manifest is not written either, so file times only move for
pages that really changed (a static host's sync then uploads just those).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import multiprocessing
import os
import shutil
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from .data import STATUS_CODES, CaseRow, RunRow, SiteData, StackRow
from .model import METRIC_LABEL, UNITS, Model, geomean, run_overview, stack_diff

MANIFEST_VERSION = 1
PARALLEL_MIN_PAGES = 64  # below this, forking costs more than it saves
_JOBS: tuple[SiteWriter, list[Any], int] | None = None  # the forked workers' view of the queue


def _workers() -> int:
    if sys.platform != "linux":  # fork is the cheap way to share the model; elsewhere stay serial
        return 1
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 8))


def _render_share(k: int) -> list[tuple[str, str, str, bool]]:
    assert _JOBS is not None
    writer, jobs, n = _JOBS
    return [writer._render(job) for job in jobs[k::n]]


MAX_CHANGE_ROWS = 15  # the table under a chart; the chart marks them all
STATE_ORDER = {"open": 0, "acknowledged": 1, "resolved": 2}


def _sha(*parts: str | bytes) -> str:
    h = hashlib.sha1()
    for p in parts:
        h.update(p if isinstance(p, bytes) else p.encode())
        h.update(b"\0")
    return h.hexdigest()


@dataclass
class WriteStats:
    pages: int = 0
    rendered: int = 0
    written: int = 0
    removed: int = 0
    written_paths: list[str] = field(default_factory=list)


class SiteWriter:
    """Content-addressed page writer over a manifest kept in <out>/.regress-site/."""

    def __init__(self, out: Path, env: Environment, assets_hash: str, *, full: bool) -> None:
        self.out = out
        self.env = env
        self.assets_hash = assets_hash
        self.full = full
        self.manifest_path = out / ".regress-site" / "manifest.json"
        self.old: dict[str, list[str]] = {}
        if not full:
            try:
                doc = json.loads(self.manifest_path.read_text())
                if doc.get("version") == MANIFEST_VERSION:
                    self.old = doc["pages"]
            except (OSError, ValueError, KeyError):
                self.old = {}
        self.new: dict[str, list[str]] = {}
        self.pending: list[tuple[str, str, str, Callable[[], dict[str, Any]]]] = []
        self.stats = WriteStats()

    def page(self, rel: str, template: str, data_key: str, context: Callable[[], dict[str, Any]]) -> None:
        """Queues a page; it is rendered in flush() only if its key differs from the last render."""
        self.stats.pages += 1
        key = _sha(self.assets_hash, template, data_key)
        prev = self.old.get(rel)
        if prev and prev[0] == key and (self.out / rel).exists():
            self.new[rel] = prev
            return
        self.pending.append((rel, template, key, context))

    def _render(self, job: tuple[str, str, str, Callable[[], dict[str, Any]]]) -> tuple[str, str, str, bool]:
        rel, template, key, context = job
        ctx = context()
        ctx.setdefault("root", "../" * rel.count("/"))
        ctx.setdefault("page", rel)
        content = self.env.get_template(template).render(**ctx).encode()
        digest, written = self._store(rel, content, self.old.get(rel))
        return rel, key, digest, written

    def flush(self) -> None:
        """Renders the queued pages; with many of them, in forked workers (each page is independent
        and rendering is pure Python, so processes are the way past the GIL)."""
        jobs, self.pending = self.pending, []
        workers = _workers() if len(jobs) >= PARALLEL_MIN_PAGES else 1
        if workers > 1:
            global _JOBS
            _JOBS = (self, jobs, workers)
            try:
                with multiprocessing.get_context("fork").Pool(workers) as pool:
                    done = [r for chunk in pool.map(_render_share, range(workers)) for r in chunk]
            finally:
                _JOBS = None
        else:
            done = [self._render(job) for job in jobs]
        for rel, key, digest, written in done:
            self.new[rel] = [key, digest]
            self.stats.rendered += 1
            if written:
                self.stats.written += 1
                self.stats.written_paths.append(rel)

    def raw(self, rel: str, content: bytes) -> None:
        self.stats.pages += 1
        digest, written = self._store(rel, content, self.old.get(rel))
        self.new[rel] = [digest, digest]
        if written:
            self.stats.written += 1
            self.stats.written_paths.append(rel)

    def _store(self, rel: str, content: bytes, prev: list[str] | None) -> tuple[str, bool]:
        """Writes content unless the file already holds it; returns (content hash, written)."""
        digest = hashlib.sha1(content).hexdigest()
        target = self.out / rel
        if prev and prev[1] == digest and target.exists():
            return digest, False
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.write_bytes(content)
        os.replace(tmp, target)  # readers never see half a page
        return digest, True

    def finish(self) -> WriteStats:
        self.flush()
        root = self.out.resolve()
        for rel in set(self.old) - set(self.new):  # pages of runs or cases that are gone
            path = self.out / rel
            # The manifest is a file anyone with write access to <out> can edit: never follow it
            # outside the output folder ("../x", "/etc/x", a symlinked folder).
            if not path.resolve().is_relative_to(root):
                continue
            if path.is_file():
                path.unlink()
                self.stats.removed += 1
        self.manifest_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.manifest_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"version": MANIFEST_VERSION, "pages": self.new}, separators=(",", ":")))
        os.replace(tmp, self.manifest_path)
        return self.stats


# --- formatting helpers (jinja filters) --------------------------------------------------------


def fmt_num(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if value == 0:
        return "0"
    if not math.isfinite(value):
        return str(value)
    if value.is_integer() and abs(value) < 1e7:
        return str(int(value))  # counts stored as floats (distinct hashes): 1, not 1.000
    mag = math.floor(math.log10(abs(value)))
    if mag < -3 or mag >= 7:  # p-values like 1e-40, huge counts: scientific, not 40 zeros
        return f"{value:.{max(0, digits - 2)}e}"
    text = f"{value:.{max(0, digits - 1 - mag)}f}"
    return text.rstrip("0").rstrip(".") if mag < 0 else text


def fmt_show(value: Any) -> str:
    """Any report value as text: a pair as "old → new", other lists joined, dicts as JSON."""
    if isinstance(value, list | tuple):
        return " → ".join(map(str, value)) if len(value) == 2 else ", ".join(map(str, value))
    if isinstance(value, dict):
        return json.dumps(value, default=str)
    return "" if value is None else str(value)


def fmt_pct(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{value * 100:+.1f}%"


def fmt_time(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if value else "–"


def fmt_date(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d") if value else "–"


def make_env(templates: Path) -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(templates)),
        autoescape=True,  # every page, the Atom feed too: names come from uploads
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=StrictUndefined,
    )
    # Compact JSON in <script type="application/json">; jinja's tojson escapes <, >, & and '.
    env.policies["json.dumps_kwargs"] = {"separators": (",", ":"), "sort_keys": False}
    env.filters.update(num=fmt_num, pct=fmt_pct, time=fmt_time, date=fmt_date, show=fmt_show)
    return env


def script_json(blob: str) -> Markup:
    """JSON text made safe inside <script> (as jinja's tojson: no "</script>", no "<!--")."""
    return Markup(
        blob.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").replace("'", "\\u0027")
    )


def _epoch(dt: datetime) -> int:
    return int(dt.replace(tzinfo=UTC).timestamp())


def _clean(values: np.ndarray, decimals: int = 5) -> list[float | None]:
    return [None if v != v else v for v in np.round(values, decimals).tolist()]


# --- page contexts ------------------------------------------------------------------------------


class Pages:
    def __init__(
        self, model: Model, writer: SiteWriter, *, base_url: str | None, generated: datetime
    ) -> None:
        self.m = model
        self.d: SiteData = model.data
        self.w = writer
        self.base_url = base_url
        self.generated = generated
        self.stack_index = {sid: i for i, sid in enumerate(sorted(self.d.stacks))}
        self.run_epoch = np.asarray(
            [_epoch(self.d.runs[r].started_at) for r in self.d.run_order], dtype=np.int64
        )
        self.run_commit = [(self.d.runs[r].kernel_commit or "")[:10] for r in self.d.run_order]
        self.case_names_hash = _sha(*(f"{c.id}:{c.key}:{c.name}" for c in self.d.cases.values()))
        ranked = sorted(self.d.cases.values(), key=lambda c: (c.suite, c.name))
        self.case_ids = np.asarray([c.id for c in ranked], dtype=np.int64)
        self.case_rank = np.zeros(max(self.d.cases, default=0) + 1, dtype=np.int64)
        for k, c in enumerate(ranked):
            self.case_rank[c.id] = k
        self.stack_names_hash = _sha(*(f"{s.id}:{s.label}:{s.digest}" for s in self.d.stacks.values()))

    # common bits
    def stack_ref(self, sid: int) -> dict[str, Any]:
        s = self.d.stacks[sid]
        return {
            "id": sid,
            "name": s.label,
            "digest": s.digest[:12],
            "slug": s.slug,
            "color": self.stack_index[sid],
            "current": sid not in self.m.successor,
        }

    def case_href(self, case: CaseRow) -> str:
        return f"case/{case.key}.html"

    def reg_view(self, reg: dict[str, Any]) -> dict[str, Any]:
        case = self.d.cases.get(reg["case_id"])
        first = self.d.runs.get(reg["first_run_id"])
        return {
            **reg,
            "case": case,
            "stack": self.stack_ref(reg["stack_id"]) if reg["stack_id"] in self.d.stacks else None,
            "since": first.started_at if first else None,
            "title": (reg.get("details") or {}).get("title", ""),
        }

    def regression_views(self) -> list[dict[str, Any]]:
        views = [self.reg_view(r) for r in self.d.regressions]
        views.sort(key=lambda r: (STATE_ORDER.get(r["state"], 9), -(r["since"] or datetime.min).timestamp()))
        return views

    # ---- case pages
    def case_payload(self, case: CaseRow) -> dict[str, Any]:
        t = self.d.table
        stacks = []
        for sid, idx in sorted(
            self.m.series.get(case.id, {}).items(), key=lambda kv: self.stack_index[kv[0]]
        ):
            stacks.append(
                {
                    **self.stack_ref(sid),
                    "r": t["run"][idx],  # global run indices; case_pages maps them to the page's run table
                    "y": _clean(t["value"][idx]),
                    "lo": _clean(t["lo"][idx]),
                    "hi": _clean(t["hi"][idx]),
                    "sp": _clean(t["speedup"][idx], 4),
                    "st": t["status"][idx].tolist(),
                }
            )
        present = {s["id"] for s in stacks}
        markers = []
        for tr in self.m.transitions:
            if tr.new in present:
                old, new = self.d.stacks[tr.old], self.d.stacks[tr.new]
                markers.append(
                    {
                        "x": int(self.run_epoch[self.m.run_index[tr.run_id]]),
                        "label": f"{old.label} → {new.label}",
                        "href": f"stack/diff-{old.slug}-{new.slug}.html",
                    }
                )
        changes = []
        for ch in self.m.changes.get(case.id, []):
            changes.append(
                {
                    "stack": ch.stack_id,
                    "x": int(self.run_epoch[int(t["run"][ch.row])]),
                    "y": float(t["value"][ch.row]),
                    "dir": ch.direction,
                    "mag": ch.magnitude,
                    "p": ch.p_value,
                    "run": ch.run_id,
                }
            )
        regs = []
        for reg in self.m.regressions_by_case.get(case.id, []):
            first = self.d.runs.get(reg["first_run_id"])
            if first is not None:
                regs.append(
                    {
                        "stack": reg["stack_id"],
                        "x": _epoch(first.started_at),
                        "state": reg["state"],
                        "label": f"{reg['state']} {reg['kind']} regression: {reg['metric']}",
                    }
                )
        suite = case.suite
        limit = None
        if suite == "ulp":
            limit = 2.0 if case.mode == "rtz" else 1.5
        return {
            "name": case.name,
            "suite": suite,
            "unit": UNITS.get(suite, ""),
            "label": METRIC_LABEL.get(suite, "value"),
            "band": suite in ("perf", "e2e"),
            "limit": limit,
            "speedup": suite in ("perf", "e2e"),
            "stacks": stacks,
            "markers": markers,
            "changes": changes,
            "regressions": regs,
        }

    def related_payload(self, case: CaseRow) -> list[dict[str, Any]]:
        out = []
        for other in sorted(self.m.related.get(case.id, []), key=lambda c: c.suite):
            if other.suite not in ("ulp", "determinism"):
                continue
            p = self.case_payload(other)
            for s in p["stacks"]:  # beneath the main chart only values matter
                for k in ("lo", "hi", "sp"):
                    s.pop(k)
            p["href"] = f"{other.key}.html"
            out.append(p)
        return out

    def series_hash(self, case: CaseRow, h: Any) -> None:
        """Feeds everything a case's charts show into h, without building the page's JSON."""
        t = self.d.table
        for sid, idx in sorted(self.m.series.get(case.id, {}).items()):
            runs = t["run"][idx]
            h.update(f"{sid}|{len(idx)}|".encode())
            for col in ("value", "lo", "hi", "speedup", "status"):
                h.update(t[col][idx].tobytes())
            h.update("".join([self.d.run_order[i] + self.run_commit[i] for i in runs.tolist()]).encode())
            h.update(self.run_epoch[runs].tobytes())
        marks = [
            (c.stack_id, c.run_id, c.direction, c.magnitude, c.p_value)
            for c in self.m.changes.get(case.id, [])
        ]
        h.update(repr(marks).encode())

    def case_key(self, case: CaseRow) -> str:
        h = hashlib.sha1()
        self.series_hash(case, h)
        for other in self.m.related.get(case.id, []):
            h.update(other.key.encode())
            self.series_hash(other, h)
        regs = self.m.regressions_by_case.get(case.id, [])
        h.update(
            repr([(r["id"], r["state"], r["note"], r["magnitude"], r["first_run_id"]) for r in regs]).encode()
        )
        h.update(repr([(tr.run_id, tr.old, tr.new) for tr in self.m.transitions]).encode())
        h.update((self.stack_names_hash + self.m.detector + case.name + repr(case.params)).encode())
        return h.hexdigest()

    def case_context(self, case: CaseRow) -> dict[str, Any]:
        payload = self.case_payload(case)
        related = self.related_payload(case) if case.suite in ("perf", "e2e") else []
        # One run table per page (id, commit, time); points refer to it by index, so the ULP and
        # determinism charts beneath do not repeat 24-character run ids.
        series = [s for p in (payload, *related) for s in p["stacks"]]
        used = np.unique(np.concatenate([s["r"] for s in series])) if series else np.zeros(0, np.int64)
        for s in series:
            s["r"] = np.searchsorted(used, s["r"]).tolist()
        ids = used.tolist()
        runs = {
            "id": [self.d.run_order[i] for i in ids],
            "commit": [self.run_commit[i] for i in ids],
            "x": self.run_epoch[used].tolist() if len(used) else [],
        }
        chart = {"runs": runs, "main": payload, "related": related}
        regs = [self.reg_view(r) for r in self.m.regressions_by_case.get(case.id, [])]
        regs.sort(key=lambda r: STATE_ORDER.get(r["state"], 9))
        changes = sorted(payload["changes"], key=lambda c: c["x"], reverse=True)
        return {
            "title": case.name,
            "case": case,
            "chart": chart,
            "chart_json": script_json(json.dumps(chart, separators=(",", ":"), default=str)),
            "changes": changes[:MAX_CHANGE_ROWS],
            "more_changes": max(0, len(changes) - MAX_CHANGE_ROWS),
            "regressions": regs,
            "related": [{"case": o, "href": f"{o.key}.html"} for o in self.m.related.get(case.id, [])],
            "latest": self.latest_rows(chart),
            "detector": self.m.detector,
        }

    def case_pages(self) -> None:
        for case in self.d.cases.values():
            self.w.page(
                f"case/{case.key}.html",
                "case.html.j2",
                self.case_key(case),
                functools.partial(self.case_context, case),
            )

    def latest_rows(self, chart: dict[str, Any], n: int = 5) -> list[dict[str, Any]]:
        """The last n points per stack as a table: the page says the same without JavaScript."""
        rows = []
        runs = chart["runs"]
        for s in chart["main"]["stacks"]:
            for i in range(max(0, len(s["r"]) - n), len(s["r"])):
                r = s["r"][i]
                rows.append(
                    {
                        "stack": s,
                        "when": datetime.fromtimestamp(runs["x"][r], UTC).replace(tzinfo=None),
                        "run": runs["id"][r],
                        "commit": runs["commit"][r],
                        "value": s["y"][i],
                        "lo": s["lo"][i],
                        "hi": s["hi"][i],
                        "sp": s["sp"][i],
                        "status": STATUS_CODES[s["st"][i]],
                    }
                )
        return rows

    # ---- index
    def index_rows(self) -> tuple[list[dict[str, Any]], list[StackRow]]:
        t = self.d.table
        cur = self.m.current_stacks
        rows = []
        open_cases = {
            r["case_id"]: r["state"] for r in self.d.regressions if r["state"] in ("open", "acknowledged")
        }
        recent_x = int(self.run_epoch.max()) - 14 * 86400 if len(self.run_epoch) else 0
        for case in sorted(self.d.cases.values(), key=lambda c: (c.suite != "perf", c.suite, c.name)):
            per = self.m.series.get(case.id, {})
            cells: list[dict[str, Any] | None] = []
            for s in cur:
                idx = per.get(s.id)
                if idx is None or not len(idx):
                    cells.append(None)
                    continue
                vals = t["value"][idx]
                last = float(vals[-1])
                prev = vals[max(0, len(vals) - 8) : len(vals) - 1]
                prev = prev[~np.isnan(prev)]
                delta = (last / float(np.median(prev)) - 1.0) if len(prev) and np.median(prev) else None
                cells.append({"v": last, "d": delta, "st": STATUS_CODES[int(t["status"][idx[-1]])]})
            recent = [
                ch
                for ch in self.m.changes.get(case.id, [])
                if self.run_epoch[int(t["run"][ch.row])] >= recent_x and ch.stack_id in {s.id for s in cur}
            ]
            rows.append(
                {
                    "case": case,
                    "href": self.case_href(case),
                    "stacks": " ".join(str(s.id) for s in cur if per.get(s.id) is not None),
                    "cells": cells,
                    "reg": open_cases.get(case.id),
                    "change": recent[-1] if recent else None,
                }
            )
        return rows, cur

    def index(self) -> None:
        latest = []
        for sid, run in sorted(self.m.latest_run.items(), key=lambda kv: kv[1].started_at, reverse=True):
            latest.append(
                {
                    "stack": self.stack_ref(sid),
                    "run": run,
                    "overview": run_overview(self.m, run),
                    "gpu": _flat_state(run.gpu_state),
                    "retired_by": self.stack_ref(self.m.successor[sid]) if sid in self.m.successor else None,
                }
            )
        regs = [r for r in self.regression_views() if r["state"] in ("open", "acknowledged")]
        rows, cur = self.index_rows()
        shapes = sorted({r["case"].shape for r in rows if r["case"].shape})
        recent_changes = []
        t = self.d.table
        for case_id, marks in self.m.changes.items():
            for ch in marks:
                recent_changes.append((int(self.run_epoch[int(t["run"][ch.row])]), case_id, ch))
        recent_changes.sort(key=lambda x: x[0], reverse=True)
        ctx = {
            "title": "Overview",
            "latest": latest,
            "regressions": regs,
            "rows": rows,
            "columns": [self.stack_ref(s.id) for s in cur],
            "filters": {
                "suite": sorted({r["case"].suite for r in rows}),
                "shape": shapes,
                "mode": sorted({r["case"].mode for r in rows if r["case"].mode}),
                "layout": sorted({r["case"].layout for r in rows if r["case"].layout}),
            },
            "changes": [
                {
                    "case": self.d.cases[cid],
                    "mark": ch,
                    "stack": self.stack_ref(ch.stack_id),
                    "when": datetime.fromtimestamp(x, UTC).replace(tzinfo=None),
                }
                for x, cid, ch in recent_changes[:12]
            ],
            "detector": self.m.detector,
            "generated": self.generated,
            "counts": {"runs": len(self.d.runs), "cases": len(self.d.cases), "stacks": len(self.d.stacks)},
        }
        # The "generated" stamp is left out of the key: an unchanged store keeps the index unchanged.
        key_ctx = {k: v for k, v in ctx.items() if k != "generated"}
        self.w.page("index.html", "index.html.j2", _sha(repr(key_ctx)), lambda: ctx)

    # ---- runs
    def run_pages(self) -> None:
        reg_by_run: dict[str, list[int]] = {}
        for r in self.d.regressions:
            for k in ("first_run_id", "last_run_id", "baseline_run_id"):
                if r.get(k):
                    reg_by_run.setdefault(r[k], []).append(r["id"])
        for i, rid in enumerate(self.d.run_order):
            run = self.d.runs[rid]
            key = _sha(
                repr(run.fingerprint),
                repr(_run_fields(run)),
                self.case_names_hash,
                self.stack_names_hash,
                repr(reg_by_run.get(rid, [])),
                self.d.speedup_name.get(rid, ""),
                str(run.build_id),
                repr(self.d.builds.get(run.build_id or -1)),
            )

            def ctx(run: RunRow = run, i: int = i) -> dict[str, Any]:
                regs = [self.reg_view(r) for r in self.d.regressions if r["id"] in reg_by_run.get(run.id, [])]
                results, failing = self.run_results(i)
                return {
                    "title": f"Run {run.id}",
                    "run": run,
                    "stack": self.stack_ref(run.stack_id),
                    "overview": run_overview(self.m, run),
                    "results": results,
                    "failing": failing,
                    "gpu": _flat_state(run.gpu_state),
                    "build": self.d.builds.get(run.build_id) if run.build_id else None,
                    "regressions": regs,
                    "speedup_name": self.d.speedup_name.get(run.id, "speedup"),
                }

            self.w.page(f"run/{rid}.html", "run.html.j2", key, ctx)
        runs: list[dict[str, Any]] = []
        for rid in reversed(self.d.run_order):
            run = self.d.runs[rid]
            runs.append({"run": run, "stack": self.stack_ref(run.stack_id)})
        key = _sha(
            repr([(r["run"].id, r["run"].fingerprint, r["run"].kernel_commit) for r in runs]),
            self.stack_names_hash,
        )
        self.w.page("runs.html", "runs.html.j2", key, lambda: {"title": "Runs", "runs": runs})

    def run_results(self, i: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """A run's results as compact rows for the page's script (300 rows x 1,000 runs as HTML
        was most of a full render); the failing rows are also listed in HTML."""
        t = self.d.table
        rows = self.m.rows_by_run[i]
        rows = rows[np.isin(t["case"][rows], self.case_ids)]
        order = np.lexsort((self.case_rank[t["case"][rows]], t["status"][rows] == 0))
        rows = rows[order]
        cases = t["case"][rows].tolist()
        ref = {c: k for k, c in enumerate(dict.fromkeys(cases))}
        status = t["status"][rows].tolist()
        failing = [
            {"case": self.d.cases[c], "status": STATUS_CODES[st], "msg": self.d.messages.get(int(rid), "")}
            for c, st, rid in zip(cases, status, t["id"][rows].tolist(), strict=True)
            if st != 0
        ]
        return {
            "cases": [[self.d.cases[c].key, self.d.cases[c].name, self.d.cases[c].suite] for c in ref],
            "units": UNITS,
            "cols": ["case", "status", "value", "lo", "hi", "speedup", "tflops", "message"],
            "rows": [
                list(r)
                for r in zip(
                    [ref[c] for c in cases],
                    [STATUS_CODES[x] for x in status],
                    _clean(t["value"][rows]),
                    _clean(t["lo"][rows]),
                    _clean(t["hi"][rows]),
                    _clean(t["speedup"][rows], 4),
                    _clean(t["tflops"][rows], 1),
                    [self.d.messages.get(x, "") for x in t["id"][rows].tolist()],
                    strict=True,
                )
            ],
        }, failing

    # ---- stacks
    def stack_pages(self) -> None:
        stacks = sorted(self.d.stacks.values(), key=lambda s: s.label)
        counts = {s.id: 0 for s in stacks}
        first: dict[int, RunRow] = {}
        for rid in self.d.run_order:
            r = self.d.runs[rid]
            counts[r.stack_id] = counts.get(r.stack_id, 0) + 1
            first.setdefault(r.stack_id, r)
        pairs: list[tuple[StackRow, StackRow]] = []
        seen = set()
        for tr in self.m.transitions:
            if (tr.old, tr.new) not in seen:
                seen.add((tr.old, tr.new))
                pairs.append((self.d.stacks[tr.old], self.d.stacks[tr.new]))
        if len(stacks) <= 12:  # every pair is cheap while there are few stacks
            for a in stacks:
                for b in stacks:
                    if a.id < b.id and (a.id, b.id) not in seen and (b.id, a.id) not in seen:
                        seen.add((a.id, b.id))
                        pairs.append((a, b))
        views: list[dict[str, Any]] = [
            {
                "stack": s,
                "ref": self.stack_ref(s.id),
                "runs": counts.get(s.id, 0),
                "first": first.get(s.id),
                "last": self.m.latest_run.get(s.id),
            }
            for s in stacks
        ]
        diff_links = [
            {
                "a": self.stack_ref(a.id),
                "b": self.stack_ref(b.id),
                "href": f"stack/diff-{a.slug}-{b.slug}.html",
                "n": sum(1 for row in stack_diff(a, b) if row["differs"]),
            }
            for a, b in pairs
        ]
        transitions: list[dict[str, Any]] = [
            {
                "old": self.stack_ref(tr.old),
                "new": self.stack_ref(tr.new),
                "run": self.d.runs[tr.run_id],
                "where": tr.where,
                "href": f"stack/diff-{self.d.stacks[tr.old].slug}-{self.d.stacks[tr.new].slug}.html",
            }
            for tr in self.m.transitions
        ]
        key = _sha(
            repr([(v["stack"].digest, v["stack"].label, v["runs"]) for v in views]),
            repr(diff_links),
            repr([(t["run"].id, t["where"]) for t in transitions]),
        )
        ctx = {"title": "Stacks", "stacks": views, "diffs": diff_links, "transitions": transitions}
        self.w.page("stacks.html", "stacks.html.j2", key, lambda: ctx)
        for v in views:
            s = v["stack"]
            key = _sha(
                s.digest,
                s.label,
                repr(s.keys),
                repr(v["runs"]),
                repr(v["first"] and v["first"].id),
                repr(v["last"] and v["last"].id),
                repr(diff_links),
            )
            self.w.page(
                f"stack/{s.slug}.html",
                "stack.html.j2",
                key,
                functools.partial(self.stack_context, v, diff_links),
            )
        for a, b in pairs:
            rows = stack_diff(a, b)
            key = _sha(a.digest, b.digest, a.label, b.label, repr(rows))
            self.w.page(
                f"stack/diff-{a.slug}-{b.slug}.html",
                "stack_diff.html.j2",
                key,
                functools.partial(self.diff_context, a, b, rows),
            )

    def stack_context(self, v: dict[str, Any], diff_links: list[dict[str, Any]]) -> dict[str, Any]:
        sid = v["stack"].id
        return {
            "title": f"Stack {v['stack'].label}",
            **v,
            "diffs": [d for d in diff_links if sid in (d["a"]["id"], d["b"]["id"])],
        }

    def diff_context(self, a: StackRow, b: StackRow, rows: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "title": f"{a.label} vs {b.label}",
            "a": self.stack_ref(a.id),
            "b": self.stack_ref(b.id),
            "rows": rows,
            "ndiff": sum(1 for r in rows if r["differs"]),
        }

    # ---- regressions, gates, feed
    def regression_pages(self) -> None:
        views = self.regression_views()
        key = _sha(
            repr([(r["id"], r["state"], r["note"], r["magnitude"], r["updated_at"]) for r in views]),
            self.case_names_hash,
            self.stack_names_hash,
        )
        self.w.page(
            "regressions.html",
            "regressions.html.j2",
            key,
            lambda: {"title": "Regressions", "regressions": views},
        )
        newest = sorted(views, key=lambda r: r["created_at"] or datetime.min, reverse=True)[:50]
        updated = max(
            (r["updated_at"] or r["created_at"] for r in newest if r["updated_at"] or r["created_at"]),
            default=None,
        )
        self.w.page(
            "feed.xml",
            "feed.xml.j2",
            key,
            lambda: {
                "entries": newest,
                "updated": (updated or datetime(1970, 1, 1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "base_url": self.base_url,
            },
        )

    def gate_pages(self) -> None:
        views = []
        for g in self.d.gates:
            views.append(
                {
                    **g,
                    "baseline": self.d.runs.get(g["baseline_run_id"]),
                    "candidate": self.d.runs.get(g["candidate_run_id"]),
                }
            )
        views.sort(key=lambda g: g["created_at"] or datetime.min, reverse=True)
        key = _sha(repr([(g["id"], g["verdict"], g["created_at"]) for g in views]), self.stack_names_hash)
        self.w.page("gates.html", "gates.html.j2", key, lambda: {"title": "Gate decisions", "gates": views})
        for g in views:
            report = g["report"] if isinstance(g["report"], dict) else {"report": g["report"]}
            key = _sha(
                json.dumps(report, sort_keys=True, default=str), repr(g["verdict"]), repr(g["exit_code"])
            )

            def ctx(g: dict[str, Any] = g, report: dict[str, Any] = report) -> dict[str, Any]:
                return {
                    "title": f"Gate decision {g['id']}",
                    "gate": g,
                    "sections": _report_sections(report),
                    "stacks": {
                        k: self.stack_ref(g[k].stack_id)
                        for k in ("baseline", "candidate")
                        if g[k] is not None
                    },
                    "case_links": {c.name: f"case/{c.key}.html" for c in self.d.cases.values()},
                }

            self.w.page(f"gate/{g['id']}.html", "gate.html.j2", key, ctx)


def _run_fields(run: RunRow) -> tuple[Any, ...]:
    return (
        run.status,
        run.trigger,
        run.is_drill,
        run.kernel_commit,
        run.started_at,
        run.finished_at,
        run.summary,
        run.gpu_state,
        run.host,
        run.ci,
        run.message,
        run.exit_code,
        run.runner,
    )


def _flat_state(state: Any) -> list[tuple[str, list[tuple[str, Any]]]]:
    """GPU state as (section, [(key, value)]): before/after dicts become sections."""
    if not isinstance(state, dict) or not state:
        return []
    nested = [(k, v) for k, v in state.items() if isinstance(v, dict)]
    flat = [(k, v) for k, v in state.items() if not isinstance(v, dict)]
    out = [
        (str(k), [(str(a), b) for a, b in v.items() if not isinstance(b, dict | list)][:12])
        for k, v in nested
    ]
    if flat:
        out.insert(0, ("state", [(str(k), v) for k, v in flat if not isinstance(v, list)][:12]))
    return out


def _report_sections(report: dict[str, Any]) -> list[dict[str, Any]]:
    """A gate report of any shape: scalars as a list, lists of dicts as tables, dicts as key/value."""
    scalars, sections = [], []
    for k, v in report.items():
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            cols: list[str] = []
            for x in v:
                cols += [c for c in x if c not in cols]
            sections.append({"kind": "table", "name": k, "columns": cols, "rows": v})
        elif isinstance(v, dict):
            sections.append({"kind": "dict", "name": k, "items": list(v.items())})
        else:
            scalars.append((k, v))
    return [{"kind": "scalars", "name": "", "items": scalars}, *sections] if scalars else sections


def copy_static(writer: SiteWriter, static: Path) -> None:
    for path in sorted(static.rglob("*")):
        if path.is_file():
            writer.raw("static/" + path.relative_to(static).as_posix(), path.read_bytes())


def assets_hash(web: Path) -> str:
    h = hashlib.sha1()
    for path in sorted(web.rglob("*")):
        if path.is_file():
            h.update(path.relative_to(web).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def remove_tree(path: Path, keep: Iterable[str] = ()) -> None:
    for child in path.iterdir() if path.exists() else []:
        if child.name in keep:
            continue
        shutil.rmtree(child) if child.is_dir() else child.unlink()


__all__ = ["Pages", "SiteWriter", "WriteStats", "assets_hash", "copy_static", "geomean", "make_env"]
