"""Reads the store (through regress.store.queries, by column name) into plain rows and one
columnar result table, with an on-disk cache.

Why a cache: a year of nightly history is ~330k results with their samples; decoding them takes
seconds, while a new night adds only ~1k. Completed runs never change, so the table of every result
(one row each: run, case, status, headline value, p5/p95 band, speedup, TFLOP/s) is kept under
<out>/.regress-site/ and only runs whose `RunRow.fingerprint` changed are read again.
The cache holds numbers only (numpy .npz without pickles, plus JSON), never code.
"""

from __future__ import annotations

import json
import math
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import Engine

from regress.facts.metrics import SPEEDUP_PREFIX, headline_value, percentile, plan_label, speedups
from regress.store import queries

from .writer import TMP_DIR, atomic_path

# 2: the speedup column is against the run's first baseline by name (issue 12); 3: plan labels (issue 37)
CACHE_VERSION = 3
STATUS_CODES = ("pass", "fail", "error", "skip", "other")
STATUS_INDEX = {s: i for i, s in enumerate(STATUS_CODES)}
COLUMNS = ("id", "run", "case", "status", "value", "lo", "hi", "speedup", "tflops")
_FLOAT_COLS = ("value", "lo", "hi", "speedup", "tflops")


@dataclass
class StackRow:
    id: int
    digest: str
    name: str
    keys: dict[str, Any]
    schema_version: int
    created_at: datetime | None

    @property
    def label(self) -> str:
        return self.name or self.digest[:12]

    @property
    def slug(self) -> str:
        return self.digest[:16]


@dataclass
class RunRow:
    id: str
    stack_id: int
    status: str
    trigger: str
    is_drill: bool
    backend: str
    kernel_commit: str | None
    started_at: datetime
    finished_at: datetime | None
    summary: dict[str, Any]
    gpu_state: dict[str, Any]
    host: dict[str, Any]
    ci: dict[str, Any]
    message: str
    exit_code: int | None
    runner: str | None
    build_id: int | None
    n_results: int = 0
    max_result: int = 0
    stored_at: datetime | None = None

    @property
    def fingerprint(self) -> list[Any]:
        """What tells the cache and the pages that a run's results changed (JSON, for the cache).
        stored_at: a run deleted and stored again under its id, with as many results, has the
        deleted results' ids on SQLite, so the count and largest id alone matched the old run."""
        stored = self.stored_at.isoformat() if self.stored_at else None
        return [self.status, self.n_results, self.max_result, stored]


@dataclass
class CaseRow:
    id: int
    key: str
    kernel: str
    suite: str
    name: str
    params: dict[str, Any]
    b: int | None
    h: int | None
    sq: int | None
    sk: int | None
    layout: str | None
    mode: str | None

    @property
    def shape(self) -> str:
        if None in (self.b, self.h, self.sq, self.sk):
            p = self.params
            return ",".join(str(p[k]) for k in ("model", "batch", "seq") if k in p)
        return f"{self.b},{self.h},{self.sq},{self.sk}"


@dataclass
class SiteData:
    stacks: dict[int, StackRow]
    runs: dict[str, RunRow]  # ordered by started_at
    cases: dict[int, CaseRow]
    table: dict[str, np.ndarray]  # COLUMNS; "run" indexes run_order
    run_order: list[str]
    speedup_name: dict[str, str]  # run id -> the speedup metric's name (speedup_vs_<baseline>)
    messages: dict[int, str]  # result id -> message, only non-empty ones
    plans: dict[int, str]  # result id -> the launch plan it recorded (metrics.plan_label), only where one
    regressions: list[dict[str, Any]]
    gates: list[dict[str, Any]]
    builds: dict[int, dict[str, Any]]
    reloaded_runs: set[str] = field(default_factory=set)
    full_reload: bool = False


