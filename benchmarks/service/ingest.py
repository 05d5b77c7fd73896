"""Ingest benchmark: bulk vs row-by-row store, side by side in one run, against `regress serve`.

    PG_FSYNC=on PGPORT=5433 bash .ci/pg.sh      # durable figures (fsync on)
    python benchmarks/service/ingest.py --pg postgresql://postgres@127.0.0.1:5433/postgres

For each store path (`rows`: one INSERT per result and per sample, as before issue #13, selected by
REGRESS_INGEST_ROW_BY_ROW=1 in the server's environment; `bulk`: store/bulk.py's multi-row
inserts) on a fresh PostgreSQL database, with the service in a subprocess (gunicorn gthread when
installed, else `regress serve`, werkzeug's threaded server):

1. throughput: N uploader threads (default 20) each POST M realistic bundles (default 50) back to
   back, gzip as `regress upload` sends them; then stored = sent, no duplicates, and 10 re-sends
   answer 200 and store nothing;
2. head-of-line: one large bundle (default 14,000 results) is POSTed while one uploader keeps
   sending small bundles; the worst wait of a small upload started while the large one was in
   flight is the figure (goal < 3 s).

Loopback only; every loop is bounded (bundle counts, and a 600 s timeout per request). Prints a
side-by-side table, or JSON with --json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import requests

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "kit"))  # the realistic bundle builder the tests use

from drillkit import free_port  # noqa: E402
from ingest_bundles import make_bundle  # noqa: E402

from regress.facts.metrics import percentile  # noqa: E402
from regress.server.tokens import create_token  # noqa: E402
from regress.store.queries import count_results, run_ids  # noqa: E402
from regress.store.repo import open_store  # noqa: E402


def start_server(
    kind: str, db_url: str, port: int, workers: int, threads: int, extra_env: dict[str, str]
) -> subprocess.Popen[bytes]:
    env = {**os.environ, **extra_env, "REGRESS_DATABASE_URL": db_url}
    if kind == "gunicorn":
        argv = [
            "gunicorn", "--preload", "-k", "gthread", "-w", str(workers), "--threads", str(threads),
            "-b", f"127.0.0.1:{port}", "--log-level", "warning", "regress.server:create_app()",
        ]  # fmt: skip
    else:
        argv = [sys.executable, "-m", "regress", "serve", "--host", "127.0.0.1", "--port", str(port)]
    # Access logs would cost the server time and flood the terminal; errors still reach the log file.
    log = open(Path(os.environ.get("TMPDIR", "/tmp")) / f"regress-ingest-bench-{port}.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=2).ok:
                return proc
        except requests.ConnectionError:
            time.sleep(0.2)
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
    proc.terminate()
    raise SystemExit("server did not come up in 60 s")


def big_bundle(results: int, samples: int) -> dict[str, Any]:
    """A large bundle: the template's 13 results (so it shares cases with the small uploads, the
    worst case for lock waits) plus distinct perf results with two raw series each."""
    bundle = make_bundle()
    rng = random.Random(1)
    template = bundle["results"][0]
    extra = []
    for i in range(results - len(bundle["results"])):
        res = {**template, "name": f"big-{i}", "params": {**template["params"], "sq": 128 + i}}
        res.pop("case_key", None)
        res["samples"] = {
            name: [round(rng.uniform(0.01, 2.0), 6) for _ in range(samples)] for name in template["samples"]
        }
        extra.append(res)
    bundle["results"] = bundle["results"] + extra
    return bundle


def _post(session: requests.Session, url: str, token: str, body: bytes) -> tuple[int, float]:
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "Content-Encoding": "gzip",
    }
    t0 = time.perf_counter()
    resp = session.post(url, data=body, headers=headers, timeout=600)
    return resp.status_code, time.perf_counter() - t0


def _latency(latencies: list[float]) -> dict[str, float]:
    return {
        "p50": round(percentile(latencies, 50) * 1000, 1),
        "p95": round(percentile(latencies, 95) * 1000, 1),
        "p99": round(percentile(latencies, 99) * 1000, 1),
        "max": round(max(latencies) * 1000, 1),
        "mean": round(statistics.fmean(latencies) * 1000, 1),
    }


def run_mode(
    args: argparse.Namespace, mode: str, kind: str, big: bytes, big_results: int, database: str
) -> dict[str, Any]:
    """One store path on one database: throughput (PostgreSQL only), then head-of-line."""
    name = f"regress_bench_{mode}_{secrets.token_hex(4)}"
    tmp = Path(tempfile.mkdtemp(prefix="regress-bench-"))
    if database == "postgresql":
        with psycopg.connect(args.pg, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        db_url = f"{args.pg.rpartition('/')[0]}/{name}"
    else:
        db_url = f"sqlite:///{tmp / 'bench.db'}"
    store = open_store(db_url)
    uploaders = args.uploaders if database == "postgresql" else 0
    tokens = [create_token(store, f"bench-runner-{i:02d}")[1] for i in range(max(uploaders, 1) + 1)]
    payloads = [
        [gzip.compress(json.dumps(make_bundle()).encode(), 5) for _ in range(args.bundles)]
        for _ in range(uploaders)
    ]
    port = free_port()
    env = {"REGRESS_INGEST_ROW_BY_ROW": "1" if mode == "rows" else "0"}
    proc = start_server(kind, db_url, port, args.workers, args.threads, env)
    url = f"http://127.0.0.1:{port}/api/v1/runs"
    latencies: list[float] = []
    codes: dict[int, int] = {}
    lock = threading.Lock()
    barrier = threading.Barrier(max(uploaders, 1))

    def uploader(i: int) -> None:
        session = requests.Session()
        barrier.wait()
        for body in payloads[i]:
            code, dt = _post(session, url, tokens[i], body)
            with lock:
                latencies.append(dt)
                codes[code] = codes.get(code, 0) + 1

    big_out: dict[str, Any] = {}
    small: list[tuple[float, float, int]] = []  # (start, seconds, status) of small uploads
    try:
        threads = [threading.Thread(target=uploader, args=(i,)) for i in range(uploaders)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        resend: dict[int, int] = {}
        for i in range(min(uploaders, 10)):
            code, _ = _post(requests.Session(), url, tokens[i], payloads[i][0])
            resend[code] = resend.get(code, 0) + 1

        # Head-of-line: small uploads (fresh run ids, one uploader) while the large bundle is stored.
        def send_big() -> None:
            big_out["start"] = time.perf_counter()
            big_out["status"], big_out["seconds"] = _post(requests.Session(), url, tokens[-1], big)
            big_out["end"] = time.perf_counter()

        big_thread = threading.Thread(target=send_big)
        big_thread.start()
        session = requests.Session()
        smalls = [gzip.compress(json.dumps(make_bundle()).encode(), 5) for _ in range(args.max_small)]
        for body in smalls:  # bounded: at most --max-small uploads
            if not big_thread.is_alive():
                break
            start = time.perf_counter()
            code, dt = _post(session, url, tokens[0], body)
            small.append((start, dt, code))
            time.sleep(0.1)
        big_thread.join()
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    during = [(dt, code) for start, dt, code in small if start < big_out["end"]]
    sent = uploaders * args.bundles
    per_bundle = len(make_bundle()["results"])
    with store.reader() as session_:
        ids = run_ids(session_)
        stored, distinct, results = len(ids), len(set(ids)), count_results(session_)
    store.engine.dispose()
    if not args.keep:
        shutil.rmtree(tmp)
        if database == "postgresql":
            with psycopg.connect(args.pg, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    expected_runs = sent + 1 + len(small)
    expected_results = (sent + len(small)) * per_bundle + big_results
    return {
        "mode": mode,
        "database": database,
        "sent": sent,
        "status_codes": codes,
        "resend_status_codes": resend,
        "wall_s": round(wall, 2),
        "bundles_per_s": round(sent / wall, 1) if sent else None,
        "latency_ms": _latency(latencies) if latencies else None,
        "big_status": big_out.get("status"),
        "big_seconds": round(big_out.get("seconds", float("nan")), 2),
        "small_during_big": len(during),
        "small_worst_wait_s": round(max((dt for dt, _ in during), default=float("nan")), 2),
        "small_codes": sorted({code for _, code in during}),
        "stored_runs": stored,
        "distinct_run_ids": distinct,
        "results_stored": results,
        "ok": stored == distinct == expected_runs
        and results == expected_results
        and codes == ({201: sent} if sent else {})
        and set(resend) == ({200} if sent else set())
        and big_out.get("status") == 201
        and all(code in (201, 503) for _, _, code in small),  # 503: busy, the client retries
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    kind = args.server
    if kind == "auto":
        kind = "gunicorn" if shutil.which("gunicorn") else "werkzeug"
    with psycopg.connect(args.pg, autocommit=True) as conn:
        fsync = conn.execute("SHOW fsync").fetchone()
        version = conn.execute("SHOW server_version").fetchone()
    big_doc = big_bundle(args.big_results, args.big_samples)
    big_raw = json.dumps(big_doc).encode()
    big = gzip.compress(big_raw, 5)
    modes = [
        run_mode(args, mode, kind, big, args.big_results, database)
        for database in args.databases.split(",")
        for mode in args.modes.split(",")
    ]
    return {
        "server": kind if kind == "werkzeug" else f"gunicorn gthread {args.workers}x{args.threads}",
        "postgres": version[0] if version else "?",
        "postgres_fsync": fsync[0] if fsync else "?",
        "cpu_cores": os.cpu_count(),
        "load_1min_before": round(os.getloadavg()[0], 2),
        "uploaders": args.uploaders,
        "bundles_each": args.bundles,
        "bundle_bytes": len(json.dumps(make_bundle()).encode()),
        "big_results": args.big_results,
        "big_bytes": len(big_raw),
        "big_gzip_bytes": len(big),
        "modes": modes,
        "ok": all(m["ok"] for m in modes),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--pg",
        default=os.environ.get("REGRESS_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
        help="PostgreSQL admin URL; a fresh database is created on it per mode",
    )
    ap.add_argument("--modes", default="rows,bulk", help="store paths to compare, in order")
    ap.add_argument(
        "--databases",
        default="postgresql",
        help="postgresql (throughput + head-of-line) and/or sqlite (head-of-line only)",
    )
    ap.add_argument("--uploaders", type=int, default=20)
    ap.add_argument("--bundles", type=int, default=50, help="bundles per uploader")
    ap.add_argument("--big-results", type=int, default=14000, help="results in the large bundle")
    ap.add_argument("--big-samples", type=int, default=100, help="raw timings per series in it")
    ap.add_argument("--max-small", type=int, default=2000, help="bound on small uploads during it")
    ap.add_argument("--server", choices=["auto", "gunicorn", "werkzeug"], default="auto")
    ap.add_argument("--workers", type=int, default=2, help="gunicorn worker processes")
    ap.add_argument("--threads", type=int, default=8, help="threads per gunicorn worker")
    ap.add_argument("--keep", action="store_true", help="keep the benchmark databases")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    report = run(args)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0 if report["ok"] else 1
    r = report
    print(
        f"{r['server']} on PostgreSQL {r['postgres']} (fsync={r['postgres_fsync']}), {r['cpu_cores']} cores, "
        f"load {r['load_1min_before']} before; {r['uploaders']} uploaders x {r['bundles_each']} bundles "
        f"({r['bundle_bytes'] // 1024} KiB); large bundle {r['big_results']} results "
        f"({r['big_bytes'] / 1e6:.1f} MB, {r['big_gzip_bytes'] / 1e6:.1f} MB gzip)"
    )
    print(
        f"{'database':<10} {'store':<6} {'bundles/s':>9} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} "
        f"{'large s':>8} {'small during':>12} {'worst wait s':>12}  ok"
    )
    for m in r["modes"]:
        lat = m["latency_ms"] or {"p50": "-", "p95": "-", "p99": "-"}
        print(
            f"{m['database']:<10} {m['mode']:<6} {m['bundles_per_s'] or '-':>9} {lat['p50']:>8} "
            f"{lat['p95']:>8} {lat['p99']:>8} "
            f"{m['big_seconds']:>8} {m['small_during_big']:>12} {m['small_worst_wait_s']:>12}  "
            f"{'OK' if m['ok'] else 'FAILED ' + json.dumps(m)}"
        )
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
