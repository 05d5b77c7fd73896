"""Reads the store into plain rows and one columnar result table, with an on-disk cache.

Why a cache: a year of nightly history is ~330k results with their samples; decoding them takes
seconds, while a new night adds only ~1k. Completed runs never change, so the table of every result
(one row each: run, case, status, headline value, p5/p95 band, speedup, TFLOP/s) is kept under
<out>/.regress-site/ and only runs whose (result count, max result id) changed are read again.
The cache holds numbers only (numpy .npz without pickles, plus JSON), never code.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import Engine, bindparam, text

CACHE_VERSION = 1
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

    @property
    def fingerprint(self) -> list[Any]:
        return [self.status, self.n_results, self.max_result]


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
    regressions: list[dict[str, Any]]
    gates: list[dict[str, Any]]
    builds: dict[int, dict[str, Any]]
    reloaded_runs: set[str] = field(default_factory=set)
    full_reload: bool = False


def _json(value: Any) -> Any:
    # SQLite hands JSON back as text, PostgreSQL (psycopg) already decoded (a JSON string is a str).
    if isinstance(value, str | bytes):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _obj(value: Any) -> dict[str, Any]:
    """A stored JSON object; anything else (written before the bundle schema) shown as such."""
    decoded = _json(value)
    if decoded is None:
        return {}
    return decoded if isinstance(decoded, dict) else {"(not an object)": decoded}


def _numbers(value: Any) -> list[float]:
    decoded = _json(value)
    if not isinstance(decoded, list):
        return []
    return [float(v) for v in decoded if isinstance(v, int | float) and not isinstance(v, bool)]


def _dt(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


def _percentile(sorted_vals: list[float], q: float) -> float:
    n = len(sorted_vals)
    if not n:
        return math.nan
    pos = (n - 1) * q
    i = int(pos)
    j = min(i + 1, n - 1)
    return sorted_vals[i] + (sorted_vals[j] - sorted_vals[i]) * (pos - i)


def _load_rows(engine: Engine) -> tuple[dict[int, StackRow], dict[str, RunRow], dict[int, CaseRow]]:
    with engine.connect() as conn:
        stacks = {
            r[0]: StackRow(r[0], r[1], r[2] or "", _obj(r[3]), r[4], _dt(r[5]))
            for r in conn.execute(
                text("SELECT id, digest, name, keys, schema_version, created_at FROM stacks ORDER BY id")
            )
        }
        counts = {
            r[0]: (int(r[1]), int(r[2] or 0))
            for r in conn.execute(text("SELECT run_id, count(*), max(id) FROM results GROUP BY run_id"))
        }
        runs: dict[str, RunRow] = {}
        for r in conn.execute(
            text(
                "SELECT id, stack_id, status, trigger, is_drill, backend, kernel_commit, started_at, "
                "finished_at, summary, gpu_state, host, ci, message, exit_code, runner, build_id "
                "FROM runs ORDER BY started_at, id"
            )
        ):
            n, mx = counts.get(r[0], (0, 0))
            runs[r[0]] = RunRow(
                r[0],
                r[1],
                r[2],
                r[3],
                bool(r[4]),
                r[5],
                r[6],
                _dt(r[7]) or datetime.min,
                _dt(r[8]),
                _obj(r[9]),
                _obj(r[10]),
                _obj(r[11]),
                _obj(r[12]),
                r[13] or "",
                r[14],
                r[15],
                r[16],
                n,
                mx,
            )
        cases = {
            r[0]: CaseRow(r[0], r[1], r[2], r[3], r[4], _obj(r[5]), r[6], r[7], r[8], r[9], r[10], r[11])
            for r in conn.execute(
                text("SELECT id, key, kernel, suite, name, params, b, h, sq, sk, layout, mode FROM cases")
            )
        }
    return stacks, runs, cases


def _load_results(
    engine: Engine, run_ids: list[str] | None
) -> tuple[dict[str, list[Any]], dict[str, str], dict[int, str]]:
    """Result rows of `run_ids` (None: all) as columns; run as run id for now."""
    cols: dict[str, list[Any]] = {c: [] for c in COLUMNS}
    speedup_name: dict[str, str] = {}
    messages: dict[int, str] = {}
    where = "" if run_ids is None else " WHERE run_id IN :runs"
    swhere = "" if run_ids is None else " AND r.run_id IN :runs"
    params = {} if run_ids is None else {"runs": run_ids}

    def stmt(sql: str) -> Any:
        s = text(sql)
        return s.bindparams(bindparam("runs", expanding=True)) if run_ids is not None else s

    with engine.connect() as conn:
        band: dict[int, tuple[float, float]] = {}
        # p5 is not a stored metric: it comes from the raw timings (and p95 where the metric is absent).
        for rid, vals in conn.execute(
            stmt(
                'SELECT s.result_id, s."values" FROM samples s JOIN results r ON r.id = s.result_id '
                "WHERE s.name = 'time_ms'" + swhere
            ),
            params,
        ):
            v = sorted(_numbers(vals))
            if v:
                band[rid] = (_percentile(v, 0.05), _percentile(v, 0.95))
        for rid, run_id, case_id, status, value, metrics, message in conn.execute(
            stmt("SELECT id, run_id, case_id, status, value, metrics, message FROM results" + where), params
        ):
            m = _obj(metrics)
            lo = m.get("p05_ms", m.get("p5_ms"))
            hi = m.get("p95_ms")
            if rid in band:
                lo = band[rid][0] if lo is None else lo
                hi = band[rid][1] if hi is None else hi
            sp = math.nan
            for k, x in m.items():
                if k.startswith("speedup_vs_") and isinstance(x, int | float):
                    sp = float(x)
                    speedup_name.setdefault(run_id, k)
                    break
            if value is None:  # older writers: fall back to the suite's own metric names
                for k in ("p50_ms", "scaled_ulp_max", "distinct_hashes"):
                    if isinstance(m.get(k), int | float):
                        value = m[k]
                        break
            cols["id"].append(rid)
            cols["run"].append(run_id)
            cols["case"].append(case_id)
            cols["status"].append(STATUS_INDEX.get(status, 4))
            cols["value"].append(math.nan if value is None else float(value))
            cols["lo"].append(math.nan if lo is None else float(lo))
            cols["hi"].append(math.nan if hi is None else float(hi))
            cols["speedup"].append(sp)
            tf = m.get("tflops")
            cols["tflops"].append(float(tf) if isinstance(tf, int | float) else math.nan)
            if message:
                messages[rid] = message
    return cols, speedup_name, messages


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
    if cached is None:
        cols, speedup_name, messages = _load_results(engine, None)
        table = _to_arrays(cols, run_index)
        reloaded, full_reload = set(run_order), True
    else:
        old_table, old_runs, old_fp, speedup_name, messages = cached
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
        kept_ids = set(kept["id"].tolist()) if messages else set()
        messages = {k: v for k, v in messages.items() if k in kept_ids}
        if dirty:
            cols, sp, msg = _load_results(engine, dirty)
            new = _to_arrays(cols, run_index)
            table = {c: np.concatenate([kept[c], new[c]]) for c in COLUMNS}
            speedup_name.update(sp)
            messages.update(msg)
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
        regressions = [
            {**dict(r._mapping), "details": _json(r.details) or {}}
            for r in conn.execute(
                text(
                    "SELECT id, case_id, stack_id, kind, metric, state, first_run_id, baseline_run_id, "
                    "last_run_id, magnitude, p_value, details, note, created_at, updated_at, resolved_at "
                    "FROM regressions ORDER BY id"
                )
            )
        ]
        for reg in regressions:
            for k in ("created_at", "updated_at", "resolved_at"):
                reg[k] = _dt(reg[k])
        gates = [
            {**dict(r._mapping), "report": _json(r.report) or {}, "created_at": _dt(r.created_at)}
            for r in conn.execute(
                text(
                    "SELECT id, baseline_run_id, candidate_run_id, verdict, exit_code, report, created_at "
                    "FROM gate_decisions ORDER BY id"
                )
            )
        ]
        builds = {
            r.id: {**dict(r._mapping), "stats": _json(r.stats) or {}, "flags": _json(r.flags) or []}
            for r in conn.execute(
                text(
                    "SELECT id, backend, git_commit, git_dirty, compiler, compiler_version, flags, "
                    "artifact_hash, stats FROM builds"
                )
            )
        }
    return regressions, gates, builds


def _read_cache(cache_dir: Path) -> tuple[Any, ...] | None:
    meta_path, arr_path = cache_dir / "results.json", cache_dir / "results.npz"
    try:
        meta = json.loads(meta_path.read_text())
        if meta.get("version") != CACHE_VERSION:
            return None
        with np.load(arr_path, allow_pickle=False) as npz:
            table = {c: npz[c] for c in COLUMNS}
        if any(len(a) != meta["rows"] for a in table.values()):
            return None  # arrays and meta from different renders (a crash between the two writes)
    except (OSError, ValueError, KeyError):
        return None  # no cache or a damaged one: read everything again
    messages = {int(k): v for k, v in meta["messages"].items()}
    return table, meta["runs"], meta["fingerprints"], meta["speedup_name"], messages


def _write_cache(cache_dir: Path, data: SiteData) -> None:
    cache_dir.mkdir(parents=True, exist_ok=True)
    meta = {
        "version": CACHE_VERSION,
        "rows": len(data.table["id"]),
        "runs": data.run_order,
        "fingerprints": {r: data.runs[r].fingerprint for r in data.run_order},
        "speedup_name": data.speedup_name,
        "messages": {str(k): v for k, v in data.messages.items()},
    }
    tmp = cache_dir / "results.tmp.npz"
    np.savez(tmp, **data.table)  # type: ignore[arg-type]  # numpy's stub misreads **arrays
    tmp.replace(cache_dir / "results.npz")
    (cache_dir / "results.json.tmp").write_text(json.dumps(meta, separators=(",", ":")))
    (cache_dir / "results.json.tmp").replace(cache_dir / "results.json")