def _obj(value: Any) -> dict[str, Any]:
    """A stored JSON object; anything else (written before the bundle schema) shown as such."""
    if value is None:
        return {}
    return value if isinstance(value, dict) else {"(not an object)": value}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _number(value: Any) -> float:
    return float(value) if _is_number(value) else math.nan


def _numbers(value: Any) -> list[float]:
    return [float(v) for v in value if _is_number(v)] if isinstance(value, list) else []


def _load_rows(engine: Engine) -> tuple[dict[int, StackRow], dict[str, RunRow], dict[int, CaseRow]]:
    with engine.connect() as conn:
        stacks = {
            r.id: StackRow(r.id, r.digest, r.name or "", _obj(r.keys), r.schema_version, r.created_at)
            for r in queries.stacks(conn)
        }
        counts = queries.result_counts(conn)
        runs: dict[str, RunRow] = {}
        for r in queries.runs(conn):
            n, mx = counts.get(r.id, (0, 0))
            runs[r.id] = RunRow(
                id=r.id,
                stack_id=r.stack_id,
                status=r.status,
                trigger=r.trigger,
                is_drill=bool(r.is_drill),
                backend=r.backend,
                kernel_commit=r.kernel_commit,
                started_at=r.started_at or datetime.min,
                finished_at=r.finished_at,
                summary=_obj(r.summary),
                gpu_state=_obj(r.gpu_state),
                host=_obj(r.host),
                ci=_obj(r.ci),
                message=r.message or "",
                exit_code=r.exit_code,
                runner=r.runner,
                build_id=r.build_id,
                n_results=n,
                max_result=mx,
                stored_at=r.stored_at,
            )
        cases = {
            r.id: CaseRow(
                id=r.id,
                key=r.key,
                kernel=r.kernel,
                suite=r.suite,
                name=r.name,
                params=_obj(r.params),
                b=r.b,
                h=r.h,
                sq=r.sq,
                sk=r.sk,
                layout=r.layout,
                mode=r.mode,
            )
            for r in queries.cases(conn)
        }
    return stacks, runs, cases


def _load_results(
    engine: Engine, run_ids: list[str] | None, runs: Mapping[str, Any], cases: Mapping[int, Any]
) -> tuple[dict[str, list[Any]], dict[str, str], dict[int, str], dict[int, str]]:
    """Result rows of `run_ids` (None: all) as columns; run as run id for now. Only those of the
    `runs` and `cases` read before: an upload that committed in between (its results, not its run
    row) crashed the render with a KeyError (issue 41 item 8); the next render shows it."""
    cols: dict[str, list[Any]] = {c: [] for c in COLUMNS}
    speedup_name: dict[str, str] = {}
    messages: dict[int, str] = {}
    plans: dict[int, str] = {}
    # The p5-p95 band is what the suite stored (metrics p5_ms, p95_ms: metrics.summarize_times).
    # Runs stored before p5_ms was (every committed bundle before issue 43) get the missing edge from
    # their raw "time_ms" samples with the same percentile, so their pages read as they did; only the
    # runs of such results have their samples read.
    unbanded: dict[int, int] = {}  # result id -> its row, for the rows missing an edge
    unbanded_runs: set[str] = set()
    with engine.connect() as conn:
        for r in queries.results(conn, run_ids):
            if r.run_id not in runs or r.case_id not in cases:
                continue
            m = _obj(r.metrics)
            lo, hi = m.get("p5_ms"), m.get("p95_ms")
            lo = None if lo is None else _number(lo)
            hi = None if hi is None else _number(hi)
            if lo is None or hi is None:
                unbanded[r.id] = len(cols["id"])
                unbanded_runs.add(r.run_id)
            # The table keeps one speedup per result: against the run's first baseline by name, so
            # every row of a run is against the same one (the index names it in its header).
            sp = math.nan
            per_base = speedups(m)
            if per_base:
                base = speedup_name.setdefault(r.run_id, SPEEDUP_PREFIX + min(per_base))
                sp = per_base.get(base.removeprefix(SPEEDUP_PREFIX), math.nan)
            value = r.value
            if value is None:  # rows written before results.value existed
                value = headline_value(r.suite, m)
            cols["id"].append(r.id)
            cols["run"].append(r.run_id)
            cols["case"].append(r.case_id)
            cols["status"].append(STATUS_INDEX.get(r.status, 4))
            cols["value"].append(math.nan if value is None else float(value))
            cols["lo"].append(math.nan if lo is None else float(lo))
            cols["hi"].append(math.nan if hi is None else float(hi))
            cols["speedup"].append(sp)
            tf = m.get("tflops")
            cols["tflops"].append(_number(tf))
            if r.message:
                messages[r.id] = r.message
            if label := plan_label(m):
                plans[r.id] = label
        if unbanded:
            for r in queries.time_samples(conn, unbanded_runs):
                row = unbanded.get(r.result_id)
                v = _numbers(r.values) if row is not None else None
                if row is None or not v:
                    continue
                if math.isnan(cols["lo"][row]):
                    cols["lo"][row] = float(percentile(v, 5))
                if math.isnan(cols["hi"][row]):
                    cols["hi"][row] = float(percentile(v, 95))
    return cols, speedup_name, messages, plans


