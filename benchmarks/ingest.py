"""Ingest benchmark: N concurrent uploaders x M bundles each against `regress serve` on PostgreSQL.

    bash .ci/pg.sh                      # or any PostgreSQL; PG_FSYNC=on PGPORT=5433 for durable figures
    python benchmarks/ingest.py --pg postgresql://postgres@127.0.0.1:5432/postgres

Creates a fresh database, starts the service in a subprocess (gunicorn with gthread workers when
installed, else `regress serve`, werkzeug's threaded server), makes one token per uploader, and has
each uploader thread POST its bundles one after another (gzip, as `regress upload` sends them).
Then checks stored = sent with no duplicates, re-sends a sample (must answer 200 and store nothing),
and prints throughput and latency percentiles (JSON with --json).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import requests
from sqlalchemy import func, select

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "ingest"))  # the realistic bundle builder the tests use

from ingest_bundles import make_bundle  # noqa: E402

from regress.metrics import percentile  # noqa: E402
from regress.server.tokens import create_token  # noqa: E402
from regress.store import Result, Run  # noqa: E402
from regress.store.repo import open_store  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_server(kind: str, db_url: str, port: int, workers: int, threads: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "REGRESS_DATABASE_URL": db_url}
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


def run(args: argparse.Namespace) -> dict[str, Any]:
    name = f"regress_bench_{secrets.token_hex(4)}"
    with psycopg.connect(args.pg, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
        fsync = conn.execute("SHOW fsync").fetchone()
    db_url = f"{args.pg.rpartition('/')[0]}/{name}"
    kind = args.server
    if kind == "auto":
        kind = "gunicorn" if shutil.which("gunicorn") else "werkzeug"
    store = open_store(db_url)
    tokens = [create_token(store, f"bench-runner-{i:02d}")[1] for i in range(args.uploaders)]
    payloads = [
        [gzip.compress(json.dumps(make_bundle()).encode(), 5) for _ in range(args.bundles)]
        for _ in range(args.uploaders)
    ]
    raw_size = len(json.dumps(make_bundle()).encode())
    port = free_port()
    proc = start_server(kind, db_url, port, args.workers, args.threads)
    url = f"http://127.0.0.1:{port}/api/v1/runs"
    latencies: list[float] = []
    codes: dict[int, int] = {}
    lock = threading.Lock()
    barrier = threading.Barrier(args.uploaders)

    def uploader(i: int) -> None:
        session = requests.Session()
        headers = {
            "Authorization": f"Bearer {tokens[i]}",
            "Content-Type": "application/json",
            "Content-Encoding": "gzip",
        }
        barrier.wait()
        for body in payloads[i]:
            t0 = time.perf_counter()
            resp = session.post(url, data=body, headers=headers, timeout=120)
            dt = time.perf_counter() - t0
            with lock:
                latencies.append(dt)
                codes[resp.status_code] = codes.get(resp.status_code, 0) + 1

    try:
        threads = [threading.Thread(target=uploader, args=(i,)) for i in range(args.uploaders)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        # Re-send a sample: each must be recognised (200) and store nothing.
        resend = {}
        for i in range(min(args.uploaders, 10)):
            r = requests.post(
                url,
                data=payloads[i][0],
                headers={"Authorization": f"Bearer {tokens[i]}", "Content-Encoding": "gzip"},
                timeout=60,
            )
            resend[r.status_code] = resend.get(r.status_code, 0) + 1
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    sent = args.uploaders * args.bundles
    with store.reader() as session:
        stored = int(session.scalar(select(func.count()).select_from(Run)) or 0)
        distinct = int(session.scalar(select(func.count(func.distinct(Run.id)))) or 0)
        results = int(session.scalar(select(func.count()).select_from(Result)) or 0)
    store.engine.dispose()
    if not args.keep:
        with psycopg.connect(args.pg, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    per_bundle = len(make_bundle()["results"])
    return {
        "server": kind if kind == "werkzeug" else f"gunicorn gthread {args.workers}x{args.threads}",
        "postgres_fsync": fsync[0] if fsync else "?",
        "cpu_cores": os.cpu_count(),
        "uploaders": args.uploaders,
        "bundles_each": args.bundles,
        "bundle_bytes": raw_size,
        "bundle_gzip_bytes": len(payloads[0][0]),
        "sent": sent,
        "stored": stored,
        "distinct_run_ids": distinct,
        "results_stored": results,
        "results_expected": sent * per_bundle,
        "status_codes": codes,
        "resend_status_codes": resend,
        "wall_s": round(wall, 2),
        "bundles_per_s": round(sent / wall, 1),
        "latency_ms": {
            "p50": round(percentile(latencies, 50) * 1000, 1),
            "p95": round(percentile(latencies, 95) * 1000, 1),
            "p99": round(percentile(latencies, 99) * 1000, 1),
            "max": round(max(latencies) * 1000, 1),
            "mean": round(statistics.fmean(latencies) * 1000, 1),
        },
        "ok": stored == sent == distinct
        and results == sent * per_bundle
        and codes == {201: sent}
        and set(resend) == {200},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--pg",
        default=os.environ.get("REGRESS_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
        help="PostgreSQL admin URL; a fresh database is created on it",
    )
    ap.add_argument("--uploaders", type=int, default=20)
    ap.add_argument("--bundles", type=int, default=50, help="bundles per uploader")
    ap.add_argument("--server", choices=["auto", "gunicorn", "werkzeug"], default="auto")
    ap.add_argument("--workers", type=int, default=4, help="gunicorn worker processes")
    ap.add_argument("--threads", type=int, default=8, help="threads per gunicorn worker")
    ap.add_argument("--keep", action="store_true", help="keep the benchmark database")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    report = run(args)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        lat, r = report["latency_ms"], report
        print(
            f"{report['server']} on PostgreSQL (fsync={report['postgres_fsync']}, "
            f"{report['cpu_cores']} cores): {report['uploaders']} uploaders x {report['bundles_each']} "
            f"bundles ({r['bundle_bytes'] // 1024} KiB, {r['bundle_gzip_bytes'] // 1024} KiB gzip)\n"
            f"  sent {report['sent']}, stored {report['stored']}, distinct {report['distinct_run_ids']}, "
            f"results {r['results_stored']}/{r['results_expected']}, codes {r['status_codes']}, "
            f"re-sent {report['resend_status_codes']}\n"
            f"  {report['bundles_per_s']} bundles/s over {report['wall_s']} s; latency ms p50 {lat['p50']} "
            f"p95 {lat['p95']} p99 {lat['p99']} max {lat['max']}\n"
            f"  {'OK' if report['ok'] else 'FAILED'}"
        )
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
