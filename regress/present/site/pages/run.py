"""Run pages (run/<id>.html) and the run list (runs.html)."""

from __future__ import annotations

from typing import Any

import numpy as np

from regress.facts.metrics import HEADLINE, SPEEDUP_PREFIX

from ..data import STATUS_CODES, RunRow
from ..format import clean, device_rows
from ..model import run_overview
from ..writer import sha
from .common import Pages


def run_pages(c: Pages) -> None:
    reg_by_run: dict[str, list[int]] = {}
    for r in c.d.regressions:
        for k in ("first_run_id", "last_run_id", "baseline_run_id"):
            if r.get(k):
                reg_by_run.setdefault(r[k], []).append(r["id"])
    for i, rid in enumerate(c.d.run_order):
        run = c.d.runs[rid]
        key = sha(
            repr(run.fingerprint),
            repr(_run_fields(run)),
            c.case_names_hash,
            c.stack_names_hash,
            repr(reg_by_run.get(rid, [])),
            c.d.speedup_name.get(rid, ""),
            str(run.build_id),
            repr(c.d.builds.get(run.build_id or -1)),
        )

        def ctx(run: RunRow = run, i: int = i) -> dict[str, Any]:
            regs = [c.reg_view(r) for r in c.d.regressions if r["id"] in reg_by_run.get(run.id, [])]
            results, failing = run_results(c, i)
            return {
                "title": f"Run {run.id}",
                "run": run,
                "stack": c.stack_ref(run.stack_id),
                "overview": run_overview(c.m, run),
                "results": results,
                "failing": failing,
                "devices": device_rows(run.gpu_state),
                "build": c.d.builds.get(run.build_id) if run.build_id else None,
                "build_kernels": kernel_table(c.d.builds.get(run.build_id or -1)),
                "regressions": regs,
                "speedup_name": c.d.speedup_name.get(run.id, "").removeprefix(SPEEDUP_PREFIX) or "baseline",
            }

        c.w.page(f"run/{rid}.html", "run.html.j2", key, ctx)
    runs: list[dict[str, Any]] = []
    for rid in reversed(c.d.run_order):
        run = c.d.runs[rid]
        runs.append({"run": run, "stack": c.stack_ref(run.stack_id)})
    key = sha(
        repr([(r["run"].id, r["run"].fingerprint, r["run"].kernel_commit) for r in runs]),
        c.stack_names_hash,
    )
    c.w.page("runs.html", "runs.html.j2", key, lambda: {"title": "Runs", "runs": runs})


def run_results(c: Pages, i: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A run's results as compact rows for the page's script (300 rows x 1,000 runs as HTML
    was most of a full render); the failing rows are also listed in HTML."""
    t = c.d.table
    rows = c.m.rows_by_run[i]
    rows = rows[np.isin(t["case"][rows], c.case_ids)]
    order = np.lexsort((c.case_rank[t["case"][rows]], t["status"][rows] == 0))
    rows = rows[order]
    cases = t["case"][rows].tolist()
    ref = {cid: k for k, cid in enumerate(dict.fromkeys(cases))}
    status = t["status"][rows].tolist()
    failing = [
        {"case": c.d.cases[cid], "status": STATUS_CODES[st], "msg": c.d.messages.get(int(rid), "")}
        for cid, st, rid in zip(cases, status, t["id"][rows].tolist(), strict=True)
        if st != 0
    ]
    return {
        "cases": [[c.d.cases[cid].key, c.d.cases[cid].name, c.d.cases[cid].suite] for cid in ref],
        "units": {suite: f"{h.label} ({h.unit})" for suite, h in HEADLINE.items()},
        "cols": ["case", "status", "value", "lo", "hi", "speedup", "tflops", "message"],
        "rows": [
            list(r)
            for r in zip(
                [ref[cid] for cid in cases],
                [STATUS_CODES[x] for x in status],
                clean(t["value"][rows]),
                clean(t["lo"][rows]),
                clean(t["hi"][rows]),
                clean(t["speedup"][rows], 4),
                clean(t["tflops"][rows], 1),
                [c.d.messages.get(x, "") for x in t["id"][rows].tolist()],
                strict=True,
            )
        ],
    }, failing


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


# What the compiler reports per kernel (regress.native.build: ptxas for CUDA, clang remarks for gfx942),
# in this order when present, each with its unit.
KERNEL_COLUMNS = (
    ("registers", "registers (per thread)"),
    ("vgprs", "VGPRs (per lane)"),
    ("agprs", "AGPRs (per lane)"),
    ("sgprs", "SGPRs (per wave)"),
    ("spill_store_bytes", "spill stores (bytes)"),
    ("spill_load_bytes", "spill loads (bytes)"),
    ("vgpr_spill", "VGPR spills (count)"),
    ("sgpr_spill", "SGPR spills (count)"),
    ("stack_bytes", "stack (bytes)"),
    ("scratch_bytes", "scratch (bytes per lane)"),
    ("smem_bytes", "shared memory (bytes)"),
    ("lds_bytes", "LDS (bytes per block)"),
    ("occupancy", "occupancy (waves per SIMD)"),
    ("barriers", "barriers (count)"),
)


def kernel_table(build: dict[str, Any] | None) -> dict[str, Any]:
    """The build's per-kernel report as a table, columns named with their units. `stats` is the
    bundle's free-form object: only entries that are a kernel's report (an object) are rows."""
    stats = (build or {}).get("stats")
    found = stats.get("kernels") if isinstance(stats, dict) else None
    kernels = {n: r for n, r in found.items() if isinstance(r, dict)} if isinstance(found, dict) else {}
    if not kernels:
        return {"columns": [], "rows": []}
    present = [(k, label) for k, label in KERNEL_COLUMNS if any(k in v for v in kernels.values())]
    return {
        "columns": [{"key": k, "label": label} for k, label in present],
        "rows": [(name, [r.get(k) for k, _ in present]) for name, r in sorted(kernels.items())],
    }
