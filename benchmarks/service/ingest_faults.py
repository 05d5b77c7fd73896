"""Ingest fault drill: uploads keep coming while PostgreSQL restarts and the service is killed.

    PG_FSYNC=on PGPORT=5447 REGRESS_PGDATA=/tmp/pg-drill bash .ci/pg.sh
    python benchmarks/service/ingest_faults.py --pgdata /tmp/pg-drill --port 5447

A PostgreSQL cluster this drill may stop and start (its data directory and port), a fresh database
on it, `regress serve` in a subprocess, and U uploader threads that each send B bundles through the
real client (`regress.run.upload.upload_bundles`: spool first, retries with backoff). While they run:

1. PostgreSQL is stopped (`pg_ctl stop -m fast`) for --outage seconds, then started again;
2. the service is killed with SIGKILL in the middle of uploads, then started again on its port.

Afterwards every spool is flushed (`force=True`, bounded rounds) and the drill checks that every
bundle sent is stored exactly once (runs lost: 0), and counts the service's answers from its log:
no 500 may appear; 503s (with Retry-After) are the expected answer while the database is down.
Loopback only; every loop is bounded. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "kit"))

from ingest_bundles import make_bundle  # noqa: E402

from regress.facts.bundle import write_bundle  # noqa: E402
from regress.run.upload import RetryPolicy, flush_spool, spooled_files, upload_bundles  # noqa: E402
from regress.server.tokens import create_token  # noqa: E402
from regress.store.queries import run_ids  # noqa: E402
from regress.store.repo import open_store  # noqa: E402

PGBIN = Path(os.environ.get("PGBIN", "/usr/lib/postgresql/15/bin"))


def pg_ctl(pgdata: str, *args: str) -> None:
    argv = [str(PGBIN / "pg_ctl"), "-D", pgdata, *args]
    if os.geteuid() == 0:
        argv = ["runuser", "-u", "postgres", "--", *argv]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)


def start_service(db_url: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "REGRESS_DATABASE_URL": db_url, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "regress", "serve", "--host", "127.0.0.1", "--port", str(port)]
    out = open(log, "ab")  # noqa: SIM115 - the child owns it
    proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    import requests

    for _ in range(300):  # bounded: 60 s
        try:
            if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code in (200, 503):
                return proc
        except requests.ConnectionError:
            time.sleep(0.2)
    raise SystemExit("service did not come up")


def run(args: argparse.Namespace) -> dict[str, Any]:
    admin = f"postgresql://postgres@127.0.0.1:{args.port}/postgres"
    name = f"regress_drill_{secrets.token_hex(4)}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    db_url = f"postgresql://postgres@127.0.0.1:{args.port}/{name}"
    store = open_store(db_url)
    tokens = [create_token(store, f"drill-{i:02d}")[1] for i in range(args.uploaders)]
    store.engine.dispose()
    work = Path(tempfile.mkdtemp(prefix="regress-drill-"))
    log = work / "serve.log"
    sport = args.service_port
    url = f"http://127.0.0.1:{sport}"
    proc = start_service(db_url, sport, log)
    policy = RetryPolicy(attempts=6, base_s=0.5, cap_s=5.0, timeout_s=60)
    sent: list[str] = []
    lock = threading.Lock()

    def uploader(i: int) -> None:
        spool = work / f"spool-{i}"
        for _ in range(args.bundles):
            bundle = make_bundle()
            path = write_bundle(bundle, work / f"out-{i}")
            with lock:
                sent.append(bundle["run"]["id"])
            upload_bundles([path], url, tokens[i], spool, policy=policy)
            time.sleep(args.pause)

    make_bundle()  # builds the template once: its migration must not run in six threads at once
    threads = [threading.Thread(target=uploader, args=(i,)) for i in range(args.uploaders)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    faults = []
    time.sleep(args.warmup)
    pg_ctl(args.pgdata, "stop", "-m", "fast", "-w")
    faults.append(f"PostgreSQL stopped at {time.monotonic() - t0:.1f} s for {args.outage} s")
    time.sleep(args.outage)
    pg_ctl(
        args.pgdata,
        "start",
        "-w",
        "-l",
        f"{args.pgdata}/server.log",
        "-o",
        f"-h 127.0.0.1 -p {args.port} -k {args.pgdata} -c max_connections=200 -c fsync=on",
    )
    time.sleep(args.warmup)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    faults.append(f"service SIGKILLed at {time.monotonic() - t0:.1f} s, restarted at once")
    proc = start_service(db_url, sport, log)
    for t in threads:
        t.join()
    rounds = 0
    while rounds < 5:  # bounded
        rounds += 1
        left = 0
        for i in range(args.uploaders):
            spool = work / f"spool-{i}"
            flush_spool(url, tokens[i], spool, policy=policy, force=True)
            left += len(spooled_files(spool))
        if not left:
            break
    wall = time.monotonic() - t0
    proc.terminate()
    proc.wait(timeout=30)
    store = open_store(db_url)
    with store.reader() as session:
        ids = run_ids(session)
        stored, count = set(ids), len(ids)
    store.engine.dispose()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    answers: dict[str, int] = {}
    for match in re.finditer(r'"POST /api/v1/runs HTTP/1\.1" (\d{3})', log.read_text(errors="replace")):
        answers[match.group(1)] = answers.get(match.group(1), 0) + 1
    rejected = sum(len(list(work.glob(f"spool-{i}/rejected/*.json"))) for i in range(args.uploaders))
    lost = sorted(set(sent) - stored)
    ok = not lost and count == len(sent) and "500" not in answers and not rejected
    if ok:
        shutil.rmtree(work)  # kept for a post-mortem only when the drill fails
    return {
        "uploaders": args.uploaders,
        "bundles_each": args.bundles,
        "faults": faults,
        "wall_s": round(wall, 1),
        "flush_rounds": rounds,
        "sent": len(sent),
        "stored": len(stored & set(sent)),
        "stored_rows": count,
        "lost": len(lost),
        "rejected": rejected,
        "post_answers": dict(sorted(answers.items())),
        "ok": ok,
        "work_dir": None if ok else str(work),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pgdata", required=True, help="data directory of a cluster this drill may restart")
    ap.add_argument("--port", type=int, default=5447, help="its port")
    ap.add_argument("--service-port", type=int, default=18447)
    ap.add_argument("--uploaders", type=int, default=6)
    ap.add_argument("--bundles", type=int, default=40, help="bundles per uploader")
    ap.add_argument("--pause", type=float, default=0.2, help="seconds between one uploader's bundles")
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds of normal load before each fault")
    ap.add_argument("--outage", type=float, default=20.0, help="seconds PostgreSQL stays down")
    report = run(ap.parse_args())
    print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