def _to_arrays(cols: dict[str, list[Any]], run_index: dict[str, int]) -> dict[str, np.ndarray]:
    return {
        "id": np.asarray(cols["id"], dtype=np.int64),
        "run": np.asarray([run_index[r] for r in cols["run"]], dtype=np.int32),
        "case": np.asarray(cols["case"], dtype=np.int32),
        "status": np.asarray(cols["status"], dtype=np.int8),
        **{c: np.asarray(cols[c], dtype=np.float64) for c in _FLOAT_COLS},
    }


def _empty_table() -> dict[str, np.ndarray]:
    return _to_arrays({c: [] for c in COLUMNS}, {})


def load(engine: Engine, cache_dir: Path | None, *, full: bool = False) -> SiteData:
    """Everything the pages need; results from the cache where their run is unchanged."""
    stacks, runs, cases = _load_rows(engine)
    run_order = list(runs)
    run_index = {r: i for i, r in enumerate(run_order)}
    cached = None if (full or cache_dir is None) else _read_cache(cache_dir)
    if cached is not None and not np.isin(cached[0]["case"], np.fromiter(cases, dtype=np.int64)).all():
        cached = None  # rows of cases the store does not have: a damaged or foreign cache
    if cached is None:
        cols, speedup_name, messages, plans = _load_results(engine, None, run_index, cases)
        table = _to_arrays(cols, run_index)
        reloaded, full_reload = set(run_order), True
    else:
        old_table, old_runs, old_fp, speedup_name, messages, plans = cached
        dirty = [r for r in run_order if old_fp.get(r) != runs[r].fingerprint]
        keep_old = np.asarray([r in run_index and r not in set(dirty) for r in old_runs], dtype=bool)
        mask = keep_old[old_table["run"]] if len(old_runs) else np.zeros(0, dtype=bool)
        remap = np.asarray([run_index.get(r, -1) for r in old_runs], dtype=np.int32)
        kept = {c: a[mask] for c, a in old_table.items()}
        if len(old_runs):
            kept["run"] = remap[kept["run"]]
        gone = set(old_runs) - set(run_index)
        for r in [*dirty, *gone]:
            speedup_name.pop(r, None)
        kept_ids = set(kept["id"].tolist()) if messages or plans else set()
        messages = {k: v for k, v in messages.items() if k in kept_ids}
        plans = {k: v for k, v in plans.items() if k in kept_ids}
        if dirty:
            cols, sp, msg, pl = _load_results(engine, dirty, run_index, cases)
            new = _to_arrays(cols, run_index)
            table = {c: np.concatenate([kept[c], new[c]]) for c in COLUMNS}
            speedup_name.update(sp)
            messages.update(msg)
            plans.update(pl)
        else:
            table = kept
        reloaded, full_reload = set(dirty), False
    regressions, gates, builds = _load_small(engine)
    data = SiteData(
        stacks,
        runs,
        cases,
        table,
        run_order,
        speedup_name,
        messages,
        plans,
        regressions,
        gates,
        builds,
        reloaded,
        full_reload,
    )
    if cache_dir is not None:
        _write_cache(cache_dir, data)
    return data


