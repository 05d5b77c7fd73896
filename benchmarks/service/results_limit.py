"""What the results-per-run limit costs, and what a bundle past it costs to refuse (issue #24 item 14).

    python benchmarks/service/results_limit.py --work /tmp/limit [--pg postgresql://postgres@127.0.0.1:5477/postgres]

For each database (a fresh SQLite file; a fresh database on --pg when given), in subprocesses whose
peak RSS comes from os.wait4 (the kernel's ru_maxrss, children included):

1. `regress import` of one bundle holding exactly `max_results()` results, every one of one shape
   (the worst case for the site's related cases), half perf with 100 kernel and 100 baseline
   timings, half ULP: the heaviest run the limit lets in;
2. `regress site --out` over that database (a cold render: every page written);
3. `regress serve` on a second fresh database: POST of the same bundle (201), then of a bundle of
   100,000 small results (the issue's 201 → OOM case), which must be 400 naming the limit;
4. `regress import` of the 100,000-result file: exit 2 with one line, nothing stored.

Prints one JSON object and writes it to --json when given. Loopback only; every wait is bounded.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "kit"))

from drillkit import emit, free_port, fresh_db, post_bundle, runner_token, stored_counts, wait_up  # noqa: E402
from ingest_bundles import make_bundle  # noqa: E402

from regress.facts.bundle import max_results  # noqa: E402

SHAPE = {"b": 2, "h": 16, "sq": 512, "sk": 512, "d": 128, "layout": "bshd", "mode": "rtne"}
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def heavy_bundle(n: int) -> dict[str, Any]:
    bundle = make_bundle()
    perf, ulp = bundle["results"][0], bundle["results"][1]
    assert perf["suite"] == "perf" and ulp["suite"] == "ulp"
    results = []
    for i in range(n):
        res = copy.deepcopy(ulp if i % 2 else perf)
        res.pop("case_key", None)
        res["name"] = f"c{i:06d}"
        res["params"] = dict(SHAPE)
        results.append(res)
    bundle["results"] = results
    return bundle


def small_bundle(n: int) -> dict[str, Any]:
    bundle = make_bundle()
    ulp = bundle["results"][1]
    results = []
    for i in range(n):
        res = copy.deepcopy(ulp)
        res.pop("case_key", None)
        res["name"] = f"s{i:06d}"
        res["params"] = dict(SHAPE)
        res["samples"] = {}
        results.append(res)
    bundle["results"] = results
    return bundle


def measured(argv: list[str], timeout: float = 1800) -> dict[str, Any]:
    """Runs argv (a WRAP command, which prints its child's exit status, peak RSS and CPU time as JSON);
    adds the wall time and the stderr tail."""
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    wall = time.monotonic() - t0
    report = json.loads(out.decode().strip().splitlines()[-1])
    report["wall_s"] = round(wall, 2)
    report["stderr_tail"] = err.decode(errors="replace").strip().splitlines()[-3:]
    return report


WRAP = """
import json, os, subprocess, sys
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=sys.stderr)
_, status, ru = os.wait4(p.pid, 0)
print(json.dumps({"rc": os.waitstatus_to_exitcode(status), "max_rss_mib": round(ru.ru_maxrss / 1024, 1),
                  "cpu_s": round(ru.ru_utime + ru.ru_stime, 2)}))
"""


def regress(*args: str) -> dict[str, Any]:
    return measured([sys.executable, "-c", WRAP, sys.executable, "-m", "regress", *args])


def site_size(out: Path) -> tuple[int, float]:
    files = [p for p in out.rglob("*") if p.is_file() and ".regress-site" not in p.parts]
    return len(files), round(sum(p.stat().st_size for p in files) / 2**20, 1)


def serve_and_post(db_url: str, bodies: dict[str, bytes]) -> dict[str, Any]:
    """`regress serve` under the wait4 wrapper; POSTs each body in turn; then stops the service."""
    token = runner_token(db_url, "limit-bench")
    port = free_port()
    argv = [sys.executable, "-c", WRAP, sys.executable, "-m", "regress", "serve", "--db", db_url]
    proc = subprocess.Popen(
        [*argv, "--port", str(port)], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    url = f"http://127.0.0.1:{port}"
    report: dict[str, Any] = {}
    try:
        wait_up(url, 60)  # a service that never came up fails the first POST, which the report shows
        for name, body in bodies.items():
            t0 = time.monotonic()
            resp = post_bundle(url, token, body, timeout=1800)
            report[name] = {
                "status": resp.status_code,
                "wall_s": round(time.monotonic() - t0, 2),
                "answer": resp.text[:200],
            }
    finally:
        # SIGINT to the service itself (the wrapper's child); its rusage comes back through the
        # wrapper's wait4.
        child = _child_of(proc.pid)
        if child:
            os.kill(child, signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    report["serve"] = json.loads(out.decode().strip().splitlines()[-1])
    return report


def _child_of(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    return int(text[0]) if text else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--pg", help="an admin URL of a PostgreSQL server to create databases on")
    ap.add_argument("--over", type=int, default=100_000, help="results in the refused bundle")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    limit = max_results()
    heavy = args.work / "at-limit.json"
    heavy.write_text(json.dumps(heavy_bundle(limit)))
    over = args.work / "over-limit.json"
    over.write_text(json.dumps(small_bundle(args.over)))
    report: dict[str, Any] = {
        "limit": limit,
        "at_limit_bundle_mib": round(heavy.stat().st_size / 2**20, 1),
        "over_bundle": {"results": args.over, "mib": round(over.stat().st_size / 2**20, 1)},
        "load_average": os.getloadavg(),
    }
    for kind in ["sqlite"] + (["postgresql"] if args.pg else []):
        db = fresh_db(kind, args.work, args.pg, "import")
        entry: dict[str, Any] = {"import_at_limit": regress("import", "--db", db, str(heavy))}
        entry["stored_after_import"] = stored_counts(db)
        out = args.work / f"site-{kind}"
        entry["site"] = regress("site", "--out", str(out), "--db", db)
        entry["site"]["files"], entry["site"]["mib"] = site_size(out)
        entry["import_over"] = regress(
            "import", "--db", (db2 := fresh_db(kind, args.work, args.pg, "over")), str(over)
        )
        entry["stored_after_refused_import"] = stored_counts(db2)
        served = fresh_db(kind, args.work, args.pg, "serve")
        entry["api"] = serve_and_post(served, {"at_limit": heavy.read_bytes(), "over": over.read_bytes()})
        entry["stored_after_api"] = stored_counts(served)
        report[kind] = entry
        print(json.dumps({kind: entry}), file=sys.stderr)
    emit(report, args.json)


if __name__ == "__main__":
    main()
