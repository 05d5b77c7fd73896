"""Attack families of issue #24, re-run with counts: the same-bundle race, SIGKILLs of `regress
import` and `regress site`, a full disk under the service, then every reader over what was accepted.

    python benchmarks/service/hostile_drills.py --work /tmp/drills [--pg postgresql://postgres@127.0.0.1:5477/postgres]

Per database (a fresh SQLite file; a fresh database on --pg when given):

* **race**: each committed real bundle (benchmarks/headline/*.json, trimmed) sent by 20 threads at
  once (a barrier) to `regress serve` in a subprocess: one 201, nineteen 200, one run stored;
* **import kills**: `regress import` of a 3,000-result bundle (a fresh run id each time) killed
  with SIGKILL at a random point of its measured duration; afterwards that run is absent or whole
  (every result), never half; then every killed bundle is imported again and stored once;
* **readers**: every run in the database through `GET /api/v1/runs/<id>` (every page, each a
  valid bundle), `regress runs show`, `regress runs list`, `regress export`, `regress site`, and
  the gate's reports (each run against the one before it: exit 0/1/2, the JUnit XML and JSON parse).

Once (SQLite): **site kills**, `regress site --full` over a `demo-history` database killed (its
process group) at random points, then one render that must succeed and leave no temporary file in
the published tree; **full disk**, the service's SQLite file on a small tmpfs filled to the last
byte while 10 bundles are uploaded through the real client (spool, retries): answers 503, never
500; after space is freed, `upload --flush` stores all 10 once. Needs root for the tmpfs mount;
without it the family is reported as not run.

**attacks** (issue 41), against `regress serve` as deployed by default (waitress with read
deadlines; `--server werkzeug` runs it with `--dev-server`): 6 chunked POSTs that declare a chunk of
2, 1 and 64 MiB, send 4 KiB of it and drop the connection or half-close it (a 2 MiB chunk killed
werkzeug with SIGSEGV); 4 malformed chunk sizes; 100 slowloris connections and 30 clients
trickling a body for 6 s while /healthz is asked every 0.5 s (each wait recorded), then whether the
server closed every attacker at its deadline; bodies of 1, 4 and 16 MiB of empty gzip members (the
seconds each took to be refused); a bundle over the samples-per-result limit. Answers are counted
client-side; the server must still be up at the end.

**owners** (issue 41 items 13, 14): per committed bundle, a squatter stores other content under its
run id first and a mutant of its build record (one `build.stats` key dropped) is stored first; then
the genuine runner's bundle goes through the real upload client. Each genuine run must be stored,
its re-send a duplicate, and read back (`?runner=`) as sent.

The 20 s PostgreSQL stop and the service SIGKILL are benchmarks/service/ingest_faults.py; the mutations are
tests/ingest/test_bundle_fuzz.py. Prints one JSON object (and writes it to --json). Every wait is
bounded; run it `nice`d.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gzip
import io
import itertools
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import requests

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "kit"))

from drillkit import (  # noqa: E402
    emit,
    free_port,
    fresh_db,
    post_bundle,
    runner_token,
    stored_counts,
    stored_run_ids,
    wait_up,
)
from ingest_bundles import make_bundle  # noqa: E402
from real_bundles import real_bundles  # noqa: E402

from regress.cli import main as regress_main  # noqa: E402
from regress.facts.bundle import MAX_SAMPLES_PER_RESULT, validate_bundle, write_bundle  # noqa: E402
from regress.facts.stats import upper_median  # noqa: E402
from regress.run.upload import RetryPolicy, flush_spool, spooled_files, upload_bundles  # noqa: E402
from regress.store.base import new_run_id  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
RACERS = 20
# --server: `regress serve` as deployed (waitress), its --dev-server (werkzeug), or gunicorn gthread
SERVER = "waitress"
ATTACK_HEADER_TIMEOUT_S, ATTACK_REQUEST_TIMEOUT_S = 8.0, 12.0


class Service:
    """`regress serve` in a subprocess, its access log kept for counting answers."""

    def __init__(self, db_url: str, log: Path, extra: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        argv = [sys.executable, "-m", "regress", "serve", "--db", db_url, "--port", str(self.port), *extra]
        if SERVER == "werkzeug":
            argv.append("--dev-server")
        if SERVER == "gunicorn":
            argv = [
                "gunicorn", "--preload", "-k", "gthread", "-w", "2", "--threads", "8",
                "-b", f"127.0.0.1:{self.port}", "--access-logfile", "-", "regress.server:create_app()",
            ]  # fmt: skip
        env = {**ENV, "REGRESS_DATABASE_URL": db_url}
        self.proc = subprocess.Popen(
            argv, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True
        )
        if not wait_up(self.url, 60):
            raise SystemExit(f"service on {db_url} did not come up; see {log}")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def answers(self) -> Counter[str]:
        text = self.log.read_text(errors="replace")
        return Counter(m.group(1) for m in re.finditer(r'"(?:POST|GET) /api/v1/[^"]*" (\d{3})', text))


# ---- race -------------------------------------------------------------------------------------


def race(db_url: str, work: Path) -> dict[str, Any]:
    token = runner_token(db_url, "race-runner")
    svc = Service(db_url, work / "race-serve.log")
    statuses: Counter[int] = Counter()
    per_bundle_ok = 0
    bundles = real_bundles(results=40, samples=20)
    try:
        for bundle in bundles:
            body = json.dumps(bundle).encode()
            barrier = threading.Barrier(RACERS)
            got: list[int] = []
            lock = threading.Lock()

            def send(
                body: bytes = body, barrier: Any = barrier, got: list[int] = got, lock: Any = lock
            ) -> None:
                barrier.wait(timeout=60)
                resp = post_bundle(svc.url, token, body, timeout=120)
                with lock:
                    got.append(resp.status_code)

            threads = [threading.Thread(target=send) for _ in range(RACERS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=180)
            statuses.update(got)
            stored = stored_counts(db_url, bundle["run"]["id"])
            if sorted(got) == [200] * (RACERS - 1) + [201] and stored == (1, len(bundle["results"])):
                per_bundle_ok += 1
    finally:
        svc.stop()
    return {
        "bundles": len(bundles),
        "posts": sum(statuses.values()),
        "answers": dict(sorted((str(k), v) for k, v in statuses.items())),
        "bundles_with_one_201_and_19_200_and_one_run": per_bundle_ok,
        "server_5xx": sum(v for k, v in statuses.items() if k >= 500),  # as the clients saw them
    }


# ---- attacks on the server (issue 41) -----------------------------------------------------------


def _raw(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def _status_line(sock: socket.socket) -> int:
    answer = b""
    with contextlib.suppress(OSError):
        while b"\r\n" not in answer and (piece := sock.recv(4096)):
            answer += piece
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else 0


def attacks(db_url: str, work: Path) -> dict[str, Any]:
    token = runner_token(db_url, "attack-runner")
    extra = (
        "--header-timeout",
        str(ATTACK_HEADER_TIMEOUT_S),
        "--request-timeout",
        str(ATTACK_REQUEST_TIMEOUT_S),
    )
    svc = Service(db_url, work / "attacks-serve.log", extra)
    head = f"POST /api/v1/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
    statuses: Counter[int] = Counter()
    out: dict[str, Any] = {}
    try:
        # item 1: a chunk larger than the server's 1 MiB read (werkzeug's de-chunking then read
        # past its buffer: SIGSEGV), no larger, and the body limit; dropped or half-closed
        for size, half_close in itertools.product((0x200000, 0x100000, 0x4000000), (False, True)):
            with _raw(svc.port) as sock:
                sock.sendall(f"{head}Transfer-Encoding: chunked\r\n\r\n{size:x}\r\n".encode() + b"{" * 4096)
                if half_close:
                    sock.shutdown(socket.SHUT_WR)
                    statuses[_status_line(sock)] += 1
            time.sleep(0.1)
        out["alive_after_chunk_drops"] = svc.proc.poll() is None
        out["chunk_drop_answers"] = dict(sorted((str(k), v) for k, v in statuses.items()))
        statuses.clear()
        for size in (b"ZZ", b"-5", b"1x", b""):  # item 2
            with _raw(svc.port) as sock:
                sock.sendall(
                    f"{head}Transfer-Encoding: chunked\r\n\r\n".encode() + size + b"\r\n{}\r\n0\r\n\r\n"
                )
                code = _status_line(sock)
                statuses[code] += 1
        out["malformed_chunk_answers"] = dict(statuses)
        # item 3: slowloris and trickle
        loris = [_raw(svc.port) for _ in range(100)]
        for sock in loris:
            sock.sendall(b"POST /api/v1/runs HTTP/1.1\r\nHost: x\r\n")
        tricklers = [_raw(svc.port) for _ in range(30)]
        for i, sock in enumerate(tricklers):
            auth = token if i % 2 else "wrong"
            sock.sendall(
                f"POST /api/v1/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {auth}\r\n"
                "Content-Length: 100000\r\n\r\n".encode()
            )
        waits: list[float] = []
        healthz_failed = 0
        started = time.monotonic()
        for _ in range(12):
            for sock in loris + tricklers:
                with contextlib.suppress(OSError):
                    sock.sendall(b"X")
            t0 = time.monotonic()
            try:
                ok = requests.get(f"{svc.url}/healthz", timeout=5).status_code == 200
            except requests.RequestException:
                ok = False
            waits.append(round(time.monotonic() - t0, 3))
            healthz_failed += not ok
            time.sleep(0.5)
        closed = 0
        deadline = started + ATTACK_REQUEST_TIMEOUT_S + 10
        for sock in loris + tricklers:
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                while True:
                    sock.sendall(b"X")
                    if not sock.recv(65536):
                        closed += 1
                        break
            except (BrokenPipeError, ConnectionResetError):
                closed += 1
            except TimeoutError:
                pass
            finally:
                sock.close()
        out["slow_clients"] = {
            "connections": len(loris) + len(tricklers),
            "healthz_waits_s": {"median": upper_median(waits), "max": max(waits)},
            "healthz_failed": healthz_failed,
            "closed_by_the_server_within_deadline_plus_10_s": closed,
        }
        gz: dict[str, Any] = {}  # item 4
        for mib in (1, 4, 16):
            body = gzip.compress(b"", mtime=0) * (mib * 1024 * 1024 // 20)
            t0 = time.monotonic()
            resp = requests.post(
                f"{svc.url}/api/v1/runs", data=body, timeout=300,
                headers={"Authorization": f"Bearer {token}", "Content-Encoding": "gzip"},
            )  # fmt: skip
            statuses[resp.status_code] += 1
            gz[f"{mib}_MiB"] = {"status": resp.status_code, "seconds": round(time.monotonic() - t0, 2)}
        out["gzip_empty_members"] = gz
        bundle = make_bundle()  # item 5
        bundle["results"][0]["samples"]["time_ms"] = [1.0] * (MAX_SAMPLES_PER_RESULT + 1)
        resp = post_bundle(svc.url, token, json.dumps(bundle).encode(), timeout=120)
        statuses[resp.status_code] += 1
        out["samples_over_limit"] = resp.status_code
        out["alive_at_end"] = svc.proc.poll() is None and requests.get(f"{svc.url}/healthz", timeout=10).ok
    finally:
        svc.stop()
    out["answers"] = dict(sorted((str(k), v) for k, v in statuses.items()))
    out["server_5xx"] = sum(v for k, v in statuses.items() if k >= 500)
    return out


# ---- owners: run ids and build records (issue 41 items 13, 14) ----------------------------------


def owners(db_url: str, work: Path) -> dict[str, Any]:
    """Two passes over the committed real bundles. **Squat** (item 14; the builds left out, so no
    build row is shared with the next pass): a squatter stores other content under a bundle's run
    id, then the genuine runner's spooled bundle goes through the real upload client (before: 403
    for ever, kept in the spool). **Build records** (item 13; fresh run ids): a mutant of the build
    record that dropped one `build.stats` key is stored first, then the genuine bundle (before: 409
    for every later genuine upload of that artifact). Each genuine run must be stored by the client,
    its re-send a duplicate, and read back (`?runner=`) as sent."""
    from regress.facts.bundle import canonical, normalised
    from regress.machine.pins import pin_for_digest
    from regress.store.transfer import stack_facts

    tokens = {name: runner_token(db_url, name) for name in ("squatter", "mutant", "genuine")}
    svc = Service(db_url, work / "owners-serve.log")
    counts: Counter[str] = Counter()

    def send(who: str, bundle: dict[str, Any]) -> int:
        return post_bundle(svc.url, tokens[who], json.dumps(bundle).encode(), timeout=120).status_code

    def genuine(bundle: dict[str, Any], family: str) -> None:
        spool = work / "owners-spool" / bundle["run"]["id"]
        path = write_bundle(bundle, work / "owners-out")
        report = upload_bundles([path], svc.url, tokens["genuine"], spool, policy=POLICY)
        counts[f"{family}_genuine_stored_by_the_client"] += report.stored == [bundle["run"]["id"]]
        counts[f"{family}_genuine_left_in_spool"] += len(spooled_files(spool))
        counts[f"{family}_genuine_resend_duplicate"] += send("genuine", bundle) == 200
        read = requests.get(
            f"{svc.url}/api/v1/runs/{bundle['run']['id']}", params={"runner": "genuine"}, timeout=120
        )
        sent = canonical({**bundle, "run": {**bundle["run"], "runner": "genuine"}})
        # a run that declared drift from its pin is stored under the pin's keys (reliability.md)
        pin = pin_for_digest(bundle["stack"]["digest"])
        sent["stack"]["keys"] = normalised(stack_facts(bundle, pin)[1])
        counts[f"{family}_genuine_read_back_as_sent"] += read.ok and canonical(read.json()) == sent
        counts[f"{family}_bundles"] += 1

    try:
        for bundle in real_bundles(results=20, samples=20):
            bundle["build"] = None
            squat = copy.deepcopy(bundle)
            squat["run"]["message"] = "squatted"
            counts["squat_stored_first"] += send("squatter", squat) == 201
            genuine(bundle, "squat")
        for bundle in real_bundles(results=20, samples=20):
            if not (bundle.get("build") or {}).get("stats"):
                continue
            evil = copy.deepcopy(bundle)
            evil["run"]["id"] = new_run_id()
            evil["build"]["stats"].pop(sorted(evil["build"]["stats"])[0])
            counts["build_mutant_stored_first"] += send("mutant", evil) == 201
            genuine(bundle, "build")
    finally:
        svc.stop()
    answers = svc.answers()
    return {
        **dict(sorted(counts.items())),
        "answers": dict(sorted(answers.items())),
        "server_5xx": sum(v for k, v in answers.items() if k.startswith("5")),
    }


# ---- import kills -----------------------------------------------------------------------------


def _big_bundle(n: int) -> dict[str, Any]:
    bundle = make_bundle()
    results = []
    for i in range(n):
        res = copy.deepcopy(bundle["results"][i % 12])
        res.pop("case_key", None)
        res["name"] = f"k{i:05d}"
        results.append(res)
    bundle["results"] = results
    return bundle


def import_kills(db_url: str, work: Path, kills: int, rng: random.Random) -> dict[str, Any]:
    template = _big_bundle(3000)
    write_bundle({**template, "run": {**template["run"], "id": new_run_id()}}, work / "import-timing")
    path = next((work / "import-timing").glob("*.json"))
    t0 = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "regress", "import", "--db", db_url, str(path)],
        env=ENV,
        check=True,
        capture_output=True,
        timeout=600,
    )
    duration = time.monotonic() - t0
    outcomes: Counter[str] = Counter()
    files = []
    for _ in range(kills):
        bundle = {**template, "run": {**template["run"], "id": new_run_id()}}
        file = write_bundle(bundle, work / "import-kill")
        files.append((file, bundle["run"]["id"]))
        proc = subprocess.Popen(
            [sys.executable, "-m", "regress", "import", "--db", db_url, str(file)],
            env=ENV,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(rng.uniform(0.2, 1.0) * duration)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        runs, results = stored_counts(db_url, bundle["run"]["id"])
        outcomes["absent" if runs == 0 else "whole" if results == len(template["results"]) else "half"] += 1
    again: Counter[str] = Counter()
    for file, run_id in files:
        proc = subprocess.run(
            [sys.executable, "-m", "regress", "import", "--db", db_url, str(file)],
            env=ENV,
            capture_output=True,
            text=True,
            timeout=600,
        )
        stored = stored_counts(db_url, run_id)
        again["stored once" if proc.returncode == 0 and stored == (1, 3000) else f"rc {proc.returncode}"] += 1
    return {
        "import_s": round(duration, 1),
        "kills": kills,
        "after_kill": dict(outcomes),
        "reimported": dict(again),
    }


# ---- readers ----------------------------------------------------------------------------------


def _cli(*argv: str) -> int:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return regress_main(list(argv))


def readers(db_url: str, work: Path) -> dict[str, Any]:
    ids = stored_run_ids(db_url)
    svc = Service(db_url, work / "readers-serve.log")
    api_ok = 0
    api_statuses: Counter[int] = Counter()
    try:
        for run_id in ids:
            url: str | None = f"{svc.url}/api/v1/runs/{run_id}"
            good = True
            while url:
                resp = requests.get(url, timeout=120)
                api_statuses[resp.status_code] += 1
                if resp.status_code != 200:
                    good = False
                    break
                validate_bundle(resp.json())
                link = resp.headers.get("Link")
                url = svc.url + link.split(">")[0].lstrip("<") if link else None
            api_ok += good
    finally:
        svc.stop()
    show_ok = sum(_cli("runs", "show", run_id, "--db", db_url) == 0 for run_id in ids)
    gate: Counter[str] = Counter()
    for base, cand in itertools.pairwise(ids):
        out = work / "gate" / cand
        rc = _cli("gate", "--db", db_url, "--baseline", base, "--candidate", cand, "--report-dir", str(out))
        for junit in out.glob("*.junit.xml"):
            ElementTree.parse(junit)  # raises on ill-formed XML
        for report in out.glob("*.json"):
            json.loads(report.read_text())
        gate[f"exit {rc}" + (" with reports" if any(out.glob("*.md")) else "")] += 1
    site = _cli("site", "--out", str(work / "site"), "--db", db_url)
    return {
        "runs": len(ids),
        "api_readable": api_ok,
        "runs_show_ok": show_ok,
        "gate_pairs": max(0, len(ids) - 1),
        "gate": dict(sorted(gate.items())),
        "runs_list_rc": _cli("runs", "list", "--db", db_url, "--limit", "1000"),
        "export_rc": _cli("export", "--db", db_url, "-o", str(work / "export.jsonl")),
        "site_rc": site,
        "api_5xx": sum(v for k, v in api_statuses.items() if k >= 500),
    }


# ---- site kills -------------------------------------------------------------------------------


def site_kills(work: Path, kills: int, rng: random.Random) -> dict[str, Any]:
    db = f"sqlite:///{work / 'demo.db'}"
    subprocess.run(
        [sys.executable, "-m", "regress", "demo-history", "--nights", "30", "--stacks", "2", "--db", db],
        env=ENV,
        check=True,
        capture_output=True,
        timeout=900,
    )
    out = work / "site-killed"
    argv = [sys.executable, "-m", "regress", "site", "--full", "--out", str(out), "--db", db]
    t0 = time.monotonic()
    subprocess.run(argv, env=ENV, check=True, capture_output=True, timeout=900)
    duration = time.monotonic() - t0
    leftovers = 0
    for _ in range(kills):
        proc = subprocess.Popen(
            argv, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        time.sleep(rng.uniform(0.1, 0.95) * duration)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        leftovers += sum(1 for p in out.rglob("*.tmp") if ".regress-site" not in p.parts)
    final = subprocess.run(argv, env=ENV, capture_output=True, text=True, timeout=900)
    left = [p for p in out.rglob("*") if p.is_file() and (p.suffix == ".tmp" or p.parent.name == "tmp")]
    return {
        "render_s": round(duration, 1),
        "kills": kills,
        "tmp_files_in_published_tree_after_kills": leftovers,
        "final_render_rc": final.returncode,
        "final_render_tail": final.stdout.strip().splitlines()[-1:],
        "tmp_files_after_final_render": len(left),
    }


def _healthy_within(url: str, limit_s: float) -> float | None:
    """Seconds until /healthz answers 200 eight times in a row (a gunicorn worker keeps its own
    record of a refused write until WRITE_FAULT_TTL_S or its own next commit); None past the limit."""
    t0, healthy_since, in_a_row = time.monotonic(), 0.0, 0
    while time.monotonic() - t0 < limit_s:
        ok = requests.get(f"{url}/healthz", timeout=10).status_code == 200
        healthy_since = healthy_since if ok and in_a_row else time.monotonic() - t0
        in_a_row = in_a_row + 1 if ok else 0
        if in_a_row >= 8:  # new connections each: both workers of gunicorn say so
            return round(healthy_since, 1)
        time.sleep(1)
    return None


# ---- full disk --------------------------------------------------------------------------------

# The upload client's policy in the full-disk drills: two attempts, short backoff, then the spool.
POLICY = RetryPolicy(attempts=2, base_s=0.2, cap_s=0.5, timeout_s=30)


def fill(disk: Path) -> Path:
    """Takes every free byte of `disk` (unbuffered: no late ENOSPC); the filler file, to unlink."""
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as f:
        for size in (65536, 1):
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * size)
    return filler


def upload_ten(url: str, token: str, spool: Path, out: Path) -> list[str]:
    """Ten fresh bundles through the real client (spooled when refused); their run ids."""
    sent = []
    for _ in range(10):
        bundle = make_bundle()
        sent.append(bundle["run"]["id"])
        upload_bundles([write_bundle(bundle, out)], url, token, spool, policy=POLICY)
    return sent


def flush(url: str, token: str, spool: Path) -> None:
    """`upload --flush` until the spool is empty, five times at most."""
    for _ in range(5):
        flush_spool(url, token, spool, policy=POLICY, force=True)
        if not spooled_files(spool):
            break


def after_freeing(
    svc: Service, token: str, spool: Path, db: str, sent: list[str], timeout: float
) -> dict[str, Any]:
    """Once the disk has room again: health, `upload --flush`, health, what was stored of what was
    sent, and every answer the service gave (only 503s may be 5xx)."""
    health_after = requests.get(f"{svc.url}/healthz", timeout=timeout).status_code
    flush(svc.url, token, spool)
    health_flushed = requests.get(f"{svc.url}/healthz", timeout=timeout).status_code
    healthy_after = _healthy_within(svc.url, 120)
    stored = set(stored_run_ids(db))
    answers = svc.answers()
    return {
        "healthz_after_freeing": health_after,  # 503 until a real write succeeds (store/db.py)
        "healthz_after_flush": health_flushed,
        "healthz_200_after_flush_s": healthy_after,
        "sent": len(sent),
        "stored_after_flush": len(stored & set(sent)),
        "answers": dict(sorted(answers.items())),
        "server_5xx_not_503": sum(v for k, v in answers.items() if k.startswith("5") and k != "503"),
    }


def full_disk(work: Path) -> dict[str, Any]:
    if os.geteuid() != 0:
        return {"run": False, "why": "mounting a tmpfs needs root"}
    disk = work / "disk"
    disk.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], check=True, timeout=30)
    try:
        db = f"sqlite:///{disk / 'regress.db'}"
        token = runner_token(db, "disk-runner")
        svc = Service(db, work / "disk-serve.log")
        try:
            return _full_disk(work, disk, db, token, svc)
        finally:
            svc.stop()
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False, timeout=30)


def _full_disk(work: Path, disk: Path, db: str, token: str, svc: Service) -> dict[str, Any]:
    filler = fill(disk)
    health = requests.get(f"{svc.url}/healthz", timeout=10).status_code
    spool = work / "disk-spool"
    sent = upload_ten(svc.url, token, spool, work / "disk-out")
    probe = post_bundle(svc.url, token, json.dumps(make_bundle()).encode(), timeout=30)
    retry_after = int(probe.status_code == 503 and "Retry-After" in probe.headers)
    spooled_while_full = len(spooled_files(spool))
    full_answers = svc.answers()
    filler.unlink()
    verdict = after_freeing(svc, token, spool, db, sent, timeout=10)
    return {
        "run": True,
        "healthz_full": health,
        "answers_while_full": dict(sorted(full_answers.items())),
        "probe_503_with_retry_after": retry_after,
        "spooled_while_full": spooled_while_full,
        **verdict,
    }


PGBIN = Path(os.environ.get("PGBIN", "/usr/lib/postgresql/15/bin"))


def _as_postgres(*argv: str) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else list(argv)


def pg_full_disk(work: Path) -> dict[str, Any]:
    """The same drill with a PostgreSQL 15 cluster of its own on a 96 MiB tmpfs (data and WAL)."""
    if os.geteuid() != 0 or not (PGBIN / "pg_ctl").exists():
        return {"run": False, "why": "needs root (tmpfs mount) and PostgreSQL 15 binaries"}
    disk = work / "pgdisk"
    disk.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96m", "tmpfs", str(disk)], check=True, timeout=30)
    data = disk / "data"
    port = free_port()
    opts = f"-h 127.0.0.1 -p {port} -k {data} -c fsync=off -c max_wal_size=32MB -c min_wal_size=32MB"

    def pg_ctl(*args: str) -> int:
        argv = _as_postgres(str(PGBIN / "pg_ctl"), "-D", str(data), *args)
        return subprocess.run(argv, capture_output=True, timeout=120, check=False).returncode

    try:
        data.mkdir()
        shutil.chown(data, "postgres")
        initdb = _as_postgres(str(PGBIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust")
        subprocess.run(initdb, check=True, capture_output=True, timeout=300)
        pg_ctl("-l", str(data / "server.log"), "-w", "-t", "60", "-o", opts, "start")
        db = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        token = runner_token(db, "disk-runner")
        svc = Service(db, work / "pgdisk-serve.log")
        try:
            filler = fill(disk)
            spool = work / "pgdisk-spool"
            sent = upload_ten(svc.url, token, spool, work / "pgdisk-out")
            health = requests.get(f"{svc.url}/healthz", timeout=30).status_code
            spooled_while_full = len(spooled_files(spool))
            full_answers = svc.answers()
            filler.unlink()
            alive = pg_ctl("status") == 0
            if not alive:  # PostgreSQL shuts down when it cannot write WAL; an operator restarts it
                pg_ctl("-l", str(data / "server.log"), "-w", "-t", "60", "-o", opts, "start")
            time.sleep(6)  # the service's Retry-After: its pool reconnects
            verdict = after_freeing(svc, token, spool, db, sent, timeout=30)
        finally:
            svc.stop()
    finally:
        pg_ctl("-m", "immediate", "stop")
        subprocess.run(["umount", "-l", str(disk)], check=False, timeout=30)
    return {
        "run": True,
        "answers_while_full": dict(sorted(full_answers.items())),
        "healthz_full": health,
        "spooled_while_full": spooled_while_full,
        "postgres_survived_the_full_disk": alive,
        **verdict,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--pg", help="an admin URL of a PostgreSQL server to create databases on")
    ap.add_argument("--import-kills", type=int, default=10)
    ap.add_argument("--site-kills", type=int, default=8)
    ap.add_argument("--families", default="race,attacks,owners,import,readers,site,disk,pgdisk")
    ap.add_argument("--seed", type=int, default=24)
    ap.add_argument("--server", choices=["waitress", "werkzeug", "gunicorn"], default="waitress")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    families = set(args.families.split(","))
    global SERVER
    SERVER = args.server
    rng = random.Random(args.seed)
    if args.work.exists():
        shutil.rmtree(args.work)
    args.work.mkdir(parents=True)
    report: dict[str, Any] = {"server": SERVER, "load_average_at_start": os.getloadavg()}
    for kind in ["sqlite"] + (["postgresql"] if args.pg else []):
        work = args.work / kind
        work.mkdir()
        db = fresh_db(kind, args.work, args.pg, f"{kind}-drills")
        entry: dict[str, Any] = {}
        if "race" in families:
            entry["race"] = race(db, work)
        if "attacks" in families:
            entry["attacks"] = attacks(db, work)
        if "owners" in families:
            entry["owners"] = owners(db, work)
        if "import" in families:
            entry["import_kills"] = import_kills(db, work, args.import_kills, rng)
        if "readers" in families:
            entry["readers"] = readers(db, work)
        report[kind] = entry
        print(json.dumps({kind: entry}), file=sys.stderr, flush=True)
    if "site" in families:
        report["site_kills"] = site_kills(args.work, args.site_kills, rng)
        print(json.dumps({"site_kills": report["site_kills"]}), file=sys.stderr, flush=True)
    if "disk" in families:
        report["full_disk"] = full_disk(args.work)
    if "pgdisk" in families:
        report["postgresql_full_disk"] = pg_full_disk(args.work)
    emit(report, args.json)


if __name__ == "__main__":
    main()