def _load_small(
    engine: Engine,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[int, dict[str, Any]]]:
    with engine.connect() as conn:
        return queries.regressions(conn), queries.gate_decisions(conn), queries.builds(conn)


def _read_cache(cache_dir: Path) -> tuple[Any, ...] | None:
    """The cache of the last render, or None when there is none or it is damaged in any way (valid
    JSON of the wrong shape, arrays of the wrong type or length, indices out of range): then
    everything is read again, as docs/site.md promises (issue 24: 9 of 11 such files crashed)."""
    meta_path, arr_path = cache_dir / "results.json", cache_dir / "results.npz"
    try:
        meta = json.loads(meta_path.read_text())
        if not isinstance(meta, dict) or meta.get("version") != CACHE_VERSION:
            return None
        with np.load(arr_path, allow_pickle=False) as npz:
            table = {c: npz[c] for c in COLUMNS}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None  # no cache or a damaged one: read everything again
    return _checked_cache(meta, table)


def _checked_cache(meta: dict[str, Any], table: dict[str, np.ndarray]) -> tuple[Any, ...] | None:
    rows, runs, fps = meta.get("rows"), meta.get("runs"), meta.get("fingerprints")
    speedup, messages, plans = meta.get("speedup_name"), meta.get("messages"), meta.get("plans")
    if not (isinstance(rows, int) and isinstance(runs, list) and isinstance(fps, dict)):
        return None
    if not (isinstance(speedup, dict) and isinstance(messages, dict) and isinstance(plans, dict)):
        return None
    if not all(isinstance(r, str) for r in runs) or len(set(runs)) != len(runs):
        return None
    if not all(isinstance(v, str) for v in speedup.values()):
        return None
    for texts in (messages, plans):
        if not all(isinstance(k, str) and k.isdecimal() and isinstance(v, str) for k, v in texts.items()):
            return None
    expected = _empty_table()
    for c, a in table.items():
        if a.ndim != 1 or a.dtype != expected[c].dtype or len(a) != rows:
            return None  # arrays and meta from different renders (a crash between the two writes)
    if rows and (table["run"].min() < 0 or table["run"].max() >= len(runs)):
        return None
    if rows and (table["status"].min() < 0 or table["status"].max() >= len(STATUS_CODES)):
        return None
    return (
        table,
        runs,
        fps,
        speedup,
        {int(k): v for k, v in messages.items()},
        {int(k): v for k, v in plans.items()},
    )


def _write_cache(cache_dir: Path, data: SiteData) -> None:
    cache_dir.mkdir(parents=True, exist_ok=True)
    meta = {
        "version": CACHE_VERSION,
        "rows": len(data.table["id"]),
        "runs": data.run_order,
        "fingerprints": {r: data.runs[r].fingerprint for r in data.run_order},
        "speedup_name": data.speedup_name,
        "messages": {str(k): v for k, v in data.messages.items()},
        "plans": {str(k): v for k, v in data.plans.items()},
    }
    # Temporaries are removed when a write fails (a full disk left results.tmp.npz: issue 24).
    with atomic_path(cache_dir / "results.npz", cache_dir / TMP_DIR) as tmp, tmp.open("wb") as f:
        np.savez(f, **data.table)  # type: ignore[arg-type]  # numpy's stub misreads **arrays
    with atomic_path(cache_dir / "results.json", cache_dir / TMP_DIR) as tmp:
        tmp.write_text(json.dumps(meta, separators=(",", ":")))
